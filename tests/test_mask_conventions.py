"""Converters between attnlib's masks (True = may attend) and nn.MultiheadAttention's.

The oracle is torch itself: a mask converted for nn.MultiheadAttention must give the same
output as the attnlib mask given to scaled_dot_product_attention (same convention as
attnlib), and converting there and back must give the mask we started from.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlib
from attnlib.mask_conventions import (
    check_bool_mask,
    from_torch_attn_mask,
    from_torch_key_padding_mask,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
)


def _mha(d_model=8, n_heads=2):
    torch.manual_seed(0)
    return nn.MultiheadAttention(d_model, n_heads, batch_first=True).eval()


def test_causal_mask_converted_for_mha_equals_sdpa_with_attnlib_mask():
    mha = _mha()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 6, 8, generator=g)  # (batch, seq, d_model)
    allowed = attnlib.causal_mask(6, like=x)  # True = may attend
    out_mha, _ = mha(x, x, x, attn_mask=to_torch_attn_mask(allowed))
    out_causal, _ = mha(x, x, x, attn_mask=~allowed)
    assert torch.equal(out_mha, out_causal)
    # and SDPA with the attnlib mask, with the projections done by hand
    W_q, W_k, W_v = mha.in_proj_weight.chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.chunk(3)

    def heads(t):
        return t.reshape(3, 6, 2, 4).transpose(1, 2)  # (batch, n_heads, seq, d_head)

    o = F.scaled_dot_product_attention(
        heads(x @ W_q.T + b_q), heads(x @ W_k.T + b_k), heads(x @ W_v.T + b_v), attn_mask=allowed
    )
    o = mha.out_proj(o.transpose(1, 2).reshape(3, 6, 8))
    torch.testing.assert_close(out_mha, o, rtol=0, atol=1e-6)


def test_padding_mask_converted_for_mha_equals_sdpa_with_attnlib_mask():
    mha = _mha()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 5, 8, generator=g)
    pad = attnlib.padding_mask(torch.tensor([5, 2, 3]), 5)  # (batch, 1, seq_k)
    kpm = to_torch_key_padding_mask(pad)
    assert kpm.shape == (3, 5) and kpm.dtype == torch.bool
    assert kpm.tolist()[1] == [False, False, True, True, True]  # True = padding
    out, w = mha(x, x, x, key_padding_mask=kpm)
    assert torch.all(w[1, :, 2:] == 0) and torch.all(w[2, :, 3:] == 0)
    # changing the padded embeddings must not change anything
    y = x.clone()
    y[1, 2:] = 100.0
    y[2, 3:] = -7.0
    out2, _ = mha(y, y, y, key_padding_mask=kpm)
    torch.testing.assert_close(out2[1, :2], out[1, :2], rtol=0, atol=1e-6)
    torch.testing.assert_close(out2[2, :3], out[2, :3], rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_round_trips(kind):
    rng = np.random.default_rng(3)
    two_d = rng.random((4, 6)) > 0.5
    four_d = rng.random((3, 2, 4, 6)) > 0.5
    pad = attnlib.padding_mask([6, 1, 3], 6)
    if kind == "torch":
        two_d, four_d, pad = (torch.as_tensor(m) for m in (two_d, four_d, pad))
    for m in (two_d, four_d):
        there = to_torch_attn_mask(m, n_heads=None)
        assert type(there) is type(m)
        back = from_torch_attn_mask(there, n_heads=2)
        assert np.array_equal(np.asarray(back), np.asarray(m))
        assert not np.any(np.asarray(there).reshape(-1) == np.asarray(m).reshape(-1))
    assert tuple(to_torch_attn_mask(four_d).shape) == (6, 4, 6)
    kpm = to_torch_key_padding_mask(pad)
    assert tuple(kpm.shape) == (3, 6)
    assert np.array_equal(np.asarray(from_torch_key_padding_mask(kpm)), np.asarray(pad))
    assert np.array_equal(np.asarray(to_torch_key_padding_mask(pad[:, 0])), np.asarray(kpm))


def test_3d_attn_mask_is_batch_major_like_torch():
    """torch reads a (batch·n_heads, seq_q, seq_k) attn_mask as index b * n_heads + h."""
    mha = _mha(8, 2)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 4, 8, generator=g)
    allowed = torch.rand(3, 2, 4, 4, generator=g) > 0.5
    allowed[..., 0] = True
    _, w = mha(x, x, x, attn_mask=to_torch_attn_mask(allowed), average_attn_weights=False)
    assert torch.equal(w > 0, allowed)


@pytest.mark.parametrize(
    "fn",
    [
        check_bool_mask,
        to_torch_attn_mask,
        from_torch_attn_mask,
        to_torch_key_padding_mask,
        from_torch_key_padding_mask,
    ],
)
@pytest.mark.parametrize("mask", [torch.zeros(2, 3), np.zeros((2, 3)), torch.zeros(2, 3).int()])
def test_float_and_int_masks_are_refused(fn, mask):
    with pytest.raises(TypeError, match=r"must be boolean.*added to the scores"):
        fn(mask)


def test_check_bool_mask_returns_the_mask_and_refuses_lists():
    m = torch.ones(2, 3, dtype=torch.bool)
    assert check_bool_mask(m) is m
    with pytest.raises(TypeError, match="got list"):
        check_bool_mask([[True]])


def test_shape_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3, 4\) must be \(seq_q, seq_k\)"):
        to_torch_attn_mask(torch.ones(2, 3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="pass n_heads"):
        from_torch_attn_mask(torch.ones(6, 3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="not a multiple of n_heads=4"):
        from_torch_attn_mask(torch.ones(6, 3, 4, dtype=torch.bool), n_heads=4)
    with pytest.raises(ValueError, match="has 2 heads, expected n_heads=3"):
        to_torch_attn_mask(torch.ones(1, 2, 3, 4, dtype=torch.bool), n_heads=3)
    with pytest.raises(ValueError, match=r"\(2, 3, 4\) must be \(batch, 1, seq_k\)"):
        to_torch_key_padding_mask(torch.ones(2, 3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"must be \(batch, seq_k\)"):
        from_torch_key_padding_mask(torch.ones(2, 1, 4, dtype=torch.bool))
