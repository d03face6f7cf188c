"""Exercises of lesson 01: relevance as a dot product between a query and the keys.

* ``relevance_scores(query, keys) -> (seq_k,)`` — one query against every key;
* ``score_matrix(Q, K) -> (seq_q, seq_k)`` — every query against every key, ``Q @ Kᵀ``,
  without any scaling yet (lesson 04 adds the ``1/√d_k``).

Inputs are numpy float64 arrays. Shapes are non-square (seq_q ≠ seq_k ≠ d_k) so that a
transposed result cannot pass by accident; one case of each exercise has seq_k == d_k so
that "k not transposed" runs (instead of raising) and can be recognised by its values.
Keys have different lengths, so cosine similarity cannot pass for a dot product.

Diagnosis by inference (:mod:`attnlib.checks._core`): the learner's function is called on a
probe whose keys are square (seq_k == d_k, so every classic pairing runs) and the output is
explained as (a way of pairing queries with keys) x (rows or transposed) x (a multiplier):
each part that differs from Q @ Kᵀ is one named mistake, so two mistakes are named as two.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt

# What neither exercise may call: the library's scores (a dot product of queries and keys).
_SCORES = ("attnlib.core.scores", "attnlib.core._scores_math")


def _fixed_keys() -> np.ndarray:
    """The keys of both exercises' first case: (seq_k=4, d_k=3), four different lengths."""
    return np.array([[1.0, 1.0, 1.0], [0.0, 3.0, 0.0], [-1.0, 0.0, -1.0], [2.0, 0.0, 0.5]])


# ----------------------------------------------------------------------------------------
# Inference shared by both exercises
# ----------------------------------------------------------------------------------------

_PAIRING_IDS = {
    "cosine": "cosine-not-dot",
    "elementwise": "elementwise-not-summed",
    "sum_keys": "summed-over-wrong-axis",
    "sum_queries": "summed-over-wrong-axis",
    "sum_all": "summed-over-wrong-axis",
    "not_transposed": "keys-not-transposed",
}
_PAIRING_TEXT = {
    "cosine": "equals the dot products of the vectors normalised to length 1 (cosines)",
    "elementwise": "holds the feature-by-feature products, not their sums",
    "sum_keys": "sums the products over the keys instead of over the features",
    "sum_queries": "sums the products over the queries instead of over the features",
    "sum_all": "sums all products into one number",
    "not_transposed": "pairs a query with the columns of the keys (Q @ K)",
}


def _pairings(Q, K) -> dict:
    """Every classic way of pairing Q (seq_q, d_k) with K (seq_k, d_k), on a square K."""
    prod = Q[:, None, :] * K[None, :, :]  # (seq_q, seq_k, d_k)
    qn = Q / np.linalg.norm(Q, axis=-1, keepdims=True)
    kn = K / np.linalg.norm(K, axis=-1, keepdims=True)
    return {
        "dot": Q @ K.T,
        "cosine": qn @ kn.T,
        "elementwise": prod,
        "sum_keys": prod.sum(axis=1),
        "sum_queries": prod.sum(axis=0),
        "sum_all": prod.sum(axis=(1, 2)),
        "not_transposed": Q @ K,
    }


def _explain(y, candidates: dict, d_k: int):
    """(pairing, transposed, multiplier) such that y = multiplier · candidate (or its
    transpose); None when nothing explains y."""
    best = None
    for name, cand in candidates.items():
        for transposed in (False, True):
            c = np.swapaxes(cand, -1, -2) if (transposed and cand.ndim >= 2) else cand
            if transposed and cand.ndim < 2:
                continue
            if c.shape != y.shape:
                continue
            denom = float((c * c).sum())
            if denom == 0.0:
                continue
            mult = float((c * y).sum()) / denom
            resid = float(np.abs(y - mult * c).max())
            if resid <= 1e-6 * (1.0 + float(np.abs(y).max())):
                if best is None or (name, transposed) == ("dot", False):
                    best = (name, transposed, mult)
    return best


