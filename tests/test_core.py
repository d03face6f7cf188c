"""attnlib.core — softmax, scores, attend — against independent oracles.

Oracles: ``torch.nn.functional.scaled_dot_product_attention`` (SDPA; its weights are read
back by attending to an identity matrix of values), ``torch.softmax``, torch's
``CausalBias`` for bottom-right causal masks, autograd (gradcheck) and fp64 numpy.
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import attnlib
from attnlib import _backend as B
from attnlib.core import _attend_math, _attend_torch_fast

TOL = {
    torch.float64: {"atol": 1e-12, "rtol": 1e-10},
    torch.float32: {"atol": 2e-6, "rtol": 1e-5},
    # low precision: compared with SDPA run in fp32 on the same (rounded) inputs
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2},
}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=gen(seed), dtype=torch.float64).to(dtype)


def sdpa_with_weights(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """SDPA's output, and its weights read back with v = identity (out = weights @ I)."""
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale
    )
    seq_k = k.shape[-2]
    eye = torch.eye(seq_k, dtype=q.dtype).expand(*k.shape[:-2], seq_k, seq_k)
    w = F.scaled_dot_product_attention(
        q, k, eye, attn_mask=attn_mask, is_causal=is_causal, scale=scale
    )
    return out, w


# ----------------------------------------------------------------------------------------
# attend vs SDPA
# ----------------------------------------------------------------------------------------

# (q batch, k batch, v batch, seq_q, seq_k, d_k, d_v, mask shape or None)
SHAPES = [
    pytest.param((), (), (), 3, 5, 4, 6, None, id="2d-seq_q3-seq_k5"),
    pytest.param((2,), (2,), (2,), 7, 7, 8, 3, (7, 7), id="batch-square-mask(seq_q,seq_k)"),
    pytest.param(
        (2, 3), (2, 3), (2, 3), 5, 9, 8, 2, (2, 1, 1, 9), id="heads-mask(batch,1,1,seq_k)"
    ),
    pytest.param((2, 3), (2, 3), (2, 3), 6, 4, 16, 5, (2, 3, 6, 4), id="heads-full-mask"),
    pytest.param((4,), (4,), (4,), 5, 8, 4, 4, (4, 1, 8), id="padding-mask(batch,1,seq_k)"),
    pytest.param((2, 3), (1, 3), (3,), 4, 6, 8, 5, (6,), id="broadcast-batch-mask(seq_k)"),
    pytest.param((2, 1), (1, 3), (2, 3), 3, 5, 4, 2, (3, 1, 5), id="broadcast-heads"),
]


def _inputs(qb, kb, vb, seq_q, seq_k, d_k, d_v, mshape, seed, dtype):
    q = randn(*qb, seq_q, d_k, seed=seed, dtype=dtype)
    k = randn(*kb, seq_k, d_k, seed=seed + 1, dtype=dtype)
    v = randn(*vb, seq_k, d_v, seed=seed + 2, dtype=dtype)
    mask = None
    if mshape is not None:
        mask = torch.rand(mshape, generator=gen(seed + 3)) > 0.35
    return q, k, v, mask


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize(("qb", "kb", "vb", "seq_q", "seq_k", "d_k", "d_v", "mshape"), SHAPES)
def test_attend_matches_sdpa(qb, kb, vb, seq_q, seq_k, d_k, d_v, mshape, dtype):
    for seed in (0, 10, 20):
        q, k, v, mask = _inputs(qb, kb, vb, seq_q, seq_k, d_k, d_v, mshape, seed, dtype)
        out, w = attnlib.attend(q, k, v, mask)
        ref_out, ref_w = sdpa_with_weights(q, k, v, attn_mask=mask)
        assert out.dtype == dtype and w.dtype == dtype
        assert out.shape == ref_out.shape
        torch.testing.assert_close(out, ref_out, **TOL[dtype])
        torch.testing.assert_close(w, ref_w.expand(w.shape), **TOL[dtype])


def test_random_masks_include_fully_masked_rows():
    # The masked SHAPES cases above are only a strong test if some rows are fully masked.
    q, k, v, mask = _inputs((2, 3), (2, 3), (2, 3), 6, 4, 16, 5, (2, 3, 6, 4), 0, torch.float32)
    assert (~mask.any(-1)).any()
    out, w = attnlib.attend(q, k, v, mask)
    empty = ~mask.any(-1)
    assert torch.all(w[empty] == 0) and torch.all(out[empty] == 0)


