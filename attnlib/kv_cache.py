"""Keys in decoding: a KV cache, grouped keys, and a tiny causal decoder (lesson 10).

When a causal model generates one token at a time, the keys and values of past tokens never
change: token ``t`` cannot see later tokens, so its key and value depend only on tokens
``0..t``. Recomputing them at every step is wasted work. A :class:`KVCache` keeps them;
each step computes the key and value of the new token only, appends them, and lets the new
query attend to everything cached.

Sharing keys across heads shrinks the cache: with grouped-query attention (GQA) ``n_heads``
query heads share ``n_kv_heads`` key/value heads (``n_heads / n_kv_heads`` queries per
group); multi-query attention (MQA) is the case ``n_kv_heads = 1``; ordinary multi-head
attention (MHA) is ``n_kv_heads = n_heads``. :func:`grouped_attend` computes it with
:func:`attnlib.attend` by broadcasting, without copying keys.

* :class:`KVCache` — append, read, ``length``, ``nbytes`` (bytes actually held);
* :func:`kv_cache_bytes` — the memory formula, for every way of keeping fewer keys of
  lesson 14 as well; :data:`PUBLISHED_CONFIGS`, the numbers of published models;
* :func:`grouped_attend` — attention with fewer key/value heads than query heads;
* :class:`TinyDecoder` — embedding + ``n_layers`` causal attention blocks; lesson 14 adds
  options for sliding windows (and global layers), cross-layer K/V sharing and latent
  attention;
* :func:`generate` — greedy decoding with or without the cache;
* :func:`rotary_decode_step` — one cached step of a rotary (RoPE) attention layer: the new
  tokens' positions start at the cache length, and keys are rotated *before* they are
  cached.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.attention.bias import causal_lower_right

from attnlib._validate import (
    check_array,
    check_decoder_input,
    check_head_counts,
    check_instance,
    check_int,
    check_kv_step,
    check_mask,
    check_ndim,
)
from attnlib.core import attend
from attnlib.heads import merge_heads, split_heads
from attnlib.latent import LatentAttention
from attnlib.masks import causal_mask
from attnlib.positions import apply_rotary
from attnlib.windows import sliding_window_mask

__all__ = [
    "KVCache",
    "kv_cache_bytes",
    "PublishedConfig",
    "PUBLISHED_CONFIGS",
    "grouped_attend",
    "TinyDecoder",
    "Generation",
    "generate",
    "rotary_decode_step",
]


# ----------------------------------------------------------------------------------------
# The cache.
# ----------------------------------------------------------------------------------------


class KVCache:
    """Past keys and values of one attention layer, stored once and appended to.

    Storage is allocated for ``max_len`` positions up front (so appending is a copy of
    the new rows only) and doubled if a sequence outgrows it.

    Parameters
    ----------
    batch, n_kv_heads, d_k : int
        Shape of the keys: (batch, n_kv_heads, seq, d_k).
    d_v : int, optional
        Width of the values; default ``d_k``.
    max_len : int, default 64
        Positions to allocate for.
    dtype : torch.dtype, default torch.float32

    Examples
    --------
    >>> cache = KVCache(batch=1, n_kv_heads=2, d_k=4, max_len=8)
    >>> k, v = cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    >>> k.shape, cache.length
    (torch.Size([1, 2, 3, 4]), 3)
    """

    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        d_k: int,
        d_v: int | None = None,
        *,
        max_len: int = 64,
        dtype: torch.dtype = torch.float32,
    ):
        fn = type(self).__name__
        self.batch = check_int(fn, "batch", batch, minimum=1)
        self.n_kv_heads = check_int(fn, "n_kv_heads", n_kv_heads, minimum=1)
        self.d_k = check_int(fn, "d_k", d_k, minimum=1)
        self.d_v = self.d_k if d_v is None else check_int(fn, "d_v", d_v, minimum=1)
        max_len = check_int(fn, "max_len", max_len, minimum=1)
        self.dtype = dtype
        self._k = torch.empty(batch, n_kv_heads, max_len, self.d_k, dtype=dtype)
        self._v = torch.empty(batch, n_kv_heads, max_len, self.d_v, dtype=dtype)
        self.length = 0

    @property
    def capacity(self) -> int:
        """Positions the storage can hold before it grows."""
        return self._k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the keys and values of new positions; return everything cached.

        Parameters
        ----------
        k : Tensor of shape (batch, n_kv_heads, seq_new, d_k)
        v : Tensor of shape (batch, n_kv_heads, seq_new, d_v)

        Returns
        -------
        k_all : Tensor of shape (batch, n_kv_heads, length, d_k)
        v_all : Tensor of shape (batch, n_kv_heads, length, d_v)
            Views of the storage (no copy), oldest position first.
        """
        end = self.length + check_kv_step("KVCache.append", self, k, v)
        if end > self.capacity:
            self._grow(end)
        self._k[:, :, self.length : end] = k.detach()
        self._v[:, :, self.length : end] = v.detach()
        self.length = end
        return self.read()

    def _grow(self, needed: int) -> None:
        new_cap = max(needed, 2 * self.capacity)
        k = torch.empty(self.batch, self.n_kv_heads, new_cap, self.d_k, dtype=self.dtype)
        v = torch.empty(self.batch, self.n_kv_heads, new_cap, self.d_v, dtype=self.dtype)
        k[:, :, : self.length] = self._k[:, :, : self.length]
        v[:, :, : self.length] = self._v[:, :, : self.length]
        self._k, self._v = k, v

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached keys (batch, n_kv_heads, length, d_k) and values (..., length, d_v)."""
        return self._k[:, :, : self.length], self._v[:, :, : self.length]

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (e.g. to rewind and retry a step)."""
        length = check_int("KVCache.truncate", "length", length, minimum=0)
        if length > self.length:
            raise ValueError(
                f"KVCache.truncate: length={length} is more than the {self.length} cached"
            )
        self.length = length

    def __len__(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes of storage this cache holds (keys and values, allocated capacity)."""
        return self._k.untyped_storage().nbytes() + self._v.untyped_storage().nbytes()

    def __repr__(self) -> str:
        return (
            f"KVCache(batch={self.batch}, n_kv_heads={self.n_kv_heads}, d_k={self.d_k}, "
            f"d_v={self.d_v}, length={self.length}, capacity={self.capacity})"
        )


class RollingKVCache(KVCache):
    """Keys and values of the last ``window`` positions of one layer, in a ring buffer.

    Storage for exactly ``window`` positions is allocated up front; position ``p`` is
    written to slot ``p % window``, overwriting position ``p - window``, which no query
    from now on may see. Memory stays the same however long the sequence grows.

    Parameters
    ----------
    batch, n_kv_heads, d_k : int
        Shape of the keys: (batch, n_kv_heads, seq, d_k).
    d_v : int, optional
        Width of the values; default ``d_k``.
    window : int
        Positions a query sees (itself included) and positions kept.
    dtype : torch.dtype, default torch.float32

    Examples
    --------
    >>> cache = RollingKVCache(1, 1, 2, window=3)
    >>> for _ in range(5):
    ...     k, v = cache.append(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    >>> cache.length, cache.positions.tolist(), k.shape[2]
    (5, [2, 3, 4], 3)
    """

    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        d_k: int,
        d_v: int | None = None,
        *,
        window: int,
        dtype: torch.dtype = torch.float32,
    ):
        self.window = check_int("RollingKVCache", "window", window, minimum=1)
        super().__init__(batch, n_kv_heads, d_k, d_v, max_len=self.window, dtype=dtype)
        # self.length: positions seen so far = position of the next token

    @property
    def held(self) -> int:
        """Positions stored now: ``min(length, window)``."""
        return min(self.length, self.window)

    @property
    def positions(self) -> torch.Tensor:
        """Absolute positions held, oldest first, shape (held,)."""
        return torch.arange(self.length - self.held, self.length)

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The positions held, oldest first: keys (batch, n_kv_heads, held, d_k), values."""
        slots = self.positions % self.window  # (held,): where each position sits
        return self._k[:, :, slots], self._v[:, :, slots]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store new positions; return the keys and values the new queries can see.

        The new queries sit at positions ``start .. start + seq_new - 1`` (``start`` =
        ``length`` before the call). Together they see positions
        ``max(0, start - window + 1) .. start + seq_new - 1``: the last ``window - 1``
        held before the call, then the new ones. Attend to them with
        ``sliding_window_mask(seq_new, n_visible, window=window, align="bottom_right")``
        (for one new token every returned key is visible). Afterwards only the last
        ``window`` positions stay stored.

        Parameters
        ----------
        k : Tensor of shape (batch, n_kv_heads, seq_new, d_k)
        v : Tensor of shape (batch, n_kv_heads, seq_new, d_v)

        Returns
        -------
        k_visible : Tensor of shape (batch, n_kv_heads, n_visible, d_k)
        v_visible : Tensor of shape (batch, n_kv_heads, n_visible, d_v)
            Oldest position first; ``n_visible = min(start, window - 1) + seq_new``.
        """
        seq_new = check_kv_step("RollingKVCache.append", self, k, v)
        k_old, v_old = self.read()  # (batch, n_kv_heads, held, d_k / d_v)
        keep = min(self.held, self.window - 1)  # the oldest held position no new query sees
        k_vis = torch.cat([k_old[:, :, self.held - keep :], k.detach()], 2)  # (..., n_visible, d_k)
        v_vis = torch.cat([v_old[:, :, self.held - keep :], v.detach()], 2)  # (..., n_visible, d_v)
        last = min(seq_new, self.window)  # only the newest `window` of them can be kept
        new_pos = torch.arange(self.length + seq_new - last, self.length + seq_new)  # (last,)
        self._k[:, :, new_pos % self.window] = k.detach()[:, :, seq_new - last :]
        self._v[:, :, new_pos % self.window] = v.detach()[:, :, seq_new - last :]
        self.length += seq_new
        return k_vis, v_vis

    def truncate(self, length: int) -> None:
        """Not possible: positions that left the window are gone, so a rolling cache cannot
        rewind. Raises ``ValueError``."""
        raise ValueError(
            "RollingKVCache.truncate: a rolling cache cannot rewind (positions older than "
            f"the window of {self.window} are overwritten); start a new cache instead"
        )

    def __repr__(self) -> str:
        return (
            f"RollingKVCache(batch={self.batch}, n_kv_heads={self.n_kv_heads}, d_k={self.d_k}, "
            f"d_v={self.d_v}, window={self.window}, length={self.length})"
        )


def kv_cache_bytes(
    *,
    n_layers: int,
    batch: int,
    seq: int,
    n_kv_heads: int | None = None,
    d_k: int | None = None,
    d_v: int | None = None,
    dtype: torch.dtype = torch.float32,
    window: int | None = None,
    n_local_layers: int | None = None,
    d_latent: int | None = None,
    d_rope: int = 0,
    n_kv_layers: int | None = None,
    d_index: int = 0,
) -> int:
    """Memory of a KV cache: ``batch · bytes · numbers per token · positions kept, over layers``.

    For ordinary attention (lesson 10) it is
    ``n_layers · batch · n_kv_heads · seq · (d_k + d_v) · bytes``: linear in every factor, and
    in the number of key/value heads — not of query heads, which is why sharing keys across
    heads (GQA, MQA) shrinks it. Lesson 14 keeps fewer keys in four more ways:

    * latent attention (``d_latent``): a layer caches ``d_latent + d_rope`` numbers per
      token (the latent and the decoupled rotary key), whatever the number of heads;
    * a sliding window (``window``): the ``n_local_layers`` windowed layers keep only
      ``min(seq, window)`` positions;
    * cross-layer sharing (``n_kv_layers``): only that many layers store keys and values,
      the others reuse them and store nothing;
    * top-k selection (``d_index``): every key is kept (selection saves reading, not
      memory), plus one indexer key of ``d_index`` numbers per token and layer.

    Parameters
    ----------
    n_layers, batch, seq : int
        Layers, sequences and positions (tokens) per sequence.
    n_kv_heads, d_k : int
        Key/value heads and key width; required unless ``d_latent`` is given.
    d_v : int, optional
        Value width; default ``d_k``.
    dtype : torch.dtype, default torch.float32
        Element type of the cache (bytes per number).
    window : int, optional
        Sliding window: positions a windowed layer keeps.
    n_local_layers : int, optional
        How many of the storing layers use the window; default all of them if ``window``
        is given (Mistral 7B), else 0.
    d_latent : int, optional
        Latent width of multi-head latent attention (then ``n_kv_heads`` and ``d_k`` are
        not used and must not be given).
    d_rope : int, default 0
        Width of the decoupled rotary key cached beside the latent.
    n_kv_layers : int, optional
        Layers that store their own keys and values; default ``n_layers``.
    d_index : int, default 0
        Width of the indexer key of top-k selection, cached per token and layer.

    Returns
    -------
    nbytes : int
    """
    fn = "kv_cache_bytes"
    n_layers = check_int(fn, "n_layers", n_layers, minimum=0)
    batch = check_int(fn, "batch", batch, minimum=0)
    seq = check_int(fn, "seq", seq, minimum=0)
    if d_latent is None:
        if n_kv_heads is None or d_k is None:
            raise TypeError(f"{fn}: give n_kv_heads and d_k (or d_latent for latent attention)")
        n_kv_heads = check_int(fn, "n_kv_heads", n_kv_heads, minimum=0)
        d_k = check_int(fn, "d_k", d_k, minimum=0)
        d_v = d_k if d_v is None else check_int(fn, "d_v", d_v, minimum=0)
        per_token = n_kv_heads * (d_k + d_v)  # numbers per token and storing layer
    else:
        if n_kv_heads is not None or d_k is not None or d_v is not None:
            raise ValueError(
                f"{fn}: d_latent={d_latent} (latent attention) caches no per-head keys; "
                f"do not also give n_kv_heads, d_k or d_v"
            )
        d_latent = check_int(fn, "d_latent", d_latent, minimum=0)
        per_token = d_latent + check_int(fn, "d_rope", d_rope, minimum=0)
    per_token += check_int(fn, "d_index", d_index, minimum=0)
    storing = n_layers if n_kv_layers is None else check_int(fn, "n_kv_layers", n_kv_layers)
    if not 0 <= storing <= n_layers:
        raise ValueError(f"{fn}: n_kv_layers={storing} must be in 0..n_layers={n_layers}")
    if window is None:
        if n_local_layers:
            raise ValueError(f"{fn}: n_local_layers={n_local_layers} needs a window")
        local, kept = 0, seq
    else:
        kept = min(seq, check_int(fn, "window", window, minimum=1))  # positions a local layer keeps
        local = (
            storing if n_local_layers is None else check_int(fn, "n_local_layers", n_local_layers)
        )
        if not 0 <= local <= storing:
            raise ValueError(
                f"{fn}: n_local_layers={local} must be in 0..{storing} (the layers that store)"
            )
    positions = (storing - local) * seq + local * kept  # summed over the storing layers
    itemsize = torch.empty((), dtype=dtype).element_size()
    return batch * itemsize * per_token * positions


class PublishedConfig(NamedTuple):
    """What the cache formula needs from a published model (one row of
    :data:`PUBLISHED_CONFIGS`): the arguments of :func:`kv_cache_bytes` and where they
    come from."""

    n_layers: int
    context: int  # longest context in tokens
    n_kv_heads: int | None = None
    d_head: int | None = None
    window: int | None = None
    n_local_layers: int | None = None
    d_latent: int | None = None
    d_rope: int = 0
    d_index: int = 0
    source: str = ""

    def cache_bytes(self, seq: int | None = None, *, batch: int = 1, dtype=torch.bfloat16) -> int:
        """:func:`kv_cache_bytes` for ``seq`` tokens (default: the full context)."""
        latent = self.d_latent is not None
        return kv_cache_bytes(
            n_layers=self.n_layers,
            batch=batch,
            seq=self.context if seq is None else seq,
            n_kv_heads=None if latent else self.n_kv_heads,
            d_k=None if latent else self.d_head,
            dtype=dtype,
            window=self.window,
            n_local_layers=self.n_local_layers,
            d_latent=self.d_latent,
            d_rope=self.d_rope,
            d_index=self.d_index,
        )


# Each number from the model's paper or technical report (table given), or from the
# config.json published with its weights on the Hugging Face hub.
PUBLISHED_CONFIGS: dict[str, PublishedConfig] = {
    # Radford et al. 2019, Table 2 and §2.3: 12 layers, d_model 768, 1024-token context;
    # n_head 12 in openai-community/gpt2 config.json, so d_head 64. MHA.
    "GPT-2 (124M)": PublishedConfig(
        12, 1024, n_kv_heads=12, d_head=64, source="Radford et al. 2019; gpt2 config.json"
    ),
    # Touvron et al. 2023 (LLaMA), Table 2: 7B has 32 layers, d_model 4096, 32 heads;
    # Llama 2 paper, Table 1: 4k context, grouped-query attention only for 34B and 70B.
    "Llama 2 7B": PublishedConfig(
        32, 4096, n_kv_heads=32, d_head=128, source="Touvron et al. 2023, Llama 2, Table 1"
    ),
    # Llama Team 2024, The Llama 3 Herd of Models, Table 3: 32 layers, d_model 4096,
    # 32 heads, 8 key/value heads; 8192-token context in the first release's model card.
    "Llama 3 8B": PublishedConfig(
        32, 8192, n_kv_heads=8, d_head=128, source="Llama Team 2024, Table 3"
    ),
    # Jiang et al. 2023, Mistral 7B, Table 1: 32 layers, head_dim 128, 32 heads, 8 kv heads,
    # window 4096, context 8192; every layer uses the window (rolling buffer cache, §2).
    "Mistral 7B": PublishedConfig(
        32, 8192, n_kv_heads=8, d_head=128, window=4096, source="Jiang et al. 2023, Table 1"
    ),
    # Gemma Team 2024, Gemma 2 report, Table 1: 9B has 42 layers, 16 heads, 8 kv heads,
    # head size 256; §2: local (4096-token window) and global (8192) layers alternate 1:1.
    "Gemma 2 9B": PublishedConfig(
        42,
        8192,
        n_kv_heads=8,
        d_head=256,
        window=4096,
        n_local_layers=21,
        source="Gemma Team 2024, Gemma 2, Table 1 and §2",
    ),
    # Gemma Team 2025, Gemma 3 report, §2: 5 local layers per global layer, 1024-token
    # window, 128K context; google/gemma-3-27b-pt config.json: 62 layers, 16 kv heads,
    # head_dim 128, sliding_window 1024, every 6th layer global -> 10 global, 52 local.
    "Gemma 3 27B": PublishedConfig(
        62,
        131072,
        n_kv_heads=16,
        d_head=128,
        window=1024,
        n_local_layers=52,
        source="Gemma Team 2025, Gemma 3, §2; gemma-3-27b config.json",
    ),
    # DeepSeek-AI 2024, DeepSeek-V2, §2.1 and Table 1: the cache holds (d_c + d_h^R)·l
    # numbers per token, d_c = 512 (4·d_h), d_h^R = 64 (d_h/2); §3.1.2: 60 layers;
    # 128K context.
    "DeepSeek-V2": PublishedConfig(
        60, 131072, d_latent=512, d_rope=64, source="DeepSeek-AI 2024, DeepSeek-V2, §2.1, §3.1.2"
    ),
    # DeepSeek-AI 2024, DeepSeek-V3 technical report, §4.2: 61 layers, d_c = 512,
    # d_h^R = 64; 128K context (§4.3).
    "DeepSeek-V3": PublishedConfig(
        61, 131072, d_latent=512, d_rope=64, source="DeepSeek-AI 2024, DeepSeek-V3, §4.2"
    ),
    # DeepSeek-AI 2025, DeepSeek-V3.2-Exp: DeepSeek-V3's attention plus a lightning indexer
    # whose key (index_head_dim 128 in config.json) is cached per token and layer; each
    # query then attends to its top 2048 keys. (The release stores the indexer keys in FP8;
    # the formula counts them at the cache's dtype, an upper bound.)
    "DeepSeek-V3.2-Exp": PublishedConfig(
        61,
        131072,
        d_latent=512,
        d_rope=64,
        d_index=128,
        source="DeepSeek-AI 2025, DeepSeek-V3.2-Exp; config.json",
    ),
}


# ----------------------------------------------------------------------------------------
# Grouped keys.
# ----------------------------------------------------------------------------------------


def grouped_attend(q, k, v, mask=None, *, causal: bool = False, align: str = "top_left"):
    """Attention where groups of query heads share one key/value head (GQA / MQA).

    Parameters
    ----------
    q : Tensor of shape (batch, n_heads, seq_q, d_k)
    k : Tensor of shape (batch, n_kv_heads, seq_k, d_k)
        ``n_heads`` must be a multiple of ``n_kv_heads``; query heads
        ``g·group .. (g+1)·group - 1`` use key head ``g`` (the layout of
        ``scaled_dot_product_attention(..., enable_gqa=True)``).
    v : Tensor of shape (batch, n_kv_heads, seq_k, d_v)
    mask : bool Tensor broadcastable to (batch, n_heads, seq_q, seq_k), optional
        True = may attend.
    causal : bool, default False
        Block future keys: :func:`attnlib.causal_mask` ``(seq_q, seq_k, align=align)``.
    align : {"top_left", "bottom_right"}, default "top_left"
        As in :func:`attnlib.causal_mask` and :func:`attnlib.attend`: ``"top_left"``, query
        i sees keys 0..i; ``"bottom_right"``, the queries are the *last* ``seq_q`` positions
        of the ``seq_k`` (decoding with a cache). With ``seq_q == seq_k`` the two agree.

    Returns
    -------
    out : Tensor of shape (batch, n_heads, seq_q, d_v)
    weights : Tensor of shape (batch, n_heads, seq_q, seq_k)
    """
    fn = "grouped_attend"
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_array(fn, name, x, only="torch")
        check_ndim(fn, name, x, ndim=4, doc="(batch, heads, seq, d)")
    batch, n_heads, seq_q, d_k = q.shape
    n_kv_heads = k.shape[1]
    if v.shape[1] != n_kv_heads or n_heads % n_kv_heads:
        raise ValueError(
            f"{fn}: q has n_heads={n_heads} (shape {tuple(q.shape)}), k has "
            f"n_kv_heads={n_kv_heads} (shape {tuple(k.shape)}), v has {v.shape[1]} (shape "
            f"{tuple(v.shape)}); k and v need the same number of heads, and it must divide n_heads"
        )
    group = n_heads // n_kv_heads
    seq_k = k.shape[2]
    target = (batch, n_heads, seq_q, seq_k)
    mask = check_mask(fn, mask, q, target, "weights (batch, n_heads, seq_q, seq_k)")
    if causal:
        cm = causal_mask(seq_q, seq_k, align=align, like=q)  # (seq_q, seq_k)
        mask = cm if mask is None else mask & cm
    if mask is not None:
        mask = torch.broadcast_to(mask, target)
        mask = mask.reshape(batch, n_kv_heads, group, seq_q, seq_k)
    q_g = q.reshape(batch, n_kv_heads, group, seq_q, d_k)  # (batch, n_kv_heads, group, seq_q, d_k)
    # the key/value head is shared by the `group` query heads: a broadcast, not a copy
    # (batch, n_kv_heads, group, seq_q, d_v), (batch, n_kv_heads, group, seq_q, seq_k)
    out, w = attend(q_g, k[:, :, None], v[:, :, None], mask)
    return (
        out.reshape(batch, n_heads, seq_q, v.shape[-1]),  # (batch, n_heads, seq_q, d_v)
        w.reshape(batch, n_heads, seq_q, seq_k),  # (batch, n_heads, seq_q, seq_k)
    )


# ----------------------------------------------------------------------------------------
# A tiny causal decoder.
# ----------------------------------------------------------------------------------------


def _sdpa_causal(q, k, v, mask=None):
    """Causal attention of the last seq_q positions over seq_k keys, via torch's SDPA.

    torch's lower-right causal bias is ``causal_mask(seq_q, seq_k, align="bottom_right")``
    (with seq_q == seq_k, SDPA's ordinary ``is_causal``). A boolean ``mask`` (seq_q, seq_k),
    already causal (the sliding-window band), replaces it.
    """
    bias = causal_lower_right(q.shape[2], k.shape[2]) if mask is None else mask  # (seq_q, seq_k)
    gqa = q.shape[1] != k.shape[1]  # fewer key/value heads than query heads
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)


class CausalSelfAttention(nn.Module):
    """Causal self-attention with ``n_heads`` query heads and ``n_kv_heads`` key/value heads.

    Separate ``W_q`` (d_model → n_heads·d_head), ``W_k`` and ``W_v`` (d_model →
    n_kv_heads·d_head) and ``W_o``; ``d_head = d_model / n_heads``.

    Lesson 14 adds two options. ``window``: each query sees only the last ``window``
    positions (:func:`attnlib.windows.sliding_window_mask`), and a
    :class:`attnlib.windows.RollingKVCache` is enough. ``own_kv=False``: the layer has no
    ``W_k``/``W_v`` (both None) and attends with the keys and values of an earlier layer,
    passed as ``kv`` (cross-layer KV sharing).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        window: int | None = None,
        own_kv: bool = True,
    ):
        super().__init__()
        fn = "CausalSelfAttention"
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        n_heads = check_int(fn, "n_heads", n_heads, minimum=1)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        n_kv_heads = check_int(fn, "n_kv_heads", n_kv_heads, minimum=1)
        self.d_head = check_head_counts("CausalSelfAttention", d_model, n_heads, n_kv_heads)
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.window = None if window is None else check_int(fn, "window", window, minimum=1)
        self.W_q = nn.Linear(d_model, n_heads * self.d_head, bias=False)
        self.W_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False) if own_kv else None
        self.W_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False) if own_kv else None
        self.W_o = nn.Linear(n_heads * self.d_head, d_model, bias=False)
        # True: torch's fused kernel (fast); False: attnlib's grouped_attend (same numbers,
        # proven equal in tests/test_kv_cache.py, and returns the weights).
        self.use_sdpa = True

    def forward(self, x: torch.Tensor, cache=None, *, kv=None, return_kv: bool = False):
        """x : Tensor of shape (batch, seq_new, d_model) -> (batch, seq_new, d_model).

        Without a cache, x is the whole sequence. With one (a :class:`KVCache`, or a
        :class:`attnlib.windows.RollingKVCache` for a windowed layer), x holds only the new
        positions; their keys and values are appended and the queries see all of them (or
        the last ``window``).

        ``kv``: the keys and values (batch, n_kv_heads, seq_k, d_head) of another layer for
        the same positions, used instead of this layer's own (no cache needed then).
        ``return_kv=True`` returns ``(out, (k, v))``, the keys and values attended to.
        """
        q = split_heads(self.W_q(x), self.n_heads)  # (batch, n_heads, seq_new, d_head)
        if kv is not None:
            k, v = kv  # another layer's: (batch, n_kv_heads, seq_k, d_head)
        elif self.W_k is None:
            raise ValueError("CausalSelfAttention: this layer shares K/V (own_kv=False); pass kv")
        else:
            k = split_heads(self.W_k(x), self.n_kv_heads)  # (batch, n_kv_heads, seq_new, d_head)
            v = split_heads(self.W_v(x), self.n_kv_heads)  # (batch, n_kv_heads, seq_new, d_head)
            if cache is not None:
                k, v = cache.append(k, v)  # (batch, n_kv_heads, seq_k, d_head), positions so far
        # The new queries are the last seq_new of the seq_k positions: bottom-right causal.
        mask = None
        if self.window is not None:  # the band: the last `window` positions only
            mask = sliding_window_mask(
                q.shape[2], k.shape[2], window=self.window, align="bottom_right", like=q
            )  # (seq_new, seq_k)
        if self.use_sdpa:
            out = _sdpa_causal(q, k, v, mask)  # (batch, n_heads, seq_new, d_head)
        else:
            # (batch, n_heads, seq_new, d_head)
            out, _ = grouped_attend(q, k, v, mask, causal=True, align="bottom_right")
        out = self.W_o(merge_heads(out))  # (batch, seq_new, d_model)
        return (out, (k, v)) if return_kv else out


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, **attention):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        if attention.get("d_latent") is not None:
            d_latent, d_rope = attention["d_latent"], attention["d_rope"]
            self.attn = LatentAttention(d_model, n_heads, d_latent, d_rope=d_rope)
        else:
            window, own_kv = attention.get("window"), attention.get("own_kv", True)
            self.attn = CausalSelfAttention(
                d_model, n_heads, n_kv_heads, window=window, own_kv=own_kv
            )
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x, cache=None, *, kv=None, return_kv: bool = False):
        """x (batch, seq_new, d_model) -> the same shape; with ``return_kv``, also the keys
        and values the attention used (None for a latent layer)."""
        if isinstance(self.attn, LatentAttention):
            out, kv = self.attn(self.norm1(x), cache)[0], None
        else:
            out, kv = self.attn(self.norm1(x), cache, kv=kv, return_kv=True)
        x = x + out
        x = x + self.mlp(self.norm2(x))
        return (x, kv) if return_kv else x


