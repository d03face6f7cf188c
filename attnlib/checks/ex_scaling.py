"""Exercises of lesson 04: why the scores are divided by √d_k.

* ``score_variance(d_k, scale=1.0, var_q=1.0, var_k=1.0) -> float`` — predict the
  variance of ``scale · q·k`` for independent zero-mean components;
* ``softmax_jacobian(p) -> (..., seq_k, seq_k)`` — ``diag(p) − p pᵀ`` for a row or a batch
  of rows of weights;
* ``choose_scale(raw_scores, min_entropy) -> float`` — the largest scale whose weights
  keep a mean entropy (nats, over the rows) of at least ``min_entropy``.

Inputs are numpy float64. Batched Jacobian cases have batch ≠ seq_k, so that a function
that only handles one row cannot pass by a broadcasting accident. The hidden cases (run
only by the grader) draw their sizes, parameters and numbers from generators seeded with
fixed integers, which the grader mixes with a seed of its own per run
(``attnlib.checks._core.hidden_seed``): a table of answers to the visible cases does not
pass them.
"""

from __future__ import annotations

import math

import numpy as np

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, fmt, tolerances
from attnlib.core import softmax as _softmax
from attnlib.tasks.scaling import choose_scale as _choose_scale
from attnlib.tasks.scaling import predicted_score_variance as _predicted_score_variance
from attnlib.tasks.scaling import softmax_jacobian as _softmax_jacobian

# ----------------------------------------------------------------------------------------
# score_variance(d_k, scale=1.0, var_q=1.0, var_k=1.0) -> float
# ----------------------------------------------------------------------------------------


def _variance_cases() -> list[Case]:
    return [
        Case("d_k=64, unscaled, unit variances", (64,)),
        Case("d_k=256, scale=1/16 (= 1/√256)", (256,), {"scale": 1 / 16}),
        Case("d_k=16, scale=0.5", (16,), {"scale": 0.5}),
        Case("d_k=10, var_q=2, var_k=3", (10,), {"var_q": 2.0, "var_k": 3.0}),
        Case(
            "d_k=9, scale=3, var_q=0.5, var_k=4", (9,), {"scale": 3.0, "var_q": 0.5, "var_k": 4.0}
        ),
    ]


def _variance_hidden_cases() -> list[Case]:
    # Sizes and parameters drawn from the generator, so that the grader's seed changes them
    # too (attnlib.checks._core.hidden_seed); the last case passes them positionally, as
    # the lesson itself calls score_variance.
    rng = np.random.default_rng(4401)
    d = [int(n) for n in rng.integers(2, 1025, size=4)]
    scale, var_q, var_k = (float(v) for v in rng.uniform(0.05, 3.0, size=3))
    var_q2, var_k2, scale2 = (float(v) for v in rng.uniform(0.1, 5.0, size=3))
    return [
        Case(f"hidden: d_k={d[0]}, scale=1/√d_k", (d[0],), {"scale": 1 / math.sqrt(d[0])}),
        Case(f"hidden: d_k={d[1]}, scale={scale:.3f}", (d[1],), {"scale": scale}),
        Case(
            f"hidden: d_k={d[2]}, var_q={var_q:.3f}, var_k={var_k:.3f}",
            (d[2],),
            {"var_q": var_q, "var_k": var_k},
        ),
        Case(
            f"hidden: score_variance({d[3]}, {scale2:.3f}, {var_q2:.3f}, {var_k2:.3f})",
            (d[3], scale2, var_q2, var_k2),
        ),
    ]


