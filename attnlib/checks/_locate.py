"""Where a wrong function goes wrong, when no known mistake explains it.

:func:`locate` turns the failing cases of a check into a few lines a learner can act on:
the smallest failing case, its first differing entry (expected and got), and which
properties of the expected output the learner's output keeps or breaks (all finite, rows
summing to 1, no negative entries, zeros where the expected output has them, symmetry,
the same numbers up to one factor, a sign or a transpose). It reads outputs only, as the
rest of the checks do, with numpy functions captured at import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_asarray = np.asarray
_isclose = np.isclose
_isfinite = np.isfinite
_allclose = np.allclose
_argwhere = np.argwhere
_swapaxes = np.swapaxes
_float64 = np.float64
_ndarray = np.ndarray


def _size(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_size(v) for v in value)
    size = getattr(value, "size", None)
    if callable(getattr(value, "numel", None)):
        return int(value.numel())
    return int(size) if isinstance(size, int) else 1


def _shape(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return "x".join(map(str, tuple(shape))) if shape is not None else type(value).__name__


def _number(x: float) -> str:
    return "nan" if x != x else f"{x:.4g}"


def _pair(expected: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    if expected.shape != got.shape or expected.dtype.kind not in "biuf":
        return None
    if got.dtype.kind not in "biuf":
        return None
    return expected.astype(_float64), got.astype(_float64)


def first_difference(expected: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> str:
    """``"at [i, j]: expected …, got …"`` for the first entry (in index order) that differs.

    >>> first_difference(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 2.0], [3.5, 4.0]]),
    ...                  1e-5, 1e-8)
    'at [1, 0]: expected 3, got 3.5'
    """
    pair = _pair(expected, got)
    if pair is None:
        return ""
    e, g = pair
    bad = _argwhere(~_isclose(g, e, rtol=rtol, atol=atol, equal_nan=True))
    if not len(bad):
        return ""
    where = tuple(int(i) for i in bad[0])
    return (
        f"at [{', '.join(map(str, where))}]: expected {_number(float(e[where]))}, "
        f"got {_number(float(g[where]))}"
    )


def properties(expected: np.ndarray, got: np.ndarray) -> tuple[list[str], list[str]]:
    """(kept, broken): properties of the expected output and whether ``got`` has them.

    >>> e = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    >>> kept, broken = properties(e, np.array([[0.4, 0.4, 0.2], [0.2, 0.3, 0.5]]))
    >>> kept
    ['every entry finite', 'no negative entries', 'each row sums to 1 over the last axis']
    >>> broken
    ['0 wherever the expected output is 0 (1 entries): yours is not at 1 of them']
    """
    pair = _pair(expected, got)
    if pair is None:
        return [], []
    e, g = pair
    kept: list[str] = []
    broken: list[str] = []

    def judge(name: str, holds: bool, why: str = "") -> None:
        (kept if holds else broken).append(name if holds or not why else f"{name}: {why}")

    finite = _isfinite(g)
    if bool(_isfinite(e).all()):
        judge("every entry finite", bool(finite.all()), f"{int((~finite).sum())} are NaN or inf")
    if bool((e >= 0).all()) and bool((e > 0).any()):
        negative = int((g < 0).sum())
        judge("no negative entries", negative == 0, f"{negative} are negative")
    if e.ndim >= 1 and e.shape[-1] > 1:
        e_sums, g_sums = e.sum(axis=-1), g.sum(axis=-1)
        live = e_sums != 0  # fully masked rows sum to 0
        if bool(live.any()) and _allclose(e_sums[live], 1.0, atol=1e-5):
            ok = bool(_isfinite(g_sums[live]).all()) and _allclose(g_sums[live], 1.0, atol=1e-4)
            low, high = float(np.nanmin(g_sums[live])), float(np.nanmax(g_sums[live]))
            judge(
                "each row sums to 1 over the last axis",
                ok,
                f"yours sum to {low:.6g} ... {high:.6g}",
            )
    zeros = e == 0
    if bool(zeros.any()) and not bool(zeros.all()):
        leak = int((zeros & (g != 0)).sum())
        judge(
            f"0 wherever the expected output is 0 ({int(zeros.sum())} entries)",
            leak == 0,
            f"yours is not at {leak} of them",
        )
    if e.ndim >= 2 and e.shape[-1] == e.shape[-2] > 1 and _allclose(e, _swapaxes(e, -1, -2)):
        judge("symmetric in its last two axes", _allclose(g, _swapaxes(g, -1, -2), atol=1e-6))
    if not _allclose(g, e, rtol=1e-5, atol=1e-8) and bool(finite.all()):
        nonzero = _absolute_big(e)
        if bool(nonzero.any()):
            ratios = g[nonzero] / e[nonzero]
            r = float(ratios.mean())
            if (
                r != 1.0
                and _allclose(ratios, r, rtol=1e-4)
                and _allclose(g[~nonzero], 0, atol=1e-6)
            ):
                broken.append(
                    f"the same numbers up to one factor: yours are {_number(r)} times them"
                )
        if e.ndim >= 2 and e.shape[-1] == e.shape[-2] and _allclose(g, _swapaxes(e, -1, -2)):
            broken.append("yours equals the expected output with its last two axes swapped")
    return kept, broken


def _absolute_big(e: np.ndarray) -> np.ndarray:
    return abs(e) > 1e-6


def locate(failures: list[tuple[Any, Any, Any, Any]], rtol: float, atol: float) -> list[str]:
    """Lines locating a failure no known mistake explains.

    ``failures``: ``(case, expected, got, why)`` of every failing case, in case order. The
    smallest case (fewest input numbers) is the one shown: the easiest to redo by hand.
    """
    if not failures:
        return []
    case, expected, got, why = min(
        failures, key=lambda f: sum(_size(a) for a in (*f[0].args, *f[0].kwargs.values()))
    )
    inputs = ", ".join(_shape(a) for a in (*case.args, *case.kwargs.values()))
    lines = [f"Smallest failing case: '{case.label}' (inputs {inputs}): {why}."]
    exp_parts = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    got_parts = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(exp_parts) != len(got_parts):
        got_parts = [got] if len(exp_parts) == 1 else got_parts
    for i, (e, g) in enumerate(zip(exp_parts, got_parts, strict=False)):
        ea, ga = _as_array(e), _as_array(g)
        if ea is None or ga is None:
            continue
        which = "" if len(exp_parts) == 1 else f"Output {i}: "
        first = first_difference(ea, ga, rtol, atol)
        if not first:
            continue
        lines.append(f"{which}First differing entry {first}.")
        kept, broken = properties(ea, ga)
        if kept:
            lines.append(f"  Yours keeps: {'; '.join(kept)}.")
        if broken:
            lines.append(f"  Yours breaks: {'; '.join(broken)}.")
        break
    return lines


def _as_array(x: Any) -> np.ndarray | None:
    if type(x) is _ndarray:
        return x
    try:
        import torch

        if type(x) is torch.Tensor:
            t = x.detach().cpu()
            return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    return None
