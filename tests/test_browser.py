"""Real-browser checks: every lecture deck at 1280 x 720, and JupyterLab rendering a lesson.

One headless Chromium (tests/chromium.py, the DevTools protocol over a pipe) serves the
whole module. The decks and handouts of every lesson are built once into a temporary
folder (`python -m kvstaff.lecture slides|html` does the same into build/). Then,
for every lesson's default deck — the lecture deck the lesson chose (metadata["lecture"]) —
`window.kvSlideFit()` measures every slide as Chromium shows it, after MathJax has typeset
it, once, in pixels as displayed (reveal.js scales the 1280 x 720 slide to fit the window
with a margin: by 0.96 in a 1280 x 720 window), and:

* every slide fits: its content, as displayed, no taller or wider than the slide as
  displayed, no code or output cut off at the right;
* every deck keeps the lecture rules: 12-18 slides, speaker notes on every slide, no
  `assert` line, at most 14 lines of code shown (blank lines too) and 120 words, no TeX
  inside a code span, and no figure shown so small that its smallest text (attnlib.plot's
  MIN_FONT at its DPI) falls under 14 px as displayed. tests/test_lecture_decks.py checks
  the same rules from the notebooks' metadata without a browser; this is what a class sees;
* pressing → from the first slide reaches every slide, vertical sub-slides too, and so
  does Space (on every deck with sub-slides, where the default → would skip them);
* no raw TeX in any deck or handout as rendered: no backslash in the text of a typeset
  formula (``\\text{seq\\_q}`` shows "seq_q", as in JupyterLab), no MathJax error, no
  ``$...$`` or TeX command left in the text; in a deck's speaker notes every formula is
  MathML alone (MathJax's HTML would show twice in the speaker view, without its styles);
* printed handouts lose no code: under print media, at the width of an A4 page inside its
  margins, no code or output block is wider than the page or scrolls.

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
node_modules/ (`npm ci`) the deck tests are skipped. While editing a lesson,
``KV_BROWSER_LESSONS=03,16`` builds and measures only those lessons.
"""

from __future__ import annotations

import os
import re
import shutil
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
MIN_LABEL_PX = 14.0  # the smallest figure text, as displayed on a 1280 x 720 screen
PRINT_WIDTH = round((210 - 2 * 12) / 25.4 * 96)  # an A4 page inside the handouts' 12 mm margins
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


