"""Masks as functions: FlexAttention's ``mask_mod`` and ``score_mod`` (lesson 17).

Until now a mask was a matrix: a bool (seq_q, seq_k) tensor built in full and handed to
:func:`attnlib.attend`. ``torch.nn.attention.flex_attention`` takes the *rule* instead:

* a ``mask_mod(b, h, q_idx, kv_idx) -> bool`` says whether query ``q_idx`` of head ``h``
  in batch entry ``b`` may see key ``kv_idx`` (True = may attend, the course's convention);
* a ``score_mod(score, b, h, q_idx, kv_idx) -> score`` changes one pre-softmax score, after
  the scale (ALiBi subtracts a penalty that grows with the distance to the key).

Each argument is a 0-dim integer tensor and torch runs the function over every
``(b, h, q_idx, kv_idx)`` with ``torch.vmap``, so the body uses tensor operations
(``&``, ``|``, ``torch.where``), never a Python ``if`` on a value.

From a mask_mod, :func:`build_block_mask` cuts the (seq_q, seq_k) grid into tiles of
block_q × block_k and records which tiles hold no visible key at all. A fused kernel never
computes those tiles — lesson 11's :func:`attnlib.blockwise.blockwise_attend` skipped the
tiles wholly in the future the same way — and applies the mask_mod only inside the tiles
that are partly visible (:func:`tile_counts`).

* :func:`causal_mask_mod`, :func:`sliding_window_mask_mod`, :func:`document_mask_mod`
  (packed sequences, with :func:`document_ids`), :func:`alibi_score_mod` — the course's
  masks and bias (lessons 08, 12, 14) as functions; :func:`and_masks`, :func:`or_masks`
  combine mask_mods;
* :func:`dense_mask`, :func:`dense_bias` — the matrix a function stands for;
* :func:`build_block_mask`, :func:`tile_counts` — the tiles;
* :func:`flex_attend` — ``flex_attention`` run without ``torch.compile``.

Without ``torch.compile`` (what :func:`flex_attend` does) torch 2.13 runs a reference
implementation: the whole score matrix, the mask_mod applied to every score, the block
structure unused (``_math_attention_inner`` in ``torch/_higher_order_ops/flex_attention.py``).
It gives the right numbers, not the speed: only ``torch.compile(flex_attention)`` skips
tiles, after tens of seconds of compilation on a laptop CPU. Compile it with
``dynamic=False``: in torch 2.13 the CPU kernel that a recompilation with dynamic shapes
produces (the third mask through one compiled function, say) fails to build.
"""

from __future__ import annotations

import inspect
import warnings
from typing import NamedTuple

import torch
from torch.nn.attention.flex_attention import (
    BlockMask,
    create_block_mask,
    create_mask,
    flex_attention,
)
from torch.nn.attention.flex_attention import and_masks as torch_and_masks
from torch.nn.attention.flex_attention import or_masks as torch_or_masks

from attnlib import _backend as B
from attnlib._validate import (
    check_array,
    check_instance,
    check_int,
    check_qkv,
    default_scale,
    type_name,
)
from attnlib.positions import alibi_slopes

__all__ = [
    "causal_mask_mod",
    "sliding_window_mask_mod",
    "document_ids",
    "document_mask_mod",
    "alibi_score_mod",
    "and_masks",
    "or_masks",
    "dense_mask",
    "dense_bias",
    "build_block_mask",
    "TileCounts",
    "tile_counts",
    "flex_attend",
]

_SIGNATURES = {4: "mask_mod(b, h, q_idx, kv_idx)", 5: "score_mod(score, b, h, q_idx, kv_idx)"}
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _check_mod(fn: str, name: str, mod, n_args: int):
    """``mod`` if it is a function of ``n_args`` positional arguments (4: a mask_mod, 5: a
    score_mod), else a ``TypeError`` that says which of the two it looks like."""
    wanted = _SIGNATURES[n_args]
    if not callable(mod):
        raise TypeError(f"{fn}: {name} must be a function {wanted}, got {type_name(mod)}")
    try:
        params = inspect.signature(mod).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: let torch judge it
        return mod
    n = sum(p.kind in _POSITIONAL and p.default is inspect.Parameter.empty for p in params)
    if n != n_args:
        looks = f"; it looks like a {_SIGNATURES[n]}" if n in _SIGNATURES else ""
        raise TypeError(
            f"{fn}: {name} must be a function {wanted}, got one of {n} required arguments{looks}"
        )
    return mod


