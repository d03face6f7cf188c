"""Exercise 17.1 of lesson 17: nucleus (top-p) filtering of a model's logits.

* ``top_p_filter(logits, top_p) -> (..., vocab)`` — every token outside the nucleus set to
  -inf, the others keeping their logits; the input left as it was. The nucleus of a row:
  its tokens sorted from most to least likely, each kept while the tokens before it hold
  less than ``top_p`` of the probability (so the token that crosses ``top_p`` is kept, and
  the most likely token always is).

The reference is :func:`attnlib.sampling.top_p_filter` (equal to transformers'
``TopPLogitsWarper``, ``tests/test_sampling.py``), which a solution must not call. The
cases are float tensors of one, two and three dimensions (non-square: rows ≠ vocab), a row
whose top token alone holds more than ``top_p``, ``top_p`` = 1 and 0.05, logits already
cut by top-k (some -inf) and float64 logits. Every row is drawn (or written) away from a
boundary tie: no token's predecessors hold within 1e-3 of ``top_p``, and no two tokens of a
row have one probability, so every correct idiom (a descending sort and a cumulative sum,
Hugging Face's ascending sort dropping a tail of at most 1 - ``top_p``, a loop per row,
numpy) gives the reference's tokens. The hidden cases draw theirs from generators seeded
with fixed integers that the grader mixes with a seed of its own.

Diagnosis by inference (see :mod:`attnlib.checks._core`): the learner's function is called
on eight probe rows of seven tokens, one row at a time and as batches of shape (8, 7) and
(2, 4, 7), with ``top_p`` 0.55 and 0.85. From each row's result it reads what was returned
(the logits with -inf where dropped, with 0 where dropped, or probabilities), in which order
(the vocabulary's, or sorted) and which tokens were kept. The kept tokens of all sixteen
rows are compared with those of every combination of five choices — where the cut falls
(the crossing token kept, dropped, or one token more), ``top_p`` read as the share to keep
or to drop, the order the mass is added up in (most likely first, least likely first, the
vocabulary's), whether the sorted mask is put back in vocabulary order, and whether
probabilities or raw logits are added up — and the combination with the fewest departures
from the right one names the mistakes (on these probes every combination keeps other
tokens: ``tests/test_ex_sampling.py``). A batch whose rows give other results than the same
rows given alone names rows mixed together.

Not checked: that the input is left as it was. Every call gets a copy of the case's logits
(``attnlib.checks._core``), so a filter that writes -inf into its input and returns it
passes; one that returns nothing fails as an unrecognised mistake (the grader, replaying
the recorded outputs, cannot match a variant that returns None).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import torch

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, fmt

NAME = "top_p_filter"

# ----------------------------------------------------------------------------------------
# The reference and the cases
# ----------------------------------------------------------------------------------------


def _reference(logits, top_p):
    from attnlib.sampling import top_p_filter

    return top_p_filter(logits, top_p)


def _safe(row: np.ndarray, top_p: float) -> bool:
    """No boundary tie in ``row`` (logits as float64): the mass before each token, most
    likely first, is at least 1e-3 away from ``top_p``, and no two finite logits are
    closer than 1e-4 (one probability each)."""
    finite = np.sort(row[np.isfinite(row)])[::-1]
    if len(finite) > 1 and np.diff(finite).max() > -1e-4:
        return False
    p = np.exp(finite - finite[0])
    p /= p.sum()
    before = np.cumsum(p) - p
    return bool(np.abs(before - top_p).min() > 1e-3)


def _draw(rng, shape, top_p, *, scale=1.5, dtype=torch.float32, keep=None) -> torch.Tensor:
    """Logits of ``shape`` drawn row by row with ``rng``, each row drawn again until it is
    safe for ``top_p`` (after rounding to ``dtype``); ``keep`` tokens per row left finite,
    the others -inf (logits cut by top-k before)."""
    *lead, vocab = shape
    rows = []
    for _ in range(int(np.prod(lead, dtype=int))):
        while True:
            row = rng.standard_normal(vocab) * scale
            if keep is not None:
                row[rng.permutation(vocab)[keep:]] = -np.inf
            row = torch.tensor(row, dtype=dtype).double().numpy()
            if _safe(row, top_p):
                rows.append(row)
                break
    return torch.tensor(np.array(rows).reshape(shape), dtype=dtype)


def _from_probs(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64).log().float()


def _cases() -> list[Case]:
    rng = np.random.default_rng(1717)
    confident = _from_probs(
        [0.04, 0.02, 0.8, 0.03, 0.05, 0.01, 0.035, 0.015],  # the top token alone: 0.8 > 0.6
        [0.1, 0.22, 0.04, 0.15, 0.3, 0.07, 0.09, 0.03],
    )
    return [
        Case(
            "one row of 6 tokens (a 1-D tensor), probabilities 0.08, 0.35, 0.12, 0.25, 0.18, "
            "0.02, top_p=0.7",
            (_from_probs([0.08, 0.35, 0.12, 0.25, 0.18, 0.02])[0], 0.7),
        ),
        Case("3 rows of 10 tokens, top_p=0.9", (_draw(rng, (3, 10), 0.9), 0.9)),
        Case("batch 2 x 4 positions x 12 tokens, top_p=0.5", (_draw(rng, (2, 4, 12), 0.5), 0.5)),
        Case("2 rows of 8 tokens, row 0's top token alone holds 0.8, top_p=0.6", (confident, 0.6)),
        Case("top_p=1: every token kept (2 rows of 9 tokens)", (_draw(rng, (2, 9), 1.0), 1.0)),
        Case("top_p=0.05: the top token alone (3 rows of 5)", (_draw(rng, (3, 5), 0.05), 0.05)),
        Case(
            "logits already cut by top-k (6 of 11 tokens -inf), 2 rows, top_p=0.8",
            (_draw(rng, (2, 11), 0.8, keep=5), 0.8),
        ),
        Case(
            "float64, 4 rows of 30 tokens, a peaked distribution, top_p=0.95",
            (_draw(rng, (4, 30), 0.95, scale=3.0, dtype=torch.float64), 0.95),
        ),
    ]


def _hidden_cases() -> list[Case]:
    rng = np.random.default_rng(7117)
    out = []
    for label, shape, kwargs in (
        ("5 rows of 17 tokens", (5, 17), {}),
        ("batch 3 x 2 positions x 9 tokens", (3, 2, 9), {}),
        ("one row of 40 tokens (1-D)", (40,), {"scale": 2.0}),
        ("float64, 2 rows of 13 tokens", (2, 13), {"dtype": torch.float64}),
        ("3 rows of 12 tokens cut by top-k to 4", (3, 12), {"keep": 4}),
        ("4 rows of 7 tokens, confident", (4, 7), {"scale": 4.0}),
    ):
        top_p = round(float(rng.uniform(0.3, 0.95)), 2)
        logits = _draw(rng, shape, top_p, **kwargs)
        out.append(Case(f"hidden: {label}, top_p={top_p}", (logits, top_p)))
    return out


# ----------------------------------------------------------------------------------------
# The mistake model
# ----------------------------------------------------------------------------------------

_AXIS = {"separate": -1, "flattened": -1, "first-axis": 0, "second-axis": 1}


def _build(
    *,
    cut="crossing",
    mass="keep",
    order="descending",
    scatter=True,
    values="probs",
    fill="-inf",
    output="vocab",
    rows="separate",
):
    """A top-p filter with the given choices; the defaults give the correct one.

    ``cut``: "crossing" (a token is kept while the mass before it is below the threshold),
    "short" (while the mass up to and including it is: the crossing token dropped) or
    "one_more" (one token past the right cut); ``mass``: "keep" (the threshold is top_p) or
    "drop" (1 - top_p); ``order`` the mass is added up in: "descending", "ascending",
    "vocab" (no sort); ``scatter``: the sorted mask put back in vocabulary order, or applied
    as it is; ``values`` added up: "probs" or "logits"; ``fill`` of dropped tokens: "-inf",
    "zero", or "probs" (probabilities returned, 0 where dropped); ``output``: "vocab" or
    "sorted" (the sorted logits returned); ``rows``: "separate", "first-axis" or
    "second-axis" (the softmax and the sort along that axis) or "flattened" (all rows as one
    distribution).
    """

    def fn(logits, top_p):
        x = logits.reshape(-1) if rows == "flattened" else logits
        dim = _AXIS[rows]
        v = torch.softmax(x, dim=dim) if values == "probs" else x
        idx = None
        s = v
        if order != "vocab":
            s, idx = torch.sort(v, dim=dim, descending=order == "descending")
        before = s.cumsum(dim) - s  # the mass of the tokens before each one
        t = top_p if mass == "keep" else 1 - top_p
        keep = before + s < t if cut == "short" else before < t
        if cut == "one_more":  # the next token too
            first = torch.ones_like(keep.narrow(dim, 0, 1))
            keep = keep | torch.cat([first, keep.narrow(dim, 0, keep.shape[dim] - 1)], dim)
        base, probs = x, torch.softmax(x, dim=dim)
        if output == "sorted" and idx is not None:
            base, probs = x.gather(dim, idx), probs.gather(dim, idx)
        elif idx is not None and scatter:
            keep = keep.scatter(dim, idx, keep)  # back to the vocabulary's order
        if fill == "probs":
            out = probs.masked_fill(~keep, 0.0)
        else:
            out = base.masked_fill(~keep, -torch.inf if fill == "-inf" else 0.0)
        out = out.reshape(logits.shape)
        return out

    return fn


# The choices that decide which tokens are kept, read off the kept sets.
_CHOICES = {
    "cut": ("crossing", "short", "one_more"),
    "mass": ("keep", "drop"),
    "order": ("descending", "ascending", "vocab"),
    "scatter": (True, False),
    "values": ("probs", "logits"),
}
_DEFAULT = {k: v[0] for k, v in _CHOICES.items()}
_IDS = {
    ("cut", "short"): "crossing-token-dropped",
    ("cut", "one_more"): "one-token-too-many",
    ("order", "ascending"): "least-likely-kept",
    ("order", "vocab"): "cumsum-unsorted",
    ("scatter", False): "mask-not-scattered",
    ("values", "logits"): "cumsum-of-logits",
    ("mass", "drop"): "top-p-as-drop-share",
}


def _combos() -> list[dict]:
    out = []
    for values in itertools.product(*_CHOICES.values()):
        c = dict(zip(_CHOICES, values, strict=True))
        if not (c["order"] == "vocab" and not c["scatter"]):  # nothing sorted, nothing to put back
            out.append(c)
    return out


# ----------------------------------------------------------------------------------------
# Probes and what the inference reads
# ----------------------------------------------------------------------------------------

# Eight rows of seven tokens (chosen so that every combination of _CHOICES keeps other tokens
# on them, each cut at least 0.006 away from its threshold), the top token never first.
_PROBE = np.array(
    [
        [-1.41, 0.44, -0.48, -0.36, -3.82, -2.83, -1.18],
        [-3.54, -1.77, -1.29, -0.49, 0.1, -0.88, -2.79],
        [0.8, 1.11, 0.54, 2.41, 0.61, -0.96, -0.89],
        [-5.77, -1.95, -3.73, -4.01, -2.22, -2.54, 1.38],
        [-1.39, -1.07, -1.48, -1.08, -2.75, -1.28, -0.09],
        [1.35, 0.98, 1.19, 1.79, 2.78, 1.0, 0.92],
        [-2.71, 1.24, 1.23, 2.61, 1.74, 1.09, 0.82],
        [0.26, -0.71, 0.23, 0.6, 0.18, -2.34, 0.41],
    ],
    dtype=np.float32,
)
_PROBE_P = (0.55, 0.85)


def _probs(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@functools.cache
def _signatures() -> dict[tuple, dict]:
    """Kept tokens on the probes (one bool tuple per top_p) -> the combination keeping them
    with the fewest departures from the right one."""
    table: dict[tuple, dict] = {}
    x = torch.tensor(_PROBE, dtype=torch.float64)
    for c in sorted(_combos(), key=_departures):
        fn = _build(**c)
        sig = tuple(tuple(torch.isfinite(fn(x, p)).flatten().tolist()) for p in _PROBE_P)
        table.setdefault(sig, c)
    return table


def _departures(c: dict) -> int:
    return sum(c[k] != _DEFAULT[k] for k in _DEFAULT)


def _result(o, x: np.ndarray):
    """The result of one call as an array of x's shape, or None."""
    a = o.array(0) if o.arity == 1 else None
    return a if a is not None and a.dtype != bool and a.shape == x.shape else None


