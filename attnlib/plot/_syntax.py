"""Figures of lesson 09: keys that find syntactic roles, values that carry features."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.colors import to_rgba

from attnlib.plot._base import (
    FONT,
    HATCHES,
    MARKERS,
    PALETTE,
    as_numpy,
    course_style,
    fit_width,
    new_axes,
    subplots,
)

__all__ = ["role_scatter", "grouped_bars"]


def role_scatter(
    points,
    labels,
    names: Sequence[str],
    *,
    ax=None,
    title=None,
    xlabel=None,
    ylabel=None,
    panels: bool = False,
    ncols: int = 2,
):
    """Scatter 2-D points (e.g. projected key vectors), one colour and marker per label.

    Parameters
    ----------
    points : array-like of shape (n_tokens, 2)
    labels : int array-like of shape (n_tokens,)
        Index into ``names``; every label gets its own colour, marker shape and legend
        entry (colour is never the only channel).
    names : sequence of str
    panels : bool
        False (default): one Axes; the largest group is drawn first and markers are
        nearly hollow (faces at 25 % opacity), so a small group is never buried under a
        large one. True: small multiples, one panel per label (``ncols`` per row, shared
        axes), that label's points in its colour and marker over every other point in
        light grey — no group can hide another. Returns the Figure (``ax`` must then be
        None).
    """
    p, lab = as_numpy(points), as_numpy(labels)
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"role_scatter: points must have shape (n_tokens, 2), got {p.shape}")
    if lab.shape != (p.shape[0],):
        raise ValueError(f"role_scatter: labels must have shape ({p.shape[0]},), got {lab.shape}")
    present = [int(c) for c in np.unique(lab)]
    if panels:
        if ax is not None:
            raise ValueError("role_scatter: panels=True draws its own figure; pass ax=None")
        nrows = -(-len(present) // ncols)
        fig, axes = subplots(
            nrows, ncols, figsize=fit_width(3.4 * ncols + 0.6, 2.9 * nrows + 0.5),
            sharex=True, sharey=True, squeeze=False,
        )  # fmt: skip
        with course_style():
            for a, c in zip(axes.flat, present, strict=False):
                sel = lab == c
                a.scatter(p[~sel, 0], p[~sel, 1], s=8, color="0.82", marker="o", lw=0,
                          label="other nouns")  # fmt: skip
                a.scatter(
                    p[sel, 0], p[sel, 1], s=16, color=PALETTE[c % len(PALETTE)],
                    marker=MARKERS[c % len(MARKERS)], alpha=0.8, lw=0.6,
                )  # fmt: skip
                a.set_title(f"{names[c]} ({int(sel.sum())})", fontsize=FONT["label"])
            for a in axes.flat[len(present) :]:
                a.set_visible(False)
            if xlabel:
                for a in axes[-1]:
                    a.set_xlabel(xlabel)
            if ylabel:
                for a in axes[:, 0]:
                    a.set_ylabel(ylabel)
            if title:
                fig.suptitle(title)
        return fig
    ax = new_axes(ax, figsize=(5.5, 4.2))
    counts = {c: int((lab == c).sum()) for c in present}
    with course_style():
        for c in sorted(present, key=lambda c: -counts[c]):  # largest first, smallest on top
            sel = lab == c
            colour = PALETTE[c % len(PALETTE)]
            ax.scatter(
                p[sel, 0],
                p[sel, 1],
                s=18,
                facecolors=to_rgba(colour, 0.25),  # nearly hollow: what lies below shows
                edgecolors=colour,
                linewidths=0.9,
                marker=MARKERS[c % len(MARKERS)],
                label=f"{names[c]} ({counts[c]})",
            )
        handles, texts = ax.get_legend_handles_labels()
        order = sorted(range(len(texts)), key=lambda i: present.index(
            next(c for c in present if texts[i].startswith(f"{names[c]} ("))))  # fmt: skip
        ax.legend([handles[i] for i in order], [texts[i] for i in order], loc="best",
                  markerscale=1.5)  # fmt: skip
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
