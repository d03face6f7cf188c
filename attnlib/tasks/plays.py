"""The course's GPT trained on the plays, read by lesson 16: its loss and its heads, measured.

The model is :class:`attnlib.gpt.GPT` (lesson 15's model, proven equal to Hugging Face's
GPT-2) of :data:`CONFIG`, trained as a character model on ``data/plays.txt``
(:mod:`attnlib.tasks.text`). The split is by play: the first seven plays train it, the
eighth, *The Tempest* (98 320 characters, :data:`VALIDATION_PLAY`), is held out whole.
Two models are shipped, the same network and schedule trained on two recipes
(:data:`RECIPES`): ``plain`` (:data:`TRAINING`: windows of the plays as they are) and
``copy`` (:data:`COPY_TRAINING`: in every window a passage of the plays is written a
second time, :func:`repeat_passages`), so that lesson 16 can compare what each learned.

* :func:`training_tokens`, :func:`validation_tokens` — the two sides of the split as token
  ids; :func:`validation_loss` — the model's mean next-character loss (nats) on the held-out
  play; :func:`unigram_loss` and :func:`bigram_loss` — what counting characters (and pairs)
  in the training plays gets on it, the baselines the model must beat;
* head scores, each of shape (n_heads,) from one layer's attention weights (tested against
  hand-built maps): :func:`previous_token_score` (mean weight on position t-1),
  :func:`prefix_matching_score` (on a block of tokens repeated: weight on the token *after*
  the earlier occurrence of the query's token — an induction head's signature),
  :func:`attention_on` (the share of attention on chosen keys: the first position, or
  newlines — attention sinks); :func:`head_scores` measures all of them for every head of
  a model (:class:`HeadScores`), on :func:`repeated_random_text` and on the held-out play;
* :func:`training_batch` — random windows of the training plays, as every step draws
  them; :func:`repeat_passages` — the copy recipe's windows; :func:`train_model` (seeded,
  on one thread, Adam with linear warm-up and cosine decay), :func:`save_weights`,
  :func:`load_model`, :func:`write_log`, :func:`read_log`, :func:`read_results`.

Run ``python -m attnlib.tasks.plays --train`` to retrain both models (side by side, one
process and one thread each) and rewrite, for ``plain``, ``data/plays_model.pt``,
``data/plays_log.tsv``, ``data/plays_short_log.tsv`` and ``data/plays_results.tsv``, and
for ``copy`` the same four files named ``plays_copy_*`` (seeded; data/README.md states the
time).
"""

from __future__ import annotations

import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from attnlib._validate import check_array, check_instance, check_int
from attnlib.gpt import GPT
from attnlib.tasks.head_scores import (
    attention_on,
    prefix_matching_score,
    previous_token_score,
    repeated_random_text,
)
from attnlib.tasks.shipped import data_file, read_log_table, train_command
from attnlib.tasks.text import CORPUS_PATH, CharVocab, load_text, split_plays
from attnlib.training import progress_bar, torch_threads

__all__ = [
    "CONFIG",
    "TRAINING",
    "SHORT_TRAINING",
    "SCORE_NAMES",
    "VALIDATION_PLAY",
    "WEIGHTS_PATH",
    "LOG_PATH",
    "SHORT_LOG_PATH",
    "RESULTS_PATH",
    "COPY_TRAINING",
    "COPY_SHORT_TRAINING",
    "COPY_WEIGHTS_PATH",
    "COPY_LOG_PATH",
    "COPY_SHORT_LOG_PATH",
    "COPY_RESULTS_PATH",
    "Recipe",
    "RECIPES",
    "LOG_COLUMNS",
    "vocabulary",
    "training_tokens",
    "validation_tokens",
    "validation_windows",
    "validation_loss",
    "unigram_loss",
    "bigram_loss",
    "learning_rate",
    "previous_token_score",
    "prefix_matching_score",
    "attention_on",
    "repeated_random_text",
    "repeat_passages",
    "training_batch",
    "HeadScores",
    "head_scores",
    "train_model",
    "train_recipe",
    "save_weights",
    "load_model",
    "write_log",
    "read_log",
    "write_results",
    "read_results",
]

