"""Selected keys: a cheap indexer ranks every past key, each query keeps its best (lesson 14).

DeepSeek-V3.2's sparse attention splits attention in two. A small "lightning indexer"
scores every (query, key) pair cheaply — a small number of heads, a ReLU of each dot product, a
weighted sum:

    I[t, s] = Σ_h w[t, h] · relu(q_idx[h, t] · k_idx[s])

and each query then attends, with the full attention, only to the ``n_keep`` keys with the
highest index scores (DeepSeek calls the number top-k). The cache still holds every key (any
of them may be selected later); what shrinks is the work per query: ``n_keep`` keys read
instead of all of them.

* :func:`indexer_scores` — the formula above;
* :class:`Indexer` — the small module that makes its queries, key and weights;
* :func:`topk_mask` — the selection as a boolean mask, for :func:`attnlib.attend`.

With ``n_keep >= seq_k`` nothing is dropped: attention with the mask equals full attention
(``tests/test_selection.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from attnlib import _backend as B
from attnlib._validate import (
    as_float_array,
    broadcast_shapes,
    check_array,
    check_choice,
    check_int,
    check_mask,
    check_ndim,
    same_kind_and_dtype,
    validated,
)
from attnlib.masks import ALIGNS, causal_mask

__all__ = ["indexer_scores", "Indexer", "topk_mask"]


def _check_indexer_scores(q_idx, k_idx, head_weights) -> None:
    fn = "indexer_scores"
    named = {"q_idx": q_idx, "k_idx": k_idx, "head_weights": head_weights}
    for name, x in named.items():
        as_float_array(fn, name, x)
    same_kind_and_dtype(fn, named)
    check_ndim(fn, "q_idx", q_idx, min_ndim=3, doc="(..., n_index_heads, seq_q, d_index)")
    check_ndim(fn, "k_idx", k_idx, min_ndim=2, doc="(..., seq_k, d_index)")
    check_ndim(fn, "head_weights", head_weights, min_ndim=1, doc="(..., seq_q, n_index_heads)")
    n_index_heads, seq_q, d_index = q_idx.shape[-3:]
    if k_idx.shape[-1] != d_index:
        raise ValueError(
            f"{fn}: q_idx has d_index={d_index} (shape {tuple(q_idx.shape)}) but k_idx has "
            f"{k_idx.shape[-1]} (shape {tuple(k_idx.shape)}); they are compared by dot products"
        )
    want = (*q_idx.shape[:-3], seq_q, n_index_heads)
    shapes = {"head_weights": tuple(head_weights.shape), "(..., seq_q, n_index_heads)": want}
    if broadcast_shapes(fn, "shapes", shapes) != want:
        raise ValueError(
            f"{fn}: {B.describe('head_weights', head_weights)} does not broadcast to "
            f"(..., seq_q, n_index_heads) = {want} given by q_idx of shape {tuple(q_idx.shape)}"
        )


@validated(_check_indexer_scores)
def indexer_scores(q_idx, k_idx, head_weights):
    """How much each query wants each key: ``Σ_h w[t, h] · relu(q_idx[h, t] · k_idx[s])``.

    Parameters
    ----------
    q_idx : ndarray or Tensor of shape (..., n_index_heads, seq_q, d_index)
        One small query per index head.
    k_idx : ndarray or Tensor of shape (..., seq_k, d_index)
        One small key per position, shared by the index heads (this is what is cached).
    head_weights : ndarray or Tensor broadcastable to (..., seq_q, n_index_heads)
        How much each index head counts, per query.

    Returns
    -------
    index_scores : same kind and dtype as q_idx, shape (..., seq_q, seq_k)
        A ranking only: no softmax (a positive scale, which the release applies to the
        head weights, would not change it).

    See Also
    --------
    Indexer : makes its inputs from the token vectors.
    topk_mask : turns the scores into a selection.

    Examples
    --------
    >>> q_idx = torch.tensor([[[[1.0, 0.0]], [[0.0, 1.0]]]])  # (1, n_index_heads, seq_q=1, 2)
    >>> k_idx = torch.tensor([[[2.0, -1.0], [0.0, 3.0]]])      # (batch, seq_k=2, d_index)
    >>> indexer_scores(q_idx, k_idx, torch.tensor([[[1.0, 0.5]]]))   # relu(2)·1 + relu(-1)·0.5, ...
    tensor([[[2.0000, 1.5000]]])
    """
    ops = B.ops_for(q_idx)
    dots = q_idx @ ops.transpose_last(k_idx)[..., None, :, :]  # (..., n_index_heads, seq_q, seq_k)
    relu = ops.maximum(dots, ops.zeros_like(dots))  # negative matches count 0
    full = ops.zeros_like(q_idx[..., 0]).swapaxes(-1, -2)  # (..., seq_q, n_index_heads)
    w = head_weights + full  # broadcast to (..., seq_q, n_index_heads)
    w = ops.transpose_last(w)[..., None]  # (..., n_index_heads, seq_q, 1)
    return (w * relu).sum(-3)  # (..., seq_q, seq_k)


class Indexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer, small: queries, one key and head weights from x.

    The top-k mask it feeds is not differentiable, so training through the mask gives the
    indexer no gradient; DeepSeek-V3.2 trains it to match the main attention's weights
    (a KL loss). Lesson 14's task trains it that way too.

    Parameters
    ----------
    d_model : int
    n_index_heads : int, default 4
    d_index : int, default 16

    Attributes
    ----------
    W_q : nn.Linear, d_model -> n_index_heads·d_index
    W_k : nn.Linear, d_model -> d_index
    W_w : nn.Linear, d_model -> n_index_heads (the head weights of each query)

    See Also
    --------
    indexer_scores : the formula it computes.
    topk_mask : the selection its scores feed.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> index = Indexer(d_model=16, n_index_heads=2, d_index=4)
    >>> index(torch.randn(1, 5, 16)).shape                 # (batch, seq_q, seq_k)
    torch.Size([1, 5, 5])
    """

    def __init__(self, d_model: int, n_index_heads: int = 4, d_index: int = 16):
        super().__init__()
        fn = "Indexer"
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        self.n_index_heads = check_int(fn, "n_index_heads", n_index_heads, minimum=1)
        self.d_index = check_int(fn, "d_index", d_index, minimum=1)
        self.W_q = nn.Linear(d_model, n_index_heads * d_index, bias=False)
        self.W_k = nn.Linear(d_model, d_index, bias=False)
        self.W_w = nn.Linear(d_model, n_index_heads, bias=False)

    def _check_forward(self, x_q, x_k=None) -> None:
        d_model, dtype = self.W_q.in_features, self.W_q.weight.dtype
        for name, x in (("x_q", x_q), ("x_k", x_q if x_k is None else x_k)):
            check_array("Indexer", name, x, only="torch")
            check_ndim("Indexer", name, x, ndim=3, doc="(batch, seq, d_model)")
            if x.shape[-1] != d_model or x.dtype != dtype:
                raise ValueError(
                    f"Indexer: {B.describe(name, x)} must be (batch, seq, d_model={d_model}) of "
                    f"the weights' dtype {dtype}"
                )
        if x_k is not None and x_k.shape[0] != x_q.shape[0]:
            raise ValueError(
                f"Indexer: x_q of shape {tuple(x_q.shape)} and x_k of shape "
                f"{tuple(x_k.shape)} must have one batch size"
            )

    @validated(_check_forward)
    def forward(self, x_q: torch.Tensor, x_k: torch.Tensor | None = None) -> torch.Tensor:
        """Index scores of the positions of ``x_k`` (default ``x_q``) for those of ``x_q``.

        Parameters
        ----------
        x_q : Tensor of shape (batch, seq_q, d_model)
        x_k : Tensor of shape (batch, seq_k, d_model), optional

        Returns
        -------
        index_scores : Tensor of shape (batch, seq_q, seq_k)
        """
        x_k = x_q if x_k is None else x_k
        q = self.W_q(x_q).unflatten(-1, (self.n_index_heads, self.d_index))  # (b, seq_q, h, d)
        q = q.transpose(1, 2)  # (batch, n_index_heads, seq_q, d_index)
        k = self.W_k(x_k)  # (batch, seq_k, d_index)
        return indexer_scores(q, k, self.W_w(x_q))  # (batch, seq_q, seq_k)