# Raw TeX on a rendered page (a deck or a handout), once MathJax has typeset it: a
# backslash in a typeset formula's text (its hidden MathML copy aside), a MathJax error, a
# formula or TeX command left as text (code, scripts and MathML aside), and in a deck's
# speaker notes MathJax's HTML (which the speaker view would show twice, unstyled).
RAW_TEX_JS = r"""new Promise((resolve) => {
  const done = () => {
    const found = [];
    const cut = (t) => t.replace(/\s+/g, " ").trim().slice(0, 60);
    document.querySelectorAll(".MathJax_CHTML, .MathJax, .MathJax_SVG").forEach((m) => {
      const copy = m.cloneNode(true);
      copy.querySelectorAll(".MJX_Assistive_MathML").forEach((e) => e.remove());
      if (copy.textContent.includes("\\")) {
        found.push("a backslash in " + cut(copy.textContent));
      }
    });
    document.querySelectorAll("[class*='merror'], [class*='noError'], .MathJax_Error, merror")
      .forEach((e) => found.push("a MathJax error: " + cut(e.textContent)));
    const skip = "pre, code, script, style, textarea, math, .MathJax_Preview, "
      + ".MJX_Assistive_MathML";
    const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
      acceptNode: (n) => (n.parentElement.closest(skip)
        ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
    });
    while (walk.nextNode()) {
      const t = walk.currentNode.textContent;
      if (/\$[^$\s][^$]*\$|\\[A-Za-z]{2,}|\\[()[\]]/.test(t)) {
        found.push("TeX as text: " + cut(t));
      }
    }
    const notes = document.querySelectorAll(
      "aside.notes .MathJax_CHTML, aside.notes script[type^='math/tex']");
    if (notes.length) {
      found.push(notes.length + " formulas in the speaker notes as MathJax HTML "
        + "(shown twice in the speaker view)");
    }
    resolve(found);
  };
  if (window.MathJax && MathJax.Hub) {
    // (a hook that returned the queue's callback would wait on itself: return nothing)
    MathJax.Hub.Register.StartupHook("End", () => { MathJax.Hub.Queue(done); });
  } else { done(); }
})"""
# Under print media: the code and output blocks that a printed page would cut (wider than
# their box, or reaching past the page's right edge).
PRINT_CUT_JS = r"""(() => {
  const right = document.documentElement.clientWidth + 1, cut = [];
  let blocks = 0;
  document.querySelectorAll("pre").forEach((pre) => {
    if (!pre.offsetParent) { return; }  // not printed (the lecturers' asides)
    blocks += 1;
    if (pre.scrollWidth > pre.clientWidth + 1 || pre.getBoundingClientRect().right > right) {
      const lines = pre.textContent.split("\n");
      cut.push(lines.reduce((a, b) => (b.length > a.length ? b : a), "").slice(0, 70));
    }
  });
  return { blocks: blocks, cut: cut };
})()"""
# Press a key (CDP Input, as a lecturer's keyboard does) from the first slide until the last
# slide and its last fragment: the slides reveal.js showed on the way.
KEYS = {"ArrowRight": ("ArrowRight", 39), " ": ("Space", 32)}
STATE_JS = """(() => { const at = Reveal.getIndices();
  return [at.h + "/" + (at.v || 0), Reveal.isLastSlide() && !Reveal.availableFragments().next];
})()"""


def slides_reached(page, key: str, total: int) -> int:
    """How many slides pressing ``key`` from the first slide shows (one keydown a press:
    reveal.js acts on it; a press takes ~30 ms, waiting for a frame)."""
    code, number = KEYS[key]
    down = {"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": number}
    page.evaluate("Reveal.slide(0, 0, -1)")
    seen, end = set(), False
    for _ in range(4 * total + 10):  # fragments take presses too
        at, end = page.evaluate(STATE_JS)
        seen.add(at)
        if end:
            break
        page.send("Input.dispatchKeyEvent", down)
    page.evaluate("Reveal.slide(0, 0)")
    return len(seen)


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
    notebooks = NOTEBOOKS
    if only := os.environ.get("KV_BROWSER_LESSONS"):  # e.g. "03,16": while editing a lesson
        notebooks = out / "notebooks"
        notebooks.mkdir()
        for number in only.split(","):
            for path in NOTEBOOKS.glob(f"{number.strip()}_*.ipynb"):
                shutil.copy(path, notebooks / path.name)
    decks = build_slides(notebooks, out / "slides", NODE_MODULES)  # the lecture decks
    full = [d.with_name(d.name.replace(".slides.html", FULL_SUFFIX)) for d in decks]
    handouts = build_handouts(notebooks, out / "html", NODE_MODULES)
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
    for n, deck in enumerate(built["decks"]):
        page.goto(deck.as_uri(), timeout=120)
        report = page.evaluate(FIT_JS, timeout=180)
        report["tex"] = page.evaluate(RAW_TEX_JS, timeout=60)
        # → and Space on the decks with vertical sub-slides (the ones → could skip), and on
        # the first deck; a key press takes ~30 ms
        keys = list(KEYS) if report["vertical"] or n == 0 else []
        report["reached"] = {key: slides_reached(page, key, report["total"]) for key in keys}
        reports[deck] = report
    return reports


