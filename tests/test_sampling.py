"""Sampling in attnlib.decoder.generate (lesson 16): temperature and top-k.

Oracles: transformers' own ``TemperatureLogitsWarper`` and ``TopKLogitsWarper`` (the
filtering, value for value, and a replay of every sampled step with them and the same
generator); a greedy loop written out here; the softmax itself for the frequencies of many
draws (within five standard errors, with a fixed seed).
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper

from attnlib.decoder import TinyDecoder, _filter_logits, generate
from attnlib.gpt import GPT

VOCAB = 13


def tiny(kind="tiny", seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    if kind == "gpt":
        model = GPT(VOCAB, d_model=16, n_heads=4, n_layers=2, max_len=40)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * torch.randn_like(p))  # sharper than the initialisation
    else:
        model = TinyDecoder(vocab_size=VOCAB, d_model=16, n_heads=4, n_layers=2, max_len=40)
    return model.to(dtype).eval()


def prompt(batch=3, length=4, seed=1):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def gen(seed):
    return torch.Generator().manual_seed(seed)


def hf_warped(logits, temperature, top_k=None):
    """What transformers' sampling samples from: temperature, then top-k (its order)."""
    out = TemperatureLogitsWarper(temperature)(None, logits)
    return out if top_k is None else TopKLogitsWarper(top_k)(None, out)


@pytest.mark.parametrize("kind", ["tiny", "gpt"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_is_the_default_and_unchanged(kind, use_cache):
    model, p = tiny(kind), prompt()
    g = generate(model, p, 10, use_cache=use_cache)
    tokens = p.clone()
    with torch.no_grad():
        for step in range(10):  # greedy, written out
            logits = model(tokens)[:, -1]
            torch.testing.assert_close(g.logits[:, step], logits, atol=1e-12, rtol=0)
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], 1)
    assert torch.equal(g.tokens, tokens)
    # a generator does not change greedy decoding
    assert torch.equal(generate(model, p, 10, use_cache=use_cache, generator=gen(3)).tokens, tokens)


@pytest.mark.parametrize("kind", ["tiny", "gpt"])
@pytest.mark.parametrize("temperature", [0.1, 1.0, 5.0])
def test_top_k_of_one_is_greedy(kind, temperature):
    model, p = tiny(kind), prompt()
    greedy = generate(model, p, 12)
    for use_cache in (True, False):
        one = generate(
            model, p, 12, use_cache=use_cache, temperature=temperature, top_k=1, generator=gen(0)
        )
        assert torch.equal(one.tokens, greedy.tokens)


@pytest.mark.parametrize("kind", ["tiny", "gpt"])
@pytest.mark.parametrize("top_k", [None, 3])
def test_seeded_sampling_is_reproducible_with_and_without_the_cache(kind, top_k):
    model, p = tiny(kind), prompt(batch=4)
    runs = [
        generate(model, p, 20, use_cache=c, temperature=1.5, top_k=top_k, generator=gen(7))
        for c in (True, True, False)
    ]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert torch.equal(runs[0].tokens, runs[2].tokens)
    torch.testing.assert_close(runs[0].logits, runs[2].logits, atol=1e-10, rtol=0)
    other = generate(model, p, 20, temperature=1.5, top_k=top_k, generator=gen(8))
    assert not torch.equal(other.tokens, runs[0].tokens)  # another seed, other samples
    assert not torch.equal(runs[0].tokens, generate(model, p, 20).tokens)  # not greedy
    # the global generator when none is given: torch.manual_seed makes it reproducible
    torch.manual_seed(5)
    a = generate(model, p, 20, temperature=1.5, top_k=top_k)
    torch.manual_seed(5)
    assert torch.equal(a.tokens, generate(model, p, 20, temperature=1.5, top_k=top_k).tokens)


def test_float32_sampling_with_and_without_the_cache():
    model, p = tiny("gpt", dtype=torch.float32), prompt(batch=4)
    a, b = (
        generate(model, p, 30, use_cache=c, temperature=1.0, top_k=5, generator=gen(2))
        for c in (True, False)
    )
    assert torch.equal(a.tokens, b.tokens)


