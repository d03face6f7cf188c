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
"""

from __future__ import annotations

import torch

from attnlib.checks._core import Case, Exercise, Misconception, register

# References written here, apart from attnlib.tasks.induction (which learners must not
# call); tests/test_induction.py proves them equal.

# ----------------------------------------------------------------------------------------
# previous_token_score(weights) -> (n_heads,)
# ----------------------------------------------------------------------------------------


def _prev_reference(weights):
    seq = weights.shape[-1]
    t = torch.arange(1, seq)
    return weights[:, :, t, t - 1].mean(dim=(0, 2))  # (n_heads,)


def _prev_self(weights):
    return torch.diagonal(weights, 0, -2, -1).mean(dim=(0, 2))  # the query's own position


def _prev_swapped(weights):
    seq = weights.shape[-1]
    t = torch.arange(1, seq)
    return weights[:, :, t - 1, t].mean(dim=(0, 2))  # query t-1 looking at key t (the future)


def _prev_includes_first(weights):
    seq = weights.shape[-1]
    t = torch.arange(seq)
    return weights[:, :, t, t - 1].mean(dim=(0, 2))  # t = 0 wraps to key -1 (masked: 0)


def _prev_over_heads(weights):
    seq = weights.shape[-1]
    t = torch.arange(1, seq)
    return weights[:, :, t, t - 1].mean(dim=(1, 2))  # (batch,)


def _prev_sum(weights):
    seq = weights.shape[-1]
    t = torch.arange(1, seq)
    return weights[:, :, t, t - 1].sum(dim=(0, 2))


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


register(
    Exercise(
        name="previous_token_score",
        summary="previous_token_score(weights) -> (n_heads,): mean weight on the position "
        "right before each query",
        reference=_prev_reference,
        make_cases=_prev_cases,
        make_hidden_cases=_prev_hidden_cases,
        forbidden=("attnlib.tasks.induction.previous_token_score",),
        misconceptions=(
            Misconception(
                "self-not-previous",
                "This is the weight on the query's own position (the diagonal, "
                "weights[b, h, t, t]). The previous position is one key to the left: "
                "weights[b, h, t, t - 1], the diagonal just below the main one.",
                (_prev_self,),
            ),
            Misconception(
                "query-key-swapped",
                "Rows are queries and columns are keys: weights[b, h, t - 1, t] is query t - 1 "
                "looking at key t, a later token, which a causal head never sees (always 0). "
                "Take weights[b, h, t, t - 1].",
                (_prev_swapped,),
            ),
            Misconception(
                "includes-first-query",
                "Query 0 has no previous position: with t running from 0, t - 1 = -1 picks "
                "the last key, which is masked (weight 0), and pulls the mean down. Average "
                "over queries t = 1 .. seq - 1 only.",
                (_prev_includes_first,),
            ),
            Misconception(
                "mean-over-heads",
                "The mean runs over the heads, giving one number per sequence. Average over "
                "the batch and the query positions (dims 0 and 2) to get one number per head.",
                (_prev_over_heads,),
            ),
            Misconception(
                "sum-not-mean",
                "The weights are summed; take the mean, so that the score is a weight "
                "between 0 and 1 whatever the batch size and sequence length.",
                (_prev_sum,),
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


def _kc_query_side(W_q, W_k, W_v, W_o):
    W_QK, W_OV = W_q @ W_k.T, W_v @ W_o
    return float(_fro(W_OV @ W_QK) / (_fro(W_QK) * _fro(W_OV)))  # Q-composition


def _kc_not_transposed(W_q, W_k, W_v, W_o):
    W_QK, W_OV = W_q @ W_k.T, W_v @ W_o
    return float(_fro(W_QK @ W_OV) / (_fro(W_QK) * _fro(W_OV)))


def _kc_not_normalised(W_q, W_k, W_v, W_o):
    W_QK, W_OV = W_q @ W_k.T, W_v @ W_o
    return float(_fro(W_QK @ W_OV.T))


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
    return [_kc_case("hidden: d_model 20, d_head 8", 1331, 20, 8)]


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
        misconceptions=(
            Misconception(
                "query-side",
                "W_OV @ W_QK is what a layer-0 output does to the *query* side "
                "(Q-composition). On the key side the output a·W_OV is the row x_k in "
                "x_q W_QK x_kᵀ, so the product is W_QK @ W_OV.T.",
                (_kc_query_side,),
            ),
            Misconception(
                "ov-not-transposed",
                "W_QK @ W_OV is not what the key sees. The head's output a·W_OV enters the "
                "score transposed, x_q W_QK (a W_OV)ᵀ = x_q (W_QK W_OVᵀ) aᵀ: use W_QK @ W_OV.T.",
                (_kc_not_transposed,),
            ),
            Misconception(
                "not-normalised",
                "The Frobenius norm of the product also grows with the sizes of the two "
                "matrices. Divide by ‖W_QK‖_F · ‖W_OV‖_F, so that the score lies between 0 "
                "and 1 and heads of different scales can be compared.",
                (_kc_not_normalised,),
            ),
        ),
    )
)
