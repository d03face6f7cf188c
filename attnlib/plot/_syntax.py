"""Figures of lesson 09: keys that find syntactic roles, values that carry features."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnlib.plot._base import (
    HATCHES,
    MARKERS,
    PALETTE,
    as_numpy,
    course_style,
    fit_width,
    new_axes,
)

__all__ = ["role_scatter", "grouped_bars"]


def role_scatter(
    points, labels, names: Sequence[str], *, ax=None, title=None, xlabel=None, ylabel=None
):
    """Scatter 2-D points (e.g. projected key vectors), one colour and marker per label.

    Parameters
    ----------
    points : array-like of shape (n_tokens, 2)
    labels : int array-like of shape (n_tokens,)
        Index into ``names``; every label gets its own colour, marker shape and legend
        entry (colour is never the only channel).
    names : sequence of str
    """
    p, lab = as_numpy(points), as_numpy(labels)
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"role_scatter: points must have shape (n_tokens, 2), got {p.shape}")
    if lab.shape != (p.shape[0],):
        raise ValueError(f"role_scatter: labels must have shape ({p.shape[0]},), got {lab.shape}")
    ax = new_axes(ax, figsize=(5.5, 4.2))
    with course_style():
        for c in np.unique(lab):
            sel = lab == c
            ax.scatter(
                p[sel, 0],
                p[sel, 1],
                s=14,
                alpha=0.55,
                color=PALETTE[int(c) % len(PALETTE)],
                marker=MARKERS[int(c) % len(MARKERS)],
                label=f"{names[int(c)]} ({int(sel.sum())})",
            )
        ax.legend(loc="best", markerscale=1.5)
        if xlabel:
            ax.set_xlabel(xlabel)
        if ylabel:
            ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
    return ax


def grouped_bars(
    values, groups: Sequence[str], series: Sequence[str], *, ax=None, title=None, ylabel=None
):
    """Bars of a (n_groups, n_series) table: one cluster per group, one colour and hatch per
    series.

    E.g. the mean attention weight each head (group) gives the subject and the attractor
    (series), or probe accuracies of keys and values (series) for each label (group).
    Series differ in colour and hatching; the legend sits beside the bars.
    """
    v = as_numpy(values)
    if v.shape != (len(groups), len(series)):
        raise ValueError(
            f"grouped_bars: values must have shape ({len(groups)}, {len(series)}) = "
            f"(n_groups, n_series), got {v.shape}"
        )
    ax = new_axes(ax, figsize=fit_width(1.0 * len(groups) + 3.4, 3.2))
    width = 0.8 / len(series)
    with course_style():
        x = np.arange(len(groups))
        for s, name in enumerate(series):
            ax.bar(
                x + (s - (len(series) - 1) / 2) * width,
                v[:, s],
                width,
                label=name,
                color=PALETTE[s % len(PALETTE)],
                hatch=HATCHES[s % len(HATCHES)],
                edgecolor="white",
            )
        ax.set_xticks(x, labels=list(groups))
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside, not over
        if ylabel:
            ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
    return ax
