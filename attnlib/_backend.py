"""One small array vocabulary over numpy and torch.

The attention math in :mod:`attnlib.core` is written once, against the few operations
defined here, so that a numpy array goes in and a numpy array comes out, a torch tensor
goes in and a torch tensor (with autograd intact) comes out.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

LOW_PRECISION_TORCH = (torch.float16, torch.bfloat16)


def is_torch(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def is_numpy(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def type_name(x: Any) -> str:
    """A short, readable name of ``x``'s type: ``list``, ``numpy.ndarray``, ``torch.Tensor``.

    Named by the shortest public path that exposes it: ``torch.nn.Linear``, not
    ``torch.nn.modules.linear.Linear``; ``numpy.random.Generator``.
    """
    t = type(x)
    module = t.__module__ or ""
    if module in ("builtins", "__builtin__"):
        return t.__qualname__
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        try:
            exposed = getattr(sys.modules[prefix], t.__name__, None) is t
        except Exception:  # a module missing from sys.modules, or an odd __getattr__
            exposed = False
        if exposed:
            return f"{prefix}.{t.__qualname__}"
    return f"{module}.{t.__qualname__}"


def kind(x: Any) -> str:
    if is_torch(x):
        return "torch.Tensor"
    if is_numpy(x):
        return "numpy.ndarray"
    return type_name(x)


def describe(name: str, x: Any) -> str:
    """``"q (torch.Tensor, shape (2, 5, 8), float32)"`` for error messages."""
    if is_torch(x):
        return (
            f"{name} (torch.Tensor, shape {tuple(x.shape)}, {str(x.dtype).replace('torch.', '')})"
        )
    if is_numpy(x):
        return f"{name} (numpy.ndarray, shape {x.shape}, {x.dtype})"
    return f"{name} ({type_name(x)})"


def is_bool(x: Any) -> bool:
    if is_torch(x):
        return x.dtype == torch.bool
    return np.asarray(x).dtype == np.bool_


def is_float(x: Any) -> bool:
    if is_torch(x):
        return x.is_floating_point()
    return np.issubdtype(x.dtype, np.floating)


@dataclass(frozen=True)
class Ops:
    """The operations the attention math needs, for one array library."""

    name: str

    # --- construction and dtype -------------------------------------------------------
    def work_dtype(self, x):
        """fp16/bf16 are computed in fp32; everything else in its own dtype."""
        if self.name == "torch":
            return torch.float32 if x.dtype in LOW_PRECISION_TORCH else x.dtype
        return np.float32 if x.dtype == np.float16 else x.dtype

    def astype(self, x, dtype):
        if self.name == "torch":
            return x if x.dtype == dtype else x.to(dtype)
        return x if x.dtype == dtype else x.astype(dtype)

    def zeros_like(self, x):
        return torch.zeros_like(x) if self.name == "torch" else np.zeros_like(x)

    def full(self, shape, value, dtype, like):
        """An array of ``shape`` filled with ``value`` (torch: on ``like``'s device)."""
        if self.name == "torch":
            return torch.full(shape, value, dtype=dtype, device=like.device)
        return np.full(shape, value, dtype=dtype)

    def arange(self, start: int, stop: int, like):
        """Integer positions ``start .. stop - 1`` (torch: on ``like``'s device)."""
        if self.name == "torch":
            return torch.arange(start, stop, device=like.device)
        return np.arange(start, stop)

    def tracks_grad(self, *xs) -> bool:
        """Whether autograd records operations on any of ``xs`` (never for numpy)."""
        return self.name == "torch" and torch.is_grad_enabled() and any(x.requires_grad for x in xs)

    # --- elementwise and reductions -----------------------------------------------------
    def exp(self, x):
        return torch.exp(x) if self.name == "torch" else np.exp(x)

    def maximum(self, a, b):
        """Elementwise maximum of two arrays (broadcasting)."""
        return torch.maximum(a, b) if self.name == "torch" else np.maximum(a, b)

    def where(self, cond, a, b):
        if self.name == "torch":
            if not isinstance(a, torch.Tensor):
                a = torch.tensor(a, dtype=b.dtype, device=b.device)
            if not isinstance(b, torch.Tensor):
                b = torch.tensor(b, dtype=a.dtype, device=a.device)
            return torch.where(cond, a, b)
        return np.where(cond, a, b).astype(np.result_type(a, b), copy=False)

    def amax(self, x, axis):
        if self.name == "torch":
            return torch.amax(x, dim=axis, keepdim=True)
        return np.max(x, axis=axis, keepdims=True)

    def sum(self, x, axis):
        if self.name == "torch":
            return torch.sum(x, dim=axis, keepdim=True)
        return np.sum(x, axis=axis, keepdims=True)

    def any(self, x, axis):
        if self.name == "torch":
            return torch.any(x, dim=axis, keepdim=True)
        return np.any(x, axis=axis, keepdims=True)

    def isfinite(self, x):
        return torch.isfinite(x) if self.name == "torch" else np.isfinite(x)

    def stop_gradient(self, x):
        return x.detach() if self.name == "torch" else x

    # --- linear algebra -------------------------------------------------------------------
    def matmul(self, a, b):
        return a @ b

    def transpose_last(self, x):
        return x.transpose(-2, -1) if self.name == "torch" else np.swapaxes(x, -2, -1)


NUMPY = Ops("numpy")
TORCH = Ops("torch")


def ops_for(x: Any) -> Ops:
    return TORCH if is_torch(x) else NUMPY
