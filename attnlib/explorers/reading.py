"""The reading explorer (lesson 16): type a line, pick a layer and a head, see what it reads.

:func:`reading_state` is the pure part — a trained :class:`attnlib.gpt.GPT`, its
vocabulary, a line of text, a layer, a head and a query position in; the head's attention
map on the line and the keys that query matches most out (a :class:`ReadingState`).

:func:`reading_explorer` wires a text box, layer and head buttons and a query slider to it
(:mod:`attnlib.explorers._render`): live in JupyterLab, a captioned still in a stored
notebook, the slides and the handouts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlib._validate import check_instance, check_int
from attnlib.explorers._render import explorer_box, figure_png
from attnlib.gpt import GPT
from attnlib.tasks.reading import queries_keys, show_char
from attnlib.tasks.text import CharVocab

__all__ = ["ReadingState", "reading_explorer", "reading_state", "render_reading"]


@dataclass(frozen=True)
class ReadingState:
    """What the reading explorer shows.

    Attributes
    ----------
    text : str — the line read (characters outside the vocabulary dropped).
    layer, head, query : int
    labels : tuple of str — one tick label per character.
    weights : ndarray of shape (seq, seq) — the head's attention map on the line.
    top : tuple of int — the keys the query weights most, largest first.
    """

    text: str
    layer: int
    head: int
    query: int
    labels: tuple
    weights: np.ndarray
    top: tuple

    def summary(self) -> str:
        q = self.query
        picks = ", ".join(f"{j} '{self.labels[j]}' {self.weights[q, j]:.2f}" for j in self.top)
        return f"head {self.layer}.{self.head}, query {q} '{self.labels[q]}' reads: {picks}"


def reading_state(
    model: GPT,
    vocab: CharVocab,
    text: str,
    *,
    layer: int = 0,
    head: int = 0,
    query: int | None = None,
    n_top: int = 3,
) -> ReadingState:
    """The explorer's state (pure function).

    Parameters
    ----------
    model : GPT — in eval mode. vocab : CharVocab — the model's characters.
    text : str — at least 2 characters the vocabulary knows (others are dropped), at most
        ``model.max_len``.
    layer, head : int
    query : int, optional — default the last position.
    n_top : int — how many keys to list.
    """
    fn = "reading_state"
    check_instance(fn, "model", model, GPT, "an attnlib.gpt.GPT")
    check_instance(fn, "vocab", vocab, CharVocab, "a CharVocab")
    check_instance(fn, "text", text, str, "a str")
    known = "".join(c for c in text if c in vocab.chars)[: model.max_len]
    if len(known) < 2:
        raise ValueError(f"{fn}: text needs at least 2 known characters, got {text!r}")
    layer = check_int(fn, "layer", layer, minimum=0, maximum=model.n_layers - 1)
    head = check_int(fn, "head", head, minimum=0, maximum=model.n_heads - 1)
    seq = len(known)
    query = seq - 1 if query is None else check_int(fn, "query", query, minimum=0)
    query = min(query, seq - 1)
    n_top = check_int(fn, "n_top", n_top, minimum=1)
    tokens = vocab.encode(known)[None]  # (1, seq)
    w = queries_keys(model, tokens)[layer].weights[0, head].double().numpy()  # (seq, seq)
    order = np.argsort(-w[query, : query + 1], kind="stable")[:n_top]
    return ReadingState(
        text=known,
        layer=layer,
        head=head,
        query=query,
        labels=tuple(show_char(c) for c in known),
        weights=w,
        top=tuple(int(j) for j in order),
    )


def render_reading(state: ReadingState) -> bytes:
    """The explorer's figure for ``state`` as PNG bytes: the map, and the query's row."""
    from attnlib.plot import bars, heatmap

    seq = len(state.labels)
    causal = np.tril(np.ones((seq, seq), dtype=bool))

    def draw(fig):
        left, right = fig.subplots(1, 2, width_ratios=(1.3, 1.0))
        heatmap(
            state.weights,
            queries=state.labels,
            keys=state.labels,
            ax=left,
            mask=causal,
            mask_legend=False,
            annotate=False,
            title=f"head {state.layer}.{state.head}",
        )
        left.axhline(state.query, color="black", lw=1.5, ls="--")
        q = state.query
        bars(
            state.weights[q, : q + 1],
            labels=state.labels[: q + 1],
            ax=right,
            highlight=state.top[0],
            ylabel="weight",
            title=f"query {q} '{state.labels[q]}'",
        )
        right.set_xlabel("key position")

    return figure_png(draw, (8.0, 3.8))


def reading_explorer(
    model: GPT, vocab: CharVocab, text: str, *, layer: int = 0, head: int = 0, query=None
):
    """Type a line, pick a layer, a head and a query: see the head's map and what the query reads.

    Returns
    -------
    ipywidgets.VBox
        Attributes ``text_box``, ``layer_buttons``, ``head_buttons``, ``query_slider``,
        ``readout``, ``image``, ``state``; displayed, the live widget and a captioned still.
    """
    import ipywidgets as W

    first = reading_state(model, vocab, text, layer=layer, head=head, query=query)
    text_b = W.Text(value=first.text, description="line", continuous_update=False)
    layer_b = W.ToggleButtons(options=list(range(model.n_layers)), value=layer, description="layer")
    head_b = W.ToggleButtons(options=list(range(model.n_heads)), value=head, description="head")
    query_s = W.IntSlider(
        value=first.query, min=0, max=model.max_len - 1, description="query",
        continuous_update=False,
    )  # fmt: skip

    def compute():
        return reading_state(
            model, vocab, text_b.value, layer=layer_b.value, head=head_b.value,
            query=query_s.value,
        )  # fmt: skip

    controls = {
        "text_box": text_b,
        "layer_buttons": layer_b,
        "head_buttons": head_b,
        "query_slider": query_s,
    }
    return explorer_box([text_b, (layer_b, head_b), query_s], controls, compute, render_reading)
