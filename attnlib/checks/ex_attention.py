"""Exercises on the attention core: softmax, attend, causal_mask, padding_mask.

Inputs are numpy float64 arrays (the lessons build these functions in numpy first).
Shapes are deliberately non-square (seq_q ≠ seq_k ≠ d_k ≠ d_v) so that a transposed
matrix cannot pass by accident; one case has seq_k == d_k so that a missing transpose of
k runs and can be recognised.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._core import Case, Exercise, Misconception, register
from attnlib.core import attend as _attend
from attnlib.core import softmax as _softmax
from attnlib.masks import causal_mask as _causal_mask
from attnlib.masks import padding_mask as _padding_mask

# ----------------------------------------------------------------------------------------
# softmax(x) -> weights along the last axis
# ----------------------------------------------------------------------------------------


def _softmax_cases() -> list[Case]:
    rng = np.random.default_rng(20261129)
    return [
        Case("one row of 4 scores", (np.array([1.0, 2.0, 0.5, -1.0]),)),
        Case("3 queries x 5 keys", (rng.standard_normal((3, 5)),)),
        Case("batch of 2, 4 queries x 6 keys", (rng.standard_normal((2, 4, 6)) * 3,)),
        Case("large scores (1e3 .. 1e4)", (np.array([[1e4, 1e4 - 1.0, 2e3], [1e3, -1e4, 0.0]]),)),
        Case(
            "masked scores (-inf) in 2 queries x 4 keys",
            (np.array([[0.5, -np.inf, 2.0, -1.0], [-np.inf, 3.0, -np.inf, 1.0]]),),
        ),
    ]


def _softmax_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(90210)
    return [
        Case("hidden: 5 queries x 3 keys", (rng.standard_normal((5, 3)) * 2,)),
        Case("hidden: batch 3, 2 queries x 7 keys", (rng.standard_normal((3, 2, 7)),)),
        Case("hidden: large scores around 5e3", (5e3 + rng.standard_normal((4, 6)) * 3,)),
    ]


def _sm_unstable(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def _sm_axis0(x):
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def _sm_axis_minus2(x):
    if x.ndim < 2:
        return _sm_axis0(x)
    e = np.exp(x - x.max(axis=-2, keepdims=True))
    return e / e.sum(axis=-2, keepdims=True)


def _sm_sum_all(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum()


def _sm_not_normalised(x):
    return np.exp(x - x.max(axis=-1, keepdims=True))


register(
    Exercise(
        name="softmax",
        summary="softmax(x): weights along the last axis, stable for large scores",
        reference=lambda x: _softmax(x, axis=-1),
        make_cases=_softmax_cases,
        make_hidden_cases=_softmax_hidden_cases,
        forbidden=("attnlib.core.softmax", "attnlib.core._softmax_math"),
        misconceptions=(
            Misconception(
                "unstable-softmax",
                "exp() of a large score overflows to inf, and inf/inf is NaN. Subtract each "
                "row's maximum before exp(): the result is mathematically the same, and every "
                "exponent is then <= 0.",
                (_sm_unstable,),
            ),
            Misconception(
                "softmax-wrong-axis",
                "The weights are normalised along the wrong axis. Each row (one query) must sum "
                "to 1 over its keys: use axis=-1 with keepdims=True in both max and sum.",
                (_sm_axis0, _sm_axis_minus2),
            ),
            Misconception(
                "softmax-sums-everything",
                "The sum runs over the whole array, so all rows together sum to 1. Sum over the "
                "last axis only (axis=-1, keepdims=True).",
                (_sm_sum_all,),
            ),
            Misconception(
                "weights-not-normalized",
                "The exponentials are never divided by their sum, so rows do not sum to 1. "
                "Divide by e.sum(axis=-1, keepdims=True).",
                (_sm_not_normalised,),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# attend(q, k, v, mask=None) -> (out, weights), mask True = may attend
# ----------------------------------------------------------------------------------------


def _attend_cases() -> list[Case]:
    rng = np.random.default_rng(7)
    n = rng.standard_normal
    causal = _causal_mask(4, 6, align="bottom_right")
    pad = _padding_mask([6, 4], 6)  # (2, 1, 6)
    block_row = np.ones((3, 5), dtype=bool)
    block_row[1] = False  # query 1 may attend to nothing
    return [
        Case("3 queries, 5 keys, d_k=4, d_v=2", (n((3, 4)), n((5, 4)), n((5, 2)))),
        Case("2 queries, 4 keys, d_k=4 (seq_k == d_k), d_v=3", (n((2, 4)), n((4, 4)), n((4, 3)))),
        Case(
            "batch 2: 4 queries, 6 keys, d_k=8, d_v=3", (n((2, 4, 8)), n((2, 6, 8)), n((2, 6, 3)))
        ),
        Case(
            "causal mask (4, 6), d_k=8",
            (n((4, 8)), n((6, 8)), n((6, 3))),
            {"mask": causal},
        ),
        Case(
            "padding mask (2, 1, 6), lengths 6 and 4",
            (n((2, 4, 8)), n((2, 6, 8)), n((2, 6, 3))),
            {"mask": pad},
        ),
        Case(
            "large scores (q and k scaled by 100)",
            (100 * n((3, 4)), 100 * n((5, 4)), n((5, 2))),
        ),
        Case(
            "query 1 may attend to no key (its weights and output must be 0)",
            (n((3, 4)), n((5, 4)), n((5, 2))),
            {"mask": block_row},
        ),
    ]


def _attend_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(31337)
    n = rng.standard_normal
    block = np.ones((2, 5, 3), dtype=bool)
    block[0, 2] = False  # batch 0, query 2 may attend to nothing
    block[1, :, 0] = False  # batch 1: nobody attends to key 0
    return [
        Case("hidden: 5 queries, 3 keys, d_k=6, d_v=4", (n((5, 6)), n((3, 6)), n((3, 4)))),
        Case(
            "hidden: batch 2, 5 queries, 3 keys, d_k=3 (seq_k == d_k), d_v=2, with a mask",
            (n((2, 5, 3)), n((2, 3, 3)), n((2, 3, 2))),
            {"mask": block},
        ),
        Case(
            "hidden: causal (6, 6), large scores",
            (30 * n((6, 5)), 30 * n((6, 5)), n((6, 3))),
            {"mask": _causal_mask(6)},
        ),
        Case(
            "hidden: padding (3, 1, 7), lengths 7, 1, 4",
            (n((3, 2, 4)), n((3, 7, 4)), n((3, 7, 5))),
            {"mask": _padding_mask([7, 1, 4], 7)},
        ),
    ]


def _np_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return e / np.where(s > 0, s, 1.0)


def _variant(
    *,
    scale="sqrt",
    axis=-1,
    mask_mode="before",
    invert_mask=False,
    transpose_k=True,
    transpose_w=False,
    stable=True,
    zero_empty=True,
):
    """Build one attention variant; the defaults give the correct function."""

    def fn(q, k, v, mask=None):
        d_k = q.shape[-1]
        kt = np.swapaxes(k, -1, -2) if transpose_k else k
        s = q @ kt
        s = s * {"sqrt": 1 / np.sqrt(d_k), "none": 1.0, "d_k": 1 / d_k}[scale]
        m = None if mask is None else (~mask if invert_mask else mask)
        if m is not None and mask_mode == "before":
            s = np.where(m, s, -np.inf)
        if stable:
            w = _np_softmax(s, axis=axis)
            if not zero_empty and m is not None and mask_mode == "before":
                with np.errstate(all="ignore"):
                    mx = s.max(axis=axis, keepdims=True)
                    e = np.exp(s - mx)
                    w = e / e.sum(axis=axis, keepdims=True)
        else:
            e = np.exp(s)
            w = e / e.sum(axis=axis, keepdims=True)
        if m is not None and mask_mode == "after":
            w = w * m
        out = w @ v
        return out, (np.swapaxes(w, -1, -2) if transpose_w else w)

    return fn


register(
    Exercise(
        name="attend",
        summary="attend(q, k, v, mask=None) -> (out, weights): scaled dot-product attention",
        reference=lambda q, k, v, mask=None: _attend(q, k, v, mask=mask),
        make_cases=_attend_cases,
        make_hidden_cases=_attend_hidden_cases,
        forbidden=(
            "attnlib.core.attend",
            "attnlib.core._attend_math",
            "attnlib.core._attend_torch_fast",
        ),
        misconceptions=(
            Misconception(
                "softmax-over-queries",
                "The softmax runs over the query axis (axis=-2), so each column sums to 1. "
                "A query distributes its attention over the keys: softmax over axis=-1.",
                (_variant(axis=-2),),
            ),
            Misconception(
                "no-scaling",
                "The scores are not scaled. Multiply q @ kᵀ by 1/sqrt(d_k) (d_k = q.shape[-1]) "
                "before the softmax, or wide vectors make the softmax saturate.",
                (_variant(scale="none"),),
            ),
            Misconception(
                "scale-not-sqrt",
                "The scores are divided by d_k instead of sqrt(d_k). The dot product of two "
                "random d_k-vectors has standard deviation sqrt(d_k), so divide by sqrt(d_k).",
                (_variant(scale="d_k"),),
            ),
            Misconception(
                "mask-after-softmax",
                "The mask is applied after the softmax, so the kept weights no longer sum to 1 "
                "(they were normalised together with the blocked ones). Set blocked scores to "
                "-inf before the softmax.",
                (_variant(mask_mode="after"),),
            ),
            Misconception(
                "mask-inverted",
                "The mask is read the wrong way round. In this course True = may attend: keep "
                "scores where mask is True and set the others to -inf.",
                (_variant(invert_mask=True), _variant(invert_mask=True, mask_mode="after")),
            ),
            Misconception(
                "keys-not-transposed",
                "k is not transposed: scores are q @ kᵀ, shape (..., seq_q, seq_k). Use "
                "np.swapaxes(k, -1, -2) (k.T reverses every axis of a batched array).",
                (_variant(transpose_k=False),),
            ),
            Misconception(
                "weights-transposed",
                "The returned weights are transposed. Rows are queries and columns are keys: "
                "weights has shape (..., seq_q, seq_k).",
                (_variant(transpose_w=True),),
            ),
            Misconception(
                "unstable-softmax",
                "exp() of large scores overflows to inf and the weights become NaN. Subtract "
                "each row's max score before exp().",
                (_variant(stable=False),),
            ),
            Misconception(
                "fully-masked-nan",
                "A query that may attend to no key gets NaN (its max is -inf, and "
                "-inf - (-inf) is NaN). Give such rows weight 0 and output 0: e.g. replace a "
                "-inf row max by 0 and divide by max(sum, tiny).",
                (_variant(zero_empty=False),),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# causal_mask(seq) -> bool (seq, seq), True = may attend
# ----------------------------------------------------------------------------------------


def _causal_cases() -> list[Case]:
    return [Case(f"seq={n}", (n,)) for n in (1, 4, 7)]


def _causal_hidden_cases() -> list[Case]:
    return [Case(f"hidden: seq={n}", (n,)) for n in (2, 5, 12)]


register(
    Exercise(
        name="causal_mask",
        summary="causal_mask(seq) -> bool (seq, seq): query i may attend to keys 0..i",
        reference=lambda seq: _causal_mask(seq),
        make_cases=_causal_cases,
        make_hidden_cases=_causal_hidden_cases,
        exact=True,
        forbidden=("attnlib.masks.causal_mask",),
        misconceptions=(
            Misconception(
                "causal-inverted",
                "The mask lets each query see the future and hides the past. Query i (row) may "
                "attend to key j (column) when j <= i: the lower triangle, np.tril.",
                (
                    lambda seq: ~_causal_mask(seq),
                    lambda seq: np.triu(np.ones((seq, seq), dtype=bool)),
                ),
            ),
            Misconception(
                "causal-diagonal-excluded",
                "The diagonal is blocked, so a token cannot attend to itself (and the first "
                "token attends to nothing). Use j <= i, not j < i.",
                (lambda seq: np.tril(np.ones((seq, seq), dtype=bool), k=-1),),
            ),
            Misconception(
                "mask-not-boolean",
                "The mask is numbers, not booleans. A float 0/1 mask is easily added to the "
                "scores, which blocks nothing; return dtype bool (True = may attend).",
                (lambda seq: _causal_mask(seq).astype(np.float64),),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# padding_mask(lengths, seq_k) -> bool (batch, 1, seq_k), True = real token
# ----------------------------------------------------------------------------------------


def _padding_cases() -> list[Case]:
    return [
        Case("lengths [3, 5, 1], seq_k=5", ([3, 5, 1], 5)),
        Case("lengths [2, 4], seq_k=6", ([2, 4], 6)),
        Case("lengths [0, 4], seq_k=4 (an empty sequence)", ([0, 4], 4)),
    ]


def _padding_hidden_cases() -> list[Case]:
    return [
        Case("hidden: lengths [4, 1, 6, 2], seq_k=6", ([4, 1, 6, 2], 6)),
        Case("hidden: lengths [3], seq_k=8", ([3], 8)),
    ]


def _pad_base(lengths, seq_k):
    return np.arange(seq_k)[None, :] < np.asarray(lengths)[:, None]  # (batch, seq_k)


register(
    Exercise(
        name="padding_mask",
        summary="padding_mask(lengths, seq_k) -> bool (batch, 1, seq_k): True = real token",
        reference=lambda lengths, seq_k: _padding_mask(lengths, seq_k),
        make_cases=_padding_cases,
        make_hidden_cases=_padding_hidden_cases,
        exact=True,
        forbidden=("attnlib.masks.padding_mask",),
        misconceptions=(
            Misconception(
                "padding-inverted",
                "True marks the padding instead of the real tokens. In this course True = may "
                "attend, so real positions (index < length) are True.",
                (lambda lengths, seq_k: ~_pad_base(lengths, seq_k)[:, None, :],),
            ),
            Misconception(
                "padding-on-query-axis",
                "The mask has shape (batch, seq_k, 1): it blocks query rows, not key columns. "
                "Padding is about keys — nobody should attend to a pad — so the key axis is "
                "last: (batch, 1, seq_k).",
                (lambda lengths, seq_k: _pad_base(lengths, seq_k)[:, :, None],),
            ),
            Misconception(
                "padding-missing-query-axis",
                "The mask has shape (batch, seq_k). Against scores of shape (batch, seq_q, "
                "seq_k) it would line up with (seq_q, seq_k), not with the batch. Insert the "
                "query axis: mask[:, None, :].",
                (lambda lengths, seq_k: _pad_base(lengths, seq_k),),
            ),
            Misconception(
                "padding-off-by-one",
                "One position too many (or too few) is marked real. Position p is real when "
                "p < length (positions count from 0).",
                (
                    lambda lengths, seq_k: (
                        np.arange(seq_k)[None, :] <= np.asarray(lengths)[:, None]
                    )[:, None, :],
                    lambda lengths, seq_k: (
                        np.arange(seq_k)[None, :] < np.asarray(lengths)[:, None] - 1
                    )[:, None, :],
                ),
            ),
        ),
    )
)
