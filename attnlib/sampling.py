"""Choosing a token: filters on a model's logits, then one draw (lessons 16 and 17).

A language model gives logits over the vocabulary; turning them into the next token is a
choice the model does not make. Each filter takes logits ``(..., vocab)`` and returns
logits of the same shape with the tokens it removes set to ``-inf`` (probability 0 after
the softmax); the tokens it keeps are untouched, so the softmax renormalises over them.

* :func:`apply_temperature` — ``logits / temperature``: below 1 sharpens, above 1 flattens;
* :func:`top_k_filter` — keep the ``k`` most likely tokens (and any tied with the ``k``-th);
* :func:`top_p_filter` — nucleus sampling: keep the smallest set of most likely tokens whose
  probabilities add up to ``p`` (the token that crosses ``p`` is kept);
* :func:`min_p_filter` — keep the tokens at least ``min_p`` times as likely as the top one;
* :func:`filter_logits` — the four in Hugging Face's order (temperature, top-k, top-p,
  min-p); :func:`sample_token` — softmax, then one ``torch.multinomial`` draw per row, as
  ``GPT2LMHeadModel.generate(do_sample=True)`` draws;
* :func:`check_filters` — the argument check the filters and
  :func:`attnlib.decoder.generate` share.

Each filter is, value for value, what transformers' ``TemperatureLogitsWarper``,
``TopKLogitsWarper``, ``TopPLogitsWarper`` and ``MinPLogitsWarper`` give on the same logits
(``min_tokens_to_keep=1``), ties included (``tests/test_sampling.py``).
"""

from __future__ import annotations

import torch

from attnlib import _backend as B
from attnlib._validate import (
    as_float_array,
    check_instance,
    check_int,
    check_ndim,
    check_number,
    validated,
)

__all__ = [
    "apply_temperature",
    "top_k_filter",
    "top_p_filter",
    "min_p_filter",
    "filter_logits",
    "sample_token",
    "check_filters",
]


def _check_filters(
    fn: str, *, temperature=None, top_k=None, top_p=None, min_p=None, vocab: int | None = None
) -> None:
    """Refuse a bad filter argument, naming ``fn`` (the function the caller called).

    ``temperature`` > 0, ``top_k`` an int in 1 .. ``vocab``, ``top_p`` in (0, 1],
    ``min_p`` in [0, 1], each finite; ``None`` means "not used" and passes. A wrong type is
    a ``TypeError``, a wrong value a ``ValueError``.

    Examples
    --------
    >>> check_filters("generate", top_p=0.9, min_p=0.0)           # fine: returns None
    >>> check_filters("generate", top_p=0)
    Traceback (most recent call last):
    ...
    ValueError: generate: top_p must be in (0, 1] (the probability mass to keep), got 0.0
    """
    check_number(fn, "temperature", temperature, positive=True, none_ok=True)
    if top_k is not None:
        check_int(fn, "top_k", top_k, minimum=1, maximum=vocab)
    if top_p is not None:
        top_p = check_number(fn, "top_p", top_p)
        if not 0 < top_p <= 1:
            raise ValueError(
                f"{fn}: top_p must be in (0, 1] (the probability mass to keep), got {top_p}"
            )
    if min_p is not None:
        min_p = check_number(fn, "min_p", min_p)
        if not 0 <= min_p <= 1:
            raise ValueError(
                f"{fn}: min_p must be in [0, 1] (a fraction of the top token's probability), "
                f"got {min_p}"
            )


# Public under this name (attnlib.decoder.generate's door calls it); its code is named
# _check_filters, as every attnlib check is, so that it counts as part of the door that
# called it (tests/test_validate_once.py).
check_filters = _check_filters


def _check_logits(fn: str, logits) -> int:
    """``logits`` a floating torch tensor (..., vocab) with vocab >= 1; returns vocab."""
    as_float_array(fn, "logits", logits, only="torch")
    check_ndim(fn, "logits", logits, min_ndim=1, doc="(..., vocab)")
    if logits.shape[-1] < 1:
        raise ValueError(f"{fn}: {B.describe('logits', logits)} has no vocabulary (vocab = 0)")
    return logits.shape[-1]


def _check_apply_temperature(logits, temperature):
    _check_logits("apply_temperature", logits)
    check_number("apply_temperature", "temperature", temperature, positive=True)


