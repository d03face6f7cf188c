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
paper), rotated by angle ``position · base^(-2i/d_k)``. GPT-NeoX and the Llama code of
Hugging Face ``transformers`` pair dimension ``i`` with ``i + d_k/2`` instead (the
"rotate-half" layout, :func:`apply_rotary_halves`). Both are RoPE: one is the other with the
dimensions of q and k permuted (:func:`rotary_halves_permutation`), and a permutation
applied to both q and k leaves every score unchanged.

ALiBi (:func:`alibi_slopes`, :func:`alibi_bias`) puts no position into the vectors at all:
each head adds ``-slope · distance`` to its scores, a penalty growing linearly with how far
back the key is.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlib import _backend as B
from attnlib._validate import as_float_array, check_int, check_ndim, check_number, validated

__all__ = [
    "sinusoidal_positions",
    "rotary_frequencies",
    "rotary_angles",
    "apply_rotary",
    "rotary_halves_permutation",
    "apply_rotary_halves",
    "alibi_slopes",
    "alibi_bias",
]


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

    See Also
    --------
    apply_rotary : position as a rotation of queries and keys instead.

    Examples
    --------
    >>> sinusoidal_positions(3, 4).round(3)
    array([[ 0.   ,  1.   ,  0.   ,  1.   ],
           [ 0.841,  0.54 ,  0.01 ,  1.   ],
           [ 0.909, -0.416,  0.02 ,  1.   ]])
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


def _check_even_d_k(fn: str, d_k) -> None:
    d_k = check_int(fn, "d_k", d_k, minimum=2)
    if d_k % 2:
        raise ValueError(f"{fn}: d_k must be even (dimensions are rotated in pairs), got {d_k}")


def _check_rotary_frequencies(d_k: int, *, base: float = 10000.0) -> None:
    _check_even_d_k("rotary_frequencies", d_k)
    check_number("rotary_frequencies", "base", base, positive=True)


def _positions_array(positions) -> np.ndarray:
    """``positions`` (a sequence, ndarray or Tensor) as a float64 numpy array."""
    return np.asarray(positions.cpu() if B.is_torch(positions) else positions, dtype=np.float64)


def _check_rotary_angles(positions, d_k: int, *, base: float = 10000.0) -> None:
    pos = _positions_array(positions)
    if pos.ndim != 1:
        raise ValueError(f"rotary_angles: positions must have shape (seq,), got {pos.shape}")
    _check_even_d_k("rotary_angles", d_k)
    check_number("rotary_angles", "base", base, positive=True)


@validated(_check_rotary_frequencies)
def rotary_frequencies(d_k: int, *, base: float = 10000.0) -> np.ndarray:
    """Angular speed of each rotation plane: ``base^(-2i/d_k)``, shape (d_k/2,).

    Parameters
    ----------
    d_k : int
        Key width, even.
    base : float, default 10000

    Returns
    -------
    freq : float64 ndarray of shape (d_k/2,)

    See Also
    --------
    rotary_angles : these speeds times the positions.
    apply_rotary : the rotation they drive.

    Examples
    --------
    >>> rotary_frequencies(8)
    array([1.   , 0.1  , 0.01 , 0.001])
    """
    return base ** (-np.arange(0, d_k, 2, dtype=np.float64) / d_k)


@validated(_check_rotary_angles)
def rotary_angles(positions, d_k: int, *, base: float = 10000.0) -> np.ndarray:
    """Rotation angle of each plane at each position, shape (seq, d_k/2), float64.

    Parameters
    ----------
    positions : sequence of int, ndarray or Tensor of shape (seq,)
    d_k : int
        Key width, even.
    base : float, default 10000

    Returns
    -------
    angles : float64 ndarray of shape (seq, d_k/2)

    See Also
    --------
    rotary_frequencies : the angle per position of each plane.

    Examples
    --------
    >>> rotary_angles([0, 1, 2], 4)
    array([[0.  , 0.  ],
           [1.  , 0.01],
           [2.  , 0.02]])
    """
    pos = _positions_array(positions)  # (seq,)
    return pos[:, None] * rotary_frequencies(d_k, base=base)[None, :]  # (seq, d_k/2)


