"""Exercises of lesson 03 on the attention core: softmax and attend.

Inputs are numpy float64 arrays (the lessons build these functions in numpy first).
Shapes are deliberately non-square (seq_q ≠ seq_k ≠ d_k ≠ d_v) so that a transposed
matrix cannot pass by accident; one case has seq_k == d_k so that a missing transpose of
k runs and can be recognised.

When a function is wrong, each exercise's ``infer`` measures it on probes (see
:mod:`attnlib.checks._core`): for softmax and attend, which axis the weights sum to 1
over, the multiplier the scores were scaled by (a fit of log-weights against the raw
scores), what blocked keys and fully masked rows get, which rows break on huge scores,
and whether a batch gives what its elements give one at a time. The probes live in
:mod:`attnlib.checks._attention_probes`; lesson 08's masks in :mod:`attnlib.checks.ex_masks`.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._attention_probes import axis_findings, fit_any, infer_attend, stability_finding
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt, normalisation, tolerance
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
            "rows near +1e4, near -1e4 and ordinary in one array (one shift per row)",
            (
                np.array(
                    [
                        [1e4, 1e4 - 2.0, 1e4 + 0.5, 1e4 - 1.0],
                        [-1e4, -1e4 + 1.5, -1e4 - 0.5, -1e4 + 2.0],
                        [0.3, -1.2, 2.0, 0.7],
                    ]
                ),
            ),
        ),
        Case(
            "masked scores (-inf) in 2 queries x 4 keys",
            (np.array([[0.5, -np.inf, 2.0, -1.0], [-np.inf, 3.0, -np.inf, 1.0]]),),
        ),
    ]


def _softmax_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(90210)
    # Large scores on a grid of 1/256: exact in float32 too, so a correct float32 softmax
    # (the differences of nearby large numbers are then exact) passes.
    large = 5e3 + np.round(rng.standard_normal((4, 6)) * 3 * 256) / 256
    # Rows far apart in one batch: a single shift for the whole array cannot serve them all.
    apart = np.round(rng.standard_normal((2, 3, 5)) * 3 * 256) / 256
    apart[:, 0] += 6e3
    apart[:, 1] -= 6e3
    masked = rng.standard_normal((4, 5)) * 2
    masked[rng.random((4, 5)) < 0.35] = -np.inf
    masked[:, 2] = rng.standard_normal(4)  # every row keeps at least one key
    return [
        Case("hidden: 5 queries x 3 keys", (rng.standard_normal((5, 3)) * 2,)),
        Case("hidden: batch 3, 2 queries x 7 keys", (rng.standard_normal((3, 2, 7)),)),
        Case("hidden: large scores around 5e3", (large,)),
        Case("hidden: batch 2, rows near +6e3, -6e3 and ordinary", (apart,)),
        Case("hidden: 4 queries x 5 keys, some scores masked (-inf)", (masked,)),
    ]


def _softmax_build(*, axis=-1, normalise=True, max_mode="row", scale=None, keepdims=True):
    """A softmax with the given choices; the defaults give the correct function.

    ``axis``: -1, 0, -2 (0 for a 1-D input) or "all"; ``max_mode``: "row" (the max along
    the normalised axis, the last one for "all"), "none" or "global"; ``scale``: None or
    "sqrt" (the input divided by √(its last dimension)); ``keepdims`` of the max and sum.
    """

    def fn(x):
        if scale == "sqrt":
            x = x / np.sqrt(x.shape[-1])
        ax = 0 if (axis == -2 and x.ndim < 2) else axis
        max_ax = -1 if ax == "all" else ax
        if max_mode == "row":
            m = x.max(axis=max_ax, keepdims=keepdims)
        elif max_mode == "global":
            m = x.max()
        else:
            m = 0.0
        e = np.exp(x - m)
        if not normalise:
            return e
        return e / (e.sum() if ax == "all" else e.sum(axis=ax, keepdims=keepdims))

    return fn


_SM_MAIN = np.array(  # (4, 5): moderate scores
    [
        [0.3, -1.2, 2.0, 0.7, -0.4],
        [1.5, 0.1, -0.8, -2.1, 0.9],
        [-0.6, 1.1, 0.4, 1.8, -1.5],
        [0.0, 2.4, -0.3, 0.5, 1.2],
    ]
)
_SM_LARGE = np.array(  # rows: huge positive, ordinary, huge negative, ordinary
    [
        [2e4, 2e4 - 1.0, 2e4 - 3.0, 2e4 + 0.5, 2e4 - 2.0],
        [0.3, -1.2, 2.0, 0.7, -0.4],
        [-2e4, -2e4 + 1.5, -2e4 - 0.5, -2e4 + 2.0, -2e4],
        [1.5, 0.1, -0.8, -2.1, 0.9],
    ]
)


def _infer_softmax(learner) -> list[Finding]:
    found: list[Finding] = []
    o = learner(_SM_MAIN.copy())
    if not o.ok:
        square = learner(_SM_LARGE[:, :4][[1, 3, 1, 3]] + np.arange(4.0))  # (4, 4), ordinary
        row = learner(_SM_MAIN[0].copy())
        if square.ok and row.ok:
            return [
                Finding(
                    "keepdims-missing",
                    f"your function works on one row and on a square (4, 4) input but raises "
                    f"on a (4, 5) input ({o.error()[:120]}): a max or sum lost its axis.",
                )
            ]
        return found
    w = o.array(0) if o.ok and o.arity == 1 else None
    if w is None or w.shape != _SM_MAIN.shape or w.dtype == bool:
        return found
    axis = normalisation(w, tolerance(o.eps))
    if axis == "nan":
        return found
    fit = fit_any(w, [("x", _SM_MAIN)], axis)
    if fit[2] > 1e-4 or not fit[1] > 0:
        return found  # not exponentials of the input: nothing here to recognise
    found += axis_findings(axis, w, "4 x 5 scores", softmax_ids=True)
    if abs(fit[1] - 1.0) > 2e-3:
        c = fit[1]
        how = " = 1/√5, 1/√(the last dimension)" if abs(c - 5**-0.5) < 2e-3 else ""
        found.append(
            Finding(
                "softmax-scaled",
                f"your weights behave as if the input were multiplied by {fmt(c)}{how} "
                "before exp().",
            )
        )
    # 3-D input: a fixed axis (axis=1) is the last axis of a 2-D input only.
    x3 = np.stack([_SM_MAIN, _SM_MAIN[::-1] * 0.5])  # (2, 4, 5)
    o3 = learner(x3.copy())
    w3 = o3.array(0) if o3.ok and o3.arity == 1 else None
    if axis == "keys" and w3 is not None and w3.shape == x3.shape and w3.dtype != bool:
        axis3 = normalisation(w3, tolerance(o3.eps))
        found += axis_findings(axis3, w3, "a 3-D input (2, 4, 5)", softmax_ids=True)
    ol = learner(_SM_LARGE.copy())
    wl = ol.array(0) if ol.ok and ol.arity == 1 else None
    if wl is not None and wl.shape == _SM_LARGE.shape and wl.dtype != bool:
        f = stability_finding(wl, axis, "On a 4 x 5 input")
        if f is not None:
            found.append(f)
    return found


register(
    Exercise(
        name="softmax",
        summary="softmax(x): weights along the last axis, stable for large scores",
        reference=lambda x: _softmax(x, axis=-1),
        make_cases=_softmax_cases,
        make_hidden_cases=_softmax_hidden_cases,
        forbidden=("attnlib.core.softmax", "attnlib.core._softmax_math"),
        infer=_infer_softmax,
        build=_softmax_build,
        exclusive=(
            # not normalised: there is no axis to get wrong
            frozenset({"weights-not-normalized", "softmax-wrong-axis"}),
            frozenset({"weights-not-normalized", "softmax-sums-everything"}),
            # one max of everything is exactly right when everything is normalised together,
            # and equals each column's max in the probe
            frozenset({"global-max", "softmax-sums-everything"}),
            frozenset({"global-max", "softmax-wrong-axis"}),
            # a function that raises on non-square input can be measured no further
            *(
                frozenset({"keepdims-missing", other})
                for other in (
                    "unstable-softmax",
                    "global-max",
                    "softmax-wrong-axis",
                    "softmax-sums-everything",
                    "weights-not-normalized",
                    "softmax-scaled",
                )
            ),  # fmt: skip
        ),
        misconceptions=(
            Misconception(
                "unstable-softmax",
                "exp() of a large score overflows to inf, and inf/inf is NaN. Subtract each "
                "row's maximum before exp(): the result is mathematically the same, and every "
                "exponent is then <= 0.",
                (_softmax_build(max_mode="none"),),
                {"max_mode": "none"},
            ),
            Misconception(
                "global-max",
                "Subtract each row's own maximum (x.max(axis=-1, keepdims=True)), not the "
                "maximum of the whole array: a row whose scores are all far below it gets "
                "exp() = 0 everywhere, and 0/0 is NaN.",
                (_softmax_build(max_mode="global"),),
                {"max_mode": "global"},
            ),
            Misconception(
                "softmax-wrong-axis",
                "The weights are normalised along the wrong axis. Each row (one query) must sum "
                "to 1 over its keys: use axis=-1 with keepdims=True in both max and sum.",
                (_softmax_build(axis=0), _softmax_build(axis=-2)),
                {"axis": 0},
            ),
            Misconception(
                "softmax-sums-everything",
                "The sum runs over the whole array, so all rows together sum to 1. Sum over the "
                "last axis only (axis=-1, keepdims=True).",
                (_softmax_build(axis="all"),),
                {"axis": "all"},
            ),
            Misconception(
                "weights-not-normalized",
                "The exponentials are never divided by their sum, so rows do not sum to 1. "
                "Divide by e.sum(axis=-1, keepdims=True).",
                (_softmax_build(normalise=False),),
                {"normalise": False},
            ),
            Misconception(
                "keepdims-missing",
                "x.max(axis=-1) and x.sum(axis=-1) drop the axis they reduce: shape (..., n) "
                "against x's (..., n, seq_k) lines up with the wrong axis, which only runs "
                "when the two sizes are equal. Use keepdims=True in both.",
                (_softmax_build(keepdims=False),),
                {"keepdims": False},
            ),
            Misconception(
                "softmax-scaled",
                "The softmax rescales its input. It takes the scores as they are: scaling "
                "(by 1/√d_k) belongs to the scores, computed before the softmax is called.",
                (_softmax_build(scale="sqrt"),),
                {"scale": "sqrt"},
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


def _attend_build(
    *,
    scale="sqrt",
    axis=-1,
    normalise=True,
    mask_mode="before",
    invert_mask=False,
    fill="guard",
    transpose_k=True,
    transpose_w=False,
    max_mode="row",
    outputs="pair",
    blend="v",
    keepdims=True,
):
    """Build one attention function; the defaults give the correct one.

    Each keyword is one choice a learner makes: ``scale`` ("sqrt", "none", "d_k", "d_v",
    "seq_k", "mult", "const8"), ``axis`` of the softmax (-1, -2, "all"), ``normalise``,
    ``mask_mode`` ("before", "after", "multiplied", "added", "ignored"), ``invert_mask``,
    ``fill`` of blocked scores ("guard": -inf with fully masked rows kept at 0, "nan":
    -inf without, "finite": -1e9), ``transpose_k`` (True, False, "T" = k.T), ``transpose_w``,
    ``max_mode`` ("row", "none", "global"), ``outputs`` ("pair", "swapped", "out-only"),
    ``blend`` ("v", "k": what the weights average) and ``keepdims`` of the softmax's sums.
    ``mask_mode="index"`` blocks with ``s[~mask] = -inf``, which does not broadcast.
    """

    def fn(q, k, v, mask=None):
        d_k, d_v, seq_k = q.shape[-1], v.shape[-1], k.shape[-2]
        if transpose_k == "T":
            kt = k.T
        else:
            kt = np.swapaxes(k, -1, -2) if transpose_k else k
        s = q @ kt
        c = {
            "sqrt": 1 / np.sqrt(d_k),
            "none": 1.0,
            "d_k": 1 / d_k,
            "d_v": 1 / np.sqrt(d_v),
            "seq_k": 1 / np.sqrt(seq_k),
            "mult": np.sqrt(d_k),
            "const8": 1 / 8,
        }[scale]
        s = s * c
        m = None if mask is None else (~mask if invert_mask else mask)
        if m is not None and mask_mode == "before":
            s = np.where(m, s, -1e9 if fill == "finite" else -np.inf)
        elif m is not None and mask_mode == "index":
            s = s.copy()
            s[~m] = -1e9 if fill == "finite" else -np.inf
        elif m is not None and mask_mode == "multiplied":
            s = s * m
        elif m is not None and mask_mode == "added":
            s = s + m
        guard = fill != "nan"
        red = (-2, -1) if axis == "all" else axis
        if max_mode == "row":
            mx = s.max(axis=-1 if axis == "all" else axis, keepdims=True)
        elif max_mode == "global":
            mx = s.max()
        else:
            mx = np.zeros(())
        if guard:
            mx = np.where(np.isfinite(mx), mx, 0.0)
        e = np.exp(s - mx)
        if normalise:
            tot = e.sum(axis=red, keepdims=keepdims)
            w = e / (np.where(tot > 0, tot, 1.0) if guard else tot)
        else:
            w = e
        if m is not None and mask_mode == "after":
            w = w * m
        out = w @ (v if blend == "v" else k)
        wr = np.swapaxes(w, -1, -2) if transpose_w else w
        if outputs == "swapped":
            return wr, out
        if outputs == "out-only":
            return out
        return out, wr

    return fn


def _m(mid, explanation, **settings):
    return Misconception(mid, explanation, (_attend_build(**settings),), settings)


_NO_FULL_ROW = ("fully-masked-nan", "mask-fill-finite")  # what a fully masked row gets
_ATTEND_IDS = (
    "softmax-over-queries", "softmax-sums-everything", "weights-not-normalized", "no-scaling",
    "scale-not-sqrt", "scale-sqrt-d-v", "scale-sqrt-seq-k", "scale-multiplied", "scale-wrong",
    "mask-after-softmax", "mask-multiplied", "mask-added", "mask-ignored", "mask-inverted",
    "fully-masked-nan", "mask-fill-finite", "keys-not-transposed", "batch-not-supported",
    "weights-transposed", "unstable-softmax", "global-max", "output-arity", "outputs-swapped",
    "blends-keys", "mask-not-broadcast",
)  # fmt: skip

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
        infer=infer_attend,
        build=_attend_build,
        exclusive=(
            # A fully masked query row only exists for a softmax over keys, with the mask
            # applied before it as -inf.
            *(
                frozenset({other, full})
                for full in _NO_FULL_ROW
                for other in (
                    "softmax-over-queries",
                    "softmax-sums-everything",
                    "weights-not-normalized",
                    "mask-after-softmax",
                    "mask-multiplied",
                    "mask-added",
                    "mask-ignored",
                )
            ),
            # Without exp(s - max) a -1e9 row is 0/0 (NaN), not uniform; with one max of
            # everything it underflows to 0.
            frozenset({"unstable-softmax", "mask-fill-finite"}),
            frozenset({"global-max", "mask-fill-finite"}),
            # Weights that are not normalised have no axis.
            frozenset({"weights-not-normalized", "softmax-over-queries"}),
            frozenset({"weights-not-normalized", "softmax-sums-everything"}),
            # A mask used as numbers (or not at all) has no direction to invert.
            *(
                frozenset({"mask-inverted", other})
                for other in ("mask-multiplied", "mask-added", "mask-ignored")
            ),
            # One max of everything is exactly right when everything is normalised together,
            # and is each column's max in the probe; "none" has no rows to compare.
            frozenset({"global-max", "softmax-sums-everything"}),
            frozenset({"global-max", "softmax-over-queries"}),
            # Weights not returned: their orientation cannot be seen.
            frozenset({"output-arity", "weights-transposed"}),
            frozenset({"output-arity", "outputs-swapped"}),
            frozenset({"output-arity", "blends-keys"}),
            # seq_k == d_k: the keys' output has the weights' shape, 1/√seq_k is 1/√d_k.
            frozenset({"keys-not-transposed", "blends-keys"}),
            frozenset({"keys-not-transposed", "scale-sqrt-seq-k"}),
            # Not normalised, the mask before or after the softmax look alike on a probe
            # whose allowed keys all score 0.
            frozenset({"weights-not-normalized", "mask-after-softmax"}),
            # Nothing batched runs with k.T, so no batched mask can be tried.
            frozenset({"batch-not-supported", "mask-not-broadcast"}),
            # A function that only runs when seq_q == seq_k can be measured no further.
            *(frozenset({"keepdims-missing", other}) for other in _ATTEND_IDS),
        ),
        misconceptions=(
            _m(
                "softmax-over-queries",
                "The softmax runs over the query axis (axis=-2), so each column sums to 1. "
                "A query distributes its attention over the keys: softmax over axis=-1.",
                axis=-2,
            ),
            _m(
                "softmax-sums-everything",
                "The exponentials are divided by the sum of the whole score matrix, so all "
                "queries together share one unit of attention. Each query row sums to 1 on "
                "its own: e.sum(axis=-1, keepdims=True).",
                axis="all",
            ),
            _m(
                "weights-not-normalized",
                "The exponentials are never divided by their row sum, so a query's weights do "
                "not sum to 1. Divide by e.sum(axis=-1, keepdims=True).",
                normalise=False,
            ),
            _m(
                "no-scaling",
                "The scores are not scaled. Multiply q @ kᵀ by 1/sqrt(d_k) (d_k = q.shape[-1]) "
                "before the softmax, or wide vectors make the softmax saturate.",
                scale="none",
            ),
            _m(
                "scale-not-sqrt",
                "The scores are divided by d_k instead of sqrt(d_k). The dot product of two "
                "random d_k-vectors has standard deviation sqrt(d_k), so divide by sqrt(d_k).",
                scale="d_k",
            ),
            _m(
                "scale-sqrt-d-v",
                "The scores are divided by √d_v, the width of the values. The scores compare "
                "queries with keys, whose width is d_k = q.shape[-1]: divide by √d_k.",
                scale="d_v",
            ),
            _m(
                "scale-sqrt-seq-k",
                "The scores are divided by √seq_k, the number of keys. The spread of q·k grows "
                "with the vectors' width d_k = q.shape[-1], not with how many keys there are: "
                "divide by √d_k.",
                scale="seq_k",
            ),
            _m(
                "scale-multiplied",
                "The scores are multiplied by √d_k instead of divided by it, which makes the "
                "softmax even sharper. Divide: q @ kᵀ / sqrt(d_k).",
                scale="mult",
            ),
            _m(
                "scale-wrong",
                "The scores are scaled by a number that is not 1/√d_k: a fixed constant from "
                "another example, or the size of another axis. Compute it from the input: "
                "1 / sqrt(q.shape[-1]).",
                scale="const8",
            ),
            _m(
                "mask-after-softmax",
                "The mask is applied after the softmax, so the kept weights no longer sum to 1 "
                "(they were normalised together with the blocked ones). Set blocked scores to "
                "-inf before the softmax.",
                mask_mode="after",
            ),
            _m(
                "mask-multiplied",
                "The boolean mask is multiplied into the scores. A blocked score then becomes "
                "0, and exp(0) = 1: the key still gets weight. Set blocked scores to -inf: "
                "np.where(mask, s, -np.inf).",
                mask_mode="multiplied",
            ),
            _m(
                "mask-added",
                "The boolean mask is added to the scores (True counts as 1), which only "
                "nudges them. A mask blocks: np.where(mask, s, -np.inf) before the softmax.",
                mask_mode="added",
            ),
            _m(
                "mask-ignored",
                "The mask argument is never used. Set the scores of blocked keys (mask False) "
                "to -inf before the softmax.",
                mask_mode="ignored",
            ),
            _m(
                "mask-inverted",
                "The mask is read the wrong way round. In this course True = may attend: keep "
                "scores where mask is True and set the others to -inf.",
                invert_mask=True,
            ),
            _m(
                "fully-masked-nan",
                "A query that may attend to no key gets NaN (its max is -inf, and "
                "-inf - (-inf) is NaN). Give such rows weight 0 and output 0: e.g. replace a "
                "-inf row max by 0 and divide by max(sum, tiny).",
                fill="nan",
            ),
            _m(
                "mask-fill-finite",
                "Blocked scores are set to a large negative number (like -1e9) instead of "
                "-inf. Partly masked rows come out right, but a query that may attend to no "
                "key gets uniform weights instead of 0. Use -inf and give rows with no allowed "
                "key weight 0 (replace a -inf row max by 0, divide by max(sum, tiny)).",
                fill="finite",
            ),
            _m(
                "keys-not-transposed",
                "k is not transposed: scores are q @ kᵀ, shape (..., seq_q, seq_k). Use "
                "np.swapaxes(k, -1, -2) (k.T reverses every axis of a batched array).",
                transpose_k=False,
            ),
            _m(
                "batch-not-supported",
                "Batched inputs (batch, seq, d) fail or mix. k.T reverses every axis (for 3-D "
                "k it gives (d_k, seq_k, batch)); use np.swapaxes(k, -1, -2) or "
                "k.transpose(-2, -1), and name axes from the end (axis=-1, shape[-1]).",
                transpose_k="T",
            ),
            _m(
                "weights-transposed",
                "The returned weights are transposed. Rows are queries and columns are keys: "
                "weights has shape (..., seq_q, seq_k).",
                transpose_w=True,
            ),
            _m(
                "unstable-softmax",
                "exp() of large scores overflows to inf and the weights become NaN. Subtract "
                "each row's max score before exp().",
                max_mode="none",
            ),
            _m(
                "global-max",
                "One maximum of the whole score array is subtracted before exp(). A row whose "
                "scores are all far below it gets exp() = 0 everywhere, and then 0/0. Subtract "
                "each row's own max: s.max(axis=-1, keepdims=True).",
                max_mode="global",
            ),
            _m(
                "output-arity",
                "attend returns two things, in this order: (out, weights) — out of shape "
                "(..., seq_q, d_v) and weights of shape (..., seq_q, seq_k).",
                outputs="out-only",
            ),
            _m(
                "outputs-swapped",
                "The two results come back in the wrong order. Return (out, weights): the "
                "blended values first, then the weights.",
                outputs="swapped",
            ),
            _m(
                "blends-keys",
                "The weights average the keys. Keys are what queries are compared with; the "
                "output blends the *values*: out = weights @ v.",
                blend="k",
            ),
            _m(
                "mask-not-broadcast",
                "Blocking with boolean indexing (s[~mask] = -np.inf) needs a mask of exactly "
                "the scores' shape, so a padding mask (batch, 1, seq_k) fails. "
                "np.where(mask, s, -np.inf) broadcasts the mask over the queries.",
                mask_mode="index",
            ),
            _m(
                "keepdims-missing",
                "A max or sum over the keys lost its axis: s.sum(axis=-1) has shape "
                "(..., seq_q), which lines up with the keys, not the queries, so it only runs "
                "when seq_q == seq_k (and is wrong there). Use keepdims=True.",
                keepdims=False,
            ),
        ),
    )
)
