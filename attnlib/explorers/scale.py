"""The scaling explorer (lesson 04).

:func:`scaling_explorer` shows how one query's weights react to the key width
d_k and to the scale multiplying q·k. It is split in two so that it can be tested without
a browser:

* :func:`explorer_state` — a pure function: slider values in, every number and array the
  explorer shows out (an :class:`ExplorerState`);
* :func:`scaling_explorer` — builds the widgets and returns them; moving a slider calls
  :func:`explorer_state` and redraws. Setting ``explorer.d_k_slider.value`` from code does
  exactly what dragging the slider does.

The figure is rendered to PNG with matplotlib's Agg canvas (no pyplot state is touched)
and shown in an ``ipywidgets.Image``; the numbers go to an ``ipywidgets.HTML`` readout
(:mod:`attnlib.explorers._render`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from attnlib._validate import check_choice, check_int, check_number
from attnlib.core import softmax
from attnlib.explorers._render import explorer_box, figure_png
from attnlib.tasks.scaling import softmax_entropy, softmax_jacobian

__all__ = ["D_K_CHOICES", "ExplorerState", "explorer_state", "render_png", "scaling_explorer"]

D_K_CHOICES = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
SCALE_RANGE = (1e-3, 10**0.5)  # what the scale slider spans (log scale)


@dataclass(frozen=True)
class ExplorerState:
    """Everything the explorer shows for one (d_k, scale).

    Attributes
    ----------
    d_k, scale, seq_k : the setting.
    raw : ndarray of shape (seq_k,) — the shown query's raw dot products with its keys.
    weights : ndarray of shape (seq_k,) — ``softmax(scale · raw)``.
    entropy, max_weight, jacobian_norm : float — of those weights.
    curve_scales : ndarray of shape (n_curve,) — scales of the entropy curve.
    curve_entropy : ndarray of shape (n_curve,) — mean entropy over n_rows queries.
    curve_at_scale : float — the same mean entropy at ``scale``.
    """

    d_k: int
    scale: float
    seq_k: int
    raw: np.ndarray
    weights: np.ndarray
    entropy: float
    max_weight: float
    jacobian_norm: float
    curve_scales: np.ndarray
    curve_entropy: np.ndarray
    curve_at_scale: float

    def summary(self) -> str:
        """One line of the readout (the numbers the explorer prints)."""
        return (
            f"d_k = {self.d_k}, scale = {self.scale:.4g} (1/√d_k = {1 / math.sqrt(self.d_k):.4g}): "
            f"entropy {self.entropy:.2f} of {math.log(self.seq_k):.2f} nats, "
            f"largest weight {self.max_weight:.2f}, ‖diag(p) − ppᵀ‖ = {self.jacobian_norm:.2g}, "
            f"mean entropy over queries {self.curve_at_scale:.2f}"
        )


@lru_cache(maxsize=32)
def _raw_rows(d_k: int, seq_k: int, n_rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, d_k])
    q = rng.standard_normal((n_rows, d_k))  # (n_rows, d_k)
    k = rng.standard_normal((n_rows, seq_k, d_k))  # (n_rows, seq_k, d_k)
    raw = np.einsum("nd,nkd->nk", q, k)  # (n_rows, seq_k)
    raw.setflags(write=False)
    return raw


def explorer_state(
    d_k: int, scale: float, *, seq_k: int = 16, n_rows: int = 200, seed: int = 0
) -> ExplorerState:
    """What the explorer shows at ``d_k`` and ``scale`` (pure: same input, same output).

    Queries and keys have standard-normal components, drawn once per (d_k, seed); the
    first query is the one shown, all ``n_rows`` give the mean-entropy curve.
    """
    d_k = check_int("explorer_state", "d_k", d_k, minimum=1)
    scale = check_number("explorer_state", "scale", scale, minimum=0)
    raw = _raw_rows(int(d_k), seq_k, n_rows, seed)  # (n_rows, seq_k)
    w = softmax(scale * raw[0])  # (seq_k,)
    curve_scales = np.geomspace(*SCALE_RANGE, 60)
    curve = softmax_entropy(softmax(curve_scales[:, None, None] * raw)).mean(axis=1)  # (60,)
    return ExplorerState(
        d_k=int(d_k),
        scale=float(scale),
        seq_k=seq_k,
        raw=raw[0].copy(),
        weights=w,
        entropy=float(softmax_entropy(w)),
        max_weight=float(w.max()),
        jacobian_norm=float(np.linalg.norm(softmax_jacobian(w))),
        curve_scales=curve_scales,
        curve_entropy=curve,
        curve_at_scale=float(softmax_entropy(softmax(scale * raw)).mean()),
    )


def render_png(state: ExplorerState) -> bytes:
    """The explorer's figure for ``state`` as PNG bytes (Agg canvas, no pyplot)."""
    from attnlib.plot import explorer_view

    return figure_png(lambda fig: explorer_view(state, axes=fig.subplots(1, 2)), (8.0, 3.2))