def _read(v: np.ndarray, x: np.ndarray):
    """One row's result read against its logits ``x``: (kept tokens, fill, arrangement).

    fill is "-inf", "zero", "probs" or None (nothing dropped, or a row of zeros);
    arrangement "vocab", "descending" or "ascending" (the order of the returned entries).
    None when the row reads as none of these.
    """
    p = _probs(x)
    for arrangement in ("vocab", "descending", "ascending"):
        perm = {"vocab": np.arange(len(x)), "descending": np.argsort(-x, kind="stable"),
                "ascending": np.argsort(x, kind="stable")}[arrangement]  # fmt: skip
        xa, pa = x[perm], p[perm]
        same = np.isclose(v, xa, rtol=1e-5, atol=1e-6)
        kept_at, fill = same, None
        if (same | (v == -np.inf)).all():
            fill = "-inf" if not same.all() else None
        elif (same | (v == 0)).all():
            fill = "zero" if same.any() else None
        else:
            nz = v != 0
            if not (nz.any() and (v >= 0).all()):
                continue
            share = pa[nz] / pa[nz].sum()  # the kept tokens' probabilities, renormalised
            if not any(np.allclose(v[nz], q, rtol=1e-4, atol=1e-6) for q in (pa[nz], share)):
                continue
            kept_at, fill = nz, "probs"
        kept = np.zeros(len(x), dtype=bool)
        kept[perm[kept_at]] = True
        return kept, fill, arrangement
    return None