@pytest.mark.parametrize(("seq_q", "seq_k"), [(5, 5), (3, 7), (7, 3)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_causal_matches_sdpa_is_causal(seq_q, seq_k, dtype):
    q, k, v, _ = _inputs((2, 2), (2, 2), (2, 2), seq_q, seq_k, 8, 3, None, 5, dtype)
    out, w = attnlib.attend(q, k, v, causal=True)
    ref_out, ref_w = sdpa_with_weights(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref_out, **TOL[dtype])
    torch.testing.assert_close(w, ref_w, **TOL[dtype])
    # causal=True is the top-left causal mask passed explicitly
    out2, w2 = attnlib.attend(q, k, v, attnlib.causal_mask(seq_q, seq_k, like=q))
    torch.testing.assert_close(out2, out, atol=0, rtol=0)
    torch.testing.assert_close(w2, w, atol=0, rtol=0)


@pytest.mark.parametrize(("seq_q", "seq_k"), [(1, 6), (3, 7), (5, 5), (6, 4)])
def test_bottom_right_causal_matches_sdpa_and_causal_bias(seq_q, seq_k):
    from torch.nn.attention.bias import causal_lower_right

    q, k, v, _ = _inputs((2,), (2,), (2,), seq_q, seq_k, 8, 3, None, 7, torch.float64)
    mask = attnlib.causal_mask(seq_q, seq_k, align="bottom_right", like=q)
    out, w = attnlib.attend(q, k, v, mask)
    ref_out, ref_w = sdpa_with_weights(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref_out, **TOL[torch.float64])
    torch.testing.assert_close(w, ref_w, **TOL[torch.float64])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns when seq_q > seq_k
        torch_bias = causal_lower_right(seq_q, seq_k)._materialize()
    assert torch.equal(mask, torch_bias)
    # the newest query (last row) sees every key
    assert torch.all(w[..., -1, :] > 0)


def test_causal_combines_with_mask():
    q, k, v, mask = _inputs((2,), (2,), (2,), 5, 5, 4, 3, (2, 1, 5), 11, torch.float64)
    out, w = attnlib.attend(q, k, v, mask, causal=True)
    both = mask & torch.ones(5, 5, dtype=torch.bool).tril()
    ref_out, ref_w = sdpa_with_weights(q, k, v, attn_mask=both)
    torch.testing.assert_close(out, ref_out, **TOL[torch.float64])
    torch.testing.assert_close(w, ref_w, **TOL[torch.float64])


def test_explicit_scale_matches_sdpa():
    q, k, v, _ = _inputs((2,), (2,), (2,), 4, 6, 8, 3, None, 3, torch.float64)
    for scale in (0.1, 1.0, 3.0, np.float32(0.5), 2):
        out, w = attnlib.attend(q, k, v, scale=scale)
        ref_out, ref_w = sdpa_with_weights(q, k, v, scale=float(scale))
        torch.testing.assert_close(out, ref_out, **TOL[torch.float64])
        torch.testing.assert_close(w, ref_w, **TOL[torch.float64])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "mask"])
def test_low_precision_matches_fp32_sdpa_and_keeps_dtype(dtype, masked):
    q, k, v, mask = _inputs((2, 2), (2, 2), (2, 2), 6, 9, 32, 8, (2, 1, 6, 9), 21, dtype)
    mask = mask if masked else None
    out, w = attnlib.attend(q, k, v, mask)
    assert out.dtype == dtype and w.dtype == dtype
    ref_out, ref_w = sdpa_with_weights(q.float(), k.float(), v.float(), attn_mask=mask)
    torch.testing.assert_close(out.float(), ref_out, **TOL[dtype])
    torch.testing.assert_close(w.float(), ref_w, **TOL[dtype])
    out_c, _ = attnlib.attend(q, k, v, mask, causal=True)
    assert out_c.dtype == dtype
    ref_c = F.scaled_dot_product_attention(
        q.float(),
        k.float(),
        v.float(),
        attn_mask=torch.ones(6, 9, dtype=torch.bool).tril() & (True if mask is None else mask),
    )
    torch.testing.assert_close(out_c.float(), ref_c, **TOL[dtype])


