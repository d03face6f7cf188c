"""The character model of the plays that lesson 16 reads (attnlib.tasks.plays).

Oracles: plain Python loops over hand-built attention maps for the head scores; counting
characters with ``collections.Counter`` for the baselines; the shipped results table for the
shipped weights. In `make test` a shortened schedule retraces its shipped log step by step;
the full run is in `make test-regenerate` (the second CI stage): byte for byte on the machine
that made the shipped files; on another CPU the 4000-step run drifts further than
tests/reproduce.py's rounding bounds, so there the retrained model must measure as the shipped
one does (see the regeneration test).
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


@pytest.fixture(scope="module")
def model():
    return P.load_model()


@pytest.fixture(scope="module")
def results():
    return P.read_results()


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


def test_shipped_files_are_small_and_the_logs_complete():
    assert P.WEIGHTS_PATH.stat().st_size <= 5_000_000
    for path, training in ((P.LOG_PATH, P.TRAINING), (P.SHORT_LOG_PATH, P.SHORT_TRAINING)):
        log = P.read_log(path)
        assert log["step"].tolist() == list(range(training["steps"]))
        evaluated = ~np.isnan(log["val_loss"])
        want = (log["step"] % training["eval_every"] == 0) | (log["step"] == log["step"][-1])
        assert np.array_equal(evaluated, want)
        assert not np.isnan(log["loss"]).any()


def test_shipped_weights_give_the_shipped_validation_loss_and_baselines(model, results):
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
    assert results["train_seconds"] <= 900


def test_shipped_heads_are_the_stated_ones(model, results):
    scores = P.head_scores(model)
    for name in P.SCORE_NAMES:
        table = getattr(scores, name)
        for (layer, head), value in np.ndenumerate(table):
            assert abs(value - results[f"{name}/{layer}.{head}"]) <= LOG_ATOL, (name, layer, head)
    # what lesson 16 states: a previous-token head in layer 0 (head 0.2); a head that reads
    # newlines (0.0, over three times what uniform attention puts on them); no induction head
    # (prefix matching at the level of uniform attention, 1/t, on random and on real text)
    # and no sink on the first position (no head above the uniform share)
    assert scores.best("previous_token")[:2] == (0, 2) and scores.best("previous_token")[2] > 0.5
    assert scores.best("newline")[:2] == (0, 0)
    assert scores.best("newline")[2] > 3 * scores.uniform_newline
    assert scores.prefix_matching.max() < 0.05 and scores.prefix_matching_text.max() < 0.05
    assert scores.first_position.max() < 1.1 * scores.uniform_first


# In `make test`: the shortened schedule (the same model, data and code; fewer, smaller
# steps) retraces its shipped log step by step, its evaluations included.
def test_a_short_run_retraces_the_shipped_short_log(tmp_path):
    _, rows, _ = P.train_model(P.SHORT_TRAINING)
    P.write_log(rows, tmp_path / "log.tsv")
    fresh = (tmp_path / "log.tsv").read_text(encoding="utf-8").splitlines()
    assert_log_reproduced(fresh, P.SHORT_LOG_PATH.read_text(encoding="utf-8").splitlines())


# A 4000-step run amplifies float rounding: retrained on this AVX-512 machine with
# ATEN_CPU_CAPABILITY=avx2 (another vector path, as another CPU takes), the weights came out
# up to 0.49 apart, the validation loss 1.8811 against 1.8715, and every previous-token,
# prefix-matching and first-position score within 0.005 of the shipped one (newline shares
# moved up to 0.07: which late head leans on newlines is not a stable outcome of the run).
# So: byte for byte where the run reproduces the bytes (the machine that made them); on
# another CPU, the same model as measured — the loss and the scores lesson 16's claims rest on.
OTHER_CPU_LOSS = 0.03
OTHER_CPU_SCORE = 0.01
STABLE_SCORES = ("previous_token/", "prefix_matching/", "prefix_matching_text/", "first_position/")


def assert_same_model_as_measured(got: dict, want: dict) -> None:
    """``got`` (a retrain's results) measures as ``want`` does, within what another CPU's
    rounding moved them (above); raises AssertionError naming the first score that does not."""
    assert list(got) == list(want), "results: names differ"
    assert abs(got["val_loss"] - want["val_loss"]) <= OTHER_CPU_LOSS, (
        f"validation loss {got['val_loss']} against the shipped {want['val_loss']}"
    )
    for name in want:
        if name.startswith(STABLE_SCORES):
            assert abs(got[name] - want[name]) <= OTHER_CPU_SCORE, (
                f"{name}: {got[name]} against the shipped {want[name]}"
            )


def test_the_other_cpu_comparison_can_fail():
    want = P.read_results()
    assert_same_model_as_measured(dict(want), want)
    worse = {**want, "prefix_matching/1.2": want["prefix_matching/1.2"] + 0.3}
    with pytest.raises(AssertionError, match="prefix_matching/1.2"):
        assert_same_model_as_measured(worse, want)
    with pytest.raises(AssertionError, match="validation loss"):
        assert_same_model_as_measured({**want, "val_loss": want["val_loss"] + 0.1}, want)


@pytest.mark.slow
@pytest.mark.regenerate
@pytest.mark.timeout(1800)  # about 11 minutes of training, more than the default 600 s
def test_training_command_regenerates_the_shipped_files(tmp_path, python):
    res = subprocess.run(
        [python, "-m", "attnlib.tasks.plays", "--train", "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert "validation loss" in res.stdout, res.stdout
    fresh = torch.load(tmp_path / P.WEIGHTS_PATH.name, weights_only=True)
    shipped = torch.load(P.WEIGHTS_PATH, weights_only=True)
    got, want = P.read_results(tmp_path / P.RESULTS_PATH.name), P.read_results()
    # the short run (30 steps) retraces its log on any CPU (tests/reproduce.py)
    short = (tmp_path / P.SHORT_LOG_PATH.name).read_text(encoding="utf-8").splitlines()
    assert_log_reproduced(short, P.SHORT_LOG_PATH.read_text(encoding="utf-8").splitlines())
    if list(fresh) == list(shipped) and all(torch.equal(fresh[k], shipped[k]) for k in shipped):
        # the same bytes: then the log and every result must agree too
        got_log = (tmp_path / P.LOG_PATH.name).read_text(encoding="utf-8").splitlines()
        assert_log_reproduced(got_log, P.LOG_PATH.read_text(encoding="utf-8").splitlines())
        for name in want:
            if name != "train_seconds":
                assert abs(got[name] - want[name]) <= LOG_ATOL, name
    else:
        assert_same_model_as_measured(got, want)
