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
* ``k_composition``: doubling W_q tells a normalised score from a raw norm (and a raw
  squared one, which quadruples); on weights of rank 1 (where the Frobenius and spectral
  norms agree) the value names the product (key side, query side, untransposed, entry by
  entry, or the paper's column-vector formulas typed with row weights) and whether the
  norms were squared; on full-rank weights, the Frobenius or the spectral norm.
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
                "Your score reads the weight each query puts on its own position: the main "
                "diagonal of the map. The previous position is one key to the left of the "
                "query, on the diagonal just below the main one.",
                (_prev_build(offset=0),),
                {"offset": 0},
                question="For query t, which key's weight does your score read: where does "
                "that key sit relative to the query's own position, and where does the "
                "position before it sit?",
            ),
            Misconception(
                "query-key-swapped",
                "Query and key are swapped: your cells are in row t - 1, column t, the weight "
                "a query puts on the key after it. Rows are queries and columns keys, and a "
                "causal head never looks ahead, so those weights are always 0.",
                (_prev_build(offset=-1),),
                {"offset": -1},
                question="On a causal map your scores are 0 for every head. Which of the two "
                "position indices of a cell is the query and which the key, and where in a "
                "causal map are the weights always 0?",
            ),
            Misconception(
                "includes-first-query",
                "Query 0 is counted. It has no previous position: its key t - 1 = -1 is read "
                "as the last key, which a causal map masks (weight 0), so the mean is pulled "
                "down. Only the queries 1 to seq - 1 have a position before them.",
                (_prev_build(first="wrap"),),
                {"first": "wrap"},
                question="Which key does your score read for query 0, the first position? "
                "Is there a position before it?",
            ),
            Misconception(
                "query-range-off-by-one",
                "One query too few: the range of queries stops one before the last (or "
                "starts one after the first). Every query from 1 to seq - 1 has a previous "
                "position, and a Python range leaves out its end.",
                (_prev_build(last="drop"),),
                {"last": "drop"},
                question="How many queries of one sequence does your score average? Count "
                "the queries of a sequence of length seq that have a position before them.",
            ),
            Misconception(
                "first-batch-only",
                "Only the first sequence of the batch is read (the batch index fixed at 0, "
                "or a loop over the heads that never moves along the batch). The score is a "
                "mean over every sequence of the batch as well as over the queries.",
                (_prev_build(batch="first"),),
                {"batch": "first"},
                question="Change only the second sequence of the batch: does your score move? "
                "Over which sequences should a head's score be averaged?",
            ),
            Misconception(
                "mean-over-heads",
                "The mean runs over the heads and the queries, and the batch axis is left: "
                "one number per sequence. Averaging over the batch and the query positions "
                "instead keeps one number per head.",
                (_prev_build(reduce="heads"),),
                {"reduce": "heads"},
                question="Your result has one number per sequence of the batch. Which axes "
                "did you average over, and which axis must be left at the end?",
            ),
            Misconception(
                "sum-not-mean",
                "The weights are summed, so the score grows with the batch size and the "
                "sequence length. A mean keeps it a weight between 0 and 1.",
                (_prev_build(reduce="sum"),),
                {"reduce": "sum"},
                question="Can your score be larger than 1? Between which values should a "
                "score made of attention weights stay, whatever the batch and the length?",
            ),
            Misconception(
                "mean-wrong-count",
                "The sum is divided by the wrong count (batch times seq, say). A mean divides "
                "by the number of weights it adds: batch times (seq - 1) per head, since "
                "query 0 has no previous position.",
                (_prev_build(reduce="count-seq"),),
                {"reduce": "count-seq"},
                question="How many weights does your score add up for one head, and by what "
                "number do you divide the sum?",
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
    prod = {
        "key": W_QK @ W_OV.T,
        "query": W_OV @ W_QK,
        "untransposed": W_QK @ W_OV,
        "elementwise": W_QK * W_OV.T,  # the key-side product with * for @
    }[product]
    return W_QK, W_OV, prod


def _kc_build(*, product="key", norm="fro", normalise=True):
    """A K-composition score with the given choices; the defaults give the correct one.

    ``product`` "key" (W_QK W_OVᵀ), "query" (W_OV W_QK, Q-composition), "untransposed"
    (W_QK W_OV), "elementwise" (W_QK * W_OVᵀ, entry by entry) or "column" (W_QK = W_qᵀ W_k,
    W_OV = W_o W_v and W_QKᵀ W_OV: the paper's column-vector formulas applied to row-vector
    weights); ``norm`` "fro", "spectral" (the largest singular value) or "squared" (the
    sum of squared entries, no square root); ``normalise`` False returns the norm of the
    product, "qk" divides it by the norm of W_QK only and "ov" by that of W_OV only;
    product.
    """

    def size(x):
        if norm == "squared":
            return (x**2).sum()
        return torch.linalg.matrix_norm(x, ord=2 if norm == "spectral" else "fro")

    def fn(W_q, W_k, W_v, W_o):
        W_QK, W_OV, prod = _kc_matrices(W_q, W_k, W_v, W_o, product)
        by = {True: size(W_QK) * size(W_OV), False: 1.0, "qk": size(W_QK), "ov": size(W_OV)}
        score = size(prod) / by[normalise]
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


_KC_PRODUCTS = ("key", "query", "untransposed", "elementwise", "column")


def _infer_kc(learner) -> list[Finding]:
    full = _kc_case("probe", 1398, 7, 3).args
    base = _number(learner(*full))
    if base is None or not math.isfinite(base) or base == 0:
        return []
    # 1. Normalised? A normalised score does not change when W_q (in W_QK) or W_v (in W_OV)
    #    is doubled; a size not divided by that factor's doubles, a squared one quadruples.
    by_q = _number(learner(2 * full[0], full[1], full[2], full[3]))
    by_v = _number(learner(full[0], full[1], 2 * full[2], full[3]))
    if by_q is None or by_v is None:
        return []
    ratios = []
    for r in (by_q / base, by_v / base):
        near = [x for x in (1, 2, 4) if abs(r - x) <= 1e-4 * x]
        if not near:
            return []
        ratios.append(near[0])
    grows = {x for x in ratios if x != 1}
    if len(grows) > 1:
        return []
    normalise = {(1, 1): True, (1, 2): "qk", (2, 1): "ov"}.get(
        tuple(min(x, 2) for x in ratios), False
    )
    if not grows:
        norms = ("fro", "spectral", "squared")
    else:
        norms = ("squared",) if grows == {4} else ("fro", "spectral")
    # 2. Which product? On rank-1 weights the Frobenius and spectral norms agree, so only
    #    the product and whether the norms are squared count.
    ones = _kc_rank_one(1397)
    got = _number(learner(*ones))
    if got is None:
        return []
    readings = [
        (p, n) for p in _KC_PRODUCTS for n in norms
        if n != "spectral"
        and math.isclose(got, _kc_build(product=p, norm=n, normalise=normalise)(*ones),
                         rel_tol=1e-4)
    ]  # fmt: skip
    if len(readings) != 1:
        return []
    product, squared = readings[0][0], readings[0][1] == "squared"
    # 3. Which norm? On full-rank weights the Frobenius and spectral norms differ.
    if squared:
        norm = "squared"
    else:
        fits = [
            n for n in ("fro", "spectral")
            if math.isclose(base, _kc_build(product=product, norm=n, normalise=normalise)(*full),
                            rel_tol=1e-4)
        ]  # fmt: skip
        if len(fits) != 1:
            return []
        norm = fits[0]
    if not math.isclose(
        base, _kc_build(product=product, norm=norm, normalise=normalise)(*full), rel_tol=1e-4
    ):
        return []
    found = []
    if product != "key":
        W_QK, W_OV, _ = _kc_matrices(*(torch.as_tensor(w) for w in ones), product)
        what = {
            "query": "the size of W_OV W_QK (W_OV on the left, W_QK on the right)",
            "untransposed": "the size of W_QK W_OV (W_QK on the left, W_OV as it is on the right)",
            "elementwise": "the size of W_QK and W_OVᵀ multiplied entry by entry, not as matrices",
            "column": f"the size of W_QKᵀ W_OV with W_QK = W_qᵀ W_k and W_OV = W_o W_v, both of "
            f"shape {tuple(W_QK.shape)} (d_head, d_head), not (d_model, d_model)",
        }[product]
        found.append(
            Finding(
                {
                    "query": "query-side",
                    "untransposed": "ov-not-transposed",
                    "elementwise": "elementwise-product",
                    "column": "column-vector-formulas",
                }[product],  # fmt: skip
                f"on weights of rank 1 (where every matrix norm agrees) your score follows {what}.",
            )
        )
    if norm == "spectral":
        found.append(
            Finding(
                "spectral-norm",
                "on full-rank weights your score equals the same ratio taken with the "
                "largest singular value of each matrix as its size.",
            )
        )
    if norm == "squared":
        found.append(
            Finding(
                "squared-norms",
                "on every probe your score equals the same ratio with each size taken as "
                "the sum of the squared entries of its matrix.",
            )
        )
    if normalise is False:
        found.append(
            Finding(
                "not-normalised",
                f"doubling W_q multiplies your score by {fmt(ratios[0])}, and doubling W_v by "
                f"{fmt(ratios[1])}.",
            )
        )
    elif normalise in ("qk", "ov"):
        found.append(
            Finding(
                "half-normalised",
                f"doubling W_q multiplies your score by {fmt(ratios[0])}, doubling W_v by "
                f"{fmt(ratios[1])}.",
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
                "The product you measured is that of Q-composition: what a layer-0 output "
                "does when it is part of the query vector, on the left of W_QK. On the key "
                "side the output is part of x_k, the row on the right of W_QK, which enters "
                "the score transposed; the product follows from that.",
                (_kc_build(product="query"),),
                {"product": "query"},
                question="In the score x_q W_QK x_kᵀ, which vector holds the layer-0 output "
                "here, on which side of W_QK does it stand, and in what form?",
            ),
            Misconception(
                "ov-not-transposed",
                "W_OV enters your product as it is. The layer-0 output a W_OV is part of the "
                "row x_k, which stands on the right of W_QK transposed; the transpose of a "
                "product reverses its factors and transposes each, so W_OV reaches the score "
                "transposed, after W_QK.",
                (_kc_build(product="untransposed"),),
                {"product": "untransposed"},
                question="Write out the term the layer-0 output a W_OV adds to x_q W_QK x_kᵀ "
                "when it is part of x_k. What happens to a W_OV in that position?",
            ),
            Misconception(
                "elementwise-product",
                "The two matrices are multiplied entry by entry. The layer-0 output reaches "
                "the score through two linear maps applied one after the other, which is a "
                "matrix product; an entrywise product of two square matrices has the right "
                "shape but means nothing here.",
                (_kc_build(product="elementwise"),),
                {"product": "elementwise"},
                question="Is the product in your score a matrix product, whose entries sum "
                "over a shared index, or something else? Which kind does a vector passing "
                "through W_OV and then W_QK meet?",
            ),
            Misconception(
                "column-vector-formulas",
                "These are the paper's column-vector formulas applied to weights stored for "
                "row vectors: with W_q of shape (d_model, d_head) they give (d_head, d_head) "
                "matrices that compare nothing in the residual stream. With rows, W_QK is "
                "W_q times the transpose of W_k and W_OV is W_v times W_o, both (d_model, "
                "d_model).",
                (_kc_build(product="column"),),
                {"product": "column"},
                question="What shapes do your W_QK and W_OV have? Two vectors of the residual "
                "stream have d_model entries: what shape must a matrix between them have?",
            ),
            Misconception(
                "spectral-norm",
                "The norm is the spectral norm, the largest singular value (what numpy's and "
                "torch's matrix norms of order 2 give). The score uses the Frobenius norm, "
                "the square root of the sum of the squared entries.",
                (_kc_build(norm="spectral"),),
                {"norm": "spectral"},
                question="Which matrix norm did you take? Compute it for a small matrix by "
                "hand, as the square root of the sum of its squared entries: do you get the "
                "same number?",
            ),
            Misconception(
                "squared-norms",
                "Each norm is squared: the sum of the squared entries without its square "
                "root. The score is then the square of the Frobenius ratio, smaller than it "
                "whenever it is below 1.",
                (_kc_build(norm="squared"),),
                {"norm": "squared"},
                question="How did you compute each size? Treat a small matrix as one long "
                "vector: is your number its length, or something else?",
            ),
            Misconception(
                "not-normalised",
                "The score is the size of the product alone, and that grows with the sizes "
                "of the two matrices. Divided by the product of their Frobenius norms it "
                "lies between 0 and 1, and heads of different scales can be compared.",
                (_kc_build(normalise=False),),
                {"normalise": False},
                question="Double W_q: does your score change? Should a score meant to lie "
                "between 0 and 1 depend on the scale of the weights?",
            ),
            Misconception(
                "half-normalised",
                "The size of the product is divided by the size of one factor only. It grows "
                "with the sizes of both W_QK and W_OV, so it is divided by both norms; only "
                "then does the score lie between 0 and 1 whatever the scale of either head.",
                (_kc_build(normalise="qk"), _kc_build(normalise="ov")),
                {"normalise": "qk"},
                question="Double W_q, then W_v, each on its own: does your score change with "
                "one of them? By the sizes of which matrices does the product grow?",
            ),
        ),
    )
)