def test_gradients_match_sdpa_fp64():
    q, k, v, mask = _inputs((2, 2), (2, 2), (2, 2), 5, 6, 4, 3, (2, 1, 5, 6), 31, torch.float64)
    grads = []
    for fn in (
        lambda a, b, c: attnlib.attend(a, b, c, mask)[0],
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=mask),
    ):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        grads.append([t.grad for t in leaves])
    for mine, ref in zip(*grads, strict=True):
        torch.testing.assert_close(mine, ref, **TOL[torch.float64])


# ----------------------------------------------------------------------------------------
# numpy vs torch, fast path vs shared math
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("qb", "kb", "vb", "seq_q", "seq_k", "d_k", "d_v", "mshape"), SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_numpy_and_torch_agree_fp64(qb, kb, vb, seq_q, seq_k, d_k, d_v, mshape, causal):
    q, k, v, mask = _inputs(qb, kb, vb, seq_q, seq_k, d_k, d_v, mshape, 41, torch.float64)
    out_t, w_t = attnlib.attend(q, k, v, mask, causal=causal)
    np_mask = None if mask is None else mask.numpy()
    out_n, w_n = attnlib.attend(q.numpy(), k.numpy(), v.numpy(), np_mask, causal=causal)
    assert isinstance(out_n, np.ndarray) and isinstance(w_n, np.ndarray)
    assert out_n.dtype == np.float64 and w_n.dtype == np.float64
    np.testing.assert_allclose(out_n, out_t.numpy(), atol=1e-12, rtol=1e-10)
    np.testing.assert_allclose(w_n, np.broadcast_to(w_t.numpy(), w_n.shape), atol=1e-12)
    s_n = attnlib.scores(q.numpy(), k.numpy())
    np.testing.assert_allclose(s_n, attnlib.scores(q, k).numpy(), atol=1e-12, rtol=1e-10)
    x = np.linspace(-3, 3, 24).reshape(4, 6)
    np.testing.assert_allclose(
        attnlib.softmax(x), attnlib.softmax(torch.from_numpy(x)).numpy(), atol=1e-15
    )


def _fast_vs_math_case(masked: str, dtype):
    q, k, v, _ = _inputs((2, 3), (2, 3), (2, 3), 5, 7, 8, 4, None, 51, dtype)
    if masked == "none":
        mask = None
    elif masked == "random":
        mask = torch.rand(2, 1, 5, 7, generator=gen(52)) > 0.3
        mask[0, 0, 2] = True  # at least one row of each kind
    else:  # fully masked rows
        mask = torch.rand(2, 1, 5, 7, generator=gen(53)) > 0.3
        mask[0, 0, 1] = False
        mask[1, 0, 4] = False
    return q, k, v, mask


@pytest.mark.parametrize("masked", ["none", "random", "fully-masked-rows"])
@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_torch_fast_path_equals_shared_math(masked, grad, dtype):
    q, k, v, mask = _fast_vs_math_case(masked, dtype)
    scale = 1 / math.sqrt(q.shape[-1])
    results = {}
    for name in ("fast", "math"):
        leaves = [t.clone().requires_grad_(grad) for t in (q, k, v)]
        with torch.set_grad_enabled(grad):
            if name == "fast":
                out, w = _attend_torch_fast(*leaves, mask, scale)
            else:
                out, w = _attend_math(*leaves, mask, scale, B.TORCH)
        assert out.requires_grad == grad and w.requires_grad == grad
        gs = None
        if grad:
            (out.sum() + (w * w).sum()).backward()
            gs = [t.grad for t in leaves]
        results[name] = (out.detach(), w.detach(), gs)
    (o1, w1, g1), (o2, w2, g2) = results["fast"], results["math"]
    torch.testing.assert_close(o1, o2, **TOL[dtype])
    torch.testing.assert_close(w1, w2, **TOL[dtype])
    if mask is not None:
        assert torch.all(w1[(~mask).expand(w1.shape)] == 0)
    if grad:
        for a, b in zip(g1, g2, strict=True):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, **TOL[dtype])


def test_fast_path_with_v_batch_dims_larger_than_q_and_k():
    # v alone carries a batch dim: the score matrix must grow to the mask's full size.
    q, k = randn(5, 8, seed=1), randn(6, 8, seed=2)
    v = randn(3, 6, 4, seed=3)
    mask = torch.rand(3, 5, 6, generator=gen(4)) > 0.3
    out, w = attnlib.attend(q, k, v, mask)
    out_n, w_n = attnlib.attend(q.numpy(), k.numpy(), v.numpy(), mask.numpy())
    assert out.shape == (3, 5, 4) and w.shape == (3, 5, 6)
    np.testing.assert_allclose(out.numpy(), out_n, atol=1e-5)
    np.testing.assert_allclose(w.numpy(), w_n, atol=1e-6)
    # (SDPA itself fails on this broadcast; give it q and k at full size)
    ref_out, ref_w = sdpa_with_weights(q.expand(3, 5, 8), k.expand(3, 6, 8), v, attn_mask=mask)
    torch.testing.assert_close(out, ref_out, **TOL[torch.float32])
    torch.testing.assert_close(w, ref_w, **TOL[torch.float32])


