"""Exercises of lesson 14: fewer keys to keep.

* ``sliding_window_mask(seq_q, seq_k, window) -> bool (seq_q, seq_k)`` — the band a
  sliding-window layer attends through: the queries are the newest seq_q of the seq_k
  positions (as when decoding with a cache), and the query at position p sees the keys at
  p - window + 1 .. p (itself and the window - 1 keys before it);
* ``topk_mask(index_scores, n_keep, mask) -> bool (batch, seq_q, seq_k)`` — which keys each
  query keeps: its n_keep highest-scoring keys among those ``mask`` allows, ties to the lower
  key index (all of them when fewer than k are allowed).

References are attnlib's own functions (:mod:`attnlib.windows`, :mod:`attnlib.selection`,
imported when a check runs); tests/test_ex_fewer_keys.py proves them equal to independent
oracles. The lesson's third exercise, ``absorbed_scores``, is in
:mod:`attnlib.checks.ex_latent`.

Diagnosis by inference (see :mod:`attnlib.checks._core`):

* ``sliding_window_mask``: the returned band, on two probes with different seq_k - seq_q and
  windows (one odd, one even), is compared with every band a known mistake or two draw: the
  far edge one key too far or too near, the query's own key left out, a band that looks
  ahead (no causal edge), centred on the query (Longformer's |i - j| <= W/2) or lying after
  it, and the queries aligned to the first positions instead of the last; 0/1 numbers are
  read as a mask and named apart;
* ``topk_mask``: on rows the mask leaves whole, how many keys are kept and whether they are
  the highest or the lowest scores; on rows of tied scores, which of the tied keys are kept
  (the lowest indices, others, or all of them); on partly masked rows, whether a forbidden
  key is kept, whether forbidden keys ranked as a score of 0, or whether the n_keep were
  picked among all keys before the mask removed some. A selection that keeps no fixed number
  of keys per query is read again with queries and keys swapped: one made along the query
  axis is then named, with whatever else it measures.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlib.checks._core import Case, Exercise, Finding, Misconception, Outcome, register
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
    "The mask is numbers, not booleans: a lower-triangle or ones array is float unless asked "
    "otherwise, and a 0/1 float mask is easily added to the scores, which blocks nothing. A "
    "mask is booleans, True where a query may attend."
)
_NOT_BOOLEAN_QUESTION = (
    "What type are the entries of your mask? What would happen if someone added it to the "
    "scores, or used it to select entries?"
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
    by -1 or +1; ``near`` is "self" (d >= 0), "excluded" (d >= 1), "ahead" (|d| < window,
    no causal edge), "centred" (Longformer's |d| <= window / 2, the window centred on the
    query; ``far`` is then ignored) or "reversed" (0 <= -d < window: the query and the
    window - 1 keys after it; ``far`` ignored); ``align`` "top_left" puts query i at
    position i instead of i + seq_k - seq_q; ``dtype`` "float" returns 0/1 numbers.
    """

    def fn(seq_q, seq_k, window):
        offset = seq_k - seq_q if align == "bottom_right" else 0
        d = (np.arange(seq_q)[:, None] + offset) - np.arange(seq_k)[None, :]  # (seq_q, seq_k)
        if near == "centred":
            m = np.abs(d) <= window / 2
        elif near == "reversed":
            m = (d <= 0) & (d > -window)
        else:
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


# Two probes: different seq_k - seq_q (13 and 3) and windows (odd and even), so that an
# edge tied to the first positions moves between them while one tied to the last positions
# stays, and a window's half is told from its whole.
_WINDOW_PROBES = ((7, 20, 5), (6, 9, 4))

