"""Figures of lessons 05 and 06: learning curves, gradient norms, entropy.

Every function takes its measurements as arrays, draws in the course style and returns the
Axes or Figure; none calls ``plt.show()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from attnlib.plot._base import (
    PALETTE,
    as_numpy,
    course_style,
    mark_every,
    new_axes,
    series_style,
)


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far)."""
    if window <= 1:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    n = np.arange(1, len(y) + 1)
    lo = np.maximum(n - window, 0)
    return (c[n] - c[lo]) / (n - lo)


def learning_curves(
    curves: Mapping[str, Sequence[float]],
    *,
    ax=None,
    ylabel: str = "accuracy",
    smooth: int = 10,
    chance: float | None = None,
    title: str | None = None,
):
    """One line per model: a per-step metric against the training step.

    Parameters
    ----------
    curves : mapping of label -> array-like of shape (steps,)
        E.g. ``{"separate K, V": history["accuracy"], ...}``.
    smooth : int
        Width of the trailing moving average drawn (the raw values are drawn faintly).
        Models differ in colour, marker and line style.
    chance : float, optional
        A dashed horizontal line (e.g. the accuracy of guessing).
    """
    if not curves:
        raise ValueError("learning_curves: curves is empty")
    ax = new_axes(ax, figsize=(5.8, 3.6))
    with course_style():
        for i, (label, y) in enumerate(curves.items()):
            y = as_numpy(y).astype(float)
            if y.ndim != 1:
                raise ValueError(f"learning_curves: {label!r} must be 1-D, got shape {y.shape}")
            style = series_style(i)
            steps = np.arange(1, len(y) + 1)
            ax.plot(steps, y, color=style["color"], alpha=0.2, lw=0.8)
            ax.plot(
                steps,
                _smooth(y, smooth),
                lw=2.0,
                markevery=mark_every(len(y)),
                label=label,
                **style,
            )
        if chance is not None:
            ax.axhline(chance, color="0.45", ls=":", lw=1.5, label="chance")
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        ax.legend(loc="best")
    return ax


def grad_norm_curves(norms: Mapping[str, Sequence[float]], *, ax=None, smooth: int = 1):
    """Gradient norm of each parameter against the training step (log scale)."""
    ax = new_axes(ax, figsize=(5.6, 3.4))
    with course_style():
        for i, (name, y) in enumerate(norms.items()):
            y = as_numpy(y).astype(float)
            ax.plot(
                np.arange(1, len(y) + 1),
                _smooth(y, smooth),
                lw=1.8,
                markevery=mark_every(len(y)),
                label=f"‖∂L/∂{name}‖",
                **series_style(i),
            )
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel("gradient norm")
        ax.legend()
    return ax


def entropy_curve(entropy: Sequence[float], *, seq_k: int | None = None, ax=None):
    """Entropy of one query's attention weights against the training step.

    ``seq_k`` draws the maximum, ``log(seq_k)`` (uniform weights).
    """
    y = as_numpy(entropy).astype(float)
    ax = new_axes(ax, figsize=(5.2, 3.2))
    with course_style():
        ax.plot(np.arange(1, len(y) + 1), y, color=PALETTE[2], lw=2.0, label="entropy")
        if seq_k is not None:
            ax.axhline(
                math.log(seq_k), color="0.4", ls="--", lw=1.5, label=f"uniform over {seq_k} keys"
            )
        ax.axhline(0.0, color="0.4", ls=":", lw=1.5, label="one-hot")
        ax.set_xlabel("training step")
        ax.set_ylabel("entropy of the weights (nats)")
        ax.legend()
    return ax
