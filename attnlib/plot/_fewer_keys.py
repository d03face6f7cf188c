"""Figures of lesson 14: fewer keys to keep.

* :func:`tradeoff_scatter` — accuracy against cache bytes per token, one labelled point
  per variant (colour, marker and a direct label);
* :func:`accuracy_vs_distance` — accuracy against how far back the answer sits, one line
  per variant, the window's edge drawn and the region beyond it shaded;
* :func:`cache_bars` — the KV cache of published model configurations, one hatched bar
  per kind of saving, each labelled with its size;
* :func:`keys_kept_view` — the keys-kept explorer's figure: which keys one query can still
  reach under each scheme, and the cache each scheme keeps.

The band and top-k mask pictures of the lesson use :func:`attnlib.plot.attention_grid`
(hatched grey cells are the keys a query can no longer reach).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from attnlib.plot._base import (
    FONT,
    HATCHES,
    OKABE_ITO,
    PALETTE,
    course_style,
    fit_width,
    heatmap,
    mark_every,
    mark_x,
    new_axes,
    series_style,
)

__all__ = ["accuracy_vs_distance", "cache_bars", "keys_kept_view", "tradeoff_scatter"]


def tradeoff_scatter(
    points: Mapping[str, tuple[float, float]],
    *,
    ax=None,
    title: str | None = None,
    xlabel: str = "cache bytes per token (all layers)",
    ylabel: str = "accuracy",
    chance: float | None = None,
    logx: bool = True,
):
    """One point per variant: its cache bytes per token (x) against its accuracy (y).

    Parameters
    ----------
    points : mapping of label -> (bytes per token, accuracy)
        Each point gets its own colour and marker and its label written beside it; labels
        that would overlap are moved up or down and joined to their point by a thin line,
        and variants at exactly the same place share one label ("a = b").
    chance : float, optional — a dotted horizontal line (the accuracy of a guess).
    logx : bool — a base-2 logarithmic x axis (cache sizes differ by factors).

    Returns
    -------
    Axes — one scatter collection per point, in the order of ``points``; ``ax.texts``
    holds the direct labels (one per distinct place, in the order of ``points``).
    """
    if not points:
        raise ValueError("tradeoff_scatter: points must not be empty")
    xs = np.array([float(x) for x, _ in points.values()])
    ys = np.array([float(y) for _, y in points.values()])
    if (xs <= 0).any() and logx:
        raise ValueError(f"tradeoff_scatter: bytes per token must be > 0 on a log axis: {xs}")
    ax = new_axes(ax, figsize=(7.6, 4.6))
    with course_style():
        places: dict[tuple[float, float], list[str]] = {}
        for i, (label, (x, y)) in enumerate(points.items()):
            style = series_style(i)
            ax.scatter(
                [x],
                [y],
                s=80,
                color=style["color"],
                marker=style["marker"],
                edgecolors="0.15",
                linewidths=0.6,
                zorder=3,
            )
            places.setdefault((float(x), float(y)), []).append(label)
        if logx:
            ax.set_xscale("log", base=2)
            ax.set_xlim(xs.min() / 1.6, xs.max() * 4.0)  # room for the labels on the right
        else:
            span = float(xs.max() - xs.min()) or 1.0
            ax.set_xlim(xs.min() - 0.1 * span, xs.max() + 0.6 * span)
        ax.set_ylim(min(0.0, float(ys.min())), 1.08)
        if chance is not None:
            ax.axhline(chance, color="0.4", ls=":", lw=1.2)
            ax.annotate(
                "chance",
                (xs.min() / 1.5 if logx else xs.min(), chance),
                xytext=(0, 3),
                textcoords="offset points",
                fontsize=FONT["note"],
                color="0.3",
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", color="0.9", lw=0.8)
        if title:
            ax.set_title(title)
        _place_labels(ax, {xy: " = ".join(names) for xy, names in places.items()})
    return ax


def _place_labels(ax, labels: Mapping[tuple[float, float], str]) -> None:
    """Write each label beside its point where it overlaps no other label, no point and no
    leader line.

    A label goes right or left of its point if there is room; otherwise one text line or
    more below (or above) it, ending at, centred on or starting at the point's x, joined to
    the point by a thin vertical leader that crosses no other label.
    """
    fig = ax.figure
    fig.draw_without_rendering()  # the layout is final: display coordinates are right
    px = FONT["note"] * fig.dpi / 72  # the font size in pixels
    height, gap = 1.3 * px, 0.7 * px
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent()
    at = {xy: ax.transData.transform(xy) for xy in labels}
    markers = [(x - gap, y - gap, x + gap, y + gap) for x, y in at.values()]
    boxes: list[tuple] = []  # placed labels
    leaders: list[tuple] = []  # placed leader lines (x, y_low, y_high)

    def hits(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    def free(b, leader=None):
        inside = box.x0 <= b[0] and b[2] <= box.x1 and box.y0 <= b[1] and b[3] <= box.y1
        if not inside or any(hits(b, t) for t in markers + boxes):
            return False
        if any(b[0] < lx < b[2] and b[1] < hi and lo < b[3] for lx, lo, hi in leaders):
            return False  # the label would sit on an earlier leader
        if leader is not None:
            lx, lo, hi = leader
            crossed = [t for t in boxes if t[0] < lx < t[2] and t[1] < hi and lo < t[3]]
            crossed += [t for t in markers if t[0] < lx < t[2] and t[1] < hi and lo < t[3]]
            if crossed:
                return False
        return True

    order = sorted(labels, key=lambda xy: (-round(xy[1], 1), xy[0]))  # top to bottom, left first
    chosen = {}
    for xy in order:
        text = labels[xy]
        x, y = at[xy]
        probe = ax.text(0, 0, text, fontsize=FONT["note"])  # measured, not guessed
        width = probe.get_window_extent(renderer).width + 2
        probe.remove()
        choice = None
        for side in (1, -1):  # beside the point
            x0 = x + gap if side == 1 else x - gap - width
            b = (x0, y - height / 2, x0 + width, y + height / 2)
            if free(b):
                choice = (x0, b[1], side, 0)
                break
        # Rows below (or above), the label ending at the point's x first: points placed
        # left to right then step down row by row, and no leader crosses a label.
        rows = [s for k in range(1, 12) for s in (-k, k)]
        tries = [(k, -1) for k in rows[:10]] + [(k, side) for k in rows for side in (0, 1)]
        for k, side in tries if choice is None else ():
            y0 = y - height / 2 + k * 1.3 * height
            x0 = {-1: x - width, 0: x - width / 2, 1: x}[side]
            b = (x0, y0, x0 + width, y0 + height)
            lo, hi = (y0 + height, y - gap) if k < 0 else (y + gap, y0)
            if free(b, (x, lo, hi)):
                choice = (x0, y0, side, k)
                leaders.append((x, lo, hi))
                break
        if choice is None:
            choice = (x + gap, y - height / 2, 1, 0)
        boxes.append((choice[0], choice[1], choice[0] + width, choice[1] + height))
        chosen[xy] = (*choice, width)
    for xy, text in labels.items():  # written in the order given
        x, y = at[xy]
        x0, y0, side, k, width = chosen[xy]
        if k == 0:
            tx, ha = (x0, "left") if side == 1 else (x0 + width, "right")
            arrow = None
        else:
            tx, ha = x, {-1: "right", 0: "center", 1: "left"}[side]
            relpos = ({-1: 1.0, 0: 0.5, 1: 0.0}[side], 1.0 if k < 0 else 0.0)
            arrow = {"arrowstyle": "-", "color": "0.55", "lw": 0.8, "relpos": relpos,
                     "shrinkA": 0, "shrinkB": 4}  # fmt: skip
        ax.annotate(
            text,
            xy,
            xytext=((tx - x) * 72 / fig.dpi, (y0 + height / 2 - y) * 72 / fig.dpi),
            textcoords="offset points",
            ha=ha,
            va="center",
            fontsize=FONT["note"],
            color="0.1",
            arrowprops=arrow,
        )


# blue, vermillion, sky blue, black, reddish purple: pairwise more than 20 apart in CIELAB,
# in normal vision and under the Machado et al. (2009) simulations of deuteranopia,
# protanopia and tritanopia (tests/test_inference_lessons_13_14.py measures it).
DISTANCE_COLOURS = (
    OKABE_ITO["blue"],
    OKABE_ITO["vermillion"],
    OKABE_ITO["sky blue"],
    OKABE_ITO["black"],
    OKABE_ITO["reddish purple"],
)


def accuracy_vs_distance(
    distances: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    *,
    window: int | None = None,
    reach: int | None = None,
    chance: float | None = None,
    ax=None,
    title: str | None = None,
    xlabel: str = "distance d back to the answer (positions)",
):
    """Accuracy against the distance d between the query and the token it must recall.

    Parameters
    ----------
    distances : sequence of int of shape (n_d,)
    curves : mapping of label -> sequence of float of shape (n_d,)
        One line per variant (colour, marker and line style differ). Curves that are
        equal at every distance are drawn as one line labelled "a = b", so that no line
        hides another. Colours follow :data:`DISTANCE_COLOURS`, five colours no two of which
        merge under simulated deuteranopia, protanopia or tritanopia.
    window : int, optional
        The sliding window W: a query sees back to d = W - 1, so the edge is drawn (dashed)
        between W - 1 and W.
    reach : int, optional
        The farthest d the output can depend on at all (with stacked windowed layers,
        n_layers (W - 1)); drawn dotted, and the distances beyond it are shaded. Without
        it, the distances beyond the window are shaded.
    chance : float, optional — a dotted horizontal line.

    Returns
    -------
    Axes — ``ax.get_lines()`` starts with one line per curve, in order.
    """
    d = np.asarray(distances, dtype=float)
    if d.ndim != 1 or len(d) == 0:
        raise ValueError(f"accuracy_vs_distance: distances must be 1-D, got shape {d.shape}")
    merged: dict[str, np.ndarray] = {}
    for label, ys in curves.items():
        ys = np.asarray(ys, dtype=float)
        if ys.shape != d.shape:
            raise ValueError(
                f"accuracy_vs_distance: curve {label!r} has shape {ys.shape}, x has {d.shape}"
            )
        same = next((k for k, v in merged.items() if np.array_equal(v, ys)), None)
        if same is None:
            merged[label] = ys
        else:
            merged[f"{same} = {label}"] = merged.pop(same)
    ax = new_axes(ax, figsize=(7.4, 4.0))
    with course_style():
        for i, (label, ys) in enumerate(merged.items()):
            style = series_style(i)
            style["color"] = DISTANCE_COLOURS[i % len(DISTANCE_COLOURS)]
            ax.plot(d, ys, label=label, markevery=mark_every(len(d), 12), **style)
        if window is not None:
            mark_x(ax, window - 0.5, f"window edge\n(W = {window})", y=0.5)
        far = reach + 0.5 if reach is not None else (window - 0.5 if window is not None else None)
        if far is not None:
            ax.axvspan(far, d.max() + 0.5, color="0.92", zorder=0, lw=0)
        if reach is not None:
            mark_x(ax, far, f"out of reach\n(d > {reach})", y=0.3, ls=":", lw=1.2)
        if chance is not None:
            ax.axhline(chance, color="0.4", ls=":", lw=1.2)
        ax.set_xlim(d.min() - 0.5, d.max() + 0.5)
        ax.set_ylim(-0.03, 1.05)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("accuracy")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=FONT["note"] + 1)
        if title:
            ax.set_title(title)
    return ax


def _labelled_bar(ax, y: float, value: float, i: int, text: str, label=None):
    """One horizontal bar in series ``i``'s colour and hatch, its value written at its end."""
    bar = ax.barh(
        y,
        value,
        height=0.7,
        color=PALETTE[i % len(PALETTE)],
        hatch=HATCHES[i % len(HATCHES)],
        edgecolor="0.15",
        lw=0.6,
        label=label,
    )
    ax.text(value, y, text, va="center", fontsize=FONT["note"])
    return bar


