"""The sampling explorer (lesson 17): a prompt in; the model's next-character distribution,
and what temperature, top-k, top-p and min-p make of it, out.

:func:`sampling_state` is the pure part — one row of logits, the vocabulary's labels and
the four settings in; a :class:`SamplingState` out: the most likely tokens, their
probabilities as the model gives them (temperature 1, nothing removed) and as they are
sampled from (the softmax of :func:`attnlib.sampling.filter_logits`, which applies the
temperature, then top-k, top-p and min-p, as Hugging Face does), which are kept, how many
tokens of the whole vocabulary are kept, the mass they held before the softmax
renormalised over them, and the entropy left. Everything is computed in float64.

:func:`plays_next_logits` gives the logits of lesson 16's plain plays model
(:func:`attnlib.tasks.plays.load_model`) after a prompt; :func:`sampling_explorer` wires a
prompt box and four sliders to the two (:mod:`attnlib.explorers._render`): live in
JupyterLab, a captioned still in a stored notebook, the slides and the handouts. Its
figure is :func:`attnlib.plot.sampling_view`; :func:`attnlib.plot.sampling_views` draws
several settings side by side for a lesson's static figure.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np
import torch

from attnlib._validate import check_instance, check_int, check_number
from attnlib.explorers._render import explorer_box, figure_png
from attnlib.gpt import GPT
from attnlib.sampling import check_filters, filter_logits
from attnlib.tasks.reading import show_char
from attnlib.tasks.text import CharVocab

__all__ = [
    "SLIDERS",
    "SamplingState",
    "plays_next_logits",
    "render_sampling",
    "sampling_explorer",
    "sampling_state",
]

# The sliders' ranges (min, max, step). top-k also has "off"; top-p 1 and min-p 0 are off.
SLIDERS = {
    "temperature": (0.1, 2.0, 0.05),
    "top_p": (0.05, 1.0, 0.05),
    "min_p": (0.0, 0.5, 0.01),
}
PROMPT_SHOWN = 24  # characters of the prompt a title shows (its end)


def readable(label: str) -> str:
    """``label`` with each space written ``␣`` and each newline ``⏎`` (as lesson 16 does)."""
    return "".join(show_char(c) for c in label)


@dataclass(frozen=True)
class SamplingState:
    """What the sampling explorer shows.

    Attributes
    ----------
    labels : tuple of str — the ``shown`` most likely tokens, most likely first, spaces
        written ``␣`` and newlines ``⏎``.
    ids : tuple of int — their token ids.
    before : ndarray of shape (shown,) — their probabilities as the model gives them:
        softmax of the logits (temperature 1, nothing removed).
    after : ndarray of shape (shown,) — their probabilities when sampling: softmax of
        :func:`attnlib.sampling.filter_logits` (temperature, then the filters; the softmax
        renormalises over the kept tokens); 0 for a dropped token.
    kept : bool ndarray of shape (shown,) — which of them the filters keep.
    n_kept, vocab_size : int — tokens kept in the whole vocabulary, and its size.
    kept_mass : float — the probability the kept tokens held after the temperature and
        before the renormalisation: ``after = softmax(logits / T) / kept_mass`` on them.
    entropy, entropy_before : float — of the distribution sampled from, and of the
        model's (temperature 1, nothing removed), in nats.
    temperature : float; top_k : int or None; top_p, min_p : float or None (None: not used).
    prompt : str or None — the text the logits follow, if given.
    """

    labels: tuple
    ids: tuple
    before: np.ndarray
    after: np.ndarray
    kept: np.ndarray
    n_kept: int
    vocab_size: int
    kept_mass: float
    entropy: float
    entropy_before: float
    temperature: float
    top_k: int | None
    top_p: float | None
    min_p: float | None
    prompt: str | None = None

    def settings(self) -> list[str]:
        """The settings as short phrases: ``["T = 0.7", "top-k 10"]`` (unused filters left out)."""
        parts = [f"T = {self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top-k {self.top_k}")
        if self.top_p is not None:
            parts.append(f"top-p {self.top_p:g}")
        if self.min_p is not None:
            parts.append(f"min-p {self.min_p:g}")
        return parts

    def prompt_end(self, n: int = PROMPT_SHOWN) -> str:
        """The prompt's last ``n`` characters, readable (``…`` in front if cut)."""
        text = self.prompt or ""
        return ("…" if len(text) > n else "") + readable(text[-n:])

    def summary(self) -> str:
        kept = zip(self.labels, self.after, self.kept, strict=True)
        picks = [f"'{label}' {p:.2f}" for label, p, k in kept if k][:5]
        after = f"after '{self.prompt_end()}': " if self.prompt is not None else ""
        return (
            f"{after}{', '.join(self.settings())} keeps {self.n_kept} of {self.vocab_size} "
            f"(mass kept {self.kept_mass:.2f}); entropy {self.entropy:.2f} nats "
            f"(model {self.entropy_before:.2f}); most likely: {', '.join(picks)}"
        )


