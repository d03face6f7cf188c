"""Exercises of lesson 07: cutting d_model into heads and putting the heads back.

* ``split_heads(x, n_heads)`` : (batch, seq, d_model) -> (batch, n_heads, seq, d_head);
* ``merge_heads(x)`` : (batch, n_heads, seq, d_head) -> (batch, seq, d_model).

Inputs are numpy float64 arrays. The first case has batch, seq, n_heads and d_head all
different, so a reshape that lands on the right shape by accident still puts the numbers
in the wrong places and is caught by value; the others vary the sizes (down to
d_head = 1). Results are compared exactly: a reshape moves numbers, it never changes them.
The hidden cases (run only by the grader) draw their sizes and numbers from generators that
the grader reseeds per run (``attnlib.checks._core.hidden_seed``).

Diagnosis by inference: the probe input is ``arange``, so every output number says which
input number it is. The inference reads off where each one went: which input axis each
output axis carries (batch, seq, head, position within a head), whether a head owns a
contiguous block of features or every n_heads-th one, or whether the numbers were only
re-read in memory order (a reshape without a transpose).
"""

from __future__ import annotations

import itertools

import numpy as np

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt

# The references are the mistake models with no mistake (``_split_build()``,
# ``_merge_build()``), written here apart from attnlib.heads.split_heads / merge_heads (which
# learners must not call); tests/test_ex_heads.py proves them equal to those and to oracles.


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


def _head_sizes(rng) -> tuple[int, int, int, int]:
    """(batch, seq, n_heads, d_head) drawn from ``rng``, with n_heads ≥ 2 and seq ≠ d_head."""
    batch, seq = int(rng.integers(1, 4)), int(rng.integers(2, 8))
    n_heads, d_head = int(rng.integers(2, 5)), int(rng.integers(1, 6))
    return batch, seq + (seq == d_head), n_heads, d_head


def _split_hidden_cases() -> list[Case]:
    # Sizes and numbers drawn from the generator, so that the grader's seed changes both.
    rng = np.random.default_rng(7701)
    cases = []
    for _ in range(3):
        batch, seq, n_heads, d_head = _head_sizes(rng)
        x = rng.standard_normal((batch, seq, n_heads * d_head))  # (batch, seq, d_model)
        label = f"hidden: batch {batch}, seq {seq}, d_model {n_heads * d_head}, n_heads {n_heads}"
        cases.append(Case(label, (x, n_heads)))
    return cases


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


_AXES = ("batch", "n_heads", "seq", "d_head")  # the order split_heads must produce


def _split_build(*, method="transpose", layout="contiguous", order=(0, 2, 1, 3)):
    """split_heads with the given choices; the defaults give the correct function.

    The features are cut into (n_heads, d_head) blocks (``layout="contiguous"``) or dealt
    out every n_heads-th (``"interleaved"``); the logical axes (batch, seq, n_heads,
    d_head) are then put in ``order`` ("bshd", "hbsd" or a permutation).
    ``method="reshape"`` reshapes straight to (batch, n_heads, seq, d_head);
    ``method="fold"`` splits right but folds the heads into the batch axis,
    (batch · n_heads, seq, d_head), the layout torch uses inside nn.MultiheadAttention.
    """
    perm = {"bshd": (0, 1, 2, 3), "hbsd": (2, 0, 1, 3)}.get(order, order)

    def fn(x, n_heads):
        batch, seq, d_model = x.shape
        d_head = d_model // n_heads
        if method == "reshape":
            return x.reshape(batch, n_heads, seq, d_head)
        if layout == "contiguous":
            y = x.reshape(batch, seq, n_heads, d_head)
        else:
            y = np.swapaxes(x.reshape(batch, seq, d_head, n_heads), -1, -2)
        if method == "fold":
            return y.transpose(0, 2, 1, 3).reshape(batch * n_heads, seq, d_head)
        return y.transpose(perm)

    return fn


def _interleaved_finding(n_heads: int, d_head: int) -> Finding:
    return Finding(
        "heads-interleaved-features",
        f"with d_model = {n_heads * d_head} and n_heads = {n_heads}, head 0 holds features "
        f"{list(range(0, n_heads * d_head, n_heads))} of position 0.",
    )


