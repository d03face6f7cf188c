"""What the inference tests assert about a submission, written once.

``assert_named(name, fn, ids)``: a wrong function is named by measurement with exactly these
misconception ids (in registry order), by the check (a question each on the first failure,
each cause on the second), its message and the hidden check.
``assert_correct(name, fn)``: a right function written another way passes the visible and
the hidden cases, and the inference measures nothing in it.
"""

from __future__ import annotations

import contextlib
import io
import os
from unittest import mock

import pytest

from attnlib import checks
from attnlib.checks import get_exercise
from attnlib.checks._core import Learner
from attnlib.checks.protocol import FEEDBACK_ENV


def in_registry_order(name: str, ids) -> list[str]:
    order = [m.id for m in get_exercise(name).misconceptions]
    return sorted(ids, key=order.index)


def assert_named(name: str, fn, ids) -> None:
    expected = in_registry_order(name, ids)
    report = checks.run(name, fn)
    assert not report.ok
    assert not report.inference_error
    assert report.misconceptions == expected, report.findings
    assert [f.id for f in report.findings] == expected  # measured, not matched to a variant
    assert all(len(f.detail) > 20 for f in report.findings)  # each says what was measured
    assert checks.run(name, fn, hidden=True).misconceptions == expected
    checks.forget(name)
    with mock.patch.dict(os.environ):
        os.environ.pop(FEEDBACK_ENV, None)  # a learner's kernel: feedback in steps
        with pytest.raises(AssertionError) as err:  # first: measured, and a question each
            checks.check(name, fn)
        first = str(err.value)
        with pytest.raises(AssertionError) as err:  # the same mistake again: each cause
            checks.check(name, fn)
        message = str(err.value)
    checks.forget(name)
    questions = {m.id: m.question for m in get_exercise(name).misconceptions}
    for mid in expected:
        assert questions[mid] in first and checks.explanation(name, mid) not in first
    assert message.splitlines()[-1] == checks.result_line(name, expected)
    for mid in expected:  # each mistake with its own explanation
        assert checks.explanation(name, mid) in message
    with pytest.raises(AssertionError, match="hidden tests failed"):
        checks.check_hidden(name, fn)


def assert_correct(name: str, fn) -> None:
    report = checks.run(name, fn)
    assert report.ok, report.first_failure
    assert checks.run(name, fn, hidden=True).ok
    assert checks.diagnose(name, fn) == []
    assert list(get_exercise(name).infer(Learner(fn))) == []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check(name, fn)
    assert out.getvalue().startswith(f"✔ {name}: correct")


def grader_check_hidden(name: str, fn) -> None:
    """``check_hidden`` as the grader judges it: ``fn`` observed on the hidden cases, then
    judged in this process, which holds the grader's answer keys (tests/conftest.py).
    Raises AssertionError with the grader's message when the verdict is not ok."""
    from attnlib.checks import grading
    from attnlib.checks.protocol import judge_observation, refused_calls

    cases = [(c.args, c.kwargs) for c in get_exercise(name).cases(hidden=True)]
    observed = grading.observe(fn, cases, grading._Watch(refused_calls(name)))
    verdict = judge_observation(name, observed)
    if not verdict.ok:
        raise AssertionError(verdict.message)
