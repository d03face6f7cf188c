"""Exercises of lesson 07: cutting d_model into heads and putting the heads back.

* ``split_heads(x, n_heads)`` : (batch, seq, d_model) -> (batch, n_heads, seq, d_head);
* ``merge_heads(x)`` : (batch, n_heads, seq, d_head) -> (batch, seq, d_model).

Inputs are numpy float64 arrays. The first case has batch, seq, n_heads and d_head all
different, so a reshape that lands on the right shape by accident still puts the numbers
in the wrong places and is caught by value; the others vary the sizes (down to
d_head = 1). Results are compared exactly: a reshape moves numbers, it never changes them.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._core import Case, Exercise, Misconception, register

# The references are written here, apart from attnlib.heads.split_heads / merge_heads (which
# learners must not call); tests/test_ex_heads.py proves the two equal.


def _split_reference(x, n_heads):
    batch, seq, d_model = x.shape
    x = x.reshape(batch, seq, n_heads, d_model // n_heads)  # (batch, seq, n_heads, d_head)
    return np.swapaxes(x, 1, 2)  # (batch, n_heads, seq, d_head)


def _merge_reference(x):
    batch, n_heads, seq, d_head = x.shape
    x = np.swapaxes(x, 1, 2)  # (batch, seq, n_heads, d_head)
    return x.reshape(batch, seq, n_heads * d_head)  # (batch, seq, d_model)


# ----------------------------------------------------------------------------------------
# split_heads(x, n_heads) -> (batch, n_heads, seq, d_head)
# ----------------------------------------------------------------------------------------


def _split_cases() -> list[Case]:
    rng = np.random.default_rng(707)
    readable = np.arange(2 * 5 * 12, dtype=np.float64).reshape(2, 5, 12)  # (batch, seq, d_model)
    return [
        Case("x = arange, batch 2, seq 5, d_model 12, n_heads 3", (readable, 3)),
        Case("batch 1, seq 5, d_model 12, n_heads 3", (rng.standard_normal((1, 5, 12)), 3)),
        Case("batch 3, seq 4, d_model 6, n_heads 2", (rng.standard_normal((3, 4, 6)), 2)),
        Case(
            "batch 2, seq 7, d_model 4, n_heads 4 (d_head 1)", (rng.standard_normal((2, 7, 4)), 4)
        ),
    ]


def _split_no_transpose(x, n_heads):
    batch, seq, d_model = x.shape
    return x.reshape(batch, n_heads, seq, d_model // n_heads)  # scrambles positions


def _split_interleaved(x, n_heads):
    batch, seq, d_model = x.shape
    x = x.reshape(batch, seq, d_model // n_heads, n_heads)  # head = feature index % n_heads
    return x.transpose(0, 3, 1, 2)


def _split_head_axis_last_but_one(x, n_heads):
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, n_heads, d_model // n_heads)  # head axis never moved


def _split_wrong_permute(x, n_heads):
    batch, seq, d_model = x.shape
    x = x.reshape(batch, seq, n_heads, d_model // n_heads)
    return x.transpose(2, 0, 1, 3)  # (n_heads, batch, seq, d_head)


register(
    Exercise(
        name="split_heads",
        summary="split_heads(x, n_heads): (batch, seq, d_model) -> (batch, n_heads, seq, d_head)",
        reference=_split_reference,
        make_cases=_split_cases,
        exact=True,
        forbidden=("attnlib.heads.split_heads",),
        misconceptions=(
            Misconception(
                "heads-reshape-without-transpose",
                "x.reshape(batch, n_heads, seq, d_head) has the right shape but reads the "
                "numbers in memory order, so one 'head' gets the first features of several "
                "positions. Split the feature axis first, (batch, seq, n_heads, d_head), then "
                "move the head axis forward with swapaxes(1, 2).",
                (_split_no_transpose,),
            ),
            Misconception(
                "heads-interleaved-features",
                "Each head gets every n_heads-th feature (reshape to (..., d_head, n_heads)). "
                "Head h owns the contiguous block of features h*d_head .. (h+1)*d_head - 1: "
                "reshape to (batch, seq, n_heads, d_head).",
                (_split_interleaved,),
            ),
            Misconception(
                "heads-axis-not-moved",
                "The result is (batch, seq, n_heads, d_head): the head axis must come before "
                "the position axis so that attention runs over positions for each head. Add "
                ".swapaxes(1, 2).",
                (_split_head_axis_last_but_one,),
            ),
            Misconception(
                "heads-axis-first",
                "The head axis was moved in front of the batch axis. The shape is (batch, "
                "n_heads, seq, d_head): swap axes 1 and 2 only.",
                (_split_wrong_permute,),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# merge_heads(x) -> (batch, seq, d_model)
# ----------------------------------------------------------------------------------------


def _merge_cases() -> list[Case]:
    rng = np.random.default_rng(708)
    readable = np.arange(2 * 3 * 5 * 4, dtype=np.float64).reshape(2, 3, 5, 4)
    return [
        Case("x = arange, batch 2, n_heads 3, seq 5, d_head 4", (readable,)),
        Case("batch 1, n_heads 3, seq 5, d_head 4", (rng.standard_normal((1, 3, 5, 4)),)),
        Case("batch 3, n_heads 2, seq 4, d_head 3", (rng.standard_normal((3, 2, 4, 3)),)),
        Case("batch 2, n_heads 4, seq 7, d_head 1", (rng.standard_normal((2, 4, 7, 1)),)),
    ]


def _merge_no_transpose(x):
    batch, n_heads, seq, d_head = x.shape
    return x.reshape(batch, seq, n_heads * d_head)  # memory order: head-major, scrambled


def _merge_interleaved(x):
    batch, n_heads, seq, d_head = x.shape
    return x.transpose(0, 2, 3, 1).reshape(batch, seq, n_heads * d_head)


register(
    Exercise(
        name="merge_heads",
        summary="merge_heads(x): (batch, n_heads, seq, d_head) -> (batch, seq, d_model)",
        reference=_merge_reference,
        make_cases=_merge_cases,
        exact=True,
        forbidden=("attnlib.heads.merge_heads",),
        misconceptions=(
            Misconception(
                "merge-wrong-order",
                "x.reshape(batch, seq, d_model) straight from (batch, n_heads, seq, d_head) "
                "reads head 0's positions one after another, so output position 0 gets "
                "pieces of several positions. Move the head axis back first: "
                "x.swapaxes(1, 2).reshape(batch, seq, n_heads * d_head).",
                (_merge_no_transpose,),
            ),
            Misconception(
                "merge-heads-interleaved",
                "The heads' features are interleaved (feature f of every head, then f + 1). "
                "Put each head's d_head features side by side as one block: swap axes 1 and "
                "2, then reshape.",
                (_merge_interleaved,),
            ),
        ),
    )
)
