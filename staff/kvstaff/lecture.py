r"""Lecture mode: reveal.js slides and standalone HTML handouts from the lessons.

``python -m kvstaff.lecture slides`` (``make slides``) and
``python -m kvstaff.lecture html`` (``make html``) turn every lesson
``notebooks/NN_*.ipynb`` into

* ``build/slides/NN_*.slides.html`` — a reveal.js deck built from the cells' slideshow
  metadata (``slide``/``subslide``/``fragment``/``-``/``skip``), and
* ``build/html/NN_*.html`` plus ``build/html/index.html`` — handouts with the stored
  outputs (figures embedded as ``data:image/png``; nothing is re-executed).

Both work offline: nbconvert's templates point reveal.js, require.js, jQuery and MathJax at
CDNs; here every one of them is copied from ``node_modules/`` (``npm ci`` against the
repository's ``package-lock.json``) into the build folder and referenced by a relative
path, and mermaid and the widget manager are left out of the templates
(``attnlib/lecture_templates``). A built page is checked with :func:`remote_resources`
before it is written: a page that would load anything over the network is an error.

Lessons are discovered, not listed: any ``NN_name.ipynb`` in the notebooks folder is one.

Two decks per lesson
--------------------
``make slides`` writes, per lesson,

* ``NN_*.slides.html`` — the **lecture deck** (the default): the 12–18 slides the lesson's
  author chose for a 10–15 minute talk, by cell metadata; a slide's ``"title"`` is shown as
  its heading (``###``), and the summary slide (``"summary": true``) comes last;
* ``NN_*.outline.html`` — a printable one-page outline of that deck: each slide's title
  (its markdown rendered), its speaker notes and its minutes, and the total;
* ``NN_*.full.slides.html`` — the whole notebook as slides (the cells' slideshow metadata),
  for walking through a lesson in class.

The lecture deck is chosen by the cells' ``metadata["lecture"]``; what that metadata means,
the rules a deck keeps and how speaker notes are marked is :mod:`kvstaff.lecture_deck`.

What the lessons' metadata means here (the conventions lesson editors follow)
----------------------------------------------------------------------------
* **Speaker notes** — a markdown cell with ``metadata.slideshow.slide_type == "notes"``
  (nbconvert's reveal type) becomes ``<aside class="notes">`` of the slide it follows:
  shown on ``S`` in the speaker view, not on the slide. Handouts show it as a closed
  "For lecturers" aside, apart from the lesson's prose.
* **Alt text** — a code cell whose outputs include images carries ``metadata["alt_text"]``:
  a string (one image) or a list of strings (one per image, in output order). It becomes
  the ``alt`` of each ``<img>`` in decks and handouts. A missing one is reported by the
  build (and nbconvert's "No description has been provided" default is what the browser
  test then finds).
* **Checks left out of decks** — a locked nbgrader test cell
  (``metadata.nbgrader.grade == true``), a cell tagged ``check``, and a code cell whose
  source is only ``assert`` statements (loops of asserts included) are not on any slide,
  in every deck. Without solutions, the output of graded check cells is dropped from
  handouts too: it would print "✔ correct" under a ``raise NotImplementedError()`` stub.
* **Harness lines** — ``# NBVAL_...`` marker lines and trailing ``# fmt: skip`` /
  ``# noqa`` comments are removed from the code shown (lessons use the cell tag
  ``nbval-ignore-output`` and pyproject's per-file ruff settings instead).
* **Progress lines** — the fixed "<desc>: N steps" line :func:`attnlib.training.progress_bar`
  leaves behind (output metadata ``{"attnlib": "progress"}``) is not put on slides.

Decks are 1280 x 720 (:data:`SLIDE_SIZE`): headings keep their case, code is 18 px and wraps
instead of being cut off, a figure is at most 500 px high, and a slide whose content is
still taller scrolls (a fallback applied after MathJax has typeset the slide; no slide
should need it — ``tests/test_browser.py`` reports every one that does, by lesson and
slide). Each slide's ``<section>`` carries ``data-cell``, the notebook index of its first
cell, and ``window.kvSlideFit()`` in a deck measures every slide, in pixels as displayed
(reveal.js scales the slide to the window: by 0.96 in a 1280 x 720 one). → and Space both
step through every slide, vertical sub-slides included (reveal's ``navigationMode:
"linear"``; ↓ and ↑ still move in a column).

Maths (``lecture_templates/kv_common/kv_mathjax.html.j2``, decks and handouts alike):
MathJax 2 with nbconvert's settings, and ``\text{seq\_q}`` read as JupyterLab's MathJax 3
reads it (its textmacros package): the escapes ``\_ \% \& \#`` inside ``\text``-like
arguments are their characters, not a backslash and a character. In a deck's speaker notes
each typeset formula is replaced by its MathML, which the speaker view (key ``S``, a page
without MathJax's styles) draws once.

Handouts print on A4 without losing code: under ``@media print`` code and output blocks
wrap at the right margin (``pre-wrap``) in a smaller type. The index pages give each
lesson's time in short ("~45 min + ~30 min optional"), the whole ``**Time**`` paragraph as
the tooltip (:func:`lesson_time`).
"""

