"""Reading a trained character model (lesson 16): its queries and keys, windows, classes.

Tools lesson 16 uses on :func:`attnlib.tasks.plays.load_model`, written for any
:class:`attnlib.gpt.GPT`:

* :func:`queries_keys` — every block's queries, keys and weights on some text, taken from
  the block's own projections of what its attention reads (``ln_1`` of the stream), so
  that ``softmax(q · k / √d_head)`` under the causal mask *is* the block's weights;
* :func:`windowed_logits` — the model's logits when every attention layer sees only the
  last ``window`` keys (lesson 14's sliding-window mask), for what a window costs in loss;
* :func:`entropy` — the entropy of each query's weights (nats);
* :data:`CHAR_CLASSES`, :func:`char_class` — space, newline, vowel, consonant, capital,
  punctuation; :func:`show_char` — a character as an axis label (``␣``, ``⏎``);
* :func:`nearest_centroid_accuracy` — each test point gets the class of the nearest class
  mean of the training points; :func:`linear_probe_accuracy` — a linear read-out fitted by
  ridge least squares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnlib._validate import check_instance, check_int
from attnlib.core import softmax
from attnlib.gpt import GPT
from attnlib.heads import split_heads
from attnlib.training import torch_threads
from attnlib.windows import sliding_window_mask

__all__ = [
    "CHAR_CLASSES",
    "QKW",
    "char_class",
    "entropy",
    "linear_probe_accuracy",
    "nearest_centroid_accuracy",
    "queries_keys",
    "show_char",
    "windowed_logits",
]

CHAR_CLASSES = ("space", "newline", "vowel", "consonant", "capital", "punctuation")
_VOWELS = set("aeiou")


def char_class(c: str) -> int:
    """The index in :data:`CHAR_CLASSES` of character ``c``.

    Lower-case letters are vowels (a e i o u) or consonants, upper-case letters capitals;
    every other character (punctuation, digits, quotes) counts as punctuation.

    Examples
    --------
    >>> [CHAR_CLASSES[char_class(c)] for c in " \\naxT,"]
    ['space', 'newline', 'vowel', 'consonant', 'capital', 'punctuation']
    """
    if not isinstance(c, str) or len(c) != 1:
        raise ValueError(f"char_class: c must be one character, got {c!r}")
    if c == " ":
        return 0
    if c == "\n":
        return 1
    if c.islower():
        return 2 if c in _VOWELS else 3
    if c.isupper():
        return 4
    return 5


def show_char(c: str) -> str:
    """``c`` as a tick label: ``␣`` for a space, ``⏎`` for a newline, else itself."""
    return {" ": "␣", "\n": "⏎"}.get(c, c)


@dataclass(frozen=True)
class QKW:
    """One block's attention on a batch of text.

    q, k : Tensor of shape (batch, n_heads, seq, d_head)
    weights : Tensor of shape (batch, n_heads, seq, seq)
    """

    q: torch.Tensor
    k: torch.Tensor
    weights: torch.Tensor

    @property
    def scores(self) -> torch.Tensor:
        """``q · k / √d_head``, (batch, n_heads, seq, seq), before the mask."""
        return self.q @ self.k.transpose(-2, -1) / math.sqrt(self.q.shape[-1])


def _check_model_tokens(fn: str, model, tokens) -> None:
    check_instance(fn, "model", model, GPT, "an attnlib.gpt.GPT")
    if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long or tokens.ndim != 2:
        raise ValueError(f"{fn}: tokens must be a LongTensor (batch, seq)")
    if tokens.shape[1] > model.max_len:
        raise ValueError(f"{fn}: seq={tokens.shape[1]} exceeds max_len={model.max_len}")


def queries_keys(model: GPT, tokens: torch.Tensor) -> list[QKW]:
    """Every block's queries, keys and weights on ``tokens`` (no gradients, one thread).

    Parameters
    ----------
    model : GPT (evaluated as it is: call ``model.eval()`` first)
    tokens : LongTensor of shape (batch, seq), seq <= ``model.max_len``

    Returns
    -------
    list of QKW, one per block
        ``weights`` are what the model computed; ``q`` and ``k`` are the block's
        ``W_q`` and ``W_k`` of ``ln_1`` of the stream entering the block, split into heads.
    """
    _check_model_tokens("queries_keys", model, tokens)
    reads = []
    hooks = [b.attn.register_forward_hook(lambda m, a, o: reads.append(a[0])) for b in model.h]
    try:
        with torch.no_grad(), torch_threads(1):
            _, weights = model(tokens, return_weights=True)
            out = []
            for block, x, w in zip(model.h, reads, weights, strict=True):
                q = split_heads(block.attn.W_q(x), model.n_heads)  # (batch, n_heads, seq, d_head)
                k = split_heads(block.attn.W_k(x), model.n_heads)  # (batch, n_heads, seq, d_head)
                out.append(QKW(q, k, w))
    finally:
        for h in hooks:
            h.remove()
    return out


def windowed_logits(model: GPT, tokens: torch.Tensor, window: int) -> torch.Tensor:
    """The model's logits when each query sees only itself and the ``window - 1`` keys before it.

    The same weights and blocks as ``model(tokens)``; only the mask of every attention layer
    is :func:`attnlib.windows.sliding_window_mask` instead of the causal mask. With
    ``window >= seq`` it equals ``model(tokens)``.

    Parameters
    ----------
    model : GPT
    tokens : LongTensor of shape (batch, seq)
    window : int, >= 1

    Returns
    -------
    Tensor of shape (batch, seq, vocab_size)
    """
    fn = "windowed_logits"
    _check_model_tokens(fn, model, tokens)
    window = check_int(fn, "window", window, minimum=1)
    seq = tokens.shape[1]
    mask = sliding_window_mask(seq, window=window, like=tokens)  # (seq, seq), True = may attend
    with torch.no_grad(), torch_threads(1):
        x = model.wte(tokens) + model.wpe(torch.arange(seq))  # (batch, seq, d_model)
        for block in model.h:
            a = block.attn
            h = block.ln_1(x)
            q, k, v = (split_heads(W(h), model.n_heads) for W in (a.W_q, a.W_k, a.W_v))
            s = q @ k.transpose(-2, -1) / math.sqrt(model.d_head)  # (batch, n_heads, seq, seq)
            out = softmax(s, mask=mask) @ v  # (batch, n_heads, seq, d_head)
            merged = out.transpose(1, 2).reshape(x.shape)  # (batch, seq, d_model)
            x = x + a.W_o(merged)
            x = x + block.mlp(block.ln_2(x))
        return model.lm_head(model.ln_f(x))  # (batch, seq, vocab_size)


def entropy(weights: torch.Tensor) -> torch.Tensor:
    """The entropy (nats) of every query's weights: ``-Σ_k w log w`` over the last axis.

    Zero weights (masked keys) add nothing. Shape: ``weights.shape[:-1]``.

    Examples
    --------
    >>> h = entropy(torch.tensor([[1.0, 0.0], [0.5, 0.5]]))  # all on one key; even over two
    >>> h.shape
    torch.Size([2])
    >>> h[0].item() == 0  # certain: the zero weight adds nothing (no nan from 0 · log 0)
    True
    >>> round(h[1].item(), 4)  # log 2, the most uncertain two keys can be
    0.6931
    """
    w = torch.as_tensor(weights)
    return -(w * torch.where(w > 0, w, torch.ones_like(w)).log()).sum(-1)


def nearest_centroid_accuracy(train_x, train_y, test_x, test_y) -> float:
    """Accuracy of the nearest class mean: each test point gets the class whose mean of the
    training points lies nearest (Euclidean).

    Parameters
    ----------
    train_x, test_x : array-like of shape (n, d)
    train_y, test_y : int array-like of shape (n,)

    Returns
    -------
    float
        The share of test points whose nearest centroid is their own class (classes absent
        from the training points are never predicted).
    """
    tx, ty = np.asarray(train_x, dtype=np.float64), np.asarray(train_y)
    vx, vy = np.asarray(test_x, dtype=np.float64), np.asarray(test_y)
    if tx.ndim != 2 or vx.ndim != 2 or tx.shape[1] != vx.shape[1]:
        raise ValueError(
            f"nearest_centroid_accuracy: train_x and test_x must be (n, d) with one d, got "
            f"{tx.shape} and {vx.shape}"
        )
    if ty.shape != (len(tx),) or vy.shape != (len(vx),):
        raise ValueError("nearest_centroid_accuracy: one label per point")
    classes = np.unique(ty)
    centroids = np.stack([tx[ty == c].mean(0) for c in classes])  # (n_classes, d)
    d2 = ((vx[:, None, :] - centroids[None]) ** 2).sum(-1)  # (n_test, n_classes)
    return float((classes[d2.argmin(1)] == vy).mean())


def linear_probe_accuracy(train_x, train_y, test_x, test_y, *, ridge: float = 1.0) -> float:
    """Accuracy of a linear probe fitted by ridge least squares to one-hot class targets.

    The probe is ``argmax(x W + b)`` with ``[W; b]`` minimising ``‖[X 1] [W; b] − Y‖² +
    ridge ‖[W; b]‖²`` on the training points (Y their one-hot classes): a linear read-out
    that can ignore directions a nearest class mean cannot (position, say).

    Parameters
    ----------
    train_x, test_x : array-like of shape (n, d)
    train_y, test_y : int array-like of shape (n,)
    ridge : float, default 1.0

    Returns
    -------
    float
        The share of test points classified correctly.
    """
    tx, ty = np.asarray(train_x, dtype=np.float64), np.asarray(train_y)
    vx, vy = np.asarray(test_x, dtype=np.float64), np.asarray(test_y)
    if tx.ndim != 2 or vx.ndim != 2 or tx.shape[1] != vx.shape[1]:
        raise ValueError(
            f"linear_probe_accuracy: train_x and test_x must be (n, d) with one d, got "
            f"{tx.shape} and {vx.shape}"
        )
    classes = np.unique(ty)
    targets = (ty[:, None] == classes[None, :]).astype(np.float64)  # (n, n_classes)
    a = np.c_[tx, np.ones(len(tx))]  # (n, d + 1)
    w = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ targets)
    pred = classes[(np.c_[vx, np.ones(len(vx))] @ w).argmax(1)]
    return float((pred == vy).mean())
