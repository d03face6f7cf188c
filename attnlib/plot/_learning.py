"""Figures of lessons 05 and 06: learning curves, key and value spaces, gradient norms.

Every function takes its measurements as arrays, draws in the course style and returns the
Axes or Figure; none calls ``plt.show()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.markers import MarkerStyle

from attnlib.plot._base import (
    FONT,
    MAX_WIDTH,
    PALETTE,
    as_numpy,
    course_style,
    fit_width,
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


def _point_markers(collection, groups: np.ndarray) -> None:
    """Give each point of one scatter ``collection`` the marker of its group."""
    paths = []
    for g in groups.tolist():
        m = MarkerStyle(series_style(g)["marker"])
        paths.append(m.get_path().transformed(m.get_transform()))
    collection.set_paths(paths)


def feature_spaces(
    points: Mapping[str, np.ndarray],
    labels: Mapping[str, Sequence[int]],
    *,
    scores: Mapping[tuple[str, str], float] | None = None,
    suptitle: str | None = None,
    names: Mapping[str, Sequence[str]] | None = None,
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
    names : mapping of feature name -> sequence of str, optional
        The group names of a feature (``names["name"][g]`` for group ``g``); default the
        group numbers.

    Returns
    -------
    Figure
        Groups differ in colour (Okabe–Ito, cycling after 8) *and* marker shape, and every
        group is labelled with its name at its centre (so 16 groups need no colour key).
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
            figsize=fit_width(min(3.6, MAX_WIDTH / len(feats)) * len(feats), 2.9 * len(spaces)),
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
                lab = lab.astype(int)
                group_names = None if names is None else names.get(feat)
                ax = axes[r, c]
                colours = [PALETTE[g % len(PALETTE)] for g in lab.tolist()]
                dots = ax.scatter(p[:, 0], p[:, 1], c=colours, s=22, alpha=0.8, linewidths=0)
                _point_markers(dots, lab)
                for g in np.unique(lab).tolist():
                    centre = p[lab == g].mean(axis=0)
                    text = str(group_names[g]) if group_names is not None else str(g)
                    ax.annotate(
                        text,
                        centre,
                        ha="center",
                        va="center",
                        fontsize=FONT["note"],
                        fontweight="bold",
                        color=PALETTE[g % len(PALETTE)],
                        path_effects=[_outline()],
                    )
                title = f"{space}, coloured by {feat}"
                if scores is not None and (space, feat) in scores:
                    title += f"\n{feat} explains {scores[(space, feat)]:.1%} of the variance"
                ax.set_title(title, fontsize=FONT["note"] + 1)
                ax.set_xlabel("PC 1")
                ax.set_ylabel("PC 2")
                ax.set_xticks([])
                ax.set_yticks([])
        if suptitle:
            fig.suptitle(suptitle)
    return fig


def _outline():
    from matplotlib import patheffects

    return patheffects.withStroke(linewidth=3, foreground="white")


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
