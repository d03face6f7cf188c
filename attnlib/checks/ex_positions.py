"""Exercise of lesson 12: rotary positions.

* ``rotary_attend(q, k, v, positions) -> (out, weights)`` — rotate queries and keys by
  their positions, then attend.

Inputs are numpy float64 arrays with non-square shapes.

Worth two points, graded in two parts of one point (:func:`attnlib.checks.part`), each in
its own locked cell of the lesson: ``rotary_attend_weights`` (the weights: queries and
keys rotated by their positions; on values as wide as the keys, so that a function that
also rotates the values runs) and ``rotary_attend_output`` (the output: those weights
times the values, unrotated).

Diagnosis by inference (see :mod:`attnlib.checks._core`): whether the output blends the
values or rotated values, and which rotation of queries and keys (both, keys only, queries
only, none; direction; pairing of dimensions; frequencies 10000^(-k·i/d_k) for k = 2, 1, 4,
-2; a first coordinate overwritten before the second is computed; both sine terms with one
sign) reproduces the weights. Findings state what was measured (mirrored offsets, how fast
each plane turns, weights that move when every position shifts alike), never the fix.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._cases import register_parts
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, fmt, tolerances
from attnlib.core import attend as _attend

# ----------------------------------------------------------------------------------------
# rotary_attend — lesson 12
# ----------------------------------------------------------------------------------------


def _rotary_cases(seed: int = 1212) -> list[Case]:
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    return [
        Case(
            "4 tokens at positions 0..3, d_k=8, d_v=3",
            (n((4, 8)), n((4, 8)), n((4, 3)), np.arange(4)),
        ),
        Case(
            "5 tokens at positions [7, 2, 11, 3, 30], d_k=6, d_v=2",
            (n((5, 6)), n((5, 6)), n((5, 2)), np.array([7, 2, 11, 3, 30])),
        ),
        Case(
            "batch 2, 3 tokens at positions [10, 11, 12], d_k=8, d_v=3",
            (n((2, 3, 8)), n((2, 3, 8)), n((2, 3, 3)), np.array([10, 11, 12])),
        ),
        Case(
            "values with d_v == d_k (rotating them would run)",
            (n((4, 8)), n((4, 8)), n((4, 8)), np.array([0, 5, 1, 9])),
        ),
    ]


def _rotary_wide_v_cases(seed: int = 1213) -> list[Case]:
    """Cases whose values are as wide as the keys (d_v == d_k), so that a function that
    also rotates the values runs, and its weights can be graded on their own."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    return [
        Case(
            "4 tokens at positions 0..3, d_k=d_v=8",
            (n((4, 8)), n((4, 8)), n((4, 8)), np.arange(4)),
        ),
        Case(
            "5 tokens at positions [7, 2, 11, 3, 30], d_k=d_v=6",
            (n((5, 6)), n((5, 6)), n((5, 6)), np.array([7, 2, 11, 3, 30])),
        ),
        Case(
            "batch 2, 3 tokens at positions [10, 11, 12], d_k=d_v=8",
            (n((2, 3, 8)), n((2, 3, 8)), n((2, 3, 8)), np.array([10, 11, 12])),
        ),
    ]


def _rotate(
    x, positions, *, sign=1.0, pairing="interleaved", freq_step=2, in_place=False, mixed=False
):
    """Rotate planes of ``x`` by position · 10000^(-freq_step·i/d_k). ``freq_step``: 2 is
    right; 1 drops the 2, 4 counts it twice (``arange(0, d_k, 2)`` times 2), -2 flips the
    exponent's sign. ``in_place``: the second coordinate is computed from the first one
    already overwritten. ``mixed``: both sine terms with the same sign (interleaved only):
    (x0·cos - x1·sin, -x0·sin + x1·cos), or with ``sign=-1`` both added — no rotation."""
    d_k = x.shape[-1]
    half = d_k // 2
    freq = 10000.0 ** (-freq_step * np.arange(half) / d_k)  # (d_k/2,)
    ang = sign * np.asarray(positions, dtype=np.float64)[:, None] * freq  # (seq, d_k/2)
    cos, sin = np.cos(ang), np.sin(ang)
    out = np.empty_like(x)
    if pairing == "interleaved" and mixed:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = -x0 * sin + x1 * cos
    elif pairing == "interleaved" and in_place:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = out[..., 0::2] * sin + x1 * cos
    elif pairing == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
    else:  # the first half pairs with the second half
        x0, x1 = x[..., :half], x[..., half:]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:] = x0 * sin + x1 * cos
    return out


def _rotary_reference(q, k, v, positions):
    from attnlib.positions import apply_rotary

    return _attend(apply_rotary(q, positions), apply_rotary(k, positions), v)