from __future__ import annotations

import argparse
import copy
import html
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

from kvstaff.lecture_deck import (
    ASK_THE_ROOM,
    CHECK_TAG,
    LECTURE_KEY,
    LECTURE_MINUTES,
    LECTURE_SLIDES,
    LECTURER_MARK,
    MAX_CODE_LINES,
    MAX_WORDS,
    MIN_WORDS,
    NOTES_TYPE,
    SUMMARY_KEY,
    TITLE_KEY,
    LectureSlide,
    deck_order,
    is_check_cell,
    is_notes_cell,
    is_progress_output,
    lecture_markdown,
    lecture_problems,
    lecture_slides,
    lecture_spec,
    notes_body,
    notes_marked,
    shown_source,
    tex_code_spans,
    without_asserts,
)
from kvstaff.lessons import Lesson, course_root, discover_lessons, lesson_info

__all__ = [
    "ALT_KEY",
    "ASK_THE_ROOM",
    "CHECK_TAG",
    "LECTURE_KEY",
    "LECTURER_MARK",
    "LECTURE_MINUTES",
    "LECTURE_SLIDES",
    "MAX_CODE_LINES",
    "MAX_WORDS",
    "MIN_WORDS",
    "NOTES_TYPE",
    "SLIDE_SIZE",
    "LectureSlide",
    "Lesson",
    "is_notes_cell",
    "lecture_deck_notebook",
    "lecture_problems",
    "lecture_slides",
    "outline_html",
    "tex_code_spans",
    "alt_text_problems",
    "alt_texts",
    "build_handouts",
    "build_slides",
    "discover_lessons",
    "inline_markdown",
    "is_check_cell",
    "lecture_notebook",
    "lesson_time",
    "lesson_info",
    "local_resources",
    "remote_resources",
    "without_solutions",
]

TEMPLATES = Path(__file__).resolve().parent / "lecture_templates"

SLIDE_SIZE = (1280, 720)  # reveal.js width and height: every slide must fit
ALT_KEY = "alt_text"  # cell metadata: str, or list of str (one per image output)
TITLE_HEADING = "###"  # a lecture spec's "title" is shown as this markdown heading
FULL_SUFFIX = ".full.slides.html"  # the whole notebook as slides (the second build)
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")

