"""Attention sinks: a cache of the first positions and a rolling window (lesson 17).

A rolling window (:class:`attnlib.kv_cache.RollingKVCache`) keeps memory constant however
long a text grows, but it throws away the first positions too. StreamingLLM (Xiao et al.
2023) observed that large models put much of their attention on the first few tokens —
"attention sinks", a place to park attention that no query needs — and that evicting them
breaks the model; keeping the first ``sinks`` positions beside the window repairs it.

* :func:`sink_mask` — the explicit mask: query ``p`` sees key ``j`` if ``j <= p`` and
  (``j < sinks`` or ``p - j < window``);
* :class:`SinkKVCache` — the cache that mask needs: the first ``sinks`` positions, never
  evicted, and a ring buffer of the last ``window``;
* :func:`streaming_loss` — per-position next-token loss of a :class:`attnlib.gpt.GPT`
  reading a long text token by token with the full context, a window only, and sinks plus
  a window (:class:`StreamingLoss`).

Positions. The course's GPT has *learned absolute* positions (``wpe``, ``max_len`` rows,
256 for the plays model): there is no embedding for position 256, so "decoding past the
trained length" cannot mean giving a token its position in the text. As StreamingLLM does,
positions are given *within the cache*: the key in cache slot ``i`` is meant to carry
position ``i``. StreamingLLM caches keys before the rotary rotation and re-rotates them to
their slot at every step, which is exact. Here positions are added to the token embedding
at the input, so a key depends on its position through every layer below it; moving a key
to another slot means recomputing it. :func:`streaming_loss` offers both:
``positions="recompute"`` (exact: the kept tokens are run again at every step) and
``positions="cached"`` (keys computed once, at the slot where the token entered: an
approximation once the cache is full).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch.nn import functional as F

from attnlib._validate import (
    check_array,
    check_choice,
    check_instance,
    check_int,
    validated,
)
from attnlib.gpt import GPT
from attnlib.kv_cache import KVCache
from attnlib.masks import ALIGNS, causal_mask
from attnlib.training import torch_threads
from attnlib.windows import sliding_window_mask

__all__ = ["sink_mask", "SinkKVCache", "StreamingLoss", "streaming_loss", "POSITION_MODES"]

# How streaming_loss gives positions to the keys a sink cache keeps (see its docstring).
POSITION_MODES = ("recompute", "cached")


# ----------------------------------------------------------------------------------------
# The mask.
# ----------------------------------------------------------------------------------------


def _check_sinks_window(fn: str, sinks, window) -> None:
    check_int(fn, "sinks", sinks, minimum=0)
    check_int(fn, "window", window, minimum=1)


def _check_sink_mask(seq_q, seq_k=None, *, sinks, window, align="top_left", like=None) -> None:
    fn = "sink_mask"
    check_int(fn, "seq_q", seq_q, minimum=0)
    if seq_k is not None:
        check_int(fn, "seq_k", seq_k, minimum=0)
    _check_sinks_window(fn, sinks, window)
    check_choice(fn, "align", align, ALIGNS)


@validated(_check_sink_mask)
def sink_mask(
    seq_q: int,
    seq_k: int | None = None,
    *,
    sinks: int,
    window: int,
    align: str = "top_left",
    like=None,
):
    """Which keys each query may see when it keeps the first ``sinks`` positions and a
    window of the last ``window`` (itself included).

    Query i sits at position ``p = i + offset`` (as in :func:`attnlib.causal_mask`) and
    sees key j if ``j <= p`` and (``j < sinks`` or ``p - j < window``): the sliding window
    of :func:`attnlib.windows.sliding_window_mask` plus the first ``sinks`` columns, as far
    as causality allows. ``sinks=0`` is the sliding window alone.

    Parameters
    ----------
    seq_q, seq_k, align, like
        As in :func:`attnlib.causal_mask`.
    sinks : int
        Positions at the start every query keeps (>= 0).
    window : int
        Most recent positions a query sees, itself included (>= 1).

    Returns
    -------
    mask : bool ndarray or Tensor of shape (seq_q, seq_k)
        True = may attend.

    See Also
    --------
    SinkKVCache : the cache that suffices with this mask.

    Examples
    --------
    >>> sink_mask(5, sinks=1, window=2).astype(int)
    array([[1, 0, 0, 0, 0],
           [1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0],
           [1, 0, 1, 1, 0],
           [1, 0, 0, 1, 1]])
    """
    seq_k = seq_q if seq_k is None else seq_k
    band = sliding_window_mask(seq_q, seq_k, window=window, align=align, like=like)
    seen = causal_mask(seq_q, seq_k, align=align, like=like)  # (seq_q, seq_k)
    if isinstance(seen, torch.Tensor):
        is_sink = torch.arange(seq_k, device=seen.device)[None, :] < sinks  # (1, seq_k)
    else:
        is_sink = np.arange(seq_k)[None, :] < sinks  # (1, seq_k)
    return band | (seen & is_sink)  # (seq_q, seq_k): the window, plus the sinks seen so far


# ----------------------------------------------------------------------------------------
# The cache.
# ----------------------------------------------------------------------------------------


class SinkKVCache(KVCache):
    """Keys and values of the first ``sinks`` positions and of the last ``window``.

    Storage for exactly ``sinks + window`` positions is allocated up front. Positions
    ``0 .. sinks - 1`` go to slots ``0 .. sinks - 1`` and are never evicted; every later
    position ``p`` goes to the ring buffer behind them, slot ``sinks + (p - sinks) %
    window``, overwriting position ``p - window``, which no query from now on may see
    (:func:`sink_mask`). ``sinks=0`` is :class:`attnlib.kv_cache.RollingKVCache`.

    Parameters
    ----------
    batch, n_kv_heads, d_k : int
        Shape of the keys: (batch, n_kv_heads, seq, d_k).
    d_v : int, optional
        Width of the values; default ``d_k``.
    sinks : int
        First positions kept for ever (>= 0).
    window : int
        Most recent positions a query sees (itself included) and positions kept (>= 1).
    dtype : torch.dtype, default torch.float32

    Attributes
    ----------
    length : int
        Positions appended so far (the position of the next token).
    held : int
        Positions stored now, ``min(length, sinks + window)``.
    positions : LongTensor (held,)
        Their absolute positions, oldest first: the sinks, then the window.
    visible_positions : LongTensor (n_visible,)
        Absolute positions of the keys the last :meth:`append` returned.

    See Also
    --------
    sink_mask : the mask this cache is enough for.
    attnlib.kv_cache.RollingKVCache : the window alone.

    Examples
    --------
    >>> cache = SinkKVCache(1, 1, 2, sinks=2, window=3)
    >>> for _ in range(9):
    ...     k, v = cache.append(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    >>> cache.length, cache.positions.tolist(), k.shape[2]
    (9, [0, 1, 6, 7, 8], 5)
    """

    _append_name = "SinkKVCache.append"

    def _check_sink_init(
        self, batch, n_kv_heads, d_k, d_v=None, *, sinks, window, dtype=torch.float32
    ):
        _check_sinks_window("SinkKVCache", sinks, window)
        self._check_init(batch, n_kv_heads, d_k, d_v, max_len=sinks + window, dtype=dtype)

    @validated(_check_sink_init)
    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        d_k: int,
        d_v: int | None = None,
        *,
        sinks: int,
        window: int,
        dtype: torch.dtype = torch.float32,
    ):
        self.sinks, self.window = int(sinks), int(window)
        super().__init__(batch, n_kv_heads, d_k, d_v, max_len=self.sinks + self.window, dtype=dtype)
        self.visible_positions = torch.arange(0)

    @property
    def held(self) -> int:
        """Positions stored now: ``min(length, sinks + window)``."""
        return min(self.length, self.sinks + self.window)

    def _kept(self, end: int) -> torch.Tensor:
        """Absolute positions a cache that has seen ``end`` positions holds, oldest first."""
        first = torch.arange(min(end, self.sinks))  # the sinks
        lo = max(self.sinks, end - self.window)
        recent = torch.arange(lo, max(lo, end))  # the window (none while end <= sinks)
        return torch.cat([first, recent])

    @property
    def positions(self) -> torch.Tensor:
        """Absolute positions held, oldest first, shape (held,)."""
        return self._kept(self.length)

    def _slots(self, positions: torch.Tensor) -> torch.Tensor:
        """Where each absolute position sits in the storage."""
        ring = self.sinks + (positions - self.sinks) % self.window
        return torch.where(positions < self.sinks, positions, ring)

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The positions held, oldest first: keys (batch, n_kv_heads, held, d_k), values."""
        slots = self._slots(self.positions)  # (held,)
        return self._k[:, :, slots], self._v[:, :, slots]

    @validated(KVCache._check_append)
    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store new positions; return the keys and values the new queries can see.

        The new queries sit at positions ``start .. start + seq_new - 1`` (``start`` =
        ``length`` before the call). Together they see the sinks held, the last
        ``window - 1`` other positions held, and the new ones; their absolute positions
        are then :attr:`visible_positions`. For one new token every returned key is
        visible; for several, their mask over the returned keys is
        ``sink_mask(seq_new, length, sinks=..., window=..., align="bottom_right",
        like=k)[:, cache.visible_positions]``. Afterwards only the sinks and the last
        ``window`` positions stay stored.

        Parameters
        ----------
        k : Tensor of shape (batch, n_kv_heads, seq_new, d_k)
        v : Tensor of shape (batch, n_kv_heads, seq_new, d_v)

        Returns
        -------
        k_visible : Tensor of shape (batch, n_kv_heads, n_visible, d_k)
        v_visible : Tensor of shape (batch, n_kv_heads, n_visible, d_v)
            Oldest position first.
        """
        start, seq_new = self.length, k.shape[2]  # k: (batch, n_kv_heads, seq_new, d_k)
        old = self._kept(start)  # (held,): absolute positions stored before the call
        seen = (old < self.sinks) | (old > start - self.window)  # the first new query sees them
        k_old, v_old = self.read()  # (batch, n_kv_heads, held, d_k / d_v)
        k_vis = torch.cat([k_old[:, :, seen], k.detach()], 2)  # (..., n_visible, d_k)
        v_vis = torch.cat([v_old[:, :, seen], v.detach()], 2)  # (..., n_visible, d_v)
        new = torch.arange(start, start + seq_new)  # (seq_new,)
        self.visible_positions = torch.cat([old[seen], new])  # (n_visible,)
        end = start + seq_new
        keep = (new < self.sinks) | (new >= end - self.window)  # sinks and the newest window
        slots = self._slots(new[keep])
        self._k[:, :, slots] = k.detach()[:, :, keep]
        self._v[:, :, slots] = v.detach()[:, :, keep]
        self.length = end
        return k_vis, v_vis

    def truncate(self, length: int) -> None:
        """Not possible: evicted positions are gone. Raises ``ValueError``."""
        raise ValueError(
            "SinkKVCache.truncate: a sink cache cannot rewind (positions that left the window "
            f"of {self.window} are overwritten); start a new cache instead"
        )

    def __repr__(self) -> str:
        return (
            f"SinkKVCache(batch={self.batch}, n_kv_heads={self.n_kv_heads}, d_k={self.d_k}, "
            f"d_v={self.d_v}, sinks={self.sinks}, window={self.window}, length={self.length})"
        )


# ----------------------------------------------------------------------------------------
# Reading a long text.
# ----------------------------------------------------------------------------------------


class StreamingLoss(NamedTuple):
    """Per-position next-token losses (nats) of :func:`streaming_loss`, each of shape
    (n - 1,): entry ``t`` is the loss of predicting ``tokens[t + 1]`` at step ``t``."""

    full: torch.Tensor  # every earlier token in context; NaN from t = model.max_len on
    window_only: torch.Tensor  # the last `window` tokens
    with_sinks: torch.Tensor  # the first `sinks` tokens and the last `window`

    def by_bucket(self, size: int) -> dict[str, torch.Tensor]:
        """Mean loss over steps ``0 .. size - 1``, ``size .. 2·size - 1``, ... (the last
        bucket may be shorter; NaN steps left out, a bucket of NaN only is NaN)."""
        size = check_int("StreamingLoss.by_bucket", "size", size, minimum=1)
        out = {}
        for name, losses in self._asdict().items():
            chunks = torch.split(losses, size)
            out[name] = torch.stack([c.nanmean() for c in chunks])  # (n_buckets,)
        return out


def _check_streaming_loss(model, tokens, *, sinks, window, positions="recompute", batch=64) -> None:
    fn = "streaming_loss"
    check_instance(fn, "model", model, GPT, "an attnlib.gpt.GPT")
    check_array(fn, "tokens", tokens, only="torch")
    if tokens.dtype != torch.long:
        raise TypeError(f"{fn}: tokens must be a LongTensor (n,), got dtype {tokens.dtype}")
    if tokens.ndim != 1 or tokens.numel() < 2:
        raise ValueError(
            f"{fn}: tokens must have shape (n,) with n >= 2, got {tuple(tokens.shape)}"
        )
    if bool(((tokens < 0) | (tokens >= model.vocab_size)).any()):
        raise ValueError(
            f"{fn}: tokens holds ids from {int(tokens.min())} to {int(tokens.max())}, outside "
            f"0 .. vocab_size - 1 = {model.vocab_size - 1}"
        )
    _check_sinks_window(fn, sinks, window)
    if sinks + window > model.max_len:
        raise ValueError(
            f"{fn}: sinks + window = {sinks} + {window} = {sinks + window} exceeds the model's "
            f"max_len={model.max_len}: a cache slot needs a position the model has learned"
        )
    check_choice(fn, "positions", positions, POSITION_MODES)
    check_int(fn, "batch", batch, minimum=1)


def _losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per row, float64: logits (n, vocab), targets (n,) -> (n,)."""
    return F.cross_entropy(logits.double(), targets, reduction="none")


def _recomputed(model: GPT, tokens, sinks: int, window: int, batch: int) -> torch.Tensor:
    """Losses (n - 1,) when step t runs the model afresh on the kept tokens, positions 0.."""
    n, size = tokens.numel(), sinks + window
    prefix = tokens[None, : min(n - 1, size)]  # steps before the cache is full: all kept
    out = [_losses(model(prefix)[0], tokens[1 : prefix.shape[1] + 1])]
    steps = torch.arange(
        min(size, n - 1), n - 1
    )  # (n_full,): steps whose context is sinks + window
    if len(steps):
        first = torch.arange(sinks).expand(len(steps), sinks)  # (n_full, sinks)
        recent = steps[:, None] + torch.arange(1 - window, 1)  # (n_full, window)
        contexts = tokens[torch.cat([first, recent], 1)]  # (n_full, size)
        for i in range(0, len(steps), batch):
            logits = model(contexts[i : i + batch])[:, -1]  # (b, vocab): the last slot's
            out.append(_losses(logits, tokens[steps[i : i + batch] + 1]))
    return torch.cat(out)


def _cached(model: GPT, tokens, sinks: int, window: int) -> torch.Tensor:
    """Losses (n - 1,) decoding token by token with a SinkKVCache per layer; the token of
    step t enters at position min(t, sinks + window - 1), the slot it is written to."""
    size = sinks + window
    caches = [
        SinkKVCache(1, model.n_heads, model.d_head, sinks=sinks, window=window,
                    dtype=model.wte.weight.dtype)
        for _ in model.h
    ]  # fmt: skip
    out = []
    for t in range(tokens.numel() - 1):
        pos = torch.tensor([min(t, size - 1)])  # (1,): the slot, not the place in the text
        x = model.drop(model.wte(tokens[None, t : t + 1]) + model.wpe(pos))  # (1, 1, d_model)
        for block, cache in zip(model.h, caches, strict=True):
            x = block(x, cache)  # (1, 1, d_model): one new query sees every returned key
        out.append(model.lm_head(model.ln_f(x))[0])  # (1, vocab)
    return _losses(torch.cat(out), tokens[1:])


@validated(_check_streaming_loss)
def streaming_loss(
    model: GPT,
    tokens: torch.Tensor,
    *,
    sinks: int,
    window: int,
    positions: str = "recompute",
    batch: int = 64,
) -> StreamingLoss:
    """Next-token loss at every position of a long text read token by token, three ways.

    1. ``full``: every earlier token in context, at its own position — possible only up to
       the model's ``max_len`` (learned absolute positions stop there); NaN after.
    2. ``window_only``: the last ``window`` tokens.
    3. ``with_sinks``: the first ``sinks`` tokens of ``tokens`` and the last ``window``.

    Positions are given within the cache (StreamingLLM's rule), never beyond
    ``sinks + window - 1 < max_len``. How keys get them (``positions``):

    * ``"recompute"`` (exact): at every step the kept tokens are run through the model
      again, the token in slot i at position i; every key and value of every layer is
      recomputed. Equivalent to a cache whose keys are re-positioned exactly — which
      rotary positions allow without recomputing (StreamingLLM caches keys before the
      rotation and rotates them to their slot), and learned absolute positions, added at
      the input and carried through every layer, do not. Cost per step: a forward pass
      over ``sinks + window`` tokens.
    * ``"cached"`` (an approximation): one :class:`SinkKVCache` per layer, each token's
      keys and values computed once, when it enters at position ``min(t, sinks + window
      - 1)`` (its slot then), and never updated. Once the cache is full every new token
      enters at the last slot, so the window's keys all carry that one position and
      keep it as they move down the cache: the model loses the order of the window's
      tokens except through what earlier layers wrote into them.

    Evaluated in eval mode, without gradients, on one thread; the model's mode is restored.

    Parameters
    ----------
    model : GPT
    tokens : LongTensor of shape (n,)
        The text, longer than ``model.max_len`` to decode past it.
    sinks : int
        First tokens kept (>= 0); ``sinks + window <= model.max_len``.
    window : int
        Most recent tokens kept, the current one included (>= 1).
    positions : {"recompute", "cached"}, default "recompute"
    batch : int, default 64
        Contexts per forward pass with ``"recompute"`` (memory only).

    Returns
    -------
    StreamingLoss
        ``full``, ``window_only``, ``with_sinks``: float64 Tensors of shape (n - 1,);
        ``.by_bucket(size)`` averages them over runs of ``size`` steps.

    See Also
    --------
    SinkKVCache : the cache of the sinks and the window.

    Examples
    --------
    >>> model = GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=2, max_len=8)
    >>> tokens = torch.randint(0, 11, (20,), generator=torch.Generator().manual_seed(0))
    >>> loss = streaming_loss(model, tokens, sinks=2, window=4)
    >>> loss.full.shape, bool(loss.full[8:].isnan().all())
    (torch.Size([19]), True)
    >>> bool(torch.equal(loss.window_only[:4], loss.full[:4]))  # before the window fills
    True
    """
    n = tokens.numel()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch_threads(1):
            full = torch.full((n - 1,), float("nan"), dtype=torch.float64)
            seen = min(n, model.max_len + 1)  # inputs 0 .. seen - 2, targets 1 .. seen - 1
            full[: seen - 1] = _losses(model(tokens[None, : seen - 1])[0], tokens[1:seen])
            if positions == "recompute":
                window_only = _recomputed(model, tokens, 0, window, batch)
                with_sinks = _recomputed(model, tokens, sinks, window, batch)
            else:
                window_only = _cached(model, tokens, 0, window)
                with_sinks = _cached(model, tokens, sinks, window)
    finally:
        model.train(was_training)
    return StreamingLoss(full, window_only, with_sinks)
