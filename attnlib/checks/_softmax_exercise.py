"""Lesson 03's softmax exercise: its cases, its build of choices, its misconceptions and
its inference. Registered when :mod:`attnlib.checks.ex_attention` imports it (before
attend, as always); attend's probes and the ones the two share live in
:mod:`attnlib.checks._attention_probes`.

Inputs are numpy float64 arrays. When the function is wrong, :func:`_infer_softmax`
measures, on probes, which axis the weights sum to 1 over, the multiplier the input was
scaled by (a fit of log-weights against the input), which rows break on huge scores, and
on rows with one score far below or far above the rest (the shift a row was given).
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._attention_probes import (
    axis_findings,
    fit_any,
    shift_findings,
    stability_finding,
)
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt, normalisation, tolerance
from attnlib.core import softmax as _softmax

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
    the normalised axis, the last one for "all"), "none", "global", "min" or "mean" (the
    smallest score along that axis, or the mean, instead of the largest); ``scale``: None or
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
        elif max_mode == "min":
            m = x.min(axis=max_ax, keepdims=keepdims)
        elif max_mode == "mean":
            m = x.mean(axis=max_ax, keepdims=keepdims)
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


def _outliers(score: float) -> np.ndarray:
    """(4, 5) ordinary rows; rows 0 and 3 each with one score ``score`` (and 0.75 of it)."""
    x = np.array(
        [
            [0.5, 0.0, 1.0, 0.2, -1.0],
            [0.3, -1.2, 2.0, 0.7, -0.4],
            [1.5, 0.1, -0.8, -2.1, 0.9],
            [-0.6, 1.1, 0.4, 1.8, 0.0],
        ]
    )
    x[0, 1], x[3, 4] = score, 0.75 * score
    return x


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
        elif np.isfinite(wl).all():
            found += shift_findings(lambda score: _broken_rows(learner, score), "On a 4 x 5 input")
    return found


def _broken_rows(learner, score: float) -> list[int] | None:
    """The rows of the outlier probe :func:`_outliers` (``score``) whose weights are NaN or
    inf; None when the probe cannot be read."""
    probe = _outliers(score)
    o = learner(probe.copy())
    w = o.array(0) if o.ok and o.arity == 1 else None
    if w is None or w.shape != probe.shape or w.dtype == bool:
        return None
    return [i for i in range(4) if not np.isfinite(w[i]).all()]


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
            # each column's minimum or mean: the huge-score probe overflows first
            frozenset({"shift-by-min", "softmax-wrong-axis"}),
            frozenset({"shift-by-mean", "softmax-wrong-axis"}),
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
                    "shift-by-min",
                    "shift-by-mean",
                )
            ),  # fmt: skip
        ),
        misconceptions=(
            Misconception(
                "unstable-softmax",
                "The scores go into the exponential as they are. Above about 709.78 (float64) "
                "the exponential overflows to infinity, and infinity divided by infinity is "
                "NaN. Shifting a row by a constant changes nothing in its weights; the shift "
                "that keeps every exponent at or below 0 is the row's own maximum.",
                (_softmax_build(max_mode="none"),),
                {"max_mode": "none"},
                question="Which rows of your weights are NaN, and how large are their "
                "scores? What does the exponential of 2e4 give in float64, and which shift "
                "of such a row keeps every exponent small?",
            ),
            Misconception(
                "global-max",
                "One shift serves the whole array: its overall maximum. A row whose scores "
                "all lie far below that maximum gets exponentials that underflow to 0 "
                "everywhere, and 0 divided by 0 is NaN. Each row needs its own shift, its own "
                "maximum.",
                (_softmax_build(max_mode="global"),),
                {"max_mode": "global"},
                question="The row of huge scores comes out right and the ordinary rows do "
                "not. What constant did you subtract from an ordinary row, and what are its "
                "exponentials after that shift?",
            ),
            Misconception(
                "shift-by-min",
                "Each row is shifted by its smallest score. Every exponent is then 0 or "
                "above, so a row whose scores spread over more than about 709 (or a row with "
                "a masked score of minus infinity) overflows to infinity, and the weights "
                "become NaN. The shift that keeps every exponent at or below 0 is the row's "
                "largest score.",
                (_softmax_build(max_mode="min"),),
                {"max_mode": "min"},
                question="After your shift, what is the largest exponent in a row whose "
                "scores run from -2000 to 1? Which shift of that row keeps every exponent at "
                "or below 0?",
            ),
            Misconception(
                "shift-by-mean",
                "Each row is shifted by its mean score. That keeps most exponents small, but a "
                "row with one score far above the others still leaves that score hundreds above "
                "0 after the shift, and its exponential overflows to infinity. Only the row's "
                "largest score guarantees every exponent at or below 0.",
                (_softmax_build(max_mode="mean"),),
                {"max_mode": "mean"},
                question=(
                    "Your weights break on a row with one score far above the rest. What is "
                    "that score's exponent after your shift? Which shift would bring the "
                    "largest exponent of any row to exactly 0?"
                ),
            ),
            Misconception(
                "softmax-wrong-axis",
                "The weights are normalised along the wrong axis: down the columns (over the "
                "queries), or along a fixed axis that is the last one only for some inputs. "
                "Each row, one query, must sum to 1 over its keys, and the keys are always "
                "the last axis, whatever the number of axes in front.",
                (_softmax_build(axis=0), _softmax_build(axis=-2)),
                {"axis": 0},
                question="Add up your weights along a row and down a column: which comes "
                "out as 1? Try an input with three axes too: along which axis do your sums "
                "run there?",
            ),
            Misconception(
                "softmax-sums-everything",
                "The exponentials are divided by one sum over the whole array, so all rows "
                "together sum to 1 and each row gets only its share. Each row is one query's "
                "weights and needs its own sum over its keys.",
                (_softmax_build(axis="all"),),
                {"axis": "all"},
                question="What does one row of your weights add up to, and what does the "
                "whole array add up to? Over what did your sum run?",
            ),
            Misconception(
                "weights-not-normalized",
                "The exponentials are returned without dividing by their sum, so the rows do "
                "not sum to 1. The softmax's second step divides each row by its own total.",
                (_softmax_build(normalise=False),),
                {"normalise": False},
                question="What do the rows of your weights add up to? Which step of the "
                "softmax formula turns exponentials into weights that sum to 1?",
            ),
            Misconception(
                "keepdims-missing",
                "A maximum or a sum over the last axis has lost that axis: one flat list with "
                "a number per row, which numpy lines up with the columns rather than the "
                "rows. It only runs when the two sizes are equal, and then shifts or divides "
                "column j by row j's number. Keep the reduced axis with length 1, so that "
                "each row's number sits beside its row.",
                (_softmax_build(keepdims=False),),
                {"keepdims": False},
                question="Your function runs on one row and on a square matrix but raises on "
                "a 4 by 5 one. Print the shape of your row maxima or row sums next to the "
                "shape of x: which axis of x do they line up with?",
            ),
            Misconception(
                "softmax-scaled",
                "The softmax rescales its input before the exponential. It takes the scores "
                "as they are: the scaling by one over the square root of d_k belongs to the "
                "scores, computed before the softmax is called (and a softmax does not know "
                "d_k).",
                (_softmax_build(scale="sqrt"),),
                {"scale": "sqrt"},
                question="Compare your weights with those of the plain formula on one row: "
                "are yours flatter? What do you multiply the input by before the "
                "exponential, and does the formula do that?",
            ),
        ),
    )
)
