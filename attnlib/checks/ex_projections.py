"""Exercises on learned projections (lesson 02): ``project`` and ``linear_forward``.

Inputs are numpy float64 arrays. Shapes are non-square (seq ≠ d_model ≠ d_k ≠ d_v) so that a
wrong transpose cannot pass by accident. A few cases make one pair of sizes equal on purpose
(seq == d_k == d_v; in_features == out_features; seq == in_features) so that a classic
mistake *runs* there and its output can be recognised, instead of only raising a shape error.

Diagnosis by inference (:mod:`attnlib.checks._core`): both exercises are probed with square
(4, 4) inputs, on which every classic mistake runs, and each output is identified as one
product of the inputs — which matrix, multiplied from which side. For ``linear_forward``
the bias is measured on its own (bias 0, a random bias, ``None``), so a wrong orientation
and a wrong bias are named as two mistakes.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._cases import normal_cases
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, fmt, tolerances
from attnlib.projections import linear as _linear
from attnlib.projections import project as _project

# ----------------------------------------------------------------------------------------
# project(x, W_q, W_k, W_v) -> (q, k, v) with q = x @ W_q, k = x @ W_k, v = x @ W_v
# ----------------------------------------------------------------------------------------


def _project_cases() -> list[Case]:
    return normal_cases(
        202602,
        ("seq=5, d_model=6, d_k=4, d_v=3", (5, 6), (6, 4), (6, 4), (6, 3)),
        ("batch=2, seq=3, d_model=7, d_k=2, d_v=5", (2, 3, 7), (7, 2), (7, 2), (7, 5)),
        ("seq=4, d_model=6, d_k=d_v=4 (seq == d_k, so W @ x runs)", (4, 6), (6, 4), (6, 4), (6, 4)),
        ("one token: seq=1, d_model=3, d_k=5, d_v=2", (1, 3), (3, 5), (3, 5), (3, 2)),
    )


def _project_hidden_cases() -> list[Case]:
    return normal_cases(
        912,
        (
            "batch=2, n_heads=3, seq=4, d_model=5, d_k=3, d_v=6",
            (2, 3, 4, 5),
            (5, 3),
            (5, 3),
            (5, 6),
        ),
        ("seq=7, d_model=2, d_k=9, d_v=1", (7, 2), (2, 9), (2, 9), (2, 1)),
    )


def _pj_swap_qk(x, W_q, W_k, W_v):
    return x @ W_k, x @ W_q, x @ W_v


def _pj_swap_kv(x, W_q, W_k, W_v):
    return x @ W_q, x @ W_v, x @ W_k


def _pj_left(x, W_q, W_k, W_v):
    return W_q @ x, W_k @ x, W_v @ x


def _pj_columns(x, W_q, W_k, W_v):
    xt = np.swapaxes(x, -1, -2)
    return W_q.T @ xt, W_k.T @ xt, W_v.T @ xt


def _pj_one_matrix(x, W_q, W_k, W_v):
    q = x @ W_q
    return q, q, q


def _pj_build(*, order="qkv", side="right"):
    """project with the given choices; the defaults give the correct function.

    ``order``: which matrix makes (q, k, v) — "qkv", "kqv", "qvk" or "one" (W_q for all);
    ``side``: "right" (x @ W), "left" (W @ x) or "columns" (Wᵀ @ xᵀ).
    """

    def fn(x, W_q, W_k, W_v):
        mats = {
            "qkv": (W_q, W_k, W_v),
            "kqv": (W_k, W_q, W_v),
            "qvk": (W_q, W_v, W_k),
            "one": (W_q, W_q, W_q),
        }[order]
        if side == "left":
            return tuple(W @ x for W in mats)
        if side == "columns":
            xt = np.swapaxes(x, -1, -2)
            return tuple(np.swapaxes(W, -1, -2) @ xt for W in mats)
        return tuple(x @ W for W in mats)

    return fn


_PJ_RNG = np.random.default_rng(20260)
_PJ_X = _PJ_RNG.standard_normal((4, 4))  # square: every orientation runs
_PJ_W = {name: _PJ_RNG.standard_normal((4, 4)) for name in ("W_q", "W_k", "W_v")}


def _product_of(y, x, mats: dict, eps: float):
    """Which (matrix name, side) makes y from x: x @ M, M @ x or Mᵀ @ xᵀ; None if none does."""
    rel, abs_ = tolerances(eps)
    for name, M in mats.items():
        for side, value in (("right", x @ M), ("left", M @ x), ("columns", M.T @ x.T)):
            if close(y, value, rel, abs_):
                return name, side
    return None


def _infer_project(learner) -> list[Finding]:
    o = learner(_PJ_X.copy(), *(W.copy() for W in _PJ_W.values()))
    if not o.ok or o.arity != 3 or any(o.array(i) is None for i in range(3)):
        return []
    made = [_product_of(o.array(i), _PJ_X, _PJ_W, o.eps) for i in range(3)]
    if any(m is None for m in made) or any(o.array(i).shape != (4, 4) for i in range(3)):
        return []
    found = []
    names = tuple(m[0] for m in made)
    if len(set(names)) == 1:
        found.append(
            Finding(
                "one-matrix-for-all",
                f"on square (4, 4) inputs, q, k and v all come out as products with {names[0]}.",
            )
        )
    elif names != ("W_q", "W_k", "W_v"):
        found.append(
            Finding(
                "projections-swapped",
                f"on square (4, 4) inputs your (q, k, v) are made with ({', '.join(names)}).",
            )
        )
    sides = {"right": "x @ W", "left": "W @ x", "columns": "Wᵀ @ xᵀ"}
    wrong = sorted({sides[m[1]] for m in made if m[1] != "right"})
    if wrong:
        found.append(
            Finding(
                "wrong-side-multiplication",
                f"on square (4, 4) inputs your outputs equal {' and '.join(wrong)}, not x @ W.",
            )
        )
    return found


register(
    Exercise(
        name="project",
        summary="project(x, W_q, W_k, W_v) -> (q, k, v): three projections of one input",
        reference=lambda x, W_q, W_k, W_v: _project(x, W_q, W_k, W_v),
        make_cases=_project_cases,
        make_hidden_cases=_project_hidden_cases,
        forbidden=("attnlib.projections.project", "attnlib.projections.linear"),
        infer=_infer_project,
        build=_pj_build,
        misconceptions=(
            Misconception(
                "projections-swapped",
                "The outputs come back in the wrong order or through the wrong matrix (for "
                "example k where q is expected). Return (x @ W_q, x @ W_k, x @ W_v), in that "
                "order.",
                (_pj_swap_qk, _pj_swap_kv),
                {"order": "kqv"},
            ),
            Misconception(
                "wrong-side-multiplication",
                "The matrix multiplies from the left (W @ x, or Wᵀ @ xᵀ, which gives the result "
                "transposed). Here x holds one token per row, shape (seq, d_model), and W is "
                "(d_model, d_k): multiply from the right, x @ W, to get (seq, d_k).",
                (_pj_left, _pj_columns),
                {"side": "left"},
            ),
            Misconception(
                "one-matrix-for-all",
                "The same matrix makes the query, the key and the value. Each role has its own "
                "learned matrix: q uses W_q, k uses W_k, v uses W_v.",
                (_pj_one_matrix,),
                {"order": "one"},
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


def _lin_build(*, orient="right", bias_mode="add"):
    """linear_forward with the given choices; the defaults give the correct function.

    ``orient``: "right" (x @ weightᵀ), "as_stored" (x @ weight) or "left" (weight @ xᵀ, one
    token per column); ``bias_mode``: "add", "missing", "subtract" or "none_fails" (added
    without checking for None).
    """

    def fn(x, weight, bias=None):
        if orient == "as_stored":
            y = x @ weight
        elif orient == "left":
            y = weight @ np.swapaxes(x, -1, -2)  # (out_features, seq)
        else:
            y = x @ np.swapaxes(weight, -1, -2)
        if bias_mode == "missing" or (bias is None and bias_mode != "none_fails"):
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
                "with bias 0 and a square (4, 4) weight, your output equals x @ weight: the "
                "weight was used as stored, (out_features, in_features).",
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
                "weight is used as stored. nn.Linear keeps weight as (out_features, "
                "in_features), one row per output feature, and computes x @ weight.T + bias.",
                (_lin_not_transposed,),
                {"orient": "as_stored"},
            ),
            Misconception(
                "bias-missing",
                "The bias is never added. nn.Linear computes x @ weight.T + bias (when bias is "
                "not None).",
                (_lin_no_bias,),
                {"bias_mode": "missing"},
            ),
            Misconception(
                "wrong-side-multiplication",
                "weight multiplies from the left (weight @ xᵀ), which puts one token per column. "
                "Keep one token per row: x @ weight.T, shape (..., seq, out_features).",
                (_lin_left, _lin_left_literal),
                {"orient": "left"},
            ),
            Misconception(
                "bias-none-not-handled",
                "bias=None (a layer without bias, nn.Linear(..., bias=False)) fails. Add the "
                "bias only when it is not None.",
                (_lin_bias_none_fails,),
                {"bias_mode": "none_fails"},
            ),
            Misconception(
                "bias-subtracted",
                "The bias is subtracted. nn.Linear adds it: x @ weight.T + bias.",
                (_lin_bias_subtracted,),
                {"bias_mode": "subtract"},
            ),
        ),
    )
)
