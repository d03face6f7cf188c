"""Figures of lesson 15 (the block around attention): measured curves, one line per setting.

:func:`curves` draws a few measured series against one shared x (a layer index, an input
value), each in its own colour, marker and line style, with an optional log scale and a
dashed reference line — the score spread per layer with and without LayerNorm, the
gradient reaching each block with and without the residual path, GELU beside ReLU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from attnlib.plot._base import as_numpy, course_style, mark_every, new_axes, series_style

__all__ = ["curves"]


def curves(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    log: bool = False,
    reference: float | None = None,
    reference_label: str | None = None,
    integer_x: bool = False,
    title: str | None = None,
    legend: str = "best",
    ax=None,
):
    """One line per entry of ``series`` against ``x``, in the course's series styles.

    Parameters
    ----------
    x : array-like of shape (n,)
        E.g. the layer index, or the inputs of an activation function.
    series : mapping of label -> array-like of shape (n,)
        Each series differs from the others in colour, marker and line style.
    xlabel, ylabel : str
    log : bool, default False
        A logarithmic y axis (for quantities that grow or shrink by orders of magnitude).
    reference : float, optional
        A dashed horizontal line at this height, labelled ``reference_label``.
    integer_x : bool, default False
        One tick per integer x (layers, blocks).
    title : str, optional
    legend : str, default "best"
        Where the legend goes: a matplotlib location (``"upper left"``, ...) inside the axes,
        or ``"below"``: under them, in two columns, clear of every curve.
    ax : Axes, optional

    Returns
    -------
    Axes
    """
    if not series:
        raise ValueError("curves: series is empty")
    xs = as_numpy(x).astype(float)
    if xs.ndim != 1:
        raise ValueError(f"curves: x must be 1-D, got shape {xs.shape}")
    ax = new_axes(ax, figsize=(6.2, 3.6))
    with course_style():
        for i, (label, ys) in enumerate(series.items()):
            ys = as_numpy(ys).astype(float)
            if ys.shape != xs.shape:
                raise ValueError(f"curves: series {label!r} has shape {ys.shape}, x {xs.shape}")
            ax.plot(xs, ys, label=label, markevery=mark_every(len(xs), 13), **series_style(i))
        if reference is not None:
            ax.axhline(reference, color="0.45", ls=":", lw=1.5, label=reference_label)
        if log:
            ax.set_yscale("log")
        if integer_x:
            ax.set_xticks(np.arange(int(xs.min()), int(xs.max()) + 1))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        if legend == "below":
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, frameon=False)
        else:
            ax.legend(loc=legend)
    return ax
