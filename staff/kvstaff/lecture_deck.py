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
* ``"title": "Short title"`` on the cell that starts a slide is the slide's heading, shown
  on the deck only (the lesson in JupyterLab is unchanged). A slide whose first cell is
  markdown starting with a ``#`` heading has its title already; every other slide needs one.
* ``"summary": true`` on the cell that starts a slide (``"slide": "slide"``) marks the
  lesson's summary slide: the deck shows it last, after any optional slides. Exactly one
  slide of a deck is the summary, and its title says "Summary".
* ``"paragraphs": [0, 2]`` on a markdown cell shows only those paragraphs (blocks between
  blank lines, counted from 0) — a heading and its key sentence, not the whole section.
* ``"show": "output"`` on a code cell shows only what it drew or printed (a figure without
  its plotting code); ``"show": "code"`` only its code (for a cell without outputs, or whose
  outputs are an exercise stub's); the default ``"all"`` both.
* ``"big": true`` on the cell that starts a slide lets its figure take up to 640 px of the
  720 (500 px otherwise): for a slide that is one tall figure, whose text would otherwise be
  shrunk below projector size.
* On a lecture slide, ``assert`` statements are left out of the code shown (the notebook
  asserts its numbers; the lecture states them).

The rules a lecture deck keeps
------------------------------
:func:`lecture_problems` lists what breaks them; ``tests/test_lecture_decks.py`` and,
measured in Chromium, ``tests/test_browser.py`` apply them to every lesson.

1. :data:`LECTURE_SLIDES` slides; speaker notes on every slide, each with the minutes it
   takes (:data:`LECTURE_MINUTES` in all).
2. Every slide has a title: its first cell is markdown starting with a ``#`` heading, or
   the spec of the cell that starts it gives ``"title"`` (not both: two headings).
3. Exactly one slide is the summary (``"summary": true``); its title contains "Summary";
   the deck shows it last.
4. :data:`ASK_THE_ROOM` slides' notes (3 to 6) hold ``**Ask the room**:`` a question, with
   ``**Expected answer**:`` what the room should say, concretely: never empty, never
   "answers vary", "let them guess", "open", "discuss" (:data:`VAGUE_ANSWER`). The other
   slides' notes keep the explanation, and may add ``**If time**:`` a question.
5. At most :data:`MAX_CODE_LINES` lines of code shown on a slide, counting every line
   displayed (blank lines and comments too; asserts and harness lines are not shown), and
   at most :data:`MAX_WORDS` words of prose.
6. No dangling lead-in: shown markdown that ends with a colon is followed, on the same
   slide, by shown code or output. No code without its output: ``"show": "code"`` only on a
   cell without outputs (or whose outputs are an exercise stub's). No nearly empty slide:
   one that shows no code and no output has at least :data:`MIN_WORDS` words of prose.
7. No check cell, no exercise solution, no output of a cell that calls an exercise's
   function (a learner's copy has only its stub there); formulas as ``$...$`` (MathJax),
   never TeX inside a code span.

Speaker notes, set apart for learners
-------------------------------------
A speaker-notes cell is a markdown cell with ``metadata.slideshow.slide_type == "notes"``
whose first line is the marker ``For lecturers`` (:data:`LECTURER_MARK`, plain text: JupyterLab
shows a collapsed cell's first line as written, so ``**`` would show), followed by ``· ~N
min`` on a lecture slide. The bold ``**For lecturers**`` of the lessons before issue 38 is
still read (:data:`LECTURER_MARKS`). It is stored collapsed (``metadata.jupyter.source_hidden``:
JupyterLab 4 shows only that first line until it is clicked), is the ``<aside
class="notes">`` of its slide in the decks (key ``S``), and a closed "For lecturers" aside in
the handouts. A lecture slide's notes say the longer explanation; on 3 to 6 slides of a deck
they then ask ``**Ask the room**:`` a question, with ``**Expected answer**:`` what the room
should come to.
"""

from __future__ import annotations

import ast
import re

__all__ = [
    "CHECK_TAG",
    "LECTURER_MARK",
    "LECTURER_MARKS",
    "LECTURE_KEY",
    "LECTURE_MINUTES",
    "LECTURE_SLIDES",
    "MAX_CODE_LINES",
    "MAX_WORDS",
    "MIN_WORDS",
    "ASK_THE_ROOM",
    "NOTES_TYPE",
    "SUMMARY_KEY",
    "TITLE_KEY",
    "LectureSlide",
    "deck_order",
    "expected_answers",
    "is_check_cell",
    "is_notes_cell",
    "is_progress_output",
    "lecture_markdown",
    "lecture_problems",
    "lecture_slides",
    "lecture_spec",
    "notes_body",
    "notes_marked",
    "notes_marker_plain",
    "shown_source",
    "tex_code_spans",
    "without_asserts",
]

NOTES_TYPE = "notes"  # slideshow.slide_type of a speaker-notes cell
CHECK_TAG = "check"  # cell tag: a cell that only checks (left out of decks)
LECTURE_KEY = "lecture"  # cell metadata: the cell is on the lecture deck (module docstring)
LECTURER_MARK = "For lecturers"  # what the first line of every speaker-notes cell starts with
# The first forms accepted: the plain mark, and the bold one every lesson had before issue 38
# (JupyterLab's collapsed cell shows the first line as written: "**" showed there).
LECTURER_MARKS = ("**For lecturers**", LECTURER_MARK)
LECTURE_SLIDES = (12, 18)  # slides in a lecture deck, at least and at most
LECTURE_MINUTES = (10, 15)  # the minutes its notes add up to, at least and at most
MAX_CODE_LINES = 14  # lines of code shown on one lecture slide, at most (blank ones too)
MAX_WORDS = 120  # words of prose on one lecture slide, at most (a formula counts as one)
MIN_WORDS = 15  # words of prose, at least, on a slide that shows no code and no output
ASK_THE_ROOM = (3, 6)  # slides whose notes ask the room a question, at least and at most
ASK_MARK = "**Ask the room**"
ANSWER_MARK = "**Expected answer**"
SUMMARY_KEY = "summary"  # lecture spec: the summary slide (shown last)
TITLE_KEY = "title"  # lecture spec: the slide's heading on the deck
# An output a deck leaves out: the line attnlib.training.progress_bar leaves behind (its
# display metadata is attnlib.training.PROGRESS_METADATA; tests/test_lecture_decks.py
# checks the two agree without importing torch here).
PROGRESS_METADATA = {"attnlib": "progress"}
PROGRESS_LINE = re.compile(r"^.+: (?:\d+ steps|stopped after \d+ of \d+ steps)$")
# An "Expected answer" that gives none: put off to the room, the lesson or a discussion.
VAGUE_ANSWER = re.compile(
    r"\banswers?\s+(?:will\s+|may\s+|can\s+)?(?:vary|differ)\b"
    r"|\blet\s+(?:them|the\s+(?:room|class|students|learners))\b[^.;]*\bguess"
    r"|\bhold\s+(?:the|their|your)\s+answers?\b"
    r"|\blet\s+the\s+(?:measurement|lesson|notebook|experiment|code|data|figure|plot)s?\b"
    r"[^.;]*\banswer"
    r"|\bany\s+(?:answer|guess)\b|\bno\s+(?:single|right|wrong|fixed)\s+answer\b"
    r"|\bopen[- ]ended\b|\bopen\s+question\b|\bdiscuss(?:ion)?\b|\bto\s+be\s+discussed\b"
    r"|^\W*(?:open|depends|it\s+depends|various|varies|tbd|todo|n/?a|see\s+(?:below|above)"
    r"|\?+|\W*)\W*$",
    re.I,
)
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


def _code_lines(code: str) -> int:
    """Lines ``code`` takes on a slide: every line, blank ones and comments too."""
    return len(code.splitlines()) if code.strip() else 0


def is_progress_output(output) -> bool:
    """The fixed line a progress bar leaves: a display with attnlib.training's
    PROGRESS_METADATA (or, stored before that metadata existed, a display whose only
    content is the line "<desc>: N steps" — print() makes streams, never such a display).
    Decks leave it out."""
    if output.get("output_type") != "display_data":
        return False
    meta = output.get("metadata", {})
    if all(meta.get(k) == v for k, v in PROGRESS_METADATA.items()):
        return True
    data = output.get("data", {})
    return set(data) == {"text/plain"} and bool(PROGRESS_LINE.match(str(data["text/plain"])))


def _shown_outputs(cell) -> list:
    return [o for o in cell.get("outputs", []) if not is_progress_output(o)]


HEADING = re.compile(r"^ {0,3}#{1,6}\s+(\S.*?)\s*#*\s*$")


def _heading(markdown: str) -> str | None:
    """The text of the ``#`` heading ``markdown`` starts with, or None."""
    first = next((ln for ln in markdown.splitlines() if ln.strip()), "")
    m = HEADING.match(first)
    return m.group(1) if m else None


def _first_line(markdown: str) -> str:
    for ln in markdown.splitlines():
        if ln.lstrip().startswith("#"):
            return ln.lstrip("# ").strip()
    first = next((ln for ln in markdown.splitlines() if ln.strip()), "").strip()
    if len(first) <= 60:
        return first
    return first[:60].rsplit(" ", 1)[0].rstrip(",;:") + " …"


def _marked(note: str, mark: str) -> list[str]:
    """What follows each ``mark`` (``**Expected answer**:``) in ``note``: the rest of its
    paragraph, or the next paragraph if that is empty."""
    found = []
    for m in re.finditer(re.escape(mark.rstrip("*")) + r"\s*:?\s*\*\*\s*:?", note):
        rest = note[m.end() :]
        paras = [q.strip() for q in PARAGRAPH_BREAK.split(rest)]
        text = paras[0] if paras and paras[0] else (paras[1] if len(paras) > 1 else "")
        found.append(text.strip())
    return found


def expected_answers(note: str) -> list[str]:
    """The text of every ``**Expected answer**:`` in a notes cell (empty if none given)."""
    return _marked(note, ANSWER_MARK)


def _ends_with_colon(markdown: str) -> bool:
    return markdown.rstrip().rstrip("*_ ").endswith(":")


class LectureSlide:
    """One slide of a lesson's lecture deck, with what the rules measure.

    Attributes
    ----------
    number : 1-based position in the deck as shown (the summary slide last).
    cells : notebook indices of the cells on it (notes cells not included).
    kind : "slide" or "subslide" (of the cell that starts it).
    title : its heading: the spec's ``"title"``, or the first cell's ``#`` heading ("" if
        it has none).
    label : the title, or for a slide without one its first line (for messages).
    summary : whether it is the summary slide (``"summary": true``).
    notes : the source of its speaker-notes cells.
    minutes : the minutes its notes give (``~N min`` on the notes' first line), or None.
    asks : whether its notes ask the room a question (``**Ask the room**``).
    words, code_lines, asserts : prose words, lines of code, ``assert`` lines shown.
    outputs : outputs shown (figures, printed text).
    tex_spans : code spans holding TeX.
    problems : what breaks a rule on this slide (one line each).
    """

    def __init__(self, number: int, first: int, kind: str):
        self.number, self.cells, self.kind = number, [first], kind
        self.title = self.label = ""
        self.summary = self.asks = False
        self.notes: list[str] = []
        self.minutes: float | None = None
        self.words = self.code_lines = self.asserts = self.outputs = 0
        self.tex_spans: list[str] = []
        self.problems: list[str] = []

    def __repr__(self):
        return f"LectureSlide({self.number}, cell {self.cells[0]}, {self.label!r})"


def deck_order(starts: list[tuple[int, str, bool]]) -> list[int]:
    """The order a deck shows its slides in: ``starts`` lists each slide's (first cell,
    kind, summary) in notebook order; the summary slide, with any vertical slides below it,
    moves to the end. Returns positions into ``starts``."""
    order = list(range(len(starts)))
    for pos, (_, kind, summary) in enumerate(starts):
        if summary and kind == "slide":
            end = pos + 1
            while end < len(starts) and starts[end][1] == "subslide":
                end += 1
            return order[:pos] + order[end:] + order[pos:end]
    return order


def lecture_slides(nb) -> list[LectureSlide]:
    """The lecture deck of ``nb`` as slides, in the order the deck shows them (the summary
    slide last), measured (see the module docstring's rules)."""
    slides: list[LectureSlide] = []
    names = _exercise_names(nb)
    # per slide: (shown markdown ends with a colon, cell) waiting for code or output
    dangling: dict[int, list[int]] = {}
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
        starts = kind in ("slide", "subslide")
        if starts or not slides:
            slides.append(LectureSlide(len(slides) + 1, index, kind))
            if not starts:
                slides[-1].problems.append(f"cell {index} comes before any lecture slide starts")
        slide = slides[-1]
        where = f"cell {index}"
        waiting = dangling.setdefault(id(slide), [])
        for key in (TITLE_KEY, SUMMARY_KEY):
            if key in spec and not starts:
                slide.problems.append(f"{where}: {key!r} belongs on the cell that starts a slide")
        if starts:
            title = spec.get(TITLE_KEY)
            if title is not None:
                if not isinstance(title, str) or not title.strip():
                    slide.problems.append(f"{where}: 'title' must be a non-empty string")
                else:
                    slide.title = title.strip()
                    slide.words += _prose_words(slide.title)
            summary = spec.get(SUMMARY_KEY, False)
            if summary not in (True, False):
                slide.problems.append(f"{where}: 'summary' must be true or false")
            slide.summary = summary is True
            if slide.summary and kind != "slide":
                slide.problems.append(f"{where}: the summary slide must be 'slide', not {kind!r}")
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
            slide.words += _prose_words(text)
            slide.tex_spans += tex_code_spans(text)
            if index == slide.cells[0]:
                heading = _heading(text)
                if heading is not None and slide.title:
                    slide.problems.append(
                        f"{where}: a 'title' and a # heading: two headings (keep one)"
                    )
                slide.title = slide.title or (heading or "")
            slide.label = slide.label or slide.title or _first_line(text)
            if _ends_with_colon(text):
                waiting.append(index)
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
        shown = 0
        if show != "output":
            shown = _code_lines(code)
            slide.code_lines += shown
            slide.asserts += sum(ln.lstrip().startswith("assert") for ln in code.splitlines())
        outputs = _shown_outputs(cell)
        stubs = sorted(_used_names(cell.source) & names) if outputs else []
        if show != "code" and outputs:
            slide.outputs += len(outputs)
            if stubs:
                slide.problems.append(
                    f"{where}: shows the output of {', '.join(stubs)}, a stub in a learner's copy"
                )
        if show == "code" and outputs and not stubs:
            slide.problems.append(
                f"{where}: 'show': 'code' hides the cell's output (show 'all' or 'output')"
            )
        if shown or (show != "code" and outputs):
            waiting.clear()
    for slide in slides:
        for index in dangling.get(id(slide), []):
            slide.problems.append(
                f"cell {index}: its text ends with ':' but no code or output follows on the "
                "slide (a dangling lead-in: show what it leads to, or reword it)"
            )
    order = deck_order([(s.cells[0], s.kind, s.summary) for s in slides])
    slides = [slides[i] for i in order]
    for number, slide in enumerate(slides, 1):
        slide.number = number
        label = f"slide {number} (cell {slide.cells[0]}) {(slide.label or slide.title)[:40]!r}"
        if not slide.title:
            slide.problems.append(
                "no title (start the slide with a markdown # heading, or give the lecture "
                "spec of its first cell a 'title')"
            )
        if slide.summary and "Summary" not in slide.title:
            slide.problems.append(f"the summary slide's title {slide.title!r} lacks 'Summary'")
        if not slide.notes:
            slide.problems.append("no speaker notes")
        for note in slide.notes:
            first = note.lstrip().split("\n", 1)[0]
            if not notes_marked(note):
                slide.problems.append(f"notes do not start with {LECTURER_MARK!r}")
            if (m := MINUTES.search(first)) is None:
                slide.problems.append("notes give no time ('~N min' on their first line)")
            else:
                slide.minutes = (slide.minutes or 0) + float(m.group(1))
            questions = _marked(note, ASK_MARK)
            answers = expected_answers(note)
            if questions:
                slide.asks = True
                if any(not q for q in questions):
                    slide.problems.append(f"an empty {ASK_MARK}")
                if len(answers) < len(questions):
                    slide.problems.append(f"{ASK_MARK} without {ANSWER_MARK}")
            for answer in answers:
                if VAGUE_ANSWER.search(answer):
                    slide.problems.append(
                        f"{ANSWER_MARK} gives no answer ({answer[:50]!r}): say what the room "
                        "should say"
                    )
        if slide.words > MAX_WORDS:
            slide.problems.append(f"{slide.words} words (at most {MAX_WORDS})")
        if slide.code_lines > MAX_CODE_LINES:
            slide.problems.append(f"{slide.code_lines} lines of code (at most {MAX_CODE_LINES})")
        if not slide.code_lines and not slide.outputs and slide.words < MIN_WORDS:
            slide.problems.append(
                f"nearly empty: {slide.words} words, no code, no output (at least {MIN_WORDS} "
                "words, or code or output)"
            )
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
    if not slides:
        return problems
    lo, hi = LECTURE_SLIDES
    head = []
    if not lo <= len(slides) <= hi:
        head.append(f"{len(slides)} lecture slides (want {lo}-{hi})")
    total = sum(s.minutes or 0 for s in slides)
    lo, hi = LECTURE_MINUTES
    if not lo <= total <= hi:
        head.append(f"the notes' times add up to {total:g} min (want {lo}-{hi})")
    summaries = [s.number for s in slides if s.summary]
    if len(summaries) != 1:
        head.append(
            f"{len(summaries)} summary slides {summaries} (want exactly 1: the lesson's "
            'Summary cell with "summary": true)'
        )
    asks = [s.number for s in slides if s.asks]
    lo, hi = ASK_THE_ROOM
    if not lo <= len(asks) <= hi:
        head.append(
            f"{len(asks)} slides ask the room {asks} (want {lo}-{hi}; keep the rest in the "
            "notes' explanation, or as **If time**)"
        )
    return head + problems


def notes_marked(source: str) -> bool:
    """Whether a notes cell's first line starts with the marker (plain or, as before, bold)."""
    return source.lstrip().startswith(LECTURER_MARKS)


def notes_marker_plain(source: str) -> bool:
    """Whether a notes cell's first line is marked in the plain form, without markup that
    JupyterLab's collapsed cell would show raw (``**``, backticks)."""
    first = source.lstrip().split("\n", 1)[0]
    return first.startswith(LECTURER_MARK) and not re.search(r"\*\*|__|`", first)


def notes_body(source: str) -> tuple[str, str]:
    """(the first line after the marker, e.g. '~1 min', the rest) of a notes cell."""
    first, _, rest = source.lstrip().partition("\n")
    for mark in LECTURER_MARKS:  # the bold form first: it contains the plain one
        if first.startswith(mark):
            first = first[len(mark) :]
            break
    return first.strip(" ·—-"), rest.strip()
