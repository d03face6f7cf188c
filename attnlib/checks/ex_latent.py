"""Exercise of lesson 14: multi-head latent attention.

* ``absorbed_scores(q, c, W_uk, q_rope, k_rope) -> (batch, n_heads, seq_q, seq_k)`` — the
  scores of multi-head latent attention computed over the cached latents (the key
  up-projection absorbed into the queries) plus the decoupled rotary part, scaled by
  1/√(d_head + d_rope).

The reference is attnlib's own :func:`attnlib.latent.absorbed_scores` (imported when a
check runs); tests/test_ex_fewer_keys.py proves it equal to an independent oracle.

Diagnosis by inference (see :mod:`attnlib.checks._core`):

* ``absorbed_scores``: a least-squares fit of the returned scores on the content part
  (q W_uk)·c (or q W_ukᵀ·c, which only runs when d_latent = d_head) and the rotary part
  q_rope·k_rope, with the latents of each query's own sequence or (a probe with batch =
  n_heads) of the sequence numbered like its head: the fit says whether the rotary part is
  there, whether the latents were broadcast against the heads, which of six scales the
  scores carry, and whether the rotary part was added after the content part was scaled.

The lesson's other exercises, sliding_window_mask and topk_mask, are in
:mod:`attnlib.checks.ex_fewer_keys`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt, name_factor

# ----------------------------------------------------------------------------------------
# absorbed_scores(q, c, W_uk, q_rope, k_rope) -> (batch, n_heads, seq_q, seq_k)
# ----------------------------------------------------------------------------------------


def _latent_reference(q, c, W_uk, q_rope, k_rope):
    from attnlib.latent import absorbed_scores

    return absorbed_scores(q, c, W_uk, q_rope=q_rope, k_rope=k_rope)


def _latent_build(*, rope=True, way="right", scale="full", align="batch", scope="both"):
    """Latent scores with the given choices; the defaults give the correct function.

    ``rope`` False leaves out the rotary part; ``way`` "transposed" multiplies the queries
    by W_ukᵀ (runs only when d_latent = d_head); ``scale`` "full" = 1/√(d_head + d_rope),
    "latent" = 1/√d_latent, "head" = 1/√d_head, "none" = 1, "linear" = 1/(d_head + d_rope),
    "latent-rope" = 1/√(d_latent + d_rope); ``align`` "heads" multiplies by c and k_rope
    without a head axis, so that broadcasting lines their batch axis up with the heads
    (runs only when batch = n_heads or batch = 1); ``scope`` "content" scales the content
    part only and adds the rotary part unscaled, "each" scales each part by its own width
    (the content by 1/√d_head, the rotary part by 1/√d_rope; ``scale`` is then ignored).
    """

    def fn(q, c, W_uk, q_rope, k_rope):
        d_head, d_rope, d_latent = q.shape[-1], q_rope.shape[-1], c.shape[-1]
        W = W_uk.transpose(-1, -2) if way == "transposed" else W_uk
        q_lat = q @ W  # (batch, n_heads, seq_q, d_latent)
        if align == "heads":
            c, k_rope = c.transpose(-1, -2), k_rope.transpose(-1, -2)  # batch meets heads
        else:
            c, k_rope = c.unsqueeze(1).transpose(-1, -2), k_rope.unsqueeze(1).transpose(-1, -2)
        s = q_lat @ c  # (batch, n_heads, seq_q, seq_k)
        position = q_rope @ k_rope if rope else 0
        if scope == "each":
            return s / math.sqrt(d_head) + position / math.sqrt(d_rope)
        if scope == "both":
            s, position = s + position, 0
        if scale == "linear":
            s = s / (d_head + d_rope)
        elif scale != "none":
            width = {"full": d_head + d_rope, "latent": d_latent, "head": d_head,
                     "latent-rope": d_latent + d_rope}[scale]  # fmt: skip
            s = s / math.sqrt(width)
        return s + position

    return fn


def _latent_inputs(gen, batch, n_heads, seq_q, seq_k, d_head, d_rope, d_latent):
    def n(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return (
        n(batch, n_heads, seq_q, d_head),  # q: content queries
        n(batch, seq_k, d_latent),  # c: the cached latents
        n(n_heads, d_head, d_latent) / math.sqrt(d_latent),  # W_uk: key of head h = W_uk[h] c
        n(batch, n_heads, seq_q, d_rope),  # q_rope (already rotated)
        n(batch, seq_k, d_rope),  # k_rope, one per position, shared by the heads
    )


_LATENT_SIZES = (
    # label, batch, n_heads, seq_q, seq_k, d_head, d_rope, d_latent
    ("batch 2, 3 heads, 4 queries, 6 keys, d_head 4, d_rope 2, d_latent 10", 2, 3, 4, 6, 4, 2, 10),
    ("one new query over 7 cached latents, 2 heads, d_head 6, d_rope 4, d_latent 5",
     1, 2, 1, 7, 6, 4, 5),
    ("batch 3, 2 heads, d_latent = d_head = 6 (a wrong-way up-projection runs), d_rope 2",
     3, 2, 3, 5, 6, 2, 6),
    ("4 heads, 5 queries, 5 keys, d_head 8, d_rope 4, d_latent 12", 1, 4, 5, 5, 8, 4, 12),
)  # fmt: skip


def _latent_cases(seed: int = 1401, prefix: str = "") -> list[Case]:
    gen = torch.Generator().manual_seed(seed)
    return [Case(prefix + label, _latent_inputs(gen, *sizes)) for label, *sizes in _LATENT_SIZES]


def _latent_hidden_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(1411)
    extra = Case(
        "hidden: batch 3, 2 heads, 2 queries, 9 keys, d_head 5, d_rope 6, d_latent 7",
        _latent_inputs(gen, 3, 2, 2, 9, 5, 6, 7),
    )
    return _latent_cases(1412, "hidden: ") + [extra]


# Probe 1 has three different widths (d_head + d_rope = 6, d_latent = 10, d_head = 4);
# probe 2 has d_latent = d_head, the only shapes on which a wrong-way W_uk runs; probes 3
# and 4 repeat them with batch = n_heads, the only shapes (with batch > 1) on which latents
# broadcast against the head axis run.
_LATENT_PROBES = (
    (2, 3, 4, 5, 4, 2, 10),
    (2, 3, 4, 5, 6, 4, 6),
    (3, 3, 4, 5, 4, 2, 10),
    (2, 2, 4, 5, 6, 4, 6),
)


def _fit_scores(s, parts):
    """Least squares s ≈ Σ coef_i part_i; (coefficients, relative residual)."""
    A = np.stack([p.ravel() for p in parts], axis=1)
    coef, *_ = np.linalg.lstsq(A, s.ravel(), rcond=None)
    resid = np.linalg.norm(A @ coef - s.ravel()) / max(np.linalg.norm(s.ravel()), 1e-300)
    return coef, float(resid)


def _infer_latent(learner) -> list[Finding]:
    for i, sizes in enumerate(_LATENT_PROBES):
        args = _latent_inputs(torch.Generator().manual_seed(1490 + i), *sizes)
        o = learner(*args)
        s = o.array(0) if o.ok and o.arity == 1 else None
        batch, n_heads, seq_q, seq_k, d_head, d_rope, d_latent = sizes
        if s is None or s.shape != (batch, n_heads, seq_q, seq_k) or s.dtype == bool:
            continue
        if not np.isfinite(s).all():
            return []
        q, c, W, qr, kr = (a.numpy() for a in args)
        aligns = ["batch"] + (["heads"] if batch == n_heads else [])
        fits = []
        for align in aligns:
            if align == "batch":
                ct = np.swapaxes(c, -1, -2)[:, None]  # (batch, 1, d_latent, seq_k)
                krt = np.swapaxes(kr, -1, -2)[:, None]
            else:  # sequence b of the latents meets head b of the queries
                ct, krt = np.swapaxes(c, -1, -2), np.swapaxes(kr, -1, -2)
            rope = qr @ krt  # (batch, n_heads, seq_q, seq_k)
            ways = [("right", (q @ W) @ ct)]
            if d_head == d_latent:
                ways.append(("transposed", (q @ np.swapaxes(W, -1, -2)) @ ct))
            fits += [(way, align, *_fit_scores(s, [content, rope])) for way, content in ways]
        good = [(way, align, coef) for way, align, coef, resid in fits if resid < 1e-6]
        if not good:
            return []
        way, align, (alpha, beta) = good[0]
        return _latent_findings(way, alpha, beta, sizes, align)
    return []


def _latent_findings(way, alpha, beta, sizes, align="batch") -> list[Finding]:
    batch, n_heads, *_, d_head, d_rope, d_latent = sizes
    found = []
    if align == "heads":
        found.append(
            Finding(
                "latents-broadcast-over-heads",
                f"your function raises when batch ≠ n_heads; with batch = n_heads = {batch} "
                "the scores of head h are taken against the latents of sequence h, not of the "
                "query's own sequence.",
            )
        )
    if way == "transposed":
        found.append(
            Finding(
                "up-projection-transposed",
                f"your function raises when d_latent ≠ d_head; with d_latent = d_head = "
                f"{d_head} its scores are (q W_ukᵀ)·c: each query was multiplied by W_uk "
                "transposed.",
            )
        )
    if abs(beta) <= 1e-6 * abs(alpha):
        found.append(
            Finding(
                "rotary-key-forgotten",
                "your scores do not change at all when q_rope and k_rope change.",
            )
        )
    elif abs(beta - alpha) > 1e-4 * abs(alpha):
        apart = (1 / math.sqrt(d_head), 1 / math.sqrt(d_rope))
        if d_head != d_rope and all(
            abs(x - y) <= 1e-4 * y for x, y in zip((alpha, beta), apart, strict=True)
        ):
            found.append(
                Finding(
                    "parts-scaled-apart",
                    f"the content part of your scores is multiplied by {fmt(alpha)} = "
                    f"1/√d_head = 1/√{d_head}, the rotary part by {fmt(beta)} = 1/√d_rope = "
                    f"1/√{d_rope}.",
                )
            )
            return found
        if abs(beta - 1) > 1e-4 or abs(alpha - 1) <= 1e-4:
            return found  # the two parts are scaled differently: nothing known explains it
        found.append(
            Finding(
                "rotary-part-unscaled",
                f"the content part of your scores is multiplied by {fmt(alpha)}, the rotary "
                "part q_rope·k_rope by 1: the two parts are not scaled alike.",
            )
        )
    candidates = [
        (1 / math.sqrt(d_head + d_rope), "", ""),
        (1 / math.sqrt(d_latent), f"1/√d_latent = 1/√{d_latent}", "scale-latent-width"),
        (1 / math.sqrt(d_head), f"1/√d_head = 1/√{d_head}", "scale-head-only"),
        (1.0, "1 (no scaling)", "scale-missing"),
        (1 / (d_head + d_rope), f"1/(d_head + d_rope) = 1/{d_head + d_rope}", "scale-not-sqrt"),
        (
            1 / math.sqrt(d_latent + d_rope),
            f"1/√(d_latent + d_rope) = 1/√{d_latent + d_rope}",
            "scale-latent-plus-rope",
        ),
    ]
    if d_latent == d_head:
        # the latent and head widths cannot be told apart here
        candidates = [
            x for x in candidates if x[2] not in ("scale-latent-width", "scale-head-only")
        ]
    named = name_factor(alpha, candidates, rel=1e-4)
    if named is not None and named[1]:
        found.append(
            Finding(
                named[1],
                f"your scores are the raw dot products times {fmt(alpha)} = {named[0]} "
                f"(d_head {d_head}, d_rope {d_rope}, d_latent {d_latent}).",
            )
        )
    return found


register(
    Exercise(
        name="absorbed_scores",
        summary="absorbed_scores(q, c, W_uk, q_rope, k_rope) -> (batch, n_heads, seq_q, seq_k): "
        "latent-attention scores over the cached latents, plus the decoupled rotary part",
        reference=_latent_reference,
        make_cases=_latent_cases,
        make_hidden_cases=_latent_hidden_cases,
        forbidden=("attnlib.latent.absorbed_scores",),
        infer=_infer_latent,
        build=_latent_build,
        exclusive=(
            # a wrong-way W_uk runs only when d_latent = d_head: the two widths are then equal
            frozenset({"up-projection-transposed", "scale-latent-width"}),
            frozenset({"up-projection-transposed", "scale-head-only"}),
            # with d_latent = d_head, √(d_latent + d_rope) is the right width
            frozenset({"up-projection-transposed", "scale-latent-plus-rope"}),
            # an unscaled sum, or no rotary part at all: nothing is scaled apart
            frozenset({"scale-missing", "rotary-part-unscaled"}),
            frozenset({"rotary-key-forgotten", "rotary-part-unscaled"}),
            # without a rotary part, the content scaled by its own width is scale-head-only
            frozenset({"rotary-key-forgotten", "parts-scaled-apart"}),
        ),
        misconceptions=(
            Misconception(
                "rotary-key-forgotten",
                "The rotary part is missing. Positions live only in the rotary query and "
                "key (the latent carries none: a rotation between the query and W_uk would "
                "stop W_uk from being absorbed), so the score adds the rotary dot product to "
                "the content one, and both are scaled together.",
                (_latent_build(rope=False),),
                {"rope": False},
                question="Change q_rope or k_rope and call your function again: do your "
                "scores move? Which parts make up the whole query and the whole key?",
            ),
            Misconception(
                "up-projection-transposed",
                "W_uk[h] has shape (d_head, d_latent) and the key is W_uk[h] times c, so the "
                "query's dot product with that key equals the query multiplied by W_uk[h] "
                "itself, dotted with c. Multiplying by its transpose only runs because "
                "d_latent equals d_head there.",
                (_latent_build(way="transposed"),),
                {"way": "transposed"},
                question="Does your function run when d_latent differs from d_head? Write "
                "the dot product of a query with the key W_uk[h] c and move W_uk[h] to the "
                "query's side: what becomes of it?",
            ),
            Misconception(
                "scale-latent-width",
                "The scores were divided by the square root of d_latent. Absorbing W_uk "
                "changes where the product is computed, not what it is: the dot product of a "
                "query and a key of width d_head + d_rope, and that width sets the scale.",
                (_latent_build(scale="latent"),),
                {"scale": "latent"},
                question="Which width did you divide by the square root of? Of which two "
                "vectors is each score the dot product, and how wide are they?",
            ),
            Misconception(
                "scale-head-only",
                "The scores were divided by the square root of d_head only. The rotary part "
                "adds d_rope dimensions to every query and key, so the width of the dot "
                "product is d_head + d_rope.",
                (_latent_build(scale="head"),),
                {"scale": "head"},
                question="Which width did you divide by the square root of? How many "
                "dimensions does the whole query, content and rotary, have?",
            ),
            Misconception(
                "scale-missing",
                "The scores are not scaled at all. Like every attention score they are "
                "divided by the square root of the width of the dot product, here d_head + "
                "d_rope, so that their spread does not grow with the width (lesson 04).",
                (_latent_build(scale="none"),),
                {"scale": "none"},
                question="How does the spread of your scores change if every width doubles? "
                "What did lesson 04 do about that?",
            ),
            Misconception(
                "scale-not-sqrt",
                "The scores were divided by d_head + d_rope itself. The spread of a dot "
                "product of width d grows like the square root of d, so the scale is one "
                "over the square root of d_head + d_rope.",
                (_latent_build(scale="linear"),),
                {"scale": "linear"},
                question="By what exact number are your raw dot products divided? How does "
                "the spread of a dot product grow with its width?",
            ),
            Misconception(
                "scale-latent-plus-rope",
                "The scores were divided by the square root of d_latent + d_rope, the width "
                "of what is cached. The dot product is still one of a query and a key of "
                "width d_head + d_rope, however it is computed.",
                (_latent_build(scale="latent-rope"),),
                {"scale": "latent-rope"},
                question="Which width did you divide by the square root of: that of what is "
                "cached, or that of the query and key whose dot product the score is?",
            ),
            Misconception(
                "rotary-part-unscaled",
                "Only the content part is scaled; the rotary part is added after the "
                "division. Both are pieces of one dot product between the whole query and "
                "the whole key, and the whole sum is scaled.",
                (_latent_build(scope="content"),),
                {"scope": "content"},
                question="Is the rotary part of your scores scaled like the content part? "
                "Of which single dot product are the two parts pieces?",
            ),
            Misconception(
                "parts-scaled-apart",
                "Each part is scaled by its own width: the content part by the square root "
                "of d_head, the rotary part by that of d_rope. They are two pieces of one dot "
                "product between a whole query and a whole key, whose width is d_head + "
                "d_rope; the sum is scaled once, by the square root of that width.",
                (_latent_build(scope="each"),),
                {"scope": "each", "scale": "full"},
                question="By what number is each part of your scores divided? Of how many "
                "dot products is a score made, and how wide is the vector it is taken over?",
            ),
            Misconception(
                "latents-broadcast-over-heads",
                "The latents (batch, seq_k, d_latent) and rotary keys (batch, seq_k, d_rope) "
                "have no head axis. Transposed without one, they broadcast against the "
                "queries' (batch, n_heads, ...) with their batch axis in the place of the "
                "heads: it fails when batch is not n_heads and silently mixes sequences when "
                "they are equal. They need a head axis of size 1, after the batch axis.",
                (_latent_build(align="heads"),),
                {"align": "heads"},
                question="Does your function run when batch and n_heads differ? Line up the "
                "shapes of the queries and of the latents axis by axis, from the right: "
                "which axis of the latents meets the heads?",
            ),
        ),
    )
)
