"""The hidden cases are not known in advance: the grader's seed changes them.

A learner can read the visible cases (and, in the course's files, the hidden cases as
written, with their own seeds), so a table of the reference's answers to those inputs
must not pass the grader. The grader draws a seed per run and per exercise and builds the
hidden cases with it mixed into every ``np.random.default_rng(int)`` and
``torch.Generator().manual_seed(int)`` (:func:`attnlib.checks._core.hidden_seed`). Here:

* every exercise has hidden cases whose inputs change between ``hidden_seed(1)`` and
  ``hidden_seed(2)``, except those listed in ``FIXED_HIDDEN`` with the reason;
* the list holds no stale entry (an exercise listed there really has fixed hidden inputs);
* a function answering from a table of the reference's outputs on the visible cases and on
  the hidden cases as written (no grader seed) fails the hidden check under a grader seed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import checks
from attnlib.checks import _core, get_exercise

_PREDICTION_REASON = (
    "lesson 05's predict-then-check statements: each is true or false once and for all, so "
    "there is no other input to draw; the learner's own answers are what is graded"
)

#: Exercises whose hidden inputs do not change with the grader's seed, and why.
FIXED_HIDDEN: dict[str, str] = {
    "kv_prediction": _PREDICTION_REASON,
    "kv_prediction_control": _PREDICTION_REASON,
    "kv_prediction_separate": _PREDICTION_REASON,
    "kv_prediction_tied": _PREDICTION_REASON,
    "kv_prediction_width": _PREDICTION_REASON,
}

EXERCISES = checks.exercises()
SEEDED = [name for name in EXERCISES if name not in FIXED_HIDDEN]


def _hidden_only(name: str, seed: int | None) -> list[_core.Case]:
    ex = get_exercise(name)
    visible = len(ex.cases())
    with _core.hidden_seed(seed):
        return ex.cases(hidden=True)[visible:]


def _same(a, b) -> bool:
    """Are two inputs (arrays, tensors, modules, numbers, lists, tuples, dicts) exactly the same?"""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    if isinstance(a, torch.nn.Module) or isinstance(b, torch.nn.Module):  # the same weights
        return type(a) is type(b) and _same(dict(a.state_dict()), dict(b.state_dict()))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and np.array_equal(a, b)
        )
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _inputs(case: _core.Case):
    return (case.args, case.kwargs)


def test_the_fixed_list_names_registered_exercises_with_reasons():
    assert set(FIXED_HIDDEN) <= set(EXERCISES)
    assert all(len(why) > 40 for why in FIXED_HIDDEN.values())


@pytest.mark.parametrize("name", SEEDED)
def test_hidden_inputs_change_with_the_graders_seed(name):
    one, two = _hidden_only(name, 1), _hidden_only(name, 2)
    assert one, f"{name} has no hidden cases: a table of the visible answers would pass"
    assert len(one) == len(two), f"{name}: the number of hidden cases depends on the seed"
    assert not _same([_inputs(c) for c in one], [_inputs(c) for c in two]), (
        f"{name}: the hidden inputs are the same under hidden_seed(1) and hidden_seed(2)"
    )
    # Built twice with one seed, they are the same: the grader rebuilds them to judge.
    again = _hidden_only(name, 1)
    assert _same([_inputs(c) for c in one], [_inputs(c) for c in again]), name


@pytest.mark.parametrize("name", sorted(FIXED_HIDDEN))
def test_listed_exercises_really_have_fixed_hidden_inputs(name):
    # When one of them gets seed-drawn hidden cases, take it off the list.
    one, two = _hidden_only(name, 1), _hidden_only(name, 2)
    assert _same([_inputs(c) for c in one], [_inputs(c) for c in two]), (
        f"{name}: its hidden inputs now change with the seed; remove it from FIXED_HIDDEN"
    )


@pytest.mark.parametrize("name", SEEDED)
def test_a_table_of_known_answers_fails_the_hidden_cases(name):
    ex = get_exercise(name)
    known = ex.cases() + _hidden_only(name, None)  # what a learner can compute in advance
    table = [(_inputs(c), _core._call(ex.reference, c)) for c in known]
    assert not any(isinstance(out, _core._Raised) for _, out in table), name

    def from_table(*args, **kwargs):
        for inputs, out in table:
            if _same(inputs, (args, kwargs)):
                return out
        raise LookupError("not in the table")

    assert _core.run(name, from_table, infer=False).ok  # the visible check is fooled...
    with _core.hidden_seed(12345):
        report = _core.run(name, from_table, hidden=True, infer=False)
    assert not report.ok, f"{name}: a table of known answers passes the hidden cases"  # ...not this