# What is copied from node_modules into the build folder: (source in node_modules, dest).
# MathJax 2 is 73 MB on npm; the TeX → CommonHTML path the templates use needs ~5 MB of it.
REVEAL_FILES = (("reveal.js/dist", "reveal.js/dist"), ("reveal.js/plugin", "reveal.js/plugin"))
VENDOR_FILES = (
    ("requirejs/require.js", "vendor/require.js"),
    ("jquery/dist/jquery.min.js", "vendor/jquery.min.js"),
    ("mathjax/MathJax.js", "vendor/mathjax/MathJax.js"),
    ("mathjax/config/TeX-AMS_CHTML-full.js", "vendor/mathjax/config/TeX-AMS_CHTML-full.js"),
    ("mathjax/config/Safe.js", "vendor/mathjax/config/Safe.js"),
    ("mathjax/extensions", "vendor/mathjax/extensions"),
    ("mathjax/jax/input/TeX", "vendor/mathjax/jax/input/TeX"),
    ("mathjax/jax/element", "vendor/mathjax/jax/element"),
    ("mathjax/jax/output/CommonHTML", "vendor/mathjax/jax/output/CommonHTML"),
    ("mathjax/jax/output/PreviewHTML", "vendor/mathjax/jax/output/PreviewHTML"),
    ("mathjax/fonts/HTML-CSS/TeX/woff", "vendor/mathjax/fonts/HTML-CSS/TeX/woff"),
)
# The URLs nbconvert's templates would load from CDNs, pointed at the copies above.
LOCAL_URLS = {
    "require_js_url": "vendor/require.js",
    "jquery_url": "vendor/jquery.min.js",
    "mathjax_url": "vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe",
}


# ---------------------------------------------------------------------------- HTML checks


