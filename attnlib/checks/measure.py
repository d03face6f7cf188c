"""Measuring a learner's function: helpers shared by the exercises' inference.

An exercise's ``infer`` (see :mod:`attnlib.checks._core`) calls the learner's function
on probe inputs and measures properties of what comes back. The measurements that recur
across exercises live here:

* :func:`close` — agreement within a tolerance suited to the output's precision;
* :func:`normalisation` — which axis the weights sum to 1 over;
* :func:`log_fit` — the multiplier ``c`` such that ``log w = c · s + (a constant per
  row, per column, or overall)``: how the weights depend on known raw scores ``s``;
* :func:`name_factor` — which of a list of candidate multipliers a measured one is;
* :func:`fmt` — numbers as a learner reads them (``0.354``, ``16``);
* :func:`linear_map` — the coefficients of a function that is linear in one tensor (a
  score averaged from attention weights), read off with one-hot probes.

Everything takes and returns plain numpy float64 arrays (``Outcome.parts``). The numpy
functions used are captured at import, like those of ``_core``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_abs = np.absolute
_log = np.log
_sqrt = np.sqrt
_isfinite = np.isfinite
_where = np.where
_asarray = np.asarray
_zeros_like = np.zeros_like

__all__ = [
    "close",
    "fmt",
    "linear_map",
    "log_fit",
    "name_factor",
    "normalisation",
    "tolerance",
    "tolerances",
]


def tolerance(eps: float) -> float:
    """Relative tolerance for comparing an output computed with machine epsilon ``eps``."""
    return max(1e-7, 2e3 * eps)


def tolerances(eps: float) -> tuple[float, float]:
    """(rel, abs) for "this output equals that formula": (1e-4, 1e-6), wider for outputs
    coarser than float32. Loose on purpose: part of a float64 result may have been computed
    in float32, and the formulas told apart differ by far more than this."""
    return max(1e-4, 2e3 * eps), max(1e-6, 2e2 * eps)


def close(a, b, rel: float = 1e-7, abs_: float = 1e-9) -> bool:
    """True when ``a`` and ``b`` have one shape and agree everywhere (NaN equals NaN)."""
    a, b = _asarray(a, dtype=np.float64), _asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    fa, fb = _isfinite(a), _isfinite(b)
    if bool((fa != fb).any()):
        return False
    na, nb = a[~fa], b[~fb]
    if not bool(((na == nb) | ((na != na) & (nb != nb))).all()):
        return False
    d = _abs(a[fa] - b[fa])
    return bool((d <= abs_ + rel * _abs(b[fa])).all())


def fmt(x: float) -> str:
    """A number as a learner reads it: 3 significant digits, no trailing zeros."""
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x - round(x)) < 1e-9 * max(1.0, abs(x)) and abs(x) < 1e6:
        return str(int(round(x)))
    return f"{x:.3g}"


def normalisation(w: np.ndarray, rel: float = 1e-6) -> str:
    """Over what ``w`` (..., seq_q, seq_k) sums to 1.

    ``"keys"`` (each row: the correct softmax), ``"queries"`` (each column),
    ``"all"`` (each whole matrix, or the whole array), ``"none"``, or ``"nan"`` when
    ``w`` is not finite.
    """
    if not bool(_isfinite(w).all()):
        return "nan"

    def ones(x) -> bool:
        return bool((_abs(_asarray(x) - 1.0) <= rel * 10).all())

    if ones(w.sum(axis=-1)):
        return "keys"
    if w.ndim >= 2 and ones(w.sum(axis=-2)):
        return "queries"
    if w.ndim >= 2 and ones(w.sum(axis=(-2, -1))):
        return "all"
    if ones(w.sum()):
        return "all"
    return "none"


def log_fit(w: np.ndarray, s: np.ndarray, mode: str = "row") -> tuple[float, float]:
    """Fit ``log w = c · s + constant``; return ``(c, relative residual)``.

    The constant is one per row (``mode="row"``: a softmax over keys, or exponentials
    without a normalising sum), one per column (``"col"``: a softmax over queries) or one
    per matrix (``"all"``). Entries where ``w`` is 0 or not finite are left out (blocked
    or underflowed); a residual near 0 means the model explains ``w`` exactly. Returns
    ``(nan, inf)`` when nothing can be fitted.
    """
    w = _asarray(w, dtype=np.float64)
    s = _asarray(s, dtype=np.float64)
    if w.shape != s.shape or w.ndim < 1:
        return math.nan, math.inf
    if mode == "col":
        w, s = np.swapaxes(w, -1, -2), np.swapaxes(s, -1, -2)
    if mode == "all" and w.ndim >= 2:
        w = w.reshape(*w.shape[:-2], -1)
        s = s.reshape(*s.shape[:-2], -1)
    valid = _isfinite(w) & (w > 0) & _isfinite(s)
    with np.errstate(all="ignore"):
        L = _where(valid, _log(_where(valid, w, 1.0)), 0.0)
    n = valid.sum(axis=-1, keepdims=True)
    use = n >= 2
    n_safe = _where(n > 0, n, 1)
    Lc = _where(valid & use, L - (L * valid).sum(axis=-1, keepdims=True) / n_safe, 0.0)
    Sc = _where(valid & use, s - (_where(valid, s, 0.0)).sum(axis=-1, keepdims=True) / n_safe, 0.0)
    ss = float((Sc * Sc).sum())
    if ss <= 1e-300:
        return math.nan, math.inf
    c = float((Lc * Sc).sum()) / ss
    r = Lc - c * Sc
    scale = math.sqrt(max(float((Lc * Lc).sum()), float((c * Sc * c * Sc).sum()), 1e-300))
    return c, math.sqrt(float((r * r).sum())) / scale


def name_factor(
    c: float, candidates: Sequence[tuple[float, str, str]], rel: float = 2e-3
) -> tuple[str, str] | None:
    """The first candidate ``(value, label, id)`` within ``rel`` of ``c``: ``(label, id)``."""
    if not math.isfinite(c):
        return None
    for value, label, mid in candidates:
        if abs(c - value) <= rel * abs(value):
            return label, mid
    return None


def linear_map(learner, shape, *, seed: int):
    """(coefficients (n_out, n_in), output shape) of a learner's function that is linear in
    one float64 tensor of ``shape``, read off with one-hot inputs and confirmed on a random
    one (drawn with ``seed``); None if it is not linear, raises, or returns no array.

    ``learner`` is the exercise's :class:`attnlib.checks._core.Learner` bound to the other
    arguments (``lambda w: learner(w, period)``): one call per entry of ``shape``, so keep
    ``shape`` small.
    """
    import torch

    n_in = int(np.prod(shape))
    cols, out_shape = [], None
    for i in range(n_in):
        x = torch.zeros(n_in, dtype=torch.float64)
        x[i] = 1.0
        o = learner(x.reshape(shape))
        a = o.array(0) if o.ok and o.arity == 1 else None
        if a is None or a.dtype == bool or (out_shape is not None and a.shape != out_shape):
            return None
        out_shape = a.shape
        cols.append(a.ravel())
    coef = np.stack(cols, axis=1)  # (n_out, n_in)
    x = torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    o = learner(x)
    a = o.array(0) if o.ok and o.arity == 1 else None
    if (
        a is None
        or a.shape != out_shape
        or not np.allclose(a.ravel(), coef @ x.numpy().ravel(), rtol=1e-4, atol=1e-7)
    ):
        return None
    return coef, out_shape
