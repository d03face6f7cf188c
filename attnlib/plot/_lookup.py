"""Lesson 05's figures.

* :func:`width_sweep` — how wide must a tied K = V head be? Two panels against ``d_head``:
  each wiring's accuracy after training (one dot per seed, a line through their mean) and
  the step at which each head that got there first reached the accuracy level.
* :func:`feature_spaces` — 2-D projections of a head's tables, one panel per feature that
  could explain them (e.g. a token's name, its number).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import patheffects
from matplotlib.lines import Line2D
from matplotlib.markers import MarkerStyle

from attnlib.plot._base import (
    FONT,
    MARKERS,
    MAX_WIDTH,
    PALETTE,
    as_numpy,
    course_style,
    fit_width,
    series_style,
    subplots,
)


def width_sweep(
    accuracy: Mapping[tuple[str, int, int], float],
    reached: Mapping[tuple[str, int, int], int | None],
    widths: Mapping[str, Sequence[int]],
    seeds: Sequence[int],
    *,
    level: float = 0.95,
    steps: int | None = None,
):
    """Accuracy after training and step reaching ``level``, against d_head, per wiring.

    Parameters
    ----------
    accuracy : mapping of (mode, d_head, seed) -> float
        Accuracy of each trained head (e.g. on a held-out set).
    reached : mapping of (mode, d_head, seed) -> int or None
        The training step at which the head first reached ``level`` (None: never).
    widths : mapping of mode -> sequence of int
        The widths trained for each wiring, e.g. ``{"separate": (1, 2, 3), "tied": (2, 3)}``.
    seeds : sequence of int
    steps : int, optional
        The training budget: the upper limit of the right panel.

    Returns
    -------
    Figure
        Wirings differ in colour, marker and line style.
    """
    if not widths:
        raise ValueError("width_sweep: widths is empty")
    fig, (ax_acc, ax_steps) = subplots(1, 2, figsize=(8, 3.4))
    with course_style():
        all_widths = sorted({d for ws in widths.values() for d in ws})
        for i, (mode, ws) in enumerate(widths.items()):
            style = series_style(i)
            acc = np.array([[accuracy[mode, d, s] for s in seeds] for d in ws])  # (widths, seeds)
            ax_acc.plot(list(ws), acc.mean(axis=1), label=mode, **style)
            ax_acc.scatter(
                np.repeat(ws, len(seeds)),
                acc.ravel(),
                color=style["color"],
                s=14,
                alpha=0.6,
                zorder=3,
            )
            got = [(d, reached[mode, d, s]) for d in ws for s in seeds if reached[mode, d, s]]
            if got:
                ax_steps.plot(
                    [d for d, _ in got],
                    [r for _, r in got],
                    ls="none",
                    marker=style["marker"],
                    color=style["color"],
                    label=mode,
                )
        ax_acc.axhline(level, color="0.45", ls=":", lw=1.5)
        ax_acc.set(xlabel="d_head", ylabel="accuracy after training", xticks=all_widths)
        ax_acc.legend(loc="lower right")
        ax_steps.set(xlabel="d_head", ylabel=f"step reaching {level:.0%}", xticks=all_widths)
        ax_steps.set_ylim(0, steps)
        ax_steps.set_title("heads that got there", fontsize="medium")
    return fig


def _group_markers(collection, index: np.ndarray) -> None:
    """Give each point of one scatter ``collection`` the marker of its group's index."""
    paths = []
    for i in index.tolist():
        m = MarkerStyle(MARKERS[i % len(MARKERS)])
        paths.append(m.get_path().transformed(m.get_transform()))
    collection.set_paths(paths)


