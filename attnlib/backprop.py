"""The backward pass of attention, by hand, in numpy (lesson 06).

Forward, for one head (``scale = 1/√d_k``)::

    S = Q Kᵀ · scale          # scores   (..., seq_q, seq_k)
    A = softmax(S)            # weights  (..., seq_q, seq_k), over keys
    O = A V                   # output   (..., seq_q, d_v)

Backward, given ``dO = ∂L/∂O``::

    dV = Aᵀ dO                                   # (..., seq_k, d_v)
    dA = dO Vᵀ                                   # (..., seq_q, seq_k)
    dS = A ⊙ (dA − rowsum(A ⊙ dA))               # the softmax Jacobian, row by row
    dQ = dS K · scale                            # (..., seq_q, d_k)
    dK = dSᵀ Q · scale                           # (..., seq_k, d_k)

and through the projections ``Q = X_q W_q``, ``K = X_kv W_k``, ``V = X_kv W_v``
(math convention: ``W`` of shape (d_model, d_k))::

    dW_k = X_kvᵀ dK    (summed over the batch)

:func:`attention_backward` is the reference of exercise 6.1; :class:`ManualAttention`
wraps it as a ``torch.autograd.Function`` so that ``torch.autograd.gradcheck`` can compare
it with finite differences.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlib._validate import (
    as_float_array,
    check_array,
    check_int,
    check_mask,
    check_qkv,
    default_scale,
    validated,
)
from attnlib.core import attend
from attnlib.training import History, train

__all__ = [
    "attention_backward",
    "projection_grads",
    "ManualAttention",
    "manual_attention",
    "fit_attention_pattern",
]


def _T(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _check_attention_backward(q, k, v, d_out, mask=None, scale=None) -> None:
    fn = "attention_backward"
    for name, x in (("q", q), ("k", k), ("v", v), ("d_out", d_out)):
        check_array(fn, name, x, only="numpy")
    q, k, v, batch = check_qkv(fn, q, k, v)
    as_float_array(fn, "d_out", d_out)
    want = (*batch, q.shape[-2], v.shape[-1])
    if tuple(d_out.shape) != want:
        raise ValueError(
            f"attention_backward: d_out must have the output's shape {want} "
            f"(..., seq_q, d_v), got {d_out.shape}"
        )
    score_shape = (*batch, q.shape[-2], k.shape[-2])
    check_mask(fn, mask, q, score_shape, "scores (..., seq_q, seq_k)")
    default_scale(fn, q.shape[-1], scale)


@validated(_check_attention_backward)
def attention_backward(q, k, v, d_out, mask=None, scale=None):
    """Gradients of a loss with respect to q, k and v, given its gradient at the output.

    Parameters
    ----------
    q : ndarray of shape (..., seq_q, d_k)
    k : ndarray of shape (..., seq_k, d_k)
    v : ndarray of shape (..., seq_k, d_v)
    d_out : ndarray of shape (..., seq_q, d_v)
        ∂L/∂out, where ``out = attend(q, k, v, mask)[0]``.
    mask : bool ndarray broadcastable to (..., seq_q, seq_k), optional
        True = may attend. Blocked keys have weight 0 and receive no gradient through the
        scores; a fully masked query row gives zero gradients.
    scale : float, optional
        Default ``1/sqrt(d_k)``.

    Returns
    -------
    dq : ndarray of shape (..., seq_q, d_k)
    dk : ndarray of shape (..., seq_k, d_k)
    dv : ndarray of shape (..., seq_k, d_v)

    See Also
    --------
    ManualAttention : wraps it for torch's autograd and gradcheck.
    attnlib.attend : the forward pass.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, d_out = rng.standard_normal((4, 3, 2))
    >>> tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    >>> out, _ = attend(tq, tk, tv)
    >>> out.backward(torch.tensor(d_out))
    >>> dq, dk, dv = attention_backward(q, k, v, d_out)
    >>> all(np.allclose(mine, t.grad.numpy()) for mine, t in zip((dq, dk, dv), (tq, tk, tv)))
    True
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    _, A = attend(q, k, v, mask=mask, scale=scale)  # (..., seq_q, seq_k)
    dv = _T(A) @ d_out  # (..., seq_k, d_v)
    dA = d_out @ _T(v)  # (..., seq_q, seq_k)
    dS = A * (dA - (A * dA).sum(axis=-1, keepdims=True))  # softmax Jacobian, per query row
    dq = dS @ k * scale  # (..., seq_q, d_k)
    dk = _T(dS) @ q * scale  # (..., seq_k, d_k)
    # q, k or v may have been broadcast over batch dims: sum the gradient back to their shape
    return _unbroadcast(dq, q.shape), _unbroadcast(dk, k.shape), _unbroadcast(dv, v.shape)


def _unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for axis, n in enumerate(shape):
        if n == 1 and g.shape[axis] != 1:
            g = g.sum(axis=axis, keepdims=True)
    return g