def scaling_explorer(
    d_k: int = 64,
    scale: float | None = None,
    *,
    tied: bool = False,
    seq_k: int = 16,
    seed: int = 0,
):
    """Sliders for d_k and the scale, the weights of one query, and the entropy curve.

    Parameters
    ----------
    d_k : int
        Starting width, one of :data:`D_K_CHOICES`.
    scale : float, optional
        Starting scale; default 1/√d_k.
    tied : bool, default False
        Start with the scale tied to 1/√d_k (``scale`` is then ignored).

    Returns
    -------
    ipywidgets.VBox
        Display it as a cell's last expression. Its attributes ``d_k_slider``,
        ``scale_slider``, ``tie_toggle`` (a toggle button: while it is down the scale is
        1/√d_k and follows d_k, and the scale slider is locked; up, the scale slider is
        free and keeps its value when d_k moves), ``readout`` (HTML), ``image`` (PNG) and
        ``state`` (the current :class:`ExplorerState`) let code and tests drive it.

    Examples
    --------
    The class demo: tie the scale, move d_k (the scale follows), untie, move d_k again
    (the scale stays).

    >>> box = scaling_explorer(d_k=64)
    >>> box.tie_toggle.value = True
    >>> box.d_k_slider.value = 1024
    >>> round(box.scale_slider.value, 6)
    0.03125
    >>> box.tie_toggle.value = False
    >>> box.d_k_slider.value = 4
    >>> round(box.scale_slider.value, 6), box.state.d_k
    (0.03125, 4)
    """
    import ipywidgets as W

    check_choice("scaling_explorer", "d_k", d_k, D_K_CHOICES)
    tied = bool(tied)
    scale = 1 / math.sqrt(d_k) if scale is None or tied else float(scale)
    lo, hi = (math.log10(s) for s in SCALE_RANGE)
    d_k_slider = W.SelectionSlider(
        options=list(D_K_CHOICES), value=d_k, description="d_k", continuous_update=False
    )
    scale_slider = W.FloatLogSlider(
        value=scale,
        base=10,
        min=lo,
        max=hi,
        step=0.05,
        description="scale",
        readout_format=".3g",
        continuous_update=False,
        disabled=tied,
    )
    tie = W.ToggleButton(
        value=tied,
        description="scale = 1/√d_k",
        tooltip="Down: the scale is tied to 1/√d_k and follows d_k. Up: the scale slider is free.",
        icon="link" if tied else "unlink",
    )

    def standard() -> float:
        return 1 / math.sqrt(d_k_slider.value)

    def follow_d_k(_):
        # registered before the explorer's own redraw, so that a tied scale has moved
        # before the figure is drawn for the new d_k
        if tie.value:
            scale_slider.value = standard()

    d_k_slider.observe(follow_d_k, names="value")

    last: dict[tuple[int, float], bytes] = {}

    def render_once(state: ExplorerState) -> bytes:
        # moving d_k while tied moves two sliders: draw that (d_k, scale) once
        key = (state.d_k, state.scale)
        if key not in last:
            last.clear()
            last[key] = render_png(state)
        return last[key]

    box = explorer_box(
        [(d_k_slider, scale_slider, tie)],
        {"d_k_slider": d_k_slider, "scale_slider": scale_slider},
        lambda: explorer_state(d_k_slider.value, scale_slider.value, seq_k=seq_k, seed=seed),
        render_once,
    )

    def on_tie(change):
        tie.icon = "link" if change["new"] else "unlink"
        scale_slider.disabled = bool(change["new"])
        if change["new"]:
            scale_slider.value = standard()

    tie.observe(on_tie, names="value")
    box.tie_toggle = tie
    return box
