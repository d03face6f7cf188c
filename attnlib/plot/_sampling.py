"""Figures of lesson 17: choosing a token.

* :func:`sampling_view` — the sampling explorer's figure: one row per likely token, a
  black tick at its probability as the model gives it (temperature 1, nothing removed), a
  filled bar at its probability when sampling (temperature and filters applied, then
  renormalised), and, for a token the filters drop, a hatched grey band across its row
  instead of the bar;
* :func:`sampling_views` — the same for several settings side by side, on one probability
  axis: the lesson's static figure.

Both read a :class:`attnlib.explorers.SamplingState` (``labels``, ``before``, ``after``,
``kept``, ...). The three marks differ in shape and hatching, not only in colour.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from attnlib._validate import type_name
from attnlib.plot._base import (
    FONT,
    MASKED_EDGE,
    MASKED_FACE,
    MASKED_HATCH,
    PALETTE,
    course_style,
    fit_width,
    new_axes,
)

__all__ = ["sampling_view", "sampling_views"]

ROW_INCHES = 0.19  # one token's row
SAMPLED = PALETTE[0]  # blue: the probabilities sampled from
MODEL_TICK = {"color": "black", "marker": "|", "markersize": 10.0, "markeredgewidth": 2.2}
DROPPED_LABEL = "0.45"  # a dropped token's name: grey, and its bar hatched
MONO = "DejaVu Sans Mono"  # the tokens' names (matplotlib ships it; it has ␣ and ⏎)
LEGEND = ("model (T = 1)", "sampled from", "dropped")


def _legend_handles() -> list:
    """The three marks, as legend entries: a tick, a filled bar, a hatched grey band."""
    return [
        Line2D([], [], linestyle="none", label=LEGEND[0], **MODEL_TICK),
        Patch(facecolor=SAMPLED, edgecolor="white", label=LEGEND[1]),
        Patch(facecolor=MASKED_FACE, edgecolor=MASKED_EDGE, hatch=MASKED_HATCH, label=LEGEND[2]),
    ]


def _check_state(fn: str, state) -> int:
    for name in ("labels", "before", "after", "kept", "n_kept", "vocab_size"):
        if not hasattr(state, name):
            raise TypeError(f"{fn}: state must be a SamplingState, got {type_name(state)}")
    n = len(state.labels)
    if not (len(state.before) == len(state.after) == len(state.kept) == n) or n == 0:
        raise ValueError(f"{fn}: state's labels, before, after and kept differ in length")
    return n


def _draw(ax, state, *, tick_labels: bool = True, grey: bool = True) -> None:
    """One state's rows on ``ax``, most likely at the top; ``grey``: dropped tokens' names
    in grey (not in panels that share their names)."""
    n = len(state.labels)
    y = np.arange(n)
    kept = np.asarray(state.kept, dtype=bool)
    before = np.asarray(state.before, dtype=float)
    after = np.asarray(state.after, dtype=float)
    ax.barh(y[kept], after[kept], height=0.7, color=SAMPLED, edgecolor="white", lw=0.5,
            label="_sampled", zorder=2)  # fmt: skip
    for row in y[~kept]:  # across the whole row: seen however small its probability was
        ax.axhspan(row - 0.35, row + 0.35, facecolor=MASKED_FACE, edgecolor=MASKED_EDGE,
                   hatch=MASKED_HATCH, lw=0.8, label="_dropped", zorder=1)  # fmt: skip
    ax.plot(before, y, linestyle="none", label="_model", zorder=3, **MODEL_TICK)
    if tick_labels:
        ax.set_yticks(y, labels=list(state.labels))
        ax.tick_params(axis="y", labelsize=FONT["label"], length=0)
        for tick in ax.get_yticklabels():
            tick.set_fontfamily(MONO)  # I and l, O and 0 told apart
        for tick, k in zip(ax.get_yticklabels(), kept, strict=True):
            if not k and grey:
                tick.set_color(DROPPED_LABEL)
    else:  # a panel sharing the first panel's rows: its labels name them
        ax.tick_params(axis="y", labelleft=False, length=0)
    ax.set_ylim(n - 0.5, -0.6)  # most likely on top
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
    ax.grid(True, axis="x", color="0.9", lw=0.8, zorder=0)
    ax.set_axisbelow(True)


def _lines(phrases: list[str], width: int) -> str:
    """``phrases`` joined by commas, a line break between two where a line would pass
    ``width`` characters (a phrase is never broken)."""
    lines = [phrases[0]]
    for phrase in phrases[1:]:
        if len(lines[-1]) + 2 + len(phrase) > width:
            lines[-1] += ","
            lines.append(phrase)
        else:
            lines[-1] += ", " + phrase
    return "\n".join(lines)


def _right(states) -> float:
    """The probability axis's end: room past the longest bar or tick."""
    most = max(max(float(np.max(s.before)), float(np.max(s.after))) for s in states)
    return min(1.0, most * 1.12) if most < 0.9 else 1.05


