"""Scaled dot-product attention: ``softmax(Q Kᵀ / √d_k) V``.

Three functions, each taking numpy arrays or torch tensors and returning the same kind:

* :func:`softmax` — turns scores into weights, numerically stable, with masks;
* :func:`scores` — compares every query with every key (pre-softmax);
* :func:`attend` — the whole of attention, returning ``(out, weights)``.

The math is written once (``_softmax_math``, ``_scores_math``, ``_attend_math``) against
:mod:`attnlib._backend`. For torch tensors :func:`attend` takes a faster route through
``torch.softmax`` that touches the score matrix fewer times; ``tests/test_core.py``
proves it equal to the shared math.
"""

from __future__ import annotations

import math

import torch

from attnlib import _backend as B
from attnlib._validate import (
    as_float_array,
    check_choice,
    check_mask,
    check_ndim,
    check_qk,
    check_qkv,
    default_scale,
    normalise_axis,
    validated,
)
from attnlib.masks import ALIGNS, causal_mask

__all__ = ["softmax", "scores", "attend"]


# ----------------------------------------------------------------------------------------
# The math, written once.
# ----------------------------------------------------------------------------------------


def _softmax_math(x, axis: int, mask, ops: B.Ops):
    """Stable softmax along ``axis``; masked entries and fully masked rows give 0."""
    if mask is not None:
        x = ops.where(mask, x, -math.inf)  # blocked scores never win the max or add to the sum
    m = ops.stop_gradient(ops.amax(x, axis))  # subtracting the max changes nothing mathematically
    m = ops.where(ops.isfinite(m), m, 0.0)  # a row with every key masked has max -inf
    e = ops.exp(x - m)  # every entry now <= 1: no overflow
    total = ops.sum(e, axis)
    return e / ops.where(total > 0, total, 1.0)  # fully masked row: 0 / 1 = 0, not 0 / 0


def _scores_math(q, k, scale: float, ops: B.Ops):
    return ops.matmul(q, ops.transpose_last(k)) * scale  # (..., seq_q, seq_k)


def _attend_math(q, k, v, mask, scale: float, ops: B.Ops):
    s = _scores_math(q, k, scale, ops)  # (..., seq_q, seq_k)
    w = _softmax_math(s, -1, mask, ops)  # (..., seq_q, seq_k), softmax over keys
    return ops.matmul(w, v), w  # (..., seq_q, d_v)


def _attend_torch_fast(q, k, v, mask, scale: float):
    """Same result as ``_attend_math`` with fewer passes over the score matrix.

    The scale is applied to q (seq_q × d_k numbers) instead of the score matrix, masking
    is done in place, and the softmax is torch's fused one — in place as well when no
    gradient is needed.
    """
    s = (q * scale) @ k.transpose(-2, -1)  # (..., seq_q, seq_k)
    empty = None
    if mask is not None:
        full = torch.broadcast_shapes(s.shape, mask.shape)
        if full != s.shape:
            # v (or the mask) has batch dims that q and k lack: in-place masking needs the
            # score matrix at its full size first.
            s = s.expand(full).clone()  # (..., seq_q, seq_k)
        s.masked_fill_(~mask, -math.inf)
        empty = ~mask.any(dim=-1, keepdim=True)  # query rows that may attend to nothing
        if bool(empty.any()):
            s.masked_fill_(empty, 0.0)  # keep the softmax finite there; zeroed below
        else:
            empty = None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        w = torch.softmax(s, dim=-1)
    else:
        w = torch.softmax(s, dim=-1, out=s)
    if empty is not None:
        w = w.masked_fill(empty, 0.0)
    return w @ v, w  # (..., seq_q, d_v)


# ----------------------------------------------------------------------------------------
# The checks, run once at the public door (see attnlib._validate.validated).
# ----------------------------------------------------------------------------------------


def _check_softmax(x, axis: int = -1, mask=None) -> None:
    fn = "softmax"
    x = as_float_array(fn, "x", x, allow_int=True)
    check_ndim(fn, "x", x, min_ndim=1)
    normalise_axis(fn, axis, x.ndim)
    check_mask(fn, mask, x, tuple(x.shape), "input x")


def _check_scores(q, k, scale=None) -> None:
    fn = "scores"
    q, k, _ = check_qk(fn, q, k)
    default_scale(fn, q.shape[-1], scale)


def _check_attend(q, k, v, mask=None, *, causal=False, align="top_left", scale=None) -> None:
    fn = "attend"
    q, k, v, batch = check_qkv(fn, q, k, v)
    score_shape = (*batch, q.shape[-2], k.shape[-2])
    check_mask(fn, mask, q, score_shape, "scores (..., seq_q, seq_k)")
    if not (isinstance(align, str) and align in ALIGNS):
        check_choice(fn, "align", align, ALIGNS)
    if scale is not None:
        default_scale(fn, q.shape[-1], scale)


def _scale(d_k: int, scale) -> float:
    return 1.0 / math.sqrt(d_k) if scale is None else float(scale)


# ----------------------------------------------------------------------------------------
# Public functions.
# ----------------------------------------------------------------------------------------


