"""Multi-head attention: several independent key spaces side by side.

``d_model`` features are projected to queries, keys and values, then cut into ``n_heads``
slices of ``d_head = d_model // n_heads`` features. Each head compares its own queries with
its own keys — a separate key space with its own notion of "relevant" — and blends its own
values. The heads' outputs are put back side by side and mixed by ``W_o``.

* :class:`MultiHeadAttention` — separate ``W_q``, ``W_k``, ``W_v``, ``W_o`` (the course's
  contract); ``from_torch`` copies an ``nn.MultiheadAttention``;
* :class:`FusedQKVAttention` — the same computation with one ``W_qkv`` projection of width
  ``3 · d_model`` (as GPT-style code does); ``tests/test_mha.py`` proves the two equal.

The heads are cut and put back by :func:`attnlib.heads.split_heads` /
:func:`attnlib.heads.merge_heads`; the attention itself is :func:`attnlib.attend`, run on
all heads at once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnlib import _backend as B
from attnlib._validate import (
    as_float_array,
    check_array,
    check_bool_mask,
    check_choice,
    check_instance,
    check_int,
    check_ndim,
    check_same_dim,
    validated,
)
from attnlib.core import attend
from attnlib.heads import merge_heads, split_heads
from attnlib.masks import ALIGNS
from attnlib.torch_mha import unpack_mha

__all__ = ["MultiHeadAttention", "FusedQKVAttention"]


# An nn.MultiheadAttention mask means the opposite: say so when a mask is refused.
_MASK_HINT = (
    "use mask.bool() if 1 means 'may attend'; an nn.MultiheadAttention mask (True = blocked) "
    "must be inverted: see attnlib.mask_conventions"
)


class _HeadsMixin:
    """Input checks and the per-head attention, shared by both modules below."""

    d_model: int
    n_heads: int
    d_head: int

    def _check_inputs(self, query, key, value) -> None:
        cls = type(self).__name__
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_array(cls, name, x, only="torch")
            what = "seq_q" if name == "query" else "seq_k"
            doc = f"(batch, {what}, d_model); for a single sequence use x[None]"
            check_ndim(cls, name, x, ndim=3, doc=doc)
            as_float_array(cls, name, x)
            if x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{cls}: {B.describe(name, x)} has width {x.shape[-1]} but the module has "
                    f"d_model={self.d_model}"
                )
        dtype = self.W_o.weight.dtype  # type: ignore[attr-defined]
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.dtype != dtype:
                raise TypeError(
                    f"{cls}: {B.describe(name, x)} has dtype {x.dtype} but the module's weights "
                    f"are {dtype}; use module.to({x.dtype}) or x.to({dtype})"
                )
        same = "key and value must agree in (batch, seq_k): every key needs its value"
        check_same_dim(cls, "batch", ("key", key, 0), ("value", value, 0), same)
        check_same_dim(cls, "seq_k", ("key", key, 1), ("value", value, 1), same)
        why = "each sequence's queries attend to its own keys, so the batch sizes must match"
        check_same_dim(cls, "batch", ("query", query, 0), ("key", key, 0), why)

    def _check_mask(self, mask, batch: int, seq_q: int, seq_k: int) -> None:
        """A bool mask whose 4-dim form (:meth:`_mask4`) broadcasts to the weights."""
        if mask is None:
            return
        cls = type(self).__name__
        target = (batch, self.n_heads, seq_q, seq_k)
        # The type and dtype rule is attend's; the shapes are this module's own (a 3-D mask
        # is (batch, seq_q, seq_k), not broadcast as (n_heads, seq_q, seq_k)).
        check_bool_mask(mask, fn=cls, meaning="True = may attend", hint=_MASK_HINT)
        shape = tuple(mask.shape)
        m4 = (1,) * (4 - mask.ndim) + shape if 2 <= mask.ndim <= 4 else None
        if mask.ndim == 3:  # (batch, seq_q or 1, seq_k): the head axis goes second
            m4 = (shape[0], 1, *shape[1:])
        ok = m4 is not None and all(m == t or m == 1 for m, t in zip(m4, target, strict=True))
        if not ok:
            raise ValueError(
                f"{cls}: mask of shape {shape} does not fit weights of shape "
                f"(batch, n_heads, seq_q, seq_k) = {target}; give (seq_q, seq_k), "
                f"(batch, seq_q or 1, seq_k) (e.g. attnlib.padding_mask) or "
                f"(batch, n_heads or 1, seq_q or 1, seq_k)"
            )

    @staticmethod
    def _mask4(mask, device) -> torch.Tensor | None:
        """A checked mask as a bool tensor of 4 dims, broadcastable to the weights."""
        if mask is None:
            return None
        if B.is_numpy(mask):
            mask = torch.from_numpy(mask)
        if mask.ndim == 2:  # (seq_q, seq_k): the same for every sequence and head
            mask = mask[None, None]
        elif mask.ndim == 3:  # (batch, seq_q or 1, seq_k), e.g. attnlib.padding_mask
            mask = mask[:, None]
        return mask.to(device)  # (batch or 1, n_heads or 1, seq_q or 1, seq_k)

    def _check_forward(self, query, key, value, mask=None, *, causal=False, align="top_left"):
        self._check_inputs(query, key, value)
        self._check_mask(mask, query.shape[0], query.shape[1], key.shape[1])
        check_choice(type(self).__name__, "align", align, ALIGNS)

    def _check_self_forward(self, x, mask=None, *, causal=False, align="top_left"):
        self._check_forward(x, x, x, mask, causal=causal, align=align)

    def _attend_heads(self, q, k, v, mask, *, causal: bool, align: str):
        """Attention on every head at once, then merge and mix with ``W_o``."""
        q = split_heads(q, self.n_heads)  # (batch, n_heads, seq_q, d_head)
        k = split_heads(k, self.n_heads)  # (batch, n_heads, seq_k, d_head)
        v = split_heads(v, self.n_heads)  # (batch, n_heads, seq_k, d_head)
        # (batch, n_heads, seq_q, d_head), (batch, n_heads, seq_q, seq_k)
        out, weights = attend(q, k, v, mask=mask, causal=causal, align=align)
        out = merge_heads(out)  # (batch, seq_q, d_model)
        return self.W_o(out), weights  # type: ignore[attr-defined]


def _check_sizes(cls: str, d_model: Any, n_heads: Any) -> tuple[int, int]:
    d_model = check_int(cls, "d_model", d_model, minimum=1)
    n_heads = check_int(cls, "n_heads", n_heads, minimum=1)
    if d_model % n_heads:
        raise ValueError(
            f"{cls}: d_model={d_model} is not divisible by n_heads={n_heads}; each head gets "
            f"d_model // n_heads features, so choose n_heads among the divisors of d_model"
        )
    return d_model, n_heads


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

    See Also
    --------
    FusedQKVAttention : the same computation with one fused ``W_qkv``.
    attnlib.attend : the attention each head runs.
    torch.nn.MultiheadAttention : torch's module (True = *blocked* masks); see
        :meth:`from_torch` and :mod:`attnlib.mask_conventions`.

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

    @validated(_HeadsMixin._check_forward)
    def forward(self, query, key, value, mask=None, *, causal: bool = False, align="top_left"):
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
            Also hide keys after the query position: ``attnlib.causal_mask(seq_q, seq_k,
            align=align)``.
        align : {"top_left", "bottom_right"}, default "top_left"
            ``"top_left"`` as ``scaled_dot_product_attention(is_causal=True)``;
            ``"bottom_right"`` when the queries are the last seq_q of the seq_k positions.

        Returns
        -------
        out : Tensor of shape (batch, seq_q, d_model)
        weights : Tensor of shape (batch, n_heads, seq_q, seq_k)
            Post-softmax weights of each head; rows sum to 1, a query with no key to
            attend to gets a row of zeros (and its ``out`` is ``W_o``'s bias).
        """
        mask = self._mask4(mask, query.device)  # (batch or 1, n_heads or 1, seq_q or 1, seq_k)
        q = self.W_q(query)  # (batch, seq_q, d_model)
        k = self.W_k(key)  # (batch, seq_k, d_model)
        v = self.W_v(value)  # (batch, seq_k, d_model)
        return self._attend_heads(q, k, v, mask, causal=causal, align=align)

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
        fn = "MultiHeadAttention.from_torch"
        check_instance(fn, "mha", mha, nn.MultiheadAttention, "a torch.nn.MultiheadAttention")
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

    See Also
    --------
    MultiHeadAttention : separate ``W_q``, ``W_k``, ``W_v``; :meth:`from_separate` copies one.

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> separate = MultiHeadAttention(d_model=8, n_heads=2)
    >>> fused = FusedQKVAttention.from_separate(separate)
    >>> x = torch.randn(1, 5, 8)                           # (batch, seq, d_model)
    >>> a, _ = separate(x, x, x, causal=True)
    >>> b, _ = fused(x, causal=True)
    >>> torch.allclose(a, b, atol=1e-6)
    True
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        self.d_model, self.n_heads = _check_sizes("FusedQKVAttention", d_model, n_heads)
        self.d_head = self.d_model // self.n_heads
        self.W_qkv = nn.Linear(self.d_model, 3 * self.d_model, bias=bias)
        self.W_o = nn.Linear(self.d_model, self.d_model, bias=bias)

    @validated(_HeadsMixin._check_self_forward)
    def forward(self, x, mask=None, *, causal: bool = False, align: str = "top_left"):
        """Self-attention: every position of ``x`` is a query, a key and a value.

        Parameters
        ----------
        x : Tensor of shape (batch, seq, d_model)
        mask : bool Tensor, optional
            True = may attend; the shapes :meth:`MultiHeadAttention.forward` accepts,
            with seq_q = seq_k = seq.
        causal : bool, default False
        align : {"top_left", "bottom_right"}, default "top_left"
            As in :meth:`MultiHeadAttention.forward` (with seq_q = seq_k they agree).

        Returns
        -------
        out : Tensor of shape (batch, seq, d_model)
        weights : Tensor of shape (batch, n_heads, seq, seq)
        """
        mask = self._mask4(mask, x.device)  # (batch or 1, n_heads or 1, seq or 1, seq)
        qkv = self.W_qkv(x)  # (batch, seq, 3 * d_model)
        q, k, v = qkv.split(self.d_model, dim=-1)  # each (batch, seq, d_model)
        return self._attend_heads(q, k, v, mask, causal=causal, align=align)

    @classmethod
    def from_separate(cls, mha: MultiHeadAttention) -> FusedQKVAttention:
        """Stack a :class:`MultiHeadAttention`'s W_q, W_k, W_v into one fused copy."""
        fn = "FusedQKVAttention.from_separate"
        check_instance(fn, "mha", mha, MultiHeadAttention, "an attnlib.MultiHeadAttention")
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
