"""The shared look of every figure, and the figures of the first lessons.

Every function takes an optional ``ax``, draws on it (or on a new figure), and returns the
Axes (or Figure for multi-panel plots). None of them calls ``plt.show()`` and none of them
changes global matplotlib state: the course style is applied with a context manager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

# One palette and one colour map for the whole course.
PALETTE = ("#1f5aa6", "#d1495b", "#edae49", "#00798c", "#66a182", "#8d6a9f", "#30343f")
WEIGHTS_CMAP = "Blues"  # post-softmax weights, 0..1
SCORES_CMAP = "RdBu_r"  # pre-softmax scores, centred at 0

STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "axes.prop_cycle": mpl.cycler(color=list(PALETTE)),
    "legend.frameon": False,
}


@contextlib.contextmanager
def course_style():
    """Apply the course look inside a ``with`` block; global settings are left untouched."""
    with mpl.rc_context(STYLE):
        yield


def new_axes(ax=None, figsize=(4.5, 3.5)):
    """Return ``ax`` or a fresh Axes of the course's default size."""
    if ax is not None:
        return ax
    with course_style():
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


# Above this many positions an axis gets automatic integer ticks instead of one per position,
# and figure sizes stop growing (a 512 x 512 map must not become a 280-inch figure).
MAX_TICKS = 24
MAX_FIGSIZE = (9.0, 7.0)


def _fit(width: float, height: float) -> tuple[float, float]:
    return min(width, MAX_FIGSIZE[0]), min(height, MAX_FIGSIZE[1])


def _position_ticks(axis, n: int, labels) -> None:
    """One tick per position (with labels if given); automatic integer ticks for long axes."""
    if labels is not None or n <= MAX_TICKS:
        axis.set_ticks(range(n), labels=labels if labels is not None else range(n))
    else:
        axis.set_major_locator(MaxNLocator(nbins=8, integer=True))