VALIDATION_PLAY = 7  # index in text.PLAYS: The Tempest, the last play, held out whole
# The model (attnlib.gpt.GPT's arguments but vocab_size, which is the corpus's: 76).
CONFIG = {"d_model": 64, "n_heads": 4, "n_layers": 2, "max_len": 256}
# The plain recipe's run. lr: peak; warmup: steps of linear warm-up; final: the lr at the
# last step, as a fraction of the peak (cosine decay in between); clip: global gradient
# norm; repeats: the fraction of each batch's windows that get a repeated passage
# (repeat_passages, of repeat_lengths characters): 0, the plays as they are.
TRAINING = {
    "steps": 4000,
    "batch": 16,
    "lr": 6e-3,
    "warmup": 100,
    "final": 0.1,
    "clip": 1.0,
    "seed": 0,
    "eval_every": 100,
    "repeats": 0.0,
    "repeat_lengths": (64, 127),
}
# The shortened schedule `make test` retraces: the same model, code and data, 30 steps.
SHORT_TRAINING = {**TRAINING, "steps": 30, "batch": 4, "warmup": 5, "eval_every": 10}
PROBE_LENGTH = 64  # repeated_random_text: the block's length (seq = 2 * 64)
PROBE_BATCH = 32
PROBE_SEED = 1234
EVAL_WINDOWS = 16  # the validation windows of the log's `val_loss` column (every eval_every)

WEIGHTS_PATH = data_file("plays_model.pt")
LOG_PATH = data_file("plays_log.tsv")
SHORT_LOG_PATH = data_file("plays_short_log.tsv")
RESULTS_PATH = data_file("plays_results.tsv")
LOG_COLUMNS = ("step", "lr", "loss", "val_loss", "prefix_matching")
TRAIN_COMMAND = "python -m attnlib.tasks.plays --train"

# The copy recipe: the same model and schedule, but windows with a repeated passage
# (repeat_passages); shipped beside the plain model so that lesson 16 can compare them.
COPY_TRAINING = {**TRAINING, "repeats": 1.0}
COPY_SHORT_TRAINING = {
    **COPY_TRAINING,
    **{k: SHORT_TRAINING[k] for k in ("steps", "batch", "warmup", "eval_every")},
}
COPY_WEIGHTS_PATH = data_file("plays_copy_model.pt")
COPY_LOG_PATH = data_file("plays_copy_log.tsv")
COPY_SHORT_LOG_PATH = data_file("plays_copy_short_log.tsv")
COPY_RESULTS_PATH = data_file("plays_copy_results.tsv")


@dataclass(frozen=True)
class Recipe:
    """One shipped model: its two schedules and its four files."""

    training: dict
    short_training: dict
    weights: Path
    log: Path
    short_log: Path
    results: Path


RECIPES = {
    "plain": Recipe(TRAINING, SHORT_TRAINING, WEIGHTS_PATH, LOG_PATH, SHORT_LOG_PATH, RESULTS_PATH),
    "copy": Recipe(
        COPY_TRAINING,
        COPY_SHORT_TRAINING,
        COPY_WEIGHTS_PATH,
        COPY_LOG_PATH,
        COPY_SHORT_LOG_PATH,
        COPY_RESULTS_PATH,
    ),
}


# ----------------------------------------------------------------------------------------
# The data and the baselines.
# ----------------------------------------------------------------------------------------


def vocabulary(path: str | Path = CORPUS_PATH) -> CharVocab:
    """The corpus's character vocabulary (76 characters; token ``i`` is ``chars[i]``)."""
    return CharVocab.from_text(load_text(path))


def _split(path) -> tuple[str, str]:
    plays = split_plays(load_text(path))
    if len(plays) <= VALIDATION_PLAY:
        raise ValueError(f"plays: {path} holds {len(plays)} plays, expected 8")
    train = [p for i, p in enumerate(plays) if i != VALIDATION_PLAY]
    return "\n\n\n\n\n".join(train) + "\n", plays[VALIDATION_PLAY] + "\n"


def training_tokens(path: str | Path = CORPUS_PATH) -> torch.Tensor:
    """The seven training plays, joined as in the corpus, as token ids (LongTensor (n,))."""
    return vocabulary(path).encode(_split(path)[0])


