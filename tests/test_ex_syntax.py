"""The checks of lesson 09: probe_accuracy and attention_on.

References are compared with independent oracles (normal equations solved with
np.linalg.solve; an explicit loop over sentences and heads) and with the attnlib functions
the lesson points to. That every known wrong variant is diagnosed as exactly its own
misconception, and that check() names it, is tested for every exercise in
tests/test_checks_registry.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import checks
from attnlib.checks import get_exercise
from attnlib.tasks import syntax as sm

EXERCISES = ("probe_accuracy", "attention_on")


def _probe_oracle(X_train, y_train, X_test, y_test):
    # Normal equations (XᵀX) W = XᵀY instead of lstsq; the cases are well-conditioned.
    n_classes = int(max(y_train.max(), y_test.max())) + 1
    Xb = np.hstack([X_train, np.ones((len(X_train), 1))])
    Y = np.zeros((len(y_train), n_classes))
    Y[np.arange(len(y_train)), y_train] = 1.0
    W = np.linalg.solve(Xb.T @ Xb, Xb.T @ Y)
    scores = np.hstack([X_test, np.ones((len(X_test), 1))]) @ W
    return sum(int(np.argmax(scores[i]) == y_test[i]) for i in range(len(y_test))) / len(y_test)


def _attention_oracle(weights, positions):
    batch, n_heads, _ = weights.shape
    out = torch.zeros(n_heads, dtype=torch.float64)
    for b in range(batch):
        for h in range(n_heads):
            out[h] += float(weights[b, h, int(positions[b])])
    return out / batch


def test_probe_reference_matches_oracle_and_attnlib():
    ex = get_exercise("probe_accuracy")
    for case in ex.cases(hidden=True):
        got = ex.reference(*case.args)
        assert got == pytest.approx(_probe_oracle(*case.args), abs=1e-12), case.label
        assert got == sm.probe_accuracy(*case.args), case.label


def test_attention_reference_matches_oracle_and_attnlib():
    ex = get_exercise("attention_on")
    for case in ex.cases(hidden=True):
        got = ex.reference(*case.args)
        torch.testing.assert_close(got.double(), _attention_oracle(*case.args), msg=case.label)
        torch.testing.assert_close(got, sm.attention_on(*case.args))


def test_probe_cases_are_neither_trivial_nor_hopeless():
    # Right answers strictly between chance and perfect, so that wrong variants can differ.
    for case in get_exercise("probe_accuracy").cases(hidden=True):
        acc = get_exercise("probe_accuracy").reference(*case.args)
        assert 0.6 < acc < 1.0, (case.label, acc)


def test_other_correct_solutions_pass():
    def probe_via_pinv(X_train, y_train, X_test, y_test):
        k = int(max(y_train.max(), y_test.max())) + 1
        Xb = np.c_[X_train, np.ones(len(X_train))]
        W = np.linalg.pinv(Xb) @ np.eye(k)[y_train]
        return float(np.mean((np.c_[X_test, np.ones(len(X_test))] @ W).argmax(1) == y_test))

    def attention_gather(weights, positions):
        idx = positions[:, None, None].expand(-1, weights.shape[1], 1)  # (batch, n_heads, 1)
        return weights.gather(2, idx)[..., 0].mean(0)

    checks.check("probe_accuracy", probe_via_pinv)
    checks.check("attention_on", attention_gather)


def test_calling_the_course_reference_is_refused():
    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("probe_accuracy", sm.probe_accuracy)
    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("attention_on", lambda w, p: sm.attention_on(w, p))


def test_an_accuracy_off_by_one_row_is_caught():
    def off(X_train, y_train, X_test, y_test):
        return _probe_oracle(X_train, y_train, X_test, y_test) - 1 / len(y_test)

    with pytest.raises(AssertionError):
        checks.check("probe_accuracy", off)