def _run_probes(learner):
    """Every probe call: per top_p, the eight rows one at a time and the two batches."""
    singles, batches = {}, {}
    for p in _PROBE_P:
        for r, row in enumerate(_PROBE):
            v = _result(learner(torch.tensor(row), p), row)
            if v is None:  # a function that takes (rows, vocab) only: one row of two dims
                v = _result(learner(torch.tensor(row[None]), p), row[None])
                v = None if v is None else v[0]
            singles[p, r] = v
        for shape in ((8, 7), (2, 4, 7)):
            x = _PROBE.reshape(shape)
            v = _result(learner(torch.tensor(x), p), x)
            batches[p, shape] = None if v is None else v.reshape(_PROBE.shape)
    return singles, batches


def _row_text(p: float, r: int, kept: np.ndarray) -> str:
    probs = _probs(_PROBE[r].astype(np.float64))
    tokens = ", ".join(str(j) for j in np.flatnonzero(kept)) or "none"
    return (
        f"with top_p = {p}, probe row {r} keeps token(s) {tokens} ({int(kept.sum())} of 7, "
        f"holding {fmt(float(probs[kept].sum()))} of the probability)"
    )


def _kept_detail(key: str, combo: dict, kept: dict) -> str:
    """What was measured for one departing choice: on the first probe row where undoing it
    keeps other tokens, the tokens kept, with a clause about them that holds there."""
    if key == "values":  # the two rows that tell sums of logits from sums of probabilities
        p = _PROBE_P[0]
        neg, pos = (_row_text(p, r, kept[p, r]).split(" keeps ", 1)[1] for r in (4, 5))
        return (
            f"with top_p = {p}, probe row 4 (all its logits negative) keeps {neg}; probe "
            f"row 5 (all its logits positive) keeps {pos}"
        )
    if key == "mass":
        for r in range(len(_PROBE)):
            lo, hi = kept[_PROBE_P[0], r], kept[_PROBE_P[1], r]
            if hi.sum() < lo.sum():
                return (
                    f"raising top_p from {_PROBE_P[0]} to {_PROBE_P[1]} keeps fewer tokens in "
                    f"probe row {r}: {int(lo.sum())}, then {int(hi.sum())}"
                )
    undone = _build(**{**combo, key: _DEFAULT[key]})
    for p, r in itertools.product(_PROBE_P, range(len(_PROBE))):
        x = torch.tensor(_PROBE[r], dtype=torch.float64)
        other = torch.isfinite(undone(x, p)).numpy()
        if not np.array_equal(other, kept[p, r]):
            return _row_text(p, r, kept[p, r]) + _clause(key, p, r, kept[p, r])
    return _row_text(_PROBE_P[0], 0, kept[_PROBE_P[0], 0])


