"""Every graded lesson of notebooks/ through the real nbgrader flow, in the sandbox: the
instructor version (the solutions) earns full marks unflagged, the untouched release (a
learner's copy before any exercise is written) earns zero and runs to the end, and neither
the release nor any feedback shows a solution or a hidden test.

CI's second stage (``make test-course``; marker ``second_stage``): these courses run every
lesson twice more in sandboxed kernels (``make test`` runs each under strict nbval already,
and grades the fixture lessons of tests/nbfixtures.py against every hostile submission), so
they gate every landing without being in every developer's loop. Each class grades one shard
of lessons in ONE ``autograde`` run (tests/grading_course.py); the shards are dealt by the
lessons' measured cost so that no fixture takes long.
"""

from __future__ import annotations

import re

import nbformat
import pytest
from grading_course import LESSON_PATHS, EveryCourse, graded_course, leaks
from nbfixtures import hidden_lines, solution_lines

from attnlib.explorers._render import STILL_CAPTION
from kvstaff.student import is_lecturer_note, learner_copy, without_lecturer_notes

pytestmark = [
    pytest.mark.second_stage,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Object of type:Warning"),  # nbgrader's SQLAlchemy use
    pytest.mark.filterwarnings("ignore:Cell is missing an id field:Warning"),
]

#: The graded lessons are dealt into this many shards of about equal cost, so that no
#: shard's fixture takes long.
SHARDS = 5
#: Seconds each lesson's cells took in one fresh kernel, one thread, on a quiet 2-core
#: machine (nbclient, 2026-12-03); used only to deal the lessons into shards (the largest
#: first, each into the cheapest shard so far). A lesson not listed counts as the median.
LESSON_SECONDS = {
    "01": 4.1, "02": 2.4, "03": 2.7, "04": 7.8, "05": 4.9, "06": 3.8, "07": 5.6, "08": 3.1,
    "09": 3.5, "10": 5.0, "11": 5.5, "12": 3.2, "13": 5.1, "14": 7.0, "15": 8.9, "16": 14.0,
    "17": 12.0,
}  # fmt: skip


def deal_into_shards(paths, n: int) -> list[list]:
    """``paths`` in ``n`` shards of about equal :data:`LESSON_SECONDS`, each in lesson order."""
    median = sorted(LESSON_SECONDS.values())[len(LESSON_SECONDS) // 2]
    cost = {p: LESSON_SECONDS.get(p.stem[:2], median) for p in paths}
    shards, totals = [[] for _ in range(n)], [0.0] * n
    for p in sorted(paths, key=lambda p: (-cost[p], p.stem)):
        i = totals.index(min(totals))
        shards[i].append(p)
        totals[i] += cost[p]
    return [sorted(s) for s in shards]


SHARDED = deal_into_shards(LESSON_PATHS, SHARDS)


def test_every_graded_lesson_is_in_exactly_one_shard():
    dealt = [p for shard in SHARDED for p in shard]
    assert sorted(dealt) == sorted(LESSON_PATHS) and len(set(dealt)) == len(dealt)


class _LessonShard(EveryCourse):
    """The graded lessons of notebooks/ dealt to shard ``shard`` (:func:`deal_into_shards`):
    each one's instructor version and its untouched release."""

    shard = 0

    @classmethod
    def lessons(cls):
        return SHARDED[cls.shard]

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, tmp_path_factory):
        return graded_course(tmp_path_factory, f"lessons{cls.shard}", lessons=cls.lessons())

    def test_every_lesson_grades_full_marks_for_its_solution_and_zero_untouched(
        self, graded, lesson
    ):
        score, max_score, status, review = graded.score("instructor", lesson)
        assert float(max_score) > 0
        assert (score, status, review) == (max_score, "graded", "no"), graded.rows[
            ("instructor", lesson)
        ]["notes"]
        assert graded.score("untouched", lesson)[:3] == ("0.0", max_score, "graded")

    def test_every_release_and_feedback_keeps_solutions_and_hidden_tests_secret(
        self, graded, lesson
    ):
        src = nbformat.read(graded.notebooks / f"{lesson}.ipynb", as_version=4)
        outside = re.sub(
            r"### BEGIN SOLUTION\n.*?### END SOLUTION",
            "",
            "\n".join(c.source for c in src.cells),
            flags=re.S,
        )
        secret = [ln for ln in solution_lines(src) if ln not in outside]
        for path in (
            graded.course / "release" / lesson / f"{lesson}.ipynb",
            graded.course / "feedback" / "untouched" / lesson / f"{lesson}.html",
        ):
            text = path.read_text()
            assert leaks(text, secret) == [], path
            assert leaks(text, hidden_lines(src)) == [], path
            assert "HIDDEN TESTS" not in text, path
        instructor_fb = graded.course / "feedback" / "instructor" / lesson / f"{lesson}.html"
        assert "check_hidden" not in instructor_fb.read_text()

    def test_a_learners_copy_runs_to_the_end_and_shows_every_explorer(self, graded, lesson):
        """The untouched release is a learner's copy before any exercise is written (the
        cells ``make student`` writes into workbook/), and grading ran it top to bottom in
        the sandbox with nbgrader's nbclient: a learner's Run All. No cell raised; the only
        errors are the grader's own verdicts on graded cells (one line, no traceback: the
        hidden tests of an unwritten exercise fail). Every explorer shows its still."""
        path = graded.course / "autograded" / "untouched" / lesson / f"{lesson}.ipynb"
        run = nbformat.read(path, as_version=4)
        raised = []
        for i, cell in enumerate(run.cells):
            meta = cell.metadata.get("nbgrader", {})
            test_cell = cell.cell_type == "code" and meta.get("grade") and not meta.get("solution")
            for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
                if out.output_type != "error":
                    continue
                verdict = out.traceback == [f"{out.ename}: {out.evalue}"]  # added by the grader
                if not (test_cell and verdict and out.ename == "AssertionError"):
                    raised.append((i, out.ename, out.evalue[:120]))
        assert raised == [], raised
        # what was run is, cell for cell, the copy `make student` writes into workbook/: the
        # lesson without its solutions and without its notes for lecturers
        src = without_lecturer_notes(nbformat.read(graded.notebooks / f"{lesson}.ipynb", 4))
        assert len(src.cells) == len(run.cells)
        copy = learner_copy(nbformat.read(graded.notebooks / f"{lesson}.ipynb", as_version=4))
        released = nbformat.read(graded.course / "release" / lesson / f"{lesson}.ipynb", 4)
        assert [c.source for c in copy.cells] == [c.source for c in released.cells]
        assert not any(is_lecturer_note(c) for c in released.cells)
        for i, cell in enumerate(src.cells):
            if cell.cell_type == "code" and _shows_still(cell):
                assert _shows_still(run.cells[i]), f"cell {i}: the explorer shows no still"


def _shows_still(cell) -> bool:
    return any(
        "image/png" in out.get("data", {})
        and str(out["data"].get("text/plain", "")).startswith(STILL_CAPTION)
        for out in cell.get("outputs", [])
    )


class TestLessonShard0(_LessonShard):
    shard = 0


class TestLessonShard1(_LessonShard):
    shard = 1


class TestLessonShard2(_LessonShard):
    shard = 2


class TestLessonShard3(_LessonShard):
    shard = 3


class TestLessonShard4(_LessonShard):
    shard = 4


def pytest_generate_tests(metafunc):
    """Each shard's tests run once per lesson of that shard."""
    if "lesson" in metafunc.fixturenames:
        lessons = metafunc.cls.lessons()
        metafunc.parametrize("lesson", [p.stem for p in lessons], ids=[p.stem for p in lessons])