def _spread_labels(ax, texts, anchors: np.ndarray, *, rounds: int = 200) -> None:
    """Move direct labels apart until no two overlap; a moved label gets a leader line.

    Works in display coordinates on the rendered text boxes: each round pushes every
    overlapping pair apart along the line between their centres (vertically when they
    coincide), half the overlap each, until nothing overlaps.
    """
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    to_data = ax.transData.inverted()
    pad = 3.0  # pixels of air between two labels
    for _ in range(rounds):
        boxes = [t.get_window_extent(renderer) for t in texts]
        centres = np.array([[(b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2] for b in boxes])
        shift = np.zeros_like(centres)
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                a, b = boxes[i], boxes[j]
                ox = min(a.x1, b.x1) - max(a.x0, b.x0) + pad
                oy = min(a.y1, b.y1) - max(a.y0, b.y0) + pad
                if ox <= 0 or oy <= 0:
                    continue
                d = centres[j] - centres[i]
                if abs(d[1]) * ox >= abs(d[0]) * oy or not d.any():  # cheaper to part vertically
                    step = np.array([0.0, oy / 2 * (1 if d[1] >= 0 else -1)])
                else:
                    step = np.array([ox / 2 * (1 if d[0] >= 0 else -1), 0.0])
                shift[i] -= step
                shift[j] += step
        if not shift.any():
            break
        for t, c, s in zip(texts, centres, shift, strict=True):
            if s.any():
                t.set_position(to_data.transform(c + s))
    for t, anchor in zip(texts, anchors, strict=True):
        at = ax.transData.transform(t.get_position())
        if np.hypot(*(at - ax.transData.transform(anchor))) > 6:
            ax.plot(
                *zip(anchor, t.get_position(), strict=True),
                color="0.45",
                ls="-",
                lw=0.7,
                zorder=1,
                scalex=False,
                scaley=False,
            )


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
        E.g. ``{"scores": pca_2d(table)}``.
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
        A feature with at most 8 groups: one Okabe–Ito colour *and* one marker per group
        (no colour used twice) and a legend. More groups than colours: every point in one
        neutral grey, and each group named at its centre, the names moved apart until none
        overlaps (a leader line points from a moved name to its group).
    """
    spaces, feats = list(points), list(labels)
    if not spaces or not feats:
        raise ValueError("feature_spaces: points and labels must not be empty")
    to_spread = []  # (ax, texts, anchors) of the panels with direct labels
    with course_style():
        fig, axes = plt.subplots(
            len(spaces),
            len(feats),
            squeeze=False,
            layout="constrained",
            figsize=fit_width(min(3.8, MAX_WIDTH / len(feats)) * len(feats), 3.3 * len(spaces)),
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
                groups = np.unique(lab).tolist()
                index = np.searchsorted(groups, lab)  # (n,): 0..n_groups-1
                group_names = None if names is None else names.get(feat)

                def name_of(g, group_names=group_names):
                    return str(group_names[g]) if group_names is not None else str(g)

                ax = axes[r, c]
                if len(groups) <= len(PALETTE):
                    colours = [PALETTE[i] for i in index.tolist()]
                    dots = ax.scatter(p[:, 0], p[:, 1], c=colours, s=26, alpha=0.85, linewidths=0)
                    _group_markers(dots, index)
                    handles = [
                        Line2D(
                            [], [], ls="none", marker=MARKERS[i], color=PALETTE[i], label=name_of(g)
                        )
                        for i, g in enumerate(groups)
                    ]
                    ax.legend(
                        handles=handles,
                        title=feat,
                        loc="upper left",
                        bbox_to_anchor=(1.0, 1.0),
                        fontsize=FONT["note"],
                        title_fontsize=FONT["note"],
                        handletextpad=0.2,
                        borderaxespad=0.2,
                    )
                else:
                    ax.scatter(p[:, 0], p[:, 1], color="0.6", s=18, alpha=0.7, linewidths=0)
                    ax.margins(0.18)
                    anchors = np.array([p[lab == g].mean(axis=0) for g in groups])
                    texts = [
                        ax.text(
                            *anchor,
                            name_of(g),
                            ha="center",
                            va="center",
                            fontsize=FONT["note"],
                            fontweight="bold",
                            color="black",
                            zorder=3,
                            path_effects=[patheffects.withStroke(linewidth=3, foreground="white")],
                        )
                        for g, anchor in zip(groups, anchors, strict=True)
                    ]
                    to_spread.append((ax, texts, anchors))
                title = f"{space}, by {feat}"
                if scores is not None and (space, feat) in scores:
                    title += f"\n{feat} explains {scores[(space, feat)]:.1%} of the variance"
                ax.set_title(title, fontsize=FONT["note"] + 1)
                ax.set_xlabel("PC 1")
                ax.set_ylabel("PC 2")
                ax.set_xticks([])
                ax.set_yticks([])
        if suptitle:
            fig.suptitle(suptitle)
        if to_spread:
            fig.canvas.draw()  # lay out every panel first: labels are moved in display space
            for ax, texts, anchors in to_spread:
                ax.set_xlim(ax.get_xlim())  # freeze the limits: moving a label must not
                ax.set_ylim(ax.get_ylim())  # rescale the panel under the other labels
                _spread_labels(ax, texts, anchors)
    return fig
