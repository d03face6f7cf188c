"""Which keys to keep, measured: one recall task trained with eight attention variants
(lesson 14).

The task. A sequence is :data:`LENGTH` random tokens (drawn from :data:`N_TOKENS`, repeats
allowed) and then one *cue* token that names a distance ``d`` between 1 and ``LENGTH``::

    x_0  x_1  ...  x_22  x_23  CUE_d          seq = LENGTH + 1 = 25 positions
    pos  0    1        22    23    24         the cue sits at position 24

The answer, predicted at the cue's position, is ``x_{24 - d}``: the token ``d`` positions
before the cue. Nothing else in the sequence helps, so the cue's query has to find one
particular key — the choice of keys is the whole task. Chance is ``1 / N_TOKENS``.

The model (:class:`RecallModel`): token and learned position embeddings, two pre-norm
attention layers of four heads (d_model 32, no MLPs), a final norm and an unembedding. The
eight variants (:data:`VARIANTS`) change only which keys each layer keeps and in what form,
and are trained with the same budget (same steps, batches, learning rate and seed):

========================  =================================================================
``mha``                   full multi-head attention: every layer caches 4 key and 4 value heads
``gqa``                   grouped-query attention, 2 key/value heads shared by the 4 query heads
``latent_large``          latent attention (:class:`attnlib.latent.LatentAttention`), 16 numbers
``latent_small``          latent attention, 3 numbers per token and layer
``window``                sliding window of :data:`WINDOW` keys in both layers
``hybrid``                the window in layer 0, full (global) attention in layer 1
``topk``                  each query attends to the 4 keys an indexer ranks highest
``shared``                layer 1 reuses layer 0's keys and values (cross-layer KV sharing)
========================  =================================================================

The window, the latent layer and the top-k selection are the library's
(:func:`attnlib.windows.sliding_window_mask`, :class:`attnlib.kv_cache.RollingKVCache`,
:class:`attnlib.latent.LatentAttention`, :class:`attnlib.selection.Indexer`,
:func:`attnlib.selection.topk_mask`); grouped heads are :func:`attnlib.kv_cache.grouped_attend`.
Every variant also decodes with its own cache (``model(tokens, caches)``,
:meth:`RecallModel.new_caches`), which ``tests/test_recall.py`` proves equal to the
full-sequence forward pass, and which ``make bench`` times.

What a window cannot do: with two windowed layers the cue's output depends only on
positions at most ``2 (WINDOW - 1)`` back (layer 1 sees ``WINDOW - 1`` back, each of those
saw ``WINDOW - 1`` further back in layer 0). Beyond that the answer is out of reach and
accuracy is chance, whatever the training.

Run ``python -m attnlib.tasks.recall --train`` to retrain all eight and rewrite
``data/recall_models.pt``, ``data/recall_log.tsv`` and ``data/recall_results.tsv`` (one
thread, seeded; see data/README.md for the time it takes).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from attnlib._validate import (
    check_choice,
    check_decoder_input,
    check_head_counts,
    check_instance,
    check_int,
    type_name,
)
from attnlib.heads import merge_heads, split_heads
from attnlib.kv_cache import KVCache, RollingKVCache, grouped_attend, kv_cache_bytes
from attnlib.latent import LatentAttention
from attnlib.selection import Indexer, indexer_scores, topk_mask
from attnlib.tasks.shipped import data_file, read_log_table, train_command
from attnlib.training import torch_threads, train
from attnlib.windows import sliding_window_mask

__all__ = [
    "N_TOKENS",
    "LENGTH",
    "SEQ",
    "VOCAB",
    "WINDOW",
    "CHANCE",
    "CONFIG",
    "TRAINING",
    "EVALUATION",
    "Variant",
    "VARIANTS",
    "WEIGHTS_PATH",
    "LOG_PATH",
    "RESULTS_PATH",
    "TRAIN_COMMAND",
    "cue_token",
    "make_batch",
    "evaluation_set",
    "answer_accuracy",
    "RecallModel",
    "train_variant",
    "train_all",
    "evaluate",
    "cache_bytes_per_token",
    "reach",
    "save_models",
    "load_model",
    "write_log",
    "read_log",
    "write_results",
    "RecallResults",
    "results",
]

N_TOKENS = 16  # content tokens 0..15
LENGTH = 24  # random tokens before the cue; distances 1..LENGTH
SEQ = LENGTH + 1  # the cue is the last position
VOCAB = N_TOKENS + LENGTH  # cue for distance d is token N_TOKENS + d - 1
WINDOW = 8  # keys a windowed query sees, itself included
CHANCE = 1.0 / N_TOKENS
CONFIG = {"vocab": VOCAB, "d_model": 32, "n_heads": 4, "n_layers": 2, "max_len": SEQ}
TRAINING = {"steps": 1500, "batch": 64, "lr": 3e-3, "seed": 0, "dense_steps": 300}
EVALUATION = {"per_distance": 250, "seed": 2024}

WEIGHTS_PATH = data_file("recall_models.pt")
LOG_PATH = data_file("recall_log.tsv")
RESULTS_PATH = data_file("recall_results.tsv")
TRAIN_COMMAND = "python -m attnlib.tasks.recall --train"


# ----------------------------------------------------------------------------------------
# The data.
# ----------------------------------------------------------------------------------------


def cue_token(d):
    """The token that asks for the token ``d`` positions back (int or LongTensor)."""
    return N_TOKENS + d - 1


def make_batch(batch: int, *, distance=None, generator: torch.Generator | None = None):
    """Random sequences, each ending in a cue, and their answers.

    Parameters
    ----------
    batch : int
    distance : int or LongTensor of shape (batch,), optional
        The distance each cue asks for, 1..LENGTH; default: drawn uniformly per sequence.
    generator : torch.Generator, optional

    Returns
    -------
    tokens : LongTensor of shape (batch, SEQ)
        ``LENGTH`` random tokens from 0..N_TOKENS-1, then the cue.
    answers : LongTensor of shape (batch,)
        ``tokens[b, LENGTH - d_b]``.
    distances : LongTensor of shape (batch,)
    """
    fn = "make_batch"
    batch = check_int(fn, "batch", batch, minimum=1)
    if generator is not None:
        check_instance(fn, "generator", generator, torch.Generator, "a torch.Generator or None")
    if distance is None:
        d = torch.randint(1, LENGTH + 1, (batch,), generator=generator)
    elif isinstance(distance, torch.Tensor):
        if distance.shape != (batch,) or distance.dtype != torch.long:
            raise ValueError(
                f"{fn}: distance must be an int or a LongTensor of shape (batch,) = ({batch},), "
                f"got {distance.dtype} of shape {tuple(distance.shape)}"
            )
        if bool(((distance < 1) | (distance > LENGTH)).any()):
            raise ValueError(f"{fn}: every distance must be in 1..{LENGTH}")
        d = distance
    else:
        d = torch.full((batch,), check_int(fn, "distance", distance, minimum=1, maximum=LENGTH))
    x = torch.randint(0, N_TOKENS, (batch, LENGTH), generator=generator)  # (batch, LENGTH)
    tokens = torch.cat([x, cue_token(d)[:, None]], 1)  # (batch, SEQ)
    answers = x[torch.arange(batch), LENGTH - d]  # (batch,)
    return tokens, answers, d


def evaluation_set(per_distance: int = EVALUATION["per_distance"], seed=EVALUATION["seed"]):
    """The held-out sequences: ``per_distance`` for every distance 1..LENGTH, in order of d.

    Returns ``(tokens, answers, distances)`` as :func:`make_batch`, with
    ``LENGTH * per_distance`` rows (drawn from their own seed, never seen in training).
    """
    per_distance = check_int("evaluation_set", "per_distance", per_distance, minimum=1)
    d = torch.arange(1, LENGTH + 1).repeat_interleave(per_distance)
    return make_batch(len(d), distance=d, generator=torch.Generator().manual_seed(seed))


def answer_accuracy(logits: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """Whether each sequence's answer is right: the top logit at the cue (the last
    position) is the answer. ``logits`` (batch, seq, vocab) or (batch, vocab); returns a
    bool Tensor (batch,)."""
    last = logits[:, -1] if logits.ndim == 3 else logits  # (batch, vocab)
    if last.ndim != 2 or answers.shape != last.shape[:1]:
        raise ValueError(
            f"answer_accuracy: logits {tuple(logits.shape)} and answers {tuple(answers.shape)} "
            "must agree on batch"
        )
    return last.argmax(-1) == answers


# ----------------------------------------------------------------------------------------
# The variants.
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """Which keys each layer keeps, and in what form.

    Attributes
    ----------
    name, label : str
    n_kv_heads : int or None
        Key/value heads (None: as many as query heads, MHA).
    d_latent : int or None
        Latent attention with this latent width (every layer).
    window : int or None
        Sliding window for every layer not in ``global_layers``.
    global_layers : tuple of int
        Layers with full causal attention when ``window`` is set.
    top_k : int or None
        Each query attends to the ``top_k`` keys its indexer scores highest.
    kv_share : tuple of int or None
        ``kv_share[l]``: the layer whose keys and values layer ``l`` uses.
    n_index_heads, d_index : int
        Size of the indexer (top-k only).
    """

    name: str
    label: str
    n_kv_heads: int | None = None
    d_latent: int | None = None
    window: int | None = None
    global_layers: tuple = ()
    top_k: int | None = None
    kv_share: tuple | None = None
    n_index_heads: int = 2
    d_index: int = 8

    def local(self, layer: int) -> bool:
        """Whether ``layer`` attends through the sliding window."""
        return self.window is not None and layer not in self.global_layers


VARIANTS = {
    v.name: v
    for v in (
        Variant("mha", "full MHA"),
        Variant("gqa", "GQA, 2 KV heads", n_kv_heads=2),
        Variant("latent_large", "latent, 16 numbers", d_latent=16),
        Variant("latent_small", "latent, 3 numbers", d_latent=3),
        Variant("window", f"window {WINDOW}", window=WINDOW),
        Variant("hybrid", f"window {WINDOW} + 1 global", window=WINDOW, global_layers=(1,)),
        Variant("topk", "top-4 selection", top_k=4),
        Variant("shared", "KV shared by 2 layers", kv_share=(0, 0)),
    )
}


def _variant(fn: str, variant) -> Variant:
    if isinstance(variant, Variant):
        return variant
    if not isinstance(variant, str):
        raise TypeError(f"{fn}: variant must be a str or a Variant, got {type_name(variant)}")
    return VARIANTS[check_choice(fn, "variant", variant, tuple(VARIANTS))]


# ----------------------------------------------------------------------------------------
# The model.
# ----------------------------------------------------------------------------------------


class IndexKeyCache:
    """The indexer's keys of every past position (top-k selection keeps them all), one
    vector of ``d_index`` numbers per position. Storage for ``max_len`` positions is
    allocated up front and doubled when outgrown, as in :class:`attnlib.kv_cache.KVCache`.
    """

    def __init__(self, batch: int, d_index: int, *, max_len: int = 64, dtype=torch.float32):
        self._k = torch.empty(batch, max_len, d_index, dtype=dtype)
        self.length = 0

    def append(self, k_idx: torch.Tensor) -> torch.Tensor:
        """Store k_idx (batch, seq_new, d_index); return every key so far, shape
        (batch, length, d_index)."""
        end = self.length + k_idx.shape[1]
        if end > self._k.shape[1]:
            grown = self._k.new_empty(
                self._k.shape[0], max(end, 2 * self._k.shape[1]), self._k.shape[2]
            )
            grown[:, : self.length] = self._k[:, : self.length]
            self._k = grown
        self._k[:, self.length : end] = k_idx.detach()
        self.length = end
        return self._k[:, :end]

    @property
    def nbytes(self) -> int:
        """Bytes of storage held (allocated capacity)."""
        return self._k.untyped_storage().nbytes()


class SelectionCache:
    """What a top-k layer caches: every key and value (a :class:`KVCache`) and every
    indexer key (:class:`IndexKeyCache`)."""

    def __init__(self, kv: KVCache, index: IndexKeyCache):
        self.kv, self.index = kv, index

    @property
    def length(self) -> int:
        return self.kv.length

    @property
    def nbytes(self) -> int:
        return self.kv.nbytes + self.index.nbytes


class KeysLayer(nn.Module):
    """One causal attention layer whose keys are full, windowed, selected or borrowed.

    ``W_q`` (d_model -> n_heads·d_head), ``W_k``/``W_v`` (d_model -> n_kv_heads·d_head;
    absent when the layer borrows another layer's keys and values), ``W_o``; an
    :class:`attnlib.selection.Indexer` when ``top_k`` is set.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        *,
        window: int | None = None,
        top_k: int | None = None,
        own_kv: bool = True,
        n_index_heads: int = 2,
        d_index: int = 8,
    ):
        super().__init__()
        self.d_head = check_head_counts("KeysLayer", d_model, n_heads, n_kv_heads)
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.window, self.top_k, self.own_kv = window, top_k, own_kv
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False) if own_kv else None
        self.W_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False) if own_kv else None
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.indexer = Indexer(d_model, n_index_heads, d_index) if top_k is not None else None

    def new_cache(self, batch: int, max_len: int, dtype: torch.dtype):
        if not self.own_kv:
            return None
        if self.window is not None:
            return RollingKVCache(
                batch, self.n_kv_heads, self.d_head, window=self.window, dtype=dtype
            )
        kv = KVCache(batch, self.n_kv_heads, self.d_head, max_len=max_len, dtype=dtype)
        if self.indexer is None:
            return kv
        index = IndexKeyCache(batch, self.indexer.d_index, max_len=max_len, dtype=dtype)
        return SelectionCache(kv, index)

    def _index_scores(self, x, cache):
        """Indexer scores of the new queries over every key so far: (batch, seq_new, seq_k)."""
        ix = self.indexer
        q_idx = split_heads(ix.W_q(x), ix.n_index_heads)  # (batch, n_index_heads, seq_new, d_index)
        k_idx = ix.W_k(x)  # (batch, seq_new, d_index)
        if cache is not None:
            k_idx = cache.index.append(k_idx)  # (batch, seq_k, d_index)
        return indexer_scores(q_idx, k_idx, ix.W_w(x))  # (batch, seq_new, seq_k)

    def forward(self, x, cache=None, borrowed=None, *, sparse: bool = True):
        """x (batch, seq_new, d_model) -> (out (batch, seq_new, d_model), (k, v), kl).

        ``(k, v)`` are the keys and values every new query may draw from, for a later
        layer that borrows them; ``kl`` is the indexer's training loss (top-k layers
        without a cache; None otherwise): the KL divergence from the main attention's
        head-averaged weights (dense, detached) to the softmax of the index scores.
        ``sparse=False`` attends densely (the warm-up of the top-k variant).
        """
        q = split_heads(self.W_q(x), self.n_heads)  # (batch, n_heads, seq_new, d_head)
        if self.own_kv:
            k = split_heads(self.W_k(x), self.n_kv_heads)  # (batch, n_kv_heads, seq_new, d_head)
            v = split_heads(self.W_v(x), self.n_kv_heads)
            if cache is not None:
                kv = cache.kv if isinstance(cache, SelectionCache) else cache
                k, v = kv.append(k, v)  # (batch, n_kv_heads, seq_k, d_head): what q may see
        else:
            k, v = borrowed
        seq_new, seq_k = q.shape[2], k.shape[2]
        kl = None
        if self.window is not None:
            band = sliding_window_mask(
                seq_new, seq_k, window=self.window, align="bottom_right", like=q
            )  # (seq_new, seq_k)
            out, _ = grouped_attend(q, k, v, band)
        elif self.indexer is not None:
            index = self._index_scores(x if cache is not None else x.detach(), cache)
            out = None
            if cache is None or not sparse:
                # (batch, n_heads, seq_new, d_head), (batch, n_heads, seq_new, seq_k)
                out, dense = grouped_attend(q, k, v, causal=True, align="bottom_right")
                if cache is None:  # a full sequence (training): the indexer's own loss
                    kl = _index_kl(index, dense.detach().mean(1))
            if sparse:
                keep = topk_mask(index.detach(), self.top_k, causal=True, align="bottom_right")
                out, _ = grouped_attend(q, k, v, keep[:, None])  # keep: (batch, seq_new, seq_k)
        else:
            out, _ = grouped_attend(q, k, v, causal=True, align="bottom_right")
        return self.W_o(merge_heads(out)), (k, v), kl


