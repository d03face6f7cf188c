"""Lessons are as long as they say: a bounded core, and a stated time that matches it.

The rule (kvstaff.lessons.lesson_length), calibrated on careful first readings: the core's
markdown words at WORDS_PER_MINUTE, MINUTES_PER_CODE_CELL for every code cell,
MINUTES_PER_FIGURE for every figure, and each exercise's own estimate but at least
MIN_EXERCISE_MINUTES for its difficulty. A core is at most MAX_CORE_MINUTES; the optional
part at a lesson's end ("## Optional ..." up to the further reading) is counted apart, and
the title cell states its time as well.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import NOTEBOOKS

from kvstaff.lessons import (
    MAX_CORE_MINUTES,
    MAX_CORE_WORDS,
    lesson_info,
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
    slack = max(5.0, 0.15 * estimate)
    assert abs(stated - estimate) <= slack, (
        f"{path.name}: states ~{stated} minutes; its core estimates at {estimate:.0f} "
        f"(words/100 + 0.5 per code cell + 1 per figure + exercises), so say "
        f"~{5 * round(estimate / 5)}"
    )


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_a_lessons_core_fits_one_sitting(path):
    length = lesson_length(path)
    assert length.minutes <= MAX_CORE_MINUTES, (
        f"{path.name}: the core takes {length.minutes:.0f} minutes by the rule (at most "
        f"{MAX_CORE_MINUTES}); move a section that goes further into the '## Optional · ...' "
        f"part after the core"
    )


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_an_optional_part_states_its_time(path):
    length = lesson_length(path)
    if not length.optional_minutes:
        assert length.optional_words == 0
        return
    time = lesson_info(path).time
    minutes = [int(m) for m in re.findall(r"~\s*(\d+)", time)]
    assert len(minutes) >= 2, (
        f"{path.name}: it has an optional part (~{length.optional_minutes:.0f} min by the "
        f"rule); the title's **Time** line says so: '~N minutes, and ~M for the optional part'"
    )
    slack = max(5.0, 0.15 * length.optional_minutes)
    assert abs(minutes[1] - length.optional_minutes) <= slack, (time, length.optional_minutes)


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
    assert (length.words, length.code_cells, length.exercise_minutes) == (core_words, 2, 5)
    assert (length.optional_words, length.optional_code_cells) == (304 + 6, 1)
    assert length.optional_exercise_minutes == 7
    # a ★ exercise counts at least 5 minutes, whatever it says
    assert length.minutes == pytest.approx(core_words / 100 + 5 + 2 * 0.5)
    assert length.optional_minutes == pytest.approx((304 + 6) / 100 + 7 + 0.5)
    assert stated_minutes(path) == 9


def test_the_readme_lists_every_lesson_with_its_stated_times():
    text = (NOTEBOOKS.parent / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d\d) \| \[[^\]]+\]\([^)]+\) \| ([^|]+) \|", text, re.M))
    assert sorted(rows) == [p.stem[:2] for p in LESSONS], "the README's table of lessons"
    for path in LESSONS:
        found = [int(m) for m in re.findall(r"~\s*(\d+)", lesson_info(path).time)]
        want = f"~{found[0]}" + (f" + ~{found[1]} optional" if len(found) > 1 else "")
        assert rows[path.stem[:2]].strip() == want, (path.name, rows[path.stem[:2]], want)
