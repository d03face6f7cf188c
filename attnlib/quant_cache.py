"""A quantised KV cache: keys and values in 8 or 4 bits (lesson 17).

Decoding reads the whole cache at every step, so a smaller cache is a faster step as well
as a smaller one. Quantisation stores each number as a small integer **code** and keeps,
per group of numbers, the two floats that turn codes back into numbers.

This module quantises **asymmetrically** (min–max): a group with smallest value ``lo`` and
largest ``hi`` gets ``scale = (hi - lo) / (2**bits - 1)`` and ``zero = lo``; a number ``x``
becomes the code ``round((x - lo) / scale)`` in ``0 .. 2**bits - 1``, and comes back as
``zero + code · scale``. Rounding to the nearest code moves it by at most half a step:

    |x - dequantize(quantize(x))| ≤ scale / 2    (for every element, up to float rounding)

Asymmetric rather than symmetric (``scale = max|x| / (2**(bits-1) - 1)``, no zero point)
because a key channel is often far from centred on 0: a channel running from 2 to 6 would
spend half the symmetric codes on negative numbers it never holds. It costs one more float
per group.

Which numbers share a scale is the choice that matters. Per **channel** (one scale per
channel, over the tokens) or per **token** (one scale per token, over its channels). Keys
have outlier channels — a few channels much larger than the rest, in every token — so per
token those channels set every token's step and the ordinary channels lose their precision;
per channel each channel gets its own step. Values have no such channels, and the attention
output mixes them token by token, so per token suits them. That is KIVI's choice (Liu et al.
2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache"): keys per channel,
values per token; the default of :class:`QuantKVCache`.

* :func:`quantize`, :func:`dequantize`, :class:`QuantizedTensor` — 8 bits (one code a byte)
  or 4 bits (two codes packed in a byte, so a token really takes half the bytes);
* :class:`QuantKVCache` — a :class:`~attnlib.kv_cache.KVCache` that stores its keys and
  values quantised and hands them back dequantised, so a model decodes with it unchanged.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from attnlib._validate import (
    as_float_array,
    check_array,
    check_choice,
    check_instance,
    check_int,
    check_kv_step,
    check_ndim,
    normalise_axis,
    validated,
)
from attnlib.kv_cache import KVCache

__all__ = ["QuantizedTensor", "quantize", "dequantize", "QuantKVCache", "BITS", "AXES"]

BITS = (8, 4)  # code widths: 8 bits, one code a byte; 4 bits, two codes a byte
AXES = ("channel", "token")  # what one scale belongs to in a (..., seq, d) cache


class QuantizedTensor(NamedTuple):
    """A tensor as codes plus a scale and a zero point per group (see :func:`quantize`).

    ``codes`` is uint8 of the tensor's shape with 8 bits; with 4 bits the last dim is
    halved (element ``2i`` in the low four bits of byte ``i``, element ``2i + 1`` in the
    high four). ``scale`` and ``zero`` have the tensor's shape with size 1 along the axis
    each group runs over.
    """

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    bits: int
    dtype: torch.dtype  # of the tensor quantised, given back by dequantize

    @property
    def nbytes(self) -> int:
        """Bytes of the codes, the scales and the zero points."""
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scale, self.zero))


def _pack4(codes: torch.Tensor) -> torch.Tensor:
    """Codes 0..15 (..., d), d even -> bytes (..., d/2): even index low, odd index high."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def _unpack4(packed: torch.Tensor) -> torch.Tensor:
    """Bytes (..., d/2) -> codes (..., d), the inverse of _pack4."""
    low, high = packed & 15, packed >> 4
    return torch.stack([low, high], dim=-1).flatten(-2)  # (..., d/2, 2) -> (..., d)