class _Resources(HTMLParser):
    """Collects the URLs a page loads: scripts, stylesheets, images, iframes, CSS @import."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.urls: list[tuple[str, str]] = []  # (what, url)
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.urls.append(("script", a["src"]))
        elif tag == "link" and a.get("href") and "stylesheet" in (a.get("rel") or "").split():
            self.urls.append(("stylesheet", a["href"]))
        elif tag in ("img", "iframe", "source", "embed") and a.get("src"):
            self.urls.append((tag, a["src"]))
        elif tag == "style":
            self._in_style = True

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            for url in re.findall(r"@import\s+(?:url\()?\s*['\"]?([^'\")\s;]+)", data):
                self.urls.append(("css-import", url))
        # ES module imports, static or dynamic (the stock templates load mermaid so)
        for url in re.findall(r"\bimport\s+\w+\s+from\s+['\"]([^'\"]+)['\"]", data):
            self.urls.append(("module-import", url))
        for url in re.findall(r"\bimport\(\s*['\"]([^'\"]+)['\"]\s*\)", data):
            self.urls.append(("module-import", url))


def _resources(page: str) -> list[tuple[str, str]]:
    p = _Resources()
    p.feed(page)
    p.close()
    # require([... "x/reveal.js" ...]) in the slides' footer: AMD loads are loads too
    for block in re.findall(r"require\(\s*\{[^}]*\}\s*,\s*\[([^\]]*)\]", page):
        p.urls.extend(("require", u) for u in re.findall(r"['\"]([^'\"]+)['\"]", block))
    return p.urls


def remote_resources(
    page: str, found: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """``(kind, url)`` for everything ``page`` would fetch over the network.

    Kinds: ``script``, ``stylesheet``, ``img``/``iframe``/``source``/``embed``,
    ``css-import``, ``module-import``, ``require``. Protocol-relative ``//host`` URLs
    count as remote; ``data:`` and relative URLs do not. ``found``: the page's resources
    if they were read already (parsing a page of embedded figures takes its time).
    """
    found = _resources(page) if found is None else found
    return [(k, u) for k, u in found if re.match(r"^(https?:)?//", u.strip(), re.I)]


def local_resources(page: str, found: list[tuple[str, str]] | None = None) -> list[str]:
    """Relative URLs ``page`` loads (query strings and fragments dropped), to check they exist."""
    out = []
    for _, u in _resources(page) if found is None else found:
        u = u.strip()
        if re.match(r"^([a-z][a-z0-9+.-]*:|//|#)", u, re.I):
            continue
        out.append(re.split(r"[?#]", u)[0])
    return out


def _check_offline(page: str, where: Path) -> None:
    found = _resources(page)  # once: the page may be megabytes of embedded figures
    remote = remote_resources(page, found)
    if remote:
        listed = "\n".join(f"  {k}: {u}" for k, u in remote)
        raise RuntimeError(f"{where} would load from the network:\n{listed}")
    missing = sorted(
        {u for u in local_resources(page, found) if not (where.parent / html.unescape(u)).exists()}
    )
    if missing:
        raise RuntimeError(f"{where} refers to files that were not copied: {missing}")


# ---------------------------------------------------------------------------- building


def _copy_assets(node_modules: Path, out: Path, pairs) -> None:
    for src, dest in pairs:
        s, d = node_modules / src, out / dest
        if not s.exists():
            raise FileNotFoundError(
                f"{s} is missing: run `npm ci` in the repository root (make slides/html does)"
            )
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        else:
            shutil.copy2(s, d)


def _exporter(kind: str):
    from nbconvert import HTMLExporter, SlidesExporter
    from traitlets.config import Config

    c = Config()
    cls = {"slides": SlidesExporter, "html": HTMLExporter}[kind]
    section = c[cls.__name__]
    section.extra_template_basedirs = [str(TEMPLATES)]
    section.extra_template_paths = [str(TEMPLATES / "kv_common")]  # kv_mathjax.html.j2
    section.template_name = {"slides": "kv_reveal", "html": "kv_lab"}[kind]
    for k, v in LOCAL_URLS.items():
        section[k] = v
    if kind == "slides":
        section.reveal_url_prefix = "reveal.js"
        section.reveal_theme = "white"  # its fonts are bundled (some themes import Google Fonts)
        section.reveal_width, section.reveal_height = (str(n) for n in SLIDE_SIZE)
        section.reveal_number = "c/t"
        section.reveal_transition = "fade"
        section.reveal_scroll = True  # the fallback for a slide that is still too tall
    else:
        section.embed_images = True  # markdown ![](file.png) images become data: URIs too
    return cls(config=c)


def without_solutions(nb):
    """``nb`` with exercise solutions hidden, every other stored output kept (a new notebook).

    Solution regions become ``raise NotImplementedError()`` and hidden tests go, as in the
    learners' copies (:func:`kvstaff.student.student_version`); the outputs of solution
    cells are dropped, since they would give the answer away, and so are the outputs of the
    graded check cells: their "✔ correct" would follow a stub that raises.
    """
    from kvstaff.student import student_version

    student = student_version(nb)
    if len(student.cells) != len(nb.cells):
        raise RuntimeError("without_solutions: the student version changed the number of cells")
    for cell, orig in zip(student.cells, nb.cells, strict=True):
        grading = orig.metadata.get("nbgrader", {})
        if orig.cell_type == "code" and not grading.get("solution", False):
            cell.outputs = [] if grading.get("grade", False) else orig.outputs
            cell.execution_count = orig.get("execution_count")
    return student


def _image_outputs(cell) -> list:
    return [
        o
        for o in cell.get("outputs", [])
        if o.get("output_type") in ("display_data", "execute_result")
        and any(m in o.get("data", {}) for m in IMAGE_MIMES)
    ]


def alt_texts(cell) -> list[str]:
    """The cell's alt texts, one per image output (``metadata["alt_text"]``: str or list)."""
    alt = cell.get("metadata", {}).get(ALT_KEY)
    if alt is None:
        return []
    if isinstance(alt, str):
        return [alt]
    if isinstance(alt, list | tuple) and all(isinstance(a, str) for a in alt):
        return list(alt)
    raise TypeError(f"metadata[{ALT_KEY!r}] must be a str or a list of str, got {alt!r}")


def alt_text_problems(nb) -> list[str]:
    """What is wrong with the alt text of ``nb``'s images, one line per cell (empty: all good)."""
    problems = []
    for i, cell in enumerate(nb.cells):
        images = _image_outputs(cell) if cell.cell_type == "code" else []
        try:
            alts = alt_texts(cell)
        except TypeError as err:
            problems.append(f"cell {i}: {err}")
            continue
        if not images:
            continue
        if not alts:
            problems.append(f"cell {i}: {len(images)} image(s) without metadata[{ALT_KEY!r}]")
        elif len(alts) != len(images):
            problems.append(f"cell {i}: {len(alts)} alt texts for {len(images)} images")
        elif any(not a.strip() for a in alts):
            problems.append(f"cell {i}: an empty alt text")
    return problems


