"""The lesson-14 trade-off experiment (attnlib.tasks.recall).

Oracles: plain Python loops for the task and the accuracy; an independent float64 forward
pass (torch's scaled_dot_product_attention, masks built by loops, top-k chosen by sorting
Python lists, no attnlib) for every variant; the caches' own storage (``nbytes``) and
hand arithmetic for the cache bytes. The shipped files must be small, complete, agree with
the shipped weights, and one variant must regenerate (byte for byte on the machine that
made them, up to float rounding elsewhere: tests/reproduce.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from reproduce import assert_log_reproduced, assert_state_reproduced

from attnlib.decoder import generate
from attnlib.tasks import recall as rc

NAMES = list(rc.VARIANTS)


@pytest.fixture(scope="module")
def shipped_results():
    return rc.results()


# ---------------------------------------------------------------------------- the task


def test_batches_end_in_a_cue_whose_answer_lies_d_positions_back():
    gen = torch.Generator().manual_seed(0)
    tokens, answers, d = rc.make_batch(300, generator=gen)
    assert tokens.shape == (300, rc.SEQ) and tokens.dtype == torch.long
    assert answers.shape == d.shape == (300,)
    for row, a, dist in zip(tokens.tolist(), answers.tolist(), d.tolist(), strict=True):
        assert 1 <= dist <= rc.LENGTH
        assert row[-1] == rc.N_TOKENS + dist - 1  # the cue names the distance
        assert all(0 <= t < rc.N_TOKENS for t in row[:-1])
        assert row[rc.SEQ - 1 - dist] == a  # d positions before the cue
    assert set(d.tolist()) == set(range(1, rc.LENGTH + 1))  # every distance drawn
    again = rc.make_batch(300, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(x, y) for x, y in zip(again, (tokens, answers, d), strict=True))
    fixed = rc.make_batch(5, distance=3, generator=gen)
    assert (fixed[2] == 3).all() and torch.equal(fixed[1], fixed[0][:, rc.LENGTH - 3])


def test_evaluation_set_orders_the_distances_and_is_fixed():
    tokens, answers, d = rc.evaluation_set(7)
    assert tokens.shape == (7 * rc.LENGTH, rc.SEQ)
    assert d.tolist() == [k for k in range(1, rc.LENGTH + 1) for _ in range(7)]
    assert torch.equal(answers, tokens[torch.arange(len(d)), rc.LENGTH - d])
    assert torch.equal(rc.evaluation_set(7)[0], tokens)


def test_answer_accuracy_reads_the_cue_position_only():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(6, rc.SEQ, rc.VOCAB, generator=gen)
    answers = torch.randint(0, rc.N_TOKENS, (6,), generator=gen)
    want = [int(torch.argmax(logits[b, -1])) == int(answers[b]) for b in range(6)]
    assert rc.answer_accuracy(logits, answers).tolist() == want
    logits[:, -1] = F.one_hot(answers, rc.VOCAB).float()
    logits[:, :-1] = -F.one_hot(answers, rc.VOCAB).float()[:, None]  # earlier positions wrong
    assert rc.answer_accuracy(logits, answers).all()


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="distance"):
        rc.make_batch(3, distance=0)
    with pytest.raises(ValueError, match="distance"):
        rc.make_batch(3, distance=torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="batch"):
        rc.make_batch(2.0)
    with pytest.raises(ValueError, match="variant"):
        rc.RecallModel("sparse")
    with pytest.raises(TypeError, match="variant"):
        rc.RecallModel(3)
    with pytest.raises(TypeError, match="tokens"):
        rc.RecallModel()(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="tokens"):
        rc.RecallModel()(torch.zeros(2, 3, 1, dtype=torch.long))
    with pytest.raises(FileNotFoundError, match="load_model.*--train"):
        rc.load_model("mha", "/nonexistent/recall_models.pt")
    with pytest.raises(ValueError, match="max_len"):
        rc.RecallModel()(torch.zeros(1, rc.SEQ + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="no model"):
        rc.load_model(rc.Variant("mine", "mine"))
    with pytest.raises(FileNotFoundError, match="--train"):
        rc.results("/nonexistent/recall_results.tsv")


# ---------------------------------------------------------------------------- the model


def _heads(x, n):
    return x.unflatten(-1, (n, -1)).transpose(1, 2)  # (batch, n, seq, d)


def _oracle_topk(layer, h):
    """The top-k mask by sorting Python lists: (batch, seq, seq) bool."""
    ix = layer.indexer
    batch, seq, _ = h.shape
    iq = (h @ ix.W_q.weight.T).unflatten(-1, (ix.n_index_heads, ix.d_index))
    ik = h @ ix.W_k.weight.T
    w = h @ ix.W_w.weight.T
    keep = torch.zeros(batch, seq, seq, dtype=torch.bool)
    for b in range(batch):
        for t in range(seq):
            score = [
                sum(
                    float(w[b, t, j]) * max(0.0, float(iq[b, t, j] @ ik[b, s]))
                    for j in range(ix.n_index_heads)
                )
                for s in range(t + 1)
            ]
            ranked = sorted(range(t + 1), key=lambda s: (-score[s], s))  # ties: lower index
            keep[b, t, ranked[: layer.top_k]] = True
    return keep


def _oracle_logits(m, tokens):
    """Every variant's logits, float64, with SDPA and masks built by loops."""
    seq = tokens.shape[1]
    x = m.tok.weight[tokens] + m.pos.weight[:seq]
    kv = {}
    for i, (norm, layer) in enumerate(zip(m.norms, m.layers, strict=True)):
        h = F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        if m.variant.d_latent is not None:
            c = h @ layer.W_dkv.weight.T  # the latent
            q = _heads(h @ layer.W_q.weight.T, m.n_heads)
            k = _heads(c @ layer.W_uk.weight.T, m.n_heads)
            v = _heads(c @ layer.W_uv.weight.T, m.n_heads)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        else:
            q = _heads(h @ layer.W_q.weight.T, m.n_heads)
            if layer.W_k is not None:
                kv[i] = (
                    _heads(h @ layer.W_k.weight.T, m.n_kv_heads),
                    _heads(h @ layer.W_v.weight.T, m.n_kv_heads),
                )
            k, v = kv[m.kv_share[i]]
            mask = causal
            if layer.window is not None:
                mask = torch.tensor(
                    [[0 <= t - s < layer.window for s in range(seq)] for t in range(seq)]
                )
            if layer.top_k is not None:
                mask = _oracle_topk(layer, h)[:, None]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + out.transpose(1, 2).flatten(2) @ layer.W_o.weight.T
    x = F.layer_norm(x, x.shape[-1:], m.norm.weight, m.norm.bias, m.norm.eps)
    return x @ m.head.weight.T