def _variance_build(*, width="d", scale_power=2, combine="multiply", returns="variance"):
    """score_variance with the given choices; the defaults give the correct function.

    ``width``: "d" (d_k), "sqrt" (√d_k) or "none"; ``scale_power``: 2 or 1; ``combine``:
    "multiply" (var_q · var_k) or "add" (var_q + var_k); ``returns``: "variance" or "std"
    (the square root of the whole result: the standard deviation).
    """

    def fn(d_k, scale=1.0, var_q=1.0, var_k=1.0):
        w = {"d": d_k, "sqrt": math.sqrt(d_k), "none": 1.0}[width]
        v = var_q * var_k if combine == "multiply" else var_q + var_k
        result = float(w * v * scale**scale_power)
        return math.sqrt(result) if returns == "std" else result

    return fn


def _infer_variance(learner) -> list[Finding]:
    """Vary one argument at a time from (d_k=16, scale=1, var_q=1, var_k=1) and read the
    factor it multiplies the result by: the width (4 for d_k, 2 for √d_k, 1 if missing), the
    scale (9 squared, 3 not) and the variances (6 multiplied, 2.5 added). Only when those
    factors, put together, reproduce the learner's results on two more calls are they named:
    a function wrong in another way gets no diagnosis rather than a misleading one."""

    def value(*args, **kwargs):
        o = learner(*args, **kwargs)
        v = o.value if o.ok else None
        if type(v) not in (float, int, np.float64, np.float32) or not math.isfinite(float(v)):
            return None
        return float(v)

    def near(a, b):
        return a is not None and math.isclose(a, b, rel_tol=1e-6)

    base = value(16, scale=1.0, var_q=1.0, var_k=1.0)
    if base is None or base == 0.0:
        return []
    ratios = [
        value(64, scale=1.0, var_q=1.0, var_k=1.0),
        value(16, scale=3.0, var_q=1.0, var_k=1.0),
        value(16, scale=1.0, var_q=2.0, var_k=3.0),
    ]
    if any(r is None for r in ratios):
        return []
    r_width, r_scale, r_var = (r / base for r in ratios)
    if near(r_width, 2.0) and near(r_scale, 3.0) and near(r_var, math.sqrt(6.0)):
        std = _variance_build(returns="std")
        if all(
            near(value(a, scale=s_, var_q=q, var_k=k), std(a, s_, q, k))
            for a, s_, q, k in ((9, 0.5, 2.0, 3.0), (100, 2.0, 0.5, 4.0))
        ):
            return [
                Finding(
                    "std-not-variance",
                    "going from d_k = 16 to 64 multiplies your result by 2, scale = 3 by 3, "
                    "and var_q = 2, var_k = 3 by 2.449 (= √6): every factor enters under a "
                    "square root.",
                )
            ]
    width = next(
        (w for w, r in (("d", 4.0), ("sqrt", 2.0), ("none", 1.0)) if near(r_width, r)), None
    )
    power = next((p for p, r in ((2, 9.0), (1, 3.0)) if near(r_scale, r)), None)
    combine = next((c for c, r in (("multiply", 6.0), ("add", 2.5)) if near(r_var, r)), None)
    if width is None or power is None or combine is None:
        return []
    model = _variance_build(width=width, scale_power=power, combine=combine)
    for args in ((16, 1.0, 1.0, 1.0), (9, 0.5, 2.0, 3.0), (100, 2.0, 0.5, 4.0)):
        if not near(value(args[0], scale=args[1], var_q=args[2], var_k=args[3]), model(*args)):
            return []
    found = []
    if width == "sqrt":
        found.append(
            Finding(
                "variance-is-sqrt-dk",
                "going from d_k = 16 to 64 multiplies your result by 2 (= √4), not 4.",
            )
        )
    elif width == "none":
        found.append(
            Finding(
                "variance-is-one",
                "going from d_k = 16 to 64 leaves your result unchanged.",
            )
        )
    if power == 1:
        found.append(Finding("scale-not-squared", "scale = 3 multiplies your result by 3, not 9."))
    if combine == "add":
        found.append(
            Finding(
                "variances-added",
                "var_q = 2, var_k = 3 give 2.5 times the result of var_q = var_k = 1 "
                "((2 + 3) / (1 + 1)), not 6 (= 2 · 3).",
            )
        )
    return found


