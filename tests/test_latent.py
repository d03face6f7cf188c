"""Multi-head latent attention (lesson 14): absorbed == decompress-then-attend.

Oracles: keys and values decompressed by explicit einsums, scored by attnlib.scores and by
torch's scaled_dot_product_attention; the whole sequence at once for cached decoding; fp64
throughout for the equalities (tolerance 1e-10, measured values are ~1e-15).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import attnlib
from attnlib.kv_cache import kv_cache_bytes
from attnlib.latent import LatentAttention, LatentCache, absorbed_scores
from attnlib.positions import apply_rotary

TOL = 1e-10


def _rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _layer(d_rope, *, d_model=32, n_heads=4, d_latent=12, seed=0):
    torch.manual_seed(seed)
    return LatentAttention(d_model, n_heads, d_latent, d_rope=d_rope).double()


def _decompressed_scores(q, c, W_uk, q_rope=None, k_rope=None):
    """The oracle: build every head's key from the latent, then q · k."""
    k = torch.einsum("hdl,bsl->bhsd", W_uk, c)  # (batch, n_heads, seq_k, d_head)
    d_rope = 0 if q_rope is None else q_rope.shape[-1]
    s = attnlib.scores(q, k, scale=1.0)  # (batch, n_heads, seq_q, seq_k)
    if q_rope is not None:
        s = s + torch.einsum("bhtr,bsr->bhts", q_rope, k_rope)
    return s / (q.shape[-1] + d_rope) ** 0.5


# ---- absorbed_scores ----------------------------------------------------------------------


@pytest.mark.parametrize("d_rope", [0, 4])
def test_absorbed_scores_equal_decompress_then_score_fp64(d_rope):
    batch, n_heads, seq_q, seq_k, d_head, d_latent = 2, 3, 5, 7, 8, 6
    q, c = _rand(batch, n_heads, seq_q, d_head), _rand(batch, seq_k, d_latent, seed=1)
    W_uk = _rand(n_heads, d_head, d_latent, seed=2)
    rope = {}
    if d_rope:
        rope = {
            "q_rope": apply_rotary(_rand(batch, n_heads, seq_q, d_rope, seed=3)),
            "k_rope": apply_rotary(_rand(batch, seq_k, d_rope, seed=4)),
        }
    got = absorbed_scores(q, c, W_uk, **rope)
    want = _decompressed_scores(q, c, W_uk, rope.get("q_rope"), rope.get("k_rope"))
    assert got.shape == (batch, n_heads, seq_q, seq_k)
    assert (got - want).abs().max().item() <= TOL
    # numpy in, numpy out, same numbers
    np_rope = {name: t.numpy() for name, t in rope.items()}
    got_np = absorbed_scores(q.numpy(), c.numpy(), W_uk.numpy(), **np_rope)
    assert isinstance(got_np, np.ndarray) and np.abs(got_np - want.numpy()).max() <= TOL


def test_forgetting_the_rotary_part_changes_the_scores():
    q, c, W_uk = _rand(1, 2, 3, 4), _rand(1, 5, 6, seed=1), _rand(2, 4, 6, seed=2)
    q_rope, k_rope = _rand(1, 2, 3, 2, seed=3), _rand(1, 5, 2, seed=4)
    with_rope = absorbed_scores(q, c, W_uk, q_rope=q_rope, k_rope=k_rope, scale=1.0)
    without = absorbed_scores(q, c, W_uk, scale=1.0)
    assert (with_rope - without).abs().max() > 0.1


def test_rotary_on_the_decompressed_key_cannot_be_absorbed():
    """Why the decoupled rotary key exists.

    With RoPE on the rebuilt key, score(i, j) = (R_i q) · (R_j W_uk c_j) = a_ij · c_j with
    a_ij = W_ukᵀ R_iᵀ R_j q. Since the score is linear in c_j and c_j can be anything,
    a_ij is the only vector that gives it; an absorbed query would need a_ij to be the same
    for every key j. It is not: it depends on j - i. Without rotation it is the same.
    """
    d_head, d_latent, seq = 8, 6, 5
    q, W_uk = _rand(d_head), _rand(d_head, d_latent, seed=1)
    c = _rand(seq, d_latent, seed=2)
    i = seq - 1  # the query's position
    q_rot = apply_rotary(q[None], [i])[0]  # (d_head,)
    eye = torch.eye(d_head, dtype=torch.float64)
    a = []
    for j in range(seq):
        R_j = apply_rotary(eye, [j] * d_head).T  # (d_head, d_head): x -> R_j x
        a.append(W_uk.T @ R_j.T @ q_rot)  # (d_latent,): the query absorbed for key j
        true = q_rot @ (R_j @ (W_uk @ c[j]))  # RoPE applied to the decompressed key
        assert abs(float(a[j] @ c[j] - true)) <= TOL  # a_ij does give the score ...
    spread = max((a_j - a[0]).norm().item() for a_j in a)
    assert spread > 0.1  # ... but it changes with the key: nothing to absorb once
    a_plain = [W_uk.T @ q for _ in range(seq)]  # no rotation: one absorbed query for all keys
    assert max((a_j - a_plain[0]).norm().item() for a_j in a_plain) == 0