def _labels(fn: str, labels, vocab: int) -> tuple[str, ...]:
    """``labels`` (a str of one character per token, a sequence of str or a CharVocab) as a
    tuple of ``vocab`` strings."""
    if isinstance(labels, CharVocab):
        labels = labels.chars
    if isinstance(labels, str):
        labels = tuple(labels)
    check_instance(fn, "labels", labels, Sequence, "a str, a sequence of str or a CharVocab")
    labels = tuple(labels)
    if not all(isinstance(s, str) for s in labels):
        kinds = sorted({type(s).__name__ for s in labels})
        raise TypeError(f"{fn}: labels must hold str, got {kinds}")
    if len(labels) != vocab:
        raise ValueError(f"{fn}: labels has {len(labels)} names for {vocab} logits")
    return labels


def _logits(fn: str, logits) -> torch.Tensor:
    """``logits`` as a float64 torch tensor of shape (vocab,), finite."""
    if isinstance(logits, np.ndarray):
        logits = torch.from_numpy(logits)
    check_instance(fn, "logits", logits, torch.Tensor, "a torch.Tensor or numpy.ndarray (vocab,)")
    if not logits.is_floating_point():
        raise TypeError(f"{fn}: logits must have a floating-point dtype, got {logits.dtype}")
    if logits.ndim != 1 or logits.shape[0] < 1:
        raise ValueError(
            f"{fn}: logits must have shape (vocab,), one row, got {tuple(logits.shape)}"
        )
    logits = logits.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(logits).all()):
        raise ValueError(f"{fn}: logits must be finite (the model's, before any filter)")
    return logits


