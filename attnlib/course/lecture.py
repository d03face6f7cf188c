"""Lecture mode: reveal.js slides and standalone HTML handouts from the lessons.

``python -m attnlib.course.lecture slides`` (``make slides``) and
``python -m attnlib.course.lecture html`` (``make html``) turn every lesson
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
  author chose for a 10–15 minute talk, by cell metadata (below);
* ``NN_*.outline.html`` — a printable one-page outline of that deck: each slide's title,
  its speaker notes and its minutes, and the total;
* ``NN_*.full.slides.html`` — the whole notebook as slides (the cells' slideshow metadata),
  for walking through a lesson in class.

The lecture deck (``metadata["lecture"]``)
------------------------------------------
A cell is on the lecture deck when its metadata has a ``"lecture"`` dict; every other cell
is left out of it. Nothing is copied: a slide shows the lesson's own cells.

* ``{"slide": "slide"}`` starts a lecture slide (``"subslide"`` a vertical one below the
  previous slide); ``{"slide": "-"}`` (or ``{}``) adds the cell to the current slide;
  ``{"slide": "fragment"}`` adds it as a step that appears on the next key press.
* ``{"slide": "notes"}`` on a speaker-notes cell (below) makes it the notes of the current
  lecture slide. Every lecture slide has one.
* ``"paragraphs": [0, 2]`` on a markdown cell shows only those paragraphs (blocks between
  blank lines, counted from 0) — a heading and its key sentence, not the whole section.
* ``"show": "output"`` on a code cell shows only what it drew or printed (a figure without
  its plotting code); ``"show": "code"`` only its code; the default ``"all"`` both.
* ``"big": true`` on the cell that starts a slide lets its figure take up to 640 px of the
  720 (500 px otherwise): for a slide that is one tall figure, whose text would otherwise be
  shrunk below projector size.
* On a lecture slide, ``assert`` statements are left out of the code shown (the notebook
  asserts its numbers; the lecture states them).

The rules a lecture deck keeps (:func:`lecture_problems` lists what breaks them; the tests
``tests/test_lecture_decks.py`` and, measured in Chromium, ``tests/test_browser.py`` apply
them to every lesson): :data:`LECTURE_SLIDES` slides; speaker notes on every slide, each
with the minutes it takes (:data:`LECTURE_MINUTES` in all), a question to ask the room and
its expected answer; at most :data:`MAX_CODE_LINES` lines of code and :data:`MAX_WORDS`
words of prose a slide; no check cell, no exercise solution, no output of a cell that calls
an exercise's function (a learner's copy has only its stub there); formulas as ``$...$``
(MathJax), never TeX inside a ```code span```.

Speaker notes, set apart for learners
-------------------------------------
A speaker-notes cell is a markdown cell with ``metadata.slideshow.slide_type == "notes"``
whose first line is the marker ``**For lecturers**`` (:data:`LECTURER_MARK`), followed by
``· ~N min`` on a lecture slide. It is stored collapsed (``metadata.jupyter.source_hidden``:
JupyterLab 4 shows only that first line until it is clicked), is the ``<aside
class="notes">`` of its slide in the decks (key ``S``), and a closed "For lecturers" aside in
the handouts. A lecture slide's notes say the longer explanation, then ``**Ask the room**:``
a question and ``**Expected answer**:`` what the room should come to.

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
cell, and ``window.kvSlideFit()`` in a deck measures every slide.
"""

from __future__ import annotations

import argparse
import ast
import copy
import html
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

from attnlib.course.lessons import Lesson, course_root, discover_lessons, lesson_info

__all__ = [
    "ALT_KEY",
    "CHECK_TAG",
    "LECTURE_KEY",
    "LECTURER_MARK",
    "LECTURE_MINUTES",
    "LECTURE_SLIDES",
    "MAX_CODE_LINES",
    "MAX_WORDS",
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
    "is_check_cell",
    "lecture_notebook",
    "lesson_info",
    "local_resources",
    "remote_resources",
    "without_solutions",
]

TEMPLATES = Path(__file__).resolve().parent / "lecture_templates"

