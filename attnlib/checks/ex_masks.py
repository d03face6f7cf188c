"""Exercises of lesson 08: the masks, causal_mask and padding_mask (numpy).

* ``causal_mask(seq) -> bool (seq, seq)`` — query i may attend to keys 0..i;
* ``padding_mask(lengths, seq_k) -> bool (batch, 1, seq_k)`` — True = real token.

When a function is wrong, each exercise's ``infer`` measures it on probes (see
:mod:`attnlib.checks._core`): the pattern and dtype returned (booleans, 0/1 numbers or an
additive float mask), its shape (the key axis last) and where the edge of the real
tokens sits.
"""

from __future__ import annotations

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
