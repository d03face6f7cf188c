"""Exercises of lesson 14: fewer keys to keep.

* ``sliding_window_mask(seq_q, seq_k, window) -> bool (seq_q, seq_k)`` — the band a
  sliding-window layer attends through: the queries are the newest seq_q of the seq_k
  positions (as when decoding with a cache), and the query at position p sees the keys at
  p - window + 1 .. p (itself and the window - 1 keys before it);
* ``topk_mask(index_scores, n_keep, mask) -> bool (batch, seq_q, seq_k)`` — which keys each
  query keeps: its n_keep highest-scoring keys among those ``mask`` allows, ties to the lower
  key index (all of them when
  fewer than k are allowed).

References are attnlib's own functions (:mod:`attnlib.windows`, :mod:`attnlib.selection`,
imported when a check runs); tests/test_ex_fewer_keys.py proves them equal to independent
oracles. The lesson's third exercise, ``absorbed_scores``, is in
:mod:`attnlib.checks.ex_latent`.

Diagnosis by inference (see :mod:`attnlib.checks._core`):

* ``sliding_window_mask``: the returned band is read in offsets d = (query position) - (key
  position) on two probes with different seq_k - seq_q and windows: where its far edge
  sits relative to the window (W + 1 or W - 1 keys), whether the near edge is the query
  itself (or one before it, or in the future), and whether the edges move with
  seq_k - seq_q (the queries aligned to the first positions instead of the last);
* ``topk_mask``: on rows the mask leaves whole, how many keys are kept and whether they are
  the highest or the lowest scores; on rows of tied scores, which of the tied keys are kept
  (the lowest indices, others, or all of them); on partly masked rows, whether a forbidden
  key is kept, or whether the n_keep were picked among all keys before the mask removed some.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt

# ----------------------------------------------------------------------------------------
# Shared: reading a returned mask.
# ----------------------------------------------------------------------------------------


def _allowed(o, shape):
    """(allowed as bool, what the numbers were) of a returned mask; (None, "") if unreadable.

    Booleans are read as they are; 0/1 numbers as nonzero = allowed; an additive float mask
    (0 where allowed, -inf or a huge negative number where blocked) as 0 = allowed.
    """
    if not o.ok or o.arity != 1:
        return None, ""
    a = o.array(0)
    if a is None or a.shape != shape:
        return None, ""
    if a.dtype == bool:
        return a, ""
    kind = str(getattr(o.value, "dtype", "numbers"))
    if np.isin(a, (0.0, 1.0)).all():
        return a != 0, f"{kind} 0/1 numbers"
    if ((a == 0) | (a <= -1e4)).all() and (a == 0).any():
        return a == 0, f"an additive {kind} mask (0 where allowed, {fmt(float(a.min()))} blocked)"
    return None, ""


_NOT_BOOLEAN = (
    "The mask is numbers, not booleans. np.tril / np.ones give floats; a float 0/1 mask is "
    "easily added to the scores, which blocks nothing. Return dtype bool (True = may attend)."
)


# ----------------------------------------------------------------------------------------
# sliding_window_mask(seq_q, seq_k, window) -> bool (seq_q, seq_k)
# ----------------------------------------------------------------------------------------


def _window_reference(seq_q, seq_k, window):
    from attnlib.windows import sliding_window_mask

    return sliding_window_mask(seq_q, seq_k, window=window, align="bottom_right")


def _window_build(*, far=0, near="self", align="bottom_right", dtype="bool"):
    """A sliding-window mask with the given choices; the defaults give the correct one.

    With d = (query position) - (key position): ``far`` shifts the far edge d <= window - 1
    by -1 or +1; ``near`` is "self" (d >= 0), "excluded" (d >= 1) or "ahead" (|d| < window,
    no causal edge); ``align`` "top_left" puts query i at position i instead of
    i + seq_k - seq_q; ``dtype`` "float" returns 0/1 numbers.
    """

    def fn(seq_q, seq_k, window):
        offset = seq_k - seq_q if align == "bottom_right" else 0
        d = (np.arange(seq_q)[:, None] + offset) - np.arange(seq_k)[None, :]  # (seq_q, seq_k)
        lo = {"self": 0, "excluded": 1, "ahead": -(window - 1)}[near]
        m = (d >= lo) & (d <= window - 1 + far)
        return m if dtype == "bool" else m.astype(np.float64)

    return fn


def _window_cases() -> list[Case]:
    return [
        Case(f"seq_q={q}, seq_k={k}, window={w}{note}", (q, k, w))
        for q, k, w, note in (
            (6, 6, 3, " (a prompt: seq_q = seq_k)"),
            (3, 9, 4, " (3 new queries, 6 keys cached)"),
            (1, 7, 3, " (one new token)"),
            (5, 8, 1, " (window 1: each query sees itself only)"),
            (2, 5, 10, " (window >= seq_k: plain causal)"),
            (4, 11, 5, ""),
            (4, 5, 3, " (early queries: the first ones see fewer than window keys)"),
        )
    ]


def _window_hidden_cases() -> list[Case]:
    # sizes drawn (the grader's per-run seed changes them), plus the edge cases window 1
    # and a window wider than the sequence
    rng = np.random.default_rng(121)
    drawn = []
    for _ in range(3):
        seq_k = int(rng.integers(2, 15))
        seq_q = int(rng.integers(1, seq_k + 1))
        drawn.append((seq_q, seq_k, int(rng.integers(1, seq_k + 1))))
    return [
        Case(f"hidden: seq_q={q}, seq_k={k}, window={w}", (q, k, w))
        for q, k, w in (*drawn, (2, 2, 1), (1, 1, 4), (7, 7, 4), (3, 4, 3))
    ]


# Two probes: different seq_k - seq_q (13 and 3) and windows, so that an edge tied to the
# first positions moves between them while one tied to the last positions stays.
_WINDOW_PROBES = ((7, 20, 5), (6, 9, 3))


def _band(allowed, seq_q, seq_k):
    """(lo, hi) when ``allowed`` is exactly lo <= d <= hi with d measured for queries at the
    last positions; None if it is not such a band or allows nothing."""
    d = (np.arange(seq_q)[:, None] + seq_k - seq_q) - np.arange(seq_k)[None, :]
    if not allowed.any():
        return None
    lo, hi = int(d[allowed].min()), int(d[allowed].max())
    if not np.array_equal(allowed, (d >= lo) & (d <= hi)):
        return None
    return lo, hi


def _infer_window(learner) -> list[Finding]:
    bands, dtype_note = [], ""
    for seq_q, seq_k, window in _WINDOW_PROBES:
        allowed, what = _allowed(learner(seq_q, seq_k, window), (seq_q, seq_k))
        if allowed is None:
            return []
        dtype_note = dtype_note or what
        band = _band(allowed, seq_q, seq_k)
        if band is None:
            return [_not_boolean(dtype_note)] if dtype_note else []
        bands.append((band, seq_k - seq_q, window))
    found = [_not_boolean(dtype_note)] if dtype_note else []
    ((lo_a, hi_a), off_a, w_a), ((lo_b, hi_b), off_b, w_b) = bands
    # The far edge follows the window; how it moves between the probes gives the alignment.
    shift = (hi_a - w_a) - (hi_b - w_b)
    if shift == 0:
        top_left = False
    elif shift == off_a - off_b:
        top_left = True
    else:
        return found
    near = [lo - (off if top_left else 0) for lo, off in ((lo_a, off_a), (lo_b, off_b))]
    far = [hi - (off if top_left else 0) - (w - 1) for (_, hi), off, w in bands]
    seq_q, seq_k, window = _WINDOW_PROBES[0]
    if far[0] == far[1] and far[0] in (1, -1):
        reach = window - 1 + far[0]
        found.append(
            Finding(
                "window-plus-one" if far[0] == 1 else "window-minus-one",
                f"with window = {window}, a query at position p reaches back to key p - "
                f"{reach}; the oldest key of a window of {window} is p - {window - 1}.",
            )
        )
    if near[0] == near[1] == 1:
        found.append(
            Finding(
                "window-excludes-self",
                "every query's own position is False: the newest key a query sees is the "
                "one before it (query 0 of a prompt sees nothing).",
            )
        )
    elif near[0] < 0 and near[1] < 0:
        found.append(
            Finding(
                "window-looks-ahead",
                f"a query also sees keys after its own position (up to {-min(near)} "
                "positions ahead on the probes): the band is not causal.",
            )
        )
    if top_left:
        found.append(
            Finding(
                "window-top-left",
                f"with seq_q={seq_q} queries and seq_k={seq_k} keys, your band puts query i "
                f"at position i, not at i + seq_k - seq_q = i + {seq_k - seq_q}: the queries "
                "were aligned with the first keys instead of the last.",
            )
        )
    return found


def _not_boolean(what: str) -> Finding:
    return Finding("mask-not-boolean", f"the mask is {what}, not booleans (dtype bool).")


register(
    Exercise(
        name="sliding_window_mask",
        summary="sliding_window_mask(seq_q, seq_k, window) -> bool (seq_q, seq_k): the query "
        "at position p sees keys p - window + 1 .. p; the queries are the last seq_q positions",
        reference=_window_reference,
        make_cases=_window_cases,
        make_hidden_cases=_window_hidden_cases,
        exact=True,
        forbidden=("attnlib.windows.sliding_window_mask",),
        infer=_infer_window,
        build=_window_build,
        misconceptions=(
            Misconception(
                "window-plus-one",
                "The band holds window + 1 keys: 'the last W keys' are the query itself and "
                "the W - 1 keys before it, so a key is kept when 0 <= p_q - p_k < W "
                "(strictly less than W, not <= W).",
                (_window_build(far=1),),
                {"far": 1},
            ),
            Misconception(
                "window-minus-one",
                "The band holds window - 1 keys: the oldest key of the window is dropped. "
                "Keep a key when 0 <= p_q - p_k <= W - 1, i.e. p_k > p_q - W (not p_k > "
                "p_q - W + 1).",
                (_window_build(far=-1),),
                {"far": -1},
            ),
            Misconception(
                "window-excludes-self",
                "The query's own position is left out (0 < p_q - p_k). A token always sees "
                "itself: the window is itself and the W - 1 keys before it, 0 <= p_q - p_k.",
                (_window_build(near="excluded"),),
                {"near": "excluded"},
            ),
            Misconception(
                "window-looks-ahead",
                "The band reaches into the future (|p_q - p_k| < W, or no upper limit on the "
                "key position): a decoder must not see later tokens. A sliding window is a "
                "causal mask with its far end cut off: 0 <= p_q - p_k < W.",
                (
                    _window_build(near="ahead"),
                    lambda seq_q, seq_k, window: (
                        np.arange(seq_k)[None, :]
                        > np.arange(seq_q)[:, None] + seq_k - seq_q - window
                    ),
                ),
                {"near": "ahead"},
            ),
            Misconception(
                "window-top-left",
                "The queries were put at positions 0 .. seq_q - 1. They are the newest "
                "tokens: query i sits at position i + (seq_k - seq_q), as in "
                "causal_mask(..., align='bottom_right'). This only shows when seq_q != seq_k.",
                (_window_build(align="top_left"),),
                {"align": "top_left"},
            ),
            Misconception(
                "mask-not-boolean",
                _NOT_BOOLEAN,
                (_window_build(dtype="float"),),
                {"dtype": "float"},
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# topk_mask(index_scores, n_keep, mask) -> bool (batch, seq_q, seq_k)
# ----------------------------------------------------------------------------------------


def _topk_reference(index_scores, n_keep, mask):
    from attnlib.selection import topk_mask

    return topk_mask(index_scores, n_keep, mask=mask)


def _topk_build(*, order="high", k_shift=0, masking="before", ties="lower"):
    """Top-k selection with the given choices; the defaults give the correct function.

    ``order`` "low" keeps the lowest scores; ``k_shift`` keeps k + k_shift keys;
    ``masking`` "before" (right: choose among the allowed keys), "after" (choose among all
    keys, then drop the forbidden ones) or "ignore" (never look at the mask); ``ties``
    "lower" (right: among equal scores the lower key index), "higher" (the higher index,
    as the last k of an ascending stable sort), "topk" (whatever torch.topk returns) or
    "all" (every key scoring at least the k-th score: a threshold keeps all the tied).
    """

    def fn(index_scores, n_keep, mask):
        key = index_scores if order == "high" else -index_scores
        if masking == "before":
            key = key.masked_fill(~mask, float("-inf"))  # (batch, seq_q, seq_k)
        n = max(0, min(n_keep + k_shift, key.shape[-1]))
        if ties == "all":
            if n == 0:
                keep = torch.zeros(key.shape, dtype=torch.bool)
            else:
                kth = key.sort(dim=-1, descending=True).values[..., n - 1 : n]  # (..., 1)
                keep = key >= kth
        else:
            if ties == "topk":
                top = key.topk(n, dim=-1).indices  # (batch, seq_q, n)
            elif ties == "higher":
                top = key.argsort(dim=-1, stable=True)[..., key.shape[-1] - n :]
            else:
                top = key.argsort(dim=-1, descending=True, stable=True)[..., :n]
            keep = torch.zeros(key.shape, dtype=torch.bool).scatter(-1, top, True)
        return keep & mask if masking != "ignore" else keep

    return fn


def _topk_scores(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _relu_scores(gen, *shape):
    """Index scores as an indexer's ReLU makes them: many exact zeros, so ties."""
    return torch.randn(*shape, generator=gen, dtype=torch.float64).clamp(min=0) - 0.0


