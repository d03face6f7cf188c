"""Exercises of lessons 10–12: a cached decoding step, the running-max update, rotary.

* ``decode_step(q_new, k_new, v_new, k_cache, v_cache) -> (out, k_all, v_all)`` —
  lesson 10: append the new keys and values to the cache, let the new queries attend;
* ``online_softmax_update(m, l, acc, s_block, v_block) -> (m_new, l_new, acc_new)`` —
  lesson 11: fold one block of scores into the running softmax;
* ``rotary_attend(q, k, v, positions) -> (out, weights)`` — lesson 12: rotate queries and
  keys by their positions, then attend.

Inputs are numpy float64 arrays with non-square shapes (seq_q ≠ seq_k ≠ d_k ≠ d_v).

Each is worth two points, graded in two parts of one point (:func:`attnlib.checks.part`),
each in its own locked cell of the lesson:

* ``decode_step_cache`` (the returned cache ``k_all``, ``v_all``) and
  ``decode_step_output`` (the attention output ``out``);
* ``online_softmax_update_blocks`` (ordinary blocks: a first block, a rising and a steady
  maximum, masked keys, large scores) and ``online_softmax_update_masked_rows`` (tiles in
  which a row has seen only masked keys so far: it stays ``m = -inf, l = 0, acc = 0``
  with no NaN, and carries on normally when its first visible key arrives);
* ``rotary_attend_weights`` (the weights: queries and keys rotated by their positions; on
  values as wide as the keys, so that a function that also rotates the values runs) and
  ``rotary_attend_output`` (the output: those weights times the values, unrotated).

Diagnosis by inference (see :mod:`attnlib.checks._core`):

* ``decode_step``: which cache comes back (the old one, the new rows first, the right
  concatenation), and which keys each new query sees — with all scores 0 and the values
  an identity, each output row *is* the query's weights over cache and new keys, so a
  mask's diagonal (top-left, bottom-right, off by one either way) is read off directly;
  with random queries, the multiplier on the dot products (1/√d_k or something else);
* ``online_softmax_update``: whether the running max is updated (per row, keeping the
  old max), and — from the same block folded into two different running states — the
  factor on what was summed before (exp(m_old - m_new), 1 or its inverse) and the one on
  the block's own terms (1, or exp(m_new - m_old) for exponentials against a stale max);
* ``rotary_attend``: whether the output blends the values or rotated values, and which
  rotation of queries and keys (both, keys only, none; direction; pairing of dimensions;
  frequencies 10000^(-k·i/d_k) for k = 2, 1, 4, -2; a first coordinate overwritten before
  the second is computed) reproduces the weights.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._core import Case, Exercise, Finding, Misconception, part, register
from attnlib.checks.measure import close, tolerances
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


def _np_attend(q, k, v, mask=None, scale=None):
    """Plain numpy attention; zero keys (or a fully masked row) gives output 0."""
    c = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * c  # (..., seq_q, seq_k)
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


def _decode_variant(
    *,
    append=True,
    include_new=True,
    mask="bottom_right",
    raise_empty=False,
    order="cache-first",
    axis=-2,
    offset=0,
    scale="sqrt_d_k",
):
    """A decoding step with the given choices; the defaults give the correct one.

    ``scale``: what the scores are multiplied by — "sqrt_d_k" (1/√d_k, right), "none"
    (1) or "sqrt_d_v" (1/√d_v).

    ``axis`` is the axis the cache grows along (0 is right for 2-D inputs only);
    ``offset`` moves the bottom-right mask's diagonal: new query i sees keys
    0 .. seq_past + i + offset (-1: not itself, +1: one token of its future).
    """

    def fn(q_new, k_new, v_new, k_cache, v_cache):
        parts = ([k_cache, k_new], [v_cache, v_new])
        if order == "new-first":
            parts = ([k_new, k_cache], [v_new, v_cache])
        k_all = np.concatenate(parts[0], axis=axis)
        v_all = np.concatenate(parts[1], axis=axis)
        k_att, v_att = (k_all, v_all) if include_new else (k_cache, v_cache)
        if raise_empty and k_att.shape[-2] == 0:
            raise ValueError("zero-size array to reduction operation maximum")
        seq_new, seq_k = q_new.shape[-2], k_att.shape[-2]
        m = None if mask is None else _causal_mask(seq_new, seq_k, align=mask)
        if mask == "bottom_right" and offset:
            last = seq_k - seq_new + np.arange(seq_new)[:, None] + offset  # (seq_new, 1)
            m = np.arange(seq_k)[None, :] <= last  # (seq_new, seq_k)
        c = {"sqrt_d_k": None, "none": 1.0, "sqrt_d_v": 1 / np.sqrt(v_new.shape[-1])}[scale]
        out = _np_attend(q_new, k_att, v_att, m, c)
        return (out, k_all, v_all) if append else (out, k_cache, v_cache)

    return fn


def _infer_decode(learner) -> list[Finding]:
    found = _decode_2d_findings(learner)
    ids = {f.id for f in found}
    if "cache-not-appended" in ids or "cache-wrong-order" in ids:
        return found + _decode_scale_findings(learner)
    return found + _decode_batch_findings(learner) + _decode_scale_findings(learner)


def _decode_scale_findings(learner) -> list[Finding]:
    """What the scores were multiplied by: random queries, values that name their key (key
    j carries e_j), so that each output row is the query's weights, whatever order the
    keys were put in; log weight = multiplier · q·k + a constant per row."""
    seq_past, seq_new, d_k = 4, 3, 5
    seq_k = seq_past + seq_new
    d_v = seq_k + 1  # one spare column: d_v differs from d_k and from seq_k
    rng = np.random.default_rng(14)
    q = rng.standard_normal((seq_new, d_k))
    k_cache, k_new = rng.standard_normal((seq_past, d_k)), rng.standard_normal((seq_new, d_k))
    eye = np.eye(seq_k, d_v)
    o = learner(q, k_new, eye[seq_past:], k_cache, eye[:seq_past])
    if not o.ok or o.arity != 3 or o.parts[0] is None or o.parts[0].shape != (seq_new, d_v):
        return []
    out = o.parts[0]
    if not np.isfinite(out).all() or not close(out[:, seq_k:], np.zeros((seq_new, 1))):
        return []
    raw = q @ np.concatenate([k_cache, k_new]).T  # (seq_new, seq_k): unscaled dot products
    fits = []
    for i in range(seq_new):
        seen = out[i, :seq_k] > 1e-12
        if seen.sum() < 2 or not close(out[i, :seq_k].sum(), 1.0, rel=1e-6):
            continue
        x, y = raw[i, seen], np.log(out[i, :seq_k][seen])
        x, y = x - x.mean(), y - y.mean()
        c = float((x * y).sum() / (x * x).sum())
        if not close(c * x, y, rel=1e-4, abs_=1e-6):
            return []  # not one multiplier on the dot products: nothing to say
        fits.append(c)
    if not fits or not close(np.array(fits), np.full(len(fits), fits[0]), rel=1e-4):
        return []
    c = fits[0]
    if close(c, 1 / np.sqrt(d_k), rel=1e-4):
        return []
    named = {
        "1 (no scaling)": 1.0,
        f"1/√{d_v} = 1/√d_v": 1 / np.sqrt(d_v),
        f"1/{d_k} = 1/d_k": 1 / d_k,
        f"1/√{seq_k} = 1/√seq_k": 1 / np.sqrt(seq_k),
    }
    what = [name for name, value in named.items() if close(c, value, rel=1e-4)]
    return [
        Finding(
            "decode-scale-wrong",
            f"the scores are multiplied by {c:.3f}"
            + (f" = {what[0]}" if what else "")
            + f"; with d_k = {d_k} (d_v = {d_v}) they must be multiplied by "
            f"1/√{d_k} = {1 / np.sqrt(d_k):.3f}.",
        )
    ]


def _decode_2d_findings(learner) -> list[Finding]:
    seq_past, seq_new, d_k = 4, 3, 5
    d_v = seq_past + seq_new
    rng = np.random.default_rng(10)
    eye = np.eye(d_v)  # values: key j carries e_j, so an output row is the weights
    q_new = np.zeros((seq_new, d_k))  # every score 0: weights uniform over what is seen
    k_cache, k_new = rng.standard_normal((seq_past, d_k)), rng.standard_normal((seq_new, d_k))
    v_cache, v_new = eye[:seq_past], eye[seq_past:]
    o = learner(q_new, k_new, v_new, k_cache, v_cache)
    if not o.ok or o.arity != 3 or any(p is None for p in o.parts):
        return []
    out, k_all, v_all = o.parts
    found = []
    new_first = False
    for name, got, cache, new in (("k", k_all, k_cache, k_new), ("v", v_all, v_cache, v_new)):
        if got.shape == cache.shape and close(got, cache):
            found.append(
                Finding(
                    "cache-not-appended",
                    f"the {name}_all you return is the old cache, shape {cache.shape}: the "
                    f"{seq_new} new rows were not added.",
                )
            )
        elif close(got, np.concatenate([new, cache])):
            new_first = True
            found.append(
                Finding(
                    "cache-wrong-order",
                    f"the {name}_all you return has the {seq_new} new rows first and the "
                    f"{seq_past} cached rows after them.",
                )
            )
    if new_first or out.shape != (seq_new, d_v) or not np.isfinite(out).all():
        return found
    seen = out > 1e-12
    if not seen.any(axis=-1).all():
        return found  # a query that sees nothing is no attention pattern we know
    uniform = [np.full(int(r.sum()), 1 / max(int(r.sum()), 1)) for r in seen]
    if not all(close(out[i][seen[i]], uniform[i]) for i in range(seq_new)):
        return found
    expect = np.arange(d_v)[None, :] <= seq_past + np.arange(seq_new)[:, None]
    sets = [np.flatnonzero(r).tolist() for r in seen]
    if np.array_equal(seen, np.tril(np.ones((seq_new, d_v), dtype=bool))):
        found.append(
            Finding(
                "mask-blocks-past",
                f"with {seq_past} cached keys, new query i sees keys 0..i only ({sets}); it "
                f"sits at position {seq_past} + i.",
            )
        )
    elif not seen[:, seq_past:].any():
        found.append(
            Finding(
                "new-key-not-included",
                f"with {seq_past} cached keys and {seq_new} new ones, the new queries see "
                f"keys {sets} only (positions 0..{seq_past - 1} are the cache).",
            )
        )
    elif seen.all() and not expect.all():
        found.append(
            Finding(
                "no-causal-mask-in-chunk",
                f"each of {seq_new} new queries sees all {d_v} keys, including the new tokens "
                "after it.",
            )
        )
    elif not np.array_equal(seen, expect):
        # a causal mask with its diagonal in the wrong place: query i sees keys 0 .. i + o
        last = [max(r) if r == list(range(len(r))) else None for r in sets]
        offsets = {last[i] - i for i in range(seq_new) if last[i] is not None and last[i] < d_v - 1}
        if None not in last and len(offsets) == 1:
            o = offsets.pop()
            found.append(
                Finding(
                    "mask-wrong-offset",
                    f"with {seq_past} cached keys, new query i sees keys 0..i + {o} ({sets}); "
                    f"it sits at position {seq_past} + i and must see keys 0..i + {seq_past}, "
                    "itself included"
                    + (" — one key short: its own" if o == seq_past - 1 else "")
                    + (" — one key too many: the next token's" if o == seq_past + 1 else "")
                    + ".",
                )
            )
    return found


def _decode_batch_findings(learner) -> list[Finding]:
    """A batch of one sequence (2 cached tokens, 2 new ones), shape (1, seq, d): along
    which axis does the cache grow? (Along axis 0 the result still runs here.)"""
    rng = np.random.default_rng(11)
    q, kn, vn, kc, vc = (rng.standard_normal((1, 2, d)) for d in (5, 5, 3, 5, 3))
    o = learner(q, kn, vn, kc, vc)
    if not o.ok or o.arity != 3 or any(p is None for p in o.parts):
        return []
    k_all = o.parts[1]
    if k_all.shape == (2, 2, 5) and close(k_all, np.concatenate([kc, kn], axis=0)):
        return [
            Finding(
                "cache-wrong-axis",
                "for a batch of one sequence (shape (1, seq, d)) your k_all has shape "
                "(2, 2, 5): the new rows were stacked along axis 0, the batch axis.",
            )
        ]
    return []


register(
    Exercise(
        name="decode_step",
        summary="decode_step(q_new, k_new, v_new, k_cache, v_cache) -> (out, k_all, v_all)",
        reference=_decode_reference,
        make_cases=_decode_cases,
        make_hidden_cases=_decode_hidden_cases,
        infer=_infer_decode,
        build=_decode_variant,
        exclusive=(
            # attending to the cache only: the new keys' mask cannot be seen
            frozenset({"new-key-not-included", "mask-blocks-past"}),
            frozenset({"new-key-not-included", "no-causal-mask-in-chunk"}),
            # only a bottom-right mask has a diagonal to misplace
            frozenset({"mask-wrong-offset", "mask-blocks-past"}),
            frozenset({"mask-wrong-offset", "no-causal-mask-in-chunk"}),
            frozenset({"mask-wrong-offset", "new-key-not-included"}),
            frozenset({"mask-wrong-offset", "cache-wrong-order"}),
            # keys in the wrong order: which positions a query sees is not the question
            frozenset({"cache-wrong-order", "new-key-not-included"}),
            frozenset({"cache-wrong-order", "mask-blocks-past"}),
            frozenset({"cache-wrong-order", "no-causal-mask-in-chunk"}),
            frozenset({"cache-wrong-order", "cache-not-appended"}),
            # an old cache returned grows along no axis at all; new rows first, we stop
            frozenset({"cache-wrong-axis", "cache-not-appended"}),
            frozenset({"cache-wrong-axis", "cache-wrong-order"}),
        ),
        misconceptions=(
            Misconception(
                "cache-not-appended",
                "The cache you return is the old one: the new keys and values are used for "
                "this step but not stored, so the next step will have forgotten this token. "
                "Return the concatenation of the cache and the new rows (along axis -2).",
                (_decode_variant(append=False),),
                {"append": False},
            ),
            Misconception(
                "cache-wrong-order",
                "The new rows are put in front of the cache. Positions grow with time: the "
                "cache holds positions 0..seq_past-1 and the new tokens come after them — "
                "np.concatenate([k_cache, k_new], axis=-2).",
                (_decode_variant(order="new-first"),),
                {"order": "new-first"},
            ),
            Misconception(
                "cache-wrong-axis",
                "The cache grows along axis 0. For a batch (batch, seq, d) — or (batch, "
                "n_heads, seq, d) — that stacks sequences, not positions: concatenate along "
                "the sequence axis, axis=-2.",
                (_decode_variant(axis=0),),
                {"axis": 0},
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
                {"include_new": False},
            ),
            Misconception(
                "mask-blocks-past",
                "The causal mask is aligned top-left, so new query i sees only keys 0..i and "
                "loses most of the cache. The new queries are the last positions: query i "
                "sits at position seq_past + i and sees keys 0..seq_past + i — "
                "causal_mask(seq_new, seq_k, align='bottom_right').",
                (_decode_variant(mask="top_left"),),
                {"mask": "top_left"},
            ),
            Misconception(
                "mask-wrong-offset",
                "The causal mask's diagonal is in the wrong place. New query i sits at "
                "position seq_past + i, so it sees keys 0 .. seq_past + i — itself included, "
                "no later token. Off by one either way (`<` instead of `<=`, or a diagonal "
                "offset of seq_past ± 1, or seq_new instead of seq_past) hides the token's "
                "own key or shows it the next one: "
                "causal_mask(seq_new, seq_past + seq_new, align='bottom_right').",
                (_decode_variant(offset=-1), _decode_variant(offset=1)),
                {"offset": -1},
            ),
            Misconception(
                "decode-scale-wrong",
                "The scores are scaled by the wrong factor. Scaled dot-product attention "
                "divides q · k by √d_k, the width of the queries and keys (q_new.shape[-1]) "
                "— not by √d_v, not by d_k, and not left unscaled. attnlib.attend does it "
                "for you.",
                (_decode_variant(scale="none"), _decode_variant(scale="sqrt_d_v")),
                {"scale": "none"},
            ),
            Misconception(
                "no-causal-mask-in-chunk",
                "With several new tokens at once, each must not see the new tokens after it. "
                "One new token may see everything; a chunk needs the bottom-right causal mask.",
                (_decode_variant(mask=None),),
                {"mask": None},
            ),
        ),
    )
)


def _register_parts(whole: str, specs) -> None:
    from attnlib.checks._core import get_exercise

    for name, summary, kwargs in specs:
        register(part(get_exercise(whole), name, summary, **kwargs))


_register_parts(
    "decode_step",
    [
        (
            "decode_step_cache",
            "the updated cache: k_all and v_all, the cache with the new rows after it",
            {
                "outputs": (1, 2),
                "ids": ("cache-not-appended", "cache-wrong-order", "cache-wrong-axis"),
            },
        ),
        (
            "decode_step_output",
            "the output: the new queries attend over the cached and the new keys, "
            "bottom-right causal",
            {
                "outputs": (0,),
                "ids": (
                    "cache-wrong-order",
                    "cache-wrong-axis",
                    "new-key-not-included",
                    "mask-blocks-past",
                    "mask-wrong-offset",
                    "decode-scale-wrong",
                    "no-causal-mask-in-chunk",
                ),
            },
        ),
    ],
)


# ----------------------------------------------------------------------------------------
# online_softmax_update — lesson 11
# ----------------------------------------------------------------------------------------


def _online_cases(seed: int = 1111) -> list[Case]:
    """Every case: the ordinary blocks, then the rows fully masked so far."""
    return _online_block_cases(seed) + _online_masked_cases(seed + 1)


def _online_block_cases(seed: int = 1111) -> list[Case]:
    """Ordinary blocks: every row has seen (or now sees) at least one visible key."""
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


def _online_masked_cases(seed: int = 1112) -> list[Case]:
    """Causal tiles in which a row has seen only masked keys so far (m = -inf, l = 0,
    acc = 0): it must stay so, with no NaN, and carry on when a visible key arrives. The
    other rows of the same tiles are ordinary (a first block, a rising maximum)."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    seq_q, bk, d_v = 3, 5, 4
    inf = np.inf
    # after one earlier block: rows 0 and 2 have seen keys, row 1 none yet
    m_prev = np.array([[0.5], [-inf], [-0.2]])
    l_prev = np.array([[2.0], [0.0], [3.1]])
    acc_prev = n((seq_q, d_v))
    acc_prev[1] = 0.0

    def block(masked_rows, shift=0.0):
        s = shift + n((seq_q, bk))
        s[list(masked_rows)] = -inf
        return s

    # rows 0 and 2 keep their maximum (lower scores); row 1 sees its first three keys
    first_sight = n((seq_q, bk)) - 6.0
    first_sight[1] += 6.0
    first_sight[1, :2] = -inf
    batch_m = np.stack([m_prev, np.full((seq_q, 1), -inf)])  # (2, seq_q, 1)
    batch_l = np.stack([l_prev, np.zeros((seq_q, 1))])
    batch_acc = np.stack([acc_prev, np.zeros((seq_q, d_v))])
    batch_s = np.stack([block([1], 2.0), block([0, 2])])  # (2, seq_q, bk)
    return [
        Case(
            "first block, query 1 fully masked so far (m = -inf and every score -inf)",
            (np.full((seq_q, 1), -inf), np.zeros((seq_q, 1)), np.zeros((seq_q, d_v)))
            + (block([1]), n((bk, d_v))),
        ),
        Case(
            "a later block: query 1 still sees no key, the others' maximum rises",
            (m_prev, l_prev, acc_prev, block([1], 3.0), n((bk, d_v))),
        ),
        Case(
            "a later block: query 1 sees its first keys (m = -inf before)",
            (m_prev, l_prev, acc_prev, first_sight, n((bk, d_v))),
        ),
        Case(
            "batch 2: rows that have seen no key yet in both (one sentence not started at all)",
            (batch_m, batch_l, batch_acc, batch_s, n((2, bk, d_v))),
        ),
    ]


