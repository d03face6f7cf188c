"""The block around attention (attnlib.block) and the GPT built from it (attnlib.gpt).

Every part is compared with an independent oracle: torch's LayerNorm and GELU, a block
written with torch's fused functions (F.layer_norm, scaled_dot_product_attention, F.gelu),
SDPA's own dropout_p, recomputation for the KV cache, autograd hooks for the stream
gradients. Hugging Face's GPT-2 is the oracle of tests/test_hf_equivalence.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from attnlib.block import MLP, DecoderBlock, GPTAttention, LayerNorm, gelu_tanh, layer_norm
from attnlib.decoder import generate
from attnlib.gpt import GPT, stream_gradients
from attnlib.kv_cache import KVCache


def _randomise(module: nn.Module, seed: int, scale: float = 0.3) -> nn.Module:
    """Perturb every parameter (LayerNorm gains and biases too), so no part is trivial."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


# ---- LayerNorm -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_layer_norm_equals_torch_layer_norm(dtype, tol):
    g = torch.Generator().manual_seed(0)
    x = 3 + 5 * torch.randn(4, 7, 16, generator=g, dtype=dtype)  # far from mean 0, var 1
    ours = _randomise(LayerNorm(16).to(dtype), 1)
    ref = nn.LayerNorm(16).to(dtype)
    ref.load_state_dict(ours.state_dict())  # same parameter names: weight, bias
    err = (ours(x) - ref(x)).abs().max().item()
    assert err <= tol, err
    y = layer_norm(x)  # no gain or bias: each row has mean 0 and variance 1
    assert y.mean(-1).abs().max() < 10 * tol
    assert (y.var(-1, correction=0) - 1).abs().max() < 1e-4  # eps = 1e-5 shrinks it a hair


def test_layer_norm_numpy_equals_torch_and_handles_a_constant_row():
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(3, 8)), rng.normal(size=8), rng.normal(size=8)
    x[1] = 2.5  # a constant row: variance 0, eps keeps it finite and it maps to the bias
    got = layer_norm(x, w, b, eps=1e-5)
    ref = F.layer_norm(torch.from_numpy(x), (8,), torch.from_numpy(w), torch.from_numpy(b), 1e-5)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, ref.numpy(), atol=1e-12)
    np.testing.assert_allclose(got[1], b, atol=1e-12)


def test_layer_norm_gradient_equals_torch():
    x = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)
    w, b = torch.randn(12, dtype=torch.float64), torch.randn(12, dtype=torch.float64)
    (gx,) = torch.autograd.grad((layer_norm(x, w, b) ** 2).sum(), x)
    (rx,) = torch.autograd.grad((F.layer_norm(x, (12,), w, b) ** 2).sum(), x)
    assert torch.allclose(gx, rx, atol=1e-10)