def _check_quantize(x, bits=8, axis=-1) -> None:
    fn = "quantize"
    check_array(fn, "x", x, only="torch")
    as_float_array(fn, "x", x)
    check_ndim(fn, "x", x, min_ndim=1)
    check_choice(fn, "bits", check_int(fn, "bits", bits), BITS)
    axis = normalise_axis(fn, axis, x.ndim)
    if x.shape[axis] == 0:
        raise ValueError(f"{fn}: x has shape {tuple(x.shape)}: no numbers along axis={axis}")
    if bits == 4 and x.shape[-1] % 2:
        raise ValueError(
            f"{fn}: x has shape {tuple(x.shape)}; 4-bit codes are packed two a byte along "
            f"the last dim, which must be even"
        )
    if not torch.isfinite(x).all():
        raise ValueError(f"{fn}: x has nan or inf; they have no code")


@validated(_check_quantize)
def quantize(x: torch.Tensor, bits: int = 8, axis: int = -1) -> QuantizedTensor:
    """Quantise ``x`` to ``bits``-bit codes, one scale and zero point per group along ``axis``.

    Asymmetric (min–max): each group (the numbers of ``x`` along ``axis``, the other
    indices fixed) gets ``zero = min``, ``scale = (max - min) / (2**bits - 1)`` and codes
    ``round((x - zero) / scale)``. A constant group gets ``scale = 0`` and codes 0.

    For a cache (..., seq, d): ``axis=-1`` (over channels) is **per token**, one scale per
    token; ``axis=-2`` (over tokens) is **per channel**, one scale per channel.

    Parameters
    ----------
    x : float Tensor of shape (..., d)
        Finite; with ``bits=4`` the last dim ``d`` must be even.
    bits : {8, 4}, default 8
    axis : int, default -1
        The axis each group runs over.

    Returns
    -------
    QuantizedTensor
        ``codes`` uint8 (..., d) or, with 4 bits, (..., d / 2); ``scale`` and ``zero``
        like ``x`` with size 1 along ``axis``, in float32 (float64 for float64 input).

    See Also
    --------
    dequantize : codes back to numbers; the error is at most ``scale / 2``.

    Examples
    --------
    >>> x = torch.tensor([[0.0, 1.0, 2.5, 3.0]])
    >>> q = quantize(x, bits=4)          # one group: the row; 15 steps of 0.2 from 0 to 3
    >>> q.scale
    tensor([[0.2000]])
    >>> q.codes                          # codes 0, 5, 12, 15 packed: 0 + 16·5, 12 + 16·15
    tensor([[ 80, 252]], dtype=torch.uint8)
    >>> dequantize(q)                    # 2.5 became 2.4: off by 0.1, half a step at most
    tensor([[0.0000, 1.0000, 2.4000, 3.0000]])
    >>> q.nbytes                         # 2 bytes of codes + a float32 scale and zero
    10
    """
    work = torch.promote_types(x.dtype, torch.float32)  # scales in float32 (or float64)
    xw = x.detach().to(work)
    lo = xw.amin(dim=axis, keepdim=True)  # the zero point: code 0 stands for the minimum
    levels = 2**bits - 1
    scale = (xw.amax(dim=axis, keepdim=True) - lo) / levels  # one step
    step = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant group: codes 0
    codes = torch.round((xw - lo) / step).clamp_(0, levels).to(torch.uint8)
    if bits == 4:
        codes = _pack4(codes)  # (..., d / 2)
    return QuantizedTensor(codes, scale, lo, bits, x.dtype)


def _check_dequantize(q, dtype=None) -> None:
    fn = "dequantize"
    check_instance(fn, "q", q, QuantizedTensor, "a QuantizedTensor (made by quantize)")
    if dtype is not None:
        check_instance(fn, "dtype", dtype, torch.dtype, "a torch.dtype or None")


