"""Windowed keys: a sliding-window (band) mask and a rolling KV cache (lesson 14).

With sliding-window attention (Longformer; Mistral 7B; the local layers of Gemma 2 and 3)
a query sees only the last ``window`` keys: itself and the ``window - 1`` before it. The
mask is a band under the diagonal of the causal mask. Nothing older than the window is
ever read again, so a decoder keeps only ``window`` entries per layer: a ring buffer where
position ``p`` overwrites slot ``p % window`` (Mistral's "rolling buffer cache").

* :func:`sliding_window_mask` — the band, in the conventions of :func:`attnlib.causal_mask`;
* the ring buffer itself is :class:`attnlib.kv_cache.RollingKVCache`, a :class:`KVCache`
  that keeps ``window`` entries; decoding with it gives exactly what full attention with
  the band mask gives (``tests/test_windows.py``).
"""

from __future__ import annotations

import numpy as np
import torch

from attnlib._validate import check_choice, check_int, validated
from attnlib.masks import ALIGNS, causal_offset

__all__ = ["sliding_window_mask"]


def _check_sliding_window_mask(seq_q, seq_k=None, *, window, align="top_left", like=None):
    fn = "sliding_window_mask"
    check_int(fn, "seq_q", seq_q, minimum=0)
    if seq_k is not None:
        check_int(fn, "seq_k", seq_k, minimum=0)
    check_int(fn, "window", window, minimum=1)
    check_choice(fn, "align", align, ALIGNS)


@validated(_check_sliding_window_mask)
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
    seq_q, seq_k, align, like
        As in :func:`attnlib.causal_mask`: ``align="bottom_right"`` when the queries are
        the newest ``seq_q`` of the ``seq_k`` positions (decoding with a cache).
    window : int
        How many positions a query sees, itself included (>= 1).

    Returns
    -------
    mask : bool ndarray or Tensor of shape (seq_q, seq_k)
        True = may attend. Combine with a padding mask by ``&``.

    See Also
    --------
    attnlib.causal_mask : the same with an unlimited window.
    attnlib.kv_cache.RollingKVCache : the cache that suffices with this mask.

    Examples
    --------
    >>> sliding_window_mask(4, window=2).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0],
           [0, 1, 1, 0],
           [0, 0, 1, 1]])
    """
    seq_k = seq_q if seq_k is None else seq_k
    offset = causal_offset(seq_q, seq_k, align)
    if isinstance(like, torch.Tensor):
        q_pos = torch.arange(seq_q, device=like.device)[:, None] + offset  # (seq_q, 1)
        k_pos = torch.arange(seq_k, device=like.device)[None, :]  # (1, seq_k)
    else:
        q_pos = np.arange(seq_q)[:, None] + offset  # (seq_q, 1)
        k_pos = np.arange(seq_k)[None, :]  # (1, seq_k)
    back = q_pos - k_pos  # (seq_q, seq_k): how far back key j is from query i
    return (back >= 0) & (back < window)  # (seq_q, seq_k)