def _online_variant(
    *,
    rescale_sum=True,
    rescale_acc=True,
    update_max=True,
    sign=1.0,
    guard_empty=True,
    p_max="new",
):
    """The running-softmax update with the given choices; the defaults give the right one.

    ``update_max``: True, False (m kept), "block" (the block's max alone, the old max
    forgotten) or "global" (the largest score of the whole block, every row alike);
    ``sign=-1`` turns the rescaling factor upside down; ``guard_empty=False`` subtracts a
    max of -inf in a row that has seen only masked keys; ``p_max="old"`` takes the block's
    exponentials against the stale max m instead of m_new.
    """

    def fn(m, l, acc, s_block, v_block):
        if update_max == "block":
            m_new = s_block.max(axis=-1, keepdims=True)
        elif update_max == "global":
            m_new = np.maximum(m, s_block.max())
        else:
            m_new = np.maximum(m, s_block.max(axis=-1, keepdims=True)) if update_max else m
        with np.errstate(all="ignore"):
            m_safe = np.where(np.isfinite(m_new), m_new, 0.0) if guard_empty else m_new
            alpha = np.exp(sign * (m - m_safe))
            p = np.exp(s_block - (m_safe if p_max == "new" else m))
            l_new = (l * alpha if rescale_sum else l) + p.sum(axis=-1, keepdims=True)
            acc_new = (acc * alpha if rescale_acc else acc) + p @ v_block
        return m_new, l_new, acc_new

    return fn


