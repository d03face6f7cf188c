"""Exercise 16.1 of lesson 16: finding an induction head in a trained model by measurement.

* ``prefix_matching_score(weights, period) -> (n_heads,)`` : on a block of ``period`` tokens
  seen twice, the mean weight each head puts, from a query t >= period, on key
  ``t - period + 1`` — the token *after* the earlier occurrence of the query's token (an
  induction head's signature); the lesson asks the learner to derive that key and the
  queries that count.

The score is linear in the causal attention maps (batch, n_heads, seq, seq) it reads, in
which batch, n_heads and seq all differ, so the inference reads which cells a learner's
function uses, and with what coefficients, from one-hot probes
(:func:`attnlib.checks.measure.linear_map`), then names the reading: the key offset (the
earlier token itself), queries from the first block (wrapped negative keys, or the block's
last query read by a diagonal one too long) or the second block's first query left out,
query and key axes swapped, a batch read only at sequence 0, a mean over the heads, or a
sum.

Lesson 16's other exercise, ``ablate_head``, is in :mod:`attnlib.checks.ex_ablation`. (The
first-position score of an earlier version of the lesson was retired with its exercise:
the lesson measures attention sinks with :func:`attnlib.tasks.plays.head_scores`.)

The reference is written here, apart from :mod:`attnlib.tasks.plays` (which learners must
not call); ``tests/test_ex_real_text.py`` proves it equal to it and to explicit loops.
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


def _batch_head_findings(over_heads, first_only) -> list[Finding]:
    """The findings of how the score reduces: only sequence 0 read, or the heads averaged."""
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
    return found


def _shared_findings(over_heads, first_only, n, c, count_name) -> list[Finding]:
    found = _batch_head_findings(over_heads, first_only)
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
        "Only the first sequence of the batch is read (the first entry along the batch axis, "
        "or a loop over the heads that never moves along the batch). The score is a mean over "
        "every sequence of the batch as well as over the queries, one number per head.",
        "Change sequence 1 of the batch and run your function again: does your score move? "
        "Over which sequences should it average?",
    ),
    "mean-over-heads": (
        "The mean runs over the heads, giving one number per sequence. Average over the "
        "batch and the query positions instead, keeping the heads apart: one number per head.",
        "Your result has one number per sequence of the batch. One number per what does the "
        "exercise ask for, and which axes does your mean run over?",
    ),
    "sum-not-mean": (
        "The weights are summed, not averaged: a mean keeps the score a weight between 0 and "
        "1 whatever the batch size and the sequence length.",
        "Your score grows with the batch size and the sequence length. Can a mean of "
        "attention weights be larger than 1?",
    ),
}


def _shared(build, texts=None) -> tuple[Misconception, ...]:
    texts = {**_SHARED_MISCONCEPTIONS, **(texts or {})}
    return tuple(
        Misconception(
            mid,
            texts[mid][0],
            (build(**settings),),
            settings,
            question=texts[mid][1],
        )
        for mid, settings in (
            ("first-batch-only", {"batch": "first"}),
            ("mean-over-heads", {"reduce": "heads"}),
            ("sum-not-mean", {"reduce": "sum"}),
        )
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
    first = {"second": period, "diagonal": period - 1, "all": 0, "late": period + 1}[queries]
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
    or "all" (from 0: negative keys wrap to the end) or "late" (from period + 1: the second
    block's first query left out); ``swap``: row and column exchanged;
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
    for q in ("second", "diagonal", "all", "late")
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
                f"{said}, query {seq - 1} reads key {seq - 1 - period}, where its own token "
                "occurred before.",
            )
        )
    if wiring["swap"]:
        found.append(
            Finding(
                "query-key-swapped",
                f"{said}, your score reads cells above the diagonal, e.g. row "
                f"{max(k for k, _ in pairs if k < seq - 1)} and a later column, cells a causal "
                "map sets to 0.",
            )
        )
    if wiring["queries"] == "all":
        found.append(
            Finding(
                "includes-first-block",
                f"{said}, your score also reads queries 0 .. {period - 2} of the first block; "
                f"query 0 reads key {dict(pairs).get(0)}, a key it cannot see.",
            )
        )
    if wiring["queries"] == "diagonal":
        found.append(
            Finding(
                "query-range-off-by-one",
                f"{said}, your score reads queries {period - 1} .. {seq - 1}, query "
                f"{period - 1} (the first block's last) among them.",
            )
        )
    if wiring["queries"] == "late":
        found.append(
            Finding(
                "query-range-starts-late",
                f"{said}, your score reads queries {period + 1} .. {seq - 1}: query {period}, "
                "the first of the second block, is not read.",
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
                "This reads the earlier occurrence of the query's own token (what a "
                "duplicate-token head looks at). An induction head looks one position further "
                "on, at the token that came next after that occurrence: its value is the "
                "guess for the token after the query.",
                (_pm_build(offset="same"),),
                {"offset": "same"},
                question="From a query of the second block, your score reads the key where "
                "the query's own token was seen before. Which earlier token would tell a "
                "head what comes after the query?",
            ),
            Misconception(
                "query-key-swapped",
                "Rows are queries and columns are keys: of the two position indices, the "
                "first is the query. Read the other way round, an earlier query looks at a "
                "later key, a cell the causal mask sets to 0.",
                (_pm_build(swap=True),),
                {"swap": True},
                question="Your score reads cells above the diagonal, which a causal map sets "
                "to 0. Of the two position indices of the weights, which one is the query?",
            ),
            Misconception(
                "includes-first-block",
                "Queries of the first block have seen nothing to match: for them the key "
                "index worked out from the period is negative, Python counts it from the end "
                "of the sequence, and it lands on a key the causal mask hides. Those zeros pull "
                "the mean down. Only the queries of the second block can be tested.",
                (_pm_build(queries="all"),),
                {"queries": "all"},
                question="Which of the queries your score averages have seen their own token "
                "before? For those that have not, which key does your score read?",
            ),
            Misconception(
                "query-range-off-by-one",
                "One query too many: the first block's last token (query period - 1) is "
                "counted, though nothing before it repeats; its key is position 0. The second "
                "block starts at query period.",
                (_pm_build(queries="diagonal"),),
                {"queries": "diagonal"},
                question="Which is the first query of the second block? Is the query just "
                "before it a repeat of anything?",
            ),
            Misconception(
                "query-range-starts-late",
                "The second block's first query (position period) is left out. It is "
                "already a repeat, of position 0, and an induction head can copy position 1 "
                "for it: the tested queries run from period to seq - 1.",
                (_pm_build(queries="late"),),
                {"queries": "late"},
                question="How many queries does the second block have, and how many does your "
                "score average?",
            ),
            *_shared(_pm_build),
        ),
    )
)