def sampling_view(state, ax=None):
    """The sampling explorer's figure (``state`` a :class:`attnlib.explorers.SamplingState`).

    One row per shown token, most likely on top: a black tick at the model's probability
    (temperature 1, nothing removed); a filled blue bar at the probability sampled from
    (temperature and filters applied, renormalised over the kept tokens); for a token the
    filters drop, a hatched grey band across its row instead, and its name in grey. The
    title gives the settings, how many tokens of the vocabulary are kept, the mass they
    held and the entropy left; the y label the end of the prompt, if the state has one.

    Returns
    -------
    Axes — ``ax.patches``: the kept tokens' bars, then the dropped tokens' bands;
    ``ax.lines[0]`` the model's ticks.
    """
    n = _check_state("sampling_view", state)
    ax = new_axes(ax, figsize=(8.0, ROW_INCHES * n + 1.9))
    with course_style():
        _draw(ax, state)
        ax.set_xlim(0, _right([state]))
        ax.set_xlabel(f"probability (the {n} most likely of {state.vocab_size} shown)")
        if state.prompt is not None:
            ax.set_ylabel(f"next token after '{state.prompt_end()}'")
        ax.set_title(
            f"{', '.join(state.settings())}: keeps {state.n_kept} of {state.vocab_size}\n"
            f"mass kept {state.kept_mass:.2f} (before renormalising), entropy "
            f"{state.entropy:.2f} nats (model {state.entropy_before:.2f})",
            fontsize=FONT["legend"] + 1,
        )
        ax.legend(
            handles=_legend_handles(),
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16),
            ncol=3,
            fontsize=FONT["legend"],
        )
    return ax


def sampling_views(states: Sequence, *, title: str | None = None):
    """Several settings side by side on one probability axis: the lesson's static figure.

    Parameters
    ----------
    states : sequence of SamplingState — one panel each, left to right (at most 5, to stay
        readable in 8 in). When all list the same tokens (the same logits), only the first
        panel names them.
    title : str, optional — above the panels; default the end of the prompt, if every
        state has the same one.

    Returns
    -------
    Figure — ``fig.axes`` holds one panel per state, in order; its legend is the figure's.
    """
    states = list(states)
    if not states:
        raise ValueError("sampling_views: states is empty")
    if len(states) > 5:
        raise ValueError(f"sampling_views: at most 5 states fit in 8 in, got {len(states)}")
    rows = max(_check_state("sampling_views", s) for s in states)
    same = len({tuple(s.ids) for s in states}) == 1
    n = len(states)
    with course_style():
        fig, axes = plt.subplots(
            1,
            n,
            figsize=fit_width(0.9 + 1.8 * n, ROW_INCHES * rows + 2.3),
            layout="constrained",
            sharex=True,
            sharey=same,
            squeeze=False,
        )
        axes = list(axes[0])
        for i, (ax, s) in enumerate(zip(axes, states, strict=True)):
            _draw(ax, s, tick_labels=i == 0 or not same, grey=not same)
            head = _lines(s.settings(), 17 if n > 3 else 24)
            ax.set_title(f"{head}\nkeeps {s.n_kept}, {s.entropy:.2f} nats", fontsize=FONT["legend"])
            ax.set_xlabel("probability")
        axes[0].set_xlim(0, _right(states))
        prompts = {s.prompt for s in states}
        if title is None and len(prompts) == 1 and states[0].prompt is not None:
            title = f"next token after '{states[0].prompt_end()}'"
        if title:
            fig.suptitle(title, fontsize=FONT["title"])
        fig.legend(
            handles=_legend_handles(), loc="outside lower center", ncol=3, fontsize=FONT["legend"]
        )
    return fig
