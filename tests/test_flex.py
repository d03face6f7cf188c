"""Masks as functions with FlexAttention (attnlib.flex, lesson 17).

Oracles: the course's explicit masks and bias (attnlib.causal_mask, lesson 08;
attnlib.positions.alibi_bias, lesson 12; attnlib.windows.sliding_window_mask, lesson 14), a
block-diagonal causal mask built by hand for packed documents, torch's
scaled_dot_product_attention and attnlib.attend with those masks in float64, and the tiles
lesson 11's blockwise_attend actually computes. flex_attention runs eagerly (no
torch.compile: ~40 s of compilation here); each call costs ~0.3 s, so the calls are few.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.attention.flex_attention as torch_flex
from torch.nn import functional as F

import attnlib
from attnlib import blockwise
from attnlib.flex import (
    TileCounts,
    alibi_score_mod,
    and_masks,
    build_block_mask,
    causal_mask_mod,
    dense_bias,
    dense_mask,
    document_ids,
    document_mask_mod,
    flex_attend,
    or_masks,
    sliding_window_mask_mod,
    tile_counts,
)
from attnlib.masks import causal_offset
from attnlib.positions import alibi_bias, alibi_slopes
from attnlib.windows import sliding_window_mask

# Measured on this CPU (torch 2.13.0, eager flex_attention against float64 oracles): float64
# <= 8.9e-16 over the cases below, float32 2.5e-7 (4.3e-7 at seq 50). Asserted with headroom.
TOL = {torch.float64: 1e-12, torch.float32: 2e-6}
LIKE = torch.zeros(1)  # makes the course's mask builders return torch tensors


def _qkv(batch, n_heads, seq_q, seq_k, d_k=8, d_v=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(batch, n_heads, seq_q, d_k, generator=g, dtype=dtype),
        torch.randn(batch, n_heads, seq_k, d_k, generator=g, dtype=dtype),
        torch.randn(batch, n_heads, seq_k, d_v, generator=g, dtype=dtype),
    )


def _err(out, want) -> float:
    return (out.double() - want.double()).abs().max().item()


def _block_diagonal_causal(lengths) -> torch.Tensor:
    """The mask of packed documents, built by hand: one lower triangle per document."""
    return torch.block_diag(*[torch.ones(n, n).tril() for n in lengths]).bool()  # (seq, seq)


# ---- each mask_mod is the course's explicit mask ---------------------------------------------

SHAPES = [(6, 6, "top_left"), (3, 8, "bottom_right"), (8, 3, "top_left"), (8, 3, "bottom_right")]


@pytest.mark.parametrize(("seq_q", "seq_k", "align"), SHAPES)
def test_causal_mask_mod_is_causal_mask(seq_q, seq_k, align):
    mod = causal_mask_mod(offset=causal_offset(seq_q, seq_k, align))
    got = dense_mask(mod, seq_q, seq_k)
    assert got.dtype == torch.bool and got.shape == (seq_q, seq_k)
    assert torch.equal(got, attnlib.causal_mask(seq_q, seq_k, align=align, like=LIKE))


@pytest.mark.parametrize(("seq_q", "seq_k", "align"), SHAPES)
@pytest.mark.parametrize("window", [1, 2, 3, 20])
def test_sliding_window_mask_mod_is_sliding_window_mask(seq_q, seq_k, align, window):
    mod = sliding_window_mask_mod(window, offset=causal_offset(seq_q, seq_k, align))
    want = sliding_window_mask(seq_q, seq_k, window=window, align=align, like=LIKE)
    assert torch.equal(dense_mask(mod, seq_q, seq_k), want)


def test_document_ids_change_exactly_at_each_boundary():
    # an off-by-one in the cumulative lengths would move a boundary by one position
    assert document_ids([3, 1, 2]).tolist() == [0, 0, 0, 1, 2, 2]
    assert document_ids(torch.tensor([1, 1])).tolist() == [0, 1]
    assert document_ids([4]).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("lengths", [[3, 1, 4, 2], [10], [1, 1, 1], [5, 7]])
def test_document_mask_mod_is_block_diagonal_causal(lengths):
    seq = sum(lengths)
    got = dense_mask(document_mask_mod(document_ids(lengths)), seq)
    assert torch.equal(got, _block_diagonal_causal(lengths))
    # and a list of ids works the same
    ids = document_ids(lengths).tolist()
    assert torch.equal(dense_mask(document_mask_mod(ids), seq), got)


def test_document_mask_mod_with_one_packing_per_batch_entry():
    packings = ([3, 5], [2, 2, 4])
    ids = torch.stack([document_ids(p) for p in packings])  # (batch, seq)
    got = dense_mask(document_mask_mod(ids), 8, batch=2)  # (batch, 1, seq, seq)
    assert got.shape == (2, 1, 8, 8)
    for b, p in enumerate(packings):
        assert torch.equal(got[b, 0], _block_diagonal_causal(p))


@pytest.mark.parametrize("n_heads", [4, 6])
@pytest.mark.parametrize(("seq_q", "seq_k"), [(7, 7), (3, 9), (1, 5)])
def test_alibi_score_mod_is_alibi_bias(n_heads, seq_q, seq_k):
    mod = alibi_score_mod(n_heads, offset=seq_k - seq_q)
    got = dense_bias(mod, seq_q, seq_k, n_heads=n_heads)  # (1, n_heads, seq_q, seq_k)
    want = torch.as_tensor(alibi_bias(seq_q, seq_k, n_heads=n_heads))
    assert torch.equal(got[0], want)  # float64 both: the same products, exactly
    f32 = dense_bias(mod, seq_q, seq_k, n_heads=n_heads, dtype=torch.float32)
    assert f32.dtype == torch.float32 and torch.equal(f32[0], want.float())


def test_combined_masks_are_the_course_masks_combined():
    window = sliding_window_mask_mod(3)
    causal, band = causal_mask_mod(), sliding_window_mask(6, window=3, like=LIKE)

    def near(b, h, q_idx, kv_idx):  # within 2 positions, ahead or behind
        return (q_idx - kv_idx).abs() < 3

    assert torch.equal(dense_mask(and_masks(causal, near), 6), band)
    sink = or_masks(window, lambda b, h, q_idx, kv_idx: kv_idx == 0)
    want = band.clone()
    want[:, 0] = True
    assert torch.equal(dense_mask(sink, 6), want)


# ---- a window that looks ahead, and other wrong mask_mods, are caught -----------------------


def _looks_ahead(b, h, q_idx, kv_idx):  # |distance| < window: sees the next keys too
    return (q_idx - kv_idx).abs() < 3


def _one_too_many(b, h, q_idx, kv_idx):  # <= window instead of < window
    return (q_idx - kv_idx >= 0) & (q_idx - kv_idx <= 3)


def _future_window(b, h, q_idx, kv_idx):  # kv_idx - q_idx: the window on the wrong side
    return (kv_idx - q_idx >= 0) & (kv_idx - q_idx < 3)


@pytest.mark.parametrize("wrong", [_looks_ahead, _one_too_many, _future_window])
def test_a_wrong_window_differs_from_the_band(wrong):
    band = sliding_window_mask(8, window=3, like=LIKE)
    future = ~attnlib.causal_mask(8, like=LIKE)
    right = dense_mask(sliding_window_mask_mod(3), 8)
    assert not (right & future).any()  # the right one never sees a later key
    got = dense_mask(wrong, 8)
    assert not torch.equal(got, band)
    if wrong is not _one_too_many:
        assert (got & future).any()  # it looks ahead


def test_a_window_that_looks_ahead_changes_the_output():
    q, k, v = _qkv(1, 2, 16, 16)
    want = attnlib.attend(q, k, v, mask=sliding_window_mask(16, window=3, like=q))[0]
    wrong = flex_attend(q, k, v, mask_mod=_looks_ahead, block_q=8, block_k=8)
    assert _err(wrong, want) > 0.1  # measured 1.65 (the right window: 3.3e-16, below)


def test_alibi_with_the_wrong_sign_or_head_order_differs():
    right = dense_bias(alibi_score_mod(4), 5, n_heads=4)[0]
    want = torch.as_tensor(alibi_bias(5, n_heads=4))
    slopes = torch.as_tensor(alibi_slopes(4))

    def plus(score, b, h, q_idx, kv_idx):  # rewards distance instead of penalising it
        return score + slopes[h] * (q_idx - kv_idx).abs()

    def reversed_heads(score, b, h, q_idx, kv_idx):  # slopes of the heads in reverse order
        return score - slopes.flip(0)[h] * (q_idx - kv_idx).abs()

    assert torch.equal(right, want)
    for wrong in (plus, reversed_heads):
        assert not torch.allclose(dense_bias(wrong, 5, n_heads=4)[0], want)


# ---- flex_attention's outputs equal the explicit path --------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_flex_causal_equals_sdpa_and_attend(dtype):
    q, k, v = _qkv(2, 3, 37, 37, dtype=dtype)  # 37: not a multiple of the block size
    out = flex_attend(q, k, v, mask_mod=causal_mask_mod(), block_q=16, block_k=16)
    assert out.dtype == dtype and out.shape == (2, 3, 37, 6)
    q64, k64, v64 = (t.double() for t in (q, k, v))
    sdpa = F.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
    assert _err(out, sdpa) < TOL[dtype]
    assert _err(out, attnlib.attend(q64, k64, v64, causal=True)[0]) < TOL[dtype]


def test_flex_bottom_right_window_equals_attend():
    q, k, v = _qkv(1, 2, 5, 21)  # decoding-like: 5 new queries, 21 keys
    offset = causal_offset(5, 21, "bottom_right")
    out = flex_attend(q, k, v, mask_mod=sliding_window_mask_mod(6, offset=offset), block_q=8)
    mask = sliding_window_mask(5, 21, window=6, align="bottom_right", like=q)
    assert _err(out, attnlib.attend(q, k, v, mask=mask)[0]) < TOL[torch.float64]


def test_flex_document_mask_equals_sdpa_per_batch_entry():
    packings = ([10, 3, 11], [24])
    ids = torch.stack([document_ids(p) for p in packings])  # (batch, seq)
    q, k, v = _qkv(2, 2, 24, 24)
    out = flex_attend(q, k, v, mask_mod=document_mask_mod(ids), block_q=8, block_k=8)
    mask = torch.stack([_block_diagonal_causal(p) for p in packings])[:, None]  # (2, 1, 24, 24)
    assert _err(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)) < 1e-12


def test_flex_alibi_with_causal_equals_sdpa_with_the_bias():
    q, k, v = _qkv(2, 4, 12, 20)
    offset = 20 - 12
    out = flex_attend(
        q, k, v, mask_mod=causal_mask_mod(offset=offset), score_mod=alibi_score_mod(4, offset=8)
    )
    bias = torch.as_tensor(alibi_bias(12, 20, n_heads=4))  # (n_heads, seq_q, seq_k)
    blocked = ~attnlib.causal_mask(12, 20, align="bottom_right", like=q)
    bias = bias.masked_fill(blocked, float("-inf"))
    assert _err(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias)) < 1e-12


def test_flex_with_a_block_mask_and_scale_and_a_row_that_sees_nothing():
    q, k, v = _qkv(1, 1, 9, 9)
    mod = and_masks(causal_mask_mod(), lambda b, h, q_idx, kv_idx: q_idx > 0)  # row 0: nothing
    bm = build_block_mask(mod, 9, block_q=4, block_k=4)
    out = flex_attend(q, k, v, block_mask=bm, scale=0.3)
    want = attnlib.attend(q, k, v, mask=dense_mask(mod, 9), scale=0.3)[0]
    assert torch.equal(out[..., 0, :], torch.zeros_like(out[..., 0, :]))  # 0, as attend gives
    assert _err(out, want) < TOL[torch.float64]


def test_flex_attend_silences_torch_s_unfused_warning(monkeypatch):
    monkeypatch.setattr(torch_flex, "_WARNINGS_SHOWN", set())  # as in a fresh process
    q, k, v = _qkv(1, 1, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flex_attend(q, k, v)
    # torch does warn on the same call made directly: the silenced warning still exists
    monkeypatch.setattr(torch_flex, "_WARNINGS_SHOWN", set())
    with pytest.warns(UserWarning, match="without torch.compile"):
        torch_flex.flex_attention(q, k, v)


# ---- the tiles: skipped = all-False tiles of the dense mask = lesson 11's skipped tiles -----


def _tiles_by_hand(mask: torch.Tensor, block_q: int, block_k: int) -> TileCounts:
    """Pad the dense (..., seq_q, seq_k) mask with False to whole tiles and count them."""
    seq_q, seq_k = mask.shape[-2:]
    pq, pk = -seq_q % block_q, -seq_k % block_k
    padded = F.pad(mask, (0, pk, 0, pq))  # (..., n_tq * block_q, n_tk * block_k)
    n_tq, n_tk = padded.shape[-2] // block_q, padded.shape[-1] // block_k
    tiles = padded.reshape(*mask.shape[:-2], n_tq, block_q, n_tk, block_k).transpose(-3, -2)
    seen = tiles.sum(dim=(-2, -1))  # (..., n_tq, n_tk)
    skipped, full = int((seen == 0).sum()), int((seen == block_q * block_k).sum())
    return TileCounts(skipped, seen.numel() - skipped - full, full, seen.numel())


MODS = {
    "causal": causal_mask_mod(),
    "window": sliding_window_mask_mod(5),
    "documents": document_mask_mod(document_ids([7, 2, 9, 12])),
}


@pytest.mark.parametrize("name", list(MODS))
@pytest.mark.parametrize(("block_q", "block_k"), [(4, 4), (8, 8), (5, 3), (32, 32)])
def test_skipped_tiles_are_the_all_false_tiles_of_the_dense_mask(name, block_q, block_k):
    mod, seq = MODS[name], 30  # 30 is a multiple of none of the block sizes but 5 and 3
    got = tile_counts(build_block_mask(mod, seq, block_q=block_q, block_k=block_k))
    assert got == _tiles_by_hand(dense_mask(mod, seq), block_q, block_k)
    assert got.skipped + got.partial + got.full == got.total


def test_tiles_are_counted_over_batch_entries_and_heads():
    ids = torch.stack([document_ids([4, 12]), document_ids([16])])
    mod = document_mask_mod(ids)
    got = tile_counts(build_block_mask(mod, 16, block_q=4, block_k=4, batch=2, n_heads=3))
    want = _tiles_by_hand(dense_mask(mod, 16, batch=2, n_heads=3), 4, 4)
    assert got == want and got.total == 2 * 3 * 16


def test_the_documents_skip_more_tiles_than_causal_alone():
    causal = tile_counts(build_block_mask(causal_mask_mod(), 32, block_q=8, block_k=8))
    docs = document_mask_mod(document_ids([8, 8, 16]))
    packed = tile_counts(build_block_mask(docs, 32, block_q=8, block_k=8))
    # 4 × 4 tiles: 6 in the future; 5 more lie before the document of their queries
    assert (causal.skipped, packed.skipped) == (6, 11)


@pytest.mark.parametrize(
    ("seq_q", "seq_k", "align", "block"),
    [
        (32, 32, "top_left", 8),
        (30, 30, "top_left", 8),
        (12, 40, "top_left", 8),
        (24, 40, "bottom_right", 4),
        (20, 20, "top_left", 7),
    ],
)
def test_skipped_tiles_are_the_tiles_blockwise_attend_never_computes(
    monkeypatch, seq_q, seq_k, align, block
):
    """Lesson 11's causal blockwise_attend skips the tiles wholly in the future: count the
    tiles it actually folds into its running softmax, and compare."""
    computed = []
    update = blockwise.online_softmax_update

    def counting(*args):
        computed.append(1)
        return update(*args)

    monkeypatch.setattr(blockwise, "online_softmax_update", counting)
    rng = np.random.default_rng(0)  # numpy: blockwise_attend's path through the counted update
    q, k, v = (
        rng.standard_normal((seq_q, 4)),
        rng.standard_normal((seq_k, 4)),
        rng.standard_normal((seq_k, 4)),
    )
    blockwise.blockwise_attend(q, k, v, causal=True, align=align, block_q=block, block_k=block)
    mod = causal_mask_mod(offset=causal_offset(seq_q, seq_k, align))
    counts = tile_counts(build_block_mask(mod, seq_q, seq_k, block_q=block, block_k=block))
    assert len(computed) == counts.total - counts.skipped > 0
    assert counts.skipped > 0


# ---- bad input ---------------------------------------------------------------------------


def _identity_score_mod(score, b, h, q_idx, kv_idx):
    return score


BAD = [
    (lambda: causal_mask_mod(offset=1.5), TypeError, r"causal_mask_mod: offset must be an int"),
    (
        lambda: sliding_window_mask_mod(0),
        ValueError,
        r"sliding_window_mask_mod: window must be >= 1",
    ),
    (lambda: sliding_window_mask_mod(2.0), TypeError, r"window must be an int, got float"),
    (lambda: document_ids([2, 0]), ValueError, r"document_ids: lengths\[1\] must be >= 1"),
    (lambda: document_ids([]), ValueError, r"document_ids: lengths is empty"),
    (
        lambda: document_mask_mod(torch.zeros(4)),
        TypeError,
        r"doc_ids \(torch.Tensor, shape \(4,\), float32\) must hold integers",
    ),
    (
        lambda: document_mask_mod(torch.zeros(1, 2, 3, dtype=torch.long)),
        ValueError,
        r"must be \(seq,\) or \(batch, seq\)",
    ),
    (lambda: alibi_score_mod(0), ValueError, r"alibi_score_mod: n_heads must be >= 1"),
    (lambda: and_masks(), ValueError, r"and_masks: give at least one mask_mod"),
    (
        lambda: or_masks(causal_mask_mod(), "causal"),
        TypeError,
        r"or_masks: mask_mods\[1\] must be a function mask_mod\(b, h, q_idx, kv_idx\), got str",
    ),
    (
        lambda: and_masks(_identity_score_mod),
        TypeError,
        r"mask_mods\[0\] .* it looks like a score_mod",
    ),
    (
        lambda: dense_mask(_identity_score_mod, 4),
        TypeError,
        r"dense_mask: mask_mod .* it looks like a score_mod",
    ),
    (
        lambda: dense_mask(lambda b, h, q_idx, kv_idx: kv_idx - q_idx, 4),
        TypeError,
        r"dense_mask: mask_mod must return a bool tensor .* int64",
    ),
    (lambda: dense_mask(causal_mask_mod(), 0), ValueError, r"dense_mask: seq_q must be >= 1"),
    (
        lambda: dense_bias(causal_mask_mod(), 4),
        TypeError,
        r"dense_bias: score_mod .* it looks like a mask_mod",
    ),
    (
        lambda: dense_bias(_identity_score_mod, 4, dtype=torch.int64),
        TypeError,
        r"dense_bias: dtype must be a floating torch.dtype",
    ),
    (
        lambda: build_block_mask(causal_mask_mod(), 8, block_q=0),
        ValueError,
        r"build_block_mask: block_q must be >= 1",
    ),
    (
        lambda: build_block_mask(lambda b, h, q_idx, kv_idx: q_idx * 1.0, 8),
        TypeError,
        r"build_block_mask: mask_mod must return a bool tensor, it returned float32",
    ),
    (
        lambda: tile_counts(torch.ones(2, 2, dtype=torch.bool)),
        TypeError,
        r"tile_counts: block_mask must be a BlockMask, got torch.Tensor",
    ),
]


@pytest.mark.parametrize(("call", "error", "message"), BAD)
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_flex_attend_refuses_what_flex_attention_cannot_take():
    q, k, v = _qkv(1, 2, 4, 4)
    bad = [
        (
            lambda: flex_attend(q.numpy(), k, v),
            TypeError,
            r"flex_attend: q must be a torch.Tensor, got numpy.ndarray",
        ),
        (
            lambda: flex_attend(q[0], k[0], v[0]),
            ValueError,
            r"q \(torch.Tensor, shape \(2, 4, 8\), float64\) must have 4 dims \(batch, n_heads",
        ),
        (lambda: flex_attend(q, k.float(), v), TypeError, r"different dtypes"),
        (lambda: flex_attend(q, k[..., :4], v), ValueError, r"d_k=8 .* d_k=4"),
        (
            lambda: flex_attend(q, k[:, :1], v[:, :1]),
            ValueError,
            r"must share \(batch, n_heads\), got \(1, 2\), \(1, 1\)",
        ),
        (
            lambda: flex_attend(q.clone().requires_grad_(), k, v),
            ValueError,
            r"q .* requires grad, .* no backward on the CPU; pass q.detach\(\)",
        ),
        (
            lambda: flex_attend(q, k, v, score_mod=causal_mask_mod()),
            TypeError,
            r"score_mod .* it looks like a mask_mod",
        ),
        (
            lambda: flex_attend(q, k, v, mask_mod=_identity_score_mod),
            TypeError,
            r"flex_attend: mask_mod .* it looks like a score_mod",
        ),
        (
            lambda: flex_attend(q, k, v, mask_mod=causal_mask_mod(), block_q=0),
            ValueError,
            r"flex_attend: block_q must be >= 1",
        ),
        (
            lambda: flex_attend(q, k, v, scale="big"),
            TypeError,
            r"flex_attend: scale must be a number or None",
        ),
    ]
    for call, error, message in bad:
        with pytest.raises(error, match=message):
            call()
    bm = build_block_mask(causal_mask_mod(), 8, block_q=4, block_k=4)
    with pytest.raises(
        ValueError,
        match=r"block_mask was made for \(seq_q, seq_k\) = \(8, 8\), the inputs have \(4, 4\)",
    ):
        flex_attend(q, k, v, block_mask=bm)
    with pytest.raises(ValueError, match=r"give mask_mod or block_mask, not both"):
        flex_attend(q, k, v, mask_mod=causal_mask_mod(), block_mask=bm)
    with pytest.raises(TypeError, match=r"block_mask must be a BlockMask, got numpy.ndarray"):
        flex_attend(q, k, v, block_mask=np.ones((4, 4), bool))
