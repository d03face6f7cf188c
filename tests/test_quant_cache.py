"""Quantised keys and values (lesson 17): quantize/dequantize and QuantKVCache.

Oracles: the step-size bound |x - dequantize(quantize(x))| ≤ scale / 2 with the scale
recomputed here from each group's min and max; bytes counted by hand; the float
:class:`attnlib.kv_cache.KVCache` and torch's scaled_dot_product_attention on the float
keys and values, with an error bound derived from the steps (below); the course's GPT
decoding with KVCaches.
"""

from __future__ import annotations

import math

import pytest
import torch
from cache_helpers import one_thread, rand  # noqa: F401 (one_thread: a fixture)
from torch.nn import functional as F

from attnlib.gpt import GPT
from attnlib.kv_cache import KVCache
from attnlib.quant_cache import QuantizedTensor, QuantKVCache, dequantize, quantize

pytestmark = pytest.mark.usefixtures("one_thread")


def _outlier_keys(seed=0, seq=256):
    """Keys (1, 2, seq, 64) whose channels 3, 17, 40 and 51 are large in every token."""
    k = rand(1, 2, seq, 64, seed=seed)
    outliers = [3, 17, 40, 51]
    k[..., outliers] = 5 * k[..., outliers] + 40
    return k


# ---- quantize / dequantize ------------------------------------------------------------------


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("axis", [-1, -2, 0])
def test_round_trip_error_is_at_most_half_a_step(bits, axis):
    x = rand(3, 40, 16, seed=bits) * torch.linspace(0.1, 9, 16, dtype=torch.float64) + 2
    q = quantize(x, bits, axis=axis)
    lo, hi = x.amin(axis, keepdim=True), x.amax(axis, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)  # one step, recomputed here
    assert torch.equal(q.scale, scale) and torch.equal(q.zero, lo)
    err = (dequantize(q) - x).abs()
    slack = 8 * torch.finfo(torch.float64).eps * x.abs().max()  # float64 rounding only
    assert (err <= scale / 2 + slack).all()
    # the bound is the right one, not a loose one: some element sits about half a step off
    # (floor instead of round would give up to a whole step and fail above)
    assert (err / scale).max() > 0.45
    assert q.codes.dtype == torch.uint8 and int(q.codes.max()) <= 255
    assert q.codes.shape[-1] == (16 if bits == 8 else 8)
    if bits == 4:  # packed codes unpack to 0..15 exactly as rounded
        codes = torch.round((x - lo) / scale)
        assert torch.equal(q.codes, (codes[..., 0::2] + 16 * codes[..., 1::2]).to(torch.uint8))


def test_float32_round_trip_and_constant_groups():
    x = rand(5, 8, seed=3, dtype=torch.float32)
    x[2] = 1.5  # a constant row: scale 0, given back exactly
    q = quantize(x, 8, axis=-1)
    back = dequantize(q)
    assert back.dtype == torch.float32 and q.scale.dtype == torch.float32
    assert float(q.scale[2]) == 0.0 and torch.equal(back[2], x[2])
    bound = q.scale / 2 + 4 * torch.finfo(torch.float32).eps * x.abs().amax(-1, keepdim=True)
    assert ((back - x).abs() <= bound).all()
    assert dequantize(q, torch.float64).dtype == torch.float64


def test_bytes_of_a_quantised_tensor_by_hand():
    x = torch.zeros(2, 10, 64)
    # per token: 2 · 10 · 64 codes of 1 byte, and a float32 scale and zero per token (20)
    assert quantize(x, 8, axis=-1).nbytes == 1280 + 20 * 2 * 4 == 1440
    assert quantize(x, 4, axis=-1).nbytes == 640 + 160 == 800  # two codes a byte
    # per channel: 2 · 64 scales and zeros instead
    assert quantize(x, 4, axis=-2).nbytes == 640 + 2 * 64 * 2 * 4 == 1664


# ---- which axis the keys want ------------------------------------------------------------------


