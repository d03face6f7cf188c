"""sliding_window_mask and RollingKVCache (lesson 14).

Oracles: the band written out with two loops from its definition; torch's
scaled_dot_product_attention over the whole sequence with the band as its boolean mask.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import attnlib
from attnlib.kv_cache import RollingKVCache, grouped_attend
from attnlib.windows import sliding_window_mask


def _rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _band_by_loops(seq_q, seq_k, window, align):
    offset = 0 if align == "top_left" else seq_k - seq_q
    m = np.zeros((seq_q, seq_k), bool)
    for i in range(seq_q):
        for j in range(seq_k):
            m[i, j] = j <= i + offset and i + offset - j <= window - 1
    return m


# ---- the mask -----------------------------------------------------------------------------


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("seq_q", "seq_k"), [(6, 6), (3, 8), (8, 3), (1, 9), (0, 4)])
@pytest.mark.parametrize("window", [1, 2, 3, 5, 20])
def test_mask_equals_the_definition(align, seq_q, seq_k, window):
    got = sliding_window_mask(seq_q, seq_k, window=window, align=align)
    assert got.dtype == np.bool_ and got.shape == (seq_q, seq_k)
    np.testing.assert_array_equal(got, _band_by_loops(seq_q, seq_k, window, align))
    t = sliding_window_mask(seq_q, seq_k, window=window, align=align, like=torch.zeros(1))
    assert t.dtype == torch.bool and np.array_equal(t.numpy(), got)


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("seq_q", "seq_k"), [(5, 5), (2, 7), (7, 2), (1, 1)])
def test_a_window_reaching_position_0_is_the_causal_mask(align, seq_q, seq_k):
    last = seq_q - 1 + (0 if align == "top_left" else seq_k - seq_q)  # the last query's position
    for window in (last + 1, last + 2, 100):
        got = sliding_window_mask(seq_q, seq_k, window=window, align=align)
        np.testing.assert_array_equal(got, attnlib.causal_mask(seq_q, seq_k, align=align))
    longest = int(attnlib.causal_mask(seq_q, seq_k, align=align).sum(-1).max())
    if seq_q == seq_k or align == "bottom_right":  # then the last query is at seq_k - 1
        assert last + 1 == seq_k
    if longest > 1:  # a window shorter than the longest causal row cuts something off
        smaller = sliding_window_mask(seq_q, seq_k, window=longest - 1, align=align)
        assert not np.array_equal(smaller, attnlib.causal_mask(seq_q, seq_k, align=align))


def test_every_query_sees_at_most_window_keys_and_always_itself():
    m = sliding_window_mask(12, window=4)
    assert m.sum(-1).tolist() == [1, 2, 3, 4] + [4] * 8
    assert m.diagonal().all()
    assert sliding_window_mask(5, window=1).tolist() == np.eye(5, dtype=bool).tolist()


def test_mask_composes_with_padding_and_attend_gives_no_nan():
    seq = 6
    band = sliding_window_mask(seq, window=3, like=torch.zeros(1))  # (seq, seq)
    pad = attnlib.padding_mask(torch.tensor([6, 4]), seq)  # (batch, 1, seq)
    mask = band & pad  # (batch, seq, seq)
    assert mask.shape == (2, seq, seq)
    assert torch.equal(mask[0], band) and not mask[1, :, 4:].any()
    q, k, v = _rand(2, seq, 4), _rand(2, seq, 4, seed=1), _rand(2, seq, 4, seed=2)
    out, w = attnlib.attend(q, k, v, mask)
    assert torch.isfinite(out).all() and (w[~mask] == 0).all()
    # an all-padding batch row: every query row is fully masked, so weights and out are 0
    empty = band & attnlib.padding_mask(torch.tensor([0]), seq)
    out, w = attnlib.attend(q[:1], k[:1], v[:1], empty)
    assert (out == 0).all() and (w == 0).all()


def test_attend_with_the_band_matches_sdpa():
    q, k, v = _rand(2, 3, 9, 8), _rand(2, 3, 9, 8, seed=1), _rand(2, 3, 9, 8, seed=2)
    band = sliding_window_mask(9, window=3, like=q)
    out, _ = attnlib.attend(q, k, v, band)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=band)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)


def test_mask_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"sliding_window_mask: window must be >= 1, got 0"):
        sliding_window_mask(3, window=0)
    with pytest.raises(TypeError, match=r"sliding_window_mask: window must be an int"):
        sliding_window_mask(3, window=2.0)
    with pytest.raises(TypeError, match="window"):
        sliding_window_mask(3)  # window is required, keyword only
    with pytest.raises(ValueError, match=r"align must be 'top_left' or 'bottom_right'"):
        sliding_window_mask(3, window=2, align="bottom-right")


# ---- the rolling cache --------------------------------------------------------------------


def test_ring_buffer_keeps_the_last_window_positions_in_order():
    window = 3
    cache = RollingKVCache(1, 2, 4, 5, window=window, dtype=torch.float64)
    ks, vs = _rand(1, 2, 8, 4), _rand(1, 2, 8, 5, seed=1)
    for t in range(8):
        k_vis, v_vis = cache.append(ks[:, :, t : t + 1], vs[:, :, t : t + 1])
        lo = max(0, t - window + 1)
        assert torch.equal(k_vis, ks[:, :, lo : t + 1]) and torch.equal(v_vis, vs[:, :, lo : t + 1])
        assert cache.length == len(cache) == t + 1 and cache.held == min(t + 1, window)
        assert cache.positions.tolist() == list(range(lo, t + 1))
        k_held, v_held = cache.read()
        assert torch.equal(k_held, ks[:, :, lo : t + 1]) and torch.equal(
            v_held, vs[:, :, lo : t + 1]
        )


@pytest.mark.parametrize("chunks", [(5, 1, 1, 4, 2), (1,) * 13, (13,), (2, 7, 4)])
@pytest.mark.parametrize("window", [1, 3, 4])
def test_chunks_return_what_the_new_queries_can_see(chunks, window):
    total = sum(chunks)
    ks, vs = _rand(2, 1, total, 3), _rand(2, 1, total, 3, seed=1)
    cache = RollingKVCache(2, 1, 3, window=window, dtype=torch.float64)
    start = 0
    for n in chunks:
        k_vis, v_vis = cache.append(ks[:, :, start : start + n], vs[:, :, start : start + n])
        lo = max(0, start - window + 1)
        assert torch.equal(k_vis, ks[:, :, lo : start + n])
        assert torch.equal(v_vis, vs[:, :, lo : start + n])
        start += n
    lo = max(0, total - window)
    assert torch.equal(cache.read()[0], ks[:, :, lo:])


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("window", [1, 3, 6, 40])
def test_decoding_token_by_token_equals_full_attention_with_the_band(n_kv_heads, window):
    """The proof of lesson 14: W cached entries give exactly the band-masked attention."""
    batch, n_heads, seq, d = 2, 4, 17, 8
    q = _rand(batch, n_heads, seq, d)
    k, v = _rand(batch, n_kv_heads, seq, d, seed=1), _rand(batch, n_kv_heads, seq, d, seed=2)
    band = sliding_window_mask(seq, window=window, like=q)  # (seq, seq)
    want = F.scaled_dot_product_attention(
        q, k, v, attn_mask=band, enable_gqa=n_kv_heads != n_heads
    )  # (batch, n_heads, seq, d)
    cache = RollingKVCache(batch, n_kv_heads, d, window=window, dtype=torch.float64)
    got = []
    for t in range(seq):
        k_vis, v_vis = cache.append(k[:, :, t : t + 1], v[:, :, t : t + 1])
        assert k_vis.shape[2] == min(t + 1, window)  # never more than W keys
        out, _ = grouped_attend(q[:, :, t : t + 1], k_vis, v_vis)  # all of them visible
        got.append(out)
    got = torch.cat(got, 2)  # (batch, n_heads, seq, d)
    assert (got - want).abs().max().item() <= 1e-14
    assert cache.nbytes == 2 * batch * n_kv_heads * window * d * 8  # fp64, W entries only


def test_prefill_in_chunks_with_the_bottom_right_band_equals_full_attention():
    batch, n_heads, seq, d, window = 1, 2, 15, 4, 4
    q, k, v = (
        _rand(batch, n_heads, seq, d),
        _rand(batch, n_heads, seq, d, seed=1),
        _rand(batch, n_heads, seq, d, seed=2),
    )
    want = F.scaled_dot_product_attention(
        q, k, v, attn_mask=sliding_window_mask(seq, window=window, like=q)
    )
    cache = RollingKVCache(batch, n_heads, d, window=window, dtype=torch.float64)
    got, start = [], 0
    for n in (6, 1, 5, 3):
        k_vis, v_vis = cache.append(k[:, :, start : start + n], v[:, :, start : start + n])
        mask = sliding_window_mask(n, k_vis.shape[2], window=window, align="bottom_right", like=q)
        got.append(attnlib.attend(q[:, :, start : start + n], k_vis, v_vis, mask)[0])
        start += n
    torch.testing.assert_close(torch.cat(got, 2), want, rtol=0, atol=1e-14)


def test_a_window_larger_than_the_sequence_is_an_ordinary_cache():
    k, v = _rand(1, 1, 5, 2), _rand(1, 1, 5, 2, seed=1)
    cache = RollingKVCache(1, 1, 2, window=10, dtype=torch.float64)
    for t in range(5):
        k_vis, _ = cache.append(k[:, :, t : t + 1], v[:, :, t : t + 1])
    assert torch.equal(k_vis, k) and cache.held == 5


def test_rolling_cache_errors_name_the_argument_and_shapes():
    cache = RollingKVCache(1, 2, 4, window=3)
    with pytest.raises(ValueError, match=r"k has shape \(1, 3, 1, 4\)"):
        cache.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(ValueError, match=r"v has shape \(1, 2, 1, 5\).*d_v"):
        cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 5))
    with pytest.raises(TypeError, match="dtype torch.float64"):
        cache.append(torch.zeros(1, 2, 1, 4, dtype=torch.float64), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="seq_new"):
        cache.append(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 1, 4))
    with pytest.raises(TypeError, match=r"k must be a torch.Tensor, got numpy.ndarray"):
        cache.append(np.zeros((1, 2, 1, 4)), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="RollingKVCache: window must be >= 1"):
        RollingKVCache(1, 1, 4, window=0)
    with pytest.raises(TypeError, match="RollingKVCache: batch must be an int"):
        RollingKVCache(1.0, 1, 4, window=2)
    assert cache.length == 0  # nothing was stored by the failed calls
