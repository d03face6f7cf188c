"""Exercises of lesson 16: finding heads in a trained model by measurement.

* ``prefix_matching_score(weights, period) -> (n_heads,)`` : on a block of ``period`` tokens
  seen twice, the mean weight each head puts, from a query t >= period, on key
  ``t - period + 1`` — the token *after* the earlier occurrence of the query's token (an
  induction head's signature);
* ``first_position_share(weights) -> (n_heads,)`` : the mean weight each head puts on
  key 0 from the queries t = 1 .. seq-1 (query 0 can see nothing else, so it tells nothing):
  an attention sink's signature.

Both scores are means of chosen cells of causal attention maps (batch, n_heads, seq, seq)
in which batch, n_heads and seq all differ. Both are linear in the weights, so the
inference reads which cells a learner's function averages, and with what coefficient, from
one-hot probes (:func:`attnlib.checks.measure.linear_map`), then names the reading: the key
offset (the earlier token itself, one too far back), queries from the first block (wrapped
negative keys, or the block's last query read by a diagonal one too long), query and key
axes swapped, query 0 counted (its only key, the diagonal, always 1), a batch read only at
sequence 0, a mean over the heads, or a sum.

References are written here, apart from :mod:`attnlib.tasks.plays` (which learners must not
call); ``tests/test_ex_real_text.py`` proves them equal to it and to explicit loops.
"""

from __future__ import annotations

import torch

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import linear_map

_PROBE = (2, 3, 7)  # batch, n_heads, seq: all different
_PERIOD = 3  # the probe's period for prefix matching


def _causal_weights(seed, batch, n_heads, seq):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, n_heads, seq, seq, generator=gen, dtype=torch.float64) * 2
    blocked = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # keys after the query
    return torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)


def _reduce(cells, weights, reduce):
    """Mean (or the mistaken reductions) of (batch, n_heads, queries read) cells."""
    if reduce == "sum":
        return cells.sum(dim=(0, 2))
    if reduce == "heads":
        return cells.mean(dim=(1, 2))  # (batch,)
    return cells.mean(dim=(0, 2))  # (n_heads,)


def _read(learner, *extra):
    """What a linear score of the weights reads, measured on one-hot probes.

    Returns (pairs, over_heads, first_only, n_cells, coefficient) or None: ``pairs`` the
    (query, key) cells of sequence 0's head 0 (or of every head when the output has one
    number per sequence).
    """
    batch, n_heads, seq = _PROBE
    read = linear_map(lambda w: learner(w, *extra), (batch, n_heads, seq, seq), seed=1699)
    if read is None:
        return None
    coef_all, out_shape = read
    if out_shape == (n_heads,):
        over_heads = False
    elif out_shape == (batch,):
        over_heads = True
    else:
        return None
    coef = coef_all[0].reshape(batch, n_heads, seq, seq)  # what output 0 reads
    cells = [tuple(int(i) for i in c) for c in zip(*coef.nonzero(), strict=True)]
    if not cells:
        return None
    values = [float(coef[c]) for c in cells]
    if max(values) - min(values) > 1e-4 * abs(values[0]):
        return None  # cells weighted unequally: no known mistake does that
    heads = {c[1] for c in cells}
    batches = {c[0] for c in cells}
    if over_heads:
        if heads != set(range(n_heads)) or batches != {0}:
            return None
        first_only = False
    else:
        if heads != {0}:
            return None
        if batches == {0}:
            first_only = True
        elif batches == set(range(batch)):
            first_only = False
        else:
            return None
    b0, h0 = cells[0][0], cells[0][1]
    pairs = frozenset((q, k) for b, h, q, k in cells if b == b0 and h == h0)
    return pairs, over_heads, first_only, len(cells), values[0]


def _shared_findings(over_heads, first_only, n, c, count_name) -> list[Finding]:
    batch, n_heads, _ = _PROBE
    found = []
    if first_only:
        found.append(
            Finding(
                "first-batch-only",
                f"with batch = {batch}, only sequence 0 changes your score; the other "
                f"{batch - 1} are never read.",
            )
        )
    if over_heads:
        found.append(
            Finding(
                "mean-over-heads",
                f"with batch {batch} and n_heads {n_heads}, your result has shape ({batch},): "
                "one number per sequence, averaged over the heads.",
            )
        )
    if abs(c * n - 1) > 1e-4 and abs(c - 1) <= 1e-4:
        found.append(
            Finding(
                "sum-not-mean",
                f"each of the {n} weights a head's score adds up counts with coefficient 1: "
                f"a sum, not a mean over the {count_name}.",
            )
        )
    return found


