"""The query explorer (lesson 03): turn one query, widen the keys, change the temperature.

:func:`query_state` is the pure part — angle, d_k, temperature in; scores, weights and
the blended value out (a :class:`QueryState`); :func:`query_explorer` wires the widgets
to it (:mod:`attnlib.explorers._render`), so it can be tested without a browser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from attnlib._validate import check_int, check_number
from attnlib.core import softmax
from attnlib.explorers._render import explorer_box, figure_png
from attnlib.tasks.scaling import softmax_entropy

__all__ = [
    "D_K_CHOICES",
    "VALUE_NAMES",
    "QueryState",
    "query_explorer",
    "query_state",
    "render_query",
]

D_K_CHOICES = (2, 4, 8, 16, 32, 64, 128, 256, 512)
VALUE_NAMES = ("value feature 0", "value feature 1")  # the values' axes, unless named


@dataclass(frozen=True)
class QueryState:
    """What the query explorer shows.

    Attributes
    ----------
    angle, d_k, temperature, scaled : the setting (angle in degrees).
    query : ndarray of shape (d_k,) — the query.
    keys : ndarray of shape (seq_k, d_k).
    values : ndarray of shape (seq_k, 2) — 2-D values, so the blend can be drawn.
    raw : ndarray of shape (seq_k,) — ``keys @ query``.
    scores : ndarray of shape (seq_k,) — ``raw / (√d_k if scaled else 1) / temperature``.
    weights : ndarray of shape (seq_k,) — ``softmax(scores)``.
    output : ndarray of shape (2,) — ``weights @ values``, the blended value.
    entropy, max_weight : float — of ``weights``.
    labels : tuple of str or None — names of the keys (and values), if given.
    value_names : (str, str) — what the two coordinates of a value mean (the figure's axes).
    """

    angle: float
    d_k: int
    temperature: float
    scaled: bool
    query: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    raw: np.ndarray
    scores: np.ndarray
    weights: np.ndarray
    output: np.ndarray
    entropy: float
    max_weight: float
    labels: tuple[str, ...] | None = None
    value_names: tuple[str, str] = VALUE_NAMES

    @property
    def seq_k(self) -> int:
        return self.keys.shape[0]

    def key_name(self, j: int) -> str:
        """Key ``j``'s label, or ``"k<j>"``."""
        return self.labels[j] if self.labels is not None else f"k{j}"

    def summary(self) -> str:
        div = f"√d_k = {math.sqrt(self.d_k):.3g}" if self.scaled else "1 (not scaled)"
        return (
            f"angle {self.angle:.0f}°, d_k = {self.d_k}, divided by {div}, "
            f"temperature {self.temperature:.3g}: largest weight {self.max_weight:.2f} "
            f"(key {self.key_name(int(np.argmax(self.weights)))}), entropy {self.entropy:.2f} of "
            f"{math.log(self.seq_k):.2f} nats, output ({self.output[0]:.2f}, {self.output[1]:.2f})"
        )


def _circle(seq_k: int) -> np.ndarray:
    """Default values: ``seq_k`` points on the unit circle, so the blend is a point inside it."""
    t = 2 * np.pi * np.arange(seq_k) / seq_k
    return np.stack([np.cos(t), np.sin(t)], axis=1)  # (seq_k, 2)


def _as_labels(labels, seq_k: int) -> tuple[str, ...] | None:
    if labels is None:
        return None
    labels = tuple(str(t) for t in labels)
    if len(labels) != seq_k:
        raise ValueError(f"query_state: labels has {len(labels)} names for {seq_k} keys")
    return labels


def _as_value_names(value_names) -> tuple[str, str]:
    if value_names is None:
        return VALUE_NAMES
    if isinstance(value_names, str) or not hasattr(value_names, "__len__") or len(value_names) != 2:
        raise ValueError(
            f"query_state: value_names must be two names, one per value coordinate, "
            f"got {value_names!r}"
        )
    return (str(value_names[0]), str(value_names[1]))


@lru_cache(maxsize=32)
def _query_setup(d_k: int, seq_k: int, seed: int):
    """Keys with standard-normal components and the query plane, drawn once per (d_k, seed).

    The query turns in the plane of two orthonormal directions ``e0`` (towards key 0) and
    ``e1`` (towards key 1's part orthogonal to key 0); its length is √d_k, what a
    standard-normal vector has on average, so raw dot products grow like √d_k.
    """
    rng = np.random.default_rng([seed, d_k])
    keys = rng.standard_normal((seq_k, d_k))  # (seq_k, d_k)
    if d_k == 1:
        plane = np.array([[1.0], [0.0]])
    else:
        e0 = keys[0] / np.linalg.norm(keys[0])
        r = keys[1] - (keys[1] @ e0) * e0
        plane = np.stack([e0, r / np.linalg.norm(r)])  # (2, d_k)
    values = _circle(seq_k)  # (seq_k, 2)
    for a in (keys, plane, values):
        a.setflags(write=False)
    return keys, plane, values


def _as_given_setup(keys, values, plane, labels):
    """Validate a lesson's own keys/values/query plane; return read-only float64 copies."""
    k = np.array(keys, dtype=np.float64)
    if k.ndim != 2 or k.shape[0] < 2 or k.shape[1] < 1:
        raise ValueError(f"query_state: keys must have shape (seq_k >= 2, d_k), got {k.shape}")
    seq_k, d_k = k.shape
    if values is None:
        v = _circle(seq_k)  # (seq_k, 2)
    else:
        v = np.array(values, dtype=np.float64)
        if v.shape != (seq_k, 2):
            raise ValueError(
                f"query_state: values must have shape (seq_k, 2) = ({seq_k}, 2) to be drawn, "
                f"got {v.shape}"
            )
    if plane is None:
        raise ValueError("query_state: with your own keys, give plane of shape (2, d_k)")
    pl = np.array(plane, dtype=np.float64)
    if pl.shape != (2, d_k):
        raise ValueError(
            f"query_state: plane must have shape (2, d_k) = (2, {d_k}), got {pl.shape}"
        )
    norms = np.linalg.norm(pl, axis=1)
    if not np.all(norms > 0):
        raise ValueError("query_state: both rows of plane must be non-zero directions")
    pl = pl / norms[:, None]  # (2, d_k), unit rows
    labels = _as_labels(labels, seq_k)
    for a in (k, v, pl):
        a.setflags(write=False)
    return k, pl, v, labels


def query_state(
    angle: float,
    d_k: int | None = None,
    temperature: float = 1.0,
    *,
    scaled: bool = True,
    seq_k: int = 6,
    seed: int = 0,
    keys=None,
    values=None,
    plane=None,
    length: float | None = None,
    labels=None,
    value_names=None,
) -> QueryState:
    """One query against ``seq_k`` keys, turned by ``angle`` degrees (pure function).

    By default the keys are standard-normal, drawn from ``seed`` (``d_k`` defaults to 16):
    ``angle = 0`` points the query along key 0, ``90`` along key 1's part orthogonal to
    key 0, and the query has length √d_k. Scores are ``q·k_j / √d_k / temperature``
    (``scaled=False`` drops the √d_k).

    Parameters
    ----------
    keys : array of shape (seq_k, d_k), optional
        A lesson's own keys instead of random ones (``d_k`` and ``seq_k`` follow from it).
    values : array of shape (seq_k, 2), optional
        Their values (default: points on the unit circle).
    plane : array of shape (2, d_k)
        Required with ``keys``: the query is
        ``length · (cos(angle) · plane[0] + sin(angle) · plane[1])`` (rows normalised).
    length : float, optional
        The query's length; default √d_k.
    labels : sequence of str, optional
        Names of the keys, shown on the bars and in the summary.
    value_names : (str, str), optional
        What the two coordinates of a value mean, e.g. ``("thing", "action")``: the axes
        of the values' panel (default :data:`VALUE_NAMES`).
    """
    if keys is not None:
        keys_, plane_, values_, labels = _as_given_setup(keys, values, plane, labels)
        if d_k is not None and d_k != keys_.shape[1]:
            raise ValueError(
                f"query_state: d_k={d_k!r} but keys have shape {keys_.shape} (omit d_k)"
            )
        d_k, seq_k = keys_.shape[1], keys_.shape[0]
    elif values is not None or plane is not None:
        raise ValueError("query_state: values and plane are only used together with keys")
    fn = "query_state"
    value_names = _as_value_names(value_names)
    d_k = check_int(fn, "d_k", 16 if d_k is None else d_k, minimum=1)
    temperature = check_number(fn, "temperature", temperature, positive=True)
    angle = check_number(fn, "angle", angle)
    seq_k = check_int(fn, "seq_k", seq_k, minimum=2)
    if length is None:
        length = math.sqrt(d_k)
    length = check_number(fn, "length", length, positive=True)
    if keys is None:
        keys, plane, values = _query_setup(int(d_k), int(seq_k), int(seed))
        labels = _as_labels(labels, seq_k)
    else:
        keys, plane, values = keys_, plane_, values_
    rad = math.radians(angle)
    query = length * (math.cos(rad) * plane[0] + math.sin(rad) * plane[1])  # (d_k,)
    raw = keys @ query  # (seq_k,)
    scores = raw / (math.sqrt(d_k) if scaled else 1.0) / temperature  # (seq_k,)
    weights = softmax(scores)  # (seq_k,)
    output = weights @ values  # (2,)
    return QueryState(
        angle=float(angle),
        d_k=int(d_k),
        temperature=float(temperature),
        scaled=bool(scaled),
        query=query,
        keys=keys,
        values=values,
        raw=raw,
        scores=scores,
        weights=weights,
        output=output,
        entropy=float(softmax_entropy(weights)),
        max_weight=float(weights.max()),
        labels=labels,
        value_names=value_names,
    )


def _score_label(state: QueryState) -> str:
    """The scores' axis: what the dot product was divided by."""
    by = [name for name, on in (("√d_k", state.scaled), ("T", state.temperature != 1)) if on]
    if not by:
        return "score  q · k"
    return "score  q · k / " + (by[0] if len(by) == 1 else f"({' · '.join(by)})")


def render_query(state: QueryState) -> bytes:
    """The query explorer's figure (scores, weights, values and their blend) as PNG.

    Scores and weights are horizontal bars, one row per key named on the left (key 0 on
    top), so key names never crowd; every value axis is named and carries few ticks.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    from attnlib.plot import PALETTE

    def few_ticks(axis):
        axis.set_major_locator(MaxNLocator(nbins=3, steps=[1, 2, 5, 10]))

    def draw(fig):
        ax_s, ax_w, ax_v = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1.1]})
        rows = np.arange(state.seq_k)
        for ax, data in ((ax_s, state.scores), (ax_w, state.weights)):
            ax.barh(rows, data, height=0.7, color=PALETTE[0])
            ax.axvline(0, color="0.3", lw=0.8)
            ax.set_ylim(state.seq_k - 0.5, -0.5)  # key 0 on top, in reading order
        ax_s.set_yticks(rows, labels=[state.key_name(j) for j in rows])
        ax_w.set_yticks(rows, labels=[])  # the same rows as the scores, named once
        ax_s.set_ylabel("key")
        ax_s.set_xlabel(_score_label(state))
        few_ticks(ax_s.xaxis)
        ax_s.set_title("scores")
        ax_w.set_xlim(0, 1)
        ax_w.set_xticks([0, 0.5, 1], labels=["0", "0.5", "1"])
        ax_w.set_xlabel("weight")
        ax_w.set_title("weights")

        v, o = state.values, state.output
        ax_v.scatter(v[:, 0], v[:, 1], s=40 + 400 * state.weights, color=PALETTE[0])
        names: dict[tuple[float, float], list[str]] = {}  # equal values share one label
        for j, (x, y) in enumerate(v):
            name = f"v{j}" if state.labels is None else state.labels[j]
            at = names.setdefault((float(x), float(y)), [])
            if name not in at:
                at.append(name)
        # Points on one horizontal line would label into each other: along each line, from
        # left to right, labels go alternately above and below their point, each pair one
        # text line further out.
        ordered = sorted(names.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        rank = [
            sum(1 for (_, y0), _ in ordered[:i] if y0 == y) for i, ((_, y), _) in enumerate(ordered)
        ]
        for i, ((x, y), at) in zip(rank, ordered, strict=True):
            above = i % 2 == 0
            out = 9 + 14 * (i // 2)
            ax_v.annotate(
                ", ".join(at),
                (x, y),
                textcoords="offset points",
                xytext=(0, out if above else -out),
                ha="center",
                va="bottom" if above else "top",
            )
        ax_v.scatter([o[0]], [o[1]], marker="*", s=260, color=PALETTE[1])
        # a square window around the values and the origin, the same scale on both axes
        lo, hi = np.minimum(v.min(axis=0), 0.0), np.maximum(v.max(axis=0), 0.0)
        centre, half = (lo + hi) / 2, float((hi - lo).max()) / 2 + 0.45
        ax_v.set_xlim(centre[0] - half, centre[0] + half)
        ax_v.set_ylim(centre[1] - half, centre[1] + half)
        ax_v.set_aspect("equal")
        few_ticks(ax_v.xaxis)
        few_ticks(ax_v.yaxis)
        ax_v.set_xlabel(state.value_names[0])
        ax_v.set_ylabel(state.value_names[1])
        ax_v.set_title("values and their blend")
        handles = [  # fixed-size markers: a value's area on the plot is its weight
            Line2D([], [], ls="", marker="o", ms=9, color=PALETTE[0], label="values"),
            Line2D([], [], ls="", marker="*", ms=14, color=PALETTE[1], label="output"),
        ]
        fig.legend(  # below the values' panel, where constrained layout makes room
            handles=handles,
            loc="outside lower right",
            ncols=2,
            handletextpad=0.3,
            columnspacing=1.0,
        )

    return figure_png(draw, (8.0, 3.4))


def query_explorer(angle: float = 30.0, d_k: int | None = None, temperature: float = 1.0, **setup):
    """Turn one query, widen the keys, change the temperature; watch the weights.

    ``setup`` goes to :func:`query_state` as it is: ``seq_k`` and ``seed`` for random
    keys, or a lesson's own ``keys`` with ``values``, ``plane``, ``length`` and ``labels``;
    ``scaled`` (default True) is where the √d_k checkbox starts. Without ``keys`` the keys
    are random and the d_k slider (default 16, one of :data:`D_K_CHOICES`) redraws them
    wider; with ``keys`` d_k is fixed and its slider is disabled.

    Returns
    -------
    ipywidgets.VBox
        Attributes: ``angle_slider``, ``d_k_slider``, ``temperature_slider`` (log scale),
        ``scaled_checkbox`` (divide by √d_k), ``readout``, ``image``, ``state``.
    """
    import ipywidgets as W

    scaled = setup.pop("scaled", True)
    first = query_state(angle, d_k, temperature, scaled=scaled, **setup)
    random_keys = setup.get("keys") is None
    if random_keys and first.d_k not in D_K_CHOICES:
        raise ValueError(f"query_explorer: d_k must be one of {D_K_CHOICES}, got {d_k!r}")
    angle_s = W.FloatSlider(
        value=angle, min=-180, max=180, step=5, description="angle °", continuous_update=False
    )
    d_k_s = W.SelectionSlider(
        options=list(D_K_CHOICES) if random_keys else [first.d_k],
        value=first.d_k,
        description="d_k",
        disabled=not random_keys,
        continuous_update=False,
    )
    temp_s = W.FloatLogSlider(
        value=temperature,
        base=10,
        min=-1,
        max=1,
        step=0.05,
        description="temperature",
        readout_format=".3g",
        continuous_update=False,
    )
    scaled_c = W.Checkbox(value=bool(scaled), description="divide by √d_k")

    def compute():
        return query_state(angle_s.value, d_k_s.value, temp_s.value, scaled=scaled_c.value, **setup)

    controls = {
        "angle_slider": angle_s,
        "d_k_slider": d_k_s,
        "temperature_slider": temp_s,
        "scaled_checkbox": scaled_c,
    }
    return explorer_box([(angle_s, d_k_s), (temp_s, scaled_c)], controls, compute, render_query)