register(
    Exercise(
        name="score_variance",
        summary="score_variance(d_k, scale, var_q, var_k) -> Var(scale · q·k)",
        reference=lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: _predicted_score_variance(
            d_k, scale, var_q, var_k
        ),
        make_cases=_variance_cases,
        make_hidden_cases=_variance_hidden_cases,
        rtol=1e-9,
        atol=1e-12,
        forbidden=("attnlib.tasks.scaling.predicted_score_variance",),
        infer=_infer_variance,
        build=_variance_build,
        exclusive=(
            frozenset({"variance-is-sqrt-dk", "variance-is-one"}),
            # the square root of a wrong variance: read as neither
            *(
                frozenset({"std-not-variance", other})
                for other in (
                    "variance-is-sqrt-dk",
                    "variance-is-one",
                    "scale-not-squared",
                    "variances-added",
                )
            ),  # fmt: skip
        ),
        misconceptions=(
            Misconception(
                "variance-is-sqrt-dk",
                "The square root of d_k is the standard deviation of the dot product, not its "
                "variance. The d_k products of the components are independent, so their "
                "variances add up: the variance is d_k times the variance of one product.",
                (
                    lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: (
                        math.sqrt(d_k) * var_q * var_k * scale**2
                    ),
                ),
                {"width": "sqrt"},
                question=(
                    "Going from d_k = 16 to 64 multiplies your result by 2. By how much should "
                    "four times as many independent terms multiply the variance of their sum?"
                ),
            ),
            Misconception(
                "variance-is-one",
                "The width is missing: a sum of d_k independent products has d_k times the "
                "variance of one product, which is exactly why the scores need scaling.",
                (lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: var_q * var_k * scale**2,),
                {"width": "none"},
                question=(
                    "Does your result change when d_k grows? How many products does one dot "
                    "product add up, and what happens to the variance of a sum of independent "
                    "terms?"
                ),
            ),
            Misconception(
                "scale-not-squared",
                "Multiplying a random number by c multiplies its variance by c squared, not by "
                "c: the variance is an average of squared deviations.",
                (lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: d_k * var_q * var_k * scale,),
                {"scale_power": 1},
                question=(
                    "Scale = 3 multiplies your result by 3. If every score is three times "
                    "larger, how much larger is each squared deviation from the mean?"
                ),
            ),
            Misconception(
                "variances-added",
                "The variances of a query component and a key component are added, but their "
                "product's variance is the product of the two: for independent zero-mean "
                "numbers the expected square of a product is the product of the expected "
                "squares.",
                (lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: d_k * (var_q + var_k) * scale**2,),
                {"combine": "add"},
                question=(
                    "Your result for var_q = 2, var_k = 3 is 2.5 times that for 1 and 1. What "
                    "is the expected square of a product of two independent zero-mean numbers, "
                    "in terms of their variances?"
                ),
            ),
            Misconception(
                "std-not-variance",
                "You return the standard deviation, the square root of the variance: every "
                "factor enters under a square root. The exercise asks for the variance itself, "
                "d_k times var_q times var_k times the scale squared.",
                (_variance_build(returns="std"),),
                {"returns": "std"},
                question=(
                    "Four times the width multiplies your result by 2 and three times the scale "
                    "by 3. Is that how a variance grows, or how its square root grows?"
                ),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# softmax_jacobian(p) -> (..., seq_k, seq_k)
# ----------------------------------------------------------------------------------------


def _jacobian_cases() -> list[Case]:
    rng = np.random.default_rng(404)
    return [
        Case("one row of 5 weights", (_softmax(rng.standard_normal(5)),)),
        Case("batch of 3 rows of 5 weights", (_softmax(rng.standard_normal((3, 5)) * 2),)),
        Case("batch (2, 3) of rows of 4 weights", (_softmax(rng.standard_normal((2, 3, 4))),)),
        Case("uniform row of 4", (np.full(4, 0.25),)),
        Case("nearly one-hot row", (_softmax(np.array([8.0, 0.0, -1.0, 0.5, 2.0, 0.1])),)),
    ]


def _jacobian_hidden_cases() -> list[Case]:
    # Shapes drawn from the generator too (batch ≠ seq_k), so the grader's seed changes them.
    rng = np.random.default_rng(4402)
    seq_k = [int(n) for n in rng.integers(3, 10, size=3)]
    batch = int(rng.integers(2, 7))
    batch += batch == seq_k[1]  # never square
    outer = [int(n) for n in rng.integers(2, 5, size=2)]

    def weights(shape):
        return _softmax(rng.standard_normal(shape) * rng.uniform(0.5, 3.0))

    return [
        Case(f"hidden: one row of {seq_k[0]} weights", (weights(seq_k[0]),)),
        Case(
            f"hidden: batch of {batch} rows of {seq_k[1]} weights",
            (weights((batch, seq_k[1])),),
        ),
        Case(
            f"hidden: batch {tuple(outer)} of rows of {seq_k[2]} weights",
            (weights((*outer, seq_k[2])),),
        ),
    ]


def _diag_embed(p):
    return p[..., :, None] * np.eye(p.shape[-1])  # (..., seq_k, seq_k)


def _outer(p):
    return p[..., :, None] * p[..., None, :]  # (..., seq_k, seq_k)


def _jac_batch_mixed(p):
    # The outer product summed over every row of the batch (p.T @ p) instead of per row.
    flat = p.reshape(-1, p.shape[-1])
    return _diag_embed(p) - flat.T @ flat


def _jac_one_row_only(p):
    # np.diag builds a matrix from a 1-D row but *extracts a diagonal* from a 2-D array.
    return np.diag(p) - np.outer(p, p) if p.ndim == 1 else np.diag(p) - _outer(p)


def _jacobian_build(*, terms="both", batch="per_row"):
    """softmax_jacobian with the given choices; the defaults give the correct function.

    ``terms``: "both" (diag(p) − p pᵀ), "diag" (diag(p) only), "outer" (−p pᵀ only),
    "flipped" (p pᵀ − diag(p)) or "diagonal" (diag(p − p²): the diagonal alone);
    ``batch``: "per_row", "mixed" (the outer product summed
    over the batch) or "one_row" (np.diag / np.outer, which only handle one 1-D row).
    """
    if terms == "diagonal":  # each weight's own derivative p_i (1 - p_i), off-diagonals 0
        return lambda p: np.diag(p - p * p) if batch == "one_row" else _diag_embed(p - p * p)
    a, b = {"both": (1, -1), "diag": (1, 0), "outer": (0, -1), "flipped": (-1, 1)}[terms]

    def fn(p):
        if batch == "one_row":
            return a * np.diag(p) + b * (np.outer(p, p) if p.ndim == 1 else _outer(p))
        if batch == "mixed":
            flat = p.reshape(-1, p.shape[-1])
            return a * _diag_embed(p) + b * (flat.T @ flat)
        return a * _diag_embed(p) + b * _outer(p)

    return fn


_JAC_ROW = _softmax(np.array([0.4, -1.1, 1.7, 0.2, -0.3]))  # (5,)
_JAC_BATCH = _softmax(
    np.array([[0.4, -1.1, 1.7, 0.2, -0.3], [1.2, 0.5, -0.7, 0.0, 2.1], [-0.2, 0.9, 0.3, -1.5, 0.6]])
)


def _fit_terms(J, p, eps: float = 2.2e-16):
    """(a, b) with J = a·diag(p) + b·p pᵀ (within the output's precision), or None."""
    rel, abs_ = tolerances(eps)
    basis = np.stack([np.diag(p).ravel(), np.outer(p, p).ravel()], axis=1)  # (n², 2)
    coef, *_ = np.linalg.lstsq(basis, J.ravel(), rcond=None)
    if np.abs(basis @ coef - J.ravel()).max() > abs_ + rel * np.abs(J).max():
        return None
    return tuple(float(np.round(c, 3)) + 0.0 for c in coef)


def _infer_jacobian(learner) -> list[Finding]:
    o = learner(_JAC_ROW.copy())
    J = o.array(0) if o.ok and o.arity == 1 else None
    if J is None or J.shape != (5, 5):
        return []
    rel, abs_ = tolerances(o.eps)
    if close(J, np.diag(_JAC_ROW - _JAC_ROW**2), rel, abs_):
        found = [
            Finding(
                "jacobian-diagonal-only",
                "for one row p, your matrix has p_i (1 − p_i) on its diagonal and 0 everywhere "
                "else.",
            )
        ]
        ob = learner(_JAC_BATCH.copy())
        Jb = ob.array(0) if ob.ok and ob.arity == 1 else None
        P = _JAC_BATCH
        if Jb is None or not close(Jb, _diag_embed(P - P * P), *tolerances(ob.eps)):
            what = ob.error()[:100] if not ob.ok else f"shape {None if Jb is None else Jb.shape}"
            found.append(
                Finding(
                    "jacobian-one-row-only",
                    f"right for one row, but for a batch of 3 rows of 5 weights you return: "
                    f"{what}.",
                )
            )
        return found
    ab = _fit_terms(J, _JAC_ROW, o.eps)
    terms = {
        (1.0, -1.0): None,
        (1.0, 0.0): "jacobian-missing-outer",
        (0.0, -1.0): "jacobian-missing-diag",
        (-1.0, 1.0): "jacobian-sign",
    }
    if ab not in terms:
        return []
    found = []
    if terms[ab] is not None:
        a, b = ab
        found.append(
            Finding(
                terms[ab],
                f"for one row p, your matrix is {fmt(a)}·diag(p) "
                f"{'+' if b >= 0 else '−'} {fmt(abs(b))}·p pᵀ.",
            )
        )
    a, b = ab
    ob = learner(_JAC_BATCH.copy())
    Jb = ob.array(0) if ob.ok and ob.arity == 1 else None
    P = _JAC_BATCH
    per_row = a * _diag_embed(P) + b * _outer(P)
    mixed = a * _diag_embed(P) + b * (P.T @ P)
    rel, abs_ = tolerances(ob.eps)
    if Jb is not None and close(Jb, per_row, rel, abs_):
        return found
    if Jb is not None and b != 0 and close(Jb, mixed, rel, abs_):
        found.append(
            Finding(
                "jacobian-batch-mixed",
                "for a batch of 3 rows, the outer-product part of every row's matrix is p.T @ p, "
                "summed over all rows.",
            )
        )
        return found
    what = (
        ob.error()[:100]
        if not ob.ok
        else f"shape {None if Jb is None else Jb.shape}, values not per row"
    )
    found.append(
        Finding(
            "jacobian-one-row-only",
            f"right for one row, but for a batch of 3 rows of 5 weights you return: {what}.",
        )
    )
    return found


register(
    Exercise(
        name="softmax_jacobian",
        summary="softmax_jacobian(p) -> diag(p) − p pᵀ, shape (..., seq_k, seq_k)",
        reference=lambda p: _softmax_jacobian(p),
        make_cases=_jacobian_cases,
        make_hidden_cases=_jacobian_hidden_cases,
        rtol=1e-7,
        atol=1e-10,
        forbidden=("attnlib.tasks.scaling.softmax_jacobian",),
        infer=_infer_jacobian,
        build=_jacobian_build,
        exclusive=(
            # without the outer product there is no outer product to mix across the batch
            frozenset({"jacobian-missing-outer", "jacobian-batch-mixed"}),
            frozenset({"jacobian-diagonal-only", "jacobian-batch-mixed"}),
        ),
        misconceptions=(
            Misconception(
                "jacobian-missing-outer",
                "Only the diagonal term: that treats each weight as depending on its own score "
                "alone. Every weight shares the normalising sum, so raising score j lowers "
                "every other weight; the outer product of p with itself is subtracted "
                "everywhere.",
                (_diag_embed,),
                {"terms": "diag"},
                question=(
                    "Your matrix is zero off the diagonal. If score j rises, what happens to "
                    "the normalising sum, and so to every other weight?"
                ),
            ),
            Misconception(
                "jacobian-missing-diag",
                "The Kronecker delta term is missing. The derivative of p_i by s_j is p_i times "
                "(delta_ij minus p_j), so the diagonal carries an extra p_i.",
                (lambda p: -_outer(p),),
                {"terms": "outer"},
                question=(
                    "Your diagonal is negative. Raising a score raises its own weight: which "
                    "term of the derivative makes the diagonal positive?"
                ),
            ),
            Misconception(
                "jacobian-sign",
                "The sign is flipped. Raising a score raises its own weight, so the diagonal, "
                "p_i times (1 minus p_i), is positive, and the off-diagonal entries are "
                "negative.",
                (lambda p: _outer(p) - _diag_embed(p),),
                {"terms": "flipped"},
                question=(
                    "What sign do the diagonal entries of your matrix have? When score i rises, "
                    "does weight i rise or fall?"
                ),
            ),
            Misconception(
                "jacobian-diagonal-only",
                "Only the diagonal is filled, with each weight's derivative by its own score, "
                "p_i times (1 minus p_i). The off-diagonal entries are not 0: raising score j "
                "lowers weight i by p_i times p_j, because all the weights share one "
                "normalising sum.",
                (_jacobian_build(terms="diagonal"),),
                {"terms": "diagonal"},
                question=(
                    "Your matrix is zero off the diagonal. When score j rises, does weight i "
                    "(for i not j) stay where it is? What does the shared sum do?"
                ),
            ),
            Misconception(
                "jacobian-batch-mixed",
                "The outer product is summed over the batch, mixing different rows: every row's "
                "matrix gets the others' products too. Each row of weights has its own "
                "Jacobian, built from that row alone.",
                (_jac_batch_mixed,),
                {"batch": "mixed"},
                question=(
                    "For a batch of rows, does one row's matrix change when you change another "
                    "row? Which axis did your outer product sum over?"
                ),
            ),
            Misconception(
                "jacobian-one-row-only",
                "It works for one row but not for a batch: the numpy helpers that build a "
                "diagonal matrix and an outer product take a single 1-D row only (and the "
                "diagonal helper extracts a diagonal from a 2-D input instead of building one). "
                "Built with broadcasting over the last axis, the same formula works for any "
                "number of leading axes.",
                (_jac_one_row_only,),
                {"batch": "one_row"},
                question=(
                    "Your function is right for one row. What shape does it return for a batch "
                    "of 3 rows of 5, and what does each step you call do with a 2-D input?"
                ),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# choose_scale(raw_scores, min_entropy) -> float
# ----------------------------------------------------------------------------------------


def _scale_cases() -> list[Case]:
    rng = np.random.default_rng(4004)

    def raw(n_rows, seq_k, d_k):
        q = rng.standard_normal((n_rows, d_k))
        k = rng.standard_normal((n_rows, seq_k, d_k))
        return np.einsum("nd,nkd->nk", q, k)  # (n_rows, seq_k)

    return [
        Case("20 rows of 8 keys, d_k=64, min_entropy=1.5", (raw(20, 8, 64), 1.5)),
        Case("50 rows of 16 keys, d_k=256, min_entropy=2.0", (raw(50, 16, 256), 2.0)),
        Case("5 rows of 6 keys, d_k=4, min_entropy=0.5", (raw(5, 6, 4), 0.5)),
        Case(
            "2 rows of 3 hand-made scores, min_entropy=0.9",
            (np.array([[1.0, 0.0, -1.0], [4.0, 2.0, 0.0]]), 0.9),
        ),
    ]


def _scale_hidden_cases() -> list[Case]:
    # Sizes and budgets drawn from the generator (the budget strictly between 0 and
    # log(seq_k), as the exercise promises), so the grader's seed changes them.
    rng = np.random.default_rng(4403)
    cases = []
    for _ in range(3):
        n_rows, seq_k = int(rng.integers(2, 31)), int(rng.integers(3, 17))
        d_k = int(rng.choice([4, 16, 64, 256]))
        q = rng.standard_normal((n_rows, d_k))
        k = rng.standard_normal((n_rows, seq_k, d_k))
        raw = np.einsum("nd,nkd->nk", q, k)  # (n_rows, seq_k)
        h = round(float(rng.uniform(0.2, 0.8)) * math.log(seq_k), 3)
        label = f"hidden: {n_rows} rows of {seq_k} keys, d_k={d_k}, min_entropy={h}"
        cases.append(Case(label, (raw, h)))
    return cases


def _entropies(c, s, log=np.log):
    p = _softmax(c * s)
    return -(p * log(np.where(p > 0, p, 1.0))).sum(-1)  # (n_rows,)


def _bisect(ok):
    lo, hi = 0.0, 1.0
    while ok(hi):
        lo, hi = hi, 2 * hi
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _scale_bits(s, h):
    return _bisect(lambda c: _entropies(c, s, np.log2).mean() >= h)


def _scale_temperature(s, h):
    return 1.0 / _choose_scale(s, h)


def _scale_worst_row(s, h):
    return _bisect(lambda c: _entropies(c, s).min() >= h)


def _scale_summed(s, h):
    return _bisect(lambda c: _entropies(c, s).sum() >= h)


def _scale_mean_weights(s, h):
    def ok(c):
        p = _softmax(c * s).mean(axis=0)  # (seq_k,): one averaged row
        return -(p * np.log(p)).sum() >= h

    return _bisect(ok)


def _choose_build(*, units="nats", aggregate="mean", returns="scale"):
    """choose_scale with the given choices; the defaults give the correct function.

    ``units``: "nats" or "bits"; ``aggregate``: "mean" (of the rows' entropies), "min" (the
    worst row), "sum" (the rows' entropies added up) or "of_mean" (the entropy of the averaged
    weights); ``returns``: "scale" or
    "temperature" (1/scale).
    """
    log = np.log2 if units == "bits" else np.log

    def fn(s, h):
        def ok(c):
            if aggregate == "min":
                return _entropies(c, s, log).min() >= h
            if aggregate == "sum":
                return _entropies(c, s, log).sum() >= h
            if aggregate == "of_mean":
                p = _softmax(c * s).mean(axis=0)  # (seq_k,)
                return -(p * log(np.where(p > 0, p, 1.0))).sum() >= h
            return _entropies(c, s, log).mean() >= h

        c = _bisect(ok)
        return 1.0 / c if returns == "temperature" else c

    return fn


_CS_ROWS = np.einsum(
    "nd,nkd->nk",
    np.random.default_rng(4005).standard_normal((20, 16)),
    np.random.default_rng(4006).standard_normal((20, 8, 16)),
)  # (20, 8): raw dot products at d_k = 16
_CS_ROWS[:, 0] += 30.0  # one key every row prefers: the averaged weights can sharpen too
_CS_BUDGET = 1.5  # nats; below log2(8) = 3, so a budget in bits is reachable too


def _infer_choose(learner) -> list[Finding]:
    o = learner(_CS_ROWS.copy(), _CS_BUDGET)
    v = o.value if o.ok else None
    if type(v) not in (float, np.float64, np.float32) or not math.isfinite(float(v)) or v <= 0:
        return []
    v = float(v)
    for units in ("nats", "bits"):
        for aggregate in ("mean", "min", "sum", "of_mean"):
            c = _choose_build(units=units, aggregate=aggregate)(_CS_ROWS, _CS_BUDGET)
            for returns, value in (("scale", c), ("temperature", 1.0 / c)):
                if math.isclose(v, value, rel_tol=1e-4):
                    return _choose_findings(units, aggregate, returns, v)
    return []


def _choose_findings(units, aggregate, returns, v) -> list[Finding]:
    where = f"for 20 rows of 8 keys and a budget of {_CS_BUDGET} nats you return {fmt(v)}"
    found = []
    if units == "bits":
        found.append(Finding("entropy-in-bits", f"{where}: the scale that budget allows in bits."))
    if returns == "temperature":
        found.append(Finding("temperature-not-scale", f"{where}: one over the scale it allows."))
    if aggregate == "min":
        found.append(Finding("worst-row-entropy", f"{where}: what keeps every row above it."))
    if aggregate == "sum":
        found.append(
            Finding(
                "entropy-summed-over-rows",
                f"{where}: what keeps the rows' entropies, added up, above it.",
            )
        )
    if aggregate == "of_mean":
        found.append(
            Finding(
                "entropy-of-mean-weights", f"{where}: what keeps the averaged weights above it."
            )
        )
    return found


register(
    Exercise(
        name="choose_scale",
        summary="choose_scale(raw_scores, min_entropy) -> largest scale keeping mean entropy",
        reference=lambda raw_scores, min_entropy: _choose_scale(raw_scores, min_entropy),
        make_cases=_scale_cases,
        make_hidden_cases=_scale_hidden_cases,
        rtol=1e-4,
        atol=1e-9,
        forbidden=("attnlib.tasks.scaling.choose_scale",),
        infer=_infer_choose,
        build=_choose_build,
        misconceptions=(
            Misconception(
                "entropy-in-bits",
                "The entropy is measured in bits, with the base-2 logarithm, while the budget "
                "is in nats, which use the natural logarithm. The same weights measure log2(e), "
                "about 1.44, times more in bits.",
                (_scale_bits,),
                {"units": "bits"},
                question=(
                    "In which unit is the budget given, and which logarithm measures entropy in "
                    "that unit? Which one did you use?"
                ),
            ),
            Misconception(
                "temperature-not-scale",
                "You return a temperature, the number the scores are divided by, instead of the "
                "scale that multiplies them: one is one over the other.",
                (_scale_temperature,),
                {"returns": "temperature"},
                question=(
                    "Does your function return a number that multiplies the scores or one that "
                    "divides them? Which does the exercise ask for?"
                ),
            ),
            Misconception(
                "worst-row-entropy",
                "Every row is required to stay above the budget (the smallest entropy counts). "
                "The rule is about the mean entropy over the rows, which allows a larger scale.",
                (_scale_worst_row,),
                {"aggregate": "min"},
                question=(
                    "Which rows' entropies does your condition look at: all of them on average, "
                    "or the smallest one? What does the exercise's rule ask?"
                ),
            ),
            Misconception(
                "entropy-summed-over-rows",
                "The rows' entropies are added up instead of averaged, so the condition grows "
                "with the number of rows and allows far sharper weights. The budget is for the "
                "mean entropy of one row.",
                (_scale_summed,),
                {"aggregate": "sum"},
                question=(
                    "Would your answer change if the same rows were repeated twice? Should it? "
                    "How do you combine the rows' entropies?"
                ),
            ),
            Misconception(
                "entropy-of-mean-weights",
                "You took the entropy of the averaged weights. Averaging the rows first makes "
                "peaked rows look spread out when they peak at different keys; each row's "
                "entropy comes first, then their average.",
                (_scale_mean_weights,),
                {"aggregate": "of_mean"},
                question=(
                    "Did you average the weights or the entropies? If two rows peak at "
                    "different keys, what is the entropy of their average compared with their "
                    "own?"
                ),
            ),
        ),
    )
)