def test_no_grad_path_does_not_modify_inputs():
    q, k, v, mask = _fast_vs_math_case("fully-masked-rows", torch.float32)
    copies = [t.clone() for t in (q, k, v, mask)]
    with torch.no_grad():
        attnlib.attend(q, k, v, mask, causal=True)
    for t, c in zip((q, k, v, mask), copies, strict=True):
        assert torch.equal(t, c)


# ----------------------------------------------------------------------------------------
# autograd
# ----------------------------------------------------------------------------------------


def _masked_problem():
    q, k, v, _ = _inputs((2,), (2,), (2,), 4, 5, 3, 2, None, 61, torch.float64)
    mask = torch.rand(2, 4, 5, generator=gen(62)) > 0.4
    mask[0, 2] = False  # query 2 of batch 0 may attend to nothing
    mask[1, 0] = True
    return q, k, v, mask


@pytest.mark.parametrize("causal", [False, True], ids=["mask", "mask+causal"])
def test_gradcheck_through_attend_with_fully_masked_row(causal):
    q, k, v, mask = _masked_problem()
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda a, b, c: attnlib.attend(a, b, c, mask, causal=causal), leaves, fast_mode=True
    )
    assert torch.autograd.gradcheck(
        lambda a, b, c: attnlib.attend(a, b, c, mask, causal=causal)[0][0, 2], leaves
    )  # the fully masked row alone, full Jacobian


def test_gradcheck_through_softmax_with_fully_masked_row():
    x = randn(3, 5, seed=63, dtype=torch.float64).requires_grad_()
    mask = torch.rand(3, 5, generator=gen(64)) > 0.4
    mask[1] = False
    assert torch.autograd.gradcheck(lambda t: attnlib.softmax(t, mask=mask), [x])


def test_fully_masked_row_has_zero_finite_gradients():
    q, k, v, mask = _masked_problem()
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, w = attnlib.attend(*leaves, mask)
    assert torch.all(out[0, 2] == 0) and torch.all(w[0, 2] == 0)
    # a loss that depends only on the fully masked row: every gradient is exactly 0
    (out[0, 2].sum() + w[0, 2].sum()).backward()
    for t in leaves:
        assert torch.isfinite(t.grad).all()
        assert torch.all(t.grad == 0)
    # a loss over everything: finite, and the masked query's own gradient is 0
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, w = attnlib.attend(*leaves, mask)
    (out.square().sum() + w.square().sum()).backward()
    for t in leaves:
        assert torch.isfinite(t.grad).all()
    assert torch.all(leaves[0].grad[0, 2] == 0)
    assert leaves[0].grad[0, 1].abs().sum() > 0


# ----------------------------------------------------------------------------------------
# properties (hypothesis)
# ----------------------------------------------------------------------------------------


@st.composite
def problems(draw):
    kind = draw(st.sampled_from(["numpy", "torch"]))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    seq_q, seq_k = draw(st.integers(1, 6)), draw(st.integers(1, 7))
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p_keep = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    q = rng.normal(size=(*batch, seq_q, d_k)) * draw(st.sampled_from([0.1, 1.0, 5.0]))
    k = rng.normal(size=(*batch, seq_k, d_k))
    v = rng.normal(size=(*batch, seq_k, d_v))
    mask = rng.random((*batch, seq_q, seq_k)) < p_keep
    perm = rng.permutation(seq_k)
    if kind == "torch":
        q, k, v, mask = (torch.from_numpy(a) for a in (q, k, v, mask))
    return q, k, v, mask, perm


def _np(x):
    return x.numpy() if isinstance(x, torch.Tensor) else x


