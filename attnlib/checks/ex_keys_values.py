"""Exercises of lessons 05 (keys versus values) and 06 (learning keys by backprop).

* ``lookup_batch(names, numbers, query_pos, n_names, n_numbers) -> (tokens, query, target)``
  — encode the lookup task (numpy);
* ``attention_backward(q, k, v, d_out) -> (dq, dk, dv)`` — the backward pass of attention
  by hand (numpy);
* ``weight_grads(x_q, x_kv, W_q, W_k, W_v, d_out) -> (dW_q, dW_k, dW_v)`` — the gradients
  reaching projection weights stored like ``nn.Linear.weight`` (lesson 06, numpy);
* ``mha_by_hand(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
  out_proj_bias, n_heads, batch_first) -> (out, weights)`` — ``nn.MultiheadAttention``
  recomputed from its unpacked parameters (torch, float64; lesson 07).

* ``kv_prediction() -> bool array (8,)`` — lesson 05's "predict, then check": before any
  head is trained, the learner marks eight statements (:data:`STATEMENTS`) true or false.
  Four graded parts (:data:`PARTS`, two statements each, one point each) are judged by the
  grader only (hidden cases, :func:`answers`); the lesson's own cells check the format and
  judge nothing (:func:`recorded`), so answers cannot be found by trial and error. The
  module holds salted digests of the answers, not the answers; the lesson measures every
  statement and asserts that the measurements agree with them (:func:`agrees_with_key`).
"""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import torch
from torch import nn

from attnlib._validate import type_name
from attnlib.backprop import attention_backward as _attention_backward
from attnlib.checks._cases import normal_cases
from attnlib.checks._core import Case, Exercise, Finding, Misconception, part, register
from attnlib.checks.measure import close, fmt, tolerances
from attnlib.tasks.lookup import lookup_batch as _lookup_batch

# ----------------------------------------------------------------------------------------
# lookup_batch(names, numbers, query_pos, n_names, n_numbers) -> (tokens, query, target)
# ----------------------------------------------------------------------------------------


def _lookup_cases() -> list[Case]:
    rng = np.random.default_rng(5005)

    def draw(batch, seq_k, n_names, n_numbers):
        names = np.argsort(rng.random((batch, n_names)), axis=-1)[:, :seq_k]
        numbers = rng.integers(0, n_numbers, (batch, seq_k))
        query_pos = rng.integers(0, seq_k, batch)
        query_pos[0] = seq_k - 1  # not always token 0
        return (names, numbers, query_pos, n_names, n_numbers)

    fixed = (
        np.array([[2, 0, 3], [1, 3, 0]]),  # names
        np.array([[4, 1, 0], [2, 2, 3]]),  # numbers
        np.array([1, 2]),  # query_pos
        4,  # n_names
        5,  # n_numbers
    )
    return [
        Case("batch=2, seq_k=3, 4 names, 5 numbers (fixed)", fixed),
        Case("batch=5, seq_k=4, 7 names, 3 numbers", draw(5, 4, 7, 3)),
        Case("batch=3, seq_k=6, 6 names, 9 numbers", draw(3, 6, 6, 9)),
        Case("batch=4, seq_k=5, 8 names, 8 numbers (n_names == n_numbers)", draw(4, 5, 8, 8)),
    ]


def _lookup_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(5006)
    names = np.argsort(rng.random((6, 10)), axis=-1)[:, :7]
    numbers = rng.integers(0, 4, (6, 7))
    return [
        Case(
            "batch=6, seq_k=7, 10 names, 4 numbers", (names, numbers, rng.integers(0, 7, 6), 10, 4)
        )
    ]


def _lb_variant(*, target="right", query="name", layout="name-first"):
    """One way to build the batch; the defaults give the correct function."""

    def fn(names, numbers, query_pos, n_names, n_numbers):
        names, numbers, query_pos = (np.asarray(a) for a in (names, numbers, query_pos))
        batch, seq_k = names.shape
        rows = np.arange(batch)
        a, b = np.eye(n_names)[names], np.eye(n_numbers)[numbers]
        tokens = np.concatenate([a, b] if layout == "name-first" else [b, a], axis=-1)
        asked = names[rows, query_pos]
        name_part = np.eye(n_names)[asked]
        if query == "name":
            num_part = np.zeros((batch, n_numbers))
        else:  # "leak": the query is the whole asked token, number included
            num_part = np.eye(n_numbers)[numbers[rows, query_pos]]
        parts = [name_part, num_part] if layout == "name-first" else [num_part, name_part]
        q = np.concatenate(parts, axis=-1)[:, None, :]
        if target == "right":
            t = numbers[rows, query_pos]
        elif target == "first-token":
            t = numbers[:, 0]
        elif target == "name":
            t = names[rows, query_pos]
        else:  # "pos": the position, not what is stored there
            t = query_pos.copy()
        return tokens, q, t.astype(np.int64)

    return fn


# A probe where every wrong reading gives other numbers: the asked token is never token 0,
# its number differs from token 0's, and names, numbers and positions differ from each other.
_LB_NAMES = np.array([[4, 0, 2], [1, 3, 0]])
_LB_NUMBERS = np.array([[0, 2, 1], [2, 0, 1]])
_LB_POS = np.array([1, 2])
_LB_N_NAMES, _LB_N_NUMBERS = 5, 3


def _infer_lookup(learner) -> list[Finding]:
    names, numbers, pos = _LB_NAMES, _LB_NUMBERS, _LB_POS
    o = learner(names.copy(), numbers.copy(), pos.copy(), _LB_N_NAMES, _LB_N_NUMBERS)
    if not o.ok or o.arity != 3 or any(o.array(i) is None for i in range(3)):
        return []
    tokens, query, target = (o.array(i) for i in range(3))
    rows = np.arange(2)
    a, b = np.eye(_LB_N_NAMES)[names], np.eye(_LB_N_NUMBERS)[numbers]  # (2, 3, 5), (2, 3, 3)
    layouts = {
        "name-first": np.concatenate([a, b], axis=-1),
        "number-first": np.concatenate([b, a], axis=-1),
    }
    layout = next(
        (k for k, v in layouts.items() if tokens.shape == v.shape and np.array_equal(tokens, v)),
        None,
    )
    found = []
    if layout == "number-first":
        found.append(
            Finding(
                "feature-blocks-swapped",
                "with 5 names and 3 numbers, each token's first 3 columns hold its number.",
            )
        )
    if layout is not None and query.shape == (2, 1, 8):
        q = query[:, 0]
        num_block = q[:, :3] if layout == "number-first" else q[:, 5:]
        if np.array_equal(num_block, np.eye(_LB_N_NUMBERS)[numbers[rows, pos]]):
            found.append(
                Finding("query-leaks-answer", "the number block of your query is the asked number.")
            )
    if target.shape == (2,):
        readings = {
            "target-from-wrong-token": (numbers[:, 0], "the number of token 0"),
            "target-is-name": (names[rows, pos], "the asked token's name"),
            "target-is-position": (pos, "the asked position"),
        }
        for mid, (value, what) in readings.items():
            if np.array_equal(target, value):
                found.append(Finding(mid, f"your targets {target.tolist()} are {what}."))
    return found