@validated(_check_dequantize)
def dequantize(q: QuantizedTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Numbers back from codes: ``zero + code · scale``, within ``scale / 2`` of the original.

    Parameters
    ----------
    q : QuantizedTensor
        As made by :func:`quantize`.
    dtype : torch.dtype, optional
        Default: the dtype of the tensor quantised.

    Returns
    -------
    Tensor of the shape quantised

    Examples
    --------
    >>> x = torch.tensor([[1.0, -2.0], [3.0, 5.0]])
    >>> dequantize(quantize(x, axis=0))    # per column: each column's min and max are exact
    tensor([[ 1., -2.],
            [ 3.,  5.]])
    """
    codes = _unpack4(q.codes) if q.bits == 4 else q.codes
    out = q.zero + codes.to(q.scale.dtype) * q.scale
    return out.to(q.dtype if dtype is None else dtype)


# ----------------------------------------------------------------------------------------
# The cache.
# ----------------------------------------------------------------------------------------


class _QuantRows:
    """Rows (batch, n_kv_heads, seq, d) of keys or values, stored quantised.

    ``per="token"``: each appended row is quantised at once over its ``d`` channels.
    ``per="channel"``: rows wait in a float ``residual`` until ``group`` of them have come,
    then the group is quantised per channel (over its ``group`` tokens), as in KIVI.
    """

    def __init__(self, batch, n_kv_heads, d, *, per, bits, group, max_len, dtype):
        self.per, self.bits, self.group, self.d, self.dtype = per, bits, group, d, dtype
        self.work = torch.promote_types(dtype, torch.float32)
        self.lead = (batch, n_kv_heads)
        self.n_quant = 0  # rows held as codes
        width = d if bits == 8 else d // 2
        self.codes = torch.zeros(*self.lead, max_len, width, dtype=torch.uint8)
        if per == "token":
            self.scale = torch.zeros(*self.lead, max_len, 1, dtype=self.work)  # a row each
        else:
            n_groups = -(-max_len // group)
            self.scale = torch.zeros(*self.lead, n_groups, d, dtype=self.work)  # a group each
            self.residual = torch.zeros(*self.lead, group, d, dtype=dtype)
        self.zero = torch.zeros_like(self.scale)
        self.n_resid = 0  # rows waiting in the residual (per channel only)

    def _grow(self, rows: int) -> None:
        """Make room for ``rows`` quantised rows (doubling, like KVCache)."""
        cap = self.codes.shape[2]
        if rows <= cap:
            return
        cap = max(rows, 2 * cap)
        scale_rows = cap if self.per == "token" else -(-cap // self.group)

        def grown(t, n):
            out = t.new_zeros(*t.shape[:2], n, t.shape[3])
            out[:, :, : t.shape[2]] = t
            return out

        self.codes = grown(self.codes, cap)
        self.scale, self.zero = grown(self.scale, scale_rows), grown(self.zero, scale_rows)

    def append(self, x: torch.Tensor) -> None:
        if self.per == "token":
            q = quantize(x, self.bits, axis=-1)  # one scale per token
            end = self.n_quant + x.shape[2]
            self._grow(end)
            self.codes[:, :, self.n_quant : end] = q.codes
            self.scale[:, :, self.n_quant : end], self.zero[:, :, self.n_quant : end] = (
                q.scale,
                q.zero,
            )
            self.n_quant = end
            return
        rows = torch.cat([self.residual[:, :, : self.n_resid], x], dim=2)  # (..., n, d)
        full = rows.shape[2] // self.group  # groups complete now
        if full:
            g0 = self.n_quant // self.group
            self._grow(self.n_quant + full * self.group)
            groups = rows[:, :, : full * self.group].unflatten(2, (full, self.group))
            q = quantize(groups, self.bits, axis=-2)  # per channel, over the group's tokens
            end = self.n_quant + full * self.group
            self.codes[:, :, self.n_quant : end] = q.codes.flatten(2, 3)
            self.scale[:, :, g0 : g0 + full] = q.scale[:, :, :, 0]  # (..., full, d)
            self.zero[:, :, g0 : g0 + full] = q.zero[:, :, :, 0]
            self.n_quant = end
        rest = rows[:, :, full * self.group :]
        self.residual[:, :, : rest.shape[2]] = rest
        self.n_resid = rest.shape[2]

    def read(self) -> torch.Tensor:
        n = self.n_quant
        if self.per == "token":
            q = QuantizedTensor(
                self.codes[:, :, :n],
                self.scale[:, :, :n],
                self.zero[:, :, :n],
                self.bits,
                self.dtype,
            )
            return dequantize(q)
        g = n // self.group
        codes = self.codes[:, :, :n].unflatten(2, (g, self.group))  # (..., g, group, width)
        scale, zero = self.scale[:, :, :g, None], self.zero[:, :, :g, None]  # (..., g, 1, d)
        held = dequantize(QuantizedTensor(codes, scale, zero, self.bits, self.dtype))
        return torch.cat([held.flatten(2, 3), self.residual[:, :, : self.n_resid]], dim=2)

    def used_bytes(self) -> int:
        per_row = self.codes.shape[3] * self.codes.element_size()
        n_scales = self.n_quant if self.per == "token" else self.n_quant // self.group
        scale_row = self.scale.shape[3] * self.scale.element_size() * 2  # scale and zero
        resid = self.n_resid * self.d * torch.empty((), dtype=self.dtype).element_size()
        b, h = self.lead
        return b * h * (self.n_quant * per_row + n_scales * scale_row + resid)

    def nbytes(self) -> int:
        held = [self.codes, self.scale, self.zero]
        if self.per == "channel":
            held.append(self.residual)
        return sum(t.untyped_storage().nbytes() for t in held)


class QuantKVCache(KVCache):
    """A KV cache that stores keys and values as 8- or 4-bit codes (see :func:`quantize`).

    Keys and values are quantised as they are appended and dequantised when read, so
    :meth:`append` and :meth:`read` take and give float tensors of the cache's dtype, like a
    :class:`~attnlib.kv_cache.KVCache` (models that take a KVCache decode with it
    unchanged). What is read differs from what was appended by at most half a step.

    Per token: a token's row is quantised on arrival, one scale and zero per token and head.
    Per channel: one scale and zero per channel and head over ``group`` tokens; the newest
    tokens wait in float (at most ``group - 1`` of them, held exactly) until a group is full,
    then the group is quantised (KIVI's grouping and residual).

    Parameters
    ----------
    batch, n_kv_heads, d_k : int
    d_v : int, optional
        Default ``d_k``. With ``bits=4``, ``d_k`` and ``d_v`` must be even.
    bits : {8, 4}, default 8
    key_axis : {"channel", "token"}, default "channel"
        What one scale of the keys belongs to.
    value_axis : {"token", "channel"}, default "token"
    group : int, default 32
        Tokens per scale for an axis quantised per channel.
    max_len : int, default 64
        Positions to allocate for (doubled when outgrown).
    dtype : torch.dtype, default torch.float32
        Of the keys and values appended and read (a floating dtype). Scales and zero
        points are float32 (float64 for a float64 cache).

    See Also
    --------
    attnlib.kv_cache.KVCache : the float cache.

    Examples
    --------
    >>> cache = QuantKVCache(1, 2, d_k=64, bits=4, group=32, max_len=64)
    >>> x = torch.randn(1, 2, 64, 64, generator=torch.Generator().manual_seed(0))
    >>> k, v = cache.append(x, x)
    >>> bool((k - x).abs().max() < 0.5), cache.length
    (True, 64)
    >>> cache.used_bytes // 64  # bytes a token: 2 heads · (32 + 16 for keys + 32 + 8 for values)
    176
    """

    _append_name = "QuantKVCache.append"

    def _check_quant_init(
        self,
        batch,
        n_kv_heads,
        d_k,
        d_v=None,
        *,
        bits=8,
        key_axis="channel",
        value_axis="token",
        group=32,
        max_len=64,
        dtype=torch.float32,
    ):
        fn = "QuantKVCache"
        self._check_init(batch, n_kv_heads, d_k, d_v, max_len=max_len, dtype=dtype)
        if not dtype.is_floating_point:
            raise TypeError(f"{fn}: dtype must be a floating dtype, got {dtype}")
        check_choice(fn, "bits", check_int(fn, "bits", bits), BITS)
        check_choice(fn, "key_axis", key_axis, AXES)
        check_choice(fn, "value_axis", value_axis, AXES)
        check_int(fn, "group", group, minimum=1)
        widths = {"d_k": d_k, "d_v": d_k if d_v is None else d_v}
        odd = {name: d for name, d in widths.items() if d % 2}
        if bits == 4 and odd:
            raise ValueError(f"{fn}: 4-bit codes pack two a byte; {odd} must be even")

    @validated(_check_quant_init)
    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        d_k: int,
        d_v: int | None = None,
        *,
        bits: int = 8,
        key_axis: str = "channel",
        value_axis: str = "token",
        group: int = 32,
        max_len: int = 64,
        dtype: torch.dtype = torch.float32,
    ):
        self.batch, self.n_kv_heads, self.d_k = int(batch), int(n_kv_heads), int(d_k)
        self.d_v = self.d_k if d_v is None else int(d_v)
        self.dtype, self.bits, self.group = dtype, bits, int(group)
        self.key_axis, self.value_axis = key_axis, value_axis
        common = dict(bits=bits, group=self.group, max_len=max_len, dtype=dtype)
        self._keys = _QuantRows(batch, n_kv_heads, self.d_k, per=key_axis, **common)
        self._values = _QuantRows(batch, n_kv_heads, self.d_v, per=value_axis, **common)
        self.length = 0

    @property
    def capacity(self) -> int:
        """Positions the code storage holds before it grows."""
        return min(self._keys.codes.shape[2], self._values.codes.shape[2])

    def _check_quant_append(self, k, v) -> None:
        check_kv_step(self._append_name, self, k, v)
        for name, x in (("k", k), ("v", v)):
            if not torch.isfinite(x).all():
                raise ValueError(f"{self._append_name}: {name} has nan or inf; they have no code")

    @validated(_check_quant_append)
    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantise and store new positions; return everything held, dequantised.

        Parameters
        ----------
        k : Tensor of shape (batch, n_kv_heads, seq_new, d_k)
        v : Tensor of shape (batch, n_kv_heads, seq_new, d_v)

        Returns
        -------
        k_all : Tensor of shape (batch, n_kv_heads, length, d_k)
        v_all : Tensor of shape (batch, n_kv_heads, length, d_v)
        """
        self._keys.append(k.detach())
        self._values.append(v.detach())
        self.length += k.shape[2]
        return self.read()

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys (batch, n_kv_heads, length, d_k) and values (..., d_v), dequantised."""
        return self._keys.read(), self._values.read()

    def truncate(self, length: int) -> None:
        """Not supported: a group's codes share one scale. Raises ``ValueError``."""
        raise ValueError("QuantKVCache.truncate: a quantised cache does not rewind")

    @property
    def nbytes(self) -> int:
        """Bytes of storage held: codes, scales and zero points (allocated capacity), and
        the float residual of an axis quantised per channel."""
        return self._keys.nbytes() + self._values.nbytes()

    @property
    def used_bytes(self) -> int:
        """Bytes of the positions held: their codes, the scales and zero points of the rows
        or groups quantised, and the residual rows still in float."""
        return self._keys.used_bytes() + self._values.used_bytes()

    def __repr__(self) -> str:
        return (
            f"QuantKVCache(batch={self.batch}, n_kv_heads={self.n_kv_heads}, d_k={self.d_k}, "
            f"d_v={self.d_v}, bits={self.bits}, key_axis={self.key_axis!r}, "
            f"value_axis={self.value_axis!r}, group={self.group}, length={self.length})"
        )
