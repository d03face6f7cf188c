"""Validation once per public call (attnlib._validate.validated).

A public function checks its arguments at its own door; the attnlib functions its body calls
trust what they are given. Two things are tested:

* (a) *counted*: every check of attnlib._validate is wrapped with a counter, and each call
  below must validate at exactly one door, the one the caller called — a rotary decoding
  step used to validate at ten (rotary_decode_step, apply_rotary ×2, rotary_frequencies ×2,
  KVCache.append, grouped_attend, causal_mask, causal_offset, attend);
* (b) a bad argument still gets a clear error at every public door, naming that door, the
  argument and what was given (shape or dtype), whether or not the door is also called
  from inside attnlib.
"""

from __future__ import annotations

import functools
import re
import sys
import types
from collections.abc import Callable

import pytest
import torch

import attnlib
from attnlib import _validate as V
from attnlib.blockwise import blockwise_attend
from attnlib.decoder import CausalSelfAttention, TinyDecoder, generate
from attnlib.flex import flex_attend, sliding_window_mask_mod
from attnlib.heads import merge_heads, split_heads
from attnlib.kv_cache import KVCache, RollingKVCache, grouped_attend, rotary_decode_step
from attnlib.latent import LatentAttention, LatentCache, absorbed_scores
from attnlib.mha import FusedQKVAttention, MultiHeadAttention
from attnlib.paged_cache import PagedKVCache, gather_pages
from attnlib.positions import apply_rotary
from attnlib.quant_cache import QuantKVCache, quantize
from attnlib.roofline import decode_cost, time_decode_step
from attnlib.sampling import sample_token, top_p_filter
from attnlib.selection import Indexer, indexer_scores, topk_mask
from attnlib.sinks import SinkKVCache
from attnlib.torch_mha import mha_forward
from attnlib.windows import sliding_window_mask

# The checks that validate an argument (helpers that only name or test a value are left out).
CHECKS = [n for n in V.__all__ if n not in ("validated", "type_name", "is_int")]


@pytest.fixture
def doors(monkeypatch) -> Callable[[Callable[[], object]], list[str]]:
    """``doors(call)``: the public names that validated during ``call()``, one per door.

    Every check in attnlib._validate is replaced, in every attnlib module that imported it,
    by a wrapper that records the first (outermost) check of each door: the ``fn`` it was
    given, and the frame that made it after stepping out of ``_check_*`` helpers (one frame
    per public call, however many checks it runs).
    """
    log: list[tuple[str, object]] = []
    depth = [0]

    def wrap(f):
        @functools.wraps(f)
        def counted(*args, **kwargs):
            if depth[0] == 0:
                frame = sys._getframe(1)
                while frame.f_code.co_name.startswith("_check"):
                    frame = frame.f_back
                log.append((args[0] if args and isinstance(args[0], str) else "?", frame))
            depth[0] += 1
            try:
                return f(*args, **kwargs)
            finally:
                depth[0] -= 1

        return counted

    originals = {name: getattr(V, name) for name in CHECKS}
    wrapped = {name: wrap(f) for name, f in originals.items()}
    for module in list(sys.modules.values()):
        if isinstance(module, types.ModuleType) and module.__name__.startswith("attnlib"):
            for name, f in originals.items():
                if getattr(module, name, None) is f:
                    monkeypatch.setattr(module, name, wrapped[name])

    def run(call) -> list[str]:
        log.clear()
        call()
        seen: dict[int, str] = {}
        for fn, frame in log:
            seen.setdefault(id(frame), fn)
        return list(seen.values())

    return run