def _causal(seq_q, seq_k):
    q = torch.arange(seq_q)[:, None] + seq_k - seq_q
    return torch.arange(seq_k)[None, :] <= q  # (seq_q, seq_k), queries at the last positions


def _topk_cases(seed: int = 1402, prefix: str = "") -> list[Case]:
    gen = torch.Generator().manual_seed(seed)
    holes = torch.ones(4, 8, dtype=torch.bool)
    holes[1] = False  # query 1 may see no key
    holes[2, ::2] = False
    lengths = torch.tensor([6, 3])[:, None, None] > torch.arange(6)  # (2, 1, 6) padding
    return [
        Case(prefix + "batch 2, 4 queries, 7 keys, n_keep=3, causal",
             (_topk_scores(gen, 2, 4, 7), 3, _causal(4, 7))),
        Case(prefix + "5 queries, 5 keys, n_keep=2, causal (query 0 has 1 key)",
             (_topk_scores(gen, 1, 5, 5), 2, _causal(5, 5))),
        Case(prefix + "batch 2, 3 queries, 6 keys, n_keep=6 = seq_k, padding lengths 6 and 3",
             (_topk_scores(gen, 2, 3, 6), 6, lengths)),
        Case(prefix + "4 queries, 8 keys, n_keep=3, query 1 fully masked, query 2 sees odd keys",
             (_topk_scores(gen, 1, 4, 8), 3, holes)),
        Case(prefix + "batch 3, 2 queries, 9 keys, n_keep=1, nothing masked",
             (_topk_scores(gen, 3, 2, 9), 1, torch.ones(2, 9, dtype=torch.bool))),
        Case(prefix + "ReLU scores (many exact zeros: ties), batch 2, 6 queries, 10 keys, "
             "n_keep=4, causal", (_relu_scores(gen, 2, 6, 10), 4, _causal(6, 10))),
        Case(prefix + "tied scores, 3 queries, 12 keys, n_keep=3, nothing masked",
             (_tied_scores(gen), 3, torch.ones(3, 12, dtype=torch.bool))),
    ]  # fmt: skip