@pytest.mark.parametrize("bits", [8, 4])
def test_keys_with_outlier_channels_want_per_channel_scales(bits):
    """Per token, the outlier channels set every token's step (a range of ~60 instead of ~6):
    the error of the ordinary channels grows about (60/6)² in mean square. Measured: 51×
    (8 bits) and 54× (4 bits) here; asserted > 20×."""
    k = _outlier_keys()
    per_token = dequantize(quantize(k, bits, axis=-1))
    groups = k.unflatten(2, (8, 32))  # (1, 2, 8 groups, 32 tokens, 64): KIVI's groups
    per_channel = dequantize(quantize(groups, bits, axis=-2)).flatten(2, 3)
    mse_token = (per_token - k).pow(2).mean()
    mse_channel = (per_channel - k).pow(2).mean()
    assert mse_token / mse_channel > 20, (float(mse_token), float(mse_channel))
    # the cache's defaults make the same choice: its keys come back closer per channel
    errs = {}
    for key_axis in ("channel", "token"):
        cache = QuantKVCache(1, 2, 64, bits=bits, key_axis=key_axis, dtype=torch.float64)
        k_read, _ = cache.append(k, k)
        errs[key_axis] = (k_read - k).pow(2).mean()
    assert errs["token"] / errs["channel"] > 20


# ---- the cache ------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [8, 4])
def test_cache_reads_quantised_groups_and_an_exact_residual(bits):
    """Random appends: every complete group of 32 tokens reads back as quantize/dequantize
    of that group of the float history (keys per channel), the rest exactly; values per
    token as the token quantised alone."""
    cache = QuantKVCache(2, 3, d_k=6, d_v=4, bits=bits, group=32, max_len=8, dtype=torch.float64)
    ks, vs = [], []
    for i, n in enumerate((1, 5, 30, 2, 40, 1, 19)):  # 98 tokens: 3 groups, 2 waiting
        ks.append(rand(2, 3, n, 6, seed=i))
        vs.append(rand(2, 3, n, 4, seed=50 + i))
        k_read, v_read = cache.append(ks[-1], vs[-1])
        k, v = torch.cat(ks, 2), torch.cat(vs, 2)
        n_q = k.shape[2] // 32 * 32
        want_k = dequantize(quantize(k[:, :, :n_q].unflatten(2, (-1, 32)), bits, axis=-2))
        assert torch.equal(k_read[:, :, :n_q], want_k.flatten(2, 3))
        assert torch.equal(k_read[:, :, n_q:], k[:, :, n_q:])  # the residual, in float
        assert torch.equal(v_read, dequantize(quantize(v, bits, axis=-1)))
        assert cache.length == k.shape[2] and cache.read()[0].shape == k.shape
    assert cache.capacity >= 98


def test_bytes_per_token_by_hand():
    """2 heads, d_k = d_v = 64, 64 tokens (2 groups of 32), float32 scales and zeros."""
    x = rand(1, 2, 64, 64, dtype=torch.float32)
    # keys per channel: 64 codes a token, and a scale and a zero per channel per 32 tokens:
    # 2 · 64 · 4 bytes / 32 tokens = 16 bytes a token; values per token: 2 · 4 = 8 bytes
    keys = {8: 64 + 16, 4: 32 + 16}  # a token and head; 4 bits: two codes a byte
    values = {8: 64 + 8, 4: 32 + 8}
    float_cache = KVCache(1, 2, 64, max_len=64)
    float_cache.append(x, x)
    assert float_cache.nbytes // 64 == 2 * 2 * 64 * 4 == 1024  # bytes a token
    for bits in (8, 4):
        cache = QuantKVCache(1, 2, 64, bits=bits, max_len=64)
        cache.append(x, x)
        want = 64 * 2 * (keys[bits] + values[bits])  # 8 bits: 304 a token, 4 bits: 176
        assert cache.used_bytes == want == 64 * {8: 304, 4: 176}[bits]
        # allocated: the same, plus the float residual buffer of the keys (32 rows)
        assert cache.nbytes == cache.used_bytes + 2 * 32 * 64 * 4
        cache.append(x[:, :, :5], x[:, :, :5])  # 5 tokens wait in float
        # ... each: its float32 key (64 · 4 bytes) and its quantised value, per head
        assert cache.used_bytes == want + 5 * 2 * (64 * 4 + values[bits])
    assert 1024 / 304 > 3.3 and 1024 / 176 > 5.8


