"""The real nbgrader flow: release, autograde, export, feedback, validate.

Two fixture lessons (tests/nbfixtures.py: softmax 1 point + attend 2 points; causal_mask
1 + padding_mask 1) are released into a temporary course folder; one submission per
scenario is graded in ONE autograde run (nbgrader in-process through attnlib.course.gradebook,
with the repository's nbgrader_config.py), then feedback is generated. Then every graded
lesson in notebooks/ goes through the same flow: its instructor version scores full
marks, its untouched release scores 0, `nbgrader validate` passes on the source and
`nbgrader validate --invert` on the release.
"""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import nbformat
import pytest
from nbfixtures import LESSONS, hidden_lines, reference_source, set_solution, solution_lines
from nbfixtures import write_lessons as write_fixture_lessons

from attnlib.checks.grading import TAMPER_TAG
from attnlib.course import gradebook
from attnlib.course.lessons import lesson_paths

pytestmark = [
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Object of type:Warning"),  # nbgrader's SQLAlchemy use
    pytest.mark.filterwarnings("ignore:Cell is missing an id field:Warning"),
]

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 20  # seconds per cell in these tests (the course uses 60)

NESTED_SWALLOW_LOOP = """def softmax(x):
    while True:
        try:
            while True:
                pass
        except KeyboardInterrupt:
            continue
"""

CHEAT = """import attnlib


def softmax(x):
    return attnlib.softmax(x)


class Anything:
    def __eq__(self, other):
        return True


def attend(q, k, v, mask=None):
    return Anything(), Anything()
"""

WRONG_SOFTMAX = "def softmax(x):\n    e = np.exp(x)\n    return e / e.sum(axis=-1, keepdims=True)\n"
WRONG_ATTEND = "def attend(q, k, v, mask=None):\n    return q, k\n"

PATCHER = """import numpy.testing
import torch.testing
import attnlib.checks._core as core

numpy.testing.assert_allclose = lambda *a, **k: None
torch.testing.assert_close = lambda *a, **k: None
import attnlib.checks

core.run = lambda exercise, fn, **k: core.Report(exercise=exercise, ok=True, n_cases=1)
attnlib.checks.run = core.run  # the visible check now passes anything
"""

PATCH_CHECKS = """from attnlib import checks

checks.check = lambda *a, **k: None
checks.check_hidden = lambda *a, **k: None
"""

NOISY = """import sys
import warnings

print("defining softmax", file=sys.stderr)


def softmax(x):
    warnings.warn("a library warning", UserWarning, stacklevel=1)
    print("debug", file=sys.stderr)
    m = x.max(axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)
"""


def _grade_ids(nb):
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}


def _submit(course: Path, student: str, lesson: str, nb) -> None:
    d = course / "submitted" / student / lesson
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, str):
        (d / f"{lesson}.ipynb").write_text(nb)
    else:
        nbformat.write(nb, d / f"{lesson}.ipynb")


