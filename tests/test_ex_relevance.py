"""The checks of lesson 01: relevance_scores and score_matrix.

The references are compared with independent oracles (torch.einsum in float64 and
attnlib.scores with scale=1). That every known wrong variant is diagnosed as exactly its
own misconception, that check() names it and that check_hidden() fails it, is tested for
every exercise in tests/test_checks_registry.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlib
from attnlib import checks
from attnlib.checks import get_exercise

EXERCISES = ("relevance_scores", "score_matrix")


def _einsum_oracle(name, args):
    if name == "relevance_scores":
        query, keys = (torch.as_tensor(a, dtype=torch.float64) for a in args)
        return torch.einsum("d,kd->k", query, keys).numpy()  # (seq_k,)
    Q, K = (torch.as_tensor(a, dtype=torch.float64) for a in args)
    return torch.einsum("qd,kd->qk", Q, K).numpy()  # (seq_q, seq_k)


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_matches_einsum_oracle(name):
    ex = get_exercise(name)
    assert len(ex.cases(hidden=True)) > len(ex.cases()), "the grader has cases of its own"
    for case in ex.cases(hidden=True):
        got = ex.reference(*case.args)
        want = _einsum_oracle(name, case.args)
        assert got.shape == want.shape, case.label
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=case.label)


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_matches_attnlib_scores_unscaled(name):
    ex = get_exercise(name)
    for case in ex.cases():
        a, b = case.args
        if name == "relevance_scores":
            want = attnlib.scores(a[None, :], b, scale=1.0)[0]  # (seq_k,)
        else:
            want = attnlib.scores(a, b, scale=1.0)  # (seq_q, seq_k)
        np.testing.assert_allclose(ex.reference(a, b), want, rtol=1e-12, err_msg=case.label)


@pytest.mark.parametrize("name", EXERCISES)
def test_cases_cover_the_shapes_that_expose_transposes(name):
    shapes = [tuple(a.shape for a in c.args) for c in get_exercise(name).cases()]
    # keys are (seq_k, d_k); queries are (d_k,) or (seq_q, d_k)
    seq_k_vs_d_k = [k[0] == k[1] for _, k in shapes]
    assert any(seq_k_vs_d_k), "a case with seq_k == d_k lets 'keys not transposed' run"
    assert not all(seq_k_vs_d_k), "a case with seq_k != d_k makes a missing transpose fail"
    if name == "score_matrix":
        assert any(q[0] != k[0] for q, k in shapes), "a case with seq_q != seq_k"
    # keys of different lengths: cosine similarity must not equal the dot product
    for c in get_exercise(name).cases():
        norms = np.linalg.norm(c.args[1], axis=-1)
        assert norms.max() / norms.min() > 1.2, c.label


def test_relevance_scores_accepts_any_correct_implementation(capsys):
    def with_a_loop(query, keys):
        out = np.zeros(len(keys))
        for j, key in enumerate(keys):
            for f in range(len(query)):
                out[j] += query[f] * key[f]
        return out

    def with_sum(query, keys):
        return (keys * query).sum(axis=-1)

    for fn in (with_a_loop, with_sum, lambda q, k: np.einsum("d,kd->k", q, k)):
        assert checks.diagnose("relevance_scores", fn) == []
        checks.check("relevance_scores", fn)
    assert capsys.readouterr().out.count("✔ relevance_scores") == 3


def test_score_matrix_accepts_a_loop_over_queries():
    def rows(Q, K):
        return np.stack([K @ q for q in Q])  # (seq_q, seq_k)

    checks.check("score_matrix", rows)


def test_calling_the_course_reference_is_refused():
    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("score_matrix", lambda Q, K: attnlib.scores(Q, K, scale=1.0))
    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("relevance_scores", lambda q, K: attnlib.scores(q[None], K, scale=1.0)[0])


def test_an_unknown_mistake_fails_without_a_diagnosis():
    def zeros(Q, K):
        return np.zeros((Q.shape[0], K.shape[0]))

    report = checks.run("score_matrix", zeros)
    assert not report.ok
    assert report.misconceptions == []
    with pytest.raises(AssertionError, match="No mistake the check knows explains this"):
        checks.check("score_matrix", zeros)


def test_a_result_off_in_one_entry_is_caught():
    def almost(Q, K):
        s = Q @ K.T
        s[0, -1] += 1e-3
        return s

    with pytest.raises(AssertionError, match="1 of"):
        checks.check("score_matrix", almost)


@pytest.mark.parametrize("name", EXERCISES)
def test_hidden_check_passes_the_reference_silently(name, capsys):
    # stricter than the registry: these references call no attnlib function
    checks.check_hidden(name, get_exercise(name).reference)
    assert capsys.readouterr().out == ""
