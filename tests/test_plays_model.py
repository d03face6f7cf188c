"""The character models of the plays that lesson 16 reads (attnlib.tasks.plays): the plain
recipe's and the copy recipe's (repeated passages).

Oracles: plain Python loops over hand-built attention maps for the head scores; counting
characters with ``collections.Counter`` for the baselines; windows of distinct tokens for
``repeat_passages``; the shipped results tables for the shipped weights. In `make test`
each recipe's shortened schedule retraces its shipped log step by step; the full run is in
`make test-regenerate` (the third CI stage): byte for byte on the machine that made the
shipped files; on another CPU the 4000-step runs drift further than tests/reproduce.py's
rounding bounds, so there each retrained model must measure as the shipped one does (see the
regeneration test).
"""

from __future__ import annotations

import math
import subprocess
from collections import Counter

import numpy as np
import pytest
import torch
from reproduce import LOG_ATOL, assert_log_reproduced

from attnlib.gpt import GPT
from attnlib.tasks import plays as P
from attnlib.tasks.text import CharVocab

# The course's budget for the training: 15 minutes on one thread (the two recipes side by
# side). The recorded times are the second of two runs that gave identical files: 827 s
# and 821 s with the machine shared with other workers; the first, on a busier machine,
# took 1656 s and 1644 s (data/README.md).
TRAIN_SECONDS = 900
TIMEOUT = 2700  # the regeneration: two runs side by side, on a machine shared with others


@pytest.fixture(scope="module")
def shipped():
    """recipe name -> (model, results, head scores) of the shipped files, measured once."""
    out = {}
    for name, recipe in P.RECIPES.items():
        model = P.load_model(recipe.weights)
        out[name] = (model, P.read_results(recipe.results), P.head_scores(model))
    return out


# ---------------------------------------------------------------------------- the data


def test_the_split_holds_out_the_tempest_whole():
    vocab = P.vocabulary()
    train, val = P.training_tokens(), P.validation_tokens()
    text = vocab.decode(val)
    assert text.startswith("THE TEMPEST") and text.endswith("\n")
    assert "THE TEMPEST" not in vocab.decode(train)
    assert len(train) + len(val) == pytest.approx(1_036_183, abs=10)  # all but separators
    windows = P.validation_windows(val, 256)
    # consecutive windows overlap by one token: every token but the first is a target once
    assert torch.equal(windows[1:, 0], windows[:-1, -1])
    assert windows.shape[1] == 257 and windows[:, 1:].numel() > 0.99 * (len(val) - 1)


def test_baselines_equal_counting_characters():
    train = torch.tensor([0, 1, 1, 2, 0, 1, 2, 2, 1])
    held = torch.tensor([1, 2, 0, 0])
    uni, bi = (
        Counter(train.tolist()),
        Counter(zip(train[:-1].tolist(), train[1:].tolist(), strict=True)),
    )
    p_uni = lambda c: (uni[c] + 1) / (len(train) + 3)  # noqa: E731
    p_bi = lambda a, b: (bi[a, b] + 1) / (sum(bi[a, x] for x in range(3)) + 3)  # noqa: E731
    want_uni = -np.mean([math.log(p_uni(c)) for c in held[1:].tolist()])
    want_bi = -np.mean(
        [math.log(p_bi(a, b)) for a, b in zip(held[:-1].tolist(), held[1:].tolist(), strict=True)]
    )
    assert P.unigram_loss(train, held, 3) == pytest.approx(want_uni)
    assert P.bigram_loss(train, held, 3) == pytest.approx(want_bi)


def test_learning_rate_warms_up_then_decays_to_its_final_fraction():
    t = P.TRAINING
    lrs = np.array([P.learning_rate(s, t) for s in range(t["steps"])])
    assert lrs[0] == pytest.approx(t["lr"] / t["warmup"])
    assert lrs[t["warmup"] - 1] == pytest.approx(t["lr"]) == lrs.max()
    assert lrs[-1] == pytest.approx(t["final"] * t["lr"])
    assert (np.diff(lrs[: t["warmup"]]) > 0).all() and (np.diff(lrs[t["warmup"] :]) <= 0).all()
    with pytest.raises(ValueError, match="step"):
        P.learning_rate(t["steps"], t)