def _findings(explained, d_k: int, *, where: str, transposed_id: str | None):
    if explained is None:
        return []
    name, transposed, mult = explained
    found = []
    if name != "dot":
        found.append(Finding(_PAIRING_IDS[name], f"on {where}, your result {_PAIRING_TEXT[name]}."))
    if transposed and transposed_id is not None:
        found.append(
            Finding(
                transposed_id, f"on {where}, your result has one row per key: it is transposed."
            )
        )
    if abs(mult - 1.0) > 1e-6:
        if abs(mult - d_k**-0.5) < 1e-6:
            found.append(
                Finding(
                    "scaled-too-early",
                    f"on {where}, your scores are {fmt(mult)} = 1/√{d_k} times the dot products.",
                )
            )
        else:
            return []  # a multiplier no known mistake explains
    return found


_PROBE = np.random.default_rng(3101)
_PROBE_Q = _PROBE.standard_normal((3, 4))  # seq_q=3, d_k=4
_PROBE_K = _PROBE.standard_normal((4, 4)) * np.array([[0.5], [1.0], [2.0], [3.0]])  # seq_k=4


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


def _relevance_build(*, pairing="dot", scale=None):
    """relevance_scores with the given choices; the defaults give the correct function."""

    def fn(query, keys):
        prod = keys * query  # (seq_k, d_k)
        y = {
            "dot": lambda: keys @ query,
            "cosine": lambda: _rel_cosine(query, keys),
            "elementwise": lambda: prod,
            "sum_keys": lambda: prod.sum(axis=0),
            "not_transposed": lambda: query @ keys,
        }[pairing]()
        return y / np.sqrt(query.shape[-1]) if scale == "sqrt" else y

    return fn


def _infer_relevance(learner) -> list[Finding]:
    q, K = _PROBE_Q[0], _PROBE_K
    o = learner(q.copy(), K.copy())
    y = o.array(0) if o.ok and o.arity == 1 else None
    if y is None and o.ok and type(o.value) in (float, np.float64, np.float32):
        y = np.asarray(float(o.value))  # one number for all keys
    if y is None or y.dtype == bool:
        return []
    cands = {n: c[0] for n, c in _pairings(q[None], K).items() if n != "sum_all"}
    cands["sum_keys"] = (K * q).sum(axis=0)
    cands["sum_all"] = np.asarray((K * q).sum())
    explained = _explain(np.asarray(y), cands, 4)
    return _findings(explained, 4, where="a query (4,) and keys (4, 4)", transposed_id=None)