SLIDE_SIZE = (1280, 720)  # reveal.js width and height: every slide must fit
NOTES_TYPE = "notes"  # slideshow.slide_type of a speaker-notes cell
ALT_KEY = "alt_text"  # cell metadata: str, or list of str (one per image output)
CHECK_TAG = "check"  # cell tag: a cell that only checks (left out of decks)
LECTURE_KEY = "lecture"  # cell metadata: the cell is on the lecture deck (module docstring)
LECTURER_MARK = "**For lecturers**"  # the first line of every speaker-notes cell
LECTURE_SLIDES = (12, 18)  # slides in a lecture deck, at least and at most
LECTURE_MINUTES = (10, 15)  # the minutes its notes add up to, at least and at most
MAX_CODE_LINES = 12  # lines of code on one lecture slide, at most
MAX_WORDS = 120  # words of prose on one lecture slide, at most (a formula counts as one)
FULL_SUFFIX = ".full.slides.html"  # the whole notebook as slides (the second build)
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")
# Harness lines never shown on a slide or a handout.
MARKER_LINE = re.compile(r"^\s*#\s*NBVAL_[A-Z_]+\s*$")
TRAILING_PRAGMA = re.compile(r"\s*#\s*(?:fmt:\s*(?:skip|off|on)|noqa\b[^#\n]*)\s*$")

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


def remote_resources(page: str) -> list[tuple[str, str]]:
    """``(kind, url)`` for everything ``page`` would fetch over the network.

    Kinds: ``script``, ``stylesheet``, ``img``/``iframe``/``source``/``embed``,
    ``css-import``, ``module-import``, ``require``. Protocol-relative ``//host`` URLs
    count as remote; ``data:`` and relative URLs do not.
    """
    return [(k, u) for k, u in _resources(page) if re.match(r"^(https?:)?//", u.strip(), re.I)]


def local_resources(page: str) -> list[str]:
    """Relative URLs ``page`` loads (query strings and fragments dropped), to check they exist."""
    out = []
    for _, u in _resources(page):
        u = u.strip()
        if re.match(r"^([a-z][a-z0-9+.-]*:|//|#)", u, re.I):
            continue
        out.append(re.split(r"[?#]", u)[0])
    return out