@validated(_check_softmax)
def softmax(x, axis: int = -1, mask=None):
    """Numerically stable softmax; masked entries get weight 0.

    Parameters
    ----------
    x : ndarray or Tensor of shape (..., seq_k)
        Scores (pre-softmax). Integer input is converted to float.
    axis : int, default -1
        The axis that sums to 1 — for attention scores, the key axis.
    mask : bool ndarray or Tensor broadcastable to x.shape, optional
        True = may attend. Masked entries get weight exactly 0. A row with nothing
        unmasked gets all zeros (never NaN, no warning).

    Returns
    -------
    weights : same kind, shape and dtype as x
        Non-negative; each row along ``axis`` sums to 1 (or 0 if fully masked).

    See Also
    --------
    attend : softmax of the scores, then the weighted sum of the values.
    torch.softmax : the same for torch tensors, without a mask.

    Examples
    --------
    >>> import numpy as np
    >>> softmax(np.array([1.0, 2.0, 3.0])).round(3)
    array([0.09 , 0.245, 0.665])
    >>> softmax(np.zeros((2, 3)), mask=np.array([[True, True, False], [False, False, False]]))
    array([[0.5, 0.5, 0. ],
           [0. , 0. , 0. ]])
    """
    ops = B.ops_for(x)
    if not B.is_float(x):  # an int input becomes float (torch's default dtype / float64)
        x = ops.astype(x, torch.get_default_dtype() if ops.name == "torch" else "float64")
    work = ops.work_dtype(x)
    out = _softmax_math(ops.astype(x, work), axis % x.ndim, mask, ops)
    return ops.astype(out, x.dtype)


@validated(_check_scores)
def scores(q, k, scale=None):
    """Compare every query with every key: ``q @ kᵀ * scale`` (pre-softmax).

    Parameters
    ----------
    q : ndarray or Tensor of shape (..., seq_q, d_k)
        Queries, one row per query position.
    k : ndarray or Tensor of shape (..., seq_k, d_k)
        Keys, one row per key position. Same kind and dtype as q.
    scale : float, optional
        Multiplies the dot products; default ``1 / sqrt(d_k)``.

    Returns
    -------
    scores : same kind and dtype as q, shape (..., seq_q, seq_k)
        Row i, column j is how well query i matches key j. fp16/bf16 are accumulated
        in fp32.

    See Also
    --------
    attend : scores, softmax and the weighted values in one call.
    softmax : turns these scores into weights.

    Examples
    --------
    >>> import numpy as np
    >>> q = np.array([[1.0, 0.0], [0.0, 1.0]])            # (seq_q, d_k)
    >>> k = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])  # (seq_k, d_k)
    >>> scores(q, k, scale=1.0)                           # (seq_q, seq_k)
    array([[1., 1., 0.],
           [0., 1., 2.]])
    """
    ops = B.ops_for(q)
    work = ops.work_dtype(q)
    s = _scores_math(ops.astype(q, work), ops.astype(k, work), _scale(q.shape[-1], scale), ops)
    return ops.astype(s, q.dtype)


@validated(_check_attend)
def attend(q, k, v, mask=None, *, causal: bool = False, align: str = "top_left", scale=None):
    """Scaled dot-product attention, ``softmax(q kᵀ · scale) v``, returning the weights too.

    Parameters
    ----------
    q : ndarray or Tensor of shape (..., seq_q, d_k)
        Queries: what each position is looking for.
    k : ndarray or Tensor of shape (..., seq_k, d_k)
        Keys: the label each position offers to be found by.
    v : ndarray or Tensor of shape (..., seq_k, d_v)
        Values: what each position hands over when it is attended to.
    mask : bool ndarray or Tensor broadcastable to (..., seq_q, seq_k), optional
        True = may attend (the convention of ``scaled_dot_product_attention``).
    causal : bool, default False
        Also block keys after the query position: ``causal_mask(seq_q, seq_k,
        align=align)``.
    align : {"top_left", "bottom_right"}, default "top_left"
        Where the causal diagonal sits, as in :func:`attnlib.causal_mask`: ``"top_left"``
        as ``scaled_dot_product_attention(is_causal=True)``; ``"bottom_right"`` when the
        queries are the last seq_q of the seq_k positions (decoding with a cache).
    scale : float, optional
        Default ``1 / sqrt(d_k)``.

    Returns
    -------
    out : same kind and dtype as q, shape (..., seq_q, d_v)
        Each query's weighted blend of the values.
    weights : same kind and dtype as q, shape (..., seq_q, seq_k)
        Post-softmax weights; each row sums to 1, a fully masked row is all 0
        (and its ``out`` row is 0).

    See Also
    --------
    attnlib.blockwise.blockwise_attend : the same output tile by tile, without the weights.
    attnlib.kv_cache.grouped_attend : query heads sharing key/value heads (GQA, MQA).
    attnlib.MultiHeadAttention : projections, heads and ``W_o`` around this function.
    torch.nn.functional.scaled_dot_product_attention : torch's fused version (no weights
        returned); same mask convention, True = may attend.

    Examples
    --------
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> q, k, v = (torch.randn(2, 4, 8, generator=g) for _ in range(3))  # (batch, seq, d)
    >>> out, weights = attend(q, k, v, causal=True)
    >>> tuple(out.shape), tuple(weights.shape)
    ((2, 4, 8), (2, 4, 4))
    >>> torch.allclose(weights.sum(-1), torch.ones(2, 4))  # every row sums to 1
    True
    >>> sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> torch.allclose(out, sdpa, atol=1e-6)
    True
    """
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if causal:
        cm = causal_mask(seq_q, seq_k, align=align, like=q)  # (seq_q, seq_k)
        mask = cm if mask is None else (mask & cm)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)

    ops = B.ops_for(q)
    work = ops.work_dtype(q)
    q_, k_, v_ = (ops.astype(t, work) for t in (q, k, v))
    if ops.name == "torch":
        out, w = _attend_torch_fast(q_, k_, v_, mask, scale)
    else:
        out, w = _attend_math(q_, k_, v_, mask, scale, ops)
    return ops.astype(out, q.dtype), ops.astype(w, q.dtype)
