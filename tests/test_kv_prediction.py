"""Lesson 05's "predict, then check" (Exercise 5.2): graded by the grader only.

* the answer key is the grader's (staff/kvstaff/grader/answer_keys.py): the module the
  learner's kernel loads holds no answers, not even digests of them; a kernel without the
  key can record answers but not judge them; the sandbox hides the grader wing;
* the key agrees with what lesson 05 measures (section 7's stored output);
* the lesson's own cells (``recorded``, the visible cases) check the format and judge
  nothing, so a wrong answer passes them exactly like a right one: no trial and error;
* the hidden cases, judged by the grader, judge every statement, and a flipped statement
  fails only the part that holds it (partial credit), naming that statement's misconception.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import NOTEBOOKS, ROOT
from named import grader_check_hidden

from attnlib import checks
from attnlib.checks import ex_keys_values as KV
from attnlib.checks import get_exercise
from attnlib.checks.grading import fresh_core
from kvstaff.grader import answer_keys, sandbox

# The grader's key, statement 1 first (the test process holds it, as the grader does).
TRUTH = tuple(answer_keys.KV_PREDICTION[s] for s in range(1, 9))
PARTS = ["kv_prediction", *KV.PARTS]


def _answers(values):
    return KV.answers(lambda: np.array(values))


def test_the_key_agrees_with_what_lesson_05_measures():
    nb = json.loads((NOTEBOOKS / "05_keys_vs_values.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "measured = (" in "".join(c["source"]))
    text = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    found = re.findall(r"^(true|false)\s+(\d)\. ", text, flags=re.M)
    assert [int(n) for _, n in found] == list(range(1, 9)), text
    assert tuple(t == "true" for t, _ in found) == TRUTH
    assert sum(TRUTH) == 4  # as many true as false: guessing "all true" earns half


def test_the_kernel_side_holds_no_answers():
    source = inspect.getsource(KV)
    assert "TRUTH" not in source and "sha256" not in source and "_SALT" not in source
    for name, value in vars(KV).items():
        if name == "_ANSWER_KEY":  # where the grader installs its key (empty in a kernel)
            continue
        values = value.values() if isinstance(value, dict) else value
        if isinstance(value, tuple | list | dict) and len(value) == 8:
            assert not all(isinstance(v, bool | np.bool_) for v in values), name
    # a kernel loads the checks fresh, and a fresh copy has no key
    core = fresh_core()
    assert core.get_exercise("kv_prediction").key_installed() is False
    # the explanations (shipped with the module) do not say which answer is right
    for mid, text in KV._WHY.values():
        assert " is true" not in text and " is false" not in text, mid


def test_a_fresh_interpreter_that_imports_the_checks_has_no_key():
    code = (
        "from attnlib.checks import ex_keys_values as KV\n"
        "import attnlib.checks\n"
        "print(KV.has_answer_key(), KV._ANSWER_KEY)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "{}"]


def test_without_the_key_a_kernel_records_and_does_not_judge(capsys):
    wrong = _answers([not t for t in TRUTH])
    checks.check_hidden("kv_prediction_tied", wrong)  # a kernel's check_hidden: no verdict
    assert capsys.readouterr().out == (
        "kv_prediction_tied: your answers are judged by the grader when you hand the notebook in\n"
    )
    saved = dict(KV._ANSWER_KEY)
    KV._ANSWER_KEY.clear()
    try:
        with pytest.raises(LookupError, match="not in this kernel"):
            checks.run("kv_prediction_tied", wrong, hidden=True)
    finally:
        KV.install_answer_key(saved)


def test_the_key_must_name_every_statement_with_a_bool():
    with pytest.raises(ValueError, match="statements 1-8"):
        KV.install_answer_key({1: True})
    with pytest.raises(TypeError, match="bool"):
        KV.install_answer_key(dict.fromkeys(range(1, 9), 1))
    assert KV.has_answer_key()  # a refused key changed nothing


@pytest.mark.needs("bubblewrap")
def test_the_sandbox_hides_the_staff_package_and_its_keys():
    box = sandbox.Sandbox(slot=5)
    try:
        (box.work / "probe.py").write_text(
            "import json, os, importlib.util\n"
            f"wing = {str(ROOT / 'staff' / 'kvstaff')!r}\n"
            "try:\n"
            "    import kvstaff.grader.answer_keys\n"
            "    imported = True\n"
            "except ImportError:\n"
            "    imported = False\n"
            "try:\n"
            "    open(os.path.join(wing, 'planted.py'), 'w').close()\n"
            "    wrote = True\n"
            "except OSError:\n"
            "    wrote = False\n"
            "import attnlib.checks\n"
            "print(json.dumps([os.listdir(wing), imported, wrote]))\n"
        )
        box.hand_over(box.work)
        argv = box.command([sys.executable, "probe.py"], log=False)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-3000:]
        listed, imported, wrote = json.loads(done.stdout.strip().splitlines()[-1])
        assert (listed, imported, wrote) == ([], False, False)
    finally:
        box.cleanup()


def test_the_parts_cover_every_statement_once_two_each():
    covered = [s for part in KV.PARTS.values() for s in part]
    assert sorted(covered) == list(range(1, 9))
    for part, statements in KV.PARTS.items():
        assert len(get_exercise(part).cases()) == len(statements)
        assert get_exercise(part).blind


@pytest.mark.parametrize("part", PARTS)
def test_the_visible_check_cannot_tell_right_from_wrong(part, capsys):
    right, wrong = _answers(TRUTH), _answers([not t for t in TRUTH])
    checks.check(part, right)
    checks.check(part, wrong)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1]  # the same line: nothing revealed
    assert checks.run(part, wrong).ok and checks.run(part, wrong).misconceptions == []


@pytest.mark.parametrize("part", list(KV.PARTS))
def test_recorded_echoes_the_answers_and_judges_nothing(part, capsys):
    KV.recorded(part, lambda: np.array(TRUTH))
    right = capsys.readouterr().out
    KV.recorded(part, lambda: ~np.array(TRUTH))
    wrong = capsys.readouterr().out
    assert "graded when you hand the notebook in" in right
    strip = str.maketrans("", "", "truefals")
    assert right.translate(strip) == wrong.translate(strip)


def test_a_flipped_statement_fails_only_its_part_in_the_hidden_check():
    wrong = list(TRUTH)
    wrong[4] = not wrong[4]  # statement 5
    prediction = _answers(wrong)
    with pytest.raises(AssertionError, match="hidden tests failed") as err:
        grader_check_hidden("kv_prediction_tied", prediction)
    assert "tied-only-slower" in str(err.value)
    for part in ("kv_prediction_control", "kv_prediction_separate", "kv_prediction_width"):
        grader_check_hidden(part, prediction)  # partial credit: the other parts still pass
    assert checks.run("kv_prediction", prediction, hidden=True).misconceptions == [
        "tied-only-slower"
    ]


@pytest.mark.parametrize("s", range(1, 9))
def test_every_single_wrong_answer_is_named_by_the_grader(s):
    wrong = list(TRUTH)
    wrong[s - 1] = not wrong[s - 1]
    part = next(p for p, st in KV.PARTS.items() if s in st)
    report = checks.run(part, _answers(wrong), hidden=True)
    assert not report.ok and report.misconceptions == [KV._WHY[s][0]]


@pytest.mark.parametrize(
    "bad",
    [
        lambda: "True",
        lambda: np.array(TRUTH[:1]),
        lambda: None,
        lambda: np.array(TRUTH, dtype=float),  # numbers, not booleans
        lambda: TRUTH,  # a tuple, not an array
    ],
)
@pytest.mark.parametrize("part", PARTS)
def test_malformed_predictions_fail_visibly_with_a_clear_message(bad, part):
    report = checks.run(part, KV.answers(bad))
    assert not report.ok and "kv_prediction() must return" in report.first_failure
    if part in KV.PARTS:
        with pytest.raises(AssertionError, match="kv_prediction\\(\\) must return"):
            KV.recorded(part, bad)


def test_an_unwritten_prediction_reads_as_not_written(capsys):
    def stub():
        raise NotImplementedError()

    KV.recorded("kv_prediction_tied", stub)  # one line, no error: Run All goes on
    out = capsys.readouterr().err
    assert checks.read_results(out)["kv_prediction_tied"].status == "not written"
