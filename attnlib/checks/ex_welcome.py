"""The practice exercise of lesson 00: the exercise → check rhythm, on a function no lesson grades.

* ``normalise_rows(x) -> same shape`` — divide each row of non-negative numbers by the row's
  own sum, so that every row sums to 1 (what a softmax does after its ``exp``).

Lesson 00 shows a first attempt that is right on one row and wrong on a matrix, the
diagnosis the check gives, and the fix. It is deliberately not part of any graded
exercise: the graded softmax of lesson 03 is about the overflow of ``exp``, which this
exercise does not touch.

Inputs are numpy float64 arrays of positive numbers: one row (seq_k,), a non-square matrix
(seq_q, seq_k), a square one (where a missing ``keepdims`` runs instead of raising and can
be recognised by its values) and a batch (batch, seq_q, seq_k).
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register


def _cases() -> list[Case]:
    rng = np.random.default_rng(1000)
    return [
        Case("one row (5,)", (np.array([1.0, 2.0, 3.0, 4.0, 10.0]),)),
        Case("a matrix (3, 5): three rows", (rng.uniform(0.1, 3.0, (3, 5)),)),
        Case("a square matrix (4, 4)", (rng.uniform(0.1, 3.0, (4, 4)),)),
        Case("a batch (2, 3, 4)", (rng.uniform(0.1, 3.0, (2, 3, 4)),)),
    ]


def _hidden_cases() -> list[Case]:
    rng = np.random.default_rng(91000)
    return [
        Case("hidden: a matrix (6, 2)", (rng.uniform(0.1, 5.0, (6, 2)),)),
        Case("hidden: a square matrix (3, 3)", (rng.uniform(0.1, 5.0, (3, 3)),)),
    ]


def _reference(x):
    return x / x.sum(axis=-1, keepdims=True)  # (..., seq_k), every row sums to 1


def _over_everything(x):
    return x / x.sum()  # right for one row; a matrix sums to 1 in all


def _over_columns(x):
    return x / x.sum(axis=0)  # each column sums to 1 (for a matrix)


def _keepdims_missing(x):
    return x / x.sum(axis=-1)  # (seq_q,) broadcasts against the columns, not the rows


def _by_row_max(x):
    return x / x.max(axis=-1, keepdims=True)  # each row's largest entry becomes 1


def _build(*, over="rows"):
    """normalise_rows dividing by the sum over ``over``: "rows" (correct), "everything",
    "columns", "rows-no-keepdims" or "row-max" (each row's largest entry, not its sum)."""
    return {
        "rows": _reference,
        "everything": _over_everything,
        "columns": _over_columns,
        "rows-no-keepdims": _keepdims_missing,
        "row-max": _by_row_max,
    }[over]


_PROBE = np.random.default_rng(1001).uniform(0.1, 3.0, (3, 5))  # three rows of five


def _infer(learner) -> list[Finding]:
    """Which sums come out as 1 on a (3, 5) matrix — rows, columns or everything — and
    whether the function runs on a square matrix but raises on this one."""
    o = learner(_PROBE.copy())
    if not o.ok:
        square = learner(_PROBE[:, :3].copy())
        if square.ok:
            return [
                Finding(
                    "keepdims-missing",
                    f"your function runs on a square (3, 3) matrix but raises on a (3, 5) one "
                    f"({o.error()[:80]}).",
                )
            ]
        return []
    w = o.array(0) if o.arity == 1 else None
    if w is None or w.shape != _PROBE.shape:
        return []
    if np.allclose(w.sum(axis=-1), 1.0):
        return []
    if np.allclose(w.sum(axis=0), 1.0):
        sums = np.round(w.sum(axis=0), 3).tolist()
        return [Finding("sum-over-columns", f"on a (3, 5) matrix the columns sum to {sums}.")]
    if np.allclose(w.max(axis=-1), 1.0) and np.allclose(
        w * _PROBE.max(axis=-1, keepdims=True), _PROBE
    ):
        sums = np.round(w.sum(axis=-1), 3).tolist()
        return [
            Finding(
                "divided-by-row-max",
                f"on a (3, 5) matrix the largest entry of every row is 1 and the rows sum to "
                f"{sums}.",
            )
        ]
    if np.isclose(w.sum(), 1.0):
        return [
            Finding(
                "sum-over-everything",
                f"on a (3, 5) matrix all 15 entries together sum to 1 (the rows to "
                f"{np.round(w.sum(axis=-1), 3).tolist()}).",
            )
        ]
    return []


register(
    Exercise(
        name="normalise_rows",
        summary="normalise_rows(x) -> same shape: each row divided by its own sum",
        reference=_reference,
        make_cases=_cases,
        make_hidden_cases=_hidden_cases,
        infer=_infer,
        build=_build,
        misconceptions=(
            Misconception(
                "sum-over-everything",
                "You divide by the sum of all the entries of the array. On one row that is "
                "the row's own sum, which is why a single row came out right; on a matrix the "
                "whole array then sums to 1, and each row gets only its share of it. Every row "
                "needs its own sum.",
                (_over_everything,),
                {"over": "everything"},
                question="Your function is right on one row and wrong on a matrix. Add up "
                "one row of your result, then the whole result: which of the two comes out "
                "as 1, and which total did you divide by?",
            ),
            Misconception(
                "sum-over-columns",
                "You divide by the sums down the columns, so each column sums to 1. A row is "
                "one query and its numbers run along the last axis: each row must be divided "
                "by the sum along its own row.",
                (_over_columns,),
                {"over": "columns"},
                question="Add up your result along a row and down a column: which of the two "
                "comes out as 1? Which direction did your sum run in?",
            ),
            Misconception(
                "keepdims-missing",
                "The row sums lost the axis they were summed over: they form one flat list "
                "with one number per row, and numpy lines that list up with the columns of x, "
                "not its rows. A square matrix then divides column j by row j's sum, and other "
                "shapes fail to broadcast. Keep the summed axis (with length 1), so that each "
                "row's sum sits beside its own row.",
                (_keepdims_missing,),
                {"over": "rows-no-keepdims"},
                question="Your function runs on a square matrix and raises on a 3 by 5 one. "
                "Print the shape of the sums you divide by, next to the shape of x: which "
                "axis of x does that list of sums line up with?",
            ),
            Misconception(
                "divided-by-row-max",
                "You divide each row by its largest entry, so that entry becomes 1 and the "
                "row adds up to more than 1. Normalising to sum 1 divides by the row's sum.",
                (_by_row_max,),
                {"over": "row-max"},
                question="Look at one row of your result: what is its largest entry, and "
                "what does the row add up to? Which number of the row did you divide by?",
            ),
        ),
    )
)
