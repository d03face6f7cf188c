"""Lecture decks chosen in the lesson: what ``metadata["lecture"]`` means, and the rules.

:mod:`kvstaff.lecture` builds the pages; this module reads a lesson's choice of
lecture slides and measures it, without nbconvert or a browser.

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
(MathJax), never TeX inside a code span.

Speaker notes, set apart for learners
-------------------------------------
A speaker-notes cell is a markdown cell with ``metadata.slideshow.slide_type == "notes"``
whose first line is the marker ``**For lecturers**`` (:data:`LECTURER_MARK`), followed by
``· ~N min`` on a lecture slide. It is stored collapsed (``metadata.jupyter.source_hidden``:
JupyterLab 4 shows only that first line until it is clicked), is the ``<aside
class="notes">`` of its slide in the decks (key ``S``), and a closed "For lecturers" aside in
the handouts. A lecture slide's notes say the longer explanation, then ``**Ask the room**:``
a question and ``**Expected answer**:`` what the room should come to.
"""

from __future__ import annotations

import ast
import re

__all__ = [
    "CHECK_TAG",
    "LECTURER_MARK",
    "LECTURE_KEY",
    "LECTURE_MINUTES",
    "LECTURE_SLIDES",
    "MAX_CODE_LINES",
    "MAX_WORDS",
    "NOTES_TYPE",
    "LectureSlide",
    "is_check_cell",
    "is_notes_cell",
    "lecture_markdown",
    "lecture_problems",
    "lecture_slides",
    "lecture_spec",
    "notes_body",
    "shown_source",
    "tex_code_spans",
    "without_asserts",
]

NOTES_TYPE = "notes"  # slideshow.slide_type of a speaker-notes cell
CHECK_TAG = "check"  # cell tag: a cell that only checks (left out of decks)
LECTURE_KEY = "lecture"  # cell metadata: the cell is on the lecture deck (module docstring)
LECTURER_MARK = "**For lecturers**"  # the first line of every speaker-notes cell
LECTURE_SLIDES = (12, 18)  # slides in a lecture deck, at least and at most
LECTURE_MINUTES = (10, 15)  # the minutes its notes add up to, at least and at most
MAX_CODE_LINES = 12  # lines of code on one lecture slide, at most
MAX_WORDS = 120  # words of prose on one lecture slide, at most (a formula counts as one)
# Harness lines never shown on a slide or a handout.
MARKER_LINE = re.compile(r"^\s*#\s*NBVAL_[A-Z_]+\s*$")
TRAILING_PRAGMA = re.compile(r"\s*#\s*(?:fmt:\s*(?:skip|off|on)|noqa\b[^#\n]*)\s*$")


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


def shown_source(source: str) -> str:
    """The code as decks and handouts show it: no harness marker lines or pragmas."""
    lines = [TRAILING_PRAGMA.sub("", ln) for ln in source.splitlines() if not MARKER_LINE.match(ln)]
    return "\n".join(lines).strip("\n")


def is_notes_cell(cell) -> bool:
    """A speaker-notes cell: markdown with ``slideshow.slide_type == "notes"``."""
    return (
        cell.get("cell_type") == "markdown"
        and cell.get("metadata", {}).get("slideshow", {}).get("slide_type") == NOTES_TYPE
    )


def lecture_spec(cell) -> dict | None:
    spec = cell.get("metadata", {}).get(LECTURE_KEY)
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise TypeError(f"metadata[{LECTURE_KEY!r}] must be a dict, got {spec!r}")
    return spec


PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def _paragraphs(source: str) -> list[str]:
    return [p.strip("\n") for p in PARAGRAPH_BREAK.split(source) if p.strip()]


def lecture_markdown(cell, spec: dict) -> str:
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


def without_asserts(source: str) -> str:
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
    first = next((ln for ln in markdown.splitlines() if ln.strip()), "").strip()
    if len(first) <= 60:
        return first
    return first[:60].rsplit(" ", 1)[0].rstrip(",;:") + " …"


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
        spec = lecture_spec(cell)
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
            text = lecture_markdown(cell, spec)
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
        code = without_asserts(shown_source(cell.source))
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


def notes_body(source: str) -> tuple[str, str]:
    """(the first line after the marker, e.g. '~1 min', the rest) of a notes cell."""
    first, _, rest = source.lstrip().partition("\n")
    head = first.replace(LECTURER_MARK, "").strip(" ·—-")
    return head, rest.strip()
