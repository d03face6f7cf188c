"""A tiny causal decoder that decodes with a KV cache (lessons 10, 12 and 14).

* :class:`CausalSelfAttention` — causal self-attention with ``n_heads`` query heads and
  ``n_kv_heads`` key/value heads (:func:`attnlib.kv_cache.grouped_attend`), appending to a
  :class:`attnlib.kv_cache.KVCache` when decoding;
* :class:`TinyDecoder` — embedding + ``n_layers`` causal attention blocks; lesson 14 adds
  options for sliding windows (and global layers), cross-layer K/V sharing and latent
  attention;
* :func:`generate` — greedy decoding with or without the cache (the same tokens either way),
  or sampling: from ``softmax(logits / temperature)``, optionally over the ``top_k`` most
  likely tokens only (lesson 16), or the nucleus of mass ``top_p``, or the tokens at least
  ``min_p`` times as likely as the top one (lesson 17; the filters are
  :mod:`attnlib.sampling`), with a seeded ``torch.Generator``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from attnlib import _backend as B
from attnlib._validate import (
    check_array,
    check_decoder_input,
    check_head_counts,
    check_instance,
    check_int,
    check_layer_input,
    validated,
)
from attnlib.heads import merge_heads, split_heads
from attnlib.kv_cache import KVCache, RollingKVCache, grouped_attend, kv_cache_bytes
from attnlib.latent import LatentAttention, LatentCache
from attnlib.masks import causal_mask
from attnlib.sampling import check_filters, sample_token
from attnlib.windows import sliding_window_mask

__all__ = ["CausalSelfAttention", "TinyDecoder", "Generation", "generate"]


# ----------------------------------------------------------------------------------------
# A tiny causal decoder.
# ----------------------------------------------------------------------------------------


def _sdpa_causal(q, k, v, mask=None):
    """Causal attention of the last seq_q positions over seq_k keys, via torch's SDPA.

    The mask is attnlib's ``causal_mask(seq_q, seq_k, align="bottom_right")`` (the new
    queries are the last seq_q positions; with seq_q == seq_k it is SDPA's ``is_causal``).
    A boolean ``mask`` (seq_q, seq_k), already causal (the sliding-window band), replaces it.
    Both are True = may attend, the convention of SDPA's boolean ``attn_mask``.
    """
    if mask is None:
        mask = causal_mask(q.shape[2], k.shape[2], align="bottom_right", like=q)  # (seq_q, seq_k)
    gqa = q.shape[1] != k.shape[1]  # fewer key/value heads than query heads
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def _check_cache(fn: str, name: str, cache, batch: int, n_kv_heads: int, d_k: int, dtype) -> None:
    """``cache`` a :class:`KVCache` (or None) holding keys of this layer's shape and dtype."""
    if cache is None:
        return
    check_instance(fn, name, cache, KVCache, "a KVCache (or a RollingKVCache) or None")
    want = (batch, n_kv_heads, d_k, dtype)
    got = (cache.batch, cache.n_kv_heads, cache.d_k, cache.dtype)
    if got != want:
        raise ValueError(
            f"{fn}: {name} holds (batch, n_kv_heads, d_k, dtype) = {got}, this layer needs "
            f"{want}; make it with TinyDecoder.new_caches or KVCache(batch, n_kv_heads, d_k)"
        )


