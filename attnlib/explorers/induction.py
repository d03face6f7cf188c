"""The induction explorer (lesson 13): pick a query position, see which key its layer-1
query matches, and how much of that key's score was written by each layer-0 head.

:func:`induction_state` is the pure part — a model, one sequence, a query position and a
layer-1 head in; the query's weights, the matched key and the matched key's score split
into its parts out (an :class:`InductionState`). The split is exact: layer 1's key at
position j is ``x1_j W_K`` with ``x1_j = x0_j + Σ_h o_{h,j}`` (embedding plus what each
layer-0 head wrote), so the score ``q · k_j / √d_head`` is the sum of
``q · (x0_j W_K) / √d_head`` and one term per layer-0 head.

:func:`induction_explorer` wires a query slider and a head selector to it
(:mod:`attnlib.explorers._render`): live in JupyterLab, a captioned still in a stored
notebook, the slides and the handouts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnlib._validate import check_instance, check_int
from attnlib.explorers._render import explorer_box, figure_png
from attnlib.tasks.induction import BOS, InductionModel

__all__ = [
    "InductionState",
    "induction_explorer",
    "induction_state",
    "render_induction",
    "token_labels",
]


def token_labels(tokens) -> tuple[str, ...]:
    """Tick labels of one sequence: ``BOS`` and the token ids."""
    return tuple("BOS" if int(t) == BOS else str(int(t)) for t in tokens)


@dataclass(frozen=True)
class InductionState:
    """What the induction explorer shows.

    Attributes
    ----------
    position : int — the query position. head : int — the layer-1 head.
    labels : tuple of str — one per position of the sequence.
    weights : ndarray of shape (position + 1,) — the query's weights over keys 0..position.
    matched : int — the key with the largest weight.
    parts : ndarray of shape (1 + n_heads,) — the score of the matched key, split into the
        part computed from the embedding and the part from each layer-0 head's output.
    others : ndarray of shape (1 + n_heads,) — the same parts, averaged over the other keys
        the query may see.
    part_names : tuple of str.
    prev_head : int — the layer-0 head whose part is reported.
    """

    position: int
    head: int
    labels: tuple
    weights: np.ndarray
    matched: int
    parts: np.ndarray
    others: np.ndarray
    part_names: tuple
    prev_head: int

    @property
    def score(self) -> float:
        """The matched key's score, q · k / √d_head (the sum of its parts)."""
        return float(self.parts.sum())

    @property
    def margin(self) -> np.ndarray:
        """How much each part lifts the matched key above the other keys' mean, (1 + n_heads,)."""
        return self.parts - self.others

    def summary(self) -> str:
        t, j, h = self.position, self.matched, 1 + self.prev_head
        return (
            f"query {t} ({self.labels[t]}) matches key {j} ({self.labels[j]}) with weight "
            f"{self.weights[j]:.2f}; the part of its score written by head 0.{self.prev_head}: "
            f"{self.parts[h]:.1f}, against {self.others[h]:.1f} for the other keys on average"
        )


def induction_state(
    model: InductionModel, tokens, position: int, *, head: int = 0, prev_head: int = 0
) -> InductionState:
    """The explorer's state for query ``position`` of one sequence (pure function).

    Parameters
    ----------
    model : InductionModel
    tokens : LongTensor of shape (seq,) — one sequence (e.g. from ``make_sequences``).
    position : int — a query position, 1 .. seq - 1.
    head : int — the layer-1 head whose query is followed.
    prev_head : int — the layer-0 head whose part of the score is reported.
    """
    fn = "induction_state"
    check_instance(fn, "model", model, InductionModel, "an InductionModel")
    tokens = torch.as_tensor(tokens)
    if tokens.ndim != 1 or tokens.dtype != torch.long:
        raise ValueError(f"{fn}: tokens must be one sequence, a LongTensor (seq,)")
    seq = tokens.shape[0]
    position = check_int(fn, "position", position, minimum=1, maximum=seq - 1)
    head = check_int(fn, "head", head, minimum=0, maximum=model.n_heads - 1)
    prev_head = check_int(fn, "prev_head", prev_head, minimum=0, maximum=model.n_heads - 1)
    with torch.no_grad():
        run = model.run(tokens[None])
        s = slice(head * model.d_head, (head + 1) * model.d_head)
        W_k = model.weight("W_k", 1)[:, s]  # (d_model, d_head)
        q = run.q1[0, head, position].double()  # (d_head,)
        pieces = torch.cat([run.x0[0, None], run.head_out0[0]], 0)  # (1 + n_heads, seq, d_model)
        weights = run.weights1[0, head, position, : position + 1].double().numpy()
        matched = int(np.argmax(weights))
        key_parts = pieces[:, : position + 1] @ W_k  # (1 + n_heads, position + 1, d_head)
        all_parts = (key_parts.double() @ q / math.sqrt(model.d_head)).numpy()
        parts = all_parts[:, matched]  # (1 + n_heads,)
        rest = np.delete(all_parts, matched, axis=1)  # (1 + n_heads, position)
        others = rest.mean(axis=1) if rest.shape[1] else np.zeros_like(parts)
    names = ("embedding",) + tuple(f"head 0.{h}" for h in range(model.n_heads))
    return InductionState(
        position=position,
        head=head,
        labels=token_labels(tokens),
        weights=weights,
        matched=matched,
        parts=parts,
        others=others,
        part_names=names,
        prev_head=prev_head,
    )


def render_induction(state: InductionState) -> bytes:
    """The explorer's figure for ``state`` as PNG bytes."""
    from attnlib.plot import induction_view

    def draw(fig):
        induction_view(state, axes=fig.subplots(1, 2, width_ratios=(1.9, 1.0)))

    return figure_png(draw, (7.8, 3.3))


def induction_explorer(
    model: InductionModel, tokens, position: int, *, head: int = 0, prev_head: int = 0
):
    """Follow one layer-1 query to the key it matches, and see who built that key.

    Parameters
    ----------
    model, tokens, position, head, prev_head : see :func:`induction_state`.

    Returns
    -------
    ipywidgets.VBox
        Attributes ``position_slider``, ``head_buttons``, ``readout``, ``image``, ``state``;
        displayed, the live widget and a captioned still (:mod:`attnlib.explorers._render`).
    """
    import ipywidgets as W

    first = induction_state(model, tokens, position, head=head, prev_head=prev_head)
    seq = len(first.labels)
    pos_s = W.IntSlider(
        value=first.position, min=1, max=seq - 1, description="query", continuous_update=False
    )
    head_b = W.ToggleButtons(
        options=list(range(model.n_heads)), value=first.head, description="head 1."
    )
    return explorer_box(
        [pos_s, head_b],
        {"position_slider": pos_s, "head_buttons": head_b},
        lambda: induction_state(model, tokens, pos_s.value, head=head_b.value, prev_head=prev_head),
        render_induction,
    )