def _check_seqs(fn: str, seq_q, seq_k) -> tuple[int, int]:
    seq_q = check_int(fn, "seq_q", seq_q, minimum=1)
    seq_k = seq_q if seq_k is None else check_int(fn, "seq_k", seq_k, minimum=1)
    return seq_q, seq_k


def _check_batch_heads(fn: str, batch, n_heads) -> tuple[int, int]:
    batch = 1 if batch is None else check_int(fn, "batch", batch, minimum=1)
    n_heads = 1 if n_heads is None else check_int(fn, "n_heads", n_heads, minimum=1)
    return batch, n_heads


# ----------------------------------------------------------------------------------------
# The course's masks and bias, as functions.
# ----------------------------------------------------------------------------------------


def causal_mask_mod(*, offset: int = 0):
    """The causal mask as a mask_mod: query ``q_idx`` sees keys ``0 .. q_idx + offset``.

    Parameters
    ----------
    offset : int, default 0
        Where the diagonal sits, as :func:`attnlib.masks.causal_offset` gives it:
        0 for ``align="top_left"``, ``seq_k - seq_q`` for ``"bottom_right"`` (the queries
        are the newest of the keys' positions, as when decoding with a cache).

    Returns
    -------
    mask_mod : function (b, h, q_idx, kv_idx) -> bool tensor
        True = may attend; :func:`dense_mask` of it is :func:`attnlib.causal_mask`.

    See Also
    --------
    attnlib.causal_mask : the same mask as a matrix.
    sliding_window_mask_mod : the causal band of the last ``window`` keys.

    Examples
    --------
    >>> dense_mask(causal_mask_mod(), 3).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    """
    offset = check_int("causal_mask_mod", "offset", offset)

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset  # no key after the query's own position

    return causal


def sliding_window_mask_mod(window: int, *, offset: int = 0):
    """A sliding window as a mask_mod: the query itself and the ``window - 1`` keys before it.

    Query ``q_idx`` sits at position ``p = q_idx + offset`` and sees key ``kv_idx`` when
    ``0 <= p - kv_idx < window``, i.e. ``kv_idx`` in ``(p - window, p]``: never a key
    ahead of it. :func:`dense_mask` of it is :func:`attnlib.windows.sliding_window_mask`.

    Parameters
    ----------
    window : int
        How many positions a query sees, itself included (>= 1).
    offset : int, default 0
        As in :func:`causal_mask_mod`.

    Returns
    -------
    mask_mod : function (b, h, q_idx, kv_idx) -> bool tensor

    See Also
    --------
    attnlib.windows.sliding_window_mask : the same band as a matrix.

    Examples
    --------
    >>> dense_mask(sliding_window_mask_mod(2), 4).int()
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [0, 0, 1, 1]], dtype=torch.int32)
    """
    fn = "sliding_window_mask_mod"
    window = check_int(fn, "window", window, minimum=1)
    offset = check_int(fn, "offset", offset)

    def sliding_window(b, h, q_idx, kv_idx):
        back = q_idx + offset - kv_idx  # how far back the key is; negative = ahead
        return (back >= 0) & (back < window)

    return sliding_window


def document_ids(lengths):
    """The document of each position when documents of ``lengths`` are packed end to end.

    Parameters
    ----------
    lengths : sequence of int or int Tensor of shape (n_docs,)
        Length of each document (>= 1).

    Returns
    -------
    ids : LongTensor of shape (seq,)
        ``seq = sum(lengths)``; position ``p`` belongs to document ``ids[p]``.

    See Also
    --------
    document_mask_mod : the mask these ids define.

    Examples
    --------
    >>> document_ids([3, 1, 2])
    tensor([0, 0, 0, 1, 2, 2])
    """
    fn = "document_ids"
    lengths = lengths.tolist() if B.is_torch(lengths) else lengths
    lengths = [check_int(fn, f"lengths[{i}]", n, minimum=1) for i, n in enumerate(lengths)]
    if not lengths:
        raise ValueError(f"{fn}: lengths is empty; give the length of each document")
    counts = torch.tensor(lengths)  # (n_docs,)
    return torch.repeat_interleave(torch.arange(len(lengths)), counts)  # (seq,)


