"""Real-browser checks: every lecture deck at 1280 x 720, and JupyterLab rendering a lesson.

One headless Chromium (tests/chromium.py, the DevTools protocol over a pipe) serves the
whole module. The decks and handouts of every lesson are built once into a temporary
folder (`python -m kvstaff.lecture slides|html` does the same into build/). Then,
for every lesson's default deck — the lecture deck the lesson chose (metadata["lecture"]) —
`window.kvSlideFit()` measures every slide as Chromium shows it, after MathJax has typeset
it, once, and:

* every slide fits 1280 x 720: no slide taller or wider than the deck, no code or output
  cut off at the right;
* every deck keeps the lecture rules: 12-18 slides, speaker notes on every slide, no
  `assert` line, at most 12 lines of code and 120 words, no TeX inside a code span, and no
  figure shown so small that its smallest text (attnlib.plot's MIN_FONT at its DPI) falls
  under 14 px. tests/test_lecture_decks.py checks the same rules from the notebooks'
  metadata without a browser; this is what a class sees.

The whole notebook as slides (`NN_*.full.slides.html`, the second build) is parsed for
alt text but not measured in the browser: the lecture decks are what is projected, and
measuring ~400 more slides would double the module's time.

Also:

* every <img> in the decks (both builds) and handouts has alt text, and not nbconvert's default;
* every deck has speaker notes; no explorer is shown as a widget's text repr;
* JupyterLab, started from the project's venv with the learners' settings, renders a
  lesson with all its cells and figures, its speaker notes collapsed to their "For
  lecturers" line, without nbgrader's menu or the news prompt.

Each test lists every offending lesson and slide in one message, so that a lesson editor
sees the whole list at once. Without Chromium (a learner's laptop) the browser tests are
skipped with the reason; CI installs it with tools/ensure_chromium.sh. Without
node_modules/ (`npm ci`) the deck tests are skipped.
"""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import nbformat
import pytest
from chromium import Chromium, find_chromium
from conftest import NOTEBOOKS, ROOT
from labserver import running_lab
from pieces import need

from attnlib.plot import DPI, MIN_FONT
from kvstaff.lecture import (
    FULL_SUFFIX,
    LECTURE_SLIDES,
    MAX_CODE_LINES,
    MAX_WORDS,
    SLIDE_SIZE,
    alt_text_problems,
    build_handouts,
    build_slides,
    discover_lessons,
)

# CI's second stage (`make test-course`): what a class sees, in a real browser.
pytestmark = [pytest.mark.slow, pytest.mark.second_stage]

NODE_MODULES = ROOT / "node_modules"
START_TIMEOUT = 120.0  # JupyterLab start; 30 s seen with 8 engineers sharing 2 cores
DEFAULT_ALT = "No description has been provided for this image"
MIN_LABEL_PX = 14.0  # the smallest figure text, as shown on a 1280 x 720 slide
SMALLEST_TEXT_PX = MIN_FONT * DPI / 72  # in a stored figure, at its natural size
WIDGET_REPR = re.compile(r"\b[HV]Box\(children=\(")
# The deck's measuring function, once its scripts (loaded by require.js after the page's
# load event) have defined it.
FIT_JS = """new Promise((resolve, reject) => {
  const start = Date.now();
  (function poll() {
    if (window.kvSlideFit) { resolve(window.kvSlideFit()); }
    else if (Date.now() - start > 60000) { reject(new Error("the deck never defined kvSlideFit")); }
    else { setTimeout(poll, 50); }
  })();
})"""


@pytest.fixture(scope="module")
def browser():
    need("chromium")
    binary = find_chromium()
    with Chromium(binary) as b:
        yield b


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Decks and handouts of every lesson, without solutions (what a class sees)."""
    need("npm assets")
    out = tmp_path_factory.mktemp("lecture")
    decks = build_slides(NOTEBOOKS, out / "slides", NODE_MODULES)  # the lecture decks
    full = [d.with_name(d.name.replace(".slides.html", FULL_SUFFIX)) for d in decks]
    handouts = build_handouts(NOTEBOOKS, out / "html", NODE_MODULES)
    return {"decks": decks, "full": full, "handouts": handouts}


def lesson_of(path) -> str:
    return path.name.split(".")[0]


class Images(HTMLParser):
    """The alt attribute of every <img>, the speaker notes, and the page's text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.alts: list[str | None] = []
        self.notes = 0
        self.text: list[str] = []
        self._skip = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.alts.append(a.get("alt"))
        if tag == "aside" and "notes" in (a.get("class") or "").split():
            self.notes += 1
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


# ------------------------------------------------------------------ decks at 1280 x 720


@pytest.fixture(scope="module")
def measured(built, browser):
    """``{deck: kvSlideFit() report}`` for every lecture deck, measured once at 1280 x 720."""
    page = browser.new_page(*SLIDE_SIZE)
    reports = {}
    for deck in built["decks"]:
        page.goto(deck.as_uri(), timeout=120)
        reports[deck] = page.evaluate(FIT_JS, timeout=180)
    return reports


