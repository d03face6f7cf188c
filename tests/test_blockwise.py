"""Blockwise (online-softmax) attention and peak-memory measurement (lesson 11).

Oracles: torch's scaled_dot_product_attention and attnlib.attend in fp64, over block sizes
that divide the sequence, do not divide it, and are larger than it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn import functional as F

import attnlib
from attnlib.blockwise import blockwise_attend, explicit_attend, online_softmax_update, peak_bytes


def _qkv(lead, seq_q, seq_k, d_k=8, d_v=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*lead, seq_q, d_k, generator=g, dtype=torch.float64),
        torch.randn(*lead, seq_k, d_k, generator=g, dtype=torch.float64),
        torch.randn(*lead, seq_k, d_v, generator=g, dtype=torch.float64),
    )


@pytest.mark.parametrize(("block_q", "block_k"), [(1, 1), (4, 7), (16, 16), (64, 3), (100, 100)])
@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_matches_sdpa_fp64(block_q, block_k, causal):
    q, k, v = _qkv((2, 3), 37, 37)
    out = blockwise_attend(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_blockwise_non_square_and_broadcast_batch_matches_attend():
    q, _, _ = _qkv((2, 1), 9, 1, seed=1)
    _, k, v = _qkv((1, 4), 1, 30, seed=2)
    out = blockwise_attend(q, k, v, block_q=4, block_k=8)
    want, _ = attnlib.attend(q, k, v)
    assert out.shape == (2, 4, 9, 5)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_blockwise_causal_with_more_keys_than_queries_matches_attend_top_left():
    q, k, v = _qkv((2,), 6, 20, seed=3)
    out = blockwise_attend(q, k, v, causal=True, block_q=4, block_k=4)
    want, _ = attnlib.attend(q, k, v, causal=True)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("seq_q", "seq_k"), [(6, 20), (20, 6), (1, 9), (13, 13)])
@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_blockwise_causal_align_matches_attend_with_causal_mask(align, seq_q, seq_k, kind):
    q, k, v = _qkv((2,), seq_q, seq_k, seed=5)
    if kind == "numpy":
        q, k, v = (t.numpy() for t in (q, k, v))
    mask = attnlib.causal_mask(seq_q, seq_k, align=align, like=q)  # (seq_q, seq_k)
    want, _ = attnlib.attend(q, k, v, mask)
    for block_q, block_k in ((4, 4), (3, 5), (256, 256)):
        out = blockwise_attend(q, k, v, causal=True, align=align, block_q=block_q, block_k=block_k)
        np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-12, atol=1e-12)


def test_numpy_and_torch_paths_agree_and_keep_dtype():
    q, k, v = (t.float() for t in _qkv((2,), 50, 50, seed=4))
    t = blockwise_attend(q, k, v, causal=True, block_q=16, block_k=16)
    n = blockwise_attend(q.numpy(), k.numpy(), v.numpy(), causal=True, block_q=16, block_k=16)
    assert t.dtype == torch.float32 and n.dtype == np.float32
    np.testing.assert_allclose(n, t.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        n, explicit_attend(q.numpy(), k.numpy(), v.numpy(), causal=True), rtol=1e-5, atol=1e-6
    )


def test_large_scores_stay_finite():
    q, k, v = _qkv((), 10, 40, seed=5)
    out = blockwise_attend(q * 300, k * 300, v, block_k=8)
    want = F.scaled_dot_product_attention(q * 300, k * 300, v)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want, rtol=1e-9, atol=1e-9)


@given(
    seq_q=st.integers(1, 20),
    seq_k=st.integers(1, 20),
    block_q=st.integers(1, 9),
    block_k=st.integers(1, 9),
    seed=st.integers(0, 1000),
)
def test_property_blockwise_equals_attend(seq_q, seq_k, block_q, block_k, seed):
    q, k, v = _qkv((2,), seq_q, seq_k, seed=seed)
    causal = seq_q <= seq_k and seed % 2 == 0
    out = blockwise_attend(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
    want, _ = attnlib.attend(q, k, v, causal=causal)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)


def test_online_update_one_block_at_a_time_equals_softmax():
    rng = np.random.default_rng(6)
    s, v = rng.standard_normal((4, 12)) * 5, rng.standard_normal((12, 3))
    m, l, acc = np.full((4, 1), -np.inf), np.zeros((4, 1)), np.zeros((4, 3))
    for j in range(12):
        m, l, acc = online_softmax_update(m, l, acc, s[:, j : j + 1], v[j : j + 1])
    w = attnlib.softmax(s)
    np.testing.assert_allclose(acc / l, w @ v, rtol=1e-12)
    np.testing.assert_allclose(l[:, 0], np.exp(s - s.max(1, keepdims=True)).sum(1), rtol=1e-12)


def test_online_update_a_fully_masked_block_changes_nothing():
    m, l, acc = np.array([[1.0]]), np.array([[2.0]]), np.array([[3.0, 4.0]])
    m2, l2, acc2 = online_softmax_update(m, l, acc, np.full((1, 3), -np.inf), np.ones((3, 2)))
    np.testing.assert_array_equal(m2, m)
    np.testing.assert_array_equal(l2, l)
    np.testing.assert_array_equal(acc2, acc)


def test_peak_bytes_counts_numpy_allocations():
    assert peak_bytes(np.zeros, (1000, 1000)) >= 8_000_000
    assert peak_bytes(np.zeros, (1000, 1000)) < 8_100_000


def test_blockwise_peak_memory_grows_linearly_and_explicit_quadratically():
    rng = np.random.default_rng(7)
    peaks = {}
    for n in (256, 512, 1024):
        q, k, v = (rng.standard_normal((1, n, 16), dtype=np.float32) for _ in range(3))
        peaks[n] = (peak_bytes(explicit_attend, q, k, v), peak_bytes(blockwise_attend, q, k, v))
    assert all(peaks[n][0] >= n * n * 4 for n in peaks)  # at least one full score matrix
    assert 3.5 < peaks[1024][0] / peaks[512][0] < 4.5  # quadratic
    assert peaks[1024][1] / peaks[512][1] < 2.2  # at most linear
    assert peaks[1024][0] / peaks[1024][1] > 6


def test_errors_name_the_argument():
    q, k, v = _qkv((), 4, 5)
    with pytest.raises(ValueError, match="seq_k=5"):
        blockwise_attend(q, k, v[:4])
    with pytest.raises(ValueError, match="d_k"):
        blockwise_attend(q[..., :3], k, v)
    with pytest.raises(ValueError, match="block_k must be >= 1"):
        blockwise_attend(q, k, v, block_k=0)
    with pytest.raises(TypeError, match="same kind"):
        blockwise_attend(q, k, v.numpy())


def test_gradients_flow_and_match_sdpa():
    q, k, v = (t.requires_grad_() for t in _qkv((2,), 12, 12, seed=8))
    blockwise_attend(q, k, v, causal=True, block_q=5, block_k=4).sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    for mine, want in zip(grads, (q.grad, k.grad, v.grad), strict=True):
        torch.testing.assert_close(mine, want, rtol=1e-10, atol=1e-12)


def test_in_place_path_does_not_touch_the_inputs():
    q, k, v = _qkv((3,), 20, 20, seed=9)
    copies = [t.clone() for t in (q, k, v)]
    with torch.no_grad():
        blockwise_attend(q, k, v, causal=True, block_q=8, block_k=8)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), copies, strict=True))