def _rotary_variant(*, rotate_q=True, rotate_k=True, rotate_v=False, use_positions=True, **kw):
    """Rotary attention with the given choices (and ``_rotate``'s keywords); the defaults
    give the correct function. ``use_positions=False`` rotates by 0, 1, 2, ... instead."""

    def fn(q, k, v, positions):
        if not use_positions:
            positions = np.arange(q.shape[-2])
        q_r = _rotate(q, positions, **kw) if rotate_q else q
        k_r = _rotate(k, positions, **kw) if rotate_k else k
        v_r = _rotate(v, positions, **kw) if rotate_v and v.shape[-1] % 2 == 0 else v
        if rotate_v and v.shape[-1] % 2:
            raise ValueError("cannot rotate values with an odd d_v")
        return _attend(q_r, k_r, v_r)

    return fn


# The rotations a learner may have written: direction, pairing, frequencies.
_ROTATIONS = (
    [
        {"sign": sign, "pairing": pairing, "freq_step": step}
        for sign in (1.0, -1.0)
        for pairing in ("interleaved", "half")
        for step in (2, 1, 4, -2)
    ]
    + [
        {"sign": sign, "freq_step": step, "in_place": True}
        for sign in (1.0, -1.0)
        for step in (2, 1, 4, -2)
    ]
    + [
        {"sign": sign, "freq_step": step, "mixed": True}
        for sign in (1.0, -1.0)
        for step in (2, 1, 4, -2)
    ]
)
_FREQUENCIES = {
    1: "10000^(-i/d_k): the 2 of 2i is missing",
    4: "10000^(-4i/d_k): the 2 is counted twice (np.arange(0, d_k, 2) already holds 2i)",
    -2: "10000^(+2i/d_k): the exponent's sign is flipped, so the angles grow with i",
}


def _infer_rotary(learner) -> list[Finding]:
    rng = np.random.default_rng(12)
    positions = np.array([3, 0, 7, 2, 11])
    q, k, v = (rng.standard_normal((5, d)) for d in (8, 8, 6))
    o = learner(q, k, v, positions.copy())
    if not o.ok or o.arity != 2 or any(x is None for x in o.parts):
        return []
    out, w = o.parts
    if w.shape != (5, 5) or out.shape != (5, 6):
        return []
    found = []
    match = None
    tol = tolerances(o.eps)
    for pos in (positions, np.arange(5)):
        for sides in ("both", "k", "q", "none"):
            for rot in _ROTATIONS if sides != "none" else [{}]:
                qr = _rotate(q, pos, **rot) if sides in ("both", "q") else q
                kr = _rotate(k, pos, **rot) if sides in ("both", "k") else k
                if close(w, _attend(qr, kr, v)[1], *tol):
                    match = (sides, rot)
                    break
            if match:
                break
        if match:
            break
    if match is not None:
        sides, rot = match
        shifted = None
        if sides in ("k", "q"):  # the same tokens, every position 50 further on
            o2 = learner(q, k, v, positions + 50)
            shifted = o2.parts[1] if o2.ok and o2.arity == 2 else None
        if pos is not positions and sides != "none":
            found.append(
                Finding(
                    "positions-ignored",
                    f"for tokens at positions {positions.tolist()} your weights are those of "
                    "tokens at positions 0, 1, 2, 3, 4: they do not depend on the positions "
                    "you are given.",
                )
            )
        if sides == "none":
            found.append(
                Finding(
                    "no-rotation",
                    "your weights are those of plain attention on q and k: they are the same "
                    "whatever the positions.",
                )
            )
        if sides in ("k", "q"):
            moved = shifted is not None and shifted.shape == w.shape and not close(shifted, w)
            if moved:
                detail = (
                    f"moving every token 50 positions on (from {positions.tolist()}) changes "
                    f"your weights, by up to {fmt(float(np.abs(shifted - w).max()))}, although "
                    "no offset between two tokens changed."
                )
            else:
                detail = (
                    "your weights are not those of scores that depend on the offsets "
                    "between tokens alone."
                )
            found.append(
                Finding("only-keys-rotated" if sides == "k" else "only-queries-rotated", detail)
            )
        if rot.get("sign") == -1.0 and not rot.get("mixed"):
            if rot.get("in_place") or sides != "both":
                detail = "the first coordinate of each of your planes turns by minus the angle."
            else:
                detail = (
                    "your weights depend on the offsets only, but mirrored: each score is "
                    "the right score of a key as far on the other side of its query (offset "
                    "n - m taken as m - n)."
                )
            found.append(Finding("angle-sign", detail))
        if rot.get("pairing") == "half":
            found.append(
                Finding(
                    "wrong-pairing",
                    "your weights are those of a valid rotary embedding, but not of the "
                    "interleaved layout this exercise asks for.",
                )
            )
        if rot.get("freq_step", 2) != 2:
            theta = 10000.0 ** (-rot["freq_step"] * np.arange(4) / 8)
            found.append(
                Finding(
                    "wrong-frequencies",
                    "with d_k = 8 your planes 0 to 3 turn by "
                    f"{[float(f'{t:.4g}') for t in theta]} radians per position.",
                )
            )
        if rot.get("in_place"):
            found.append(
                Finding(
                    "rotation-overwrites-input",
                    "your weights are those of a map of each plane that changes the lengths "
                    "of the queries and keys, which no rotation does; the first coordinate "
                    "of each plane is turned as a rotation turns it, the second is not.",
                )
            )
        if rot.get("mixed"):
            found.append(
                Finding(
                    "sines-same-sign",
                    "your weights are those of a map of each plane that changes the lengths "
                    "of the queries and keys, which no rotation does: the sine terms of its "
                    "two coordinates carry the same sign.",
                )
            )
    if not close(out, w @ v, *tol):
        rots = [match[1]] if match and match[1] else _ROTATIONS
        where = [pos] if match else [positions, np.arange(5)]
        if any(close(out, w @ _rotate(v, at, **r), *tol) for r in rots for at in where):
            found.append(
                Finding(
                    "rotates-values",
                    "your weights are right for these inputs, but your output is not your "
                    "weights times the values you were given.",
                )
            )
    return found


