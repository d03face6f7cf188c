"""Positions inside keys: sinusoidal positions and rotary embeddings (lesson 12).

Attention by itself ignores order: permute the tokens and the outputs are permuted the same
way. Two ways to put position into the key-query comparison:

* :func:`sinusoidal_positions` — a fixed code per position, *added to the inputs* before
  the projections, so position ends up inside every query, key and value;
* :func:`apply_rotary` — rotary embeddings (RoPE): rotate each query and each key by an
  angle proportional to its position, in d_k/2 planes at different frequencies. Values are
  not rotated. Because ``(R_m q)·(R_n k) = q·(R_{n-m} k)``, the score depends on the
  offset ``n - m`` only, not on where the pair sits in the sequence.

Pairing convention: dimension ``2i`` and ``2i + 1`` form plane ``i`` (as in the RoFormer
paper), rotated by angle ``position · base^(-2i/d_k)``.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlib import _backend as B
from attnlib._validate import as_float_array, check_int, check_ndim, check_number

__all__ = ["sinusoidal_positions", "rotary_frequencies", "rotary_angles", "apply_rotary"]


def sinusoidal_positions(seq: int, d_model: int, *, base: float = 10000.0, like=None):
    """The fixed position codes of "Attention Is All You Need".

    ``P[pos, 2i] = sin(pos / base^(2i/d_model))``, ``P[pos, 2i+1] = cos(...)``: each pair
    of columns is a clock turning at its own speed, from one turn every 2π positions
    (i = 0) to very slow ones.

    Parameters
    ----------
    seq : int
        Number of positions.
    d_model : int
        Width of the code (even).
    base : float, default 10000
    like : ndarray or Tensor, optional
        Return a torch tensor of ``like``'s dtype if it is a tensor; else float64 numpy.

    Returns
    -------
    P : ndarray or Tensor of shape (seq, d_model)
        Added to token embeddings of shape (..., seq, d_model).
    """
    fn = "sinusoidal_positions"
    seq = check_int(fn, "seq", seq, minimum=0)
    d_model = check_int(fn, "d_model", d_model, minimum=2)
    base = check_number(fn, "base", base, positive=True)
    if d_model % 2:
        raise ValueError(f"{fn}: d_model must be even (sin/cos pairs), got {d_model}")
    pos = np.arange(seq, dtype=np.float64)[:, None]  # (seq, 1)
    freq = base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (d_model/2,)
    P = np.empty((seq, d_model))
    P[:, 0::2] = np.sin(pos * freq)  # (seq, d_model/2)
    P[:, 1::2] = np.cos(pos * freq)
    if B.is_torch(like):
        return torch.as_tensor(P, dtype=like.dtype, device=like.device)
    return P


def rotary_frequencies(d_k: int, *, base: float = 10000.0) -> np.ndarray:
    """Angular speed of each rotation plane: ``base^(-2i/d_k)``, shape (d_k/2,)."""
    fn = "rotary_frequencies"
    d_k = check_int(fn, "d_k", d_k, minimum=2)
    base = check_number(fn, "base", base, positive=True)
    if d_k % 2:
        raise ValueError(f"{fn}: d_k must be even (dimensions are rotated in pairs), got {d_k}")
    return base ** (-np.arange(0, d_k, 2, dtype=np.float64) / d_k)


def rotary_angles(positions, d_k: int, *, base: float = 10000.0) -> np.ndarray:
    """Rotation angle of each plane at each position, shape (seq, d_k/2), float64."""
    pos = np.asarray(positions.cpu() if B.is_torch(positions) else positions, dtype=np.float64)
    if pos.ndim != 1:
        raise ValueError(f"rotary_angles: positions must have shape (seq,), got {pos.shape}")
    return pos[:, None] * rotary_frequencies(d_k, base=base)[None, :]  # (seq, d_k/2)


def apply_rotary(x, positions=None, *, base: float = 10000.0):
    """Rotate queries or keys by their positions (rotary embeddings, RoPE).

    Plane ``i`` = dimensions (2i, 2i+1) is rotated by ``position · base^(-2i/d_k)``:
    ``(x0, x1) -> (x0·cos - x1·sin, x0·sin + x1·cos)``. Lengths are unchanged, so only the
    angle between a query and a key moves — by their position offset.

    Parameters
    ----------
    x : ndarray or Tensor of shape (..., seq, d_k)
        Queries or keys (never values). d_k must be even.
    positions : sequence of int of shape (seq,), optional
        Position of each row; default ``0 .. seq-1``.
    base : float, default 10000

    Returns
    -------
    x_rot : same kind, dtype and shape as x
    """
    fn = "apply_rotary"
    x = as_float_array(fn, "x", x)
    check_ndim(fn, "x", x, min_ndim=2, doc="(..., seq, d_k)")
    seq, d_k = x.shape[-2], x.shape[-1]
    if d_k % 2:
        raise ValueError(f"{fn}: {B.describe('x', x)} has odd d_k={d_k}; pairs need even d_k")
    positions = np.arange(seq) if positions is None else positions
    ang = rotary_angles(positions, d_k, base=base)  # (seq, d_k/2)
    if ang.shape[0] != seq:
        raise ValueError(f"{fn}: {ang.shape[0]} positions for {B.describe('x', x)} (seq={seq})")
    cos, sin = np.cos(ang), np.sin(ang)
    if B.is_torch(x):
        work = B.TORCH.work_dtype(x)
        cos = torch.as_tensor(cos, dtype=work, device=x.device)
        sin = torch.as_tensor(sin, dtype=work, device=x.device)
        xw = x.to(work)
        out = torch.empty_like(xw)
    else:
        work = B.NUMPY.work_dtype(x)
        cos, sin, xw = cos.astype(work), sin.astype(work), x.astype(work, copy=False)
        out = np.empty_like(xw)
    x0, x1 = xw[..., 0::2], xw[..., 1::2]  # (..., seq, d_k/2): the two coordinates of each plane
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return B.ops_for(x).astype(out, x.dtype)