@validated(_check_apply_temperature)
def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature``: the softmax of the result is sharper (< 1) or flatter (> 1).

    Dividing every logit by ``T`` raises each probability to the power ``1/T`` before
    renormalising: ``T → 0`` puts all the mass on the most likely token (greedy), ``T = 1``
    leaves the model's distribution, ``T → ∞`` tends to uniform. No token is removed.

    Parameters
    ----------
    logits : Tensor of shape (..., vocab)
    temperature : float, > 0

    Returns
    -------
    Tensor of shape (..., vocab)

    Examples
    --------
    >>> logits = torch.tensor([2.0, 1.0, 0.0])
    >>> torch.softmax(logits, -1).round(decimals=2)
    tensor([0.6700, 0.2400, 0.0900])
    >>> torch.softmax(apply_temperature(logits, 0.5), -1).round(decimals=2)   # sharper
    tensor([0.8700, 0.1200, 0.0200])
    """
    return logits / temperature  # (..., vocab)


def _check_top_k_filter(logits, top_k):
    vocab = _check_logits("top_k_filter", logits)
    check_int("top_k_filter", "top_k", top_k, minimum=1, maximum=vocab)


@validated(_check_top_k_filter)
def top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of each row; every smaller one becomes -inf.

    A logit equal to the ``top_k``-th largest is kept too, so a row with ties at the cut
    keeps more than ``top_k`` tokens (transformers' ``TopKLogitsWarper`` does the same).
    ``top_k = 1`` is greedy decoding, whatever the temperature.

    Parameters
    ----------
    logits : Tensor of shape (..., vocab)
    top_k : int, 1 <= top_k <= vocab

    Returns
    -------
    Tensor of shape (..., vocab)

    Examples
    --------
    >>> top_k_filter(torch.tensor([[3.0, 1.0, 2.0, 0.0]]), 2)
    tensor([[3., -inf, 2., -inf]])
    >>> top_k_filter(torch.tensor([[3.0, 2.0, 2.0, 0.0]]), 2)     # a tie at the cut: both kept
    tensor([[3., 2., 2., -inf]])
    """
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest
    return logits.masked_fill(logits < kth, -torch.inf)  # (..., vocab)


def _check_top_p_filter(logits, top_p):
    _check_logits("top_p_filter", logits)
    check_number("top_p_filter", "top_p", top_p)
    _check_filters("top_p_filter", top_p=top_p)


@validated(_check_top_p_filter)
def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus (top-p) filtering: the most likely tokens until their mass reaches ``top_p``.

    Sort the tokens from most to least likely and add up their probabilities; keep each
    token whose predecessors add up to less than ``top_p``. The token that crosses
    ``top_p`` is kept (without it the kept mass would fall short), and the most likely
    token is always kept, however small ``top_p``. ``top_p = 1`` keeps every token whose
    probability is above 0.

    Computed from the other end, as transformers' ``TopPLogitsWarper`` does (so the two
    agree to the last bit): sort from least to most likely and drop the tail whose
    cumulative probability is at most ``1 - top_p``. Among tokens of equal probability, the
    one ``torch.sort`` puts later counts as more likely.

    Parameters
    ----------
    logits : Tensor of shape (..., vocab)
    top_p : float, 0 < top_p <= 1

    Returns
    -------
    Tensor of shape (..., vocab)

    Examples
    --------
    >>> logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()      # probabilities 0.5, 0.3, ...
    >>> torch.isfinite(top_p_filter(logits, 0.7))    # 0.5 < 0.7: 0.3 crosses 0.7, is kept
    tensor([ True,  True, False, False])
    >>> torch.isfinite(top_p_filter(logits, 0.85))   # 0.5 + 0.3 < 0.85: one more
    tensor([ True,  True,  True, False])
    >>> torch.isfinite(top_p_filter(logits, 0.01))   # the top token, always
    tensor([ True, False, False, False])
    """
    ascending, order = torch.sort(logits, dim=-1)  # (..., vocab): least likely first
    below = torch.softmax(ascending, dim=-1).cumsum(dim=-1)  # mass of each token and all below
    drop = below <= 1 - top_p  # the tail that leaves at least p for the tokens above it
    drop[..., -1] = False  # the most likely token is always kept
    drop = drop.scatter(-1, order, drop)  # (..., vocab): back to the vocabulary's order
    return logits.masked_fill(drop, -torch.inf)


def _check_min_p_filter(logits, min_p):
    _check_logits("min_p_filter", logits)
    check_number("min_p_filter", "min_p", min_p)
    _check_filters("min_p_filter", min_p=min_p)


@validated(_check_min_p_filter)
def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Keep the tokens whose probability is at least ``min_p`` times the top token's.

    The bar moves with the model's confidence: a confident row (one token far ahead) keeps
    few tokens, a flat row keeps many. ``min_p = 0`` keeps everything, ``min_p = 1`` only
    the top token (and any tied with it).

    Parameters
    ----------
    logits : Tensor of shape (..., vocab)
    min_p : float, 0 <= min_p <= 1

    Returns
    -------
    Tensor of shape (..., vocab)

    Examples
    --------
    >>> logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    >>> torch.isfinite(min_p_filter(logits, 0.2))     # the bar: 0.2 · 0.5 = 0.1
    tensor([ True,  True,  True, False])
    """
    probs = torch.softmax(logits, dim=-1)  # (..., vocab)
    top = probs.amax(dim=-1, keepdim=True)  # (..., 1): the most likely token's probability
    return logits.masked_fill(probs < min_p * top, -torch.inf)  # (..., vocab)