def _random_model(name, seed=0):
    torch.manual_seed(seed)
    model = rc.RecallModel(name).double().eval()
    with torch.no_grad():  # larger weights than at init: sharper, more varied attention
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(2.0)
    return model


@pytest.mark.parametrize("name", NAMES)
def test_every_variant_matches_an_independent_float64_forward(name):
    model = _random_model(name)
    tokens = rc.make_batch(3, generator=torch.Generator().manual_seed(5))[0]
    with torch.no_grad():
        got = model(tokens)
        want = _oracle_logits(model, tokens)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_decoding_with_each_variants_cache_equals_the_full_forward(name):
    model = _random_model(name, seed=1)
    tokens = rc.make_batch(2, generator=torch.Generator().manual_seed(6))[0]
    with torch.no_grad():
        full = model(tokens)  # (batch, seq, vocab)
        caches = model.new_caches(2, rc.SEQ)
        steps = [model(tokens[:, :5], caches)]  # a prompt of 5, then one token at a time
        steps += [model(tokens[:, t : t + 1], caches) for t in range(5, rc.SEQ)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-10, rtol=1e-10)
    # the bytes the caches hold after the whole sequence are the formula's
    held = sum(c.nbytes for c in caches if c is not None)
    # (float64 here: twice the float32 bytes of cache_bytes_per_token; batch 2)
    want = round(rc.cache_bytes_per_token(name) * rc.SEQ * 2 * 2)
    assert held == model.cache_bytes(rc.SEQ, batch=2) == want