@pytest.fixture(scope="module")
def printed(built, browser):
    """``{handout: (raw TeX found, print report)}`` for every handout, loaded once under
    print media at the width of an A4 page inside its margins."""
    page = browser.new_page(PRINT_WIDTH, 1000)
    reports = {}
    for handout in built["handouts"]:
        # typeset on screen (MathJax 2's queue stalls when a page starts under print media)
        page.send("Emulation.setEmulatedMedia", {"media": "screen"})
        page.goto(handout.as_uri(), timeout=120)
        tex = page.evaluate(RAW_TEX_JS, timeout=120)
        page.send("Emulation.setEmulatedMedia", {"media": "print"})
        reports[handout] = (tex, page.evaluate(PRINT_CUT_JS))
    return reports


def _where(deck, s) -> str:
    title = f" {s['title'][:48]!r}" if s["title"] else ""
    return f"{lesson_of(deck)} slide {s['h'] + 1} (#/{s['h']}/{s['v']}, cell {s['cell']}){title}"


def test_every_slide_fits_1280x720(measured):
    """Every slide's content, as displayed (after reveal's scaling), within the slide as
    displayed (1280 x 720 scaled: 1229 x 691 in a 1280 x 720 window)."""
    problems, n_slides = [], 0
    for deck, report in measured.items():
        assert (report["width"], report["height"]) == SLIDE_SIZE, deck.name
        assert 0.5 < report["scale"] <= 1, (deck.name, report["scale"])
        width, height = report["shownSlideWidth"], report["shownSlideHeight"]
        assert abs(height - SLIDE_SIZE[1] * report["scale"]) < 1, (deck.name, height)
        for s in report["slides"]:
            n_slides += 1
            where = _where(deck, s)
            if s["shownHeight"] > height + 0.5:
                problems.append(
                    f"{where}: {s['shownHeight']:.0f} px tall as displayed (> {height:.0f}: "
                    f"the slide's {SLIDE_SIZE[1]} px at scale {report['scale']:.2f})"
                )
            if s["shownWidth"] > width + 0.5:
                problems.append(
                    f"{where}: {s['shownWidth']:.0f} px wide as displayed (> {width:.0f})"
                )
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
                problems.append(
                    f"{where}: {s['code']} lines of code shown, blank ones counted "
                    f"(> {MAX_CODE_LINES})"
                )
            if s["words"] > MAX_WORDS:
                problems.append(f"{where}: {s['words']} words (> {MAX_WORDS})")
            if s["tex"]:
                problems.append(f"{where}: TeX in code spans {s['tex']} (write $...$)")
            for img in s["images"]:
                if not img["natural"]:
                    problems.append(f"{where}: a figure that did not load ({img['alt']!r})")
                    continue
                px = SMALLEST_TEXT_PX * img["shown"] / img["natural"]  # as displayed
                if px < MIN_LABEL_PX:
                    problems.append(
                        f"{where}: figure {img['alt']!r} displayed {img['shown']:.0f} of "
                        f"{img['natural']} px wide: its smallest text is {px:.2f} px as "
                        f"displayed (< {MIN_LABEL_PX:g})"
                    )
    assert n_slides >= len(measured) * lo
    assert not problems, (
        f"{len(problems)} lecture-deck rules broken ({n_slides} slides measured; open "
        "build/slides/<lesson>.slides.html#/h/v, or see the lesson's cells with "
        "metadata['lecture']):\n" + "\n".join(problems)
    )


def test_every_slide_is_reached_by_right_arrow_and_space(measured):
    """→ (and Space) from the first slide visit every slide, vertical sub-slides included:
    a lecturer who presses → never skips a slide (reveal's navigationMode "linear")."""
    problems, pressed = [], [lesson_of(d) for d, r in measured.items() if r["reached"]]
    assert pressed, "no deck was stepped through"
    for deck, report in measured.items():
        for key, name in (("ArrowRight", "→"), (" ", "Space")):
            if key in report["reached"] and report["reached"][key] != report["total"]:
                problems.append(
                    f"{lesson_of(deck)}: {name} from the first slide reaches "
                    f"{report['reached'][key]} of {report['total']} slides"
                )
    assert not problems, (
        f"slides a lecturer pressing → or Space skips (decks stepped through: {pressed}):\n"
        + "\n".join(problems)
    )


