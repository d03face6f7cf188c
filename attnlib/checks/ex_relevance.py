"""Exercises of lesson 01: relevance as a dot product between a query and the keys.

* ``relevance_scores(query, keys) -> (seq_k,)`` — one query against every key;
* ``score_matrix(Q, K) -> (seq_q, seq_k)`` — every query against every key, ``Q @ Kᵀ``,
  without any scaling yet (lesson 04 adds the ``1/√d_k``).

Inputs are numpy float64 arrays. Shapes are non-square (seq_q ≠ seq_k ≠ d_k) so that a
transposed result cannot pass by accident; one case of each exercise has seq_k == d_k so
that "k not transposed" runs (instead of raising) and can be recognised by its values.
Keys have different lengths, so cosine similarity cannot pass for a dot product.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._core import Case, Exercise, Misconception, register

# What neither exercise may call: the library's scores (a dot product of queries and keys).
_SCORES = ("attnlib.core.scores", "attnlib.core._scores_math")


def _fixed_keys() -> np.ndarray:
    """The keys of both exercises' first case: (seq_k=4, d_k=3), four different lengths."""
    return np.array([[1.0, 1.0, 1.0], [0.0, 3.0, 0.0], [-1.0, 0.0, -1.0], [2.0, 0.0, 0.5]])


# ----------------------------------------------------------------------------------------
# relevance_scores(query, keys) -> (seq_k,)
# ----------------------------------------------------------------------------------------


def _relevance_cases() -> list[Case]:
    rng = np.random.default_rng(101)
    n = rng.standard_normal
    fixed_q = np.array([1.0, 0.0, 2.0])
    return [
        Case("query (3,), keys (4, 3): d_k=3, seq_k=4", (fixed_q, _fixed_keys())),
        Case("query (5,), keys (7, 5)", (n(5), n((7, 5)) * rng.uniform(0.5, 3.0, (7, 1)))),
        Case("query (4,), keys (4, 4): seq_k == d_k", (n(4), n((4, 4)))),
        Case("query (6,), keys (2, 6): only two keys", (n(6) * 2.0, n((2, 6)))),
    ]


def _relevance_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(9101)
    n = rng.standard_normal
    return [
        Case("hidden: query (16,), keys (9, 16)", (n(16), n((9, 16)) * 3.0)),
        Case("hidden: query (3,), keys (3, 3): seq_k == d_k", (n(3), n((3, 3)))),
        Case("hidden: query (2,), keys (11, 2)", (n(2), n((11, 2)) * rng.uniform(0.2, 4, (11, 1)))),
    ]


def _relevance_reference(query, keys):
    return keys @ query  # (seq_k, d_k) @ (d_k,) -> (seq_k,)


def _rel_cosine(query, keys):
    qn = query / np.linalg.norm(query)
    kn = keys / np.linalg.norm(keys, axis=-1, keepdims=True)
    return kn @ qn


def _rel_elementwise(query, keys):
    return keys * query  # (seq_k, d_k): the products, never added up


def _rel_sum_axis0(query, keys):
    return (keys * query).sum(axis=0)  # (d_k,): summed over the keys


def _rel_sum_all(query, keys):
    return (keys * query).sum()  # one number for all keys together


def _rel_not_transposed(query, keys):
    return query @ keys  # only runs when seq_k == d_k, and then pairs the wrong numbers


def _rel_scaled(query, keys):
    return keys @ query / np.sqrt(query.shape[-1])


