"""More interactive explorers for lectures (ipywidgets), beside :mod:`attnlib.explorers.scale`.

Each explorer comes in two parts, so it can be tested without a browser:

* a pure function — widget values in, everything the explorer shows out (a frozen
  dataclass): :func:`query_state`, :func:`mask_state`, :func:`head_state`;
* a builder returning the ipywidgets box: :func:`query_explorer`, :func:`mask_explorer`,
  :func:`head_explorer`. Every change of a control calls the pure function and redraws;
  setting ``box.<control>.value`` from code does what moving it does. The box's ``state``
  attribute is the state currently shown, ``readout`` the HTML numbers, ``image`` the PNG.

Figures are drawn on a matplotlib Agg canvas (no pyplot state) with :mod:`attnlib.plot`.
Widgets are not compared by nbval: a lesson keeps the static figure that stands in for
its explorer.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from attnlib.core import softmax
from attnlib.masks import causal_mask, padding_mask

__all__ = [
    "MASK_MODES",
    "HeadState",
    "MaskState",
    "QueryState",
    "head_explorer",
    "head_state",
    "mask_explorer",
    "mask_state",
    "query_explorer",
    "query_state",
]

D_K_CHOICES = (2, 4, 8, 16, 32, 64, 128, 256, 512)
MASK_MODES = ("none", "causal", "padding", "causal + padding")


def _entropy(w: np.ndarray) -> np.ndarray:
    """Entropy in nats over the last axis (0·log 0 = 0)."""
    w = np.asarray(w, dtype=np.float64)
    logs = np.log(np.where(w > 0, w, 1.0))
    return -(w * logs).sum(axis=-1)


def _png(draw, figsize) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from attnlib.plot._base import course_style

    with course_style():
        fig = Figure(figsize=figsize, layout="constrained")
        FigureCanvasAgg(fig)
        draw(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    return buf.getvalue()


# ------------------------------------------------------------ query direction, d_k, temperature


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
    # values: points on a circle, one per key, so the blend is a point inside it
    t = 2 * np.pi * np.arange(seq_k) / seq_k
    values = np.stack([np.cos(t), np.sin(t)], axis=1)  # (seq_k, 2)
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
        t = 2 * np.pi * np.arange(seq_k) / seq_k
        v = np.stack([np.cos(t), np.sin(t)], axis=1)  # (seq_k, 2)
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
    if labels is not None:
        labels = tuple(str(t) for t in labels)
        if len(labels) != seq_k:
            raise ValueError(f"query_state: labels has {len(labels)} names for {seq_k} keys")
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
    d_k = 16 if d_k is None else d_k
    if int(d_k) != d_k or d_k < 1:
        raise ValueError(f"query_state: d_k must be a positive int, got {d_k!r}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"query_state: temperature must be finite and > 0, got {temperature!r}")
    if not math.isfinite(angle):
        raise ValueError(f"query_state: angle must be finite, got {angle!r}")
    if int(seq_k) != seq_k or seq_k < 2:
        raise ValueError(f"query_state: seq_k must be an int >= 2, got {seq_k!r}")
    length = math.sqrt(d_k) if length is None else float(length)
    if not (math.isfinite(length) and length > 0):
        raise ValueError(f"query_state: length must be finite and > 0, got {length!r}")
    if keys is None:
        keys, plane, values = _query_setup(int(d_k), int(seq_k), int(seed))
        if labels is not None:
            labels = tuple(str(t) for t in labels)
            if len(labels) != seq_k:
                raise ValueError(f"query_state: labels has {len(labels)} names for {seq_k} keys")
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
        entropy=float(_entropy(weights)),
        max_weight=float(weights.max()),
        labels=labels,
    )


def render_query(state: QueryState) -> bytes:
    """The query explorer's figure (scores, weights, values and their blend) as PNG."""
    from attnlib.plot import bars

    def draw(fig):
        ax_s, ax_w, ax_v = fig.subplots(1, 3)
        labels = [state.key_name(j) for j in range(state.seq_k)]
        bars(state.scores, labels=labels, ax=ax_s, title="scores")
        bars(state.weights, labels=labels, ax=ax_w, title="weights")
        ax_w.set_ylim(0, 1)
        v, o = state.values, state.output
        ax_v.scatter(v[:, 0], v[:, 1], s=40 + 400 * state.weights, color="tab:blue")
        names: dict[tuple[float, float], list[str]] = {}  # equal values share one label
        for j, (x, y) in enumerate(v):
            name = f"v{j}" if state.labels is None else state.labels[j]
            at = names.setdefault((float(x), float(y)), [])
            if name not in at:
                at.append(name)
        for (x, y), at in names.items():
            ax_v.annotate(", ".join(at), (x, y), textcoords="offset points", xytext=(6, 4))
        ax_v.scatter([o[0]], [o[1]], marker="*", s=200, color="tab:red", label="output")
        lim = max(1.4, 1.2 * float(np.abs(v).max()))
        ax_v.set_xlim(-lim, lim)
        ax_v.set_ylim(-lim, lim)
        ax_v.set_aspect("equal")
        ax_v.set_title("values and their blend")
        ax_v.legend(loc="lower right")

    return _png(draw, (10.5, 3.2))


