"""attnlib's GPT is Hugging Face's GPT-2: the weights copied, the same numbers come out.

``GPT2LMHeadModel(GPT2Config(**gpt2_config(model)))`` is built locally (no hub, no
network, no downloaded weights), loaded with ``gpt2_state_dict(model)`` (strict), and
compared with the course model: logits (fp32 ≤ 1e-5, fp64 ≤ 1e-10), the keys and values
in HF's ``past_key_values`` against attnlib's ``KVCache``s, greedy ``generate(use_cache=True)``
against :func:`attnlib.decoder.generate`, and the training-mode dropouts draw for draw.
The weights are perturbed away from their initialisation so that every part matters.
``run_gpt2`` (what lesson 15's exercise 15.2 checks the learner's mapping with) is the same
GPT2LMHeadModel, and a dict that does not load is refused with every wrong name and shape.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing below may reach the hub
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import functools  # noqa: E402
import importlib.util  # noqa: E402
import types  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed (requirements.txt pins it)", allow_module_level=True)

from attnlib.block import gelu_tanh  # noqa: E402
from attnlib.decoder import generate  # noqa: E402
from attnlib.gpt import GPT, gpt2_config, gpt2_state_dict, run_gpt2  # noqa: E402

VOCAB, MAX_LEN = 13, 40
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


@functools.cache
def hf() -> types.SimpleNamespace:
    """transformers' GPT-2 pieces, imported when a test first needs them (2 s: not at
    collection, which every pytest worker does)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.activations import ACT2FN

    return types.SimpleNamespace(
        GPT2Config=GPT2Config, GPT2LMHeadModel=GPT2LMHeadModel, ACT2FN=ACT2FN
    )


def _course_model(dtype, seed=1, **kw) -> GPT:
    torch.manual_seed(seed)
    model = GPT(vocab_size=VOCAB, d_model=32, n_heads=4, n_layers=2, max_len=MAX_LEN, **kw)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # away from the initialisation: gains, biases, all of it
        for name, p in model.named_parameters():
            if name != "lm_head.weight":  # tied: it moves with wte
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.to(dtype).eval()


def _hf_model(model: GPT, attn_implementation="sdpa", **changes) -> torch.nn.Module:
    config = gpt2_config(model) | dict(bos_token_id=None, eos_token_id=None) | changes
    gpt2 = hf().GPT2LMHeadModel(hf().GPT2Config(**config, attn_implementation=attn_implementation))
    gpt2 = gpt2.to(model.wte.weight.dtype)
    gpt2.load_state_dict(gpt2_state_dict(model), strict=True)  # every name, nothing left over
    return gpt2.eval()


@pytest.fixture(scope="module", params=[torch.float32, torch.float64], ids=["fp32", "fp64"])
def pair(request):
    model = _course_model(request.param)
    return model, _hf_model(model), TOL[request.param]


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, VOCAB, (3, MAX_LEN), generator=torch.Generator().manual_seed(1))


def test_the_copy_fills_every_parameter_and_keeps_the_embeddings_tied(pair):
    model, hf, _ = pair
    assert set(gpt2_state_dict(model)) == set(hf.state_dict())
    assert hf.lm_head.weight is hf.transformer.wte.weight
    assert sum(p.numel() for p in hf.parameters()) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_logits_agree(pair, tokens, attn_implementation):
    model, hf, tol = pair
    if attn_implementation != "sdpa":
        hf = _hf_model(model, attn_implementation)
    with torch.no_grad():
        ours, theirs = model(tokens), hf(tokens).logits
    err = (ours - theirs).abs().max().item()
    assert err <= tol, f"max |Δlogit| = {err:.3g} > {tol}"
    assert ours.abs().max() > 1  # logits of a real size, not all near 0


def test_past_key_values_hold_attnlibs_cached_keys_and_values(pair, tokens):
    model, hf, tol = pair
    prompt, nxt = tokens[:, :11], tokens[:, 11:14]
    caches = model.new_caches(3)
    with torch.no_grad():
        model(prompt, caches)
        model(nxt, caches)  # a second step appends
        out = hf(prompt, use_cache=True)
        out = hf(nxt, past_key_values=out.past_key_values, use_cache=True)
    layers = out.past_key_values.layers
    assert len(layers) == len(caches) == 2
    for cache, layer in zip(caches, layers, strict=True):
        k, v = cache.read()  # (batch, n_heads, seq, d_head)
        assert k.shape == layer.keys.shape == (3, 4, 14, 8)
        assert v.shape == layer.values.shape
        assert (k - layer.keys).abs().max() <= tol
        assert (v - layer.values).abs().max() <= tol