def _fixture_submissions(course: Path, notebooks: Path) -> None:
    def release(lesson):
        return nbformat.read(course / "release" / lesson / f"{lesson}.ipynb", as_version=4)

    a, b = LESSONS
    for lesson in (a, b):
        _submit(course, "ref", lesson, nbformat.read(notebooks / f"{lesson}.ipynb", as_version=4))
        _submit(course, "untouched", lesson, release(lesson))

    # softmax right with its test cell deleted; attend wrong with its test cell stripped
    # of metadata and replaced by `pass`
    nb = release(a)
    set_solution(nb, "l01-softmax-solution", reference_source("softmax"))
    set_solution(nb, "l01-attend-solution", WRONG_ATTEND)
    cells = _grade_ids(nb)
    nb.cells.remove(cells["l01-softmax-check"])
    cells["l01-attend-check"].metadata.pop("nbgrader")
    cells["l01-attend-check"].source = "pass"
    _submit(course, "tests_changed", a, nb)

    # causal_mask wrong with its (still locked) test cell edited to `pass`
    nb = release(b)
    set_solution(
        nb,
        "l02-causal_mask-solution",
        "def causal_mask(seq):\n    return np.triu(np.ones((seq, seq), dtype=bool))\n",
    )
    set_solution(nb, "l02-padding_mask-solution", reference_source("padding_mask"))
    set_solution(nb, "l02-causal_mask-check", "pass")
    _submit(course, "edited", b, nb)

    nb = release(a)
    set_solution(nb, "l01-softmax-solution", NESTED_SWALLOW_LOOP)
    set_solution(nb, "l01-attend-solution", reference_source("attend"))
    _submit(course, "looper", a, nb)

    nb = release(a)
    set_solution(nb, "l01-softmax-solution", "import os\n\n\ndef softmax(x):\n    os._exit(1)\n")
    set_solution(nb, "l01-attend-solution", reference_source("attend"))
    _submit(course, "crasher", a, nb)

    nb = release(a)
    set_solution(nb, "l01-softmax-solution", CHEAT)
    set_solution(nb, "l01-attend-solution", "pass")
    _submit(course, "cheat", a, nb)

    nb = release(a)
    set_solution(nb, "l01-softmax-solution", PATCHER + "\n\n" + WRONG_SOFTMAX)
    set_solution(nb, "l01-attend-solution", WRONG_ATTEND)
    _submit(course, "patcher", a, nb)

    nb = release(a)
    set_solution(nb, "l01-softmax-solution", PATCH_CHECKS + "\n\n" + WRONG_SOFTMAX)
    set_solution(nb, "l01-attend-solution", WRONG_ATTEND)
    _submit(course, "patch_checks", a, nb)

    nb = release(a)
    set_solution(nb, "l01-softmax-solution", NOISY)
    set_solution(nb, "l01-attend-solution", reference_source("attend"))
    _submit(course, "noisy", a, nb)

    _submit(course, "corrupt", a, '{"cells": [ this is not json')


class Graded:
    """What one autograde run produced."""

    def __init__(self, course: Path, notebooks: Path, outcomes, lines, seconds):
        self.course, self.notebooks = course, notebooks
        self.outcomes = {(o.student, o.assignment): o for o in outcomes}
        self.lines = lines
        self.seconds = seconds
        with open(course / "grades.csv") as fh:
            self.rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(fh)}

    def autograded(self, student: str, lesson: str):
        path = self.course / "autograded" / student / lesson / f"{lesson}.ipynb"
        return nbformat.read(path, as_version=4)


@pytest.fixture(scope="module")
def fixture_course(tmp_path_factory) -> Graded:
    tmp = tmp_path_factory.mktemp("grading")
    notebooks, course = tmp / "notebooks", tmp / "course"
    write_fixture_lessons(notebooks)
    course.mkdir()
    assert gradebook.release(course, notebooks) == list(LESSONS)
    _fixture_submissions(course, notebooks)
    lines: list[str] = []
    t0 = time.perf_counter()
    outcomes = gradebook.autograde(course, notebooks, timeout=TIMEOUT, echo=lines.append)
    seconds = time.perf_counter() - t0
    print("\n".join(lines))
    gradebook.feedback(course, echo=lines.append)
    return Graded(course, notebooks, outcomes, lines, seconds)


def _score(graded: Graded, student: str, lesson: str):
    row = graded.rows[(student, lesson)]
    return row["score"], row["max_score"], row["status"], row["needs_review"]


A, B = LESSONS


def test_reference_solutions_score_full_marks(fixture_course):
    assert _score(fixture_course, "ref", A) == ("3.0", "3.0", "graded", "no")
    assert _score(fixture_course, "ref", B) == ("2.0", "2.0", "graded", "no")


def test_an_untouched_student_version_scores_zero_and_grading_goes_on(fixture_course):
    assert _score(fixture_course, "untouched", A) == ("0.0", "3.0", "graded", "no")
    assert _score(fixture_course, "untouched", B) == ("0.0", "2.0", "graded", "no")


def test_deleted_and_stripped_test_cells_are_restored_and_graded(fixture_course):
    # softmax right (its deleted test restored: 1 point), attend wrong (its test,
    # stripped to a plain `pass` cell, restored: 0 points)
    assert _score(fixture_course, "tests_changed", A)[:2] == ("1.0", "3.0")
    cells = _grade_ids(fixture_course.autograded("tests_changed", A))
    for gid in ("l01-softmax-check", "l01-attend-check"):
        assert "BEGIN HIDDEN TESTS" in cells[gid].source
    errors = [o for o in cells["l01-attend-check"].outputs if o.output_type == "error"]
    assert errors and errors[0].ename == "AssertionError"