def _check_rotary_input(fn: str, x, positions, base, name: str = "x") -> None:
    """``x`` a float array (..., seq, d_k) with an even d_k; ``positions`` (seq,); ``base``
    a positive number — or a clear error naming ``name``."""
    as_float_array(fn, name, x)
    check_ndim(fn, name, x, min_ndim=2, doc="(..., seq, d_k)")
    if x.shape[-1] % 2:
        d_k = x.shape[-1]
        raise ValueError(f"{fn}: {B.describe(name, x)} has odd d_k={d_k}; pairs need even d_k")
    check_number(fn, "base", base, positive=True)
    if positions is not None:
        pos = _positions_array(positions)
        seq = x.shape[-2]
        if pos.ndim != 1:
            raise ValueError(f"{fn}: positions must have shape (seq,), got {pos.shape}")
        if pos.shape[0] != seq:
            got = f"{pos.shape[0]} positions for {B.describe(name, x)} (seq={seq})"
            raise ValueError(f"{fn}: {got}")


def _check_apply_rotary(x, positions=None, *, base: float = 10000.0) -> None:
    _check_rotary_input("apply_rotary", x, positions, base)


def _check_apply_rotary_halves(x, positions=None, *, base: float = 10000.0) -> None:
    _check_rotary_input("apply_rotary_halves", x, positions, base)


