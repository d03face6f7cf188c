"""Exercises of lesson 06 (learning keys by backprop), numpy.

* ``attention_backward(q, k, v, d_out) -> (dq, dk, dv)`` — the backward pass of attention
  by hand;
* ``weight_grads(x_q, x_kv, W_q, W_k, W_v, d_out) -> (dW_q, dW_k, dW_v)`` — the gradients
  reaching projection weights stored like ``nn.Linear.weight``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from attnlib.backprop import attention_backward as _attention_backward
from attnlib.checks._cases import normal_cases
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, fmt, tolerances

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
    (the row sum Σ A·dA taken over queries — the same as ``corr_axis=-2``), "unweighted"
    (Σ dA instead of Σ A·dA) or "noA" (dA − Σ A·dA, without the leading factor A).
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
        if correction == "noA":
            dS = dA - (A * dA).sum(axis=-1, keepdims=True)
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
                "with seq_q = seq_k = 3 row j of your dv is built from row j of the weights "
                "(what query j gave out), not from column j (what key j received).",
            )
        )
    dA = d_out @ v.T
    structures = (
        ("full", A * (dA - (A * dA).sum(axis=-1, keepdims=True))),
        ("diag", A * dA),
        ("col", A * (dA - (A * dA).sum(axis=-2, keepdims=True))),
        ("unweighted", A * (dA - dA.sum(axis=-1, keepdims=True))),
        ("noA", dA - (A * dA).sum(axis=-1, keepdims=True)),
    )
    D = dq @ np.linalg.pinv(k)  # dq = D @ k: D should be dS / √d_k
    X = dk @ np.linalg.pinv(q)  # dk = X @ q: X should be dSᵀ / √d_k
    for name, J in structures:
        g_q, ok_q = _fit_scaled(D, J, rel, abs_)
        g_kt, ok_kt = _fit_scaled(X, J.T, rel, abs_)
        g_kn, ok_kn = _fit_scaled(X, J, rel, abs_)
        if not (ok_q or ok_kt or ok_kn):
            continue
        rows = "[" + ", ".join(fmt(round(float(r), 3)) for r in J.sum(axis=-1)) + "]"
        behind = f"the dS behind your dq and dk has rows summing to {rows}, not 0"
        if name == "diag":
            found.append(
                Finding(
                    "softmax-jacobian-diagonal-only",
                    f"{behind}.",
                )
            )
        elif name == "unweighted":
            found.append(
                Finding(
                    "softmax-jacobian-unweighted",
                    f"{behind}.",
                )
            )
        elif name == "noA":
            found.append(
                Finding(
                    "softmax-jacobian-missing-weights",
                    f"{behind}; keys with small weights get entries as large as the others'.",
                )
            )
        elif name == "col":
            found.append(
                Finding(
                    "softmax-jacobian-wrong-axis",
                    f"{behind}; its columns sum to 0 instead.",
                )
            )
        if ok_kn and not ok_kt:
            found.append(
                Finding(
                    "dk-not-transposed",
                    "with seq_q = seq_k = 3 row j of your dk is built from row j of dS (the "
                    "scores query j gave), not from column j (the scores key j received).",
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
                    f"your {' and '.join(dict.fromkeys(unscaled))} are √d_k = {fmt(1 / c)} "
                    f"times what autograd gives (d_k = {d_k}).",
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
                "Only the diagonal of the softmax Jacobian was kept: each score's gradient "
                "came from its own weight alone. But every weight of a row depends on every "
                "score of that row, because they share one denominator, so each score also "
                "collects the other weights' pull: from each entry of dA, subtract the row's "
                "weighted mean of dA (weights A as the weighting), then multiply by A.",
                (_bw_variant(correction=False),),
                {"correction": False},
                question="Does each row of your dS sum to zero? Raising every score of a row "
                "by the same amount changes no weight — what must that mean for the row's "
                "gradient?",
            ),
            Misconception(
                "softmax-jacobian-wrong-axis",
                "The correction (the weighted sum of A times dA) was summed over the queries "
                "of each key column. The softmax runs over the keys of one query row, so the "
                "sum runs along a row, over the keys, and is kept as one number per row.",
                (_bw_variant(corr_axis=-2),),
                {"correction": "col"},
                question="Over which axis does the softmax normalise the weights? Over which "
                "axis did you sum in step 2, and do the rows of your dS sum to zero?",
            ),
            Misconception(
                "softmax-jacobian-unweighted",
                "The correction subtracts the plain sum of the row's dA. It is the weighted "
                "sum of dA with the row's weights: the Jacobian diag(a) − a aᵀ, applied to "
                "dA, gives a times (dA − Σ a·dA), where every dA is weighted by its own a.",
                (_bw_variant(correction="unweighted"),),
                {"correction": "unweighted"},
                question="Multiply the Jacobian diag(a) − a aᵀ by a row dA by hand: what "
                "multiplies each dA in the sum you subtract? Do the rows of your dS sum to "
                "zero?",
            ),
            Misconception(
                "softmax-jacobian-missing-weights",
                "dS is dA minus the row's weighted sum, without the leading factor A. The "
                "Jacobian diag(a) − a aᵀ applied to dA gives a times (dA − Σ a·dA): each "
                "entry is scaled by its own weight, so a key with weight near 0 gets a "
                "gradient near 0.",
                (_bw_variant(correction="noA"),),
                {"correction": "noA"},
                question="A key whose weight is almost 0 hardly affects the output: how large "
                "is its entry of your dS? What does the Jacobian's diagonal multiply by?",
            ),
            Misconception(
                "backward-scale-missing",
                "dq and dk are missing the factor 1/√d_k. The forward pass multiplied the "
                "scores by it, so the chain rule brings it back in both gradients that pass "
                "through the scores (dv does not).",
                (_bw_variant(scale=False),),
                {"scale": False},
                question="By what factor do your dq and dk differ from autograd's, and how "
                "does that factor relate to d_k? Which step of the forward pass multiplied by "
                "it?",
            ),
            Misconception(
                "dk-not-transposed",
                "Key j collects from every query i that scored it, in proportion to dS[i, j]: "
                "its gradient sums over the queries, down a column of dS. Your dk pairs "
                "queries with keys the wrong way round, which only runs when seq_q equals "
                "seq_k; its shape must be that of k, (..., seq_k, d_k).",
                (_bw_variant(dk_t=False),),
                {"dk_t": False},
                question="Write one entry of dk with indices: which entries of dS does key j "
                "collect from? Would your dk still have the shape of k if seq_q differed "
                "from seq_k?",
            ),
            Misconception(
                "dv-not-transposed",
                "Value j receives from every query i in proportion to its weight A[i, j]: its "
                "gradient sums down column j of A. Your dv uses the rows of A instead, which "
                "only runs when seq_q equals seq_k; its shape must be that of v, (..., seq_k, "
                "d_v).",
                (_bw_variant(dv_t=False),),
                {"dv_t": False},
                question="Write O[i, d] as a sum over j and ask which outputs value j reaches. "
                "Does your dv sum over queries or over keys?",
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
    instead of adding) or "keep" (one gradient per batch element, not reduced);
    ``scale=False`` forgets 1/√d_k in dq and dk, ``scale="all"`` also applies it to dv.
    """

    def fn(x_q, x_kv, W_q, W_k, W_v, d_out):
        q, k, v = x_q @ W_q.T, x_kv @ W_k.T, x_kv @ W_v.T  # (batch, seq, d_k or d_v)
        dq, dk, dv = _bw_variant(scale=bool(scale))(q, k, v, d_out)
        if scale == "all":  # the scale applied to the values' gradient too
            dv = dv / math.sqrt(q.shape[-1])

        def grad(x, g):  # (batch, seq, d_model), (batch, seq, n) -> (n, d_model)
            per = np.swapaxes(g, -1, -2) @ x  # (batch, n, d_model)
            if batch == "keep":
                return per if convention == "linear" else np.swapaxes(per, -1, -2)
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
    "batch": ("sum", "mean", "first", "last", "keep"),
    "scale": (True, False, "all"),
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
                "with seq_q = seq_k = 4 your dW_q is reproduced from the rows of x_kv; "
                "changing x_q alone would change it only through dq.",
            )
        )
    if c["kv_input"] == "q":
        found.append(
            Finding(
                "kv-grads-from-query-input",
                "with seq_q = seq_k = 4 your dW_k and dW_v are reproduced from the rows of x_q.",
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
    if c["batch"] == "keep":
        found.append(
            Finding(
                "batch-not-reduced",
                f"with a batch of {batch} your dW_q has shape {o.parts[0].shape}: one "
                f"gradient per batch element; W_q has shape {args[2].shape}.",
            )
        )
    if c["scale"] == "all":
        found.append(
            Finding(
                "scale-on-values",
                f"your dW_q and dW_k are right, your dW_v is 1/√d_k = {fmt(1 / math.sqrt(d_k))} "
                "times the right one (d_k = 3).",
            )
        )
    if not c["scale"]:
        found.append(
            Finding(
                "backward-scale-missing",
                f"your dW_q and dW_k are √d_k = {fmt(math.sqrt(d_k))} times the right ones "
                "(d_k = 3); your dW_v is right.",
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
                "dW_q was taken from x_kv. The queries were made from x_q, so the chain rule "
                "goes back through x_q: dW_q sums dq's rows against x_q's rows. In "
                "self-attention the two inputs are the same, which hides the mistake; in "
                "cross-attention they differ (and seq_q may differ from seq_k).",
                (_wg_build(q_input="kv"),),
                {"q_input": "kv"},
                question="Which input were the queries made from? Which input did your dW_q "
                "multiply dq with?",
            ),
            Misconception(
                "kv-grads-from-query-input",
                "dW_k and dW_v were taken from x_q. Keys and values were made from x_kv, so "
                "their weights' gradients sum dk's and dv's rows against x_kv's rows.",
                (_wg_build(kv_input="q"),),
                {"kv_input": "q"},
                question="Which input were the keys and values made from? Which input did "
                "your dW_k and dW_v multiply with?",
            ),
            Misconception(
                "weight-grad-transposed",
                "The gradients have the math-convention shape (d_model, d_k). The weights "
                "are stored like nn.Linear's, (out_features, in_features), with k made from x "
                "times the transpose of W_k; a gradient always has the shape of its weight.",
                (_wg_build(convention="math"),),
                {"convention": "math"},
                question="What shape does your dW_k have, and what shape does W_k have? What "
                "shape must the gradient of any variable have?",
            ),
            Misconception(
                "batch-mean",
                "The gradients were averaged over the batch. The loss adds the contributions "
                "of all sentences, and one weight matrix serves them all, so their "
                "gradients add up: a sum over the batch, not a mean.",
                (_wg_build(batch="mean"),),
                {"batch": "mean"},
                question="By what factor do your gradients differ from autograd's, and how "
                "does it relate to the batch size? Does the loss average over sentences or "
                "add them?",
            ),
            Misconception(
                "batch-one-element",
                "Only one batch element contributes (one element picked, or a loop that "
                "overwrites the gradient instead of adding to it). Every sentence of the "
                "batch uses the same weights, so each adds its own contribution to the "
                "gradient: the sum runs over the whole batch.",
                (_wg_build(batch="first"), _wg_build(batch="last")),
                {"batch": "last"},
                question="Change one sentence of the batch: does your gradient change? Which "
                "batch elements does your gradient depend on?",
            ),
            Misconception(
                "batch-not-reduced",
                "The gradients keep the batch axis: one (d_k, d_model) gradient per sentence. "
                "The weight is one matrix shared by every sentence, so its gradient is one "
                "matrix of its own shape: the per-sentence contributions are added over the "
                "batch.",
                (_wg_build(batch="keep"),),
                {"batch": "keep"},
                question="What shape does your dW_k have, and what shape does W_k have? How "
                "many W_k matrices does the model hold for a whole batch?",
            ),
            Misconception(
                "backward-scale-missing",
                "dq and dk are missing the factor 1/√d_k of the forward pass, so dW_q and dW_k "
                "are √d_k times too large, while dW_v, which does not pass through the "
                "scores, is right.",
                (_wg_build(scale=False),),
                {"scale": False},
                question="Which of your three gradients agree with autograd, and by what "
                "factor do the others differ? Which of the three pass through the scores?",
            ),
            Misconception(
                "scale-on-values",
                "dW_v was scaled by 1/√d_k too. The scale multiplies the scores only, so it "
                "reaches the gradients that pass through the scores (dq, dk) and not the "
                "values, whose gradient comes from the weights A alone.",
                (_wg_build(scale="all"),),
                {"scale": "all"},
                question="Which of your three gradients agree with autograd, and by what "
                "factor does the other differ? Which quantities did the forward pass scale?",
            ),
        ),
    )
)