def _shared_ok(n, c) -> bool:
    return abs(c * n - 1) <= 1e-4 or abs(c - 1) <= 1e-4


_SHARED_MISCONCEPTIONS = {
    "first-batch-only": (
        "Only the first sequence of the batch is read (weights[0], or a loop over the heads "
        "that never moves along the batch). The score is a mean over every sequence of the "
        "batch as well as over the queries: mean(dim=(0, 2)) of the cells you select."
    ),
    "mean-over-heads": (
        "The mean runs over the heads, giving one number per sequence. Average over the "
        "batch and the query positions (dims 0 and 2) to get one number per head."
    ),
    "sum-not-mean": (
        "The weights are summed; take the mean, so that the score is a weight between 0 and "
        "1 whatever the batch size and sequence length."
    ),
}


def _shared(build) -> tuple[Misconception, ...]:
    return (
        Misconception(
            "first-batch-only",
            _SHARED_MISCONCEPTIONS["first-batch-only"],
            (build(batch="first"),),
            {"batch": "first"},
        ),
        Misconception(
            "mean-over-heads",
            _SHARED_MISCONCEPTIONS["mean-over-heads"],
            (build(reduce="heads"),),
            {"reduce": "heads"},
        ),
        Misconception(
            "sum-not-mean",
            _SHARED_MISCONCEPTIONS["sum-not-mean"],
            (build(reduce="sum"),),
            {"reduce": "sum"},
        ),
    )


_SHARED_EXCLUSIVE = (
    # weights[0] averaged over the heads is one number: nothing left to read
    frozenset({"first-batch-only", "mean-over-heads"}),
)

# ----------------------------------------------------------------------------------------
# prefix_matching_score(weights, period) -> (n_heads,)
# ----------------------------------------------------------------------------------------


def _pm_reference(weights, period):
    seq = weights.shape[-1]
    t = torch.arange(period, seq)  # queries in the second block
    return weights[:, :, t, t - period + 1].mean(dim=(0, 2))  # (n_heads,)


def _pm_pairs(seq, period, *, offset="next", queries="second", swap=False):
    """The (row, column) cells a prefix-matching score reads (negative indices wrap)."""
    first = {"second": period, "diagonal": period - 1, "all": 0}[queries]
    back = period - 1 if offset == "next" else period
    out = []
    for t in range(first, seq):
        q, k = t, t - back
        if swap:
            q, k = k, q
        out.append((q % seq, k % seq))
    return out


def _pm_build(*, offset="next", queries="second", swap=False, batch="all", reduce="mean"):
    """A prefix-matching score with the given choices; the defaults give the correct one.

    ``offset`` "next" (key t - period + 1) or "same" (key t - period: the earlier occurrence
    of the query's own token); ``queries`` "second" (t = period .. seq-1), "diagonal" (from
    period - 1: ``torch.diagonal(..., offset=-(period - 1))``, one query of the first block)
    or "all" (from 0: negative keys wrap to the end); ``swap``: row and column exchanged;
    ``batch`` "first" reads weights[0] only; ``reduce`` "mean", "sum" or "heads".
    """

    def fn(weights, period):
        seq = weights.shape[-1]
        pairs = _pm_pairs(seq, period, offset=offset, queries=queries, swap=swap)
        rows = torch.tensor([q for q, _ in pairs])
        cols = torch.tensor([k for _, k in pairs])
        w = weights[:1] if batch == "first" else weights
        return _reduce(w[:, :, rows, cols], w, reduce)

    return fn


def _pm_case(label, seed, batch, n_heads, period, extra=0):
    seq = 2 * period + extra
    return Case(label, (_causal_weights(seed, batch, n_heads, seq), period))