def validation_tokens(path: str | Path = CORPUS_PATH) -> torch.Tensor:
    """The held-out play (*The Tempest*) as token ids, LongTensor (n,)."""
    return vocabulary(path).encode(_split(path)[1])


def validation_windows(
    tokens: torch.Tensor, length: int = CONFIG["max_len"], n: int | None = None
) -> torch.Tensor:
    """Cut ``tokens`` into windows of ``length + 1`` tokens (inputs and next-token targets).

    Parameters
    ----------
    tokens : LongTensor of shape (n,)
    length : int, default ``CONFIG["max_len"]``
        The inputs' length; ``n > length``.
    n : int, optional
        None: consecutive windows that overlap by one token, so every token but the first is
        predicted exactly once (a tail shorter than a window is dropped). An int: ``n``
        windows at evenly spaced starts (the log's quick estimate).

    Returns
    -------
    LongTensor of shape (windows, length + 1)
    """
    check_array("validation_windows", "tokens", tokens, only="torch")
    length = check_int("validation_windows", "length", length, minimum=1)
    if tokens.ndim != 1 or tokens.numel() < length + 1:
        raise ValueError(
            f"validation_windows: tokens must have shape (n,) with n > length = {length}, got "
            f"{tuple(tokens.shape)}"
        )
    last = tokens.numel() - length - 1  # the last valid start
    if n is None:
        starts = torch.arange(0, last + 1, length)
    else:
        n = check_int("validation_windows", "n", n, minimum=1)
        starts = torch.linspace(0, last, n).round().long()
    return torch.stack([tokens[s : s + length + 1] for s in starts.tolist()])


def validation_loss(model: GPT, windows: torch.Tensor | None = None, batch: int = 64) -> float:
    """Mean next-token cross-entropy (nats) of ``model`` over ``windows``.

    Evaluated in eval mode, without gradients, on one thread; the model's mode is restored.

    Parameters
    ----------
    model : GPT
    windows : LongTensor of shape (n, length + 1), optional
        Default: the whole held-out play in :func:`validation_windows` of the model's
        ``max_len`` (every character predicted once, from 1 to ``max_len`` characters of
        context).
    batch : int, default 64
        Windows per forward pass (memory only; the result does not depend on it but for
        float rounding).

    Returns
    -------
    float
        The loss in nats per character (divide by ln 2 for bits).
    """
    check_instance("validation_loss", "model", model, GPT, "an attnlib.gpt.GPT")
    if windows is None:
        windows = validation_windows(validation_tokens(), model.max_len)
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad(), torch_threads(1):
        for i in range(0, len(windows), batch):
            w = windows[i : i + batch]
            logits = model(w[:, :-1])  # (b, length, vocab)
            loss = F.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten(), reduction="sum")
            total, count = total + float(loss), count + w[:, 1:].numel()
    model.train(was_training)
    return total / count


def _check_counts(fn: str, train, held_out, size) -> None:
    size = check_int(fn, "size", size, minimum=1)
    for name, t in (("train", train), ("held_out", held_out)):
        check_array(fn, name, t, only="torch")
        if t.dtype != torch.long or t.ndim != 1 or t.numel() < 2:
            raise ValueError(
                f"{fn}: {name} must be a LongTensor (n >= 2,), got {t.dtype} {tuple(t.shape)}"
            )
        if bool(((t < 0) | (t >= size)).any()):
            raise ValueError(f"{fn}: {name} holds ids outside 0 .. size - 1 = {size - 1}")


def _counts(tokens: torch.Tensor, size: int, order: int) -> np.ndarray:
    t = tokens.numpy()
    if order == 1:
        return np.bincount(t, minlength=size).astype(np.float64)
    return np.bincount(t[:-1] * size + t[1:], minlength=size * size).reshape(size, size) * 1.0


