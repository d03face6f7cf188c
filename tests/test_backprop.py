"""attnlib.backprop: the hand-written backward pass of attention.

Oracles: torch autograd through an independent float64 attention (plain matmul/softmax,
masks by -inf), torch.autograd.gradcheck (finite differences) on the numpy backward wrapped
as an autograd Function, and autograd through the projections.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlib import backprop as BP


def _oracle_attention(q, k, v, mask=None):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    w = torch.softmax(s, dim=-1)
    w = torch.nan_to_num(w, nan=0.0)  # fully masked rows: weight 0
    return w @ v


def _autograd_grads(q, k, v, d_out, mask=None):
    t = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v)]
    m = None if mask is None else torch.as_tensor(mask)
    out = _oracle_attention(*t, mask=m)
    out.backward(torch.as_tensor(d_out))
    return [x.grad.numpy() for x in t]


SHAPES = [
    # (q batch dims, kv batch dims, seq_q, seq_k, d_k, d_v)
    ((), (), 3, 5, 4, 2),
    ((), (), 5, 3, 2, 6),
    ((2,), (2,), 4, 4, 3, 3),
    ((2, 3), (2, 3), 2, 7, 5, 1),
    ((1,), (1,), 1, 1, 3, 2),
    ((3,), (), 4, 6, 2, 5),  # keys and values shared by every batch row (broadcast)
]


@pytest.mark.parametrize(("qb", "kb", "seq_q", "seq_k", "d_k", "d_v"), SHAPES)
def test_backward_matches_autograd(qb, kb, seq_q, seq_k, d_k, d_v):
    rng = np.random.default_rng(seq_q * 100 + seq_k * 10 + d_k)
    q = rng.standard_normal((*qb, seq_q, d_k))
    k = rng.standard_normal((*kb, seq_k, d_k))
    v = rng.standard_normal((*kb, seq_k, d_v))
    d_out = rng.standard_normal((*np.broadcast_shapes(qb, kb), seq_q, d_v))
    got = BP.attention_backward(q, k, v, d_out)
    want = _autograd_grads(q, k, v, d_out)
    for name, g, w in zip("qkv", got, want, strict=True):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=f"d{name}")


def test_backward_with_causal_padding_and_fully_masked_rows():
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 6, 3))
    v, d_out = rng.standard_normal((2, 6, 2)), rng.standard_normal((2, 4, 2))
    mask = np.tril(np.ones((4, 6), dtype=bool), k=2)[None] & (np.arange(6) < 5)[None, None]
    mask = np.repeat(mask, 2, axis=0)
    mask[1, 2] = False  # one query that may attend to nothing
    got = BP.attention_backward(q, k, v, d_out, mask=mask)
    want = _autograd_grads(q, k, v, d_out, mask=mask)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
        assert np.isfinite(g).all()
    dq, dk, dv = got
    assert np.all(dq[1, 2] == 0)  # the empty row gets no gradient
    assert np.all(dk[:, 5] == 0) and np.all(dv[:, 5] == 0)  # the padded key gets none


def test_a_different_scale_is_respected():
    rng = np.random.default_rng(8)
    q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    d_out = rng.standard_normal((3, 2))
    # scale=1 equals the default scale applied to q * 2 (since 1/sqrt(4) = 1/2)
    dq1, dk1, dv1 = BP.attention_backward(q, k, v, d_out, scale=1.0)
    dq2, dk2, dv2 = BP.attention_backward(2 * q, k, v, d_out)
    np.testing.assert_allclose(dv1, dv2, atol=1e-12)
    np.testing.assert_allclose(dk1, dk2, atol=1e-12)
    np.testing.assert_allclose(dq1, 2 * dq2, atol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_gradcheck_fp64(masked):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 2, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, 4, 2, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, 4, 3, dtype=torch.float64, generator=g, requires_grad=True)
    mask = None
    if masked:
        mask = torch.ones(2, 3, 4, dtype=torch.bool)
        mask[0, :, 2:] = False
        mask[1, 1] = False  # a fully masked row
    assert torch.autograd.gradcheck(
        lambda q, k, v: BP.manual_attention(q, k, v, mask), (q, k, v), eps=1e-6, atol=1e-8
    )


def test_gradcheck_catches_a_wrong_backward():
    """The gradcheck above can fail: a backward without the softmax correction fails it."""

    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return _oracle_attention(q, k, v)

        @staticmethod
        def backward(ctx, d_out):
            q, k, v = ctx.saved_tensors
            c = 1 / math.sqrt(q.shape[-1])
            A = torch.softmax(q @ k.transpose(-1, -2) * c, -1)
            dS = A * (d_out @ v.transpose(-1, -2))  # diagonal of the Jacobian only
            return dS @ k * c, dS.transpose(-1, -2) @ q * c, A.transpose(-1, -2) @ d_out

    g = torch.Generator().manual_seed(1)
    args = [torch.randn(3, 4, dtype=torch.float64, generator=g, requires_grad=True)
            for _ in range(3)]  # fmt: skip
    assert not torch.autograd.gradcheck(Wrong.apply, args, raise_exception=False)


def test_projection_grads_match_autograd():
    rng = np.random.default_rng(9)
    x_q, x_kv = rng.standard_normal((2, 3, 6)), rng.standard_normal((2, 5, 6))
    W = [rng.standard_normal((6, d)) for d in (4, 4, 2)]
    d_out = rng.standard_normal((2, 3, 2))
    got = BP.projection_grads(x_q, x_kv, *W, d_out)
    t = [torch.tensor(w, requires_grad=True) for w in W]
    xq, xkv = torch.as_tensor(x_q), torch.as_tensor(x_kv)
    out = _oracle_attention(xq @ t[0], xkv @ t[1], xkv @ t[2])
    out.backward(torch.as_tensor(d_out))
    for name, g, w in zip(("W_q", "W_k", "W_v"), got, t, strict=True):
        np.testing.assert_allclose(g, w.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        (((3, 4), (5, 3), (5, 2), (3, 2)), "d_k"),
        (((3, 4), (5, 4), (6, 2), (3, 2)), "seq_k"),
        (((3, 4), (5, 4), (5, 2), (2, 3)), "d_out"),
        (((4,), (5, 4), (5, 2), (3, 2)), "2 dims"),
    ],
)
def test_bad_shapes_are_named(shapes, match):
    arrays = [np.zeros(s) for s in shapes]
    with pytest.raises(ValueError, match=match):
        BP.attention_backward(*arrays)


def test_torch_input_is_refused_with_a_clear_message():
    with pytest.raises(TypeError, match="attention_backward: q must be a numpy.ndarray, got torch"):
        BP.attention_backward(torch.zeros(3, 4), np.zeros((5, 4)), np.zeros((5, 2)),
                              np.zeros((3, 2)))  # fmt: skip


def test_scores_are_identifiable_but_matrices_are_not():
    g = torch.Generator().manual_seed(2)
    d_model, d_k = 5, 3
    Wq_t = torch.randn(d_model, d_k, generator=g, dtype=torch.float64)
    Wk_t = torch.randn(d_model, d_k, generator=g, dtype=torch.float64)
    x = torch.randn(16, 10, d_model, generator=g, dtype=torch.float64)
    Wq, Wk, h = BP.fit_attention_pattern(x, Wq_t, Wk_t, steps=150, lr=0.05, progress=False)
    assert h["loss"][-1] < 1e-5 < h["loss"][0]
    M, M_t = Wq @ Wk.T, Wq_t @ Wk_t.T
    assert float((M - M_t).norm() / M_t.norm()) < 0.01
    assert float((Wq - Wq_t).norm() / Wq_t.norm()) > 0.2
    # and the student equals the teacher up to an invertible map A: W_q A, W_k A^{-T}
    A = torch.linalg.lstsq(Wq, Wq_t).solution  # (d_k, d_k)
    torch.testing.assert_close(Wq @ A, Wq_t, rtol=0, atol=1e-2)
    torch.testing.assert_close(Wk @ torch.linalg.inv(A).T, Wk_t, rtol=0, atol=1e-2)


def test_fit_attention_pattern_checks_shapes():
    with pytest.raises(ValueError, match="same shape"):
        BP.fit_attention_pattern(torch.zeros(1, 2, 3), torch.zeros(3, 2), torch.zeros(3, 1),
                                 steps=1)  # fmt: skip
    with pytest.raises(ValueError, match="d_model=3"):
        BP.fit_attention_pattern(torch.zeros(1, 2, 4), torch.zeros(3, 2), torch.zeros(3, 2),
                                 steps=1)  # fmt: skip