def test_an_edited_locked_test_cell_is_restored(fixture_course):
    assert _score(fixture_course, "edited", B)[:2] == ("1.0", "2.0")
    cell = _grade_ids(fixture_course.autograded("edited", B))["l02-causal_mask-check"]
    assert cell.source.startswith("from attnlib import checks")
    assert "[causal-inverted]" in "".join(o.get("evalue", "") for o in cell.outputs)


def test_an_infinite_loop_that_swallows_interrupts_times_out_and_the_rest_is_graded(
    fixture_course,
):
    score, max_score, status, _ = _score(fixture_course, "looper", A)
    assert (score, max_score, status) == ("2.0", "3.0", "graded with problems")
    notes = fixture_course.rows[("looper", A)]["notes"]
    assert "l01-softmax-check: timed out" in notes
    assert "stuck after the timeout (restarted, rest graded)" in notes
    cell = _grade_ids(fixture_course.autograded("looper", A))["l01-softmax-check"]
    assert [o.ename for o in cell.outputs if o.output_type == "error"][:1] == ["CellTimeoutError"]


def test_a_dying_kernel_is_reported_and_the_rest_is_graded(fixture_course):
    score, _, status, review = _score(fixture_course, "crasher", A)
    assert (score, status, review) == ("2.0", "graded with problems", "yes")
    notes = fixture_course.rows[("crasher", A)]["notes"]
    assert "l01-softmax-check: the kernel died (restarted, rest graded)" in notes
    assert "uses os._exit" in notes
    assert any("crasher/01_fixture" in ln and "REVIEW" in ln for ln in fixture_course.lines)
    assert any("the kernel died" in ln for ln in fixture_course.lines)


def test_a_submission_that_cannot_be_graded_is_reported_not_zeroed(fixture_course):
    row = fixture_course.rows[("corrupt", A)]
    assert row["status"] == "NOT GRADED" and row["score"] == "" and row["needs_review"] == "yes"
    assert any(
        ln.strip().startswith("NOT GRADED  corrupt/01_fixture") for ln in fixture_course.lines
    )
    # the other students' grades are all there
    graded = [k for k, r in fixture_course.rows.items() if r["status"].startswith("graded")]
    assert len(graded) == len(fixture_course.outcomes) - 1


def test_calling_the_reference_or_returning_an_always_equal_object_scores_nothing(
    fixture_course,
):
    score, _, _, review = _score(fixture_course, "cheat", A)
    assert (score, review) == ("0.0", "yes")
    notes = fixture_course.rows[("cheat", A)]["notes"]
    assert "l01-softmax-check: calls the course reference" in notes
    assert "defines Anything.__eq__" in notes


def test_monkeypatched_testing_modules_and_checks_core_are_flagged(fixture_course):
    score, _, _, review = _score(fixture_course, "patcher", A)
    assert (score, review) == ("0.0", "yes")
    notes = fixture_course.rows[("patcher", A)]["notes"]
    hidden = [n for n in notes.split(" | ") if "hidden test found tampering" in n]
    assert len(hidden) == 2  # both exercises: the visible checks passed, the hidden did not
    for name in ("numpy.testing.assert_allclose", "torch.testing.assert_close", "_core.run"):
        assert name in hidden[0]


def test_replacing_the_checks_themselves_is_flagged_for_review(fixture_course):
    # The learner's kernel runs the tests, so replacing check_hidden before the test cell
    # runs defeats any in-kernel check: the audit outside the kernel flags it instead.
    row = fixture_course.rows[("patch_checks", A)]
    assert row["needs_review"] == "yes"
    assert "audit: l01-softmax-solution: assigns to checks.check_hidden" in row["notes"]


def test_a_correct_solution_that_writes_to_stderr_keeps_its_points(fixture_course):
    assert _score(fixture_course, "noisy", A) == ("3.0", "3.0", "graded", "no")


def test_grading_time_is_recorded(fixture_course):
    seconds = [o.seconds for o in fixture_course.outcomes.values()]
    assert all(s > 0 for s in seconds)
    assert any(
        re.search(r"graded \d+ submission\(s\) in [\d.]+ s", ln) for ln in fixture_course.lines
    )
    report = json.loads((fixture_course.course / gradebook.REPORT_NAME).read_text())
    assert report[A]["looper"]["status"] == "graded with problems"


# ----------------------------------------------------------------------------------------
# Nothing secret in what learners get back
# ----------------------------------------------------------------------------------------