def _t(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _filled_cache(window=None):
    cache = (
        KVCache(1, 2, 8, max_len=4) if window is None else RollingKVCache(1, 2, 8, window=window)
    )
    cache.append(_t(1, 2, 3, 8, seed=1), _t(1, 2, 3, 8, seed=2))
    return cache


def _decoder_step(**options):
    model = TinyDecoder(vocab_size=11, d_model=16, n_heads=4, n_kv_heads=2, max_len=16, **options)
    for block in model.blocks:
        if isinstance(block.attn, CausalSelfAttention):
            block.attn.use_sdpa = False  # attnlib's grouped_attend, the longer chain
    caches = model.new_caches(1, 16)
    model(torch.tensor([[1, 2, 3]]), caches)
    return lambda: model(torch.tensor([[4]]), caches)


def _rotary_step():
    q, k, v, cache = _t(1, 4, 1, 8), _t(1, 2, 1, 8), _t(1, 2, 1, 8), _filled_cache()
    return lambda: rotary_decode_step(q, k, v, cache)


def _with(make, call):
    """``call(made)`` with ``made = make()`` built beforehand: only the call is counted."""
    made = make()
    return lambda: call(made)


_X = _t(2, 5, 16)
_PAD = attnlib.padding_mask(torch.tensor([5, 3]), 5)  # (batch, 1, seq_k)
_Q4, _K4 = _t(1, 4, 3, 8), _t(1, 2, 3, 8)
_DOORS = {
    "attend": lambda: attnlib.attend(_X, _X, _X, causal=True),
    "attend numpy": lambda: attnlib.attend(_X.numpy(), _X.numpy(), _X.numpy(), causal=True),
    "softmax": lambda: attnlib.softmax(_X, mask=_X > 0),
    "MultiHeadAttention": _with(lambda: MultiHeadAttention(16, 4), lambda m: m(_X, _X, _X, _PAD)),
    "FusedQKVAttention": _with(lambda: FusedQKVAttention(16, 4), lambda m: m(_X, causal=True)),
    "grouped_attend": lambda: grouped_attend(_Q4, _K4, _K4, causal=True, align="bottom_right"),
    "rotary_decode_step": _rotary_step(),
    "blockwise_attend": lambda: blockwise_attend(_X, _X, _X, causal=True, block_q=2, block_k=2),
    "TinyDecoder": _decoder_step(),
    "TinyDecoder window": _decoder_step(window=2),
    "TinyDecoder latent": _decoder_step(d_latent=4, d_rope=2),
    "generate": _with(
        lambda: TinyDecoder(11, 16, 4, max_len=8), lambda m: generate(m, torch.tensor([[1, 2]]), 3)
    ),
    "topk_mask": lambda: topk_mask(_t(5, 5), 2, causal=True),
    "Indexer": _with(lambda: Indexer(16), lambda m: m(_X)),
    "LatentAttention": _with(
        lambda: LatentAttention(16, 4, 4, d_rope=2), lambda m: m(_X, absorbed=True)
    ),
    "mha_forward": _with(
        lambda: torch.nn.MultiheadAttention(16, 4, batch_first=True),
        lambda m: mha_forward(m, _X, _X, _X),
    ),
    # lesson 17: choosing a token, the paged, quantised and sink caches, masks as functions
    "generate sampled": _with(
        lambda: TinyDecoder(11, 16, 4, max_len=8),
        lambda m: generate(
            m,
            torch.tensor([[1, 2]]),
            3,
            temperature=0.9,
            top_k=5,
            top_p=0.9,
            min_p=0.05,
            generator=torch.Generator().manual_seed(0),
        ),
    ),
    "sample_token": lambda: sample_token(_t(3, 11), temperature=0.7, top_k=4, top_p=0.8),
    "top_p_filter": lambda: top_p_filter(_t(3, 11), 0.8),
    "gather_pages": lambda: gather_pages(_t(6, 2, 4, 3), [5, 0, 3], 10),
    "PagedKVCache.append": _with(
        lambda: PagedKVCache(8, 4, 2, 8), lambda c: c.append(0, _t(2, 5, 8), _t(2, 5, 8))
    ),
    "QuantKVCache.append": _with(
        lambda: QuantKVCache(1, 2, d_k=8, bits=4, group=4),
        lambda c: c.append(_t(1, 2, 6, 8), _t(1, 2, 6, 8)),
    ),
    "SinkKVCache.append": _with(
        lambda: SinkKVCache(1, 2, 8, sinks=2, window=3),
        lambda c: c.append(_t(1, 2, 6, 8), _t(1, 2, 6, 8)),
    ),
    "quantize": lambda: quantize(_t(2, 6, 8), bits=4, axis=-2),
    "flex_attend": _with(
        lambda: sliding_window_mask_mod(2),
        lambda mod: flex_attend(_Q4, _Q4, _Q4, mask_mod=mod, block_q=2, block_k=2),
    ),
    "decode_cost": _with(lambda: TinyDecoder(11, 16, 4, max_len=8), lambda m: decode_cost(m, 8)),
    "time_decode_step": _with(
        lambda: TinyDecoder(11, 16, 4, max_len=8), lambda m: time_decode_step(m, 8, repeats=1)
    ),
}


@pytest.mark.parametrize("name", list(_DOORS))
def test_each_public_call_validates_at_one_door(doors, name):
    door = name.split()[0]
    assert doors(_DOORS[name]) == [door]


def test_a_rotary_decoding_step_validates_once_not_ten_times(doors):
    assert len(doors(_rotary_step())) == 1
    # the same pieces called one by one from outside: each validates at its own door
    cache = _filled_cache()
    q, k, v = _t(1, 4, 1, 8), _t(1, 2, 1, 8), _t(1, 2, 1, 8)

    def by_hand():
        positions = torch.arange(cache.length, cache.length + 1)
        k_all, v_all = cache.append(apply_rotary(k, positions), v)
        grouped_attend(apply_rotary(q, positions), k_all, v_all, causal=True, align="bottom_right")

    assert doors(by_hand) == ["apply_rotary", "KVCache.append", "apply_rotary", "grouped_attend"]


def test_trust_ends_with_the_call_even_when_its_body_raises():
    model = TinyDecoder(vocab_size=5, d_model=8, n_heads=2, max_len=4)
    with torch.no_grad():
        model.tok.weight[0] = float("nan")  # not a validation error: just to run a body
    with pytest.raises(IndexError):
        model(torch.tensor([[7]]))  # token id out of the vocabulary: torch raises in the body
    with pytest.raises(TypeError, match=r"attend: mask \(torch.Tensor, shape \(3, 3\), float32\)"):
        attnlib.attend(_t(3, 4), _t(3, 4), _t(3, 4), torch.ones(3, 3))


# ---------------------------------------------------------------------------------------
# (b) A bad argument gets the same clear error at every door.
# ---------------------------------------------------------------------------------------

_q3 = torch.zeros(2, 3, 4)
_x8 = torch.zeros(2, 3, 8)
_m8 = MultiHeadAttention(8, 2)
_cache = KVCache(1, 2, 4, max_len=8)
_z = torch.zeros
BAD = [
    # (call, exception, message: door, argument, what was given)
    (lambda: attnlib.attend(_q3, _q3, _q3, torch.ones(3, 3)), TypeError,
     r"attend: mask \(torch.Tensor, shape \(3, 3\), float32\) must be boolean"),
    (lambda: attnlib.attend(_q3, _z(2, 3, 5), _q3), ValueError,
     r"attend: q has d_k=4 \(shape \(2, 3, 4\)\) but k has d_k=5 \(shape \(2, 3, 5\)\)"),
    (lambda: attnlib.attend(_q3.long(), _q3, _q3), TypeError,
     r"attend: q \(torch.Tensor, shape \(2, 3, 4\), int64\) must have a floating-point dtype"),
    (lambda: attnlib.attend(_q3, _q3, _q3, causal=True, align="left"), ValueError,
     r"attend: align must be 'top_left' or 'bottom_right', got 'left'"),
    (lambda: attnlib.softmax(_q3, mask=torch.ones(2, 3, 4)), TypeError,
     r"softmax: mask \(torch.Tensor, shape \(2, 3, 4\), float32\) must be boolean"),
    (lambda: attnlib.causal_mask(-1), ValueError, r"causal_mask: seq_q must be >= 0, got -1"),
    (lambda: _m8(_z(3, 8), _x8, _x8), ValueError,
     r"MultiHeadAttention: query \(torch.Tensor, shape \(3, 8\), float32\) must have 3 dims"),
    (lambda: _m8(_x8.double(), _x8, _x8), TypeError,
     r"MultiHeadAttention: query \(torch.Tensor, shape \(2, 3, 8\), float64\) has dtype"),
    (lambda: _m8(_x8, _x8, _x8, torch.ones(3, 3)), TypeError,
     r"MultiHeadAttention: mask \(torch.Tensor, shape \(3, 3\), float32\) must be boolean"),
    (lambda: _m8(_x8, _x8, _x8, torch.ones(5, 3, dtype=torch.bool)), ValueError,
     r"MultiHeadAttention: mask of shape \(5, 3\) does not fit weights of shape"),
    (lambda: FusedQKVAttention(8, 2)(_z(2, 3, 4)), ValueError,
     r"FusedQKVAttention: query \(torch.Tensor, shape \(2, 3, 4\), float32\) has width 4"),
    (lambda: grouped_attend(_z(1, 4, 2, 4), _z(1, 3, 2, 4), _z(1, 3, 2, 4)), ValueError,
     r"grouped_attend: q has n_heads=4 \(shape \(1, 4, 2, 4\)\), k has n_kv_heads=3"),
    (lambda: grouped_attend(_z(1, 4, 2, 4), _z(1, 2, 2, 5), _z(1, 2, 2, 4)), ValueError,
     r"grouped_attend: q has d_k=4 \(shape \(1, 4, 2, 4\)\) but k has d_k=5"),
    (lambda: grouped_attend(_z(1, 4, 2, 4), _z(1, 2, 2, 4), _z(1, 2, 2, 4), _z(2, 2)),
     TypeError, r"grouped_attend: mask \(torch.Tensor, shape \(2, 2\), float32\) must be boolean"),
    (lambda: rotary_decode_step(_z(1, 2, 1, 4), _z(1, 2, 1, 4), _z(1, 2, 1, 4), "c"), TypeError,
     r"rotary_decode_step: cache must be a KVCache, got str"),
    (lambda: rotary_decode_step(_z(1, 2, 1, 3), _z(1, 2, 1, 3), _z(1, 2, 1, 3), KVCache(1, 2, 3)),
     ValueError, r"rotary_decode_step: q_new and k_new have odd d_k=3 \(shapes \(1, 2, 1, 3\)"),
    (lambda: rotary_decode_step(_z(1, 2, 1, 4), _z(1, 1, 1, 4), _z(1, 1, 1, 4), _cache),
     ValueError, r"rotary_decode_step: k_new has shape \(1, 1, 1, 4\), expected \(batch, "
     r"n_kv_heads, seq_new, d_k\) = \(1, 2, seq_new, 4\)"),
    (lambda: rotary_decode_step(_z(1, 2, 1, 4), _z(1, 2, 1, 4), _z(1, 2, 1, 4), _cache, base=0),
     ValueError, r"rotary_decode_step: base must be finite and > 0, got 0"),
    (lambda: _cache.append(_z(1, 2, 1, 5), _z(1, 2, 1, 4)), ValueError,
     r"KVCache.append: k has shape \(1, 2, 1, 5\), expected"),
    (lambda: RollingKVCache(1, 2, 4, window=3).append(_z(1, 2, 1, 4).double(),
                                                      _z(1, 2, 1, 4).double()),
     TypeError, r"RollingKVCache.append: k has dtype torch.float64, the cache holds torch.float32"),
    (lambda: LatentCache(1, 4).append(_z(1, 2, 5), _z(1, 2, 0)), ValueError,
     r"LatentCache.append: c has shape \(1, 2, 5\), expected"),
    (lambda: blockwise_attend(_q3, _q3, _q3, block_q=0), ValueError,
     r"blockwise_attend: block_q must be >= 1, got 0"),
    (lambda: blockwise_attend(_q3, _q3, _q3, causal=True, align="x"), ValueError,
     r"blockwise_attend: align must be 'top_left' or 'bottom_right', got 'x'"),
    (lambda: apply_rotary(_z(2, 3, 5)), ValueError,
     r"apply_rotary: x \(torch.Tensor, shape \(2, 3, 5\), float32\) has odd d_k=5"),
    (lambda: apply_rotary(_q3, [0, 1]), ValueError,
     r"apply_rotary: 2 positions for x \(torch.Tensor, shape \(2, 3, 4\), float32\) \(seq=3\)"),
    (lambda: split_heads(_z(2, 3, 5), 2), ValueError,
     r"split_heads: d_model=5 \(x of shape \(2, 3, 5\)\) is not divisible by n_heads=2"),
    (lambda: merge_heads(_q3), ValueError,
     r"merge_heads: x \(torch.Tensor, shape \(2, 3, 4\), float32\) must have 4 dims"),
    (lambda: TinyDecoder(7, 8, 2, max_len=8)(_z(1, 3)), TypeError,
     r"TinyDecoder: tokens must be a LongTensor \(batch, seq\), got torch.float32"),
    (lambda: TinyDecoder(7, 8, 2, n_layers=1)(_z(1, 2, dtype=torch.long), [None, None]),
     ValueError, r"TinyDecoder: 2 caches for 1 layers"),
    (lambda: TinyDecoder(7, 8, 2, n_layers=1)(_z(1, 2, dtype=torch.long), [KVCache(1, 2, 3)]),
     ValueError, r"TinyDecoder: caches\[0\] holds \(batch, n_kv_heads, d_k, dtype\) = "
     r"\(1, 2, 3, torch.float32\), this layer needs \(1, 2, 4, torch.float32\)"),
    (lambda: CausalSelfAttention(8, 2)(_z(1, 3, 4)), ValueError,
     r"CausalSelfAttention: x \(torch.Tensor, shape \(1, 3, 4\), float32\) must be "
     r"\(batch, seq_new, d_model=8\)"),
    (lambda: generate(TinyDecoder(7, 8, 2, max_len=6), torch.tensor([[1, 2]]), 9), ValueError,
     r"generate: position 9 exceeds max_len=6"),
    (lambda: LatentAttention(8, 2, 4)(_z(3, 8)), ValueError,
     r"LatentAttention: x \(torch.Tensor, shape \(3, 8\), float32\) must have 3 dims"),
    (lambda: absorbed_scores(_z(1, 2, 3, 4), _z(1, 3, 5), _z(2, 4, 6)), ValueError,
     r"absorbed_scores: W_uk \(torch.Tensor, shape \(2, 4, 6\), float32\) should have shape"),
    (lambda: topk_mask(_z(3, 3), 1, torch.ones(3, 3)), TypeError,
     r"topk_mask: mask \(torch.Tensor, shape \(3, 3\), float32\) must be boolean"),
    (lambda: topk_mask(torch.full((3, 3), float("nan")), 1), ValueError,
     r"topk_mask: index_scores \(torch.Tensor, shape \(3, 3\), float32\) has nan or inf"),
    (lambda: sliding_window_mask(3, window=0), ValueError,
     r"sliding_window_mask: window must be >= 1, got 0"),
    (lambda: Indexer(8)(_z(3, 8)), ValueError,
     r"Indexer: x_q \(torch.Tensor, shape \(3, 8\), float32\) must have 3 dims"),
    (lambda: indexer_scores(_z(1, 2, 3, 4), _z(1, 3, 5), _z(1, 3, 2)), ValueError,
     r"indexer_scores: q_idx has d_index=4 \(shape \(1, 2, 3, 4\)\) but k_idx has 5"),
    (lambda: mha_forward(torch.nn.MultiheadAttention(8, 2, batch_first=True), _x8, _x8, _x8,
                         attn_mask=_z(3, 3)),
     TypeError, r"mha_forward: attn_mask \(torch.Tensor, shape \(3, 3\), float32\) must be "
     r"boolean \(True = blocked\)"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "message"), BAD, ids=[m[:40] for _, _, m in BAD])
def test_a_bad_argument_gets_a_clear_error_at_every_door(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(("call", "error", "message"), BAD[:6], ids=[m[:30] for _, _, m in BAD[:6]])
def test_the_error_is_the_same_after_a_validated_call_has_run(call, error, message):
    _rotary_step()()  # a call whose body trusts its inner calls
    with pytest.raises(error, match=re.compile(message)):
        call()