@given(problems())
def test_property_rows_sum_to_one_or_zero_and_masked_weights_are_zero(problem):
    q, k, v, mask, _ = problem
    out, w = attnlib.attend(q, k, v, mask)
    w, m = _np(w), _np(mask)
    row_sum = w.sum(-1)
    expected = m.any(-1).astype(np.float64)  # 1 where something may be attended, else 0
    np.testing.assert_allclose(row_sum, expected, atol=1e-12)
    assert np.all(w[~m] == 0.0)  # exactly 0, not merely small
    assert np.all(w >= 0)
    assert np.all(_np(out)[~m.any(-1)] == 0.0)
    _, w_all = attnlib.attend(q, k, v)
    np.testing.assert_allclose(_np(w_all).sum(-1), 1.0, atol=1e-12)


@given(problems())
def test_property_permuting_keys_and_values_together(problem):
    q, k, v, mask, perm = problem
    out, w = attnlib.attend(q, k, v, mask)
    idx = torch.from_numpy(perm) if isinstance(q, torch.Tensor) else perm
    out_p, w_p = attnlib.attend(q, k[..., idx, :], v[..., idx, :], mask[..., idx])
    np.testing.assert_allclose(_np(out_p), _np(out), atol=1e-12)  # out unchanged
    np.testing.assert_allclose(_np(w_p), _np(w)[..., perm], atol=1e-12)  # columns permuted


@given(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=1, max_dims=3, max_side=6),
        elements=st.floats(-30, 30),
    ),
    st.floats(-1e3, 1e3),
    st.integers(0, 2**16),
)
def test_property_softmax_invariant_to_a_constant_per_row(x, c, seed):
    rng = np.random.default_rng(seed)
    shift = c * rng.random((*x.shape[:-1], 1))  # a different constant for every row
    w = attnlib.softmax(x)
    np.testing.assert_allclose(attnlib.softmax(x + shift), w, atol=1e-9)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-12)
    ref = torch.softmax(torch.from_numpy(x), dim=-1).numpy()
    np.testing.assert_allclose(w, ref, atol=1e-12)
    xt = torch.from_numpy(x + shift)
    torch.testing.assert_close(attnlib.softmax(xt), torch.from_numpy(w), atol=1e-9, rtol=0)


@given(problems(), st.integers(0, 2))
def test_property_softmax_with_mask_matches_torch(problem, axis_pick):
    q, k, _, mask, _ = problem
    s = attnlib.scores(q, k)
    axis = [-1, -2, 0][axis_pick] if s.ndim > 2 else [-1, -2, -1][axis_pick]
    w = _np(attnlib.softmax(s, axis=axis, mask=mask))
    st_ = torch.as_tensor(_np(s)).masked_fill(~torch.as_tensor(_np(mask)), -math.inf)
    ref = torch.softmax(st_, dim=axis).nan_to_num(0.0).numpy()  # all-masked: NaN -> 0
    np.testing.assert_allclose(w, ref, atol=1e-12)


# ----------------------------------------------------------------------------------------
# numerics
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lib", "dtype"),
    [(lib, dt) for lib in ("numpy", "torch") for dt in ("float16", "float32", "float64")]
    + [("torch", "bfloat16")],  # numpy has no bfloat16
)
def test_large_scores_do_not_overflow(lib, dtype):
    # scores with scale=1: 300*300 = 9e4 (above fp16's max 65504), 300*296 and -9e4.
    # Accumulated in fp16 they would be inf and the weights NaN. (All inputs are exact in
    # fp16 and bf16.)
    q = np.array([[300.0], [-300.0]])
    k = np.array([[300.0], [296.0], [-300.0]])
    v = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    if lib == "torch":
        tdt = getattr(torch, dtype)
        q, k, v = (torch.from_numpy(a).to(tdt) for a in (q, k, v))
    else:
        q, k, v = (a.astype(dtype) for a in (q, k, v))
    out, w = attnlib.attend(q, k, v, scale=1.0)
    w64 = np.asarray(_np(w.float() if lib == "torch" else w), dtype=np.float64)
    out64 = np.asarray(_np(out.float() if lib == "torch" else out), dtype=np.float64)
    assert np.isfinite(w64).all() and np.isfinite(out64).all()
    # exp(-1200) and exp(-1.8e5) vanish in every dtype: one-hot on key 0 (query 0), key 2 (query 1)
    np.testing.assert_array_equal(w64, [[1, 0, 0], [0, 0, 1]])
    np.testing.assert_array_equal(out64, [[1, 0], [2, 2]])
    assert str(out.dtype).endswith(dtype) and str(w.dtype).endswith(dtype)
    # softmax alone on scores of 1e4
    x = np.array([[1e4, 1e4 - 1.0, -1e4]])
    sm = attnlib.softmax(torch.from_numpy(x).float() if lib == "torch" else x.astype(np.float32))
    np.testing.assert_allclose(_np(sm), [[1 / (1 + math.exp(-1)), 1 / (1 + math.e), 0]], atol=1e-6)