def _leaks(text: str, lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln in text]


def test_releases_contain_no_solutions_and_no_hidden_tests(fixture_course):
    for lesson in LESSONS:
        src = nbformat.read(fixture_course.notebooks / f"{lesson}.ipynb", as_version=4)
        text = (fixture_course.course / "release" / lesson / f"{lesson}.ipynb").read_text()
        assert _leaks(text, solution_lines(src)) == []
        assert _leaks(text, hidden_lines(src)) == []
        assert "HIDDEN TESTS" not in text


def test_feedback_contains_no_hidden_tests(fixture_course):
    files = sorted((fixture_course.course / "feedback").rglob("*.html"))
    graded = [k for k, o in fixture_course.outcomes.items() if o.status != "NOT GRADED"]
    assert len(files) == len(graded)
    for path in files:
        text = path.read_text()
        lesson = path.parent.name
        src = nbformat.read(fixture_course.notebooks / f"{lesson}.ipynb", as_version=4)
        assert "HIDDEN TESTS" not in text, path
        assert _leaks(text, hidden_lines(src)) == [], path
        if path.parts[-3] == "untouched":
            assert _leaks(text, solution_lines(src)) == [], path
    # a failed test shows its message; a failed hidden test not its source
    cheat = (fixture_course.course / "feedback" / "cheat" / A / f"{A}.html").read_text()
    assert "calls the course's reference" in cheat
    patcher = (fixture_course.course / "feedback" / "patcher" / A / f"{A}.html").read_text()
    assert TAMPER_TAG in patcher


def test_course_csv_export_plugin(fixture_course, monkeypatch, tmp_path):
    from nbgrader.api import Gradebook

    monkeypatch.chdir(fixture_course.course)
    plugin = gradebook.CourseCsvExport(to=str(tmp_path / "g.csv"))
    with Gradebook(f"sqlite:///{fixture_course.course / 'gradebook.db'}") as gb:
        plugin.export(gb)
    with open(tmp_path / "g.csv") as fh:
        rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(fh)}
    assert rows == fixture_course.rows


def test_validate_source_lessons_and_invert_on_releases(fixture_course):
    lines: list[str] = []
    assert gradebook.validate(fixture_course.course, fixture_course.notebooks, echo=lines.append)
    assert sum(ln.startswith("ok: nbgrader validate /") for ln in lines) == len(LESSONS)
    assert sum(ln.startswith("ok: nbgrader validate --invert /") for ln in lines) == len(LESSONS)


# ----------------------------------------------------------------------------------------
# The preprocessors on their own
# ----------------------------------------------------------------------------------------


def _test_cell(source, outputs):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {
        "grade": True,
        "solution": False,
        "locked": True,
        "points": 1,
        "grade_id": "t",
        "schema_version": 3,
    }
    cell.outputs = outputs
    return cell


def test_stderr_in_a_test_cell_is_not_a_failure_but_errors_are():
    from nbgrader.utils import determine_grade

    warn = nbformat.v4.new_output("stream", name="stderr", text="UserWarning: careful\n")
    err = nbformat.v4.new_output("error", ename="AssertionError", evalue="no", traceback=[])
    ok_cell = _test_cell("checks.check('x', f)", [warn])
    bad_cell = _test_cell("checks.check('x', f)", [copy_output(warn), err])
    assert determine_grade(ok_cell)[0] == 0  # plain nbgrader: stderr scores 0
    pp = gradebook.StderrIsNotFailure()
    for cell in (ok_cell, bad_cell):
        pp.preprocess_cell(cell, {}, 0)
    assert determine_grade(ok_cell)[0] == 1
    assert ok_cell.outputs[0].text == "[stderr] UserWarning: careful\n"
    assert determine_grade(bad_cell)[0] == 0


def copy_output(out):
    return nbformat.from_dict(json.loads(json.dumps(out)))


def test_hidden_test_tracebacks_are_cut_to_their_last_line():
    tb = ["\x1b[0;31m---> 3\x1b[0m checks.check_hidden('x', f)", "AssertionError: ✘ x: hidden"]
    err = nbformat.v4.new_output(
        "error", ename="AssertionError", evalue="✘ x: hidden", traceback=tb
    )
    cell = _test_cell(
        "a\n### BEGIN HIDDEN TESTS\nchecks.check_hidden('x', f)\n### END HIDDEN TESTS", [err]
    )
    gradebook.ShortenHiddenTracebacks().preprocess_cell(cell, {}, 0)
    assert cell.outputs[0].traceback == ["AssertionError: ✘ x: hidden"]