# Every band a known mistake (or two) draws: (far, near, align) -> the ids it means. The
# "ahead" band without any lower edge (keys later than the query all allowed) is read apart.
_WINDOW_SHAPES = {
    (far, near, align): [
        *({1: ["window-plus-one"], -1: ["window-minus-one"]}.get(far, [])),
        *({"excluded": ["window-excludes-self"], "ahead": ["window-looks-ahead"],
           "centred": ["window-centred"], "reversed": ["window-reversed"]}.get(near, [])),
        *(["window-top-left"] if align == "top_left" else []),
    ]
    for far in (-1, 0, 1)
    for near in ("self", "excluded", "ahead", "centred", "reversed")
    for align in ("bottom_right", "top_left")
    if far == 0 or near in ("self", "excluded", "ahead")
}  # fmt: skip


def _infer_window(learner) -> list[Finding]:
    got, dtype_note = [], ""
    for seq_q, seq_k, window in _WINDOW_PROBES:
        allowed, what = _allowed(learner(seq_q, seq_k, window), (seq_q, seq_k))
        if allowed is None:
            return []
        dtype_note = dtype_note or what
        got.append(allowed)
    found = [_not_boolean(dtype_note)] if dtype_note else []
    shapes = [
        shape for shape in _WINDOW_SHAPES
        if all(np.array_equal(g, _window_build(far=shape[0], near=shape[1], align=shape[2])(*pr))
               for g, pr in zip(got, _WINDOW_PROBES, strict=True))
    ]  # fmt: skip
    if not shapes:
        unbounded = [_window_unbounded(g, *pr) for g, pr in zip(got, _WINDOW_PROBES, strict=True)]
        if all(unbounded):
            shapes = [(0, "ahead", "bottom_right")]
        else:
            return found
    far, near, align = shapes[0]
    seq_q, seq_k, window = _WINDOW_PROBES[0]
    allowed = got[0]
    d = (np.arange(seq_q)[:, None] + seq_k - seq_q) - np.arange(seq_k)[None, :]
    if align == "top_left":
        d = d - (seq_k - seq_q)
    row = seq_q - 1
    seen = np.nonzero(allowed[row])[0].tolist()  # the keys the last query sees
    at = seq_k - 1 if align == "bottom_right" else row
    keys = f"keys {seen[0]} .. {seen[-1]}" if seen else "no key"
    if far in (1, -1):
        found.append(
            Finding(
                "window-plus-one" if far == 1 else "window-minus-one",
                f"with window = {window}, the query at position {at} sees {keys}: "
                f"{len(seen)} keys.",
            )
        )
    if near == "excluded":
        found.append(
            Finding(
                "window-excludes-self",
                "every query's own position is False: the newest key a query sees is the "
                "one before it (query 0 of a prompt sees nothing).",
            )
        )
    elif near in ("ahead", "centred", "reversed"):
        ahead = int(-d[allowed].min())
        behind = int(max(0, d[allowed].max()))
        finding = {"ahead": "window-looks-ahead", "centred": "window-centred",
                   "reversed": "window-reversed"}[near]  # fmt: skip
        found.append(
            Finding(
                finding,
                f"with window = {window} ({seq_q} queries, {seq_k} keys), the queries see keys "
                f"up to {ahead} positions after their own and up to {behind} before it.",
            )
        )
    if align == "top_left":
        found.append(
            Finding(
                "window-top-left",
                f"with seq_q={seq_q} queries and seq_k={seq_k} keys, your band is drawn for a "
                f"query at position i in row i (the last query, row {row}, sees {keys}).",
            )
        )
    return found