def test_generate_gives_the_same_tokens_with_and_without_the_window_latent_and_topk_caches():
    for name in ("window", "latent_small", "topk"):
        torch.manual_seed(0)
        model = rc.RecallModel(name).eval()
        prompt = rc.make_batch(1, generator=torch.Generator().manual_seed(0))[0][:, :4]
        out = generate(model, prompt, 10)
        assert out.tokens.shape == (1, 14)
        assert torch.equal(out.tokens, generate(model, prompt, 10, use_cache=False).tokens)


def test_a_window_alone_cannot_see_beyond_its_reach():
    model = _random_model("window")
    reach = rc.reach("window")
    assert reach == 2 * (rc.WINDOW - 1) == 14
    tokens = rc.make_batch(4, generator=torch.Generator().manual_seed(2))[0]
    far, near = tokens.clone(), tokens.clone()
    far[:, : rc.LENGTH - reach] = (far[:, : rc.LENGTH - reach] + 1) % rc.N_TOKENS  # out of reach
    near[:, rc.LENGTH - reach] = (near[:, rc.LENGTH - reach] + 1) % rc.N_TOKENS  # just in reach
    with torch.no_grad():
        base, f, n = model(tokens)[:, -1], model(far)[:, -1], model(near)[:, -1]
    assert torch.equal(base, f)
    assert not torch.allclose(base, n)
    assert rc.reach("hybrid") == rc.reach("mha") == rc.LENGTH


