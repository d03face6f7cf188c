"""Splitting the feature axis into heads, and merging the heads back (lesson 07).

Multi-head attention projects ``d_model`` features to queries, keys and values, then cuts
each into ``n_heads`` slices of ``d_head = d_model // n_heads`` features: head h gets
features ``h * d_head .. (h + 1) * d_head - 1`` of every position. After attention the
heads' outputs are put back side by side.

* :func:`split_heads` — (batch, seq, d_model) -> (batch, n_heads, seq, d_head);
* :func:`merge_heads` — (batch, n_heads, seq, d_head) -> (batch, seq, n_heads · d_head).

Both take numpy arrays or torch tensors and return the same kind (torch: views where
possible, autograd intact). Every module of attnlib that works with heads —
:mod:`attnlib.mha`, :mod:`attnlib.torch_mha`, :mod:`attnlib.kv_cache`,
:mod:`attnlib.tasks.syntax` — uses these two.
"""

from __future__ import annotations

from attnlib._validate import check_array, check_int, check_ndim, validated

__all__ = ["split_heads", "merge_heads"]


def _check_split_heads(x, n_heads: int) -> None:
    fn = "split_heads"
    n_heads = check_int(fn, "n_heads", n_heads, minimum=1)
    check_array(fn, "x", x)
    check_ndim(fn, "x", x, ndim=3, doc="(batch, seq, d_model)")
    if x.shape[-1] % n_heads:
        raise ValueError(
            f"{fn}: d_model={x.shape[-1]} (x of shape {tuple(x.shape)}) is not divisible by "
            f"n_heads={n_heads}; every head needs the same number of features"
        )


def _check_merge_heads(x) -> None:
    check_array("merge_heads", "x", x)
    check_ndim("merge_heads", "x", x, ndim=4, doc="(batch, n_heads, seq, d_head)")


@validated(_check_split_heads)
def split_heads(x, n_heads: int):
    """Cut the feature axis into heads: (batch, seq, d_model) -> (batch, n_heads, seq, d_head).

    Head h gets features ``h * d_head .. (h + 1) * d_head - 1`` of every position. The
    reshape splits the feature axis in place, then the head axis moves in front of the
    position axis (a reshape straight to ``(batch, n_heads, seq, d_head)`` would mix
    positions up).

    Parameters
    ----------
    x : ndarray or Tensor of shape (batch, seq, d_model)
        Projected queries, keys or values.
    n_heads : int
        Number of heads; must divide d_model.

    Returns
    -------
    heads : same kind and dtype as x, shape (batch, n_heads, seq, d_head)
        ``d_head = d_model // n_heads``.

    See Also
    --------
    merge_heads : the inverse.
    attnlib.mha.MultiHeadAttention : splits its projections with this function.

    Examples
    --------
    >>> import numpy as np
    >>> split_heads(np.zeros((2, 5, 12)), 3).shape     # (batch, n_heads, seq, d_head)
    (2, 3, 5, 4)
    """
    batch, seq, d_model = x.shape
    d_head = d_model // n_heads
    x = x.reshape(batch, seq, n_heads, d_head)  # (batch, seq, n_heads, d_head)
    return x.swapaxes(1, 2)  # (batch, n_heads, seq, d_head)


@validated(_check_merge_heads)
def merge_heads(x):
    """Put the heads back side by side: (batch, n_heads, seq, d_head) -> (batch, seq, d_model).

    The inverse of :func:`split_heads`: ``merge_heads(split_heads(x, h))`` equals ``x``.

    Parameters
    ----------
    x : ndarray or Tensor of shape (batch, n_heads, seq, d_head)

    Returns
    -------
    merged : same kind and dtype as x, shape (batch, seq, n_heads * d_head)

    See Also
    --------
    split_heads : the inverse.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(24.0).reshape(1, 2, 12)              # (batch, seq, d_model)
    >>> heads = split_heads(x, 3)                         # (batch, n_heads, seq, d_head)
    >>> merge_heads(heads).shape, bool((merge_heads(heads) == x).all())
    ((1, 2, 12), True)
    """
    batch, n_heads, seq, d_head = x.shape
    x = x.swapaxes(1, 2)  # (batch, seq, n_heads, d_head)
    return x.reshape(batch, seq, n_heads * d_head)  # (batch, seq, d_model)