def _window_unbounded(allowed, seq_q, seq_k, window):
    """True when ``allowed`` keeps every key later than the query's window start: the
    band's far edge is right and it has no near edge at all."""
    p = np.arange(seq_q)[:, None] + seq_k - seq_q
    return bool(np.array_equal(allowed, np.arange(seq_k)[None, :] > p - window))


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
                "The band holds window + 1 keys. The last W keys are the query itself and "
                "the W - 1 keys before it, so the oldest key a query sees is W - 1 positions "
                "back, not W: the far edge is a strict inequality against W.",
                (_window_build(far=1),),
                {"far": 1},
                question="Count the keys one row of your mask allows once the window is full. "
                "How many should a window of W hold, and which is the oldest of them?",
            ),
            Misconception(
                "window-minus-one",
                "The band holds window - 1 keys: the oldest key of the window is dropped. A "
                "query at position p sees the keys from p - W + 1 to p, both ends included.",
                (_window_build(far=-1),),
                {"far": -1},
                question="Count the keys one row of your mask allows once the window is full. "
                "How many should a window of W hold, and which is the oldest of them?",
            ),
            Misconception(
                "window-excludes-self",
                "The query's own position is left out. A token always sees itself: the "
                "window is the query and the W - 1 keys before it, so the key at the query's "
                "own position is allowed.",
                (_window_build(near="excluded"),),
                {"near": "excluded"},
                question="Look at the first row of a prompt's mask: what may the first "
                "token see? Is the key at a query's own position inside its window?",
            ),
            Misconception(
                "window-looks-ahead",
                "The band reaches into the future (the distance between query and key "
                "compared without its sign, or no limit on the newest key): a decoder must "
                "never see a later token. A sliding window is the causal mask with its far "
                "end cut off.",
                (
                    _window_build(near="ahead"),
                    lambda seq_q, seq_k, window: (
                        np.arange(seq_k)[None, :]
                        > np.arange(seq_q)[:, None] + seq_k - seq_q - window
                    ),
                ),
                {"near": "ahead"},
                question="In a prompt's mask, is any key after a query's own position True? "
                "Which two limits does a row of the band need, and is one of them missing?",
            ),
            Misconception(
                "window-centred",
                "The window is centred on the query, half of it on each side: Longformer's "
                "band, made for an encoder that reads the whole text at once. A decoder's "
                "window lies wholly behind the query: itself and the W - 1 keys before it, "
                "never a later one.",
                (_window_build(near="centred", far=0),),
                {"near": "centred", "far": 0},
                question="Where does your band sit around a query: how many keys after it, "
                "how many before? Which of those may a token that is being generated see?",
            ),
            Misconception(
                "window-reversed",
                "The band lies after the query: the query and the W - 1 keys that follow "
                "it, the causal window mirrored (key minus query where it should be query "
                "minus key). A query looks back, never forward.",
                (_window_build(near="reversed", far=0),),
                {"near": "reversed", "far": 0},
                question="On which side of the diagonal is your band: are the keys a query "
                "sees older or newer than the query itself?",
            ),
            Misconception(
                "window-top-left",
                "The queries were put at positions 0 to seq_q - 1. They are the newest "
                "tokens: query i sits at position i + (seq_k - seq_q), as in a causal mask "
                "aligned to the bottom right (lesson 10). This only shows when seq_q is not "
                "seq_k.",
                (_window_build(align="top_left"),),
                {"align": "top_left"},
                question="With one new query and 7 cached keys, which keys does your mask let "
                "that query see? At which position does that newest token sit?",
            ),
            Misconception(
                "mask-not-boolean",
                _NOT_BOOLEAN,
                (_window_build(dtype="float"),),
                {"dtype": "float"},
                question=_NOT_BOOLEAN_QUESTION,
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


def _topk_build(*, order="high", k_shift=0, masking="before", ties="lower", axis="keys"):
    """Top-k selection with the given choices; the defaults give the correct function.

    ``order`` "low" keeps the lowest scores; ``k_shift`` keeps k + k_shift keys;
    ``masking`` "before" (right: choose among the allowed keys), "after" (choose among all
    keys, then drop the forbidden ones), "zero" (forbidden scores set to 0 rather than
    -inf, or multiplied by the mask, before choosing; the result then ANDed with the mask)
    or "ignore" (never look at the mask); ``ties`` "lower" (right: among equal scores the
    lower key index), "higher" (the higher index, as the last k of an ascending stable
    sort), "topk" (whatever torch.topk returns) or "all" (every key scoring at least the
    k-th score: a threshold keeps all the tied); ``axis`` "queries" chooses along the query
    axis (each key keeps its n_keep best queries) instead of the key axis.
    """

    def rows(index_scores, n_keep, mask):
        key = index_scores if order == "high" else -index_scores
        if masking == "before":
            key = key.masked_fill(~mask, float("-inf"))  # (batch, seq_q, seq_k)
        elif masking == "zero":
            key = key.masked_fill(~mask, 0.0)
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

    def fn(index_scores, n_keep, mask):
        if axis == "keys":
            return rows(index_scores, n_keep, mask)
        mask = torch.broadcast_to(torch.as_tensor(mask), index_scores.shape)
        return rows(index_scores.mT, n_keep, mask.mT).mT  # choose along the queries

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


def _infer_topk_rows(learner) -> list[Finding] | None:
    """What the learner's selection along the key axis measures; None if it is not a
    selection of a fixed number of keys per query."""
    s_t, k, mask_t = _topk_probe()
    sel, what = _allowed(learner(s_t, k, mask_t), tuple(s_t.shape))
    if sel is None:
        return None
    s, mask, sel = s_t.numpy()[0], mask_t.numpy(), sel[0]
    full = [r for r in range(s.shape[0]) if mask[r].all()]
    counts = {int(sel[r].sum()) for r in full}
    if len(counts) != 1:
        return None
    n = counts.pop()
    if n == 0 or n >= s.shape[1]:
        return None
    high = bool(np.array_equal(sel[full], _best(s[full], n, True)))
    low = bool(np.array_equal(sel[full], _best(s[full], n, False)))
    if not (high or low):
        return None
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
    key = s[partial] if high else -s[partial]
    zero = _best(np.where(mask[partial], key, 0.0), n, True) & mask[partial]
    if np.array_equal(sel[partial], zero) and not np.array_equal(sel[partial], right):
        lost = int(right.sum() - zero.sum())
        found.append(
            Finding(
                "topk-mask-fill-zero",
                f"on queries that may not see every key, {lost} fewer keys are kept than "
                "min(k, allowed keys); what you keep there equals the k best keys when each "
                "forbidden key counts as a score of 0, less the forbidden ones.",
            )
        )
        return found
    if np.array_equal(sel[partial], after) and not np.array_equal(sel[partial], right):
        lost = int(right.sum() - after.sum())
        found.append(
            Finding(
                "topk-mask-after-selection",
                f"on queries whose best-scoring keys are masked, {lost} fewer keys are kept "
                f"than min(k, allowed keys); what you keep there equals the {n} best of all "
                "keys, less the forbidden ones.",
            )
        )
    return found


def _transposed(learner):
    """The learner with the query and key axes of its inputs and output swapped: a
    selection along the query axis becomes one along the key axis."""

    def call(index_scores, n_keep, mask):
        o = learner(index_scores.mT.contiguous(), n_keep, torch.as_tensor(mask).mT.contiguous())
        if not o.ok or o.arity != 1 or o.array(0) is None:
            return o
        return Outcome(o.value, None, [np.swapaxes(o.array(0), -1, -2)], o.eps)

    return call


def _infer_topk(learner) -> list[Finding]:
    found = _infer_topk_rows(learner)
    if found is not None:
        return found
    across = _infer_topk_rows(_transposed(learner))
    if across is None:
        return []
    s_t, k, mask_t = _topk_probe()
    sel, _ = _allowed(learner(s_t, k, mask_t), tuple(s_t.shape))
    per_query = sorted({int(c) for c in sel[0].sum(-1)})
    return [
        Finding(
            "topk-across-queries",
            f"with n_keep = {k} on {s_t.shape[1]} queries and {s_t.shape[2]} keys, each "
            f"key is kept by at most {k} queries, while a query keeps anywhere from "
            f"{per_query[0]} to {per_query[-1]} keys.",
        ),
        *across,
    ]


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
                "The keys kept are the lowest-scoring ones. An index score says how useful a "
                "key is, so a query keeps the k largest; an ascending sort puts the best keys "
                "last, not first.",
                (_topk_build(order="low"),),
                {"order": "low"},
                question="On a query that may see every key, look at the scores of the keys "
                "you keep and of those you drop: which are higher?",
            ),
            Misconception(
                "topk-off-by-one",
                "Each query keeps n_keep + 1 or n_keep - 1 keys: the count is off by one, as "
                "when a threshold is taken at position n_keep of the sorted scores (counting "
                "from 0 that is the (n_keep + 1)-th best) or a slice stops one early.",
                (_topk_build(k_shift=1), _topk_build(k_shift=-1)),
                {"k_shift": 1},
                question="Count the keys one query keeps when every key is allowed. Is it "
                "n_keep? Check where your count or your cut-off comes from.",
            ),
            Misconception(
                "topk-ignores-mask",
                "Keys the mask forbids (the future, padding) are kept. Selection only "
                "narrows the mask: a forbidden key must never be chosen, and a row with "
                "fewer than k allowed keys keeps just those.",
                (_topk_build(masking="ignore"),),
                {"masking": "ignore"},
                question="Does any key your function keeps lie where the mask is False? "
                "Where in your function does the mask take part?",
            ),
            Misconception(
                "topk-mask-after-selection",
                "The n_keep keys were chosen among all keys and the mask applied afterwards, "
                "so a query whose best keys are forbidden keeps fewer than n_keep. The "
                "forbidden keys must be out of the running before the choice, ranked below "
                "every allowed key.",
                (_topk_build(masking="after"),),
                {"masking": "after"},
                question="On a query whose highest scores are forbidden, how many keys do you "
                "keep, and how many allowed keys could it have kept? When does the mask "
                "act in your function?",
            ),
            Misconception(
                "topk-mask-fill-zero",
                "The forbidden scores were set to 0 (or multiplied by the mask) before "
                "choosing. Index scores can be negative, so a forbidden key at 0 still "
                "outranks allowed keys with negative scores and takes their place; dropped "
                "afterwards, it leaves the query with fewer than n_keep. A forbidden key must "
                "rank below every possible score: minus infinity.",
                (_topk_build(masking="zero"),),
                {"masking": "zero"},
                question="On a query with forbidden keys and some negative allowed scores, "
                "how many keys do you keep? Which score does a forbidden key get in your "
                "ranking, and can an allowed key score less?",
            ),
            Misconception(
                "topk-tie-break",
                "Among equal scores the lower key index must be kept (an indexer's ReLU makes "
                "many scores exactly 0). The library's top-k does not promise any order "
                "among ties (torch 2.13's documentation: tied indices 'are not guaranteed to "
                "be stable'), and the last n_keep of an ascending sort keep the higher "
                "indices. A stable sort in descending order keeps equal scores in index "
                "order.",
                (_topk_build(ties="higher"), _topk_build(ties="topk")),
                {"ties": "higher"},
                question="On a row of equal scores, which keys do you keep? Which does the "
                "rule ask for, and does the method you chose promise any order among equal "
                "scores?",
            ),
            Misconception(
                "topk-ties-all-kept",
                "Every key tied with the n_keep-th score is kept (a threshold: scores at "
                "least the n_keep-th largest), so a query keeps more than n_keep keys when "
                "scores are equal. Keep exactly n_keep: among equal scores the lower key "
                "indices.",
                (_topk_build(ties="all"),),
                {"ties": "all"},
                question="On a row where many keys share the n_keep-th best score, how many "
                "keys do you keep?",
            ),
            Misconception(
                "topk-across-queries",
                "The choice runs along the query axis: each key keeps its n_keep best "
                "queries, so a query may keep any number of keys. The top-k is taken per "
                "query, over the keys of its row (the last axis of the scores).",
                (_topk_build(axis="queries"),),
                {"axis": "queries"},
                question="How many keys does each query of your mask keep, and how many "
                "queries does each key keep? Along which axis of the scores did you rank?",
            ),
        ),
    )
)