def unigram_loss(train: torch.Tensor, held_out: torch.Tensor, size: int, alpha: float = 1.0):
    """The unigram baseline: no context at all.

    Parameters
    ----------
    train, held_out : LongTensor of shape (n,)
        Token ids in 0 .. size-1.
    size : int
        The vocabulary's size.
    alpha : float, default 1.0
        Add-``alpha`` smoothing (Laplace for 1): every character counts ``alpha`` more.

    Returns
    -------
    float
        The cross-entropy (nats) on ``held_out[1:]`` (the characters a model predicts) of the
        smoothed character frequencies of ``train``.
    """
    _check_counts("unigram_loss", train, held_out, size)
    p = _counts(train, size, 1) + alpha
    logp = np.log(p / p.sum())
    return float(-logp[held_out[1:].numpy()].mean())


def bigram_loss(train: torch.Tensor, held_out: torch.Tensor, size: int, alpha: float = 1.0):
    """The bigram baseline: one character of context.

    Parameters
    ----------
    train, held_out, size, alpha
        As for :func:`unigram_loss`; every pair counts ``alpha`` more.

    Returns
    -------
    float
        The cross-entropy (nats) on ``held_out[1:]`` of P(next | previous character) counted
        in ``train``.
    """
    _check_counts("bigram_loss", train, held_out, size)
    p = _counts(train, size, 2) + alpha
    logp = np.log(p / p.sum(1, keepdims=True))
    h = held_out.numpy()
    return float(-logp[h[:-1], h[1:]].mean())


