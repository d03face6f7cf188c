"""Exercises of lesson 08: the masks, causal_mask and padding_mask (numpy).

* ``causal_mask(seq) -> bool (seq, seq)`` — query i may attend to keys 0..i;
* ``padding_mask(lengths, seq_k) -> bool (batch, 1, seq_k)`` — True = real token.

When a function is wrong, each exercise's ``infer`` measures it on probes (see
:mod:`attnlib.checks._core`): the pattern and dtype returned (booleans, 0/1 numbers or an
additive float mask), its shape (the key axis last) and where the edge of the real
tokens sits.
"""

from __future__ import annotations

import itertools

import numpy as np

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt
from attnlib.masks import causal_mask as _causal_mask
from attnlib.masks import padding_mask as _padding_mask

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
    """A causal mask: ``pattern`` "tril" (right), "strict" (tril k=-1), "ahead1" (tril k=1:
    one future key let through), "triu0", "triu1"; ``dtype`` "bool" or "float" (0/1)."""

    def fn(seq):
        ones = np.ones((seq, seq), dtype=bool)
        m = {
            "tril": np.tril(ones),
            "strict": np.tril(ones, k=-1),
            "ahead1": np.tril(ones, k=1),
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
        f"the mask holds {what}.",
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
                f"for seq = {seq} the diagonal is blocked: query 0 may attend to "
                f"{int(allowed[0].sum())} keys, query 1 to {int(allowed[1].sum())}.",
            )
        )
    elif np.array_equal(allowed, np.tril(ones, k=1)):
        found.append(
            Finding(
                "causal-one-future-key",
                f"for seq = {seq} query 0 may attend to keys 0 and 1, query 2 to keys 0..3: "
                "each row allows one key more than its own position.",
            )
        )
    elif np.array_equal(allowed, np.triu(ones)) or np.array_equal(allowed, np.triu(ones, k=1)):
        found.append(
            Finding(
                "causal-inverted",
                f"for seq = {seq} the allowed entries lie in the upper triangle: query 0 may "
                f"attend to {int(allowed[0].sum())} keys, query {seq - 1} to "
                f"{int(allowed[seq - 1].sum())}.",
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
                "The mask lets each query see the keys after it and hides the ones before it. "
                "Row i is query i, column j is key j, and query i may attend to key j when j "
                "is at most i: the True entries belong on and below the diagonal, in the lower "
                "triangle. (Some libraries use True = blocked, which gives the upper triangle; "
                "in this course True = may attend.)",
                (
                    lambda seq: ~_causal_mask(seq),
                    lambda seq: np.triu(np.ones((seq, seq), dtype=bool)),
                ),
                {"pattern": "triu1"},
                question="Print your mask for a short sequence. Which row belongs to the first "
                "token, and which keys does it allow: the ones before it, or the ones after?",
            ),
            Misconception(
                "causal-diagonal-excluded",
                "The diagonal is blocked, so a token cannot attend to itself, and the first "
                "token attends to nothing at all (a row with nothing to attend to). The "
                "condition is key position at most query position, the diagonal included, "
                "not strictly before it.",
                (_causal_build(pattern="strict"),),
                {"pattern": "strict"},
                question="Look at row 0 of your mask: which keys may the first token attend "
                "to? Should a token be allowed to see itself?",
            ),
            Misconception(
                "causal-one-future-key",
                "Each query may see one key beyond its own position: the boundary of the "
                "triangle sits one step above the diagonal. Query i must see keys 0 to i and "
                "nothing later, so the allowed region stops at the diagonal. One token of the "
                "future is enough for a language model to read the answer it is meant to "
                "predict.",
                (_causal_build(pattern="ahead1"),),
                {"pattern": "ahead1"},
                question="Count the True entries in row 0 and in the last row of your mask. "
                "How many keys should query i see, and how many does yours allow?",
            ),
            Misconception(
                "mask-not-boolean",
                "The mask is numbers, not booleans. A 0/1 mask is easily added to the scores "
                "or multiplied into them, and neither blocks anything; an additive mask of 0 "
                "and minus infinity works in torch, but this course's functions expect "
                "booleans. The result must have the boolean dtype, True = may attend.",
                (
                    lambda seq: _causal_mask(seq).astype(np.float64),
                    lambda seq: np.where(_causal_mask(seq), 0.0, -np.inf),
                ),
                {"dtype": "float"},
                question="What dtype does your mask have? What would happen to the scores if "
                "someone added your mask to them instead of using it to select?",
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


def _pad_build(*, layout="key", invert=False, offset=0, dtype="bool", side="right"):
    """A padding mask: ``layout`` "key" (batch, 1, seq_k), "query" (batch, seq_k, 1),
    "flat" (batch, seq_k) or "square" (batch, seq_k, seq_k: pad queries and pad keys both
    blocked); ``invert``; ``offset`` added to the lengths; ``side`` "right" (pads after the
    tokens, right) or "left" (the last positions taken as real); ``dtype`` "bool" or "int"."""

    def fn(lengths, seq_k):
        L = np.asarray(lengths)[:, None] + offset
        pos = np.arange(seq_k)[None, :]
        m = pos < L if side == "right" else pos >= seq_k - L
        m = ~m if invert else m
        m = {
            "key": m[:, None, :],
            "query": m[:, :, None],
            "flat": m,
            "square": m[:, :, None] & m[:, None, :],
        }[layout]
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
    elif allowed.shape == (batch, seq_k, seq_k):
        diag = np.diagonal(allowed, axis1=1, axis2=2)  # (batch, seq_k): what each position got
        if not np.array_equal(allowed, diag[:, :, None] & diag[:, None, :]):
            return found
        found.append(
            Finding(
                "padding-square",
                f"for lengths {lengths} and seq_k = {seq_k} the mask has shape "
                f"{allowed.shape}; the row of a pad query (sequence 0, query 4) allows "
                f"{int(allowed[0, 4].sum())} keys.",
            )
        )
        allowed = diag[:, None, :]
    elif allowed.shape != (batch, 1, seq_k):
        return found
    flat = allowed.reshape(batch, seq_k)
    pos, L = np.arange(seq_k)[None, :], np.asarray(lengths)[:, None]
    for side, offset in itertools.product(("right", "left"), (0, 1, -1)):
        real = pos < L + offset if side == "right" else pos >= seq_k - (L + offset)
        if side == "left":
            found.append(
                Finding(
                    "padding-left-aligned",
                    f"for lengths {lengths} and seq_k = {seq_k} the row of the sequence of "
                    f"length 2 is {flat[0].astype(int).tolist()} and that of length 3 "
                    f"{flat[3].astype(int).tolist()}.",
                )
            )
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
        if side == "left":
            found.pop()
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
                "attend, so the real positions, those before the sequence's length, are True "
                "and the pads False. (nn.MultiheadAttention's key padding mask uses the "
                "opposite convention, True = pad.)",
                (lambda lengths, seq_k: ~_pad_base(lengths, seq_k)[:, None, :],),
                {"invert": True},
                question="For a sequence of length 2 padded to 5, which positions of your "
                "mask are True? Which ones should a query be allowed to attend to?",
            ),
            Misconception(
                "padding-on-query-axis",
                "The mask has shape (batch, seq_k, 1): its length-seq_k axis lines up with "
                "the query rows of the scores, so it blocks whole rows of pad queries and "
                "still lets every real query attend to the pads. Padding is about keys — "
                "nobody should attend to a pad — so the key axis comes last and the axis of "
                "size 1 is the query axis: (batch, 1, seq_k).",
                (lambda lengths, seq_k: _pad_base(lengths, seq_k)[:, :, None],),
                {"layout": "query"},
                question="Scores have shape (batch, seq_q, seq_k). Which of those axes does "
                "the long axis of your mask line up with, and is it the queries or the keys "
                "that are pads?",
            ),
            Misconception(
                "padding-missing-query-axis",
                "The mask has shape (batch, seq_k), without the axis of size 1 for the "
                "queries. Against scores of shape (batch, seq_q, seq_k), broadcasting lines "
                "its first axis up with the queries, not with the batch, so sequence b's "
                "lengths would block keys for query b of every sequence. Keep a query axis of "
                "size 1 between the two: (batch, 1, seq_k).",
                (lambda lengths, seq_k: _pad_base(lengths, seq_k),),
                {"layout": "flat"},
                question="Broadcast your mask against scores of shape (batch, seq_q, seq_k) "
                "in your head, aligning from the right: which axis of the scores does your "
                "batch axis end up against?",
            ),
            Misconception(
                "padding-square",
                "The mask is (batch, seq_k, seq_k): it blocks the pad queries' rows as well "
                "as the pad keys' columns. Padding only has to keep keys from being attended "
                "to; a pad query's output is thrown away later, and blocking its row too "
                "leaves it with nothing to attend to. The exercise asks for the key mask "
                "alone, (batch, 1, seq_k), which broadcasts over every query row.",
                (_pad_build(layout="square"),),
                {"layout": "square"},
                question="What shape does your mask have, and what does a pad query's row of "
                "it allow? Which of the two, queries or keys, does the exercise ask you to "
                "block?",
            ),
            Misconception(
                "padding-left-aligned",
                "The real tokens are taken to be the last positions, as if the pads came "
                "first. In this course, as in most training batches, a sequence starts at "
                "position 0 and the pads follow it, so position p is real when p is less "
                "than the length.",
                (_pad_build(side="left"),),
                {"side": "left"},
                question="For a sequence of length 2 padded to 5, at which end of your row "
                "are the True entries? Where do the real tokens of a padded sequence sit?",
            ),
            Misconception(
                "padding-off-by-one",
                "One position too many (or too few) is marked real. Positions count from 0, "
                "so a sequence of length L has its real tokens at positions 0 to L − 1: "
                "position p is real when p is strictly less than L.",
                (_pad_build(offset=1), _pad_build(offset=-1)),
                {"offset": 1},
                question="How many True entries does your row have for a sequence of length "
                "3, and at which positions? What is the last real position of a sequence of "
                "length 3?",
            ),
            Misconception(
                "mask-not-boolean",
                "The mask is numbers, not booleans: a 0/1 mask is easily added to the scores "
                "or multiplied into them, and neither blocks anything. Return the boolean "
                "dtype (True = real token); a comparison of positions with lengths is boolean "
                "already.",
                (_pad_build(dtype="int"),),
                {"dtype": "int"},
                question="What dtype does your mask have? What would adding it to the scores "
                "do to a pad key?",
            ),
        ),
    )
)