def lecture_notebook(nb, *, slides: bool, solutions: bool = False):
    """``nb`` shaped for a deck (``slides=True``) or a handout: a new notebook.

    Without ``solutions`` the answers are hidden (:func:`without_solutions`). Then: alt text
    goes from the cell's ``metadata["alt_text"]`` onto each image output (as output metadata
    ``alt_text``, which the templates write into ``<img alt>``); harness marker lines are
    removed from the code; in a deck, check cells are skipped, progress lines dropped, and
    each cell records its notebook index (``slideshow.data.cell`` → ``data-cell``).
    """
    out = without_solutions(nb) if not solutions else copy.deepcopy(nb)
    out.metadata.pop("widgets", None)  # widget state needs a kernel; the stills stand in
    for index, cell in enumerate(out.cells):
        if not slides and is_notes_cell(cell):
            # a handout's notes are an aside (kv_lab): the marker line becomes its summary
            head, body = notes_body(cell.source)
            if notes_marked(cell.source):
                cell.source = body
            cell.metadata["kv_notes"] = head
        if cell.cell_type == "code":
            cell.source = shown_source(cell.source)
            try:
                alts = alt_texts(cell)
            except TypeError:
                alts = []
            for output, alt in zip(_image_outputs(cell), alts, strict=False):
                if alt.strip():
                    output.setdefault("metadata", {})[ALT_KEY] = alt.strip()
        if not slides:
            continue
        show = cell.metadata.setdefault("slideshow", {})
        if cell.cell_type == "code":
            if is_check_cell(nb.cells[index]):
                show["slide_type"] = "skip"
            cell.outputs = [o for o in cell.get("outputs", []) if not is_progress_output(o)]
        show.setdefault("data", {})["cell"] = str(index)
    return out


def lecture_deck_notebook(nb, *, solutions: bool = False):
    """The lecture deck of ``nb`` as a notebook for the reveal exporter: its ``lecture``
    cells only, shaped as :func:`lecture_notebook` shapes a deck (each cell keeps its
    notebook index in ``data-cell``), paragraphs and outputs chosen by the metadata,
    asserts left out of the code, a slide's ``"title"`` shown as its heading, and the
    summary slide (``"summary": true``) moved to the end of the deck."""
    shaped = lecture_notebook(nb, slides=True, solutions=solutions)
    slides: list[list] = []  # the deck's cells, slide by slide (notebook order)
    starts: list[tuple[int, str, bool]] = []
    for index, (cell, orig) in enumerate(zip(shaped.cells, nb.cells, strict=True)):
        spec = lecture_spec(orig)
        if spec is None:
            continue
        show = cell.metadata.setdefault("slideshow", {})
        kind = show["slide_type"] = spec.get("slide", "-")
        if kind in ("slide", "subslide") or not slides:
            slides.append([])
            starts.append((index, kind, spec.get(SUMMARY_KEY) is True))
        if spec.get("big"):  # a figure slide: the figure may take more of the height
            show.setdefault("data", {})["kv_big"] = "1"
        if cell.cell_type == "markdown":
            cell.source = lecture_markdown(cell, spec)
        elif cell.cell_type == "code":
            cell.source = without_asserts(cell.source)
            what = spec.get("show", "all")
            if what == "output":
                cell.metadata.setdefault("transient", {})["remove_source"] = True
            elif what == "code":
                cell.outputs = []
        title = spec.get(TITLE_KEY)
        if kind in ("slide", "subslide") and isinstance(title, str) and title.strip():
            heading = f"{TITLE_HEADING} {title.strip()}"
            if cell.cell_type == "markdown":
                cell.source = f"{heading}\n\n{cell.source}"
            else:  # a slide that starts with code or a figure: its heading goes first
                import nbformat

                head = nbformat.v4.new_markdown_cell(heading)
                head.metadata["slideshow"] = copy.deepcopy(show)
                show["slide_type"] = "-"
                slides[-1].append(head)
        slides[-1].append(cell)
    if not slides:
        raise ValueError("no cell has lecture metadata: the lesson has no lecture deck")
    shaped.cells = [cell for i in deck_order(starts) for cell in slides[i]]
    return shaped