register(
    Exercise(
        name="relevance_scores",
        summary="relevance_scores(query, keys) -> (seq_k,): the dot product of the query "
        "with each key",
        reference=_relevance_reference,
        make_cases=_relevance_cases,
        make_hidden_cases=_relevance_hidden_cases,
        forbidden=_SCORES,
        infer=_infer_relevance,
        build=_relevance_build,
        misconceptions=(
            Misconception(
                "cosine-not-dot",
                "The query and the keys are scaled to length 1 before they are compared, "
                "which gives cosine similarity: it keeps only the angle. Attention uses the "
                "plain dot product, in which a longer key gets a larger score; that length is "
                "information the model can use.",
                (_rel_cosine,),
                {"pairing": "cosine"},
                question="Make one key twice as long (same direction) and call your function "
                "again: does that key's score change? What should a dot product do when one "
                "vector doubles?",
            ),
            Misconception(
                "elementwise-not-summed",
                "You return the feature-by-feature products, one row of d_k numbers per key. "
                "A dot product multiplies the features pair by pair and then adds them up, so "
                "each key gets one number.",
                (_rel_elementwise,),
                {"pairing": "elementwise"},
                question="What shape is your result, and what shape should one score per key "
                "have? What is left to do with the products of one key?",
            ),
            Misconception(
                "summed-over-wrong-axis",
                "The products are added up over the wrong axis: over the keys (one number per "
                "feature) or over everything (one number in all). Each key needs its own sum, "
                "taken over the features only.",
                (_rel_sum_axis0, _rel_sum_all),
                {"pairing": "sum_keys"},
                question="How many numbers does your result hold, and how many keys are "
                "there? Over which axis of the products did you add?",
            ),
            Misconception(
                "keys-not-transposed",
                "The query is multiplied with the columns of the keys (one feature across all "
                "keys) instead of its rows (one key each). The keys are stored one key per "
                "row, so each score must pair the query with a row; the product only runs at "
                "all when there are as many keys as features.",
                (_rel_not_transposed,),
                {"pairing": "not_transposed"},
                question="Your function runs only when seq_k equals d_k. Write out the first "
                "score by hand: which numbers of the keys array does your product pair with "
                "the query, a row or a column?",
            ),
            Misconception(
                "scaled-too-early",
                "The scores are divided by the square root of d_k. That scaling belongs to "
                "attention (lesson 04), but this exercise asks for the plain dot products, "
                "unscaled.",
                (_rel_scaled,),
                {"scale": "sqrt"},
                question="Divide your scores by the plain dot products: what single factor "
                "is left, and does the exercise ask for one?",
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


def _mat_paired(Q, K):
    return (Q * K).sum(axis=-1)  # (seq,): query i with key i only; runs when seq_q == seq_k


def _mat_scaled(Q, K):
    return Q @ K.T / np.sqrt(Q.shape[-1])


def _matrix_build(*, pairing="dot", layout="rows", scale=None):
    """score_matrix with the given choices; the defaults give the correct function."""

    def fn(Q, K):
        y = {
            "dot": lambda: Q @ K.T,
            "cosine": lambda: _mat_cosine(Q, K),
            "elementwise": lambda: _mat_elementwise(Q, K),
            "sum_keys": lambda: _mat_sum_keys(Q, K),
            "not_transposed": lambda: Q @ K,
            "paired": lambda: _mat_paired(Q, K),
        }[pairing]()
        if layout == "transposed" and y.ndim < 2:
            return y
        if layout == "transposed":
            y = np.swapaxes(y, -1, -2)
        return y / np.sqrt(Q.shape[-1]) if scale == "sqrt" else y

    return fn


_PROBE_Q_SAME = _PROBE.standard_normal((4, 4))  # seq_q == seq_k == 4


def _infer_matrix(learner) -> list[Finding]:
    o = learner(_PROBE_Q.copy(), _PROBE_K.copy())
    y = o.array(0) if o.ok and o.arity == 1 else None
    if y is None:
        return _infer_paired(learner)
    if y.dtype == bool:
        return []
    cands = _pairings(_PROBE_Q, _PROBE_K)
    explained = _explain(np.asarray(y), cands, 4)
    where = "Q (3, 4) and K (4, 4)"
    return _findings(explained, 4, where=where, transposed_id="scores-transposed")


def _infer_paired(learner) -> list[Finding]:
    """A function that raises on 3 queries and 4 keys but runs on 4 and 4: does it pair
    query i with key i only (one number per position)?"""
    Q, K = _PROBE_Q_SAME, _PROBE_K
    o = learner(Q.copy(), K.copy())
    y = o.array(0) if o.ok and o.arity == 1 else None
    if y is None or y.dtype == bool or y.shape != (4,):
        return []
    explained = _explain(np.asarray(y), {"paired": (Q * K).sum(axis=-1)}, 4)
    if explained is None:
        return []
    found = [
        Finding(
            "paired-by-position",
            "with 3 queries and 4 keys your function raises; with 4 queries and 4 keys it "
            "returns 4 numbers, query i's dot product with key i for each i.",
        )
    ]
    if abs(explained[2] - 4**-0.5) < 1e-6:
        found.append(
            Finding(
                "scaled-too-early",
                f"with 4 queries and 4 keys your numbers are {fmt(explained[2])} = 1/√4 "
                "times the dot products.",
            )
        )
    elif abs(explained[2] - 1.0) > 1e-6:
        return []
    return found


register(
    Exercise(
        name="score_matrix",
        summary="score_matrix(Q, K) -> (seq_q, seq_k): every query against every key, Q @ Kᵀ",
        reference=_matrix_reference,
        make_cases=_matrix_cases,
        make_hidden_cases=_matrix_hidden_cases,
        forbidden=_SCORES,
        infer=_infer_matrix,
        build=_matrix_build,
        exclusive=(
            # a 3-D array of products has no (seq_k, seq_q) layout to get wrong
            frozenset({"elementwise-not-summed", "scores-transposed"}),
            # summed over the keys, transposed: (d_k, seq_q), which on square K is a sum
            # over queries of another layout; summed over the queries covers it
            frozenset({"summed-over-wrong-axis", "scores-transposed"}),
            # (Q @ K)ᵀ = Kᵀ @ Qᵀ: no longer reads as one mistake in the pairing of rows
            frozenset({"keys-not-transposed", "scores-transposed"}),
            # one number per position: no (seq_k, seq_q) layout to get wrong
            frozenset({"paired-by-position", "scores-transposed"}),
        ),
        misconceptions=(
            Misconception(
                "cosine-not-dot",
                "The rows of Q and K are scaled to length 1 before they are compared, which "
                "gives cosine similarity: only the angles count. Attention uses the plain dot "
                "product, in which a longer key gets larger scores.",
                (_mat_cosine,),
                {"pairing": "cosine"},
                question="Double one key (same direction) and call your function again: does "
                "that key's column of scores change? What should a dot product do?",
            ),
            Misconception(
                "elementwise-not-summed",
                "You return every product of every feature, one number per query, key and "
                "feature. Each score is the sum of a query's and a key's products over the "
                "features: one number per query and key.",
                (_mat_elementwise,),
                {"pairing": "elementwise"},
                question="How many axes does your result have, and how many should a table "
                "of queries against keys have? What is left to do with the products?",
            ),
            Misconception(
                "summed-over-wrong-axis",
                "The products are added over a position axis (the keys or the queries) "
                "instead of the features. Score [i, j] adds up query i's and key j's products "
                "over the features only.",
                (_mat_sum_keys, _mat_sum_queries),
                {"pairing": "sum_keys"},
                question="What shape is your result, and which sizes of the inputs does it "
                "carry? Over which axis did you add the products?",
            ),
            Misconception(
                "scores-transposed",
                "The table is the wrong way round: one row per key and one column per query. "
                "In this course rows are queries and columns are keys, so the result has "
                "shape (seq_q, seq_k).",
                (_mat_transposed,),
                {"layout": "transposed"},
                question="What shape is your result, and which of its sizes is the number of "
                "queries? Is row i of your table query i?",
            ),
            Misconception(
                "keys-not-transposed",
                "The features of each query are paired with the columns of K (one feature of "
                "every key) instead of its rows (one key each). Every score compares a row of "
                "Q with a row of K; the product you wrote only runs when seq_k equals d_k.",
                (_mat_not_transposed,),
                {"pairing": "not_transposed"},
                question="Your function runs only when seq_k equals d_k. Write score [0, 0] "
                "out by hand: which numbers of K does it pair with query 0, a row or a "
                "column?",
            ),
            Misconception(
                "paired-by-position",
                "Each query is compared with the key at its own position only, which gives one "
                "number per position and only runs when there are as many queries as keys. "
                "The score matrix compares every query with every key: seq_q times seq_k "
                "numbers.",
                (_mat_paired,),
                {"pairing": "paired"},
                question="How many numbers does your result hold, and how many pairs of a "
                "query and a key are there? Is query 0 ever compared with key 1?",
            ),
            Misconception(
                "scaled-too-early",
                "The scores are divided by the square root of d_k. Attention does that "
                "(lesson 04), but this exercise asks for the raw dot products.",
                (_mat_scaled,),
                {"scale": "sqrt"},
                question="Divide your scores by the plain dot products: what single factor "
                "is left, and does the exercise ask for one?",
            ),
        ),
    )
)