def _tied_scores(gen):
    """(1, 3, 12): a few distinct scores among many equal ones (0 and 1), so that the k-th
    kept key always falls inside a group of ties."""
    s = torch.zeros(1, 3, 12, dtype=torch.float64)
    s[0, 0, [3, 8]] = 2.0 + torch.rand(2, generator=gen, dtype=torch.float64)
    s[0, 1, :] = 1.0
    s[0, 1, [0, 5]] = torch.rand(2, generator=gen, dtype=torch.float64) * 0.5
    s[0, 2, 6] = 3.0
    s[0, 2, [1, 2]] = -1.0
    return s


def _topk_hidden_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(1422)
    extra = Case(
        "hidden: batch 2, 6 queries, 10 keys, n_keep=4, causal",
        (_topk_scores(gen, 2, 6, 10), 4, _causal(6, 10)),
    )
    return _topk_cases(1421, "hidden: ") + [extra]


def _topk_probe():
    """Scores (1, 6, 8) with distinct values, k = 3, and a mask: rows 0-1 whole; row 2
    hides its two highest and its lowest score; row 3 allows 2 keys; row 4 none; row 5
    hides its highest score and half the keys."""
    s = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(1499), dtype=torch.float64)
    order = s[0].argsort(dim=-1)  # ascending
    mask = torch.ones(6, 8, dtype=torch.bool)
    mask[2, order[2, [-1, -2, 0]]] = False
    mask[3] = False
    mask[3, order[3, [1, 5]]] = True
    mask[4] = False
    mask[5, order[5, [-1, 0, 2, 4]]] = False
    return s, 3, mask