def document_mask_mod(doc_ids):
    """Document masking for packed sequences: causal, and only within one's own document.

    Several short documents are packed into one sequence to avoid padding; a query must
    not see the previous document. Query ``q_idx`` sees key ``kv_idx`` when both belong to
    the same document and ``kv_idx <= q_idx``: a block-diagonal causal mask.

    Parameters
    ----------
    doc_ids : int Tensor (or sequence of int) of shape (seq,) or (batch, seq)
        The document of each position (:func:`document_ids` builds it from lengths); with
        a batch axis, each batch entry ``b`` has its own packing. The mask_mod is for
        ``seq_q = seq_k = seq``: a longer sequence indexes past the ids.

    Returns
    -------
    mask_mod : function (b, h, q_idx, kv_idx) -> bool tensor

    See Also
    --------
    document_ids : the ids from the documents' lengths.
    causal_mask_mod : the mask within each document.

    Examples
    --------
    >>> dense_mask(document_mask_mod(document_ids([2, 2])), 4).int()
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 0, 1, 0],
            [0, 0, 1, 1]], dtype=torch.int32)
    """
    fn = "document_mask_mod"
    ids = doc_ids if B.is_torch(doc_ids) else torch.as_tensor(doc_ids)
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{fn}: {B.describe('doc_ids', ids)} must hold integers")
    if ids.ndim not in (1, 2) or ids.shape[-1] == 0:
        raise ValueError(f"{fn}: {B.describe('doc_ids', ids)} must be (seq,) or (batch, seq)")
    ids = ids.long()

    if ids.ndim == 1:

        def document(b, h, q_idx, kv_idx):
            return (ids[q_idx] == ids[kv_idx]) & (kv_idx <= q_idx)

    else:

        def document(b, h, q_idx, kv_idx):
            return (ids[b, q_idx] == ids[b, kv_idx]) & (kv_idx <= q_idx)

    return document


def alibi_score_mod(n_heads: int, *, offset: int = 0):
    """ALiBi as a score_mod: head ``h`` subtracts ``slope_h · |position - kv_idx|``.

    The slopes are :func:`attnlib.positions.alibi_slopes`; query ``q_idx`` sits at
    position ``q_idx + offset``. With ``offset = seq_k - seq_q`` (0 when
    ``seq_q == seq_k``), :func:`dense_bias` of it is :func:`attnlib.positions.alibi_bias`.
    The penalty is computed in the scores' dtype. Combine it with
    ``mask_mod=causal_mask_mod(offset=offset)`` for a causal model, the paper's setting.

    Parameters
    ----------
    n_heads : int
        Number of query heads; the inputs of :func:`flex_attend` must have this many.
    offset : int, default 0

    Returns
    -------
    score_mod : function (score, b, h, q_idx, kv_idx) -> score

    See Also
    --------
    attnlib.positions.alibi_bias : the same bias as a tensor.

    Examples
    --------
    >>> dense_bias(alibi_score_mod(2), 3, n_heads=2)[0, 1]  # the second head: slope 1/256
    tensor([[ 0.0000, -0.0039, -0.0078],
            [-0.0039,  0.0000, -0.0039],
            [-0.0078, -0.0039,  0.0000]], dtype=torch.float64)
    """
    n_heads = check_int("alibi_score_mod", "n_heads", n_heads, minimum=1)
    offset = check_int("alibi_score_mod", "offset", offset)
    slopes = torch.as_tensor(alibi_slopes(n_heads))  # (n_heads,) float64

    def alibi(score, b, h, q_idx, kv_idx):
        distance = (q_idx + offset - kv_idx).abs()
        return score - (slopes[h] * distance).to(score.dtype)

    return alibi


