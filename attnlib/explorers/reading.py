"""The reading explorer (lesson 16): type a line, pick a layer and a head, see what it reads.

:func:`reading_state` is the pure part — a trained :class:`attnlib.gpt.GPT`, its
vocabulary, a line of text, a layer, a head and a query position in; the head's attention
map on the line and the keys that query matches most out (a :class:`ReadingState`).

:func:`reading_explorer` wires a text box, layer and head buttons and a query slider to it
(:mod:`attnlib.explorers._render`): live in JupyterLab, a captioned still in a stored
notebook, the slides and the handouts.

Readable at any line length: the map sits above the bars of the chosen query's row, the
two sharing the key axis, so every key's character is written once, full width, under the
bars (at least :data:`KEY_INCHES` apart; a longer line labels every second, third ...
key). The map's query rows are labelled alike, at least :data:`ROW_INCHES` apart. The
query slider runs over the line's positions only, and is as wide as the figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnlib._validate import check_instance, check_int
from attnlib.explorers._render import explorer_box, figure_png
from attnlib.gpt import GPT
from attnlib.tasks.reading import queries_keys, show_char
from attnlib.tasks.text import CharVocab

__all__ = ["ReadingState", "reading_explorer", "reading_state", "render_reading"]

FIGSIZE = (8.0, 6.0)  # inches: the course's widest, and tallest, figure
BARS_INCHES = 1.5  # the height of the bars' panel
ROW_INCHES = 0.16  # a labelled query row of the map, at least (an 11 pt character is 0.15)
KEY_INCHES = 0.2  # a labelled key column, at least
KEYS_INCHES = 6.4  # the width the keys get (the rest: axis labels and the colourbar)
MAP_INCHES = 3.4  # the map's height at most (the rest: titles and the bars' panel)


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


def _known(vocab: CharVocab, text: str, max_len: int) -> str:
    """The characters of ``text`` the vocabulary knows, at most ``max_len`` of them."""
    return "".join(c for c in text if c in vocab.chars)[:max_len]


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
    known = _known(vocab, text, model.max_len)
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


def _labelled(seq: int, pitch: float, room: float, keep: int | None = None) -> list[int]:
    """The positions of ``seq`` that get a label: all of them if ``seq`` labels ``pitch``
    inches apart fit in ``room`` inches, else every k-th, k as small as fits; ``keep``
    always, its neighbours closer than k never."""
    k = max(1, math.ceil(seq * pitch / room))
    if keep is None:
        return list(range(0, seq, k))
    return sorted({i for i in range(0, seq, k) if abs(i - keep) >= k} | {keep})


def render_reading(state: ReadingState) -> bytes:
    """The explorer's figure for ``state`` as PNG bytes: the head's map above the bars of
    the query's row, the two on one key axis."""
    from attnlib.plot import bars, heatmap

    seq = len(state.labels)
    q = state.query
    causal = np.tril(np.ones((seq, seq), dtype=bool))
    map_inches = min(MAP_INCHES, max(1.2, ROW_INCHES * seq))
    keys = _labelled(seq, KEY_INCHES, KEYS_INCHES)
    queries = _labelled(seq, ROW_INCHES, map_inches, keep=q)
    row = np.zeros(seq)
    row[: q + 1] = state.weights[q, : q + 1]  # keys after the query get nothing (causal)

    def draw(fig):
        top, bottom = fig.subplots(2, 1, height_ratios=(map_inches, BARS_INCHES))
        heatmap(
            state.weights,
            ax=top,
            mask=causal,
            mask_legend=False,
            annotate=False,
            colorbar=False,
            title=f"head {state.layer}.{state.head}",
        )
        top.set_yticks(queries, labels=[state.labels[i] for i in queries])
        top.set_xticks(keys)
        top.tick_params(axis="x", labelbottom=False)  # the bars below name the keys
        top.set_xlabel("")
        top.axhline(q, color="black", lw=1.5, ls="--")
        bars(
            row,
            ax=bottom,
            highlight=state.top[0],
            ylabel="weight",
            title=f"query {q} '{state.labels[q]}' (dashed line above)",
        )
        bottom.set_xticks(keys, labels=[state.labels[i] for i in keys])
        bottom.set_xlim(-0.5, seq - 0.5)  # the map's columns
        bottom.set_xlabel("key position")
        fig.colorbar(top.images[0], ax=[top, bottom], shrink=0.85, label="weights")

    height = map_inches + BARS_INCHES + 1.5  # titles and tick labels
    return figure_png(draw, (FIGSIZE[0], min(FIGSIZE[1], height)))


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

    def wide():  # about the figure's width: a step of the slider is tens of pixels
        return W.Layout(width="95%")

    text_b = W.Text(value=first.text, description="line", continuous_update=False, layout=wide())
    layer_b = W.ToggleButtons(options=list(range(model.n_layers)), value=layer, description="layer")
    head_b = W.ToggleButtons(options=list(range(model.n_heads)), value=head, description="head")
    query_s = W.IntSlider(
        value=first.query, min=0, max=len(first.text) - 1, description="query",
        continuous_update=False, layout=wide(),
    )  # fmt: skip

    def bound(change):
        """The slider runs over the new line's positions; at the end of the old line, it
        moves to the end of the new one."""
        n = len(_known(vocab, change["new"], model.max_len))
        if n < 2:
            return  # reading_state says what is wrong
        at_end = query_s.value == query_s.max
        query_s.max = n - 1  # (a value past it is clamped)
        if at_end:
            query_s.value = n - 1

    text_b.observe(bound, names="value")  # before the redraw: it reads the slider

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