# Rows of tied scores (all keys allowed), k = 3: one higher score, then a long run of
# zeros, one lower score, so that the k-th kept key falls among the zeros whether the k
# highest or the k lowest are kept, and for k - 1 and k + 1 as well.
_TIE_ROWS = torch.tensor(
    [
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 1.5, 0, -1.0],
        [0, -2.0, 0, 0, 0, 0, 0, 0, 0, 0, 0.7, 0],
        [0.4, 0, 0, 0, 0, 0, -0.3, 0, 0, 0, 0, 0],
    ],
    dtype=torch.float64,
)


def _tie_findings(learner, n, high) -> list[Finding]:
    """What the learner keeps among tied scores (rows of _TIE_ROWS, all keys allowed), given
    the count ``n`` and the direction ``high`` measured on distinct scores."""
    s_t = _TIE_ROWS[None]  # (1, rows, seq_k)
    mask = torch.ones(_TIE_ROWS.shape, dtype=torch.bool)
    sel, _ = _allowed(learner(s_t, 3, mask), tuple(s_t.shape))
    if sel is None:
        return []
    key = s_t.numpy()[0] if high else -s_t.numpy()[0]
    kinds, wrong_row = set(), None
    for r in range(key.shape[0]):
        order = np.argsort(-key[r], kind="stable")
        boundary = key[r, order[n - 1]]
        better = np.nonzero(key[r] > boundary)[0]
        tied = np.nonzero(key[r] == boundary)[0]  # ascending key index
        kept = np.nonzero(sel[0, r])[0]
        if not set(better) <= set(kept) or not set(kept) <= set(better) | set(tied):
            return []
        among = sorted(set(kept) & set(tied))
        m = n - len(better)
        if len(among) == m:
            kinds.add("lower" if among == list(tied[:m]) else "other")
            if among != list(tied[:m]) and wrong_row is None:
                wrong_row = r
        elif len(among) == len(tied) > m:
            kinds.add("all")
        else:
            return []
    if kinds == {"lower"}:
        return []
    if kinds == {"all"}:
        return [
            Finding(
                "topk-ties-all-kept",
                f"on queries whose {n}-th best score is shared by several keys (the rows of "
                f"{_TIE_ROWS.shape[-1]} keys with many exact zeros), you keep every tied key, "
                f"more than {n}: a threshold at the {n}-th score.",
            )
        ]
    if "all" in kinds:
        return []
    r = wrong_row
    return [
        Finding(
            "topk-tie-break",
            f"among equal scores you do not keep the lowest key indices (on the row "
            f"{_TIE_ROWS[r].tolist()} keeping {n}, you keep keys "
            f"{np.nonzero(sel[0, r])[0].tolist()}).",
        )
    ]