def sampling_state(
    logits,
    labels,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    shown: int = 20,
    prompt: str | None = None,
) -> SamplingState:
    """The next token's distribution before and after temperature and filters (pure).

    Parameters
    ----------
    logits : Tensor or ndarray of shape (vocab,) — one row of a model's next-token logits.
    labels : str, sequence of str or CharVocab — one name per token (a str: one character
        each, as ``CharVocab.chars``).
    temperature : float > 0. top_k : int in 1 .. vocab, optional. top_p : float in (0, 1],
        optional. min_p : float in [0, 1], optional. As in
        :func:`attnlib.sampling.filter_logits`; None leaves a filter out.
    shown : int >= 1 — how many of the most likely tokens the state lists (at most vocab).
    prompt : str, optional — the text the logits follow, for the titles.

    Returns
    -------
    SamplingState

    Examples
    --------
    >>> logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()   # probabilities 0.5, 0.3, ...
    >>> s = sampling_state(logits, "ab \\n", top_p=0.7)    # 0.5 < 0.7: 0.3 crosses it, kept
    >>> s.labels, s.n_kept, round(s.kept_mass, 2)
    (('a', 'b', '␣', '⏎'), 2, 0.8)
    >>> s.after.round(3).tolist()                            # 0.5 / 0.8 and 0.3 / 0.8
    [0.625, 0.375, 0.0, 0.0]
    """
    fn = "sampling_state"
    x = _logits(fn, logits)  # (vocab,) float64
    vocab = x.shape[0]
    names = _labels(fn, labels, vocab)
    temperature = check_number(fn, "temperature", temperature, positive=True)
    check_filters(fn, top_k=top_k, top_p=top_p, min_p=min_p, vocab=vocab)
    shown = min(check_int(fn, "shown", shown, minimum=1), vocab)
    if prompt is not None:
        check_instance(fn, "prompt", prompt, str, "a str or None")
    top_p = None if top_p is None else float(top_p)
    min_p = None if min_p is None else float(min_p)
    top_k = None if top_k is None else int(top_k)
    filtered = filter_logits(x, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    keep = torch.isfinite(filtered)  # (vocab,)
    model = torch.softmax(x, dim=-1)  # (vocab,): temperature 1, nothing removed
    tempered = torch.softmax(x / temperature, dim=-1)  # (vocab,): before the filters
    sampled = torch.softmax(filtered, dim=-1)  # (vocab,): 0 where dropped
    order = np.argsort(-x.numpy(), kind="stable")[:shown]  # most likely first, ties by id
    return SamplingState(
        labels=tuple(readable(names[i]) for i in order),
        ids=tuple(int(i) for i in order),
        before=model.numpy()[order],
        after=sampled.numpy()[order],
        kept=keep.numpy()[order],
        n_kept=int(keep.sum()),
        vocab_size=vocab,
        kept_mass=float(tempered[keep].sum()),
        entropy=_entropy(sampled),
        entropy_before=_entropy(model),
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        prompt=prompt,
    )


def _entropy(p: torch.Tensor) -> float:
    """-Σ p ln p in nats over the tokens with p > 0 (float64); never below 0, so that a
    single kept token (its p rounded just above 1) shows 0.00 and not -0.00."""
    p = p[p > 0]
    return max(0.0, float(-(p * p.log()).sum()))


# ------------------------------------------------------------------ the plays model


@functools.cache
def _plays() -> tuple[GPT, CharVocab]:
    """Lesson 16's plain model (eval mode) and its vocabulary, loaded once per session."""
    from attnlib.tasks import plays

    return plays.load_model(), plays.vocabulary()


def _known(vocab: CharVocab, prompt: str, max_len: int) -> str:
    """The characters of ``prompt`` the vocabulary knows, the last ``max_len`` of them."""
    known = "".join(c for c in prompt if c in vocab.chars)
    return known[-max_len:]


def _model_vocab(fn: str, model, vocab) -> tuple[GPT, CharVocab]:
    if model is None and vocab is None:
        return _plays()
    if model is None:
        model = _plays()[0]
    if vocab is None:
        vocab = _plays()[1]
    check_instance(fn, "model", model, GPT, "an attnlib.gpt.GPT")
    check_instance(fn, "vocab", vocab, CharVocab, "a CharVocab")
    if vocab.size != model.vocab_size:
        raise ValueError(
            f"{fn}: vocab has {vocab.size} characters, the model {model.vocab_size} tokens"
        )
    return model, vocab


def plays_next_logits(prompt: str, *, model: GPT | None = None, vocab: CharVocab | None = None):
    """The model's logits for the character after ``prompt``: Tensor of shape (vocab,).

    Parameters
    ----------
    prompt : str — characters the vocabulary does not know are dropped; the model reads the
        last ``model.max_len`` of the rest (at least one).
    model : GPT, optional — default lesson 16's plain plays model
        (:func:`attnlib.tasks.plays.load_model`, loaded once).
    vocab : CharVocab, optional — the model's characters; default the plays' vocabulary.

    Returns
    -------
    Tensor of shape (vocab,), the model's dtype (float32). Its labels are ``vocab.chars``.
    """
    fn = "plays_next_logits"
    check_instance(fn, "prompt", prompt, str, "a str")
    model, vocab = _model_vocab(fn, model, vocab)
    known = _known(vocab, prompt, model.max_len)
    if not known:
        raise ValueError(
            f"{fn}: prompt needs at least 1 character the vocabulary knows, got {prompt!r}"
        )
    tokens = vocab.encode(known)[None]  # (1, seq)
    with torch.no_grad():
        return model(tokens)[0, -1].detach()  # (vocab,): the last position's logits


# ------------------------------------------------------------------ the explorer


def render_sampling(state: SamplingState) -> bytes:
    """The explorer's figure for ``state`` as PNG bytes."""
    from attnlib.plot import sampling_view

    def draw(fig):
        sampling_view(state, ax=fig.subplots())

    return figure_png(draw, (8.0, 0.19 * len(state.labels) + 1.9))


def _in_range(fn: str, name: str, value, lo: float, hi: float) -> None:
    if not lo <= value <= hi:
        raise ValueError(
            f"{fn}: {name} must be in [{lo:g}, {hi:g}] (the slider's range), got {value}"
        )


def sampling_explorer(
    prompt: str = "MIRANDA.\n",
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    shown: int = 20,
    model: GPT | None = None,
    vocab: CharVocab | None = None,
):
    """Type a prompt, move temperature, top-k, top-p and min-p: see what is sampled from.

    Parameters
    ----------
    prompt : str — the text the model continues (see :func:`plays_next_logits`).
    temperature : float in [0.1, 2]. top_k : int in 1 .. vocab, or None (off).
    top_p : float in [0.05, 1], or None (off, the slider at 1).
    min_p : float in [0, 0.5], or None (off, the slider at 0).
    shown : int — how many of the most likely characters the figure draws.
    model, vocab : optional — default lesson 16's plain plays model and its vocabulary.

    Returns
    -------
    ipywidgets.VBox
        Attributes ``prompt_box``, ``temperature_slider``, ``top_k_slider`` (0 is off),
        ``top_p_slider``, ``min_p_slider``, ``readout``, ``image``, ``state``; displayed,
        the live widget and a captioned still (:mod:`attnlib.explorers._render`).
    """
    import ipywidgets as W

    fn = "sampling_explorer"
    model, vocab = _model_vocab(fn, model, vocab)
    last: dict[str, torch.Tensor] = {}  # the prompt read last and its logits

    def state_for(text, t, k, p, m):
        known = _known(vocab, text, model.max_len)
        if known not in last:
            last.clear()
            last[known] = plays_next_logits(known, model=model, vocab=vocab)
        return sampling_state(
            last[known], vocab.chars, temperature=t, top_k=k, top_p=p, min_p=m, shown=shown,
            prompt=known,
        )  # fmt: skip

    check_instance(fn, "prompt", prompt, str, "a str")
    first = state_for(prompt, temperature, top_k, top_p, min_p)  # validates
    for name, value in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p)):
        if value is not None:
            _in_range(fn, name, value, *SLIDERS[name][:2])

    def slider(name, value, description):
        lo, hi, step = SLIDERS[name]
        return W.FloatSlider(
            value=value, min=lo, max=hi, step=step, description=description,
            continuous_update=False, readout_format=".2f",
        )  # fmt: skip

    prompt_b = W.Textarea(
        value=prompt, description="prompt", rows=2, continuous_update=False,
        layout=W.Layout(width="95%"),
    )  # fmt: skip
    temp_s = slider("temperature", first.temperature, "temperature")
    k_s = W.SelectionSlider(
        options=[("off", 0)] + [(str(i), i) for i in range(1, vocab.size + 1)],
        value=top_k or 0, description="top-k", continuous_update=False,
    )  # fmt: skip
    p_s = slider("top_p", 1.0 if top_p is None else top_p, "top-p")
    m_s = slider("min_p", 0.0 if min_p is None else min_p, "min-p")

    def compute():
        p, m = p_s.value, m_s.value
        return state_for(
            prompt_b.value, temp_s.value, k_s.value or None,
            None if p >= 1.0 else p, None if m <= 0.0 else m,
        )  # fmt: skip

    controls = {
        "prompt_box": prompt_b,
        "temperature_slider": temp_s,
        "top_k_slider": k_s,
        "top_p_slider": p_s,
        "min_p_slider": m_s,
    }
    rows = [prompt_b, (temp_s, k_s), (p_s, m_s)]

    def describe(state):  # the readout is HTML: a prompt or a token may hold "<" or "&"
        return escape(state.summary(), quote=False)

    return explorer_box(rows, controls, compute, render_sampling, describe)
