"""Multi-head attention: several independent key spaces side by side.

``d_model`` features are projected to queries, keys and values, then cut into ``n_heads``
slices of ``d_head = d_model // n_heads`` features. Each head compares its own queries with
its own keys — a separate key space with its own notion of "relevant" — and blends its own
values. The heads' outputs are put back side by side and mixed by ``W_o``.

* :func:`split_heads` / :func:`merge_heads` — the reshapes, numpy or torch;
* :class:`MultiHeadAttention` — separate ``W_q``, ``W_k``, ``W_v``, ``W_o`` (the course's
  contract); ``from_torch`` copies an ``nn.MultiheadAttention``;
* :class:`FusedQKVAttention` — the same computation with one ``W_qkv`` projection of width
  ``3 · d_model`` (as GPT-style code does); ``tests/test_mha.py`` proves the two equal.

The attention itself is :func:`attnlib.attend`, run on all heads at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from attnlib import _backend as B
from attnlib.core import attend
from attnlib.torch_mha import unpack_mha

__all__ = ["split_heads", "merge_heads", "MultiHeadAttention", "FusedQKVAttention"]


def _check_n_heads(fn: str, n_heads: Any) -> int:
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)):
        raise TypeError(f"{fn}: n_heads must be an int, got {type(n_heads).__name__}")
    if n_heads <= 0:
        raise ValueError(f"{fn}: n_heads must be positive, got {n_heads}")
    return int(n_heads)


def _check_array(fn: str, name: str, x: Any, ndim: int, shape_doc: str) -> None:
    if not (B.is_torch(x) or B.is_numpy(x)):
        raise TypeError(
            f"{fn}: {name} must be a numpy.ndarray or a torch.Tensor, got {type(x).__name__}"
        )
    if x.ndim != ndim:
        raise ValueError(f"{fn}: {B.describe(name, x)} must have {ndim} dims {shape_doc}")


def split_heads(x, n_heads: int):
    """Cut the feature axis into heads: (batch, seq, d_model) -> (batch, n_heads, seq, d_head).

    Head h gets features ``h * d_head .. (h + 1) * d_head - 1`` of every position. The
    reshape splits the feature axis in place, then the head axis moves in front of the
    position axis (a reshape straight to ``(batch, n_heads, seq, d_head)`` would mix
    positions up).

    Parameters
    ----------
    x : ndarray or Tensor of shape (batch, seq, d_model)
        Projected queries, keys or values.
    n_heads : int
        Number of heads; must divide d_model.

    Returns
    -------
    heads : same kind and dtype as x, shape (batch, n_heads, seq, d_head)
        ``d_head = d_model // n_heads``.
    """
    fn = "split_heads"
    n_heads = _check_n_heads(fn, n_heads)
    _check_array(fn, "x", x, 3, "(batch, seq, d_model)")
    batch, seq, d_model = x.shape
    if d_model % n_heads:
        raise ValueError(
            f"{fn}: d_model={d_model} (x of shape {tuple(x.shape)}) is not divisible by "
            f"n_heads={n_heads}; every head needs the same number of features"
        )
    d_head = d_model // n_heads
    x = x.reshape(batch, seq, n_heads, d_head)  # (batch, seq, n_heads, d_head)
    return x.swapaxes(1, 2)  # (batch, n_heads, seq, d_head)


def merge_heads(x):
    """Put the heads back side by side: (batch, n_heads, seq, d_head) -> (batch, seq, d_model).

    The inverse of :func:`split_heads`: ``merge_heads(split_heads(x, h))`` equals ``x``.

    Parameters
    ----------
    x : ndarray or Tensor of shape (batch, n_heads, seq, d_head)

    Returns
    -------
    merged : same kind and dtype as x, shape (batch, seq, n_heads * d_head)
    """
    fn = "merge_heads"
    _check_array(fn, "x", x, 4, "(batch, n_heads, seq, d_head)")
    batch, n_heads, seq, d_head = x.shape
    x = x.swapaxes(1, 2)  # (batch, seq, n_heads, d_head)
    return x.reshape(batch, seq, n_heads * d_head)  # (batch, seq, d_model)


def _describe(name: str, x: Any) -> str:
    return B.describe(name, x)


class _HeadsMixin:
    """Input checks and the per-head attention, shared by both modules below."""

    d_model: int
    n_heads: int
    d_head: int

    def _check_inputs(self, query, key, value) -> None:
        cls = type(self).__name__
        for name, x in (("query", query), ("key", key), ("value", value)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{cls}: {name} must be a torch.Tensor, got {type(x).__name__}")
            if x.ndim != 3:
                what = "seq_q" if name == "query" else "seq_k"
                raise ValueError(
                    f"{cls}: {_describe(name, x)} must have 3 dims (batch, {what}, d_model); "
                    f"for a single sequence use x[None]"
                )
            if not x.is_floating_point():
                raise TypeError(f"{cls}: {_describe(name, x)} must be a floating-point tensor")
            if x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{cls}: {_describe(name, x)} has width {x.shape[-1]} but the module has "
                    f"d_model={self.d_model}"
                )
        dtype = self.W_o.weight.dtype  # type: ignore[attr-defined]
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.dtype != dtype:
                raise TypeError(
                    f"{cls}: {_describe(name, x)} has dtype {x.dtype} but the module's weights "
                    f"are {dtype}; use module.to({x.dtype}) or x.to({dtype})"
                )
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"{cls}: key of shape {tuple(key.shape)} and value of shape "
                f"{tuple(value.shape)} must agree in (batch, seq_k): every key needs its value"
            )
        if query.shape[0] != key.shape[0]:
            raise ValueError(
                f"{cls}: query of shape {tuple(query.shape)} and key of shape "
                f"{tuple(key.shape)} have different batch sizes"
            )

    def _check_mask(self, mask, batch: int, seq_q: int, seq_k: int, device) -> torch.Tensor | None:
        """Return the mask as a bool tensor of 4 dims, broadcastable to the weights."""
        if mask is None:
            return None
        cls = type(self).__name__
        target = (batch, self.n_heads, seq_q, seq_k)
        if isinstance(mask, np.ndarray):
            if mask.dtype != np.bool_:
                raise TypeError(
                    f"{cls}: {_describe('mask', mask)} must be boolean (True = may attend); a "
                    f"float 0/1 mask would be added to the scores and block nothing"
                )
            mask = torch.from_numpy(mask)
        if not isinstance(mask, torch.Tensor):
            raise TypeError(
                f"{cls}: mask must be a boolean torch.Tensor (True = may attend), got "
                f"{type(mask).__name__}"
            )
        if mask.dtype != torch.bool:
            raise TypeError(
                f"{cls}: {_describe('mask', mask)} must be boolean (True = may attend). A float "
                f"0/1 mask would be added to the scores and block nothing; an "
                f"nn.MultiheadAttention mask (True = blocked) must be inverted: see "
                f"attnlib.mask_conventions"
            )
        shape = tuple(mask.shape)
        if mask.ndim == 2:  # (seq_q, seq_k): the same for every sequence and head
            m4 = mask[None, None]
        elif mask.ndim == 3:  # (batch, seq_q or 1, seq_k), e.g. attnlib.padding_mask
            m4 = mask[:, None]
        elif mask.ndim == 4:  # (batch, n_heads, seq_q, seq_k), any of them may be 1
            m4 = mask
        else:
            m4 = None
        ok = m4 is not None and all(m == t or m == 1 for m, t in zip(m4.shape, target, strict=True))
        if not ok:
            raise ValueError(
                f"{cls}: mask of shape {shape} does not fit weights of shape "
                f"(batch, n_heads, seq_q, seq_k) = {target}; give (seq_q, seq_k), "
                f"(batch, seq_q or 1, seq_k) (e.g. attnlib.padding_mask) or "
                f"(batch, n_heads or 1, seq_q or 1, seq_k)"
            )
        return m4.to(device)

    def _attend_heads(self, q, k, v, mask, causal: bool):
        """Attention on every head at once, then merge and mix with ``W_o``."""
        q = split_heads(q, self.n_heads)  # (batch, n_heads, seq_q, d_head)
        k = split_heads(k, self.n_heads)  # (batch, n_heads, seq_k, d_head)
        v = split_heads(v, self.n_heads)  # (batch, n_heads, seq_k, d_head)
        out, weights = attend(q, k, v, mask=mask, causal=causal)  # (batch, n_heads, seq_q, d_head)
        out = merge_heads(out)  # (batch, seq_q, d_model)
        return self.W_o(out), weights  # type: ignore[attr-defined]


def _check_sizes(cls: str, d_model: Any, n_heads: Any) -> tuple[int, int]:
    if isinstance(d_model, bool) or not isinstance(d_model, (int, np.integer)):
        raise TypeError(f"{cls}: d_model must be an int, got {type(d_model).__name__}")
    if d_model <= 0:
        raise ValueError(f"{cls}: d_model must be positive, got {d_model}")
    n_heads = _check_n_heads(cls, n_heads)
    if d_model % n_heads:
        raise ValueError(
            f"{cls}: d_model={d_model} is not divisible by n_heads={n_heads}; each head gets "
            f"d_model // n_heads features, so choose n_heads among the divisors of d_model"
        )
    return int(d_model), n_heads


class MultiHeadAttention(_HeadsMixin, nn.Module):
    """Multi-head attention with separate query, key, value and output projections.

    Parameters
    ----------
    d_model : int
        Width of the inputs and of the output.
    n_heads : int
        Number of heads; must divide d_model. Each head works in ``d_head = d_model //
        n_heads`` dimensions: its own key space.
    bias : bool, default True
        Give every projection a bias.

    Attributes
    ----------
    W_q, W_k, W_v, W_o : nn.Linear of shape d_model -> d_model
        ``nn.Linear`` convention: ``y = x @ W.weight.T + W.bias``. Rows
        ``h * d_head .. (h + 1) * d_head - 1`` of ``W_k.weight`` make head h's keys.

    Examples
    --------
    >>> mha = MultiHeadAttention(d_model=8, n_heads=2)
    >>> x = torch.randn(3, 5, 8)                     # (batch, seq, d_model)
    >>> out, weights = mha(x, x, x, causal=True)
    >>> tuple(out.shape), tuple(weights.shape)
    ((3, 5, 8), (3, 2, 5, 5))
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        self.d_model, self.n_heads = _check_sizes("MultiHeadAttention", d_model, n_heads)
        self.d_head = self.d_model // self.n_heads
        self.W_q = nn.Linear(self.d_model, self.d_model, bias=bias)
        self.W_k = nn.Linear(self.d_model, self.d_model, bias=bias)
        self.W_v = nn.Linear(self.d_model, self.d_model, bias=bias)
        self.W_o = nn.Linear(self.d_model, self.d_model, bias=bias)

    def forward(self, query, key, value, mask=None, causal: bool = False):
        """Attend from every query position to the key positions, in every head.

        Parameters
        ----------
        query : Tensor of shape (batch, seq_q, d_model)
        key : Tensor of shape (batch, seq_k, d_model)
        value : Tensor of shape (batch, seq_k, d_model)
        mask : bool Tensor, optional
            True = may attend. Shapes: (seq_q, seq_k); (batch, seq_q, seq_k) or
            (batch, 1, seq_k) as from :func:`attnlib.padding_mask`; (batch, n_heads,
            seq_q, seq_k), any axis of size 1 broadcasting.
        causal : bool, default False
            Also hide keys after the query position (top-left aligned, as
            ``scaled_dot_product_attention(is_causal=True)``).

        Returns
        -------
        out : Tensor of shape (batch, seq_q, d_model)
        weights : Tensor of shape (batch, n_heads, seq_q, seq_k)
            Post-softmax weights of each head; rows sum to 1, a query with no key to
            attend to gets a row of zeros (and its ``out`` is ``W_o``'s bias).
        """
        self._check_inputs(query, key, value)
        batch, seq_q, _ = query.shape
        mask = self._check_mask(mask, batch, seq_q, key.shape[1], query.device)
        q = self.W_q(query)  # (batch, seq_q, d_model)
        k = self.W_k(key)  # (batch, seq_k, d_model)
        v = self.W_v(value)  # (batch, seq_k, d_model)
        return self._attend_heads(q, k, v, mask, causal)

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of an ``nn.MultiheadAttention`` whose outputs match it.

        The weights are copied (not shared), so training one does not change the other.
        Our module is always batch-first: if ``mha.batch_first`` is False, transpose your
        (seq, batch, d_model) inputs before calling it. Remember that
        ``nn.MultiheadAttention``'s boolean masks mean True = blocked; convert them with
        :mod:`attnlib.mask_conventions`.

        Parameters
        ----------
        mha : nn.MultiheadAttention
            Without ``kdim``/``vdim`` different from ``embed_dim``, ``add_bias_kv``,
            ``add_zero_attn`` or dropout (none of which this module has).

        Returns
        -------
        MultiHeadAttention
            Same dtype and device as ``mha``.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(
                f"MultiHeadAttention.from_torch: expected nn.MultiheadAttention, got "
                f"{type(mha).__name__}"
            )
        if not mha._qkv_same_embed_dim:
            raise ValueError(
                f"MultiHeadAttention.from_torch: kdim={mha.kdim} / vdim={mha.vdim} differ from "
                f"embed_dim={mha.embed_dim}; this module projects keys and values from d_model"
            )
        if mha.dropout:
            raise ValueError(
                f"MultiHeadAttention.from_torch: mha has dropout={mha.dropout}; this module has "
                f"no dropout, so the outputs could not match in training mode"
            )
        w = unpack_mha(mha)
        has_bias = w.b_q is not None
        if (w.b_o is not None) != has_bias:
            raise ValueError(
                "MultiHeadAttention.from_torch: the in- and out-projection biases differ in "
                "presence; this module has bias on all four projections or on none"
            )
        new = cls(mha.embed_dim, mha.num_heads, bias=has_bias)
        new = new.to(device=w.W_q.device, dtype=w.W_q.dtype)
        with torch.no_grad():
            for lin, W, b in (
                (new.W_q, w.W_q, w.b_q),
                (new.W_k, w.W_k, w.b_k),
                (new.W_v, w.W_v, w.b_v),
                (new.W_o, w.W_o, w.b_o),
            ):
                lin.weight.copy_(W)
                if b is not None:
                    lin.bias.copy_(b)
        return new

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}"


