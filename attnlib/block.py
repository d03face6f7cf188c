"""The block around attention: LayerNorm, the MLP and a pre-LN decoder block (lesson 15).

A GPT-style decoder block keeps a *residual stream* ``x`` of width ``d_model`` and adds two
things to it, each read through a LayerNorm first (pre-LN, as GPT-2 does)::

    x = x + attn(ln_1(x))      # causal multi-head self-attention
    x = x + mlp(ln_2(x))       # a two-layer MLP applied to each position on its own

The 2017 Transformer's post-LN block, ``x = ln_1(x + attn(x))``, ``x = ln_2(x + mlp(x))``,
and a block without LayerNorms are options (``norm="post"``, ``norm="none"``), for
measuring what each part does; GPT-2 has neither.

* :func:`layer_norm` and :class:`LayerNorm` — each position's features rescaled to mean 0
  and variance 1, then by a learned gain and bias (checked against ``torch.nn.LayerNorm``);
* :func:`gelu_tanh` — GPT-2's GELU, the tanh approximation (Hugging Face's ``gelu_new``);
* :class:`MLP` — ``c_fc`` (d_model → d_ff), GELU, ``c_proj`` (d_ff → d_model);
* :class:`GPTAttention` — causal self-attention with separate ``W_q``, ``W_k``, ``W_v``,
  ``W_o`` (:func:`attnlib.attend` on all heads), dropout on the attention weights, and a
  :class:`attnlib.kv_cache.KVCache` for decoding;
* :class:`DecoderBlock` — ``ln_1``, ``attn``, ``ln_2``, ``mlp``: the names of nanoGPT and of
  Hugging Face's GPT-2, so that a weight copy reads as a table (:mod:`attnlib.gpt`);
  :data:`NORMS` — where its LayerNorms sit: ``"pre"`` (GPT-2's), ``"post"``, ``"none"``.

The model built from these blocks, and its copy into Hugging Face's GPT-2, is
:mod:`attnlib.gpt`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from attnlib import _backend as B
from attnlib._validate import (
    as_float_array,
    check_array,
    check_instance,
    check_int,
    check_ndim,
    check_number,
    same_kind_and_dtype,
    validated,
)
from attnlib.core import attend
from attnlib.heads import merge_heads, split_heads
from attnlib.kv_cache import KVCache

__all__ = [
    "LAYER_NORM_EPS",
    "NORMS",
    "layer_norm",
    "gelu_tanh",
    "LayerNorm",
    "MLP",
    "GPTAttention",
    "DecoderBlock",
]

LAYER_NORM_EPS = 1e-5  # GPT-2's layer_norm_epsilon, and torch.nn.LayerNorm's default eps
# Where a DecoderBlock's LayerNorms sit: "pre" normalises what each sublayer reads (GPT-2),
# "post" the stream after each addition (the 2017 Transformer), "none" nowhere.
NORMS = ("pre", "post", "none")


# ----------------------------------------------------------------------------------------
# LayerNorm and GELU as functions.
# ----------------------------------------------------------------------------------------


def _check_layer_norm(x, weight=None, bias=None, *, eps=LAYER_NORM_EPS) -> None:
    fn = "layer_norm"
    x = as_float_array(fn, "x", x)
    check_ndim(fn, "x", x, min_ndim=1, doc="(..., d)")
    named = {"x": x}
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        named[name] = as_float_array(fn, name, p)
        if tuple(p.shape) != (x.shape[-1],):
            raise ValueError(
                f"{fn}: {B.describe(name, p)} must have shape (d,) = ({x.shape[-1]},), the "
                f"last dim of x"
            )
    same_kind_and_dtype(fn, named)
    check_number(fn, "eps", eps, positive=True)


@validated(_check_layer_norm)
def layer_norm(x, weight=None, bias=None, *, eps: float = LAYER_NORM_EPS):
    """Normalise each row of ``x`` to mean 0 and variance 1, then scale and shift it.

    ``(x - mean) / sqrt(var + eps) * weight + bias``, with the mean and the (biased)
    variance taken over the last axis, the ``d`` features of one position.

    Parameters
    ----------
    x : ndarray or Tensor of shape (..., d)
    weight, bias : ndarray or Tensor of shape (d,), optional
        The learned gain (default 1) and shift (default 0); same kind and dtype as ``x``.
    eps : float, default 1e-5
        Added to the variance so that a constant row does not divide by zero.

    Returns
    -------
    y : same kind, dtype and shape as x

    See Also
    --------
    LayerNorm : the module, with ``weight`` and ``bias`` as parameters.
    torch.nn.functional.layer_norm : torch's fused version (the oracle of the tests).

    Examples
    --------
    >>> x = torch.tensor([[1.0, 2.0, 3.0, 6.0]])
    >>> y = layer_norm(x)
    >>> abs(float(y.mean())) < 1e-6, round(float(y.var(correction=0)), 4)  # mean 0, variance 1
    (True, 1.0)
    >>> torch.allclose(y, torch.nn.functional.layer_norm(x, (4,)), atol=1e-6)
    True
    """
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    centred = x - mean  # (..., d)
    var = (centred * centred).mean(axis=-1, keepdims=True)  # (..., 1), biased: divide by d
    y = centred / (var + eps) ** 0.5  # (..., d): mean 0, variance 1 (up to eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _check_gelu_tanh(x) -> None:
    as_float_array("gelu_tanh", "x", x)


@validated(_check_gelu_tanh)
def gelu_tanh(x):
    """GELU, the tanh approximation GPT-2 uses (Hugging Face's ``gelu_new``).

    ``0.5 · x · (1 + tanh(sqrt(2/π) · (x + 0.044715 · x³)))``, written in the order of the
    operations of transformers' ``NewGELUActivation`` so that the two agree to the last bit
    in practice. ``torch.nn.GELU(approximate="tanh")`` computes the same function in one
    fused kernel; the exact GELU, ``x · Φ(x)``, differs from it by up to about 5e-4.

    Parameters
    ----------
    x : ndarray or Tensor (any shape, floating point)

    Returns
    -------
    y : same kind, dtype and shape as x

    See Also
    --------
    MLP : where it is used.
    torch.nn.GELU : ``approximate="tanh"`` gives this function.

    Examples
    --------
    >>> x = torch.linspace(-3, 3, 7)
    >>> torch.allclose(gelu_tanh(x), torch.nn.functional.gelu(x, approximate="tanh"), atol=1e-6)
    True
    >>> float((gelu_tanh(x) - torch.nn.functional.gelu(x)).abs().max()) < 1e-3
    True
    """
    tanh = torch.tanh if B.is_torch(x) else np.tanh
    cube = x * x * x if B.is_numpy(x) else torch.pow(x, 3.0)
    return 0.5 * x * (1.0 + tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * cube)))


# ----------------------------------------------------------------------------------------
# Modules.
# ----------------------------------------------------------------------------------------


def _check_stream(fn: str, x, d_model: int, dtype, doc: str = "(batch, seq, d_model)") -> None:
    """``x`` a float tensor (..., d_model) of the module's dtype."""
    check_array(fn, "x", x, only="torch")
    as_float_array(fn, "x", x)
    check_ndim(fn, "x", x, min_ndim=1, doc=doc)
    if x.shape[-1] != d_model:
        raise ValueError(f"{fn}: {B.describe('x', x)} must be {doc} with d_model={d_model}")
    if x.dtype != dtype:
        raise TypeError(
            f"{fn}: {B.describe('x', x)} has dtype {x.dtype} but the weights are {dtype}; use "
            f"module.to({x.dtype}) or x.to({dtype})"
        )


class LayerNorm(nn.Module):
    """:func:`layer_norm` over the last axis, with a learned ``weight`` and ``bias``.

    Parameters
    ----------
    d_model : int
    eps : float, default 1e-5

    Attributes
    ----------
    weight : Parameter of shape (d_model,), initially 1
    bias : Parameter of shape (d_model,), initially 0
        The names of ``torch.nn.LayerNorm``'s parameters: its ``state_dict`` loads here.

    See Also
    --------
    layer_norm : the function.
    torch.nn.LayerNorm : torch's module (the oracle of the tests).

    Examples
    --------
    >>> ln, ref = LayerNorm(8), torch.nn.LayerNorm(8)
    >>> x = torch.randn(2, 3, 8)                       # (batch, seq, d_model)
    >>> torch.allclose(ln(x), ref(x), atol=1e-6)
    True
    """

    def __init__(self, d_model: int, eps: float = LAYER_NORM_EPS):
        super().__init__()
        self.d_model = check_int("LayerNorm", "d_model", d_model, minimum=1)
        self.eps = check_number("LayerNorm", "eps", eps, positive=True)
        self.weight = nn.Parameter(torch.ones(self.d_model))
        self.bias = nn.Parameter(torch.zeros(self.d_model))

    def _check_forward(self, x) -> None:
        _check_stream("LayerNorm", x, self.d_model, self.weight.dtype, "(..., d_model)")

    @validated(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : Tensor of shape (..., d_model) -> the same shape."""
        return layer_norm(x, self.weight, self.bias, eps=self.eps)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, eps={self.eps}"


class MLP(nn.Module):
    """The position-wise feed-forward part of a block: two linear maps around GELU.

    ``c_proj(gelu_tanh(c_fc(x)))``, then dropout; every position separately.

    Parameters
    ----------
    d_model : int
    d_ff : int, optional
        Hidden width; default ``4 · d_model`` (GPT-2's).
    dropout : float, default 0.0
        Dropout on the output in training mode (GPT-2's ``resid_pdrop``).

    Attributes
    ----------
    c_fc : nn.Linear d_model -> d_ff
    c_proj : nn.Linear d_ff -> d_model

    See Also
    --------
    gelu_tanh : the activation.
    DecoderBlock : the block it sits in.

    Examples
    --------
    >>> mlp = MLP(d_model=8)
    >>> mlp(torch.randn(2, 5, 8)).shape, mlp.c_fc.out_features
    (torch.Size([2, 5, 8]), 32)
    """

    def __init__(self, d_model: int, d_ff: int | None = None, *, dropout: float = 0.0):
        super().__init__()
        fn = "MLP"
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        d_ff = 4 * d_model if d_ff is None else check_int(fn, "d_ff", d_ff, minimum=1)
        self.c_fc = nn.Linear(d_model, d_ff)
        self.c_proj = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(_check_p(fn, "dropout", dropout))

    def _check_forward(self, x) -> None:
        _check_stream("MLP", x, self.c_fc.in_features, self.c_fc.weight.dtype, "(..., d_model)")

    @validated(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : Tensor of shape (..., d_model) -> the same shape."""
        h = gelu_tanh(self.c_fc(x))  # (..., d_ff)
        return self.dropout(self.c_proj(h))  # (..., d_model)


def check_norm(fn: str, norm) -> str:
    """``norm`` one of :data:`NORMS`; returns it."""
    if not isinstance(norm, str) or norm not in NORMS:
        raise ValueError(f"{fn}: norm must be one of {NORMS}, got {norm!r}")
    return norm


def _check_p(fn: str, name: str, p) -> float:
    """A dropout probability in [0, 1)."""
    p = check_number(fn, name, p, minimum=0.0)
    if p >= 1:
        raise ValueError(f"{fn}: {name} must be in [0, 1), got {p}")
    return p


def _check_cache(fn: str, cache, batch: int, n_heads: int, d_head: int, dtype) -> None:
    """``cache`` None or a :class:`KVCache` holding keys of this layer's shape and dtype."""
    if cache is None:
        return
    check_instance(fn, "cache", cache, KVCache, "an attnlib.kv_cache.KVCache or None")
    want = (batch, n_heads, d_head, d_head, dtype)
    got = (cache.batch, cache.n_kv_heads, cache.d_k, cache.d_v, cache.dtype)
    if got != want:
        raise ValueError(
            f"{fn}: cache holds (batch, n_kv_heads, d_k, d_v, dtype) = {got}, this layer needs "
            f"{want}; make it with GPT.new_caches or KVCache(batch, n_heads, d_k=d_head)"
        )


class GPTAttention(nn.Module):
    """Causal multi-head self-attention, with dropout on the weights and a KV cache.

    Queries, keys and values come from separate ``W_q``, ``W_k``, ``W_v`` (as in
    :class:`attnlib.MultiHeadAttention`; GPT-2 keeps the three side by side in one
    ``c_attn``), the heads attend with :func:`attnlib.attend` (``causal=True``), and ``W_o``
    mixes the merged heads (GPT-2's ``attn.c_proj``).

    In training mode each attention weight is zeroed with probability ``attn_dropout`` and
    the others are divided by ``1 - attn_dropout``, so that every weight keeps its
    expectation — what ``scaled_dot_product_attention(..., dropout_p=p)`` and GPT-2's
    ``attn_pdrop`` do. In evaluation mode (``model.eval()``) nothing is dropped: the rows
    sum to 1 again and the output is deterministic.

    Parameters
    ----------
    d_model, n_heads : int
        ``n_heads`` must divide ``d_model``; ``d_head = d_model // n_heads``.
    attn_dropout : float, default 0.0
        Dropout probability on the attention weights (training mode only).
    dropout : float, default 0.0
        Dropout on the output (GPT-2's ``resid_pdrop``; training mode only).

    Attributes
    ----------
    W_q, W_k, W_v, W_o : nn.Linear d_model -> d_model, with bias
    d_head : int

    See Also
    --------
    attnlib.attend : the attention of every head.
    attnlib.kv_cache.KVCache : what ``cache`` is.
    DecoderBlock : the block it sits in.

    Examples
    --------
    >>> attn = GPTAttention(d_model=8, n_heads=2).eval()
    >>> x = torch.randn(1, 5, 8)                       # (batch, seq, d_model)
    >>> out, weights = attn(x, return_weights=True)
    >>> tuple(out.shape), tuple(weights.shape)          # weights: (batch, n_heads, seq, seq)
    ((1, 5, 8), (1, 2, 5, 5))
    >>> bool(weights[0, 0].triu(1).eq(0).all())          # no query sees a later key
    True
    >>> cache = KVCache(1, 2, d_k=attn.d_head)
    >>> steps = torch.cat([attn(x[:, t : t + 1], cache) for t in range(5)], dim=1)
    >>> torch.allclose(steps, out, atol=1e-6)           # one position at a time = all at once
    True
    """

    def __init__(
        self, d_model: int, n_heads: int, *, attn_dropout: float = 0.0, dropout: float = 0.0
    ):
        super().__init__()
        fn = "GPTAttention"
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        n_heads = check_int(fn, "n_heads", n_heads, minimum=1)
        if d_model % n_heads:
            raise ValueError(f"{fn}: n_heads={n_heads} must divide d_model={d_model}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.attn_dropout = _check_p(fn, "attn_dropout", attn_dropout)
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.resid_dropout = nn.Dropout(_check_p(fn, "dropout", dropout))

    def _check_input(self, fn: str, x, cache) -> None:
        """``x`` (batch, seq_new, d_model) of the weights' dtype, and a matching ``cache``;
        ``fn`` names the door that was called (this layer or its block)."""
        _check_stream(fn, x, self.d_model, self.W_q.weight.dtype)
        check_ndim(fn, "x", x, ndim=3, doc="(batch, seq_new, d_model)")
        _check_cache(fn, cache, x.shape[0], self.n_heads, self.d_head, x.dtype)

    def _check_forward(self, x, cache=None, *, return_weights=False) -> None:
        self._check_input("GPTAttention", x, cache)

    @validated(_check_forward)
    def forward(self, x: torch.Tensor, cache: KVCache | None = None, *, return_weights=False):
        """Every position of ``x`` attends to itself and the positions before it.

        Parameters
        ----------
        x : Tensor of shape (batch, seq_new, d_model)
            The whole sequence, or (with ``cache``) only the new positions.
        cache : KVCache, optional
            Holds the earlier positions' keys and values (batch, n_heads, seq, d_head);
            the new ones are appended, and the new queries see all of them.
        return_weights : bool, default False

        Returns
        -------
        out : Tensor of shape (batch, seq_new, d_model)
        weights : Tensor of shape (batch, n_heads, seq_new, seq_k)
            Only with ``return_weights``: the weights used, after dropout.
        """
        q = split_heads(self.W_q(x), self.n_heads)  # (batch, n_heads, seq_new, d_head)
        k = split_heads(self.W_k(x), self.n_heads)  # (batch, n_heads, seq_new, d_head)
        v = split_heads(self.W_v(x), self.n_heads)  # (batch, n_heads, seq_new, d_head)
        if cache is not None:
            k, v = cache.append(k, v)  # (batch, n_heads, seq_k, d_head): every position so far
        # The new queries are the last seq_new of the seq_k positions: bottom-right causal.
        out, w = attend(q, k, v, causal=True, align="bottom_right")  # w: (b, h, seq_new, seq_k)
        if self.training and self.attn_dropout > 0:
            w = F.dropout(w, self.attn_dropout, training=True)  # zero some, rescale the rest
            out = w @ v  # (batch, n_heads, seq_new, d_head)
        out = self.resid_dropout(self.W_o(merge_heads(out)))  # (batch, seq_new, d_model)
        return (out, w) if return_weights else out


class DecoderBlock(nn.Module):
    """A pre-LN GPT block: ``x + attn(ln_1(x))``, then ``+ mlp(ln_2(x))``.

    The residual stream ``x`` passes through unchanged; attention and the MLP each read a
    normalised copy of it and *add* their output. With ``residual=False`` the two
    additions are dropped (``x = attn(ln_1(x))``, ``x = mlp(ln_2(x))``) — a deliberately
    broken block for measuring what the residual path does to gradients
    (:func:`attnlib.gpt.stream_gradients`) and to training.

    ``norm`` moves the LayerNorms: ``"post"`` is the 2017 Transformer's block, which
    normalises the stream itself after each addition (``x = ln_1(x + attn(x))``, ``x =
    ln_2(x + mlp(x))``); ``"none"`` makes ``ln_1`` and ``ln_2`` identities. GPT-2's block
    is the default, ``"pre"``.

    Parameters
    ----------
    d_model, n_heads : int
    d_ff : int, optional
        The MLP's hidden width, default ``4 · d_model``.
    attn_dropout : float, default 0.0
        Dropout on the attention weights (training mode only).
    dropout : float, default 0.0
        Dropout on what attention and the MLP add to the stream (training mode only).
    eps : float, default 1e-5
        The LayerNorms' epsilon.
    residual : bool, default True
    norm : {"pre", "post", "none"}, default "pre"
        Where the LayerNorms sit (:data:`NORMS`).

    Attributes
    ----------
    ln_1 : LayerNorm (nn.Identity with ``norm="none"``)
    attn : GPTAttention
    ln_2 : LayerNorm (nn.Identity with ``norm="none"``)
    mlp : MLP

    See Also
    --------
    attnlib.gpt.GPT : the model of these blocks.

    Examples
    --------
    >>> block = DecoderBlock(d_model=8, n_heads=2)
    >>> [name for name, _ in block.named_children()]
    ['ln_1', 'attn', 'ln_2', 'mlp']
    >>> block(torch.randn(1, 5, 8)).shape
    torch.Size([1, 5, 8])
    >>> post = DecoderBlock(d_model=8, n_heads=2, norm="post")
    >>> y = post(torch.randn(1, 5, 8))                   # the stream itself is normalised
    >>> bool(y.mean(-1).abs().max() < 1e-5)
    True
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        attn_dropout: float = 0.0,
        dropout: float = 0.0,
        eps: float = LAYER_NORM_EPS,
        residual: bool = True,
        norm: str = "pre",
    ):
        super().__init__()
        check_instance("DecoderBlock", "residual", residual, bool, "a bool")
        self.norm = check_norm("DecoderBlock", norm)

        def ln() -> nn.Module:
            return nn.Identity() if norm == "none" else LayerNorm(d_model, eps)

        self.ln_1 = ln()
        self.attn = GPTAttention(d_model, n_heads, attn_dropout=attn_dropout, dropout=dropout)
        self.ln_2 = ln()
        self.mlp = MLP(d_model, d_ff, dropout=dropout)
        self.residual = residual

    def _check_forward(self, x, cache=None, *, return_weights=False) -> None:
        self.attn._check_input("DecoderBlock", x, cache)

    @validated(_check_forward)
    def forward(self, x: torch.Tensor, cache: KVCache | None = None, *, return_weights=False):
        """x : Tensor of shape (batch, seq_new, d_model) -> the same shape.

        ``cache`` and ``return_weights`` are :meth:`GPTAttention.forward`'s; with
        ``return_weights`` the result is ``(x, weights)``.
        """
        if self.norm == "post":  # the 2017 Transformer: normalise the stream after each addition
            a, w = self.attn(x, cache, return_weights=True)  # (batch, seq_new, d_model)
            x = self.ln_1(x + a if self.residual else a)
            m = self.mlp(x)  # (batch, seq_new, d_model)
            x = self.ln_2(x + m if self.residual else m)
            return (x, w) if return_weights else x
        a, w = self.attn(self.ln_1(x), cache, return_weights=True)  # (batch, seq_new, d_model)
        x = x + a if self.residual else a
        m = self.mlp(self.ln_2(x))  # (batch, seq_new, d_model)
        x = x + m if self.residual else m
        return (x, w) if return_weights else x
