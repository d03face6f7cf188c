"""Exercise of lesson 10: a cached decoding step.

* ``decode_step(q_new, k_new, v_new, k_cache, v_cache) -> (out, k_all, v_all)`` —
  append the new keys and values to the cache, let the new queries attend.

Inputs are numpy float64 arrays with non-square shapes (seq_q ≠ seq_k ≠ d_k ≠ d_v).

Worth two points, graded in two parts of one point (:func:`attnlib.checks.part`), each in
its own locked cell of the lesson: ``decode_step_cache`` (the returned cache ``k_all``,
``v_all``) and ``decode_step_output`` (the attention output ``out``).

Diagnosis by inference (see :mod:`attnlib.checks._core`): which cache comes back (the old
one, the new rows first, the right concatenation), and which keys each new query sees —
with all scores 0 and the values an identity, each output row *is* the query's weights
over cache and new keys, so a mask's diagonal (top-left, bottom-right, off by one either
way), or a mask read the wrong way round, is read off directly; with random queries, the
multiplier on the dot products (1/√d_k or something else).

Lesson 11's online_softmax_update is in :mod:`attnlib.checks.ex_blockwise`, lesson 12's
rotary_attend in :mod:`attnlib.checks.ex_positions`.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._cases import register_parts
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close
from attnlib.core import attend as _attend
from attnlib.masks import causal_mask as _causal_mask

# ----------------------------------------------------------------------------------------
# decode_step — lesson 10
# ----------------------------------------------------------------------------------------


def _decode_cases(seed: int = 1010) -> list[Case]:
    rng = np.random.default_rng(seed)
    n = rng.standard_normal

    def case(label, lead, seq_past, seq_new, d_k=6, d_v=4):
        return Case(
            label,
            (
                n((*lead, seq_new, d_k)),
                n((*lead, seq_new, d_k)),
                n((*lead, seq_new, d_v)),
                n((*lead, seq_past, d_k)),
                n((*lead, seq_past, d_v)),
            ),
        )

    return [
        case("one new token, 5 cached, d_k=6, d_v=4", (), 5, 1),
        case("3 new tokens at once, 4 cached", (), 4, 3),
        case("batch 2 x heads 3, one new token, 6 cached", (2, 3), 6, 1, d_k=8, d_v=5),
        case("batch 2, 2 new tokens, 3 cached", (2,), 3, 2),
        case("empty cache: a prompt of 4 tokens (prefill)", (), 0, 4),
    ]


def _decode_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(2020)
    n = rng.standard_normal
    extra = [
        Case(
            "hidden: batch 3, 4 new tokens, 9 cached, d_k=10, d_v=3",
            (n((3, 4, 10)), n((3, 4, 10)), n((3, 4, 3)), n((3, 9, 10)), n((3, 9, 3))),
        )
    ]
    return [Case("hidden: " + c.label, c.args) for c in _decode_cases(2021)] + extra


def _np_attend(q, k, v, mask=None, scale=None):
    """Plain numpy attention; zero keys (or a fully masked row) gives output 0."""
    c = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * c  # (..., seq_q, seq_k)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    if s.shape[-1] == 0:
        return np.zeros((*s.shape[:-1], v.shape[-1]))
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    tot = e.sum(axis=-1, keepdims=True)
    return (e / np.where(tot > 0, tot, 1.0)) @ v  # (..., seq_q, d_v)


def _decode_reference(q_new, k_new, v_new, k_cache, v_cache):
    k_all = np.concatenate([k_cache, k_new], axis=-2)  # (..., seq_past + seq_new, d_k)
    v_all = np.concatenate([v_cache, v_new], axis=-2)  # (..., seq_past + seq_new, d_v)
    mask = _causal_mask(q_new.shape[-2], k_all.shape[-2], align="bottom_right")
    out, _ = _attend(q_new, k_all, v_all, mask)  # (..., seq_new, d_v)
    return out, k_all, v_all


def _decode_variant(
    *,
    append=True,
    include_new=True,
    read_cache=True,
    mask="bottom_right",
    raise_empty=False,
    order="cache-first",
    axis=-2,
    offset=0,
    scale="sqrt_d_k",
):
    """A decoding step with the given choices; the defaults give the correct one.

    ``scale``: what the scores are multiplied by — "sqrt_d_k" (1/√d_k, right), "none"
    (1) or "sqrt_d_v" (1/√d_v). ``mask``: "bottom_right" (right), "top_left", None or
    "inverted" (the complement of the right mask: True read as "blocked").

    ``read_cache=False`` lets the new queries attend over the new keys only (the cache
    is stored but never read).

    ``axis`` is the axis the cache grows along (0 is right for 2-D inputs only);
    ``offset`` moves the bottom-right mask's diagonal: new query i sees keys
    0 .. seq_past + i + offset (-1: not itself, +1: one token of its future).
    """

    def fn(q_new, k_new, v_new, k_cache, v_cache):
        parts = ([k_cache, k_new], [v_cache, v_new])
        if order == "new-first":
            parts = ([k_new, k_cache], [v_new, v_cache])
        k_all = np.concatenate(parts[0], axis=axis)
        v_all = np.concatenate(parts[1], axis=axis)
        k_att, v_att = (k_all, v_all) if include_new else (k_cache, v_cache)
        if not read_cache:  # the new tokens attend among themselves only
            k_att, v_att = k_new, v_new
        if raise_empty and k_att.shape[-2] == 0:
            raise ValueError("zero-size array to reduction operation maximum")
        seq_new, seq_k = q_new.shape[-2], k_att.shape[-2]
        if mask == "inverted":  # True read as "blocked": the complement of the right mask
            m = ~_causal_mask(seq_new, seq_k, align="bottom_right")
        else:
            m = None if mask is None else _causal_mask(seq_new, seq_k, align=mask)
        if mask == "bottom_right" and offset:
            last = seq_k - seq_new + np.arange(seq_new)[:, None] + offset  # (seq_new, 1)
            m = np.arange(seq_k)[None, :] <= last  # (seq_new, seq_k)
        c = {"sqrt_d_k": None, "none": 1.0, "sqrt_d_v": 1 / np.sqrt(v_new.shape[-1])}[scale]
        out = _np_attend(q_new, k_att, v_att, m, c)
        return (out, k_all, v_all) if append else (out, k_cache, v_cache)

    return fn


def _infer_decode(learner) -> list[Finding]:
    found = _decode_2d_findings(learner)
    ids = {f.id for f in found}
    if "cache-not-appended" in ids or "cache-wrong-order" in ids:
        return found + _decode_scale_findings(learner)
    return found + _decode_batch_findings(learner) + _decode_scale_findings(learner)


def _decode_scale_findings(learner) -> list[Finding]:
    """What the scores were multiplied by: random queries, values that name their key (key
    j carries e_j), so that each output row is the query's weights, whatever order the
    keys were put in; log weight = multiplier · q·k + a constant per row."""
    seq_past, seq_new, d_k = 4, 3, 5
    seq_k = seq_past + seq_new
    d_v = seq_k + 1  # one spare column: d_v differs from d_k and from seq_k
    rng = np.random.default_rng(14)
    q = rng.standard_normal((seq_new, d_k))
    k_cache, k_new = rng.standard_normal((seq_past, d_k)), rng.standard_normal((seq_new, d_k))
    eye = np.eye(seq_k, d_v)
    o = learner(q, k_new, eye[seq_past:], k_cache, eye[:seq_past])
    if not o.ok or o.arity != 3 or o.parts[0] is None or o.parts[0].shape != (seq_new, d_v):
        return []
    out = o.parts[0]
    if not np.isfinite(out).all() or not close(out[:, seq_k:], np.zeros((seq_new, 1))):
        return []
    raw = q @ np.concatenate([k_cache, k_new]).T  # (seq_new, seq_k): unscaled dot products
    fits = []
    for i in range(seq_new):
        seen = out[i, :seq_k] > 1e-12
        if seen.sum() < 2 or not close(out[i, :seq_k].sum(), 1.0, rel=1e-6):
            continue
        x, y = raw[i, seen], np.log(out[i, :seq_k][seen])
        x, y = x - x.mean(), y - y.mean()
        c = float((x * y).sum() / (x * x).sum())
        if not close(c * x, y, rel=1e-4, abs_=1e-6):
            return []  # not one multiplier on the dot products: nothing to say
        fits.append(c)
    if not fits or not close(np.array(fits), np.full(len(fits), fits[0]), rel=1e-4):
        return []
    c = fits[0]
    if close(c, 1 / np.sqrt(d_k), rel=1e-4):
        return []
    named = {
        "1 (no scaling)": 1.0,
        f"1/√{d_v} = 1/√d_v": 1 / np.sqrt(d_v),
        f"1/{d_k} = 1/d_k": 1 / d_k,
        f"1/√{seq_k} = 1/√seq_k": 1 / np.sqrt(seq_k),
    }
    what = [name for name, value in named.items() if close(c, value, rel=1e-4)]
    return [
        Finding(
            "decode-scale-wrong",
            f"with d_k = {d_k}, d_v = {d_v} and {seq_k} keys, your weights are a softmax of "
            f"the dot products q · k multiplied by {c:.3f}"
            + (f" = {what[0]}" if what else "")
            + ".",
        )
    ]


def _decode_2d_findings(learner) -> list[Finding]:
    seq_past, seq_new, d_k = 4, 3, 5
    d_v = seq_past + seq_new
    rng = np.random.default_rng(10)
    eye = np.eye(d_v)  # values: key j carries e_j, so an output row is the weights
    q_new = np.zeros((seq_new, d_k))  # every score 0: weights uniform over what is seen
    k_cache, k_new = rng.standard_normal((seq_past, d_k)), rng.standard_normal((seq_new, d_k))
    v_cache, v_new = eye[:seq_past], eye[seq_past:]
    o = learner(q_new, k_new, v_new, k_cache, v_cache)
    if not o.ok or o.arity != 3 or any(p is None for p in o.parts):
        return []
    out, k_all, v_all = o.parts
    found = []
    new_first = False
    for name, got, cache, new in (("k", k_all, k_cache, k_new), ("v", v_all, v_cache, v_new)):
        if got.shape == cache.shape and close(got, cache):
            found.append(
                Finding(
                    "cache-not-appended",
                    f"the {name}_all you return is the old cache, shape {cache.shape}: the "
                    f"{seq_new} new rows were not added.",
                )
            )
        elif close(got, np.concatenate([new, cache])):
            new_first = True
            found.append(
                Finding(
                    "cache-wrong-order",
                    f"the {name}_all you return has the {seq_new} new rows first and the "
                    f"{seq_past} cached rows after them.",
                )
            )
    if new_first or out.shape != (seq_new, d_v) or not np.isfinite(out).all():
        return found
    seen = out > 1e-12
    uniform = [np.full(int(r.sum()), 1 / max(int(r.sum()), 1)) for r in seen]
    if not all(close(out[i][seen[i]], uniform[i]) for i in range(seq_new)):
        return found
    expect = np.arange(d_v)[None, :] <= seq_past + np.arange(seq_new)[:, None]
    sets = [np.flatnonzero(r).tolist() for r in seen]
    if np.array_equal(seen, ~expect):
        found.append(
            Finding(
                "decode-mask-inverted",
                f"with {seq_past} cached keys and {seq_new} new ones, the new queries see "
                f"keys {sets}: none of the cache, only new tokens after each query (the last "
                "new query sees no key at all, and its output is 0).",
            )
        )
        return found
    if not seen.any(axis=-1).all():
        return found  # a query that sees nothing is no attention pattern we know
    if np.array_equal(seen, np.tril(np.ones((seq_new, d_v), dtype=bool))):
        found.append(
            Finding(
                "mask-blocks-past",
                f"with {seq_past} cached keys, new query i sees keys 0..i only ({sets}): "
                f"the first new query sees one of the {seq_past} cached keys.",
            )
        )
    elif not seen[:, :seq_past].any() and np.array_equal(
        seen[:, seq_past:], np.tril(np.ones((seq_new, seq_new), dtype=bool))
    ):
        found.append(
            Finding(
                "cache-not-read",
                f"with {seq_past} cached keys and {seq_new} new ones, the new queries see "
                f"keys {sets}: the new tokens up to their own, and none of the {seq_past} "
                "cached ones.",
            )
        )
    elif not seen[:, seq_past:].any():
        found.append(
            Finding(
                "new-key-not-included",
                f"with {seq_past} cached keys and {seq_new} new ones, the new queries see "
                f"keys {sets} only (positions 0..{seq_past - 1} are the cache).",
            )
        )
    elif seen.all() and not expect.all():
        found.append(
            Finding(
                "no-causal-mask-in-chunk",
                f"each of the {seq_new} new queries sees all {d_v} keys ({sets}), the new "
                "tokens after it included.",
            )
        )
    elif not np.array_equal(seen, expect):
        # a causal mask with its diagonal in the wrong place: query i sees keys 0 .. i + o
        last = [max(r) if r == list(range(len(r))) else None for r in sets]
        offsets = {last[i] - i for i in range(seq_new) if last[i] is not None and last[i] < d_v - 1}
        if None not in last and len(offsets) == 1:
            o = offsets.pop()
            found.append(
                Finding(
                    "mask-wrong-offset",
                    f"with {seq_past} cached keys, new query i sees keys 0..i + {o} ({sets})"
                    + (": no new query sees its own key" if o == seq_past - 1 else "")
                    + (
                        ": each new query but the last also sees the next token's key"
                        if o == seq_past + 1
                        else ""
                    )
                    + ".",
                )
            )
    return found


def _decode_batch_findings(learner) -> list[Finding]:
    """A batch of one sequence (2 cached tokens, 2 new ones), shape (1, seq, d): along
    which axis does the cache grow? (Along axis 0 the result still runs here.)"""
    rng = np.random.default_rng(11)
    q, kn, vn, kc, vc = (rng.standard_normal((1, 2, d)) for d in (5, 5, 3, 5, 3))
    o = learner(q, kn, vn, kc, vc)
    if not o.ok or o.arity != 3 or any(p is None for p in o.parts):
        return []
    k_all = o.parts[1]
    if k_all.shape == (2, 2, 5) and close(k_all, np.concatenate([kc, kn], axis=0)):
        return [
            Finding(
                "cache-wrong-axis",
                "for a batch of one sequence (inputs of shape (1, 2, 5): batch, positions, "
                "features) with 2 cached and 2 new tokens, your k_all has shape (2, 2, 5): "
                "two sequences of 2 positions, where one of 4 is expected.",
            )
        ]
    return []


register(
    Exercise(
        name="decode_step",
        summary="decode_step(q_new, k_new, v_new, k_cache, v_cache) -> (out, k_all, v_all)",
        reference=_decode_reference,
        make_cases=_decode_cases,
        make_hidden_cases=_decode_hidden_cases,
        infer=_infer_decode,
        build=_decode_variant,
        exclusive=(
            # attending to the cache only: the new keys' mask cannot be seen
            frozenset({"new-key-not-included", "mask-blocks-past"}),
            frozenset({"new-key-not-included", "no-causal-mask-in-chunk"}),
            # only a bottom-right mask has a diagonal to misplace
            frozenset({"mask-wrong-offset", "mask-blocks-past"}),
            frozenset({"mask-wrong-offset", "no-causal-mask-in-chunk"}),
            frozenset({"mask-wrong-offset", "new-key-not-included"}),
            frozenset({"mask-wrong-offset", "cache-wrong-order"}),
            # keys in the wrong order: which positions a query sees is not the question
            frozenset({"cache-wrong-order", "new-key-not-included"}),
            frozenset({"cache-wrong-order", "mask-blocks-past"}),
            frozenset({"cache-wrong-order", "no-causal-mask-in-chunk"}),
            frozenset({"cache-wrong-order", "cache-not-appended"}),
            # an old cache returned grows along no axis at all; new rows first, we stop
            frozenset({"cache-wrong-axis", "cache-not-appended"}),
            frozenset({"cache-wrong-axis", "cache-wrong-order"}),
            # an inverted mask has no diagonal to misplace, and hides the cache already
            frozenset({"decode-mask-inverted", "mask-wrong-offset"}),
            frozenset({"decode-mask-inverted", "new-key-not-included"}),
            frozenset({"decode-mask-inverted", "cache-wrong-order"}),
            # attending among the new tokens only: no cache, so no diagonal to place
            frozenset({"cache-not-read", "new-key-not-included"}),
            frozenset({"cache-not-read", "mask-blocks-past"}),
            frozenset({"cache-not-read", "mask-wrong-offset"}),
            frozenset({"cache-not-read", "no-causal-mask-in-chunk"}),
            frozenset({"cache-not-read", "decode-mask-inverted"}),
            frozenset({"cache-not-read", "cache-wrong-order"}),
        ),
        misconceptions=(
            Misconception(
                "cache-not-appended",
                "The cache you return is the old one: the new keys and values are used in "
                "this step but never stored, so the next step has forgotten this token. "
                "The cache to return holds the old rows followed by the new ones.",
                (_decode_variant(append=False),),
                {"append": False},
                question="Compare the shape of the cache you return with the one you were "
                "given. Where will the next decoding step find this token's key and value?",
            ),
            Misconception(
                "cache-wrong-order",
                "The new rows are put in front of the cache. Row j of the cache is position "
                "j, and positions grow with time: the cache holds positions 0 to "
                "seq_past - 1, and the new tokens come after them, at the end.",
                (_decode_variant(order="new-first"),),
                {"order": "new-first"},
                question="Row j of a cache is the token at position j. In the cache you "
                "return, which rows hold the oldest tokens, and which the newest?",
            ),
            Misconception(
                "cache-wrong-axis",
                "The cache grows along the first axis. For inputs with a batch (and heads) "
                "in front, that stacks whole sequences, not positions: the positions are "
                "the second-to-last axis, whatever comes before it.",
                (_decode_variant(axis=0),),
                {"axis": 0},
                question="For a batch of one sequence your cache now holds two sequences. "
                "Along which axis did it grow, and which axis counts the positions?",
            ),
            Misconception(
                "new-key-not-included",
                "The new queries attend only to the cached keys. A token may (and usually "
                "does) attend to itself and to the new tokens before it, so the attention "
                "runs over the cache and the new rows together: the updated cache, not the "
                "old one. (With an empty cache there is then nothing to attend to at all.)",
                (
                    _decode_variant(include_new=False),
                    _decode_variant(include_new=False, raise_empty=True),
                ),
                {"include_new": False},
                question="Your new queries give no weight to the new tokens, not even to "
                "themselves. Which keys and values did your attention run over, and were "
                "the new ones among them yet?",
            ),
            Misconception(
                "cache-not-read",
                "The new queries attend over the new keys only: the cache is stored but "
                "never read, so each new token sees the other new tokens and nothing that "
                "came before them. The cache is there to be attended to: the keys of a step "
                "are the cached ones followed by the new ones.",
                (_decode_variant(read_cache=False),),
                {"read_cache": False},
                question="Your new queries give no weight to any cached token. Which keys "
                "and values did your attention run over: the ones you return, or only the "
                "ones that came in with this step?",
            ),
            Misconception(
                "mask-blocks-past",
                "The causal mask is laid out as if the new queries were the first positions "
                "of the sequence (aligned top-left), so new query i sees only keys 0 to i "
                "and loses most of the cache. The new queries are the last positions: query "
                "i stands at position seq_past + i, and may see every key up to its own.",
                (_decode_variant(mask="top_left"),),
                {"mask": "top_left"},
                question="With 4 cached tokens your first new query sees a single key. At "
                "which position of the sequence does that new token stand, and which keys "
                "came before it?",
            ),
            Misconception(
                "mask-wrong-offset",
                "The causal mask's diagonal is in the wrong place. New query i stands at "
                "position seq_past + i, so it sees keys 0 to seq_past + i, itself included, "
                "and no later one. A strict comparison, or a diagonal shifted by seq_past "
                "plus or minus one (or by seq_new instead of seq_past), hides the token's "
                "own key or shows it the next one.",
                (_decode_variant(offset=-1), _decode_variant(offset=1)),
                {"offset": -1},
                question="Pick one new query and list the keys it sees in your step. Does "
                "it see its own key? Does it see a token that comes after it?",
            ),
            Misconception(
                "decode-scale-wrong",
                "The scores are scaled by the wrong factor. Scaled dot-product attention "
                "divides each query-key dot product by the square root of d_k, the width of "
                "the queries and keys: not by the square root of d_v, not by d_k itself, "
                "and not left unscaled.",
                (_decode_variant(scale="none"), _decode_variant(scale="sqrt_d_v")),
                {"scale": "none"},
                question="Your weights are a softmax of the dot products times a number "
                "that is not the one scaled dot-product attention uses. Which width sets "
                "that number, and is it the width of the vectors being compared?",
            ),
            Misconception(
                "no-causal-mask-in-chunk",
                "With several new tokens at once, each must not see the new tokens after "
                "it. One new token may see everything that exists; a chunk of new tokens "
                "needs a causal mask whose diagonal runs through the new rows.",
                (_decode_variant(mask=None),),
                {"mask": None},
                question="With three new tokens at once, your first new query sees the "
                "second and the third. Could it have seen them had the three arrived one "
                "step at a time?",
            ),
            Misconception(
                "decode-mask-inverted",
                "The mask is inverted: it is True where a key must be hidden, while a mask "
                "here keeps the keys where it is True. Each new query then sees exactly the "
                "keys it must not (the new tokens after it) and none of the cache; the last "
                "new query sees nothing at all.",
                (_decode_variant(mask="inverted"),),
                {"mask": "inverted"},
                question="Your new queries see only tokens after them, and none of the "
                "cache. In your mask, what does True mean, and what does the attention you "
                "call take it to mean?",
            ),
        ),
    )
)


register_parts(
    "decode_step",
    [
        (
            "decode_step_cache",
            "the updated cache: k_all and v_all, the cache with the new rows after it",
            {
                "outputs": (1, 2),
                "ids": ("cache-not-appended", "cache-wrong-order", "cache-wrong-axis"),
            },
        ),
        (
            "decode_step_output",
            "the output: the new queries attend over the cached and the new keys, "
            "bottom-right causal",
            {
                "outputs": (0,),
                "ids": (
                    "cache-wrong-order",
                    "cache-wrong-axis",
                    "new-key-not-included",
                    "cache-not-read",
                    "mask-blocks-past",
                    "mask-wrong-offset",
                    "decode-scale-wrong",
                    "no-causal-mask-in-chunk",
                    "decode-mask-inverted",
                ),
            },
        ),
    ],
)