def test_absorbed_scores_errors_name_the_argument_and_shapes():
    q, c, W_uk = torch.zeros(1, 2, 3, 4), torch.zeros(1, 5, 6), torch.zeros(2, 4, 6)
    with pytest.raises(ValueError, match=r"W_uk \(torch.Tensor, shape \(2, 5, 6\).*\(2, 4, 6\)"):
        absorbed_scores(q, c, torch.zeros(2, 5, 6))
    with pytest.raises(ValueError, match=r"c \(torch.Tensor, shape \(2, 5, 6\)"):
        absorbed_scores(q, torch.zeros(2, 5, 6), W_uk)
    with pytest.raises(ValueError, match="q .*must have 4 dims"):
        absorbed_scores(torch.zeros(2, 3, 4), c, W_uk)
    with pytest.raises(ValueError, match="both q_rope and k_rope"):
        absorbed_scores(q, c, W_uk, q_rope=torch.zeros(1, 2, 3, 2))
    with pytest.raises(ValueError, match=r"k_rope .*\(1, 5, 2\)"):
        absorbed_scores(q, c, W_uk, q_rope=torch.zeros(1, 2, 3, 2), k_rope=torch.zeros(1, 4, 2))
    with pytest.raises(TypeError, match="different dtypes"):
        absorbed_scores(q, c.double(), W_uk)
    with pytest.raises(TypeError, match="mix numpy and torch"):
        absorbed_scores(q, c.numpy(), W_uk)
    with pytest.raises(TypeError, match="floating-point"):
        absorbed_scores(q, c, W_uk.long())


# ---- LatentAttention ----------------------------------------------------------------------


@pytest.mark.parametrize("d_rope", [0, 4])
def test_absorbed_path_equals_decompress_then_attend_fp64(d_rope):
    """The proof of lesson 14: attention over the latents equals attention over rebuilt keys."""
    layer = _layer(d_rope)
    x = _rand(2, 9, 32)
    out_d, w_d = layer(x)
    out_a, w_a = layer(x, absorbed=True)
    assert out_d.shape == (2, 9, 32) and w_d.shape == (2, 4, 9, 9)
    assert (out_a - out_d).abs().max().item() <= TOL
    assert (w_a - w_d).abs().max().item() <= TOL


@pytest.mark.parametrize("d_rope", [0, 4])
def test_decompress_path_matches_sdpa_on_explicit_keys(d_rope):
    layer = _layer(d_rope)
    x = _rand(2, 7, 32, seed=5)
    W = {name: getattr(layer, name).weight for name in ("W_q", "W_dkv", "W_uk", "W_uv", "W_o")}
    heads = lambda t: t.unflatten(-1, (4, -1)).transpose(1, 2)  # noqa: E731
    c = x @ W["W_dkv"].T  # (batch, seq, d_latent)
    q, k, v = heads(x @ W["W_q"].T), heads(c @ W["W_uk"].T), heads(c @ W["W_uv"].T)
    if d_rope:
        q_r = apply_rotary(heads(x @ layer.W_qr.weight.T))  # (batch, n_heads, seq, d_rope)
        k_r = apply_rotary(x @ layer.W_kr.weight.T)[:, None].expand(-1, 4, -1, -1)
        q, k = torch.cat([q, q_r], -1), torch.cat([k, k_r], -1)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(d_head+d_rope)
    want = o.transpose(1, 2).flatten(2) @ W["W_o"].T
    got, _ = layer(x)
    assert (got - want).abs().max().item() <= TOL


@pytest.mark.parametrize("absorbed", [False, True])
@pytest.mark.parametrize("d_rope", [0, 4])
def test_cached_decoding_equals_the_whole_sequence(absorbed, d_rope):
    layer = _layer(d_rope, seed=1)
    x = _rand(2, 10, 32, seed=6)
    want, _ = layer(x)
    cache = layer.new_cache(2, max_len=3)  # small: it must grow
    got = [layer(x[:, :4], cache, absorbed=absorbed)[0]]  # a prompt of 4, then one at a time
    for t in range(4, 10):
        got.append(layer(x[:, t : t + 1], cache, absorbed=absorbed)[0])
    assert (torch.cat(got, 1) - want).abs().max().item() <= TOL
    c_all, k_rope_all = cache.read()
    assert c_all.shape == (2, 10, 12) and k_rope_all.shape == (2, 10, d_rope)
    assert (c_all - layer.compress(x)[0]).abs().max().item() <= TOL


def test_the_cache_holds_only_latents_and_rotary_keys():
    layer = _layer(4).float()
    cache = layer.new_cache(3, max_len=16)
    layer(torch.zeros(3, 16, 32), cache)
    one_layer = kv_cache_bytes(n_layers=1, batch=3, seq=16, d_latent=12, d_rope=4)
    assert cache.nbytes == one_layer == 3 * 16 * (12 + 4) * 4
    mha = kv_cache_bytes(n_layers=1, batch=3, seq=16, n_kv_heads=4, d_k=8)
    assert mha == 4 * one_layer  # 2 · 4 heads · 8 = 64 numbers per token against 16


def test_latent_cache_and_layer_errors():
    cache = LatentCache(1, 6, 2)
    with pytest.raises(ValueError, match=r"c has shape \(1, 3, 5\)"):
        cache.append(torch.zeros(1, 3, 5), torch.zeros(1, 3, 2))
    with pytest.raises(ValueError, match="k_rope has seq_new=2"):
        cache.append(torch.zeros(1, 3, 6), torch.zeros(1, 2, 2))
    with pytest.raises(TypeError, match="dtype torch.float64"):
        cache.append(torch.zeros(1, 3, 6, dtype=torch.float64), torch.zeros(1, 3, 2))
    with pytest.raises(ValueError, match="d_rope must be even"):
        LatentAttention(16, 2, 4, d_rope=3)
    with pytest.raises(ValueError, match="LatentAttention: d_latent must be >= 1"):
        LatentAttention(16, 2, 0)
    with pytest.raises(TypeError, match="cache must be a LatentCache"):
        LatentAttention(16, 2, 4)(torch.zeros(1, 2, 16), cache=object())
    with pytest.raises(ValueError, match=r"x .*must have 3 dims"):
        LatentAttention(16, 2, 4)(torch.zeros(2, 16))