class CausalSelfAttention(nn.Module):
    """Causal self-attention with ``n_heads`` query heads and ``n_kv_heads`` key/value heads.

    Separate ``W_q`` (d_model → n_heads·d_head), ``W_k`` and ``W_v`` (d_model →
    n_kv_heads·d_head) and ``W_o``; ``d_head = d_model / n_heads``.

    Lesson 14 adds two options. ``window``: each query sees only the last ``window``
    positions (:func:`attnlib.windows.sliding_window_mask`), and a
    :class:`attnlib.kv_cache.RollingKVCache` is enough. ``own_kv=False``: the layer has no
    ``W_k``/``W_v`` (both None) and attends with the keys and values of an earlier layer,
    passed as ``kv`` (cross-layer KV sharing).

    Parameters
    ----------
    d_model, n_heads : int
    n_kv_heads : int, optional
        Key/value heads; default ``n_heads``; must divide ``n_heads``.
    window : int, optional
        Sliding window: positions each query sees, itself included.
    own_kv : bool, default True
        False: no ``W_k``/``W_v``; :meth:`forward` takes another layer's ``kv``.

    Attributes
    ----------
    d_head : int
        ``d_model // n_heads``: the d_k and d_v of every head (``KVCache(d_k=d_head)``).
    use_sdpa : bool, default True
        Attend with torch's fused SDPA (True) or :func:`attnlib.kv_cache.grouped_attend`.

    See Also
    --------
    TinyDecoder : the model built from these layers.
    attnlib.kv_cache.grouped_attend : the attention with ``use_sdpa = False``.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> layer = CausalSelfAttention(d_model=16, n_heads=4, n_kv_heads=2)
    >>> x = torch.randn(1, 5, 16)                          # (batch, seq, d_model)
    >>> cache = KVCache(1, 2, d_k=layer.d_head)
    >>> steps = torch.cat([layer(x[:, t : t + 1], cache) for t in range(5)], dim=1)
    >>> torch.allclose(layer(x), steps, atol=1e-5)  # cached steps = the whole sequence
    True
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

    def _check_forward(self, x, cache=None, *, kv=None, return_kv=False) -> None:
        fn = "CausalSelfAttention"
        check_layer_input(fn, x, self.W_q.weight)
        dtype = self.W_q.weight.dtype
        if kv is None and self.W_k is None:
            raise ValueError(f"{fn}: this layer shares K/V (own_kv=False); pass kv")
        if kv is not None:
            want = (x.shape[0], self.n_kv_heads, None, self.d_head)
            pair = tuple(kv) if isinstance(kv, (tuple, list)) else ()
            ok = len(pair) == 2 and all(
                isinstance(t, torch.Tensor)
                and t.ndim == 4
                and t.dtype == dtype
                and all(w is None or s == w for s, w in zip(t.shape, want, strict=True))
                for t in pair
            )
            if not ok or pair[0].shape[2] != pair[1].shape[2]:
                shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in pair]
                raise ValueError(
                    f"{fn}: kv must be a pair (k, v) of {dtype} tensors (batch, n_kv_heads, seq_k,"
                    f" d_head) = ({x.shape[0]}, {self.n_kv_heads}, seq_k, {self.d_head}), got "
                    f"{shapes}"
                )
        _check_cache(fn, "cache", cache, x.shape[0], self.n_kv_heads, self.d_head, dtype)

    @validated(_check_forward)
    def forward(self, x: torch.Tensor, cache=None, *, kv=None, return_kv: bool = False):
        """x : Tensor of shape (batch, seq_new, d_model) -> (batch, seq_new, d_model).

        Without a cache, x is the whole sequence. With one (a :class:`KVCache`, or a
        :class:`attnlib.kv_cache.RollingKVCache` for a windowed layer), x holds only the new
        positions; their keys and values are appended and the queries see all of them (or
        the last ``window``).

        ``kv``: the keys and values (batch, n_kv_heads, seq_k, d_head) of another layer for
        the same positions, used instead of this layer's own (no cache needed then).
        ``return_kv=True`` returns ``(out, (k, v))``, the keys and values attended to.
        """
        q = split_heads(self.W_q(x), self.n_heads)  # (batch, n_heads, seq_new, d_head)
        if kv is not None:
            k, v = kv  # another layer's: (batch, n_kv_heads, seq_k, d_head)
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
        layers cache only ``window`` positions (:class:`attnlib.kv_cache.RollingKVCache`).
    global_layers : sequence of int, default ()
        Layers that see every earlier position although ``window`` is set.
    d_latent : int, optional
        Multi-head latent attention (:class:`attnlib.latent.LatentAttention`) in every layer,
        caching ``d_latent + d_rope`` numbers per token; not combined with the other options.
    d_rope : int, default 0
        Decoupled rotary key of the latent layers.

    See Also
    --------
    generate : greedy or sampled decoding with this model.
    CausalSelfAttention : its attention layers.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> model = TinyDecoder(vocab_size=11, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2)
    >>> model(torch.tensor([[1, 2, 3]])).shape             # (batch, seq, vocab_size)
    torch.Size([1, 3, 11])
    >>> model.cache_bytes(100)  # 2 layers · 2 heads · (4 + 4) numbers · 4 bytes · 100
    12800
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
        :class:`attnlib.kv_cache.RollingKVCache` of ``window`` positions for windowed layers,
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
                caches.append(RollingKVCache(batch, self.n_kv_heads, d_k=self.d_head, **size))
            else:
                caches.append(
                    KVCache(batch, self.n_kv_heads, d_k=self.d_head, max_len=max_len, dtype=dtype)
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

    def _check_forward(self, tokens, caches=None) -> None:
        fn = "TinyDecoder"
        check_decoder_input(fn, tokens, caches, self.n_layers, self.max_len)
        dtype = self.tok.weight.dtype
        for i, (block, cache) in enumerate(zip(self.blocks, caches or (), strict=False)):
            name = f"caches[{i}]"
            if self.kv_share[i] != i:
                if cache is not None:
                    raise ValueError(
                        f"{fn}: {name} must be None: layer {i} reuses the K/V of "
                        f"layer {self.kv_share[i]} and caches nothing"
                    )
            elif isinstance(block.attn, LatentAttention):
                check_instance(fn, name, cache, LatentCache, "a LatentCache")
                want = (tokens.shape[0], block.attn.d_latent, block.attn.d_rope, dtype)
                got = (cache.batch, cache.d_latent, cache.d_rope, cache.dtype)
                if got != want:
                    raise ValueError(
                        f"{fn}: {name} holds (batch, d_latent, d_rope, dtype) = {got}, layer "
                        f"{i} needs {want}; make the caches with new_caches"
                    )
            else:
                if cache is None:
                    raise TypeError(f"{fn}: {name} is None but layer {i} has its own K/V")
                heads = (tokens.shape[0], self.n_kv_heads, self.d_head, dtype)
                _check_cache(fn, name, cache, *heads)

    @validated(_check_forward)
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
        start = 0 if caches is None else caches[0].length  # position of the first new token
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

    See Also
    --------
    generate : makes one.
    """

    tokens: torch.Tensor
    logits: torch.Tensor
    caches: list[KVCache] | None


