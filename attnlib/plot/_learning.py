"""Figures of lessons 05 and 06: learning curves, key and value spaces, gradient norms.

Every function takes its measurements as arrays, draws in the course style and returns the
Axes or Figure; none calls ``plt.show()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from attnlib.plot._base import PALETTE, as_numpy, course_style, new_axes


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
    chance : float, optional
        A dashed horizontal line (e.g. the accuracy of guessing).
    """
    if not curves:
        raise ValueError("learning_curves: curves is empty")
    ax = new_axes(ax, figsize=(5.5, 3.6))
    with course_style():
        for i, (label, y) in enumerate(curves.items()):
            y = as_numpy(y).astype(float)
            if y.ndim != 1:
                raise ValueError(f"learning_curves: {label!r} must be 1-D, got shape {y.shape}")
            color = PALETTE[i % len(PALETTE)]
            steps = np.arange(1, len(y) + 1)
            ax.plot(steps, y, color=color, alpha=0.2, lw=0.8)
            ax.plot(steps, _smooth(y, smooth), color=color, lw=1.8, label=label)
        if chance is not None:
            ax.axhline(chance, color="0.5", ls="--", lw=1, label="chance")
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        ax.legend(fontsize=8, loc="best")
    return ax


def feature_spaces(
    points: Mapping[str, np.ndarray],
    labels: Mapping[str, Sequence[int]],
    *,
    scores: Mapping[tuple[str, str], float] | None = None,
    suptitle: str | None = None,
):
    """Scatter plots of 2-D projections: one row per space, one column per colouring.

    Parameters
    ----------
    points : mapping of space name -> array-like of shape (n, 2)
        E.g. ``{"keys": pca_2d(k), "values": pca_2d(v)}``.
    labels : mapping of feature name -> int array-like of shape (n,)
        E.g. ``{"name": names, "number": numbers}``; each column is coloured by one.
    scores : mapping of (space, feature) -> float, optional
        Written in each panel's title (e.g. the share of variance the feature explains).

    Returns
    -------
    Figure
    """
    spaces, feats = list(points), list(labels)
    if not spaces or not feats:
        raise ValueError("feature_spaces: points and labels must not be empty")
    with course_style():
        fig, axes = plt.subplots(
            len(spaces),
            len(feats),
            squeeze=False,
            layout="constrained",
            figsize=(3.3 * len(feats), 3.0 * len(spaces)),
        )
        for r, space in enumerate(spaces):
            p = as_numpy(points[space])
            if p.ndim != 2 or p.shape[1] != 2:
                raise ValueError(f"feature_spaces: points[{space!r}] must be (n, 2), got {p.shape}")
            for c, feat in enumerate(feats):
                lab = np.asarray(labels[feat])
                if lab.shape != (len(p),):
                    raise ValueError(
                        f"feature_spaces: labels[{feat!r}] has shape {lab.shape}, expected "
                        f"({len(p)},)"
                    )
                ax = axes[r, c]
                n_groups = int(lab.max()) + 1
                cmap = plt.get_cmap("tab20" if n_groups > 10 else "tab10")
                ax.scatter(p[:, 0], p[:, 1], c=lab, cmap=cmap, s=14, vmin=-0.5,
                           vmax=cmap.N - 0.5, edgecolors="none")  # fmt: skip
                title = f"{space}, coloured by {feat}"
                if scores is not None and (space, feat) in scores:
                    title += f"\n{feat} explains {scores[(space, feat)]:.1%} of the variance"
                ax.set_title(title, fontsize=9)
                ax.set_xlabel("PC 1")
                ax.set_ylabel("PC 2")
                ax.set_xticks([])
                ax.set_yticks([])
        if suptitle:
            fig.suptitle(suptitle)
    return fig


def grad_norm_curves(norms: Mapping[str, Sequence[float]], *, ax=None, smooth: int = 1):
    """Gradient norm of each parameter against the training step (log scale)."""
    ax = new_axes(ax, figsize=(5.5, 3.4))
    with course_style():
        for i, (name, y) in enumerate(norms.items()):
            y = as_numpy(y).astype(float)
            ax.plot(np.arange(1, len(y) + 1), _smooth(y, smooth), color=PALETTE[i % len(PALETTE)],
                    lw=1.6, label=f"‖∂L/∂{name}‖")  # fmt: skip
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel("gradient norm")
        ax.legend(fontsize=8)
    return ax


def entropy_curve(entropy: Sequence[float], *, seq_k: int | None = None, ax=None):
    """Entropy of one query's attention weights against the training step.

    ``seq_k`` draws the maximum, ``log(seq_k)`` (uniform weights).
    """
    y = as_numpy(entropy).astype(float)
    ax = new_axes(ax, figsize=(5.0, 3.2))
    with course_style():
        ax.plot(np.arange(1, len(y) + 1), y, color=PALETTE[3], lw=1.8, label="entropy")
        if seq_k is not None:
            ax.axhline(math.log(seq_k), color="0.5", ls="--", lw=1,
                       label=f"uniform over {seq_k} keys")  # fmt: skip
        ax.axhline(0.0, color="0.5", ls=":", lw=1, label="one-hot")
        ax.set_xlabel("training step")
        ax.set_ylabel("entropy of the weights (nats)")
        ax.legend(fontsize=8)
    return ax
