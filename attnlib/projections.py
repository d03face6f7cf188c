"""Learned projections: one input representation becomes a query, a key and a value.

Lesson 02 builds these pieces:

* :func:`linear` — what ``torch.nn.Linear`` computes, ``x @ weightᵀ + bias``, for numpy
  arrays or torch tensors (``weight`` stored as (out_features, in_features), as torch does);
* :func:`project` — ``q = x W_q``, ``k = x W_k``, ``v = x W_v`` with matrices stored as
  (d_model, d_k) / (d_model, d_v), the way the equations are written;
* :class:`QKVProjection` — a torch module with three separate ``nn.Linear`` layers
  ``W_q``, ``W_k``, ``W_v``, and :meth:`QKVProjection.from_matrices` to load matrices written
  in the equations' orientation.

The two orientations differ by a transpose: ``nn.Linear.weight`` is ``W_qᵀ``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnlib import _backend as B
from attnlib._validate import (
    as_float_array,
    check_array,
    check_int,
    check_ndim,
    check_same_dim,
    same_kind_and_dtype,
    validated,
)

__all__ = ["QKVProjection", "linear", "project"]


def _check_array(fn: str, name: str, x: Any, min_ndim: int):
    x = as_float_array(fn, name, x)
    check_ndim(fn, name, x, min_ndim=min_ndim)
    return x


def _check_linear(x, weight, bias=None) -> None:
    fn = "linear"
    x = _check_array(fn, "x", x, 1)
    weight = _check_array(fn, "weight", weight, 2)
    named = {"x": x, "weight": weight}
    if weight.ndim != 2:
        raise ValueError(
            f"linear: {B.describe('weight', weight)} must be 2-D (out_features, in_features)"
        )
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"linear: x has {x.shape[-1]} features (shape {tuple(x.shape)}) but weight expects "
            f"in_features={weight.shape[1]} (shape {tuple(weight.shape)}, stored as "
            f"(out_features, in_features) like nn.Linear.weight)"
        )
    if bias is not None:
        bias = _check_array(fn, "bias", bias, 1)
        named["bias"] = bias
        if tuple(bias.shape) != (weight.shape[0],):
            raise ValueError(
                f"linear: bias has shape {tuple(bias.shape)} but weight has out_features="
                f"{weight.shape[0]} (shape {tuple(weight.shape)}); bias must be (out_features,)"
            )
    same_kind_and_dtype(fn, named)


@validated(_check_linear)
def linear(x, weight, bias=None):
    """What ``torch.nn.Linear`` computes: ``x @ weightᵀ + bias``.

    Parameters
    ----------
    x : ndarray or Tensor of shape (..., in_features)
        Any number of leading dims (e.g. (batch, seq, d_model)).
    weight : ndarray or Tensor of shape (out_features, in_features)
        Stored the way ``nn.Linear.weight`` stores it: one row per output feature.
    bias : ndarray or Tensor of shape (out_features,), optional
        Added to every output row; None for no bias.

    Returns
    -------
    y : same kind and dtype as x, shape (..., out_features)

    See Also
    --------
    torch.nn.Linear : the module that computes the same.
    project : the equations' orientation, ``x @ W``.

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> layer = torch.nn.Linear(4, 3)
    >>> x = torch.randn(2, 4)
    >>> torch.allclose(linear(x, layer.weight, layer.bias), layer(x))
    True
    """
    y = x @ B.ops_for(x).transpose_last(weight)  # (..., out_features)
    return y if bias is None else y + bias


def project(x, W_q, W_k, W_v):
    """Project one input representation into queries, keys and values.

    ``q = x @ W_q``, ``k = x @ W_k``, ``v = x @ W_v``: each token's row of x is multiplied by
    the same three matrices, independently of the other tokens.

    Parameters
    ----------
    x : ndarray or Tensor of shape (..., seq, d_model)
        One row per token.
    W_q : ndarray or Tensor of shape (d_model, d_k)
        Turns a token into what it looks for.
    W_k : ndarray or Tensor of shape (d_model, d_k)
        Turns a token into the label it offers. Same d_k as W_q: queries and keys are
        compared by dot products.
    W_v : ndarray or Tensor of shape (d_model, d_v)
        Turns a token into what it hands over when attended to.

    Returns
    -------
    q : shape (..., seq, d_k)
    k : shape (..., seq, d_k)
    v : shape (..., seq, d_v)
        Same kind and dtype as x.

    See Also
    --------
    QKVProjection : the same as a torch module.
    linear : ``nn.Linear``'s orientation.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.eye(3)                                      # 3 tokens, d_model = 3
    >>> W_q, W_k, W_v = np.ones((3, 2)), np.eye(3)[:, :2], np.arange(3.0)[:, None]
    >>> q, k, v = project(x, W_q, W_k, W_v)
    >>> q.shape, k.shape, v.ravel()
    ((3, 2), (3, 2), array([0., 1., 2.]))
    """
    fn = "project"
    x = _check_array(fn, "x", x, 2)
    mats = {"W_q": W_q, "W_k": W_k, "W_v": W_v}
    for name, w in mats.items():
        _check_array(fn, name, w, 2)
        if w.ndim != 2:
            raise ValueError(f"project: {B.describe(name, w)} must be 2-D (d_model, d_out)")
        why = f"{name} is (d_model, d_out) and multiplies from the right: x @ {name}"
        check_same_dim(fn, "d_model", ("x", x, -1), (name, w, 0), why)
    why = "queries and keys must have the same width to be compared"
    check_same_dim(fn, "d_k", ("W_q", W_q, 1), ("W_k", W_k, 1), why)
    same_kind_and_dtype(fn, {"x": x, **mats})
    q = x @ W_q  # (..., seq, d_k)
    k = x @ W_k  # (..., seq, d_k)
    v = x @ W_v  # (..., seq, d_v)
    return q, k, v


class QKVProjection(nn.Module):
    """Three separate learned projections: ``W_q``, ``W_k`` and ``W_v``.

    Parameters
    ----------
    d_model : int
        Width of the input representation.
    d_k : int
        Width of queries and keys.
    d_v : int, optional
        Width of values; default ``d_k``.
    bias : bool, default True
        Whether each ``nn.Linear`` has a bias.

    Attributes
    ----------
    W_q, W_k : nn.Linear(d_model, d_k)
    W_v : nn.Linear(d_model, d_v)
        ``W_q.weight`` has shape (d_k, d_model): it is the transpose of the matrix ``W_q``
        in ``q = x W_q``.

    See Also
    --------
    project : the same with plain matrices.
    attnlib.mha.MultiHeadAttention : projections for every head at once.

    Examples
    --------
    >>> import numpy as np
    >>> W = np.arange(6.0).reshape(3, 2)                   # (d_model, d_k)
    >>> module = QKVProjection.from_matrices(W, W, W)
    >>> x = torch.eye(3, dtype=torch.float64)
    >>> q, k, v = module(x)
    >>> bool(torch.equal(q, torch.as_tensor(W)))           # row i of W_q is what token i asks
    True
    """

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, *, bias: bool = True):
        super().__init__()
        fn = "QKVProjection"
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        d_k = check_int(fn, "d_k", d_k, minimum=1)
        d_v = d_k if d_v is None else check_int(fn, "d_v", d_v, minimum=1)
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, x: torch.Tensor):
        """Project x into queries, keys and values.

        Parameters
        ----------
        x : Tensor of shape (..., seq, d_model)

        Returns
        -------
        q : Tensor of shape (..., seq, d_k)
        k : Tensor of shape (..., seq, d_k)
        v : Tensor of shape (..., seq, d_v)
        """
        hint = "use torch.as_tensor(x, dtype=torch.float32)"
        check_array("QKVProjection", "x", x, only="torch", hint=hint)
        if x.ndim < 1 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"QKVProjection: x has shape {tuple(x.shape)} but the module expects "
                f"d_model={self.d_model} features in the last dim"
            )
        # (..., seq, d_k), (..., seq, d_k), (..., seq, d_v)
        return self.W_q(x), self.W_k(x), self.W_v(x)

    @classmethod
    def from_matrices(cls, W_q, W_k, W_v, *, b_q=None, b_k=None, b_v=None, dtype=None):
        """Build the module from matrices written as in ``q = x W_q``.

        Parameters
        ----------
        W_q, W_k : ndarray or Tensor of shape (d_model, d_k)
        W_v : ndarray or Tensor of shape (d_model, d_v)
        b_q, b_k : ndarray or Tensor of shape (d_k,), optional
        b_v : ndarray or Tensor of shape (d_v,), optional
            All three biases or none (then the module has no bias).
        dtype : torch.dtype, optional
            Default: the dtype of W_q (numpy float64 becomes torch.float64).

        Returns
        -------
        QKVProjection
            Its ``nn.Linear`` weights are the transposes, so ``module(x)`` equals
            ``project(x, W_q, W_k, W_v)`` (plus the biases).
        """
        mats = [torch.as_tensor(w) for w in (W_q, W_k, W_v)]
        biases = (b_q, b_k, b_v)
        if any(b is None for b in biases) and not all(b is None for b in biases):
            raise ValueError("QKVProjection.from_matrices: pass all of b_q, b_k, b_v or none")
        for name, w in zip(("W_q", "W_k", "W_v"), mats, strict=True):
            if w.ndim != 2:
                raise ValueError(
                    f"QKVProjection.from_matrices: {name} must be 2-D (d_model, d_out), got "
                    f"shape {tuple(w.shape)}"
                )
        d_model, d_k = mats[0].shape
        if mats[1].shape != (d_model, d_k) or mats[2].shape[0] != d_model:
            raise ValueError(
                f"QKVProjection.from_matrices: shapes do not fit together: W_q "
                f"{tuple(mats[0].shape)}, W_k {tuple(mats[1].shape)}, W_v {tuple(mats[2].shape)};"
                f" expected (d_model, d_k), (d_model, d_k), (d_model, d_v)"
            )
        dtype = dtype or mats[0].dtype
        module = cls(d_model, d_k, mats[2].shape[1], bias=b_q is not None).to(dtype)
        with torch.no_grad():
            for layer, w, b in zip((module.W_q, module.W_k, module.W_v), mats, biases, strict=True):
                layer.weight.copy_(w.T)  # nn.Linear stores (out_features, in_features)
                if b is not None:
                    b = torch.as_tensor(b)
                    if tuple(b.shape) != (layer.out_features,):
                        raise ValueError(
                            f"QKVProjection.from_matrices: a bias has shape {tuple(b.shape)}, "
                            f"expected ({layer.out_features},)"
                        )
                    layer.bias.copy_(b)
        return module

    def matrices(self) -> dict[str, torch.Tensor]:
        """The three matrices in the equations' orientation, (d_model, d_k) / (d_model, d_v)."""
        return {
            "W_q": self.W_q.weight.detach().T.clone(),
            "W_k": self.W_k.weight.detach().T.clone(),
            "W_v": self.W_v.weight.detach().T.clone(),
        }

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_k={self.d_k}, d_v={self.d_v}"
