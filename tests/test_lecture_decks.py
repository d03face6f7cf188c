"""Every lesson's lecture deck keeps the rules of a 10–15 minute talk, read from the lesson.

The lecture deck is the cells a lesson's author marked with ``metadata["lecture"]``
(kvstaff.lecture's docstring). Without building or executing anything, for every
lesson: 12–18 slides; speaker notes on every slide, each marked for lecturers, with its
minutes (10–15 in all); every slide titled; exactly one summary slide, shown last; 3–6
questions for the room, each with a real expected answer; no assert line, no check cell, no
solution and no output of an exercise's stub on a slide; at most 14 lines of code shown and
120 words a slide; no dangling lead-in, no code without its output, no nearly empty slide;
no TeX inside a code span (kvstaff.lecture_deck's docstring: the rules).
tests/test_browser.py measures the same decks as Chromium shows them (and that every slide
fits 1280 x 720).

Speaker notes are set apart for learners: every notes cell starts with the "For lecturers"
marker and is stored collapsed (JupyterLab 4 honours ``metadata.jupyter.source_hidden``).
And no learner-facing text carries authoring residue (source-text or tooling vocabulary).
"""

from __future__ import annotations

import re

import nbformat
import pytest
from conftest import NOTEBOOKS

from kvstaff.lecture import (
    ASK_THE_ROOM,
    LECTURE_KEY,
    LECTURE_MINUTES,
    LECTURE_SLIDES,
    LECTURER_MARK,
    MAX_CODE_LINES,
    MAX_WORDS,
    MIN_WORDS,
    discover_lessons,
    is_notes_cell,
    lecture_deck_notebook,
    lecture_problems,
    lecture_slides,
    tex_code_spans,
)
from kvstaff.lecture_deck import notes_body, notes_marked, notes_marker_plain

LESSONS = discover_lessons(NOTEBOOKS)
IDS = [lesson.stem for lesson in LESSONS]

# Words that belong to the people and tools that make the course, not to a learner's text.
RESIDUE = re.compile(
    r"\bseed (?:text|sentence|lesson|notebook|prose)\b|\bharness\b|\bnbval\b|\bpytest\b"
    r"|\bmake test\b|\btest suite\b|\btests/|\bconftest\b|\bNBVAL_",
    re.I,
)


def _read(lesson):
    return nbformat.read(lesson.path, as_version=4)


@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_lecture_deck_keeps_the_rules(lesson):
    problems = lecture_problems(_read(lesson))
    assert not problems, f"{lesson.stem}: the lecture deck breaks its rules:\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_every_notes_cell_is_marked_and_collapsed(lesson):
    nb = _read(lesson)
    bad = [
        i
        for i, c in enumerate(nb.cells)
        if is_notes_cell(c)
        and not (
            notes_marker_plain(c.source)
            and c.metadata.get("jupyter", {}).get("source_hidden") is True
        )
    ]
    assert not bad, (
        f"{lesson.stem}: notes cells {bad} must start with {LECTURER_MARK!r} as plain text "
        "(JupyterLab shows a collapsed cell's first line as written: no **) and be stored "
        "collapsed (metadata.jupyter.source_hidden = true)"
    )


@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_no_authoring_residue_in_learner_text(lesson):
    nb = _read(lesson)
    found = []
    for i, cell in enumerate(nb.cells):
        text = cell.source
        if cell.cell_type == "code":  # what a learner reads in code: its comments
            text = "\n".join(ln for ln in text.splitlines() if "#" in ln)
        found += [f"cell {i}: {m.group(0)!r}" for m in RESIDUE.finditer(text)]
    assert not found, f"{lesson.stem}: authoring residue a learner would read: {found}"


def test_the_residue_detector_catches_what_it_is_for():
    for text in ("The seed text says so.", "as the seed sentence puts it", "run under nbval"):
        assert RESIDUE.search(text), text
    for text in ("Seed where you draw.", "Test a mask by perturbation.", "train short, test long"):
        assert not RESIDUE.search(text), text


md = nbformat.v4.new_markdown_cell
code = nbformat.v4.new_code_cell


def lec(cell, **spec):
    cell.metadata[LECTURE_KEY] = spec
    cell.metadata["slideshow"] = {"slide_type": "-"}
    return cell


def notes(text=None, *, ask=False, answer="(2, 4, 6): one matrix per sentence.", minutes=1):
    if text is None:
        text = f"{LECTURER_MARK} · ~{minutes:g} min\n\nWhy it matters, said at length."
        if ask:
            text += f"\n\n**Ask the room**: what shape?\n\n**Expected answer**: {answer}"
    cell = md(text)
    cell.metadata["slideshow"] = {"slide_type": "notes"}
    cell.metadata[LECTURE_KEY] = {"slide": "notes"}
    return cell