def _pm_cases() -> list[Case]:
    return [
        _pm_case("batch 4, n_heads 2, period 4 (seq 8)", 1601, 4, 2, 4),
        _pm_case("batch 3, n_heads 5, period 3 (seq 7)", 1602, 3, 5, 3, extra=1),
        _pm_case("batch 2, n_heads 3, period 6 (seq 12)", 1603, 2, 3, 6),
    ]


def _pm_hidden_cases() -> list[Case]:
    return [
        _pm_case("hidden: batch 5, n_heads 4, period 5 (seq 10)", 1611, 5, 4, 5),
        _pm_case("hidden: batch 2, n_heads 3, period 2 (seq 5)", 1612, 2, 3, 2, extra=1),
    ]


_PM_WIRINGS = [
    {"offset": o, "queries": q, "swap": s}
    for o in ("next", "same")
    for q in ("second", "diagonal", "all")
    for s in (False, True)
]


def _infer_pm(learner) -> list[Finding]:
    read = _read(learner, _PERIOD)
    if read is None:
        return []
    pairs, over_heads, first_only, n, c = read
    seq, period = _PROBE[2], _PERIOD
    wiring = next((w for w in _PM_WIRINGS if frozenset(_pm_pairs(seq, period, **w)) == pairs), None)
    if wiring is None or not _shared_ok(n, c):
        return []
    found = []
    said = f"with period {period} (seq {seq})"
    if wiring["offset"] == "same":
        found.append(
            Finding(
                "key-is-earlier-token",
                f"{said}, query {seq - 1} reads key {seq - 1 - period}: the earlier occurrence "
                f"of its own token, not the token after it ({seq - period}).",
            )
        )
    if wiring["swap"]:
        found.append(
            Finding(
                "query-key-swapped",
                f"{said}, your score reads weights[b, h, k, t] with the key's index first: "
                f"e.g. row {max(k for k, _ in pairs if k < seq - 1)} and a later column, cells "
                "a causal map sets to 0.",
            )
        )
    if wiring["queries"] == "all":
        found.append(
            Finding(
                "includes-first-block",
                f"{said}, your score also reads queries 0 .. {period - 2} of the first block, "
                f"whose key t - {period - 1} is negative and wraps to the last keys.",
            )
        )
    if wiring["queries"] == "diagonal":
        found.append(
            Finding(
                "query-range-off-by-one",
                f"{said}, your score reads queries {period - 1} .. {seq - 1}: query "
                f"{period - 1}, the first block's last token, has no earlier occurrence.",
            )
        )
    return found + _shared_findings(over_heads, first_only, n, c, "queries t >= period")


