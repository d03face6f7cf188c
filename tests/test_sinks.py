"""Attention sinks: sink_mask, SinkKVCache and streaming_loss (lesson 17).

Oracles: a mask built entry by entry from its definition, attnlib.windows.sliding_window_mask
(sinks=0), torch's scaled_dot_product_attention over the full sequence with the explicit
mask (fp64), RollingKVCache (sinks=0), the model run afresh on the kept tokens, and the
shipped plays model's losses as measured (bounds stated beside each assertion).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cache_helpers import one_thread, rand  # noqa: F401 (one_thread: a fixture)
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnlib import attend
from attnlib.gpt import GPT
from attnlib.kv_cache import KVCache, RollingKVCache
from attnlib.sinks import SinkKVCache, sink_mask, streaming_loss
from attnlib.windows import sliding_window_mask

pytestmark = pytest.mark.usefixtures("one_thread")


def _mask_by_definition(seq_q, seq_k, sinks, window, offset):
    want = np.zeros((seq_q, seq_k), dtype=bool)
    for i in range(seq_q):
        p = i + offset
        for j in range(seq_k):
            want[i, j] = j <= p and (j < sinks or p - j < window)
    return want


# ---- sink_mask ----------------------------------------------------------------------------


@pytest.mark.parametrize("seq_q, seq_k, align", [(7, 7, "top_left"), (3, 9, "bottom_right")])
@pytest.mark.parametrize("sinks, window", [(0, 3), (2, 3), (1, 1), (4, 20)])
def test_sink_mask_is_its_definition(seq_q, seq_k, align, sinks, window):
    offset = seq_k - seq_q if align == "bottom_right" else 0
    want = _mask_by_definition(seq_q, seq_k, sinks, window, offset)
    got = sink_mask(seq_q, seq_k, sinks=sinks, window=window, align=align)
    assert isinstance(got, np.ndarray) and np.array_equal(got, want)
    got_t = sink_mask(seq_q, seq_k, sinks=sinks, window=window, align=align, like=torch.zeros(1))
    assert got_t.dtype == torch.bool and np.array_equal(got_t.numpy(), want)
    if sinks == 0:  # the sliding window alone
        assert np.array_equal(got, sliding_window_mask(seq_q, seq_k, window=window, align=align))


# ---- SinkKVCache: the cache the mask needs ------------------------------------------------


@pytest.mark.parametrize("chunks", [[1] * 30, [5, 1, 13, 1, 2, 8]])
def test_attention_over_the_cache_is_attention_over_everything_with_the_sink_mask(chunks):
    # fp64; oracle: SDPA over every position so far with the explicit mask. Measured:
    # 8.9e-16 at worst (the two sum different numbers of exact zeros, not bitwise equal).
    sinks, window, total = 3, 6, sum(chunks)
    q, k, v = rand(2, 4, total, 8, seed=1), rand(2, 4, total, 8, seed=2), rand(2, 4, total, 5)
    cache = SinkKVCache(2, 4, 8, 5, sinks=sinks, window=window, dtype=torch.float64)
    start = 0
    for n in chunks:
        end = start + n
        k_vis, v_vis = cache.append(k[:, :, start:end], v[:, :, start:end])
        vis = cache.visible_positions
        # the returned rows *are* the keys and values of those positions (a gather)
        assert torch.equal(k_vis, k[:, :, vis]) and torch.equal(v_vis, v[:, :, vis])
        full = sink_mask(n, end, sinks=sinks, window=window, align="bottom_right", like=q)
        ref = sdpa(q[:, :, start:end], k[:, :, :end], v[:, :, :end], attn_mask=full)
        out, _ = attend(q[:, :, start:end], k_vis, v_vis, full[:, vis])
        assert (out - ref).abs().max() < 1e-12
        if n == 1:  # one new token sees every returned key: no mask needed
            assert torch.equal(attend(q[:, :, start:end], k_vis, v_vis)[0], out)
        # every key some new query sees is returned (nothing visible was evicted too early)
        assert set(full.any(0).nonzero().flatten().tolist()) == set(vis.tolist())
        start = end


def test_sinks_are_never_evicted_and_the_window_rolls_oldest_first():
    cache = SinkKVCache(1, 1, 1, sinks=2, window=3, dtype=torch.float64)
    held = []
    for p in range(9):
        cache.append(
            torch.full((1, 1, 1, 1), float(p), dtype=torch.float64),
            torch.zeros(1, 1, 1, 1, dtype=torch.float64),
        )
        k, _ = cache.read()
        held.append(k.flatten().tolist())
    assert held[1] == [0, 1] and held[3] == [0, 1, 2, 3]
    assert held[4] == [0, 1, 2, 3, 4]  # full: 2 sinks + a window of 3
    assert held[5] == [0, 1, 3, 4, 5]  # position 2, the oldest non-sink, goes first
    assert held[8] == [0, 1, 6, 7, 8]  # the sinks stay however long the text
    assert cache.positions.tolist() == [0, 1, 6, 7, 8] and cache.length == 9 and cache.held == 5


def test_a_prompt_longer_than_the_cache_keeps_its_first_and_last_positions():
    cache = SinkKVCache(1, 2, 3, sinks=2, window=4, dtype=torch.float64)
    k, v = rand(1, 2, 11, 3, seed=3), rand(1, 2, 11, 3, seed=4)
    k_vis, _ = cache.append(k, v)
    assert torch.equal(k_vis, k)  # the eleven queries together see all eleven keys
    r_k, r_v = cache.read()
    assert cache.positions.tolist() == [0, 1, 7, 8, 9, 10]
    assert torch.equal(r_k, k[:, :, [0, 1, 7, 8, 9, 10]])
    assert torch.equal(r_v, v[:, :, [0, 1, 7, 8, 9, 10]])


def test_no_sinks_is_the_rolling_cache():
    sink = SinkKVCache(1, 2, 4, sinks=0, window=5, dtype=torch.float64)
    roll = RollingKVCache(1, 2, 4, window=5, dtype=torch.float64)
    for i, n in enumerate((3, 1, 4, 1, 9, 2)):
        k, v = rand(1, 2, n, 4, seed=10 + i), rand(1, 2, n, 4, seed=20 + i)
        a, b = sink.append(k, v), roll.append(k, v)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert torch.equal(sink.read()[0], roll.read()[0])
        assert torch.equal(sink.positions, roll.positions)


def test_nbytes_is_fixed_at_sinks_plus_window():
    cache = SinkKVCache(2, 3, 8, 4, sinks=4, window=12)  # float32: 4 bytes a number
    want = 2 * 3 * (4 + 12) * (8 + 4) * 4
    assert cache.nbytes == want and cache.capacity == 16
    for _ in range(5):
        cache.append(torch.zeros(2, 3, 7, 8), torch.zeros(2, 3, 7, 4))
    assert cache.nbytes == want and cache.length == 35 and cache.held == 16


def test_a_sink_cache_is_a_kv_cache_the_gpt_blocks_accept():
    # decoding within the trained length with a cache big enough for everything: the
    # block sees a KVCache, and the result is the full cache's
    model = GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=1, max_len=16).double().eval()
    block, x = model.h[0], rand(1, 9, 16, seed=5)
    sink = SinkKVCache(1, 4, 4, sinks=2, window=7, dtype=torch.float64)
    full = KVCache(1, 4, 4, dtype=torch.float64)
    with torch.no_grad():
        a = torch.cat([block(x[:, t : t + 1], sink) for t in range(9)], 1)
        b = torch.cat([block(x[:, t : t + 1], full) for t in range(9)], 1)
    assert torch.equal(a, b)


# ---- errors -------------------------------------------------------------------------------


def test_bad_input_errors_name_the_argument():
    with pytest.raises(ValueError, match="SinkKVCache: sinks must be >= 0, got -1"):
        SinkKVCache(1, 1, 2, sinks=-1, window=3)
    with pytest.raises(ValueError, match="SinkKVCache: window must be >= 1, got 0"):
        SinkKVCache(1, 1, 2, sinks=1, window=0)
    with pytest.raises(TypeError, match="SinkKVCache: sinks must be an int, got bool"):
        SinkKVCache(1, 1, 2, sinks=True, window=3)
    with pytest.raises(TypeError, match="SinkKVCache: window must be an int, got float"):
        SinkKVCache(1, 1, 2, sinks=1, window=3.0)
    cache = SinkKVCache(1, 2, 4, sinks=1, window=3)
    with pytest.raises(ValueError, match=r"SinkKVCache.append: k .*d_k"):
        cache.append(torch.zeros(1, 2, 1, 5), torch.zeros(1, 2, 1, 4))
    with pytest.raises(TypeError, match=r"SinkKVCache.append: .*float64"):
        cache.append(torch.zeros(1, 2, 1, 4, dtype=torch.float64), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="SinkKVCache.truncate: a sink cache cannot rewind"):
        cache.truncate(0)
    with pytest.raises(ValueError, match="sink_mask: sinks must be >= 0"):
        sink_mask(3, sinks=-2, window=2)
    with pytest.raises(ValueError, match="sink_mask: align"):
        sink_mask(3, sinks=1, window=2, align="left")


def test_streaming_loss_errors_name_the_argument():
    model = GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=1, max_len=8)
    tokens = torch.arange(10) % 11
    with pytest.raises(ValueError, match=r"sinks \+ window = 3 \+ 6 = 9 exceeds .* max_len=8"):
        streaming_loss(model, tokens, sinks=3, window=6)
    with pytest.raises(ValueError, match="streaming_loss: positions"):
        streaming_loss(model, tokens, sinks=1, window=4, positions="absolute")
    with pytest.raises(TypeError, match="streaming_loss: tokens must be a LongTensor .*float32"):
        streaming_loss(model, tokens.float(), sinks=1, window=4)
    with pytest.raises(ValueError, match=r"streaming_loss: tokens must have shape \(n,\)"):
        streaming_loss(model, tokens[None], sinks=1, window=4)
    with pytest.raises(ValueError, match="outside 0 .. vocab_size - 1 = 10"):
        streaming_loss(model, tokens + 5, sinks=1, window=4)
    with pytest.raises(TypeError, match="streaming_loss: model must be an attnlib.gpt.GPT"):
        streaming_loss(object(), tokens, sinks=1, window=4)


# ---- streaming_loss -----------------------------------------------------------------------


def _small_model(seed=0, max_len=16):
    torch.manual_seed(seed)
    return GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=2, max_len=max_len).double()


def test_with_room_for_everything_all_three_are_the_full_context():
    model, tokens = _small_model(), torch.randint(0, 11, (14,), generator=torch.Generator())
    for mode in ("recompute", "cached"):
        r = streaming_loss(model, tokens, sinks=3, window=13, positions=mode)
        for losses in (r.window_only, r.with_sinks):
            assert (losses - r.full).abs().max() < 1e-12, mode


def test_recompute_runs_the_model_afresh_on_the_kept_tokens():
    # oracle: for a few steps t, the model on tokens[:sinks] + tokens[t - window + 1 : t + 1]
    # at positions 0.. (a window one token longer or shorter, a sink forgotten, or the
    # first sink skipped would each change these numbers)
    model = _small_model(1)
    tokens = torch.randint(0, 11, (30,), generator=torch.Generator().manual_seed(2))
    sinks, window = 2, 5
    r = streaming_loss(model, tokens, sinks=sinks, window=window, batch=4)
    assert r.full[:16].isfinite().all() and r.full[16:].isnan().all()  # max_len = 16
    with torch.no_grad():
        for t in (7, 8, 19, 28):
            kept = torch.cat([tokens[:sinks], tokens[t - window + 1 : t + 1]])
            for losses, ctx in ((r.with_sinks, kept), (r.window_only, kept[sinks:])):
                logp = model(ctx[None])[0, -1].log_softmax(-1)
                assert abs(losses[t] + logp[tokens[t + 1]]) < 1e-12, t


def test_the_plays_model_shows_no_sink():
    # Measured (plays model, The Tempest from character 40 000, 320 characters, sinks=4,
    # window=28, so the cache is full from step 32 on; full context exists to step 255):
    #   recompute: window only 1.754, sinks + window 1.757 nats (steps 32..318);
    #              full context 1.724 against window only 1.791 (steps 32..255);
    #   cached (96 characters): window only 4.19, sinks + window 4.33 nats (steps 32..94),
    #              full context 1.82.
    # The model was trained on windows that start anywhere in a play: position 0 is an
    # ordinary character, it puts no more attention there than uniform (lesson 16), and
    # keeping the first characters changes nothing. Keys cached under frozen positions
    # break it whether or not sinks are kept.
    from attnlib.tasks.plays import load_model, validation_tokens

    model, tokens = load_model(), validation_tokens()[40_000:40_320]
    r = streaming_loss(model, tokens, sinks=4, window=28)
    win, sink, full = r.window_only[32:], r.with_sinks[32:], r.full[32:256]
    assert abs(sink.mean() - win.mean()) < 0.02  # measured 0.003: no sink effect
    assert 1.6 < win.mean() < 1.9 and 1.6 < sink.mean() < 1.9
    gap = win[: len(full)].mean() - full.mean()  # what a window of 28 costs: measured 0.068
    assert 0.03 < gap < 0.12
    c = streaming_loss(model, tokens[:96], sinks=4, window=28, positions="cached")
    assert c.window_only[32:].mean() > c.full[32:].mean() + 2.0  # measured 4.19 against 1.82
    assert c.with_sinks[32:].mean() > c.window_only[32:].mean()  # measured 4.33 > 4.19
