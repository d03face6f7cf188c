"""Boolean attention masks. Convention everywhere in the course: True = may attend.

This is the convention of ``torch.nn.functional.scaled_dot_product_attention``.
``torch.nn.MultiheadAttention`` uses the opposite (True = blocked) for ``attn_mask`` and
``key_padding_mask``; lesson 08 puts the two side by side.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlib._validate import check_choice, check_int, validated

__all__ = ["ALIGNS", "causal_mask", "causal_offset", "padding_mask"]

ALIGNS = ("top_left", "bottom_right")  # where the causal diagonal sits


def _check_causal_offset(seq_q: int, seq_k: int, align: str = "top_left") -> None:
    check_choice("causal_offset", "align", align, ALIGNS)


def _check_causal_mask(seq_q, seq_k=None, *, align="top_left", like=None) -> None:
    fn = "causal_mask"
    check_int(fn, "seq_q", seq_q, minimum=0)
    if seq_k is not None:
        check_int(fn, "seq_k", seq_k, minimum=0)
    check_choice(fn, "align", align, ALIGNS)


@validated(_check_causal_offset)
def causal_offset(seq_q: int, seq_k: int, align: str = "top_left") -> int:
    """How far the causal diagonal is shifted: query i sees keys ``0 .. i + offset``.

    ``0`` for ``align="top_left"``; ``seq_k - seq_q`` for ``"bottom_right"`` (the queries
    are the newest seq_q of the seq_k positions). :func:`causal_mask` and the tiles of
    :func:`attnlib.blockwise.blockwise_attend` both read ``align`` through it.

    Parameters
    ----------
    seq_q, seq_k : int
        Query and key positions.
    align : {"top_left", "bottom_right"}, default "top_left"

    Returns
    -------
    offset : int

    See Also
    --------
    causal_mask : the mask this offset places.

    Examples
    --------
    >>> causal_offset(2, 5), causal_offset(2, 5, align="bottom_right")
    (0, 3)
    """
    return 0 if align == "top_left" else seq_k - seq_q


@validated(_check_causal_mask)
def causal_mask(seq_q: int, seq_k: int | None = None, *, align: str = "top_left", like=None):
    """Which keys each query may see when the future is hidden.

    Parameters
    ----------
    seq_q : int
        Number of query positions (rows).
    seq_k : int, optional
        Number of key positions (columns); default ``seq_q``.
    align : {"top_left", "bottom_right"}
        ``"top_left"``: query i sees keys 0..i (as ``scaled_dot_product_attention``'s
        ``is_causal``). ``"bottom_right"``: the last query sees every key, i.e. query i
        sees keys 0..i + (seq_k - seq_q) — the queries are the newest tokens, as when
        decoding with a cache of past keys.
    like : ndarray or Tensor, optional
        Return a torch tensor (on ``like``'s device) if ``like`` is a tensor, else numpy.

    Returns
    -------
    mask : bool ndarray or Tensor of shape (seq_q, seq_k)
        True = may attend.

    See Also
    --------
    causal_offset : where the diagonal sits for each ``align``.
    attnlib.windows.sliding_window_mask : the causal band of the last ``window`` keys.
    padding_mask : which keys are real tokens.

    Examples
    --------
    >>> causal_mask(3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    >>> causal_mask(2, 4, align="bottom_right").astype(int)
    array([[1, 1, 1, 0],
           [1, 1, 1, 1]])
    """
    seq_k = seq_q if seq_k is None else seq_k
    offset = causal_offset(seq_q, seq_k, align)
    if isinstance(like, torch.Tensor):
        q_pos = torch.arange(seq_q, device=like.device)[:, None]  # (seq_q, 1)
        k_pos = torch.arange(seq_k, device=like.device)[None, :]  # (1, seq_k)
    else:
        q_pos = np.arange(seq_q)[:, None]  # (seq_q, 1)
        k_pos = np.arange(seq_k)[None, :]  # (1, seq_k)
    return k_pos <= q_pos + offset  # (seq_q, seq_k)


def padding_mask(lengths, seq_k: int):
    """Which key positions hold real tokens, for a batch of padded sequences.

    Parameters
    ----------
    lengths : sequence of int, int ndarray or int Tensor of shape (batch,)
        Real length of each sequence; positions ``>= length`` are padding.
    seq_k : int
        Padded length (number of key positions).

    Returns
    -------
    mask : bool ndarray or Tensor of shape (batch, 1, seq_k)
        True = real token. The middle axis of size 1 broadcasts over query positions:
        padding is about keys, so every query row gets the same mask. A torch tensor
        if ``lengths`` is one, else numpy.

    See Also
    --------
    causal_mask : combine with it by ``&``.
    attnlib.mask_conventions.to_torch_key_padding_mask : the same mask for
        ``nn.MultiheadAttention`` (True = padding).

    Examples
    --------
    >>> padding_mask([2, 3], 4).astype(int)        # (batch, 1, seq_k)
    array([[[1, 1, 0, 0]],
    <BLANKLINE>
           [[1, 1, 1, 0]]])
    >>> (padding_mask([2, 3], 4) & causal_mask(4)).shape
    (2, 4, 4)
    """
    fn = "padding_mask"
    seq_k = check_int(fn, "seq_k", seq_k, minimum=0)
    is_t = isinstance(lengths, torch.Tensor)
    arr = lengths.detach().cpu().numpy() if is_t else np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError(f"{fn}: lengths must have shape (batch,), got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{fn}: lengths must be integers, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() > seq_k):
        raise ValueError(
            f"{fn}: every length must be in 0..seq_k={seq_k}, got lengths {arr.tolist()}"
        )
    if is_t:
        pos = torch.arange(seq_k, device=lengths.device)  # (seq_k,)
        return (pos[None, :] < lengths[:, None])[:, None, :]  # (batch, 1, seq_k)
    pos = np.arange(seq_k)  # (seq_k,)
    return (pos[None, :] < arr[:, None])[:, None, :]  # (batch, 1, seq_k)