def and_masks(*mask_mods):
    """A mask_mod that lets a query see a key only where every one of ``mask_mods`` does.

    ``torch.nn.attention.flex_attention.and_masks``, with the course's checks.

    Parameters
    ----------
    *mask_mods : functions (b, h, q_idx, kv_idx) -> bool tensor
        At least one.

    Returns
    -------
    mask_mod : function (b, h, q_idx, kv_idx) -> bool tensor

    See Also
    --------
    or_masks : the union.

    Examples
    --------
    >>> def far(b, h, q_idx, kv_idx):
    ...     return q_idx - kv_idx >= 2
    >>> dense_mask(and_masks(causal_mask_mod(), far), 4).int()
    tensor([[0, 0, 0, 0],
            [0, 0, 0, 0],
            [1, 0, 0, 0],
            [1, 1, 0, 0]], dtype=torch.int32)
    """
    return torch_and_masks(*_check_mods("and_masks", mask_mods))


def or_masks(*mask_mods):
    """A mask_mod that lets a query see a key wherever at least one of ``mask_mods`` does.

    ``torch.nn.attention.flex_attention.or_masks``, with the course's checks.

    Parameters
    ----------
    *mask_mods : functions (b, h, q_idx, kv_idx) -> bool tensor
        At least one.

    Returns
    -------
    mask_mod : function (b, h, q_idx, kv_idx) -> bool tensor

    See Also
    --------
    and_masks : the intersection.

    Examples
    --------
    A window of 2 that also keeps the first key (an attention sink):

    >>> def first_key(b, h, q_idx, kv_idx):
    ...     return kv_idx == 0
    >>> dense_mask(or_masks(sliding_window_mask_mod(2), first_key), 4).int()
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [1, 1, 1, 0],
            [1, 0, 1, 1]], dtype=torch.int32)
    """
    return torch_or_masks(*_check_mods("or_masks", mask_mods))


def _check_mods(fn: str, mask_mods: tuple) -> tuple:
    if not mask_mods:
        raise ValueError(f"{fn}: give at least one mask_mod")
    for i, mod in enumerate(mask_mods):
        _check_mod(fn, f"mask_mods[{i}]", mod, 4)
    return mask_mods


# ----------------------------------------------------------------------------------------
# The matrix a function stands for, and its tiles.
# ----------------------------------------------------------------------------------------


def dense_mask(mask_mod, seq_q: int, seq_k: int | None = None, *, batch=None, n_heads=None):
    """The bool matrix a mask_mod stands for (torch's ``create_mask``, on the CPU).

    Parameters
    ----------
    mask_mod : function (b, h, q_idx, kv_idx) -> bool tensor
    seq_q : int
    seq_k : int, optional
        Default ``seq_q``.
    batch, n_heads : int, optional
        Give them for a mask that depends on ``b`` or ``h``.

    Returns
    -------
    mask : bool Tensor of shape (seq_q, seq_k)
        Or (batch, n_heads, seq_q, seq_k) if ``batch`` or ``n_heads`` is given.
        True = may attend.

    Raises
    ------
    TypeError
        If the mask_mod does not return booleans (``kv_idx - q_idx`` instead of
        ``kv_idx <= q_idx``, say).

    See Also
    --------
    dense_bias : the same for a score_mod.

    Examples
    --------
    >>> dense_mask(causal_mask_mod(offset=2), 2, 4).int()
    tensor([[1, 1, 1, 0],
            [1, 1, 1, 1]], dtype=torch.int32)
    """
    fn = "dense_mask"
    _check_mod(fn, "mask_mod", mask_mod, 4)
    seq_q, seq_k = _check_seqs(fn, seq_q, seq_k)
    n_b, n_h = _check_batch_heads(fn, batch, n_heads)
    mask = create_mask(mask_mod, n_b, n_h, seq_q, seq_k, device="cpu")  # (n_b, n_h, seq_q, seq_k)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{fn}: mask_mod must return a bool tensor (True = may attend), it returned "
            f"{str(mask.dtype).replace('torch.', '')}; compare, e.g. kv_idx <= q_idx"
        )
    return mask if batch is not None or n_heads is not None else mask[0, 0]