def _check_offline(page: str, where: Path) -> None:
    remote = remote_resources(page)
    if remote:
        listed = "\n".join(f"  {k}: {u}" for k, u in remote)
        raise RuntimeError(f"{where} would load from the network:\n{listed}")
    missing = sorted(
        {u for u in local_resources(page) if not (where.parent / html.unescape(u)).exists()}
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
    learners' copies (:func:`attnlib.course.student.student_version`); the outputs of solution
    cells are dropped, since they would give the answer away, and so are the outputs of the
    graded check cells: their "✔ correct" would follow a stub that raises.
    """
    from attnlib.course.student import student_version

    student = student_version(nb)
    if len(student.cells) != len(nb.cells):
        raise RuntimeError("without_solutions: the student version changed the number of cells")
    for cell, orig in zip(student.cells, nb.cells, strict=True):
        grading = orig.metadata.get("nbgrader", {})
        if orig.cell_type == "code" and not grading.get("solution", False):
            cell.outputs = [] if grading.get("grade", False) else orig.outputs
            cell.execution_count = orig.get("execution_count")
    return student


def _only_asserts(statements) -> bool:
    """True if every statement is an ``assert``, or a loop/with/if holding only asserts."""
    if not statements:
        return False
    for st in statements:
        if isinstance(st, ast.Assert):
            continue
        if isinstance(st, ast.For | ast.While | ast.With) and _only_asserts(st.body):
            if getattr(st, "orelse", None) and not _only_asserts(st.orelse):
                return False
            continue
        if isinstance(st, ast.If) and _only_asserts(st.body):
            if st.orelse and not _only_asserts(st.orelse):
                return False
            continue
        return False
    return True


def is_check_cell(cell) -> bool:
    """A cell that only checks: a graded nbgrader test cell, tagged ``check``, or asserts only.

    Such cells are left out of every deck (see the module docstring).
    """
    if cell.get("cell_type") != "code":
        return False
    meta = cell.get("metadata", {})
    if meta.get("nbgrader", {}).get("grade", False) or CHECK_TAG in meta.get("tags", []):
        return True
    source = "\n".join(
        "" if ln.lstrip().startswith(("%", "!")) else ln for ln in cell.source.splitlines()
    )
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return _only_asserts(tree.body)


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


def _shown_source(source: str) -> str:
    """The code as decks and handouts show it: no harness marker lines or pragmas."""
    lines = [TRAILING_PRAGMA.sub("", ln) for ln in source.splitlines() if not MARKER_LINE.match(ln)]
    return "\n".join(lines).strip("\n")


PROGRESS_LINE = re.compile(r"^.+: (?:\d+ steps|stopped after \d+ of \d+ steps)$")


def _is_progress(output) -> bool:
    """The fixed line a progress bar leaves: a display with attnlib.training's
    PROGRESS_METADATA (or, stored before that metadata existed, a display whose only
    content is the line "<desc>: N steps" — print() makes streams, never such a display)."""
    from attnlib.training import PROGRESS_METADATA

    if output.get("output_type") != "display_data":
        return False
    meta = output.get("metadata", {})
    if all(meta.get(k) == v for k, v in PROGRESS_METADATA.items()):
        return True
    data = output.get("data", {})
    return set(data) == {"text/plain"} and bool(PROGRESS_LINE.match(str(data["text/plain"])))


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
            head, body = _notes_body(cell.source)
            if cell.source.lstrip().startswith(LECTURER_MARK):
                cell.source = body
            cell.metadata["kv_notes"] = head
        if cell.cell_type == "code":
            cell.source = _shown_source(cell.source)
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
            cell.outputs = [o for o in cell.get("outputs", []) if not _is_progress(o)]
        show.setdefault("data", {})["cell"] = str(index)
    return out


# ---------------------------------------------------------------------------- lecture decks


def is_notes_cell(cell) -> bool:
    """A speaker-notes cell: markdown with ``slideshow.slide_type == "notes"``."""
    return (
        cell.get("cell_type") == "markdown"
        and cell.get("metadata", {}).get("slideshow", {}).get("slide_type") == NOTES_TYPE
    )


def _lecture_spec(cell) -> dict | None:
    spec = cell.get("metadata", {}).get(LECTURE_KEY)
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise TypeError(f"metadata[{LECTURE_KEY!r}] must be a dict, got {spec!r}")
    return spec


PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def _paragraphs(source: str) -> list[str]:
    return [p.strip("\n") for p in PARAGRAPH_BREAK.split(source) if p.strip()]


def _lecture_markdown(cell, spec: dict) -> str:
    """The markdown a lecture slide shows: the chosen paragraphs, or all of it."""
    chosen = spec.get("paragraphs")
    if chosen is None:
        return cell.source
    paras = _paragraphs(cell.source)
    return "\n\n".join(paras[i] for i in chosen)


def _assert_lines(body) -> tuple[set[int], bool]:
    """Lines of the ``assert`` statements in ``body`` (a compound statement left with only
    asserts goes whole), and whether every statement of ``body`` goes."""
    dropped: set[int] = set()
    everything = True
    for st in body:
        lines = set(range(st.lineno, (st.end_lineno or st.lineno) + 1))
        if isinstance(st, ast.Assert):
            dropped |= lines
            continue
        bodies = [getattr(st, f, None) or [] for f in ("body", "orelse", "finalbody")]
        bodies += [h.body for h in getattr(st, "handlers", [])]
        if isinstance(st, ast.For | ast.While | ast.If | ast.With | ast.Try) and any(bodies):
            parts = [_assert_lines(b) for b in bodies if b]
            if all(gone for _, gone in parts):
                dropped |= lines
                continue
            if not any(gone for _, gone in parts):  # no branch left empty
                dropped |= set().union(*(d for d, _ in parts))
        everything = False
    return dropped, everything


def _without_asserts(source: str) -> str:
    """``source`` without its ``assert`` statements (all their lines; a loop or ``if`` that
    only asserts goes whole), blank runs squeezed."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        lines = source.splitlines()
        drop = {i for i, ln in enumerate(lines, 1) if ln.lstrip().startswith("assert")}
    else:
        drop, _ = _assert_lines(tree.body)
    kept = [ln for i, ln in enumerate(source.splitlines(), 1) if i not in drop]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept))
    return text.strip("\n")


def _exercise_names(nb) -> set[str]:
    """Functions the exercises ask for (defined in solution cells): stubs in a learner's copy."""
    names = set()
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:
                continue
            names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return names


def _used_names(source: str) -> set[str]:
    """Names ``source`` reads outside its ``assert`` statements (IPython lines ignored)."""
    try:
        tree = ast.parse(
            "\n".join(
                "" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()
            )
        )
    except SyntaxError:
        return set()
    names: set[str] = set()

    def visit(node):
        if isinstance(node, ast.Assert):
            return
        if isinstance(node, ast.Name):
            names.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


TEX_IN_CODE = re.compile(r"\\[A-Za-z]+|[\^_]\{")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)
WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")
MINUTES = re.compile(r"~\s*(\d+(?:\.\d+)?)\s*min")


def tex_code_spans(markdown: str) -> list[str]:
    """Inline code spans of ``markdown`` that hold TeX (``\\sqrt``, ``^{``): write ``$...$``."""
    return [m for m in CODE_SPAN.findall(MATH.sub(" ", markdown)) if TEX_IN_CODE.search(m)]


