"""Exercises on learned projections (lesson 02): ``project`` and ``linear_forward``.

* ``project(x, W_qkv, d_k) -> (q, k, v)`` — W_qkv holds W_q, W_k and W_v side by side (in
  that order), as models that fuse the three projections store them; only d_k is given, so
  the learner works out where the blocks start and how wide the values are.
* ``linear_forward(x, weight, bias=None)`` — what ``nn.Linear`` computes, for its stored
  (out_features, in_features) weight.

Inputs are numpy float64 arrays. Shapes are non-square so that a wrong transpose cannot pass
by accident; project's cases have d_v ≠ d_k (an equal split would pass otherwise), some with
2·d_k + d_v divisible by 3 (so three equal blocks *run*) and some with d_v > d_k (so blocks
all d_k wide lose columns). linear_forward has a square weight (where a missing transpose
runs) and ``bias=None``.

Diagnosis by inference (:mod:`attnlib.checks._core`): project's outputs are located as
column ranges of x @ W_qkv (which block, how wide, in which order); linear_forward is probed
with square (4, 4) inputs, on which every orientation runs, and the bias is measured on its
own (bias 0, a random bias, ``None``), so a wrong orientation and a wrong bias are named as
two mistakes.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._cases import normal_cases
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, fmt, tolerances
from attnlib.projections import linear as _linear
from attnlib.projections import project as _project

# ----------------------------------------------------------------------------------------
# project(x, W_qkv, d_k) -> (q, k, v): one fused matrix [W_q | W_k | W_v], split by the learner
# ----------------------------------------------------------------------------------------


def _fused_case(rng, label, x_shape, d_k, d_v):
    d_model = x_shape[-1]
    return Case(
        label, (rng.standard_normal(x_shape), rng.standard_normal((d_model, 2 * d_k + d_v)), d_k)
    )


def _project_cases() -> list[Case]:
    rng = np.random.default_rng(202602)
    return [
        _fused_case(rng, "seq=4, d_model=6, d_k=2, d_v=5 (W_qkv has 9 columns)", (4, 6), 2, 5),
        _fused_case(rng, "batch=2, seq=3, d_model=7, d_k=4, d_v=1", (2, 3, 7), 4, 1),
        _fused_case(rng, "seq=5, d_model=4, d_k=3, d_v=6 (v wider than q and k)", (5, 4), 3, 6),
        _fused_case(rng, "one token: seq=1, d_model=4, d_k=1, d_v=4", (1, 4), 1, 4),
    ]


def _project_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(912)
    return [
        _fused_case(
            rng, "hidden: batch=2, n_heads=3, seq=4, d_model=5, d_k=3, d_v=6", (2, 3, 4, 5), 3, 6
        ),
        _fused_case(rng, "hidden: seq=7, d_model=2, d_k=5, d_v=2", (7, 2), 5, 2),
        _fused_case(rng, "hidden: seq=3, d_model=8, d_k=2, d_v=8", (3, 8), 2, 8),
    ]


def _project_reference(x, W_qkv, d_k):
    blocks = W_qkv[:, :d_k], W_qkv[:, d_k : 2 * d_k], W_qkv[:, 2 * d_k :]
    return _project(x, *blocks)


_ROLES = ("q", "k", "v")


def _pj_build(*, order="qkv", widths="roles"):
    """project with the given choices; the defaults give the correct function.

    ``order``: the roles of W_qkv's three column blocks, left to right ("qkv", "kqv",
    "qvk"); ``widths``: "roles" (d_k, d_k and the rest for v), "thirds" (three equal
    blocks) or "all_d_k" (every block d_k wide).
    """

    def fn(x, W_qkv, d_k):
        y = x @ W_qkv  # (..., seq, 2 d_k + d_v)
        total = y.shape[-1]
        d_v = total - 2 * d_k
        if widths == "thirds":
            w = [total // 3] * 3
        elif widths == "all_d_k":
            w = [d_k] * 3
        else:
            w = [d_v if role == "v" else d_k for role in order]
        starts = [0, w[0], w[0] + w[1]]
        got = {role: y[..., a : a + n] for role, a, n in zip(order, starts, w, strict=True)}
        return got["q"], got["k"], got["v"]

    return fn


_PJ_RNG = np.random.default_rng(20260)
_PJ_D_K, _PJ_D_V = 2, 5  # 9 columns: thirds of 3, none equal to d_k or d_v
_PJ_X = _PJ_RNG.standard_normal((5, 6))
_PJ_W = _PJ_RNG.standard_normal((6, 2 * _PJ_D_K + _PJ_D_V))


def _slice_of(a, y, eps: float):
    """(start, stop) such that a equals y[..., start:stop]; None if no column range does."""
    if a is None or a.ndim != y.ndim or a.shape[:-1] != y.shape[:-1]:
        return None
    n = a.shape[-1]
    rel, abs_ = tolerances(eps)
    for start in range(y.shape[-1] - n + 1):
        if n and close(a, y[..., start : start + n], rel, abs_):
            return start, start + n
    return None


def _infer_project(learner) -> list[Finding]:
    o = learner(_PJ_X.copy(), _PJ_W.copy(), _PJ_D_K)
    if not o.ok or o.arity != 3:
        return []
    y = _PJ_X @ _PJ_W
    got = [_slice_of(o.array(i), y, o.eps) for i in range(3)]
    if any(g is None for g in got):
        return []
    blocks = sorted(zip(got, _ROLES, strict=True))  # by start column
    starts = [g[0] for g, _ in blocks]
    stops = [g[1] for g, _ in blocks]
    if starts != [0, stops[0], stops[1]]:
        return []  # not three blocks side by side from the first column
    order = "".join(role for _, role in blocks)
    width = [b - a for a, b in (g for g, _ in blocks)]
    total = y.shape[-1]
    shown = ", ".join(
        f"{role} = columns {a} to {b - 1}" for (a, b), role in zip(got, _ROLES, strict=True)
    )
    where = f"with d_k = {_PJ_D_K} and a W_qkv of {total} columns, your {shown}"
    found = []
    if width == [total // 3] * 3:
        found.append(Finding("split-in-thirds", f"{where}: three blocks of {total // 3} columns."))
    elif width == [_PJ_D_K] * 3:
        found.append(
            Finding(
                "v-width-d-k",
                f"{where}: v is {_PJ_D_K} columns wide, and the last {total - 3 * _PJ_D_K} "
                "columns of W_qkv are never used.",
            )
        )
    elif width != [_PJ_D_V if role == "v" else _PJ_D_K for role in order]:
        return []
    if order != "qkv":
        found.append(
            Finding(
                "projections-swapped",
                f"{where}: from left to right your blocks are {', '.join(order)}.",
            )
        )
    return found


register(
    Exercise(
        name="project",
        summary="project(x, W_qkv, d_k) -> (q, k, v): three projections from one fused matrix",
        reference=_project_reference,
        make_cases=_project_cases,
        make_hidden_cases=_project_hidden_cases,
        forbidden=("attnlib.projections.project", "attnlib.projections.linear"),
        infer=_infer_project,
        build=_pj_build,
        exclusive=(
            # every block d_k wide in the order q, v, k leaves v where k belongs: one mistake
            # in the widths reads as the order's too, and the other way round
            frozenset({"v-width-d-k", "projections-swapped"}),
        ),
        misconceptions=(
            Misconception(
                "projections-swapped",
                "The blocks of W_qkv are given the wrong roles. Its columns hold W_q first, "
                "then W_k, then W_v; the product with x keeps that order, so q comes from the "
                "first d_k columns, k from the next d_k and v from all the rest.",
                (_pj_build(order="kqv"), _pj_build(order="qvk")),
                {"order": "kqv"},
                question="Which columns of the product of x and W_qkv did you return as q, "
                "as k and as v? In which order does the exercise say W_qkv holds the three "
                "matrices?",
            ),
            Misconception(
                "split-in-thirds",
                "W_qkv is cut into three equal blocks. Only queries and keys must have the "
                "same width (they meet in a dot product); the values may be wider or "
                "narrower, so the third block is whatever is left after 2 d_k columns.",
                (_pj_build(widths="thirds"),),
                {"widths": "thirds"},
                question="How wide are your q, k and v, and how wide should q and k be? Must "
                "the values have the same width as the queries?",
            ),
            Misconception(
                "v-width-d-k",
                "Every block is taken d_k columns wide, so the values lose the columns past "
                "3 d_k (and narrower values would come out fine, which hides it). The width "
                "of the values is not given: it is what W_qkv has left after q and k, its "
                "number of columns minus 2 d_k.",
                (_pj_build(widths="all_d_k"),),
                {"widths": "all_d_k"},
                question="How many columns does W_qkv have, and how many of them does your "
                "function use? How wide must v be for every column to be used?",
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# linear_forward(x, weight, bias=None) -> x @ weightᵀ + bias, as nn.Linear computes it
# ----------------------------------------------------------------------------------------


def _linear_cases() -> list[Case]:
    return normal_cases(
        202603,
        ("seq=5, in=4, out=3", (5, 4), (3, 4), 3),
        ("batch=2, seq=3, in=6, out=2", (2, 3, 6), (2, 6), 2),
        ("seq=3, in=out=4 (square weight, so x @ weight runs)", (3, 4), (4, 4), 4),
        ("seq=in=3, out=5, bias=None (no bias; weight @ x runs)", (3, 3), (5, 3), None),
        ("seq=3, in=5, out=2, bias as keyword", (3, 5), (2, 5), {"bias": 2}),
    )


def _linear_hidden_cases() -> list[Case]:
    return normal_cases(
        913,
        ("batch=4, seq=2, in=3, out=7", (4, 2, 3), (7, 3), 7),
        ("a single vector: in=6, out=4", 6, (4, 6), 4),
        ("seq=8, in=1, out=2, bias=None", (8, 1), (2, 1), None),
    )


def _add(y, bias):
    return y if bias is None else y + bias


def _lin_not_transposed(x, weight, bias=None):
    return _add(x @ weight, bias)


def _lin_no_bias(x, weight, bias=None):
    return x @ np.swapaxes(weight, -1, -2)


def _lin_left(x, weight, bias=None):
    y = weight @ np.swapaxes(x, -1, -2)  # (out, seq): one column per token
    return y if bias is None else y + bias[:, None]


def _lin_left_literal(x, weight, bias=None):
    return _add(weight @ x, bias)


def _lin_bias_none_fails(x, weight, bias=None):
    return x @ np.swapaxes(weight, -1, -2) + bias


def _lin_bias_subtracted(x, weight, bias=None):
    return x @ np.swapaxes(weight, -1, -2) - (0.0 if bias is None else bias)


def _lin_bias_before(x, weight, bias=None):
    return (x if bias is None else x + bias) @ np.swapaxes(weight, -1, -2)


def _lin_build(*, orient="right", bias_mode="add"):
    """linear_forward with the given choices; the defaults give the correct function.

    ``orient``: "right" (x @ weightᵀ), "as_stored" (x @ weight) or "left" (weight @ xᵀ, one
    token per column); ``bias_mode``: "add", "missing", "subtract", "none_fails" (added
    without checking for None) or "before" (added to x before the product).
    """

    def fn(x, weight, bias=None):
        if bias_mode == "before" and bias is not None:
            x = x + bias
        if orient == "as_stored":
            y = x @ weight
        elif orient == "left":
            y = weight @ np.swapaxes(x, -1, -2)  # (out_features, seq)
        else:
            y = x @ np.swapaxes(weight, -1, -2)
        if bias_mode in ("missing", "before") or (bias is None and bias_mode != "none_fails"):
            return y
        b = bias[:, None] if orient == "left" else bias
        return y - b if bias_mode == "subtract" else y + b

    return fn


_LIN_RNG = np.random.default_rng(20261)
_LIN_X = _LIN_RNG.standard_normal((4, 4))  # square: every orientation runs
_LIN_W = _LIN_RNG.standard_normal((4, 4))
_LIN_B = _LIN_RNG.standard_normal(4) + 2.0  # clearly non-zero


def _infer_linear(learner) -> list[Finding]:
    x, w, b = _LIN_X, _LIN_W, _LIN_B
    o0 = learner(x.copy(), w.copy(), np.zeros(4))
    y0 = o0.array(0) if o0.ok and o0.arity == 1 else None
    if y0 is None or y0.shape != (4, 4) or y0.dtype == bool:
        return []
    rel, abs_ = tolerances(o0.eps)
    products = {
        "x @ weight.T": x @ w.T,
        "x @ weight": x @ w,
        "weight @ x.T": w @ x.T,
        "weight @ x": w @ x,
    }
    made = next((k for k, v in products.items() if close(y0, v, rel, abs_)), None)
    if made is None:
        return []
    found = []
    if made == "x @ weight":
        found.append(
            Finding(
                "weight-not-transposed",
                "with bias 0 and a square (4, 4) weight, your output equals x @ weight.",
            )
        )
    elif made.startswith("weight @"):
        found.append(
            Finding(
                "wrong-side-multiplication",
                f"with bias 0 and square (4, 4) inputs, your output equals {made}.",
            )
        )
    o1 = learner(x.copy(), w.copy(), b.copy())
    y1 = o1.array(0) if o1.ok and o1.arity == 1 else None
    if y1 is not None and y1.shape == (4, 4):
        d = y1 - y0  # what the bias did
        added = [np.broadcast_to(b, (4, 4)), np.broadcast_to(b[:, None], (4, 4))]
        if close(d, np.zeros((4, 4)), rel, abs_):
            found.append(
                Finding(
                    "bias-missing",
                    "a bias of about 2 changes nothing in your output (compared with bias 0).",
                )
            )
        elif any(close(d, -a, rel, abs_) for a in added):
            found.append(
                Finding(
                    "bias-subtracted",
                    f"a bias b (b[0] = {fmt(float(b[0]))}) moves your output by −b.",
                )
            )
        elif not any(close(d, a, rel, abs_) for a in added) and any(
            close(d, np.broadcast_to(through, (4, 4)), rel, abs_)
            for through in (b @ w.T, b @ w, (w @ b)[:, None], (w @ b)[None, :])
        ):
            found.append(
                Finding(
                    "bias-before-product",
                    f"a bias b (b[0] = {fmt(float(b[0]))}) does not move your output by b: "
                    "it moves it by b multiplied by the weight.",
                )
            )
    o2 = learner(x.copy(), w.copy(), None)
    if not o2.ok:
        found.append(
            Finding(
                "bias-none-not-handled",
                f"with bias=None your function raises {o2.error()[:100]}.",
            )
        )
    return found


register(
    Exercise(
        name="linear_forward",
        summary="linear_forward(x, weight, bias=None) -> x @ weightᵀ + bias, like nn.Linear",
        reference=lambda x, weight, bias=None: _linear(x, weight, bias),
        make_cases=_linear_cases,
        make_hidden_cases=_linear_hidden_cases,
        forbidden=("attnlib.projections.linear", "attnlib.projections.project"),
        infer=_infer_linear,
        build=_lin_build,
        misconceptions=(
            Misconception(
                "weight-not-transposed",
                "The weight is used as it is stored. nn.Linear keeps it as (out_features, "
                "in_features), one row per output feature, which is the transpose of the "
                "matrix that multiplies x from the right; a square weight hides this, because "
                "the product then runs with the wrong numbers.",
                (_lin_not_transposed,),
                {"orient": "as_stored"},
                question="Your function runs on a square weight but disagrees with "
                "nn.Linear there. What shape is weight, which of its sizes is in_features, "
                "and which size of weight must line up with the last axis of x?",
            ),
            Misconception(
                "bias-missing",
                "The bias is never added. nn.Linear adds its bias vector to every output row "
                "after the product (when the layer has one).",
                (_lin_no_bias,),
                {"bias_mode": "missing"},
                question="Call your function twice with the same x and weight and two "
                "different biases: does the output change? What should a bias do to it?",
            ),
            Misconception(
                "wrong-side-multiplication",
                "The weight multiplies from the left, which puts one token per column. The "
                "course keeps one token per row, so the result must have shape (..., seq, "
                "out_features), with x on the left of the product.",
                (_lin_left, _lin_left_literal),
                {"orient": "left"},
                question="What shape is your output, and does each row still belong to one "
                "token? Which factor of your product stands on the left?",
            ),
            Misconception(
                "bias-none-not-handled",
                "A layer built without a bias passes None, and your function still adds it, "
                "which fails. The bias is added only when there is one.",
                (_lin_bias_none_fails,),
                {"bias_mode": "none_fails"},
                question="What does a layer built without a bias hand your function as bias, "
                "and what happens when your code adds that?",
            ),
            Misconception(
                "bias-subtracted",
                "The bias is subtracted. nn.Linear adds it after the product.",
                (_lin_bias_subtracted,),
                {"bias_mode": "subtract"},
                question="Raise every entry of the bias by 1: in which direction does your "
                "output move, and in which does a layer's output move?",
            ),
            Misconception(
                "bias-before-product",
                "The bias is added to the input before the product, so it passes through the "
                "weight as well (and the sizes only fit when in_features equals "
                "out_features). nn.Linear adds the bias to the output, after the product: "
                "raising the bias by b raises every output row by exactly b.",
                (_lin_bias_before,),
                {"bias_mode": "before"},
                question="Raise every entry of the bias by 1: does every entry of your output "
                "rise by exactly 1? Where in your computation does the bias enter?",
            ),
        ),
    )
)
