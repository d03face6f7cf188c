"""The four trained variants of the block that lesson 15 reads (attnlib.tasks.block_variants).

Oracles: the shipped log for the shortened schedules (retraced step by step in `make test`:
the same models, data and code, 8 steps of every run); the models' own state dicts for "the
variants start from the same weights"; the full retrain in `make test-regenerate` (CI's
third stage), byte for byte on the machine that made the files, and otherwise within what
another CPU's rounding moves a 2000-step run (see the regeneration test).
"""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest
import torch
from reproduce import assert_log_reproduced

from attnlib.tasks import block_variants as BV
from attnlib.tasks import plays

TIMEOUT = 7200  # the regeneration: eight runs, two at a time, on a machine shared with others


def _schedule(run: str, training: dict) -> dict:
    return {**training, "lr": BV.RUNS[run][1]}


# ---------------------------------------------------------------------------- the runs


def test_the_runs_are_every_variant_at_every_peak_rate():
    assert set(BV.RUNS.values()) == {(v, lr) for v in BV.VARIANTS for lr in BV.LEARNING_RATES}
    assert set(BV.LABELS) == set(BV.VARIANTS)
    # the short schedule is the full one with fewer, smaller steps
    schedule = ("steps", "batch", "warmup", "eval_every", "eval_windows")
    without = lambda t: {k: v for k, v in t.items() if k not in schedule}  # noqa: E731
    assert without(BV.SHORT_TRAINING) == without(BV.TRAINING)


def test_the_variants_start_from_the_same_weights_and_differ_as_named():
    models = {v: BV.new_model(v) for v in BV.VARIANTS}
    pre = models["pre_ln"].state_dict()
    for variant, model in models.items():
        state = model.state_dict()
        assert set(state) <= set(pre)
        assert all(torch.equal(state[k], pre[k]) for k in state), variant
        assert {k: getattr(model, k) for k in BV.CONFIG} == BV.CONFIG
    assert (models["no_layernorm"].norm, models["post_ln"].norm) == ("none", "post")
    assert not models["no_residual"].residual and models["no_residual"].norm == "pre"
    # no LayerNorm anywhere: none of the 6 blocks' two nor the final one
    missing = set(pre) - set(models["no_layernorm"].state_dict())
    assert len(missing) == 2 * (2 * 6 + 1)


def test_bad_input_is_refused(capsys):
    with pytest.raises(ValueError, match="variant must be one of"):
        BV.new_model("sandwich_ln")
    with pytest.raises(ValueError, match="lacks"):
        BV.train_variant("pre_ln", {"steps": 3})
    with pytest.raises(ValueError, match="run must be one of"):
        BV.train_run("pre_ln@0.1")
    with pytest.raises(FileNotFoundError, match="--train"):
        BV.read_results("/nonexistent/results.tsv")
    with pytest.raises(SystemExit):
        BV._main([])
    assert "--train" in capsys.readouterr().err


# ---------------------------------------------------------------------------- shipped files


def test_the_shipped_logs_are_complete():
    for path, training in ((BV.LOG_PATH, BV.TRAINING), (BV.SHORT_LOG_PATH, BV.SHORT_TRAINING)):
        log = BV.read_log(path)
        steps = training["steps"]
        assert log["step"].tolist() == list(range(steps))
        i = np.arange(steps)
        want = (i == 0) | ((i + 1) % training["eval_every"] == 0) | (i == steps - 1)
        for run in BV.RUNS:
            assert np.array_equal(~np.isnan(log[f"val_loss/{run}"]), want), (path.name, run)
            assert not np.isnan(log[f"loss/{run}"]).any(), (path.name, run)


