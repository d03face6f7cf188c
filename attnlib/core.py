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
import numbers
from typing import Any

import numpy as np
import torch

from attnlib import _backend as B
from attnlib.masks import causal_mask

__all__ = ["softmax", "scores", "attend"]


# ----------------------------------------------------------------------------------------
# Input checks: every message names the function, the argument, its shape and dtype.
# ----------------------------------------------------------------------------------------


def _as_float_array(fn: str, name: str, x: Any, *, allow_int: bool = False):
    if not (B.is_torch(x) or B.is_numpy(x)):
        raise TypeError(
            f"{fn}: {name} must be a numpy.ndarray or a torch.Tensor, got {type(x).__name__}; "
            f"wrap it with np.asarray(...) or torch.as_tensor(...)"
        )
    if B.is_bool(x) or not B.is_float(x):
        if allow_int and not B.is_bool(x):
            return x.to(torch.get_default_dtype()) if B.is_torch(x) else x.astype(np.float64)
        raise TypeError(
            f"{fn}: {B.describe(name, x)} must have a floating-point dtype "
            f"(float16, bfloat16, float32 or float64)"
        )
    return x


def _same_kind_and_dtype(fn: str, named: dict[str, Any]) -> None:
    items = list(named.items())
    first_name, first = items[0]
    for name, x in items[1:]:
        if B.is_torch(x) != B.is_torch(first):
            raise TypeError(
                f"{fn}: {B.describe(first_name, first)} and {B.describe(name, x)} mix numpy and "
                f"torch; pass all of them as the same kind"
            )
        if x.dtype != first.dtype:
            raise TypeError(
                f"{fn}: {B.describe(first_name, first)} and {B.describe(name, x)} have different "
                f"dtypes; convert them to one dtype first"
            )


def _at_least_2d(fn: str, named: dict[str, Any]) -> None:
    for name, x in named.items():
        if x.ndim < 2:
            raise ValueError(
                f"{fn}: {B.describe(name, x)} needs at least 2 dims (..., seq, d); "
                f"for a single vector use x[None, :]"
            )


def _broadcast(fn: str, what: str, shapes: dict[str, tuple]) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        listed = ", ".join(f"{n} {s}" for n, s in shapes.items())
        raise ValueError(f"{fn}: the {what} do not broadcast: {listed}") from None


def _check_mask(fn: str, mask: Any, like: Any, target: tuple, target_name: str):
    if mask is None:
        return None
    if not (B.is_torch(mask) or B.is_numpy(mask)):
        raise TypeError(
            f"{fn}: mask must be a boolean numpy.ndarray or torch.Tensor (True = may attend), "
            f"got {type(mask).__name__}"
        )
    if B.is_torch(mask) != B.is_torch(like):
        helper = "torch.as_tensor(mask)" if B.is_torch(like) else "mask.numpy()"
        raise TypeError(
            f"{fn}: {B.describe('mask', mask)} is not the same kind as the inputs "
            f"({B.kind(like)}); convert it with {helper}"
        )
    if not B.is_bool(mask):
        raise TypeError(
            f"{fn}: {B.describe('mask', mask)} must be boolean (True = may attend). "
            f"A float or int 0/1 mask would be added to the scores and block nothing; "
            f"use mask.bool() / mask.astype(bool) if 1 means 'may attend'"
        )
    mshape = tuple(mask.shape)
    try:
        joint = tuple(np.broadcast_shapes(mshape, target))
    except ValueError:
        joint = None
    if joint != target:
        raise ValueError(
            f"{fn}: mask of shape {mshape} does not broadcast to the {target_name} of shape "
            f"{target}; a mask is (..., seq_q, seq_k), e.g. (seq_q, seq_k) or (batch, 1, seq_k)"
        )
    return mask


def _normalise_axis(fn: str, axis: int, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{fn}: axis must be an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{fn}: axis={axis} is out of range for an input with {ndim} dims")
    return axis % ndim


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
# Public functions.
# ----------------------------------------------------------------------------------------


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
    """
    fn = "softmax"
    x = _as_float_array(fn, "x", x, allow_int=True)
    if x.ndim == 0:
        raise ValueError(f"softmax: {B.describe('x', x)} needs at least 1 dim")
    axis = _normalise_axis(fn, axis, x.ndim)
    mask = _check_mask(fn, mask, x, tuple(x.shape), "input x")
    ops = B.ops_for(x)
    work = ops.work_dtype(x)
    out = _softmax_math(ops.astype(x, work), axis, mask, ops)
    return ops.astype(out, x.dtype)


def _default_scale(fn: str, d_k: int, scale) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d_k)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{fn}: scale must be a number or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"{fn}: scale must be finite, got {scale}")
    return float(scale)


def _check_qk(fn: str, q, k):
    q = _as_float_array(fn, "q", q)
    k = _as_float_array(fn, "k", k)
    _same_kind_and_dtype(fn, {"q": q, "k": k})
    _at_least_2d(fn, {"q": q, "k": k})
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"{fn}: q has d_k={q.shape[-1]} (shape {tuple(q.shape)}) but k has "
            f"d_k={k.shape[-1]} (shape {tuple(k.shape)}); every query is compared with every "
            f"key by a dot product, so their last dims must match"
        )
    batch = _broadcast(
        fn, "batch dims of q and k", {"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2])}
    )
    return q, k, batch


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
    """
    fn = "scores"
    q, k, _ = _check_qk(fn, q, k)
    scale = _default_scale(fn, q.shape[-1], scale)
    ops = B.ops_for(q)
    work = ops.work_dtype(q)
    s = _scores_math(ops.astype(q, work), ops.astype(k, work), scale, ops)
    return ops.astype(s, q.dtype)


def attend(q, k, v, mask=None, *, causal: bool = False, scale=None):
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
        Also block keys after the query position (top-left aligned, as
        ``scaled_dot_product_attention(is_causal=True)``).
    scale : float, optional
        Default ``1 / sqrt(d_k)``.

    Returns
    -------
    out : same kind and dtype as q, shape (..., seq_q, d_v)
        Each query's weighted blend of the values.
    weights : same kind and dtype as q, shape (..., seq_q, seq_k)
        Post-softmax weights; each row sums to 1, a fully masked row is all 0
        (and its ``out`` row is 0).
    """
    fn = "attend"
    q, k, _ = _check_qk(fn, q, k)
    v = _as_float_array(fn, "v", v)
    _same_kind_and_dtype(fn, {"q": q, "v": v})
    _at_least_2d(fn, {"v": v})
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"attend: k has seq_k={k.shape[-2]} (shape {tuple(k.shape)}) but v has "
            f"seq_k={v.shape[-2]} (shape {tuple(v.shape)}); every key needs its value"
        )
    batch = _broadcast(
        fn,
        "batch dims of q, k and v",
        {"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2]), "v": tuple(v.shape[:-2])},
    )
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    score_shape = (*batch, seq_q, seq_k)
    mask = _check_mask(fn, mask, q, score_shape, "scores (..., seq_q, seq_k)")
    if causal:
        cm = causal_mask(seq_q, seq_k, like=q)
        mask = cm if mask is None else (mask & cm)
    scale = _default_scale(fn, q.shape[-1], scale)

    ops = B.ops_for(q)
    work = ops.work_dtype(q)
    q_, k_, v_ = (ops.astype(t, work) for t in (q, k, v))
    if ops.name == "torch":
        out, w = _attend_torch_fast(q_, k_, v_, mask, scale)
    else:
        out, w = _attend_math(q_, k_, v_, mask, scale, ops)
    return ops.astype(out, q.dtype), ops.astype(w, q.dtype)