def _clause(key: str, p: float, r: int, kept: np.ndarray) -> str:
    probs = _probs(_PROBE[r].astype(np.float64))
    m, n = float(probs[kept].sum()), int(kept.sum())
    if key == "cut" and n == 0:
        return ": no token at all"
    if key == "cut" and m < p and not kept.all():
        j = int(np.argmax(np.where(kept, -1.0, probs)))
        if m + probs[j] >= p:
            return (
                f"; they hold less than top_p, and token {j} (probability "
                f"{fmt(float(probs[j]))}), which would take them past it, is dropped"
            )
    if key == "cut" and n > 1:
        i = int(np.argmin(np.where(kept, probs, 2.0)))
        if m - probs[i] >= p:
            return (
                f"; without the least likely of them (token {i}, probability "
                f"{fmt(float(probs[i]))}) the others still hold {fmt(m - float(probs[i]))}"
            )
    if key == "order" and np.array_equal(kept, np.arange(7) < n):
        return f": the first {n} tokens of the vocabulary"
    if key == "order" and kept[np.argmin(probs)] and not kept[np.argmax(probs)]:
        return (
            f": the least likely token ({fmt(float(probs.min()))}) is kept, the most likely "
            f"({fmt(float(probs.max()))}) is not"
        )
    if key == "scatter":
        top = np.sort(np.argsort(-probs, kind="stable")[:n]).tolist()
        return f", where the {n} most likely tokens are {', '.join(map(str, top))}"
    return ""