def test_indexer_path_equals_the_librarys_indexer_and_trains_by_kl():
    model = _random_model("topk")
    layer = model.layers[0]
    x = torch.randn(2, 7, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(layer._index_scores(x, None), layer.indexer(x))
    # the indexer's loss is a KL divergence: 0 when its softmax matches the target
    index = torch.randn(2, 7, 7, dtype=torch.float64)
    allowed = torch.ones(7, 7, dtype=torch.bool).tril()
    target = index.masked_fill(~allowed, -math.inf).softmax(-1)
    assert abs(float(rc._index_kl(index, target))) < 1e-12
    uniform = allowed.double() / allowed.sum(-1, keepdim=True)  # (7, 7): allowed keys alike
    want = (
        sum(
            float((uniform[t, : t + 1] * (uniform[t, : t + 1] / target[b, t, : t + 1]).log()).sum())
            for b in range(2)
            for t in range(7)
        )
        / 14
    )
    assert float(rc._index_kl(index, uniform.expand(2, 7, 7))) == pytest.approx(want, rel=1e-12)


def test_cache_bytes_per_token_follow_from_the_shapes():
    # fp32; 2 layers; 4 heads of 8; keys + values = 2 x 8 numbers per head and token
    b = rc.cache_bytes_per_token
    assert b("mha") == 2 * 4 * 16 * 4 == 512
    assert b("gqa") == 2 * 2 * 16 * 4
    assert b("latent_large") == 2 * 16 * 4 and b("latent_small") == 2 * 3 * 4
    assert b("window") == pytest.approx(2 * 64 * 4 * rc.WINDOW / rc.SEQ)
    assert b("hybrid") == pytest.approx((64 * rc.WINDOW + 64 * rc.SEQ) * 4 / rc.SEQ)
    assert b("topk") == 2 * (64 + 8) * 4  # every key kept, plus the indexer's keys
    assert b("shared") == 64 * 4
    assert b("window", seq=1000) == pytest.approx(2 * 64 * 4 * rc.WINDOW / 1000)


# ---------------------------------------------------------------------------- shipped files


def test_shipped_files_are_small_and_complete():
    paths = (rc.WEIGHTS_PATH, rc.LOG_PATH, rc.RESULTS_PATH)
    assert sum(p.stat().st_size for p in paths) <= 1_000_000
    log = rc.read_log()
    assert list(log) == ["step", *NAMES]
    assert log["step"].tolist() == list(range(rc.TRAINING["steps"]))
    for name in NAMES:
        assert np.isfinite(log[name]).all()
        assert log[name][:50].mean() > log[name][-50:].mean()  # every variant learned something
    lines = rc.RESULTS_PATH.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "variant\tdistance\tcorrect\ttotal" and len(lines) == 1 + 8 * rc.LENGTH


def test_shipped_results_are_what_the_shipped_weights_score(shipped_results):
    res = shipped_results
    assert res.names == NAMES and res.per_distance == rc.EVALUATION["per_distance"]
    for name in NAMES:
        correct = rc.evaluate(rc.load_model(name))
        np.testing.assert_array_equal(correct / res.per_distance, res.by_distance[name])
        assert res.accuracy[name] == pytest.approx(correct.sum() / (res.per_distance * rc.LENGTH))


def test_shipped_results_show_what_the_lesson_states(shipped_results):
    res = shipped_results
    W, reach = res.window, res.reach["window"]
    acc = res.accuracy
    # the full and the grouped keys solve the task
    assert acc["mha"] >= 0.98 and acc["gqa"] >= 0.98 and acc["shared"] >= 0.98
    # a window alone: right inside the window, chance beyond its reach
    assert res.accuracy_between("window", 1, W - 1) >= 0.98
    assert res.accuracy_between("window", reach + 1, rc.LENGTH) <= res.chance + 0.05
    # one global layer gets everything back
    assert acc["hybrid"] >= 0.98 and res.accuracy_between("hybrid", reach + 1, rc.LENGTH) >= 0.98
    # the large latent keeps the accuracy the small one loses
    assert acc["latent_large"] >= 0.98 and acc["latent_small"] <= acc["latent_large"] - 0.3
    # and the costs
    cost = res.cache_bytes_per_token
    assert cost["latent_small"] < cost["latent_large"] < cost["gqa"] < cost["mha"] < cost["topk"]
    assert cost["window"] < cost["hybrid"] < cost["mha"]


def _answer_loss_column(name: str, steps: int | None = None) -> list[str]:
    log = rc.LOG_PATH.read_text(encoding="utf-8").splitlines()
    col = log[0].split("\t").index(name)
    rows = log[1:] if steps is None else log[1 : steps + 1]
    return ["step", *(f"{i}\t{ln.split(chr(9))[col]}" for i, ln in enumerate(rows))]


# In `make test`: the first steps of a variant's run (the same code, seed and batches, Adam
# at a constant learning rate, so a prefix of the full run) retrace the shipped log, for
# plain attention and for top-k selection with its indexer's KL loss. The whole run of one
# variant, weights and log, is in `make test-regenerate` (the third CI stage).
SHORT_STEPS = 100


@pytest.mark.parametrize("name", ["mha", "topk"])
def test_a_short_run_retraces_the_start_of_the_shipped_log(name):
    _, history = rc.train_variant(name, steps=SHORT_STEPS)
    fresh = ["step", *(f"{i}\t{x:.4f}" for i, x in enumerate(history["answer_loss"]))]
    assert len(fresh) == SHORT_STEPS + 1
    assert_log_reproduced(fresh, _answer_loss_column(name, SHORT_STEPS))


@pytest.mark.regenerate
def test_regenerating_one_variant_gives_the_shipped_weights_and_log():
    name = (
        "latent_small"  # the cheapest to train (~13 s of CPU), and not at 100 %: every bit counts
    )
    model, history = rc.train_variant(name)
    # byte for byte on the machine that made them; elsewhere up to float rounding
    # (tests/reproduce.py says how much and why)
    shipped = torch.load(rc.WEIGHTS_PATH, weights_only=True)[name]
    assert_state_reproduced(model.state_dict(), shipped, name)
    shipped_col = _answer_loss_column(name)
    fresh_col = ["step", *(f"{i}\t{x:.4f}" for i, x in enumerate(history["answer_loss"]))]
    assert_log_reproduced(fresh_col, shipped_col)


def test_the_command_needs_train(capsys):
    with pytest.raises(SystemExit):
        rc._main([])
    assert "--train" in capsys.readouterr().err
