"""The real nbgrader flow, in the sandbox: release, exchange, autograde, export, feedback.

Each class grades its own course in ONE ``autograde`` run (tests/grading_course.py builds
and grades it; its class-scoped fixture ``graded``): the hostile and honest submissions, and
the old scenarios with nbgrader's exchange, on the fixture lessons of tests/nbfixtures.py
(every graded lesson of notebooks/ is graded the same way in tests/test_grading_lessons.py,
CI's second stage). ``make test`` distributes by class (``--dist loadscope``), so the
courses are graded on all workers at once. What every course must satisfy (no hidden test
in any feedback, the export plugin's rows) is checked for each, in :class:`EveryCourse`.
"""

from __future__ import annotations

import json
import re

import nbformat
import pytest
from grading_course import (
    FIXTURES,
    LEARNERS,
    LESSONS,
    PLANTED,
    A,
    B,
    C,
    EveryCourse,
    grade_ids,
    graded_course,
    leaks,
)
from hostile import HONEST, HOSTILE
from nbfixtures import hidden_lines, reference_source, solution_lines
from nbfixtures import write_lessons as write_fixture_lessons

from attnlib.checks.grading import TAMPER_TAG
from kvstaff.grader import audit, execution, export
from kvstaff.grader.course import release, validate

pytestmark = [
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Object of type:Warning"),  # nbgrader's SQLAlchemy use
    pytest.mark.filterwarnings("ignore:Cell is missing an id field:Warning"),
]

#: Students whose own tests below read their outputs: graded in TestHostileA.
NAMED = {
    "h01_reference",
    "h03_patch_testing",
    "h11_bytecode",
    "h19_escape",
    "h21_result_as_score",
    "h34_script",
}


class _HostileCourse(EveryCourse):
    """tests/hostile.py on the first fixture lesson, in three courses of about equal cost: A
    has the honest controls, the students the tests below name and a third of the rest,
    graded two at a time (autograde's parallel path); B and C a third each, one at a time."""

    part = "A"

    @classmethod
    def hostile(cls):
        named = [s for s in HOSTILE if s.student in NAMED]
        rest = [s for s in HOSTILE if s.student not in NAMED]
        third = {"A": rest[0::3], "B": rest[1::3], "C": rest[2::3]}[cls.part]
        return named + third if cls.part == "A" else third

    @classmethod
    def honest(cls):
        return list(HONEST) if cls.part == "A" else []

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, tmp_path_factory):
        subs = cls.hostile() + cls.honest()
        jobs = 2 if cls.part == "A" else 1
        return graded_course(tmp_path_factory, f"hostile{cls.part}", hostile=subs, jobs=jobs)

    def test_a_hostile_submission_earns_nothing_and_is_flagged(self, graded, hostile_sub):
        sub = hostile_sub
        row = graded.rows[(sub.student, A)]
        assert row["status"] == sub.status, (sub.what, row)
        assert row["score"] == "" and row["raw_score"] == "", row  # never a number
        assert row["needs_review"] == "yes"
        for needle in sub.notes:
            assert needle in row["notes"], (sub.what, needle, row["notes"])
        if sub.auto is not None:  # the autograder's own number, kept for the reviewer
            report = json.loads((graded.course / export.REPORT_NAME).read_text())
            assert report[A][sub.student]["auto_score"] == sub.auto, (sub.what, row["notes"])