def _check_filter_logits(logits, *, temperature=None, top_k=None, top_p=None, min_p=None):
    vocab = _check_logits("filter_logits", logits)
    _check_filters("filter_logits", temperature=temperature, top_k=top_k, top_p=top_p,
                  min_p=min_p, vocab=vocab)  # fmt: skip


@validated(_check_filter_logits)
def filter_logits(
    logits: torch.Tensor,
    *,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
) -> torch.Tensor:
    """The logits a token is sampled from: temperature, then top-k, then top-p, then min-p.

    Hugging Face's order (``GenerationMixin._get_logits_processor`` in transformers 5.23).
    The order matters: top-p after top-k measures ``p`` against the ``k`` tokens left
    (renormalised), so it may keep fewer than top-p alone; min-p after temperature sets its
    bar on the sharpened or flattened probabilities. ``None`` skips a step.

    Parameters
    ----------
    logits : Tensor of shape (..., vocab)
    temperature : float, optional
        > 0; None is 1 (no scaling).
    top_k : int, optional
        1 <= top_k <= vocab.
    top_p : float, optional
        0 < top_p <= 1.
    min_p : float, optional
        0 <= min_p <= 1.

    Returns
    -------
    Tensor of shape (..., vocab)

    Examples
    --------
    >>> logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    >>> torch.isfinite(filter_logits(logits, top_p=0.75))              # 0.4 + 0.3 < 0.75
    tensor([ True,  True,  True, False])
    >>> torch.isfinite(filter_logits(logits, top_k=3, top_p=0.75))     # 0.4/0.9 + 0.3/0.9 > 0.75
    tensor([ True,  True, False, False])
    """
    if temperature is not None:
        logits = apply_temperature(logits, temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    if min_p is not None:
        logits = min_p_filter(logits, min_p)
    return logits


def _check_sample_token(logits, *, temperature=None, top_k=None, top_p=None, min_p=None,
                        generator=None):  # fmt: skip
    fn = "sample_token"
    vocab = _check_logits(fn, logits)
    _check_filters(fn, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, vocab=vocab)
    if generator is not None:
        check_instance(fn, "generator", generator, torch.Generator, "a torch.Generator or None")


@validated(_check_sample_token)
def sample_token(
    logits: torch.Tensor,
    *,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token drawn per row from the softmax of :func:`filter_logits`.

    ``torch.multinomial(probs, 1, generator=generator)``: the draw
    ``GPT2LMHeadModel.generate(do_sample=True)`` makes (from torch's global generator when
    ``generator`` is None), so the same generator state and the same probabilities give
    the same token.

    Parameters
    ----------
    logits : Tensor of shape (..., vocab)
    temperature, top_k, top_p, min_p : optional
        As in :func:`filter_logits`.
    generator : torch.Generator, optional
        Seed it for the same tokens every run.

    Returns
    -------
    int Tensor of shape (...)

    Examples
    --------
    >>> logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 5.0]])
    >>> sample_token(logits, top_k=1)                       # top-k 1: the argmax of each row
    tensor([0, 2])
    >>> a = sample_token(logits, generator=torch.Generator().manual_seed(0))
    >>> torch.equal(a, sample_token(logits, generator=torch.Generator().manual_seed(0)))
    True
    """
    filters = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    probs = torch.softmax(filter_logits(logits, **filters), dim=-1)  # (..., vocab)
    flat = probs.reshape(-1, probs.shape[-1])  # (rows, vocab): multinomial takes 1 or 2 dims
    drawn = torch.multinomial(flat, 1, generator=generator)  # (rows, 1): one draw per row
    return drawn.reshape(probs.shape[:-1])  # (...)
