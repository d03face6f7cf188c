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
values or rotated values, and which rotation of queries and keys (both, keys only, none;
direction; pairing of dimensions; frequencies 10000^(-k·i/d_k) for k = 2, 1, 4, -2; a
first coordinate overwritten before the second is computed) reproduces the weights.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._cases import register_parts
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, tolerances
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


def _rotate(x, positions, *, sign=1.0, pairing="interleaved", freq_step=2, in_place=False):
    """Rotate planes of ``x`` by position · 10000^(-freq_step·i/d_k). ``freq_step``: 2 is
    right; 1 drops the 2, 4 counts it twice (``arange(0, d_k, 2)`` times 2), -2 flips the
    exponent's sign. ``in_place``: the second coordinate is computed from the first one
    already overwritten."""
    d_k = x.shape[-1]
    half = d_k // 2
    freq = 10000.0 ** (-freq_step * np.arange(half) / d_k)  # (d_k/2,)
    ang = sign * np.asarray(positions, dtype=np.float64)[:, None] * freq  # (seq, d_k/2)
    cos, sin = np.cos(ang), np.sin(ang)
    out = np.empty_like(x)
    if pairing == "interleaved" and in_place:
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
_ROTATIONS = [
    {"sign": sign, "pairing": pairing, "freq_step": step}
    for sign in (1.0, -1.0)
    for pairing in ("interleaved", "half")
    for step in (2, 1, 4, -2)
] + [
    {"sign": sign, "freq_step": step, "in_place": True}
    for sign in (1.0, -1.0)
    for step in (2, 1, 4, -2)
]
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
        for sides in ("both", "k", "none"):
            for rot in _ROTATIONS if sides != "none" else [{}]:
                qr = _rotate(q, pos, **rot) if sides == "both" else q
                kr = _rotate(k, pos, **rot) if sides != "none" else k
                if close(w, _attend(qr, kr, v)[1], *tol):
                    match = (sides, rot)
                    break
            if match:
                break
        if match:
            break
    if match is not None:
        sides, rot = match
        if pos is not positions and sides != "none":
            found.append(
                Finding(
                    "positions-ignored",
                    f"for tokens at positions {positions.tolist()} your weights are those of "
                    "rotations by 0, 1, 2, 3, 4: the positions argument was not used.",
                )
            )
        if sides == "none":
            found.append(
                Finding(
                    "no-rotation",
                    "your weights are those of plain attention on q and k: shifting the "
                    "positions changes nothing, because nothing was rotated.",
                )
            )
        if sides == "k":
            found.append(
                Finding(
                    "only-keys-rotated",
                    "your weights are reproduced by rotating the keys alone, the queries "
                    "left as they are.",
                )
            )
        if rot.get("sign") == -1.0:
            found.append(
                Finding(
                    "angle-sign",
                    "your weights are reproduced by rotating by -angle: x0·cos + x1·sin, "
                    "-x0·sin + x1·cos.",
                )
            )
        if rot.get("pairing") == "half":
            found.append(
                Finding(
                    "wrong-pairing",
                    "your weights are reproduced by pairing dimension i with i + d_k/2 "
                    "(rotate-half) instead of 2i with 2i + 1.",
                )
            )
        if rot.get("freq_step", 2) != 2:
            found.append(
                Finding(
                    "wrong-frequencies",
                    "your weights are reproduced with angles position · "
                    f"{_FREQUENCIES[rot['freq_step']]}; plane i turns at 10000^(-2i/d_k).",
                )
            )
        if rot.get("in_place"):
            found.append(
                Finding(
                    "rotation-overwrites-input",
                    "your weights are reproduced by a rotation whose second coordinate is "
                    "computed from the first one after it was overwritten: "
                    "(x0·cos - x1·sin)·sin + x1·cos instead of x0·sin + x1·cos.",
                )
            )
    if not close(out, w @ v, *tol):
        rots = [match[1]] if match and match[1] else _ROTATIONS
        where = [pos] if match else [positions, np.arange(5)]
        if any(close(out, w @ _rotate(v, at, **r), *tol) for r in rots for at in where):
            found.append(
                Finding(
                    "rotates-values",
                    "the output is the weights times *rotated* values, not weights @ v.",
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
        ),
        misconceptions=(
            Misconception(
                "rotates-values",
                "The values are rotated too. Rotation carries position into the *comparison* "
                "of queries and keys; values are what gets handed over, and stay as they are.",
                (_rotary_variant(rotate_v=True),),
                {"rotate_v": True},
            ),
            Misconception(
                "wrong-pairing",
                "You used the rotate-half layout: plane i is dimensions (i, i + d_k/2), as in "
                "GPT-NeoX and the Llama code of Hugging Face transformers. That is valid RoPE "
                "(the same rotations with the dimensions permuted), but this exercise asks for "
                "the interleaved layout of the RoFormer paper: plane i is dimensions (2i, 2i+1), "
                "x[..., 0::2] and x[..., 1::2].",
                (_rotary_variant(pairing="half"),),
                {"pairing": "half"},
            ),
            Misconception(
                "angle-sign",
                "The rotation goes the wrong way: (x0, x1) -> (x0·cos + x1·sin, "
                "-x0·sin + x1·cos). Use x0·cos - x1·sin for the first coordinate and "
                "x0·sin + x1·cos for the second.",
                (_rotary_variant(sign=-1.0),),
                {"sign": -1.0},
            ),
            Misconception(
                "wrong-frequencies",
                "Plane i turns at the wrong speed. Its angle is position · 10000^(-2i/d_k), "
                "i = 0 .. d_k/2 - 1: the first plane turns 1 radian per position, the last "
                "almost not at all. With np.arange(0, d_k, 2) the 2i is already there.",
                (
                    _rotary_variant(freq_step=1),
                    _rotary_variant(freq_step=4),
                    _rotary_variant(freq_step=-2),
                ),
                {"freq_step": 1},
            ),
            Misconception(
                "rotation-overwrites-input",
                "The second coordinate of each plane is computed from the first one after "
                "you overwrote it (x[..., 0::2] = ... and then x[..., 1::2] = x[..., 0::2] * "
                "sin + ...). Compute both new coordinates from the old x0 and x1: keep "
                "copies, or write into a new array.",
                (_rotary_variant(in_place=True),),
                {"in_place": True},
            ),
            Misconception(
                "only-keys-rotated",
                "Only the keys are rotated. The score then depends on each key's absolute "
                "position; rotating both queries and keys is what leaves only the offset.",
                (_rotary_variant(rotate_q=False),),
                {"rotate_q": False},
            ),
            Misconception(
                "positions-ignored",
                "The rotation uses 0, 1, 2, ... (np.arange(seq)) instead of the positions "
                "passed in. Tokens need not sit at 0..seq-1 (a cache, a chunk, packed "
                "sequences): rotate by positions.",
                (_rotary_variant(use_positions=False),),
                {"use_positions": False},
            ),
            Misconception(
                "no-rotation",
                "Neither queries nor keys are rotated, so the scores do not depend on the "
                "positions at all. Rotate both q and k by their positions before comparing "
                "them.",
                (_rotary_variant(rotate_q=False, rotate_k=False),),
                {"rotate_q": False, "rotate_k": False},
            ),
        ),
    )
)


_ROTATION_IDS = (
    "wrong-pairing",
    "angle-sign",
    "wrong-frequencies",
    "rotation-overwrites-input",
    "only-keys-rotated",
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