def _best(s, n, high, allowed=None):
    """Bool, shape of s: the n highest (or lowest) entries of each row among ``allowed``."""
    key = s if high else -s
    if allowed is not None:
        key = np.where(allowed, key, -np.inf)
    idx = np.argsort(-key, axis=-1, kind="stable")[..., :n]
    out = np.zeros(s.shape, dtype=bool)
    np.put_along_axis(out, idx, True, axis=-1)
    return out & np.isfinite(key)


def _infer_topk(learner) -> list[Finding]:
    s_t, k, mask_t = _topk_probe()
    sel, what = _allowed(learner(s_t, k, mask_t), tuple(s_t.shape))
    if sel is None:
        return []
    s, mask, sel = s_t.numpy()[0], mask_t.numpy(), sel[0]
    full = [r for r in range(s.shape[0]) if mask[r].all()]
    counts = {int(sel[r].sum()) for r in full}
    if len(counts) != 1:
        return []
    n = counts.pop()
    if n == 0 or n >= s.shape[1]:
        return []
    high = bool(np.array_equal(sel[full], _best(s[full], n, True)))
    low = bool(np.array_equal(sel[full], _best(s[full], n, False)))
    if not (high or low):
        return []
    found = []
    if low:
        found.append(
            Finding(
                "topk-lowest",
                f"on a query that may see all {s.shape[1]} keys, the keys you keep are the "
                f"{n} with the lowest index scores.",
            )
        )
    if n in (k - 1, k + 1):
        found.append(
            Finding(
                "topk-off-by-one",
                f"with n_keep = {k}, a query that may see all {s.shape[1]} keys keeps {n} of them.",
            )
        )
    found += _tie_findings(learner, n, high)
    partial = [r for r in range(s.shape[0]) if not mask[r].all()]
    forbidden = sel[partial] & ~mask[partial]
    if forbidden.any():
        r = partial[int(np.nonzero(forbidden.any(axis=-1))[0][0])]
        found.append(
            Finding(
                "topk-ignores-mask",
                f"{int(forbidden.sum())} kept keys are ones the mask forbids (query {r} keeps "
                f"keys {np.nonzero(sel[r] & ~mask[r])[0].tolist()}, which it may not see).",
            )
        )
        return found
    right = _best(s[partial], n, high, mask[partial])
    after = _best(s[partial], n, high) & mask[partial]
    if np.array_equal(sel[partial], after) and not np.array_equal(sel[partial], right):
        lost = int(right.sum() - after.sum())
        found.append(
            Finding(
                "topk-mask-after-selection",
                f"on queries whose best-scoring keys are masked, {lost} fewer keys are kept "
                f"than min(k, allowed keys): the {n} were chosen among all keys, and the mask "
                "then removed some of them.",
            )
        )
    return found