def _infer_split(learner) -> list[Finding]:
    batch, seq, n_heads, d_head = 2, 5, 3, 4
    x = np.arange(batch * seq * n_heads * d_head, dtype=np.float64).reshape(batch, seq, -1)
    o = learner(x.copy(), n_heads)
    y = o.array(0) if o.ok and o.arity == 1 else None
    if y is None or y.dtype == bool or y.size != x.size:
        return []
    logical = {  # (batch, seq, n_heads, d_head) under each feature layout
        "contiguous": x.reshape(batch, seq, n_heads, d_head),
        "interleaved": np.swapaxes(x.reshape(batch, seq, d_head, n_heads), -1, -2),
    }
    names = ("batch", "seq", "n_heads", "d_head")
    if y.shape == (batch * n_heads, seq, d_head):  # the heads folded into the batch axis
        for layout, base in logical.items():
            if np.array_equal(base.transpose(0, 2, 1, 3).reshape(y.shape), y):
                found = [
                    Finding(
                        "heads-folded-into-batch",
                        f"for batch {batch} and n_heads {n_heads} the result has shape "
                        f"{y.shape}: its first axis has {batch * n_heads} entries, and entry "
                        f"1 holds what belongs to batch element 0.",
                    )
                ]
                if layout == "interleaved":
                    found.append(_interleaved_finding(n_heads, d_head))
                return found
        return []
    for layout, base in logical.items():
        for perm in itertools.permutations(range(4)):
            cand = base.transpose(perm)
            if cand.shape != y.shape or not np.array_equal(cand, y):
                continue
            found = []
            if layout == "interleaved":
                found.append(_interleaved_finding(n_heads, d_head))
            got = tuple(names[i] for i in perm)
            shown = f"({', '.join(got)})"
            if got == ("batch", "seq", "n_heads", "d_head"):
                found.append(
                    Finding(
                        "heads-axis-not-moved",
                        f"the result's axes are {shown}, shape {y.shape}.",
                    )
                )
            elif got == ("n_heads", "batch", "seq", "d_head"):
                found.append(
                    Finding(
                        "heads-axis-first",
                        f"the result's axes are {shown}, shape {y.shape}.",
                    )
                )
            elif got != _AXES:
                found.append(
                    Finding(
                        "heads-axes-order",
                        f"the result's axes are {shown}, shape {y.shape}; expected "
                        f"({', '.join(_AXES)}).",
                    )
                )
            return found
    if y.shape == (batch, n_heads, seq, d_head) and np.array_equal(y.reshape(-1), x.reshape(-1)):
        return [
            Finding(
                "heads-reshape-without-transpose",
                f"the shape is right, {y.shape}, but the numbers are in the input's memory "
                f"order: 'head' 0, position 1 holds {y[0, 0, 1].astype(int).tolist()} — "
                f"features {d_head}..{2 * d_head - 1} of position 0, not features "
                f"0..{d_head - 1} of position 1.",
            )
        ]
    return []