register(
    Exercise(
        name="rotary_attend",
        summary="rotary_attend(q, k, v, positions) -> (out, weights): RoPE on q and k",
        reference=_rotary_reference,
        make_cases=_rotary_cases,
        make_hidden_cases=lambda: (
            [Case("hidden: " + c.label, c.args) for c in _rotary_cases(2424)]
            + [
                Case(
                    "hidden: 7 tokens at positions 100..106, d_k=12, d_v=4",
                    tuple(np.random.default_rng(7).standard_normal(s) for s in ((7, 12),) * 2)
                    + (np.random.default_rng(8).standard_normal((7, 4)), np.arange(100, 107)),
                )
            ]
        ),
        forbidden=("attnlib.positions.apply_rotary",),
        infer=_infer_rotary,
        build=_rotary_variant,
        exclusive=(
            # nothing rotated: no direction, pairing or frequency to get wrong
            frozenset({"no-rotation", "angle-sign"}),
            frozenset({"no-rotation", "wrong-pairing"}),
            frozenset({"no-rotation", "wrong-frequencies"}),
            frozenset({"no-rotation", "positions-ignored"}),
            frozenset({"no-rotation", "rotation-overwrites-input"}),
            # the overwriting is measured on the interleaved layout only
            frozenset({"wrong-pairing", "rotation-overwrites-input"}),
            # sines of one sign: measured on the interleaved layout, with no direction
            frozenset({"sines-same-sign", "wrong-pairing"}),
            frozenset({"sines-same-sign", "angle-sign"}),
            frozenset({"sines-same-sign", "rotation-overwrites-input"}),
            frozenset({"sines-same-sign", "no-rotation"}),
            # neither side rotated is no rotation at all
            frozenset({"only-keys-rotated", "only-queries-rotated"}),
            frozenset({"only-queries-rotated", "no-rotation"}),
        ),
        misconceptions=(
            Misconception(
                "rotates-values",
                "The values are rotated too. Rotation carries position into the comparison "
                "of queries with keys; values are what gets handed over, and stay as they "
                "are.",
                (_rotary_variant(rotate_v=True),),
                {"rotate_v": True},
                question="Your weights are right, but your output is not those weights "
                "times the values you were given. What happened to the values on their "
                "way into your attention?",
            ),
            Misconception(
                "wrong-pairing",
                "You used the rotate-half layout: plane i is dimensions i and i + d_k/2, as "
                "in GPT-NeoX and the Llama code of Hugging Face transformers. That is valid "
                "RoPE (the same rotations with the dimensions permuted), but this exercise "
                "asks for the interleaved layout of the RoFormer paper, where plane i is "
                "the neighbours 2i and 2i + 1.",
                (_rotary_variant(pairing="half"),),
                {"pairing": "half"},
                question="Your weights are those of a valid rotary embedding, in another "
                "layout. Which two dimensions of a query form plane 0 in your code, and "
                "which two does the exercise ask for?",
            ),
            Misconception(
                "angle-sign",
                "The planes turn clockwise: the sine terms carry the signs of a turn by "
                "minus the angle. Turning every query and key the wrong way mirrors every "
                "offset, so each score is that of a key as far on the other side of its "
                "query.",
                (_rotary_variant(sign=-1.0),),
                {"sign": -1.0},
                question="Sketch a plane and turn its unit vector (1, 0) by a small "
                "positive angle, counter-clockwise: into which quadrant does it go? Now "
                "turn it with your formulas: does it go there too?",
            ),
            Misconception(
                "wrong-frequencies",
                "Plane i turns at the wrong speed. Its angle per position is 10000 to the "
                "power of minus 2i/d_k, for i from 0 to d_k/2 - 1: the first plane turns 1 "
                "radian per position, the last almost not at all. The usual slips: the 2 of "
                "2i left out, counted twice (a range in steps of 2 already holds 2i), or "
                "the exponent's sign flipped.",
                (
                    _rotary_variant(freq_step=1),
                    _rotary_variant(freq_step=4),
                    _rotary_variant(freq_step=-2),
                ),
                {"freq_step": 1},
                question="Work out from the exercise's formula how far planes 0 to 3 turn "
                "per position when d_k is 8, and compare with the measured ones. Which "
                "plane is the first to differ, and by what factor?",
            ),
            Misconception(
                "rotation-overwrites-input",
                "The second coordinate of each plane is computed from the first one after "
                "it was overwritten, so the map is no longer a rotation (it changes "
                "lengths). Both new coordinates must be computed from the original pair.",
                (_rotary_variant(in_place=True),),
                {"in_place": True},
                question="A rotation keeps every length. When your code computes the second "
                "coordinate of a plane, is the first coordinate it reads still the original "
                "one?",
            ),
            Misconception(
                "sines-same-sign",
                "Both coordinates carry their sine term with the same sign, so each plane "
                "is mapped by something that is not a rotation: it changes lengths, and the "
                "score no longer depends on the offset alone. In a turn, one sine term is "
                "subtracted and the other added.",
                (_rotary_variant(mixed=True), _rotary_variant(mixed=True, sign=-1.0)),
                {"mixed": True},
                question="Turn (1, 0) and (0, 1) with your formulas by a small angle: do "
                "they keep length 1, and do they stay at a right angle? Compare each of "
                "your four terms with a sketch of the turn.",
            ),
            Misconception(
                "only-keys-rotated",
                "Only the keys are rotated. The score then depends on each key's absolute "
                "position; rotating the queries too, each by its own position, is what "
                "leaves only the offset.",
                (_rotary_variant(rotate_q=False),),
                {"rotate_q": False},
                question="Moving every token by the same number of positions changes no "
                "offset, yet it changes your weights. Which of the two vectors compared in "
                "a score did you turn?",
            ),
            Misconception(
                "only-queries-rotated",
                "Only the queries are rotated. The score then depends on each query's "
                "absolute position; rotating the keys too, each by its own position, is "
                "what leaves only the offset.",
                (_rotary_variant(rotate_k=False),),
                {"rotate_k": False},
                question="Moving every token by the same number of positions changes no "
                "offset, yet it changes your weights. Which of the two vectors compared in "
                "a score did you turn?",
            ),
            Misconception(
                "positions-ignored",
                "The rotation uses 0, 1, 2, ... (the slots of the array) instead of the "
                "positions passed in. Tokens need not sit at 0 to seq - 1 (a cache, a "
                "chunk, packed sequences): each is turned by its own given position.",
                (_rotary_variant(use_positions=False),),
                {"use_positions": False},
                question="Your weights are the same whatever positions you are given. Where "
                "does your rotation take each token's position from?",
            ),
            Misconception(
                "no-rotation",
                "Neither queries nor keys are rotated, so the scores do not depend on the "
                "positions at all. Both are turned by their positions before they are "
                "compared.",
                (_rotary_variant(rotate_q=False, rotate_k=False),),
                {"rotate_q": False, "rotate_k": False},
                question="Your weights are those of attention without any positions. Where "
                "in your function do the positions reach the queries and the keys?",
            ),
        ),
    )
)


_ROTATION_IDS = (
    "wrong-pairing",
    "angle-sign",
    "wrong-frequencies",
    "rotation-overwrites-input",
    "sines-same-sign",
    "only-keys-rotated",
    "only-queries-rotated",
    "positions-ignored",
    "no-rotation",
)
register_parts(
    "rotary_attend",
    [
        (
            "rotary_attend_weights",
            "the weights: queries and keys rotated by their positions (interleaved planes), "
            "then compared",
            {
                "outputs": (1,),
                "ids": _ROTATION_IDS,
                "make_cases": _rotary_wide_v_cases,
                "make_hidden_cases": lambda: [
                    Case("hidden: " + c.label, c.args) for c in _rotary_wide_v_cases(2425)
                ],
            },
        ),
        (
            "rotary_attend_output",
            "the output: those weights times the values, which are not rotated",
            {"outputs": (0,), "ids": ("rotates-values", *_ROTATION_IDS)},
        ),
    ],
)