def test_low_precision_accumulates_in_fp32():
    # 512 products of 16*16 = 256 each: the score is 131072, beyond fp16's range, while
    # every input (16.0) is exact in fp16. Only an fp32 accumulator gets it right.
    q = torch.full((1, 512), 16.0, dtype=torch.float16)
    k = torch.cat([q, -q])  # scores +131072 and -131072 (scale 1)
    v = torch.tensor([[1.0], [-1.0]], dtype=torch.float16)
    out, w = attnlib.attend(q, k, v, scale=1.0)
    assert out.dtype == torch.float16 and w.dtype == torch.float16
    assert torch.equal(w, torch.tensor([[1.0, 0.0]], dtype=torch.float16))
    assert torch.equal(out, torch.tensor([[1.0]], dtype=torch.float16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sm = attnlib.softmax(np.array([[6e4, 6e4, 0.0]], dtype=np.float16))
    assert sm.dtype == np.float16
    np.testing.assert_array_equal(sm, np.array([[0.5, 0.5, 0.0]], dtype=np.float16))


def test_no_numpy_warning_for_fully_masked_rows():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 2))
    mask = rng.random((2, 3, 5)) < 0.5
    mask[0, 1] = False
    mask[1] = False  # a whole batch entry masked
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        out, w = attnlib.attend(q, k, v, mask)
        sm = attnlib.softmax(np.zeros((2, 4), dtype=np.float32), mask=np.zeros((2, 4), bool))
        out_c, w_c = attnlib.attend(q[:, :3], k[:, :2], v[:, :2], causal=True)
    assert np.all(w[0, 1] == 0) and np.all(out[0, 1] == 0)
    assert np.all(w[1] == 0) and np.all(out[1] == 0)
    assert np.all(sm == 0) and sm.dtype == np.float32
    np.testing.assert_allclose(w_c.sum(-1), 1.0)


def test_fully_masked_rows_match_sdpa_zeros():
    q, k, v, mask = _masked_problem()
    out, _ = attnlib.attend(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.all(ref[0, 2] == 0)  # torch 2.13's SDPA: fully masked row -> 0
    torch.testing.assert_close(out, ref, **TOL[torch.float64])


def test_integer_input_to_softmax_is_converted():
    w = attnlib.softmax(np.array([[0, 0], [1, 1]]))
    assert w.dtype == np.float64
    np.testing.assert_allclose(w, 0.5)
    wt = attnlib.softmax(torch.tensor([[0, 0]]))
    assert wt.dtype == torch.get_default_dtype()


# ----------------------------------------------------------------------------------------
# scores()
# ----------------------------------------------------------------------------------------


def _loop_scores(q, k, scale):
    """Every query against every key, one dot product at a time (fp64)."""
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    out = np.zeros((*np.broadcast_shapes(q.shape[:-2], k.shape[:-2]), seq_q, seq_k))
    qb = np.broadcast_to(q, (*out.shape[:-2], *q.shape[-2:]))
    kb = np.broadcast_to(k, (*out.shape[:-2], *k.shape[-2:]))
    for idx in np.ndindex(out.shape[:-2]):
        for i in range(seq_q):
            for j in range(seq_k):
                out[(*idx, i, j)] = float(np.dot(qb[(*idx, i)], kb[(*idx, j)])) * scale
    return out


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_scores_default_scale_shape_and_values(lib):
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(2, 1, 3, 16)), rng.normal(size=(1, 4, 5, 16))
    ref = _loop_scores(q, k, 1 / 4)  # d_k = 16
    if lib == "torch":
        q, k = torch.from_numpy(q), torch.from_numpy(k)
    s = attnlib.scores(q, k)
    assert tuple(s.shape) == (2, 4, 3, 5)  # (..., seq_q, seq_k)
    assert type(s) is type(q)
    np.testing.assert_allclose(_np(s), ref, atol=1e-12)
    s2 = attnlib.scores(q, k, scale=0.3)
    np.testing.assert_allclose(_np(s2), ref * 4 * 0.3, atol=1e-12)
    s3 = attnlib.scores(q, k, scale=1)
    np.testing.assert_allclose(_np(s3), ref * 4, atol=1e-12)