def printed(source, text="4\n"):
    return code(source, outputs=[nbformat.v4.new_output("stream", text=text)])


PROSE = " ".join(["word"] * MIN_WORDS)


def good_deck(n=12, asks=3):
    """A deck that keeps every rule: n slides, the last the summary, `asks` questions."""
    cells, minutes = [], round(12 / n, 3)
    for i in range(n - 1):
        cells += [
            lec(md(f"## Slide {i}\n\n{PROSE}"), slide="slide"),
            notes(ask=i < asks, minutes=minutes),
        ]
    cells += [
        lec(md(f"## Summary\n\n{PROSE}"), slide="slide", summary=True),
        notes(minutes=minutes),
    ]
    return cells


def problems_of(cells):
    return "\n".join(lecture_problems(nbformat.v4.new_notebook(cells=cells)))


def test_a_good_deck_has_no_problems():
    assert problems_of(good_deck()) == ""
    assert problems_of(good_deck(18, asks=6)) == ""


def test_the_rules_catch_what_they_are_for():
    good_notes = (
        f"{LECTURER_MARK} · ~1 min\n\nWhy.\n\n**Ask the room**: q?\n\n**Expected answer**: a."
    )
    long = " ".join(["word"] * (MAX_WORDS + 1))
    cells = [
        lec(md(f"## One\n\n{PROSE}\n\n" + long), slide="slide", paragraphs=[0, 1]),
        notes(good_notes),
        lec(md("## Two\n\nThe update `m_{new} = \\max(m, s)`."), slide="slide"),
        lec(code("x = 1\nassert x == 1\n" + "y = 2\n" * MAX_CODE_LINES)),
        notes(f"{LECTURER_MARK}\n\nno time, no question"),
        lec(md("## Three"), slide="slide"),
        lec(printed("print(solve(3))")),
    ]
    sol = code("def solve(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION")
    sol.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "s"}
    nb = nbformat.v4.new_notebook(cells=[sol, *cells])
    slides = lecture_slides(nb)
    assert [s.title for s in slides] == ["One", "Two", "Three"]
    assert slides[0].words == MIN_WORDS + 1 and not slides[0].problems  # only the chosen paragraphs
    assert slides[1].code_lines == MAX_CODE_LINES + 1 and slides[1].asserts == 0
    assert slides[1].tex_spans == ["m_{new} = \\max(m, s)"]
    problems = "\n".join(lecture_problems(nb))
    for expected in (
        "3 lecture slides",
        "lines of code",
        "TeX in code spans",
        "notes give no time",
        "no speaker notes",
        "solve, a stub in a learner's copy",
        "0 summary slides",
        "1 slides ask the room",
    ):
        assert expected in problems, expected
    deck = lecture_deck_notebook(nb)
    assert [c.metadata["slideshow"]["data"]["cell"] for c in deck.cells] == [
        str(i) for i in range(1, 8)
    ]
    assert "assert" not in deck.cells[3].source and long not in deck.cells[0].source
    assert tex_code_spans("`\\sqrt{d_k}` and $\\sqrt{d_k}$ and `x.sum()`") == ["\\sqrt{d_k}"]


def test_every_slide_has_a_title():
    cells = good_deck()
    cells[2] = lec(md(f"Prose without a heading: {PROSE}"), slide="slide")
    assert "slide 2 (cell 2) 'Prose without a heading: word word word ': no title" in (
        problems_of(cells)
    )
    cells[2].metadata[LECTURE_KEY]["title"] = "A short title"
    assert problems_of(cells) == ""
    slide = lecture_slides(nbformat.v4.new_notebook(cells=cells))[1]
    assert (
        slide.title == "A short title" and slide.words == 3 + 4 + MIN_WORDS
    )  # the title's words count
    # a code cell that starts a slide needs a title too; a heading and a title are two headings
    cells[2] = lec(printed("print(2 + 2)"), slide="slide")
    assert "no title" in problems_of(cells)
    cells[0].metadata[LECTURE_KEY]["title"] = "Twice"
    assert "two headings" in problems_of(cells)
    cells[0].metadata[LECTURE_KEY]["title"] = ""
    assert "'title' must be a non-empty string" in problems_of(cells)


