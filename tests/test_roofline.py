"""The bytes and FLOPs of a decoding step (attnlib.roofline).

Oracles: torch's own FLOP counter (``torch.utils.flop_counter.FlopCounterMode``, which
counts every matrix product a forward pass runs) on a real cached decoding step of the
course's GPT; the bytes the course's caches hold after n appends (``KVCache.nbytes``,
``LatentCache.nbytes``); ``model.parameters()`` for the weights; and formulas written out by
hand for a small GPT config. No timing is asserted.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attnlib import roofline as R
from attnlib.decoder import TinyDecoder
from attnlib.gpt import GPT

V, D, H, L, MAX_LEN = 13, 16, 4, 2, 64  # vocab, d_model, n_heads, n_layers, max_len


def _gpt(dtype=torch.float32):
    torch.manual_seed(0)
    return GPT(vocab_size=V, d_model=D, n_heads=H, n_layers=L, max_len=MAX_LEN).to(dtype).eval()


def _tokens(batch, n, vocab=V):
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(1))


def _counted_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


# ---------------------------------------------------------------------------- weights


def test_weight_bytes_are_every_parameter_once_at_its_dtype():
    model = _gpt()
    # by hand: wte + wpe, per block ln_1, ln_2 (2d each), W_q/k/v/o (d² + d each),
    # c_fc (4d² + 4d), c_proj (4d² + d); ln_f (2d); lm_head is wte (tied, counted once)
    block = 2 * 2 * D + 4 * (D * D + D) + (4 * D * D + 4 * D) + (4 * D * D + D)
    n_params = V * D + MAX_LEN * D + L * block + 2 * D
    assert n_params == sum(p.numel() for p in model.parameters())
    assert R.weight_bytes(model) == 4 * n_params
    assert R.weight_bytes(model, dtype=torch.bfloat16) == 2 * n_params
    assert R.weight_bytes(_gpt(torch.float64)) == 8 * n_params


# ---------------------------------------------------------------------------- FLOPs


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("seq_k", [1, 9, 40])
def test_a_decoding_steps_flops_are_what_torch_counts_on_a_cached_step(seq_k, batch):
    """Off by one in the keys a new token sees (seq_k - 1 or seq_k + 1), or the weights'
    FLOPs counted once for the whole batch, would differ from torch's count here."""
    model = _gpt()
    caches = model.new_caches(batch, max_len=seq_k)
    with torch.no_grad():
        if seq_k > 1:
            model(_tokens(batch, seq_k - 1), caches)  # the earlier positions, cached
        counted = _counted_flops(lambda: model(_tokens(batch, 1), caches))
    hand = batch * (2 * (12 * D * D * L + V * D) + 4 * L * D * seq_k)
    assert R.decode_cost(model, seq_k, batch=batch).flops == counted == hand


@pytest.mark.parametrize("n", [1, 2, 7, 32])
def test_a_prefills_flops_count_the_causal_half_of_the_scores(n):
    model = _gpt()
    linear = 2 * (12 * D * D * L + V * D) * n
    assert R.prefill_cost(model, n).flops == linear + 4 * L * D * n * (n + 1) // 2
    # attnlib.attend computes every score and masks the future ones: torch counts n² keys
    with torch.no_grad():
        counted = _counted_flops(lambda: model(_tokens(1, n)))
    assert counted == linear + 4 * L * D * n * n
    # a step of 3 new tokens after 5 cached: the new ones see 6, 7 and 8 keys
    cost = R.step_cost(model, seq_k=8, n_new=3)
    assert cost.flops == 2 * (12 * D * D * L + V * D) * 3 + 4 * L * D * (6 + 7 + 8)