def projection_grads(x_q, x_kv, W_q, W_k, W_v, d_out, mask=None):
    """Gradients reaching the projection matrices of one head.

    Parameters
    ----------
    x_q : ndarray of shape (batch, seq_q, d_model)
    x_kv : ndarray of shape (batch, seq_k, d_model)
    W_q, W_k : ndarray of shape (d_model, d_k)
        Math convention: ``q = x_q @ W_q`` (the transpose of ``nn.Linear.weight``).
    W_v : ndarray of shape (d_model, d_v)
    d_out : ndarray of shape (batch, seq_q, d_v)
    mask : bool ndarray, optional

    Returns
    -------
    dW_q, dW_k, dW_v : ndarrays shaped like W_q, W_k, W_v
        For example ``dW_k = Σ_batch x_kvᵀ dk``.

    See Also
    --------
    attention_backward : the gradients at q, k and v it starts from.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x, W_q, W_k, W_v = rng.standard_normal((1, 4, 3)), *rng.standard_normal((3, 3, 2))
    >>> d_out = rng.standard_normal((1, 4, 2))
    >>> [g.shape for g in projection_grads(x, x, W_q, W_k, W_v, d_out)]
    [(3, 2), (3, 2), (3, 2)]
    """
    q, k, v = x_q @ W_q, x_kv @ W_k, x_kv @ W_v  # (batch, seq, d_k or d_v)
    dq, dk, dv = attention_backward(q, k, v, d_out, mask=mask)
    dW_q = (_T(x_q) @ dq).sum(axis=0)  # (d_model, d_k)
    dW_k = (_T(x_kv) @ dk).sum(axis=0)  # (d_model, d_k)
    dW_v = (_T(x_kv) @ dv).sum(axis=0)  # (d_model, d_v)
    return dW_q, dW_k, dW_v


class ManualAttention(torch.autograd.Function):
    """``attend`` whose backward pass is :func:`attention_backward` (numpy) — for gradcheck.

    See Also
    --------
    manual_attention : calls ``ManualAttention.apply``.
    attention_backward : its backward pass.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask=None):
        ctx.save_for_backward(q, k, v)
        ctx.mask = mask
        out, _ = attend(q.detach(), k.detach(), v.detach(), mask=mask)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v = ctx.saved_tensors
        mask = None if ctx.mask is None else ctx.mask.numpy()
        grads = attention_backward(
            q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), d_out.numpy(), mask=mask
        )
        return (*(torch.from_numpy(np.ascontiguousarray(g)) for g in grads), None)


def manual_attention(q, k, v, mask=None):
    """``attend(q, k, v, mask)[0]`` for torch tensors, differentiated by the numpy backward.

    Parameters
    ----------
    q, k, v : Tensor of shape (..., seq_q, d_k), (..., seq_k, d_k), (..., seq_k, d_v)
    mask : bool Tensor broadcastable to (..., seq_q, seq_k), optional
        True = may attend.

    Returns
    -------
    out : Tensor of shape (..., seq_q, d_v)

    See Also
    --------
    attention_backward : the backward pass it uses.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> make = dict(generator=g, dtype=torch.float64, requires_grad=True)
    >>> q, k, v = (torch.randn(1, 3, 2, **make) for _ in range(3))
    >>> torch.autograd.gradcheck(manual_attention, (q, k, v))
    True
    """
    return ManualAttention.apply(q, k, v, mask)


def _log_weights(x: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor) -> torch.Tensor:
    s = (x @ W_q) @ (x @ W_k).transpose(-1, -2) / math.sqrt(W_q.shape[-1])  # (batch, seq, seq)
    return torch.log_softmax(s, dim=-1)


def fit_attention_pattern(
    x: torch.Tensor,
    W_q_teacher: torch.Tensor,
    W_k_teacher: torch.Tensor,
    *,
    steps: int,
    lr: float = 0.05,
    seed: int = 0,
    init_scale: float = 0.3,
    progress: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, History]:
    """Fit a student's W_q, W_k to a teacher's self-attention weights by gradient descent.

    The loss is the KL divergence from the teacher's weights to the student's, averaged
    over query rows: only the *pattern* is shown to the student, never the matrices.

    Parameters
    ----------
    x : Tensor of shape (batch, seq, d_model)
        Inputs (float64 recommended).
    W_q_teacher, W_k_teacher : Tensor of shape (d_model, d_k)
        Math convention: ``q = x @ W_q``.
    steps, lr, seed :
        Adam steps, learning rate, and the seed of the student's random start.
    init_scale : float
        Standard deviation of the student's initial entries.

    Returns
    -------
    W_q, W_k : Tensor of shape (d_model, d_k)
        The student's matrices (detached).
    History
        ``loss`` per step.

    See Also
    --------
    attention_backward : the gradients such a fit follows.
    attnlib.training.train : the loop it runs.
    """
    fn = "fit_attention_pattern"
    for name, t in (("x", x), ("W_q_teacher", W_q_teacher), ("W_k_teacher", W_k_teacher)):
        check_array(fn, name, t, only="torch")
    steps = check_int(fn, "steps", steps, minimum=1)
    if W_q_teacher.shape != W_k_teacher.shape:
        raise ValueError(
            f"fit_attention_pattern: W_q_teacher {tuple(W_q_teacher.shape)} and W_k_teacher "
            f"{tuple(W_k_teacher.shape)} must have the same shape (d_model, d_k)"
        )
    if x.ndim != 3 or x.shape[-1] != W_q_teacher.shape[0]:
        raise ValueError(
            f"fit_attention_pattern: x must be (batch, seq, d_model={W_q_teacher.shape[0]}), "
            f"got {tuple(x.shape)}"
        )
    with torch.no_grad():
        log_p = _log_weights(x, W_q_teacher, W_k_teacher)  # the teacher's pattern
    g = torch.Generator().manual_seed(seed)
    W_q = (init_scale * torch.randn(W_q_teacher.shape, generator=g, dtype=x.dtype)).requires_grad_()
    W_k = (init_scale * torch.randn(W_k_teacher.shape, generator=g, dtype=x.dtype)).requires_grad_()

    def step(i):
        log_s = _log_weights(x, W_q, W_k)
        return (log_p.exp() * (log_p - log_s)).sum(-1).mean()  # KL(teacher || student)

    # one thread: the tensors are tiny, and the sums are added in one order on any machine
    history = train(
        [W_q, W_k], step, steps=steps, lr=lr, desc="student", progress=progress, threads=1
    )
    return W_q.detach(), W_k.detach(), history