def test_the_shipped_results_measure_every_run():
    results = BV.read_results()
    assert list(results) == list(BV.RUNS)
    n = BV.CONFIG["n_layers"]
    keys = {"val_loss", "train_seconds"}
    keys |= {f"{m}/{b}" for m in ("score_std", "peak_weight") for b in range(1, n + 1)}
    for run, res in results.items():
        assert set(res) == keys, run
        assert all(math.isfinite(x) for x in res.values()), run
    # the provenance lines say what made the file
    text = BV.RESULTS_PATH.read_text(encoding="utf-8")
    assert f"# command: {BV.TRAIN_COMMAND}" in text and "# torch: " in text


def test_what_lesson_15_states_about_the_runs():
    # lesson 15, optional part D (the same claims, asserted there too): at both peak rates
    # pre-LN ends lowest; no residual path never leaves the unigram baseline; post-LN comes
    # second at 1e-3 and stays at the baseline at 6e-3; no LayerNorm is far behind pre-LN
    # at 1e-3 and close to it at 6e-3
    results = BV.read_results()
    unigram = plays.unigram_loss(
        plays.training_tokens(), plays.validation_tokens(), plays.vocabulary().size
    )
    low = {run: res["val_loss"] for run, res in results.items() if run.endswith("@0.001")}
    high = {run: res["val_loss"] for run, res in results.items() if run.endswith("@0.006")}
    order = ("pre_ln", "post_ln", "no_layernorm", "no_residual")
    assert sorted(low, key=low.get) == [f"{v}@0.001" for v in order]
    assert min(high, key=high.get) == "pre_ln@0.006"
    assert high["no_layernorm@0.006"] - high["pre_ln@0.006"] < 0.05
    assert low["no_layernorm@0.001"] - low["pre_ln@0.001"] > 0.3
    for run in ("no_residual@0.001", "no_residual@0.006", "post_ln@0.006"):
        assert abs(results[run]["val_loss"] - unigram) < 0.01, run
    assert low["post_ln@0.001"] < unigram - 1.0


# In `make test`: the shortened schedules (the same models, data and code; fewer, smaller
# steps) retrace their shipped log step by step, evaluations included.
def test_the_short_runs_retrace_the_shipped_short_log(tmp_path):
    rows = {}
    for run, (variant, _) in BV.RUNS.items():
        _, rows[run], _ = BV.train_variant(variant, _schedule(run, BV.SHORT_TRAINING))
    BV.write_log(rows, tmp_path / "log.tsv")
    fresh = (tmp_path / "log.tsv").read_text(encoding="utf-8").splitlines()
    assert_log_reproduced(fresh, BV.SHORT_LOG_PATH.read_text(encoding="utf-8").splitlines())


# A 2000-step run amplifies float rounding: on another CPU the logged losses drift apart
# step by step (tests/test_plays_model.py measured 4000-step runs moving their validation
# loss by up to 0.001). So: byte for byte where the run reproduces the bytes (the machine
# that made them); on another CPU every run's final validation loss within OTHER_CPU_LOSS.
OTHER_CPU_LOSS = 0.03


@pytest.mark.slow
@pytest.mark.regenerate
@pytest.mark.timeout(TIMEOUT)
def test_training_command_regenerates_the_shipped_files(tmp_path, python):
    res = subprocess.run(
        [python, "-m", "attnlib.tasks.block_variants", "--train", "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert "validation loss" in res.stdout, res.stdout
    short = (tmp_path / BV.SHORT_LOG_PATH.name).read_text(encoding="utf-8").splitlines()
    assert_log_reproduced(short, BV.SHORT_LOG_PATH.read_text(encoding="utf-8").splitlines())
    got, want = BV.read_results(tmp_path / BV.RESULTS_PATH.name), BV.read_results()
    fresh_log = (tmp_path / BV.LOG_PATH.name).read_text(encoding="utf-8")
    if fresh_log == BV.LOG_PATH.read_text(encoding="utf-8"):
        for run in want:  # the same bytes: then every measurement too
            for key in want[run]:
                if key != "train_seconds":
                    assert got[run][key] == want[run][key], (run, key)
    else:
        for run in want:
            assert abs(got[run]["val_loss"] - want[run]["val_loss"]) <= OTHER_CPU_LOSS, run
