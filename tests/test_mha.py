"""attnlib.MultiHeadAttention against independent oracles.

Oracles: ``nn.MultiheadAttention`` with the same weights (both ``batch_first`` values,
with its own True = blocked masks), ``scaled_dot_product_attention`` head by head, and
autograd. Shapes are non-square throughout (batch ≠ seq_q ≠ seq_k ≠ d_model ≠ n_heads)
so a silent transpose cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlib
from attnlib.mask_conventions import to_torch_attn_mask, to_torch_key_padding_mask
from attnlib.mha import FusedQKVAttention, MultiHeadAttention

BATCH, SEQ_Q, SEQ_K, D_MODEL, N_HEADS = 3, 5, 7, 12, 4  # d_head = 3, all different


def _inputs(seed=0, dtype=torch.float32, seq_q=SEQ_Q, seq_k=SEQ_K):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(BATCH, seq_q, D_MODEL, generator=g, dtype=dtype)  # (batch, seq_q, d_model)
    k = torch.randn(BATCH, seq_k, D_MODEL, generator=g, dtype=dtype)  # (batch, seq_k, d_model)
    v = torch.randn(BATCH, seq_k, D_MODEL, generator=g, dtype=dtype)  # (batch, seq_k, d_model)
    return q, k, v


def _torch_mha(batch_first, bias=True, seed=1):
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(D_MODEL, N_HEADS, bias=bias, batch_first=batch_first).eval()
    if bias:  # torch starts biases at 0; make them matter
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    return mha


def _run_torch(mha, q, k, v, **kw):
    """Call nn.MultiheadAttention with batch-first tensors whatever its batch_first."""
    if not mha.batch_first:
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    out, w = mha(q, k, v, need_weights=True, average_attn_weights=False, **kw)
    if not mha.batch_first:
        out = out.transpose(0, 1)
    return out, w  # (batch, seq_q, d_model), (batch, n_heads, seq_q, seq_k)


# ---------------------------------------------------------------------------------------
# parity with nn.MultiheadAttention
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_nn_multiheadattention(batch_first, bias):
    mha = _torch_mha(batch_first, bias=bias)
    ours = MultiHeadAttention.from_torch(mha)
    assert ours.n_heads == N_HEADS and ours.d_model == D_MODEL
    assert (ours.W_q.bias is None) == (not bias)
    q, k, v = _inputs()
    want_out, want_w = _run_torch(mha, q, k, v)
    out, w = ours(q, k, v)
    assert out.shape == (BATCH, SEQ_Q, D_MODEL)
    assert w.shape == (BATCH, N_HEADS, SEQ_Q, SEQ_K)
    torch.testing.assert_close(out, want_out, rtol=0, atol=1e-6)
    torch.testing.assert_close(w, want_w, rtol=0, atol=1e-6)
    # the averaged weights nn.MultiheadAttention returns by default
    if not batch_first:
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    _, avg = mha(q, k, v)
    torch.testing.assert_close(w.mean(dim=1), avg, rtol=0, atol=1e-6)


@pytest.mark.parametrize("batch_first", [True, False])
def test_matches_torch_with_converted_masks(batch_first):
    mha = _torch_mha(batch_first)
    ours = MultiHeadAttention.from_torch(mha)
    q, k, v = _inputs(seed=3)
    lengths = torch.tensor([7, 4, 2])
    pad = attnlib.padding_mask(lengths, SEQ_K)  # (batch, 1, seq_k), True = real
    causal = attnlib.causal_mask(SEQ_Q, SEQ_K, align="bottom_right", like=q)  # (seq_q, seq_k)
    want_out, want_w = _run_torch(
        mha,
        q,
        k,
        v,
        key_padding_mask=to_torch_key_padding_mask(pad),
        attn_mask=to_torch_attn_mask(causal),
    )
    out, w = ours(q, k, v, mask=pad & causal)
    torch.testing.assert_close(out, want_out, rtol=0, atol=1e-6)
    torch.testing.assert_close(w, want_w, rtol=0, atol=1e-6)
    assert torch.all(w[1, :, :, 4:] == 0) and torch.all(w[2, :, :, 2:] == 0)


def test_causal_flag_matches_torch_is_causal_mask():
    mha = _torch_mha(True)
    ours = MultiHeadAttention.from_torch(mha)
    q, k, v = _inputs(seed=4)
    blocked = ~attnlib.causal_mask(SEQ_Q, SEQ_K, like=q)  # top-left, as is_causal
    want_out, want_w = _run_torch(mha, q, k, v, attn_mask=blocked)
    out, w = ours(q, k, v, causal=True)
    torch.testing.assert_close(out, want_out, rtol=0, atol=1e-6)
    torch.testing.assert_close(w, want_w, rtol=0, atol=1e-6)


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize("module", ["separate", "fused"])
def test_causal_align_means_what_causal_mask_says(align, module):
    q, k, v = _inputs(seed=6)  # seq_q = 5 < seq_k = 7: the two alignments differ
    ours = MultiHeadAttention(D_MODEL, N_HEADS)
    mask = attnlib.causal_mask(SEQ_Q, SEQ_K, align=align, like=q)  # (seq_q, seq_k)
    want_out, want_w = ours(q, k, v, mask=mask)
    out, w = ours(q, k, v, causal=True, align=align)
    torch.testing.assert_close(out, want_out, rtol=0, atol=0)
    torch.testing.assert_close(w, want_w, rtol=0, atol=0)
    if module == "fused":  # self-attention: seq_q = seq_k, where the alignments agree
        fused = FusedQKVAttention.from_separate(ours)
        a, _ = fused(k, causal=True, align=align)
        b, _ = fused(k, causal=True)
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_per_head_mask_matches_torch_3d_attn_mask():
    mha = _torch_mha(True)
    ours = MultiHeadAttention.from_torch(mha)
    q, k, v = _inputs(seed=5)
    g = torch.Generator().manual_seed(0)
    allowed = torch.rand(BATCH, N_HEADS, SEQ_Q, SEQ_K, generator=g) > 0.4
    allowed[..., 0] = True  # every row keeps one key, so torch does not give NaN
    want_out, want_w = _run_torch(mha, q, k, v, attn_mask=to_torch_attn_mask(allowed, N_HEADS))
    out, w = ours(q, k, v, mask=allowed)
    torch.testing.assert_close(out, want_out, rtol=0, atol=1e-6)
    torch.testing.assert_close(w, want_w, rtol=0, atol=1e-6)


def test_from_torch_copies_rather_than_shares():
    mha = _torch_mha(True)
    ours = MultiHeadAttention.from_torch(mha)
    with torch.no_grad():
        ours.W_k.weight.zero_()
    assert mha.in_proj_weight.abs().sum() > 0


def test_from_torch_refuses_what_it_cannot_copy():
    with pytest.raises(
        TypeError,
        match="from_torch: mha must be a torch.nn.MultiheadAttention, got torch.nn.Linear",
    ):
        MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="kdim=6"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=6, vdim=6))
    with pytest.raises(ValueError, match="dropout=0.1"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, dropout=0.1))


def test_float64_module_from_torch_is_float64():
    mha = _torch_mha(True).double()
    ours = MultiHeadAttention.from_torch(mha)
    assert ours.W_q.weight.dtype == torch.float64
    q, k, v = _inputs(dtype=torch.float64)
    torch.testing.assert_close(ours(q, k, v)[0], _run_torch(mha, q, k, v)[0], rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------
# against SDPA head by head, written out independently
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_head_by_head(causal):
    torch.manual_seed(2)
    ours = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    q, k, v = _inputs(seed=6)
    pad = attnlib.padding_mask(torch.tensor([7, 3, 6]), SEQ_K)  # (batch, 1, seq_k)
    out, w = ours(q, k, v, mask=pad, causal=causal)
    d_head = D_MODEL // N_HEADS
    with torch.no_grad():
        Q, K, V = ours.W_q(q), ours.W_k(k), ours.W_v(v)
        pieces = []
        for h in range(N_HEADS):
            cols = slice(h * d_head, (h + 1) * d_head)  # head h's block of features
            allowed = pad.expand(BATCH, SEQ_Q, SEQ_K)
            if causal:
                allowed = allowed & torch.ones(SEQ_Q, SEQ_K, dtype=torch.bool).tril()
            o = F.scaled_dot_product_attention(
                Q[..., cols], K[..., cols], V[..., cols], attn_mask=allowed
            )  # (batch, seq_q, d_head)
            pieces.append(o)
        want = ours.W_o(torch.cat(pieces, dim=-1))  # (batch, seq_q, d_model)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(w.sum(-1), torch.ones(BATCH, N_HEADS, SEQ_Q))


# ---------------------------------------------------------------------------------------
# masks: accepted shapes, fully padded sequences
# ---------------------------------------------------------------------------------------


def test_accepted_mask_shapes_agree():
    torch.manual_seed(3)
    ours = MultiHeadAttention(D_MODEL, N_HEADS)
    q, k, v = _inputs(seed=7)
    pad = attnlib.padding_mask(torch.tensor([6, 2, 7]), SEQ_K)  # (batch, 1, seq_k)
    full = pad[:, None].expand(BATCH, N_HEADS, SEQ_Q, SEQ_K)
    ref_out, ref_w = ours(q, k, v, mask=full)
    for m in (pad, pad[:, None], pad.expand(BATCH, SEQ_Q, SEQ_K), pad.numpy()):
        out, w = ours(q, k, v, mask=m)
        assert torch.equal(out, ref_out) and torch.equal(w, ref_w)
    # a (seq_q, seq_k) mask is the same for every sequence
    two_d = torch.ones(SEQ_Q, SEQ_K, dtype=torch.bool).tril()
    out, w = ours(q, k, v, mask=two_d)
    assert torch.equal(w, ours(q, k, v, causal=True)[1])


def test_fully_padded_sequence_gives_bias_not_nan_and_finite_gradients():
    torch.manual_seed(4)
    ours = MultiHeadAttention(D_MODEL, N_HEADS)
    q, k, v = (t.requires_grad_() for t in _inputs(seed=8))
    pad = attnlib.padding_mask(torch.tensor([0, 5, 7]), SEQ_K)  # sequence 0 is all padding
    out, w = ours(q, k, v, mask=pad)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert torch.all(w[0] == 0)
    torch.testing.assert_close(out[0], ours.W_o.bias.expand(SEQ_Q, D_MODEL))
    out.pow(2).sum().backward()
    for t in (q, k, v, ours.W_q.weight, ours.W_k.weight, ours.W_v.weight, ours.W_o.weight):
        assert torch.isfinite(t.grad).all()
    assert torch.all(k.grad[0] == 0)  # nothing in sequence 0 was attended to


def test_gradient_reaches_W_k_and_matches_finite_differences():
    torch.manual_seed(5)
    ours = MultiHeadAttention(D_MODEL, N_HEADS).double()
    q, k, v = _inputs(seed=9, dtype=torch.float64)
    out, _ = ours(q, k, v, causal=True)
    out.sum().backward()
    g = ours.W_k.weight.grad
    assert g is not None and g.abs().sum() > 0
    i, j, eps = 2, 5, 1e-6
    with torch.no_grad():
        ours.W_k.weight[i, j] += eps
        up = ours(q, k, v, causal=True)[0].sum()
        ours.W_k.weight[i, j] -= 2 * eps
        down = ours(q, k, v, causal=True)[0].sum()
    assert abs((up - down).item() / (2 * eps) - g[i, j].item()) < 1e-6


# ---------------------------------------------------------------------------------------
# fused QKV
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_fused_equals_separate(bias):
    torch.manual_seed(6)
    sep = MultiHeadAttention(D_MODEL, N_HEADS, bias=bias)
    fused = FusedQKVAttention.from_separate(sep)
    assert fused.W_qkv.weight.shape == (3 * D_MODEL, D_MODEL)
    assert sum(p.numel() for p in fused.parameters()) == sum(p.numel() for p in sep.parameters())
    x, _, _ = _inputs(seed=10, seq_q=SEQ_K)
    pad = attnlib.padding_mask(torch.tensor([7, 1, 4]), SEQ_K)
    a_out, a_w = sep(x, x, x, mask=pad, causal=True)
    b_out, b_w = fused(x, mask=pad, causal=True)
    torch.testing.assert_close(b_out, a_out, rtol=0, atol=1e-6)
    torch.testing.assert_close(b_w, a_w, rtol=0, atol=1e-6)


def test_fused_matches_torch_in_proj_layout():
    mha = _torch_mha(True)
    fused = FusedQKVAttention.from_separate(MultiHeadAttention.from_torch(mha))
    assert torch.equal(fused.W_qkv.weight, mha.in_proj_weight)
    x, _, _ = _inputs(seed=11)
    torch.testing.assert_close(fused(x)[0], _run_torch(mha, x, x, x)[0], rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------


def test_constructor_errors():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by n_heads=4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="MultiHeadAttention: n_heads must be >= 1, got 0"):
        MultiHeadAttention(8, 0)
    with pytest.raises(TypeError, match="d_model must be an int"):
        MultiHeadAttention(8.0, 2)
    with pytest.raises(ValueError, match="not divisible"):
        FusedQKVAttention(9, 2)


@pytest.mark.parametrize(
    ("args", "err", "pattern"),
    [
        ("q2d", ValueError, r"query .*shape \(5, 12\).* must have 3 dims"),
        ("narrow_key", ValueError, r"key .*has width 8 but the module has d_model=12"),
        (
            "seq_mismatch",
            ValueError,
            r"key has seq_k=7 \(shape \(3, 7, 12\)\) but value has seq_k=6 \(shape \(3, 6, 12\)\)",
        ),
        ("batch_mismatch", ValueError, r"query has batch=2 .* but key has batch=3 .* batch sizes"),
        ("float64", TypeError, "dtype torch.float64 but the module's weights are torch.float32"),
        ("ints", TypeError, "floating-point"),
        ("list", TypeError, "query must be a torch.Tensor"),
    ],
)
def test_bad_inputs_are_named(args, err, pattern):
    ours = MultiHeadAttention(D_MODEL, N_HEADS)
    q, k, v = _inputs()
    bad = {
        "q2d": (q[0], k, v),
        "narrow_key": (q, k[..., :8], v),
        "seq_mismatch": (q, k, v[:, :6]),
        "batch_mismatch": (q[:2], k, v),
        "float64": (q.double(), k.double(), v.double()),
        "ints": (q.long(), k, v),
        "list": (q.tolist(), k, v),
    }[args]
    with pytest.raises(err, match=pattern):
        ours(*bad)


@pytest.mark.parametrize(
    ("mask", "err", "pattern"),
    [
        (torch.ones(SEQ_Q, SEQ_K), TypeError, r"must be boolean .*added to the scores"),
        (np.ones((SEQ_Q, SEQ_K)), TypeError, "must be boolean"),
        (torch.ones(SEQ_K, SEQ_Q, dtype=torch.bool), ValueError, r"mask of shape \(7, 5\)"),
        (torch.ones(BATCH, SEQ_K, dtype=torch.bool), ValueError, r"\(3, 7\) does not fit"),
        (torch.ones(BATCH, 1, SEQ_Q, dtype=torch.bool), ValueError, "does not fit"),
        (torch.ones(BATCH, 2, SEQ_Q, SEQ_K, dtype=torch.bool), ValueError, "(3, 4, 5, 7)"),
        (torch.ones(SEQ_K, dtype=torch.bool), ValueError, "does not fit"),
        ([[True]], TypeError, "got list"),
    ],
)
def test_bad_masks_are_refused(mask, err, pattern):
    ours = MultiHeadAttention(D_MODEL, N_HEADS)
    q, k, v = _inputs()
    with pytest.raises(err, match=pattern):
        ours(q, k, v, mask=mask)


def test_lazy_export_from_attnlib():
    assert attnlib.MultiHeadAttention is MultiHeadAttention


@pytest.mark.parametrize(
    ("batch", "seq_q", "seq_k", "n_heads", "d_head"),
    [(1, 1, 9, 2, 5), (4, 6, 2, 1, 7), (2, 3, 3, 6, 1), (5, 8, 11, 3, 2)],
)
def test_matches_torch_over_shapes(batch, seq_q, seq_k, n_heads, d_head):
    d_model = n_heads * d_head
    torch.manual_seed(batch * 100 + seq_q)
    mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(mha)
    g = torch.Generator().manual_seed(seq_k)
    q = torch.randn(batch, seq_q, d_model, generator=g)
    kv = torch.randn(batch, seq_k, d_model, generator=g)
    allowed = attnlib.causal_mask(seq_q, seq_k, align="bottom_right", like=q)
    want_out, want_w = mha(q, kv, kv, attn_mask=~allowed, average_attn_weights=False)
    out, w = ours(q, kv, kv, mask=allowed)
    seen = allowed.any(dim=-1)  # (seq_q,): queries with at least one key to attend to
    torch.testing.assert_close(out[:, seen], want_out[:, seen], rtol=0, atol=1e-6)
    torch.testing.assert_close(w[:, :, seen], want_w[:, :, seen], rtol=0, atol=1e-6)
    # queries with no key (seq_q > seq_k, bottom-right): torch 2.13 gives NaN, we give
    # weights 0 and output W_o's bias
    assert torch.isnan(want_w[:, :, ~seen]).all()
    assert torch.all(w[:, :, ~seen] == 0)
    torch.testing.assert_close(out[:, ~seen], ours.W_o.bias.expand_as(out[:, ~seen]))


def test_fused_from_separate_refuses_other_modules():
    with pytest.raises(
        TypeError,
        match="from_separate: mha must be an attnlib.MultiHeadAttention, got torch.nn.Multihead",
    ):
        FusedQKVAttention.from_separate(nn.MultiheadAttention(8, 2))