def _infer(learner) -> list[Finding]:
    singles, batches = _run_probes(learner)
    found = _rows_findings(singles, batches)
    readings = {
        k: None if v is None else _read(v, _PROBE[k[1]].astype(np.float64))
        for k, v in singles.items()
    }
    found += _output_findings(readings, singles)
    if any(v is None for v in readings.values()):
        return found
    kept = {k: v[0] for k, v in readings.items()}
    sig = tuple(
        tuple(np.concatenate([kept[p, r] for r in range(len(_PROBE))]).tolist()) for p in _PROBE_P
    )
    combo = _signatures().get(sig)
    if combo is not None:
        for key in _CHOICES:
            if combo[key] != _DEFAULT[key]:
                found.append(Finding(_IDS[key, combo[key]], _kept_detail(key, combo, kept) + "."))
    return found


def _rows_findings(singles, batches) -> list[Finding]:
    counts = {}
    for (p, shape), got in batches.items():
        alone = [singles[p, r] for r in range(len(_PROBE))]
        if got is None or any(a is None for a in alone):
            continue
        differ = sum(not close(got[r], alone[r], rel=1e-5, abs_=1e-7) for r in range(len(alone)))
        counts[shape] = max(counts.get(shape, 0), differ)
    if not any(counts.values()):
        return []
    said = " and ".join(
        f"{n} of the 8 rows of a batch of shape {shape}" for shape, n in counts.items() if n
    )
    return [
        Finding(
            "rows-mixed",
            f"{said} give other results than the same rows filtered one at a time.",
        )
    ]


