"""Lesson 05's width sweep: how wide must a tied K = V head be?

One figure, two panels against ``d_head``: each wiring's accuracy after training (one dot
per seed, a line through their mean) and the step at which each head that got there first
reached the accuracy level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from attnlib.plot._base import course_style, series_style, subplots


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