register(
    Exercise(
        name="topk_mask",
        summary="topk_mask(index_scores, n_keep, mask) -> bool (batch, seq_q, seq_k): each query "
        "keeps its n_keep highest-scoring keys among those the mask allows (ties: lower index)",
        reference=_topk_reference,
        make_cases=_topk_cases,
        make_hidden_cases=_topk_hidden_cases,
        forbidden=("attnlib.selection.topk_mask",),
        infer=_infer_topk,
        build=_topk_build,
        misconceptions=(
            Misconception(
                "topk-lowest",
                "The keys kept are the lowest-scoring ones. The indexer scores say how useful "
                "a key is: keep the k largest (torch.topk's default, largest=True; an "
                "ascending argsort puts the best keys last).",
                (_topk_build(order="low"),),
                {"order": "low"},
            ),
            Misconception(
                "topk-off-by-one",
                "Each query keeps n_keep + 1 or n_keep - 1 keys. Keep exactly n_keep: the first "
                "n_keep indices of a descending stable sort; a threshold taken at index n_keep "
                "of the sorted scores (0-based) keeps one key too many.",
                (_topk_build(k_shift=1), _topk_build(k_shift=-1)),
                {"k_shift": 1},
            ),
            Misconception(
                "topk-ignores-mask",
                "Keys the mask forbids (the future, padding) are kept. Selection only narrows "
                "the mask: fill the forbidden scores with -inf before choosing, and AND the "
                "result with the mask, so that a row with fewer than k allowed keys keeps "
                "just those.",
                (_topk_build(masking="ignore"),),
                {"masking": "ignore"},
            ),
            Misconception(
                "topk-mask-after-selection",
                "The n_keep keys were chosen among all keys and the mask was applied afterwards, "
                "so a query whose best keys are forbidden keeps fewer than n_keep. Hide the "
                "forbidden keys first (scores -> -inf), then choose the k best of the rest.",
                (_topk_build(masking="after"),),
                {"masking": "after"},
            ),
            Misconception(
                "topk-tie-break",
                "Among equal scores the lower key index must be kept (an indexer's ReLU makes "
                "many scores exactly 0). torch.topk does not promise any order among ties "
                "(torch 2.13's documentation: tied indices 'are not guaranteed to be "
                "stable'), and the last n_keep of an ascending sort keep the higher indices. Sort "
                "with argsort(descending=True, stable=True), or (-scores).argsort(stable=True), "
                "and take the first n_keep.",
                (_topk_build(ties="higher"), _topk_build(ties="topk")),
                {"ties": "higher"},
            ),
            Misconception(
                "topk-ties-all-kept",
                "Every key tied with the n_keep-th score is kept, so a query keeps more than "
                "n_keep keys "
                "when scores are equal (a threshold, scores >= the n_keep-th largest). Keep "
                "exactly n_keep: among equal scores the lower key indices.",
                (_topk_build(ties="all"),),
                {"ties": "all"},
            ),
        ),
    )
)