def inline_markdown(text: str) -> str:
    """``text`` (one line of markdown: a slide title) as inline HTML: ``**bold**``, ``*em*``
    and backticks become tags, ``$...$`` stays for MathJax, the rest is escaped."""
    from nbconvert.filters.markdown import markdown2html

    rendered = markdown2html(text).strip()
    return re.sub(r"^<p>(.*)</p>$", r"\1", rendered, flags=re.S)


TIME_LINE = re.compile(r"\*\*Time\*\*\s*:?\s*(.*)")
CORE_MINUTES = re.compile(r"~\s*(\d+)\s*min")
OPTIONAL_MINUTES = re.compile(
    r"~\s*(\d+)\s*(?:min(?:utes)?\s+)?(?:(?:for|of|in)\s+)?(?:the\s+)?optional", re.I
)


def lesson_time(path: str | Path) -> tuple[str, str]:
    """(a short form, the whole text) of a lesson's ``**Time**:`` paragraph, e.g.
    ``("~45 min + ~30 min optional", "~45 minutes (about 20 of reading ...) ...")``.

    The whole text is every line of the paragraph (lesson_info keeps only its first line,
    which a line break in the notebook can cut mid-sentence); the short form is the core's
    minutes and the optional part's, or the whole text when those cannot be read.
    """
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "markdown" or "**Difficulty**" in cell.source:
            continue
        lines = cell.source.splitlines()
        for i, line in enumerate(lines):
            if (m := TIME_LINE.search(line)) is None:
                continue
            parts = [m.group(1)]
            for more in lines[i + 1 :]:  # the paragraph goes on until a blank line or a field
                if not more.strip() or re.match(r"\s*(?:\*\*|[-*+] |#|\||>|\d+\. )", more):
                    break
                parts.append(more.strip())
            full = " ".join(p.strip() for p in parts).strip().rstrip(".")
            core = CORE_MINUTES.search(full)
            if core is None:
                return full, full
            short = f"~{core.group(1)} min"
            if (opt := OPTIONAL_MINUTES.search(full)) is not None:
                short += f" + ~{opt.group(1)} min optional"
            return short, full
    return "", ""


def mathjax_html(url: str = LOCAL_URLS["mathjax_url"]) -> str:
    """The MathJax of the decks and handouts (kv_common/kv_mathjax.html.j2), for pages
    built here (the outlines)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES / "kv_common"))
    return str(env.get_template("kv_mathjax.html.j2").module.kv_mathjax(url))


def outline_html(lesson: Lesson, nb) -> str:
    """A printable one-page outline of the lecture deck: titles, notes and minutes."""
    from nbconvert.filters.markdown import markdown2html

    slides = lecture_slides(nb)
    rows = []
    for s in slides:
        notes = "".join(markdown2html(notes_body(n)[1]) for n in s.notes)
        minutes = f"{s.minutes:g}" if s.minutes is not None else "?"
        title = inline_markdown(s.title or s.label)  # **bold**, `code`, $x$ as they show
        rows.append(
            f'<tr><td class="n">{s.number}</td><td class="t">{title}</td>'
            f'<td class="m">{minutes}</td><td class="notes">{notes}</td></tr>'
        )
    total = sum(s.minutes or 0 for s in slides)
    body = "\n".join(rows)
    title = html.escape(lesson.title)
    deck = html.escape(lesson.stem) + ".slides.html"
    deck_link = f'<a href="{deck}">{deck}</a>'
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} — lecture outline</title>
{mathjax_html()}
<style>
@page {{ size: A4; margin: 12mm; }}
body {{ font-family: system-ui, sans-serif; font-size: 10.5pt; line-height: 1.35; color: #222;
       max-width: 60rem; margin: 1rem auto; padding: 0 1rem; }}
h1 {{ font-size: 15pt; margin: 0 0 4px 0; }} .sub {{ color: #555; margin: 0 0 8px 0; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ border-top: 1px solid #ccc; padding: 3px 6px; vertical-align: top; text-align: left; }}
td.n, td.m {{ width: 2.5em; text-align: right; color: #555; }}
td.t {{ width: 14em; font-weight: 600; }}
td.notes p {{ margin: 0 0 3px 0; }} code {{ font-size: 95%; }}
</style>
</head>
<body>
<h1>{title} — lecture outline</h1>
<p class="sub">{len(slides)} slides · {total:g} minutes · deck: {deck_link}
(S for the speaker view)</p>
<table>
<thead><tr><th>#</th><th>slide</th><th>min</th>
<th>notes: what to say, what to ask, the answer</th></tr></thead>
<tbody>
{body}
</tbody>
</table>
</body>
</html>
"""


