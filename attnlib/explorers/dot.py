"""The dot-product explorer (lesson 01): turn a 2-D query and watch its scores.

:func:`dot_state` is the pure part — an angle in; the query, its dot product and cosine
with every key out (a :class:`DotState`); :func:`dot_explorer` wires a slider to it
(:mod:`attnlib.explorers._render`), so it can be tested without a browser. Scores here are
raw dot products: no scaling and no softmax (those come in lessons 03 and 04).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnlib._validate import check_number
from attnlib.explorers._render import explorer_box, figure_png

__all__ = ["DotState", "dot_explorer", "dot_state", "render_dot"]


@dataclass(frozen=True)
class DotState:
    """What the dot-product explorer shows.

    Attributes
    ----------
    angle : float — the query's direction in degrees (0° = along feature 0).
    query : ndarray of shape (2,) — the query, of the given length.
    keys : ndarray of shape (seq_k, 2).
    scores : ndarray of shape (seq_k,) — ``keys @ query``.
    cosines : ndarray of shape (seq_k,) — cos of the angle between the query and each key.
    labels : tuple of str — the keys' names.
    """

    angle: float
    query: np.ndarray
    keys: np.ndarray
    scores: np.ndarray
    cosines: np.ndarray
    labels: tuple[str, ...]

    def summary(self) -> str:
        parts = ", ".join(
            f"{name} {s:+.1f}" for name, s in zip(self.labels, self.scores, strict=True)
        )
        best = self.labels[int(np.argmax(self.scores))]
        return f"query at {self.angle:.0f}°: scores {parts}; best key {best}"


def dot_state(angle: float, keys, *, length: float = 1.0, labels=None) -> DotState:
    """Scores of a 2-D query of ``length`` at ``angle`` degrees against ``keys`` (pure).

    Parameters
    ----------
    angle : float
        Direction of the query in degrees, measured from feature 0 towards feature 1.
    keys : array-like of shape (seq_k, 2)
    length : float
        Length of the query (positive).
    labels : sequence of str, optional
        Names of the keys; default ``k0, k1, ...``.
    """
    fn = "dot_state"
    angle = check_number(fn, "angle", angle)
    length = check_number(fn, "length", length, positive=True)
    k = np.asarray(keys, dtype=float)
    if k.ndim != 2 or k.shape[1] != 2 or k.shape[0] == 0:
        raise ValueError(f"{fn}: keys must have shape (seq_k, 2), got {k.shape}")
    names = tuple(labels) if labels is not None else tuple(f"k{j}" for j in range(len(k)))
    if len(names) != len(k):
        raise ValueError(f"{fn}: {len(names)} labels for {len(k)} keys")
    t = math.radians(angle)
    query = length * np.array([math.cos(t), math.sin(t)])  # (2,)
    scores = k @ query  # (seq_k,)
    norms = np.linalg.norm(k, axis=-1) * length
    cosines = np.divide(scores, norms, out=np.zeros_like(scores), where=norms > 0)
    return DotState(float(angle), query, k, scores, cosines, names)


def render_dot(state: DotState) -> bytes:
    """The explorer's figure: arrows of the query and keys (left), the scores (right)."""
    from attnlib.plot import PALETTE, bars, vectors

    limit = float(np.linalg.norm(state.keys, axis=-1).max() * np.linalg.norm(state.query))

    def draw(fig):
        ax_v, ax_s = fig.subplots(1, 2)
        vectors(
            np.vstack([state.query, state.keys]),
            labels=["query", *state.labels],
            ax=ax_v,
            title="query and keys",
        )
        bars(
            state.scores,
            labels=list(state.labels),
            ax=ax_s,
            highlight=int(np.argmax(state.scores)),
            colors=[PALETTE[(j + 1) % len(PALETTE)] for j in range(len(state.scores))],
            ylabel="score  q · k",
            title="scores",
        )  # each key's bar in its arrow's colour (the query's arrow has PALETTE[0])
        ax_s.set_ylim(-1.1 * limit, 1.1 * limit)

    return figure_png(draw, (8.0, 3.2))


def dot_explorer(keys, *, angle: float = 0.0, length: float = 1.0, labels=None):
    """Turn a 2-D query with a slider; watch its dot product with every key.

    Returns
    -------
    ipywidgets.VBox
        Attributes: ``angle_slider``, ``readout``, ``image``, ``state``.
    """
    import ipywidgets as W

    dot_state(angle, keys, length=length, labels=labels)  # validates
    angle_s = W.FloatSlider(
        value=angle, min=0, max=360, step=5, description="query angle °", continuous_update=False
    )
    return explorer_box(
        [angle_s],
        {"angle_slider": angle_s},
        lambda: dot_state(angle_s.value, keys, length=length, labels=labels),
        render_dot,
    )