def cache_bars(
    values: Mapping[str, float],
    *,
    kinds: Mapping[str, str] | None = None,
    unit: str = "GiB",
    ax=None,
    title: str | None = None,
    xlabel: str | None = None,
):
    """Horizontal bars, one per model configuration, each labelled with its value.

    Parameters
    ----------
    values : mapping of label -> size (already in ``unit``), drawn top to bottom.
    kinds : mapping of label -> kind of saving (e.g. "grouped keys", "window + global",
        "latent"), optional. Bars of one kind share a colour and a hatch, and the legend
        names the kinds.
    unit : str — written after each value and in the axis label.

    Returns
    -------
    Axes — its bars are ``ax.patches`` in the order of ``values``.
    """
    labels = list(values)
    vals = np.array([float(v) for v in values.values()])
    if (vals < 0).any():
        raise ValueError(f"cache_bars: sizes must be >= 0, got {vals}")
    kinds = dict(kinds or {})
    order = list(dict.fromkeys(kinds.get(label, "") for label in labels))
    ax = new_axes(ax, figsize=(7.6, 0.5 * len(vals) + 1.6))
    with course_style():
        y = np.arange(len(vals))[::-1]
        drawn: dict[str, object] = {}
        for yy, label, v in zip(y, labels, vals, strict=True):
            kind = kinds.get(label, "")
            i = order.index(kind)
            bar = _labelled_bar(ax, yy, v, i, f" {v:.2f} {unit}", label=kind or None)
            drawn.setdefault(kind, bar)
        ax.set_yticks(y, labels=labels)
        ax.set_xlim(0, vals.max() * 1.3 if vals.max() > 0 else 1.0)
        ax.set_xlabel(xlabel or f"KV cache of one sequence ({unit})")
        if any(order):
            ax.legend(
                handles=[drawn[k] for k in order if k],
                labels=[k for k in order if k],
                loc="upper right",
                fontsize=FONT["note"],
                title="kind of saving",
                title_fontsize=FONT["note"],
            )
        if title:
            ax.set_title(title)
    return ax