def test_scores_low_precision_dtype_and_weights_agree_with_softmax_of_scores():
    q, k, v = randn(2, 4, 8, seed=1), randn(2, 6, 8, seed=2), randn(2, 6, 3, seed=3)
    s = attnlib.scores(q.half(), k.half())
    assert s.dtype == torch.float16
    torch.testing.assert_close(
        s.float(), q.half().float() @ k.half().float().mT / math.sqrt(8), atol=4e-3, rtol=2e-3
    )
    mask = torch.rand(2, 4, 6, generator=gen(5)) > 0.5
    _, w = attnlib.attend(q, k, v, mask)
    torch.testing.assert_close(w, attnlib.softmax(attnlib.scores(q, k), mask=mask))


# ----------------------------------------------------------------------------------------
# errors: type, and a message that names the argument and its shapes/dtypes
# ----------------------------------------------------------------------------------------

_q = torch.zeros(2, 5, 8)
_k = torch.zeros(2, 6, 8)
_v = torch.zeros(2, 6, 4)


def esc(*parts: str) -> str:
    """A regex matching the given literal parts in order."""
    return ".*".join(re.escape(p) for p in parts)


ERRORS = [
    pytest.param(
        lambda: attnlib.attend(_q, torch.zeros(2, 6, 7), _v),
        ValueError,
        esc("q has d_k=8", "(2, 5, 8)", "k has d_k=7", "(2, 6, 7)"),
        id="d_k-mismatch",
    ),
    pytest.param(
        lambda: attnlib.scores(_q.numpy(), np.zeros((6, 7), np.float32)),
        ValueError,
        esc("scores: q has d_k=8", "k has d_k=7", "(6, 7)"),
        id="scores-d_k-mismatch",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, torch.zeros(2, 7, 4)),
        ValueError,
        esc("k has seq_k=6", "(2, 6, 8)", "v has seq_k=7", "(2, 7, 4)"),
        id="seq_k-mismatch-k-v",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, torch.zeros(3, 6, 8), torch.zeros(3, 6, 4)),
        ValueError,
        esc("batch dims of q and k do not broadcast", "q (2,)", "k (3,)"),
        id="batch-not-broadcastable",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, _v, torch.ones(4, 6, dtype=torch.bool)),
        ValueError,
        esc("mask of shape (4, 6)", "(2, 5, 6)"),
        id="mask-not-broadcastable",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, _v, torch.ones(3, 2, 5, 6, dtype=torch.bool)),
        ValueError,
        esc("mask of shape (3, 2, 5, 6)", "(2, 5, 6)"),
        id="mask-larger-than-scores",
    ),
    pytest.param(
        lambda: attnlib.softmax(np.zeros((3, 4)), mask=np.ones((3, 5), bool)),
        ValueError,
        esc("softmax: mask of shape (3, 5)", "(3, 4)"),
        id="softmax-mask-not-broadcastable",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, _v, torch.ones(5, 6)),
        TypeError,
        esc("mask (torch.Tensor, shape (5, 6), float32) must be boolean"),
        id="float-mask",
    ),
    pytest.param(
        lambda: attnlib.attend(_q.numpy(), _k.numpy(), _v.numpy(), np.ones((5, 6), np.int64)),
        TypeError,
        esc("mask (numpy.ndarray, shape (5, 6), int64) must be boolean"),
        id="int-mask",
    ),
    pytest.param(
        lambda: attnlib.softmax(torch.zeros(5, 6), mask=torch.ones(5, 6, dtype=torch.uint8)),
        TypeError,
        esc("softmax: mask (torch.Tensor, shape (5, 6), uint8) must be boolean"),
        id="softmax-uint8-mask",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, _v, [[True] * 6] * 5),
        TypeError,
        esc("mask must be a boolean numpy.ndarray or torch.Tensor", "got list"),
        id="list-mask",
    ),
    pytest.param(
        lambda: attnlib.attend(_q.numpy(), _k, _v),
        TypeError,
        esc(
            "q (numpy.ndarray, shape (2, 5, 8), float32)", "k (torch.Tensor", "mix numpy and torch"
        ),
        id="q-numpy-k-torch",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, _v.numpy()),
        TypeError,
        esc("q (torch.Tensor", "v (numpy.ndarray, shape (2, 6, 4), float32)", "mix numpy"),
        id="v-numpy",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, _v, np.ones((5, 6), bool)),
        TypeError,
        esc("mask (numpy.ndarray, shape (5, 6), bool)", "not the same kind", "torch.Tensor"),
        id="mask-kind-mismatch",
    ),
    pytest.param(
        lambda: attnlib.softmax(np.zeros((5, 6)), mask=torch.ones(5, 6, dtype=torch.bool)),
        TypeError,
        esc("mask (torch.Tensor, shape (5, 6), bool)", "not the same kind", "numpy.ndarray"),
        id="softmax-mask-kind-mismatch",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k.double(), _v),
        TypeError,
        esc(
            "q (torch.Tensor, shape (2, 5, 8), float32)",
            "k (torch.Tensor, shape (2, 6, 8), float64)",
            "different dtypes",
        ),
        id="mixed-dtypes-q-k",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, _v.half()),
        TypeError,
        esc("float32", "v (torch.Tensor, shape (2, 6, 4), float16)", "different dtypes"),
        id="mixed-dtypes-q-v",
    ),
    pytest.param(
        lambda: attnlib.attend(torch.zeros(8), _k[0], _v[0]),
        ValueError,
        esc("q (torch.Tensor, shape (8,), float32) needs at least 2 dims"),
        id="q-1d",
    ),
    pytest.param(
        lambda: attnlib.attend(_q[0], _k[0], torch.zeros(6)),
        ValueError,
        esc("v (torch.Tensor, shape (6,), float32) needs at least 2 dims"),
        id="v-1d",
    ),
    pytest.param(
        lambda: attnlib.scores(np.zeros(8), np.zeros((6, 8))),
        ValueError,
        esc("scores: q (numpy.ndarray, shape (8,), float64) needs at least 2 dims"),
        id="scores-q-1d",
    ),
    pytest.param(
        lambda: attnlib.softmax(np.array(1.0)),
        ValueError,
        esc("softmax: x (numpy.ndarray, shape (), float64) needs at least 1 dim"),
        id="softmax-0d",
    ),
    pytest.param(
        lambda: attnlib.attend([[1.0, 2.0]], _k[0], _v[0]),
        TypeError,
        esc("q must be a numpy.ndarray or a torch.Tensor, got list"),
        id="q-list",
    ),
    pytest.param(
        lambda: attnlib.softmax(3.0),
        TypeError,
        esc("x must be a numpy.ndarray or a torch.Tensor, got float"),
        id="softmax-float",
    ),
    pytest.param(
        lambda: attnlib.attend(_q.long(), _k.long(), _v.long()),
        TypeError,
        esc("q (torch.Tensor, shape (2, 5, 8), int64) must have a floating-point dtype"),
        id="int-q",
    ),
    pytest.param(
        lambda: attnlib.softmax(np.ones((2, 3), bool)),
        TypeError,
        esc("x (numpy.ndarray, shape (2, 3), bool) must have a floating-point dtype"),
        id="bool-x",
    ),
    pytest.param(
        lambda: attnlib.softmax(np.zeros((2, 3)), axis=2),
        ValueError,
        esc("softmax: axis=2 is out of range for an input with 2 dims"),
        id="axis-out-of-range",
    ),
    pytest.param(
        lambda: attnlib.softmax(np.zeros((2, 3)), axis=-3),
        ValueError,
        esc("axis=-3 is out of range"),
        id="axis-negative-out-of-range",
    ),
    pytest.param(
        lambda: attnlib.softmax(np.zeros((2, 3)), axis=1.0),
        TypeError,
        esc("softmax: axis must be an int, got float"),
        id="axis-float",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, _v, scale="0.1"),
        TypeError,
        esc("attend: scale must be a number or None, got str"),
        id="scale-str",
    ),
    pytest.param(
        lambda: attnlib.scores(_q, _k, scale=True),
        TypeError,
        esc("scores: scale must be a number or None, got bool"),
        id="scale-bool",
    ),
    pytest.param(
        lambda: attnlib.attend(_q, _k, _v, scale=math.inf),
        ValueError,
        esc("attend: scale must be finite, got inf"),
        id="scale-inf",
    ),
    pytest.param(
        lambda: attnlib.scores(_q, _k, scale=math.nan),
        ValueError,
        esc("scores: scale must be finite, got nan"),
        id="scale-nan",
    ),
]


@pytest.mark.parametrize(("call", "error", "pattern"), ERRORS)
def test_error_messages(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
