"""Lessons are as long as they say: a bounded core, and a stated time that matches it.

The rule (kvstaff.lessons.lesson_length): the core's markdown words at
WORDS_PER_MINUTE, plus each exercise's own estimate, plus MINUTES_PER_CODE_CELL for every
code cell. The optional part at a lesson's end ("## Optional ..." up to the further reading)
is counted apart and is not part of the stated time.
"""

from __future__ import annotations

import json

import pytest
from conftest import NOTEBOOKS

from kvstaff.lessons import (
    MAX_CORE_WORDS,
    lesson_length,
    lesson_paths,
    stated_minutes,
)

LESSONS = lesson_paths(NOTEBOOKS)


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_a_lessons_core_is_bounded(path):
    length = lesson_length(path)
    assert length.words <= MAX_CORE_WORDS, (
        f"{path.name}: the core has {length.words} words (at most {MAX_CORE_WORDS}); move what "
        f"goes further into a '## Optional · ...' part at the end or a lesson of its own"
    )


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_the_stated_time_matches_the_content(path):
    stated = stated_minutes(path)
    assert stated is not None, f"{path.name}: the title cell states no '**Time**: ~N minutes'"
    estimate = lesson_length(path).minutes
    slack = max(5.0, 0.2 * estimate)
    assert abs(stated - estimate) <= slack, (
        f"{path.name}: states ~{stated} minutes; its core estimates at {estimate:.0f} "
        f"(words/150 + exercises + 0.2 per code cell), so say ~{5 * round(estimate / 5)}"
    )


def _lesson(tmp_path, cells):
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "99_probe.ipynb"
    path.write_text(json.dumps(nb))
    return path


def _md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text="x = 1"):
    return {
        "cell_type": "code",
        "metadata": {},
        "source": text,
        "outputs": [],
        "execution_count": None,
    }


def test_the_rule_counts_core_and_optional_part_apart(tmp_path):
    words = " ".join(["word"] * 300)
    path = _lesson(
        tmp_path,
        [
            _md("# 99 · Probe\n\n**Time**: ~9 minutes."),
            _md(words),
            _code(),
            _md("### Exercise 99.1 — x\n\n**Difficulty**: ★ · **Time**: ~4 min"),
            _code(),
            _md("## Optional · more " + words),
            _code(),
            _md("**Difficulty**: ★ · **Time**: ~7 min"),
            _md("## Further reading\n\na b"),
            _md("## Summary"),
        ],
    )
    length = lesson_length(path)
    core_words = 7 + 300 + 11 + 5 + 2  # title, prose, exercise, further reading, summary
    assert (length.words, length.code_cells, length.exercise_minutes) == (core_words, 2, 4)
    assert (length.optional_words, length.optional_code_cells) == (304 + 6, 1)
    assert length.optional_exercise_minutes == 7
    assert length.minutes == pytest.approx(core_words / 150 + 4 + 2 * 0.2)
    assert stated_minutes(path) == 9