def test_greedy_generate_with_the_cache_gives_the_same_tokens(pair, tokens):
    model, hf, _ = pair
    prompt = tokens[:, :6]
    ours = generate(model, prompt, 25)
    with torch.no_grad():
        theirs = hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=25,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
    assert torch.equal(ours.tokens, theirs.sequences)
    # (batch, n_new, vocab): greedy, unprocessed. transformers 5.23's generate casts the
    # logits it scores to float32 (generation/utils.py, `.to(copy=True, dtype=torch.float32`):
    # compare in float32, to float32's tolerance.
    scores = torch.stack(theirs.scores, 1)
    assert scores.dtype == torch.float32
    assert (ours.logits.float() - scores).abs().max() <= TOL[torch.float32]
    for row in ours.tokens[:, 6:]:  # every row varies: not one token repeated
        assert len(set(row.tolist())) >= 4, row


def test_training_mode_dropouts_match_gpt2s_draw_for_draw():
    """Same seed, same dropped weights: attention-weight dropout is GPT-2's attn_pdrop,
    applied where GPT-2 applies it, and the residual and embedding dropouts too."""
    model = _course_model(torch.float32, seed=2, attn_dropout=0.2, dropout=0.1)
    x = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(3))
    for impl in ("eager", "sdpa"):
        hf = _hf_model(model, impl).train()
        model.train()
        with torch.no_grad():
            torch.manual_seed(4)
            ours = model(x)
            torch.manual_seed(4)
            theirs = hf(x).logits
            evaluated = model.eval()(x)
        assert (ours - theirs).abs().max() <= 1e-5, impl
        assert (ours - evaluated).abs().max() > 0.1  # dropout was really on


def test_gelu_tanh_is_gelu_new_bit_for_bit():
    x = 4 * torch.randn(10_000, generator=torch.Generator().manual_seed(5))
    assert torch.equal(gelu_tanh(x), hf().ACT2FN["gelu_new"](x))


@pytest.mark.parametrize(
    "change",
    [
        {"activation_function": "gelu"},  # the exact GELU instead of the tanh approximation
        {"layer_norm_epsilon": 1e-6},
        {"scale_attn_weights": False},  # no 1/sqrt(d_head)
    ],
    ids=["exact-gelu", "eps-1e-6", "unscaled-scores"],
)
def test_each_architecture_choice_matters(tokens, change):
    """The agreement is not loose: change one choice and fp64 logits differ by far more
    than the tolerance."""
    model = _course_model(torch.float64)
    hf = _hf_model(model, **change)
    with torch.no_grad():
        err = (model(tokens) - hf(tokens).logits).abs().max().item()
    assert err > 1e-4, err


def test_run_gpt2_is_what_gpt2_computes_with_the_weights_it_is_given(pair, tokens):
    """run_gpt2 (lesson 15's exercise 15.2 hands it the learner's mapping) builds the same
    GPT2LMHeadModel, loads the dict strictly and returns its logits and cache."""
    model, hf, tol = pair
    prompt = tokens[:, :9]
    logits, keys, values = run_gpt2(model, gpt2_state_dict(model), prompt)
    caches = model.new_caches(3)
    with torch.no_grad():
        assert (logits - model(prompt, caches)).abs().max() <= tol
        assert torch.equal(logits, hf(prompt).logits)
    assert keys.shape == values.shape == (2, 3, 4, 9, 8)  # (n_layers, batch, n_heads, seq, d_head)
    for layer, cache in enumerate(caches):
        k, v = cache.read()
        assert (keys[layer] - k).abs().max() <= tol and (values[layer] - v).abs().max() <= tol


def test_run_gpt2_refuses_a_dict_that_does_not_load_and_names_what_is_wrong(tokens):
    model = _course_model(torch.float64)
    weights = gpt2_state_dict(model)
    del weights["lm_head.weight"]
    weights["transformer.h.0.mlp.c_fc.weight"] = weights["transformer.h.0.mlp.c_fc.weight"].T
    with pytest.raises(RuntimeError, match=r"lm_head\.weight(.|\n)*size mismatch for transformer"):
        run_gpt2(model, weights, tokens[:, :5])
