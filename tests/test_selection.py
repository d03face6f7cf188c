"""indexer_scores, Indexer and topk_mask (lesson 14).

Oracles: the indexer formula written with explicit loops over heads; the top-k selection
written per row in plain Python (sorted by (-score, key index)); torch's
scaled_dot_product_attention for "top-k with k = seq_k equals full attention".
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import attnlib
from attnlib.selection import Indexer, indexer_scores, topk_mask


def _rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _topk_by_rows(scores, k, allowed):
    """Per row: the allowed keys sorted by score (high first), then by index; keep k."""
    scores, allowed = np.broadcast_arrays(np.asarray(scores), np.asarray(allowed))
    out = np.zeros(scores.shape, bool)
    for idx in np.ndindex(*scores.shape[:-1]):
        keys = [j for j in range(scores.shape[-1]) if allowed[idx][j]]
        keys.sort(key=lambda j: (-scores[idx][j], j))
        out[idx][keys[:k]] = True
    return out


# ---- indexer ------------------------------------------------------------------------------


def test_indexer_scores_equal_the_formula_head_by_head():
    batch, n_index_heads, seq_q, seq_k, d_index = 2, 3, 4, 6, 5
    q, kk = _rand(batch, n_index_heads, seq_q, d_index), _rand(batch, seq_k, d_index, seed=1)
    w = _rand(batch, seq_q, n_index_heads, seed=2)
    want = torch.zeros(batch, seq_q, seq_k, dtype=torch.float64)
    for h in range(n_index_heads):
        dots = torch.einsum("btd,bsd->bts", q[:, h], kk)
        want += w[:, :, h, None] * torch.clamp(dots, min=0)
    got = indexer_scores(q, kk, w)
    assert got.shape == (batch, seq_q, seq_k)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    got_np = indexer_scores(q.numpy(), kk.numpy(), w.numpy())
    assert isinstance(got_np, np.ndarray) and np.allclose(got_np, want.numpy(), rtol=0, atol=1e-12)
    # one weight per head, shared by every query, broadcasts
    w_shared = _rand(n_index_heads, seed=3)
    torch.testing.assert_close(
        indexer_scores(q, kk, w_shared), indexer_scores(q, kk, w_shared.expand(batch, seq_q, -1))
    )


def test_negative_matches_count_zero():
    q = torch.tensor([[[[1.0, 0.0]]]])  # (1, 1 head, 1 query, 2)
    kk = torch.tensor([[[2.0, 0.0], [-3.0, 0.0]]])  # (1, 2 keys, 2)
    got = indexer_scores(q, kk, torch.tensor([0.5]))
    assert got.tolist() == [[[1.0, 0.0]]]


def test_indexer_module_uses_indexer_scores():
    torch.manual_seed(0)
    ix = Indexer(8, n_index_heads=2, d_index=3).double()
    x = _rand(2, 5, 8)
    q = (x @ ix.W_q.weight.T).unflatten(-1, (2, 3)).transpose(1, 2)
    want = indexer_scores(q, x @ ix.W_k.weight.T, x @ ix.W_w.weight.T)
    torch.testing.assert_close(ix(x), want, rtol=0, atol=0)
    assert ix(x, x[:, :3]).shape == (2, 5, 3)


def test_indexer_errors_name_arguments_and_shapes():
    q, kk, w = torch.zeros(1, 2, 3, 4), torch.zeros(1, 5, 4), torch.zeros(1, 3, 2)
    with pytest.raises(ValueError, match=r"q_idx has d_index=4 .* k_idx has 3"):
        indexer_scores(q, torch.zeros(1, 5, 3), w)
    with pytest.raises(
        ValueError, match=r"head_weights \(1, 3, 5\), \(\.\.\., seq_q, n_index_heads\)"
    ):
        indexer_scores(q, kk, torch.zeros(1, 3, 5))
    with pytest.raises(ValueError, match=r"head_weights .*\(4, 1, 3, 2\).*= \(1, 3, 2\)"):
        indexer_scores(q, kk, torch.zeros(4, 1, 3, 2))  # more batch dims than q_idx
    with pytest.raises(TypeError, match="mix numpy and torch"):
        indexer_scores(q, kk.numpy(), w)
    with pytest.raises(ValueError, match="q_idx .*needs at least 3 dims"):
        indexer_scores(torch.zeros(3, 4), kk, w)
    with pytest.raises(TypeError, match="Indexer: x_q must be a torch.Tensor"):
        Indexer(4)(np.zeros((1, 2, 4)))


# ---- topk_mask ----------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 2, 3, 5, 7, 100])
@pytest.mark.parametrize("causal", [False, True])
def test_topk_mask_equals_the_row_by_row_oracle(k, causal):
    scores = _rand(2, 3, 7, 7).round(decimals=1)  # rounding makes ties
    pad = attnlib.padding_mask(torch.tensor([7, 4]), 7)[:, None]  # (batch, 1, 1, seq_k)
    got = topk_mask(scores, k, pad, causal=causal)
    allowed = pad & (attnlib.causal_mask(7, like=scores) if causal else True)
    assert torch.equal(got, torch.as_tensor(_topk_by_rows(scores, k, allowed)))
    assert not (got & ~allowed).any()  # never a blocked key
    n_allowed = allowed.expand_as(got).sum(-1)
    assert torch.equal(got.sum(-1), torch.clamp(n_allowed, max=k))


def test_ties_go_to_the_lower_key_index():
    scores = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]])
    assert topk_mask(scores, 1).tolist() == [[False, True, False, False, False]]
    assert topk_mask(scores, 2).tolist() == [[False, True, True, False, False]]
    assert topk_mask(torch.zeros(1, 4), 2).tolist() == [[True, True, False, False]]


def test_selecting_means_the_highest_scores():
    scores = torch.tensor([[0.1, 0.9, -2.0, 0.5]])
    assert topk_mask(scores, 2).tolist() == [[False, True, False, True]]


def test_k_at_least_the_allowed_keys_keeps_all_allowed_and_empty_rows_stay_empty():
    scores = _rand(4, 6)
    mask = torch.tensor([[True] * 6, [True, False] * 3, [False] * 6, [False] * 5 + [True]])
    got = topk_mask(scores, 3, mask)
    assert torch.equal(got[1], mask[1]) and torch.equal(got[3], mask[3])  # <= 3 allowed: all
    assert not got[2].any()  # fully masked: stays all False
    assert got[0].sum() == 3
    q, kk, v = _rand(4, 2), _rand(6, 2, seed=1), _rand(6, 3, seed=2)
    out, w = attnlib.attend(q, kk, v, got)
    assert torch.isfinite(out).all() and (out[2] == 0).all() and (w[2] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
def test_topk_with_k_equal_seq_k_is_full_attention(causal):
    """The proof of lesson 14: keeping every key changes nothing."""
    batch, n_heads, seq, d = 2, 3, 11, 8
    q, kk, v = (
        _rand(batch, n_heads, seq, d),
        _rand(batch, n_heads, seq, d, seed=1),
        _rand(batch, n_heads, seq, d, seed=2),
    )
    index = indexer_scores(
        _rand(batch, 2, seq, 4, seed=3), _rand(batch, seq, 4, seed=4), _rand(batch, seq, 2, seed=5)
    )  # (batch, seq_q, seq_k)
    selected = topk_mask(index[:, None], seq, causal=causal)  # (batch, 1, seq_q, seq_k)
    out, _ = attnlib.attend(q, kk, v, selected)
    want = F.scaled_dot_product_attention(q, kk, v, is_causal=causal)
    assert (out - want).abs().max().item() <= 1e-12
    # and with fewer keys it is not full attention
    fewer, _ = attnlib.attend(q, kk, v, topk_mask(index[:, None], 3, causal=causal))
    assert (fewer - want).abs().max().item() > 1e-3


def test_numpy_in_numpy_out():
    scores = np.array([[0.3, 0.1, 0.2]])
    got = topk_mask(scores, 2, np.array([True, True, False]))
    assert isinstance(got, np.ndarray) and got.tolist() == [[True, True, False]]


def test_topk_errors_name_the_argument():
    with pytest.raises(ValueError, match="topk_mask: n_keep must be >= 0"):
        topk_mask(torch.zeros(2, 3), -1)
    with pytest.raises(TypeError, match="topk_mask: n_keep must be an int"):
        topk_mask(torch.zeros(2, 3), 1.5)
    with pytest.raises(ValueError, match="nan or inf"):
        topk_mask(torch.tensor([[0.0, float("nan")]]), 1)
    with pytest.raises(TypeError, match="must be boolean"):
        topk_mask(torch.zeros(2, 3), 1, torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"do not broadcast: index_scores \(2, 3\), mask \(4,\)"):
        topk_mask(torch.zeros(2, 3), 1, torch.ones(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="not the same kind"):
        topk_mask(torch.zeros(2, 3), 1, np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="needs at least 2 dims"):
        topk_mask(torch.zeros(3), 1)
    with pytest.raises(TypeError, match="floating-point"):
        topk_mask(torch.zeros(2, 3, dtype=torch.long), 1)