register(
    Exercise(
        name="prefix_matching_score",
        summary="prefix_matching_score(weights, period) -> (n_heads,): mean weight on the "
        "token after the earlier occurrence of each query's token",
        reference=_pm_reference,
        make_cases=_pm_cases,
        make_hidden_cases=_pm_hidden_cases,
        forbidden=("attnlib.tasks.plays.prefix_matching_score",),
        infer=_infer_pm,
        build=_pm_build,
        exclusive=_SHARED_EXCLUSIVE,
        misconceptions=(
            Misconception(
                "key-is-earlier-token",
                "This reads key t - period: the earlier occurrence of the query's own token "
                "(a duplicate-token head's target). An induction head looks one further on, "
                "at the token that came next, key t - period + 1, whose value predicts the "
                "next token.",
                (_pm_build(offset="same"),),
                {"offset": "same"},
            ),
            Misconception(
                "query-key-swapped",
                "Rows are queries and columns are keys: weights[b, h, t - period + 1, t] is an "
                "earlier query looking at a later key, which a causal map sets to 0. Take "
                "weights[b, h, t, t - period + 1].",
                (_pm_build(swap=True),),
                {"swap": True},
            ),
            Misconception(
                "includes-first-block",
                "Queries of the first block have seen nothing to match: for t < period - 1 the "
                "key t - period + 1 is negative (Python takes it from the end, a masked key), "
                "and it pulls the mean down. Average over t = period .. seq - 1 only.",
                (_pm_build(queries="all"),),
                {"queries": "all"},
            ),
            Misconception(
                "query-range-off-by-one",
                "One query too many: the diagonal offset -(period - 1) starts at query "
                "period - 1, the first block's last token, whose key 0 is no match. The second "
                "block starts at t = period: range(period, seq).",
                (_pm_build(queries="diagonal"),),
                {"queries": "diagonal"},
            ),
            *_shared(_pm_build),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# first_position_share(weights) -> (n_heads,)
# ----------------------------------------------------------------------------------------


def _fp_reference(weights):
    return weights[:, :, 1:, 0].mean(dim=(0, 2))  # (n_heads,)


def _fp_pairs(seq, *, first="skip", swap=False):
    start = 0 if first == "count" else 1
    return [((0, t) if swap else (t, 0)) for t in range(start, seq)]


def _fp_build(*, first="skip", swap=False, batch="all", reduce="mean"):
    """A first-position share with the given choices; the defaults give the correct one.

    ``first`` "count" also reads query 0 (its only key, on the diagonal, weight 1);
    ``swap`` reads row 0 (query 0's weights) instead of column 0; ``batch`` "first";
    ``reduce`` "mean", "sum" or "heads".
    """

    def fn(weights):
        pairs = _fp_pairs(weights.shape[-1], first=first, swap=swap)
        rows = torch.tensor([q for q, _ in pairs])
        cols = torch.tensor([k for _, k in pairs])
        w = weights[:1] if batch == "first" else weights
        return _reduce(w[:, :, rows, cols], w, reduce)

    return fn


def _fp_cases() -> list[Case]:
    return [
        Case(f"batch {b}, n_heads {h}, seq {s}", (_causal_weights(seed, b, h, s),))
        for seed, b, h, s in ((1621, 4, 2, 7), (1622, 3, 5, 9), (1623, 6, 3, 5))
    ]


def _fp_hidden_cases() -> list[Case]:
    return [
        Case(f"hidden: batch {b}, n_heads {h}, seq {s}", (_causal_weights(seed, b, h, s),))
        for seed, b, h, s in ((1631, 7, 4, 11), (1632, 2, 3, 6))
    ]


def _infer_fp(learner) -> list[Finding]:
    read = _read(learner)
    if read is None:
        return []
    pairs, over_heads, first_only, n, c = read
    seq = _PROBE[2]
    wiring = next(
        (
            {"first": f, "swap": s}
            for f in ("skip", "count")
            for s in (False, True)
            if frozenset(_fp_pairs(seq, first=f, swap=s)) == pairs
        ),
        None,
    )
    if wiring is None or not _shared_ok(n, c):
        return []
    found = []
    if wiring["first"] == "count":
        found.append(
            Finding(
                "includes-first-query",
                f"with seq {seq}, your score also reads weights[b, h, 0, 0]: query 0, whose "
                "only key is itself (the diagonal), with weight 1 in every head.",
            )
        )
    if wiring["swap"]:
        found.append(
            Finding(
                "query-key-swapped",
                f"with seq {seq}, your score reads row 0 (weights[b, h, 0, t]: query 0's "
                "weights on keys it cannot see, all 0), not column 0.",
            )
        )
    return found + _shared_findings(over_heads, first_only, n, c, "queries t >= 1")


register(
    Exercise(
        name="first_position_share",
        summary="first_position_share(weights) -> (n_heads,): mean weight on key 0 from the "
        "queries t = 1 .. seq-1",
        reference=_fp_reference,
        make_cases=_fp_cases,
        make_hidden_cases=_fp_hidden_cases,
        forbidden=("attnlib.tasks.plays.attention_on",),
        infer=_infer_fp,
        build=_fp_build,
        exclusive=_SHARED_EXCLUSIVE,
        misconceptions=(
            Misconception(
                "includes-first-query",
                "Query 0 is counted: it can only see itself, so its weight on key 0 (a cell "
                "of the diagonal) is 1 in every head and says nothing about a sink. Average "
                "over queries t = 1 .. seq - 1: weights[:, :, 1:, 0].",
                (_fp_build(first="count"),),
                {"first": "count"},
            ),
            Misconception(
                "query-key-swapped",
                "Rows are queries and columns are keys: weights[b, h, 0, :] is query 0's "
                "row, not the weight every query puts on key 0. Take the column, "
                "weights[b, h, t, 0].",
                (_fp_build(swap=True),),
                {"swap": True},
            ),
            *_shared(_fp_build),
        ),
    )
)