def test_layer_norm_errors_name_the_argument():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"layer_norm: weight .* must have shape \(d,\) = \(8,\)"):
        layer_norm(x, torch.ones(7))
    with pytest.raises(TypeError, match="layer_norm: x .*floating-point"):
        layer_norm(torch.ones(2, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="mix numpy and torch"):
        layer_norm(x, np.ones(8, dtype=np.float32))
    with pytest.raises(ValueError, match="layer_norm: eps must be finite and > 0"):
        layer_norm(x, eps=0.0)
    with pytest.raises(
        ValueError, match=r"LayerNorm: x .* must be \(\.\.\., d_model\) with d_model=4"
    ):
        LayerNorm(4)(x)
    with pytest.raises(TypeError, match="LayerNorm: x .* has dtype torch.float64 but the weights"):
        LayerNorm(8)(x.double())


# ---- GELU and the MLP ----------------------------------------------------------------------


def test_gelu_tanh_is_torchs_tanh_gelu_not_the_exact_one():
    x = torch.linspace(-6, 6, 1201, dtype=torch.float64)
    assert torch.allclose(gelu_tanh(x), F.gelu(x, approximate="tanh"), atol=1e-14)
    gap = (gelu_tanh(x) - F.gelu(x)).abs().max().item()
    assert 1e-4 < gap < 1e-3, gap  # the two flavours differ: the copy to GPT-2 needs this one
    np.testing.assert_allclose(gelu_tanh(x.numpy()), gelu_tanh(x).numpy(), atol=1e-14)


def test_mlp_equals_its_formula_and_drops_out_only_in_training():
    mlp = _randomise(MLP(8, 24, dropout=0.5), 2)
    x = torch.randn(2, 3, 8)
    ref = F.linear(F.gelu(F.linear(x, mlp.c_fc.weight, mlp.c_fc.bias), approximate="tanh"),
                   mlp.c_proj.weight, mlp.c_proj.bias)  # fmt: skip
    assert torch.allclose(mlp.eval()(x), ref, atol=1e-6)
    assert not torch.allclose(mlp.train()(x), ref, atol=1e-3)


# ---- Attention ------------------------------------------------------------------------------


def _reference_attention(attn: GPTAttention, x: torch.Tensor) -> torch.Tensor:
    """The same layer with torch's SDPA, written without attnlib."""
    b, t, d = x.shape
    h = attn.n_heads

    def heads(lin):
        return lin(x).view(b, t, h, d // h).transpose(1, 2)  # (batch, n_heads, seq, d_head)

    out = F.scaled_dot_product_attention(heads(attn.W_q), heads(attn.W_k), heads(attn.W_v),
                                         is_causal=True)  # fmt: skip
    return attn.W_o(out.transpose(1, 2).reshape(b, t, d))


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_attention_equals_causal_sdpa(dtype, tol):
    torch.manual_seed(0)
    attn = _randomise(GPTAttention(16, 4), 3).to(dtype).eval()
    x = torch.randn(2, 9, 16, dtype=dtype)
    out, w = attn(x, return_weights=True)
    assert (out - _reference_attention(attn, x)).abs().max() <= tol
    assert torch.all(w.triu(1) == 0)  # causal: nothing after the query
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, 9, dtype=dtype))


def test_cached_steps_equal_the_whole_sequence_in_any_chunks():
    torch.manual_seed(1)
    attn = _randomise(GPTAttention(16, 4), 4).double().eval()
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    whole = attn(x)
    cache = KVCache(2, 4, d_k=4, max_len=3, dtype=torch.float64)  # grows on the way
    parts = [attn(x[:, a:b], cache) for a, b in ((0, 4), (4, 5), (5, 10))]
    assert torch.allclose(torch.cat(parts, 1), whole, atol=1e-12)
    k, _ = cache.read()
    assert k.shape == (2, 4, 10, 4)
    assert torch.allclose(k, attn.W_k(x).view(2, 10, 4, 4).transpose(1, 2), atol=1e-12)


def test_dropout_on_the_weights_is_sdpas_dropout_p_draw_for_draw():
    torch.manual_seed(2)
    attn = GPTAttention(16, 4, attn_dropout=0.3).train()
    x = torch.randn(2, 9, 16)
    torch.manual_seed(7)
    ours = attn(x)
    q, k, v = (attn_lin(x).view(2, 9, 4, 4).transpose(1, 2) for attn_lin in
               (attn.W_q, attn.W_k, attn.W_v))  # fmt: skip
    torch.manual_seed(7)
    ref = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)
    ref = attn.W_o(ref.transpose(1, 2).reshape(2, 9, 16))
    assert torch.allclose(ours, ref, atol=1e-6)


def test_dropout_on_the_weights_is_on_in_training_and_off_in_eval():
    torch.manual_seed(3)
    p = 0.25
    attn = GPTAttention(32, 4, attn_dropout=p).requires_grad_(False)
    x = torch.randn(8, 64, 32)
    _, w_eval = attn.eval()(x, return_weights=True)
    _, w_eval2 = attn(x, return_weights=True)
    assert torch.equal(w_eval, w_eval2)  # deterministic
    assert torch.allclose(w_eval.sum(-1), torch.ones(8, 4, 64))
    torch.manual_seed(4)
    _, w = attn.train()(x, return_weights=True)
    allowed = w_eval > 0  # the causal triangle
    n = int(allowed.sum())
    dropped = float(((w == 0) & allowed).sum()) / n
    # n = 8 · 4 · 2080 = 66560 weights: the share dropped is p within 5 standard errors.
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / n), dropped
    kept = w[allowed & (w != 0)]
    assert torch.allclose(kept, w_eval[allowed & (w != 0)] / (1 - p), atol=1e-6)  # rescaled
    # Each weight keeps its expectation: row sums average 1 (not 1 - p).
    assert abs(float(w.sum(-1).mean()) - 1) < 0.01