def query_explorer(
    angle: float = 30.0,
    d_k: int | None = None,
    temperature: float = 1.0,
    *,
    seq_k: int = 6,
    seed: int = 0,
    keys=None,
    values=None,
    plane=None,
    length: float | None = None,
    labels=None,
):
    """Turn one query, widen the keys, change the temperature; watch the weights.

    Without ``keys`` the keys are random and the d_k slider (default 16, one of
    :data:`D_K_CHOICES`) redraws them wider. With a lesson's own ``keys`` (and ``values``,
    ``plane``, ``length``, ``labels``: see :func:`query_state`) d_k is fixed and its slider
    is disabled.

    Returns
    -------
    ipywidgets.VBox
        Attributes: ``angle_slider``, ``d_k_slider``, ``temperature_slider`` (log scale),
        ``scaled_checkbox`` (divide by √d_k), ``readout``, ``image``, ``state``.
    """
    import ipywidgets as W

    given = {"keys": keys, "values": values, "plane": plane, "labels": labels}
    first = query_state(angle, d_k, temperature, seq_k=seq_k, seed=seed, length=length, **given)
    if keys is None and first.d_k not in D_K_CHOICES:
        raise ValueError(f"query_explorer: d_k must be one of {D_K_CHOICES}, got {d_k!r}")
    angle_s = W.FloatSlider(
        value=angle, min=-180, max=180, step=5, description="angle °", continuous_update=False
    )
    d_k_s = W.SelectionSlider(
        options=list(D_K_CHOICES) if keys is None else [first.d_k],
        value=first.d_k,
        description="d_k",
        disabled=keys is not None,
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
    scaled_c = W.Checkbox(value=True, description="divide by √d_k")
    readout, image = W.HTML(), W.Image(format="png")
    box = W.VBox([W.HBox([angle_s, d_k_s]), W.HBox([temp_s, scaled_c]), readout, image])

    def update(*_):
        state = query_state(
            angle_s.value,
            d_k_s.value,
            temp_s.value,
            scaled=scaled_c.value,
            seq_k=seq_k,
            seed=seed,
            length=length,
            **given,
        )
        box.state = state
        readout.value = f"<code>{state.summary()}</code>"
        image.value = render_query(state)

    for w in (angle_s, d_k_s, temp_s, scaled_c):
        w.observe(update, names="value")
    box.angle_slider, box.d_k_slider, box.temperature_slider = angle_s, d_k_s, temp_s
    box.scaled_checkbox, box.readout, box.image = scaled_c, readout, image
    update()
    return box


# ------------------------------------------------------------ mask editor


@dataclass(frozen=True)
class MaskState:
    """What the mask editor shows.

    Attributes
    ----------
    mode : one of :data:`MASK_MODES`. length : int — real tokens (padding after them).
    scores : ndarray of shape (seq, seq) — fixed pre-softmax scores.
    mask : bool ndarray of shape (seq, seq) — True = may attend.
    weights : ndarray of shape (seq, seq) — ``softmax(scores, mask=mask)``.
    visible : int ndarray of shape (seq,) — keys each query may see.
    """

    mode: str
    length: int
    scores: np.ndarray
    mask: np.ndarray
    weights: np.ndarray
    visible: np.ndarray

    @property
    def seq(self) -> int:
        return self.scores.shape[0]

    def summary(self) -> str:
        return (
            f"mode {self.mode}, length {self.length} of {self.seq}: keys visible per query "
            f"{self.visible.tolist()}; masked weights sum to "
            f"{float(self.weights[~self.mask].sum()):.1f}"
        )


def mask_state(mode: str, length: int | None = None, *, seq: int = 6, seed: int = 0) -> MaskState:
    """Masked attention weights of ``seq`` tokens under ``mode`` (pure function).

    ``length`` (default ``seq``) is the number of real tokens; with a padding mode, keys
    at positions ``>= length`` are hidden from every query.
    """
    if mode not in MASK_MODES:
        raise ValueError(f"mask_state: mode must be one of {MASK_MODES}, got {mode!r}")
    if int(seq) != seq or seq < 1:
        raise ValueError(f"mask_state: seq must be a positive int, got {seq!r}")
    length = seq if length is None else length
    if int(length) != length or not 1 <= length <= seq:
        raise ValueError(f"mask_state: length must be an int in 1..seq={seq}, got {length!r}")
    scores = np.random.default_rng(seed).standard_normal((seq, seq))  # (seq, seq)
    mask = np.ones((seq, seq), dtype=bool)
    if "causal" in mode:
        mask &= causal_mask(seq)
    if "padding" in mode:
        mask &= padding_mask([int(length)], seq)[0]  # (1, seq) broadcasts over queries
    weights = softmax(scores, mask=mask)  # (seq, seq)
    return MaskState(
        mode=mode,
        length=int(length),
        scores=scores,
        mask=mask,
        weights=weights,
        visible=mask.sum(axis=1),
    )


def render_mask(state: MaskState) -> bytes:
    """The mask editor's figure (scores, mask, masked weights) as PNG."""
    from attnlib.plot import heatmap

    def draw(fig):
        ax_s, ax_m, ax_w = fig.subplots(1, 3)
        heatmap(state.scores, ax=ax_s, kind="scores", title="scores", colorbar=False)
        heatmap(
            state.mask.astype(float),
            ax=ax_m,
            title="mask (1 = may attend)",
            fmt="{:.0f}",
            colorbar=False,
        )
        heatmap(state.weights, ax=ax_w, title="masked weights", colorbar=False)

    return _png(draw, (11.0, 3.4))


def mask_explorer(mode: str = "causal", length: int | None = None, *, seq: int = 6, seed: int = 0):
    """Toggle causal/padding masks and the real length; watch the weights re-normalise.

    Returns
    -------
    ipywidgets.VBox
        Attributes: ``mode_buttons`` (ToggleButtons over :data:`MASK_MODES`),
        ``length_slider``, ``readout``, ``image``, ``state``.
    """
    import ipywidgets as W

    first = mask_state(mode, length, seq=seq, seed=seed)  # validates
    mode_b = W.ToggleButtons(options=list(MASK_MODES), value=mode, description="mask")
    length_s = W.IntSlider(
        value=first.length, min=1, max=seq, description="length", continuous_update=False
    )
    readout, image = W.HTML(), W.Image(format="png")
    box = W.VBox([mode_b, length_s, readout, image])

    def update(*_):
        state = mask_state(mode_b.value, length_s.value, seq=seq, seed=seed)
        box.state = state
        readout.value = f"<code>{state.summary()}</code>"
        image.value = render_mask(state)

    mode_b.observe(update, names="value")
    length_s.observe(update, names="value")
    box.mode_buttons, box.length_slider, box.readout, box.image = mode_b, length_s, readout, image
    update()
    return box


# ------------------------------------------------------------ head selector


@dataclass(frozen=True)
class HeadState:
    """What the head selector shows for one head.

    Attributes
    ----------
    head : int. n_heads : int.
    weights : ndarray of shape (seq_q, seq_k) — that head's attention map.
    argmax : int ndarray of shape (seq_q,) — the key each query weighs most.
    entropy : ndarray of shape (seq_q,) — per-query entropy in nats.
    """

    head: int
    n_heads: int
    weights: np.ndarray
    argmax: np.ndarray
    entropy: np.ndarray

    def summary(self, keys=None) -> str:
        looks = [keys[j] if keys is not None else str(j) for j in self.argmax.tolist()]
        return (
            f"head {self.head} of {self.n_heads}: mean entropy {self.entropy.mean():.2f} nats; "
            f"each query's top key: {', '.join(looks)}"
        )


def _as_head_weights(fn: str, weights) -> np.ndarray:
    if hasattr(weights, "detach"):
        weights = weights.detach().cpu().numpy()
    w = np.asarray(weights)
    if w.ndim != 3:
        raise ValueError(
            f"{fn}: weights must have shape (n_heads, seq_q, seq_k), got shape {w.shape} "
            "(take one batch element: weights[0])"
        )
    if not np.issubdtype(w.dtype, np.floating):
        raise TypeError(f"{fn}: weights must be floating point, got dtype {w.dtype}")
    w = w.astype(np.float64)
    if not np.all(np.isfinite(w)) or w.min() < -1e-6:
        raise ValueError(f"{fn}: weights must be finite and >= 0 (post-softmax weights)")
    sums = w.sum(axis=-1)
    if not np.all((np.abs(sums - 1) < 1e-3) | (np.abs(sums) < 1e-6)):
        raise ValueError(
            f"{fn}: each row of weights must sum to 1 (or 0 if fully masked), got row sums "
            f"from {sums.min():.4g} to {sums.max():.4g} — are these scores, not weights?"
        )
    return w


def head_state(weights, head: int) -> HeadState:
    """One head's map from ``weights`` of shape (n_heads, seq_q, seq_k) (pure function)."""
    w = _as_head_weights("head_state", weights)
    n_heads = w.shape[0]
    if int(head) != head or not 0 <= head < n_heads:
        raise ValueError(f"head_state: head must be an int in 0..{n_heads - 1}, got {head!r}")
    m = w[int(head)]  # (seq_q, seq_k)
    return HeadState(
        head=int(head), n_heads=n_heads, weights=m, argmax=m.argmax(axis=-1), entropy=_entropy(m)
    )


def render_head(state: HeadState, queries=None, keys=None) -> bytes:
    """One head's attention map as PNG."""
    from attnlib.plot import heatmap

    seq_q, seq_k = state.weights.shape
    size = (max(4.0, 0.45 * seq_k + 2), max(3.0, 0.4 * seq_q + 1.2))

    def draw(fig):
        heatmap(
            state.weights,
            queries=queries,
            keys=keys,
            ax=fig.subplots(),
            title=f"head {state.head}",
        )

    return _png(draw, size)


def head_explorer(weights, *, queries=None, keys=None, head: int = 0):
    """Step through the heads of a trained model's attention maps.

    Parameters
    ----------
    weights : ndarray or Tensor of shape (n_heads, seq_q, seq_k)
        Post-softmax weights of one sequence (e.g. ``weights[0]`` of a batch).
    queries, keys : sequence of str, optional
        Token labels for the rows and columns.

    Returns
    -------
    ipywidgets.VBox
        Attributes: ``head_slider``, ``readout``, ``image``, ``state``.
    """
    import ipywidgets as W

    w = _as_head_weights("head_explorer", weights)
    for name, labels, n in (("queries", queries, w.shape[1]), ("keys", keys, w.shape[2])):
        if labels is not None and len(labels) != n:
            raise ValueError(f"head_explorer: {name} has {len(labels)} labels for {n} positions")
    head_state(w, head)  # validates head
    head_s = W.IntSlider(
        value=head, min=0, max=w.shape[0] - 1, description="head", continuous_update=False
    )
    readout, image = W.HTML(), W.Image(format="png")
    box = W.VBox([head_s, readout, image])

    def update(*_):
        state = head_state(w, head_s.value)
        box.state = state
        readout.value = f"<code>{state.summary(keys)}</code>"
        image.value = render_head(state, queries, keys)

    head_s.observe(update, names="value")
    box.head_slider, box.readout, box.image = head_s, readout, image
    update()
    return box
