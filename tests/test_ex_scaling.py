"""The checks of lesson 04: score_variance, softmax_jacobian, choose_scale.

References are compared with independent oracles (a Monte Carlo variance, torch
autograd, a brute-force grid). That every known wrong variant is diagnosed as exactly
its own misconception, and that check() names it, is tested for every exercise in
tests/test_checks_registry.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attnlib
from attnlib import checks
from attnlib.checks import get_exercise
from attnlib.tasks import scaling

EXERCISES = ("score_variance", "softmax_jacobian", "choose_scale")


def test_score_variance_reference_matches_monte_carlo():
    ex = get_exercise("score_variance")
    rng = np.random.default_rng(0)
    n = 20_000
    for case in ex.cases():
        d_k = case.args[0]
        kw = {"scale": 1.0, "var_q": 1.0, "var_k": 1.0, **case.kwargs}
        q = rng.standard_normal((n, d_k)) * math.sqrt(kw["var_q"])
        k = rng.standard_normal((n, d_k)) * math.sqrt(kw["var_k"])
        measured = (kw["scale"] * (q * k).sum(-1)).var()
        want = ex.reference(*case.args, **case.kwargs)
        tol = scaling.variance_tolerance(n, scaling.dot_product_excess_kurtosis(d_k), z=5)
        assert abs(measured / want - 1) < tol, (case.label, measured, want)


def test_softmax_jacobian_reference_matches_autograd():
    ex = get_exercise("softmax_jacobian")
    for case in ex.cases():
        (p,) = case.args
        got = ex.reference(p)
        s = np.log(p).reshape(-1, p.shape[-1])  # scores that give exactly these weights
        for row, J in zip(s, got.reshape(-1, p.shape[-1], p.shape[-1]), strict=True):
            auto = torch.autograd.functional.jacobian(
                lambda t: torch.softmax(t, -1), torch.tensor(row)
            )
            np.testing.assert_allclose(J, auto.numpy(), atol=1e-12, err_msg=case.label)


def test_choose_scale_reference_matches_grid_search():
    ex = get_exercise("choose_scale")
    for case in ex.cases():
        s, h = case.args
        c = ex.reference(s, h)
        grid = np.linspace(0, 3 * c, 1201)
        ent = [scaling.softmax_entropy(attnlib.softmax(g * s)).mean() for g in grid]
        best = grid[np.flatnonzero(np.array(ent) >= h).max()]
        assert abs(best - c) <= grid[1], case.label


def test_learner_style_solutions_pass(capsys):
    def score_variance(d_k, scale=1.0, var_q=1.0, var_k=1.0):
        return d_k * var_q * var_k * scale**2

    def softmax_jacobian(p):
        return np.einsum("...i,ij->...ij", p, np.eye(p.shape[-1])) - np.einsum(
            "...i,...j->...ij", p, p
        )

    def choose_scale(raw_scores, min_entropy):
        def h(c):
            z = c * raw_scores
            e = np.exp(z - z.max(-1, keepdims=True))
            p = e / e.sum(-1, keepdims=True)
            return -(p * np.log(np.maximum(p, 1e-300))).sum(-1).mean()

        lo, hi = 0.0, 1.0
        while h(hi) >= min_entropy:
            hi *= 2
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if h(mid) >= min_entropy else (lo, mid)
        return lo

    for name, fn in zip(EXERCISES, (score_variance, softmax_jacobian, choose_scale), strict=True):
        checks.check(name, fn)
        assert checks.diagnose(name, fn) == []
    out = capsys.readouterr().out
    assert out.count("✔") == 3


def test_calling_the_reference_is_refused():
    with pytest.raises(AssertionError, match="reference"):
        checks.check("softmax_jacobian", lambda p: scaling.softmax_jacobian(p))
    with pytest.raises(AssertionError, match="reference"):
        checks.check("choose_scale", lambda s, h: scaling.choose_scale(s, h))


def test_wrong_in_an_unknown_way_is_localised_not_named():
    def constant(d_k, scale=1.0, var_q=1.0, var_k=1.0):
        return 42.0

    report = checks.run("score_variance", constant)
    assert not report.ok and report.misconceptions == []
    with pytest.raises(AssertionError, match="No mistake the check knows explains this"):
        checks.check("score_variance", constant)