def test_the_filter_is_transformers_temperature_and_top_k():
    logits = torch.randn(64, 50, generator=gen(0), dtype=torch.float64) * 3
    logits[:8, :6] = 2.5  # ties, at and around the k-th largest
    logits[8:16] = logits[8:16].round()  # many ties
    for temperature in (0.3, 1.0, 2.7):
        want = hf_warped(logits, temperature)
        assert torch.equal(_filter_logits(logits, temperature), want)
        for k in (1, 2, 5, 6, 7, 49, 50):
            want = hf_warped(logits, temperature, k)
            got = _filter_logits(logits, temperature, k)
            assert torch.equal(got, want), (temperature, k)
            kept = torch.isfinite(got).sum(-1)
            assert (kept >= k).all() and (kept[16:] == k).all()  # more only on ties


@pytest.mark.parametrize("kind", ["tiny", "gpt"])
@pytest.mark.parametrize("temperature, top_k", [(0.7, None), (1.0, 4), (2.0, 9)])
def test_every_step_replays_with_transformers_warpers(kind, temperature, top_k):
    model, p = tiny(kind), prompt(batch=5)
    g = generate(model, p, 15, temperature=temperature, top_k=top_k, generator=gen(11))
    replay = gen(11)
    for step in range(15):
        probs = torch.softmax(hf_warped(g.logits[:, step], temperature, top_k), dim=-1)
        token = torch.multinomial(probs, 1, generator=replay)[:, 0]
        assert torch.equal(token, g.tokens[:, p.shape[1] + step]), step
    # Generation.logits are the model's raw logits
    with torch.no_grad():
        torch.testing.assert_close(g.logits[:, 0], model(p)[:, -1], atol=1e-12, rtol=0)


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.5, None), (1.3, 4), (3.0, 8)])
def test_sampled_frequencies_match_the_softmax(temperature, top_k):
    n = 20_000
    model = tiny("gpt", seed=3)
    p = prompt(batch=1, seed=4).expand(n, -1)  # one prompt, n draws of its next token
    g = generate(model, p, 1, temperature=temperature, top_k=top_k, generator=gen(0))
    probs = torch.softmax(hf_warped(g.logits[0, 0], temperature, top_k), dim=-1)
    freq = torch.bincount(g.tokens[:, -1], minlength=VOCAB).double() / n
    assert (freq[probs == 0] == 0).all()  # a filtered token is never drawn
    se = torch.sqrt(probs * (1 - probs) / n)
    assert ((freq - probs).abs() <= 5 * se + 1e-12).all(), (freq, probs)
    chi2 = float((((freq - probs) * n) ** 2 / (probs * n))[probs > 0].sum())
    dof = int((probs > 0).sum()) - 1
    assert chi2 < dof + 6 * math.sqrt(2 * dof)  # far inside the chi-square's tail
    assert probs.max() < 0.99  # the test can see a temperature: not a one-hot distribution


def test_temperature_sharpens_and_flattens():
    n = 4000
    model = tiny("gpt", seed=3)
    p = prompt(batch=1, seed=4).expand(n, -1)
    top = generate(model, p, 1).tokens[0, -1]
    share = {
        t: float(
            (generate(model, p, 1, temperature=t, generator=gen(1)).tokens[:, -1] == top)
            .double()
            .mean()
        )
        for t in (0.2, 1.0, 5.0)
    }
    assert share[0.2] > share[1.0] > share[5.0]


def test_refuses_bad_sampling_arguments_naming_them():
    model, p = tiny(), prompt()
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="temperature must be finite and > 0"):
            generate(model, p, 3, temperature=bad)
    with pytest.raises(TypeError, match="temperature must be a number or None"):
        generate(model, p, 3, temperature="hot")
    with pytest.raises(TypeError, match="temperature must be a number or None"):
        generate(model, p, 3, temperature=True)
    with pytest.raises(ValueError, match="top_k must be >= 1, got 0"):
        generate(model, p, 3, temperature=1.0, top_k=0)
    with pytest.raises(ValueError, match=f"top_k must be <= {VOCAB}, got {VOCAB + 1}"):
        generate(model, p, 3, temperature=1.0, top_k=VOCAB + 1)
    with pytest.raises(TypeError, match="top_k must be an int"):
        generate(model, p, 3, temperature=1.0, top_k=2.0)
    with pytest.raises(ValueError, match="top_k=3 needs a temperature"):
        generate(model, p, 3, top_k=3)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        generate(model, p, 3, temperature=1.0, generator=0)