def _prose_words(markdown: str) -> int:
    """Words a slide's prose shows (whitespace-separated, with a letter or digit): a formula
    counts as one, link targets and markup not."""
    text = MATH.sub(" X ", markdown)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", " ", text)
    return sum(1 for token in text.split() if WORD.search(token))


def _code_lines(source: str) -> int:
    return sum(1 for ln in source.splitlines() if ln.strip())


def _title(markdown: str) -> str:
    for ln in markdown.splitlines():
        if ln.lstrip().startswith("#"):
            return ln.lstrip("# ").strip()
    first = next((ln for ln in markdown.splitlines() if ln.strip()), "")
    return first.strip()[:60]


class LectureSlide:
    """One slide of a lesson's lecture deck, with what the rules measure.

    Attributes
    ----------
    number : 1-based position in the deck.
    cells : notebook indices of the cells on it (notes cells not included).
    title : its first heading (or first line).
    notes : the source of its speaker-notes cells.
    minutes : the minutes its notes give (``~N min`` on the notes' first line), or None.
    words, code_lines, asserts : prose words, lines of code, ``assert`` lines shown.
    tex_spans : code spans holding TeX.
    problems : what breaks a rule on this slide (one line each).
    """

    def __init__(self, number: int, first: int, kind: str):
        self.number, self.cells, self.kind = number, [first], kind
        self.title, self.notes, self.minutes = "", [], None
        self.words = self.code_lines = self.asserts = 0
        self.tex_spans: list[str] = []
        self.problems: list[str] = []

    def __repr__(self):
        return f"LectureSlide({self.number}, cell {self.cells[0]}, {self.title!r})"


def lecture_slides(nb) -> list[LectureSlide]:
    """The lecture deck of ``nb`` as slides, measured (see the module docstring's rules)."""
    slides: list[LectureSlide] = []
    names = _exercise_names(nb)
    markdown_of: dict[int, str] = {}
    for index, cell in enumerate(nb.cells):
        spec = _lecture_spec(cell)
        if spec is None:
            continue
        kind = spec.get("slide", "-")
        if kind not in ("slide", "subslide", "fragment", "-", NOTES_TYPE):
            raise ValueError(
                f"cell {index}: lecture slide {kind!r} is not one of slide, "
                "subslide, fragment, -, notes"
            )
        if kind in ("slide", "subslide") or not slides:
            slides.append(LectureSlide(len(slides) + 1, index, kind))
            if kind not in ("slide", "subslide"):
                slides[-1].problems.append(f"cell {index} comes before any lecture slide starts")
        slide = slides[-1]
        where = f"cell {index}"
        if kind == NOTES_TYPE:
            if not is_notes_cell(cell):
                slide.problems.append(f"{where}: lecture notes must be a notes cell")
            slide.notes.append(cell.source)
            continue
        if index != slide.cells[0]:
            slide.cells.append(index)
        if is_notes_cell(cell):
            slide.problems.append(f"{where}: a notes cell on the slide (give it slide: notes)")
        if cell.cell_type == "markdown":
            text = _lecture_markdown(cell, spec)
            markdown_of[index] = text
            slide.words += _prose_words(text)
            slide.tex_spans += tex_code_spans(text)
            if not slide.title:
                slide.title = _title(text)
            continue
        if cell.cell_type != "code":
            continue
        grading = cell.metadata.get("nbgrader", {})
        if grading.get("solution"):
            slide.problems.append(f"{where}: an exercise's solution cell")
        if is_check_cell(cell):
            slide.problems.append(f"{where}: a check cell")
        show = spec.get("show", "all")
        if "checks.check" in cell.source and show != "output":
            slide.problems.append(f"{where}: shows a checks.check call")
        if show not in ("all", "code", "output"):
            slide.problems.append(f"{where}: show {show!r} is not all, code or output")
        code = _without_asserts(_shown_source(cell.source))
        if show != "output":
            slide.code_lines += _code_lines(code)
            slide.asserts += sum(ln.lstrip().startswith("assert") for ln in code.splitlines())
        if show != "code" and cell.get("outputs"):
            stubs = sorted(_used_names(cell.source) & names)
            if stubs:
                slide.problems.append(
                    f"{where}: shows the output of {', '.join(stubs)}, a stub in a learner's copy"
                )
    for slide in slides:
        label = f"slide {slide.number} (cell {slide.cells[0]}) {slide.title[:40]!r}"
        if not slide.notes:
            slide.problems.append("no speaker notes")
        for note in slide.notes:
            first = note.lstrip().split("\n", 1)[0]
            if not first.startswith(LECTURER_MARK):
                slide.problems.append(f"notes do not start with {LECTURER_MARK}")
            if (m := MINUTES.search(first)) is None:
                slide.problems.append("notes give no time ('~N min' on their first line)")
            else:
                slide.minutes = (slide.minutes or 0) + float(m.group(1))
            if "**Ask the room**" not in note or "**Expected answer**" not in note:
                slide.problems.append("notes lack **Ask the room** or **Expected answer**")
        if slide.words > MAX_WORDS:
            slide.problems.append(f"{slide.words} words (at most {MAX_WORDS})")
        if slide.code_lines > MAX_CODE_LINES:
            slide.problems.append(f"{slide.code_lines} lines of code (at most {MAX_CODE_LINES})")
        if slide.asserts:
            slide.problems.append(f"{slide.asserts} assert lines")
        if slide.tex_spans:
            slide.problems.append(f"TeX in code spans: {slide.tex_spans}")
        slide.problems = [f"{label}: {p}" for p in slide.problems]
    return slides


