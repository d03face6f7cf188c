"""Exercises of lessons 10–12: a cached decoding step, the running-max update, rotary.

* ``decode_step(q_new, k_new, v_new, k_cache, v_cache) -> (out, k_all, v_all)`` —
  lesson 10: append the new keys and values to the cache, let the new queries attend;
* ``online_softmax_update(m, l, acc, s_block, v_block) -> (m_new, l_new, acc_new)`` —
  lesson 11: fold one block of scores into the running softmax;
* ``rotary_attend(q, k, v, positions) -> (out, weights)`` — lesson 12: rotate queries and
  keys by their positions, then attend.

Inputs are numpy float64 arrays with non-square shapes (seq_q ≠ seq_k ≠ d_k ≠ d_v).
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._core import Case, Exercise, Misconception, register
from attnlib.core import attend as _attend
from attnlib.masks import causal_mask as _causal_mask

# ----------------------------------------------------------------------------------------
# decode_step — lesson 10
# ----------------------------------------------------------------------------------------


def _decode_cases(seed: int = 1010) -> list[Case]:
    rng = np.random.default_rng(seed)
    n = rng.standard_normal

    def case(label, lead, seq_past, seq_new, d_k=6, d_v=4):
        return Case(
            label,
            (
                n((*lead, seq_new, d_k)),
                n((*lead, seq_new, d_k)),
                n((*lead, seq_new, d_v)),
                n((*lead, seq_past, d_k)),
                n((*lead, seq_past, d_v)),
            ),
        )

    return [
        case("one new token, 5 cached, d_k=6, d_v=4", (), 5, 1),
        case("3 new tokens at once, 4 cached", (), 4, 3),
        case("batch 2 x heads 3, one new token, 6 cached", (2, 3), 6, 1, d_k=8, d_v=5),
        case("batch 2, 2 new tokens, 3 cached", (2,), 3, 2),
        case("empty cache: a prompt of 4 tokens (prefill)", (), 0, 4),
    ]


def _decode_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(2020)
    n = rng.standard_normal
    extra = [
        Case(
            "hidden: batch 3, 4 new tokens, 9 cached, d_k=10, d_v=3",
            (n((3, 4, 10)), n((3, 4, 10)), n((3, 4, 3)), n((3, 9, 10)), n((3, 9, 3))),
        )
    ]
    return [Case("hidden: " + c.label, c.args) for c in _decode_cases(2021)] + extra


def _np_attend(q, k, v, mask=None):
    """Plain numpy attention; zero keys (or a fully masked row) gives output 0."""
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., seq_q, seq_k)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    if s.shape[-1] == 0:
        return np.zeros((*s.shape[:-1], v.shape[-1]))
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    tot = e.sum(axis=-1, keepdims=True)
    return (e / np.where(tot > 0, tot, 1.0)) @ v  # (..., seq_q, d_v)


def _decode_reference(q_new, k_new, v_new, k_cache, v_cache):
    k_all = np.concatenate([k_cache, k_new], axis=-2)  # (..., seq_past + seq_new, d_k)
    v_all = np.concatenate([v_cache, v_new], axis=-2)  # (..., seq_past + seq_new, d_v)
    mask = _causal_mask(q_new.shape[-2], k_all.shape[-2], align="bottom_right")
    out, _ = _attend(q_new, k_all, v_all, mask)  # (..., seq_new, d_v)
    return out, k_all, v_all


def _decode_variant(*, append=True, include_new=True, mask="bottom_right", raise_empty=False):
    def fn(q_new, k_new, v_new, k_cache, v_cache):
        k_all = np.concatenate([k_cache, k_new], axis=-2)
        v_all = np.concatenate([v_cache, v_new], axis=-2)
        k_att, v_att = (k_all, v_all) if include_new else (k_cache, v_cache)
        if raise_empty and k_att.shape[-2] == 0:
            raise ValueError("zero-size array to reduction operation maximum")
        seq_new, seq_k = q_new.shape[-2], k_att.shape[-2]
        m = None if mask is None else _causal_mask(seq_new, seq_k, align=mask)
        out = _np_attend(q_new, k_att, v_att, m)
        return (out, k_all, v_all) if append else (out, k_cache, v_cache)

    return fn


register(
    Exercise(
        name="decode_step",
        summary="decode_step(q_new, k_new, v_new, k_cache, v_cache) -> (out, k_all, v_all)",
        reference=_decode_reference,
        make_cases=_decode_cases,
        make_hidden_cases=_decode_hidden_cases,
        misconceptions=(
            Misconception(
                "cache-not-appended",
                "The cache you return is the old one: the new keys and values are used for "
                "this step but not stored, so the next step will have forgotten this token. "
                "Return the concatenation of the cache and the new rows (along axis -2).",
                (_decode_variant(append=False),),
            ),
            Misconception(
                "new-key-not-included",
                "The new queries attend only to the cached keys, not to the new keys. A token "
                "may (and usually does) attend to itself: append first, then attend over "
                "everything, cache and new rows together.",
                (
                    _decode_variant(include_new=False),
                    _decode_variant(include_new=False, raise_empty=True),
                ),
            ),
            Misconception(
                "mask-blocks-past",
                "The causal mask is aligned top-left, so new query i sees only keys 0..i and "
                "loses most of the cache. The new queries are the last positions: query i "
                "sits at position seq_past + i and sees keys 0..seq_past + i — "
                "causal_mask(seq_new, seq_k, align='bottom_right').",
                (_decode_variant(mask="top_left"),),
            ),
            Misconception(
                "no-causal-mask-in-chunk",
                "With several new tokens at once, each must not see the new tokens after it. "
                "One new token may see everything; a chunk needs the bottom-right causal mask.",
                (_decode_variant(mask=None),),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# online_softmax_update — lesson 11
# ----------------------------------------------------------------------------------------


def _online_cases(seed: int = 1111) -> list[Case]:
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    seq_q, bk, d_v = 3, 5, 4

    def start():
        return np.full((seq_q, 1), -np.inf), np.zeros((seq_q, 1)), np.zeros((seq_q, d_v))

    # a state after one earlier block (small scores), then a block with larger scores
    m_prev = np.array([[0.5], [1.0], [-0.2]])
    l_prev = np.array([[2.0], [1.5], [3.1]])
    acc_prev = n((seq_q, d_v))
    masked = n((seq_q, bk))
    masked[0, 2:] = -np.inf  # some keys blocked (a causal tile)
    big_m = np.array([[900.0], [950.0], [1000.0]])
    return [
        Case("first block (m = -inf, l = 0, acc = 0)", (*start(), n((seq_q, bk)), n((bk, d_v)))),
        Case(
            "a later block whose scores raise the max",
            (m_prev, l_prev, acc_prev, 3.0 + n((seq_q, bk)), n((bk, d_v))),
        ),
        Case(
            "a later block with lower scores (max unchanged)",
            (m_prev + 5.0, l_prev, acc_prev, n((seq_q, bk)) - 2.0, n((bk, d_v))),
        ),
        Case(
            "batch 2: block with some keys masked (-inf)",
            (
                m_prev[None].repeat(2, 0),
                l_prev[None].repeat(2, 0),
                n((2, seq_q, d_v)),
                np.stack([masked, 2.0 + n((seq_q, bk))]),
                n((2, bk, d_v)),
            ),
        ),
        Case(
            "large scores (around 1000)",
            (big_m, l_prev, acc_prev, 1000.0 + 10 * n((seq_q, bk)), n((bk, d_v))),
        ),
    ]


def _online_variant(*, rescale_sum=True, rescale_acc=True, update_max=True, sign=1.0):
    def fn(m, l, acc, s_block, v_block):
        m_new = np.maximum(m, s_block.max(axis=-1, keepdims=True)) if update_max else m
        with np.errstate(all="ignore"):
            m_safe = np.where(np.isfinite(m_new), m_new, 0.0)
            alpha = np.exp(sign * (m - m_safe))
            p = np.exp(s_block - m_safe)
            l_new = (l * alpha if rescale_sum else l) + p.sum(axis=-1, keepdims=True)
            acc_new = (acc * alpha if rescale_acc else acc) + p @ v_block
        return m_new, l_new, acc_new

    return fn


def _online_reference(m, l, acc, s_block, v_block):
    from attnlib.blockwise import online_softmax_update

    return online_softmax_update(m, l, acc, s_block, v_block)


register(
    Exercise(
        name="online_softmax_update",
        summary="online_softmax_update(m, l, acc, s_block, v_block) -> (m_new, l_new, acc_new)",
        reference=_online_reference,
        make_cases=_online_cases,
        make_hidden_cases=lambda: [Case("hidden: " + c.label, c.args) for c in _online_cases(2222)],
        rtol=1e-7,
        atol=1e-9,
        forbidden=("attnlib.blockwise.online_softmax_update",),
        misconceptions=(
            Misconception(
                "sum-not-rescaled",
                "The running sum l keeps terms exp(score - m_old) next to new terms "
                "exp(score - m_new). When the max rises, multiply the old sum by "
                "exp(m_old - m_new) before adding the block's sum.",
                (_online_variant(rescale_sum=False),),
            ),
            Misconception(
                "acc-not-rescaled",
                "The running numerator acc is not rescaled when the max rises: multiply it "
                "by exp(m_old - m_new), exactly like the running sum.",
                (_online_variant(rescale_acc=False),),
            ),
            Misconception(
                "max-not-updated",
                "The running max m is never updated with the block's scores, so exp(score - m) "
                "can overflow (and is inf on the first block, where m = -inf). Take "
                "m_new = maximum(m, max of the block) and use m_new in the exponentials.",
                (_online_variant(update_max=False),),
            ),
            Misconception(
                "rescale-inverted",
                "The rescaling factor is upside down: it must be exp(m_old - m_new) <= 1, "
                "shrinking what was summed against the smaller old max.",
                (_online_variant(sign=-1.0),),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# rotary_attend — lesson 12
# ----------------------------------------------------------------------------------------


def _rotary_cases(seed: int = 1212) -> list[Case]:
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    return [
        Case(
            "4 tokens at positions 0..3, d_k=8, d_v=3",
            (n((4, 8)), n((4, 8)), n((4, 3)), np.arange(4)),
        ),
        Case(
            "5 tokens at positions [7, 2, 11, 3, 30], d_k=6, d_v=2",
            (n((5, 6)), n((5, 6)), n((5, 2)), np.array([7, 2, 11, 3, 30])),
        ),
        Case(
            "batch 2, 3 tokens at positions [10, 11, 12], d_k=8, d_v=3",
            (n((2, 3, 8)), n((2, 3, 8)), n((2, 3, 3)), np.array([10, 11, 12])),
        ),
        Case(
            "values with d_v == d_k (rotating them would run)",
            (n((4, 8)), n((4, 8)), n((4, 8)), np.array([0, 5, 1, 9])),
        ),
    ]


def _rotate(x, positions, *, sign=1.0, pairing="interleaved", freq_step=2):
    d_k = x.shape[-1]
    half = d_k // 2
    freq = 10000.0 ** (-freq_step * np.arange(half) / d_k)  # (d_k/2,)
    ang = sign * np.asarray(positions, dtype=np.float64)[:, None] * freq  # (seq, d_k/2)
    cos, sin = np.cos(ang), np.sin(ang)
    out = np.empty_like(x)
    if pairing == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
    else:  # the first half pairs with the second half
        x0, x1 = x[..., :half], x[..., half:]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:] = x0 * sin + x1 * cos
    return out


def _rotary_reference(q, k, v, positions):
    from attnlib.positions import apply_rotary

    return _attend(apply_rotary(q, positions), apply_rotary(k, positions), v)


def _rotary_variant(*, rotate_q=True, rotate_v=False, **kw):
    def fn(q, k, v, positions):
        q_r = _rotate(q, positions, **kw) if rotate_q else q
        k_r = _rotate(k, positions, **kw)
        v_r = _rotate(v, positions, **kw) if rotate_v and v.shape[-1] % 2 == 0 else v
        if rotate_v and v.shape[-1] % 2:
            raise ValueError("cannot rotate values with an odd d_v")
        return _attend(q_r, k_r, v_r)

    return fn


register(
    Exercise(
        name="rotary_attend",
        summary="rotary_attend(q, k, v, positions) -> (out, weights): RoPE on q and k",
        reference=_rotary_reference,
        make_cases=_rotary_cases,
        make_hidden_cases=lambda: (
            [Case("hidden: " + c.label, c.args) for c in _rotary_cases(2424)]
            + [
                Case(
                    "hidden: 7 tokens at positions 100..106, d_k=12, d_v=4",
                    tuple(np.random.default_rng(7).standard_normal(s) for s in ((7, 12),) * 2)
                    + (np.random.default_rng(8).standard_normal((7, 4)), np.arange(100, 107)),
                )
            ]
        ),
        forbidden=("attnlib.positions.apply_rotary",),
        misconceptions=(
            Misconception(
                "rotates-values",
                "The values are rotated too. Rotation carries position into the *comparison* "
                "of queries and keys; values are what gets handed over, and stay as they are.",
                (_rotary_variant(rotate_v=True),),
            ),
            Misconception(
                "wrong-pairing",
                "The dimensions are paired first-half-with-second-half. In this course plane i "
                "is dimensions (2i, 2i+1): x[..., 0::2] and x[..., 1::2].",
                (_rotary_variant(pairing="half"),),
            ),
            Misconception(
                "angle-sign",
                "The rotation goes the wrong way: (x0, x1) -> (x0·cos + x1·sin, "
                "-x0·sin + x1·cos). Use x0·cos - x1·sin for the first coordinate and "
                "x0·sin + x1·cos for the second.",
                (_rotary_variant(sign=-1.0),),
            ),
            Misconception(
                "wrong-frequencies",
                "Plane i turns at the wrong speed. Its angle is position · 10000^(-2i/d_k), "
                "i = 0 .. d_k/2 - 1.",
                (_rotary_variant(freq_step=1),),
            ),
            Misconception(
                "only-keys-rotated",
                "Only the keys are rotated. The score then depends on each key's absolute "
                "position; rotating both queries and keys is what leaves only the offset.",
                (_rotary_variant(rotate_q=False),),
            ),
        ),
    )
)