def dense_bias(
    score_mod, seq_q: int, seq_k: int | None = None, *, batch=None, n_heads=None, dtype=None
):
    """What a score_mod adds to each score: ``score_mod(0, b, h, q_idx, kv_idx)``.

    Computed by broadcasting: the indices are passed as tensors of shapes
    (batch, 1, 1, 1), (1, n_heads, 1, 1), (1, 1, seq_q, 1) and (1, 1, 1, seq_k), with a zero
    score of shape (batch, n_heads, seq_q, seq_k). A score_mod that adds a bias returns
    the bias; one that masks with ``-inf`` shows ``-inf`` there.

    Parameters
    ----------
    score_mod : function (score, b, h, q_idx, kv_idx) -> score
    seq_q : int
    seq_k : int, optional
        Default ``seq_q``.
    batch, n_heads : int, optional
        Default 1 each.
    dtype : torch.dtype, optional
        Of the zero scores; default float64.

    Returns
    -------
    bias : Tensor of shape (batch, n_heads, seq_q, seq_k)

    See Also
    --------
    dense_mask : the same for a mask_mod.

    Examples
    --------
    >>> bias = dense_bias(alibi_score_mod(2, offset=2), 1, 3, n_heads=2)  # (1, 2, 1, 3)
    >>> bias[0, 0]  # head 0, slope 1/16; the one query sits at position 2
    tensor([[-0.1250, -0.0625,  0.0000]], dtype=torch.float64)
    """
    fn = "dense_bias"
    _check_mod(fn, "score_mod", score_mod, 5)
    seq_q, seq_k = _check_seqs(fn, seq_q, seq_k)
    n_b, n_h = _check_batch_heads(fn, batch, n_heads)
    dtype = torch.float64 if dtype is None else dtype
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"{fn}: dtype must be a floating torch.dtype, got {dtype!r}")
    b = torch.arange(n_b).view(-1, 1, 1, 1)  # (batch, 1, 1, 1)
    h = torch.arange(n_h).view(1, -1, 1, 1)  # (1, n_heads, 1, 1)
    q_idx = torch.arange(seq_q).view(1, 1, -1, 1)  # (1, 1, seq_q, 1)
    kv_idx = torch.arange(seq_k).view(1, 1, 1, -1)  # (1, 1, 1, seq_k)
    zero = torch.zeros(n_b, n_h, seq_q, seq_k, dtype=dtype)  # (batch, n_heads, seq_q, seq_k)
    return torch.broadcast_to(score_mod(zero, b, h, q_idx, kv_idx), zero.shape).clone()


def build_block_mask(
    mask_mod,
    seq_q: int,
    seq_k: int | None = None,
    *,
    block_q: int = 128,
    block_k: int = 128,
    batch=None,
    n_heads=None,
    device="cpu",
) -> BlockMask:
    """Tiles of block_q × block_k and which of them hold a visible key (``create_block_mask``).

    A tile where the mask_mod is False everywhere is *skipped*: a fused kernel never
    computes it. A *full* tile (True everywhere) needs no mask; a *partial* tile applies
    the mask_mod inside — the tiles that cross the diagonal in lesson 11. Lengths that are
    not multiples of the block sizes are padded; the padding counts as masked.

    Parameters
    ----------
    mask_mod : function (b, h, q_idx, kv_idx) -> bool tensor
    seq_q : int
    seq_k : int, optional
        Default ``seq_q``.
    block_q, block_k : int, default 128
        Tile size in queries and keys (torch's default is 128 × 128).
    batch, n_heads : int, optional
        Give them for a mask that depends on ``b`` or ``h`` (a compiled kernel trusts the
        tiles; with ``batch=None`` the tiles of batch entry 0 serve every entry).
    device : str or torch.device, default "cpu"
        Where the queries will be.

    Returns
    -------
    block_mask : torch.nn.attention.flex_attention.BlockMask
        For :func:`flex_attend`; :func:`tile_counts` counts its tiles.

    See Also
    --------
    tile_counts : how many tiles are skipped, partial and full.
    attnlib.blockwise.blockwise_attend : lesson 11's tiles.

    Examples
    --------
    >>> tile_counts(build_block_mask(causal_mask_mod(), 8, block_q=2, block_k=2))
    TileCounts(skipped=6, partial=4, full=6, total=16)
    """
    fn = "build_block_mask"
    sizes = _check_block_mask(fn, mask_mod, seq_q, seq_k, block_q, block_k, batch, n_heads, device)
    return _block_mask(mask_mod, *sizes, device)