class TestHostileA(_HostileCourse):
    part = "A"

    def test_no_output_a_browser_would_run_reaches_staff_or_learners(self, graded):
        nb = graded.autograded("h34_script", A)
        kinds = {k for c in nb.cells for o in c.get("outputs", []) for k in o.get("data", {})}
        assert kinds <= {"text/plain", "image/png", "image/jpeg"}, kinds
        html = (graded.course / "feedback" / "h34_script" / A / f"{A}.html").read_text()
        assert "<script>document.title" not in html and "<b>ready</b>" not in html

    def test_an_honest_submission_keeps_its_points_unflagged(self, graded, honest_sub):
        sub = honest_sub
        row = graded.rows[(sub.student, A)]
        assert (row["score"], row["status"], row["needs_review"]) == (
            f"{float(sub.points)}",
            "graded",
            "no",
        ), row["notes"]

    def test_a_number_shown_by_a_check_cell_is_not_read_as_a_score(self, graded):
        # nbgrader reads a test cell's result as partial credit (and stops there, before the
        # grader's error): the result is shown as plain output, so the score kept for the
        # reviewer is the grader's, 0
        report = json.loads((graded.course / export.REPORT_NAME).read_text())
        assert report[A]["h21_result_as_score"]["auto_score"] == 0.0
        cells = grade_ids(graded.autograded("h21_result_as_score", A))
        outs = cells["l01-softmax-check"].outputs
        assert [o.output_type for o in outs] == ["display_data", "error"]

    def test_nothing_printed_during_hidden_cases_reaches_the_feedback(self, graded):
        html = (graded.course / "feedback" / "ok_magic_and_prints" / A / f"{A}.html").read_text()
        assert "SHAPE-LEAK (3, 5)" in html  # a visible case: the learner may see it
        for hidden_shape in ("(5, 3)", "(3, 2, 7)", "(4, 6)"):  # softmax's hidden cases
            assert f"SHAPE-LEAK {hidden_shape}" not in html

    def test_the_sandbox_kept_the_kernel_away_from_the_course_and_the_network(self, graded):
        text = json.dumps(graded.autograded("h19_escape", A).cells[3].outputs)
        assert f"{graded.course}/gradebook.db False" in text
        assert f"{graded.course}/submitted False" in text
        assert "no network:" in text and "read-only:" in text

    def test_no_kernel_can_plant_bytecode_for_the_next_one(self, graded):
        text = json.dumps(graded.autograded("h11_bytecode", A).cells[3].outputs)
        assert "could not plant" in text and "PLANTED" not in text
        # autograde rebuilt this bytecode from the real source before grading; it is not the fake
        assert not PLANTED.exists() or b"_REGISTRY" in PLANTED.read_bytes()
        # and the learners graded after it kept their points
        assert graded.score("ok_reference")[0] == "3.0"

    def test_a_failed_check_shows_its_message_and_a_hidden_one_not_its_source(self, graded):
        ref = (graded.course / "feedback" / "h01_reference" / A / f"{A}.html").read_text()
        assert "calls the course&#39;s reference" in ref or "calls the course's reference" in ref
        patcher = (graded.course / "feedback" / "h03_patch_testing" / A / f"{A}.html").read_text()
        assert TAMPER_TAG in patcher


class TestHostileB(_HostileCourse):
    part = "B"


class TestHostileC(_HostileCourse):
    part = "C"


def pytest_generate_tests(metafunc):
    """Each course's tests run once per submission of that course."""
    for name, of in (("hostile_sub", "hostile"), ("honest_sub", "honest")):
        if name in metafunc.fixturenames:
            subs = getattr(metafunc.cls, of)()
            metafunc.parametrize(name, subs, ids=[s.student for s in subs])


