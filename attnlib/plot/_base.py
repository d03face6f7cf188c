"""The shared look of every figure (one projector style), and the figures of the first lessons.

Every function takes an optional ``ax``, draws on it (or on a new figure), and returns the
Axes (or Figure for multi-panel plots). None of them calls ``plt.show()`` and none of them
changes global matplotlib state: the course style is applied with a context manager
(:func:`course_style`). A lesson that composes its own figures calls
:func:`use_course_style` once in its first cell, or makes them with :func:`subplots`.

The projector style
-------------------
* Text: base font 12 pt, axis labels 12 pt, titles 13 pt, tick labels and legends 11 pt,
  in-plot annotations (heat-map numbers, notes) never under :data:`MIN_FONT` = 10 pt.
* Size: no figure wider than :data:`MAX_WIDTH` = 8 in, so Lab's ~780 px column and a
  1280 px slide show it without shrinking the text below its point size.
* Resolution: ``figure.dpi`` = ``savefig.dpi`` = :data:`DPI` = 150. The inline backend
  (matplotlib-inline) saves a figure at the figure's own ``dpi`` — set from
  ``rcParams["figure.dpi"]`` when the figure is created — so figures made by these functions
  (or inside :func:`course_style`) are stored at 150 dpi whatever the backend's defaults.
* Colour: the Okabe–Ito palette (:data:`PALETTE`), distinguishable under the common
  colour-vision deficiencies, and never colour alone: every series also gets its own marker,
  line style or hatch (:func:`series_style`), or a direct label.
* Heat maps: a colourbar; masked cells hatched grey with a "masked" legend entry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.collections import PatchCollection
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

# Okabe & Ito (2008), "Color Universal Design": eight colours that stay distinct under
# protanopia, deuteranopia and tritanopia. Ordered so that the first pairs contrast most
# (blue / vermillion / bluish green); yellow, weak on white, comes last.
OKABE_ITO = {
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "bluish green": "#009E73",
    "orange": "#E69F00",
    "reddish purple": "#CC79A7",
    "sky blue": "#56B4E9",
    "black": "#000000",
    "yellow": "#F0E442",
}
PALETTE = tuple(OKABE_ITO.values())
# The second channel: series i gets PALETTE[i], MARKERS[i] and LINESTYLES[i] (bars: HATCHES[i]).
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 1)), "-")
HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "++", "--")
WEIGHTS_CMAP = "Blues"  # post-softmax weights, 0..1 (sequential: light = small)
SCORES_CMAP = "RdBu_r"  # pre-softmax scores, centred at 0 (diverging, colour-blind safe)
MASKED_FACE, MASKED_EDGE, MASKED_HATCH = "#d9d9d9", "#7f7f7f", "///"

DPI = 150
MAX_WIDTH = 8.0  # inches
MIN_FONT = 10.0  # points, the smallest text in any figure
FONT = {"base": 12.0, "label": 12.0, "title": 13.0, "tick": 11.0, "legend": 11.0, "note": 10.0}

STYLE = {
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "figure.figsize": (6.0, 3.6),
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "font.size": FONT["base"],
    "axes.titlesize": FONT["title"],
    "axes.labelsize": FONT["label"],
    "xtick.labelsize": FONT["tick"],
    "ytick.labelsize": FONT["tick"],
    "legend.fontsize": FONT["legend"],
    "legend.title_fontsize": FONT["legend"],
    "figure.titlesize": FONT["title"] + 1,
    "figure.labelsize": FONT["label"],
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "axes.linewidth": 1.0,
    # colour and line style change together, so plain plt.plot calls get a second channel
    "axes.prop_cycle": mpl.cycler(color=list(PALETTE)) + mpl.cycler(linestyle=list(LINESTYLES)),
    "lines.linewidth": 2.0,
    "lines.markersize": 6.0,
    "legend.frameon": False,
    "legend.handlelength": 2.6,  # long enough to show a dash-dot pattern
    "hatch.linewidth": 1.0,
}

# Above this many positions an axis gets automatic integer ticks instead of one per position,
# and figure sizes stop growing (a 512 x 512 map must not become a 280-inch figure).
MAX_TICKS = 24
MAX_FIGSIZE = (MAX_WIDTH, 6.0)


@contextlib.contextmanager
def course_style():
    """Apply the course look inside a ``with`` block; global settings are left untouched.

    Figures created inside the block keep the course's dpi and sizes; text created inside
    it keeps the course's font sizes.
    """
    with mpl.rc_context(STYLE):
        yield


def use_course_style() -> None:
    """Make the course look matplotlib's default for this session (one call per lesson).

    attnlib.plot's own functions do not need it. Call it in a lesson's first code cell when
    the lesson also draws with plain matplotlib (``plt.subplots``, ``plt.plot``), so those
    figures get the same fonts, palette and 150 dpi. This is the one function of
    attnlib.plot that changes ``matplotlib.rcParams``; importing attnlib changes nothing.
    """
    mpl.rcParams.update(STYLE)


def series_style(i: int) -> dict:
    """Colour, marker and line style of series ``i`` (``ax.plot(x, y, **series_style(i))``).

    Colours repeat after 8 series; the marker then shifts by one, so the first 64 series all
    differ in the (colour, marker) pair.
    """
    shift = i + i // len(PALETTE)
    return {
        "color": PALETTE[i % len(PALETTE)],
        "marker": MARKERS[shift % len(MARKERS)],
        "linestyle": LINESTYLES[shift % len(LINESTYLES)],
    }


def mark_every(n: int, marks: int = 10) -> int:
    """``markevery`` that puts about ``marks`` markers on a line of ``n`` points."""
    return max(1, n // marks)


def plot_series(ax, fn: str, x, series: Mapping, *, what: str = "series", **kwargs) -> None:
    """One line per entry of ``series`` (label -> y of x's shape) in the course's series
    styles; ``fn`` and ``what`` name the caller and its argument in a shape error.
    Other keyword arguments go to ``ax.plot``."""
    for i, (label, ys) in enumerate(series.items()):
        ys = np.asarray(ys, dtype=float)
        if ys.shape != x.shape:
            raise ValueError(f"{fn}: {what} {label!r} has shape {ys.shape}, x has {x.shape}")
        ax.plot(x, ys, label=label, **kwargs, **series_style(i))  # colour, marker, line style


def mark_x(ax, x: float, text: str, *, y: float, ls: str = "--", lw: float = 1.4) -> None:
    """A vertical line at ``x`` with ``text`` written just right of it at height ``y``."""
    ax.axvline(x, color="0.2", lw=lw, ls=ls)
    ax.annotate(
        text, (x, y), xytext=(5, 0), textcoords="offset points", fontsize=FONT["note"], va="center"
    )


def fit_width(width: float, height: float) -> tuple[float, float]:
    """``(width, height)`` capped at :data:`MAX_FIGSIZE` (8 in wide)."""
    return min(width, MAX_FIGSIZE[0]), min(height, MAX_FIGSIZE[1])


def new_axes(ax=None, figsize=(5.5, 3.4)):
    """Return ``ax`` or a fresh Axes of the course's default size (at most 8 in wide)."""
    if ax is not None:
        return ax
    with course_style():
        _, ax = plt.subplots(figsize=fit_width(*figsize), layout="constrained")
    return ax


def subplots(nrows: int = 1, ncols: int = 1, *, figsize=None, **kwargs):
    """``plt.subplots`` in the course style: constrained layout, 150 dpi, at most 8 in wide.

    For a lesson's own multi-panel figures, e.g. ``fig, (a, b) = plot.subplots(1, 2)`` and then
    ``plot.heatmap(..., ax=a)``. ``figsize`` defaults to 8 in wide (3.2 in per row); a wider
    request is capped at 8 in. Other keyword arguments go to ``plt.subplots``.
    """
    if figsize is None:
        figsize = (min(MAX_WIDTH, 3.2 * ncols + 0.8), 3.2 * nrows)
    kwargs.setdefault("layout", "constrained")
    with course_style():
        return plt.subplots(nrows, ncols, figsize=fit_width(*figsize), **kwargs)


def _position_ticks(axis, n: int, labels) -> None:
    """One tick per position (with labels if given); automatic integer ticks for long axes."""
    if labels is not None or n <= MAX_TICKS:
        axis.set_ticks(range(n), labels=labels if labels is not None else range(n))
    else:
        axis.set_major_locator(MaxNLocator(nbins=8, integer=True))


def as_numpy(x) -> np.ndarray:
    """What a figure plots: a numpy array (a tensor is detached and moved to the CPU; a
    float or integer tensor becomes float32, a bool tensor, e.g. a mask, stays bool)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        x = (x if x.dtype == torch.bool else x.float()).numpy()
    return np.asarray(x)


def masked_patch(label: str = "masked") -> Patch:
    """The legend entry of masked cells: the grey hatched square heat maps draw."""
    return Patch(facecolor=MASKED_FACE, edgecolor=MASKED_EDGE, hatch=MASKED_HATCH, label=label)


def _axes_inches(ax) -> tuple[float, float]:
    pos = ax.get_position()
    w, h = ax.figure.get_size_inches()
    return pos.width * w, pos.height * h


def _as_mask(mask, shape, fn: str) -> np.ndarray | None:
    if mask is None:
        return None
    m = as_numpy(mask)
    if m.dtype != bool:
        raise TypeError(f"{fn}: mask must be boolean (True = may attend), got dtype {m.dtype}")
    try:
        return np.broadcast_to(m, shape)
    except ValueError:
        raise ValueError(
            f"{fn}: mask of shape {m.shape} does not broadcast to the matrix's {shape}"
        ) from None


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
    mask=None,
    mask_legend: bool = True,
    vmax: float | None = None,
):
    """Draw an attention matrix: rows are query positions, columns are key positions.

    Parameters
    ----------
    matrix : array-like of shape (seq_q, seq_k)
        Weights (post-softmax, 0..1) or scores (pre-softmax). Non-finite entries (a score
        set to -inf) are drawn as masked.
    queries, keys : sequence of str, optional
        Tick labels (e.g. the tokens). Default: positions 0, 1, ...
    kind : {"weights", "scores"}
        Colour scale: 0..1 in blue for weights; red-blue centred at 0 for scores.
    annotate : bool, optional
        Write each value in its cell (10 pt or larger). Default: when the map is at most
        12 x 12 and its cells are large enough for the numbers.
    colorbar : bool
        A colourbar labelled with ``kind`` beside the map.
    mask : bool array-like broadcastable to (seq_q, seq_k), optional
        True = may attend (the course convention). Cells where it is False are drawn grey
        and hatched, without a number, and a "masked" legend entry is added above the map,
        under the title (``mask_legend=False`` leaves the entry out, e.g. on all but one
        panel).
    vmax : float, optional
        Colour-scale limit for scores (default: the largest absolute finite score).

    Examples
    --------
    Three tokens under the causal mask, each query's weight spread evenly over the keys it
    may see: six numbers are written, and the three cells above the diagonal (keys after
    the query) are hatched grey under one "masked" legend entry.

    >>> from attnlib.masks import causal_mask
    >>> w = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]   # rows 1, 1/2, 1/3
    >>> ax = heatmap(w, keys=["the", "cat", "sat"], mask=causal_mask(3), annotate=True)
    >>> ax.get_xlabel(), ax.get_ylabel(), [t.get_text() for t in ax.texts][:3]
    ('key position', 'query position', ['1.00', '0.50', '0.50'])
    >>> len(ax.texts), [t.get_text() for t in ax.get_legend().get_texts()]
    (6, ['masked'])
    >>> plt.close(ax.figure)  # a lesson shows the figure instead; here it is only checked
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
    m = m.astype(float)
    allowed = _as_mask(mask, m.shape, "heatmap")
    hidden = ~np.isfinite(m)
    if allowed is not None:
        hidden = hidden | ~allowed
    ax = new_axes(ax, figsize=fit_width(0.55 * seq_k + 2.6, 0.42 * seq_q + 1.7))
    with course_style():
        shown = np.ma.masked_array(m, mask=hidden)
        if kind == "weights":
            cmap = plt.get_cmap(WEIGHTS_CMAP).with_extremes(bad=MASKED_FACE)
            im = ax.imshow(shown, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
            lim = 1.0
        else:
            finite = np.abs(m[~hidden]) if (~hidden).any() else np.zeros(1)
            lim = float(vmax) if vmax is not None else (float(finite.max()) or 1.0)
            cmap = plt.get_cmap(SCORES_CMAP).with_extremes(bad=MASKED_FACE)
            im = ax.imshow(shown, cmap=cmap, vmin=-lim, vmax=lim, aspect="auto")
        _position_ticks(ax.xaxis, seq_k, keys)
        _position_ticks(ax.yaxis, seq_q, queries)
        if keys is not None and max((len(str(k)) for k in keys), default=0) > 3:
            ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        if annotate is None:
            w_in, h_in = _axes_inches(ax)
            width = max(len(fmt.format(v)) for v in (m[~hidden] if (~hidden).any() else [0.0]))
            need = 0.62 * width * FONT["note"] / 72 + 0.04  # inches for one number at 10 pt
            annotate = seq_q <= 12 and seq_k <= 12 and w_in / seq_k >= need and h_in / seq_q >= 0.2
        if annotate:
            for i in range(seq_q):
                for j in range(seq_k):
                    if hidden[i, j]:
                        continue
                    val = m[i, j]
                    ax.text(
                        j,
                        i,
                        fmt.format(val),
                        ha="center",
                        va="center",
                        fontsize=FONT["note"],
                        color="white" if abs(val) / lim > 0.6 else "black",
                    )
        if hidden.any():
            rows, cols = np.nonzero(hidden)
            cells = [Rectangle((j - 0.5, i - 0.5), 1, 1) for i, j in zip(rows, cols, strict=True)]
            ax.add_collection(
                PatchCollection(
                    cells,
                    facecolor=MASKED_FACE,
                    edgecolor=MASKED_EDGE,
                    hatch=MASKED_HATCH,
                    linewidth=0.0,
                    label="masked",
                )
            )
            if mask_legend:
                ax.legend(
                    handles=[masked_patch()],
                    loc="lower right",
                    bbox_to_anchor=(1.0, 1.0),
                    borderaxespad=0.1,
                    handlelength=1.4,
                    handleheight=1.0,
                )
        if title:
            # with the "masked" entry just above the map, the title goes above the entry
            ax.set_title(title, pad=24 if hidden.any() and mask_legend else 6)
        if colorbar:
            ax.figure.colorbar(im, ax=ax, shrink=0.85, label=kind)
    return ax


def bars(
    values,
    labels: Sequence[str] | None = None,
    *,
    ax=None,
    title=None,
    ylabel=None,
    highlight: int | None = None,
    colors: Sequence[str] | None = None,
):
    """Bar chart of one vector (e.g. one query's scores or weights over the keys).

    ``highlight`` marks one bar by colour *and* hatching (vermillion, hatched), so the mark
    survives a colour-blind reader and a black-and-white print. ``colors`` gives each bar
    its own colour (e.g. the colours of the keys' arrows in :func:`vectors`); a highlighted
    bar then keeps its colour and is marked by hatching and a black edge.
    """
    v = as_numpy(values)
    if v.ndim != 1:
        raise ValueError(f"bars: values must be 1-D, got shape {v.shape}")
    if labels is not None and len(labels) != len(v):
        raise ValueError(f"bars: {len(labels)} labels for {len(v)} values")
    ax = new_axes(ax, figsize=fit_width(0.62 * len(v) + 2.2, 3.2))
    with course_style():
        if colors is not None and len(colors) != len(v):
            raise ValueError(f"bars: {len(colors)} colors for {len(v)} values")
        if colors is None:
            colors = [PALETTE[1] if i == highlight else PALETTE[0] for i in range(len(v))]
        drawn = ax.bar(range(len(v)), v, color=list(colors), edgecolor="white", linewidth=0.5)
        if highlight is not None and 0 <= highlight < len(v):
            drawn[highlight].set_hatch("//")
            drawn[highlight].set_edgecolor("black")
        _position_ticks(ax.xaxis, len(v), labels)
        if labels is not None and max((len(str(s)) for s in labels), default=0) > 4:
            ax.tick_params(axis="x", labelrotation=30)
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
    """Arrows from the origin for 2-D vectors (e.g. a query and the keys it is compared to).

    Each arrow is labelled at its tip (the direct label is the second channel); without
    labels the arrows differ in line style as well as colour.
    """
    v = as_numpy(vecs)
    if v.ndim != 2 or v.shape[1] != 2 or v.shape[0] == 0:
        raise ValueError(f"vectors: vecs must have shape (n, 2) with n >= 1, got {v.shape}")
    if labels is not None and len(labels) != len(v):
        raise ValueError(f"vectors: {len(labels)} labels for {len(v)} vectors")
    ax = new_axes(ax, figsize=(4.2, 4.2))
    with course_style():
        for i, (x, y) in enumerate(v):
            c = colors[i] if colors is not None else PALETTE[i % len(PALETTE)]
            style = "-" if labels is not None else LINESTYLES[i % len(LINESTYLES)]
            ax.annotate(
                "",
                xy=(x, y),
                xytext=(0, 0),
                arrowprops={"arrowstyle": "->", "color": c, "lw": 2.2, "linestyle": style},
            )
            if labels is not None:
                ax.text(
                    x * 1.08,
                    y * 1.08,
                    labels[i],
                    color=c,
                    ha="center",
                    va="center",
                    fontweight="bold",
                )
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
    mask=None,
    colorbar: bool = True,
    annotate: bool | None = False,
):
    """Several attention maps side by side (heads, layers, examples). Returns the Figure.

    Parameters
    ----------
    weights : array-like of shape (n_maps, seq_q, seq_k)
    ncols : int, optional
        Panels per row (default: up to 4). The figure is at most 8 in wide; more maps wrap
        into more rows.
    mask : bool array-like broadcastable to (n_maps, seq_q, seq_k), optional
        True = may attend; masked cells are hatched grey (one "masked" legend entry).
    colorbar : bool
        One colourbar for all panels (they share the 0..1 scale).
    """
    w = as_numpy(weights)
    if w.ndim != 3:
        raise ValueError(f"attention_grid: weights must be (n_maps, seq_q, seq_k), got {w.shape}")
    n = w.shape[0]
    ncols = ncols or min(n, 4)
    nrows = -(-n // ncols)
    seq_q, seq_k = w.shape[1:]
    allowed = _as_mask(mask, w.shape, "attention_grid")
    with course_style():
        panel_w = min(0.42 * seq_k + 1.5, 4.0)
        width = ncols * panel_w + (1.0 if colorbar else 0.0)
        height = nrows * min(0.36 * seq_q + 1.5, 3.5)
        fig, axes = plt.subplots(
            nrows, ncols, squeeze=False, layout="constrained", figsize=fit_width(width, height)
        )
        legend_done = False
        for i, ax in enumerate(axes.flat):
            if i >= n:
                ax.axis("off")
                continue
            m_i = None if allowed is None else allowed[i]
            show_legend = m_i is not None and not m_i.all() and not legend_done
            legend_done = legend_done or show_legend
            heatmap(
                w[i],
                ax=ax,
                queries=queries,
                keys=keys,
                colorbar=False,
                title=titles[i] if titles else None,
                annotate=annotate,
                mask=m_i,
                mask_legend=show_legend,
            )
            if i % ncols:  # inner panels: the row's first panel names the axes
                ax.set_ylabel("")
        if colorbar:
            fig.colorbar(axes.flat[0].images[0], ax=axes, shrink=0.85, label="weights")
        if suptitle:
            fig.suptitle(suptitle)
    return fig