def test_the_audit_flags_tampering_but_not_ordinary_solutions():
    forbidden = {"attend", "softmax"}
    assert gradebook.audit_code(reference_source("attend"), forbidden) == []
    assert gradebook.audit_code("np.testing.assert_allclose = print", forbidden) == [
        "assigns to np.testing.assert_allclose"
    ]
    assert gradebook.audit_code("import numpy as xp\nxp.isclose = 1", forbidden) == [
        "assigns to xp.isclose"
    ]
    assert gradebook.audit_code("from attnlib import attend", forbidden) == [
        "imports attend from attnlib (a course reference)"
    ]
    assert "calls setattr()" in gradebook.audit_code("setattr(np, 'exp', f)", forbidden)
    assert gradebook.audit_code("%timeit pass\nx = 1", forbidden) == []  # magics parse


# ----------------------------------------------------------------------------------------
# Every graded lesson in notebooks/
# ----------------------------------------------------------------------------------------

LESSON_PATHS = [
    p for p in lesson_paths(ROOT / "notebooks") if gradebook.is_graded(p)
]


@pytest.fixture(scope="module")
def real_course(tmp_path_factory) -> Graded:
    if not LESSON_PATHS:
        pytest.skip("no graded lessons in notebooks/ yet")
    course = tmp_path_factory.mktemp("course")
    notebooks = ROOT / "notebooks"
    names = gradebook.release(course, notebooks)
    for name in names:
        _submit(
            course, "instructor", name, nbformat.read(notebooks / f"{name}.ipynb", as_version=4)
        )
        rel = nbformat.read(course / "release" / name / f"{name}.ipynb", as_version=4)
        _submit(course, "untouched", name, rel)
    lines: list[str] = []
    t0 = time.perf_counter()
    outcomes = gradebook.autograde(course, notebooks, echo=lines.append)
    print("\n".join(lines))
    gradebook.feedback(course, echo=lines.append)
    graded = Graded(course, notebooks, outcomes, lines, time.perf_counter() - t0)
    graded.names = names
    return graded


@pytest.mark.parametrize("lesson", [p.stem for p in LESSON_PATHS])
def test_every_lesson_grades_full_marks_for_its_solution_and_zero_untouched(real_course, lesson):
    score, max_score, status, review = _score(real_course, "instructor", lesson)
    assert float(max_score) > 0
    assert (score, status, review) == (max_score, "graded", "no"), real_course.rows[
        ("instructor", lesson)
    ]["notes"]
    assert _score(real_course, "untouched", lesson)[:3] == ("0.0", max_score, "graded")


@pytest.mark.parametrize("lesson", [p.stem for p in LESSON_PATHS])
def test_every_release_and_feedback_keeps_solutions_and_hidden_tests_secret(real_course, lesson):
    src = nbformat.read(ROOT / "notebooks" / f"{lesson}.ipynb", as_version=4)
    outside = re.sub(
        r"### BEGIN SOLUTION\n.*?### END SOLUTION",
        "",
        "\n".join(c.source for c in src.cells),
        flags=re.S,
    )
    secret = [ln for ln in solution_lines(src) if ln not in outside]
    for path in (
        real_course.course / "release" / lesson / f"{lesson}.ipynb",
        real_course.course / "feedback" / "untouched" / lesson / f"{lesson}.html",
    ):
        text = path.read_text()
        assert _leaks(text, secret) == [], path
        assert _leaks(text, hidden_lines(src)) == [], path
        assert "HIDDEN TESTS" not in text, path
    instructor_fb = real_course.course / "feedback" / "instructor" / lesson / f"{lesson}.html"
    assert "check_hidden" not in instructor_fb.read_text()


def test_nbgrader_validate_on_every_source_lesson_and_invert_on_every_release(real_course):
    lines: list[str] = []
    ok = gradebook.validate(real_course.course, ROOT / "notebooks", echo=lines.append)
    assert ok, "\n".join(lines)
    n = len(real_course.names)
    assert sum(ln.startswith("ok: nbgrader validate /") for ln in lines) == n, lines
    assert sum(ln.startswith("ok: nbgrader validate --invert /") for ln in lines) == n, lines