def _check_generate(
    model,
    prompt,
    n_new,
    *,
    use_cache=True,
    temperature=None,
    top_k=None,
    top_p=None,
    min_p=None,
    generator=None,
) -> None:
    fn = "generate"
    if not (isinstance(model, nn.Module) and callable(getattr(model, "new_caches", None))):
        raise TypeError(
            f"{fn}: model must be a decoder module with new_caches() and a head (a "
            f"TinyDecoder), got {B.type_name(model)}"
        )
    check_array(fn, "prompt", prompt, only="torch")
    if prompt.ndim != 2 or prompt.shape[1] < 1 or prompt.dtype != torch.long:
        raise ValueError(
            f"{fn}: prompt must be a LongTensor (batch, prompt_len >= 1), got "
            f"{B.describe('prompt', prompt)}"
        )
    n_new = check_int(fn, "n_new", n_new, minimum=0)
    last = prompt.shape[1] + n_new - 2  # the position of the last token fed to the model
    max_len = getattr(model, "max_len", None)
    if n_new and max_len is not None and last >= max_len:
        raise ValueError(f"{fn}: position {last} exceeds max_len={max_len}")
    filters = dict(top_k=top_k, top_p=top_p, min_p=min_p)
    for name, value in filters.items():
        if value is not None and temperature is None:
            raise ValueError(
                f"{fn}: {name}={value!r} needs a temperature: {name} filters what is sampled, "
                f"and temperature=None decodes greedily (the top 1 always)"
            )
    vocab = getattr(getattr(model, "head", None), "out_features", None)
    check_filters(fn, temperature=temperature, vocab=vocab, **filters)
    if generator is not None:
        check_instance(fn, "generator", generator, torch.Generator, "a torch.Generator or None")