# ---- The block and the model ----------------------------------------------------------------


def _reference_block(block: DecoderBlock, x: torch.Tensor) -> torch.Tensor:
    ln1, ln2, mlp = block.ln_1, block.ln_2, block.mlp
    x = x + _reference_attention(block.attn, F.layer_norm(x, (x.shape[-1],), ln1.weight, ln1.bias))
    h = F.layer_norm(x, (x.shape[-1],), ln2.weight, ln2.bias)
    hidden = F.gelu(F.linear(h, mlp.c_fc.weight, mlp.c_fc.bias), approximate="tanh")
    return x + F.linear(hidden, mlp.c_proj.weight, mlp.c_proj.bias)


def test_block_is_pre_ln_attention_then_mlp_with_gpt2_names():
    torch.manual_seed(5)
    block = _randomise(DecoderBlock(16, 4), 5).double().eval()
    assert [n for n, _ in block.named_children()] == ["ln_1", "attn", "ln_2", "mlp"]
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    assert torch.allclose(block(x), _reference_block(block, x), atol=1e-12)


def test_model_ties_embeddings_and_counts_its_parameters():
    model = GPT(vocab_size=20, d_model=16, n_heads=4, n_layers=2, max_len=24).requires_grad_(False)
    assert model.lm_head.weight is model.wte.weight
    per_block = 2 * 2 * 16 + 4 * (16 * 16 + 16) + (16 * 64 + 64) + (64 * 16 + 16)
    expected = 20 * 16 + 24 * 16 + 2 * per_block + 2 * 16  # the tied head adds nothing
    assert sum(p.numel() for p in model.parameters()) == expected
    # GPT-2's initialisation: std 0.02, and 0.02 / sqrt(2 · n_layers) into the stream
    assert abs(float(model.wte.weight.std()) - 0.02) < 0.004
    assert abs(float(model.h[1].mlp.c_proj.weight.std()) - 0.01) < 0.002
    assert torch.equal(model.h[0].ln_1.weight, torch.ones(16))


def test_model_equals_a_reference_forward_pass():
    torch.manual_seed(6)
    model = _randomise(GPT(vocab_size=13, d_model=16, n_heads=4, n_layers=2, max_len=20), 6)
    model = model.double().eval()
    tokens = torch.randint(0, 13, (3, 20))
    x = model.wte(tokens) + model.wpe(torch.arange(20))
    for block in model.h:
        x = _reference_block(block, x)
    ref = F.linear(F.layer_norm(x, (16,), model.ln_f.weight, model.ln_f.bias), model.wte.weight)
    assert torch.allclose(model(tokens), ref, atol=1e-12)


def test_cached_decoding_equals_recomputation_and_positions_continue():
    torch.manual_seed(7)
    model = _randomise(GPT(vocab_size=13, d_model=16, n_heads=4, n_layers=3, max_len=30), 7)
    model = model.double().eval()
    prompt = torch.randint(0, 13, (2, 5))
    fast, slow = generate(model, prompt, 12), generate(model, prompt, 12, use_cache=False)
    assert torch.equal(fast.tokens, slow.tokens)
    assert torch.allclose(fast.logits, slow.logits, atol=1e-12)
    assert [c.length for c in fast.caches] == [16] * 3  # the last token is never fed back
    logits, weights = model(fast.tokens, return_weights=True)
    assert len(weights) == 3 and weights[0].shape == (2, 4, 17, 17)
    assert torch.allclose(logits[:, 4:-1], fast.logits, atol=1e-12)


