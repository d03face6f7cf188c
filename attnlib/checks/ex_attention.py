"""Exercises on the attention core: softmax, attend, causal_mask, padding_mask.

Inputs are numpy float64 arrays (the lessons build these functions in numpy first).
Shapes are deliberately non-square (seq_q ≠ seq_k ≠ d_k ≠ d_v) so that a transposed
matrix cannot pass by accident; one case has seq_k == d_k so that a missing transpose of
k runs and can be recognised.

When a function is wrong, each exercise's ``infer`` measures it on probes (see
:mod:`attnlib.checks._core`): for softmax and attend, which axis the weights sum to 1
over, the multiplier the scores were scaled by (a fit of log-weights against the raw
scores), what blocked keys and fully masked rows get, which rows break on huge scores,
and whether a batch gives what its elements give one at a time; for the masks, the
pattern and dtype returned.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import (
    close,
    fmt,
    log_fit,
    name_factor,
    normalisation,
    tolerance,
    tolerances,
)
from attnlib.core import attend as _attend
from attnlib.core import softmax as _softmax
from attnlib.masks import causal_mask as _causal_mask
from attnlib.masks import padding_mask as _padding_mask

# ----------------------------------------------------------------------------------------
# Shared by softmax and attend: probes of the score -> weight map.
# ----------------------------------------------------------------------------------------


def _bad_rows(w: np.ndarray) -> list[int]:
    """Rows (last-but-one axis, first matrix) that are not finite or are entirely zero."""
    w2 = w.reshape(-1, *w.shape[-2:])[0] if w.ndim >= 2 else w[None]
    return [i for i in range(w2.shape[0]) if not np.isfinite(w2[i]).all() or not w2[i].any()]


def _stability_finding(w: np.ndarray, axis: str, where: str) -> Finding | None:
    """Read the weights of a probe whose row 0 has huge positive scores (~2e4), row 2 huge
    negative ones, rows 1 and 3 ordinary ones: which rows broke says how the softmax was
    made stable (or not)."""
    bad = _bad_rows(w)
    if axis == "queries":  # columns are normalised: rows of zeros are expected there
        bad = [] if np.isfinite(w).all() else bad
    if not bad:
        return None
    if axis == "queries" or 0 in bad:
        return Finding(
            "unstable-softmax",
            f"{where} whose scores reach ±2e4, the weights come out NaN or inf (rows {bad}): "
            "exp() overflowed, so the largest score was not subtracted before exp().",
        )
    if 1 in bad or 3 in bad:
        return Finding(
            "global-max",
            f"{where} with one row of huge scores (2e4), that row is fine but the rows of "
            f"ordinary scores get NaN or all-zero weights (rows {bad}): one maximum of the "
            "whole array was subtracted, so exp() underflows to 0 in every row far below it.",
        )
    return None


def _axis_findings(axis: str, w: np.ndarray, where: str, *, softmax_ids: bool) -> list[Finding]:
    wrong_axis = "softmax-wrong-axis" if softmax_ids else "softmax-over-queries"
    if axis == "queries":
        cols = np.round(w.reshape(-1, *w.shape[-2:])[0].sum(axis=-2), 4).tolist()
        return [
            Finding(
                wrong_axis,
                f"on {where} each column sums to 1 ({cols[:4]}...), the rows do not: the "
                "softmax ran over the query axis (axis=-2 or axis=0).",
            )
        ]
    if axis == "all":
        return [
            Finding(
                "softmax-sums-everything",
                f"on {where} the weights of all rows together sum to 1 "
                f"(total {fmt(float(w.reshape(-1, *w.shape[-2:])[0].sum()))}), "
                "not each row on its own.",
            )
        ]
    if axis == "none":
        rows = np.round(w.reshape(-1, w.shape[-1]).sum(axis=-1), 3).tolist()
        return [
            Finding(
                "weights-not-normalized",
                f"on {where} the rows sum to {rows[:4]}, not 1, and neither do the columns: "
                "the exponentials were not divided by their sum.",
            )
        ]
    return []


def _fit_any(w: np.ndarray, scores: list[tuple[str, np.ndarray]], axis: str):
    """The best (score name, multiplier, residual) explaining log w for this axis."""
    modes = {"keys": ["row"], "queries": ["col"], "all": ["all", "row"], "none": ["row", "col"]}
    modes = modes[axis]
    best = None
    for name, sc in scores:
        for mode in modes:
            c, res = log_fit(w, sc, mode)
            if best is None or res < best[2]:
                best = (name, c, res)
    return best


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
    fit = _fit_any(w, [("x", _SM_MAIN)], axis)
    if fit[2] > 1e-4 or not fit[1] > 0:
        return found  # not exponentials of the input: nothing here to recognise
    found += _axis_findings(axis, w, "4 x 5 scores", softmax_ids=True)
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
        found += _axis_findings(axis3, w3, "a 3-D input (2, 4, 5)", softmax_ids=True)
    ol = learner(_SM_LARGE.copy())
    wl = ol.array(0) if ol.ok and ol.arity == 1 else None
    if wl is not None and wl.shape == _SM_LARGE.shape and wl.dtype != bool:
        f = _stability_finding(wl, axis, "On a 4 x 5 input")
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


# Probe sizes (seq_q, seq_k, d_k, d_v): every size different, so that each candidate
# scale (1/√d_k, 1/√d_v, 1/√seq_k, ...) is a different number; the square one (seq_k ==
# d_k) lets "k not transposed" run.
_MAIN = (4, 5, 16, 8)
_SQUARE = (4, 6, 6, 9)


def _probe(sizes, seed, *, batch=(), big=False, zero_q=False):
    """q, k, v for a probe. v = [identity | noise], so out[..., :seq_k] are the weights."""
    seq_q, seq_k, d_k, d_v = sizes
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*batch, seq_q, d_k)) * 0.5
    k = rng.standard_normal((*batch, seq_k, d_k)) * 0.5
    if big:  # row 0 scores ~ +2e4, row 2 ~ -2e4, rows 1 and 3 ordinary (also for q @ k)
        k[..., :, 0] = 1.0
        if seq_k == d_k:
            k[..., 0, :] = 1.0
        q[..., :, 0] = 0.0
        q[..., 0, 0] = 2e4
        q[..., 2, 0] = -2e4
    if zero_q:
        q = np.zeros_like(q)
    eye = np.broadcast_to(np.eye(seq_k), (*batch, seq_k, seq_k))
    v = np.concatenate([eye, rng.standard_normal((*batch, seq_k, d_v - seq_k))], axis=-1)
    return q, k, v


def _probe_mask(seq_k: int) -> np.ndarray:
    """Rows: partial, fully blocked, fully open, partial; no column is all True or False."""
    rows = {
        5: [[1, 0, 1, 0, 1], [0] * 5, [1] * 5, [0, 1, 1, 0, 0]],
        6: [[1, 0, 1, 0, 1, 0], [0] * 6, [1] * 6, [0, 1, 1, 0, 0, 1]],
    }[seq_k]
    return np.array(rows, dtype=bool)


def _read_attention(o, q, k, v):
    """(weights, out, structure findings) of an attend outcome; weights put upright.

    Parts are told apart by shape (every probe size differs). When only ``out`` comes
    back, the weights are read from it (v starts with an identity).
    """
    if not o.ok:
        return None, None, []
    seq_q, seq_k, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    lead = q.shape[:-2]
    shapes = [
        ("out", (*lead, seq_q, d_v)),
        ("w", (*lead, seq_q, seq_k)),
        ("wT", (*lead, seq_k, seq_q)),
        ("outk", (*lead, seq_q, d_k)),
    ]
    kinds = []
    for part in o.parts:
        kind = None
        if part is not None and part.dtype != bool:
            kind = next((name for name, shp in shapes if part.shape == shp), None)
        kinds.append(kind)
    # An output of the keys' width counts only if it is the weights times k.
    ws = [i for i, kd in enumerate(kinds) if kd in ("w", "wT")]
    for i, kd in enumerate(kinds):
        if kd == "outk":
            w0 = None if not ws else o.parts[ws[0]]
            if w0 is not None and kinds[ws[0]] == "wT":
                w0 = np.swapaxes(w0, -1, -2)
            rel, abs_ = tolerances(o.eps)
            if w0 is None or not close(o.parts[i], w0 @ k, rel=rel, abs_=abs_):
                kinds[i] = None
    outs = [i for i, kd in enumerate(kinds) if kd in ("out", "outk")]
    ws = [i for i, kd in enumerate(kinds) if kd in ("w", "wT")]
    found = []
    if len(o.parts) == 2 and len(outs) == 1 and len(ws) == 1:
        if outs[0] == 1:
            found.append(
                Finding(
                    "outputs-swapped",
                    f"the first value returned has shape {o.parts[0].shape} (seq_q, seq_k): "
                    "the weights; the second is the output.",
                )
            )
    elif outs or ws:
        shown = ", ".join(
            str(p.shape) if p is not None else type(x).__name__
            for p, x in zip(
                o.parts, o.value if isinstance(o.value, (tuple, list)) else [o.value], strict=True
            )
        )
        found.append(
            Finding(
                "output-arity",
                f"your function returns {len(o.parts)} value(s) ({shown}); expected two: "
                f"out {(*lead, seq_q, d_v)} and weights {(*lead, seq_q, seq_k)}.",
            )
        )
    else:
        return None, None, []
    out = o.parts[outs[0]] if outs else None
    w = o.parts[ws[0]] if ws else None
    if w is not None and kinds[ws[0]] == "wT":
        found.append(
            Finding(
                "weights-transposed",
                f"the weights come back with shape {w.shape}: (seq_k, seq_q) = ({seq_k}, "
                f"{seq_q}) instead of (seq_q, seq_k).",
            )
        )
        w = np.swapaxes(w, -1, -2)
    if out is not None and kinds[outs[0]] == "outk":
        found.append(
            Finding(
                "blends-keys",
                f"the output has shape {out.shape}: (..., seq_q, d_k) with d_k = {d_k}, "
                f"d_v = {d_v} — the weights averaged the keys, not the values.",
            )
        )
    if w is None and out is not None and kinds[outs[0]] == "out":
        w = out[..., :seq_k]
    return w, out, found


def _scale_candidates(sizes, batch=None):
    seq_q, seq_k, d_k, d_v = sizes
    cands = [
        (d_k**-0.5, f"1/√{d_k} = 1/√d_k", ""),
        (1.0, "1 (not scaled)", "no-scaling"),
        (1 / d_k, f"1/{d_k} = 1/d_k", "scale-not-sqrt"),
        (d_v**-0.5, f"1/√{d_v} = 1/√d_v", "scale-sqrt-d-v"),
        (seq_k**-0.5, f"1/√{seq_k} = 1/√seq_k", "scale-sqrt-seq-k"),
        (d_k**0.5, f"√{d_k} = √d_k", "scale-multiplied"),
        (seq_q**-0.5, f"1/√{seq_q} = 1/√seq_q", "scale-wrong"),
    ]
    if batch:
        cands.append((batch**-0.5, f"1/√{batch} = 1/√batch", "scale-wrong"))
    return [(c, (label if c == 1.0 else f"{fmt(c)} = {label}"), mid) for c, label, mid in cands]


_SCALE_HINT = {
    "no-scaling": "the scores are not scaled at all",
    "scale-not-sqrt": "you may be dividing by d_k instead of √d_k",
    "scale-sqrt-d-v": "you may be dividing by √d_v (v.shape[-1]) instead of √d_k",
    "scale-sqrt-seq-k": "you may be dividing by √seq_k (k.shape[-2] or len(k)) instead of √d_k",
    "scale-multiplied": "you may be multiplying by √d_k instead of dividing",
}


def _scale_finding(c: float, sizes, where: str, batch=None) -> Finding | None:
    seq_q, seq_k, d_k, d_v = sizes
    named = name_factor(c, _scale_candidates(sizes, batch))
    if named is not None and named[1] == "":
        return None
    dims = f"this probe has d_k = {d_k}, d_v = {d_v}, seq_q = {seq_q}, seq_k = {seq_k}"
    if batch:
        dims += f", batch = {batch}"
    measured = f"on {where} your weights behave as if the scores q·k were multiplied by"
    if named is None:
        return Finding(
            "scale-wrong",
            f"{measured} {fmt(c)}; {dims}, so 1/√d_k = {fmt(d_k**-0.5)}: that multiplier is "
            "none of the usual ones (a fixed number, or the size of another axis).",
        )
    label, mid = named
    if mid == "scale-wrong":
        hint = "q.shape[0], len(q) or a fixed axis index picks the wrong dimension"
        return Finding(mid, f"{measured} {label}; {dims}: {hint}. Use q.shape[-1].")
    return Finding(mid, f"{measured} {label}; {dims}: {_SCALE_HINT[mid]}.")


def _scores_findings(w, q, k, sizes, eps, where, *, square, batch=None):
    """Axis, transposition and scale of the weights of an unmasked probe."""
    axis = normalisation(w, tolerance(eps))
    if axis == "nan":
        return axis, []
    scores = [("T", q @ np.swapaxes(k, -1, -2))]
    if square:
        scores.append(("N", q @ k))
    name, c, res = _fit_any(w, scores, axis)
    if res > 1e-4 or not c > 0:
        return "nan", []  # not a softmax of the scores: nothing here to recognise
    found = _axis_findings(axis, w, where, softmax_ids=False)
    if name == "N":
        found.append(
            Finding(
                "keys-not-transposed",
                f"with k of shape {k.shape[-2:]} (seq_k == d_k) your weights follow q @ k, "
                "not q @ kᵀ; with seq_k ≠ d_k your function raises.",
            )
        )
    f = _scale_finding(c, sizes, where, batch)
    if f is not None:
        found.append(f)
    return axis, found


def _mask_findings(learner, sizes, axis) -> list[Finding]:
    """What the mask does: blocks (before or after the softmax), inverted, used as numbers,
    ignored; and what a fully masked row gets."""
    seq_q, seq_k, d_k, d_v = sizes
    M = _probe_mask(seq_k)

    def ordinary_weights():
        """The weights for ordinary scores with the mask M, and with no mask at all."""
        q1, k1, v1 = _probe(sizes, 3)
        w1, _, _ = _read_attention(learner(q1, k1, v1, mask=M.copy()), q1, k1, v1)
        u1, _, _ = _read_attention(learner(q1, k1, v1), q1, k1, v1)
        return w1, u1

    q, k, v = _probe(sizes, 2, zero_q=True)  # every score 0, whatever the scale
    w, _, _ = _read_attention(learner(q, k, v, mask=M.copy()), q, k, v)
    if w is None:
        return []
    part = [0, 3]
    wp, Mp = w[part], M[part]
    if not np.isfinite(wp).all():
        return []
    tiny = 1e-8 * float(wp.max()) if wp.max() > 0 else 0.0
    blocked_small = bool((wp[~Mp] <= tiny).all()) and bool((wp[Mp] > tiny).all())
    inv_small = bool((wp[Mp] <= tiny).all()) and bool((wp[~Mp] > tiny).all())
    found = []
    if not (blocked_small or inv_small):
        ratio = float(wp[Mp].mean() / max(float(wp[~Mp].mean()), 1e-300))
        if abs(ratio - 1.0) > 1e-6:
            return [
                Finding(
                    "mask-added",
                    "with every score 0, keys the mask allows get "
                    f"{fmt(ratio)} times the weight of blocked ones, and blocked keys keep a "
                    "weight: the mask's 0/1 values were added to the scores.",
                )
            ]
        w1, u1 = ordinary_weights()
        if w1 is None or u1 is None:
            return []
        if close(w1, u1, rel=1e-9, abs_=1e-12):
            return [
                Finding(
                    "mask-ignored",
                    "the weights with a mask are the same as without it: blocked keys get "
                    "weight, and a fully masked query still attends to every key.",
                )
            ]
        return [
            Finding(
                "mask-multiplied",
                "with every score 0, blocked and allowed keys get the same weight; with "
                "ordinary scores the blocked keys still get weight: their scores became 0 "
                "(multiplied by the mask, or filled with 0), and exp(0) = 1.",
            )
        ]
    eff = M if blocked_small else ~M
    if inv_small:
        found.append(
            Finding(
                "mask-inverted",
                "keys where the mask is True get weight 0 and keys where it is False get all "
                "of it: the mask was read as True = blocked.",
            )
        )
    if blocked_small and not bool((wp[~Mp] == 0).all()):
        found.append(
            Finding(
                "mask-fill-finite",
                f"blocked keys get weight {fmt(float(wp[~Mp].max()))} instead of exactly 0: "
                "the blocked scores were set to a finite number, not -inf.",
            )
        )
    # Before or after the softmax: ordinary scores, compared with no mask at all.
    w1, u1 = ordinary_weights()
    if w1 is None or u1 is None:
        return found
    e1 = eff[part]
    # (Unnormalised weights carry no trace of when the mask was applied.)
    after = axis != "none" and np.isfinite(w1[part]).all()
    if after and close(w1[part][e1], u1[part][e1], rel=1e-6, abs_=1e-12):
        sums = np.round(w1[part].sum(axis=-1), 3).tolist()
        found.append(
            Finding(
                "mask-after-softmax",
                f"the allowed keys keep exactly the weights they have without a mask, so "
                f"the partly masked rows sum to {sums}, not 1: the mask was applied after "
                "the softmax.",
            )
        )
        return found
    if axis != "keys":
        return found
    r = 1 if blocked_small else 2  # the row with nothing allowed (after inversion)
    row = w[r]
    which = "the row with no allowed key" + (" (the all-True row, inverted)" if inv_small else "")
    if not np.isfinite(row).all():
        found.append(
            Finding(
                "fully-masked-nan",
                f"{which} gets NaN weights (its largest score is -inf, and -inf - (-inf) or "
                "0/0 is NaN).",
            )
        )
    elif close(row, np.full(seq_k, 1 / seq_k), rel=1e-6):
        found.append(
            Finding(
                "mask-fill-finite",
                f"{which} gets uniform weights 1/{seq_k} instead of 0: blocked scores were "
                "set to a finite number (like -1e9), so a row with every key blocked is a "
                "softmax of equal numbers.",
            )
        )
    return found


_AXIS_IDS = {"softmax-over-queries", "softmax-sums-everything", "weights-not-normalized"}
_SCALE_IDS = {
    "no-scaling", "scale-not-sqrt", "scale-sqrt-d-v", "scale-sqrt-seq-k", "scale-multiplied",
    "scale-wrong",
}  # fmt: skip


def _mask_broadcast_findings(learner, sizes) -> list[Finding]:
    """A padding mask (batch, 1, seq_k) must broadcast over the queries."""
    seq_q, seq_k, d_k, d_v = sizes
    qs, ks, vs = zip(_probe(sizes, 6), _probe(sizes, 7), strict=True)
    q, k, v = (np.stack(x) for x in (qs, ks, vs))
    pad = np.ones((2, 1, seq_k), dtype=bool)
    pad[1, 0, -2:] = False
    o = learner(q, k, v, mask=pad.copy())
    if o.ok:
        return []
    full = learner(q, k, v, mask=np.broadcast_to(pad, (2, seq_q, seq_k)).copy())
    if not full.ok:
        return []
    return [
        Finding(
            "mask-not-broadcast",
            f"a mask of shape (batch, seq_q, seq_k) = (2, {seq_q}, {seq_k}) works, but the "
            f"padding mask (batch, 1, seq_k) = (2, 1, {seq_k}) raises: {o.error()[:120]}.",
        )
    ]


def _batch_findings(learner, sizes, base, square, known: set[str]) -> list[Finding]:
    """A batch of two probes against the same two probes one at a time.

    ``known`` are the ids the 2-D probes found: a batch that differs because of them (a
    fixed axis=0 is the query axis in 2-D and the batch axis in 3-D) adds nothing.
    """
    q0, k0, v0 = _probe(sizes, 1)
    q1, k1, v1 = _probe(sizes, 5)
    qb, kb, vb = (np.stack(p) for p in ((q0, q1), (k0, k1), (v0, v1)))
    ob = learner(qb, kb, vb)
    if not ob.ok:
        return [
            Finding(
                "batch-not-supported",
                f"your function works on 2-D q, k, v but raises on a batch (2, "
                f"{sizes[0]}, {sizes[2]}): {ob.error()}. k.T reverses *every* axis of a "
                "3-D array; swap the last two only.",
            )
        ]
    o1 = learner(q1, k1, v1)
    if not o1.ok or ob.arity != base.arity or o1.arity != base.arity:
        return []
    consistent = all(
        pb is not None
        and p0 is not None
        and p1 is not None
        and pb.shape[1:] == p0.shape
        and close(pb[0], p0, rel=1e-6, abs_=1e-12)
        and close(pb[1], p1, rel=1e-6, abs_=1e-12)
        for pb, p0, p1 in zip(ob.parts, base.parts, o1.parts, strict=True)
    )
    if consistent:
        return []
    wb, _, _ = _read_attention(ob, qb, kb, vb)
    found = []
    if wb is not None:
        _, found = _scores_findings(
            wb, qb, kb, sizes, ob.eps, "a batch of 2 (3-D inputs)", square=square, batch=2
        )
    for group in (_AXIS_IDS, _SCALE_IDS):
        if known & group:
            found = [f for f in found if f.id not in group]
    if known & (_AXIS_IDS | _SCALE_IDS):
        return found
    if not found:
        found = [
            Finding(
                "batch-not-supported",
                "a batch of two gives different results than the same two inputs one at a "
                "time: some step mixes the batch axis (k.T, a fixed axis=0/1, q.shape[0]).",
            )
        ]
    return found


def _infer_attend(learner) -> list[Finding]:
    sizes, square = _MAIN, False
    q, k, v = _probe(sizes, 1)
    o = learner(q, k, v)
    if not o.ok:
        sizes, square = _SQUARE, True
        q, k, v = _probe(sizes, 1)
        o = learner(q, k, v)
        if not o.ok:
            qs, ks, vs = _probe((5, 5, 16, 8), 1)  # seq_q == seq_k
            os_ = learner(qs, ks, vs)
            if os_.ok:
                return [
                    Finding(
                        "keepdims-missing",
                        "your function raises when seq_q ≠ seq_k (4 queries, 5 keys: "
                        f"{o.error()[:120]}) and runs only when they are equal: a max or sum "
                        "over the keys lost its axis.",
                    )
                ]
            return []
    w, _, found = _read_attention(o, q, k, v)
    if w is None:
        return found
    where = f"a {sizes[0]} x {sizes[1]} probe"
    axis, scored = _scores_findings(w, q, k, sizes, o.eps, where, square=square)
    found += scored
    if axis == "nan":
        return found
    found += _mask_findings(learner, sizes, axis)
    qb, kb, vb = _probe(sizes, 4, big=True)
    wl, _, _ = _read_attention(learner(qb, kb, vb), qb, kb, vb)
    if wl is not None:
        f = _stability_finding(wl, axis, "On a probe")
        if f is not None:
            found.append(f)
    found += _mask_broadcast_findings(learner, sizes)
    found += _batch_findings(learner, sizes, o, square, {f.id for f in found})
    return found


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
        infer=_infer_attend,
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


# ----------------------------------------------------------------------------------------
# causal_mask(seq) -> bool (seq, seq), True = may attend
# ----------------------------------------------------------------------------------------


def _causal_cases() -> list[Case]:
    return [Case(f"seq={n}", (n,)) for n in (1, 4, 7)]


def _causal_hidden_cases() -> list[Case]:
    # sizes drawn: the grader's per-run seed changes them (checks._core.hidden_seed)
    sizes = np.random.default_rng(1172).integers(2, 17, size=3)
    return [Case(f"hidden: seq={n}", (n,)) for n in map(int, sizes)]


def _causal_build(*, pattern="tril", dtype="bool"):
    """A causal mask: ``pattern`` "tril" (right), "strict" (tril k=-1), "triu0", "triu1";
    ``dtype`` "bool" or "float" (0/1)."""

    def fn(seq):
        ones = np.ones((seq, seq), dtype=bool)
        m = {
            "tril": np.tril(ones),
            "strict": np.tril(ones, k=-1),
            "triu0": np.triu(ones),
            "triu1": np.triu(ones, k=1),
        }[pattern]
        return m if dtype == "bool" else m.astype(np.float64)

    return fn


def _mask_values(o, i: int = 0):
    """(allowed as bool, what the numbers were) of a returned mask; (None, "") if unreadable.

    Booleans are read as they are; 0/1 numbers as nonzero = allowed; an additive float
    mask (0 where allowed, -inf or a huge negative number where blocked) as 0 = allowed.
    """
    a = o.array(i)
    if a is None:
        return None, ""
    if a.dtype == bool:
        return a, ""
    raw = o.parts[i] if not isinstance(o.value, (tuple, list)) else o.value[i]
    kind = str(getattr(raw, "dtype", "numbers"))
    if np.isin(a, (0.0, 1.0)).all():
        return a != 0, f"{kind} 0/1 numbers"
    if ((a == 0) | (a <= -1e4)).all() and (a == 0).any():
        lowest = fmt(float(a.min()))
        return a == 0, f"an additive {kind} mask (0 where allowed, {lowest} where blocked)"
    return None, ""


def _not_boolean(what: str) -> Finding:
    return Finding(
        "mask-not-boolean",
        f"the mask is {what}, not booleans (dtype bool, True = may attend).",
    )


def _infer_causal(learner) -> list[Finding]:
    seq = 6
    o = learner(seq)
    if not o.ok or o.arity != 1:
        return []
    allowed, what = _mask_values(o)
    if allowed is None or allowed.shape != (seq, seq):
        return []
    found = [_not_boolean(what)] if what else []
    ones = np.ones((seq, seq), dtype=bool)
    if np.array_equal(allowed, np.tril(ones, k=-1)):
        found.append(
            Finding(
                "causal-diagonal-excluded",
                f"for seq = {seq} the diagonal is False: query i sees keys 0..i-1 and query 0 "
                "sees nothing.",
            )
        )
    elif np.array_equal(allowed, np.triu(ones)) or np.array_equal(allowed, np.triu(ones, k=1)):
        found.append(
            Finding(
                "causal-inverted",
                f"for seq = {seq} the True entries are above the diagonal: each query sees "
                "the keys after it (the convention of masks where True = blocked).",
            )
        )
    return found


register(
    Exercise(
        name="causal_mask",
        summary="causal_mask(seq) -> bool (seq, seq): query i may attend to keys 0..i",
        reference=lambda seq: _causal_mask(seq),
        make_cases=_causal_cases,
        make_hidden_cases=_causal_hidden_cases,
        exact=True,
        forbidden=("attnlib.masks.causal_mask",),
        infer=_infer_causal,
        build=_causal_build,
        misconceptions=(
            Misconception(
                "causal-inverted",
                "The mask lets each query see the future and hides the past. Query i (row) may "
                "attend to key j (column) when j <= i: the lower triangle, np.tril.",
                (
                    lambda seq: ~_causal_mask(seq),
                    lambda seq: np.triu(np.ones((seq, seq), dtype=bool)),
                ),
                {"pattern": "triu1"},
            ),
            Misconception(
                "causal-diagonal-excluded",
                "The diagonal is blocked, so a token cannot attend to itself (and the first "
                "token attends to nothing). Use j <= i, not j < i.",
                (_causal_build(pattern="strict"),),
                {"pattern": "strict"},
            ),
            Misconception(
                "mask-not-boolean",
                "The mask is numbers, not booleans. A float 0/1 mask is easily added to the "
                "scores, which blocks nothing; return dtype bool (True = may attend).",
                (lambda seq: _causal_mask(seq).astype(np.float64),),
                {"dtype": "float"},
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
    # lengths and seq_k drawn: the grader's per-run seed changes them (checks._core.hidden_seed)
    rng = np.random.default_rng(1304)
    cases = []
    for batch in (4, 1):
        seq_k = int(rng.integers(2, 13))
        lengths = [int(n) for n in rng.integers(1, seq_k + 1, size=batch)]
        cases.append(Case(f"hidden: lengths {lengths}, seq_k={seq_k}", (lengths, seq_k)))
    return cases


def _pad_base(lengths, seq_k):
    return np.arange(seq_k)[None, :] < np.asarray(lengths)[:, None]  # (batch, seq_k)


def _pad_build(*, layout="key", invert=False, offset=0, dtype="bool"):
    """A padding mask: ``layout`` "key" (batch, 1, seq_k), "query" (batch, seq_k, 1) or
    "flat" (batch, seq_k); ``invert``; ``offset`` added to the lengths; ``dtype`` "bool"
    or "int"."""

    def fn(lengths, seq_k):
        m = np.arange(seq_k)[None, :] < np.asarray(lengths)[:, None] + offset
        m = ~m if invert else m
        m = {"key": m[:, None, :], "query": m[:, :, None], "flat": m}[layout]
        return m if dtype == "bool" else m.astype(np.int64)

    return fn


def _infer_padding(learner) -> list[Finding]:
    lengths, seq_k = [2, 5, 0, 3], 5
    o = learner(list(lengths), seq_k)
    if not o.ok or o.arity != 1:
        return []
    allowed, what = _mask_values(o)
    if allowed is None:
        return []
    found = [_not_boolean(what)] if what else []
    batch = len(lengths)
    if allowed.shape == (batch, seq_k, 1):
        found.append(
            Finding(
                "padding-on-query-axis",
                f"for lengths {lengths} and seq_k = {seq_k} the mask has shape "
                f"{allowed.shape} = (batch, seq_k, 1).",
            )
        )
    elif allowed.shape == (batch, seq_k):
        found.append(
            Finding(
                "padding-missing-query-axis",
                f"for lengths {lengths} and seq_k = {seq_k} the mask has shape "
                f"{allowed.shape} = (batch, seq_k).",
            )
        )
    elif allowed.shape != (batch, 1, seq_k):
        return found
    flat = allowed.reshape(batch, seq_k)
    pos, L = np.arange(seq_k)[None, :], np.asarray(lengths)[:, None]
    for offset in (0, 1, -1):
        real = pos < L + offset
        for inverted in (False, True):
            if np.array_equal(flat, ~real if inverted else real):
                if inverted:
                    found.append(
                        Finding(
                            "padding-inverted",
                            f"for lengths {lengths} the pads are True and the real tokens False.",
                        )
                    )
                if offset:
                    n = "one more" if offset > 0 else "one fewer"
                    note = " (read through the inversion)" if inverted else ""
                    found.append(
                        Finding(
                            "padding-off-by-one",
                            f"for lengths {lengths} each sequence has {n} real position "
                            f"than its length{note}.",
                        )
                    )
                return found
    return found


register(
    Exercise(
        name="padding_mask",
        summary="padding_mask(lengths, seq_k) -> bool (batch, 1, seq_k): True = real token",
        reference=lambda lengths, seq_k: _padding_mask(lengths, seq_k),
        make_cases=_padding_cases,
        make_hidden_cases=_padding_hidden_cases,
        exact=True,
        forbidden=("attnlib.masks.padding_mask",),
        infer=_infer_padding,
        build=_pad_build,
        misconceptions=(
            Misconception(
                "padding-inverted",
                "True marks the padding instead of the real tokens. In this course True = may "
                "attend, so real positions (index < length) are True.",
                (lambda lengths, seq_k: ~_pad_base(lengths, seq_k)[:, None, :],),
                {"invert": True},
            ),
            Misconception(
                "padding-on-query-axis",
                "The mask has shape (batch, seq_k, 1): it blocks query rows, not key columns. "
                "Padding is about keys — nobody should attend to a pad — so the key axis is "
                "last: (batch, 1, seq_k).",
                (lambda lengths, seq_k: _pad_base(lengths, seq_k)[:, :, None],),
                {"layout": "query"},
            ),
            Misconception(
                "padding-missing-query-axis",
                "The mask has shape (batch, seq_k). Against scores of shape (batch, seq_q, "
                "seq_k) it would line up with (seq_q, seq_k), not with the batch. Insert the "
                "query axis: mask[:, None, :].",
                (lambda lengths, seq_k: _pad_base(lengths, seq_k),),
                {"layout": "flat"},
            ),
            Misconception(
                "padding-off-by-one",
                "One position too many (or too few) is marked real. Position p is real when "
                "p < length (positions count from 0).",
                (_pad_build(offset=1), _pad_build(offset=-1)),
                {"offset": 1},
            ),
            Misconception(
                "mask-not-boolean",
                "The mask is numbers, not booleans: a 0/1 mask is easily added to or "
                "multiplied into the scores, which does not block. Return dtype bool "
                "(True = real token): np.arange(seq_k) < lengths[:, None] is already boolean.",
                (_pad_build(dtype="int"),),
                {"dtype": "int"},
            ),
        ),
    )
)
