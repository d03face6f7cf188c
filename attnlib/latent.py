"""Compressed keys: multi-head latent attention (DeepSeek-V2, lesson 14).

Each token is compressed to one small latent vector ``c = W_dkv x`` of ``d_latent``
numbers; every head rebuilds its key and value from it, ``k_h = W_uk_h c`` and
``v_h = W_uv_h c``. Only ``c`` is cached: ``d_latent`` numbers per token and layer instead of
``2 · n_heads · d_head``.

The keys never need to be rebuilt. A score is ``q_h · (W_uk_h c) = (W_uk_hᵀ q_h) · c``: move
the up-projection onto the query ("absorb" it) and compare the query with the latents
directly. Likewise the value side: ``Σ_j w_j W_uv_h c_j = W_uv_h (Σ_j w_j c_j)`` — weight the
latents, then up-project once.

Rotary positions break the first trick: with keys rotated by their position,
``(R_i q) · (R_j W_uk c_j) = q · (R_{j-i} W_uk c_j)``, and the matrix between ``q`` and
``c_j`` now depends on the key's position — there is no single absorbed query. DeepSeek-V2
therefore keeps the content key position-free and adds a small *decoupled* rotary key
``k_rope = RoPE(W_kr x)`` of ``d_rope`` numbers, one shared by all heads and cached beside
the latent; each head has a rotary query ``q_rope_h = RoPE(W_qr_h x)``. The score is the
sum of the two dot products.

* :func:`absorbed_scores` — scores over the latents, never building the keys;
* :class:`LatentCache` — the cache: the latent and the rotary key of each position;
* :class:`LatentAttention` — the layer, with a decompress path and an absorbed path
  (proven equal in fp64 by ``tests/test_latent.py``).

Simplified from DeepSeek-V2: no compression of the queries, no normalisation of the latent.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlib import _backend as B
from attnlib._validate import (
    as_float_array,
    check_cache_step,
    check_int,
    check_layer_input,
    check_ndim,
    check_number,
    same_kind_and_dtype,
    validated,
)
from attnlib.core import attend, softmax
from attnlib.heads import merge_heads, split_heads
from attnlib.masks import causal_mask
from attnlib.positions import apply_rotary

__all__ = ["absorbed_scores", "LatentCache", "LatentAttention"]


def _check_absorbed_scores(q, c, W_uk, *, q_rope=None, k_rope=None, scale=None) -> None:
    fn = "absorbed_scores"
    _check_absorbed(fn, q, c, W_uk, q_rope, k_rope)
    check_number(fn, "scale", scale, none_ok=True)


def _check_absorbed(fn, q, c, W_uk, q_rope, k_rope):
    named = {"q": q, "c": c, "W_uk": W_uk}
    for name, x in named.items():
        as_float_array(fn, name, x)
    check_ndim(fn, "q", q, ndim=4, doc="(batch, n_heads, seq_q, d_head)")
    check_ndim(fn, "c", c, ndim=3, doc="(batch, seq_k, d_latent)")
    check_ndim(fn, "W_uk", W_uk, ndim=3, doc="(n_heads, d_head, d_latent)")
    if (q_rope is None) != (k_rope is None):
        raise ValueError(f"{fn}: give both q_rope and k_rope, or neither")
    if q_rope is not None:
        named.update(q_rope=as_float_array(fn, "q_rope", q_rope))
        named.update(k_rope=as_float_array(fn, "k_rope", k_rope))
        check_ndim(fn, "q_rope", q_rope, ndim=4, doc="(batch, n_heads, seq_q, d_rope)")
        check_ndim(fn, "k_rope", k_rope, ndim=3, doc="(batch, seq_k, d_rope)")
    same_kind_and_dtype(fn, named)
    batch, n_heads, seq_q, d_head = q.shape
    seq_k, d_latent = c.shape[1], c.shape[2]
    want = {"c": (batch, seq_k, d_latent), "W_uk": (n_heads, d_head, d_latent)}
    if q_rope is not None:
        d_rope = q_rope.shape[-1]
        want.update(q_rope=(batch, n_heads, seq_q, d_rope), k_rope=(batch, seq_k, d_rope))
    for name, shape in want.items():
        if tuple(named[name].shape) != shape:
            raise ValueError(
                f"{fn}: {B.describe(name, named[name])} should have shape {shape} for "
                f"q of shape {tuple(q.shape)} (batch, n_heads, seq_q, d_head) and c of shape "
                f"{tuple(c.shape)} (batch, seq_k, d_latent)"
            )


@validated(_check_absorbed_scores)
def absorbed_scores(q, c, W_uk, *, q_rope=None, k_rope=None, scale=None):
    """Attention scores over the latents: ``((W_uk_hᵀ q_h) · c_j + q_rope_h · k_rope_j) · scale``.

    Equal to ``q_h · k_h,j`` with the decompressed key ``k_h,j = W_uk_h c_j`` (plus the
    rotary part), but the keys (batch, n_heads, seq_k, d_head) are never built: each query
    is multiplied once by its head's up-projection, then compared with every latent.

    Parameters
    ----------
    q : ndarray or Tensor of shape (batch, n_heads, seq_q, d_head)
        Content queries (no position in them).
    c : ndarray or Tensor of shape (batch, seq_k, d_latent)
        The cached latents, one per key position, shared by all heads.
    W_uk : ndarray or Tensor of shape (n_heads, d_head, d_latent)
        Key up-projection of each head: the key of head h is ``W_uk[h] @ c_j``.
    q_rope : ndarray or Tensor of shape (batch, n_heads, seq_q, d_rope), optional
        Rotary queries, already rotated by their positions.
    k_rope : ndarray or Tensor of shape (batch, seq_k, d_rope), optional
        The decoupled rotary key of each position (one for all heads), already rotated.
    scale : float, optional
        Default ``1 / sqrt(d_head + d_rope)``.

    Returns
    -------
    scores : same kind and dtype as q, shape (batch, n_heads, seq_q, seq_k)
        Pre-softmax.

    See Also
    --------
    LatentAttention : the layer that uses these scores (``absorbed=True``).
    attnlib.scores : the same scores from rebuilt keys.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> q = torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64)  # (b, n_heads, seq_q, d_head)
    >>> c = torch.randn(1, 5, 6, generator=g, dtype=torch.float64)        # (batch, seq_k, d_latent)
    >>> W_uk = torch.randn(2, 4, 6, generator=g, dtype=torch.float64)  # (n_heads, d_head, d_latent)
    >>> keys = (W_uk[None, :, None] @ c[:, None, :, :, None])[..., 0]  # (b, n_heads, seq_k, d_head)
    >>> torch.allclose(absorbed_scores(q, c, W_uk), q @ keys.transpose(-2, -1) / 2)
    True
    """
    d_rope = 0 if q_rope is None else q_rope.shape[-1]
    scale = 1.0 / math.sqrt(q.shape[-1] + d_rope) if scale is None else float(scale)
    ops = B.ops_for(q)
    q_latent = q @ W_uk  # (batch, n_heads, seq_q, d_latent): the absorbed queries
    s = q_latent @ ops.transpose_last(c[:, None])  # (batch, n_heads, seq_q, seq_k)
    if q_rope is not None:
        s = s + q_rope @ ops.transpose_last(k_rope[:, None])  # (batch, n_heads, seq_q, seq_k)
    return s * scale


class LatentCache:
    """What multi-head latent attention caches: the latent and the rotary key per position.

    Grows like :class:`attnlib.kv_cache.KVCache` (storage for ``max_len`` positions,
    doubled when outgrown).

    Parameters
    ----------
    batch, d_latent : int
    d_rope : int, default 0
        Width of the decoupled rotary key (0: none).
    max_len : int, default 64
    dtype : torch.dtype, default torch.float32

    See Also
    --------
    attnlib.kv_cache.KVCache : the per-head cache it replaces.
    LatentAttention.new_cache : makes one for a layer.

    Examples
    --------
    >>> cache = LatentCache(batch=1, d_latent=4, d_rope=2)
    >>> c_all, r_all = cache.append(torch.zeros(1, 3, 4), torch.zeros(1, 3, 2))
    >>> len(cache), tuple(c_all.shape)
    (3, (1, 3, 4))
    """

    def _check_init(self, batch, d_latent, d_rope=0, *, max_len=64, dtype=torch.float32):
        fn = "LatentCache"
        check_int(fn, "batch", batch, minimum=1)
        check_int(fn, "d_latent", d_latent, minimum=1)
        check_int(fn, "d_rope", d_rope, minimum=0)
        check_int(fn, "max_len", max_len, minimum=1)

    @validated(_check_init)
    def __init__(
        self,
        batch: int,
        d_latent: int,
        d_rope: int = 0,
        *,
        max_len: int = 64,
        dtype: torch.dtype = torch.float32,
    ):
        self.batch, self.d_latent, self.d_rope = int(batch), int(d_latent), int(d_rope)
        self.dtype = dtype
        self._c = torch.empty(batch, max_len, d_latent, dtype=dtype)
        self._k_rope = torch.empty(batch, max_len, d_rope, dtype=dtype)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self._c.shape[1]

    def _check_append(self, c, k_rope) -> None:
        rows = (("batch", self.batch), ("seq_new", None))
        entries = (
            ("c", c, (*rows, ("d_latent", self.d_latent))),
            ("k_rope", k_rope, (*rows, ("d_rope", self.d_rope))),
        )
        check_cache_step("LatentCache.append", entries, dtype=self.dtype, seq_axis=1)

    @validated(_check_append)
    def append(self, c: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store new positions; return everything cached.

        Parameters
        ----------
        c : Tensor of shape (batch, seq_new, d_latent)
        k_rope : Tensor of shape (batch, seq_new, d_rope)
            Already rotated by the positions of the new tokens.

        Returns
        -------
        c_all : Tensor of shape (batch, length, d_latent)
        k_rope_all : Tensor of shape (batch, length, d_rope)
        """
        end = self.length + c.shape[1]  # c: (batch, seq_new, d_latent)
        if end > self.capacity:  # grow: double, or more if needed
            new_cap = max(end, 2 * self.capacity)
            c_new = torch.empty(self.batch, new_cap, self.d_latent, dtype=self.dtype)
            r_new = torch.empty(self.batch, new_cap, self.d_rope, dtype=self.dtype)
            c_new[:, : self.length] = self._c[:, : self.length]
            r_new[:, : self.length] = self._k_rope[:, : self.length]
            self._c, self._k_rope = c_new, r_new
        self._c[:, self.length : end] = c.detach()
        self._k_rope[:, self.length : end] = k_rope.detach()
        self.length = end
        return self.read()

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Latents (batch, length, d_latent) and rotary keys (batch, length, d_rope)."""
        return self._c[:, : self.length], self._k_rope[:, : self.length]

    def __len__(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes of storage held (latents and rotary keys, allocated capacity)."""
        return self._c.untyped_storage().nbytes() + self._k_rope.untyped_storage().nbytes()

    def __repr__(self) -> str:
        return (
            f"LatentCache(batch={self.batch}, d_latent={self.d_latent}, d_rope={self.d_rope}, "
            f"length={self.length}, capacity={self.capacity})"
        )


