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
from matplotlib.ticker import MaxNLocator, MultipleLocator

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
    overlapping pair apart along the axis on which they overlap less (for short, wide names
    usually up and down), half the overlap each, until nothing overlaps; no label leaves the
    panel.
    """
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    to_data = ax.transData.inverted()
    frame = ax.get_window_extent(renderer)
    pad = 6.0  # pixels of air between two labels
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
                if oy <= ox:  # cheaper to part vertically
                    step = np.array([0.0, oy / 2 * (1 if d[1] >= 0 else -1)])
                else:
                    step = np.array([ox / 2 * (1 if d[0] >= 0 else -1), 0.0])
                shift[i] -= step
                shift[j] += step
        for k, b in enumerate(boxes):  # keep each label inside the panel
            half = np.array([b.width / 2, b.height / 2])
            moved = centres[k] + shift[k]
            inside = np.clip(moved, [frame.x0, frame.y0] + half, [frame.x1, frame.y1] - half)
            shift[k] += inside - moved
        if not np.abs(shift).max(initial=0) > 1e-6:
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
    axis_variance: Mapping[str, Sequence[float]] | None = None,
):
    """Scatter plots of 2-D projections: one row per space, one column per colouring.

    Both axes of a panel have the same scale (one unit is as long across as up) and the
    same tick spacing, so a spread along PC 1 can be compared with one along PC 2 by eye.

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
    axis_variance : mapping of space name -> (float, float), optional
        The share of the table's variance along PC 1 and along PC 2 of each space, written
        in the axis labels (e.g. "PC 1 · 81% of the variance").

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
                shares = None if axis_variance is None else axis_variance.get(space)
                for k, set_label in enumerate((ax.set_xlabel, ax.set_ylabel)):
                    label = f"PC {k + 1}"
                    if shares is not None:
                        label += f" · {shares[k]:.0%}" + (" of the variance" if k == 0 else "")
                    set_label(label)
        if suptitle:
            fig.suptitle(suptitle)
        fig.canvas.draw()  # lay out every panel first: scales and labels are set in inches
        for r, space in enumerate(spaces):
            _same_scale(axes[r], as_numpy(points[space]))
        for ax, texts, anchors in to_spread:
            _spread_labels(ax, texts, anchors)
    return fig


def _same_scale(row, p: np.ndarray, *, margin: float = 0.1) -> None:
    """Show the points ``p`` (n, 2) at one scale in every panel of ``row``: one data unit as
    long across as up and in each panel, centred, with ticks at the same step on both axes.

    The limits are fixed here, so moving a direct label afterwards does not rescale a panel.
    """
    lo, hi = p.min(axis=0), p.max(axis=0)
    extent = np.where(hi > lo, hi - lo, max(float((hi - lo).max()), 1.0))  # no zero extent
    span = extent * (1 + 2 * margin)  # (2,): what a panel must show, in data units
    mid = (lo + hi) / 2
    sizes = []  # (width, height) of each panel in inches
    for ax in row:
        box = ax.get_window_extent()
        sizes.append((box.width / ax.figure.dpi, box.height / ax.figure.dpi))
    # units per inch: the most any panel of the row needs to hold the data both ways
    scale = max(max(span[0] / w, span[1] / h) for w, h in sizes)
    ticks = MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(
        float((mid - span / 2).min()), float((mid + span / 2).max())
    )
    step = float(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    for ax, (w, h) in zip(row, sizes, strict=True):
        ax.set_xlim(mid[0] - scale * w / 2, mid[0] + scale * w / 2)
        ax.set_ylim(mid[1] - scale * h / 2, mid[1] + scale * h / 2)
        ax.set_aspect("equal", adjustable="box")  # holds it if the layout moves the frame
        ax.xaxis.set_major_locator(MultipleLocator(step))
        ax.yaxis.set_major_locator(MultipleLocator(step))