class TestScenarios(EveryCourse):
    """The three fixture lessons: the old scenarios, and two learners through nbgrader's
    exchange."""

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, tmp_path_factory):
        return graded_course(tmp_path_factory, "scenarios", scenarios=True)

    def test_reference_solutions_score_full_marks(self, graded):
        assert graded.score("ref", A) == ("3.0", "3.0", "graded", "no")
        assert graded.score("ref", B) == ("2.0", "2.0", "graded", "no")
        assert graded.rows[("ref", A)]["sandbox"] == export.SANDBOXED

    def test_an_untouched_student_version_scores_zero_and_grading_goes_on(self, graded):
        assert graded.score("untouched", A) == ("0.0", "3.0", "graded", "no")
        assert graded.score("untouched", B) == ("0.0", "2.0", "graded", "no")

    def test_deleted_and_stripped_test_cells_are_restored_and_graded(self, graded):
        # softmax right (its deleted test restored: 1 point), attend wrong (its test,
        # stripped to a plain `pass` cell, restored: 0 points)
        assert graded.score("tests_changed", A)[:3] == ("1.0", "3.0", "graded")
        cells = grade_ids(graded.autograded("tests_changed", A))
        for gid in ("l01-softmax-check", "l01-attend-check"):
            assert "BEGIN HIDDEN TESTS" in cells[gid].source
        errors = [o for o in cells["l01-attend-check"].outputs if o.output_type == "error"]
        assert errors and errors[0].ename == "AssertionError"
        assert "missing from the submission; put back" in graded.rows[("tests_changed", A)]["notes"]

    def test_an_edited_locked_test_cell_is_restored(self, graded):
        assert graded.score("edited", B)[:2] == ("1.0", "2.0")
        cell = grade_ids(graded.autograded("edited", B))["l02-causal_mask-check"]
        assert cell.source.startswith("from attnlib import checks")
        assert "[causal-inverted]" in "".join(o.get("evalue", "") for o in cell.outputs)

    def test_an_infinite_loop_that_swallows_interrupts_times_out_and_the_rest_is_graded(
        self, graded
    ):
        score, max_score, status, _ = graded.score("looper", A)
        assert (score, max_score, status) == ("2.0", "3.0", "graded with problems")
        notes = graded.rows[("looper", A)]["notes"]
        assert "l01-softmax-check: timed out" in notes
        assert "stuck after the timeout (restarted, rest graded)" in notes
        cell = grade_ids(graded.autograded("looper", A))["l01-softmax-check"]
        assert [o.ename for o in cell.outputs if o.output_type == "error"][:1] == [
            "CellTimeoutError"
        ]

    def test_a_submission_that_cannot_be_graded_is_reported_not_zeroed(self, graded):
        row = graded.rows[("corrupt", A)]
        assert row["status"] == "NOT GRADED" and row["score"] == "" and row["needs_review"] == "yes"
        assert any("NOT GRADED" in ln and "corrupt/01_fixture" in ln for ln in graded.lines)
        # every other submission has its row
        assert len(graded.outcomes) == sum(
            r["status"] != "no submission" for r in graded.rows.values()
        )

    def test_grading_time_and_progress_are_reported(self, graded):
        seconds = [o.seconds for o in graded.outcomes.values() if o.status != "NOT GRADED"]
        assert all(s > 0 for s in seconds)
        summary = [ln for ln in graded.lines if ln.startswith("graded ") and "worker(s)" in ln]
        assert summary and f"with {graded.jobs} worker(s)" in summary[0] and "median" in summary[0]
        assert any(re.match(r"\[[#.]+\]\s+\d+/\d+ ", ln) for ln in graded.lines)
        report = json.loads((graded.course / export.REPORT_NAME).read_text())
        assert report[A]["looper"]["status"] == "graded with problems"

    def test_an_exercise_in_two_parts_earns_a_point_per_part_judged_by_the_grader(self, graded):
        assert graded.score("ref", C) == ("2.0", "2.0", "graded", "no")
        assert graded.score("untouched", C) == ("0.0", "2.0", "graded", "no")
        assert graded.score("half", C) == ("1.0", "2.0", "graded", "no")
        cells = grade_ids(graded.autograded("half", C))
        cache, output = cells["l03-decode_step-check"], cells["l03-decode_step-output-check"]
        assert not [o for o in cache.outputs if o.output_type == "error"]
        assert "✔ decode_step_cache: correct on all" in json.dumps(
            cache.outputs, ensure_ascii=False
        )
        errors = [o for o in output.outputs if o.output_type == "error"]
        assert errors and errors[0].evalue.startswith("✘ decode_step_output:")
        assert "[mask-blocks-past]" in errors[0].evalue  # the visible check names the mistake
        assert "one part of decode_step" in errors[0].evalue
        # and the gradebook holds one point per part cell, as nbgrader's formgrader shows it
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{graded.course / 'gradebook.db'}") as gb:
            nb = gb.find_submission_notebook(C, C, "half")
            points = {g.name: (g.auto_score, g.max_score) for g in nb.grades}
        assert points == {
            "l03-decode_step-check": (1.0, 1.0),
            "l03-decode_step-output-check": (0.0, 1.0),
        }

    def test_the_exchange_flow_grades_each_learner_and_returns_their_feedback(self, graded):
        assert graded.score("alice") == ("3.0", "3.0", "graded", "no")
        for who in LEARNERS:
            fetched = list((graded.homes / who / A / "feedback").rglob(f"{A}.html"))
            assert len(fetched) == 1, who
        alice_fb = next((graded.homes / "alice" / A / "feedback").rglob(f"{A}.html")).read_text()
        assert "check_hidden" not in alice_fb and "HIDDEN TESTS" not in alice_fb

    def test_one_learner_cannot_change_another_learners_grade(self, graded):
        from nbgrader.api import Gradebook

        bob = graded.rows[("bob", A)]
        assert bob["status"] == "FLAGGED" and "imports sqlite3" in bob["notes"]
        text = json.dumps(graded.autograded("bob", A).cells[3].outputs)
        assert "WROTE" not in text and text.count("cannot reach") == 2
        with Gradebook(f"sqlite:///{graded.course / 'gradebook.db'}") as gb:
            sub = gb.find_submission(A, "alice")
            assert sub.score == 3.0
            for nb in sub.notebooks:
                assert all(g.manual_score is None for g in nb.grades)

    def test_releases_contain_no_solutions_and_no_hidden_tests(self, graded):
        for lesson in FIXTURES:
            src = nbformat.read(graded.notebooks / f"{lesson}.ipynb", as_version=4)
            text = (graded.course / "release" / lesson / f"{lesson}.ipynb").read_text()
            assert leaks(text, solution_lines(src)) == []
            assert leaks(text, hidden_lines(src)) == []
            assert "HIDDEN TESTS" not in text