@validated(_check_apply_rotary)
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

    See Also
    --------
    apply_rotary_halves : the rotate-half layout of the same rotations.
    attnlib.kv_cache.rotary_decode_step : rotary attention with a cache.
    sinusoidal_positions : position added to the inputs instead.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((1, 8)), rng.standard_normal((1, 8))
    >>> s_near = apply_rotary(q, [3]) @ apply_rotary(k, [1]).T   # offset 2
    >>> s_far = apply_rotary(q, [12]) @ apply_rotary(k, [10]).T  # offset 2, later in the sequence
    >>> np.allclose(s_near, s_far)
    True
    """
    seq, d_k = x.shape[-2], x.shape[-1]
    positions = np.arange(seq) if positions is None else positions
    ang = rotary_angles(positions, d_k, base=base)  # (seq, d_k/2)
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


# ----------------------------------------------------------------------------------------
# The rotate-half layout of RoPE.
# ----------------------------------------------------------------------------------------


def _check_rotary_halves_permutation(d_k: int) -> None:
    _check_even_d_k("rotary_halves_permutation", d_k)


@validated(_check_rotary_halves_permutation)
def rotary_halves_permutation(d_k: int) -> np.ndarray:
    """The dimension order that turns the rotate-half layout into interleaved pairs.

    ``perm[2i] = i`` and ``perm[2i + 1] = i + d_k/2``: ``x[..., perm]`` moves the plane
    ``(i, i + d_k/2)`` of the rotate-half layout to dimensions ``(2i, 2i + 1)``, where
    :func:`apply_rotary` expects it. Hence, for any x,
    ``apply_rotary_halves(x)[..., perm] == apply_rotary(x[..., perm])``.

    Returns
    -------
    perm : int ndarray of shape (d_k,)

    Parameters
    ----------
    d_k : int
        Key width, even.

    See Also
    --------
    apply_rotary_halves : uses it.

    Examples
    --------
    >>> rotary_halves_permutation(6)
    array([0, 3, 1, 4, 2, 5])
    """
    half = d_k // 2
    return np.stack([np.arange(half), np.arange(half, d_k)], axis=1).reshape(d_k)  # (d_k,)


@validated(_check_apply_rotary_halves)
def apply_rotary_halves(x, positions=None, *, base: float = 10000.0):
    """Rotary embeddings in the rotate-half layout (GPT-NeoX, Llama in ``transformers``).

    Plane ``i`` is dimensions ``(i, i + d_k/2)``, rotated by ``position · base^(-2i/d_k)``:
    ``x_rot = x · cos + rotate_half(x) · sin`` with ``rotate_half(x) = [-x2, x1]`` for the
    halves ``x1 = x[..., :d_k/2]`` and ``x2 = x[..., d_k/2:]``. The same rotations as
    :func:`apply_rotary`, applied to a permuted copy of the dimensions
    (:func:`rotary_halves_permutation`), which is how it is computed here. Parameters
    and return value are those of :func:`apply_rotary`.

    See Also
    --------
    apply_rotary : the interleaved layout.
    rotary_halves_permutation : the dimension order relating the two.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).standard_normal((4, 6))   # (seq, d_k)
    >>> perm = rotary_halves_permutation(6)
    >>> np.allclose(apply_rotary_halves(x)[..., perm], apply_rotary(x[..., perm]))
    True
    """
    d_k = x.shape[-1]
    perm = rotary_halves_permutation(d_k)  # (d_k,)
    inverse = np.argsort(perm)  # (d_k,)
    if B.is_torch(x):
        perm = torch.as_tensor(perm, device=x.device)
        inverse = torch.as_tensor(inverse, device=x.device)
    return apply_rotary(x[..., perm], positions, base=base)[..., inverse]  # (..., seq, d_k)


# ----------------------------------------------------------------------------------------
# ALiBi: a linear penalty on the distance to the key (Press, Smith and Lewis, ICLR 2022).
# ----------------------------------------------------------------------------------------


def alibi_slopes(n_heads: int) -> np.ndarray:
    """The head-specific slopes of ALiBi, shape (n_heads,), float64.

    For ``n_heads`` a power of two: the geometric sequence ``2^(-8/n_heads · h)``,
    h = 1 .. n_heads (8 heads: 1/2, 1/4, ..., 1/256). Otherwise, as in the paper's code:
    the slopes of the nearest smaller power of two, then every other slope of twice that
    many heads.

    Parameters
    ----------
    n_heads : int

    Returns
    -------
    slopes : float64 ndarray of shape (n_heads,)

    See Also
    --------
    alibi_bias : the penalty these slopes scale.

    Examples
    --------
    >>> alibi_slopes(4)
    array([0.25      , 0.0625    , 0.015625  , 0.00390625])
    """
    n_heads = check_int("alibi_slopes", "n_heads", n_heads, minimum=1)

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if n_heads & (n_heads - 1) == 0:
        return np.array(power_of_two(n_heads))
    below = 1 << (n_heads.bit_length() - 1)  # the largest power of two < n_heads
    extra = power_of_two(2 * below)[0::2][: n_heads - below]
    return np.array(power_of_two(below) + extra)


def alibi_bias(seq_q: int, seq_k: int | None = None, *, n_heads: int, like=None):
    """ALiBi's bias on the scores: ``-slope_h · |query position - key position|``.

    Added to the pre-softmax scores of head h (nothing is added to queries, keys or
    values). The queries are the *last* ``seq_q`` of ``seq_k`` positions (as when decoding
    with a cache; with ``seq_q == seq_k`` query i is position i). A causal model — the
    paper's setting — masks the future keys, so only ``-slope · (i - j)`` for ``j <= i``
    matters; the bias depends on the distance ``i - j`` only.

    Parameters
    ----------
    seq_q : int
    seq_k : int, optional
        Default ``seq_q``; must be at least ``seq_q``.
    n_heads : int
    like : ndarray or Tensor, optional
        Return a torch tensor of ``like``'s dtype and device if it is a tensor; else
        float64 numpy.

    Returns
    -------
    bias : ndarray or Tensor of shape (n_heads, seq_q, seq_k)
        Broadcasts against scores of shape (batch, n_heads, seq_q, seq_k).

    See Also
    --------
    alibi_slopes : the slope of each head.
    attnlib.causal_mask : the mask that goes with it in a causal model.

    Examples
    --------
    >>> alibi_bias(3, n_heads=2)[1]  # the second head: slope 2^-8 = 1/256
    array([[ 0.        , -0.00390625, -0.0078125 ],
           [-0.00390625,  0.        , -0.00390625],
           [-0.0078125 , -0.00390625,  0.        ]])
    """
    fn = "alibi_bias"
    seq_q = check_int(fn, "seq_q", seq_q, minimum=1)
    seq_k = seq_q if seq_k is None else check_int(fn, "seq_k", seq_k, minimum=1)
    if seq_k < seq_q:
        raise ValueError(f"{fn}: seq_k={seq_k} < seq_q={seq_q}; the queries are the last positions")
    slopes = alibi_slopes(n_heads)  # (n_heads,)
    query_pos = np.arange(seq_k - seq_q, seq_k)[:, None]  # (seq_q, 1)
    distance = np.abs(query_pos - np.arange(seq_k)[None, :])  # (seq_q, seq_k)
    bias = slopes[:, None, None] * -distance  # (n_heads, seq_q, seq_k)
    if B.is_torch(like):
        return torch.as_tensor(bias, dtype=like.dtype, device=like.device)
    return bias