def _index_kl(index: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """KL(target ‖ softmax(index)) over the causal keys of every query, averaged over
    queries; index and target (batch, seq, seq), target rows summing to 1."""
    seq = index.shape[-1]
    allowed = torch.ones(seq, seq, dtype=torch.bool).tril()  # (seq, seq)
    log_p = index.masked_fill(~allowed, -math.inf).log_softmax(-1)  # (batch, seq, seq)
    terms = torch.where(allowed & (target > 0), target * (target.log() - log_p), 0.0)
    return terms.sum(-1).mean()


class RecallModel(nn.Module):
    """Embeddings, ``n_layers`` pre-norm attention layers of one :class:`Variant`, an
    unembedding over the whole vocabulary.

    Parameters
    ----------
    variant : str or Variant
        A name of :data:`VARIANTS`, or a :class:`Variant`.
    vocab, d_model, n_heads, n_layers, max_len : int
        Defaults: :data:`CONFIG`.

    ``forward(tokens, caches=None)`` gives logits (batch, seq_new, vocab); with caches
    (:meth:`new_caches`) only the new tokens are fed, as in
    :func:`attnlib.decoder.generate`, which works with this model.
    """

    def __init__(
        self,
        variant="mha",
        *,
        vocab: int = CONFIG["vocab"],
        d_model: int = CONFIG["d_model"],
        n_heads: int = CONFIG["n_heads"],
        n_layers: int = CONFIG["n_layers"],
        max_len: int = CONFIG["max_len"],
    ):
        super().__init__()
        fn = "RecallModel"
        self.variant = v = _variant(fn, variant)
        vocab, d_model, n_heads, n_layers, max_len = (
            check_int(fn, name, value, minimum=1)
            for name, value in (
                ("vocab", vocab),
                ("d_model", d_model),
                ("n_heads", n_heads),
                ("n_layers", n_layers),
                ("max_len", max_len),
            )
        )
        share = tuple(range(n_layers)) if v.kv_share is None else tuple(v.kv_share)
        if len(share) != n_layers or any(
            not 0 <= s <= i or share[s] != s for i, s in enumerate(share)
        ):
            raise ValueError(f"{fn}: kv_share={v.kv_share} does not fit {n_layers} layers")
        if v.d_latent is not None and (v.window or v.top_k or v.kv_share or v.n_kv_heads):
            raise ValueError(f"{fn}: latent attention is not combined with other variants here")
        self.kv_share, self.n_layers, self.max_len = share, n_layers, max_len
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_model // n_heads
        self.n_kv_heads = n_heads if v.n_kv_heads is None else v.n_kv_heads
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        layers = []
        for i in range(n_layers):
            if v.d_latent is not None:
                layers.append(LatentAttention(d_model, n_heads, v.d_latent))
                continue
            layers.append(
                KeysLayer(
                    d_model,
                    n_heads,
                    self.n_kv_heads,
                    window=v.window if v.local(i) else None,
                    top_k=v.top_k,
                    own_kv=share[i] == i,
                    n_index_heads=v.n_index_heads,
                    d_index=v.d_index,
                )
            )
        self.layers = nn.ModuleList(layers)
        for i, s in enumerate(share):
            if v.local(i) != v.local(s):
                raise ValueError(
                    f"{fn}: layer {i} shares K/V with layer {s} of another window kind"
                )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def new_caches(self, batch: int, max_len: int) -> list:
        """One empty cache per layer: :class:`attnlib.kv_cache.KVCache`,
        :class:`attnlib.kv_cache.RollingKVCache` (windowed layers),
        :class:`attnlib.latent.LatentCache`, a :class:`SelectionCache` (top-k), or None
        (a layer that borrows another layer's keys and values)."""
        dtype = self.tok.weight.dtype
        out = []
        for layer in self.layers:
            if isinstance(layer, LatentAttention):
                out.append(layer.new_cache(batch, max_len))
            else:
                out.append(layer.new_cache(batch, max_len, dtype))
        return out

    def run(self, tokens: torch.Tensor, caches: list | None = None, *, sparse: bool = True):
        """Logits (batch, seq_new, vocab) and the indexers' loss (a 0-d Tensor, 0 for
        variants without an indexer or with caches)."""
        start = check_decoder_input("RecallModel", tokens, caches, self.n_layers, self.max_len)
        seq_new = tokens.shape[1]  # the first new token sits at position `start`
        x = self.tok(tokens) + self.pos(torch.arange(start, start + seq_new))
        kl = x.new_zeros(())
        kv_of = {}  # layer -> the (k, v) it drew from, for the layers that borrow them
        for i, (norm, layer) in enumerate(zip(self.norms, self.layers, strict=True)):
            cache = None if caches is None else caches[i]
            if isinstance(layer, LatentAttention):
                out, _ = layer(norm(x), cache, absorbed=cache is not None)
            else:
                borrowed = kv_of.get(self.kv_share[i])
                out, kv_of[i], layer_kl = layer(norm(x), cache, borrowed, sparse=sparse)
                if layer_kl is not None:
                    kl = kl + layer_kl
            x = x + out  # (batch, seq_new, d_model)
        return self.head(self.norm(x)), kl  # (batch, seq_new, vocab)

    def forward(self, tokens: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        """Logits of shape (batch, seq_new, vocab)."""
        return self.run(tokens, caches)[0]

    def cache_bytes(self, seq: int, batch: int = 1) -> int:
        """Bytes this model's caches hold after ``seq`` tokens
        (:func:`attnlib.kv_cache.kv_cache_bytes`, in the dtype of the weights)."""
        v = self.variant
        kw = {"n_layers": self.n_layers, "batch": batch, "seq": seq}
        kw["dtype"] = self.tok.weight.dtype
        if v.d_latent is not None:
            kw.update(d_latent=v.d_latent)
        else:
            kw.update(n_kv_heads=self.n_kv_heads, d_k=self.d_head)
        if v.window is not None:
            kw.update(window=v.window)
            kw.update(n_local_layers=sum(v.local(i) for i, s in enumerate(self.kv_share) if s == i))
        if v.top_k is not None:
            kw.update(d_index=v.d_index)
        kw.update(n_kv_layers=sum(s == i for i, s in enumerate(self.kv_share)))
        return kv_cache_bytes(**kw)


def cache_bytes_per_token(variant, seq: int = SEQ, **sizes) -> float:
    """Cache bytes per token of a variant after ``seq`` tokens (fp32): the bytes of
    :meth:`RecallModel.cache_bytes` divided by ``seq``. ``sizes`` override :data:`CONFIG`."""
    seq = check_int("cache_bytes_per_token", "seq", seq, minimum=1)
    config = {k: v for k, v in CONFIG.items() if k != "vocab"} | sizes
    with torch.device("meta"):
        model = RecallModel(variant, **config)
    return model.cache_bytes(seq) / seq


def reach(variant, n_layers: int = CONFIG["n_layers"]) -> int:
    """The farthest distance back the last position's output can depend on: ``LENGTH`` for
    variants with a global layer, ``n_layers · (window - 1)`` for a window alone."""
    v = _variant("reach", variant)
    if v.window is not None and all(v.local(i) for i in range(n_layers)):
        return min(LENGTH, n_layers * (v.window - 1))
    return LENGTH


# ----------------------------------------------------------------------------------------
# Training, evaluation.
# ----------------------------------------------------------------------------------------


def train_variant(
    variant,
    *,
    steps: int = TRAINING["steps"],
    batch: int = TRAINING["batch"],
    lr: float = TRAINING["lr"],
    seed: int = TRAINING["seed"],
    dense_steps: int = TRAINING["dense_steps"],
    progress: bool = False,
):
    """Train a fresh :class:`RecallModel` of one variant (one thread, seeded).

    Every variant sees the same batches (:func:`make_batch`, generator seeded
    ``seed + 1``) and starts from ``torch.manual_seed(seed)``. The loss is the
    cross-entropy of the answer at the cue. The top-k variant adds its indexers' KL loss
    (the indexer learns to rank keys as the dense attention weights them, as in
    DeepSeek-V3.2) and attends densely for the first ``dense_steps`` steps before switching
    to its top-k keys (DeepSeek-V3.2's dense warm-up freezes the main model; here
    everything trains throughout).

    Returns
    -------
    model : RecallModel (eval mode)
    history : attnlib.training.History
        Per step: ``loss`` (what was minimised), ``answer_loss`` (cross-entropy of the
        answer, nats) and ``accuracy`` (of the batch).
    """
    v = _variant("train_variant", variant)
    with torch_threads(1):
        torch.manual_seed(seed)
        model = RecallModel(v)
        gen = torch.Generator().manual_seed(seed + 1)

        def step(i):
            tokens, answers, _ = make_batch(batch, generator=gen)
            logits, kl = model.run(tokens, sparse=i >= dense_steps)
            ce = F.cross_entropy(logits[:, -1], answers)
            right = answer_accuracy(logits.detach(), answers).double().mean()
            return ce + kl, {"answer_loss": ce.item(), "accuracy": right.item()}

        history = train(
            model.parameters(),
            step,
            steps=steps,
            lr=lr,
            desc=v.label,
            progress=progress,
            threads=1,
        )
    return model.eval(), history


def train_all(names=None, *, steps: int = TRAINING["steps"], progress: bool = False):
    """Train the variants ``names`` (default all, in :data:`VARIANTS` order).

    Returns ``(models, log)``: a dict name -> model, and the log columns (``step`` and
    each variant's answer loss per step, see :func:`write_log`).
    """
    names = list(VARIANTS) if names is None else list(names)
    models, log = {}, {"step": np.arange(steps)}
    for name in names:
        models[name], hist = train_variant(name, steps=steps, progress=progress)
        log[name] = hist["answer_loss"]
    return models, log


@torch.no_grad()
def evaluate(model: RecallModel, per_distance: int = EVALUATION["per_distance"]) -> np.ndarray:
    """How many held-out answers the model gets right at each distance.

    Returns
    -------
    correct : int ndarray of shape (LENGTH,)
        ``correct[d - 1]`` out of ``per_distance`` (:func:`evaluation_set`).
    """
    check_instance("evaluate", "model", model, RecallModel, "a RecallModel")
    tokens, answers, d = evaluation_set(per_distance)
    with torch_threads(1):
        right = answer_accuracy(model(tokens), answers)  # (LENGTH * per_distance,)
    return right.view(LENGTH, per_distance).sum(1).numpy().astype(np.int64)


# ----------------------------------------------------------------------------------------
# Shipping and loading.
# ----------------------------------------------------------------------------------------


def save_models(models: dict, path: str | Path) -> None:
    """All models' state dicts in one file, float16 (the lesson computes in float32)."""
    state = {
        name: {k: t.detach().to(torch.float16).contiguous() for k, t in m.state_dict().items()}
        for name, m in models.items()
    }
    buf = io.BytesIO()
    torch.save(state, buf)
    Path(path).write_bytes(buf.getvalue())


def _load_state(path) -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"load_model: {path} does not exist; run `{TRAIN_COMMAND}`")
    return torch.load(path, weights_only=True)


def load_model(variant, path: str | Path = WEIGHTS_PATH) -> RecallModel:
    """A shipped model of one variant (a name of :data:`VARIANTS`), float32, eval mode."""
    v = _variant("load_model", variant)
    state = _load_state(path)
    if v.name not in state:
        raise ValueError(f"load_model: {path} has no model {v.name!r}; it has {sorted(state)}")
    model = RecallModel(v)
    model.load_state_dict({k: t.to(torch.float32) for k, t in state[v.name].items()})
    return model.eval()


def write_log(log: dict, path: str | Path) -> None:
    """The training log as tab-separated text: ``step``, then each variant's answer loss
    (nats, 4 decimals) at that step, one line per step."""
    names = [c for c in log if c != "step"]
    lines = ["\t".join(["step", *names])]
    for i in range(len(log["step"])):
        lines.append("\t".join([str(int(log["step"][i]))] + [f"{log[n][i]:.4f}" for n in names]))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_log(path: str | Path = LOG_PATH) -> dict[str, np.ndarray]:
    """The shipped training log: ``step`` and one column per variant (answer loss)."""
    log = read_log_table(path, TRAIN_COMMAND)
    log["step"] = log["step"].astype(int)
    return log


def write_results(correct: dict, path: str | Path, per_distance=EVALUATION["per_distance"]):
    """Held-out results as tab-separated text: ``variant``, ``distance``, ``correct``,
    ``total``, one line per variant and distance."""
    lines = ["variant\tdistance\tcorrect\ttotal"]
    for name, counts in correct.items():
        for d, c in enumerate(counts, start=1):
            lines.append(f"{name}\t{d}\t{int(c)}\t{per_distance}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class RecallResults:
    """The measured trade-off (:func:`results`).

    Attributes
    ----------
    names : list of str
        Variants in :data:`VARIANTS` order.
    labels : dict name -> str
    distances : int ndarray (LENGTH,)
        1..LENGTH.
    by_distance : dict name -> float ndarray (LENGTH,)
        Held-out accuracy at each distance.
    accuracy : dict name -> float
        Held-out accuracy over all distances.
    cache_bytes_per_token : dict name -> float
        fp32 cache bytes per token after a whole sequence (SEQ tokens).
    reach : dict name -> int
        The farthest distance each variant can see (:func:`reach`).
    window, seq, chance, per_distance : the task's constants.
    """

    names: list
    labels: dict
    distances: np.ndarray
    by_distance: dict
    accuracy: dict
    cache_bytes_per_token: dict
    reach: dict
    window: int
    seq: int
    chance: float
    per_distance: int

    def accuracy_between(self, name: str, lo: int, hi: int) -> float:
        """Accuracy of one variant over the distances lo..hi (inclusive)."""
        sel = (self.distances >= lo) & (self.distances <= hi)
        return float(self.by_distance[name][sel].mean())


def results(path: str | Path = RESULTS_PATH) -> RecallResults:
    """The shipped held-out results (cheap: reads a table, runs no model)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"results: {path} does not exist; run `{TRAIN_COMMAND}`")
    rows = [ln.split("\t") for ln in path.read_text(encoding="utf-8").splitlines()[1:]]
    names = [n for n in VARIANTS if any(r[0] == n for r in rows)]
    per = {n: np.zeros(LENGTH) for n in names}
    totals = set()
    for name, d, correct, total in rows:
        per[name][int(d) - 1] = int(correct) / int(total)
        totals.add(int(total))
    return RecallResults(
        names=names,
        labels={n: VARIANTS[n].label for n in names},
        distances=np.arange(1, LENGTH + 1),
        by_distance=per,
        accuracy={n: float(per[n].mean()) for n in names},
        cache_bytes_per_token={n: cache_bytes_per_token(n) for n in names},
        reach={n: reach(n) for n in names},
        window=WINDOW,
        seq=SEQ,
        chance=CHANCE,
        per_distance=totals.pop() if len(totals) == 1 else -1,
    )


def _train_and_save(out: Path, progress: bool) -> str:
    models, log = train_all(progress=progress)
    save_models(models, out / WEIGHTS_PATH.name)
    write_log(log, out / LOG_PATH.name)
    correct = {n: evaluate(load_model(n, out / WEIGHTS_PATH.name)) for n in models}
    write_results(correct, out / RESULTS_PATH.name)
    res = results(out / RESULTS_PATH.name)
    lines = [f"trained {len(models)} variants"]
    for n in res.names:
        lines.append(
            f"  {n:13s} accuracy {res.accuracy[n]:.3f}   "
            f"cache {res.cache_bytes_per_token[n]:7.2f} B/token"
        )
    return "\n".join(lines)


def _main(argv=None) -> None:
    train_command(
        argv, __doc__, "train every variant and save them", WEIGHTS_PATH.parent, _train_and_save
    )


if __name__ == "__main__":
    _main()