@validated(_check_generate)
@torch.no_grad()
def generate(
    model: TinyDecoder,
    prompt: torch.Tensor,
    n_new: int,
    *,
    use_cache: bool = True,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    generator: torch.Generator | None = None,
):
    """Append a next token ``n_new`` times: the most likely one (greedy), or a sampled one.

    Without the cache every step runs the model on the whole sequence so far and keeps
    only the last position's logits. With it, the prompt is processed once (filling the
    caches) and every later step feeds only the newest token.

    With a ``temperature``, each next token is drawn (``torch.multinomial``, one draw per
    row and step, from ``generator``) from ``softmax(logits / temperature)``: below 1 the
    likely tokens get likelier, above 1 the distribution flattens. ``top_k`` first sets
    every logit below the ``k``-th largest to -inf, so that only the ``k`` most likely
    tokens can be drawn (ties with the ``k``-th are kept, as in transformers'
    ``TopKLogitsWarper``); ``top_p`` then keeps the nucleus, the most likely tokens until
    their mass reaches ``top_p``; ``min_p`` then the tokens at least ``min_p`` times as
    likely as the top one (:func:`attnlib.sampling.filter_logits`, Hugging Face's order).
    The same ``generator`` seed gives the same tokens with the cache or without (up to
    float rounding in the logits). Drawn as ``GPT2LMHeadModel.generate(do_sample=True)``
    draws (softmax, then ``torch.multinomial``): seeded alike, the two give the same tokens
    on the same weights (tests/test_sampling.py), unless two tokens' draws tie within the
    float rounding of their probabilities.

    Parameters
    ----------
    model : TinyDecoder
        Or any decoder module with ``new_caches(batch, max_len)``, ``head`` and
        ``forward(tokens, caches=None)`` (lesson 14's recall models).
    prompt : int Tensor of shape (batch, prompt_len), prompt_len >= 1
    n_new : int
    use_cache : bool, default True
    temperature : float, optional
        > 0. None (the default): greedy decoding.
    top_k : int, optional
        1 <= top_k <= vocab_size; only with a ``temperature``. ``top_k=1`` is greedy.
    top_p : float, optional
        0 < top_p <= 1; only with a ``temperature``.
    min_p : float, optional
        0 <= min_p <= 1; only with a ``temperature``.
    generator : torch.Generator, optional
        Where the samples are drawn from (seed it for the same tokens every run); default
        torch's global generator. Not used by greedy decoding.

    Returns
    -------
    Generation
        ``tokens`` (batch, prompt_len + n_new), ``logits`` (batch, n_new, vocab_size): the
        model's raw logits at each step (before temperature and the filters), ``caches`` (None
        without the cache).

    See Also
    --------
    TinyDecoder : the model it decodes with.
    attnlib.kv_cache.KVCache : what ``use_cache=True`` keeps.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> model = TinyDecoder(vocab_size=11, d_model=16, n_heads=4, n_layers=1)
    >>> prompt = torch.tensor([[1, 2, 3]])
    >>> fast, slow = generate(model, prompt, 4), generate(model, prompt, 4, use_cache=False)
    >>> fast.tokens.shape, torch.equal(fast.tokens, slow.tokens)
    (torch.Size([1, 7]), True)
    >>> seeded = dict(temperature=0.8, top_p=0.9, generator=torch.Generator().manual_seed(0))
    >>> a = generate(model, prompt, 4, **seeded)
    >>> seeded["generator"] = torch.Generator().manual_seed(0)
    >>> torch.equal(a.tokens, generate(model, prompt, 4, **seeded).tokens)  # same seed
    True
    """
    batch, prompt_len = prompt.shape
    total = prompt_len + n_new
    filters = dict(top_k=top_k, top_p=top_p, min_p=min_p)
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
        if temperature is None:
            nxt = logits.argmax(dim=-1)  # (batch,): greedy
        else:  # (batch,): one draw per row
            nxt = sample_token(logits, temperature=temperature, generator=generator, **filters)
        tokens[:, t] = nxt
        all_logits.append(logits)
        feed = nxt[:, None]  # (batch, 1): only the new token next time
    vocab = model.head.out_features
    logits = torch.stack(all_logits, 1) if all_logits else torch.empty(batch, 0, vocab)
    return Generation(tokens, logits, caches)
