"""The GPT's initialisation, its block variants (post-LN, no LayerNorm) and its dropouts.

Oracles: a freshly built Hugging Face ``GPT2LMHeadModel`` for the initialisation (its own
``_init_weights``, transformers 5.23.0); the 2017 Transformer's post-LN block written with
torch's fused functions; ``nn.Dropout`` modules counted by name against GPT-2's three
probabilities. tests/test_block.py holds the pre-LN block and the model's forward pass,
tests/test_hf_equivalence.py the copy into GPT-2.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from attnlib.block import NORMS, DecoderBlock
from attnlib.decoder import generate
from attnlib.gpt import GPT, gpt2_config, gpt2_state_dict, stream_gradients


def _moved(module: nn.Module, seed: int, scale: float = 0.3) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


# ---- GPT-2's initialisation ------------------------------------------------------------------


def test_the_initialisation_is_gpt2s_as_transformers_draws_it():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = GPT(vocab_size=50, d_model=64, n_heads=4, n_layers=6, max_len=64)
    config = gpt2_config(model) | dict(bos_token_id=None, eos_token_id=None)
    fresh = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config)).state_dict()
    ours = gpt2_state_dict(model)
    assert sorted(ours) == sorted(fresh)

    def pooled(sd, suffix):  # every block's tensor of that name, as one sample
        return torch.cat([t.flatten() for n, t in sd.items() if n.endswith(suffix)])

    into_stream = 0.02 / (2 * 6) ** 0.5
    for suffix, std in [
        ("wte.weight", 0.02),
        ("wpe.weight", 0.02),
        ("attn.c_attn.weight", 0.02),
        ("mlp.c_fc.weight", 0.02),
        ("attn.c_proj.weight", into_stream),  # W_o: writes into the residual stream
        ("mlp.c_proj.weight", into_stream),  # the MLP's output: writes into it too
    ]:
        a, b = pooled(ours, suffix), pooled(fresh, suffix)
        # 3200 to 98304 draws: the sample std is within 3 % of the true one
        assert abs(float(a.std()) / std - 1) < 0.03, (suffix, float(a.std()))
        assert abs(float(b.std()) / std - 1) < 0.03, (suffix, float(b.std()))
        assert abs(float(a.mean())) < 0.1 * std and abs(float(b.mean())) < 0.1 * std
    for name, t in fresh.items():
        if name.endswith("bias"):  # linear biases and LayerNorm shifts: 0 in both
            assert torch.equal(ours[name], t) and not t.any(), name
        elif ".ln_" in name or "ln_f" in name:  # LayerNorm gains: 1 in both
            assert torch.equal(ours[name], t) and bool((t == 1).all()), name


# ---- where the LayerNorms sit ----------------------------------------------------------------


def _attention(attn, x):
    b, t, d = x.shape
    heads = [lin(x).view(b, t, attn.n_heads, -1).transpose(1, 2) for lin in
             (attn.W_q, attn.W_k, attn.W_v)]  # fmt: skip
    out = F.scaled_dot_product_attention(*heads, is_causal=True)
    return attn.W_o(out.transpose(1, 2).reshape(b, t, d))


def _mlp(mlp, x):
    hidden = F.gelu(F.linear(x, mlp.c_fc.weight, mlp.c_fc.bias), approximate="tanh")
    return F.linear(hidden, mlp.c_proj.weight, mlp.c_proj.bias)


def test_post_ln_block_is_the_2017_transformers():
    torch.manual_seed(1)
    block = _moved(DecoderBlock(16, 4, norm="post"), 1).double().eval()
    x = 3 * torch.randn(2, 7, 16, dtype=torch.float64)
    d = (16,)
    ln1, ln2 = block.ln_1, block.ln_2
    ref = F.layer_norm(x + _attention(block.attn, x), d, ln1.weight, ln1.bias)
    ref = F.layer_norm(ref + _mlp(block.mlp, ref), d, ln2.weight, ln2.bias)
    assert torch.allclose(block(x), ref, atol=1e-12)
    # without the additions: each sublayer's output alone is normalised
    block.residual = False
    ref = F.layer_norm(_attention(block.attn, x), d, ln1.weight, ln1.bias)
    ref = F.layer_norm(_mlp(block.mlp, ref), d, ln2.weight, ln2.bias)
    assert torch.allclose(block(x), ref, atol=1e-12)


def test_a_block_without_layer_norms_adds_raw_sublayers():
    torch.manual_seed(2)
    block = _moved(DecoderBlock(16, 4, norm="none"), 2).double().eval()
    assert isinstance(block.ln_1, nn.Identity) and isinstance(block.ln_2, nn.Identity)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    h = x + _attention(block.attn, x)
    assert torch.allclose(block(x), h + _mlp(block.mlp, h), atol=1e-12)


@pytest.mark.parametrize("norm", NORMS)
def test_every_variant_decodes_with_its_cache_as_without(norm):
    torch.manual_seed(3)
    model = _moved(GPT(13, 16, 4, 3, 30, norm=norm), 3).double().eval()
    assert isinstance(model.ln_f, nn.Identity) == (norm != "pre")
    prompt = torch.randint(0, 13, (2, 5))
    fast, slow = generate(model, prompt, 10), generate(model, prompt, 10, use_cache=False)
    assert torch.equal(fast.tokens, slow.tokens)
    assert torch.allclose(fast.logits, slow.logits, atol=1e-12)
    assert stream_gradients(model, prompt).shape == (4,)


def test_variants_of_one_seed_share_their_weights():
    def draw(**kw):
        torch.manual_seed(4)
        return GPT(13, 16, 4, 3, 30, **kw).state_dict()

    pre = draw()
    for kw in ({"norm": "post"}, {"norm": "none"}, {"residual": False}):
        other = draw(**kw)
        assert set(other) <= set(pre)
        assert all(torch.equal(other[k], pre[k]) for k in other), kw
    assert sum(".ln_" in k or k.startswith("ln_f") for k in set(pre) - set(draw(norm="none"))) == 14


def test_gpt2s_names_are_refused_for_another_block():
    for kw in ({"norm": "post"}, {"norm": "none"}):
        model = GPT(13, 16, 4, 2, 8, **kw)
        with pytest.raises(ValueError, match="GPT-2's blocks are pre-LN"):
            gpt2_config(model)
        with pytest.raises(ValueError, match="GPT-2's blocks are pre-LN"):
            gpt2_state_dict(model)
    with pytest.raises(ValueError, match=r"GPT: norm must be one of \('pre', 'post', 'none'\)"):
        GPT(13, 16, 4, 2, 8, norm="sandwich")
    with pytest.raises(ValueError, match="DecoderBlock: norm must be one of"):
        DecoderBlock(16, 4, norm=None)
    with pytest.raises(TypeError, match="GPT: residual must be a bool"):
        GPT(13, 16, 4, 2, 8, residual=1)
    assert "norm='post'" in repr(GPT(13, 16, 4, 2, 8, norm="post"))


# ---- GPT-2's three dropouts --------------------------------------------------------------------


def test_the_three_dropouts_sit_where_gpt2s_do():
    model = GPT(13, 16, 4, 2, 8, attn_dropout=0.3, dropout=0.1)
    drops = {name: m.p for name, m in model.named_modules() if isinstance(m, nn.Dropout)}
    # embd_pdrop on wte + wpe; resid_pdrop on what attention and the MLP add to the stream
    assert drops == {"drop": 0.1} | {
        f"h.{i}.{part}": 0.1 for i in range(2) for part in ("attn.resid_dropout", "mlp.dropout")
    }
    # attn_pdrop acts on the attention weights inside attend's result (no module)
    assert all(block.attn.attn_dropout == 0.3 for block in model.h)
    config = gpt2_config(model)
    assert (config["attn_pdrop"], config["resid_pdrop"], config["embd_pdrop"]) == (0.3, 0.1, 0.1)
    fresh = GPT(13, 16, 4, 2, 8)  # GPT-2's defaults are 0.1; the course's are 0
    assert {m.p for m in fresh.modules() if isinstance(m, nn.Dropout)} == {0.0}
    assert fresh.attn_dropout == 0.0