def _step_bound(q, k, v, bits, group):
    """A bound on |attention(q, k̂, v̂) - attention(q, k, v)| from the steps alone.

    Keys per channel: key j's channel c moves by at most s_k(c, group of j) / 2, so score j
    moves by at most ε = max_j Σ_c |q_c| s_k(c, j) / 2 / sqrt(d_k) (0 for residual keys).
    Each weight then changes by a factor within [e^-2ε, e^2ε], so Σ_j |ŵ_j - w_j| ≤ e^2ε - 1,
    and since Σ_j (ŵ_j - w_j) = 0 this moves the output by at most (e^2ε - 1) · range(v) / 2.
    Values per token: value j moves by at most s_v(j) / 2; the weights sum to 1.
    """
    levels = 2**bits - 1
    n_q = k.shape[2] // group * group
    g = k[:, :, :n_q].unflatten(2, (-1, group))  # (batch, heads, groups, group, d_k)
    s_k = ((g.amax(3) - g.amin(3)) / levels).repeat_interleave(group, 2)  # (..., n_q, d_k)
    score_moves = q.abs() @ s_k.transpose(-2, -1) / 2 / math.sqrt(k.shape[-1])  # (..., seq_q, n_q)
    eps = score_moves.amax(-1, keepdim=True)  # (..., seq_q, 1)
    s_v = (v.amax(-1) - v.amin(-1)) / levels  # (batch, heads, seq_k): one step per token
    v_range = (v.amax(2) - v.amin(2))[:, :, None]  # (batch, heads, 1, d_v)
    return torch.expm1(2 * eps) * v_range / 2 + s_v.amax(-1)[..., None, None] / 2


def _attention_errors(bits):
    """|attention through a QuantKVCache - attention on the float keys and values| for 5
    queries over 100 tokens appended 10 at a time (3 groups of 32 quantised, 4 in float),
    and the bound of :func:`_step_bound`."""
    k, v = rand(1, 2, 100, 16, seed=1), rand(1, 2, 100, 16, seed=2)
    q = rand(1, 2, 5, 16, seed=3)
    float_cache = KVCache(1, 2, 16, dtype=torch.float64)
    cache = QuantKVCache(1, 2, 16, bits=bits, group=32, dtype=torch.float64)
    for lo in range(0, 100, 10):
        k_f, v_f = float_cache.append(k[:, :, lo : lo + 10], v[:, :, lo : lo + 10])
        k_q, v_q = cache.append(k[:, :, lo : lo + 10], v[:, :, lo : lo + 10])
    want = F.scaled_dot_product_attention(q, k, v)
    assert torch.equal(F.scaled_dot_product_attention(q, k_f, v_f), want)
    err = (F.scaled_dot_product_attention(q, k_q, v_q) - want).abs()
    return err, _step_bound(q, k, v, bits, 32)


@pytest.mark.parametrize(("bits", "worst"), [(8, 0.01), (4, 0.15)])
def test_attention_output_error_against_the_float_cache(bits, worst):
    """Within the derived bound elementwise (a guarantee, loose: largest bound 0.19 with 8
    bits, 5.0 with 4), and within ``worst`` (measured: largest error 0.0036 with 8 bits,
    0.062 with 4 bits, of outputs of size ~1)."""
    err, bound = _attention_errors(bits)
    assert (err <= bound).all()
    assert float(err.max()) < worst, float(err.max())


def test_attention_error_grows_with_the_step():
    """4 bits have 15 steps where 8 bits have 255: the error grows about 255 / 15 = 17×
    (measured 17.1×)."""
    ratio = _attention_errors(4)[0].max() / _attention_errors(8)[0].max()
    assert 8 < float(ratio) < 35, float(ratio)