def repeat_passages(
    windows: torch.Tensor,
    n: int,
    lengths: tuple[int, int],
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Real training windows in which a passage is written a second time (the copy recipe).

    In each of the first ``n`` windows, a passage ``A`` of ``L`` characters (``L`` drawn
    uniformly from ``lengths[0] .. lengths[1]``) that starts at position ``q`` is written
    again over the characters at ``p .. p + L - 1``, with ``q + L <= p``: the window reads
    ``A``, the text that followed ``A`` in the play, ``A`` again, then the text that
    followed position ``p + L - 1`` in the play. Every character is from the training
    plays; only the order is changed, so that the second ``A`` can be predicted by copying
    from the first — what an induction head does. The other ``len(windows) - n`` windows
    are left as they are. Per window, ``L``, then ``p`` (uniform in ``L + 1 .. length -
    L``, so that both copies fit), then ``q`` (uniform in ``0 .. p - L``) are drawn from
    ``generator``, in that order.

    Parameters
    ----------
    windows : LongTensor of shape (batch, length)
        Consecutive characters of the training plays, one stretch per row.
    n : int
        How many windows (the first ``n``, ``0 <= n <= batch``) get a repeated passage.
    lengths : (int, int)
        The shortest and the longest passage: ``1 <= lengths[0] <= lengths[1]`` and
        ``2 * lengths[1] + 1 <= length``.
    generator : torch.Generator, optional

    Returns
    -------
    LongTensor of shape (batch, length)
        A new tensor; ``windows`` is not changed.

    Examples
    --------
    >>> w = torch.arange(12)[None]          # one window: 0 1 2 ... 11
    >>> repeat_passages(w, 1, (3, 3), generator=torch.Generator().manual_seed(0))
    tensor([[ 0,  1,  2,  3,  4,  5,  6,  3,  4,  5, 10, 11]])
    """
    fn = "repeat_passages"
    check_array(fn, "windows", windows, only="torch")
    if windows.dtype != torch.long or windows.ndim != 2:
        raise ValueError(
            f"{fn}: windows must be a LongTensor of shape (batch, length), got "
            f"{windows.dtype} {tuple(windows.shape)}"
        )
    batch, length = windows.shape
    n = check_int(fn, "n", n, minimum=0, maximum=batch)
    if not isinstance(lengths, tuple | list) or len(lengths) != 2:
        raise TypeError(f"{fn}: lengths must be a pair (shortest, longest), got {lengths!r}")
    lo = check_int(fn, "lengths[0]", lengths[0], minimum=1)
    hi = check_int(fn, "lengths[1]", lengths[1], minimum=lo)
    if 2 * hi + 1 > length:
        raise ValueError(
            f"{fn}: lengths[1] = {hi} is too long for windows of length {length}: two copies "
            f"need 2 * {hi} + 1 <= {length}"
        )
    out = windows.clone()
    for b in range(n):
        size = int(torch.randint(lo, hi + 1, (1,), generator=generator))
        p = int(torch.randint(size + 1, length - size + 1, (1,), generator=generator))
        q = int(torch.randint(0, p - size + 1, (1,), generator=generator))
        out[b, p : p + size] = windows[b, q : q + size]
    return out


# ----------------------------------------------------------------------------------------
# Head scores.
# ----------------------------------------------------------------------------------------


@dataclass
class HeadScores:
    """Every head's scores, each an ndarray of shape (n_layers, n_heads).

    Attributes
    ----------
    previous_token : on the held-out play, mean weight on position t-1.
    prefix_matching : on :func:`repeated_random_text` (``PROBE_BATCH`` rows, a block of
        ``PROBE_LENGTH``), mean weight on the token after the query token's earlier
        occurrence.
    prefix_matching_text : the same on real text: ``PROBE_LENGTH`` characters of the
        held-out play (one passage per real-text window), then the same passage again.
    first_position, newline : on the held-out play, the share of attention on position 0
        and on newline characters.
    uniform_first, uniform_newline : float
        The same two shares for a head that attends uniformly (what "a sink" is
        compared with).
    """

    previous_token: np.ndarray
    prefix_matching: np.ndarray
    prefix_matching_text: np.ndarray
    first_position: np.ndarray
    newline: np.ndarray
    uniform_first: float
    uniform_newline: float

    def best(self, name: str) -> tuple[int, int, float]:
        """(layer, head, score) of the highest-scoring head for score ``name``."""
        scores = getattr(self, name)
        layer, head = np.unravel_index(int(np.argmax(scores)), scores.shape)
        return int(layer), int(head), float(scores[layer, head])


def _weights(model: GPT, tokens: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad(), torch_threads(1):
        _, weights = model(tokens, return_weights=True)
    return weights


def head_scores(model: GPT, vocab: CharVocab | None = None, windows: int = 8) -> HeadScores:
    """Measure every head of ``model`` (eval mode, one thread).

    The real-text scores read ``windows`` evenly spaced windows of ``max_len`` characters
    from the held-out play; prefix matching reads :func:`repeated_random_text` of
    ``PROBE_BATCH`` rows and a block of ``PROBE_LENGTH`` (seeded, ``PROBE_SEED``).
    """
    check_instance("head_scores", "model", model, GPT, "an attnlib.gpt.GPT")
    vocab = vocabulary() if vocab is None else vocab
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(PROBE_SEED)
    rnd = repeated_random_text(PROBE_BATCH, PROBE_LENGTH, vocab, generator=gen)
    real = validation_windows(validation_tokens(), model.max_len - 1, windows)
    newline = real == vocab.encode("\n")[0]  # (windows, max_len)
    first = torch.zeros(real.shape[1], dtype=torch.bool)
    first[0] = True
    passages = real[:, :PROBE_LENGTH]
    w_rnd, w_real = _weights(model, rnd), _weights(model, real)
    w_text = _weights(model, torch.cat([passages, passages], 1))
    model.train(was_training)
    uniform = torch.tril(torch.ones(real.shape[1], real.shape[1]))
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(len(real), 1, -1, -1)

    def stack(f):
        return np.stack([f(i).double().numpy() for i in range(model.n_layers)])

    return HeadScores(
        previous_token=stack(lambda i: previous_token_score(w_real[i])),
        prefix_matching=stack(lambda i: prefix_matching_score(w_rnd[i], PROBE_LENGTH)),
        prefix_matching_text=stack(lambda i: prefix_matching_score(w_text[i], PROBE_LENGTH)),
        first_position=stack(lambda i: attention_on(w_real[i], first)),
        newline=stack(lambda i: attention_on(w_real[i], newline)),
        uniform_first=float(attention_on(uniform, first)[0]),
        uniform_newline=float(attention_on(uniform, newline)[0]),
    )


# ----------------------------------------------------------------------------------------
# Training.
# ----------------------------------------------------------------------------------------


def learning_rate(step: int, training: dict = TRAINING) -> float:
    """The learning rate at ``step``: linear warm-up to ``lr`` over ``warmup`` steps, then
    a cosine decay to ``final · lr`` at the last step.

    Examples
    --------
    >>> t = {"steps": 11, "lr": 1.0, "warmup": 2, "final": 0.1}
    >>> [round(learning_rate(s, t), 3) for s in (0, 1, 6, 10)]
    [0.5, 1.0, 0.472, 0.1]
    """
    steps, lr, warmup = training["steps"], training["lr"], training["warmup"]
    check_int("learning_rate", "step", step, minimum=0, maximum=steps - 1)
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup + 1) / max(steps - warmup, 1) if steps > warmup else 1.0
    cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return lr * (training["final"] + (1 - training["final"]) * cosine)


def training_batch(
    tokens: torch.Tensor, batch: int, seq: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``batch`` windows of ``seq + 1`` consecutive tokens at random starts: one training
    step's inputs (``[:, :-1]``) and next-token targets (``[:, 1:]``).

    The starts are ``torch.randint(0, n - seq, (batch,), generator=generator)``, one call
    per batch: the draw :func:`train_model` makes at every step (so that a loop calling it
    with the recipe's seed reads the shipped model's windows).

    Parameters
    ----------
    tokens : LongTensor of shape (n,), n > seq
        E.g. :func:`training_tokens`.
    batch, seq : int, >= 1
    generator : torch.Generator, optional
        Default: torch's global generator.

    Returns
    -------
    LongTensor of shape (batch, seq + 1)

    Examples
    --------
    >>> training_batch(torch.arange(100), 2, 4, torch.Generator().manual_seed(0))
    tensor([[44, 45, 46, 47, 48],
            [15, 16, 17, 18, 19]])
    """
    fn = "training_batch"
    check_array(fn, "tokens", tokens, only="torch")
    batch = check_int(fn, "batch", batch, minimum=1)
    seq = check_int(fn, "seq", seq, minimum=1)
    if tokens.dtype != torch.long:
        raise TypeError(f"{fn}: tokens must be a LongTensor (n,), got dtype {tokens.dtype}")
    if tokens.ndim != 1 or tokens.numel() <= seq:
        raise ValueError(
            f"{fn}: tokens must have shape (n,) with n > seq = {seq}, got {tuple(tokens.shape)}"
        )
    if generator is not None:
        check_instance(fn, "generator", generator, torch.Generator, "a torch.Generator or None")
    starts = torch.randint(0, len(tokens) - seq, (batch,), generator=generator)  # (batch,)
    return torch.stack([tokens[s : s + seq + 1] for s in starts.tolist()])


def _new_model(vocab_size: int) -> GPT:
    return GPT(vocab_size, **CONFIG)


def train_model(training: dict = TRAINING, *, progress: bool = False, path=CORPUS_PATH):
    """Train a fresh :class:`attnlib.gpt.GPT` of :data:`CONFIG` on the training plays.

    Each step takes ``batch`` windows of ``max_len + 1`` characters at random starts in
    the training plays (:func:`training_batch`, a seeded generator), gives the first
    ``round(repeats · batch)`` of them a repeated passage (:func:`repeat_passages`, drawing
    from the same generator; none when ``repeats`` is 0) and minimises the mean
    next-character loss with Adam, :func:`learning_rate`'s schedule and gradient clipping.
    Every ``eval_every`` steps and at the last, the log records the validation loss on
    ``EVAL_WINDOWS`` windows of the held-out play and the highest prefix-matching score of
    any head. One thread, seeded: the same run on every machine up to float rounding.

    Parameters
    ----------
    training : dict
        :data:`TRAINING`, :data:`COPY_TRAINING` (the shipped runs) or their shortened
        schedules :data:`SHORT_TRAINING`, :data:`COPY_SHORT_TRAINING` (`make test`'s).
    progress : bool, default False

    Returns
    -------
    model : GPT (eval mode)
    rows : dict of column name -> ndarray, the log (:func:`write_log`)
    seconds : float
        Wall time of the training loop.
    """
    missing = {"steps", "batch", "lr", "warmup", "final", "clip", "seed", "eval_every"}
    missing |= {"repeats", "repeat_lengths"}
    missing -= set(training)
    if missing:
        raise ValueError(f"train_model: training lacks {sorted(missing)}")
    repeats = training["repeats"]
    if not 0 <= repeats <= 1:
        raise ValueError(f"train_model: training['repeats'] must be in [0, 1], got {repeats!r}")
    n_repeats = round(repeats * training["batch"])
    vocab = vocabulary(path)
    train_tokens, val = training_tokens(path), validation_tokens(path)
    seq = CONFIG["max_len"]
    eval_windows = validation_windows(val, seq, EVAL_WINDOWS)
    probe = repeated_random_text(
        PROBE_BATCH, PROBE_LENGTH, vocab, generator=torch.Generator().manual_seed(PROBE_SEED)
    )
    steps = training["steps"]
    rows = {c: np.full(steps, np.nan) for c in LOG_COLUMNS}
    rows["step"] = np.arange(steps)
    t0 = time.perf_counter()
    with torch_threads(1):
        torch.manual_seed(training["seed"])
        model = _new_model(vocab.size)
        opt = torch.optim.Adam(model.parameters(), lr=training["lr"], betas=(0.9, 0.95))
        gen = torch.Generator().manual_seed(training["seed"] + 1)
        with progress_bar(steps, "plays model", progress) as bar:
            for i in range(steps):
                lr = learning_rate(i, training)
                for group in opt.param_groups:
                    group["lr"] = lr
                x = training_batch(train_tokens, training["batch"], seq, gen)  # (batch, seq + 1)
                if n_repeats:
                    x = repeat_passages(x, n_repeats, training["repeat_lengths"], generator=gen)
                logits = model(x[:, :-1])  # (batch, seq, vocab)
                loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
                if not torch.isfinite(loss):
                    raise FloatingPointError(
                        f"train_model: the loss became {loss.item()} at step {i}"
                    )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), training["clip"])
                opt.step()
                rows["lr"][i], rows["loss"][i] = lr, loss.item()
                if i % training["eval_every"] == 0 or i == steps - 1:
                    rows["val_loss"][i] = validation_loss(model, eval_windows)
                    model.eval()
                    w = _weights(model, probe)
                    model.train()
                    rows["prefix_matching"][i] = max(
                        float(prefix_matching_score(x, PROBE_LENGTH).max()) for x in w
                    )
                bar.update(1)
    return model.eval(), rows, time.perf_counter() - t0