def _where(deck, s) -> str:
    title = f" {s['title'][:48]!r}" if s["title"] else ""
    return f"{lesson_of(deck)} slide {s['h'] + 1} (#/{s['h']}/{s['v']}, cell {s['cell']}){title}"


def test_every_slide_fits_1280x720(measured):
    width, height = SLIDE_SIZE
    problems, n_slides = [], 0
    for deck, report in measured.items():
        assert (report["width"], report["height"]) == SLIDE_SIZE, deck.name
        for s in report["slides"]:
            n_slides += 1
            where = _where(deck, s)
            if s["height"] > height:
                problems.append(f"{where}: {s['height']} px tall (> {height})")
            if s["width"] > width:
                problems.append(f"{where}: {s['width']} px wide (> {width})")
            if s["wide"]:
                problems.append(f"{where}: cut off at the right: {', '.join(s['wide'])}")
    assert n_slides >= len(measured)
    assert not problems, (
        f"{len(problems)} of {n_slides} slides do not fit {width} x {height} "
        "(open build/slides/<lesson>.slides.html#/h/v; cell = the notebook cell the slide "
        "starts at):\n" + "\n".join(problems)
    )


def test_every_lecture_deck_keeps_the_rules(measured):
    """12-18 slides, notes on each, no asserts, short code and prose, typeset maths, and
    figures whose smallest text is still 14 px — as Chromium shows them."""
    lo, hi = LECTURE_SLIDES
    problems, n_slides = [], 0
    for deck, report in measured.items():
        slides = report["slides"]
        n_slides += len(slides)
        if not lo <= len(slides) <= hi:
            problems.append(f"{lesson_of(deck)}: {len(slides)} slides (want {lo}-{hi})")
        for s in slides:
            where = _where(deck, s)
            if s["notes"] < 1:
                problems.append(f"{where}: no speaker notes")
            if s["asserts"]:
                problems.append(f"{where}: {s['asserts']} assert lines")
            if s["code"] > MAX_CODE_LINES:
                problems.append(f"{where}: {s['code']} lines of code (> {MAX_CODE_LINES})")
            if s["words"] > MAX_WORDS:
                problems.append(f"{where}: {s['words']} words (> {MAX_WORDS})")
            if s["tex"]:
                problems.append(f"{where}: TeX in code spans {s['tex']} (write $...$)")
            for img in s["images"]:
                if not img["natural"]:
                    problems.append(f"{where}: a figure that did not load ({img['alt']!r})")
                    continue
                px = SMALLEST_TEXT_PX * img["shown"] / img["natural"]
                if px < MIN_LABEL_PX:
                    problems.append(
                        f"{where}: figure {img['alt']!r} shown at {img['shown']} of "
                        f"{img['natural']} px wide: its smallest text is {px:.1f} px "
                        f"(< {MIN_LABEL_PX:g})"
                    )
    assert n_slides >= len(measured) * lo
    assert not problems, (
        f"{len(problems)} lecture-deck rules broken ({n_slides} slides measured; open "
        "build/slides/<lesson>.slides.html#/h/v, or see the lesson's cells with "
        "metadata['lecture']):\n" + "\n".join(problems)
    )


def test_one_slide_is_measured_the_way_it_is_shown(built, browser):
    """The measurement is real: the first slide's height is what the browser lays out."""
    page = browser.new_page(*SLIDE_SIZE)
    page.goto(built["decks"][0].as_uri(), timeout=120)
    report = page.evaluate(FIT_JS, timeout=120)
    shown = page.evaluate("Reveal.getCurrentSlide().scrollHeight")
    assert 100 < shown == report["slides"][0]["height"]
    assert page.evaluate("Reveal.getConfig().width") == SLIDE_SIZE[0]
    heading = page.evaluate("getComputedStyle(document.querySelector('.reveal h1')).textTransform")
    assert heading == "none"  # headings keep their case
    png = page.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ images, notes, explorers


def test_every_image_has_alt_text(built):
    problems = []
    for kind in ("decks", "full", "handouts"):
        for path in built[kind]:
            imgs = Images(path.read_text(encoding="utf-8")).alts
            missing = sum(not a or not a.strip() for a in imgs)
            default = sum(a == DEFAULT_ALT for a in imgs)
            if missing or default:
                problems.append(
                    f"{lesson_of(path)} {kind}: {missing + default} of {len(imgs)} images "
                    "without alt text"
                )
    cells = []
    for lesson in discover_lessons(NOTEBOOKS):
        nb = nbformat.read(lesson.path, as_version=4)
        cells += [f"  {lesson.stem} {p}" for p in alt_text_problems(nb)]
    assert not problems, (
        "images with nbconvert's default or no alt text (set metadata['alt_text'] on the "
        "cell: a string, or a list of strings, one per image):\n"
        + "\n".join(problems)
        + ("\nthe cells:\n" + "\n".join(cells) if cells else "")
    )


