"""attnlib.projections against torch's nn.Linear and nn.MultiheadAttention as oracles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from attnlib.projections import QKVProjection, linear, project

SHAPES = [
    # (leading dims of x, in_features, out_features)
    ((5,), 4, 3),
    ((2, 3), 6, 2),
    ((2, 4, 3), 5, 7),
    ((), 3, 8),  # a single vector
]


@pytest.mark.parametrize(("lead", "d_in", "d_out"), SHAPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_matches_nn_linear(lead, d_in, d_out, bias, dtype):
    torch.manual_seed(0)
    layer = nn.Linear(d_in, d_out, bias=bias, dtype=dtype)
    x = torch.randn(*lead, d_in, dtype=dtype)
    b = layer.bias.detach() if bias else None
    expected = layer(x).detach()
    got = linear(x, layer.weight.detach(), b)
    assert got.shape == expected.shape == (*lead, d_out)
    assert got.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol)
    # numpy in, numpy out, same numbers
    got_np = linear(x.numpy(), layer.weight.detach().numpy(), None if b is None else b.numpy())
    assert isinstance(got_np, np.ndarray) and got_np.dtype == x.numpy().dtype
    np.testing.assert_allclose(got_np, expected.numpy(), rtol=tol, atol=tol)


def test_linear_keeps_autograd():
    torch.manual_seed(1)
    layer = nn.Linear(4, 3, dtype=torch.float64)
    x = torch.randn(5, 4, dtype=torch.float64)
    linear(x, layer.weight, layer.bias).sum().backward()
    g_mine = layer.weight.grad.clone()
    layer.weight.grad = None
    layer(x).sum().backward()
    torch.testing.assert_close(g_mine, layer.weight.grad)
    # d(sum)/d(weight[o, i]) = sum over rows of x[:, i], for every output o
    torch.testing.assert_close(g_mine, x.sum(0).expand(3, 4))


def test_project_matches_three_bias_free_linears():
    torch.manual_seed(2)
    d_model, d_k, d_v = 6, 4, 3
    lin = [nn.Linear(d_model, d, bias=False, dtype=torch.float64) for d in (d_k, d_k, d_v)]
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    mats = [layer.weight.detach().T for layer in lin]  # (d_model, d_out)
    q, k, v = project(x, *mats)
    assert q.shape == (2, 5, d_k) and k.shape == (2, 5, d_k) and v.shape == (2, 5, d_v)
    for got, layer in zip((q, k, v), lin, strict=True):
        torch.testing.assert_close(got, layer(x).detach(), rtol=1e-12, atol=1e-12)
    # numpy version gives the same numbers
    qn, kn, vn = project(x.numpy(), *(m.numpy() for m in mats))
    np.testing.assert_allclose(qn, q.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vn, v.numpy(), rtol=1e-12, atol=1e-12)


def test_project_rows_are_projected_independently():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 6))
    W_q, W_k, W_v = (
        rng.standard_normal((6, 4)),
        rng.standard_normal((6, 4)),
        rng.standard_normal((6, 3)),
    )
    q, _, v = project(x, W_q, W_k, W_v)
    for i in range(5):
        np.testing.assert_allclose(q[i], x[i] @ W_q, rtol=1e-12)
        np.testing.assert_allclose(v[i], x[i] @ W_v, rtol=1e-12)


def test_qkv_projection_matches_separate_nn_linears():
    torch.manual_seed(4)
    module = QKVProjection(d_model=8, d_k=4, d_v=3)
    assert module.W_q.weight.shape == (4, 8) and module.W_v.weight.shape == (3, 8)
    oracle = {name: nn.Linear(8, d) for name, d in (("W_q", 4), ("W_k", 4), ("W_v", 3))}
    with torch.no_grad():
        for name, layer in oracle.items():
            layer.weight.copy_(getattr(module, name).weight)
            layer.bias.copy_(getattr(module, name).bias)
    x = torch.randn(2, 5, 8)
    for got, name in zip(module(x), ("W_q", "W_k", "W_v"), strict=True):
        torch.testing.assert_close(got, oracle[name](x))
    assert {n for n, _ in module.named_parameters()} == {
        f"{w}.{p}" for w in ("W_q", "W_k", "W_v") for p in ("weight", "bias")
    }


def test_qkv_projection_from_matrices_equals_project_plus_bias():
    rng = np.random.default_rng(5)
    d_model, d_k, d_v = 5, 3, 2
    W_q, W_k = rng.standard_normal((d_model, d_k)), rng.standard_normal((d_model, d_k))
    W_v = rng.standard_normal((d_model, d_v))
    b_q, b_k, b_v = rng.standard_normal(d_k), rng.standard_normal(d_k), rng.standard_normal(d_v)
    x = rng.standard_normal((4, d_model))
    module = QKVProjection.from_matrices(W_q, W_k, W_v, b_q=b_q, b_k=b_k, b_v=b_v)
    assert module.W_q.weight.dtype == torch.float64
    q, k, v = (t.detach().numpy() for t in module(torch.from_numpy(x)))
    eq, ek, ev = project(x, W_q, W_k, W_v)
    np.testing.assert_allclose(q, eq + b_q, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(k, ek + b_k, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(v, ev + b_v, rtol=1e-12, atol=1e-12)
    back = module.matrices()
    np.testing.assert_array_equal(back["W_q"].numpy(), W_q)
    np.testing.assert_array_equal(back["W_v"].numpy(), W_v)
    no_bias = QKVProjection.from_matrices(W_q, W_k, W_v)
    assert no_bias.W_q.bias is None
    np.testing.assert_allclose(
        no_bias(torch.from_numpy(x))[1].detach().numpy(), ek, rtol=1e-12, atol=1e-12
    )


def test_qkv_projection_matches_multihead_attention_in_projection():
    """nn.MultiheadAttention packs W_q, W_k, W_v as one (3·d_model, d_model) weight."""
    torch.manual_seed(6)
    d_model = 6
    mha = nn.MultiheadAttention(d_model, num_heads=1, batch_first=True)
    W = mha.in_proj_weight.detach()  # (3 * d_model, d_model): rows of W_q, then W_k, then W_v
    b = mha.in_proj_bias.detach()
    module = QKVProjection.from_matrices(
        *(W[i * d_model : (i + 1) * d_model].T for i in range(3)),
        b_q=b[:d_model],
        b_k=b[d_model : 2 * d_model],
        b_v=b[2 * d_model :],
    )
    x = torch.randn(2, 5, d_model)
    q, k, v = module(x)
    # oracle: MHA with one head and an identity output projection returns softmax(qkᵀ/√d)v
    with torch.no_grad():
        mha.out_proj.weight.copy_(torch.eye(d_model))
        mha.out_proj.bias.zero_()
    out, weights = mha(x, x, x, need_weights=True)
    expected_w = torch.softmax(q @ k.transpose(-2, -1) / d_model**0.5, dim=-1)
    torch.testing.assert_close(weights, expected_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, expected_w @ v, rtol=1e-5, atol=1e-6)


def test_gradients_reach_each_projection_separately():
    torch.manual_seed(7)
    module = QKVProjection(4, 3, 2)
    x = torch.randn(5, 4)
    q, k, v = module(x)
    (q.sum() + 2 * v.sum()).backward()
    assert module.W_q.weight.grad is not None and module.W_q.weight.grad.abs().sum() > 0
    assert module.W_v.weight.grad.abs().sum() > 0
    assert module.W_k.weight.grad is None  # k was not used: no gradient reaches W_k


# ----------------------------------------------------------------------------------------
# Bad input: clear errors naming the argument and the shapes.
# ----------------------------------------------------------------------------------------


def test_linear_errors_name_argument_and_shapes():
    x = np.zeros((5, 4))
    with pytest.raises(ValueError, match=r"x has 4 features.*in_features=3.*\(2, 3\)"):
        linear(x, np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"bias has shape \(3,\).*out_features=2"):
        linear(x, np.zeros((2, 4)), np.zeros(3))
    with pytest.raises(TypeError, match="mix numpy and torch"):
        linear(x, torch.zeros(2, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="different dtypes"):
        linear(x, np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(TypeError, match="floating-point"):
        linear(np.zeros((5, 4), dtype=int), np.zeros((2, 4)))
    with pytest.raises(TypeError, match="must be a numpy.ndarray or a torch.Tensor"):
        linear([[1.0, 2.0]], np.zeros((2, 2)))
    with pytest.raises(ValueError, match="weight.*must be 2-D"):
        linear(x, np.zeros((1, 2, 4)))


def test_project_errors_name_argument_and_shapes():
    x = np.zeros((5, 6))
    ok = np.zeros((6, 4))
    with pytest.raises(ValueError, match=r"x has d_model=6.*W_k has d_model=4 \(shape \(4, 6\)\)"):
        project(x, ok, np.zeros((4, 6)), np.zeros((6, 3)))
    with pytest.raises(ValueError, match=r"W_q has d_k=4.*W_k has d_k=3"):
        project(x, ok, np.zeros((6, 3)), np.zeros((6, 3)))
    with pytest.raises(ValueError, match="x.*needs at least 2"):
        project(np.zeros(6), ok, ok, ok)
    with pytest.raises(TypeError, match="mix numpy and torch"):
        project(x, ok, ok, torch.zeros(6, 3, dtype=torch.float64))


def test_qkv_projection_errors():
    with pytest.raises(ValueError, match="QKVProjection: d_k must be >= 1, got 0"):
        QKVProjection(4, 0)
    with pytest.raises(TypeError, match="QKVProjection: d_model must be an int, got float"):
        QKVProjection(4.0, 2)
    module = QKVProjection(4, 3)
    assert module.d_v == 3
    with pytest.raises(ValueError, match=r"shape \(2, 5\).*d_model=4"):
        module(torch.zeros(2, 5))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        module(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="all of b_q, b_k, b_v or none"):
        QKVProjection.from_matrices(
            np.zeros((4, 3)), np.zeros((4, 3)), np.zeros((4, 2)), b_q=np.zeros(3)
        )
    with pytest.raises(ValueError, match="do not fit together"):
        QKVProjection.from_matrices(np.zeros((4, 3)), np.zeros((4, 2)), np.zeros((4, 2)))
