"""Figures of lessons 10–12: costs against length, score tiles, positions, score vs offset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from attnlib.plot._base import (
    FONT,
    SCORES_CMAP,
    as_numpy,
    course_style,
    fit_width,
    heatmap,
    mark_every,
    masked_patch,
    new_axes,
    plot_series,
    series_style,
)


def cost_curves(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str = "seq_k",
    ylabel: str = "time (ms)",
    title: str | None = None,
    logx: bool = True,
    logy: bool = True,
    plain_ticks: bool = False,
    equal_decades: bool = False,
    slopes: Sequence[float] = (),
    legend: str | None = "best",
    ax=None,
):
    """One line per variant of a cost (time, memory) against a length.

    Parameters
    ----------
    x : sequence of float of shape (n_points,)
        The lengths (e.g. seq_k, or tokens already generated).
    series : mapping of label -> sequence of float of shape (n_points,)
        The cost of each variant at each length; variants differ in colour, marker and
        line style.
    logx, logy : bool, default True
        Log scales (x in powers of 2, y in powers of 10 unless ``equal_decades``).
    plain_ticks : bool, default False
        Label the x axis at the given lengths and a log y axis at 1, 2 and 5 times the
        powers of ten, as plain numbers (``512``, ``20``; not ``2⁹``, ``10¹``).
    equal_decades : bool, default False
        Log–log axes on which a factor of ten is as long on x as on y, so a slope is seen
        as it is (slope 1 at 45°, slope 2 steeper): both axes in powers of ten, plain ticks.
    slopes : sequence of float, optional
        Dashed grey reference lines of these slopes on log–log axes (cost ∝ length**slope),
        each labelled ``slope k`` at its end. They start together at the first length, at
        half the lowest first cost: below the curves, so that none hides one, and a curve
        parallel to a line has its slope.
    legend : str or None, default "best"
        A matplotlib location inside the axes, ``"right"``: beside them, clear of the
        curves (for the narrow axes of ``equal_decades``), or None: no legend (a panel
        beside another that has it).
    ax : Axes, optional

    Returns
    -------
    Axes

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> ax = cost_curves([256, 512, 1024], {"quadratic": [1, 4, 16], "linear": [1, 2, 4]},
    ...                  equal_decades=True, slopes=(1, 2), legend="right")
    >>> [t.get_text() for t in ax.texts], ax.get_xscale(), ax.get_yscale()
    (['slope 1', 'slope 2'], 'log', 'log')
    >>> plt.close(ax.figure)
    """
    xs = np.asarray(x, dtype=float)
    if xs.ndim != 1:
        raise ValueError(f"cost_curves: x must be 1-D, got shape {xs.shape}")
    if (equal_decades or slopes) and not (logx and logy):
        raise ValueError("cost_curves: equal_decades and slopes need log scales on both axes")
    ax = new_axes(ax, figsize=(6.4, 4.4) if equal_decades else (5.6, 3.6))
    with course_style():
        plot_series(ax, "cost_curves", xs, series)
        if logx:
            ax.set_xscale("log", base=10 if equal_decades else 2)
        if logy:
            ax.set_yscale("log")
        if slopes:
            x0 = xs[0]
            y0 = 0.5 * min(float(np.asarray(ys, dtype=float)[0]) for ys in series.values())
            for k in slopes:
                ys = y0 * (xs / x0) ** k
                ax.plot(xs, ys, color="0.45", ls="--", lw=1.4, zorder=1, label="_reference")
                ax.annotate(
                    f"slope {k:g}",
                    (xs[-1], ys[-1]),
                    xytext=(4, 0),
                    textcoords="offset points",
                    fontsize=FONT["legend"],
                    color="0.3",
                    va="center",
                    ha="left",
                )
        if plain_ticks or equal_decades:
            _plain_ticks(ax, xs, logx=logx, logy=logy)
        if equal_decades:
            _equal_decades(ax, xs, right_margin=1.6 if slopes else 1.15)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        if legend == "right":
            ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        elif legend is not None:
            ax.legend(loc=legend)
    return ax


def _plain_ticks(ax, xs, *, logx: bool, logy: bool) -> None:
    """x ticks at the plotted lengths; y ticks at 1, 2, 5 x 10^n on a log axis; plain labels."""
    ax.set_xticks(xs, labels=[f"{v:g}" for v in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    if logy:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_locator(NullLocator())


def _equal_decades(ax, xs, *, right_margin: float) -> None:
    """Limits with a little room, then a box in which a decade is as long on x as on y."""
    lo, hi = ax.dataLim.intervaly
    ax.set_ylim(lo / 1.3, hi * 1.3)
    ax.set_xlim(xs.min() / 1.15, xs.max() * right_margin)
    ax.set_aspect("equal", adjustable="box")


def position_codes(P, *, ax=None, title: str | None = "sinusoidal position codes"):
    """Heat map of position codes: one row per position, one column per dimension.

    P : array-like of shape (seq, d_model)
    """
    m = as_numpy(P)
    if m.ndim != 2:
        raise ValueError(f"position_codes: P must be (seq, d_model), got shape {m.shape}")
    ax = new_axes(ax, figsize=(5.6, 3.8))
    with course_style():
        im = ax.imshow(m, cmap=SCORES_CMAP, vmin=-1, vmax=1, aspect="auto")
        ax.set_xlabel("dimension (d_model)")
        ax.set_ylabel("position")
        if title:
            ax.set_title(title)
        ax.figure.colorbar(im, ax=ax, shrink=0.8, label="value")
    return ax


def score_vs_offset(offsets, scores: Mapping[str, Sequence[float]], *, ax=None, title=None):
    """Query–key score against the offset (key position − query position).

    offsets : array-like of int of shape (n,)
    scores : mapping of label -> array-like of shape (n,), e.g. several query positions;
        each gets its own colour, marker and line style
    """
    off = as_numpy(offsets)
    ax = new_axes(ax, figsize=(5.8, 3.4))
    with course_style():
        for i, (label, s) in enumerate(scores.items()):
            ax.plot(
                off, as_numpy(s), markevery=mark_every(len(off)), label=label, **series_style(i)
            )
        ax.axhline(0, color="0.7", lw=0.8)
        ax.set_xlabel("offset (key position − query position)")
        ax.set_ylabel("score q·k")
        if title:
            ax.set_title(title)
        ax.legend()
    return ax


def score_tiles(
    scores,
    *,
    block_q: int,
    block_k: int,
    causal: bool = False,
    walk: int | None = None,
    carried: Sequence[str] | None = None,
    fmt: str = "{:.1f}",
    title: str | None = None,
    ax=None,
):
    """The score matrix cut into tiles of queries × keys, as blockwise attention visits it.

    Parameters
    ----------
    scores : array-like of shape (seq_q, seq_k)
        Pre-softmax scores, drawn as the course's score heat map (red–blue, centred at 0,
        with a colourbar; numbers written when the cells are large enough). A score of
        ``-inf`` (a masked key) is drawn hatched grey.
    block_q, block_k : int
        The tile: ``block_q`` queries against ``block_k`` keys. Thick lines cut the matrix.
    causal : bool, default False
        Keys after their query are masked (hatched grey); a tile wholly in the future of its
        queries is marked "skipped": blockwise attention never computes it.
    walk : int, optional
        A query tile (0 = the first ``block_q`` queries) whose walk over the key tiles is
        drawn: the other tiles are faded, and under the matrix one box per key tile it
        visits, in order, with an arrow from each box to the next (the running state
        carried from key tile to key tile) and a last one to ``out = acc / ℓ``.
    carried : sequence of str, optional
        The text of each box, one per visited key tile (e.g. the running maximum and sum
        after it). Default: ``m, ℓ, acc``.
    fmt : str, default "{:.1f}"
        The format of the numbers written in the cells.
    title : str, optional
    ax : Axes, optional

    Returns
    -------
    Axes

    Examples
    --------
    Six queries and keys in tiles of 3 under a causal mask: the tile above the diagonal is
    skipped, and the second query tile visits both key tiles, carrying its state to the end.

    >>> import matplotlib.pyplot as plt
    >>> s = np.arange(36.0).reshape(6, 6) / 10 - 1.5
    >>> ax = score_tiles(s, block_q=3, block_k=3, causal=True, walk=1)
    >>> texts = [t.get_text() for t in ax.texts]
    >>> texts.count("skipped"), texts.count("m, ℓ, acc"), texts.count("out = acc / ℓ")
    (1, 2, 1)
    >>> plt.close(ax.figure)
    """
    m = as_numpy(scores).astype(float) + 0.0  # + 0.0: no "-0.0" written in a cell
    if m.ndim != 2:
        raise ValueError(f"score_tiles: scores must be (seq_q, seq_k), got shape {m.shape}")
    seq_q, seq_k = m.shape
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(b, int | np.integer) or b < 1:
            raise ValueError(f"score_tiles: {name} must be a positive int, got {b!r}")
    q_tiles = [(i0, min(i0 + block_q, seq_q)) for i0 in range(0, seq_q, block_q)]
    k_tiles = [(j0, min(j0 + block_k, seq_k)) for j0 in range(0, seq_k, block_k)]
    if walk is not None and not 0 <= walk < len(q_tiles):
        raise ValueError(f"score_tiles: walk must name one of {len(q_tiles)} query tiles")

    def skipped(i: int, j: int) -> bool:  # the key tile lies wholly after the query tile
        return causal and k_tiles[j][0] > q_tiles[i][1] - 1

    visited = [] if walk is None else [j for j in range(len(k_tiles)) if not skipped(walk, j)]
    if carried is not None and len(carried) != len(visited):
        raise ValueError(
            f"score_tiles: {len(carried)} carried texts for {len(visited)} visited key tiles"
        )
    below = 0.95 if walk is not None else 0.0  # inches under the matrix for the walk
    ax = new_axes(ax, figsize=fit_width(0.55 * seq_k + 2.8, 0.26 * seq_q + 1.2 + below))
    allowed = np.tril(np.ones((seq_q, seq_k), dtype=bool)) if causal else None
    heatmap(m, kind="scores", mask=allowed, mask_legend=False, fmt=fmt, ax=ax, title=None)
    with course_style():
        ax.xaxis.tick_top()
        ax.xaxis.set_label_position("top")
        edge = {"color": "black", "lw": 2.5, "ls": "-", "zorder": 4}
        for i0, _ in [*q_tiles, (seq_q, None)]:
            ax.plot([-0.5, seq_k - 0.5], [i0 - 0.5, i0 - 0.5], **edge, clip_on=False)
        for j0, _ in [*k_tiles, (seq_k, None)]:
            ax.plot([j0 - 0.5, j0 - 0.5], [-0.5, seq_q - 0.5], **edge, clip_on=False)
        for i, (i0, i1) in enumerate(q_tiles):
            for j, (j0, j1) in enumerate(k_tiles):
                if walk is not None and i != walk:  # another query tile: faded
                    fade = Rectangle((j0 - 0.5, i0 - 0.5), j1 - j0, i1 - i0)
                    fade.set(facecolor="white", alpha=0.45, edgecolor="none", zorder=3.5)
                    ax.add_patch(fade)
                if skipped(i, j):
                    ax.text(
                        (j0 + j1 - 1) / 2,
                        (i0 + i1 - 1) / 2,
                        "skipped",
                        ha="center",
                        va="center",
                        fontsize=FONT["legend"],
                        zorder=5,
                        bbox={"facecolor": "white", "edgecolor": "0.3", "boxstyle": "round"},
                    )
        if causal:
            handles = [masked_patch("masked: key after its query")]
        else:
            handles = [masked_patch("masked (score −∞)")] if (~np.isfinite(m)).any() else []
        if walk is not None:
            texts = list(carried) if carried is not None else ["m, ℓ, acc"] * len(visited)
            style = {"boxstyle": "round,pad=0.35", "facecolor": "white", "edgecolor": "black"}
            arrow = {"arrowstyle": "<|-", "lw": 2.0, "color": "black", "shrinkA": 0, "shrinkB": 0}
            boxes = []
            for j, text in zip(visited, texts, strict=True):
                x = (k_tiles[j][0] + k_tiles[j][1] - 1) / 2
                box = ax.annotate(
                    text,
                    xy=(x, seq_q - 0.5),
                    xytext=(0, -34),
                    textcoords="offset points",
                    ha="center",
                    va="top",
                    fontsize=FONT["legend"],
                    bbox=style,
                    annotation_clip=False,
                )
                ax.annotate(  # the key tile's scores go into the update
                    "",
                    xy=(x, seq_q - 0.5),
                    xytext=(0.5, 1),
                    textcoords=box,
                    arrowprops={**arrow, "lw": 1.4},
                    annotation_clip=False,
                )
                boxes.append(box)
            for here, there in zip(boxes, boxes[1:], strict=False):  # the state carried on
                ax.annotate(
                    "",
                    xy=(1, 0.5),
                    xycoords=here,
                    xytext=(0, 0.5),
                    textcoords=there,
                    arrowprops={**arrow, "shrinkA": 7, "shrinkB": 7},
                )
            out = ax.annotate(
                "out = acc / ℓ",
                xy=(1, 0.5),
                xycoords=boxes[-1],
                xytext=(30, 0),
                textcoords="offset points",
                ha="left",
                va="center",
                fontsize=FONT["legend"],
                arrowprops={**arrow, "shrinkA": 2, "shrinkB": 7},
            )
            out.set_in_layout(False)  # below the colourbar: no need to push it aside
        if handles:
            legend = {"handlelength": 1.4, "handleheight": 1.0}
            if walk is None:
                ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, -0.02), **legend)
            else:  # under the walk's boxes, which lie outside the axes
                ax.figure.legend(handles=handles, loc="outside lower left", **legend)
        if title:
            ax.set_title(title)
    return ax