def lecture_problems(nb) -> list[str]:
    """Every rule the lecture deck of ``nb`` breaks, one line each (empty: a good deck)."""
    slides = lecture_slides(nb)
    problems = [p for s in slides for p in s.problems]
    lo, hi = LECTURE_SLIDES
    if not lo <= len(slides) <= hi:
        problems.insert(0, f"{len(slides)} lecture slides (want {lo}-{hi})")
    total = sum(s.minutes or 0 for s in slides)
    lo, hi = LECTURE_MINUTES
    if slides and not lo <= total <= hi:
        problems.insert(0, f"the notes' times add up to {total:g} min (want {lo}-{hi})")
    return problems


def lecture_deck_notebook(nb, *, solutions: bool = False):
    """The lecture deck of ``nb`` as a notebook for the reveal exporter: its ``lecture``
    cells only, shaped as :func:`lecture_notebook` shapes a deck (each cell keeps its
    notebook index in ``data-cell``), paragraphs and outputs chosen by the metadata,
    asserts left out of the code."""
    shaped = lecture_notebook(nb, slides=True, solutions=solutions)
    kept = []
    for cell, orig in zip(shaped.cells, nb.cells, strict=True):
        spec = _lecture_spec(orig)
        if spec is None:
            continue
        show = cell.metadata.setdefault("slideshow", {})
        show["slide_type"] = spec.get("slide", "-")
        if spec.get("big"):  # a figure slide: the figure may take more of the height
            show.setdefault("data", {})["kv_big"] = "1"
        if cell.cell_type == "markdown":
            cell.source = _lecture_markdown(cell, spec)
        elif cell.cell_type == "code":
            cell.source = _without_asserts(cell.source)
            what = spec.get("show", "all")
            if what == "output":
                cell.metadata.setdefault("transient", {})["remove_source"] = True
            elif what == "code":
                cell.outputs = []
        kept.append(cell)
    if not kept:
        raise ValueError("no cell has lecture metadata: the lesson has no lecture deck")
    shaped.cells = kept
    return shaped


def _notes_body(source: str) -> tuple[str, str]:
    """(the first line after the marker, e.g. '~1 min', the rest) of a notes cell."""
    first, _, rest = source.lstrip().partition("\n")
    head = first.replace(LECTURER_MARK, "").strip(" ·—-")
    return head, rest.strip()


def outline_html(lesson: Lesson, nb) -> str:
    """A printable one-page outline of the lecture deck: titles, notes and minutes."""
    from nbconvert.filters.markdown import markdown2html

    slides = lecture_slides(nb)
    rows = []
    for s in slides:
        notes = "".join(markdown2html(_notes_body(n)[1]) for n in s.notes)
        minutes = f"{s.minutes:g}" if s.minutes is not None else "?"
        rows.append(
            f'<tr><td class="n">{s.number}</td><td class="t">{html.escape(s.title)}</td>'
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
<script src="vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"></script>
<script type="text/x-mathjax-config">
MathJax.Hub.Config({{tex2jax: {{inlineMath: [['$','$']], displayMath: [['$$','$$']],
  processEscapes: true}}}});
</script>
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
        if lecture:
            shaped = lecture_deck_notebook(nb, solutions=solutions)
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
        time = f' <span class="time">— {html.escape(lesson.time)}</span>' if lesson.time else ""
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
        prog="python -m attnlib.course.lecture",
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