register(
    Exercise(
        name="relevance_scores",
        summary="relevance_scores(query, keys) -> (seq_k,): the dot product of the query "
        "with each key",
        reference=_relevance_reference,
        make_cases=_relevance_cases,
        make_hidden_cases=_relevance_hidden_cases,
        forbidden=_SCORES,
        misconceptions=(
            Misconception(
                "cosine-not-dot",
                "The vectors are normalised to length 1 first, which gives cosine similarity. "
                "Attention uses the plain dot product: a longer key gets a larger score. "
                "Drop the division by the norms.",
                (_rel_cosine,),
            ),
            Misconception(
                "elementwise-not-summed",
                "You return the products feature by feature, shape (seq_k, d_k). A dot "
                "product adds them up: sum over the last axis (axis=-1), or use keys @ query.",
                (_rel_elementwise,),
            ),
            Misconception(
                "summed-over-wrong-axis",
                "The products are added over the wrong axis: over the keys (giving one number "
                "per feature) or over everything (one number in all). Each key gets its own "
                "score: sum over the feature axis only, (keys * query).sum(axis=-1).",
                (_rel_sum_axis0, _rel_sum_all),
            ),
            Misconception(
                "keys-not-transposed",
                "query @ keys multiplies the query with the columns of keys (one feature "
                "across all keys), not with its rows (one key each). keys has shape "
                "(seq_k, d_k): use keys @ query, or query @ keys.T.",
                (_rel_not_transposed,),
            ),
            Misconception(
                "scaled-too-early",
                "The scores are divided by √d_k. That scaling is part of attention (lesson "
                "04), but this exercise asks for the plain dot products: drop the division.",
                (_rel_scaled,),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# score_matrix(Q, K) -> (seq_q, seq_k) = Q @ Kᵀ, no scaling
# ----------------------------------------------------------------------------------------


def _matrix_cases() -> list[Case]:
    rng = np.random.default_rng(102)
    n = rng.standard_normal
    fixed_q = np.array([[1.0, 0.0, 2.0], [0.0, -1.0, 1.0]])
    return [
        Case("Q (2, 3), K (4, 3): seq_q=2, seq_k=4, d_k=3", (fixed_q, _fixed_keys())),
        Case("Q (3, 5), K (6, 5)", (n((3, 5)), n((6, 5)) * rng.uniform(0.5, 3.0, (6, 1)))),
        Case("Q (2, 4), K (4, 4): seq_k == d_k", (n((2, 4)), n((4, 4)))),
        Case("Q (6, 4), K (6, 4): seq_q == seq_k (one sentence)", (n((6, 4)), n((6, 4)))),
    ]


def _matrix_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(9102)
    n = rng.standard_normal
    return [
        Case("hidden: Q (5, 7), K (3, 7)", (n((5, 7)), n((3, 7)) * 2.0)),
        Case("hidden: Q (1, 3), K (3, 3): one query, seq_k == d_k", (n((1, 3)), n((3, 3)))),
        Case("hidden: Q (8, 16), K (10, 16)", (n((8, 16)), n((10, 16)))),
    ]


def _matrix_reference(Q, K):
    return Q @ K.T  # (seq_q, d_k) @ (d_k, seq_k) -> (seq_q, seq_k)


def _mat_cosine(Q, K):
    qn = Q / np.linalg.norm(Q, axis=-1, keepdims=True)
    kn = K / np.linalg.norm(K, axis=-1, keepdims=True)
    return qn @ kn.T


def _mat_elementwise(Q, K):
    return Q[:, None, :] * K[None, :, :]  # (seq_q, seq_k, d_k): never added up


def _mat_sum_keys(Q, K):
    return (Q[:, None, :] * K[None, :, :]).sum(axis=1)  # (seq_q, d_k): summed over keys


def _mat_sum_queries(Q, K):
    return (Q[:, None, :] * K[None, :, :]).sum(axis=0)  # (seq_k, d_k): summed over queries


def _mat_transposed(Q, K):
    return K @ Q.T  # (seq_k, seq_q)


def _mat_not_transposed(Q, K):
    return Q @ K  # runs only when seq_k == d_k


def _mat_scaled(Q, K):
    return Q @ K.T / np.sqrt(Q.shape[-1])


register(
    Exercise(
        name="score_matrix",
        summary="score_matrix(Q, K) -> (seq_q, seq_k): every query against every key, Q @ Kᵀ",
        reference=_matrix_reference,
        make_cases=_matrix_cases,
        make_hidden_cases=_matrix_hidden_cases,
        forbidden=_SCORES,
        misconceptions=(
            Misconception(
                "cosine-not-dot",
                "The rows of Q and K are normalised to length 1 first, which gives cosine "
                "similarity. Attention uses the plain dot product: drop the division by the "
                "norms.",
                (_mat_cosine,),
            ),
            Misconception(
                "elementwise-not-summed",
                "You return every product of every feature, shape (seq_q, seq_k, d_k). Each "
                "score is the sum of those products over the feature axis: add .sum(axis=-1), "
                "or simply use Q @ K.T.",
                (_mat_elementwise,),
            ),
            Misconception(
                "summed-over-wrong-axis",
                "The products are added over a position axis (keys or queries) instead of the "
                "feature axis d_k. Score [i, j] sums q_i[f] * k_j[f] over the features f only.",
                (_mat_sum_keys, _mat_sum_queries),
            ),
            Misconception(
                "scores-transposed",
                "The result is transposed: shape (seq_k, seq_q). Rows are queries and columns "
                "are keys, so the score matrix is Q @ K.T with shape (seq_q, seq_k), not "
                "K @ Q.T.",
                (_mat_transposed,),
            ),
            Misconception(
                "keys-not-transposed",
                "K is not transposed: Q @ K pairs the features of a query with one feature of "
                "every key (it only runs when seq_k == d_k). Compare rows with rows: Q @ K.T.",
                (_mat_not_transposed,),
            ),
            Misconception(
                "scaled-too-early",
                "The scores are divided by √d_k. Attention does that (lesson 04), but this "
                "exercise asks for the raw dot products Q @ K.T: drop the division.",
                (_mat_scaled,),
            ),
        ),
    )
)
