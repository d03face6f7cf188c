"""Exercises of lesson 13: measuring a previous-token head, and K-composition.

* ``previous_token_score(weights) -> (n_heads,)`` : the mean weight each head of a causal
  self-attention layer puts on the position right before the query;
* ``k_composition(W_q, W_k, W_v, W_o) -> float`` : how strongly a layer-1 head's keys read
  what a layer-0 head writes, ``‖W_QK W_OVᵀ‖_F / (‖W_QK‖_F ‖W_OV‖_F)`` with
  ``W_QK = W_q W_kᵀ`` (layer-1 head) and ``W_OV = W_v W_o`` (layer-0 head).

The weights of the first are random causal attention maps in which batch, n_heads and seq
all differ; the matrices of the second are random and of non-square shapes (d_model ≠
d_head), so that the query-side product, the untransposed product and the unnormalised
norm all give different numbers.

Diagnosis by inference (see :mod:`attnlib.checks._core`):

* ``previous_token_score`` is linear in the weights, so probes that set one weight at a time
  read off which cells each output averages and with what coefficient: the offset of query
  and key (previous, own, or the later key), a wrapped read of query 0, a query range one
  short, a batch read only at sequence 0, a mean over the heads, a sum or a wrong count;
* ``k_composition``: doubling W_q tells a normalised score from a raw norm; on weights of
  rank 1 (where every matrix norm agrees) the value names the product (key side, query
  side, untransposed, or the paper's column-vector formulas typed with row weights); on
  full-rank weights, the Frobenius or the spectral norm.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt, linear_map

# References written here, apart from attnlib.tasks.induction (which learners must not
# call); tests/test_induction.py proves them equal.

# ----------------------------------------------------------------------------------------
# previous_token_score(weights) -> (n_heads,)
# ----------------------------------------------------------------------------------------


def _prev_reference(weights):
    seq = weights.shape[-1]
    t = torch.arange(1, seq)
    return weights[:, :, t, t - 1].mean(dim=(0, 2))  # (n_heads,)


def _prev_build(*, offset=1, first="skip", last="keep", batch="all", reduce="mean"):
    """A previous-token score with the given choices; the defaults give the correct one.

    ``offset`` is query minus key of the cells read: 1 (the previous key), 0 (the diagonal)
    or -1 (``weights[t - 1, t]``, queries and keys swapped); ``first`` "wrap" also reads
    query 0 (its key ``t - 1 = -1`` wraps to the last key); ``last`` "drop" leaves out the
    last query (``range(1, seq - 1)``); ``batch`` "first" reads ``weights[0]`` only;
    ``reduce`` "mean" (over batch and queries), "sum", "heads" (mean over heads and
    queries: one number per sequence) or "count-seq" (the sum divided by batch · seq).
    """

    def fn(weights):
        seq = weights.shape[-1]
        if offset == 1:
            t = torch.arange(0 if first == "wrap" else 1, seq)
            q, k = t, t - 1
        elif offset == 0:
            q = k = torch.arange(seq)
        else:  # query t - 1 looking at key t
            t = torch.arange(1, seq)
            q, k = t - 1, t
        if last == "drop":
            q, k = q[:-1], k[:-1]
        w = weights[:1] if batch == "first" else weights
        cells = w[:, :, q, k]  # (batch, n_heads, queries read)
        if reduce == "sum":
            return cells.sum(dim=(0, 2))
        if reduce == "heads":
            return cells.mean(dim=(1, 2))  # (batch,)
        if reduce == "count-seq":
            return cells.sum(dim=(0, 2)) / (w.shape[0] * seq)
        return cells.mean(dim=(0, 2))

    return fn


def _causal_weights(seed, batch, n_heads, seq):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, n_heads, seq, seq, generator=gen, dtype=torch.float64) * 2
    blocked = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # keys after the query
    return torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)


def _prev_cases() -> list[Case]:
    return [
        Case(f"batch {b}, n_heads {h}, seq {s}", (_causal_weights(seed, b, h, s),))
        for seed, b, h, s in ((1301, 4, 2, 7), (1302, 3, 5, 9), (1303, 6, 3, 5))
    ]


def _prev_hidden_cases() -> list[Case]:
    return [
        Case(f"hidden: batch {b}, n_heads {h}, seq {s}", (_causal_weights(seed, b, h, s),))
        for seed, b, h, s in ((1311, 7, 4, 11), (1312, 2, 3, 6))
    ]


# The probe: every weight in turn set to 1 (the rest 0). A previous-token score is linear in
# the weights, so these calls read off which cells it averages and with what coefficient.
_PREV_PROBE = (2, 3, 5)  # batch, n_heads, seq: all different


def _number(o):
    """A returned scalar (Python number or 0-d / 1-element array) as float; None otherwise."""
    if not o.ok or o.arity != 1:
        return None
    if isinstance(o.value, (int, float)) and not isinstance(o.value, bool):
        return float(o.value)
    a = o.array(0)
    if a is None or a.size != 1 or a.dtype == bool:
        return None
    return float(a.reshape(()))


def _infer_prev(learner) -> list[Finding]:
    batch, n_heads, seq = _PREV_PROBE
    read = linear_map(learner, (batch, n_heads, seq, seq), seed=1399)
    if read is None:
        return []
    C, out_shape = read
    if out_shape == (n_heads,):
        over_heads = False
    elif out_shape == (batch,):
        over_heads = True
    else:
        return []
    coef = C[0].reshape(batch, n_heads, seq, seq)  # what output 0 reads
    cells = np.argwhere(np.abs(coef) > 1e-12)  # (b, h, query, key)
    if len(cells) == 0:
        return []
    values = coef[tuple(cells.T)]
    if not np.allclose(values, values[0], rtol=1e-4):
        return []  # cells weighted unequally: no known mistake does that
    found = []
    heads = set(cells[:, 1].tolist())
    batches = set(cells[:, 0].tolist())
    if over_heads:
        if heads != set(range(n_heads)) or batches != {0}:
            return []
    elif heads != {0}:
        return []
    first_only = False
    if not over_heads:
        if batches == {0}:
            first_only = True
        elif batches != set(range(batch)):
            return []
    b0, h0 = cells[0, 0], cells[0, 1]
    pairs = {(int(q), int(k)) for b, h, q, k in cells if b == b0 and h == h0}
    near = {(q, k) for q, k in pairs if abs(q - k) <= 1}
    offsets = {q - k for q, k in near}
    if len(offsets) != 1:
        return []
    d = offsets.pop()
    wrapped = pairs - near
    if wrapped and (d != 1 or wrapped != {(0, seq - 1)}):
        return []
    queries = sorted(q for q, _ in near)
    valid = {1: list(range(1, seq)), 0: list(range(seq)), -1: list(range(seq - 1))}[d]
    if d == 0:
        found.append(
            Finding(
                "self-not-previous",
                f"your score reads weights[b, h, t, t] (query {queries[0]} with key "
                f"{queries[0]}, ...): each query's own position.",
            )
        )
    elif d == -1:
        found.append(
            Finding(
                "query-key-swapped",
                f"your score reads weights[b, h, t - 1, t] (query {queries[0]} with key "
                f"{queries[0] + 1}, ...): a key after its query, which a causal map sets to 0.",
            )
        )
    if wrapped:
        found.append(
            Finding(
                "includes-first-query",
                f"your score also reads weights[b, h, 0, {seq - 1}] (query 0 with key -1, "
                f"which Python takes as the last key, {seq - 1}).",
            )
        )
    if queries != valid:
        if queries in (valid[:-1], valid[1:]):
            gone = valid[-1] if queries == valid[:-1] else valid[0]
            found.append(
                Finding(
                    "query-range-off-by-one",
                    f"with seq = {seq}, your score reads queries {queries[0]} .. "
                    f"{queries[-1]}: query {gone} is left out.",
                )
            )
        else:
            return []
    if first_only:
        found.append(
            Finding(
                "first-batch-only",
                f"with batch = {batch}, only sequence 0 changes your score; the other "
                f"{batch - 1} are never read.",
            )
        )
    if over_heads:
        found.append(
            Finding(
                "mean-over-heads",
                f"with batch {batch} and n_heads {n_heads}, your result has shape "
                f"({batch},): one number per sequence, averaged over the heads.",
            )
        )
    n, c = len(cells), float(values[0])
    if abs(c * n - 1) > 1e-4:
        if abs(c - 1) <= 1e-4:
            found.append(
                Finding(
                    "sum-not-mean",
                    f"each of the {n} weights a head's score adds up counts with "
                    "coefficient 1: a sum, not a mean.",
                )
            )
        else:
            found.append(
                Finding(
                    "mean-wrong-count",
                    f"your score adds up {n} weights per head and divides by "
                    f"{fmt(1 / c)}, not by {n}.",
                )
            )
    return found


register(
    Exercise(
        name="previous_token_score",
        summary="previous_token_score(weights) -> (n_heads,): mean weight on the position "
        "right before each query",
        reference=_prev_reference,
        make_cases=_prev_cases,
        make_hidden_cases=_prev_hidden_cases,
        forbidden=("attnlib.tasks.induction.previous_token_score",),
        infer=_infer_prev,
        build=_prev_build,
        exclusive=(
            # reading query 0 wraps only when the key is t - 1
            frozenset({"self-not-previous", "includes-first-query"}),
            frozenset({"query-key-swapped", "includes-first-query"}),
            # weights[0] averaged over the heads is one number: nothing left to read
            frozenset({"first-batch-only", "mean-over-heads"}),
            # reading all seq queries, a division by batch · seq is the right mean of them
            frozenset({"self-not-previous", "mean-wrong-count"}),
            frozenset({"includes-first-query", "mean-wrong-count"}),
        ),
        misconceptions=(
            Misconception(
                "self-not-previous",
                "This is the weight on the query's own position (the diagonal, "
                "weights[b, h, t, t]). The previous position is one key to the left: "
                "weights[b, h, t, t - 1], the diagonal just below the main one.",
                (_prev_build(offset=0),),
                {"offset": 0},
            ),
            Misconception(
                "query-key-swapped",
                "Rows are queries and columns are keys: weights[b, h, t - 1, t] is query t - 1 "
                "looking at key t, a later token, which a causal head never sees (always 0). "
                "Take weights[b, h, t, t - 1].",
                (_prev_build(offset=-1),),
                {"offset": -1},
            ),
            Misconception(
                "includes-first-query",
                "Query 0 has no previous position: with t running from 0, t - 1 = -1 picks "
                "the last key, which is masked (weight 0), and pulls the mean down. Average "
                "over queries t = 1 .. seq - 1 only.",
                (_prev_build(first="wrap"),),
                {"first": "wrap"},
            ),
            Misconception(
                "query-range-off-by-one",
                "One query too few: range(1, seq - 1) stops before seq - 1 (and range(2, seq) "
                "starts after 1). Every query t = 1 .. seq - 1 has a previous position: "
                "range(1, seq), or the slice weights[..., 1:, :-1].diagonal(dim1=-2, dim2=-1).",
                (_prev_build(last="drop"),),
                {"last": "drop"},
            ),
            Misconception(
                "first-batch-only",
                "Only the first sequence of the batch is read (weights[0], or a loop over the "
                "heads that never moves along the batch). The score is a mean over every "
                "sequence of the batch as well as over the queries: mean(dim=(0, 2)).",
                (_prev_build(batch="first"),),
                {"batch": "first"},
            ),
            Misconception(
                "mean-over-heads",
                "The mean runs over the heads, giving one number per sequence. Average over "
                "the batch and the query positions (dims 0 and 2) to get one number per head.",
                (_prev_build(reduce="heads"),),
                {"reduce": "heads"},
            ),
            Misconception(
                "sum-not-mean",
                "The weights are summed; take the mean, so that the score is a weight "
                "between 0 and 1 whatever the batch size and sequence length.",
                (_prev_build(reduce="sum"),),
                {"reduce": "sum"},
            ),
            Misconception(
                "mean-wrong-count",
                "The sum is divided by the wrong count (batch · seq, say). A mean divides by "
                "the number of weights it adds: batch · (seq - 1) per head, since query 0 "
                "has no previous position. .mean() over the selected weights counts for you.",
                (_prev_build(reduce="count-seq"),),
                {"reduce": "count-seq"},
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# k_composition(W_q, W_k, W_v, W_o) -> float
# ----------------------------------------------------------------------------------------


def _fro(x):
    return torch.linalg.matrix_norm(x)


def _kc_reference(W_q, W_k, W_v, W_o):
    W_QK = W_q @ W_k.T  # (d_model, d_model), layer-1 head
    W_OV = W_v @ W_o  # (d_model, d_model), layer-0 head
    return float(_fro(W_QK @ W_OV.T) / (_fro(W_QK) * _fro(W_OV)))


def _kc_matrices(W_q, W_k, W_v, W_o, product):
    """(W_QK, W_OV, the product whose size is the score) for one reading of the formula."""
    if product == "column":  # Elhage et al.'s column-vector formulas typed with row weights
        W_QK, W_OV = W_q.T @ W_k, W_o @ W_v  # (d_head, d_head) each
        return W_QK, W_OV, W_QK.T @ W_OV
    W_QK, W_OV = W_q @ W_k.T, W_v @ W_o  # (d_model, d_model)
    prod = {"key": W_QK @ W_OV.T, "query": W_OV @ W_QK, "untransposed": W_QK @ W_OV}[product]
    return W_QK, W_OV, prod


def _kc_build(*, product="key", norm="fro", normalise=True):
    """A K-composition score with the given choices; the defaults give the correct one.

    ``product`` "key" (W_QK W_OVᵀ), "query" (W_OV W_QK, Q-composition), "untransposed"
    (W_QK W_OV) or "column" (W_QK = W_qᵀ W_k, W_OV = W_o W_v and W_QKᵀ W_OV: the paper's
    column-vector formulas applied to row-vector weights); ``norm`` "fro" or "spectral"
    (the largest singular value); ``normalise`` False returns the norm of the product.
    """

    def size(x):
        return torch.linalg.matrix_norm(x, ord=2 if norm == "spectral" else "fro")

    def fn(W_q, W_k, W_v, W_o):
        W_QK, W_OV, prod = _kc_matrices(W_q, W_k, W_v, W_o, product)
        score = size(prod) / (size(W_QK) * size(W_OV)) if normalise else size(prod)
        return float(score)

    return fn


def _kc_case(label, seed, d_model, d_head):
    gen = torch.Generator().manual_seed(seed)

    def n(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) / d_model**0.5

    # W_q, W_k: (d_model, d_head); W_v: (d_model, d_head); W_o: (d_head, d_model)
    W_q, W_k, W_v = n(d_model, d_head), n(d_model, d_head), n(d_model, d_head)
    W_o = n(d_head, d_model) + 0.5 * n(d_head, d_model).roll(1, dims=1)
    return Case(label, (W_q, W_k, W_v, W_o))


def _kc_cases() -> list[Case]:
    return [
        _kc_case("d_model 12, d_head 4", 1321, 12, 4),
        _kc_case("d_model 16, d_head 6", 1322, 16, 6),
        _kc_case("d_model 9, d_head 2", 1323, 9, 2),
    ]


def _kc_hidden_cases() -> list[Case]:
    return [
        _kc_case("hidden: d_model 20, d_head 8", 1331, 20, 8),
        _kc_case("hidden: d_model 10, d_head 3", 1332, 10, 3),
    ]


def _kc_rank_one(seed, d_model=7, d_head=3):
    """Weights of rank 1: every product is rank 1, so every matrix norm gives one value."""
    gen = torch.Generator().manual_seed(seed)

    def outer(rows, cols):
        a = torch.randn(rows, generator=gen, dtype=torch.float64)
        b = torch.randn(cols, generator=gen, dtype=torch.float64)
        return a[:, None] * b[None, :]

    return (
        outer(d_model, d_head),
        outer(d_model, d_head),
        outer(d_model, d_head),
        outer(d_head, d_model),
    )


_KC_PRODUCTS = ("key", "query", "untransposed", "column")


def _infer_kc(learner) -> list[Finding]:
    full = _kc_case("probe", 1398, 7, 3).args
    base = _number(learner(*full))
    if base is None or not math.isfinite(base) or base == 0:
        return []
    # 1. Normalised? A normalised score does not change when W_q (or W_v) is doubled.
    doubled = _number(learner(2 * full[0], full[1], full[2], full[3]))
    if doubled is None:
        return []
    ratio = doubled / base
    if abs(ratio - 1) <= 1e-4:
        normalise = True
    elif abs(ratio - 2) <= 2e-4:
        normalise = False
    else:
        return []
    # 2. Which product? On rank-1 weights all matrix norms agree, so only the product counts.
    ones = _kc_rank_one(1397)
    got = _number(learner(*ones))
    if got is None:
        return []
    products = [
        p for p in _KC_PRODUCTS
        if math.isclose(got, _kc_build(product=p, normalise=normalise)(*ones), rel_tol=1e-4)
    ]  # fmt: skip
    if len(products) != 1:
        return []
    product = products[0]
    # 3. Which norm? On full-rank weights the Frobenius and spectral norms differ.
    norms = [
        n for n in ("fro", "spectral")
        if math.isclose(base, _kc_build(product=product, norm=n, normalise=normalise)(*full),
                        rel_tol=1e-4)
    ]  # fmt: skip
    if len(norms) != 1:
        return []
    found = []
    if product != "key":
        W_QK, W_OV, _ = _kc_matrices(*(torch.as_tensor(w) for w in ones), product)
        what = {
            "query": "‖W_OV W_QK‖: the product of the query side",
            "untransposed": "‖W_QK W_OV‖: W_OV not transposed",
            "column": f"‖W_QKᵀ W_OV‖ with W_QK = W_qᵀ W_k and W_OV = W_o W_v, both of shape "
            f"{tuple(W_QK.shape)} (d_head, d_head), not (d_model, d_model)",
        }[product]
        found.append(
            Finding(
                {
                    "query": "query-side",
                    "untransposed": "ov-not-transposed",
                    "column": "column-vector-formulas",
                }[product],  # fmt: skip
                f"on weights of rank 1 (where every matrix norm agrees) your score equals {what}.",
            )
        )
    if norms[0] == "spectral":
        found.append(
            Finding(
                "spectral-norm",
                "on full-rank weights your score equals the same ratio taken with the "
                "spectral norm (the largest singular value: torch.linalg.norm(x, 2), "
                "np.linalg.norm(x, 2)), not the Frobenius norm.",
            )
        )
    if not normalise:
        found.append(
            Finding(
                "not-normalised",
                f"doubling W_q multiplies your score by {fmt(ratio)}: it is the size of the "
                "product itself, not divided by ‖W_QK‖ ‖W_OV‖.",
            )
        )
    return found


register(
    Exercise(
        name="k_composition",
        summary="k_composition(W_q, W_k, W_v, W_o) -> float: how much a layer-1 head's keys "
        "read a layer-0 head's output",
        reference=_kc_reference,
        make_cases=_kc_cases,
        make_hidden_cases=_kc_hidden_cases,
        forbidden=(
            "attnlib.tasks.induction.composition_score",
            "attnlib.tasks.induction.composition_scores",
        ),
        infer=_infer_kc,
        build=_kc_build,
        misconceptions=(
            Misconception(
                "query-side",
                "W_OV @ W_QK is what a layer-0 output does to the *query* side "
                "(Q-composition). On the key side the output a·W_OV is the row x_k in "
                "x_q W_QK x_kᵀ, so the product is W_QK @ W_OV.T.",
                (_kc_build(product="query"),),
                {"product": "query"},
            ),
            Misconception(
                "ov-not-transposed",
                "W_QK @ W_OV is not what the key sees. The head's output a·W_OV enters the "
                "score transposed, x_q W_QK (a W_OV)ᵀ = x_q (W_QK W_OVᵀ) aᵀ: use W_QK @ W_OV.T.",
                (_kc_build(product="untransposed"),),
                {"product": "untransposed"},
            ),
            Misconception(
                "column-vector-formulas",
                "These are the paper's column-vector formulas (W_QK = W_Qᵀ W_K, W_OV = W_O W_V, "
                "‖W_QKᵀ W_OV‖) applied to weights stored for row vectors: with W_q of shape "
                "(d_model, d_head) they give (d_head, d_head) matrices that compare nothing "
                "in the residual stream. With rows, W_QK = W_q W_kᵀ and W_OV = W_v W_o, both "
                "(d_model, d_model), and the key side is W_QK W_OVᵀ.",
                (_kc_build(product="column"),),
                {"product": "column"},
            ),
            Misconception(
                "spectral-norm",
                "The norm is the spectral norm (largest singular value): torch.linalg.norm(x, "
                "2) and np.linalg.norm(x, 2) mean that for a matrix. The score uses the "
                "Frobenius norm, the square root of the sum of squared entries: "
                "torch.linalg.matrix_norm(x) or torch.linalg.norm(x).",
                (_kc_build(norm="spectral"),),
                {"norm": "spectral"},
            ),
            Misconception(
                "not-normalised",
                "The Frobenius norm of the product also grows with the sizes of the two "
                "matrices. Divide by ‖W_QK‖_F · ‖W_OV‖_F, so that the score lies between 0 "
                "and 1 and heads of different scales can be compared.",
                (_kc_build(normalise=False),),
                {"normalise": False},
            ),
        ),
    )
)