def _block_mask(mask_mod, seq_q, seq_k, block_q, block_k, n_b, n_h, device) -> BlockMask:
    """The block mask of arguments :func:`_check_block_mask` has checked."""
    return create_block_mask(
        mask_mod, n_b, n_h, seq_q, seq_k, device=device, BLOCK_SIZE=(block_q, block_k)
    )


def _check_block_mask(fn, mask_mod, seq_q, seq_k, block_q, block_k, batch, n_heads, device):
    """The arguments of a block mask, checked in the name of ``fn`` and normalised."""
    _check_mod(fn, "mask_mod", mask_mod, 4)
    seq_q, seq_k = _check_seqs(fn, seq_q, seq_k)
    block_q = check_int(fn, "block_q", block_q, minimum=1)
    block_k = check_int(fn, "block_k", block_k, minimum=1)
    n_b, n_h = _check_batch_heads(fn, batch, n_heads)
    probe = create_mask(mask_mod, 1, 1, 1, 1, device=device)  # (b, h, q_idx, kv_idx) = 0
    if probe.dtype != torch.bool:
        got = str(probe.dtype).replace("torch.", "")
        raise TypeError(f"{fn}: mask_mod must return a bool tensor, it returned {got}")
    return seq_q, seq_k, block_q, block_k, n_b, n_h


class TileCounts(NamedTuple):
    """Tiles of a block mask, summed over batch entries and heads."""

    skipped: int  # no visible key: never computed by a fused kernel
    partial: int  # some visible keys: computed, the mask_mod applied inside
    full: int  # every key visible: computed, no mask needed
    total: int  # skipped + partial + full


