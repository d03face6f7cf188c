"""The mask editor (lesson 08): toggle causal and padding masks and the real length.

:func:`mask_state` is the pure part — mode and length in; the mask and the re-normalised
weights out (a :class:`MaskState`); :func:`mask_explorer` wires the widgets to it
(:mod:`attnlib.explorers._render`), so it can be tested without a browser.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlib._validate import check_choice, check_int
from attnlib.core import softmax
from attnlib.explorers._render import explorer_box, figure_png
from attnlib.masks import causal_mask, padding_mask

__all__ = ["MASK_MODES", "MaskState", "mask_explorer", "mask_state", "render_mask"]

MASK_MODES = ("none", "causal", "padding", "causal + padding")


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
    fn = "mask_state"
    check_choice(fn, "mode", mode, MASK_MODES)
    seq = check_int(fn, "seq", seq, minimum=1)
    length = seq if length is None else check_int(fn, "length", length)
    if not 1 <= length <= seq:
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
        heatmap(state.weights, ax=ax_w, title="masked weights", colorbar=False, mask=state.mask)

    return figure_png(draw, (8.0, 3.2))


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
    return explorer_box(
        [mode_b, length_s],
        {"mode_buttons": mode_b, "length_slider": length_s},
        lambda: mask_state(mode_b.value, length_s.value, seq=seq, seed=seed),
        render_mask,
    )
