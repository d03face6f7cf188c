"""Lesson 16's Exercise 16.1: realistic submissions, named by measurement; the reference
against independent oracles.

* ``prefix_matching_score``: functions written the way learners write them (the earlier
  token itself as the key, a diagonal one query too long, every query from 0, the second
  block's first query left out, rows and columns swapped, the mean over the heads or of one
  sequence, a sum), one mistake or two at
  once, each named with all of its ids; correct functions written differently (a loop,
  ``torch.diagonal``, numpy) pass with no diagnosis; the reference equals an explicit loop
  and ``attnlib.tasks.plays.prefix_matching_score`` on every visible and hidden case.

Exercise 16.2, ``ablate_head``, is tested in tests/test_ex_ablation.py. The first-position
score (``first_position_share``) was retired with its exercise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from named import assert_correct, assert_named, grader_check_hidden

from attnlib import checks
from attnlib.checks import get_exercise
from attnlib.tasks import plays

# ----------------------------------------------------------------------------------------
# prefix_matching_score(weights, period)
# ----------------------------------------------------------------------------------------


def pm_loop(weights, period):
    batch, n_heads, seq, _ = weights.shape
    out = torch.zeros(n_heads, dtype=weights.dtype)
    for h in range(n_heads):
        total = 0.0
        for b in range(batch):
            for t in range(period, seq):
                total += float(weights[b, h, t, t - period + 1])
        out[h] = total / (batch * (seq - period))
    return out


def pm_diagonal(weights, period):
    d = torch.diagonal(weights, offset=-(period - 1), dim1=-2, dim2=-1)  # queries period-1 ..
    return d[..., 1:].mean(dim=(0, 2))


def pm_numpy(weights, period):
    w = weights.numpy()
    seq = w.shape[-1]
    t = np.arange(period, seq)
    return w[:, :, t, t - period + 1].mean(axis=(0, 2))


def pm_same_token(weights, period):
    t = torch.arange(period, weights.shape[-1])
    return weights[:, :, t, t - period].mean(dim=(0, 2))


def pm_diagonal_too_long(weights, period):
    return torch.diagonal(weights, offset=-(period - 1), dim1=-2, dim2=-1).mean(dim=(0, 2))


def pm_every_query(weights, period):
    t = torch.arange(weights.shape[-1])
    return weights[:, :, t, t - period + 1].mean(dim=(0, 2))


def pm_swapped(weights, period):
    t = torch.arange(period, weights.shape[-1])
    return weights[:, :, t - period + 1, t].mean(dim=(0, 2))


def pm_mean_over_heads(weights, period):
    t = torch.arange(period, weights.shape[-1])
    return weights[:, :, t, t - period + 1].mean(dim=(1, 2))


def pm_first_sequence(weights, period):
    t = torch.arange(period, weights.shape[-1])
    return weights[0, :, t, t - period + 1].mean(dim=-1)


def pm_sum(weights, period):
    t = torch.arange(period, weights.shape[-1])
    return weights[:, :, t, t - period + 1].sum(dim=(0, 2))


def pm_same_token_summed(weights, period):
    t = torch.arange(period, weights.shape[-1])
    return weights[:, :, t, t - period].sum(dim=(0, 2))


def pm_starts_late(weights, period):
    t = torch.arange(period + 1, weights.shape[-1])  # "the first repeat has nothing before it"
    return weights[:, :, t, t - period + 1].mean(dim=(0, 2))


def pm_diagonal_first_sequence(weights, period):
    return torch.diagonal(weights[0], offset=-(period - 1), dim1=-2, dim2=-1).mean(dim=-1)


@pytest.mark.parametrize("fn", [pm_loop, pm_diagonal, pm_numpy])
def test_correct_prefix_matching_scores_written_differently_pass(fn):
    assert_correct("prefix_matching_score", fn)


@pytest.mark.parametrize(
    ("fn", "ids"),
    [
        (pm_same_token, ["key-is-earlier-token"]),
        (pm_diagonal_too_long, ["query-range-off-by-one"]),
        (pm_every_query, ["includes-first-block"]),
        (pm_swapped, ["query-key-swapped"]),
        (pm_mean_over_heads, ["mean-over-heads"]),
        (pm_first_sequence, ["first-batch-only"]),
        (pm_sum, ["sum-not-mean"]),
        (pm_same_token_summed, ["key-is-earlier-token", "sum-not-mean"]),
        (pm_diagonal_first_sequence, ["query-range-off-by-one", "first-batch-only"]),
        (pm_starts_late, ["query-range-starts-late"]),
    ],
    ids=lambda v: v.__name__ if callable(v) else "+".join(v),
)
def test_realistic_prefix_matching_mistakes_are_named(fn, ids):
    assert_named("prefix_matching_score", fn, ids)


def test_the_offset_finding_says_what_was_measured():
    (finding,) = checks.run("prefix_matching_score", pm_same_token).findings
    assert "query 6 reads key 3, where its own token occurred before" in finding.detail
    assert "4" not in finding.detail  # the key it should read is the answer: not told


def test_prefix_matching_reference_matches_a_loop_and_the_library():
    ex = get_exercise("prefix_matching_score")
    for case in ex.cases(hidden=True):
        w, period = case.args
        assert (w.triu(1) == 0).all()  # the cases are causal maps
        torch.testing.assert_close(ex.reference(w, period), pm_loop(w, period))
        torch.testing.assert_close(ex.reference(w, period), plays.prefix_matching_score(w, period))


def test_prefix_matching_reference_finds_a_perfect_induction_map():
    seq, period = 10, 4
    w = torch.zeros(2, 3, seq, seq, dtype=torch.float64)
    for t in range(seq):
        w[:, 0, t, t - period + 1 if t >= period else 0] = 1.0  # induction head
        w[:, 1, t, max(t - 1, 0)] = 1.0  # previous-token head
        w[:, 2, t, : t + 1] = 1.0 / (t + 1)  # uniform
    got = get_exercise("prefix_matching_score").reference(w, period)
    uniform = np.mean([1 / (t + 1) for t in range(period, seq)])
    torch.testing.assert_close(got, torch.tensor([1.0, 0.0, uniform], dtype=torch.float64))


def test_calling_the_library_earns_nothing():
    with pytest.raises(AssertionError, match="calls"):
        checks.check("prefix_matching_score", plays.prefix_matching_score)
    with pytest.raises(AssertionError):
        grader_check_hidden("prefix_matching_score", plays.prefix_matching_score)


def test_the_stub_is_one_line_and_the_next_cells_get_the_reference(capsys):
    def prefix_matching_score(weights, period):
        raise NotImplementedError()

    name = "prefix_matching_score"
    checks.check(name, prefix_matching_score)
    assert capsys.readouterr().err.startswith(f"✘ {name}: not written yet")
    assert checks.yours_or_reference(name, prefix_matching_score) is get_exercise(name).reference


def test_a_wrong_answer_fails_the_graders_hidden_check():
    with pytest.raises(AssertionError, match="key-is-earlier-token"):
        grader_check_hidden("prefix_matching_score", pm_same_token)


def test_the_first_position_exercise_is_retired():
    # lesson 16 measures attention sinks with plays.head_scores, without an exercise
    assert "first_position_share" not in checks.exercises()
