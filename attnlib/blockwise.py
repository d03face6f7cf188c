"""Attention without the full score matrix: online softmax over blocks of keys (lesson 11).

The explicit path (:func:`attnlib.attend`) builds the whole (seq_q, seq_k) score matrix,
so its memory grows like seq². But each query only needs three running quantities while
it walks over the keys block by block:

* ``m`` — the largest score seen so far (for a stable exponent),
* ``l`` — the sum of ``exp(score - m)`` so far (the softmax denominator),
* ``acc`` — the sum of ``exp(score - m) · value`` so far (the numerator).

When a new block raises the maximum from ``m`` to ``m_new``, everything accumulated so
far was computed against the old maximum; multiplying it by ``exp(m - m_new)`` rescales it
exactly. At the end ``out = acc / l``. Nothing of size seq_q × seq_k is ever stored: the
largest temporary is one (block_q, block_k) tile per (batch, head).

* :func:`online_softmax_update` — one step of the running update;
* :func:`blockwise_attend` — attention over (query-block, key-block) tiles, with causal
  masking inside the tiles, for numpy arrays or torch tensors;
* :func:`explicit_attend` — the plain path (one full score matrix) for comparisons;
* :func:`peak_bytes` — peak memory of a numpy computation, measured with tracemalloc.
"""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable

import torch

from attnlib import _backend as B
from attnlib._validate import (
    check_choice,
    check_int,
    check_qkv,
    default_scale,
    validated,
)
from attnlib.masks import ALIGNS, causal_offset

__all__ = ["online_softmax_update", "blockwise_attend", "explicit_attend", "peak_bytes"]


def online_softmax_update(m, l, acc, s_block, v_block):
    """Fold one block of scores into the running softmax state.

    Parameters
    ----------
    m : array of shape (..., seq_q, 1)
        Running maximum score per query (``-inf`` before the first block).
    l : array of shape (..., seq_q, 1)
        Running sum of ``exp(score - m)`` (0 before the first block).
    acc : array of shape (..., seq_q, d_v)
        Running sum of ``exp(score - m) · value`` (0 before the first block).
    s_block : array of shape (..., seq_q, block_k)
        Scores of this block of keys (``-inf`` where masked).
    v_block : array of shape (..., block_k, d_v)
        The values of the same keys.

    Returns
    -------
    m_new, l_new, acc_new : arrays of the shapes of m, l, acc
        The state after this block. ``acc_new / l_new`` is the attention output over
        every key seen so far.

    See Also
    --------
    blockwise_attend : runs this update over every block of keys.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> s, v = rng.standard_normal((1, 6)), rng.standard_normal((6, 2))   # one query, 6 keys
    >>> m, l, acc = np.full((1, 1), -np.inf), np.zeros((1, 1)), np.zeros((1, 2))
    >>> for j in (0, 2, 4):                                  # blocks of 2 keys
    ...     m, l, acc = online_softmax_update(m, l, acc, s[:, j : j + 2], v[j : j + 2])
    >>> w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    >>> np.allclose(acc / l, w @ v)
    True
    """
    ops = B.ops_for(s_block)
    m_new = ops.maximum(m, ops.amax(s_block, -1))  # (..., seq_q, 1): 1. update the running max
    m_safe = ops.where(ops.isfinite(m_new), m_new, 0.0)  # rows with nothing unmasked yet
    alpha = ops.exp(m - m_safe)  # (..., seq_q, 1): 2. rescale what was summed against old m
    p = ops.exp(s_block - m_safe)  # (..., seq_q, block_k): 3. this block's exponentials
    l_new = l * alpha + ops.sum(p, -1)  # 4. the denominator
    acc_new = acc * alpha + p @ v_block  # (..., seq_q, d_v): 5. the numerator
    return m_new, l_new, acc_new


def _update_in_place(m, l, acc, s, v_block):
    """:func:`online_softmax_update` for torch without autograd, reusing buffers.

    Same five steps; the tile's exponentials are computed in place in ``s`` and the
    running sums are updated in place, which saves allocations and passes over memory.
    """
    m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # 1.
    m_safe = torch.where(torch.isfinite(m_new), m_new, 0.0)
    alpha = (m - m_safe).exp_()  # 2.
    p = s.sub_(m_safe).exp_()  # 3. (overwrites the scores)
    l.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))  # 4.
    acc.mul_(alpha).add_(p @ v_block)  # 5.
    return m_new, l, acc


def _check_blockwise_attend(
    q, k, v, *, causal=False, align="top_left", block_q=256, block_k=256, scale=None
) -> None:
    fn = "blockwise_attend"
    q, k, v, _ = check_qkv(fn, q, k, v)
    check_choice(fn, "align", align, ALIGNS)
    check_int(fn, "block_q", block_q, minimum=1)
    check_int(fn, "block_k", block_k, minimum=1)
    default_scale(fn, q.shape[-1], scale)