# ---- module-level: nbgrader validate, and the pieces on their own -----------------------------


def test_validate_source_lessons_and_invert_on_releases(tmp_path):
    # nbgrader validate runs the hidden tests in the kernel (no grader around): the
    # in-process verify path. Two fixture lessons; the real lessons' solutions and stubs
    # are graded above (full marks / zero), and run under nbval with their hidden tests.
    notebooks, course = tmp_path / "notebooks", tmp_path / "course"
    write_fixture_lessons(notebooks)
    release(course, notebooks)
    lines: list[str] = []
    assert validate(course, notebooks, echo=lines.append), lines
    assert sum(ln.startswith("ok: nbgrader validate /") for ln in lines) == len(LESSONS)
    assert sum(ln.startswith("ok: nbgrader validate --invert /") for ln in lines) == len(LESSONS)


# ---- the preprocessors and the audit on their own ------------------------------------------


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
    pp = execution.StderrIsNotFailure()
    for cell in (ok_cell, bad_cell):
        pp.preprocess_cell(cell, {}, 0)
    assert determine_grade(ok_cell)[0] == 1
    assert ok_cell.outputs[0].text == "[stderr] UserWarning: careful\n"
    assert determine_grade(bad_cell)[0] == 0


def test_a_test_cells_result_is_shown_not_scored():
    from nbgrader.utils import determine_grade

    result = nbformat.v4.new_output("execute_result", data={"text/plain": "1.0"})
    err = nbformat.v4.new_output("error", ename="AssertionError", evalue="✘ x", traceback=[])
    cell = _test_cell("checks.check('x', f)", [result, err])
    assert determine_grade(cell)[0] == 1  # plain nbgrader: the result wins over the error
    execution.results_are_not_scores(cell)
    assert [o.output_type for o in cell.outputs] == ["display_data", "error"]
    assert cell.outputs[0].data == {"text/plain": "1.0"}
    assert determine_grade(cell)[0] == 0
    shown = _test_cell("checks.check('x', f)", [copy_output(result)])
    execution.results_are_not_scores(shown)
    assert determine_grade(shown)[0] == 1  # no error: full points, whatever it shows


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
    execution.ShortenHiddenTracebacks().preprocess_cell(cell, {}, 0)
    assert cell.outputs[0].traceback == ["AssertionError: ✘ x: hidden"]