def _output_findings(readings, singles) -> list[Finding]:
    found = []
    for fill, mid in (("zero", "dropped-set-to-zero"), ("probs", "returns-probabilities")):
        at = [k for k, v in readings.items() if v is not None and v[1] == fill]
        if not at:
            continue
        p, r = at[0]
        v, kept = singles[p, r], readings[p, r][0]
        if fill == "zero":
            what = (
                f"the dropped tokens hold 0: with top_p = {p}, {int((~kept).sum())} of the 7 "
                f"entries of probe row {r} are 0 and the others are its logits"
            )
        else:
            what = (
                f"the returned values are probabilities: with top_p = {p}, the entries of "
                f"probe row {r} lie between 0 and 1 and add up to {fmt(float(v.sum()))}"
            )
        found.append(Finding(mid, what + "."))
    at = [k for k, v in readings.items() if v is not None and v[2] != "vocab"]
    if at:
        p, r = at[0]
        order = readings[p, r][2]
        j = int(np.argmax(_PROBE[r]) if order == "descending" else np.argmin(_PROBE[r]))
        found.append(
            Finding(
                "returned-sorted",
                f"the entries come back in sorted order: with top_p = {p}, entry 0 of probe row "
                f"{r} is token {j}'s value (the {'most' if order == 'descending' else 'least'} "
                f"likely token), not token 0's.",
            )
        )
    return found


# ----------------------------------------------------------------------------------------
# Registration
# ----------------------------------------------------------------------------------------


def _m(mid, explanation, question, variants=None, **settings):
    return Misconception(
        mid, explanation, tuple(variants or (_build(**settings),)), settings, question=question
    )