@validated(_check_blockwise_attend)
def blockwise_attend(
    q,
    k,
    v,
    *,
    causal: bool = False,
    align: str = "top_left",
    block_q: int = 256,
    block_k: int = 256,
    scale=None,
):
    """Scaled dot-product attention computed tile by tile, never storing seq_q × seq_k.

    Same result as ``attnlib.attend(q, k, v, causal=causal, align=align)[0]`` up to floating-point
    rounding (tests/test_blockwise.py checks it against ``attend`` and torch's
    ``scaled_dot_product_attention``).

    Parameters
    ----------
    q : ndarray or Tensor of shape (..., seq_q, d_k)
    k : ndarray or Tensor of shape (..., seq_k, d_k)
    v : ndarray or Tensor of shape (..., seq_k, d_v)
    causal : bool, default False
        Hide the future, as ``attend(causal=True, align=align)``. Tiles entirely in the
        future are skipped; the tiles that cross the diagonal are masked inside.
    align : {"top_left", "bottom_right"}, default "top_left"
        As in :func:`attnlib.causal_mask`: ``"top_left"``, query i sees keys 0..i;
        ``"bottom_right"``, keys 0..i + (seq_k - seq_q).
    block_q, block_k : int, default 256
        Tile size: queries and keys processed together.
    scale : float, optional
        Default ``1 / sqrt(d_k)``.

    Returns
    -------
    out : same kind and dtype as q, shape (..., seq_q, d_v)
        No weights: they are never stored. A query with no visible key gets 0.

    See Also
    --------
    attnlib.attend : the explicit path, which also returns the weights.
    explicit_attend : that path, named for comparisons.
    torch.nn.functional.scaled_dot_product_attention : torch's fused kernels work by tiles too.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> q, k, v = (torch.randn(2, 10, 8, generator=g) for _ in range(3))
    >>> out = blockwise_attend(q, k, v, causal=True, block_q=4, block_k=3)
    >>> torch.allclose(out, explicit_attend(q, k, v, causal=True), atol=1e-6)
    True
    """
    batch = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    ops = B.ops_for(q)
    work = ops.work_dtype(q)
    q_, k_, v_ = (ops.astype(t, work) for t in (q, k, v))
    q_ = q_ * scale  # scale the (seq_q, d_k) queries once, not every score tile
    # torch without autograd: the fast path that updates its buffers in place
    in_place = ops.name == "torch" and not ops.tracks_grad(q, k, v)
    seq_q, seq_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    # causal: query i sees keys 0 .. i + offset
    offset = causal_offset(seq_q, seq_k, align) if causal else 0
    out = ops.full((*batch, seq_q, d_v), 0.0, work, like=q)  # (..., seq_q, d_v)
    for i0 in range(0, seq_q, block_q):
        i1 = min(i0 + block_q, seq_q)
        q_blk = q_[..., i0:i1, :]  # (..., bq, d_k)
        shape = (*batch, i1 - i0, 1)
        m = ops.full(shape, -math.inf, work, like=q)  # (..., bq, 1)
        l = ops.full(shape, 0.0, work, like=q)  # (..., bq, 1)
        acc = ops.full((*batch, i1 - i0, d_v), 0.0, work, like=q)  # (..., bq, d_v)
        # causal: keys after the last query of this block are never visible
        k_end = max(0, min(seq_k, i1 + offset)) if causal else seq_k
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, k_end)
            s = q_blk @ ops.transpose_last(k_[..., j0:j1, :])  # (..., bq, bk)
            if causal and j1 - 1 > i0 + offset:  # the tile crosses the diagonal: mask inside
                qi = ops.arange(i0, i1, like=q)[:, None]  # (bq, 1)
                kj = ops.arange(j0, j1, like=q)[None, :]  # (1, bk)
                s = ops.where(kj > qi + offset, -math.inf, s)  # (..., bq, bk)
            if in_place:
                m, l, acc = _update_in_place(m, l, acc, s, v_[..., j0:j1, :])
            else:
                m, l, acc = online_softmax_update(m, l, acc, s, v_[..., j0:j1, :])
        out[..., i0:i1, :] = acc / ops.where(l > 0, l, 1.0)  # (..., bq, d_v)
    return ops.astype(out, q.dtype)


def explicit_attend(q, k, v, *, causal: bool = False, align: str = "top_left", scale=None):
    """The explicit path: build the full score matrix, softmax it, multiply by v.

    ``attnlib.attend(q, k, v, causal=causal, align=align)[0]``, named here so that lesson
    11 and the benchmark compare the two paths by name.

    Parameters
    ----------
    q, k, v, causal, align, scale
        As in :func:`blockwise_attend`.

    Returns
    -------
    out : same kind and dtype as q, shape (..., seq_q, d_v)

    See Also
    --------
    blockwise_attend : the tiled path.
    attnlib.attend : what this calls.
    """
    from attnlib.core import attend

    return attend(q, k, v, causal=causal, align=align, scale=scale)[0]


def peak_bytes(fn: Callable, *args, **kwargs) -> int:
    """Peak bytes newly allocated while ``fn(*args, **kwargs)`` runs (numpy, tracemalloc).

    numpy reports every array buffer to Python's tracemalloc, so this counts exactly the
    temporaries and the result a computation creates — deterministic, unlike the
    process's resident size. The inputs, allocated before the call, are not counted.
    Torch tensors are not traced: measure the numpy version of the computation.

    Parameters
    ----------
    fn : callable
        Run as ``fn(*args, **kwargs)``; its result is freed before returning.
    *args, **kwargs
        Passed to ``fn``.

    Returns
    -------
    nbytes : int
        Peak of the memory traced during the call, above what was traced before it.

    See Also
    --------
    blockwise_attend : whose memory it measures in lesson 11.

    Examples
    --------
    >>> import numpy as np
    >>> peak_bytes(np.zeros, (1000,)) >= 8000              # the result's 8000 bytes at least
    True
    """
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = fn(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return peak - base