def test_exactly_one_summary_slide_titled_summary_and_shown_last():
    cells = good_deck()
    cells[-2].metadata[LECTURE_KEY]["summary"] = False
    assert "0 summary slides" in problems_of(cells)
    cells[-2].metadata[LECTURE_KEY]["summary"] = True
    cells[0].metadata[LECTURE_KEY]["summary"] = True
    assert "2 summary slides [11, 12]" in problems_of(cells)
    del cells[0].metadata[LECTURE_KEY]["summary"]
    cells[-2].source = "## In short\n\n" + PROSE
    assert "the summary slide's title 'In short' lacks 'Summary'" in problems_of(cells)
    # shown last: a summary cell first in the notebook is the deck's last slide, with its
    # vertical slides; the numbers are the deck's
    cells = good_deck(12)
    summary, summary_notes = cells[-2:]
    sub = lec(md(f"## Below the summary\n\n{PROSE}"), slide="subslide")
    cells = [summary, summary_notes, sub, notes(), *cells[:-2]]
    nb = nbformat.v4.new_notebook(cells=cells)
    slides = lecture_slides(nb)
    assert [s.title for s in slides[-3:]] == ["Slide 10", "Summary", "Below the summary"]
    assert [s.number for s in slides] == list(range(1, 14))
    deck = lecture_deck_notebook(nb)
    assert "## Summary" in deck.cells[-4].source and "Below" in deck.cells[-2].source
    assert deck.cells[0].source.startswith("## Slide 0")


def test_three_to_six_questions_for_the_room_each_with_a_real_answer():
    lo, hi = ASK_THE_ROOM
    assert (lo, hi) == (3, 6)
    assert f"{lo - 1} slides ask the room" in problems_of(good_deck(asks=lo - 1))
    assert f"{hi + 1} slides ask the room" in problems_of(good_deck(asks=hi + 1))
    for vague in (
        "",
        "Answers vary.",
        "Let them guess; the lesson measures it.",
        "Let the room guess.",
        "Open.",
        "Discuss in pairs.",
        "Hold the answers: the next slides measure it.",
        "Let the measurement below answer.",
        "Any answer with a measurement.",
        "It depends.",
    ):
        cells = good_deck()
        cells[1] = notes(ask=True, answer=vague)
        assert "**Expected answer** gives no answer" in problems_of(cells), vague
    for real in (
        "(2, 4, 6): one matrix per sentence.",
        "1, or 0 for a query with nothing to attend to.",
        "An open bracket closes later; the head attends to it.",
        "No: its scores only rank keys.",
    ):
        cells = good_deck()
        cells[1] = notes(ask=True, answer=real)
        assert problems_of(cells) == "", real
    # a question without its answer; an answer on the next line
    cells = good_deck()
    cells[1] = notes(f"{LECTURER_MARK} · ~1 min\n\n**Ask the room**: what shape?")
    assert "**Ask the room** without **Expected answer**" in problems_of(cells)
    cells[1] = notes(f"{LECTURER_MARK} · ~1 min\n\n**Ask the room**: q?\n\n**Expected answer**:")
    assert "gives no answer" in problems_of(cells)
    cells[1] = notes(
        f"{LECTURER_MARK} · ~1 min\n\n**Ask the room**: q?\n\n**Expected answer**:\n\n(2, 4)."
    )
    assert problems_of(cells) == ""
    # **If time** questions are not counted as questions for the room
    cells = good_deck(asks=3)
    cells[9] = notes(f"{LECTURER_MARK} · ~1 min\n\n**If time**: why?\n\n**Expected answer**: x.")
    assert problems_of(cells) == ""


def test_at_most_fourteen_code_lines_shown_counting_blanks_and_comments():
    assert MAX_CODE_LINES == 14
    body = "\n".join(["# a comment", "", "x = 1"] * 4) + "\ny = x\n"  # 13 lines + 1
    cells = good_deck()
    cells[2:2] = [lec(printed(body + "assert y == 1\n# NBVAL_IGNORE_OUTPUT\n"))]
    assert problems_of(cells) == ""
    cells[2] = lec(printed(body + "\nz = 2"))  # 15 lines shown, 5 of them blank
    assert "15 lines of code (at most 14)" in problems_of(cells)
    cells[2] = lec(printed(body + "\nz = 2"), show="output")  # the figure alone: no code
    assert problems_of(cells) == ""