def tile_counts(block_mask: BlockMask) -> TileCounts:
    """Count the tiles a block mask skips, masks inside and computes in full.

    Parameters
    ----------
    block_mask : BlockMask
        From :func:`build_block_mask` (or torch's ``create_block_mask``).

    Returns
    -------
    counts : TileCounts
        ``(skipped, partial, full, total)``, summed over the block mask's batch entries
        and heads. ``total = batch · n_heads · ceil(seq_q / block_q) · ceil(seq_k /
        block_k)``. A block mask made with ``separate_full_blocks=False`` counts its full
        tiles as partial.

    See Also
    --------
    build_block_mask : makes the block mask.

    Examples
    --------
    >>> counts = tile_counts(build_block_mask(sliding_window_mask_mod(4), 16, block_q=4, block_k=4))
    >>> counts.skipped, counts.total
    (9, 16)
    """
    check_instance("tile_counts", "block_mask", block_mask, BlockMask, "a BlockMask")
    seq_k, block_k = block_mask.seq_lengths[1], block_mask.BLOCK_SIZE[1]
    n_tiles_k = -(-seq_k // block_k)  # ceil: the last tile is padded
    total = block_mask.kv_num_blocks.numel() * n_tiles_k  # (batch, n_heads, n_tiles_q) rows
    partial = int(block_mask.kv_num_blocks.sum())
    full = 0 if block_mask.full_kv_num_blocks is None else int(block_mask.full_kv_num_blocks.sum())
    return TileCounts(skipped=total - partial - full, partial=partial, full=full, total=total)


# ----------------------------------------------------------------------------------------
# Running flex_attention.
# ----------------------------------------------------------------------------------------

# torch warns once per process that flex_attention without torch.compile is unfused; the
# docstring of flex_attend says so instead, and the course's notebooks stay quiet.
_UNFUSED_WARNING = "flex_attention called without torch.compile"


def _check_flex_inputs(fn: str, q, k, v) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_array(fn, name, x, only="torch")
    check_qkv(fn, q, k, v)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(
                f"{fn}: {B.describe(name, x)} must have 4 dims (batch, n_heads, seq, d); "
                f"flex_attention takes nothing else"
            )
        if x.requires_grad and x.device.type == "cpu":
            raise ValueError(
                f"{fn}: {B.describe(name, x)} requires grad, and torch 2.13's flex_attention "
                f"has no backward on the CPU; pass {name}.detach()"
            )
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError(
            f"{fn}: q, k and v must share (batch, n_heads), got {tuple(q.shape[:2])}, "
            f"{tuple(k.shape[:2])} and {tuple(v.shape[:2])}"
        )


def flex_attend(
    q,
    k,
    v,
    *,
    mask_mod=None,
    score_mod=None,
    block_mask: BlockMask | None = None,
    block_q: int = 128,
    block_k: int = 128,
    scale=None,
):
    """``torch.nn.attention.flex_attention`` without ``torch.compile``: the reference path.

    With a ``mask_mod``, the block mask is built for the inputs' batch and heads
    (:func:`build_block_mask`); or pass a ``block_mask`` made beforehand. Without
    ``torch.compile`` torch materialises the whole (seq_q, seq_k) score matrix and skips no
    tile: the numbers are flex_attention's, the speed is not (torch's one-time warning
    saying so is silenced here).

    Parameters
    ----------
    q : Tensor of shape (batch, n_heads, seq_q, d_k)
    k : Tensor of shape (batch, n_heads, seq_k, d_k)
    v : Tensor of shape (batch, n_heads, seq_k, d_v)
        One float dtype for all three; none may require grad (no backward on the CPU).
    mask_mod : function (b, h, q_idx, kv_idx) -> bool tensor, optional
        True = may attend. Default: every key.
    score_mod : function (score, b, h, q_idx, kv_idx) -> score, optional
        Applied to the scaled scores before the softmax.
    block_mask : BlockMask, optional
        Instead of ``mask_mod``, for seq_q × seq_k.
    block_q, block_k : int, default 128
        Tile size of the block mask built from ``mask_mod``.
    scale : float, optional
        Default ``1 / sqrt(d_k)``.

    Returns
    -------
    out : Tensor of shape (batch, n_heads, seq_q, d_v), q's dtype
        A query that sees no key gets 0, as with :func:`attnlib.attend`.

    See Also
    --------
    attnlib.attend : the explicit path with a mask matrix.
    build_block_mask : the tiles.

    Examples
    --------
    >>> import torch.nn.functional as F
    >>> g = torch.Generator().manual_seed(0)
    >>> q, k, v = (torch.randn(1, 2, 8, 4, generator=g) for _ in range(3))
    >>> out = flex_attend(q, k, v, mask_mod=causal_mask_mod(), block_q=4, block_k=4)
    >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
    True
    """
    fn = "flex_attend"
    _check_flex_inputs(fn, q, k, v)
    scale = default_scale(fn, q.shape[-1], scale)
    if score_mod is not None:
        _check_mod(fn, "score_mod", score_mod, 5)
    if block_mask is not None:
        if mask_mod is not None:
            raise ValueError(f"{fn}: give mask_mod or block_mask, not both")
        check_instance(fn, "block_mask", block_mask, BlockMask, "a BlockMask")
        if tuple(block_mask.seq_lengths) != (q.shape[-2], k.shape[-2]):
            raise ValueError(
                f"{fn}: block_mask was made for (seq_q, seq_k) = {tuple(block_mask.seq_lengths)}"
                f", the inputs have ({q.shape[-2]}, {k.shape[-2]})"
            )
    elif mask_mod is not None:
        batch, n_heads, seq_q, seq_k = *q.shape[:3], k.shape[-2]
        sizes = _check_block_mask(
            fn, mask_mod, seq_q, seq_k, block_q, block_k, batch, n_heads, q.device
        )
        block_mask = _block_mask(mask_mod, *sizes, q.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_UNFUSED_WARNING)
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
