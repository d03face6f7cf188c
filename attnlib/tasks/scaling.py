"""Why attention divides by √d_k: measuring helpers for lesson 04.

Every claim of the lesson is a measurement made with these functions:

* :func:`sample_dot_products` and :func:`variance_tolerance` — Var(q·k) grows like d_k,
  and how far a sample variance may stray from the truth for a given sample size;
* :func:`softmax_entropy`, :func:`softmax_jacobian`, :func:`softmax_vjp` — how peaked the
  weights are, and how much gradient the softmax lets through
  (``∂weights/∂scores = diag(p) − p pᵀ``);
* :func:`draw_rows`, :func:`row_stats`, :func:`width_sweep`, :func:`temperature_sweep` —
  the same measurements over many random query rows, against d_k or against the scale;
* :func:`choose_scale` — the largest scale that keeps the weights spread out enough;
* :func:`make_retrieval_task`, :func:`train_retrieval` — a small retrieval task trained
  with different scales.

Random draws: queries and keys have independent standard-normal components, the
situation the 1/√d_k argument is about (and roughly what a freshly initialised
projection produces). Everything is float64 so that printed numbers do not depend on
the thread count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch

from attnlib._validate import check_array, check_instance, check_int, check_ndim, check_number
from attnlib.core import attend, softmax
from attnlib.training import History, train

__all__ = [
    "RetrievalTask",
    "RowStats",
    "choose_scale",
    "dot_product_excess_kurtosis",
    "draw_rows",
    "make_retrieval_task",
    "predicted_score_variance",
    "row_stats",
    "sample_dot_products",
    "softmax_entropy",
    "softmax_jacobian",
    "softmax_vjp",
    "temperature_sweep",
    "train_retrieval",
    "variance_tolerance",
    "width_sweep",
]


# ----------------------------------------------------------------------------------------
# 1. The variance of a dot product.
# ----------------------------------------------------------------------------------------


def predicted_score_variance(d_k: int, scale: float = 1.0, var_q=1.0, var_k=1.0) -> float:
    """Var(scale · q·k) for q, k with independent zero-mean components.

    Each of the d_k products ``q_i k_i`` has variance ``var_q · var_k`` and they are
    independent, so the sum has variance ``d_k · var_q · var_k``; multiplying by ``scale``
    multiplies the variance by ``scale²``.
    """
    d_k = check_int("predicted_score_variance", "d_k", d_k, minimum=1)
    return float(d_k * var_q * var_k * scale**2)


def sample_dot_products(d_k: int, n: int, *, rng: np.random.Generator, chunk: int = 2048):
    """``n`` dot products ``q·k`` of independent standard-normal vectors of width d_k.

    Parameters
    ----------
    d_k : int
        Width of the query and key vectors.
    n : int
        Number of (q, k) pairs.
    rng : numpy.random.Generator
        Source of randomness (seed it where you draw).
    chunk : int
        Pairs drawn at a time, so that memory stays small at large d_k.

    Returns
    -------
    dots : ndarray of shape (n,), float64
        Raw (unscaled) dot products; their variance is d_k.
    """
    fn = "sample_dot_products"
    d_k = check_int(fn, "d_k", d_k, minimum=1)
    n = check_int(fn, "n", n, minimum=1)
    chunk = check_int(fn, "chunk", chunk, minimum=1)
    check_instance(fn, "rng", rng, np.random.Generator, "a numpy.random.Generator")
    out = np.empty(n)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        q = rng.standard_normal((m, d_k))  # (m, d_k)
        k = rng.standard_normal((m, d_k))  # (m, d_k)
        out[start : start + m] = np.einsum("nd,nd->n", q, k)  # (m,)
    return out


def dot_product_excess_kurtosis(d_k: int) -> float:
    """Excess kurtosis of ``q·k`` for standard-normal components: ``6 / d_k``.

    One product ``q_i k_i`` has E[x²] = 1 and E[x⁴] = E[q⁴] E[k⁴] = 9, so its fourth
    cumulant is 6; cumulants add over the d_k independent products and the variance is d_k,
    giving ``6 d_k / d_k²``. (The sum is close to normal, excess kurtosis 0, only for large
    d_k.)
    """
    return 6.0 / check_int("dot_product_excess_kurtosis", "d_k", d_k, minimum=1)


def variance_tolerance(n: int, excess_kurtosis: float = 0.0, z: float = 4.0) -> float:
    """Half-width of the band a ratio ``sample variance / true variance`` stays in.

    The sample variance of ``n`` independent draws has relative standard error
    ``sqrt(2/(n-1) + κ/n)`` with κ the excess kurtosis of the distribution. The band is
    ``z`` standard errors wide on each side (z = 4: a correct measurement falls outside
    about once in 16 000 draws for a near-normal ratio).
    """
    n = check_int("variance_tolerance", "n", n, minimum=2)
    return float(z * math.sqrt(2.0 / (n - 1) + excess_kurtosis / n))


# ----------------------------------------------------------------------------------------
# 2. Entropy and the softmax Jacobian.
# ----------------------------------------------------------------------------------------


def softmax_entropy(weights, axis: int = -1):
    """Entropy in nats, ``-Σ p log p``, of each row of weights (with 0 · log 0 = 0).

    Parameters
    ----------
    weights : ndarray or Tensor of shape (..., seq_k)
        Post-softmax weights (non-negative, rows summing to 1).

    Returns
    -------
    entropy : same kind, shape (...)
        Between 0 (one-hot) and ``log(seq_k)`` (uniform).
    """
    if isinstance(weights, torch.Tensor):
        safe = torch.where(weights > 0, weights, torch.ones_like(weights))
        return -(weights * torch.log(safe)).sum(dim=axis)
    w = np.asarray(weights, dtype=np.float64)
    safe = np.where(w > 0, w, 1.0)
    return -(w * np.log(safe)).sum(axis=axis)


def softmax_jacobian(p):
    """Jacobian of the softmax at weights ``p``: ``J = diag(p) − p pᵀ``.

    ``J[..., i, j] = ∂p_i / ∂s_j = p_i (δ_ij − p_j)``. It is symmetric, its rows sum to 0
    (adding a constant to every score changes nothing), and it vanishes when p is one-hot.

    Parameters
    ----------
    p : ndarray or Tensor of shape (..., seq_k)
        Post-softmax weights.

    Returns
    -------
    J : same kind and dtype, shape (..., seq_k, seq_k)
    """
    check_array("softmax_jacobian", "p", p)
    check_ndim("softmax_jacobian", "p", p, min_ndim=1)
    outer = p[..., :, None] * p[..., None, :]  # (..., seq_k, seq_k)
    if isinstance(p, torch.Tensor):
        diag = torch.diag_embed(p)  # (..., seq_k, seq_k)
    else:
        diag = p[..., :, None] * np.eye(p.shape[-1], dtype=p.dtype)  # (..., seq_k, seq_k)
    return diag - outer


def softmax_vjp(p, g):
    """Gradient with respect to the scores for an upstream gradient ``g`` on the weights.

    ``∂L/∂s = Jᵀ g = p ⊙ (g − ⟨p, g⟩)`` — the same as ``softmax_jacobian(p) @ g`` without
    building the seq_k × seq_k matrix.

    Parameters
    ----------
    p : ndarray or Tensor of shape (..., seq_k)
        Post-softmax weights.
    g : same kind, shape (..., seq_k)
        ∂L/∂weights.

    Returns
    -------
    grad_scores : same kind, shape (..., seq_k)
    """
    check_array("softmax_vjp", "p", p)
    check_array("softmax_vjp", "g", g)
    if tuple(p.shape) != tuple(g.shape):
        raise ValueError(
            f"softmax_vjp: p has shape {tuple(p.shape)} but g has shape {tuple(g.shape)}"
        )
    if isinstance(p, torch.Tensor):
        return p * (g - (p * g).sum(dim=-1, keepdim=True))  # (..., seq_k)
    return p * (g - (p * g).sum(axis=-1, keepdims=True))  # (..., seq_k)


# ----------------------------------------------------------------------------------------
# 3. Measurements over many random query rows.
# ----------------------------------------------------------------------------------------


@dataclass
class RowStats:
    """Per-row measurements; every field has the same shape (..., n_rows).

    Attributes
    ----------
    entropy : softmax entropy of the row's weights, nats.
    max_weight : largest weight in the row.
    jacobian_norm : Frobenius norm of ``diag(p) − p pᵀ``.
    grad_scores : ‖∂L/∂scores‖ for the row's fixed upstream gradient on the weights.
    grad_query : ‖∂L/∂q‖ = scale · ‖kᵀ ∂L/∂scores‖: what reaches the query (and W_q).
    """

    entropy: np.ndarray
    max_weight: np.ndarray
    jacobian_norm: np.ndarray
    grad_scores: np.ndarray
    grad_query: np.ndarray

    @staticmethod
    def stack(items: Sequence[RowStats]) -> RowStats:
        return RowStats(
            **{f.name: np.stack([getattr(s, f.name) for s in items]) for f in fields(RowStats)}
        )


def draw_rows(d_k: int, n_rows: int, seq_k: int, *, rng: np.random.Generator):
    """One query and its own ``seq_k`` keys per row, standard-normal components.

    Returns
    -------
    q : ndarray of shape (n_rows, d_k)
    k : ndarray of shape (n_rows, seq_k, d_k)
    """
    fn = "draw_rows"
    d_k = check_int(fn, "d_k", d_k, minimum=1)
    n_rows = check_int(fn, "n_rows", n_rows, minimum=1)
    seq_k = check_int(fn, "seq_k", seq_k, minimum=1)
    q = rng.standard_normal((n_rows, d_k))  # (n_rows, d_k)
    k = rng.standard_normal((n_rows, seq_k, d_k))  # (n_rows, seq_k, d_k)
    return q, k


def row_stats(q, k, scale: float, upstream) -> RowStats:
    """Measure one softmax row per query: how peaked, how much gradient passes.

    Parameters
    ----------
    q : ndarray of shape (n_rows, d_k)
    k : ndarray of shape (n_rows, seq_k, d_k)
    scale : float
        Multiplies the dot products before the softmax (1/√d_k is the standard choice).
    upstream : ndarray of shape (n_rows, seq_k)
        A fixed gradient ∂L/∂weights per row (what the rest of the network sends back).

    Returns
    -------
    RowStats with fields of shape (n_rows,)
    """
    fn = "row_stats"
    scale = check_number(fn, "scale", scale, minimum=0)
    for name, x in (("q", q), ("k", k), ("upstream", upstream)):
        check_array(fn, name, x, only="numpy")
    if q.ndim != 2 or k.ndim != 3 or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[1]:
        raise ValueError(
            f"{fn}: expected q (n_rows, d_k) and k (n_rows, seq_k, d_k), got q {q.shape} "
            f"and k {k.shape}"
        )
    if upstream.shape != k.shape[:2]:
        raise ValueError(f"{fn}: upstream must have shape {k.shape[:2]}, got {upstream.shape}")
    raw = np.einsum("nd,nkd->nk", q, k)  # (n_rows, seq_k)
    p = softmax(scale * raw, axis=-1)  # (n_rows, seq_k)
    jac = softmax_jacobian(p)  # (n_rows, seq_k, seq_k)
    g_s = softmax_vjp(p, upstream)  # (n_rows, seq_k)
    g_q = scale * np.einsum("nk,nkd->nd", g_s, k)  # (n_rows, d_k)
    return RowStats(
        entropy=softmax_entropy(p),
        max_weight=p.max(axis=-1),
        jacobian_norm=np.sqrt((jac**2).sum(axis=(-2, -1))),
        grad_scores=np.linalg.norm(g_s, axis=-1),
        grad_query=np.linalg.norm(g_q, axis=-1),
    )


def _upstream(n_rows: int, seq_k: int, seed: int) -> np.ndarray:
    # One fixed upstream gradient per row, the same at every d_k and every scale.
    return np.random.default_rng([seed, 1]).standard_normal((n_rows, seq_k))  # (n_rows, seq_k)


def width_sweep(d_ks: Sequence[int], *, seq_k: int = 32, n_rows: int = 500, seed: int = 0):
    """Row statistics against d_k, scaled by 1/√d_k and unscaled, on the same draws.

    Returns
    -------
    dict with keys ``"scaled"`` and ``"unscaled"``, each a RowStats with fields of shape
    (len(d_ks), n_rows).
    """
    up = _upstream(n_rows, seq_k, seed)
    scaled, unscaled = [], []
    for i, d_k in enumerate(d_ks):
        q, k = draw_rows(d_k, n_rows, seq_k, rng=np.random.default_rng([seed, 0, i]))
        scaled.append(row_stats(q, k, 1.0 / math.sqrt(d_k), up))
        unscaled.append(row_stats(q, k, 1.0, up))
    return {"scaled": RowStats.stack(scaled), "unscaled": RowStats.stack(unscaled)}


def temperature_sweep(
    scales: Sequence[float], *, d_k: int = 64, seq_k: int = 32, n_rows: int = 500, seed: int = 0
) -> RowStats:
    """Row statistics against the scale at one width, on the same draws for every scale.

    Returns
    -------
    RowStats with fields of shape (len(scales), n_rows)
    """
    q, k = draw_rows(d_k, n_rows, seq_k, rng=np.random.default_rng([seed, 0]))
    up = _upstream(n_rows, seq_k, seed)
    return RowStats.stack([row_stats(q, k, float(c), up) for c in scales])


def choose_scale(raw_scores, min_entropy: float, *, rtol: float = 1e-9) -> float:
    """The largest scale ``c`` whose weights keep a mean entropy of at least ``min_entropy``.

    The entropy of ``softmax(c · s)`` falls as c grows (its derivative is −c · Var_p(s)),
    so the answer is found by bisection.

    Parameters
    ----------
    raw_scores : ndarray of shape (n_rows, seq_k)
        Unscaled dot products q·k, one row per query.
    min_entropy : float
        Threshold in nats, between 0 and log(seq_k).

    Returns
    -------
    c : float
        ``inf`` if the entropy never falls below the threshold (all scores in a row equal).
    """
    s = np.asarray(raw_scores, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"choose_scale: raw_scores must be (n_rows, seq_k), got shape {s.shape}")
    top = math.log(s.shape[-1])
    if not 0 < min_entropy < top:
        raise ValueError(
            f"choose_scale: min_entropy must be between 0 and log(seq_k)={top:.4f}, "
            f"got {min_entropy}"
        )

    def mean_entropy(c):
        return float(softmax_entropy(softmax(c * s)).mean())

    lo, hi = 0.0, 1.0
    while mean_entropy(hi) >= min_entropy:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            return math.inf
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mean_entropy(mid) >= min_entropy else (lo, mid)
    return lo


# ----------------------------------------------------------------------------------------
# 4. A small retrieval task: find the key that matches the query, return its value.
# ----------------------------------------------------------------------------------------


@dataclass
class RetrievalTask:
    """Batches of a key-value lookup; every tensor is float64.

    Each example has ``seq_k`` items, each with a key input ``x`` (d_model) and a value
    ``v`` (d_v). The query input ``x_q`` is a noisy copy of the key input of item
    ``target``; the model must attend to that item and return its value.

    Attributes
    ----------
    x : Tensor of shape (steps, batch, seq_k, d_model)
    v : Tensor of shape (steps, batch, seq_k, d_v)
    x_q : Tensor of shape (steps, batch, d_model)
    target : LongTensor of shape (steps, batch)
    """

    x: torch.Tensor
    v: torch.Tensor
    x_q: torch.Tensor
    target: torch.Tensor

    @property
    def d_model(self) -> int:
        return self.x.shape[-1]

    def batch(self, i: int):
        """Batch ``i``: (x_q, x, v, target value) with shapes (batch, d_model),
        (batch, seq_k, d_model), (batch, seq_k, d_v), (batch, d_v)."""
        rows = torch.arange(self.x.shape[1])
        return self.x_q[i], self.x[i], self.v[i], self.v[i][rows, self.target[i]]


def make_retrieval_task(
    *,
    steps: int,
    batch: int = 32,
    seq_k: int = 16,
    d_model: int = 32,
    d_v: int = 8,
    noise: float = 0.5,
    seed: int = 0,
) -> RetrievalTask:
    """Draw ``steps`` batches of the retrieval task (a fresh batch every step)."""
    fn = "make_retrieval_task"
    sizes = {"steps": steps, "batch": batch, "seq_k": seq_k, "d_model": d_model, "d_v": d_v}
    steps, batch, seq_k, d_model, d_v = (
        check_int(fn, name, value, minimum=1) for name, value in sizes.items()
    )
    noise = check_number(fn, "noise", noise, minimum=0)
    g = torch.Generator().manual_seed(seed)
    kw = {"generator": g, "dtype": torch.float64}
    x = torch.randn(steps, batch, seq_k, d_model, **kw)  # (steps, batch, seq_k, d_model)
    v = torch.randn(steps, batch, seq_k, d_v, **kw)  # (steps, batch, seq_k, d_v)
    target = torch.randint(0, seq_k, (steps, batch), generator=g)  # (steps, batch)
    picked = torch.gather(x, 2, target[..., None, None].expand(steps, batch, 1, d_model))
    x_q = picked[:, :, 0] + noise * torch.randn(
        steps, batch, d_model, **kw
    )  # (steps, batch, d_model)
    return RetrievalTask(x=x, v=v, x_q=x_q, target=target)


def train_retrieval(
    task: RetrievalTask,
    scale: float,
    *,
    d_k: int = 256,
    lr: float = 1e-2,
    seed: int = 0,
    init_scale: float = 1.0,
    desc: str = "training",
    progress: bool = True,
) -> History:
    """Learn W_q and W_k (d_model × d_k each) for the retrieval task with a fixed scale.

    The model is one attention step: ``q = x_q W_q``, ``k = x W_k``, weights
    ``softmax(scale · q·k)``, output ``Σ weights · v``; the loss is the squared error to
    the target item's value. W_q and W_k start from N(0, 1/d_model), the same draw for
    every scale (so runs differ only in the scale), so q and k have roughly unit-variance
    components and the raw scores have variance about d_k; ``init_scale`` multiplies that
    draw (lesson 04 uses it to show that, for Adam, a scale α² on the scores is the same
    training as weights started α times larger with α times the learning rate). Adam, one
    batch per step.

    Returns
    -------
    History with ``loss``, ``grad/W_q``, ``grad/W_k`` (norms of their gradients), and per
    step ``entropy`` (mean), ``max_weight`` (mean), ``grad_scores_median`` (median over
    the batch of ‖∂loss/∂scores‖ of a row), ``on_target`` (the share of examples whose
    largest weight is on the target item) and ``weight_on_target`` (mean weight on it).
    """
    scale = check_number("train_retrieval", "scale", scale, minimum=0)
    d_k = check_int("train_retrieval", "d_k", d_k, minimum=1)
    init_scale = check_number("train_retrieval", "init_scale", init_scale, positive=True)
    steps, _, _, d_model = task.x.shape
    g = torch.Generator().manual_seed(seed)
    std = init_scale / math.sqrt(d_model)
    W_q = torch.nn.Parameter(torch.randn(d_model, d_k, generator=g, dtype=torch.float64) * std)
    W_k = torch.nn.Parameter(torch.randn(d_model, d_k, generator=g, dtype=torch.float64) * std)

    def step(i):
        x_q, x, v, want = task.batch(i)
        q = (x_q @ W_q)[:, None, :]  # (batch, 1, d_k)
        k = x @ W_k  # (batch, seq_k, d_k)
        out, w = attend(q, k, v, scale=scale)  # (batch, 1, d_v), (batch, 1, seq_k)
        loss = ((out[:, 0] - want) ** 2).sum(-1).mean()
        with torch.no_grad():
            p = w[:, 0]  # (batch, seq_k)
            g_w = 2.0 / len(p) * torch.einsum("bv,bkv->bk", out[:, 0] - want, v)  # ∂loss/∂w
            g_s = softmax_vjp(p, g_w).norm(dim=-1)  # (batch,)
            target = task.target[i]  # (batch,): the item each query asks for
            extras = {
                "entropy": float(softmax_entropy(p).mean()),
                "max_weight": float(p.max(-1).values.mean()),
                "grad_scores_median": float(g_s.median()),
                "on_target": float((p.argmax(-1) == target).double().mean()),
                "weight_on_target": float(p[torch.arange(len(p)), target].mean()),
            }
        return loss, extras

    # The tensors are tiny: one thread is faster than several, and immune to a busy machine.
    return train(
        [W_q, W_k],
        step,
        steps=steps,
        lr=lr,
        track={"W_q": W_q, "W_k": W_k},
        desc=desc,
        progress=progress,
        threads=1,
    )