def test_no_dangling_lead_in():
    cells = good_deck()
    cells[0] = lec(md(f"## Slide 0\n\n{PROSE}. They agree:"), slide="slide")
    assert "cell 0: its text ends with ':' but no code or output follows" in problems_of(cells)
    cells[0].source = cells[0].source.replace("agree:", "**agree:**")
    assert "dangling lead-in" in problems_of(cells)
    # code shown before the lead-in does not count; code or output after it does
    cells[0:1] = [
        lec(printed("print(2 + 2)"), slide="slide", title="Code first"),
        lec(md(f"{PROSE}. They agree:")),
    ]
    assert "cell 1: its text ends with ':'" in problems_of(cells)
    cells = good_deck()
    cells[0] = lec(md(f"## Slide 0\n\n{PROSE}. They agree:"), slide="slide")
    for shown in (
        lec(printed("print(2 + 2)"), show="output"),
        lec(code("x = 2 + 2")),
        lec(printed("print(2 + 2)"), slide="fragment"),
    ):
        assert problems_of([*cells[:1], shown, *cells[1:]]) == ""
    # the output of an assert-only cell is no output: the check is left out of the deck
    only_check = lec(code("assert 2 + 2 == 4"))
    assert "dangling lead-in" in problems_of([*cells[:1], only_check, *cells[1:]])
    # the next slide's code does not help
    cells[2:2] = [lec(printed("print(2 + 2)"), slide="slide", title="Next")]
    assert "dangling lead-in" in problems_of(cells)


def test_no_code_without_its_output():
    cells = good_deck()
    cells[2:2] = [lec(printed("print(2 + 2)"), show="code")]
    assert "cell 2: 'show': 'code' hides the cell's output" in problems_of(cells)
    cells[2] = lec(code("x = 2 + 2"), show="code")  # nothing to hide
    assert problems_of(cells) == ""
    # a stub's output is never shown: its code alone is right
    sol = code("def solve(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION")
    sol.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "s"}
    cells[2] = lec(printed("print(solve(3))"), show="code")
    assert problems_of([sol, *cells]) == ""
    # a progress line is left out of decks: not an output hidden
    progress = nbformat.v4.new_output(
        "display_data", data={"text/plain": "train: 200 steps"}, metadata={"attnlib": "progress"}
    )
    cells[2] = lec(code("train(model)", outputs=[progress]), show="code")
    assert problems_of(cells) == ""


def test_no_nearly_empty_slide():
    cells = good_deck()
    cells[2] = lec(md("## Slide 1\n\nOnly a few words here."), slide="slide")
    assert f"nearly empty: 7 words, no code, no output (at least {MIN_WORDS}" in (
        problems_of(cells)
    )
    for fill in (lec(code("x = 1")), lec(printed("print(4)"), show="output")):
        assert problems_of([*cells[:3], fill, *cells[3:]]) == ""
    # a formula counts as one word; the code of a check cell (left out) counts for nothing
    cells[2] = lec(md("## Slide 1\n\n" + "$a$ " * 7), slide="slide")
    assert "nearly empty: 9 words" in problems_of(cells)


def test_progress_metadata_agrees_with_attnlib():
    from attnlib.training import PROGRESS_METADATA
    from kvstaff.lecture_deck import PROGRESS_METADATA as DECK_PROGRESS

    assert DECK_PROGRESS == PROGRESS_METADATA


def test_the_rules_are_a_ten_to_fifteen_minute_talk():
    assert LECTURE_SLIDES == (12, 18) and LECTURE_MINUTES == (10, 15)
    assert MAX_CODE_LINES == 14 and MAX_WORDS == 120 and MIN_WORDS == 15
    assert ASK_THE_ROOM == (3, 6)


def test_the_assert_only_cell_detector_catches_what_it_is_for():
    from test_notebook_hygiene import assert_only_cells

    graded = code("assert f(1) == 2")
    graded.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "g"}
    tagged = code("assert x == 1")
    tagged.metadata["tags"] = ["check"]
    cells = [
        code("assert x == 1\nassert y < 2"),  # 0: only asserts
        code("for i in range(3):\n    assert i < 3"),  # 1: a loop of asserts
        code("x = 1\nassert x == 1"),  # computes and checks: fine
        printed("print(x)\nassert x == 1"),  # prints and checks: fine
        graded,  # nbgrader's test cell
        tagged,  # a check the learner runs
        code("# NBVAL_IGNORE_OUTPUT\nassert x == 1"),  # 6: a marker comment, then asserts
    ]
    assert assert_only_cells(nbformat.v4.new_notebook(cells=cells)) == [0, 1, 6]


def test_notes_markers_plain_and_bold_are_read_the_plain_one_required():
    for first in ("For lecturers · ~1 min", "**For lecturers** · ~1 min"):
        assert notes_marked(first + "\n\nSay it.")
        assert notes_body(first + "\n\nSay it.") == ("~1 min", "Say it.")
    assert notes_marker_plain("For lecturers · ~1 min\n\n**Ask the room**: q?")
    for raw in ("**For lecturers** · ~1 min", "For lecturers · **~1 min**", "Notes · ~1 min"):
        assert not notes_marker_plain(raw), raw
    assert not notes_marked("Notes · ~1 min")
