"""Converting masks between attnlib's convention and ``nn.MultiheadAttention``'s.

Two boolean conventions live side by side in torch:

* attnlib and ``torch.nn.functional.scaled_dot_product_attention``: **True = may attend**;
* ``torch.nn.MultiheadAttention``'s ``attn_mask`` and ``key_padding_mask``:
  **True = blocked** (not allowed to attend).

And both accept *float* masks, which they **add** to the scores: a float 0/1 mask meant
as "1 = keep" blocks nothing. attnlib refuses float masks (:func:`check_bool_mask`).

* attnlib (seq_q, seq_k) -> ``attn_mask`` (seq_q, seq_k): :func:`to_torch_attn_mask`;
* attnlib (batch, n_heads, seq_q, seq_k) -> ``attn_mask`` (batch·n_heads, seq_q, seq_k):
  :func:`to_torch_attn_mask`;
* attnlib padding (batch, 1, seq_k) -> ``key_padding_mask`` (batch, seq_k):
  :func:`to_torch_key_padding_mask`;

and back with :func:`from_torch_attn_mask` and :func:`from_torch_key_padding_mask`. Every
function takes and returns numpy arrays or torch tensors (the same kind).
"""

from __future__ import annotations

from attnlib._validate import check_bool_mask, check_int

__all__ = [
    "check_bool_mask",
    "to_torch_attn_mask",
    "from_torch_attn_mask",
    "to_torch_key_padding_mask",
    "from_torch_key_padding_mask",
]

# check_bool_mask(mask, name="mask", *, fn=..., meaning=None, hint=...) is attnlib's one mask
# check (written in attnlib._validate, used by every function that takes a mask); it is public
# here. Its message says no "True = ..." by default: this module handles both conventions.


def _invert(mask):
    return ~mask  # works for bool numpy arrays and bool tensors alike


def to_torch_attn_mask(mask, n_heads: int | None = None):
    """attnlib mask (True = may attend) -> ``nn.MultiheadAttention`` ``attn_mask`` (True = blocked).

    Parameters
    ----------
    mask : bool ndarray or Tensor of shape (seq_q, seq_k) or (batch, n_heads, seq_q, seq_k)
        True = may attend.
    n_heads : int, optional
        Checked against ``mask.shape[1]`` for a 4-D mask.

    Returns
    -------
    attn_mask : bool, same kind, shape (seq_q, seq_k) or (batch * n_heads, seq_q, seq_k)
        True = blocked. The 3-D form is what ``nn.MultiheadAttention`` wants for a mask
        that differs between sequences or heads (batch-major: index ``b * n_heads + h``).

    See Also
    --------
    from_torch_attn_mask : the way back.
    attnlib.mha.MultiHeadAttention.from_torch : copies an ``nn.MultiheadAttention``.

    Examples
    --------
    >>> import attnlib
    >>> to_torch_attn_mask(attnlib.causal_mask(3)).astype(int)   # True = blocked
    array([[0, 1, 1],
           [0, 0, 1],
           [0, 0, 0]])
    """
    fn = "to_torch_attn_mask"
    check_bool_mask(mask, fn=fn)
    if mask.ndim == 2:
        return _invert(mask)  # (seq_q, seq_k)
    if mask.ndim == 4:
        batch, heads, seq_q, seq_k = mask.shape
        if n_heads is not None and check_int(fn, "n_heads", n_heads, minimum=1) != heads:
            raise ValueError(
                f"{fn}: mask of shape {tuple(mask.shape)} has {heads} heads, expected "
                f"n_heads={n_heads}; expand a shared mask to every head first"
            )
        return _invert(mask).reshape(batch * heads, seq_q, seq_k)  # (batch * n_heads, ...)
    raise ValueError(
        f"{fn}: mask of shape {tuple(mask.shape)} must be (seq_q, seq_k) or "
        f"(batch, n_heads, seq_q, seq_k); a padding mask goes to key_padding_mask "
        f"(to_torch_key_padding_mask)"
    )