def _online_probe(raise_max: bool):
    rng = np.random.default_rng(11 if raise_max else 12)
    n = rng.standard_normal
    m = np.array([[0.5], [1.0], [-0.2]])
    l = np.array([[2.0], [1.5], [3.1]])
    acc = n((3, 4))
    s = (3.0 + n((3, 5))) if raise_max else (n((3, 5)) - 8.0)
    return m, l, acc, s, n((5, 4))


def _factor(new, old, fresh, rel=1e-6, abs_=1e-9):
    """The factor f with new = f * old + fresh, fitted per row; None if none fits."""
    d, o = new - fresh, np.broadcast_to(old, new.shape)
    den = np.maximum((o * o).sum(axis=-1, keepdims=True), 1e-300)
    f = (d * o).sum(axis=-1, keepdims=True) / den
    return f if close(f * o, d, rel=rel, abs_=abs_) else None


def _infer_online(learner) -> list[Finding]:
    found = []
    probes, outcomes = {}, []
    for raise_max in (True, False):
        args = _online_probe(raise_max)
        o = learner(*(a.copy() for a in args))
        if not o.ok or o.arity != 3 or any(x is None for x in o.parts):
            return []
        probes[raise_max] = (args, o.parts)
        outcomes.append(o)
    (m, l, acc, s, v), (m_new, l_new, acc_new) = probes[True]
    block_max = s.max(axis=-1, keepdims=True)
    if m_new.shape != m.shape:
        return []
    # A first block in which row 1 has seen only masked keys.
    rng = np.random.default_rng(13)
    s0 = rng.standard_normal((3, 5))
    s0[1] = -np.inf
    o0 = learner(np.full((3, 1), -np.inf), np.zeros((3, 1)), np.zeros((3, 4)), s0, v.copy())
    if o0.ok and o0.arity == 3 and all(x is not None for x in o0.parts):
        rows_ok = [all(np.isfinite(x[i]).all() for x in o0.parts[1:]) for i in range(3)]
        if rows_ok == [True, False, True]:  # (NaN everywhere would be another mistake)
            found.append(
                Finding(
                    "masked-row-nan",
                    "on a first block where row 1 has only masked scores (all -inf, with "
                    "m = -inf), that row's l or acc comes out NaN.",
                )
            )
    if close(m_new, m) and not close(m, block_max):
        found.append(
            Finding(
                "max-not-updated",
                f"a block whose largest scores ({np.round(block_max[:, 0], 2).tolist()}) are "
                f"above the running max ({m[:, 0].tolist()}) leaves m unchanged.",
            )
        )
        return found
    (m2, _, _, s2, _), (m2_new, _, _) = probes[False]
    if m2_new.shape == m2.shape and close(m2_new, s2.max(axis=-1, keepdims=True)):
        found.append(
            Finding(
                "max-ignores-previous",
                f"a block whose scores are all below the running max ({m2[:, 0].tolist()}) "
                f"lowers m to the block's own max ({np.round(m2_new[:, 0], 2).tolist()}).",
            )
        )
    whole = np.maximum(m, s.max())  # a max over the whole block, every row alike
    if not close(m_new, np.maximum(m, block_max)):
        if not (close(m_new, whole) and np.isfinite(m_new).all()):
            return found
        found.append(
            Finding(
                "max-over-whole-block",
                f"for rows whose own largest scores are {np.round(block_max[:, 0], 2).tolist()} "
                f"your m_new is {np.round(m_new[:, 0], 2).tolist()}: the largest score of the "
                "whole block, the same for every row.",
            )
        )
    # The same block against a second running state: new = a * old + b * fresh separates
    # the factor on what was summed before (a) from the one on the block's terms (b).
    o2 = learner(m.copy(), 2.0 * l + 0.7, acc[::-1].copy() - 0.3, s.copy(), v.copy())
    if not o2.ok or o2.arity != 3 or any(x is None for x in o2.parts):
        return found
    tol = tolerances(max(o.eps for o in (*outcomes, o2)))
    alpha = np.exp(m - m_new)  # (seq_q, 1), < 1 here: the max rose
    p = np.exp(s - m_new)  # against the learner's own m_new
    stale = False
    for name, new, new2, old, old2, fresh, mid in (
        ("l", l_new, o2.parts[1], l, 2.0 * l + 0.7, p.sum(axis=-1, keepdims=True),
         "sum-not-rescaled"),
        ("acc", acc_new, o2.parts[2], acc, acc[::-1] - 0.3, p @ v, "acc-not-rescaled"),
    ):  # fmt: skip
        if new.shape != fresh.shape or new2.shape != fresh.shape:
            continue
        a = _factor(new - new2, old - old2, np.zeros_like(fresh), *tol)
        if a is None:
            continue
        b = _factor(new - a * old, fresh, np.zeros_like(fresh), *tol)
        if b is None:
            continue
        shown = np.round(a[:, 0], 4).tolist()
        if close(a, np.ones_like(a), rel=tol[0]):
            found.append(
                Finding(
                    mid,
                    f"when the max rises the old {name} is carried over unchanged (factor "
                    f"{shown}); exp(m_old - m_new) = {np.round(alpha[:, 0], 4).tolist()}.",
                )
            )
        elif close(a, 1 / alpha, rel=tol[0]):
            found.append(
                Finding(
                    "rescale-inverted",
                    f"when the max rises the old {name} is multiplied by {shown} = "
                    "exp(m_new - m_old), which is > 1; it should shrink by exp(m_old - m_new) "
                    f"= {np.round(alpha[:, 0], 4).tolist()}.",
                )
            )
        if not stale and close(b, 1 / alpha, rel=tol[0]):
            stale = True
            found.append(
                Finding(
                    "stale-max",
                    f"the block's terms added to {name} are exp(score - m_old): "
                    f"{np.round(b[:, 0], 4).tolist()} = exp(m_new - m_old) times "
                    "exp(score - m_new), for a block that raised the max from "
                    f"{m[:, 0].tolist()} to {np.round(m_new[:, 0], 2).tolist()}.",
                )
            )
    return found


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
        infer=_infer_online,
        build=_online_variant,
        exclusive=(
            # m never changes: there is nothing to rescale by
            frozenset({"max-not-updated", "sum-not-rescaled"}),
            frozenset({"max-not-updated", "acc-not-rescaled"}),
            frozenset({"max-not-updated", "rescale-inverted"}),
            # both already make every row of a first block NaN (l = 0 times inf)
            frozenset({"max-not-updated", "masked-row-nan"}),
            frozenset({"rescale-inverted", "masked-row-nan"}),
            # one max for every row: a row that has seen nothing gets a finite max, no NaN
            frozenset({"max-over-whole-block", "masked-row-nan"}),
            # the stale max makes every row of a first block inf; with m never updated it
            # is no longer stale
            frozenset({"stale-max", "masked-row-nan"}),
            frozenset({"stale-max", "max-not-updated"}),
        ),
        misconceptions=(
            Misconception(
                "sum-not-rescaled",
                "The running sum l keeps terms exp(score - m_old) next to new terms "
                "exp(score - m_new). When the max rises, multiply the old sum by "
                "exp(m_old - m_new) before adding the block's sum.",
                (_online_variant(rescale_sum=False),),
                {"rescale_sum": False},
            ),
            Misconception(
                "acc-not-rescaled",
                "The running numerator acc is not rescaled when the max rises: multiply it "
                "by exp(m_old - m_new), exactly like the running sum.",
                (_online_variant(rescale_acc=False),),
                {"rescale_acc": False},
            ),
            Misconception(
                "max-not-updated",
                "The running max m is never updated with the block's scores, so exp(score - m) "
                "can overflow (and is inf on the first block, where m = -inf). Take "
                "m_new = maximum(m, max of the block) and use m_new in the exponentials.",
                (_online_variant(update_max=False),),
                {"update_max": False},
            ),
            Misconception(
                "max-ignores-previous",
                "The new max is the block's max alone. The running max is the largest score "
                "seen so far, in this block *or before*: m_new = np.maximum(m, block max).",
                (_online_variant(update_max="block"),),
                {"update_max": "block"},
            ),
            Misconception(
                "max-over-whole-block",
                "The new max is the largest score of the whole block — every row gets the "
                "same one. Each query row keeps its own running max: take the max along the "
                "keys, s_block.max(axis=-1, keepdims=True). With one max for all rows, a row "
                "whose scores are far below another row's underflows to l = 0.",
                (_online_variant(update_max="global"),),
                {"update_max": "global"},
            ),
            Misconception(
                "stale-max",
                "The block's exponentials use the old max: p = exp(s_block - m) instead of "
                "exp(s_block - m_new). The old terms were rescaled to m_new, so the new ones "
                "must be taken against m_new too (on a first block, m = -inf makes them "
                "overflow to inf).",
                (_online_variant(p_max="old"),),
                {"p_max": "old"},
            ),
            Misconception(
                "rescale-inverted",
                "The rescaling factor is upside down: it must be exp(m_old - m_new) <= 1, "
                "shrinking what was summed against the smaller old max.",
                (_online_variant(sign=-1.0),),
                {"sign": -1.0},
            ),
            Misconception(
                "masked-row-nan",
                "A row that has seen only masked keys so far (m = -inf and every score of "
                "the block -inf) turns into NaN: exp(-inf - (-inf)) is exp(nan). Such a row "
                "must stay empty: m_new = -inf, l_new = 0, acc_new = 0. Subtract a safe "
                "maximum — 0 where m_new is -inf — in both exponentials.",
                (_online_variant(guard_empty=False),),
                {"guard_empty": False},
            ),
        ),
    )
)


