"""The lesson-02 exercise checks: project (three projections from one fused matrix
[W_q | W_k | W_v]) and linear_forward.

Hand-written solutions pass, stubs and look-alikes fail, the cases expose transposes and
a wrong split of the fused matrix.
That each known mistake is named, and only that one, by check() and check_hidden(), is
tested for every exercise in tests/test_checks_registry.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlib import checks

EXERCISES = ("project", "linear_forward")


# Hand-written correct solutions, as a learner would write them (not the attnlib reference).
def project_by_hand(x, W_qkv, d_k):
    W_q, W_k, W_v = W_qkv[:, :d_k], W_qkv[:, d_k : 2 * d_k], W_qkv[:, 2 * d_k :]
    return x @ W_q, x @ W_k, x @ W_v


def project_split_after(x, W_qkv, d_k):
    y = x @ W_qkv  # (..., seq, 2 d_k + d_v): split the product instead of the matrix
    d_v = W_qkv.shape[-1] - 2 * d_k
    q, k, v = np.split(y, [d_k, 2 * d_k], axis=-1)
    assert v.shape[-1] == d_v
    return q, k, v


def linear_by_hand(x, weight, bias=None):
    y = x @ np.swapaxes(weight, -1, -2)
    if bias is not None:
        y = y + bias
    return y


HAND = {"project": project_by_hand, "linear_forward": linear_by_hand}


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_and_hand_solution_are_diagnosed_clean(name):
    ex = checks.get_exercise(name)
    assert checks.diagnose(name, ex.reference) == []
    assert checks.run(name, ex.reference).ok
    report = checks.run(name, HAND[name])
    assert report.ok and report.called_reference == []
    assert checks.diagnose(name, HAND[name]) == []


@pytest.mark.parametrize("name", EXERCISES)
def test_check_passes_hand_solution_with_one_line(name, capsys):
    checks.check(name, HAND[name])
    out = capsys.readouterr().out
    assert out.startswith(f"✔ {name}: correct on all ") and out.count("\n") == 1
    checks.check_hidden(name, HAND[name])  # silent, does not raise
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("name", EXERCISES)
def test_hidden_cases_add_new_shapes_and_pass_a_correct_solution(name):
    ex = checks.get_exercise(name)
    visible, every = ex.cases(), ex.cases(hidden=True)
    assert len(every) > len(visible)
    shapes = lambda cases: {  # noqa: E731
        tuple(getattr(a, "shape", a) for a in c.args if a is not None) for c in cases
    }
    assert shapes(every[len(visible) :]) - shapes(visible)  # at least one unseen shape
    assert checks.run(name, HAND[name], hidden=True).ok


@pytest.mark.parametrize("name", EXERCISES)
def test_unfinished_stub_fails_without_a_diagnosis(name):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    report = checks.run(name, stub)
    assert not report.ok and report.misconceptions == []
    assert "NotImplementedError" in report.first_failure


def test_splitting_the_product_instead_of_the_matrix_passes():
    assert checks.run("project", project_split_after).ok
    assert checks.run("project", project_split_after, hidden=True).ok
    assert checks.diagnose("project", project_split_after) == []


def test_calling_the_reference_is_refused():
    from attnlib.projections import linear, project

    def via_library(x, W_qkv, d_k):
        return project(x, W_qkv[:, :d_k], W_qkv[:, d_k : 2 * d_k], W_qkv[:, 2 * d_k :])

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("project", via_library)
    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("linear_forward", lambda x, weight, bias=None: linear(x, weight, bias))


def test_an_object_equal_to_everything_does_not_pass():
    class Always:
        def __eq__(self, other):
            return True

        __hash__ = None

    assert not checks.run("project", lambda *a: (Always(), Always(), Always())).ok
    assert not checks.run("linear_forward", lambda *a, **k: Always()).ok


@pytest.mark.parametrize("name", EXERCISES)
def test_cases_are_non_square_so_a_transpose_cannot_pass(name):
    """Every case has at least one non-square input; most have all sizes distinct."""
    ex = checks.get_exercise(name)
    cases = ex.cases()
    assert len(cases) >= 4
    all_distinct = 0
    for case in cases:
        arrays = [
            a
            for a in (*case.args, *case.kwargs.values())
            if a is not None and not isinstance(a, int)
        ]
        assert all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays)
        sizes = [s for a in arrays for s in a.shape]
        if name == "project":
            x, W_qkv, d_k = case.args
            d_v = W_qkv.shape[1] - 2 * d_k
            assert d_v != d_k, "values as wide as keys: an equal split would pass"
            dims = {x.shape[-2], x.shape[-1], d_k, d_v}
        else:
            x, weight = case.args[:2]
            dims = {x.shape[-2], weight.shape[0], weight.shape[1]}
        all_distinct += len(dims) == (4 if name == "project" else 3)
        assert len(set(sizes)) > 1, case.label
    assert all_distinct >= 2


def test_the_project_cases_let_each_wrong_split_run():
    """Equal thirds run where 2 d_k + d_v divides by 3; blocks all d_k wide are wrong
    where d_v > d_k: both happen in the visible cases, so the mistake is seen, not a
    shape error."""
    cases = checks.get_exercise("project").cases()
    widths = [(c.args[2], c.args[1].shape[1] - 2 * c.args[2]) for c in cases]
    assert any((2 * d_k + d_v) % 3 == 0 for d_k, d_v in widths)
    assert any(d_v > d_k for d_k, d_v in widths)