class TinyDecoder(nn.Module):
    """A small causal language model: embeddings + ``n_layers`` attention blocks.

    Each block is pre-norm self-attention (``n_heads`` query heads, ``n_kv_heads``
    key/value heads) followed by an MLP. Positions are learned embeddings added to the
    token embeddings (lesson 12 looks at positions more closely).

    Parameters
    ----------
    vocab_size, d_model, n_heads : int
    n_kv_heads : int, optional
        Default ``n_heads`` (MHA); ``1`` is MQA; anything dividing ``n_heads`` is GQA.
    n_layers : int, default 2
    max_len : int, default 2048
        Longest sequence (size of the position table).
    kv_share : sequence of int, optional
        Cross-layer KV sharing (lesson 14): layer ``l`` attends with the keys and values of
        layer ``kv_share[l]``. ``kv_share[l] == l``: its own; otherwise an earlier layer
        that has its own. A sharing layer has no ``W_k``/``W_v`` and caches nothing. Default:
        every layer its own (the decoder of lesson 10).
    window : int, optional
        Sliding-window attention (lesson 14) in every layer not in ``global_layers``; those
        layers cache only ``window`` positions (:class:`attnlib.windows.RollingKVCache`).
    global_layers : sequence of int, default ()
        Layers that see every earlier position although ``window`` is set.
    d_latent : int, optional
        Multi-head latent attention (:class:`attnlib.latent.LatentAttention`) in every layer,
        caching ``d_latent + d_rope`` numbers per token; not combined with the other options.
    d_rope : int, default 0
        Decoupled rotary key of the latent layers.
    """

    def __init__(
        self,
        vocab_size: int = 64,
        d_model: int = 64,
        n_heads: int = 4,
        n_kv_heads: int | None = None,
        n_layers: int = 2,
        max_len: int = 2048,
        *,
        kv_share=None,
        window: int | None = None,
        global_layers=(),
        d_latent: int | None = None,
        d_rope: int = 0,
    ):
        super().__init__()
        fn = "TinyDecoder"
        vocab_size = check_int(fn, "vocab_size", vocab_size, minimum=1)
        n_layers = check_int(fn, "n_layers", n_layers, minimum=1)
        max_len = check_int(fn, "max_len", max_len, minimum=1)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.n_heads, self.n_kv_heads, self.n_layers = n_heads, n_kv_heads, n_layers
        self.d_head = d_model // n_heads
        self.max_len = max_len
        self.kv_share = _check_kv_share(fn, kv_share, n_layers)
        self.window = None if window is None else check_int(fn, "window", window, minimum=1)
        self.global_layers = _check_layers(fn, "global_layers", global_layers, n_layers)
        # per layer: does it use the window?
        self.windowed = [
            window is not None and i not in self.global_layers for i in range(n_layers)
        ]
        for i, src in enumerate(self.kv_share):
            if self.windowed[src] and not self.windowed[i]:
                raise ValueError(
                    f"{fn}: layer {i} sees every position but reads the K/V of layer {src}, "
                    f"which keeps only the last window={self.window}"
                )
        self.d_latent, self.d_rope = d_latent, d_rope
        if d_latent is not None and (window is not None or kv_share is not None):
            raise ValueError(f"{fn}: d_latent is not combined with window or kv_share")
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(
            _Block(
                d_model,
                n_heads,
                n_kv_heads,
                window=self.window if self.windowed[i] else None,
                own_kv=self.kv_share[i] == i,
                d_latent=d_latent,
                d_rope=d_rope,
            )
            for i in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def new_caches(self, batch: int, max_len: int) -> list:
        """One empty cache per layer, sized for ``max_len`` positions.

        A :class:`KVCache` per layer; lesson 14's options give a
        :class:`attnlib.windows.RollingKVCache` of ``window`` positions for windowed layers,
        a :class:`attnlib.latent.LatentCache` for latent layers, and ``None`` for layers
        that reuse another layer's keys and values.
        """
        dtype = self.tok.weight.dtype
        caches = []
        for i, block in enumerate(self.blocks):
            if self.kv_share[i] != i:
                caches.append(None)  # this layer stores nothing
            elif isinstance(block.attn, LatentAttention):
                caches.append(block.attn.new_cache(batch, max_len))
            elif self.windowed[i]:
                size = dict(window=self.window, dtype=dtype)  # only the last `window` positions
                caches.append(RollingKVCache(batch, self.n_kv_heads, self.d_head, **size))
            else:
                caches.append(
                    KVCache(batch, self.n_kv_heads, self.d_head, max_len=max_len, dtype=dtype)
                )
        return caches

    def cache_bytes(self, seq: int, *, batch: int = 1) -> int:
        """:func:`kv_cache_bytes` of this model's caches after ``seq`` tokens."""
        dtype = self.tok.weight.dtype
        storing = sum(src == i for i, src in enumerate(self.kv_share))
        if self.d_latent is not None:
            latent = dict(d_latent=self.d_latent, d_rope=self.d_rope)
            return kv_cache_bytes(
                n_layers=self.n_layers, batch=batch, seq=seq, dtype=dtype, **latent
            )
        local = sum(self.windowed[i] for i, src in enumerate(self.kv_share) if src == i)
        return kv_cache_bytes(
            n_layers=self.n_layers,
            batch=batch,
            seq=seq,
            n_kv_heads=self.n_kv_heads,
            d_k=self.d_head,
            dtype=dtype,
            window=self.window,
            n_local_layers=local if self.window is not None else None,
            n_kv_layers=storing,
        )

    def forward(self, tokens: torch.Tensor, caches: list | None = None):
        """Logits for every given position.

        Parameters
        ----------
        tokens : int Tensor of shape (batch, seq_new)
            The whole sequence (no cache), or only the new tokens (with caches, which
            then hold the earlier positions).
        caches : list, one per layer, optional
            As made by :meth:`new_caches` (``None`` for layers that share K/V).

        Returns
        -------
        logits : Tensor of shape (batch, seq_new, vocab_size)
        """
        start = check_decoder_input("TinyDecoder", tokens, caches, self.n_layers, self.max_len)
        seq_new = tokens.shape[1]  # the first new token sits at position `start`
        pos = torch.arange(start, start + seq_new)  # (seq_new,)
        x = self.tok(tokens) + self.pos(pos)  # (batch, seq_new, d_model)
        kv_of = {}  # layer -> the keys and values it attended with
        for i, block in enumerate(self.blocks):
            src = self.kv_share[i]
            x, kv_of[i] = block(
                x,
                None if caches is None else caches[i],
                kv=None if src == i else kv_of[src],  # a sharing layer reuses layer src's
                return_kv=True,
            )  # x: (batch, seq_new, d_model)
        return self.head(self.norm(x))  # (batch, seq_new, vocab_size)


def _check_layers(fn: str, name: str, layers, n_layers: int) -> tuple[int, ...]:
    """``layers`` as a tuple of layer indices in 0 .. n_layers - 1."""
    layers = tuple(layers)
    for i in layers:
        check_int(fn, f"{name} entry", i, minimum=0, maximum=n_layers - 1)
    return layers


def _check_kv_share(fn: str, kv_share, n_layers: int) -> tuple[int, ...]:
    """Which layer's K/V each layer uses; default every layer its own."""
    if kv_share is None:
        return tuple(range(n_layers))
    kv_share = _check_layers(fn, "kv_share", kv_share, n_layers)
    if len(kv_share) != n_layers:
        raise ValueError(f"{fn}: kv_share has {len(kv_share)} entries for n_layers={n_layers}")
    for i, src in enumerate(kv_share):
        if src > i or kv_share[src] != src:
            raise ValueError(
                f"{fn}: kv_share={list(kv_share)}: layer {i} reads layer {src}, which must be "
                f"layer {i} itself or an earlier layer that has its own K/V"
            )
    return kv_share


class Generation(NamedTuple):
    """The result of :func:`generate`.

    tokens : int Tensor of shape (batch, prompt_len + n_new)
    logits : Tensor of shape (batch, n_new, vocab_size)
        The logits each new token was chosen from.
    caches : list of KVCache or None
    """

    tokens: torch.Tensor
    logits: torch.Tensor
    caches: list[KVCache] | None


@torch.no_grad()
def generate(model: TinyDecoder, prompt: torch.Tensor, n_new: int, *, use_cache: bool = True):
    """Greedy decoding: append the most likely next token ``n_new`` times.

    Without the cache every step runs the model on the whole sequence so far and keeps
    only the last position's logits. With it, the prompt is processed once (filling the
    caches) and every later step feeds only the newest token.

    Parameters
    ----------
    model : TinyDecoder
    prompt : int Tensor of shape (batch, prompt_len), prompt_len >= 1
    n_new : int
    use_cache : bool, default True

    Returns
    -------
    Generation
        ``tokens`` (batch, prompt_len + n_new), ``logits`` (batch, n_new, vocab_size),
        ``caches`` (None without the cache).
    """
    check_array("generate", "prompt", prompt, only="torch")
    if prompt.ndim != 2 or prompt.shape[1] < 1:
        raise ValueError(
            f"generate: prompt must be (batch, prompt_len >= 1), got shape {tuple(prompt.shape)}"
        )
    n_new = check_int("generate", "n_new", n_new, minimum=0)
    batch, prompt_len = prompt.shape
    total = prompt_len + n_new
    tokens = torch.empty(batch, total, dtype=prompt.dtype)
    tokens[:, :prompt_len] = prompt
    all_logits = []
    caches = model.new_caches(batch, total) if use_cache else None
    feed = prompt  # what the model sees at this step
    for t in range(prompt_len, total):
        if use_cache:
            logits = model(feed, caches)[:, -1]  # (batch, vocab_size)
        else:
            logits = model(tokens[:, :t])[:, -1]  # recompute every position, keep the last
        nxt = logits.argmax(dim=-1)  # (batch,)
        tokens[:, t] = nxt
        all_logits.append(logits)
        feed = nxt[:, None]  # (batch, 1): only the new token next time
    vocab = model.head.out_features
    logits = torch.stack(all_logits, 1) if all_logits else torch.empty(batch, 0, vocab)
    return Generation(tokens, logits, caches)


# ----------------------------------------------------------------------------------------
# Positions with a cache: rotary embeddings.
# ----------------------------------------------------------------------------------------


def rotary_decode_step(q_new, k_new, v_new, cache: KVCache, *, start=None, base: float = 10000.0):
    """One cached attention step of a layer with rotary embeddings (RoPE, lesson 12).

    1. The ``seq_new`` new tokens sit at positions ``start .. start + seq_new - 1``; rotate
       their queries and keys by those positions (:func:`attnlib.positions.apply_rotary`).
    2. Append the *rotated* keys, and the values (never rotated), to ``cache``: each key is
       rotated once, at its own position, and stored that way for every later step.
    3. The new queries attend to every cached key (causal, aligned bottom-right).

    ``start`` defaults to ``cache.length``, the number of positions already cached — the
    only right value. Any other value (0, say, as if every step were a fresh sequence) is
    the classic cache bug: it runs without an error and silently gives other outputs.

    Parameters
    ----------
    q_new : Tensor of shape (batch, n_heads, seq_new, d_k)
        Queries of the new tokens, not yet rotated.
    k_new : Tensor of shape (batch, n_kv_heads, seq_new, d_k)
        Their keys, not yet rotated (``n_kv_heads`` divides ``n_heads``, as in GQA).
    v_new : Tensor of shape (batch, n_kv_heads, seq_new, d_v)
    cache : KVCache
        Holds the rotated keys and the values of the earlier positions; appended to.
    start : int, optional
        Position of the first new token; default ``cache.length``.
    base : float, default 10000

    Returns
    -------
    out : Tensor of shape (batch, n_heads, seq_new, d_v)
    """
    fn = "rotary_decode_step"
    check_instance(fn, "cache", cache, KVCache, "a KVCache")
    for name, x in (("q_new", q_new), ("k_new", k_new), ("v_new", v_new)):
        check_array(fn, name, x, only="torch")
        check_ndim(fn, name, x, ndim=4, doc="(batch, heads, seq_new, d)")
    seq_new = q_new.shape[2]
    if k_new.shape[2] != seq_new or v_new.shape[2] != seq_new:
        raise ValueError(
            f"{fn}: q_new, k_new and v_new must have the same seq_new (axis 2), got shapes "
            f"{tuple(q_new.shape)}, {tuple(k_new.shape)}, {tuple(v_new.shape)}"
        )
    start = cache.length if start is None else check_int(fn, "start", start, minimum=0)
    positions = torch.arange(start, start + seq_new)  # (seq_new,)
    q_rot = apply_rotary(q_new, positions, base=base)  # (batch, n_heads, seq_new, d_k)
    k_rot = apply_rotary(k_new, positions, base=base)  # (batch, n_kv_heads, seq_new, d_k)
    k_all, v_all = cache.append(k_rot, v_new)  # (batch, n_kv_heads, seq_k, d_k / d_v)
    out, _ = grouped_attend(q_rot, k_all, v_all, causal=True, align="bottom_right")
    return out  # (batch, n_heads, seq_new, d_v)
