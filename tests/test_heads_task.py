"""The generated two-head task: targets checked against a plain-Python oracle, and the
claim of lesson 07 (one head fails, two heads of the same total size succeed) checked on
seeds the lesson does not use."""

from __future__ import annotations

import pytest
import torch

from attnlib.tasks.two_heads import (
    HeadsTask,
    HeadsTaskModel,
    attention_shares,
    make_batch,
    train_heads_model,
)


def test_targets_match_a_python_oracle():
    task = HeadsTask(n_letters=5, seq=9, p_marker=0.3)
    b = make_batch(task, 50, torch.Generator().manual_seed(0))
    assert b.tokens.shape == b.prev.shape == b.marker.shape == (50, 9)
    for row, prev, marker in zip(
        b.tokens.tolist(), b.prev.tolist(), b.marker.tolist(), strict=True
    ):
        assert row[0] >= task.n_letters  # position 0 is a marker
        assert prev[0] == marker[0] == -100
        for i in range(1, task.seq):
            assert prev[i] == row[i - 1] % task.n_letters
            last = max(j for j in range(i) if row[j] >= task.n_letters)
            assert marker[i] == row[last] - task.n_letters


def test_batches_are_seeded_and_mix_markers_and_letters():
    task = HeadsTask()
    a = make_batch(task, 64, torch.Generator().manual_seed(5))
    b = make_batch(task, 64, torch.Generator().manual_seed(5))
    assert torch.equal(a.tokens, b.tokens)
    share = (a.tokens[:, 1:] >= task.n_letters).float().mean().item()
    assert 0.15 < share < 0.35  # p_marker = 0.25
    # the two targets differ often, so predicting one from the other cannot pass
    assert (a.prev[:, 1:] != a.marker[:, 1:]).float().mean() > 0.5
    assert task.decode(a.tokens[0])[0].isupper()


def test_parameter_count_does_not_depend_on_heads():
    task = HeadsTask()
    counts = {
        h: sum(p.numel() for p in HeadsTaskModel(task, 16, h).parameters()) for h in (1, 2, 4)
    }
    assert len(set(counts.values())) == 1, counts


def test_model_sees_only_earlier_positions():
    task = HeadsTask()
    torch.manual_seed(0)
    model = HeadsTaskModel(task, 16, 2)
    tokens = make_batch(task, 4, torch.Generator().manual_seed(1)).tokens
    prev_a, marker_a, w = model(tokens)
    blocked = torch.ones(task.seq, task.seq, dtype=torch.bool).triu()  # diagonal and future
    blocked[0, 0] = False  # row 0 has no target and may see itself
    assert torch.all(w[..., blocked] == 0) and torch.all(w[..., 1:, 0] > 0)
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % task.vocab  # position 6's own query changes too
    prev_b, marker_b, _ = model(changed)
    assert torch.equal(prev_a[:, :6], prev_b[:, :6]) and torch.equal(
        marker_a[:, :6], marker_b[:, :6]
    )


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="seq must be >= 2"):
        HeadsTask(seq=1)
    with pytest.raises(ValueError, match="p_marker"):
        HeadsTask(p_marker=1.5)
    with pytest.raises(TypeError, match="torch.Generator"):
        make_batch(HeadsTask(), 4, 0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12])
def test_two_heads_solve_what_one_head_cannot(seed):
    task = HeadsTask()
    test = make_batch(task, 2000, torch.Generator().manual_seed(99))
    acc = {}
    for n_heads in (1, 2):
        model, _ = train_heads_model(task, n_heads, seed=seed, steps=150, progress=False)
        with torch.no_grad():
            acc[n_heads] = model.loss_and_accuracy(test)[1]
    assert acc[2] > 0.95, acc
    assert acc[1] < 0.8, acc


def test_attention_shares_on_hand_built_weights():
    task = HeadsTask(n_letters=3, seq=5)
    # tokens: A b C a b  (markers at 0 and 2)
    tokens = torch.tensor([[3, 1, 5, 0, 1]])
    w = torch.zeros(1, 2, 5, 5)  # (batch, n_heads, seq_q, seq_k)
    for i in range(1, 5):
        w[0, 0, i, i - 1] = 1.0  # head 0: previous token
    w[0, 1, 1, 0] = w[0, 1, 2, 0] = 1.0  # head 1: last marker before i ...
    w[0, 1, 3, 2] = w[0, 1, 4, 2] = 1.0
    shares = attention_shares(task, tokens, w)
    # positions where previous token != last marker: i = 2 (prev 1, marker 0), i = 4 (3 vs 2)
    assert shares["prev"].tolist() == [1.0, 0.0]
    assert shares["marker"].tolist() == [0.0, 1.0]