def test_every_deck_has_speaker_notes(built):
    without = [
        lesson_of(d) for d in built["decks"] if Images(d.read_text(encoding="utf-8")).notes == 0
    ]
    assert not without, (
        f"{len(without)} decks have no speaker notes (markdown cells with "
        f"metadata.slideshow.slide_type == 'notes'): {', '.join(without)}"
    )


def test_no_explorer_is_shown_as_text(built):
    shown = [
        f"{lesson_of(p)} ({kind[:-1]})"
        for kind in ("decks", "handouts")
        for p in built[kind]
        if WIDGET_REPR.search("".join(Images(p.read_text(encoding="utf-8")).text))
    ]
    assert not shown, "explorers stored as a widget's text repr (re-run the lesson): " + ", ".join(
        shown
    )


# ------------------------------------------------------------------ JupyterLab


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("jupyter-runtime"), START_TIMEOUT) as server:
        yield server


def _lesson_with_figures():
    """The first lesson with stored PNG figures, and (cells, figures, notes cells) counts of
    its file."""
    for lesson in discover_lessons(NOTEBOOKS):
        nb = nbformat.read(lesson.path, as_version=4)
        pngs = sum(
            "image/png" in o.get("data", {})
            for c in nb.cells
            if c.cell_type == "code"
            for o in c.outputs
        )
        notes = sum(c.metadata.get("slideshow", {}).get("slide_type") == "notes" for c in nb.cells)
        if pngs:
            return lesson, len(nb.cells), pngs, notes
    pytest.fail("no lesson has a stored figure to look for")


COUNT_JS = """(() => ({
  panels: document.querySelectorAll('.jp-NotebookPanel').length,
  cells: document.querySelectorAll('.jp-NotebookPanel .jp-Cell').length,
  imgs: document.querySelectorAll('.jp-NotebookPanel img[src^="data:image/png;base64,"]').length,
  text: document.body.innerText,
  h1: Array.from(document.querySelectorAll('.jp-NotebookPanel h1')).map(h => h.textContent),
  collapsed: Array.from(document.querySelectorAll(
    '.jp-NotebookPanel .jp-MarkdownCell .jp-InputPlaceholder .jp-PlaceholderText'
  )).map(e => e.textContent),
}))()"""


def test_jupyterlab_renders_a_lesson_with_its_figures(browser, lab, tmp_path):
    lesson, n_cells, n_png, n_notes = _lesson_with_figures()
    page = browser.new_page(1400, 1000)
    # JupyterLab renders cells lazily as they scroll into view: ask it to render them all
    url = f"{lab['base']}/lab/tree/notebooks/{lesson.path.name}?token={lab['token']}"
    page.goto(url, timeout=120)
    deadline, seen = time.monotonic() + 120, None
    while time.monotonic() < deadline:
        seen = page.evaluate(COUNT_JS)
        if seen["cells"] >= n_cells and seen["imgs"] >= n_png and "Key Vectors" in seen["text"]:
            break
        page.evaluate(
            "document.querySelectorAll('.jp-WindowedPanel-outer, .jp-Notebook')"
            ".forEach(e => e.scrollTop = e.scrollHeight)"
        )
        time.sleep(1.0)
    assert seen and seen["panels"] == 1, f"expected the one lesson open in JupyterLab: {seen}"
    # every cell of the file is in the page, every stored figure is drawn as an <img>
    assert seen["cells"] == n_cells, f"{seen['cells']} of {n_cells} cells rendered"
    assert seen["imgs"] == n_png, f"{seen['imgs']} of {n_png} figures rendered"
    # markdown was rendered (the title is a heading, not '# ...' source text)
    title = lesson.title.split("·")[-1].strip()
    assert any(title in h for h in seen["h1"]), f"the title heading is missing: {seen['h1']}"
    # speaker notes are collapsed to their "For lecturers" line (metadata.jupyter.source_hidden)
    assert len(seen["collapsed"]) == n_notes > 0, seen["collapsed"]
    assert all(t.startswith("**For lecturers**") for t in seen["collapsed"]), seen["collapsed"]
    # the kernel the course installs is the one JupyterLab offers for the lesson
    assert "Key Vectors" in seen["text"]
    # the learners' Lab: no nbgrader menu or assignment panels, no news prompt
    assert "Nbgrader" not in seen["text"] and "Create Assignment" not in seen["text"]
    assert "Jupyter news" not in seen["text"]
    shot = tmp_path / f"{lesson.stem}.png"
    shot.write_bytes(page.screenshot())
    print(f"screenshot of {lesson.path.name} in JupyterLab: {shot}")
