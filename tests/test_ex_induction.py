"""The checks of lesson 13: previous_token_score and k_composition.

References are compared with independent oracles (an explicit loop over sequences, heads and
queries; float64 numpy norms of the explicitly formed W_QK and W_OV) and with the attnlib
functions the lesson points to. That every known wrong variant is diagnosed as exactly its
own misconception, and that check() names it, is tested for every exercise in
tests/test_checks_registry.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.checks import get_exercise
from attnlib.tasks import induction as ind


def _prev_oracle(weights):
    batch, n_heads, seq, _ = weights.shape
    out = torch.zeros(n_heads, dtype=torch.float64)
    for b in range(batch):
        for h in range(n_heads):
            for t in range(1, seq):
                out[h] += float(weights[b, h, t, t - 1])
    return out / (batch * (seq - 1))


def _kc_oracle(W_q, W_k, W_v, W_o):
    qk = W_q.numpy() @ W_k.numpy().T
    ov = W_v.numpy() @ W_o.numpy()
    return float(np.linalg.norm(qk @ ov.T) / (np.linalg.norm(qk) * np.linalg.norm(ov)))


def test_previous_token_reference_matches_a_loop_and_the_library():
    ex = get_exercise("previous_token_score")
    for case in ex.cases(hidden=True):
        (w,) = case.args
        torch.testing.assert_close(ex.reference(w), _prev_oracle(w))
        torch.testing.assert_close(ex.reference(w), ind.previous_token_score(w))
        assert (w.triu(1) == 0).all()  # the cases are causal maps


def test_k_composition_reference_matches_numpy_and_the_library():
    ex = get_exercise("k_composition")
    for case in ex.cases(hidden=True):
        W_q, W_k, W_v, W_o = case.args
        assert W_q.shape[0] != W_q.shape[1]  # d_model != d_head
        got = ex.reference(*case.args)
        assert got == pytest.approx(_kc_oracle(*case.args), rel=1e-12)
        qk, ov = W_q @ W_k.T, W_v @ W_o
        assert got == pytest.approx(ind.composition_score(qk @ ov.T, qk, ov), rel=1e-12)
        assert 0 < got < 1


def test_k_composition_on_the_shipped_model_matches_composition_scores():
    model = ind.load_model()
    d = model.d_head
    ref = get_exercise("k_composition").reference
    comp = ind.composition_scores(model)
    with torch.no_grad():
        W_q, W_k = model.weight("W_q", 1), model.weight("W_k", 1)
        W_v, W_o = model.weight("W_v", 0), model.weight("W_o", 0)
        for i in range(model.n_heads):
            for j in range(model.n_heads):
                s = ref(
                    W_q[:, j * d : (j + 1) * d],
                    W_k[:, j * d : (j + 1) * d],
                    W_v[:, i * d : (i + 1) * d],
                    W_o[i * d : (i + 1) * d],
                )
                assert s == pytest.approx(comp["k"][i, j], rel=1e-4)