# ----------------------------------------------------------------------------------------
# Shipping and loading.
# ----------------------------------------------------------------------------------------


def save_weights(model: GPT, path: str | Path) -> None:
    """Save the state dict in float16 (``lm_head.weight`` left out: it is ``wte.weight``)."""
    state = {
        k: v.detach().to(torch.float16).contiguous()
        for k, v in model.state_dict().items()
        if k != "lm_head.weight"
    }
    torch.save(state, path)


def load_model(path: str | Path = WEIGHTS_PATH) -> GPT:
    """A shipped model (float32, eval mode): a :class:`attnlib.gpt.GPT` of :data:`CONFIG`
    over the corpus's 76 characters; the plain recipe's by default,
    :data:`COPY_WEIGHTS_PATH` for the copy recipe's."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"load_model: {path} does not exist; run `{TRAIN_COMMAND}`")
    state = torch.load(path, weights_only=True)
    vocab_size = state["wte.weight"].shape[0]
    model = _new_model(vocab_size)
    state = {k: v.to(torch.float32) for k, v in state.items()}
    state["lm_head.weight"] = state["wte.weight"]
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise ValueError(
            f"load_model: {path} does not hold a model of CONFIG = {CONFIG}; retrain it with "
            f"`{TRAIN_COMMAND}` ({e})"
        ) from None
    return model.eval()


def write_log(rows: dict, path: str | Path) -> None:
    """The log as tab-separated text, one line per step: ``step``, ``lr`` (6 significant
    digits), ``loss`` and ``val_loss`` (nats) and ``prefix_matching`` to 4 decimals
    (``nan`` on the steps without an evaluation)."""
    lines = ["\t".join(LOG_COLUMNS)]
    for i in range(len(rows["step"])):
        vals = [str(int(rows["step"][i])), f"{float(rows['lr'][i]):.6g}"]
        vals += [f"{float(rows[c][i]):.4f}" for c in LOG_COLUMNS[2:]]
        lines.append("\t".join(vals))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_log(path: str | Path = LOG_PATH) -> dict[str, np.ndarray]:
    """A shipped log (default: the full run's; :data:`SHORT_LOG_PATH` for the short one)
    as a dict of column name -> array, one entry per step."""
    log = read_log_table(path, TRAIN_COMMAND, LOG_COLUMNS)
    log["step"] = log["step"].astype(int)
    return log


SCORE_NAMES = (
    "previous_token",
    "prefix_matching",
    "prefix_matching_text",
    "first_position",
    "newline",
)


def measure(model: GPT) -> dict[str, float]:
    """The numbers ``plays_results.tsv`` holds for ``model``: its validation loss on the
    whole held-out play and the two baselines (nats), and every head's scores
    (``<score>/<layer>.<head>`` for every name in :data:`SCORE_NAMES`)."""
    vocab = vocabulary()
    train, val = training_tokens(), validation_tokens()
    out = {
        "val_loss": validation_loss(model),
        "unigram_loss": unigram_loss(train, val, vocab.size),
        "bigram_loss": bigram_loss(train, val, vocab.size),
    }
    scores = head_scores(model, vocab)
    for name in SCORE_NAMES:
        table = getattr(scores, name)
        for layer, head in np.ndindex(table.shape):
            out[f"{name}/{layer}.{head}"] = float(table[layer, head])
    out["uniform_first"], out["uniform_newline"] = scores.uniform_first, scores.uniform_newline
    return out


def write_results(results: dict[str, float], path: str | Path) -> None:
    """``name<TAB>value`` lines (values to 4 decimals; seconds to 1) under a header."""
    lines = ["name\tvalue"]
    for k, v in results.items():
        lines.append(f"{k}\t{v:.1f}" if k == "train_seconds" else f"{k}\t{v:.4f}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_results(path: str | Path = RESULTS_PATH) -> dict[str, float]:
    """The shipped measurements (:func:`measure`, plus ``train_seconds``) as a dict."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"read_results: {path} does not exist; run `{TRAIN_COMMAND}`")
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines[:1] != ["name\tvalue"]:
        raise ValueError(f"read_results: {path} does not start with the header 'name<TAB>value'")
    return {k: float(v) for k, v in (ln.split("\t") for ln in lines[1:])}


def train_recipe(name: str, out: str | Path, progress: bool = False) -> str:
    """Train one recipe of :data:`RECIPES` (its short run, then its full run), write its
    four files into the folder ``out`` and return one line of what was measured."""
    if name not in RECIPES:
        raise ValueError(f"train_recipe: name must be one of {sorted(RECIPES)}, got {name!r}")
    out = Path(out)
    recipe = RECIPES[name]
    _, short_rows, _ = train_model(recipe.short_training, progress=progress)
    write_log(short_rows, out / recipe.short_log.name)
    model, rows, seconds = train_model(recipe.training, progress=progress)
    save_weights(model, out / recipe.weights.name)
    write_log(rows, out / recipe.log.name)
    results = {**measure(load_model(out / recipe.weights.name)), "train_seconds": seconds}
    write_results(results, out / recipe.results.name)
    best = {
        n: max((v, k) for k, v in results.items() if k.startswith(n + "/")) for n in SCORE_NAMES
    }
    heads = "; ".join(f"{n} {k.split('/')[1]} {v:.3f}" for n, (v, k) in best.items())
    return (
        f"{name}: validation loss {results['val_loss']:.4f} nats (unigram "
        f"{results['unigram_loss']:.4f}, bigram {results['bigram_loss']:.4f}); best heads: "
        f"{heads}; training loop {seconds:.0f} s"
    )


def _train_and_save(out: Path, progress: bool) -> str:
    # The recipes train side by side, one process (and one thread) each: the same numbers
    # as one after the other, in half the wall time on two cores.
    from attnlib.tasks import plays  # the importable module, also under `python -m`

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(RECIPES), mp_context=context) as pool:
        jobs = [pool.submit(plays.train_recipe, name, out, progress) for name in RECIPES]
        return "\n".join(job.result() for job in jobs)


def _main(argv=None) -> None:
    train_command(
        argv, __doc__, "train the model and save it", WEIGHTS_PATH.parent, _train_and_save
    )


if __name__ == "__main__":
    _main()
