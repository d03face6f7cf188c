"""Figures of lesson 04: why the scores are divided by √d_k.

Every function takes its measurements as arrays (see :mod:`attnlib.tasks.scaling`), draws in
the course style, and returns the Axes or Figure; none calls ``plt.show()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullLocator

from attnlib.plot._base import PALETTE, as_numpy, course_style, new_axes

SCALED, UNSCALED, THIRD = PALETTE[0], PALETTE[1], PALETTE[3]


def _band(ax, x, rows, color, label, *, lo=10, hi=90, center="mean", ls="-"):
    """A line (mean or median over rows) with a percentile band. rows: (len(x), n_rows)."""
    rows = as_numpy(rows)
    mid = rows.mean(axis=1) if center == "mean" else np.median(rows, axis=1)
    ax.fill_between(
        x,
        np.percentile(rows, lo, axis=1),
        np.percentile(rows, hi, axis=1),
        color=color,
        alpha=0.18,
        lw=0,
    )
    ax.plot(x, mid, "o-" if ls == "-" else ls, color=color, label=label, ms=3.5)
    return mid


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
    ax = new_axes(ax, figsize=(5.0, 3.8))
    with course_style():
        grid = np.geomspace(d.min() / 1.5, d.max() * 1.5, 50)
        ax.plot(grid, grid, color="0.55", lw=1, ls="--", label="predicted: d_k")
        err = None if tolerance is None else as_numpy(tolerance) * d
        ax.errorbar(d, m, yerr=err, fmt="o", color=UNSCALED, ms=5, capsize=3, label="measured: q·k")
        if scaled is not None:
            ax.plot(grid, np.ones_like(grid), color="0.55", lw=1, ls=":", label="predicted: 1")
            s_err = None if tolerance is None else as_numpy(tolerance)
            ax.errorbar(
                d,
                as_numpy(scaled),
                yerr=s_err,
                fmt="s",
                color=SCALED,
                ms=5,
                capsize=3,
                label="measured: q·k / √d_k",
            )
        _log(ax, "x", base=2)
        _log(ax, "y", base=2)
        ax.set_xlabel("d_k")
        ax.set_ylabel("variance of the score")
        ax.set_title("Var(q·k) grows like d_k; scaled, it stays 1")
        ax.legend(loc="upper left", fontsize=8)
    return ax


def score_histograms(samples: Mapping[int, np.ndarray], *, bins: int = 60):
    """Small multiples: raw scores (top row) and scaled scores (bottom row) per d_k.

    Parameters
    ----------
    samples : mapping d_k -> array of shape (n,)
        Raw dot products q·k at each width. The bottom row divides them by √d_k and
        overlays the standard normal density.

    Returns
    -------
    Figure
    """
    d_ks = list(samples)
    if not d_ks:
        raise ValueError("score_histograms: samples is empty")
    raw_lim = max(float(np.percentile(np.abs(as_numpy(samples[d])), 99.9)) for d in d_ks)
    with course_style():
        fig, axes = plt.subplots(
            2,
            len(d_ks),
            figsize=(2.1 * len(d_ks) + 0.6, 4.6),
            layout="constrained",
            sharey="row",
            squeeze=False,
        )
        z = np.linspace(-4.5, 4.5, 200)
        normal = np.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
        for j, d_k in enumerate(d_ks):
            x = as_numpy(samples[d_k])
            top, bottom = axes[0, j], axes[1, j]
            counts, edges = np.histogram(x, bins=np.linspace(-raw_lim, raw_lim, bins), density=True)
            top.stairs(counts, edges, fill=True, color=UNSCALED, alpha=0.8)  # one artist, fast
            top.set_title(f"d_k = {d_k}")
            top.set_xlim(-raw_lim, raw_lim)
            counts, edges = np.histogram(
                x / math.sqrt(d_k), bins=np.linspace(-4.5, 4.5, bins), density=True
            )
            bottom.stairs(counts, edges, fill=True, color=SCALED, alpha=0.8)
            bottom.plot(z, normal, color="0.2", lw=1)
            bottom.set_xlim(-4.5, 4.5)
            top.set_yticks([])
            bottom.set_yticks([])
            bottom.set_xlabel("score")
        axes[0, 0].set_ylabel("raw q·k\n(density)")
        axes[1, 0].set_ylabel("q·k / √d_k\n(density)")
        fig.suptitle("Raw scores spread out with d_k; scaled scores keep one shape (line: N(0, 1))")
    return fig


def saturation_vs_width(d_ks, scaled, unscaled, *, seq_k: int):
    """Softmax entropy and largest weight against d_k, with and without 1/√d_k.

    Parameters
    ----------
    d_ks : sequence of int
    scaled, unscaled : RowStats with fields of shape (len(d_ks), n_rows)
        From :func:`attnlib.tasks.scaling.width_sweep`. Lines are means over the rows, bands
        the 10th–90th percentiles.
    seq_k : int
        Keys per row; ``log(seq_k)`` is the entropy of uniform weights.

    Returns
    -------
    Figure
    """
    d = np.asarray(d_ks, dtype=float)
    with course_style():
        fig, (a, b) = plt.subplots(1, 2, figsize=(9.0, 3.6), layout="constrained")
        for stats, color, label in ((scaled, SCALED, "q·k / √d_k"), (unscaled, UNSCALED, "q·k")):
            _band(a, d, stats.entropy, color, label)
            _band(b, d, stats.max_weight, color, label)
        a.axhline(math.log(seq_k), color="0.5", ls="--", lw=1)
        a.text(d[0], math.log(seq_k) * 1.02, f"uniform: log {seq_k}", fontsize=8, va="bottom")
        a.set_ylim(0, math.log(seq_k) * 1.15)
        a.set_ylabel("entropy of the weights (nats)")
        a.set_title("Unscaled weights lose their spread")
        b.axhline(1 / seq_k, color="0.5", ls="--", lw=1)
        b.axhline(1.0, color="0.5", ls=":", lw=1)
        b.set_ylim(0, 1.05)
        b.set_ylabel("largest weight in the row")
        b.set_title("...and approach one-hot")
        for ax in (a, b):
            _log(ax, "x", base=2)
            ax.set_xlabel("d_k")
        a.legend(loc="lower left", fontsize=8)
    return fig


def gradient_vs_width(d_ks, scaled, unscaled, *, field: str = "grad_scores", ax=None):
    """‖∂loss/∂scores‖ per row against d_k (log scale), median line and mean dashed.

    Parameters
    ----------
    scaled, unscaled : RowStats with fields of shape (len(d_ks), n_rows)
    field : {"grad_scores", "jacobian_norm", "grad_query"}
    """
    d = np.asarray(d_ks, dtype=float)
    ax = new_axes(ax, figsize=(5.2, 3.8))
    with course_style():
        for stats, color, label in ((scaled, SCALED, "q·k / √d_k"), (unscaled, UNSCALED, "q·k")):
            rows = as_numpy(getattr(stats, field))
            _band(ax, d, rows, color, f"{label}: median", center="median")
            ax.plot(d, rows.mean(axis=1), ls="--", color=color, lw=1, label=f"{label}: mean")
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
        ax.legend(loc="lower left", fontsize=8)
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
    ax = new_axes(ax, figsize=(6.4, 3.9))
    with course_style():
        _band(ax, c, stats.entropy, SCALED, "entropy (mean)")
        ax.axhline(math.log(seq_k), color=SCALED, ls="--", lw=0.8)
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
            UNSCALED,
            "‖∂loss/∂q‖ (median)",
            center="median",
            lo=25,
            hi=75,
        )
        _log(right, "y")
        top = float(mid.max())
        right.set_ylim(max(float(mid.min()) / 10, top * 1e-12), top * 30)
        right.set_ylabel("gradient reaching the query", color=UNSCALED)
        ax.axvline(mark, color="0.2", lw=1)
        ax.text(mark * 1.1, 0.25, "1/√d_k", fontsize=9)
        ax.text(c[0], 0.08, "near uniform:\ncannot select", fontsize=8, va="bottom")
        ax.text(c[-1], math.log(seq_k) * 0.55, "near one-hot:\nbrittle", fontsize=8, ha="right")
        lines = ax.get_legend_handles_labels()
        more = right.get_legend_handles_labels()
        ax.legend(
            lines[0] + more[0],
            lines[1] + more[1],
            loc="lower left",
            fontsize=8,
            bbox_to_anchor=(0.0, 0.14),
        )
        ax.set_title("Too small a scale cannot select; too large cannot learn")
        ax.right = right
    return ax


def training_curves(histories: Mapping[str, object], *, colors: Sequence[str] | None = None):
    """Loss and the gradient norms of W_q and W_k per step, one line per run.

    Parameters
    ----------
    histories : mapping label -> History
        Each with ``loss``, ``grad/W_q`` and ``grad/W_k`` (see
        :func:`attnlib.tasks.scaling.train_retrieval`).

    Returns
    -------
    Figure
    """
    colors = colors or (SCALED, UNSCALED, THIRD, PALETTE[5])
    with course_style():
        fig, axes = plt.subplots(1, 3, figsize=(11.0, 3.5), layout="constrained")
        keys = ("loss", "grad/W_q", "grad/W_k")
        lowest = dict.fromkeys(keys, np.inf)
        for (label, h), color in zip(histories.items(), colors, strict=False):
            for ax, key in zip(axes, keys, strict=True):
                y = h[key]
                ax.plot(np.arange(len(y)), y, color=color, lw=0.8, alpha=0.35)
                k = min(10, len(y))
                smooth = np.convolve(y, np.ones(k) / k, mode="valid")
                ax.plot(
                    np.arange(k - 1, len(y)), smooth, color=color, lw=1.6, label=f"scale {label}"
                )
                lowest[key] = min(lowest[key], float(smooth.min()))
        titles = ("loss", "‖∂loss/∂W_q‖", "‖∂loss/∂W_k‖")
        for ax, key, title in zip(axes, keys, titles, strict=True):
            _log(ax, "y")
            # a single step can reach ~0 (a confident right answer): show the smoothed range
            ax.set_ylim(bottom=lowest[key] / 10)
            ax.set_xlabel("step")
            ax.set_title(title)
        axes[0].legend(fontsize=8)
    return fig


def _weights_panel(ax, state):
    w = as_numpy(state.weights)
    ax.bar(range(len(w)), w, color=SCALED)
    ax.axhline(1 / len(w), color="0.5", ls="--", lw=1)
    ax.set_ylim(0, 1.0)
    ax.set_xlabel("key position")
    ax.set_ylabel("weight")
    ax.set_title(
        f"d_k={state.d_k}, scale={state.scale:.3g}\nentropy {state.entropy:.2f} nats, "
        f"max weight {state.max_weight:.2f}",
        fontsize=9,
    )


def _curve_panel(ax, states):
    seq_k = len(states[0].weights)
    seen = set()
    for i, st in enumerate(states):
        color = PALETTE[i % len(PALETTE)]
        if st.d_k not in seen:
            seen.add(st.d_k)
            ax.plot(st.curve_scales, st.curve_entropy, color="0.35", lw=1.2)
            ax.axvline(1 / math.sqrt(st.d_k), color="0.2", lw=1, ls=":")
        ax.plot([st.scale], [st.curve_at_scale], "o", color=color, ms=7)
    ax.axhline(math.log(seq_k), color="0.5", ls="--", lw=1)
    _log(ax, "x")
    ax.set_ylim(0, math.log(seq_k) * 1.1)
    ax.set_xlabel("scale")
    ax.set_ylabel("mean entropy (nats)")
    ax.set_title("mean entropy vs scale\n(dotted: 1/√d_k; dots: the settings)", fontsize=9)


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
            _, axes = plt.subplots(1, 2, figsize=(9.0, 3.2), layout="constrained")
    with course_style():
        _weights_panel(axes[0], state)
        _curve_panel(axes[1], [state])
    return axes


def explorer_grid(states):
    """Static stand-in for the explorer: the weights at each setting, and one entropy curve.

    Parameters
    ----------
    states : sequence of ExplorerState
        One weights panel each; the last panel draws each d_k's entropy curve once and
        marks every setting on it (dots in the order of the panels' colours).

    Returns
    -------
    Figure
    """
    n = len(states)
    if n == 0:
        raise ValueError("explorer_grid: states is empty")
    with course_style():
        fig, axes = plt.subplots(1, n + 1, figsize=(2.9 * (n + 1), 3.0), layout="constrained")
        for i, (ax, state) in enumerate(zip(axes[:-1], states, strict=True)):
            _weights_panel(ax, state)
            for bar in ax.patches:
                bar.set_color(PALETTE[i % len(PALETTE)])
        _curve_panel(axes[-1], states)
    return fig