register(
    Exercise(
        name="lookup_batch",
        summary="lookup_batch(names, numbers, query_pos, n_names, n_numbers) -> (tokens, "
        "query, target): the lookup task as model inputs",
        reference=_lookup_batch,
        make_cases=_lookup_cases,
        make_hidden_cases=_lookup_hidden_cases,
        forbidden=("attnlib.tasks.lookup.lookup_batch", "attnlib.tasks.lookup.sample_lookup"),
        infer=_infer_lookup,
        build=_lb_variant,
        misconceptions=(
            Misconception(
                "target-from-wrong-token",
                "The target is the number of token 0, not of the token the query asks for. "
                "Take it from the asked position: numbers[np.arange(batch), query_pos].",
                (_lb_variant(target="first-token"),),
                {"target": "first-token"},
            ),
            Misconception(
                "target-is-position",
                "The target is the position of the asked token. The model must return what "
                "is stored there: numbers[np.arange(batch), query_pos].",
                (_lb_variant(target="pos"),),
                {"target": "pos"},
            ),
            Misconception(
                "target-is-name",
                "The target is the asked token's name — which the query already contains. "
                "The answer is the *number* carried by that token.",
                (_lb_variant(target="name"),),
                {"target": "name"},
            ),
            Misconception(
                "query-leaks-answer",
                "The query contains the asked token's number: the answer is in the question, "
                "and the model can skip attention altogether. Leave the number block of the "
                "query at zero.",
                (_lb_variant(query="leak"),),
                {"query": "leak"},
            ),
            Misconception(
                "feature-blocks-swapped",
                "The number block comes first. The layout is [one_hot(name), "
                "one_hot(number)] — names in the first n_names columns — for tokens and query "
                "alike.",
                (_lb_variant(layout="number-first"),),
                {"layout": "number-first"},
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# attention_backward(q, k, v, d_out) -> (dq, dk, dv)
# ----------------------------------------------------------------------------------------


def _backward_cases() -> list[Case]:
    rng = np.random.default_rng(6006)
    n = rng.standard_normal

    def case(label, *shape_q_k_v):
        (sq, sk, dk, dv), batch = shape_q_k_v[0], shape_q_k_v[1:]
        return Case(
            label,
            (n((*batch, sq, dk)), n((*batch, sk, dk)), n((*batch, sk, dv)), n((*batch, sq, dv))),
        )

    return [
        case("seq_q=3, seq_k=5, d_k=4, d_v=2", (3, 5, 4, 2)),
        case(
            "seq_q=seq_k=4, d_k=3, d_v=2 (square scores, so a missing transpose runs)", (4, 4, 3, 2)
        ),
        case("batch=2: seq_q=2, seq_k=6, d_k=5, d_v=3", (2, 6, 5, 3), 2),
        case("seq_q=1, seq_k=3, d_k=8, d_v=8", (1, 3, 8, 8)),
    ]


def _backward_hidden_cases() -> list[Case]:
    label = "batch=2, n_heads=3: seq_q=5, seq_k=5, d_k=2, d_v=4"
    return normal_cases(6007, (label, (2, 3, 5, 2), (2, 3, 5, 2), (2, 3, 5, 4), (2, 3, 5, 4)))


def _bw_variant(*, correction=True, corr_axis=-1, scale=True, dk_t=True, dv_t=True):
    """The backward pass with one step changed; the defaults give the correct function.

    ``correction``: True (the full softmax Jacobian), False (its diagonal only), "col"
    (the row sum Σ A·dA taken over queries — the same as ``corr_axis=-2``) or "unweighted"
    (Σ dA instead of Σ A·dA).
    """

    def fn(q, k, v, d_out):
        T = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
        s = q @ T(k) / math.sqrt(q.shape[-1])
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        A = e / e.sum(axis=-1, keepdims=True)
        dv = (T(A) if dv_t else A) @ d_out
        dA = d_out @ T(v)
        axis = -2 if correction == "col" else corr_axis
        dS = A * (dA - (A * dA).sum(axis=axis, keepdims=True)) if correction else A * dA
        if correction == "unweighted":
            dS = A * (dA - dA.sum(axis=-1, keepdims=True))
        c = 1 / math.sqrt(q.shape[-1]) if scale else 1.0
        dq = dS @ k * c
        dk = (T(dS) if dk_t else dS) @ q * c
        return dq, dk, dv

    return fn


def _fit_scaled(D, J, rel=1e-6, abs_=1e-10):
    """(gamma, ok): D = gamma * J?"""
    den = float((J * J).sum())
    if den <= 1e-300:
        return 0.0, False
    g = float((D * J).sum()) / den
    return g, abs(g) > 1e-9 and close(g * J, D, rel=rel, abs_=abs_)


def _infer_backward(learner) -> list[Finding]:
    """Recover what the learner multiplied by, from dv = ? @ d_out, dq = ? @ k, dk = ? @ q.

    Square scores (seq_q = seq_k = 3) so that missing transposes run; d_k = 5 and d_v = 4
    are wider, so k, q and d_out have full row rank and the factors are unique.
    """
    rng = np.random.default_rng(66)
    seq, d_k, d_v = 3, 5, 4
    q, k = rng.standard_normal((seq, d_k)), rng.standard_normal((seq, d_k))
    v, d_out = rng.standard_normal((seq, d_v)), rng.standard_normal((seq, d_v))
    o = learner(q, k, v, d_out)
    if not o.ok or o.arity != 3 or any(x is None for x in o.parts):
        return []
    dq, dk, dv = o.parts
    if dq.shape != q.shape or dk.shape != k.shape or dv.shape != v.shape:
        return []
    c = 1 / math.sqrt(d_k)
    s = q @ k.T * c
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    A = e / e.sum(axis=-1, keepdims=True)
    found = []
    Y = dv @ np.linalg.pinv(d_out)  # dv = Y @ d_out: Y should be Aᵀ
    rel, abs_ = tolerances(o.eps)
    rel, abs_ = rel * 10, abs_ * 10  # pinv of well-conditioned 3 x 5 factors
    if close(Y, A, rel=rel, abs_=abs_) and not close(Y, A.T, rel=rel, abs_=abs_):
        found.append(
            Finding(
                "dv-not-transposed",
                "with seq_q = seq_k = 3 your dv equals A @ d_out (rows of A, one per query), "
                "not Aᵀ @ d_out.",
            )
        )
    dA = d_out @ v.T
    structures = (
        ("full", A * (dA - (A * dA).sum(axis=-1, keepdims=True))),
        ("diag", A * dA),
        ("col", A * (dA - (A * dA).sum(axis=-2, keepdims=True))),
        ("unweighted", A * (dA - dA.sum(axis=-1, keepdims=True))),
    )
    D = dq @ np.linalg.pinv(k)  # dq = D @ k: D should be dS / √d_k
    X = dk @ np.linalg.pinv(q)  # dk = X @ q: X should be dSᵀ / √d_k
    for name, J in structures:
        g_q, ok_q = _fit_scaled(D, J, rel, abs_)
        g_kt, ok_kt = _fit_scaled(X, J.T, rel, abs_)
        g_kn, ok_kn = _fit_scaled(X, J, rel, abs_)
        if not (ok_q or ok_kt or ok_kn):
            continue
        if name == "diag":
            found.append(
                Finding(
                    "softmax-jacobian-diagonal-only",
                    "your dq and dk are reproduced by dS = A ⊙ dA, without subtracting the "
                    "row's Σ A·dA.",
                )
            )
        elif name == "unweighted":
            found.append(
                Finding(
                    "softmax-jacobian-unweighted",
                    "your dq and dk are reproduced by dS = A ⊙ (dA − Σ_j dA): the row's "
                    "correction is the plain sum of dA, not the weights' average Σ_j A·dA.",
                )
            )
        elif name == "col":
            found.append(
                Finding(
                    "softmax-jacobian-wrong-axis",
                    "your dq and dk are reproduced by a correction Σ A·dA summed over the "
                    "queries (axis -2).",
                )
            )
        if ok_kn and not ok_kt:
            found.append(
                Finding(
                    "dk-not-transposed",
                    "with seq_q = seq_k = 3 your dk equals dS @ q · scale, not dSᵀ @ q · scale.",
                )
            )
        unscaled = [
            grad
            for grad, g, ok in (("dq", g_q, ok_q), ("dk", g_kt, ok_kt), ("dk", g_kn, ok_kn))
            if ok and abs(g - 1.0) < rel
        ]
        if unscaled:
            found.append(
                Finding(
                    "backward-scale-missing",
                    f"your {' and '.join(dict.fromkeys(unscaled))} come out as dS @ k (dSᵀ @ "
                    f"q) times 1, not times 1/√d_k = {fmt(c)} (d_k = {d_k}).",
                )
            )
        break
    return found


register(
    Exercise(
        name="attention_backward",
        summary="attention_backward(q, k, v, d_out) -> (dq, dk, dv): the backward pass of "
        "softmax(q kᵀ/√d_k) v",
        reference=lambda q, k, v, d_out: _attention_backward(q, k, v, d_out),
        make_cases=_backward_cases,
        make_hidden_cases=_backward_hidden_cases,
        rtol=1e-6,
        atol=1e-9,
        forbidden=("attnlib.backprop.attention_backward", "attnlib.backprop.projection_grads"),
        infer=_infer_backward,
        build=_bw_variant,
        misconceptions=(
            Misconception(
                "softmax-jacobian-diagonal-only",
                "dS = A ⊙ dA keeps only the diagonal of the softmax Jacobian. Every weight in "
                "a row depends on every score of that row (they share the denominator): "
                "subtract the row's weighted mean, dS = A ⊙ (dA − Σ_j A·dA).",
                (_bw_variant(correction=False),),
                {"correction": False},
            ),
            Misconception(
                "softmax-jacobian-wrong-axis",
                "The correction Σ A·dA is summed over queries (axis=-2). The softmax runs "
                "over the keys of one query row, so sum over axis=-1 with keepdims=True.",
                (_bw_variant(corr_axis=-2),),
                {"correction": "col"},
            ),
            Misconception(
                "softmax-jacobian-unweighted",
                "The correction subtracts Σ_j dA_ij. It is the weighted average Σ_j A_ij "
                "dA_ij: dS = A ⊙ (dA − (A * dA).sum(axis=-1, keepdims=True)).",
                (_bw_variant(correction="unweighted"),),
                {"correction": "unweighted"},
            ),
            Misconception(
                "backward-scale-missing",
                "dq and dk are missing the factor 1/√d_k. The forward pass multiplied the "
                "scores by it, so the chain rule brings it back in both gradients.",
                (_bw_variant(scale=False),),
                {"scale": False},
            ),
            Misconception(
                "dk-not-transposed",
                "dk = dS @ q pairs queries with keys the wrong way round; it only runs when "
                "seq_q == seq_k. Key j collects from every query i that scored it: "
                "dk = dSᵀ @ q · scale, shape (..., seq_k, d_k).",
                (_bw_variant(dk_t=False),),
                {"dk_t": False},
            ),
            Misconception(
                "dv-not-transposed",
                "dv = A @ d_out; it only runs when seq_q == seq_k. Value j receives from "
                "every query in proportion to its weight A[i, j]: dv = Aᵀ @ d_out.",
                (_bw_variant(dv_t=False),),
                {"dv_t": False},
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# weight_grads(x_q, x_kv, W_q, W_k, W_v, d_out) -> (dW_q, dW_k, dW_v), nn.Linear convention
# ----------------------------------------------------------------------------------------


def _wg_reference(x_q, x_kv, W_q, W_k, W_v, d_out):
    """The oracle: torch autograd in float64 (no attnlib code on the way)."""

    def t(a):
        return torch.as_tensor(np.asarray(a), dtype=torch.float64)

    Ws = [t(W).requires_grad_() for W in (W_q, W_k, W_v)]
    q, k, v = t(x_q) @ Ws[0].T, t(x_kv) @ Ws[1].T, t(x_kv) @ Ws[2].T
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    (w @ v).backward(t(d_out))
    return tuple(W.grad.numpy() for W in Ws)


def _wg_cases() -> list[Case]:
    # (batch, seq_q, seq_k, d_model, d_k, d_v): every size different in the first case
    return normal_cases(
        6016,
        ("cross-attention: batch=2, seq_q=3, seq_k=5, d_model=6, d_k=4, d_v=2",
         (2, 3, 6), (2, 5, 6), (4, 6), (4, 6), (2, 6), (2, 3, 2)),
        ("batch=1, seq_q=seq_k=4, d_model=5, d_k=3, d_v=3",
         (1, 4, 5), (1, 4, 5), (3, 5), (3, 5), (3, 5), (1, 4, 3)),
        ("batch=3, seq_q=1, seq_k=4, d_model=4, d_k=2, d_v=5",
         (3, 1, 4), (3, 4, 4), (2, 4), (2, 4), (5, 4), (3, 1, 5)),
    )  # fmt: skip


def _wg_hidden_cases() -> list[Case]:
    return normal_cases(
        6017,
        ("hidden: batch=4, seq_q=6, seq_k=2, d_model=3, d_k=5, d_v=4",
         (4, 6, 3), (4, 2, 3), (5, 3), (5, 3), (4, 3), (4, 6, 4)),
        ("hidden: batch=2, seq_q=seq_k=3, d_model=7, d_k=2, d_v=1",
         (2, 3, 7), (2, 3, 7), (2, 7), (2, 7), (1, 7), (2, 3, 1)),
    )  # fmt: skip


def _wg_build(*, convention="linear", q_input="q", kv_input="kv", batch="sum", scale=True):
    """weight_grads with the given choices; the defaults give the correct function.

    ``convention="math"`` returns X^T dK (d_model, d_k) instead of dKᵀ X; ``q_input="kv"``
    takes dW_q from x_kv, ``kv_input="q"`` dW_k and dW_v from x_q; ``batch`` "sum" (right),
    "mean", "first" or "last" (one batch element only: indexed [0], or a loop that overwrites
    instead of adding); ``scale=False`` forgets 1/√d_k in dq and dk.
    """

    def fn(x_q, x_kv, W_q, W_k, W_v, d_out):
        q, k, v = x_q @ W_q.T, x_kv @ W_k.T, x_kv @ W_v.T  # (batch, seq, d_k or d_v)
        dq, dk, dv = _bw_variant(scale=scale)(q, k, v, d_out)

        def grad(x, g):  # (batch, seq, d_model), (batch, seq, n) -> (n, d_model)
            per = np.swapaxes(g, -1, -2) @ x  # (batch, n, d_model)
            r = {"sum": per.sum(0), "mean": per.mean(0), "first": per[0], "last": per[-1]}[batch]
            return r if convention == "linear" else r.T

        x_for_q = x_q if q_input == "q" else x_kv
        x_for_kv = x_kv if kv_input == "kv" else x_q
        return grad(x_for_q, dq), grad(x_for_kv, dk), grad(x_for_kv, dv)

    return fn


_WG_CHOICES = {
    "convention": ("linear", "math"),
    "q_input": ("q", "kv"),
    "kv_input": ("kv", "q"),
    "batch": ("sum", "mean", "first", "last"),
    "scale": (True, False),
}


def _infer_weight_grads(learner) -> list[Finding]:
    """Which choices reproduce the learner's three gradients, on a probe where they differ.

    seq_q = seq_k (so that gradients taken from the wrong input still run), batch = 2 (sum,
    mean and first element differ), d_model = 5 ≠ d_k = 3 ≠ d_v = 2 (a transposed gradient
    has another shape). Every combination of the choices is tried; exactly one must match,
    or nothing is measured.
    """
    rng = np.random.default_rng(616)
    batch, seq, d_model, d_k, d_v = 2, 4, 5, 3, 2
    args = (
        rng.standard_normal((batch, seq, d_model)), rng.standard_normal((batch, seq, d_model)),
        rng.standard_normal((d_k, d_model)), rng.standard_normal((d_k, d_model)),
        rng.standard_normal((d_v, d_model)), rng.standard_normal((batch, seq, d_v)),
    )  # fmt: skip
    o = learner(*args)
    if not o.ok or o.arity != 3 or any(p is None for p in o.parts):
        return []
    rel, abs_ = tolerances(o.eps)
    matches = []
    keys = list(_WG_CHOICES)
    for combo in itertools.product(*_WG_CHOICES.values()):
        choice = dict(zip(keys, combo, strict=True))
        want = _wg_build(**choice)(*args)
        if all(close(g, w, rel, abs_) for g, w in zip(o.parts, want, strict=True)):
            matches.append(choice)
    if len(matches) != 1:
        return []
    c = matches[0]
    found = []
    if c["q_input"] == "kv":
        found.append(
            Finding(
                "query-grad-from-kv-input",
                "with seq_q = seq_k = 4 your dW_q equals dqᵀ @ x_kv: the chain rule went "
                "back through the key/value input, not through x_q, which made the queries.",
            )
        )
    if c["kv_input"] == "q":
        found.append(
            Finding(
                "kv-grads-from-query-input",
                "with seq_q = seq_k = 4 your dW_k and dW_v equal dkᵀ @ x_q and dvᵀ @ x_q: "
                "the chain rule went back through x_q, but keys and values were made from x_kv.",
            )
        )
    if c["convention"] == "math":
        found.append(
            Finding(
                "weight-grad-transposed",
                f"your dW_q has shape {o.parts[0].shape} = (d_model, d_k) and equals the "
                f"transpose of the right gradient; W_q is stored as (d_k, d_model) = "
                f"{(d_k, d_model)}.",
            )
        )
    if c["batch"] == "mean":
        found.append(
            Finding(
                "batch-mean",
                f"with a batch of {batch} every gradient is 1/{batch} of the right one: the "
                "contributions of the sentences were averaged, not added.",
            )
        )
    elif c["batch"] in ("first", "last"):
        which = 0 if c["batch"] == "first" else batch - 1
        found.append(
            Finding(
                "batch-one-element",
                f"with a batch of {batch} your gradients equal those of batch element {which} "
                "alone: the other element contributed nothing.",
            )
        )
    if not c["scale"]:
        found.append(
            Finding(
                "backward-scale-missing",
                f"your dW_q and dW_k are √d_k = {fmt(math.sqrt(d_k))} times the right ones "
                "(d_k = 3), dW_v is right: dq and dk lack the factor 1/√d_k.",
            )
        )
    return found


register(
    Exercise(
        name="weight_grads",
        summary="weight_grads(x_q, x_kv, W_q, W_k, W_v, d_out) -> (dW_q, dW_k, dW_v): the "
        "gradients reaching nn.Linear-style projection weights",
        reference=_wg_reference,
        make_cases=_wg_cases,
        make_hidden_cases=_wg_hidden_cases,
        rtol=1e-6,
        atol=1e-9,
        forbidden=("attnlib.backprop.projection_grads",),  # attention_backward is fair game (6.1)
        infer=_infer_weight_grads,
        build=_wg_build,
        misconceptions=(
            Misconception(
                "query-grad-from-kv-input",
                "dW_q is taken from x_kv. The queries were made from x_q (q = x_q @ W_qᵀ), so "
                "the chain rule goes back through x_q: dW_q = Σ_batch dqᵀ @ x_q. In "
                "cross-attention the two inputs differ (and seq_q ≠ seq_k).",
                (_wg_build(q_input="kv"),),
                {"q_input": "kv"},
            ),
            Misconception(
                "kv-grads-from-query-input",
                "dW_k and dW_v are taken from x_q. Keys and values were made from x_kv, so "
                "dW_k = Σ_batch dkᵀ @ x_kv and dW_v = Σ_batch dvᵀ @ x_kv.",
                (_wg_build(kv_input="q"),),
                {"kv_input": "q"},
            ),
            Misconception(
                "weight-grad-transposed",
                "The gradients have the math-convention shape (d_model, d_k). The weights "
                "are stored like nn.Linear's, (out_features, in_features), with k = x @ W_kᵀ: "
                "the gradient has the weight's shape, dW_k = dkᵀ @ x (summed over the batch).",
                (_wg_build(convention="math"),),
                {"convention": "math"},
            ),
            Misconception(
                "batch-mean",
                "The gradients are averaged over the batch. The loss adds the contributions "
                "of all sentences, and one weight matrix serves them all: sum over the batch.",
                (_wg_build(batch="mean"),),
                {"batch": "mean"},
            ),
            Misconception(
                "batch-one-element",
                "Only one batch element contributes (indexing [0], or a loop that overwrites "
                "dW_k instead of adding to it). Every sentence of the batch uses the same "
                "weights, so each adds its own dkᵀ @ x to dW_k: sum over the whole batch.",
                (_wg_build(batch="first"), _wg_build(batch="last")),
                {"batch": "last"},
            ),
            Misconception(
                "backward-scale-missing",
                "dq and dk are missing the factor 1/√d_k of the forward pass, so dW_q and dW_k "
                "are √d_k too large (dW_v is right). Your attention_backward from Exercise 6.1 "
                "has it.",
                (_wg_build(scale=False),),
                {"scale": False},
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# mha_by_hand(...) -> (out, weights averaged over heads), as nn.MultiheadAttention computes
# ----------------------------------------------------------------------------------------


def _mha_reference(
    query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
    n_heads, batch_first,
):  # fmt: skip
    d_model = query.shape[-1]
    mha = nn.MultiheadAttention(
        d_model, n_heads, batch_first=batch_first, dtype=torch.float64
    )  # the oracle: torch's own module
    with torch.no_grad():
        mha.in_proj_weight.copy_(in_proj_weight)
        mha.in_proj_bias.copy_(in_proj_bias)
        mha.out_proj.weight.copy_(out_proj_weight)
        mha.out_proj.bias.copy_(out_proj_bias)
        mha.eval()
        return mha(query, key, value, need_weights=True, average_attn_weights=True)


def _mha_cases() -> list[Case]:
    g = torch.Generator().manual_seed(6060)

    def case(label, batch, seq_q, seq_k, d_model, n_heads, batch_first, self_attn=False):
        def r(*shape, s=1.0):
            return torch.randn(*shape, generator=g, dtype=torch.float64) * s

        def seq_shape(seq):
            return (batch, seq, d_model) if batch_first else (seq, batch, d_model)

        query = r(*seq_shape(seq_q))
        key = query.clone() if self_attn else r(*seq_shape(seq_k))
        value = query.clone() if self_attn else r(*seq_shape(seq_k))
        w = d_model**-0.5
        params = (r(3 * d_model, d_model, s=w), r(3 * d_model, s=0.5), r(d_model, d_model, s=w),
                  r(d_model, s=0.5))  # fmt: skip
        return Case(label, (query, key, value, *params, n_heads, batch_first))

    return [
        case("batch_first, batch=2, seq_q=3, seq_k=5, d_model=6, 2 heads", 2, 3, 5, 6, 2, True),
        case(
            "seq first (batch_first=False): seq=4, batch=3, d_model=8, 4 heads",
            3,
            4,
            4,
            8,
            4,
            False,
            self_attn=True,
        ),  # fmt: skip
        case(
            "batch_first=False, batch=2, seq_q=3, seq_k=5, d_model=6, 3 heads", 2, 3, 5, 6, 3, False
        ),  # fmt: skip
    ]


def _mha_hidden_cases() -> list[Case]:
    g = torch.Generator().manual_seed(6061)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return [
        Case(
            "batch_first, batch=1, seq_q=5, seq_k=2, d_model=4, 2 heads",
            (r(1, 5, 4), r(1, 2, 4), r(1, 2, 4), r(12, 4), r(12), r(4, 4), r(4), 2, True),
        )
    ]


def _mha_variant(
    *, order="qkv", split="blocks", out_proj=True, batch_first_respected=True,
    scale_by="head", heads="heads-then-dim", average=True, transpose_in=True,
    in_bias=True, out_transposed=True, merge="transpose",
):  # fmt: skip
    """``nn.MultiheadAttention`` by hand with one step changed; defaults give the right one.

    ``in_bias=False`` leaves out in_proj_bias; ``out_transposed=False`` applies out_proj as
    ``merged @ out_proj_weight``; ``merge="reshape"`` merges the heads by a plain reshape
    of (batch, n_heads, seq_q, d_head), without moving the head axis back first.
    """

    def fn(query, key, value, W_in, b_in, W_out, b_out, n_heads, batch_first):
        d = query.shape[-1]
        if split == "blocks":
            Ws, bs = list(W_in.reshape(3, d, d)), list(b_in.reshape(3, d))
        else:  # "interleaved": reshape (d, 3, d) takes every third row
            Ws, bs = list(W_in.reshape(d, 3, d).transpose(0, 1)), list(b_in.reshape(d, 3).T)
        idx = tuple("qkv".index(c) for c in order)  # order names the blocks' roles
        W_q, W_k, W_v = (Ws[i] for i in idx)
        b_q, b_k, b_v = (bs[i] for i in idx)
        if not batch_first and batch_first_respected:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        batch, seq_q, _ = query.shape
        d_head = d // n_heads

        def split_heads(x):
            if heads == "heads-then-dim":
                return x.reshape(batch, x.shape[1], n_heads, d_head).transpose(1, 2)
            return x.reshape(batch, x.shape[1], d_head, n_heads).permute(0, 3, 1, 2)

        if not transpose_in:  # x @ W as stored: rows of W are outputs, so this mixes them
            W_q, W_k, W_v = W_q.T, W_k.T, W_v.T
        if not in_bias:
            b_q, b_k, b_v = (torch.zeros_like(b) for b in (b_q, b_k, b_v))
        q = split_heads(query @ W_q.T + b_q)
        k = split_heads(key @ W_k.T + b_k)
        v = split_heads(value @ W_v.T + b_v)
        s = q @ k.transpose(-1, -2) / math.sqrt(d_head if scale_by == "head" else d)
        A = torch.softmax(s, dim=-1)  # (batch, n_heads, seq_q, seq_k)
        o = A @ v  # (batch, n_heads, seq_q, d_head)
        if merge == "reshape":
            o = o.reshape(batch, seq_q, d)  # head axis not moved back: positions mixed
        elif heads == "heads-then-dim":
            o = o.transpose(1, 2).reshape(batch, seq_q, d)
        else:
            o = o.permute(0, 2, 3, 1).reshape(batch, seq_q, d)
        if out_proj:
            o = o @ (W_out.T if out_transposed else W_out) + b_out
        if not batch_first and batch_first_respected:
            o = o.transpose(0, 1)
        return o, (A.mean(dim=1) if average else A)

    return fn


def _mha_probe(
    batch_first: bool,
    seed: int,
    out_weight: float | None = 1.0,
    out_bias: float = 0.0,
    sizes=(2, 3, 4),
):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    (batch, seq_q, seq_k), d_model, n_heads = sizes, 6, 2
    shape = (
        (lambda seq: (batch, seq, d_model)) if batch_first else (lambda seq: (seq, batch, d_model))
    )
    query, key, value = r(*shape(seq_q)), r(*shape(seq_k)), r(*shape(seq_k))
    w_in, b_in = r(3 * d_model, d_model) * d_model**-0.5, r(3 * d_model) * 0.5
    if out_weight is None:  # a random, not symmetric out_proj (drawn after the rest)
        w_out, b_out = r(d_model, d_model) * d_model**-0.5, r(d_model) * 0.5
    else:
        w_out = torch.eye(d_model, dtype=torch.float64) * out_weight
        b_out = torch.full((d_model,), out_bias, dtype=torch.float64)
    return [query, key, value, w_in, b_in, w_out, b_out, n_heads, batch_first]


def _mha_parts(o):
    ok = o.ok and o.arity == 2 and all(x is not None for x in o.parts)
    return o.parts if ok else None


def _mha_choices(order, split, heads, scale_by, transpose_in, d_model, n_heads):
    """The findings for the in-projection and head choices that reproduce a result."""
    found = []
    if order != "qkv":
        found.append(
            Finding(
                "in-proj-order",
                f"your result is reproduced by taking the three blocks of in_proj_weight as "
                f"({', '.join(order.upper())}) instead of (Q, K, V).",
            )
        )
    if split == "interleaved":
        found.append(
            Finding(
                "in-proj-split-wrong-axis",
                "your result is reproduced by taking every third row of in_proj_weight for "
                "each projection.",
            )
        )
    if not transpose_in:
        found.append(
            Finding(
                "in-proj-not-transposed",
                "your result is reproduced by x @ W_q (and W_k, W_v) as stored, not x @ W_qᵀ.",
            )
        )
    if heads == "dim-then-heads":
        found.append(
            Finding(
                "heads-split-wrong-order",
                "your result is reproduced by splitting d_model as (d_head, n_heads): each "
                "head gets every n_heads-th feature.",
            )
        )
    if scale_by == "model":
        found.append(
            Finding(
                "scale-by-d-model",
                f"your result is reproduced by dividing the scores by √d_model = √{d_model}, "
                f"not √d_head = √{d_model // n_heads}.",
            )
        )
    return found


def _infer_mha(learner) -> list[Finding]:
    args = _mha_probe(True, 1)
    first = learner(*args)
    got = _mha_parts(first)
    if got is None:
        return []
    rel, abs_ = tolerances(first.eps)
    out, w = got
    found = []
    batch, seq_q, seq_k, d_model, n_heads = 2, 3, 4, 6, 2
    if out.shape != (batch, seq_q, d_model):
        return []
    if w.shape == (batch, n_heads, seq_q, seq_k):
        found.append(
            Finding(
                "weights-not-averaged",
                f"the weights come back with shape {w.shape} = (batch, n_heads, seq_q, seq_k).",
            )
        )
    elif w.shape != (batch, seq_q, seq_k):
        return []
    # out_proj: the same inputs with out_proj_weight = 2·I and out_proj_bias = 1.
    twice = _mha_parts(learner(*_mha_probe(True, 1, out_weight=2.0, out_bias=1.0)))
    other = _mha_parts(learner(*_mha_probe(True, 3)))  # other inputs: out must depend on them
    alive = other is not None and other[0].shape == out.shape and not close(other[0], out)
    if alive and twice is not None and twice[0].shape == out.shape:
        if close(twice[0], out, rel=1e-9, abs_=1e-12):
            found.append(
                Finding(
                    "out-proj-missing",
                    "changing out_proj_weight from I to 2·I and out_proj_bias from 0 to 1 "
                    "leaves your output unchanged.",
                )
            )
    # The in-projection, then the heads: which choices reproduce out (out_proj = I here)
    # and w. One head first (the head split and √d_head vs √d_model do not matter there),
    # so the two grids are searched one after the other, not as one product.
    average = w.ndim == 3
    one = args[:7] + [1, True]
    got1 = _mha_parts(learner(*one))

    def same(choices, probe, target):
        with torch.no_grad():
            c_out, c_w = _mha_variant(out_proj=False, average=average, **choices)(*probe)
        return close(c_out.numpy(), target[0], rel, abs_) and (
            c_w.shape == target[1].shape and close(c_w.numpy(), target[1], rel, abs_)
        )

    layouts = [
        {"order": order, "split": split, "transpose_in": t, "in_bias": bias}
        for bias in (True, False)
        for t in (True, False)
        for order in ("qkv", "kqv", "qvk", "vkq", "kvq", "vqk")
        for split in ("blocks", "interleaved")
    ]
    layout = None
    if got1 is not None:
        layout = next((c for c in layouts if same(c, one, got1)), None)
    chosen = None
    if layout is not None:
        grid = [
            {"heads": heads, "scale_by": scale_by, "merge": merge}
            for merge in ("transpose", "reshape")
            for heads in ("heads-then-dim", "dim-then-heads")
            for scale_by in ("head", "model")
        ]
        chosen = next((c for c in grid if same({**layout, **c}, args, (out, w))), None)
    if chosen is not None:
        found += _mha_choices(
            layout["order"], layout["split"], chosen["heads"], chosen["scale_by"],
            layout["transpose_in"], d_model, n_heads,
        )  # fmt: skip
        if not layout["in_bias"]:
            found.append(
                Finding(
                    "in-proj-bias-missing",
                    "your result is reproduced by projections without in_proj_bias "
                    "(q = x @ W_qᵀ, with no + b_q).",
                )
            )
        if chosen["merge"] == "reshape":
            found.append(
                Finding(
                    "merge-without-transpose",
                    "your result is reproduced by merging the heads with a plain reshape of "
                    "(batch, n_heads, seq_q, d_head) to (batch, seq_q, d_model), without "
                    "moving the head axis back first.",
                )
            )
        # out_proj with a weight that is not symmetric: applied transposed or as stored?
        probe = _mha_probe(True, 1, out_weight=None)
        got_t = _mha_parts(learner(*probe))
        if got_t is not None and got_t[0].shape == out.shape:
            with torch.no_grad():
                merged, _ = _mha_variant(out_proj=False, **layout, **chosen)(*probe)
                W_out, b_out = probe[5], probe[6]
                as_stored = (merged @ W_out + b_out).numpy()
                right = (merged @ W_out.T + b_out).numpy()
            if close(got_t[0], as_stored, rel, abs_) and not close(got_t[0], right, rel, abs_):
                found.append(
                    Finding(
                        "out-proj-not-transposed",
                        "with an out_proj_weight that is not symmetric your output equals "
                        "merged @ out_proj_weight + out_proj_bias, not merged @ "
                        "out_proj_weightᵀ + out_proj_bias.",
                    )
                )
    # batch_first=False: does batch element 1 leak into batch element 0? (seq_q = seq_k, so
    # that attention along the wrong axis runs)
    a = _mha_probe(False, 2, sizes=(3, 4, 4))
    b = [x.clone() if isinstance(x, torch.Tensor) else x for x in a]
    for t in b[:3]:
        t[:, 1] += 1.0
    oa, ob = _mha_parts(learner(*a)), _mha_parts(learner(*b))
    if oa is not None and ob is not None and oa[0].shape == ob[0].shape == (4, 3, d_model):
        if not close(oa[0][:, 0], ob[0][:, 0], rel=1e-9, abs_=1e-12):
            found.append(
                Finding(
                    "batch-first-ignored",
                    "with batch_first=False, changing batch element 1 changes the output of "
                    "batch element 0: attention ran along the batch axis.",
                )
            )
    return found


register(
    Exercise(
        name="mha_by_hand",
        summary="mha_by_hand(query, key, value, in_proj_weight, in_proj_bias, "
        "out_proj_weight, out_proj_bias, n_heads, batch_first) -> (out, weights): "
        "nn.MultiheadAttention from its parameters",
        reference=_mha_reference,
        make_cases=_mha_cases,
        make_hidden_cases=_mha_hidden_cases,
        rtol=1e-7,
        atol=1e-9,
        forbidden=(
            "attnlib.torch_mha.mha_forward",
            "attnlib.torch_mha.unpack_mha",
            "torch.nn.functional.multi_head_attention_forward",
        ),
        infer=_infer_mha,
        build=_mha_variant,
        # without out_proj there is no out_proj_weight whose transposition could be seen
        exclusive=(frozenset({"out-proj-missing", "out-proj-not-transposed"}),),
        misconceptions=(
            Misconception(
                "in-proj-order",
                "in_proj_weight stacks the three matrices in the order Q, K, V (rows 0..d-1 "
                "make queries, d..2d-1 keys, 2d..3d-1 values); here two of them are swapped.",
                (_mha_variant(order="kqv"),),
                {"order": "kqv"},
            ),
            Misconception(
                "in-proj-split-wrong-axis",
                "in_proj_weight (3·d_model, d_model) holds three stacked blocks of rows. "
                "reshape(d_model, 3, d_model) interleaves them (every third row); split along "
                "dim 0 into three blocks: reshape(3, d_model, d_model) or .chunk(3, dim=0).",
                (_mha_variant(split="interleaved"),),
                {"split": "interleaved"},
            ),
            Misconception(
                "in-proj-not-transposed",
                "Each block of in_proj_weight is stored like nn.Linear's weight, (out_features, "
                "in_features): a projection is x @ W_qᵀ + b_q, not x @ W_q.",
                (_mha_variant(transpose_in=False),),
                {"transpose_in": False},
            ),
            Misconception(
                "out-proj-missing",
                "After merging the heads the module applies out_proj: out = merged @ "
                "out_proj_weightᵀ + out_proj_bias.",
                (_mha_variant(out_proj=False),),
                {"out_proj": False},
            ),
            Misconception(
                "batch-first-ignored",
                "With batch_first=False the inputs are (seq, batch, d_model): attention then "
                "mixes the wrong axis. Transpose to (batch, seq, d_model) first and back at "
                "the end.",
                (_mha_variant(batch_first_respected=False),),
                {"batch_first_respected": False},
            ),
            Misconception(
                "scale-by-d-model",
                "Scores are divided by √d_model. Each head compares vectors of width d_head = "
                "d_model / n_heads, so divide by √d_head.",
                (_mha_variant(scale_by="model"),),
                {"scale_by": "model"},
            ),
            Misconception(
                "heads-split-wrong-order",
                "The heads are split as (..., d_head, n_heads). The module reshapes to "
                "(batch, seq, n_heads, d_head): each head owns a contiguous block of d_head "
                "features.",
                (_mha_variant(heads="dim-then-heads"),),
                {"heads": "dim-then-heads"},
            ),
            Misconception(
                "in-proj-bias-missing",
                "in_proj_bias is left out. Each projection is x @ W_qᵀ + b_q, with b_q, b_k, "
                "b_v the three blocks of in_proj_bias (torch starts them at zero, but a "
                "trained or loaded module has other values).",
                (_mha_variant(in_bias=False),),
                {"in_bias": False},
            ),
            Misconception(
                "merge-without-transpose",
                "The heads are merged by a plain reshape of (batch, n_heads, seq_q, d_head): "
                "that reads head 0's positions one after another, so a row mixes positions. "
                "Move the head axis back first: o.transpose(1, 2).reshape(batch, seq_q, "
                "d_model) — your merge_heads from Exercise 7.2.",
                (_mha_variant(merge="reshape"),),
                {"merge": "reshape"},
            ),
            Misconception(
                "out-proj-not-transposed",
                "out_proj is applied as merged @ out_proj.weight. Like every nn.Linear it "
                "stores (out_features, in_features): out = merged @ out_proj_weightᵀ + "
                "out_proj_bias.",
                (_mha_variant(out_transposed=False),),
                {"out_transposed": False},
            ),
            Misconception(
                "weights-not-averaged",
                "The weights come back per head, (batch, n_heads, seq_q, seq_k). "
                "nn.MultiheadAttention returns them averaged over heads by default: "
                "(batch, seq_q, seq_k).",
                (_mha_variant(average=False),),
                {"average": False},
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# kv_prediction: lesson 05's "predict, then check" — eight statements in four graded parts
# ----------------------------------------------------------------------------------------

#: The statements the learner marks true or false before any head is trained (lesson 05
#: lists them in this order). Each can be reasoned out from how the three heads are wired;
#: each is measured in the lesson (section 7), which asserts that the measurement agrees
#: with the answer key (:func:`agrees_with_key`).
STATEMENTS = (
    "1. the uniform control does better than chance (1/8)",
    "2. given enough training, the uniform control could reach 95 % accuracy",
    "3. the separate head (d_head = 3) reaches at least 95 % accuracy within 150 steps",
    "4. changing the numbers of the tokens the query does not ask about changes more than "
    "5 % of the separate head's answers",
    "5. the tied head (d_head = 3) reaches at least 95 % accuracy within 150 steps",
    "6. changing the numbers of the tokens the query does not ask about changes more than "
    "5 % of the tied head's answers",
    "7. in the tied head, the score a query gives a token depends on the token's number, "
    "not only on its name",
    "8. no tied head can reach 95 % accuracy, however wide it is",
)

#: The graded parts of the exercise: exercise name -> the statements it checks.
PARTS = {
    "kv_prediction_control": (1, 2),
    "kv_prediction_separate": (3, 4),
    "kv_prediction_tied": (5, 6),
    "kv_prediction_width": (7, 8),
}

# The answer key holds no answers, only salted SHA-256 digests of them: statement s answered
# a is the digest of "<salt>/<s>/<true|false>" (first 16 bytes). A learner's kernel loads
# this module, so it must not be able to import the answers; a grade compares digests.
# (Two answers per statement: anyone who reads this file can still try both. What stops
# trial and error is that nothing in the lesson judges the answers before hand-in: the
# visible cases check only the format, the judged cases are hidden — see `answers`.)
_SALT = "key-vectors/05/kv_prediction/v1"
_KEY = {
    1: "961127d5e816ca00b1e7a4a76bd7cd01",
    2: "7ed5d2ae62ff4575a302d58ce6184b52",
    3: "a9c518a18abea877498e858f42b8dac3",
    4: "a163b0999df7ea3e875d91f732dbe51c",
    5: "333498da17a4c5be6204105397003e39",
    6: "02ea470cfa9ef7f7f8cdfe46d686f451",
    7: "1a9cd77817b1b07f7b2d6d0b7766a876",
    8: "0842d40daf7e571b94404e6eb26e6951",
}


def _digest(statement: int, answer: bool) -> np.ndarray:
    """The salted digest of one answer: uint8 array of shape (16,)."""
    text = f"{_SALT}/{statement}/{'true' if answer else 'false'}"
    return np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], dtype=np.uint8).copy()


def _keyed(statement: int) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(_KEY[statement]), dtype=np.uint8).copy()


def agrees_with_key(measured) -> bool:
    """Do eight booleans (statement 1 first) agree with the answer key, statement by statement?"""
    values = [bool(m) for m in measured]
    if len(values) != len(STATEMENTS):
        raise ValueError(f"agrees_with_key: expected {len(STATEMENTS)} answers, got {len(values)}")
    return all(np.array_equal(_digest(s, a), _keyed(s)) for s, a in enumerate(values, start=1))


# statement -> (misconception id, explanation). An explanation is read after grading, but it
# ships in this module, so it points at the measurement without saying which answer is right.
_WHY = {
    1: (
        "control-at-chance",
        "Statement 1: compare the control's accuracy in section 3 with chance (1/8). The "
        "control cannot select, but ask what its read-out can still learn from the average "
        "of the six values.",
    ),
    2: (
        "control-can-select",
        "Statement 2: section 3 asks the control about another token of the same books. "
        "What does a head whose answer does not depend on the query get right at best?",
    ),
    3: (
        "separate-fails",
        "Statement 3: see the separate head's accuracy in section 3, and count how many "
        "dimensions its key and its value each need for names and for numbers.",
    ),
    4: (
        "separate-reads-whole-book",
        "Statement 4: section 4 changes the other tokens' numbers and counts the separate "
        "head's answers that change.",
    ),
    5: (
        "tied-only-slower",
        "Statement 5: see the tied head's accuracy in section 3, and section 5 on what one "
        "vector of three numbers has to do when it is key and value at once.",
    ),
    6: (
        "tied-selects-anyway",
        "Statement 6: section 4 changes the other tokens' numbers and counts the tied head's "
        "answers that change.",
    ),
    7: (
        "tied-key-ignores-content",
        "Statement 7: with k = v, what must the key carry so that the value can do its job? "
        "Section 6 measures how much of the tied head's scores the number explains.",
    ),
    8: (
        "tying-is-impossible",
        "Statement 8: section 5 trains tied heads from 2 to 12 wide; see which widths reach "
        "95 % within 400 steps.",
    ),
}


def _prediction(prediction) -> np.ndarray:
    """The learner's eight answers, or an error that says what came back instead."""
    got = prediction()
    if type(got) is not np.ndarray or got.dtype != np.bool_:
        raise TypeError(
            "kv_prediction() must return a numpy array of booleans, e.g. "
            f"np.array([True, False, ...]); got {type_name(got)}"
        )
    if got.shape != (len(STATEMENTS),):
        raise ValueError(
            f"kv_prediction() must return {len(STATEMENTS)} answers, shape "
            f"({len(STATEMENTS)},); got shape {got.shape}"
        )
    return got


def answers(prediction):
    """``answer(kind, statement)`` from a learner's ``kv_prediction``: what the checks call.

    ``answer("format", s)`` is ``array([True])`` when ``prediction()`` is a bool array of
    shape (8,) (and raises a clear error otherwise): the visible cases check only that, so
    a check in the lesson says nothing about whether an answer is right.
    ``answer("judge", s)`` is the salted digest of the answer to statement ``s``: only the
    hidden cases (run by the grader) compare it with the key.
    """

    def answer(kind, statement):
        got = _prediction(prediction)
        if kind == "format":
            return np.array([True])
        return _digest(statement, bool(got[statement - 1]))

    return answer


def recorded(part: str, prediction) -> None:
    """The visible half of a graded part: check the format, echo the answers, judge nothing."""
    statements = PARTS[part] if part in PARTS else tuple(range(1, len(STATEMENTS) + 1))
    try:
        got = _prediction(prediction)
    except NotImplementedError:
        raise AssertionError(
            f"✘ {part}: not written yet — replace `raise NotImplementedError()` in the cell "
            f"above with your answers, run that cell, then this one."
        ) from None
    except (TypeError, ValueError) as err:
        raise AssertionError(f"✘ {part}: {err}") from None
    except Exception as err:  # noqa: BLE001 - the learner's function may raise anything
        msg = f"✘ {part}: kv_prediction() raised {type_name(err)}: {err}"
        raise AssertionError(msg) from None
    said = ", ".join(f"{s}: {'true' if got[s - 1] else 'false'}" for s in statements)
    print(
        f"Recorded your answers to statements {said}. They are graded when you hand the "
        "notebook in; this cell does not say whether they are right (section 7 measures them)."
    )


def _reference(kind, statement):
    return np.array([True]) if kind == "format" else _keyed(statement)


def _answer_with(**flip):
    """The key's ``answer(kind, statement)`` with the statements in ``flip`` answered wrongly."""
    wrong = {int(k.split("_")[1]) for k, v in flip.items() if v}

    def answer(kind, statement):
        if kind == "format" or statement not in wrong:
            return _reference(kind, statement)
        other = [_digest(statement, a) for a in (True, False)]
        return next(d for d in other if not np.array_equal(d, _keyed(statement)))

    return answer


def _prediction_cases(statements):
    return lambda: [
        Case(f"the format of your answer to statement {s}", ("format", s)) for s in statements
    ]


def _prediction_hidden_cases(statements):
    return lambda: [Case(f"statement {s}", ("judge", s)) for s in statements]


# The visible cases check the format only; the hidden cases judge the answers. They do not
# change with the grader's seed: a statement is true or false once and for all. The whole
# exercise (all eight) is graded in four parts of two statements, one locked cell each.
_ALL = tuple(range(1, len(STATEMENTS) + 1))
_WHOLE = register(
    Exercise(
        name="kv_prediction",
        summary="answers(kv_prediction): statements 1-8 of lesson 05, each true or false",
        reference=_reference,
        make_cases=_prediction_cases(_ALL),
        make_hidden_cases=_prediction_hidden_cases(_ALL),
        exact=True,
        blind=True,
        misconceptions=tuple(
            Misconception(_WHY[s][0], _WHY[s][1], (_answer_with(**{f"flip_{s}": True}),))
            for s in _ALL
        ),
    )
)
for _name, _statements in PARTS.items():
    register(
        part(
            _WHOLE,
            _name,
            f"answers(kv_prediction): statements {_statements[0]}-{_statements[-1]} of lesson 05",
            ids=[_WHY[s][0] for s in _statements],
            make_cases=_prediction_cases(_statements),
            make_hidden_cases=_prediction_hidden_cases(_statements),
        )
    )
