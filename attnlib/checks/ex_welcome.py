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


def _build(*, over="rows"):
    """normalise_rows dividing by the sum over ``over``: "rows" (correct), "everything",
    "columns" or "rows-no-keepdims"."""
    return {
        "rows": _reference,
        "everything": _over_everything,
        "columns": _over_columns,
        "rows-no-keepdims": _keepdims_missing,
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
                    f"({o.error()[:80]}): the row sums lost their axis.",
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
                "You divide by the sum of all the entries. On one row that is the row's sum, "
                "but on a matrix every row must be divided by its own sum: "
                "x.sum(axis=-1, keepdims=True).",
                (_over_everything,),
                {"over": "everything"},
            ),
            Misconception(
                "sum-over-columns",
                "You divide by the sums down the columns (axis=0), so the columns sum to 1. "
                "Rows are queries and their weights run along the last axis: sum with "
                "axis=-1 (and keepdims=True).",
                (_over_columns,),
                {"over": "columns"},
            ),
            Misconception(
                "keepdims-missing",
                "x.sum(axis=-1) has lost the summed axis: its shape (seq_q,) lines up with "
                "the columns of x, not its rows, so a square matrix divides column j by row "
                "j's sum (and other shapes fail to broadcast). Keep the axis: "
                "x.sum(axis=-1, keepdims=True).",
                (_keepdims_missing,),
                {"over": "rows-no-keepdims"},
            ),
        ),
    )
)
