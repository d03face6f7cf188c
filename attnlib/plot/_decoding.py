"""Figures of lessons 10–12: cost against sequence length, positions, score vs offset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from attnlib.plot._base import (
    SCORES_CMAP,
    as_numpy,
    course_style,
    mark_every,
    new_axes,
    plot_series,
    series_style,
)


def cost_curves(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str = "seq_k",
    ylabel: str = "time (ms)",
    title: str | None = None,
    logx: bool = True,
    logy: bool = True,
    ax=None,
):
    """One line per variant of a cost (time, memory) against a length.

    Parameters
    ----------
    x : sequence of float of shape (n_points,)
        The lengths (e.g. seq_k, or tokens already generated).
    series : mapping of label -> sequence of float of shape (n_points,)
        The cost of each variant at each length; variants differ in colour, marker and
        line style.
    """
    xs = np.asarray(x, dtype=float)
    if xs.ndim != 1:
        raise ValueError(f"cost_curves: x must be 1-D, got shape {xs.shape}")
    ax = new_axes(ax, figsize=(5.6, 3.6))
    with course_style():
        plot_series(ax, "cost_curves", xs, series)
        if logx:
            ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        ax.legend()
    return ax


def position_codes(P, *, ax=None, title: str | None = "sinusoidal position codes"):
    """Heat map of position codes: one row per position, one column per dimension.

    P : array-like of shape (seq, d_model)
    """
    m = as_numpy(P)
    if m.ndim != 2:
        raise ValueError(f"position_codes: P must be (seq, d_model), got shape {m.shape}")
    ax = new_axes(ax, figsize=(5.6, 3.8))
    with course_style():
        im = ax.imshow(m, cmap=SCORES_CMAP, vmin=-1, vmax=1, aspect="auto")
        ax.set_xlabel("dimension (d_model)")
        ax.set_ylabel("position")
        if title:
            ax.set_title(title)
        ax.figure.colorbar(im, ax=ax, shrink=0.8, label="value")
    return ax


def score_vs_offset(offsets, scores: Mapping[str, Sequence[float]], *, ax=None, title=None):
    """Query–key score against the offset (key position − query position).

    offsets : array-like of int of shape (n,)
    scores : mapping of label -> array-like of shape (n,), e.g. several query positions;
        each gets its own colour, marker and line style
    """
    off = as_numpy(offsets)
    ax = new_axes(ax, figsize=(5.8, 3.4))
    with course_style():
        for i, (label, s) in enumerate(scores.items()):
            ax.plot(
                off, as_numpy(s), markevery=mark_every(len(off)), label=label, **series_style(i)
            )
        ax.axhline(0, color="0.7", lw=0.8)
        ax.set_xlabel("offset (key position − query position)")
        ax.set_ylabel("score q·k")
        if title:
            ax.set_title(title)
        ax.legend()
    return ax