def test_model_errors_name_the_argument():
    model = GPT(vocab_size=13, d_model=16, n_heads=4, n_layers=2, max_len=8)
    with pytest.raises(ValueError, match=r"GPT: tokens holds ids from 0 to 13, outside 0 \.\. "):
        model(torch.tensor([[0, 13]]))
    with pytest.raises(TypeError, match="GPT: tokens must be a LongTensor"):
        model(torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"GPT: positions 0\.\.8 exceed max_len=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="GPT: 1 caches for n_layers=2"):
        model(torch.zeros(1, 2, dtype=torch.long), model.new_caches(1)[:1])
    caches = model.new_caches(2)
    with pytest.raises(ValueError, match=r"GPT: caches\[0\] holds \(batch, n_heads, d_k, dtype\)"):
        model(torch.zeros(1, 2, dtype=torch.long), caches)
    with pytest.raises(ValueError, match="GPT: n_heads=3 must divide d_model=16"):
        GPT(vocab_size=13, d_model=16, n_heads=3, n_layers=2, max_len=8)
    with pytest.raises(ValueError, match="GPTAttention: n_heads=3 must divide d_model=16"):
        GPTAttention(16, 3)
    block = DecoderBlock(16, 4)
    with pytest.raises(ValueError, match=r"DecoderBlock: x .* must have 3 dims"):
        block(torch.randn(5, 16))
    with pytest.raises(ValueError, match=r"DecoderBlock: cache holds \(batch, n_kv_heads"):
        block(torch.randn(1, 2, 16), KVCache(1, 2, d_k=8))
    with pytest.raises(TypeError, match="GPTAttention: cache must be an attnlib.kv_cache.KVCache"):
        block.attn(torch.randn(1, 2, 16), "cache")
    with pytest.raises(ValueError, match=r"GPT: dropout must be in \[0, 1\), got 1.5"):
        GPT(vocab_size=13, d_model=16, n_heads=4, n_layers=2, max_len=8, dropout=1.5)
    with pytest.raises(ValueError, match=r"GPTAttention: attn_dropout must be in \[0, 1\)"):
        GPTAttention(16, 4, attn_dropout=1.0)


# ---- The residual path and gradients ----------------------------------------------------------


def test_stream_gradients_equal_autograd_hooks_and_leave_grad_alone():
    torch.manual_seed(8)
    model = GPT(vocab_size=13, d_model=16, n_heads=4, n_layers=3, max_len=20).double()
    tokens = torch.randint(0, 13, (2, 12))
    norms = stream_gradients(model, tokens)
    assert all(p.grad is None for p in model.parameters())  # nothing accumulated
    seen = []

    def keep(module, args):  # the stream entering a block (or ln_f)
        args[0].retain_grad()
        seen.append(args[0])

    hooks = [m.register_forward_pre_hook(keep) for m in (*model.h, model.ln_f)]
    logits = model(tokens[:, :-1])
    for hook in hooks:
        hook.remove()
    F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    ref = torch.stack([t.grad.norm() for t in seen])
    assert torch.allclose(norms, ref, rtol=1e-10)


def test_the_residual_path_keeps_the_gradient_of_early_blocks():
    torch.manual_seed(9)
    tokens = torch.randint(0, 13, (4, 16))
    kw = dict(vocab_size=13, d_model=32, n_heads=4, n_layers=8, max_len=16)
    torch.manual_seed(9)
    with_skip = stream_gradients(GPT(**kw).double(), tokens)
    torch.manual_seed(9)
    without = stream_gradients(GPT(**kw, residual=False).double(), tokens)
    # Measured over seeds 0-3: with the skips every block's entry is 1.00-1.10 times the top
    # one (the identity path hands the top gradient straight down); without them the entry
    # of block 0 is 0.01-0.03 times it and no block below the top gets more than 0.69.
    skip, plain = with_skip / with_skip[-1], without / without[-1]
    assert 0.9 < skip.min() and skip.max() < 1.5, skip
    assert plain[0] < 0.1 and plain[:-1].max() < 0.8, plain


def test_curves_can_put_the_legend_below_the_axes():
    import matplotlib.pyplot as plt

    from attnlib import plot

    ax = plot.curves([1, 2, 3], {"a": [1, 2, 3], "b": [3, 2, 1]}, xlabel="x", ylabel="y",
                     legend="below")  # fmt: skip
    ax.figure.canvas.draw()
    box = ax.get_legend().get_window_extent()
    assert box.y1 < ax.get_window_extent().y0  # entirely under the axes
    a, b = (t.get_window_extent() for t in ax.get_legend().get_texts())
    assert abs(a.y0 - b.y0) < 1 and a.x1 < b.x0  # two columns: side by side
    plt.close("all")