def test_a_gpt_decodes_with_the_quantised_cache():
    """The same GPT decodes with QuantKVCaches in place of KVCaches (a KVCache subclass),
    40 tokens one at a time. Largest logit error against the float model, whose logits reach
    0.33: measured 5.4e-5 with 8 bits, 1.2e-3 with 4 bits; asserted < 5e-4 and < 1e-2."""
    torch.manual_seed(0)
    model = GPT(vocab_size=13, d_model=16, n_heads=2, n_layers=2, max_len=48).eval()
    tokens = torch.randint(0, 13, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(tokens)
        for bits, tol in ((8, 5e-4), (4, 1e-2)):
            caches = [QuantKVCache(1, 2, 8, bits=bits, group=8, max_len=48) for _ in range(2)]
            got = torch.cat([model(tokens[:, t : t + 1], caches) for t in range(40)], dim=1)
            assert float((got - want).abs().max()) < tol, (bits, float((got - want).abs().max()))
    assert caches[0].length == 40


# ---- bad input -----------------------------------------------------------------------------

_x = torch.zeros(2, 4)
_qc = QuantKVCache(1, 2, 4)
BAD = [
    (lambda: quantize([1.0, 2.0]), TypeError, r"quantize: x must be a torch.Tensor, got list"),
    (lambda: quantize(_x.long()), TypeError,
     r"quantize: x \(torch.Tensor, shape \(2, 4\), int64\) must have a floating-point dtype"),
    (lambda: quantize(_x, bits=3), ValueError, r"quantize: bits must be 8 or 4, got 3"),
    (lambda: quantize(_x, bits=8.0), TypeError, r"quantize: bits must be an int, got float"),
    (lambda: quantize(_x, axis=2), ValueError,
     r"quantize: axis=2 is out of range for an input with 2 dims"),
    (lambda: quantize(torch.zeros(2, 3), bits=4), ValueError,
     r"quantize: x has shape \(2, 3\); 4-bit codes are packed two a byte along the last "
     r"dim, which must be even"),
    (lambda: quantize(torch.zeros(0, 4), axis=0), ValueError,
     r"quantize: x has shape \(0, 4\): no numbers along axis=0"),
    (lambda: quantize(torch.tensor([1.0, float("nan")])), ValueError,
     r"quantize: x has nan or inf"),
    (lambda: dequantize(_x), TypeError,
     r"dequantize: q must be a QuantizedTensor \(made by quantize\), got torch.Tensor"),
    (lambda: QuantKVCache(1, 2, 3, bits=4), ValueError,
     r"QuantKVCache: 4-bit codes pack two a byte; \{'d_k': 3, 'd_v': 3\} must be even"),
    (lambda: QuantKVCache(1, 2, 4, key_axis="row"), ValueError,
     r"QuantKVCache: key_axis must be 'channel' or 'token', got 'row'"),
    (lambda: QuantKVCache(1, 2, 4, group=0), ValueError, r"QuantKVCache: group must be >= 1"),
    (lambda: QuantKVCache(1, 2, 4, dtype=torch.int8), TypeError,
     r"QuantKVCache: dtype must be a floating dtype, got torch.int8"),
    (lambda: _qc.append(torch.zeros(1, 2, 1, 5), torch.zeros(1, 2, 1, 4)), ValueError,
     r"QuantKVCache.append: k has shape \(1, 2, 1, 5\), expected \(batch, n_kv_heads, "
     r"seq_new, d_k\) = \(1, 2, seq_new, 4\)"),
    (lambda: _qc.append(torch.zeros(1, 2, 1, 4).double(), torch.zeros(1, 2, 1, 4)), TypeError,
     r"QuantKVCache.append: k has dtype torch.float64, the cache holds torch.float32"),
    (lambda: _qc.append(torch.zeros(1, 2, 1, 4), torch.full((1, 2, 1, 4), float("inf"))),
     ValueError, r"QuantKVCache.append: v has nan or inf"),
    (lambda: _qc.truncate(0), ValueError, r"QuantKVCache.truncate: a quantised cache does not"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "message"), BAD, ids=[m[:40] for _, _, m in BAD])
def test_bad_input_gets_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()
    assert _qc.length == 0


def test_a_quantized_tensor_is_a_named_tuple_of_its_parts():
    q = quantize(torch.tensor([[0.0, 2.0]]), 8)
    assert isinstance(q, QuantizedTensor) and q.bits == 8 and q.dtype == torch.float32
    assert q.codes.tolist() == [[0, 255]]
