"""Lesson 05's "predict, then check" (Exercise 5.2): graded by the grader only.

* the module the learner's kernel loads holds no answers, only salted digests;
* the lesson's own cells (``recorded``, the visible cases) check the format and judge
  nothing, so a wrong answer passes them exactly like a right one: no trial and error;
* the hidden cases (the grader's) judge every statement, and a flipped statement fails
  only the part that holds it (partial credit), naming that statement's misconception.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from attnlib import checks
from attnlib.checks import ex_keys_values as KV
from attnlib.checks import get_exercise

# The measured truths (lesson 05, section 7) live here, outside anything a kernel imports.
TRUTH = (True, False, True, False, False, True, True, False)
PARTS = ["kv_prediction", *KV.PARTS]


def _answers(values):
    return KV.answers(lambda: np.array(values))


def test_the_key_agrees_with_the_measured_truths_and_nothing_else():
    assert KV.agrees_with_key(TRUTH)
    for s in range(8):
        flipped = list(TRUTH)
        flipped[s] = not flipped[s]
        assert not KV.agrees_with_key(flipped), s
    assert sum(TRUTH) == 4  # as many true as false: guessing "all true" earns half


def test_the_module_holds_no_answers():
    source = inspect.getsource(KV)
    assert "TRUTH" not in source and not hasattr(KV, "TRUTH")
    for name, value in vars(KV).items():
        if isinstance(value, tuple) and len(value) == 8:
            assert not all(isinstance(v, bool | np.bool_) for v in value), name
    # the explanations (shipped with the module) do not say which answer is right
    for mid, text in KV._WHY.values():
        assert " is true" not in text and " is false" not in text, mid


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
        checks.check_hidden("kv_prediction_tied", prediction)
    assert "tied-only-slower" in str(err.value)
    for part in ("kv_prediction_control", "kv_prediction_separate", "kv_prediction_width"):
        checks.check_hidden(part, prediction)  # partial credit: the other parts still pass
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


def test_an_unwritten_prediction_reads_as_not_written():
    def stub():
        raise NotImplementedError()

    with pytest.raises(AssertionError) as err:
        KV.recorded("kv_prediction_tied", stub)
    assert checks.read_results(str(err.value))["kv_prediction_tied"].status == "not written"