def test_grouped_keys_read_fewer_bytes_for_the_same_flops():
    costs = {}
    for n_kv in (4, 2, 1):
        torch.manual_seed(0)
        model = TinyDecoder(vocab_size=V, d_model=D, n_heads=H, n_kv_heads=n_kv, n_layers=L)
        costs[n_kv] = (R.decode_cost(model, 32), model)
    mha, gqa, mqa = costs[4][0], costs[2][0], costs[1][0]
    assert mha.cache_bytes == 2 * gqa.cache_bytes == 4 * mqa.cache_bytes
    # the attention FLOPs are the same; the weights of W_k and W_v shrink with n_kv_heads
    d_head = D // H
    for n_kv, (cost, model) in costs.items():
        linear = sum(p.numel() for n, p in model.named_parameters() if n.endswith("W_k.weight"))
        assert linear == L * D * n_kv * d_head
        attention = cost.flops - 2 * sum(
            m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)
        )
        assert attention == 4 * L * D * 32
    model = costs[1][1]
    for block in model.blocks:  # torch's counter does not see inside the CPU's fused SDPA:
        block.attn.use_sdpa = False  # the explicit grouped path, the same products
    with torch.no_grad():
        caches = model.new_caches(1, 32)
        model(_tokens(1, 31), caches)
        counted = _counted_flops(lambda: model(_tokens(1, 1), caches))
    assert counted == mqa.flops