class FusedQKVAttention(_HeadsMixin, nn.Module):
    """Multi-head self-attention with one fused projection ``W_qkv`` of width 3·d_model.

    One matrix multiply makes queries, keys and values at once; its output is cut into
    the three. Rows ``0 .. d_model - 1`` of ``W_qkv.weight`` are W_q, then W_k, then W_v
    (the layout of ``nn.MultiheadAttention.in_proj_weight``). The result equals
    :class:`MultiHeadAttention` with the same weights (see :meth:`from_separate`).

    Parameters
    ----------
    d_model : int
    n_heads : int
        Must divide d_model.
    bias : bool, default True
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        self.d_model, self.n_heads = _check_sizes("FusedQKVAttention", d_model, n_heads)
        self.d_head = self.d_model // self.n_heads
        self.W_qkv = nn.Linear(self.d_model, 3 * self.d_model, bias=bias)
        self.W_o = nn.Linear(self.d_model, self.d_model, bias=bias)

    def forward(self, x, mask=None, causal: bool = False):
        """Self-attention: every position of ``x`` is a query, a key and a value.

        Parameters
        ----------
        x : Tensor of shape (batch, seq, d_model)
        mask : bool Tensor, optional
            True = may attend; the shapes :meth:`MultiHeadAttention.forward` accepts,
            with seq_q = seq_k = seq.
        causal : bool, default False

        Returns
        -------
        out : Tensor of shape (batch, seq, d_model)
        weights : Tensor of shape (batch, n_heads, seq, seq)
        """
        self._check_inputs(x, x, x)
        batch, seq, _ = x.shape
        mask = self._check_mask(mask, batch, seq, seq, x.device)
        qkv = self.W_qkv(x)  # (batch, seq, 3 * d_model)
        q, k, v = qkv.split(self.d_model, dim=-1)  # each (batch, seq, d_model)
        return self._attend_heads(q, k, v, mask, causal)

    @classmethod
    def from_separate(cls, mha: MultiHeadAttention) -> FusedQKVAttention:
        """Stack a :class:`MultiHeadAttention`'s W_q, W_k, W_v into one fused copy."""
        if not isinstance(mha, MultiHeadAttention):
            raise TypeError(
                f"FusedQKVAttention.from_separate: expected attnlib.MultiHeadAttention, got "
                f"{type(mha).__name__}"
            )
        bias = mha.W_q.bias is not None
        ref = mha.W_q.weight
        new = cls(mha.d_model, mha.n_heads, bias=bias).to(device=ref.device, dtype=ref.dtype)
        with torch.no_grad():
            new.W_qkv.weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
            new.W_o.weight.copy_(mha.W_o.weight)
            if bias:
                new.W_qkv.bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
                new.W_o.bias.copy_(mha.W_o.bias)
        return new

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}"
