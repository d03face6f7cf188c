"""Exercises on learned projections (lesson 02): ``project`` and ``linear_forward``.

Inputs are numpy float64 arrays. Shapes are non-square (seq ≠ d_model ≠ d_k ≠ d_v) so that a
wrong transpose cannot pass by accident. A few cases make one pair of sizes equal on purpose
(seq == d_k == d_v; in_features == out_features; seq == in_features) so that a classic
mistake *runs* there and its output can be recognised, instead of only raising a shape error.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._cases import normal_cases
from attnlib.checks._core import Case, Exercise, Misconception, register
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


register(
    Exercise(
        name="project",
        summary="project(x, W_q, W_k, W_v) -> (q, k, v): three projections of one input",
        reference=lambda x, W_q, W_k, W_v: _project(x, W_q, W_k, W_v),
        make_cases=_project_cases,
        make_hidden_cases=_project_hidden_cases,
        forbidden=("attnlib.projections.project", "attnlib.projections.linear"),
        misconceptions=(
            Misconception(
                "projections-swapped",
                "The outputs come back in the wrong order or through the wrong matrix (for "
                "example k where q is expected). Return (x @ W_q, x @ W_k, x @ W_v), in that "
                "order.",
                (_pj_swap_qk, _pj_swap_kv),
            ),
            Misconception(
                "wrong-side-multiplication",
                "The matrix multiplies from the left (W @ x, or Wᵀ @ xᵀ, which gives the result "
                "transposed). Here x holds one token per row, shape (seq, d_model), and W is "
                "(d_model, d_k): multiply from the right, x @ W, to get (seq, d_k).",
                (_pj_left, _pj_columns),
            ),
            Misconception(
                "one-matrix-for-all",
                "The same matrix makes the query, the key and the value. Each role has its own "
                "learned matrix: q uses W_q, k uses W_k, v uses W_v.",
                (_pj_one_matrix,),
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


register(
    Exercise(
        name="linear_forward",
        summary="linear_forward(x, weight, bias=None) -> x @ weightᵀ + bias, like nn.Linear",
        reference=lambda x, weight, bias=None: _linear(x, weight, bias),
        make_cases=_linear_cases,
        make_hidden_cases=_linear_hidden_cases,
        forbidden=("attnlib.projections.linear", "attnlib.projections.project"),
        misconceptions=(
            Misconception(
                "weight-not-transposed",
                "weight is used as stored. nn.Linear keeps weight as (out_features, "
                "in_features), one row per output feature, and computes x @ weight.T + bias.",
                (_lin_not_transposed,),
            ),
            Misconception(
                "bias-missing",
                "The bias is never added. nn.Linear computes x @ weight.T + bias (when bias is "
                "not None).",
                (_lin_no_bias,),
            ),
            Misconception(
                "wrong-side-multiplication",
                "weight multiplies from the left (weight @ xᵀ), which puts one token per column. "
                "Keep one token per row: x @ weight.T, shape (..., seq, out_features).",
                (_lin_left, _lin_left_literal),
            ),
            Misconception(
                "bias-none-not-handled",
                "bias=None (a layer without bias, nn.Linear(..., bias=False)) fails. Add the "
                "bias only when it is not None.",
                (_lin_bias_none_fails,),
            ),
            Misconception(
                "bias-subtracted",
                "The bias is subtracted. nn.Linear adds it: x @ weight.T + bias.",
                (_lin_bias_subtracted,),
            ),
        ),
    )
)
