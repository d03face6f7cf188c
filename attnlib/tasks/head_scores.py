"""Head scores for any causal self-attention weights: the previous-token score, the
prefix-matching (induction) score, the share of attention on chosen keys, and the repeated
random text the prefix-matching score reads. Lesson 16 applies them to the plays models
(:mod:`attnlib.tasks.plays` re-exports them, as ``plays.prefix_matching_score`` and so on).
"""

from __future__ import annotations

import torch

from attnlib._validate import check_array, check_instance, check_int
from attnlib.tasks.text import CharVocab

__all__ = [
    "previous_token_score",
    "prefix_matching_score",
    "attention_on",
    "repeated_random_text",
]


def _check_weights(fn: str, weights) -> None:
    check_array(fn, "weights", weights, only="torch")
    if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"{fn}: weights must be causal self-attention weights of shape (batch, n_heads, "
            f"seq, seq), got {tuple(weights.shape)}"
        )
    if weights.shape[-1] < 2:
        raise ValueError(f"{fn}: weights need seq >= 2 positions, got {weights.shape[-1]}")


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight each head puts on the position right before the query.

    Parameters
    ----------
    weights : Tensor of shape (batch, n_heads, seq, seq)
        One layer's causal self-attention weights (rows sum to 1).

    Returns
    -------
    Tensor of shape (n_heads,)
        The mean over the batch and the query positions t = 1 .. seq-1 of
        ``weights[b, h, t, t - 1]``: 1 for a head that always looks one position back.

    Examples
    --------
    >>> w = torch.zeros(1, 1, 3, 3)
    >>> w[0, 0, 0, 0] = w[0, 0, 1, 0] = w[0, 0, 2, 1] = 1.0   # always the previous position
    >>> previous_token_score(w).round(decimals=3)   # one score per head
    tensor([1.])
    """
    _check_weights("previous_token_score", weights)
    t = torch.arange(1, weights.shape[-1])
    return weights[:, :, t, t - 1].mean(dim=(0, 2))  # (n_heads,)


def prefix_matching_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """Mean weight each head puts on the token after the earlier occurrence of the query's.

    For a sequence whose token at position t equals the one at ``t - period`` (a block
    repeated, :func:`repeated_random_text`), the query at t ≥ ``period`` has seen its own
    token at ``t - period``; an induction head attends to the token that came *next*, at
    ``t - period + 1``, and copies it as its prediction.

    Parameters
    ----------
    weights : Tensor of shape (batch, n_heads, seq, seq)
    period : int
        The block's length, 1 <= period < seq.

    Returns
    -------
    Tensor of shape (n_heads,)
        The mean over the batch and the queries t = period .. seq-1 of
        ``weights[b, h, t, t - period + 1]``.

    Examples
    --------
    >>> w = torch.zeros(1, 1, 6, 6)       # a block of 3 seen twice: query t looks at t - 2
    >>> for t in range(6):
    ...     w[0, 0, t, max(t - 2, 0)] = 1.0
    >>> prefix_matching_score(w, 3).round(decimals=3)   # one score per head
    tensor([1.])
    """
    fn = "prefix_matching_score"
    _check_weights(fn, weights)
    seq = weights.shape[-1]
    period = check_int(fn, "period", period, minimum=1, maximum=seq - 1)
    t = torch.arange(period, seq)
    return weights[:, :, t, t - period + 1].mean(dim=(0, 2))  # (n_heads,)


def attention_on(weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """The share of each head's attention that goes to the chosen keys.

    Parameters
    ----------
    weights : Tensor of shape (batch, n_heads, seq, seq)
    keys : BoolTensor of shape (seq,) or (batch, seq)
        True at the key positions that count: ``keys[0] = True`` alone for the first
        position, ``tokens == newline`` for newlines.

    Returns
    -------
    Tensor of shape (n_heads,)
        The mean over the batch and the query positions t = 1 .. seq-1 of the weight on the
        chosen keys (query 0 sees only position 0 and is left out).

    Examples
    --------
    >>> w = torch.tensor([[[[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.2, 0.6]]]])
    >>> first = torch.tensor([True, False, False])
    >>> attention_on(w, first)                      # (0.5 + 0.2) / 2
    tensor([0.3500])
    """
    fn = "attention_on"
    _check_weights(fn, weights)
    check_array(fn, "keys", keys, only="torch")
    batch, _, seq, _ = weights.shape
    if keys.dtype != torch.bool or keys.shape not in ((seq,), (batch, seq)):
        raise ValueError(
            f"{fn}: keys must be a BoolTensor of shape (seq,) = ({seq},) or (batch, seq) = "
            f"({batch}, {seq}), got {keys.dtype} {tuple(keys.shape)}"
        )
    keys = keys.expand(batch, seq)[:, None, None, :]  # (batch, 1, 1, seq)
    on = (weights * keys).sum(-1)  # (batch, n_heads, seq)
    return on[:, :, 1:].mean(dim=(0, 2))  # (n_heads,)


def repeated_random_text(
    batch: int,
    length: int,
    vocab: CharVocab,
    *,
    generator: torch.Generator | None = None,
    exclude: str = "\n",
) -> torch.Tensor:
    """``length`` random characters, then the same characters again.

    Characters are drawn uniformly and independently (repeats allowed) from the vocabulary
    without ``exclude``; text like this never occurs in the plays, so only a head that
    matches prefixes, whatever the characters, predicts the second copy.

    Returns
    -------
    tokens : LongTensor of shape (batch, 2 * length)
    """
    fn = "repeated_random_text"
    batch = check_int(fn, "batch", batch, minimum=1)
    length = check_int(fn, "length", length, minimum=1)
    check_instance(fn, "vocab", vocab, CharVocab, "a CharVocab")
    allowed = torch.tensor([i for i, c in enumerate(vocab.chars) if c not in exclude])
    if allowed.numel() == 0:
        raise ValueError(f"{fn}: exclude={exclude!r} leaves no character to draw")
    block = allowed[torch.randint(0, allowed.numel(), (batch, length), generator=generator)]
    return torch.cat([block, block], 1)  # (batch, 2 * length)
