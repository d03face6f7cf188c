"""Every lesson's lecture deck keeps the rules of a 10–15 minute talk, read from the lesson.

The lecture deck is the cells a lesson's author marked with ``metadata["lecture"]``
(kvstaff.lecture's docstring). Without building or executing anything, for every
lesson: 12–18 slides; speaker notes on every slide, each marked for lecturers, with its
minutes (10–15 in all), a question for the room and its expected answer; no assert line, no
check cell, no solution and no output of an exercise's stub on a slide; at most 12 lines of
code and 120 words a slide; no TeX inside a code span. tests/test_browser.py measures the
same decks as Chromium shows them (and that every slide fits 1280 x 720).

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
    LECTURE_KEY,
    LECTURE_MINUTES,
    LECTURE_SLIDES,
    LECTURER_MARK,
    MAX_CODE_LINES,
    MAX_WORDS,
    discover_lessons,
    is_notes_cell,
    lecture_deck_notebook,
    lecture_problems,
    lecture_slides,
    tex_code_spans,
)

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
            c.source.lstrip().startswith(LECTURER_MARK)
            and c.metadata.get("jupyter", {}).get("source_hidden") is True
        )
    ]
    assert not bad, (
        f"{lesson.stem}: notes cells {bad} must start with {LECTURER_MARK!r} and be stored "
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


def test_the_rules_catch_what_they_are_for():
    md = nbformat.v4.new_markdown_cell
    code = nbformat.v4.new_code_cell

    def lec(cell, **spec):
        cell.metadata[LECTURE_KEY] = spec
        cell.metadata["slideshow"] = {"slide_type": "-"}
        return cell

    def notes(text):
        cell = md(text)
        cell.metadata["slideshow"] = {"slide_type": "notes"}
        cell.metadata[LECTURE_KEY] = {"slide": "notes"}
        return cell

    good_notes = (
        f"{LECTURER_MARK} · ~1 min\n\nWhy.\n\n**Ask the room**: q?\n\n**Expected answer**: a."
    )
    long = " ".join(["word"] * (MAX_WORDS + 1))
    cells = [
        lec(md("## One\n\nshort\n\n" + long), slide="slide", paragraphs=[0, 1]),
        notes(good_notes),
        lec(md("## Two\n\nThe update `m_{new} = \\max(m, s)`."), slide="slide"),
        lec(code("x = 1\nassert x == 1\n" + "y = 2\n" * MAX_CODE_LINES)),
        notes(f"{LECTURER_MARK}\n\nno time, no question"),
        lec(md("## Three"), slide="slide"),
        lec(code("print(solve(3))", outputs=[nbformat.v4.new_output("stream", text="4\n")])),
    ]
    sol = code("def solve(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION")
    sol.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "s"}
    nb = nbformat.v4.new_notebook(cells=[sol, *cells])
    slides = lecture_slides(nb)
    assert [s.title for s in slides] == ["One", "Two", "Three"]
    assert slides[0].words <= 3 and not slides[0].problems  # only the chosen paragraphs
    assert slides[1].code_lines == MAX_CODE_LINES + 1 and slides[1].asserts == 0
    assert slides[1].tex_spans == ["m_{new} = \\max(m, s)"]
    problems = "\n".join(lecture_problems(nb))
    for expected in (
        "3 lecture slides",
        "lines of code",
        "TeX in code spans",
        "notes give no time",
        "lack **Ask the room**",
        "no speaker notes",
        "solve, a stub in a learner's copy",
    ):
        assert expected in problems, expected
    deck = lecture_deck_notebook(nb)
    assert [c.metadata["slideshow"]["data"]["cell"] for c in deck.cells] == [
        str(i) for i in range(1, 8)
    ]
    assert "assert" not in deck.cells[3].source and "word word" not in deck.cells[0].source
    assert tex_code_spans("`\\sqrt{d_k}` and $\\sqrt{d_k}$ and `x.sum()`") == ["\\sqrt{d_k}"]


def test_the_rules_are_a_ten_to_fifteen_minute_talk():
    assert LECTURE_SLIDES == (12, 18) and LECTURE_MINUTES == (10, 15)
    assert MAX_CODE_LINES == 12 and MAX_WORDS == 120