def keys_kept_view(state, axes=None):
    """The keys-kept explorer's figure (``state`` a :class:`attnlib.explorers.KeysKeptState`).

    Left: one row per scheme, one column per key position up to the query; the keys the
    query can still reach are coloured by the query's weight on them, the others hatched
    grey. Right: the cache each scheme holds at that point, in KiB, one hatched bar each.
    """
    if axes is None:
        with course_style():
            _, axes = plt.subplots(
                1, 2, figsize=fit_width(8.0, 3.5), layout="constrained", width_ratios=(2.2, 1.0)
            )
    ax_m, ax_b = axes
    names = list(state.schemes)
    with course_style():
        heatmap(
            state.weights,
            ax=ax_m,
            queries=names,
            annotate=False,
            colorbar=False,
            mask=state.reach,
            mask_legend=False,
        )
        ax_m.set_ylabel("")
        ax_m.set_xlabel(f"key position (the query is at {state.query})")
        ax_m.set_title(
            f"keys query {state.query} can reach (W = {state.window}, k = {state.k})",
            fontsize=FONT["legend"] + 1,
        )
        kib = np.asarray(state.cache_bytes, dtype=float) / 1024
        y = np.arange(len(names))[::-1]
        for i, (yy, v) in enumerate(zip(y, kib, strict=True)):
            _labelled_bar(ax_b, yy, v, i, f" {v:.0f}")
        ax_b.set_yticks(y, labels=[""] * len(names))
        ax_b.set_xlim(0, kib.max() * 1.45)
        ax_b.set_xlabel("cache (KiB)")
        ax_b.set_title(f"d_latent = {state.d_latent}", fontsize=FONT["legend"] + 1)
    return axes