# ---------------------------------------------------------------------------- cache bytes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 2])
def test_cache_bytes_equal_what_the_caches_hold_after_n_appends(batch, dtype):
    model, n = _gpt(dtype), 11
    caches = model.new_caches(batch, max_len=n)  # exactly n positions: no spare capacity
    with torch.no_grad():
        for _ in range(n):  # n appends of one token
            model(_tokens(batch, 1), caches)
    held = sum(c.nbytes for c in caches)
    assert R.decode_cost(model, n, batch=batch).cache_bytes == held
    assert R.decode_cost(_gpt(), n, batch=batch, cache_dtype=dtype).cache_bytes == held
    per_token = R.cache_bytes_per_token(n_layers=L, n_kv_heads=H, d_k=D // H, dtype=dtype)
    assert per_token * n * batch == held


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_grouped_and_multi_query_caches_hold_the_formulas_bytes(n_kv_heads):
    torch.manual_seed(0)
    model = TinyDecoder(vocab_size=V, d_model=D, n_heads=H, n_kv_heads=n_kv_heads, n_layers=L)
    caches = model.new_caches(1, 9)
    with torch.no_grad():
        model(_tokens(1, 9), caches)
    per_token = R.cache_bytes_per_token(n_layers=L, n_kv_heads=n_kv_heads, d_k=D // H)
    assert per_token * 9 == sum(c.nbytes for c in caches) == R.decode_cost(model, 9).cache_bytes


def test_a_latent_caches_bytes_per_token_are_its_width():
    torch.manual_seed(0)
    model = TinyDecoder(vocab_size=V, d_model=D, n_heads=H, n_layers=L, d_latent=6, d_rope=2)
    caches = model.new_caches(1, 9)
    with torch.no_grad():
        model(_tokens(1, 9), caches)
    per_token = R.cache_bytes_per_token(n_layers=L, d_latent=6, d_rope=2)
    assert per_token == L * (6 + 2) * 4
    assert per_token * 9 == sum(c.nbytes for c in caches)


# ---------------------------------------------------------------------------- intensity


def test_decoding_stays_near_half_a_flop_a_byte_while_prefill_grows_with_n():
    model = _gpt()
    decode = [R.decode_cost(model, n).intensity for n in (1, 8, 32, 64)]
    assert all(0.2 < x < 1.0 for x in decode), decode  # float32: 2 FLOPs per 4-byte weight
    prefill = [R.prefill_cost(model, n).intensity for n in (1, 4, 16, 64)]
    assert prefill == sorted(prefill) and prefill[-1] > 20 * decode[-1], prefill
    # batching decoding steps shares the weights' bytes: the intensity grows with batch
    assert R.decode_cost(model, 8, batch=8).intensity > 4 * decode[1]
    cost = R.decode_cost(model, 8)
    assert cost.nbytes == cost.weight_bytes + cost.cache_bytes
    assert cost.intensity == R.arithmetic_intensity(cost.flops, cost.nbytes)


def test_bandwidth_and_the_prediction():
    bw = R.measure_bandwidth(nbytes=2**16, repeats=2)
    assert isinstance(bw, float) and bw > 0
    assert R.predict_step_seconds(3e9, 1.5e9) == pytest.approx(2.0)
    assert R.arithmetic_intensity(0, 5) == 0.0


@pytest.mark.parametrize(
    "model",
    [
        GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=2, max_len=12),
        TinyDecoder(11, 16, 4, n_layers=2, n_kv_heads=1, max_len=12),
        TinyDecoder(11, 16, 4, n_layers=2, d_latent=4, d_rope=2, max_len=12),
    ],
    ids=["gpt", "mqa", "latent"],
)
def test_time_decode_step_times_the_step_decode_cost_counts(model):
    """Every round (2 untimed + repeats) is one forward of one new token per sequence onto
    exactly seq_k - 1 cached positions: the step decode_cost(model, seq_k, batch) counts."""
    seen = []

    def record(module, args):
        tokens, caches = args
        seen.append((tuple(tokens.shape), [c.length for c in caches]))

    handle = model.register_forward_pre_hook(record)
    try:
        seconds = R.time_decode_step(model, 12, batch=3, repeats=4)
    finally:
        handle.remove()
    assert isinstance(seconds, float) and seconds > 0
    assert seen == [((3, 1), [11] * 2)] * (2 + 4)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: R.decode_cost("gpt", 4), TypeError, r"decode_cost: model must be .*GPT.* str"),
        (lambda: R.weight_bytes([1]), TypeError, r"weight_bytes: model must be .*got list"),
        (lambda: R.decode_cost(_gpt(), 0), ValueError, r"decode_cost: seq_k must be >= 1"),
        (lambda: R.decode_cost(_gpt(), 2.0), TypeError, r"decode_cost: seq_k must be an int"),
        (lambda: R.prefill_cost(_gpt(), 0), ValueError, r"prefill_cost: n must be >= 1"),
        (
            lambda: R.step_cost(_gpt(), seq_k=3, n_new=4),
            ValueError,
            r"step_cost: n_new=4 .* seq_k=3",
        ),
        (
            lambda: R.decode_cost(_gpt(), 3, cache_dtype="bf16"),
            TypeError,
            r"decode_cost: cache_dtype must be a torch.dtype",
        ),
        (
            lambda: R.decode_cost(TinyDecoder(d_model=16, n_heads=4, d_latent=4), 3),
            ValueError,
            r"decode_cost: model uses d_latent",
        ),
        (
            lambda: R.decode_cost(TinyDecoder(d_model=16, n_heads=4, window=4), 3),
            ValueError,
            r"model uses window",
        ),
        (
            lambda: R.cache_bytes_per_token(n_layers=2, n_kv_heads=2, d_k=4, d_latent=8),
            ValueError,
            r"cache_bytes_per_token: d_latent=8",
        ),
        (
            lambda: R.cache_bytes_per_token(n_layers=2),
            TypeError,
            r"cache_bytes_per_token: give n_kv_heads and d_k",
        ),
        (lambda: R.cache_bytes_per_token(n_layers=0, d_latent=4), ValueError, r"n_layers"),
        (lambda: R.measure_bandwidth(nbytes=2.5), TypeError, r"measure_bandwidth: nbytes"),
        (lambda: R.measure_bandwidth(repeats=0), ValueError, r"measure_bandwidth: repeats"),
        (lambda: R.predict_step_seconds(0, 1e9), ValueError, r"predict_step_seconds: nbytes"),
        (
            lambda: R.predict_step_seconds(1e6, "fast"),
            TypeError,
            r"predict_step_seconds: bandwidth must be a number, got str",
        ),
        (lambda: R.arithmetic_intensity(1, 0), ValueError, r"arithmetic_intensity: nbytes"),
        (lambda: R.time_decode_step("gpt", 4), TypeError, r"time_decode_step: model must be"),
        (
            lambda: R.time_decode_step(_gpt(), 1),
            ValueError,
            r"time_decode_step: seq_k must be >= 2",
        ),
        (
            lambda: R.time_decode_step(_gpt(), 10**6),
            ValueError,
            r"time_decode_step: seq_k=1000000 exceeds the model's max_len",
        ),
        (
            lambda: R.time_decode_step(_gpt(), 4, repeats=0),
            ValueError,
            r"time_decode_step: repeats",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_door_and_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()