def _export(
    kind: str,
    lessons: list[Lesson],
    out: Path,
    suffix: str,
    solutions: bool,
    lecture: bool = False,
) -> list[Path]:
    import nbformat

    exporter = _exporter(kind)
    written = []
    for lesson in lessons:
        nb = nbformat.read(lesson.path, as_version=4)
        for problem in alt_text_problems(nb):
            print(f"alt text: {lesson.stem} {problem}", file=sys.stderr)
        if lecture and any(lecture_spec(c) is not None for c in nb.cells):
            shaped = lecture_deck_notebook(nb, solutions=solutions)
        elif lecture:  # a lesson not yet given a lecture deck: the whole lesson stands in
            print(
                f"lecture deck: {lesson.stem} has no cell with metadata['lecture']: its default "
                "deck is the whole lesson until its author chooses the lecture slides",
                file=sys.stderr,
            )
            shaped = lecture_notebook(nb, slides=True, solutions=solutions)
        else:
            shaped = lecture_notebook(nb, slides=kind == "slides", solutions=solutions)
        body, _ = exporter.from_notebook_node(
            shaped,
            resources={"metadata": {"name": lesson.title, "path": str(lesson.path.parent)}},
        )
        target = out / f"{lesson.stem}{suffix}"
        _check_offline(body, target)
        target.write_text(body, encoding="utf-8")
        written.append(target)
    return written


def _paths(notebooks, out, node_modules, kind: str) -> tuple[Path, Path, Path]:
    """Default folders: the course checkout's notebooks/, build/<kind>/ and node_modules/."""
    if notebooks is None or out is None or node_modules is None:
        root = course_root()
        notebooks = root / "notebooks" if notebooks is None else notebooks
        out = root / "build" / kind if out is None else out
        node_modules = root / "node_modules" if node_modules is None else node_modules
    return Path(notebooks), Path(out), Path(node_modules)


def _lessons_or_fail(notebooks: Path) -> list[Lesson]:
    lessons = discover_lessons(notebooks)
    if not lessons:
        raise FileNotFoundError(f"no lessons (NN_name.ipynb) in {notebooks}")
    return lessons


def build_slides(
    notebooks: str | Path | None = None,
    out: str | Path | None = None,
    node_modules: str | Path | None = None,
    *,
    solutions: bool = False,
    full: bool = True,
) -> list[Path]:
    """Write the decks of every lesson into ``out``; return the lecture decks' paths.

    Per lesson: the lecture deck ``NN_*.slides.html`` (the cells with ``lecture``
    metadata; the default deck), its printable outline ``NN_*.outline.html``, and unless
    ``full=False`` the whole notebook as slides, ``NN_*.full.slides.html`` (the cells'
    slideshow metadata). Exercise solutions are hidden unless ``solutions=True`` (see
    :func:`without_solutions`). The decks load reveal.js, require.js, jQuery and MathJax
    from ``out/reveal.js`` and ``out/vendor`` (copied from ``node_modules``).
    """
    import nbformat

    notebooks, out, node_modules = _paths(notebooks, out, node_modules, "slides")
    lessons = _lessons_or_fail(notebooks)
    out.mkdir(parents=True, exist_ok=True)
    _copy_assets(Path(node_modules), out, REVEAL_FILES + VENDOR_FILES)
    written = _export("slides", lessons, out, ".slides.html", solutions, lecture=True)
    for lesson in lessons:
        nb = nbformat.read(lesson.path, as_version=4)
        for problem in lecture_problems(nb):
            print(f"lecture deck: {lesson.stem} {problem}", file=sys.stderr)
        target = out / f"{lesson.stem}.outline.html"
        page = outline_html(lesson, nb)
        _check_offline(page, target)
        target.write_text(page, encoding="utf-8")
    if full:
        _export("slides", lessons, out, FULL_SUFFIX, solutions)
    _write_index(out, lessons, ".slides.html", "slides", full=full)
    return written