class LatentAttention(nn.Module):
    """Causal multi-head latent attention with an optional decoupled rotary key.

    Parameters
    ----------
    d_model, n_heads : int
    d_latent : int
        Width of the cached latent.
    d_head : int, optional
        Width of each head's content query, key and value; default ``d_model // n_heads``.
    d_rope : int, default 0
        Width of the rotary query (per head) and rotary key (shared); even; 0 for none.
    base : float, default 10000
        Rotary base, as in :func:`attnlib.positions.apply_rotary`.

    Attributes
    ----------
    W_q : nn.Linear, d_model -> n_heads·d_head
    W_dkv : nn.Linear, d_model -> d_latent (down-projection)
    W_uk, W_uv : nn.Linear, d_latent -> n_heads·d_head (up-projections)
    W_o : nn.Linear, n_heads·d_head -> d_model
    W_qr : nn.Linear, d_model -> n_heads·d_rope, or None
    W_kr : nn.Linear, d_model -> d_rope, or None

    See Also
    --------
    absorbed_scores : the absorbed path's scores.
    attnlib.decoder.TinyDecoder : ``d_latent=`` builds a model of these layers.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> layer = LatentAttention(d_model=16, n_heads=4, d_latent=6, d_rope=2).double()
    >>> x = torch.randn(1, 5, 16, dtype=torch.float64)
    >>> a, _ = layer(x)
    >>> b, _ = layer(x, absorbed=True)
    >>> torch.allclose(a, b)                               # two paths, one result
    True
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_latent: int,
        *,
        d_head: int | None = None,
        d_rope: int = 0,
        base: float = 10000.0,
    ):
        super().__init__()
        fn = "LatentAttention"
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        n_heads = check_int(fn, "n_heads", n_heads, minimum=1)
        d_latent = check_int(fn, "d_latent", d_latent, minimum=1)
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(f"{fn}: n_heads={n_heads} does not divide d_model={d_model}")
            d_head = d_model // n_heads
        d_head = check_int(fn, "d_head", d_head, minimum=1)
        d_rope = check_int(fn, "d_rope", d_rope, minimum=0)
        if d_rope % 2:
            raise ValueError(f"{fn}: d_rope must be even (rotated in pairs), got {d_rope}")
        self.n_heads, self.d_head, self.d_latent, self.d_rope = n_heads, d_head, d_latent, d_rope
        self.base = check_number(fn, "base", base, positive=True)
        self.W_q = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.W_dkv = nn.Linear(d_model, d_latent, bias=False)
        self.W_uk = nn.Linear(d_latent, n_heads * d_head, bias=False)
        self.W_uv = nn.Linear(d_latent, n_heads * d_head, bias=False)
        self.W_o = nn.Linear(n_heads * d_head, d_model, bias=False)
        self.W_qr = nn.Linear(d_model, n_heads * d_rope, bias=False) if d_rope else None
        self.W_kr = nn.Linear(d_model, d_rope, bias=False) if d_rope else None

    def up_key_weight(self) -> torch.Tensor:
        """``W_uk`` split by head: Tensor of shape (n_heads, d_head, d_latent)."""
        return self.W_uk.weight.view(self.n_heads, self.d_head, self.d_latent)

    def up_value_weight(self) -> torch.Tensor:
        """``W_uv`` split by head: Tensor of shape (n_heads, d_head, d_latent)."""
        return self.W_uv.weight.view(self.n_heads, self.d_head, self.d_latent)

    def compress(self, x: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """What is cached for x: the latents (batch, seq, d_latent) and the rotary keys
        (batch, seq, d_rope), rotated at positions ``start .. start + seq - 1``."""
        c = self.W_dkv(x)  # (batch, seq, d_latent)
        if not self.d_rope:
            return c, x.new_zeros(x.shape[0], x.shape[1], 0)
        positions = torch.arange(start, start + x.shape[1])  # (seq,)
        k_rope = apply_rotary(self.W_kr(x), positions, base=self.base)  # (batch, seq, d_rope)
        return c, k_rope

    def decompress(self, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head content keys and values from the latents c (batch, seq, d_latent):
        two Tensors of shape (batch, n_heads, seq, d_head)."""
        k = split_heads(self.W_uk(c), self.n_heads)  # (batch, n_heads, seq, d_head)
        v = split_heads(self.W_uv(c), self.n_heads)  # (batch, n_heads, seq, d_head)
        return k, v

    def queries(self, x: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Content queries (batch, n_heads, seq, d_head) and rotary queries
        (batch, n_heads, seq, d_rope), rotated at positions ``start ..``."""
        q = split_heads(self.W_q(x), self.n_heads)  # (batch, n_heads, seq, d_head)
        if not self.d_rope:
            return q, q[..., :0]
        positions = torch.arange(start, start + x.shape[1])  # (seq,)
        q_rope = split_heads(self.W_qr(x), self.n_heads)  # (batch, n_heads, seq, d_rope)
        return q, apply_rotary(q_rope, positions, base=self.base)

    def new_cache(self, batch: int, max_len: int = 64) -> LatentCache:
        """An empty :class:`LatentCache` for this layer."""
        dtype = self.W_dkv.weight.dtype
        return LatentCache(batch, self.d_latent, self.d_rope, max_len=max_len, dtype=dtype)

    def _check_forward(self, x, cache=None, *, absorbed=False) -> None:
        fn = "LatentAttention"
        check_layer_input(fn, x, self.W_q.weight)
        dtype = self.W_q.weight.dtype
        if cache is not None and not isinstance(cache, LatentCache):
            raise TypeError(f"{fn}: cache must be a LatentCache or None, got {B.type_name(cache)}")
        if cache is not None:
            want = (x.shape[0], self.d_latent, self.d_rope, dtype)
            got = (cache.batch, cache.d_latent, cache.d_rope, cache.dtype)
            if got != want:
                raise ValueError(
                    f"{fn}: cache holds (batch, d_latent, d_rope, dtype) = {got}, this layer "
                    f"needs {want}; make it with new_cache"
                )

    @validated(_check_forward)
    def forward(self, x: torch.Tensor, cache: LatentCache | None = None, *, absorbed=False):
        """Causal latent attention over x (and, with a cache, every earlier position).

        1. Queries of the new positions; latents and rotary keys of the new positions
           (appended to ``cache`` if given: the new queries are the last of all positions).
        2. ``absorbed=False``: rebuild each head's keys and values from the latents and
           attend. ``absorbed=True``: score the latents directly
           (:func:`absorbed_scores`), weight the latents, up-project the result once.

        Parameters
        ----------
        x : Tensor of shape (batch, seq_new, d_model)
        cache : LatentCache, optional
        absorbed : bool, default False

        Returns
        -------
        out : Tensor of shape (batch, seq_new, d_model)
        weights : Tensor of shape (batch, n_heads, seq_new, seq_k)
        """
        start = 0 if cache is None else cache.length  # position of the first new token
        q, q_rope = self.queries(x, start)  # (batch, n_heads, seq_new, d_head / d_rope)
        c, k_rope = self.compress(x, start)  # (batch, seq_new, d_latent / d_rope)
        if cache is not None:
            c, k_rope = cache.append(c, k_rope)  # (batch, seq_k, d_latent / d_rope)
        seq_new, seq_k = x.shape[1], c.shape[1]
        mask = causal_mask(seq_new, seq_k, align="bottom_right", like=x)  # (seq_new, seq_k)
        scale = 1.0 / math.sqrt(self.d_head + self.d_rope)
        if absorbed:
            rope = {"q_rope": q_rope, "k_rope": k_rope} if self.d_rope else {}
            s = absorbed_scores(q, c, self.up_key_weight(), scale=scale, **rope)
            w = softmax(s, mask=mask)  # (batch, n_heads, seq_new, seq_k)
            c_mix = w @ c[:, None]  # (batch, n_heads, seq_new, d_latent): weighted latents
            out = c_mix @ self.up_value_weight().transpose(-2, -1)  # (..., seq_new, d_head)
        else:
            k, v = self.decompress(c)  # (batch, n_heads, seq_k, d_head)
            if self.d_rope:
                k_r = k_rope[:, None].expand(-1, self.n_heads, -1, -1)  # (..., seq_k, d_rope)
                k = torch.cat([k, k_r], -1)  # (batch, n_heads, seq_k, d_head + d_rope)
                q = torch.cat([q, q_rope], -1)  # (batch, n_heads, seq_new, d_head + d_rope)
            out, w = attend(q, k, v, mask, scale=scale)  # (batch, n_heads, seq_new, d_head)
        return self.W_o(merge_heads(out)), w  # (batch, seq_new, d_model)