def test_repeat_passages_writes_an_earlier_passage_again_later():
    gen = torch.Generator().manual_seed(0)
    windows = torch.arange(6 * 40).reshape(6, 40)  # every token distinct: copies are visible
    out = P.repeat_passages(windows, 4, (3, 9), generator=gen)
    assert out.shape == windows.shape and torch.equal(out[4:], windows[4:])
    assert torch.equal(windows, torch.arange(6 * 40).reshape(6, 40))  # the input is unchanged
    for row, before in zip(out[:4], windows[:4], strict=True):
        changed = (row != before).nonzero().flatten()
        p, size = int(changed[0]), len(changed)
        assert 3 <= size <= 9 and torch.equal(changed, torch.arange(p, p + size))
        q = int(row[p]) - int(before[0])  # where the passage came from
        assert q + size <= p and torch.equal(row[p : p + size], before[q : q + size])
    # the same generator state gives the same windows; n = 0 changes nothing
    again = P.repeat_passages(windows, 4, (3, 9), generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    assert torch.equal(P.repeat_passages(windows, 0, (3, 9)), windows)
    with pytest.raises(ValueError, match="lengths\\[1\\] = 20"):
        P.repeat_passages(windows, 1, (3, 20))
    with pytest.raises(ValueError, match="n"):
        P.repeat_passages(windows, 7, (3, 9))
    with pytest.raises(ValueError, match="LongTensor"):
        P.repeat_passages(windows.float(), 1, (3, 9))


def test_training_batch_is_windows_at_seeded_random_starts():
    tokens = torch.arange(1000) * 3  # distinct ids: each window shows where it starts
    x = P.training_batch(tokens, 8, 20, torch.Generator().manual_seed(5))
    assert x.shape == (8, 21) and x.dtype == torch.long
    # the one draw train_model makes per step (its short runs retrace the shipped logs)
    starts = torch.randint(0, 1000 - 20, (8,), generator=torch.Generator().manual_seed(5))
    for row, s in zip(x.tolist(), starts.tolist(), strict=True):
        assert row == tokens[s : s + 21].tolist()
    # every start up to the last full window, and no further
    many = P.training_batch(torch.arange(12), 400, 10, torch.Generator().manual_seed(0))
    assert sorted(set(many[:, 0].tolist())) == [0, 1]
    with pytest.raises(ValueError, match="n > seq = 12"):
        P.training_batch(torch.arange(12), 2, 12)
    with pytest.raises(TypeError, match="tokens must be a LongTensor"):
        P.training_batch(torch.arange(12.0), 2, 4)
    with pytest.raises(ValueError, match=r"tokens must have shape \(n,\)"):
        P.training_batch(torch.arange(12)[None], 2, 4)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        P.training_batch(torch.arange(12), 0, 4)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        P.training_batch(torch.arange(12), 2, 4, 0)


# ---------------------------------------------------------------------------- head scores


def _random_causal(seed, batch, n_heads, seq):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(batch, n_heads, seq, seq, generator=gen, dtype=torch.float64)
    return torch.softmax(s.masked_fill(torch.ones(seq, seq).triu(1).bool(), -math.inf), -1)


def _one_hot_map(seq, key_of):
    """(1, 1, seq, seq) weights: query t attends only to key_of(t)."""
    w = torch.zeros(1, 1, seq, seq, dtype=torch.float64)
    for t in range(seq):
        w[0, 0, t, key_of(t)] = 1.0
    return w


def test_scores_of_hand_built_heads():
    seq, period = 12, 5
    prev = _one_hot_map(seq, lambda t: max(t - 1, 0))
    induct = _one_hot_map(seq, lambda t: t - period + 1 if t >= period else t)
    first = _one_hot_map(seq, lambda t: 0)
    self_ = _one_hot_map(seq, lambda t: t)
    maps = torch.cat([prev, induct, first, self_], 1)  # (1, 4 heads, seq, seq)
    keys0 = torch.zeros(seq, dtype=torch.bool)
    keys0[0] = True
    assert P.previous_token_score(maps).tolist() == [1.0, 0.0, 1 / 11, 0.0]
    assert P.prefix_matching_score(maps, period).tolist() == [0.0, 1.0, 0.0, 0.0]
    assert P.attention_on(maps, keys0).tolist() == [1 / 11, 0.0, 1.0, 0.0]
    # uniform attention: the share on position 0 is the mean of 1/(t+1) over t = 1..seq-1
    uniform = torch.tril(torch.ones(seq, seq, dtype=torch.float64))
    uniform = (uniform / uniform.sum(-1, keepdim=True))[None, None]
    assert float(P.attention_on(uniform, keys0)[0]) == pytest.approx(
        np.mean([1 / (t + 1) for t in range(1, seq)])
    )


def test_scores_match_loops_on_random_maps():
    batch, heads, seq, period = 3, 2, 10, 4
    w = _random_causal(0, batch, heads, seq)
    nl = torch.zeros(batch, seq, dtype=torch.bool)
    nl[0, 3] = nl[1, 5] = nl[2, 0] = nl[2, 9] = True
    for h in range(heads):
        prev = np.mean([float(w[b, h, t, t - 1]) for b in range(batch) for t in range(1, seq)])
        pm = [float(w[b, h, t, t - period + 1]) for b in range(batch) for t in range(period, seq)]
        on = [
            sum(float(w[b, h, t, k]) for k in range(t + 1) if nl[b, k])
            for b in range(batch)
            for t in range(1, seq)
        ]
        assert float(P.previous_token_score(w)[h]) == pytest.approx(prev)
        assert float(P.prefix_matching_score(w, period)[h]) == pytest.approx(np.mean(pm))
        assert float(P.attention_on(w, nl)[h]) == pytest.approx(np.mean(on))


def test_repeated_random_text_repeats_a_block_without_newlines():
    vocab = CharVocab("\nab")
    tokens = P.repeated_random_text(50, 7, vocab, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (50, 14) and torch.equal(tokens[:, :7], tokens[:, 7:])
    assert set(tokens.unique().tolist()) == {1, 2}


def test_bad_input_is_refused():
    w = _random_causal(1, 1, 2, 6)
    with pytest.raises(ValueError, match="seq, seq"):
        P.previous_token_score(torch.ones(1, 1, 3, 4))
    with pytest.raises(ValueError, match="period"):
        P.prefix_matching_score(w, 6)
    with pytest.raises(ValueError, match="BoolTensor"):
        P.attention_on(w, torch.zeros(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="no character"):
        P.repeated_random_text(1, 3, CharVocab("\n"))
    with pytest.raises(TypeError, match="GPT"):
        P.validation_loss(object())
    with pytest.raises(ValueError, match="tokens"):
        P.validation_windows(torch.arange(10), 10)
    with pytest.raises(ValueError, match="outside"):
        P.unigram_loss(torch.tensor([0, 5]), torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match="LongTensor"):
        P.bigram_loss(torch.tensor([0.0, 1.0]), torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match="lacks"):
        P.train_model({"steps": 3})
    with pytest.raises(FileNotFoundError, match="--train"):
        P.load_model("/nonexistent/model.pt")
    with pytest.raises(FileNotFoundError, match="--train"):
        P.read_results("/nonexistent/results.tsv")


def test_the_command_needs_train(capsys):
    with pytest.raises(SystemExit):
        P._main([])
    assert "--train" in capsys.readouterr().err


# ---------------------------------------------------------------------------- shipped files


@pytest.mark.parametrize("name", list(P.RECIPES))
def test_shipped_files_are_small_and_the_logs_complete(name):
    recipe = P.RECIPES[name]
    assert recipe.weights.stat().st_size <= 5_000_000
    for path, training in (
        (recipe.log, recipe.training),
        (recipe.short_log, recipe.short_training),
    ):
        log = P.read_log(path)
        assert log["step"].tolist() == list(range(training["steps"]))
        evaluated = ~np.isnan(log["val_loss"])
        want = (log["step"] % training["eval_every"] == 0) | (log["step"] == log["step"][-1])
        assert np.array_equal(evaluated, want)
        assert not np.isnan(log["loss"]).any()


def test_the_recipes_differ_only_in_repeated_passages():
    def without(training, *keys):
        return {k: v for k, v in training.items() if k not in keys}

    plain, copy = P.RECIPES["plain"], P.RECIPES["copy"]
    assert plain.training["repeats"] == 0 and copy.training["repeats"] == 1
    repeats = ("repeats", "repeat_lengths")
    assert without(copy.training, *repeats) == without(plain.training, *repeats)
    # each short schedule is its full one with fewer, smaller steps
    schedule = ("steps", "batch", "warmup", "eval_every")
    for recipe in (plain, copy):
        assert without(recipe.short_training, *schedule) == without(recipe.training, *schedule)


@pytest.mark.parametrize("name", list(P.RECIPES))
def test_shipped_weights_give_the_shipped_validation_loss_and_baselines(shipped, name):
    model, results, _ = shipped[name]
    assert isinstance(model, GPT) and not model.training
    assert {k: getattr(model, k) for k in P.CONFIG} == P.CONFIG
    assert abs(P.validation_loss(model) - results["val_loss"]) <= LOG_ATOL
    vocab, train, val = P.vocabulary(), P.training_tokens(), P.validation_tokens()
    assert P.unigram_loss(train, val, vocab.size) == pytest.approx(
        results["unigram_loss"], abs=1e-4
    )
    assert P.bigram_loss(train, val, vocab.size) == pytest.approx(results["bigram_loss"], abs=1e-4)
    # what lesson 16 states: the model beats both baselines by far
    assert results["val_loss"] < results["bigram_loss"] - 0.4 < results["unigram_loss"] - 1.0
    assert results["train_seconds"] <= TRAIN_SECONDS


@pytest.mark.parametrize("name", list(P.RECIPES))
def test_shipped_heads_are_the_shipped_scores(shipped, name):
    _, results, scores = shipped[name]
    for score in P.SCORE_NAMES:
        table = getattr(scores, score)
        for (layer, head), value in np.ndenumerate(table):
            got = results[f"{score}/{layer}.{head}"]
            assert abs(value - got) <= LOG_ATOL, (score, layer, head)


def test_the_plain_model_has_a_previous_token_head_and_no_induction_head(shipped):
    scores = shipped["plain"][2]
    # what lesson 16 states: a previous-token head in layer 0 (head 0.2); a head that reads
    # newlines (1.3, over five times what uniform attention puts on them); no induction head
    # (prefix matching at the level of uniform attention, about 1/t, on random and on real
    # text) and no sink on the first position (no head above the uniform share)
    assert scores.best("previous_token")[:2] == (0, 2) and scores.best("previous_token")[2] > 0.9
    assert scores.best("newline")[:2] == (1, 3)
    assert scores.best("newline")[2] > 5 * scores.uniform_newline
    assert scores.prefix_matching.max() < 0.03 and scores.prefix_matching_text.max() < 0.03
    assert scores.first_position.max() < 1.1 * scores.uniform_first


def test_the_copy_model_has_an_induction_head_in_layer_1(shipped):
    scores = shipped["copy"][2]
    plain = shipped["plain"][2]
    # what lesson 16 states: the same previous-token head in layer 0 (0.2), and in layer 1
    # an induction head (1.0, with 1.1 a weaker second): on repeated real text it puts
    # 0.44 of its attention on the token after the earlier occurrence (the plain model's
    # heads: under 0.03), on repeated random characters 0.19, over 15 times the uniform
    # level (about 0.011) -- less than on text, because a third of the characters drawn
    # there are ones the plays hardly use (data/README.md)
    assert scores.best("previous_token")[:2] == (0, 2) and scores.best("previous_token")[2] > 0.8
    assert scores.best("prefix_matching")[:2] == (1, 0) == scores.best("prefix_matching_text")[:2]
    assert scores.prefix_matching_text[1, 0] > 0.4 and scores.prefix_matching_text[1, 1] > 0.3
    assert scores.prefix_matching[1, 0] > 0.15 > 10 * plain.prefix_matching.max()
    # layer 0 cannot: its keys hold only their own character and position
    assert (scores.prefix_matching[0] < 0.01).all()


# In `make test`: the shortened schedules (the same model, data and code; fewer, smaller
# steps) retrace their shipped logs step by step, their evaluations included.
@pytest.mark.parametrize("name", list(P.RECIPES))
def test_a_short_run_retraces_the_shipped_short_log(tmp_path, name):
    recipe = P.RECIPES[name]
    _, rows, _ = P.train_model(recipe.short_training)
    P.write_log(rows, tmp_path / "log.tsv")
    fresh = (tmp_path / "log.tsv").read_text(encoding="utf-8").splitlines()
    assert_log_reproduced(fresh, recipe.short_log.read_text(encoding="utf-8").splitlines())


# A 4000-step run amplifies float rounding: retrained on this AVX-512 machine with
# ATEN_CPU_CAPABILITY=avx2 (another vector path, as another CPU takes), the weights came out
# up to 0.96 (plain) and 0.35 (copy) apart, the validation losses within 0.001 of the shipped
# ones, and every previous-token, prefix-matching and first-position score within 0.02 (the
# largest move: the plain model's head 0.3, previous token, by 0.018; newline shares up to
# 0.03). The induction head formed the same: 0.190 random, 0.441 text (shipped 0.191, 0.440).
# So: byte for byte where the run reproduces the bytes (the machine that made them); on
# another CPU, the same model as measured — the loss and the scores lesson 16's claims rest on.
OTHER_CPU_LOSS = 0.03
OTHER_CPU_SCORE = 0.03
STABLE_SCORES = ("previous_token/", "prefix_matching/", "prefix_matching_text/", "first_position/")


def assert_same_model_as_measured(got: dict, want: dict, recipe: str) -> None:
    """``got`` (a retrain's results) measures as ``want`` does, within what another CPU's
    rounding moved them (above); raises AssertionError naming the recipe and the first score
    that does not."""
    assert list(got) == list(want), f"{recipe}: results: names differ"
    assert abs(got["val_loss"] - want["val_loss"]) <= OTHER_CPU_LOSS, (
        f"{recipe}: validation loss {got['val_loss']} against the shipped {want['val_loss']}"
    )
    for name in want:
        if name.startswith(STABLE_SCORES):
            assert abs(got[name] - want[name]) <= OTHER_CPU_SCORE, (
                f"{recipe}: {name}: {got[name]} against the shipped {want[name]}"
            )


@pytest.mark.parametrize("recipe", list(P.RECIPES))
def test_the_other_cpu_comparison_can_fail(recipe):
    want = P.read_results(P.RECIPES[recipe].results)
    assert_same_model_as_measured(dict(want), want, recipe)
    worse = {**want, "prefix_matching/1.2": want["prefix_matching/1.2"] + 0.3}
    with pytest.raises(AssertionError, match=f"{recipe}: prefix_matching/1.2"):
        assert_same_model_as_measured(worse, want, recipe)
    with pytest.raises(AssertionError, match="validation loss"):
        assert_same_model_as_measured({**want, "val_loss": want["val_loss"] + 0.1}, want, recipe)


@pytest.mark.slow
@pytest.mark.regenerate
@pytest.mark.timeout(TIMEOUT)
def test_training_command_regenerates_the_shipped_files(tmp_path, python):
    res = subprocess.run(
        [python, "-m", "attnlib.tasks.plays", "--train", "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert "validation loss" in res.stdout, res.stdout
    for name, recipe in P.RECIPES.items():
        fresh = torch.load(tmp_path / recipe.weights.name, weights_only=True)
        shipped = torch.load(recipe.weights, weights_only=True)
        got, want = P.read_results(tmp_path / recipe.results.name), P.read_results(recipe.results)
        # the short run retraces its log on any CPU (tests/reproduce.py)
        short = (tmp_path / recipe.short_log.name).read_text(encoding="utf-8").splitlines()
        assert_log_reproduced(short, recipe.short_log.read_text(encoding="utf-8").splitlines())
        if list(fresh) == list(shipped) and all(torch.equal(fresh[k], shipped[k]) for k in shipped):
            # the same bytes: then the log and every result must agree too
            log = (tmp_path / recipe.log.name).read_text(encoding="utf-8").splitlines()
            assert_log_reproduced(log, recipe.log.read_text(encoding="utf-8").splitlines())
            assert list(got) == list(want)
            for key in want:
                if key != "train_seconds":
                    assert abs(got[key] - want[key]) <= LOG_ATOL, (name, key)
        else:
            assert_same_model_as_measured(got, want, name)
