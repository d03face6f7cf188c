"""Windowed keys: a sliding-window (band) mask and a rolling KV cache (lesson 14).

With sliding-window attention (Longformer; Mistral 7B; the local layers of Gemma 2 and 3)
a query sees only the last ``window`` keys: itself and the ``window - 1`` before it. The
mask is a band under the diagonal of the causal mask. Nothing older than the window is
ever read again, so a decoder keeps only ``window`` entries per layer: a ring buffer where
position ``p`` overwrites slot ``p % window`` (Mistral's "rolling buffer cache").

* :func:`sliding_window_mask` — the band, in the conventions of :func:`attnlib.causal_mask`;
* :class:`RollingKVCache` — the ring buffer; decoding with it gives exactly what full
  attention with the band mask gives (``tests/test_windows.py``).
"""

from __future__ import annotations

import numpy as np
import torch

from attnlib._validate import check_array, check_choice, check_int
from attnlib.masks import causal_offset

__all__ = ["sliding_window_mask", "RollingKVCache"]


def sliding_window_mask(
    seq_q: int, seq_k: int | None = None, *, window: int, align: str = "top_left", like=None
):
    """Which keys each query may see when it looks back at most ``window`` positions.

    Query i sits at position ``p = i + offset`` (offset 0 for ``"top_left"``,
    ``seq_k - seq_q`` for ``"bottom_right"``, as in :func:`attnlib.causal_mask`) and sees
    key j if ``0 <= p - j < window``: itself and the ``window - 1`` keys before it. The
    mask is causal; once the window reaches back to position 0 from the last query
    (``window >= seq_k`` for ``"bottom_right"`` or ``seq_q == seq_k``; ``window >= seq_q``
    for ``"top_left"``) it *is* :func:`attnlib.causal_mask`.

    Parameters
    ----------
    seq_q : int
        Number of query positions (rows).
    seq_k : int, optional
        Number of key positions (columns); default ``seq_q``.
    window : int
        How many positions a query sees, itself included (>= 1).
    align : {"top_left", "bottom_right"}, default "top_left"
        ``"bottom_right"`` when the queries are the newest ``seq_q`` of the ``seq_k``
        positions (decoding with a cache).
    like : ndarray or Tensor, optional
        Return a torch tensor (on ``like``'s device) if ``like`` is a tensor, else numpy.

    Returns
    -------
    mask : bool ndarray or Tensor of shape (seq_q, seq_k)
        True = may attend. Combine with a padding mask by ``&``.

    Examples
    --------
    >>> sliding_window_mask(4, window=2).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0],
           [0, 1, 1, 0],
           [0, 0, 1, 1]])
    """
    fn = "sliding_window_mask"
    seq_q = check_int(fn, "seq_q", seq_q, minimum=0)
    seq_k = seq_q if seq_k is None else check_int(fn, "seq_k", seq_k, minimum=0)
    window = check_int(fn, "window", window, minimum=1)
    check_choice(fn, "align", align, ("top_left", "bottom_right"))
    offset = causal_offset(seq_q, seq_k, align)
    if isinstance(like, torch.Tensor):
        q_pos = torch.arange(seq_q, device=like.device)[:, None] + offset  # (seq_q, 1)
        k_pos = torch.arange(seq_k, device=like.device)[None, :]  # (1, seq_k)
    else:
        q_pos = np.arange(seq_q)[:, None] + offset  # (seq_q, 1)
        k_pos = np.arange(seq_k)[None, :]  # (1, seq_k)
    back = q_pos - k_pos  # (seq_q, seq_k): how far back key j is from query i
    return (back >= 0) & (back < window)  # (seq_q, seq_k)


class RollingKVCache:
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
        fn = "RollingKVCache"
        self.batch = check_int(fn, "batch", batch, minimum=1)
        self.n_kv_heads = check_int(fn, "n_kv_heads", n_kv_heads, minimum=1)
        self.d_k = check_int(fn, "d_k", d_k, minimum=1)
        self.d_v = self.d_k if d_v is None else check_int(fn, "d_v", d_v, minimum=1)
        self.window = check_int(fn, "window", window, minimum=1)
        self.dtype = dtype
        self._k = torch.empty(batch, n_kv_heads, window, self.d_k, dtype=dtype)
        self._v = torch.empty(batch, n_kv_heads, window, self.d_v, dtype=dtype)
        self.length = 0  # positions seen so far = position of the next token

    @property
    def capacity(self) -> int:
        """Positions the storage holds: always ``window``."""
        return self.window

    @property
    def held(self) -> int:
        """Positions stored now: ``min(length, window)``."""
        return min(self.length, self.window)

    @property
    def positions(self) -> torch.Tensor:
        """Absolute positions held, oldest first, shape (held,)."""
        return torch.arange(self.length - self.held, self.length)

    def _check(self, name: str, x, d: int) -> None:
        fn = "RollingKVCache.append"
        check_array(fn, name, x, only="torch")
        want = (self.batch, self.n_kv_heads, "seq_new", d)
        if x.ndim != 4 or (x.shape[0], x.shape[1], x.shape[3]) != (want[0], want[1], want[3]):
            raise ValueError(
                f"{fn}: {name} has shape {tuple(x.shape)}, expected "
                f"(batch, n_kv_heads, seq_new, {'d_k' if name == 'k' else 'd_v'}) = {want}"
            )
        if x.dtype != self.dtype:
            raise TypeError(f"{fn}: {name} has dtype {x.dtype}, the cache holds {self.dtype}")

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
        self._check("k", k, self.d_k)
        self._check("v", v, self.d_v)
        seq_new = k.shape[2]
        if v.shape[2] != seq_new:
            raise ValueError(
                f"RollingKVCache.append: k has seq_new={seq_new} but v has seq_new={v.shape[2]}"
            )
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

    def __len__(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes of storage: keys and values at ``window`` positions, whatever the length."""
        return self._k.untyped_storage().nbytes() + self._v.untyped_storage().nbytes()

    def __repr__(self) -> str:
        return (
            f"RollingKVCache(batch={self.batch}, n_kv_heads={self.n_kv_heads}, d_k={self.d_k}, "
            f"d_v={self.d_v}, window={self.window}, length={self.length})"
        )