def as_numpy(x) -> np.ndarray:
    """What a figure plots: a numpy array (a tensor is detached, moved to the CPU, float32)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().float().numpy()
    return np.asarray(x)


def heatmap(
    matrix,
    *,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    kind: str = "weights",
    annotate: bool | None = None,
    colorbar: bool = True,
    fmt: str = "{:.2f}",
):
    """Draw an attention matrix: rows are query positions, columns are key positions.

    Parameters
    ----------
    matrix : array-like of shape (seq_q, seq_k)
        Weights (post-softmax, 0..1) or scores (pre-softmax).
    queries, keys : sequence of str, optional
        Tick labels (e.g. the tokens). Default: positions 0, 1, ...
    kind : {"weights", "scores"}
        Colour scale: 0..1 in blue for weights; red-blue centred at 0 for scores.
    annotate : bool, optional
        Write each value in its cell; default True when the matrix is at most 10 x 10.
    """
    m = as_numpy(matrix)
    if m.ndim != 2:
        raise ValueError(f"heatmap: matrix must be 2-D (seq_q, seq_k), got shape {m.shape}")
    if kind not in ("weights", "scores"):
        raise ValueError(f"heatmap: kind must be 'weights' or 'scores', got {kind!r}")
    seq_q, seq_k = m.shape
    for name, labels, n in (("queries", queries, seq_q), ("keys", keys, seq_k)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"heatmap: {len(labels)} {name} labels for {n} positions")
    ax = new_axes(ax, figsize=_fit(0.55 * seq_k + 2.2, 0.45 * seq_q + 1.6))
    with course_style():
        if kind == "weights":
            im = ax.imshow(m, cmap=WEIGHTS_CMAP, vmin=0.0, vmax=1.0, aspect="auto")
        else:
            lim = float(np.nanmax(np.abs(m))) or 1.0
            im = ax.imshow(m, cmap=SCORES_CMAP, vmin=-lim, vmax=lim, aspect="auto")
        _position_ticks(ax.xaxis, seq_k, keys)
        _position_ticks(ax.yaxis, seq_q, queries)
        if keys is not None and max((len(str(k)) for k in keys), default=0) > 3:
            ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        if title:
            ax.set_title(title)
        if annotate is None:
            annotate = seq_q <= 10 and seq_k <= 10
        if annotate:
            span = (0.0, 1.0) if kind == "weights" else (-1.0, 1.0)
            for i in range(seq_q):
                for j in range(seq_k):
                    val = m[i, j]
                    level = abs(val) / (span[1] if kind == "weights" else (lim or 1.0))
                    ax.text(
                        j,
                        i,
                        fmt.format(val),
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if level > 0.6 else "black",
                    )
        if colorbar:
            ax.figure.colorbar(im, ax=ax, shrink=0.8, label=kind)
    return ax


def bars(
    values,
    labels: Sequence[str] | None = None,
    *,
    ax=None,
    title=None,
    ylabel=None,
    highlight: int | None = None,
):
    """Bar chart of one vector (e.g. one query's scores or weights over the keys)."""
    v = as_numpy(values)
    if v.ndim != 1:
        raise ValueError(f"bars: values must be 1-D, got shape {v.shape}")
    if labels is not None and len(labels) != len(v):
        raise ValueError(f"bars: {len(labels)} labels for {len(v)} values")
    ax = new_axes(ax, figsize=_fit(0.6 * len(v) + 2.0, 3.0))
    with course_style():
        colors = [PALETTE[1] if i == highlight else PALETTE[0] for i in range(len(v))]
        ax.bar(range(len(v)), v, color=colors)
        _position_ticks(ax.xaxis, len(v), labels)
        ax.axhline(0, color="0.3", lw=0.8)
        if ylabel:
            ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
    return ax


def vectors(
    vecs,
    labels: Sequence[str] | None = None,
    *,
    ax=None,
    title=None,
    colors: Sequence[str] | None = None,
    axis_labels=("feature 0", "feature 1"),
):
    """Arrows from the origin for 2-D vectors (e.g. a query and the keys it is compared to)."""
    v = as_numpy(vecs)
    if v.ndim != 2 or v.shape[1] != 2 or v.shape[0] == 0:
        raise ValueError(f"vectors: vecs must have shape (n, 2) with n >= 1, got {v.shape}")
    if labels is not None and len(labels) != len(v):
        raise ValueError(f"vectors: {len(labels)} labels for {len(v)} vectors")
    ax = new_axes(ax, figsize=(4.0, 4.0))
    with course_style():
        for i, (x, y) in enumerate(v):
            c = colors[i] if colors is not None else PALETTE[i % len(PALETTE)]
            ax.annotate(
                "", xy=(x, y), xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": c, "lw": 1.8}
            )
            if labels is not None:
                ax.text(x * 1.08, y * 1.08, labels[i], color=c, ha="center", va="center")
        lim = float(np.abs(v).max()) * 1.3 or 1.0
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.axhline(0, color="0.8", lw=0.8)
        ax.axvline(0, color="0.8", lw=0.8)
        ax.set_xlabel(axis_labels[0])
        ax.set_ylabel(axis_labels[1])
        if title:
            ax.set_title(title)
    return ax


def attention_grid(
    weights,
    *,
    titles: Sequence[str] | None = None,
    queries=None,
    keys=None,
    ncols: int | None = None,
    suptitle: str | None = None,
):
    """Several attention maps side by side (heads, layers, examples). Returns the Figure.

    weights : array-like of shape (n_maps, seq_q, seq_k)
    """
    w = as_numpy(weights)
    if w.ndim != 3:
        raise ValueError(f"attention_grid: weights must be (n_maps, seq_q, seq_k), got {w.shape}")
    n = w.shape[0]
    ncols = ncols or min(n, 4)
    nrows = -(-n // ncols)
    seq_q, seq_k = w.shape[1:]
    with course_style():
        fig, axes = plt.subplots(
            nrows,
            ncols,
            squeeze=False,
            layout="constrained",
            figsize=(
                ncols * min(0.4 * seq_k + 1.5, 4.0),
                nrows * min(0.35 * seq_q + 1.4, 3.5),
            ),
        )
        for i, ax in enumerate(axes.flat):
            if i >= n:
                ax.axis("off")
                continue
            heatmap(
                w[i],
                ax=ax,
                queries=queries,
                keys=keys,
                colorbar=False,
                title=titles[i] if titles else None,
                annotate=False,
            )
        if suptitle:
            fig.suptitle(suptitle)
    return fig