def build_handouts(
    notebooks: str | Path | None = None,
    out: str | Path | None = None,
    node_modules: str | Path | None = None,
    *,
    solutions: bool = False,
) -> list[Path]:
    """Write one standalone HTML page per lesson, and ``index.html``, into ``out``.

    The stored outputs are used as they are (no execution); figures are embedded as
    ``data:image/png``. Exercise solutions are hidden unless ``solutions=True`` (see
    :func:`without_solutions`). Returns the lesson pages written (without the index).
    """
    notebooks, out, node_modules = _paths(notebooks, out, node_modules, "html")
    lessons = _lessons_or_fail(notebooks)
    out.mkdir(parents=True, exist_ok=True)
    _copy_assets(Path(node_modules), out, VENDOR_FILES)
    written = _export("html", lessons, out, ".html", solutions)
    _write_index(out, lessons, ".html", "handouts")
    return written


def index_html(lessons: list[Lesson], suffix: str, what: str, *, full: bool = False) -> str:
    """The index page: one list item per lesson, in order, with its title and time.

    For decks (``what == "slides"``) each item also links the lecture outline and, with
    ``full``, the whole-notebook deck.
    """
    rows = []
    for lesson in lessons:
        short, full = lesson_time(lesson.path)
        time = (
            f' <span class="time" title="{html.escape(full)}">— {html.escape(short)}</span>'
            if short
            else ""
        )
        extra = ""
        if what == "slides":
            extra = (
                f' · <a class="outline" href="{html.escape(lesson.stem)}.outline.html">outline</a>'
            )
            if full:
                extra += (
                    f' · <a class="full" href="{html.escape(lesson.stem + FULL_SUFFIX)}">'
                    "the whole lesson as slides</a>"
                )
        rows.append(
            f'  <li><a href="{html.escape(lesson.stem + suffix)}">'
            f"{html.escape(lesson.title)}</a>{time}{extra}</li>"
        )
    items = "\n".join(rows)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Key Vectors — lesson {what}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; padding: 0 1rem;
       line-height: 1.5; color: #222; }}
ul {{ list-style: none; padding: 0; }} li {{ margin: 0.4rem 0; }} .time {{ color: #666; }}
</style>
</head>
<body>
<h1>Key Vectors — lesson {what}</h1>
<p>Attention through its key vectors: softmax(QKᵀ/√d_k) V. Open a lesson below; these pages
work offline, without Python.</p>
<ul class="lessons">
{items}
</ul>
</body>
</html>
"""


def _write_index(
    out: Path, lessons: list[Lesson], suffix: str, what: str, *, full: bool = False
) -> None:
    target = out / "index.html"
    page = index_html(lessons, suffix, what, full=full)
    _check_offline(page, target)
    target.write_text(page, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvstaff.lecture",
        description="Build lecture slides or HTML handouts.",
    )
    parser.add_argument("what", choices=["slides", "html"])
    parser.add_argument("--notebooks", default=None, help="default: the course's notebooks/")
    parser.add_argument("--out", default=None, help="default: build/slides or build/html")
    parser.add_argument("--node-modules", default=None)
    parser.add_argument(
        "--solutions", action="store_true", help="keep exercise solutions (instructor copy)"
    )
    args = parser.parse_args(argv)
    build = build_slides if args.what == "slides" else build_handouts
    notebooks, out, node_modules = _paths(args.notebooks, args.out, args.node_modules, args.what)
    written = build(notebooks, out, node_modules, solutions=args.solutions)
    for p in written:
        print(p.relative_to(Path.cwd()) if p.is_relative_to(Path.cwd()) else p)
    print(f"{len(written)} lessons → {out}/index.html", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