def test_the_audit_flags_tampering_but_not_ordinary_solutions():
    forbidden = {"attend", "softmax"}
    assert audit.audit_code(reference_source("attend"), forbidden) == []
    assert audit.audit_code("np.testing.assert_allclose = print", forbidden) == [
        "assigns to np.testing.assert_allclose"
    ]
    assert audit.audit_code("import numpy as xp\nxp.isclose = 1", forbidden) == [
        "assigns to xp.isclose"
    ]
    assert audit.audit_code("from attnlib import attend", forbidden) == [
        "imports attend from attnlib (a course reference)"
    ]
    assert "calls setattr()" in audit.audit_code("setattr(np, 'exp', f)", forbidden)
    assert audit.audit_code("%timeit pass\nx = 1", forbidden) == []  # magics parse


def test_the_audit_follows_aliases_and_flags_hooks_files_and_the_gradebook():
    forbidden = {"attend", "softmax"}
    found = audit.audit_cells(
        [
            "import attnlib.checks\n_c = attnlib.checks",
            "_c.check_hidden = lambda *a, **k: None",
            "def f(m):\n    m.check = None\n\n\nf(np)",
            "for mod in (np, torch):\n    mod.isclose = None",
        ],
        forbidden,
    )
    assert found[1] == ["assigns to _c.check_hidden"]
    assert "assigns to m.check" in found[2]
    assert "assigns to mod.isclose" in found[3]
    hooks = audit.audit_code(
        "ip = get_ipython()\nip.input_transformers_post.append(f)\nip.events.register('x', f)",
        forbidden,
    )
    assert "calls get_ipython()" in hooks and "uses ip.input_transformers_post" in hooks
    assert "uses ip.events" in hooks
    assert audit.audit_code("import sqlite3", forbidden) == ["imports sqlite3"]
    assert "opens a file for writing" in audit.audit_code("open('x.py', 'w')", forbidden)
    assert "names 'gradebook' in a string" in audit.audit_code("p = '../gradebook.db'", forbidden)
    # honest code: arrays are assigned into, torch.softmax is not "a course reference"
    honest = "out = np.zeros((2, 3))\nout[0, 1] = 1.0\nw = torch.softmax(s, -1)\nprint(sys.argv)"
    assert audit.audit_code(honest, forbidden) == []
    assert audit.audit_code("import attnlib as al\ny = al.softmax(x)", forbidden) == [
        "uses al.softmax (a course reference)"
    ]


def test_nbgrader_log_lines_about_changed_metadata_are_findings():
    log = (
        "[AutogradeApp | WARNING] Attribute 'locked' for cell l01-softmax-solution has "
        "changed! (should be: False, got: True)\n"
        "[AutogradeApp | WARNING] Attribute 'checksum' for cell l01-softmax-check has "
        "changed! (should be: abc, got: def)\n"
        "[AutogradeApp | WARNING] Missing grade cell l01-attend-check encountered, adding\n"
    )
    review, notes = audit.log_findings(log)
    assert len(review) == 1 and "locked" in review[0]  # a checksum line is not a finding
    assert notes == ["l01-attend-check: missing from the submission; put back and graded"]


def test_a_hidden_region_is_split_from_the_visible_part():
    source = (
        'from attnlib import checks\n\nchecks.check("softmax", softmax)\n'
        '### BEGIN HIDDEN TESTS\nchecks.check_hidden("softmax", softmax)\n### END HIDDEN TESTS'
    )
    visible, hidden = execution.split_hidden(source)
    assert "check_hidden" not in visible and "checks.check(" in visible
    assert hidden.strip() == 'checks.check_hidden("softmax", softmax)'
    assert execution.split_hidden("x = 1") is None
