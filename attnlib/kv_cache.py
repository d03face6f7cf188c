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
* :func:`kv_cache_bytes` — the memory formula;
* :func:`grouped_attend` — attention with fewer key/value heads than query heads;
* :class:`TinyDecoder` — embedding + ``n_layers`` causal attention blocks;
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

from attnlib._validate import check_array, check_instance, check_int, check_mask, check_ndim
from attnlib.core import attend
from attnlib.heads import merge_heads, split_heads
from attnlib.masks import causal_mask
from attnlib.positions import apply_rotary

__all__ = [
    "KVCache",
    "kv_cache_bytes",
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
        fn = "KVCache"
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

    def _check(self, name: str, x: torch.Tensor, d: int) -> None:
        want = (self.batch, self.n_kv_heads, "seq_new", d)
        check_array("KVCache.append", name, x, only="torch")
        if x.ndim != 4 or (x.shape[0], x.shape[1], x.shape[3]) != (want[0], want[1], want[3]):
            raise ValueError(
                f"KVCache.append: {name} has shape {tuple(x.shape)}, expected "
                f"(batch, n_kv_heads, seq_new, {'d_k' if name == 'k' else 'd_v'}) = {want}"
            )
        if x.dtype != self.dtype:
            raise TypeError(
                f"KVCache.append: {name} has dtype {x.dtype}, the cache holds {self.dtype}"
            )

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
        self._check("k", k, self.d_k)
        self._check("v", v, self.d_v)
        if k.shape[2] != v.shape[2]:
            raise ValueError(
                f"KVCache.append: k has seq_new={k.shape[2]} but v has seq_new={v.shape[2]}"
            )
        end = self.length + k.shape[2]
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


def kv_cache_bytes(
    *,
    n_layers: int,
    batch: int,
    n_kv_heads: int,
    seq: int,
    d_k: int,
    d_v: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> int:
    """Memory of a KV cache: ``n_layers · batch · n_kv_heads · seq · (d_k + d_v) · bytes``.

    It grows linearly with every factor, and with the number of key/value heads — not of
    query heads, which is why sharing keys (GQA, MQA) shrinks it.
    """
    fn = "kv_cache_bytes"
    sizes = {"n_layers": n_layers, "batch": batch, "n_kv_heads": n_kv_heads, "seq": seq}
    sizes.update(d_k=d_k, d_v=d_k if d_v is None else d_v)
    n_layers, batch, n_kv_heads, seq, d_k, d_v = (
        check_int(fn, name, value, minimum=0) for name, value in sizes.items()
    )
    itemsize = torch.empty((), dtype=dtype).element_size()
    return n_layers * batch * n_kv_heads * seq * (d_k + d_v) * itemsize


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


def _sdpa_causal(q, k, v):
    """Causal attention of the last seq_q positions over seq_k keys, via torch's SDPA.

    torch's lower-right causal bias is ``causal_mask(seq_q, seq_k, align="bottom_right")``
    (with seq_q == seq_k, SDPA's ordinary ``is_causal``).
    """
    bias = causal_lower_right(q.shape[2], k.shape[2])  # (seq_q, seq_k)
    gqa = q.shape[1] != k.shape[1]  # fewer key/value heads than query heads
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)


class CausalSelfAttention(nn.Module):
    """Causal self-attention with ``n_heads`` query heads and ``n_kv_heads`` key/value heads.

    Separate ``W_q`` (d_model → n_heads·d_head), ``W_k`` and ``W_v`` (d_model →
    n_kv_heads·d_head) and ``W_o``; ``d_head = d_model / n_heads``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None):
        super().__init__()
        fn = "CausalSelfAttention"
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        n_heads = check_int(fn, "n_heads", n_heads, minimum=1)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        n_kv_heads = check_int(fn, "n_kv_heads", n_kv_heads, minimum=1)
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(
                f"CausalSelfAttention: need n_heads | d_model and n_kv_heads | n_heads, got "
                f"d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv_heads}"
            )
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.W_q = nn.Linear(d_model, n_heads * self.d_head, bias=False)
        self.W_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.W_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.W_o = nn.Linear(n_heads * self.d_head, d_model, bias=False)
        # True: torch's fused kernel (fast); False: attnlib's grouped_attend (same numbers,
        # proven equal in tests/test_kv_cache.py, and returns the weights).
        self.use_sdpa = True

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """x : Tensor of shape (batch, seq_new, d_model) -> (batch, seq_new, d_model).

        Without a cache, x is the whole sequence. With one, x holds only the new
        positions; their keys and values are appended and the queries see all of them.
        """
        q = split_heads(self.W_q(x), self.n_heads)  # (batch, n_heads, seq_new, d_head)
        k = split_heads(self.W_k(x), self.n_kv_heads)  # (batch, n_kv_heads, seq_new, d_head)
        v = split_heads(self.W_v(x), self.n_kv_heads)  # (batch, n_kv_heads, seq_new, d_head)
        if cache is not None:
            k, v = cache.append(k, v)  # (batch, n_kv_heads, seq_k, d_head), all positions so far
        # The new queries are the last seq_new of the seq_k positions: bottom-right causal.
        if self.use_sdpa:
            out = _sdpa_causal(q, k, v)  # (batch, n_heads, seq_new, d_head)
        else:
            # (batch, n_heads, seq_new, d_head)
            out, _ = grouped_attend(q, k, v, causal=True, align="bottom_right")
        out = merge_heads(out)  # (batch, seq_new, n_heads * d_head)
        return self.W_o(out)  # (batch, seq_new, d_model)


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, n_kv_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x, cache=None):
        x = x + self.attn(self.norm1(x), cache)
        return x + self.mlp(self.norm2(x))


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
    """

    def __init__(
        self,
        vocab_size: int = 64,
        d_model: int = 64,
        n_heads: int = 4,
        n_kv_heads: int | None = None,
        n_layers: int = 2,
        max_len: int = 2048,
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
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, n_kv_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def new_caches(self, batch: int, max_len: int) -> list[KVCache]:
        """One empty :class:`KVCache` per layer, sized for ``max_len`` positions."""
        dtype = self.tok.weight.dtype
        return [
            KVCache(batch, self.n_kv_heads, self.d_head, max_len=max_len, dtype=dtype)
            for _ in range(self.n_layers)
        ]

    def forward(self, tokens: torch.Tensor, caches: list[KVCache] | None = None):
        """Logits for every given position.

        Parameters
        ----------
        tokens : int Tensor of shape (batch, seq_new)
            The whole sequence (no cache), or only the new tokens (with caches, which
            then hold the earlier positions).
        caches : list of KVCache, one per layer, optional

        Returns
        -------
        logits : Tensor of shape (batch, seq_new, vocab_size)
        """
        if tokens.ndim != 2:
            raise ValueError(
                f"TinyDecoder: tokens must have shape (batch, seq), got {tuple(tokens.shape)}"
            )
        if caches is not None and len(caches) != self.n_layers:
            raise ValueError(f"TinyDecoder: {len(caches)} caches for {self.n_layers} layers")
        start = 0 if caches is None else caches[0].length  # position of the first new token
        seq_new = tokens.shape[1]
        if start + seq_new > self.max_len:
            raise ValueError(
                f"TinyDecoder: position {start + seq_new - 1} exceeds max_len={self.max_len}"
            )
        pos = torch.arange(start, start + seq_new)  # (seq_new,)
        x = self.tok(tokens) + self.pos(pos)  # (batch, seq_new, d_model)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.head(self.norm(x))  # (batch, seq_new, vocab_size)


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
