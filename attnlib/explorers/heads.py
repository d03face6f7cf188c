"""The head selector (lesson 07): step through the heads of a trained model's attention maps.

:func:`head_state` is the pure part — weights of shape (n_heads, seq_q, seq_k) and a head
in; that head's map, each query's top key and entropies out (a :class:`HeadState`);
:func:`head_explorer` wires the widgets to it (:mod:`attnlib.explorers._render`), so it
can be tested without a browser.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlib._validate import check_int
from attnlib.explorers._render import explorer_box, figure_png
from attnlib.tasks.scaling import softmax_entropy

__all__ = ["HeadState", "head_explorer", "head_state", "render_head"]


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
    head = check_int("head_state", "head", head)
    if not 0 <= head < n_heads:
        raise ValueError(f"head_state: head must be an int in 0..{n_heads - 1}, got {head!r}")
    m = w[head]  # (seq_q, seq_k)
    return HeadState(
        head=int(head),
        n_heads=n_heads,
        weights=m,
        argmax=m.argmax(axis=-1),
        entropy=softmax_entropy(m),
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

    return figure_png(draw, size)


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
    return explorer_box(
        [head_s],
        {"head_slider": head_s},
        lambda: head_state(w, head_s.value),
        lambda state: render_head(state, queries, keys),
        lambda state: state.summary(keys),
    )
