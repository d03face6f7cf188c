"""``torch.nn.MultiheadAttention`` taken apart: its projections as plain matrices.

``nn.MultiheadAttention`` keeps W_q, W_k and W_v stacked in one ``in_proj_weight`` of shape
(3·d_model, d_model) when query, key and value have the same width (and as separate
``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` when ``kdim``/``vdim`` differ).
:func:`unpack_mha` returns them separately, in ``nn.Linear``'s convention (weight of shape
(out, in), ``y = x @ W.T + b``), and :func:`mha_forward` recomputes the module's output from
them with :func:`attnlib.projections.linear`, :func:`attnlib.heads.split_heads` and
:func:`attnlib.attend`, head by head.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from attnlib import _backend as B
from attnlib._validate import check_array, check_bool_mask, check_instance, check_ndim, validated
from attnlib.core import attend
from attnlib.heads import merge_heads, split_heads
from attnlib.projections import linear

__all__ = ["MHAWeights", "unpack_mha", "mha_forward"]


class MHAWeights(NamedTuple):
    """The parameters of one ``nn.MultiheadAttention``, unpacked (nn.Linear convention).

    ``W_q`` : Tensor of shape (d_model, d_model); ``W_k`` : (d_model, kdim);
    ``W_v`` : (d_model, vdim); ``W_o`` : (d_model, d_model); biases of shape (d_model,)
    or None.

    See Also
    --------
    unpack_mha : fills it in.
    """

    W_q: torch.Tensor
    W_k: torch.Tensor
    W_v: torch.Tensor
    b_q: torch.Tensor | None
    b_k: torch.Tensor | None
    b_v: torch.Tensor | None
    W_o: torch.Tensor
    b_o: torch.Tensor | None
    n_heads: int
    batch_first: bool


def _check_unpack_mha(mha) -> None:
    check_instance("unpack_mha", "mha", mha, nn.MultiheadAttention, "a torch.nn.MultiheadAttention")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("unpack_mha: add_bias_kv / add_zero_attn are not supported")


@validated(_check_unpack_mha)
def unpack_mha(mha: nn.MultiheadAttention) -> MHAWeights:
    """Split an ``nn.MultiheadAttention`` into W_q, W_k, W_v, W_o and their biases.

    The returned tensors are views of the module's parameters (gradients flow through them).

    Parameters
    ----------
    mha : nn.MultiheadAttention
        Without ``add_bias_kv`` or ``add_zero_attn``.

    Returns
    -------
    MHAWeights

    See Also
    --------
    mha_forward : recomputes the module's output from these weights.
    attnlib.mha.MultiHeadAttention.from_torch : copies them into attnlib's module.

    Examples
    --------
    >>> w = unpack_mha(nn.MultiheadAttention(8, 2))
    >>> tuple(w.W_q.shape), w.n_heads
    ((8, 8), 2)
    """
    d = mha.embed_dim
    if mha.in_proj_weight is not None:
        W_q, W_k, W_v = mha.in_proj_weight.split(d, dim=0)  # each (d_model, d_model)
    else:
        W_q, W_k, W_v = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
    if mha.in_proj_bias is not None:
        b_q, b_k, b_v = mha.in_proj_bias.split(d, dim=0)  # each (d_model,)
    else:
        b_q = b_k = b_v = None
    return MHAWeights(
        W_q, W_k, W_v, b_q, b_k, b_v,
        mha.out_proj.weight, mha.out_proj.bias,
        mha.num_heads, mha.batch_first,
    )  # fmt: skip


def _check_mha_forward(
    mha, query, key, value, key_padding_mask=None, attn_mask=None, average_attn_weights=True
) -> None:
    fn, hint = "mha_forward", "float (additive) masks are not supported here"
    check_instance(fn, "mha", mha, nn.MultiheadAttention, "a torch.nn.MultiheadAttention")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError(f"{fn}: add_bias_kv / add_zero_attn are not supported")
    widths = {"query": mha.embed_dim, "key": mha.kdim, "value": mha.vdim}
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_array(fn, name, x, only="torch")
        check_ndim(fn, name, x, ndim=3, doc="(batch, seq, d) or (seq, batch, d)")
        if x.shape[-1] != widths[name]:
            raise ValueError(f"{fn}: {B.describe(name, x)} must have width {widths[name]}")
    if key_padding_mask is not None:
        kpm, blocked = key_padding_mask, "True = padding"
        check_bool_mask(kpm, "key_padding_mask", fn=fn, meaning=blocked, hint=hint)
    if attn_mask is not None:
        check_bool_mask(attn_mask, "attn_mask", fn=fn, meaning="True = blocked", hint=hint)


@validated(_check_mha_forward)
def mha_forward(
    mha: nn.MultiheadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    key_padding_mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    average_attn_weights: bool = True,
):
    """Recompute ``mha(query, key, value, ...)`` from the unpacked weights (eval mode).

    Takes ``nn.MultiheadAttention``'s own conventions: ``batch_first`` as the module says,
    boolean ``key_padding_mask`` (batch, seq_k) and ``attn_mask`` (seq_q, seq_k) with
    True = **blocked**. Returns ``(out, weights)`` like the module with
    ``need_weights=True``; weights are averaged over heads unless
    ``average_attn_weights=False``.

    Parameters
    ----------
    mha : nn.MultiheadAttention
    query : Tensor of shape (batch, seq_q, d_model), or (seq_q, batch, d_model) if not batch_first
    key, value : Tensor of shape (batch, seq_k, kdim / vdim), likewise
    key_padding_mask : bool Tensor of shape (batch, seq_k), optional
        True = padding (blocked).
    attn_mask : bool Tensor of shape (seq_q, seq_k), optional
        True = blocked.
    average_attn_weights : bool, default True

    Returns
    -------
    out : Tensor shaped like query
    weights : Tensor of shape (batch, seq_q, seq_k), or (batch, n_heads, seq_q, seq_k)

    See Also
    --------
    unpack_mha : the weights it uses.
    attnlib.mask_conventions : converting its True = blocked masks.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    >>> x = torch.randn(1, 4, 8)
    >>> ours, _ = mha_forward(mha, x, x, x)
    >>> torch.allclose(ours, mha(x, x, x)[0], atol=1e-6)
    True
    """
    w = unpack_mha(mha)
    if not w.batch_first:  # (seq, batch, d) -> (batch, seq, d)
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    batch, seq_q, _ = query.shape
    seq_k = key.shape[1]
    h = w.n_heads
    q = split_heads(linear(query, w.W_q, w.b_q), h)  # (batch, n_heads, seq_q, d_head)
    k = split_heads(linear(key, w.W_k, w.b_k), h)  # (batch, n_heads, seq_k, d_head)
    v = split_heads(linear(value, w.W_v, w.b_v), h)  # (batch, n_heads, seq_k, d_head)
    allowed = torch.ones(batch, 1, seq_q, seq_k, dtype=torch.bool, device=query.device)
    if key_padding_mask is not None:
        allowed = allowed & ~key_padding_mask[:, None, None, :]  # True = blocked there
    if attn_mask is not None:
        allowed = allowed & ~attn_mask
    out, weights = attend(q, k, v, mask=allowed)  # (batch, n_heads, seq_q, d_head)
    out = merge_heads(out)  # (batch, seq_q, d_model)
    out = linear(out, w.W_o, w.b_o)  # (batch, seq_q, d_model)
    if not w.batch_first:
        out = out.transpose(0, 1)
    if average_attn_weights:
        weights = weights.mean(dim=1)  # (batch, seq_q, seq_k)
    return out, weights
