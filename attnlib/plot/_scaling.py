"""Figures of lesson 04: why the scores are divided by √d_k.

Every function takes its measurements as arrays (see :mod:`attnlib.tasks.scaling`), draws in
the course style, and returns the Axes or Figure; none calls ``plt.show()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator, NullLocator

from attnlib.plot._base import (
    FONT,
    MARKERS,
    MAX_WIDTH,
    PALETTE,
    as_numpy,
    course_style,
    fit_width,
    mark_every,
    new_axes,
    series_style,
)

# The two sides of every comparison in lesson 04: blue circles on solid lines for the scaled
# scores, vermillion squares on dashed lines for the raw ones (never colour alone).
SCALED, UNSCALED, THIRD = PALETTE[0], PALETTE[1], PALETTE[2]
SCALED_STYLE = {"color": SCALED, "marker": "o", "linestyle": "-"}
UNSCALED_STYLE = {"color": UNSCALED, "marker": "s", "linestyle": "--"}


def _band(ax, x, rows, style, label, *, lo=10, hi=90, center="mean"):
    """A line (mean or median over rows) with a percentile band. rows: (len(x), n_rows)."""
    rows = as_numpy(rows)
    mid = rows.mean(axis=1) if center == "mean" else np.median(rows, axis=1)
    ax.fill_between(
        x,
        np.percentile(rows, lo, axis=1),
        np.percentile(rows, hi, axis=1),
        color=style["color"],
        alpha=0.18,
        lw=0,
    )
    ax.plot(x, mid, label=label, ms=6, **style)
    return mid


def _panels(fn: str, panels, known: Sequence[str]) -> list[str]:
    """The panels a multi-panel function draws: all of ``known`` or the chosen ones, in order."""
    if panels is None:
        return list(known)
    chosen = [panels] if isinstance(panels, str) else list(panels)
    if not chosen or any(p not in known for p in chosen):
        raise ValueError(
            f"{fn}: panels must be a non-empty selection of {tuple(known)}, got {panels!r}"
        )
    return chosen


def _log(ax, which, base=10):
    """Log scale with major ticks only: minor ticks on log axes cost most of a figure's
    drawing time (every one is laid out as a label) and add little here."""
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    (ax.xaxis if which == "x" else ax.yaxis).set_minor_locator(NullLocator())


def variance_vs_width(d_ks, measured, *, scaled=None, tolerance=None, ax=None):
    """Measured Var(q·k) against d_k on log axes, with the prediction Var = d_k.

    Parameters
    ----------
    d_ks : sequence of int
    measured : array-like of shape (len(d_ks),)
        Sample variance of the raw dot products at each width.
    scaled : array-like of shape (len(d_ks),), optional
        Sample variance after dividing by √d_k.
    tolerance : array-like of shape (len(d_ks),), optional
        Relative half-width of the band a correct measurement stays in (error bars).
    """
    d = np.asarray(d_ks, dtype=float)
    m = as_numpy(measured)
    ax = new_axes(ax, figsize=(5.6, 3.8))
    with course_style():
        grid = np.geomspace(d.min() / 1.5, d.max() * 1.5, 50)
        ax.plot(grid, grid, color="0.45", lw=1.5, ls="--", label="predicted: d_k")
        err = None if tolerance is None else as_numpy(tolerance) * d
        ax.errorbar(d, m, yerr=err, fmt="s", color=UNSCALED, ms=7, capsize=3, label="measured: q·k")
        if scaled is not None:
            ax.plot(grid, np.ones_like(grid), color="0.45", lw=1.5, ls=":", label="predicted: 1")
            s_err = None if tolerance is None else as_numpy(tolerance)
            ax.errorbar(
                d,
                as_numpy(scaled),
                yerr=s_err,
                fmt="o",
                color=SCALED,
                ms=7,
                capsize=3,
                label="measured: q·k / √d_k",
            )
        _log(ax, "x", base=2)
        _log(ax, "y", base=2)
        ax.set_xlabel("d_k")
        ax.set_ylabel("variance of the score")
        ax.set_title("Var(q·k) grows like d_k; scaled, it stays 1")
        ax.legend(loc="upper left")
    return ax


def score_histograms(
    samples: Mapping[int, np.ndarray], *, bins: int = 60, rows: Sequence[str] | str | None = None
):
    """Small multiples: raw scores (top row) and scaled scores (bottom row) per d_k.

    Parameters
    ----------
    samples : mapping d_k -> array of shape (n,)
        Raw dot products q·k at each width. The bottom row divides them by √d_k and
        overlays the standard normal density.
    rows : "raw", "scaled" or both (default)
        Draw one row only, to split the figure in two (each stays 8 in wide).

    Returns
    -------
    Figure
        At most 8 in wide; the raw row is vermillion and hatched, the scaled row blue, and
        each row says what it shows on its y-axis.
    """
    d_ks = list(samples)
    if not d_ks:
        raise ValueError("score_histograms: samples is empty")
    which = _panels("score_histograms", rows, ("raw", "scaled"))
    raw_lim = max(float(np.percentile(np.abs(as_numpy(samples[d])), 99.9)) for d in d_ks)
    with course_style():
        fig, axes = plt.subplots(
            len(which),
            len(d_ks),
            figsize=fit_width(1.75 * len(d_ks) + 0.9, 2.3 * len(which) + 0.5),
            layout="constrained",
            sharey="row",
            squeeze=False,
        )
        z = np.linspace(-4.5, 4.5, 200)
        normal = np.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
        for j, d_k in enumerate(d_ks):
            x = as_numpy(samples[d_k])
            for r, kind in enumerate(which):
                ax = axes[r, j]
                if kind == "raw":
                    edges = np.linspace(-raw_lim, raw_lim, bins)
                    counts, edges = np.histogram(x, bins=edges, density=True)
                    ax.stairs(counts, edges, fill=True, color=UNSCALED, alpha=0.75, hatch="//")
                    ax.set_xlim(-raw_lim, raw_lim)
                else:
                    edges = np.linspace(-4.5, 4.5, bins)
                    counts, edges = np.histogram(x / math.sqrt(d_k), bins=edges, density=True)
                    ax.stairs(counts, edges, fill=True, color=SCALED, alpha=0.75)
                    ax.plot(z, normal, color="0.1", lw=1.5)
                    ax.set_xlim(-4.5, 4.5)
                ax.set_yticks([])
                ax.xaxis.set_major_locator(MaxNLocator(nbins=3, symmetric=True))
                if r == 0:
                    ax.set_title(f"d_k = {d_k}")
            axes[-1, j].set_xlabel("score")
        names = {"raw": "raw q·k", "scaled": "q·k / √d_k"}
        for r, kind in enumerate(which):
            axes[r, 0].set_ylabel(f"{names[kind]}\n(density)")
        title = "Raw scores spread out with d_k"
        if "scaled" in which:
            title = (
                "Raw scores spread out with d_k; scaled ones keep one shape (line: N(0, 1))"
                if "raw" in which
                else "Scaled scores keep one shape (line: N(0, 1))"
            )
        fig.suptitle(title, fontsize=FONT["title"])
    return fig


def saturation_vs_width(d_ks, scaled, unscaled, *, seq_k: int, panels=None):
    """Softmax entropy and largest weight against d_k, with and without 1/√d_k.

    Parameters
    ----------
    d_ks : sequence of int
    scaled, unscaled : RowStats with fields of shape (len(d_ks), n_rows)
        From :func:`attnlib.tasks.scaling.width_sweep`. Lines are means over the rows, bands
        the 10th–90th percentiles.
    seq_k : int
        Keys per row; ``log(seq_k)`` is the entropy of uniform weights.
    panels : "entropy", "max_weight" or both (default)
        Draw one panel only (e.g. one per slide).

    Returns
    -------
    Figure
    """
    d = np.asarray(d_ks, dtype=float)
    which = _panels("saturation_vs_width", panels, ("entropy", "max_weight"))
    with course_style():
        fig, axes = plt.subplots(
            1,
            len(which),
            figsize=(MAX_WIDTH, 3.6) if len(which) == 2 else (5.4, 3.6),
            layout="constrained",
            squeeze=False,
        )
        for ax, kind in zip(axes[0], which, strict=True):
            for stats, style, label in (
                (scaled, SCALED_STYLE, "q·k / √d_k"),
                (unscaled, UNSCALED_STYLE, "q·k"),
            ):
                _band(ax, d, getattr(stats, kind), style, label)
            if kind == "entropy":
                ax.axhline(math.log(seq_k), color="0.45", ls=":", lw=1.5)
                ax.text(
                    d[0],
                    math.log(seq_k) * 1.02,
                    f"uniform: log {seq_k}",
                    fontsize=FONT["note"],
                    va="bottom",
                )
                ax.set_ylim(0, math.log(seq_k) * 1.18)
                ax.set_ylabel("entropy of the weights (nats)")
                ax.set_title("Unscaled weights lose their spread")
            else:
                ax.axhline(1 / seq_k, color="0.45", ls=":", lw=1.5)
                ax.axhline(1.0, color="0.45", ls=":", lw=1.5)
                ax.set_ylim(0, 1.08)
                ax.set_ylabel("largest weight in the row")
                ax.set_title("...and approach one-hot")
            _log(ax, "x", base=2)
            ax.set_xlabel("d_k")
        axes[0, 0].legend(loc="lower left")
    return fig


def gradient_vs_width(d_ks, scaled, unscaled, *, field: str = "grad_scores", ax=None):
    """‖∂loss/∂scores‖ per row against d_k (log scale), median line and mean dotted.

    Parameters
    ----------
    scaled, unscaled : RowStats with fields of shape (len(d_ks), n_rows)
    field : {"grad_scores", "jacobian_norm", "grad_query"}
    """
    d = np.asarray(d_ks, dtype=float)
    ax = new_axes(ax, figsize=(5.6, 3.8))
    with course_style():
        for stats, style, label in (
            (scaled, SCALED_STYLE, "q·k / √d_k"),
            (unscaled, UNSCALED_STYLE, "q·k"),
        ):
            rows = as_numpy(getattr(stats, field))
            _band(ax, d, rows, style, f"{label}: median", center="median")
            ax.plot(
                d,
                rows.mean(axis=1),
                ls=":",
                marker=style["marker"],
                mfc="white",
                ms=5,
                color=style["color"],
                lw=1.5,
                label=f"{label}: mean",
            )
        _log(ax, "x", base=2)
        _log(ax, "y")
        ax.set_xlabel("d_k")
        ax.set_ylabel(
            {
                "grad_scores": "‖∂loss/∂scores‖ per row",
                "jacobian_norm": "‖diag(p) − ppᵀ‖ per row",
                "grad_query": "‖∂loss/∂q‖ per row",
            }.get(field, field)
        )
        ax.set_title("Gradient through the softmax")
        ax.set_ylim(bottom=max(ax.get_ylim()[0], 1e-10))
        ax.legend(loc="lower left")
    return ax


def entropy_gradient_vs_scale(scales, stats, *, mark: float, seq_k: int, ax=None):
    """Both failure modes on one plot: entropy (left axis) and gradient (right, log).

    Parameters
    ----------
    scales : array-like of shape (n_scales,)
        Multipliers of the raw dot products.
    stats : RowStats with fields of shape (n_scales, n_rows)
        From :func:`attnlib.tasks.scaling.temperature_sweep`.
    mark : float
        The scale to mark (1/√d_k).
    seq_k : int
        Keys per row (uniform entropy line).

    Returns
    -------
    Axes (the entropy axis; the gradient axis is ``ax.right``)
    """
    c = as_numpy(scales)
    ax = new_axes(ax, figsize=(6.8, 4.0))
    with course_style():
        every = mark_every(len(c))
        _band(ax, c, stats.entropy, dict(SCALED_STYLE, markevery=every), "entropy (mean)")
        ax.axhline(math.log(seq_k), color=SCALED, ls=":", lw=1.2)
        ax.set_ylim(0, math.log(seq_k) * 1.1)
        _log(ax, "x")
        ax.set_xlabel("scale multiplying q·k")
        ax.set_ylabel("entropy of the weights (nats)", color=SCALED)
        right = ax.twinx()
        right.spines["right"].set_visible(True)
        mid = _band(
            right,
            c,
            stats.grad_query,
            dict(UNSCALED_STYLE, markevery=every),
            "‖∂loss/∂q‖ (median)",
            center="median",
            lo=25,
            hi=75,
        )
        _log(right, "y")
        top = float(mid.max())
        right.set_ylim(max(float(mid.min()) / 10, top * 1e-12), top * 30)
        right.set_ylabel("gradient reaching the query", color=UNSCALED)
        ax.axvline(mark, color="0.2", lw=1.2)
        ax.text(mark * 1.1, 0.25, "1/√d_k", fontsize=FONT["legend"])
        ax.text(c[0], 0.08, "near uniform:\ncannot select", fontsize=FONT["note"], va="bottom")
        ax.text(
            c[-1],
            math.log(seq_k) * 0.55,
            "near one-hot:\nbrittle",
            fontsize=FONT["note"],
            ha="right",
        )
        lines = ax.get_legend_handles_labels()
        more = right.get_legend_handles_labels()
        ax.legend(
            lines[0] + more[0],
            lines[1] + more[1],
            loc="lower left",
            bbox_to_anchor=(0.0, 0.16),
        )
        ax.set_title("Too small a scale cannot select; too large cannot learn")
        ax.right = right
    return ax


TRAINING_PANELS = ("loss", "grad/W_q", "grad/W_k")


def training_curves(
    histories: Mapping[str, object], *, colors: Sequence[str] | None = None, panels=None
):
    """Loss and the gradient norms of W_q and W_k per step, one line per run.

    Parameters
    ----------
    histories : mapping label -> History
        Each with ``loss``, ``grad/W_q`` and ``grad/W_k`` (see
        :func:`attnlib.tasks.scaling.train_retrieval`).
    colors : sequence of str, optional
        One colour per run (default: the palette). Runs also differ in marker and line
        style, whatever the colours.
    panels : a selection of ("loss", "grad/W_q", "grad/W_k"), optional
        The panels to draw, e.g. ``panels="loss"`` and then
        ``panels=("grad/W_q", "grad/W_k")`` to split the figure in two.

    Returns
    -------
    Figure
        At most 8 in wide. Faint lines are the per-step values, bold lines with markers
        their 10-step moving average.
    """
    keys = _panels("training_curves", panels, TRAINING_PANELS)
    with course_style():
        width = {1: 5.4, 2: MAX_WIDTH, 3: MAX_WIDTH}[len(keys)]
        fig, axes = plt.subplots(
            1, len(keys), figsize=(width, 3.5), layout="constrained", squeeze=False
        )
        axes = axes[0]
        lowest = dict.fromkeys(keys, np.inf)
        for i, (label, h) in enumerate(histories.items()):
            style = series_style(i)
            if colors is not None:
                style["color"] = colors[i % len(colors)]
            for ax, key in zip(axes, keys, strict=True):
                y = h[key]
                ax.plot(np.arange(len(y)), y, color=style["color"], lw=0.8, alpha=0.3)
                k = min(10, len(y))
                smooth = np.convolve(y, np.ones(k) / k, mode="valid")
                x = np.arange(k - 1, len(y))
                ax.plot(
                    x,
                    smooth,
                    lw=2.0,
                    markevery=mark_every(len(x), 6),
                    label=f"scale {label}",
                    **style,
                )
                lowest[key] = min(lowest[key], float(smooth.min()))
        titles = {"loss": "loss", "grad/W_q": "‖∂loss/∂W_q‖", "grad/W_k": "‖∂loss/∂W_k‖"}
        for ax, key in zip(axes, keys, strict=True):
            _log(ax, "y")
            # a single step can reach ~0 (a confident right answer): show the smoothed range
            ax.set_ylim(bottom=lowest[key] / 10)
            ax.set_xlabel("step")
            ax.set_title(titles[key])
        axes[0].legend()
    return fig


def _weights_panel(ax, state, *, color=SCALED, tag: str | None = None, show_d_k: bool = True):
    w = as_numpy(state.weights)
    ax.bar(range(len(w)), w, color=color)
    ax.axhline(1 / len(w), color="0.45", ls=":", lw=1.5)
    ax.set_ylim(0, 1.0)
    ax.set_xlabel("key position")
    ax.set_ylabel("weight")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    parts = [tag] if tag else []
    if show_d_k:
        parts.append(f"d_k {state.d_k},")
    parts.append(f"scale {state.scale:.3g}")
    ax.set_title(" ".join(parts))
    ax.text(
        0.97,
        0.97,
        f"entropy {state.entropy:.2f}\nmax weight {state.max_weight:.2f}",
        transform=ax.transAxes,
        ha="right",
        va="top",
        fontsize=FONT["note"],
        bbox={
            "facecolor": "white",
            "alpha": 0.85,
            "edgecolor": "0.7",
            "boxstyle": "round,pad=0.25",
        },
    )


def _curve_panel(ax, states, tags=None):
    seq_k = len(states[0].weights)
    seen = set()
    for i, st in enumerate(states):
        if st.d_k not in seen:
            seen.add(st.d_k)
            ax.plot(st.curve_scales, st.curve_entropy, color="0.35", lw=1.5)
            ax.axvline(1 / math.sqrt(st.d_k), color="0.2", lw=1, ls=":")
        ax.plot(
            [st.scale],
            [st.curve_at_scale],
            MARKERS[i % len(MARKERS)],
            color=PALETTE[i % len(PALETTE)],
            ms=9,
            mec="black",
        )
        if tags:
            ax.annotate(
                tags[i],
                (st.scale, st.curve_at_scale),
                textcoords="offset points",
                xytext=(6, 6),
                fontsize=FONT["note"] + 1,
                fontweight="bold",
            )
    ax.axhline(math.log(seq_k), color="0.45", ls="--", lw=1.2)
    _log(ax, "x")
    ax.set_ylim(0, math.log(seq_k) * 1.15)
    ax.set_xlabel("scale")
    ax.set_ylabel("mean entropy (nats)")
    ax.set_title("mean entropy\n(dotted: 1/√d_k)")


def explorer_view(state, axes=None):
    """What the interactive explorer shows for one setting: two panels.

    Left: one query's weights over its keys (bars), with the uniform level. Right: mean
    entropy against the scale at this d_k, the current scale (dot) and 1/√d_k (line).

    Parameters
    ----------
    state : ExplorerState
        From :func:`attnlib.explorers.scale.explorer_state`.
    axes : pair of Axes, optional
    """
    if axes is None:
        with course_style():
            _, axes = plt.subplots(1, 2, figsize=(MAX_WIDTH, 3.4), layout="constrained")
    with course_style():
        _weights_panel(axes[0], state)
        _curve_panel(axes[1], [state])
    return axes


def explorer_grid(states, *, ncols: int | None = None):
    """Static stand-in for the explorer: the weights at each setting, and one entropy curve.

    Parameters
    ----------
    states : sequence of ExplorerState
        One weights panel each, tagged (1), (2), ...; the last panel draws each d_k's
        entropy curve once and marks every setting on it with the same tag, colour and
        marker.
    ncols : int, optional
        Panels per row (default: all in one row). The figure is at most 8 in wide.

    Returns
    -------
    Figure
    """
    n = len(states)
    if n == 0:
        raise ValueError("explorer_grid: states is empty")
    ncols = ncols or n + 1
    nrows = -(-(n + 1) // ncols)
    tags = [f"({i + 1})" for i in range(n)]
    with course_style():
        fig, axes = plt.subplots(
            nrows,
            ncols,
            figsize=fit_width(2.3 * ncols, 3.1 * nrows),
            layout="constrained",
            squeeze=False,
        )
        flat = list(axes.flat)
        one_d_k = len({st.d_k for st in states}) == 1
        for i, (ax, state) in enumerate(zip(flat[:n], states, strict=True)):
            color = PALETTE[i % len(PALETTE)]
            _weights_panel(ax, state, color=color, tag=tags[i], show_d_k=not one_d_k)
            if i % ncols:
                ax.set_ylabel("")
        if one_d_k:
            fig.suptitle(f"d_k = {states[0].d_k}: one query's weights at each scale")
        _curve_panel(flat[n], states, tags)
        for ax in flat[n + 1 :]:
            ax.axis("off")
    return fig
