"""Figures of lesson 13: keys built from another head's output (induction heads).

* :func:`phase_change` — per-step training losses on the two halves, the phase change marked;
* :func:`head_patterns` — two attention maps side by side, the cells a score averages ringed;
* :func:`ablation_bars` — accuracy after removing a head's output from q, k or v;
* :func:`composition_maps` — Q-, K- and V-composition scores of every pair of heads;
* :func:`induction_view` — the explorer's two panels (a query's weights; where the matched
  key's score comes from).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from attnlib.plot._base import (
    FONT,
    HATCHES,
    LINESTYLES,
    PALETTE,
    WEIGHTS_CMAP,
    as_numpy,
    course_style,
    fit_width,
    heatmap,
    masked_patch,
    new_axes,
)
from attnlib.tasks.induction import running_mean

__all__ = ["phase_change", "head_patterns", "ablation_bars", "composition_maps", "induction_view"]


def phase_change(
    steps,
    curves: Mapping[str, Sequence[float]],
    *,
    chance: float,
    phase_step: int | None = None,
    window: int = 50,
    ax=None,
    title: str | None = None,
):
    """Training losses per step, raw (faint) and as a running mean, one style per curve.

    Parameters
    ----------
    steps : array-like of shape (n_steps,)
    curves : mapping of label -> array-like of shape (n_steps,)
        E.g. {"repeated half": ..., "first half": ..., "control, repeated half": ...}.
        Each curve gets its own colour, line style and a direct label at its right end.
    chance : float
        Drawn as a grey horizontal line (the loss of a uniform guess); labelled
        "log n" when it is the log of a whole number n of choices.
    phase_step : int, optional
        A vertical line marks it (the phase change).
    window : int
        Steps in the running mean.

    Returns
    -------
    Axes — its lines are, in order, for each curve the raw and the smoothed values, then
    the chance line (and the phase-change line).
    """
    x = as_numpy(steps).astype(float)
    ax = new_axes(ax, figsize=(7.6, 3.9))
    with course_style():
        ends = []
        for i, (label, y) in enumerate(curves.items()):
            y = as_numpy(y).astype(float)
            if y.shape != x.shape:
                raise ValueError(f"phase_change: curve {label!r} has {y.shape}, steps {x.shape}")
            c = PALETTE[i % len(PALETTE)]
            ax.plot(x, y, color=c, lw=0.6, alpha=0.25, ls="-")
            smooth = running_mean(y, window)
            ax.plot(x, smooth, color=c, lw=2.2, ls=LINESTYLES[i % len(LINESTYLES)], label=label)
            ends.append((float(smooth[-1]), label, c))
        ax.hlines(chance, x[0], x[-1], color="0.45", lw=1.2, ls=(0, (2, 2)))
        if phase_step is not None and phase_step >= 0:
            ax.axvline(phase_step, color="0.2", lw=1.2, ls=":")
            ax.annotate(
                f"phase change\n(step {phase_step})",
                (phase_step, 0.5 * chance),
                xytext=(6, 0),
                textcoords="offset points",
                fontsize=FONT["note"],
                va="center",
            )
        ax.set_xlim(x[0], x[-1] * 1.36)  # room for the direct labels
        top = max(ax.get_ylim()[1], chance * 1.15)
        ax.set_ylim(0, top)
        n_choices = round(math.exp(chance))  # a uniform guess over n choices costs log n
        exact = abs(math.exp(chance) - n_choices) <= 1e-6 * n_choices
        ax.annotate(
            f"chance: log {n_choices} = {chance:.2f}" if exact else f"chance: {chance:.2f}",
            (x[0] + 0.62 * (x[-1] - x[0]), chance),
            xytext=(0, -5),
            textcoords="offset points",
            va="top",
            ha="center",
            color="0.3",
            fontsize=FONT["note"],
        )
        # direct labels at the right ends, pushed apart so that none overlaps another
        gap = 0.075 * top
        placed: list[float] = []
        for y_end, label, c in sorted(ends):
            y_text = max([y_end] + [p + gap for p in placed])
            placed.append(y_text)
            ax.annotate(
                label,
                (x[-1], y_end),
                xytext=(x[-1] + 0.02 * (x[-1] - x[0]), y_text),
                textcoords="data",
                color=c,
                va="center",
                fontsize=FONT["legend"],
            )
        ax.set_xticks([t for t in ax.get_xticks() if x[0] <= t <= x[-1]])
        ax.set_xlabel("training step")
        ax.set_ylabel("loss (nats)")
        if title:
            ax.set_title(title)
    return ax


def head_patterns(
    maps,
    *,
    titles: Sequence[str],
    marks: Sequence[Sequence[tuple[int, int]]],
    labels: Sequence[str] | None = None,
    mark_label: Sequence[str] = (),
):
    """Attention maps side by side (causal: the hidden upper triangle hatched grey).

    Parameters
    ----------
    maps : array-like of shape (n_maps, seq, seq)
        Weights of a causal self-attention head; rows are queries, columns keys.
    titles : sequence of str, one per map
    marks : per map, a sequence of (query, key) cells to ring (the cells a score
        averages), drawn as open circles so they show without colour.
    labels : sequence of str of length seq, optional — tick labels (the tokens).
    mark_label : sequence of str — legend text of each map's rings.

    Returns
    -------
    Figure — one Axes per map, then the shared colourbar.
    """
    w = as_numpy(maps)
    if w.ndim != 3 or w.shape[1] != w.shape[2]:
        raise ValueError(f"head_patterns: maps must have shape (n_maps, seq, seq), got {w.shape}")
    n, seq = w.shape[0], w.shape[1]
    if len(titles) != n or len(marks) != n:
        raise ValueError(f"head_patterns: {n} maps need {n} titles and {n} lists of marks")
    causal = np.tril(np.ones((seq, seq), dtype=bool))
    with course_style():
        fig, axes = plt.subplots(1, n, figsize=fit_width(3.9 * n + 0.4, 4.4), layout="constrained")
        axes = np.atleast_1d(axes)
        for i, ax in enumerate(axes):
            heatmap(
                w[i],
                ax=ax,
                queries=labels,
                keys=labels,
                annotate=False,
                colorbar=False,
                mask=causal,
                mask_legend=False,
            )
            ring = f"\n\u25cb = {mark_label[i]}" if i < len(mark_label) else ""
            ax.set_title(titles[i] + ring, fontsize=FONT["legend"] + 1)
            ax.tick_params(axis="x", labelrotation=90, labelsize=FONT["note"])
            ax.tick_params(axis="y", labelsize=FONT["note"])
            cells = np.asarray(marks[i], dtype=float).reshape(-1, 2)
            ax.scatter(
                cells[:, 1],
                cells[:, 0],
                s=70,
                facecolors="none",
                edgecolors=PALETTE[1],
                linewidths=1.6,
                marker="o",
            )
        im = axes[0].images[0]
        fig.colorbar(im, ax=list(axes), shrink=0.8, label="weight")
        fig.legend(
            handles=[masked_patch("masked (future keys)")],
            loc="outside lower center",
            fontsize=FONT["note"],
        )
    return fig


def ablation_bars(
    results: Mapping[str, float],
    *,
    chance: float | None = None,
    ax=None,
    title: str | None = None,
    xlabel: str = "induction accuracy",
):
    """Horizontal bars, one per intervention, each labelled with its value.

    Parameters
    ----------
    results : mapping of label -> value (e.g. "keys only" -> 0.04), drawn top to bottom.
    chance : float, optional — a dotted line (e.g. 1/50 for a random guess).

    Returns
    -------
    Axes — its bars are ``ax.patches`` in the order of ``results``.
    """
    labels, vals = list(results), np.array([float(v) for v in results.values()])
    ax = new_axes(ax, figsize=(7.0, 0.55 * len(vals) + 1.3))
    with course_style():
        y = np.arange(len(vals))[::-1]
        for i, (yy, v) in enumerate(zip(y, vals, strict=True)):
            ax.barh(
                yy,
                v,
                color=PALETTE[i % len(PALETTE)],
                hatch=HATCHES[i % len(HATCHES)],
                edgecolor="white" if not HATCHES[i % len(HATCHES)] else "0.15",
                height=0.7,
            )
            ax.text(v + 0.01, yy, f"{v:.2f}", va="center", fontsize=FONT["legend"])
        ax.set_yticks(y, labels=labels)
        ax.set_xlim(0, 1.12)
        if chance is not None:
            ax.axvline(chance, color="0.3", ls=":", lw=1.2)
            ax.annotate(
                "chance",
                (chance, y[0] + 0.45),
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=FONT["note"],
                color="0.3",
            )
        ax.set_xlabel(xlabel)
        if title:
            ax.set_title(title)
    return ax


def composition_maps(
    scores: Mapping[str, np.ndarray],
    *,
    baseline: float | None = None,
    rows: Sequence[str] | None = None,
    cols: Sequence[str] | None = None,
):
    """Q-, K- and V-composition as three small heat maps on one colour scale.

    Parameters
    ----------
    scores : mapping with keys "q", "k", "v" of array-like (n_heads_0, n_heads_1)
    baseline : float, optional — the score of unrelated heads, marked on the colourbar.
    rows, cols : tick labels (layer-0 heads, layer-1 heads).

    Returns
    -------
    Figure — three Axes (Q, K, V), then the colourbar; each map's numbers are written in
    its cells.
    """
    mats = {s: as_numpy(scores[s]).astype(float) for s in ("q", "k", "v")}
    shape = mats["k"].shape
    if any(m.shape != shape or m.ndim != 2 for m in mats.values()):
        raise ValueError(
            f"composition_maps: q, k, v need one shape, got {[m.shape for m in mats.values()]}"
        )
    rows = rows or [f"0.{i}" for i in range(shape[0])]
    cols = cols or [f"1.{j}" for j in range(shape[1])]
    vmax = max(float(m.max()) for m in mats.values()) * 1.05
    names = {"q": "Q-composition", "k": "K-composition", "v": "V-composition"}
    with course_style():
        fig, axes = plt.subplots(
            1, 3, figsize=fit_width(7.8, 3.2), layout="constrained", sharey=True
        )
        for ax, side in zip(axes, ("q", "k", "v"), strict=True):
            m = mats[side]
            im = ax.imshow(m, cmap=WEIGHTS_CMAP, vmin=0.0, vmax=vmax, aspect="equal")
            for i in range(shape[0]):
                for j in range(shape[1]):
                    ax.text(
                        j,
                        i,
                        f"{m[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=FONT["legend"],
                        color="white" if m[i, j] / vmax > 0.6 else "black",
                    )
            ax.set_xticks(range(shape[1]), labels=cols)
            ax.set_yticks(range(shape[0]), labels=rows)
            ax.set_xlabel("layer-1 head")
            ax.set_title(names[side])
        axes[0].set_ylabel("layer-0 head")
        bar = fig.colorbar(im, ax=list(axes), shrink=0.85)
        bar.ax.set_title("score", fontsize=FONT["tick"])
        if baseline is not None:
            bar.ax.axhline(baseline, color=PALETTE[1], lw=2.0, ls="--")
            bar.ax.text(
                1.05,
                baseline,
                " random\n heads",
                transform=bar.ax.get_yaxis_transform(),
                va="center",
                fontsize=FONT["note"],
                color=PALETTE[1],
            )
    return fig


def induction_view(state, axes=None):
    """The induction explorer's figure: a query's layer-1 weights, and where the score of
    the key it matches comes from.

    ``state`` is an :class:`attnlib.explorers.induction.InductionState`. Left: the weights
    of the query over the keys (the matched key hatched and labelled). Right: the score the
    query gives the matched key, split into the parts of that key computed from the
    embedding and from each layer-0 head's output, beside the same parts averaged over the
    other keys.
    """
    if axes is None:
        with course_style():
            _, axes = plt.subplots(
                1, 2, figsize=(7.8, 3.3), layout="constrained", width_ratios=(1.9, 1.0)
            )
    ax_w, ax_s = axes
    with course_style():
        w = as_numpy(state.weights)
        n = len(w)
        colors = [PALETTE[1] if j == state.matched else PALETTE[0] for j in range(n)]
        hatches = ["//" if j == state.matched else "" for j in range(n)]
        for j in range(n):
            ax_w.bar(j, w[j], color=colors[j], hatch=hatches[j], edgecolor="0.15", lw=0.6)
        ax_w.set_xticks(range(n), labels=state.labels[:n], rotation=90, fontsize=FONT["note"])
        ax_w.set_ylim(0, 1.08)
        ax_w.set_ylabel("weight")
        ax_w.set_xlabel("key (token)")
        ax_w.set_title(
            f"query at {state.position} ({state.labels[state.position]}), head 1.{state.head}",
            fontsize=FONT["legend"] + 1,
        )
        ax_w.annotate(
            f"{w[state.matched]:.2f}",
            (state.matched, w[state.matched]),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            fontsize=FONT["note"],
        )
        parts, others = as_numpy(state.parts), as_numpy(state.others)
        names = list(state.part_names)
        y = np.arange(len(parts))[::-1].astype(float)
        for k, (vals, what) in enumerate(
            ((parts, f"key {state.matched}"), (others, "other keys (mean)"))
        ):
            ax_s.barh(
                y + (0.2 if k == 0 else -0.2),
                vals,
                height=0.38,
                label=what,
                color=PALETTE[1] if k == 0 else PALETTE[0],
                hatch="//" if k == 0 else "",
                edgecolor="0.15",
                lw=0.6,
            )
        ax_s.axvline(0, color="0.3", lw=0.8)
        ax_s.set_yticks(y, labels=names, fontsize=FONT["note"])
        ax_s.set_xlabel("part of the score")
        ax_s.set_title(f"score {parts.sum():.1f}, split", fontsize=FONT["legend"] + 1)
        ax_s.legend(loc="upper center", bbox_to_anchor=(0.5, -0.24), fontsize=FONT["note"], ncol=1)
    return axes