_ONLINE_IDS = (
    "sum-not-rescaled",
    "acc-not-rescaled",
    "max-not-updated",
    "max-ignores-previous",
    "max-over-whole-block",
    "stale-max",
    "rescale-inverted",
)
_register_parts(
    "online_softmax_update",
    [
        (
            "online_softmax_update_blocks",
            "ordinary blocks: the running max, sum and numerator, rescaled by exp(m - m_new)",
            {
                "ids": _ONLINE_IDS,
                "make_cases": _online_block_cases,
                "make_hidden_cases": lambda: [
                    Case("hidden: " + c.label, c.args) for c in _online_block_cases(2222)
                ],
            },
        ),
        (
            "online_softmax_update_masked_rows",
            "a row that has seen only masked keys so far stays m = -inf, l = 0, acc = 0 "
            "(no NaN) and carries on when its first visible key arrives",
            {
                "ids": (*_ONLINE_IDS, "masked-row-nan"),
                "make_cases": _online_masked_cases,
                "make_hidden_cases": lambda: [
                    Case("hidden: " + c.label, c.args) for c in _online_masked_cases(2223)
                ],
            },
        ),
    ],
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


def _rotary_wide_v_cases(seed: int = 1213) -> list[Case]:
    """Cases whose values are as wide as the keys (d_v == d_k), so that a function that
    also rotates the values runs, and its weights can be graded on their own."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    return [
        Case(
            "4 tokens at positions 0..3, d_k=d_v=8",
            (n((4, 8)), n((4, 8)), n((4, 8)), np.arange(4)),
        ),
        Case(
            "5 tokens at positions [7, 2, 11, 3, 30], d_k=d_v=6",
            (n((5, 6)), n((5, 6)), n((5, 6)), np.array([7, 2, 11, 3, 30])),
        ),
        Case(
            "batch 2, 3 tokens at positions [10, 11, 12], d_k=d_v=8",
            (n((2, 3, 8)), n((2, 3, 8)), n((2, 3, 8)), np.array([10, 11, 12])),
        ),
    ]


def _rotate(x, positions, *, sign=1.0, pairing="interleaved", freq_step=2, in_place=False):
    """Rotate planes of ``x`` by position · 10000^(-freq_step·i/d_k). ``freq_step``: 2 is
    right; 1 drops the 2, 4 counts it twice (``arange(0, d_k, 2)`` times 2), -2 flips the
    exponent's sign. ``in_place``: the second coordinate is computed from the first one
    already overwritten."""
    d_k = x.shape[-1]
    half = d_k // 2
    freq = 10000.0 ** (-freq_step * np.arange(half) / d_k)  # (d_k/2,)
    ang = sign * np.asarray(positions, dtype=np.float64)[:, None] * freq  # (seq, d_k/2)
    cos, sin = np.cos(ang), np.sin(ang)
    out = np.empty_like(x)
    if pairing == "interleaved" and in_place:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = out[..., 0::2] * sin + x1 * cos
    elif pairing == "interleaved":
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


def _rotary_variant(*, rotate_q=True, rotate_k=True, rotate_v=False, use_positions=True, **kw):
    """Rotary attention with the given choices (and ``_rotate``'s keywords); the defaults
    give the correct function. ``use_positions=False`` rotates by 0, 1, 2, ... instead."""

    def fn(q, k, v, positions):
        if not use_positions:
            positions = np.arange(q.shape[-2])
        q_r = _rotate(q, positions, **kw) if rotate_q else q
        k_r = _rotate(k, positions, **kw) if rotate_k else k
        v_r = _rotate(v, positions, **kw) if rotate_v and v.shape[-1] % 2 == 0 else v
        if rotate_v and v.shape[-1] % 2:
            raise ValueError("cannot rotate values with an odd d_v")
        return _attend(q_r, k_r, v_r)

    return fn


# The rotations a learner may have written: direction, pairing, frequencies.
_ROTATIONS = [
    {"sign": sign, "pairing": pairing, "freq_step": step}
    for sign in (1.0, -1.0)
    for pairing in ("interleaved", "half")
    for step in (2, 1, 4, -2)
] + [
    {"sign": sign, "freq_step": step, "in_place": True}
    for sign in (1.0, -1.0)
    for step in (2, 1, 4, -2)
]
_FREQUENCIES = {
    1: "10000^(-i/d_k): the 2 of 2i is missing",
    4: "10000^(-4i/d_k): the 2 is counted twice (np.arange(0, d_k, 2) already holds 2i)",
    -2: "10000^(+2i/d_k): the exponent's sign is flipped, so the angles grow with i",
}


def _infer_rotary(learner) -> list[Finding]:
    rng = np.random.default_rng(12)
    positions = np.array([3, 0, 7, 2, 11])
    q, k, v = (rng.standard_normal((5, d)) for d in (8, 8, 6))
    o = learner(q, k, v, positions.copy())
    if not o.ok or o.arity != 2 or any(x is None for x in o.parts):
        return []
    out, w = o.parts
    if w.shape != (5, 5) or out.shape != (5, 6):
        return []
    found = []
    match = None
    tol = tolerances(o.eps)
    for pos in (positions, np.arange(5)):
        for sides in ("both", "k", "none"):
            for rot in _ROTATIONS if sides != "none" else [{}]:
                qr = _rotate(q, pos, **rot) if sides == "both" else q
                kr = _rotate(k, pos, **rot) if sides != "none" else k
                if close(w, _attend(qr, kr, v)[1], *tol):
                    match = (sides, rot)
                    break
            if match:
                break
        if match:
            break
    if match is not None:
        sides, rot = match
        if pos is not positions and sides != "none":
            found.append(
                Finding(
                    "positions-ignored",
                    f"for tokens at positions {positions.tolist()} your weights are those of "
                    "rotations by 0, 1, 2, 3, 4: the positions argument was not used.",
                )
            )
        if sides == "none":
            found.append(
                Finding(
                    "no-rotation",
                    "your weights are those of plain attention on q and k: shifting the "
                    "positions changes nothing, because nothing was rotated.",
                )
            )
        if sides == "k":
            found.append(
                Finding(
                    "only-keys-rotated",
                    "your weights are reproduced by rotating the keys alone, the queries "
                    "left as they are.",
                )
            )
        if rot.get("sign") == -1.0:
            found.append(
                Finding(
                    "angle-sign",
                    "your weights are reproduced by rotating by -angle: x0·cos + x1·sin, "
                    "-x0·sin + x1·cos.",
                )
            )
        if rot.get("pairing") == "half":
            found.append(
                Finding(
                    "wrong-pairing",
                    "your weights are reproduced by pairing dimension i with i + d_k/2 "
                    "(rotate-half) instead of 2i with 2i + 1.",
                )
            )
        if rot.get("freq_step", 2) != 2:
            found.append(
                Finding(
                    "wrong-frequencies",
                    "your weights are reproduced with angles position · "
                    f"{_FREQUENCIES[rot['freq_step']]}; plane i turns at 10000^(-2i/d_k).",
                )
            )
        if rot.get("in_place"):
            found.append(
                Finding(
                    "rotation-overwrites-input",
                    "your weights are reproduced by a rotation whose second coordinate is "
                    "computed from the first one after it was overwritten: "
                    "(x0·cos - x1·sin)·sin + x1·cos instead of x0·sin + x1·cos.",
                )
            )
    if not close(out, w @ v, *tol):
        rots = [match[1]] if match and match[1] else _ROTATIONS
        where = [pos] if match else [positions, np.arange(5)]
        if any(close(out, w @ _rotate(v, at, **r), *tol) for r in rots for at in where):
            found.append(
                Finding(
                    "rotates-values",
                    "the output is the weights times *rotated* values, not weights @ v.",
                )
            )
    return found


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
        infer=_infer_rotary,
        build=_rotary_variant,
        exclusive=(
            # nothing rotated: no direction, pairing or frequency to get wrong
            frozenset({"no-rotation", "angle-sign"}),
            frozenset({"no-rotation", "wrong-pairing"}),
            frozenset({"no-rotation", "wrong-frequencies"}),
            frozenset({"no-rotation", "positions-ignored"}),
            frozenset({"no-rotation", "rotation-overwrites-input"}),
            # the overwriting is measured on the interleaved layout only
            frozenset({"wrong-pairing", "rotation-overwrites-input"}),
        ),
        misconceptions=(
            Misconception(
                "rotates-values",
                "The values are rotated too. Rotation carries position into the *comparison* "
                "of queries and keys; values are what gets handed over, and stay as they are.",
                (_rotary_variant(rotate_v=True),),
                {"rotate_v": True},
            ),
            Misconception(
                "wrong-pairing",
                "You used the rotate-half layout: plane i is dimensions (i, i + d_k/2), as in "
                "GPT-NeoX and the Llama code of Hugging Face transformers. That is valid RoPE "
                "(the same rotations with the dimensions permuted), but this exercise asks for "
                "the interleaved layout of the RoFormer paper: plane i is dimensions (2i, 2i+1), "
                "x[..., 0::2] and x[..., 1::2].",
                (_rotary_variant(pairing="half"),),
                {"pairing": "half"},
            ),
            Misconception(
                "angle-sign",
                "The rotation goes the wrong way: (x0, x1) -> (x0·cos + x1·sin, "
                "-x0·sin + x1·cos). Use x0·cos - x1·sin for the first coordinate and "
                "x0·sin + x1·cos for the second.",
                (_rotary_variant(sign=-1.0),),
                {"sign": -1.0},
            ),
            Misconception(
                "wrong-frequencies",
                "Plane i turns at the wrong speed. Its angle is position · 10000^(-2i/d_k), "
                "i = 0 .. d_k/2 - 1: the first plane turns 1 radian per position, the last "
                "almost not at all. With np.arange(0, d_k, 2) the 2i is already there.",
                (
                    _rotary_variant(freq_step=1),
                    _rotary_variant(freq_step=4),
                    _rotary_variant(freq_step=-2),
                ),
                {"freq_step": 1},
            ),
            Misconception(
                "rotation-overwrites-input",
                "The second coordinate of each plane is computed from the first one after "
                "you overwrote it (x[..., 0::2] = ... and then x[..., 1::2] = x[..., 0::2] * "
                "sin + ...). Compute both new coordinates from the old x0 and x1: keep "
                "copies, or write into a new array.",
                (_rotary_variant(in_place=True),),
                {"in_place": True},
            ),
            Misconception(
                "only-keys-rotated",
                "Only the keys are rotated. The score then depends on each key's absolute "
                "position; rotating both queries and keys is what leaves only the offset.",
                (_rotary_variant(rotate_q=False),),
                {"rotate_q": False},
            ),
            Misconception(
                "positions-ignored",
                "The rotation uses 0, 1, 2, ... (np.arange(seq)) instead of the positions "
                "passed in. Tokens need not sit at 0..seq-1 (a cache, a chunk, packed "
                "sequences): rotate by positions.",
                (_rotary_variant(use_positions=False),),
                {"use_positions": False},
            ),
            Misconception(
                "no-rotation",
                "Neither queries nor keys are rotated, so the scores do not depend on the "
                "positions at all. Rotate both q and k by their positions before comparing "
                "them.",
                (_rotary_variant(rotate_q=False, rotate_k=False),),
                {"rotate_q": False, "rotate_k": False},
            ),
        ),
    )
)


_ROTATION_IDS = (
    "wrong-pairing",
    "angle-sign",
    "wrong-frequencies",
    "rotation-overwrites-input",
    "only-keys-rotated",
    "positions-ignored",
    "no-rotation",
)
_register_parts(
    "rotary_attend",
    [
        (
            "rotary_attend_weights",
            "the weights: queries and keys rotated by their positions (interleaved planes), "
            "then compared",
            {
                "outputs": (1,),
                "ids": _ROTATION_IDS,
                "make_cases": _rotary_wide_v_cases,
                "make_hidden_cases": lambda: [
                    Case("hidden: " + c.label, c.args) for c in _rotary_wide_v_cases(2425)
                ],
            },
        ),
        (
            "rotary_attend_output",
            "the output: those weights times the values, which are not rotated",
            {"outputs": (0,), "ids": ("rotates-values", *_ROTATION_IDS)},
        ),
    ],
)