register(
    Exercise(
        name="split_heads",
        summary="split_heads(x, n_heads): (batch, seq, d_model) -> (batch, n_heads, seq, d_head)",
        reference=_split_build(),
        make_cases=_split_cases,
        make_hidden_cases=_split_hidden_cases,
        exact=True,
        forbidden=("attnlib.heads.split_heads",),
        infer=_infer_split,
        build=_split_build,
        # re-read in memory order: there are no axes or feature blocks to speak of; folded
        # into the batch: the axes are (batch · heads, seq, d_head) whatever order was meant
        exclusive=tuple(
            frozenset({"heads-reshape-without-transpose", other})
            for other in (
                "heads-interleaved-features",
                "heads-axis-not-moved",
                "heads-axis-first",
                "heads-axes-order",
            )
        )
        + tuple(
            frozenset({"heads-folded-into-batch", other})
            for other in ("heads-axis-not-moved", "heads-axis-first", "heads-axes-order")
        ),
        misconceptions=(
            Misconception(
                "heads-reshape-without-transpose",
                "A reshape straight to (batch, n_heads, seq, d_head) has the right shape but "
                "reads the numbers in the order they sit in memory, position after position, "
                "so one 'head' gets all the features of a position, then the next position's "
                "first features, and so on: its rows come from the wrong tokens. Cut the "
                "feature axis of each position into (n_heads, d_head) first, while the "
                "positions are still in place, and only then move the head axis in front of "
                "the positions.",
                (_split_no_transpose,),
                {"method": "reshape"},
                question="On the arange input, which input numbers does your head 0, position "
                "1 hold, and which features of which position should it hold? In what order "
                "does a reshape read the numbers?",
            ),
            Misconception(
                "heads-interleaved-features",
                "Each head gets every n_heads-th feature: the feature axis was cut as (d_head, "
                "n_heads), so consecutive features go to different heads. Head h owns the "
                "contiguous block of features from h times d_head up to (h + 1) times d_head, "
                "so the feature axis is cut as (n_heads, d_head), the head index first.",
                (_split_interleaved,),
                {"layout": "interleaved"},
                question="Which features of a position end up in your head 0? Which block of "
                "features should head 0 own?",
            ),
            Misconception(
                "heads-axis-not-moved",
                "The result is (batch, seq, n_heads, d_head): the features are cut right, but "
                "the head axis still sits after the positions. Attention works on the last "
                "two axes (positions × features), so the head axis must come before the "
                "position axis for each head to attend over positions on its own.",
                (_split_head_axis_last_but_one,),
                {"order": "bshd"},
                question="What shape does your result have, and what does each of its four "
                "axes count? Which two axes does attention work on?",
            ),
            Misconception(
                "heads-axis-first",
                "The head axis was moved in front of the batch axis, (n_heads, batch, seq, "
                "d_head). The batch stays the first axis; only the head axis and the position "
                "axis trade places.",
                (_split_wrong_permute,),
                {"order": "hbsd"},
                question="What does the first axis of your result count? Which axis should "
                "come first?",
            ),
            Misconception(
                "heads-axes-order",
                "The axes come out in another order than (batch, n_heads, seq, d_head). After "
                "cutting the features into (n_heads, d_head), only the head axis and the "
                "position axis trade places; the batch stays first and d_head last.",
                (_split_build(order=(0, 2, 3, 1)),),
                {"order": (0, 2, 3, 1)},
                question="Name the four axes of your result in order. Which of them are where "
                "the exercise asks for them?",
            ),
            Misconception(
                "heads-folded-into-batch",
                "The heads were folded into the batch axis, (batch × n_heads, seq, d_head) — "
                "the layout torch uses inside nn.MultiheadAttention. The split is right, but "
                "the exercise asks for the heads as an axis of their own, (batch, n_heads, "
                "seq, d_head), so that batch element and head stay apart.",
                (_split_build(method="fold"),),
                {"method": "fold"},
                question="How many axes does your result have, and how many entries does its "
                "first axis hold? Where would you read batch element 1, head 0?",
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


def _merge_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(7702)
    cases = []
    for _ in range(3):
        batch, seq, n_heads, d_head = _head_sizes(rng)
        x = rng.standard_normal((batch, n_heads, seq, d_head))
        label = f"hidden: batch {batch}, n_heads {n_heads}, seq {seq}, d_head {d_head}"
        cases.append(Case(label, (x,)))
    return cases


def _merge_no_transpose(x):
    batch, n_heads, seq, d_head = x.shape
    return x.reshape(batch, seq, n_heads * d_head)  # memory order: head-major, scrambled


def _merge_interleaved(x):
    batch, n_heads, seq, d_head = x.shape
    return x.transpose(0, 2, 3, 1).reshape(batch, seq, n_heads * d_head)


def _merge_build(*, perm=(0, 2, 1, 3)):
    """merge_heads as x.transpose(perm).reshape(batch, seq, d_model); (0, 2, 1, 3) is right.

    ``perm="mean"`` or ``"sum"`` combines the heads by averaging or adding them instead,
    (batch, seq, d_head): one choice of how the heads come back, like the axis orders.
    """

    def fn(x):
        batch, n_heads, seq, d_head = x.shape
        if perm == "mean":
            return x.mean(axis=1)
        if perm == "sum":
            return x.sum(axis=1)
        return x.transpose(perm).reshape(batch, seq, n_heads * d_head)

    return fn


def _infer_merge(learner) -> list[Finding]:
    batch, n_heads, seq, d_head = 2, 3, 5, 4
    x = np.arange(batch * n_heads * seq * d_head, dtype=np.float64).reshape(
        batch, n_heads, seq, d_head
    )
    o = learner(x.copy())
    y = o.array(0) if o.ok and o.arity == 1 else None
    if y is None or y.dtype == bool:
        return []
    if y.shape == (batch, seq, d_head):  # the heads combined into one
        combined = {"mean": ("merge-heads-averaged", x.mean(axis=1)),
                    "sum": ("merge-heads-summed", x.sum(axis=1))}  # fmt: skip
        for mid, want in combined.values():
            if np.allclose(y, want, rtol=1e-12, atol=1e-12):
                return [
                    Finding(
                        mid,
                        f"for n_heads = {n_heads} and d_head = {d_head} your output has shape "
                        f"{y.shape}, with {d_head} features per position instead of "
                        f"{n_heads * d_head}; position 0's first feature is "
                        f"{fmt(float(y[0, 0, 0]))}, where the heads hold "
                        f"{[int(v) for v in x[0, :, 0, 0]]}.",
                    )
                ]
        return []
    if y.shape != (batch, seq, n_heads * d_head):
        return []
    names = ("batch", "n_heads", "seq", "d_head")
    for perm in itertools.permutations(range(4)):
        if not np.array_equal(x.transpose(perm).reshape(y.shape), y):
            continue
        read = f"({', '.join(names[i] for i in perm)})"
        if perm == (0, 2, 1, 3):
            return []  # the right order: whatever is wrong, it is not where numbers went
        if perm == (0, 1, 2, 3):
            return [
                Finding(
                    "merge-wrong-order",
                    f"on the arange input, output position 0 starts with "
                    f"{y[0, 0, : 2 * d_head].astype(int).tolist()}: numbers of head 0 at "
                    "positions 0 and 1.",
                )
            ]
        if perm == (0, 2, 3, 1):
            return [
                Finding(
                    "merge-heads-interleaved",
                    f"the features come out in the order {read}: feature f of every head, "
                    "then feature f + 1.",
                )
            ]
        return [
            Finding(
                "merge-axes-order",
                f"your output reads the input in the axis order {read}; expected "
                "(batch, seq, n_heads, d_head) before the reshape.",
            )
        ]
    return []


register(
    Exercise(
        name="merge_heads",
        summary="merge_heads(x): (batch, n_heads, seq, d_head) -> (batch, seq, d_model)",
        reference=_merge_build(),
        make_cases=_merge_cases,
        make_hidden_cases=_merge_hidden_cases,
        exact=True,
        forbidden=("attnlib.heads.merge_heads",),
        infer=_infer_merge,
        build=_merge_build,
        misconceptions=(
            Misconception(
                "merge-wrong-order",
                "A reshape to (batch, seq, d_model) straight from (batch, n_heads, seq, "
                "d_head) reads the numbers in memory order: all of head 0's positions one "
                "after another, then head 1's. So output position 0 gets pieces of several "
                "positions of head 0. The head axis has to move back behind the positions "
                "first, so that each position's heads sit next to each other, and only then "
                "can the reshape join them.",
                (_merge_no_transpose,),
                {"perm": (0, 1, 2, 3)},
                question="On the arange input, which head and which positions do the numbers "
                "of your output position 0 come from? Which should they come from?",
            ),
            Misconception(
                "merge-heads-interleaved",
                "The heads' features are interleaved: feature f of every head, then feature f "
                "+ 1. Each head's d_head features belong side by side as one block, head 0's "
                "block first, so the head axis must sit just before the feature axis when the "
                "two are joined.",
                (_merge_interleaved,),
                {"perm": (0, 2, 3, 1)},
                question="Read the first few features of your output position 0: from which "
                "heads do they come, in what order? Does your merge undo your split?",
            ),
            Misconception(
                "merge-axes-order",
                "The axes were put into another order before the reshape. Only the head axis "
                "moves, back behind the positions, giving (batch, seq, n_heads, d_head); then "
                "the last two axes join into d_model.",
                (_merge_build(perm=(0, 3, 2, 1)),),
                {"perm": (0, 3, 2, 1)},
                question="Before your reshape, what did each of the four axes count? Which "
                "one should move, and where to?",
            ),
            Misconception(
                "merge-heads-averaged",
                "The heads were averaged into one, so the output has d_head features per "
                "position instead of d_model. Multi-head attention keeps every head's result: "
                "the heads' outputs are put side by side (concatenated) and the output "
                "projection mixes them afterwards. An average would throw away what made the "
                "heads different.",
                (_merge_build(perm="mean"),),
                {"perm": "mean"},
                question="How many features per position does your output have, and how many "
                "should it have? Does every number of every head still appear in your output?",
            ),
            Misconception(
                "merge-heads-summed",
                "The heads were added into one, so the output has d_head features per "
                "position instead of d_model. The heads' outputs are put side by side "
                "(concatenated), not added: each head's d_head numbers keep their own places, "
                "and the output projection mixes them afterwards.",
                (_merge_build(perm="sum"),),
                {"perm": "sum"},
                question="How many features per position does your output have, and how many "
                "should it have? Does every number of every head still appear in your output?",
            ),
        ),
    )
)
