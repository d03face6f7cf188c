"""Reading a trained character model (lesson 16): its queries and keys, windows, classes.

Tools lesson 16 uses on :func:`attnlib.tasks.plays.load_model`, written for any
:class:`attnlib.gpt.GPT`:

* :func:`queries_keys` — every block's queries, keys and weights on some text, taken from
  the block's own projections of what its attention reads (``ln_1`` of the stream), so
  that ``softmax(q · k / √d_head)`` under the causal mask *is* the block's weights;
* :func:`windowed_logits` — the model's logits when every attention layer sees only the
  last ``window`` keys (lesson 14's sliding-window mask), for what a window costs in loss;
* :func:`ablated_logits` — the model's logits with chosen heads ablated: each head's
  output (its slice of what ``W_o`` reads) set to zero, to its mean over a reference
  batch, or to its output on another text (resample ablation) — a causal test of what a
  head does;
* :func:`per_position_loss` — the next-character loss at each position (with heads
  ablated, if asked): the second copy of a passage against the first, late context
  against early (Olsson et al. 2022's in-context score);
* :func:`entropy` — the entropy of each query's weights (nats);
* :data:`CHAR_CLASSES`, :func:`char_class` — space, newline, vowel, consonant, capital,
  punctuation; :func:`show_char` — a character as an axis label (``␣``, ``⏎``);
* :func:`nearest_centroid_accuracy` — each test point gets the class of the nearest class
  mean of the training points; :func:`linear_probe_accuracy` — a linear read-out fitted by
  ridge least squares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from attnlib._validate import check_array, check_choice, check_instance, check_int, type_name
from attnlib.core import softmax
from attnlib.gpt import GPT
from attnlib.heads import split_heads
from attnlib.training import torch_threads
from attnlib.windows import sliding_window_mask

__all__ = [
    "ABLATIONS",
    "CHAR_CLASSES",
    "QKW",
    "ablated_logits",
    "char_class",
    "entropy",
    "linear_probe_accuracy",
    "nearest_centroid_accuracy",
    "per_position_loss",
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


# ----------------------------------------------------------------------------------------
# Ablating heads.
# ----------------------------------------------------------------------------------------

ABLATIONS = ("zero", "mean", "resample")


def _check_ids(fn: str, name: str, ids, model: GPT, extra: int = 0) -> None:
    """``ids`` a LongTensor (batch >= 1, 1 + extra <= seq <= max_len + extra) of ids the
    model embeds (``extra=1``: inputs and their next-token targets)."""
    check_array(fn, name, ids, only="torch")
    if ids.dtype != torch.long:
        raise TypeError(f"{fn}: {name} must be a LongTensor (batch, seq), got dtype {ids.dtype}")
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1 + extra:
        raise ValueError(
            f"{fn}: {name} must have shape (batch >= 1, seq >= {1 + extra}), got {tuple(ids.shape)}"
        )
    longest = model.max_len + extra
    if ids.shape[1] > longest:
        over = "max_len" if not extra else f"max_len + {extra}"
        raise ValueError(f"{fn}: {name} has seq={ids.shape[1]}, over {over} = {longest}")
    if bool(((ids < 0) | (ids >= model.vocab_size)).any()):
        raise ValueError(
            f"{fn}: {name} holds ids from {int(ids.min())} to {int(ids.max())}, outside 0 .. "
            f"vocab_size - 1 = {model.vocab_size - 1}"
        )


def _check_heads(fn: str, heads, model: GPT) -> dict[int, list[int]]:
    """``heads``, an iterable of (layer, head) pairs, as layer -> its heads (sorted, once)."""
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable):
        raise TypeError(
            f"{fn}: heads must be an iterable of (layer, head) pairs, got {type_name(heads)}"
        )
    by_layer: dict[int, set[int]] = {}
    for i, pair in enumerate(heads):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise TypeError(
                f"{fn}: heads[{i}] must be a (layer, head) pair, got {pair!r} (one head: "
                f"heads=[(layer, head)])"
            )
        layer = check_int(fn, f"heads[{i}]'s layer", pair[0], minimum=0, maximum=model.n_layers - 1)
        head = check_int(fn, f"heads[{i}]'s head", pair[1], minimum=0, maximum=model.n_heads - 1)
        by_layer.setdefault(layer, set()).add(head)
    return {layer: sorted(h) for layer, h in sorted(by_layer.items())}


def _check_reference(fn: str, how: str, reference, tokens, model: GPT, extra: int = 0) -> None:
    if how == "zero":
        if reference is not None:
            raise ValueError(f"{fn}: reference is read only by how='mean' or how='resample'")
        return
    if reference is None:
        if how == "resample":
            raise ValueError(
                f"{fn}: how='resample' needs a reference of tokens' shape {tuple(tokens.shape)}"
            )
        return
    _check_ids(fn, "reference", reference, model, extra)
    if how == "resample" and reference.shape != tokens.shape:
        raise ValueError(
            f"{fn}: how='resample' needs reference of tokens' shape {tuple(tokens.shape)}, got "
            f"{tuple(reference.shape)}"
        )
    if how == "mean" and reference.shape[1] < tokens.shape[1]:
        raise ValueError(
            f"{fn}: how='mean' needs reference (batch_r, seq_r) with seq_r >= seq = "
            f"{tokens.shape[1]}, got {tuple(reference.shape)}"
        )


def _head_inputs(model: GPT, layers, tokens: torch.Tensor) -> dict[int, torch.Tensor]:
    """What ``W_o`` reads in each of ``layers`` on a clean run of ``tokens``:
    layer -> (batch, seq, d_model), the heads side by side (merge_heads' order)."""
    seen: dict[int, torch.Tensor] = {}
    hooks = []
    try:
        for layer in layers:
            record = lambda m, a, layer=layer: seen.__setitem__(layer, a[0])  # noqa: E731
            hooks.append(model.h[layer].attn.W_o.register_forward_pre_hook(record))
        model(tokens)
    finally:
        for h in hooks:
            h.remove()
    return seen


def _overwrite(heads: list[int], d_head: int, fill: torch.Tensor | None):
    """A pre-hook on ``W_o``: the columns of ``heads`` replaced by ``fill``'s (0 if None)."""

    def hook(module, args):
        x = args[0].clone()  # (batch, seq, d_model): every head's output, side by side
        for h in heads:
            cols = slice(h * d_head, (h + 1) * d_head)
            x[..., cols] = 0.0 if fill is None else fill[..., cols]
        return (x, *args[1:])

    return hook


def _run_ablated(model: GPT, tokens, by_layer: dict, how: str, reference, return_weights=False):
    """:func:`ablated_logits`' work, on checked arguments."""
    seq = tokens.shape[1]
    was_training = model.training
    model.eval()
    hooks = []
    try:
        with torch.no_grad(), torch_threads(1):
            fills: dict[int, torch.Tensor | None] = dict.fromkeys(by_layer)
            if how != "zero" and by_layer:
                ref = tokens if reference is None else reference[:, :seq]  # (batch_r, seq)
                clean = _head_inputs(model, by_layer, ref)  # layer -> (batch_r, seq, d_model)
                for layer, out in clean.items():
                    # mean: (seq, d_model), the same for every row; resample: row by row
                    fills[layer] = out.mean(0) if how == "mean" else out
            for layer, hs in by_layer.items():
                hook = _overwrite(hs, model.d_head, fills[layer])
                hooks.append(model.h[layer].attn.W_o.register_forward_pre_hook(hook))
            return model(tokens, return_weights=bool(return_weights))  # logits (batch, seq, vocab)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)


def ablated_logits(
    model: GPT,
    tokens: torch.Tensor,
    heads,
    *,
    how: str = "zero",
    reference=None,
    return_weights: bool = False,
):
    """The model's logits on ``tokens`` with some heads' outputs replaced (ablated).

    A head's output is its ``d_head`` slice of what the block's ``attn.W_o`` reads (head
    ``h`` is features ``h·d_head .. (h+1)·d_head - 1``, :func:`attnlib.heads.merge_heads`'
    order); everything else — the other heads, ``W_o``'s bias, the MLPs, the later layers —
    is computed as usual, so that the ablation's effect flows through the rest of the model.
    Three ablations:

    * ``"zero"`` — the slice set to 0 (as if the head wrote nothing into the stream);
    * ``"mean"`` — set, at each position, to the head's mean output over the rows of
      ``reference`` (default: ``tokens`` itself): what it writes on average there, so that
      only what it reads from *this* text is removed;
    * ``"resample"`` — set to the head's output on row ``i`` of ``reference`` at the same
      position (Olsson et al. 2022's resample ablation): what it would write on other text.

    The reference outputs come from a clean run (nothing ablated), even when heads of
    several layers are ablated together. The ablation is a forward pre-hook on each
    layer's ``W_o``, removed afterwards whatever happens; the model's mode is restored, and
    it is run in eval mode, without gradients, on one thread.

    Parameters
    ----------
    model : GPT
    tokens : LongTensor of shape (batch, seq), seq <= ``model.max_len``
    heads : iterable of (int, int)
        The ``(layer, head)`` pairs to ablate; empty: the model as it is.
    how : {"zero", "mean", "resample"}, default "zero"
    reference : LongTensor, optional
        ``how="mean"``: (batch_r, seq_r) with seq_r >= seq (its first seq positions are
        read; default ``tokens``). ``how="resample"``: required, of ``tokens``' shape.
        ``how="zero"``: not given.
    return_weights : bool, default False
        Also return every layer's attention weights in the ablated run (what a later head
        does once an earlier one is removed).

    Returns
    -------
    logits : Tensor of shape (batch, seq, vocab_size)
    weights : list of Tensor of shape (batch, n_heads, seq, seq), one per layer
        Only with ``return_weights``.

    See Also
    --------
    per_position_loss : the next-character loss at each position, from these logits or not.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> model = GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=2, max_len=32).eval()
    >>> tokens = torch.randint(0, 11, (2, 10))
    >>> ablated_logits(model, tokens, [(1, 0), (1, 3)]).shape     # (batch, seq, vocab_size)
    torch.Size([2, 10, 11])
    >>> same = ablated_logits(model, tokens, [(0, 2)], how="resample", reference=tokens)
    >>> torch.allclose(same, model(tokens), atol=1e-6)  # resampled from itself: no change
    True
    """
    fn = "ablated_logits"
    check_instance(fn, "model", model, GPT, "an attnlib.gpt.GPT")
    _check_ids(fn, "tokens", tokens, model)
    by_layer = _check_heads(fn, heads, model)
    check_choice(fn, "how", how, ABLATIONS)
    _check_reference(fn, how, reference, tokens, model)
    check_instance(fn, "return_weights", return_weights, bool, "a bool")
    return _run_ablated(model, tokens, by_layer, how, reference, return_weights)


def per_position_loss(
    model: GPT, tokens: torch.Tensor, *, heads=(), how: str = "zero", reference=None
) -> torch.Tensor:
    """The next-token loss at every position: ``-log p(tokens[:, t+1] | tokens[:, :t+1])``.

    The model reads ``tokens[:, :-1]`` and is scored on ``tokens[:, 1:]``, position by
    position (cross-entropy, not averaged), so that the loss can be compared along the
    context: Olsson et al. (2022)'s in-context score is the loss late in the context minus
    the loss early in it, and on a passage written twice the second copy's loss shows what
    copying from the first is worth. With ``heads``, the losses of the model with those
    heads ablated (:func:`ablated_logits`). Eval mode, no gradients, one thread.

    Parameters
    ----------
    model : GPT
    tokens : LongTensor of shape (batch, seq), 2 <= seq <= ``model.max_len + 1``
    heads, how : as for :func:`ablated_logits`; default: nothing ablated
    reference : LongTensor, optional
        As for :func:`ablated_logits`, measured against ``tokens``: ``how="resample"``
        needs ``tokens``' shape, ``how="mean"`` at least its seq (only the positions the
        model reads are used).

    Returns
    -------
    Tensor of shape (batch, seq - 1)
        In nats; entry ``t`` is the loss on ``tokens[:, t + 1]``. Its mean is the usual
        mean next-token loss (:func:`attnlib.tasks.plays.validation_loss`).

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> model = GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=2, max_len=32).eval()
    >>> block = torch.randint(0, 11, (4, 16))
    >>> loss = per_position_loss(model, torch.cat([block, block], 1))  # each block twice
    >>> loss.shape                                       # (batch, seq - 1)
    torch.Size([4, 31])
    >>> first, second = loss[:, :15].mean(), loss[:, 16:].mean()  # the two copies' targets
    >>> round(float(first), 1), round(float(second), 1)  # untrained: ln 11 = 2.4, no copying
    (2.4, 2.4)
    """
    fn = "per_position_loss"
    check_instance(fn, "model", model, GPT, "an attnlib.gpt.GPT")
    _check_ids(fn, "tokens", tokens, model, extra=1)
    by_layer = _check_heads(fn, heads, model)
    check_choice(fn, "how", how, ABLATIONS)
    _check_reference(fn, how, reference, tokens, model, extra=1)
    seq = tokens.shape[1] - 1  # the positions the model reads
    ref = None if reference is None else reference[:, :seq]
    logits = _run_ablated(model, tokens[:, :-1], by_layer, how, ref)  # (batch, seq, vocab)
    return F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")


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