register(
    Exercise(
        name=NAME,
        summary="top_p_filter(logits, top_p) -> (..., vocab): the tokens outside each row's "
        "nucleus (the most likely tokens, each kept while the ones before it hold less than "
        "top_p) set to -inf, the others unchanged; the input left as it was",
        reference=_reference,
        make_cases=_cases,
        make_hidden_cases=_hidden_cases,
        forbidden=("attnlib.sampling.top_p_filter",),
        infer=_infer,
        build=_build,
        exclusive=(
            # without a sort there is no sorted decision to put back, nor sorted logits
            frozenset({"cumsum-unsorted", "mask-not-scattered"}),
            frozenset({"cumsum-unsorted", "returned-sorted"}),
            # a sorted decision on the sorted logits is one mistake: the order of the output
            frozenset({"mask-not-scattered", "returned-sorted"}),
        ),
        misconceptions=(
            _m(
                "crossing-token-dropped",
                "The token whose probability takes the kept mass past top_p is dropped: the "
                "kept tokens then hold less than top_p, and a row whose most likely token "
                "alone holds more than top_p keeps nothing at all (its softmax has nothing "
                "to share out). The nucleus is the smallest set of most likely tokens "
                "holding at least top_p: a token is kept when the tokens before it hold less "
                "than top_p, its own probability left out of its test.",
                "Add up the probabilities of the tokens your function keeps in a row: do "
                "they reach top_p? What does a row whose most likely token alone holds more "
                "than top_p keep?",
                cut="short",
            ),
            _m(
                "one-token-too-many",
                "One token past the nucleus is kept: the test was shifted by one place too "
                "many (the mass before the previous token compared with top_p), so the first "
                "token after the crossing one gets in. The nucleus ends with the token that "
                "takes the kept mass to top_p or beyond; without it the mass falls short, "
                "with one more it is larger than needed.",
                "Take the least likely token your function keeps out of a row: do the "
                "others still hold top_p? Which token should be the last one kept?",
                cut="one_more",
            ),
            _m(
                "least-likely-kept",
                "The mass is added up from the least likely token: the tokens kept are the "
                "least likely ones until their mass reaches top_p, and the most likely token "
                "can be dropped. The nucleus starts from the most likely token. A sort from "
                "least to most likely works only with the test turned round: drop the least "
                "likely tokens while their mass is at most one minus top_p.",
                "Which tokens does your function keep: the most likely ones or the least "
                "likely? Is the most likely token of every row kept?",
                order="ascending",
            ),
            _m(
                "cumsum-unsorted",
                "The probabilities are added up in the vocabulary's order, with no sort: the "
                "tokens kept are the first tokens of the vocabulary until their mass reaches "
                "top_p, whatever their probabilities. The nucleus is made of the most likely "
                "tokens, so the mass is added up from the most likely down, and each "
                "decision then goes back to its token's place.",
                "Are the tokens your function keeps the most likely ones, or the first ones "
                "of the vocabulary? In which order should their probabilities be added up?",
                order="vocab",
            ),
            _m(
                "mask-not-scattered",
                "The keep-or-drop decision is made in sorted order and applied as it is to "
                "the logits, which are in vocabulary order: the decision's first entry is "
                "about the most likely token but lands on token 0. The number of tokens kept "
                "is right, but they are the first tokens of the vocabulary. Each decision "
                "goes back to its own token's place, with the indices the sort returned.",
                "Your function keeps as many tokens as it should, but which ones? The first "
                "entry of your sorted decision is about which token, and on which token does "
                "it land?",
                scatter=False,
            ),
            _m(
                "cumsum-of-logits",
                "The raw logits are added up, not probabilities: logits can be negative and "
                "do not add up to 1, so a row of negative logits never reaches top_p and "
                "keeps every token, and a row with a logit above top_p stops after one. "
                "top_p is a share of the probability: the logits go through a softmax before "
                "they are added up.",
                "Compare a row whose logits are all negative with a row whose logits are "
                "all positive: how many tokens does each keep? What are the numbers your "
                "function adds up?",
                values="logits",
            ),
            _m(
                "top-p-as-drop-share",
                "top_p is read as the share of the probability to drop: the kept tokens "
                "hold about one minus top_p, and a larger top_p keeps fewer tokens. top_p is "
                "the mass to keep (0.9 keeps the most likely tokens up to 0.9). Hugging "
                "Face's version drops the least likely tokens while their mass is at most one "
                "minus top_p: the same nucleus, seen from the other end.",
                "Raise top_p from 0.5 to 0.9: does your function keep more tokens, or "
                "fewer? What share of the probability do the kept tokens hold?",
                mass="drop",
            ),
            _m(
                "dropped-set-to-zero",
                "The dropped tokens are set to 0 instead of minus infinity. A logit of 0 is "
                "not a probability of 0: after the softmax each dropped token still gets e to "
                "the power 0 over the sum, often more than a kept token with a negative "
                "logit. A filter works on logits, and minus infinity is the one logit whose "
                "probability is exactly 0.",
                "What value do the tokens your function drops get? What probability does a "
                "logit of that value get after the softmax?",
                fill="zero",
            ),
            _m(
                "returns-probabilities",
                "The function returns probabilities (0 for the dropped tokens), not logits. "
                "A filter's result is logits again: it goes on to another filter or to the "
                "sampler's softmax, and a softmax of probabilities is not the distribution "
                "meant. The kept tokens keep their logits as they were, the others get minus "
                "infinity.",
                "Are the numbers your function returns logits or probabilities? What does "
                "the next step, another filter and then a softmax, expect?",
                fill="probs",
            ),
            _m(
                "returned-sorted",
                "The output comes back in sorted order: entry 0 of a row holds the most "
                "likely token's logit, not token 0's. The sort only finds the nucleus; the "
                "result has each logit at its own token's place, so the decision (or the "
                "filtered sorted logits) goes back to vocabulary order with the indices the "
                "sort returned.",
                "Look at entry 0 of a row of your output: is it token 0's logit, or the "
                "largest one? In which order does the sampler read the entries?",
                output="sorted",
            ),
            _m(
                "rows-mixed",
                "The rows are not filtered one by one: the softmax, the sort or the "
                "cumulative sum runs along another axis than the vocabulary's (the last "
                "one), or the rows are flattened into one distribution. Each row, a position "
                "of a sequence or a sequence of a batch, is a distribution over the "
                "vocabulary of its own and gets its own nucleus.",
                "Filter one row alone, then the same row inside a batch: do you get the "
                "same result? Along which axis do your softmax, sort and sum run?",
                variants=[_build(rows=r) for r in ("first-axis", "flattened", "second-axis")],
                rows="first-axis",
            ),
        ),
    )
)