def _check_topk_mask(index_scores, n_keep, mask=None, *, causal=False, align="top_left") -> None:
    fn = "topk_mask"
    scores = as_float_array(fn, "index_scores", index_scores)
    check_ndim(fn, "index_scores", scores, min_ndim=2, doc="(..., seq_q, seq_k)")
    check_int(fn, "n_keep", n_keep, minimum=0)
    shape = tuple(scores.shape)
    if mask is not None:
        check_array(fn, "mask", mask)
        target = broadcast_shapes(fn, "shapes", {"index_scores": shape, "mask": tuple(mask.shape)})
        check_mask(fn, mask, scores, target, "selection (..., seq_q, seq_k)")
    check_choice(fn, "align", align, ALIGNS)
    if not bool(torch.isfinite(torch.as_tensor(scores)).all()):
        raise ValueError(f"{fn}: {B.describe('index_scores', scores)} has nan or inf entries")


@validated(_check_topk_mask)
def topk_mask(
    index_scores, n_keep: int, mask=None, *, causal: bool = False, align: str = "top_left"
):
    """Keep, for each query, the ``n_keep`` allowed keys with the highest index scores.

    Ties are broken by position: among equal scores the lower key index is kept first.
    A row with no more than ``n_keep`` allowed keys keeps all of them; a row with none keeps
    none (``attnlib.attend`` then gives weights 0 and output 0 there, no NaN). The result
    never selects a key the mask blocks.

    Parameters
    ----------
    index_scores : ndarray or Tensor of shape (..., seq_q, seq_k)
        Finite scores (e.g. :func:`indexer_scores`); higher = more worth attending to.
    n_keep : int
        Keys to keep per query (>= 0).
    mask : bool ndarray or Tensor broadcastable to (..., seq_q, seq_k), optional
        True = may attend; blocked keys are never selected.
    causal : bool, default False
        Also block future keys: :func:`attnlib.causal_mask` ``(seq_q, seq_k, align=align)``.
    align : {"top_left", "bottom_right"}, default "top_left"

    Returns
    -------
    selected : bool, same kind as index_scores, shape broadcast(index_scores, mask)
        True = kept (may attend). Pass it as the mask of :func:`attnlib.attend`.

    See Also
    --------
    indexer_scores : scores to rank by.
    attnlib.attend : takes the selection as its mask.
    attnlib.causal_mask : combined in with ``causal=True``.

    Examples
    --------
    >>> scores = torch.tensor([[3.0, 1.0, 2.0, 2.0]])
    >>> topk_mask(scores, 2).int()  # of the ties at 2.0 the lower index is kept
    tensor([[1, 0, 1, 0]], dtype=torch.int32)
    >>> topk_mask(scores, 2, torch.tensor([False, True, True, True])).int()
    tensor([[0, 0, 1, 1]], dtype=torch.int32)
    """
    seq_q, seq_k = index_scores.shape[-2:]
    is_numpy = B.is_numpy(index_scores)
    s = torch.as_tensor(index_scores)  # numpy: computed in torch, returned as numpy
    allowed = torch.ones((), dtype=torch.bool)
    if mask is not None:
        allowed = allowed & torch.as_tensor(mask)  # (..., seq_q, seq_k)
    if causal:
        allowed = allowed & causal_mask(seq_q, seq_k, align=align, like=s)  # (seq_q, seq_k)
    s, allowed = torch.broadcast_tensors(s, allowed)  # (..., seq_q, seq_k) both
    ranked = s.masked_fill(~allowed, -torch.inf)  # blocked keys rank last
    # stable sort: among equal scores the lower key index comes first
    order = torch.sort(ranked, dim=-1, descending=True, stable=True).indices  # (..., seq_q, seq_k)
    rank = torch.empty_like(order)
    positions = torch.arange(seq_k).expand_as(order)  # (..., seq_q, seq_k)
    rank.scatter_(-1, order, positions)  # rank[..., j]: place of key j in its row's ranking
    selected = (rank < n_keep) & allowed  # (..., seq_q, seq_k)
    return selected.numpy() if is_numpy else selected