def test_no_raw_tex_in_rendered_maths(measured, printed):
    problems = [f"{lesson_of(d)} deck: {p}" for d, r in measured.items() for p in r["tex"]]
    problems += [f"{lesson_of(h)} handout: {p}" for h, (tex, _) in printed.items() for p in tex]
    assert not problems, (
        f"{len(problems)} formulas not rendered as JupyterLab renders them (write formulas as "
        "$...$; kv_mathjax.html.j2 reads \\text{...} as JupyterLab does):\n" + "\n".join(problems)
    )


def test_printed_handouts_lose_no_code(printed):
    problems, blocks = [], 0
    for handout, (_, report) in printed.items():
        blocks += report["blocks"]
        problems += [f"{lesson_of(handout)}: {line!r}" for line in report["cut"]]
    assert blocks >= 10 * len(printed), f"only {blocks} code blocks in the printed handouts"
    assert not problems, (
        f"{len(problems)} of {blocks} code or output blocks cut at the right margin of a "
        f"printed A4 page ({PRINT_WIDTH} px wide; the longest line of each):\n"
        + "\n".join(problems)
    )


def test_the_page_checks_catch_what_they_are_for(built, browser):
    """The raw-TeX and print checks on a made-up page: stock MathJax (no reading of
    \\text as JupyterLab's), a TeX error, a formula left as text, code that does not wrap."""
    folder = built["handouts"][0].parent
    page_path = folder / "kv-check-the-checks.html"
    page_path.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        "<script src='vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe'></script>"
        "<script type='text/x-mathjax-config'>MathJax.Hub.Config({tex2jax: "
        "{inlineMath: [['$','$']], processClass: 'm', ignoreClass: 'body'}});</script>"
        "</head><body class='body'><p class='m'>$\\text{seq\\_q}$ and $\\frac{1}{$</p>"
        "<p>left as text: $x_1$</p>"
        "<pre style='white-space: pre; overflow-x: auto'>" + "x = 1  # " + "a" * 200 + "</pre>"
        "</body></html>",
        encoding="utf-8",
    )
    try:
        page = browser.new_page(PRINT_WIDTH, 1000)
        page.goto(page_path.as_uri(), timeout=60)
        found = "\n".join(page.evaluate(RAW_TEX_JS, timeout=60))
        page.send("Emulation.setEmulatedMedia", {"media": "print"})
        assert "a backslash in seq\\_q" in found, found
        assert "a MathJax error" in found or "TeX as text: \\frac" in found, found
        assert "TeX as text: left as text: $x_1$" in found, found
        report = page.evaluate(PRINT_CUT_JS)
        assert report["blocks"] == 1 and report["cut"][0].startswith("x = 1  # aaa"), report
    finally:
        page_path.unlink()


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
    # ... as plain text: JupyterLab shows a collapsed cell's first line as written
    raw = [t for t in seen["collapsed"] if not t.startswith("For lecturers") or "**" in t]
    assert not raw, f"collapsed notes whose line shows markup or no marker: {raw[:3]}"
    # the kernel the course installs is the one JupyterLab offers for the lesson
    assert "Key Vectors" in seen["text"]
    # the learners' Lab: no nbgrader menu or assignment panels, no news prompt
    assert "Nbgrader" not in seen["text"] and "Create Assignment" not in seen["text"]
    assert "Jupyter news" not in seen["text"]
    shot = tmp_path / f"{lesson.stem}.png"
    shot.write_bytes(page.screenshot())
    print(f"screenshot of {lesson.path.name} in JupyterLab: {shot}")