def from_torch_attn_mask(attn_mask, n_heads: int | None = None):
    """``nn.MultiheadAttention`` ``attn_mask`` (True = blocked) -> attnlib mask (True = may attend).

    Parameters
    ----------
    attn_mask : bool ndarray or Tensor of shape (seq_q, seq_k) or (batch * n_heads, seq_q, seq_k)
        True = blocked. Float (additive) masks are refused.
    n_heads : int
        Required for the 3-D form, to split its first axis.

    Returns
    -------
    mask : bool, same kind, shape (seq_q, seq_k) or (batch, n_heads, seq_q, seq_k)
        True = may attend.

    See Also
    --------
    to_torch_attn_mask : the way there.

    Examples
    --------
    >>> import torch
    >>> blocked = torch.ones(3, 3, dtype=torch.bool).triu(diagonal=1)  # True = blocked
    >>> from_torch_attn_mask(blocked).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    """
    fn = "from_torch_attn_mask"
    check_bool_mask(attn_mask, "attn_mask", fn=fn)
    if attn_mask.ndim == 2:
        return _invert(attn_mask)  # (seq_q, seq_k)
    if attn_mask.ndim == 3:
        if n_heads is None:
            raise ValueError(
                f"{fn}: a 3-D attn_mask of shape {tuple(attn_mask.shape)} is "
                f"(batch * n_heads, seq_q, seq_k); pass n_heads to split it"
            )
        n_heads = check_int(fn, "n_heads", n_heads, minimum=1)
        bh, seq_q, seq_k = attn_mask.shape
        if bh % n_heads:
            raise ValueError(
                f"{fn}: attn_mask of shape {tuple(attn_mask.shape)}: {bh} is not a multiple "
                f"of n_heads={n_heads}"
            )
        return _invert(attn_mask).reshape(bh // n_heads, n_heads, seq_q, seq_k)
    raise ValueError(
        f"{fn}: attn_mask of shape {tuple(attn_mask.shape)} must be (seq_q, seq_k) or "
        f"(batch * n_heads, seq_q, seq_k)"
    )


def to_torch_key_padding_mask(mask):
    """attnlib padding mask (True = real token) -> ``key_padding_mask`` (True = padding).

    Parameters
    ----------
    mask : bool ndarray or Tensor of shape (batch, 1, seq_k) or (batch, seq_k)
        True = real token, as from :func:`attnlib.padding_mask`.

    Returns
    -------
    key_padding_mask : bool, same kind, shape (batch, seq_k)
        True = padding (blocked).

    See Also
    --------
    from_torch_key_padding_mask : the way back.
    attnlib.padding_mask : makes the mask this converts.

    Examples
    --------
    >>> import attnlib
    >>> to_torch_key_padding_mask(attnlib.padding_mask([2, 3], 3)).astype(int)   # True = padding
    array([[0, 0, 1],
           [0, 0, 0]])
    """
    fn = "to_torch_key_padding_mask"
    check_bool_mask(mask, fn=fn)
    if mask.ndim == 3 and mask.shape[1] == 1:
        mask = mask[:, 0, :]  # (batch, seq_k)
    elif mask.ndim != 2:
        raise ValueError(
            f"{fn}: mask of shape {tuple(mask.shape)} must be (batch, 1, seq_k) or "
            f"(batch, seq_k): padding is about keys, the same for every query"
        )
    return _invert(mask)  # (batch, seq_k)


def from_torch_key_padding_mask(key_padding_mask):
    """``key_padding_mask`` (True = padding) -> attnlib padding mask (True = real token).

    Parameters
    ----------
    key_padding_mask : bool ndarray or Tensor of shape (batch, seq_k)

    Returns
    -------
    mask : bool, same kind, shape (batch, 1, seq_k)
        True = real token; broadcasts over query positions like :func:`attnlib.padding_mask`.

    See Also
    --------
    to_torch_key_padding_mask : the way there.

    Examples
    --------
    >>> import numpy as np
    >>> from_torch_key_padding_mask(np.array([[False, True]])).shape
    (1, 1, 2)
    """
    fn = "from_torch_key_padding_mask"
    check_bool_mask(key_padding_mask, "key_padding_mask", fn=fn)
    if key_padding_mask.ndim != 2:
        raise ValueError(
            f"{fn}: key_padding_mask of shape {tuple(key_padding_mask.shape)} must be "
            f"(batch, seq_k)"
        )
    return _invert(key_padding_mask)[:, None, :]  # (batch, 1, seq_k)
