"""Keys in decoding: a KV cache and grouped keys (lesson 10).

When a causal model generates one token at a time, the keys and values of past tokens never
change: token ``t`` cannot see later tokens, so its key and value depend only on tokens
``0..t``. Recomputing them at every step is wasted work. A :class:`KVCache` keeps them;
each step computes the key and value of the new token only, appends them, and lets the new
query attend to everything cached.

Sharing keys across heads shrinks the cache: with grouped-query attention (GQA) ``n_heads``
query heads share ``n_kv_heads`` key/value heads (``n_heads / n_kv_heads`` queries per
group); multi-query attention (MQA) is the case ``n_kv_heads = 1``; ordinary multi-head
attention (MHA) is ``n_kv_heads = n_heads``. :func:`grouped_attend` computes it with
:func:`attnlib.attend` by broadcasting, without copying keys. The small decoder that uses
all of this is :mod:`attnlib.decoder`.

* :class:`KVCache` — append, read, ``length``, ``nbytes`` (bytes actually held);
* :func:`kv_cache_bytes` — the memory formula, for every way of keeping fewer keys of
  lesson 14 as well; :data:`PUBLISHED_CONFIGS`, the numbers of published models;
* :func:`grouped_attend` — attention with fewer key/value heads than query heads;
* :class:`RollingKVCache` — a KVCache of the last ``window`` positions (lesson 14);
* :func:`rotary_decode_step` — one cached step of a rotary (RoPE) attention layer: the new
  tokens' positions start at the cache length, and keys are rotated *before* they are
  cached.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from attnlib._validate import (
    as_float_array,
    check_array,
    check_choice,
    check_instance,
    check_int,
    check_kv_step,
    check_mask,
    check_ndim,
    check_number,
    same_kind_and_dtype,
    validated,
)
from attnlib.core import attend
from attnlib.masks import ALIGNS, causal_mask
from attnlib.positions import apply_rotary

__all__ = [
    "KVCache",
    "kv_cache_bytes",
    "PublishedConfig",
    "PUBLISHED_CONFIGS",
    "grouped_attend",
    "RollingKVCache",
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

    See Also
    --------
    RollingKVCache : keeps only the last ``window`` positions.
    kv_cache_bytes : the memory such caches hold, by formula.
    attnlib.decoder.TinyDecoder.new_caches : one cache per layer of a model.

    Examples
    --------
    >>> cache = KVCache(batch=1, n_kv_heads=2, d_k=4, max_len=8)
    >>> k, v = cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    >>> k.shape, cache.length
    (torch.Size([1, 2, 3, 4]), 3)
    """

    _append_name = "KVCache.append"  # how errors name append

    def _check_init(self, batch, n_kv_heads, d_k, d_v=None, *, max_len=64, dtype=torch.float32):
        fn = type(self).__name__
        for name, n in (("batch", batch), ("n_kv_heads", n_kv_heads), ("d_k", d_k)):
            check_int(fn, name, n, minimum=1)
        if d_v is not None:
            check_int(fn, "d_v", d_v, minimum=1)
        check_int(fn, "max_len", max_len, minimum=1)
        check_instance(fn, "dtype", dtype, torch.dtype, "a torch.dtype")

    @validated(_check_init)
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
        self.batch, self.n_kv_heads, self.d_k = int(batch), int(n_kv_heads), int(d_k)
        self.d_v = self.d_k if d_v is None else int(d_v)
        self.dtype = dtype
        self._k = torch.empty(batch, n_kv_heads, max_len, self.d_k, dtype=dtype)
        self._v = torch.empty(batch, n_kv_heads, max_len, self.d_v, dtype=dtype)
        self.length = 0

    @property
    def capacity(self) -> int:
        """Positions the storage can hold before it grows."""
        return self._k.shape[2]

    def _check_append(self, k, v) -> None:
        check_kv_step(self._append_name, self, k, v)

    @validated(_check_append)
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
        end = self.length + k.shape[2]  # k: (batch, n_kv_heads, seq_new, d_k)
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

    See Also
    --------
    KVCache : keeps every position.
    attnlib.windows.sliding_window_mask : the mask a rolling cache is enough for.

    Examples
    --------
    >>> cache = RollingKVCache(1, 1, 2, window=3)
    >>> for _ in range(5):
    ...     k, v = cache.append(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    >>> cache.length, cache.positions.tolist(), k.shape[2]
    (5, [2, 3, 4], 3)
    """

    _append_name = "RollingKVCache.append"

    def _check_rolling_init(self, batch, n_kv_heads, d_k, d_v=None, *, window, dtype=torch.float32):
        check_int("RollingKVCache", "window", window, minimum=1)
        self._check_init(batch, n_kv_heads, d_k, d_v, max_len=window, dtype=dtype)

    @validated(_check_rolling_init)
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
        self.window = int(window)
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

    @validated(KVCache._check_append)
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
        seq_new = k.shape[2]  # k: (batch, n_kv_heads, seq_new, d_k)
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
    index_dtype: torch.dtype | None = None,
    index_block: int | None = None,
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
    index_dtype : torch.dtype, optional
        Element type of the indexer key; default ``dtype``. DeepSeek-V3.2-Exp stores it in
        FP8 (``torch.float8_e4m3fn``, 1 byte a number).
    index_block : int, optional
        With a quantised indexer key: one float32 scale is stored per ``index_block``
        numbers (128 in DeepSeek-V3.2-Exp, so 128 + 4 = 132 bytes a token and layer).

    Returns
    -------
    nbytes : int

    See Also
    --------
    KVCache.nbytes : the bytes a cache actually holds.
    PUBLISHED_CONFIGS : the formula's arguments for published models.

    Examples
    --------
    >>> kv_cache_bytes(n_layers=32, batch=1, seq=4096, n_kv_heads=32, d_k=128, dtype=torch.bfloat16)
    2147483648
    >>> kv_cache_bytes(n_layers=32, batch=1, seq=4096, n_kv_heads=8, d_k=128, dtype=torch.bfloat16)
    536870912
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
    d_index = check_int(fn, "d_index", d_index, minimum=0)
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
    index_item = (
        itemsize if index_dtype is None else torch.empty((), dtype=index_dtype).element_size()
    )
    index_bytes = d_index * index_item  # the indexer key of one token and layer
    if index_block is not None:
        index_block = check_int(fn, "index_block", index_block, minimum=1)
        index_bytes += -(-d_index // index_block) * 4  # one float32 scale per block
    return batch * (itemsize * per_token + index_bytes) * positions


class PublishedConfig(NamedTuple):
    """What the cache formula needs from a published model (one row of
    :data:`PUBLISHED_CONFIGS`): the arguments of :func:`kv_cache_bytes` and where they
    come from.

    See Also
    --------
    kv_cache_bytes : the formula it fills in.

    Examples
    --------
    >>> PUBLISHED_CONFIGS["Llama 3 8B"].cache_bytes(1)  # bytes per token, bfloat16
    131072
    """

    n_layers: int
    context: int  # longest context in tokens
    n_kv_heads: int | None = None
    d_head: int | None = None
    window: int | None = None
    n_local_layers: int | None = None
    d_latent: int | None = None
    d_rope: int = 0
    d_index: int = 0
    index_dtype: torch.dtype | None = None  # storage of the indexer key (default: the cache's)
    index_block: int | None = None  # numbers per float32 scale of a quantised indexer key
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
            index_dtype=self.index_dtype,
            index_block=self.index_block,
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
        32,
        4096,
        n_kv_heads=32,
        d_head=128,
        source="Touvron et al. 2023: LLaMA Table 2, Llama 2 Table 1",
    ),
    # Llama Team 2024, The Llama 3 Herd of Models, Table 3: 32 layers, d_model 4096,
    # 32 heads, 8 key/value heads (that paper's models reach a 128K context);
    # 8192-token context in the first (April 2024) release's model card.
    "Llama 3 8B": PublishedConfig(
        32, 8192, n_kv_heads=8, d_head=128, source="Llama Team 2024, Table 3; model card"
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
    # whose key (index_head_dim 128 in config.json; 64 index heads) is cached per token and
    # layer; each query token then attends to its top 2048 keys (index_topk). (The release's
    # inference/model.py stores the indexer keys in FP8 (float8_e4m3fn) with one float32
    # scale per 128 numbers: 132 bytes a token and layer, counted so here.)
    "DeepSeek-V3.2-Exp": PublishedConfig(
        61,
        131072,
        d_latent=512,
        d_rope=64,
        d_index=128,
        index_dtype=torch.float8_e4m3fn,
        index_block=128,
        source="DeepSeek-AI 2025, DeepSeek-V3.2-Exp; config.json, inference/model.py",
    ),
}


# ----------------------------------------------------------------------------------------
# Grouped keys.
# ----------------------------------------------------------------------------------------


def _check_heads(fn: str, named: dict, seq_axis_name: str) -> None:
    """q, k, v (under the names given) as torch float tensors (batch, heads, seq, d) of one
    dtype: k and v with one head count dividing q's, one key row per value row, q and k of
    one width, one batch."""
    for name, x in named.items():
        check_array(fn, name, x, only="torch")
        check_ndim(fn, name, x, ndim=4, doc=f"(batch, heads, {seq_axis_name}, d)")
        as_float_array(fn, name, x)
    same_kind_and_dtype(fn, named)
    (q_name, q), (k_name, k), (v_name, v) = named.items()
    n_heads, n_kv_heads = q.shape[1], k.shape[1]
    if v.shape[1] != n_kv_heads or n_heads % n_kv_heads:
        raise ValueError(
            f"{fn}: {q_name} has n_heads={n_heads} (shape {tuple(q.shape)}), {k_name} has "
            f"n_kv_heads={n_kv_heads} (shape {tuple(k.shape)}), {v_name} has {v.shape[1]} "
            f"(shape {tuple(v.shape)}); {k_name} and {v_name} need the same number of heads, "
            f"and it must divide n_heads"
        )
    batches = {q.shape[0], k.shape[0], v.shape[0]}
    if len(batches) > 1:
        raise ValueError(
            f"{fn}: {q_name}, {k_name} and {v_name} must have one batch size (axis 0), got "
            f"shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"{fn}: {q_name} has d_k={q.shape[-1]} (shape {tuple(q.shape)}) but {k_name} has "
            f"d_k={k.shape[-1]} (shape {tuple(k.shape)}); every query is compared with every "
            f"key by a dot product, so their last dims must match"
        )


def _check_grouped_attend(q, k, v, mask=None, *, causal=False, align="top_left") -> None:
    fn = "grouped_attend"
    _check_heads(fn, {"q": q, "k": k, "v": v}, "seq")
    if k.shape[2] != v.shape[2]:
        raise ValueError(
            f"{fn}: k has seq_k={k.shape[2]} (shape {tuple(k.shape)}) but v has "
            f"seq_k={v.shape[2]} (shape {tuple(v.shape)}); every key needs its value"
        )
    target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    check_mask(fn, mask, q, target, "weights (batch, n_heads, seq_q, seq_k)")
    check_choice(fn, "align", align, ALIGNS)


@validated(_check_grouped_attend)
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

    See Also
    --------
    attnlib.attend : every query head with its own key head.
    torch.nn.functional.scaled_dot_product_attention : ``enable_gqa=True`` is the same
        grouping.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> q = torch.randn(1, 4, 3, 8, generator=g)           # 4 query heads
    >>> k, v = (torch.randn(1, 2, 3, 8, generator=g) for _ in range(2))  # 2 key heads
    >>> out, w = grouped_attend(q, k, v, causal=True)
    >>> from torch.nn.functional import scaled_dot_product_attention as sdpa
    >>> ref = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    >>> tuple(out.shape), torch.allclose(out, ref, atol=1e-6)
    ((1, 4, 3, 8), True)
    """
    batch, n_heads, seq_q, d_k = q.shape
    n_kv_heads = k.shape[1]
    group = n_heads // n_kv_heads
    seq_k = k.shape[2]
    target = (batch, n_heads, seq_q, seq_k)
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
# Positions with a cache: rotary embeddings.
# ----------------------------------------------------------------------------------------


def _check_rotary_decode_step(q_new, k_new, v_new, cache, *, start=None, base=10000.0) -> None:
    fn = "rotary_decode_step"
    check_instance(fn, "cache", cache, KVCache, "a KVCache")
    named = {"q_new": q_new, "k_new": k_new, "v_new": v_new}
    _check_heads(fn, named, "seq_new")
    seq_new = q_new.shape[2]
    if k_new.shape[2] != seq_new or v_new.shape[2] != seq_new:
        raise ValueError(
            f"{fn}: q_new, k_new and v_new must have the same seq_new (axis 2), got shapes "
            f"{tuple(q_new.shape)}, {tuple(k_new.shape)}, {tuple(v_new.shape)}"
        )
    if q_new.shape[-1] % 2:
        raise ValueError(
            f"{fn}: q_new and k_new have odd d_k={q_new.shape[-1]} (shapes "
            f"{tuple(q_new.shape)}, {tuple(k_new.shape)}); rotary pairs need an even d_k"
        )
    check_kv_step(fn, cache, k_new, v_new, names=("k_new", "v_new"))
    if start is not None:
        check_int(fn, "start", start, minimum=0)
    check_number(fn, "base", base, positive=True)


@validated(_check_rotary_decode_step)
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

    See Also
    --------
    attnlib.positions.apply_rotary : the rotation.
    grouped_attend : the attention of the new queries over the cache.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> q, k, v = (torch.randn(1, 2, 4, 8, generator=g) for _ in range(3))  # 4 tokens
    >>> cache = KVCache(1, 2, 8)
    >>> whole = rotary_decode_step(q, k, v, cache)          # all 4 at once: positions 0..3
    >>> cache = KVCache(1, 2, 8)
    >>> one = [(q[:, :, t, None], k[:, :, t, None], v[:, :, t, None]) for t in range(4)]
    >>> steps = [rotary_decode_step(*qkv, cache) for qkv in one]  # positions 0, 1, 2, 3
    >>> torch.allclose(whole, torch.cat(steps, dim=2), atol=1e-6)
    True
    """
    seq_new = q_new.shape[2]
    start = cache.length if start is None else start
    positions = torch.arange(start, start + seq_new)  # (seq_new,)
    q_rot = apply_rotary(q_new, positions, base=base)  # (batch, n_heads, seq_new, d_k)
    k_rot = apply_rotary(k_new, positions, base=base)  # (batch, n_kv_heads, seq_new, d_k)
    k_all, v_all = cache.append(k_rot, v_new)  # (batch, n_kv_heads, seq_k, d_k / d_v)
    out, _ = grouped_attend(q_rot, k_all, v_all, causal=True, align="bottom_right")
    return out  # (batch, n_heads, seq_new, d_v)
