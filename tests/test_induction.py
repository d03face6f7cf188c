"""The lesson-13 task, model, figures and explorer (attnlib.tasks.induction and friends).

Oracles: plain Python loops for the sequences, the per-half losses and the head scores;
an independent forward pass (rotary written with complex numbers, torch's
scaled_dot_product_attention, no attnlib) for the model and its key/query/value removals;
float64 numpy for the composition scores. The shipped weights must show what the lesson
states, and the training command must reproduce the shipped files byte for byte (slow).
"""

from __future__ import annotations

import base64
import math
import subprocess

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from reproduce import assert_log_reproduced, assert_state_reproduced

from attnlib import plot
from attnlib.explorers import induction_explorer, induction_state
from attnlib.tasks import induction as ind

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def model():
    return ind.load_model()


@pytest.fixture(scope="module")
def control():
    return ind.load_model(ind.CONTROL_PATH)


@pytest.fixture(scope="module")
def test_tokens():
    return ind.make_sequences(200, 20, generator=torch.Generator().manual_seed(2))


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(7)
    return ind.InductionModel(vocab=11, d_model=12, n_heads=3, d_head=4).double().eval()


# ---------------------------------------------------------------------------- the data


def test_sequences_repeat_their_first_half_and_never_repeat_a_token_within_it():
    gen = torch.Generator().manual_seed(0)
    tokens = ind.make_sequences(50, 7, generator=gen)
    assert tokens.shape == (50, 15) and tokens.dtype == torch.long
    assert (tokens[:, 0] == ind.BOS).all()
    assert torch.equal(tokens[:, 1:8], tokens[:, 8:])
    for row in tokens.tolist():
        assert len(set(row[1:8])) == 7 and all(0 <= t < ind.N_TOKENS for t in row[1:])
    control = ind.make_sequences(50, 7, repeat=False, generator=torch.Generator().manual_seed(0))
    assert torch.equal(control[:, :8], tokens[:, :8])  # same first halves as the model's data
    assert (control[:, 8:] != tokens[:, 8:]).any(1).float().mean() > 0.9
    again = ind.make_sequences(50, 7, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens)


def test_query_positions_and_half_losses_match_a_loop():
    first, repeated = ind.query_positions(5)
    assert first.tolist() == [0, 1, 2, 3, 4] and repeated.tolist() == [6, 7, 8, 9]
    gen = torch.Generator().manual_seed(3)
    tokens = ind.make_sequences(4, 5, generator=gen)
    logits = torch.randn(4, 11, ind.VOCAB, generator=gen, dtype=torch.float64)
    losses = ind.next_token_losses(logits, tokens)
    for b in range(4):
        for t in range(10):
            want = -torch.log_softmax(logits[b, t], -1)[tokens[b, t + 1]]
            assert math.isclose(float(losses[b, t]), float(want), rel_tol=1e-12)
    f, r = ind.half_losses(logits, tokens)
    assert math.isclose(f, float(losses[:, :5].mean()), rel_tol=1e-12)
    assert math.isclose(r, float(losses[:, 6:].mean()), rel_tol=1e-12)
    # accuracy: a model that copies the right answer scores 1, one that never does 0
    perfect = F.one_hot(torch.roll(tokens, -1, 1), ind.VOCAB).double()
    assert ind.induction_accuracy(perfect, tokens) == 1.0
    assert ind.induction_accuracy(-perfect, tokens) == 0.0


# ---------------------------------------------------------------------------- the model


def _rotary_complex(x):
    """Rotary embeddings written independently: pairs (2i, 2i+1) as complex numbers."""
    seq, d = x.shape[-2], x.shape[-1]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * freq  # (seq, d/2)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)).reshape(x.shape)


def _oracle(m, tokens, remove=None):
    """The model's logits recomputed with SDPA, head by head, no attnlib code."""
    remove = remove or {}
    h, d = m.n_heads, m.d_head

    def heads(x):
        return x.unflatten(-1, (h, d)).transpose(1, 2)

    x0 = m.embed.weight[tokens].double()
    q = _rotary_complex(heads(x0 @ m.W_q0.weight.double().T))
    k = _rotary_complex(heads(x0 @ m.W_k0.weight.double().T))
    v = heads(x0 @ m.W_v0.weight.double().T)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (batch, h, seq, d)
    W_o = m.W_o0.weight.double().T  # (h * d, d_model)
    per_head = [out[:, i] @ W_o[i * d : (i + 1) * d] for i in range(h)]
    x1 = x0 + sum(per_head)

    def stream(side):
        return x1 - sum((per_head[i] for i in remove.get(side, ())), torch.zeros_like(x1))

    q1 = heads(stream("q") @ m.W_q1.weight.double().T)
    k1 = heads(stream("k") @ m.W_k1.weight.double().T)
    v1 = heads(stream("v") @ m.W_v1.weight.double().T)
    out1 = F.scaled_dot_product_attention(q1, k1, v1, is_causal=True)
    x2 = x1 + out1.transpose(1, 2).flatten(2) @ m.W_o1.weight.double().T
    return x2 @ m.unembed.weight.double().T


@pytest.mark.parametrize("remove", [None, {"k": [1]}, {"q": [0], "v": [2]}, {"k": [0, 2]}])
def test_forward_and_removals_match_an_sdpa_oracle(small_model, remove):
    tokens = torch.randint(0, 11, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = small_model(tokens, remove=remove)
        want = _oracle(small_model, tokens, remove)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


def test_run_exposes_consistent_intermediates(small_model):
    tokens = torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        r = small_model.run(tokens)
        rk = small_model.run(tokens, remove={"k": [1]})
    torch.testing.assert_close(r.x1, r.x0 + r.head_out0.sum(1))
    torch.testing.assert_close(r.weights0.sum(-1), torch.ones(2, 3, 7, dtype=torch.float64))
    assert (r.weights1.triu(1) == 0).all()  # causal
    # removing from the keys changes the keys only
    assert torch.equal(rk.q1, r.q1) and torch.equal(rk.v1, r.v1) and not torch.equal(rk.k1, r.k1)
    want_k = (r.x1 - r.head_out0[:, 1]) @ small_model.weight("W_k", 1)
    torch.testing.assert_close(rk.k1.transpose(1, 2).flatten(2), want_k)


def test_bad_input_is_refused(small_model):
    tokens = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="remove"):
        small_model.run(tokens, remove={"x": [0]})
    with pytest.raises(ValueError, match="head"):
        small_model.run(tokens, remove={"k": [3]})
    with pytest.raises(ValueError, match="LongTensor"):
        small_model.run(tokens.float())
    with pytest.raises(ValueError, match="even"):
        ind.InductionModel(d_head=5)
    with pytest.raises(ValueError, match="length"):
        ind.make_sequences(2, 51)
    with pytest.raises(ValueError, match="seq_q == seq_k"):
        ind.previous_token_score(torch.ones(1, 1, 3, 4))
    with pytest.raises(FileNotFoundError, match="--train"):
        ind.load_model("/nonexistent/model.pt")
    with pytest.raises(FileNotFoundError, match="--train"):
        ind.read_log("/nonexistent/log.tsv")


# ---------------------------------------------------------------------------- head scores


def _random_causal(seed, batch, n_heads, seq):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(batch, n_heads, seq, seq, generator=gen, dtype=torch.float64)
    return torch.softmax(s.masked_fill(torch.ones(seq, seq).triu(1).bool(), -math.inf), -1)


def test_previous_token_and_induction_scores_match_loops():
    w = _random_causal(0, 3, 2, 9)  # seq 9 = 1 + 2 * 4
    prev = torch.zeros(2, dtype=torch.float64)
    ind_ = torch.zeros(2, dtype=torch.float64)
    for b in range(3):
        for h in range(2):
            prev[h] += sum(float(w[b, h, t, t - 1]) for t in range(1, 9)) / 8
            ind_[h] += sum(float(w[b, h, t, t - 3]) for t in range(5, 8)) / 3
    torch.testing.assert_close(ind.previous_token_score(w), prev / 3)
    torch.testing.assert_close(ind.induction_score(w), ind_ / 3)
    # the lesson's exercise reference agrees with the library
    from attnlib.checks import get_exercise

    ref = get_exercise("previous_token_score").reference
    torch.testing.assert_close(ref(w), ind.previous_token_score(w))


def test_composition_scores_match_float64_numpy(small_model):
    comp = ind.composition_scores(small_model)
    sd = {k: v.double().numpy() for k, v in small_model.state_dict().items()}
    d, h = small_model.d_head, small_model.n_heads

    def block(name, i):  # row-vector matrix of head i: (d_model, d_head)
        return sd[name].T[:, i * d : (i + 1) * d]

    def fro(a):
        return np.sqrt((a**2).sum())

    for i in range(h):
        ov = block("W_v0.weight", i) @ sd["W_o0.weight"].T[i * d : (i + 1) * d]
        for j in range(h):
            qk = block("W_q1.weight", j) @ block("W_k1.weight", j).T
            ov1 = block("W_v1.weight", j) @ sd["W_o1.weight"].T[j * d : (j + 1) * d]
            assert comp["k"][i, j] == pytest.approx(fro(qk @ ov.T) / (fro(qk) * fro(ov)))
            assert comp["q"][i, j] == pytest.approx(fro(ov @ qk) / (fro(qk) * fro(ov)))
            assert comp["v"][i, j] == pytest.approx(fro(ov @ ov1) / (fro(ov) * fro(ov1)))
    for m in comp.values():
        assert ((0 <= m) & (m <= 1)).all()
    torch.testing.assert_close(
        ind.qk_matrix(small_model, 1, 0).double(),
        torch.tensor(block("W_q1.weight", 0) @ block("W_k1.weight", 0).T),
    )
    base = ind.random_composition_baseline(n=50)
    assert base == ind.random_composition_baseline(n=50) and 0.05 < base < 0.3


def test_running_mean_skips_missing_steps_and_phase_change_is_found():
    x = np.array([4.0, np.nan, 2.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(ind.running_mean(x, 2), [4.0, 4.0, 2.0, 1.0, 0.0, 0.0])
    log = {"repeated": np.array([3.9, 3.9, 3.0, 1.0, 0.5, 0.1])}
    assert ind.phase_change_step(log, window=1) == 3
    assert ind.phase_change_step({"repeated": np.full(5, 3.9)}) == -1


# ---------------------------------------------------------------------------- shipped files


def test_shipped_files_are_small_and_the_log_is_complete():
    sizes = [p.stat().st_size for p in (ind.WEIGHTS_PATH, ind.CONTROL_PATH, ind.LOG_PATH)]
    assert sum(sizes) <= 200_000, sizes
    log = ind.read_log()
    steps = ind.TRAINING["steps"]
    assert log["step"].tolist() == list(range(steps))
    assert ((ind.MIN_LENGTH <= log["length"]) & (log["length"] <= ind.MAX_LENGTH)).all()
    # the only missing values: length-1 batches have no repeated-half prediction
    assert np.array_equal(np.isnan(log["repeated"]), log["length"] == 1)
    assert not np.isnan(log["first"]).any()


def test_shipped_model_shows_the_lessons_circuit(model, control, test_tokens):
    with torch.no_grad():
        r, rc = model.run(test_tokens), control.run(test_tokens)
    prev = ind.previous_token_score(r.weights0)
    h = int(prev.argmax())
    assert prev[h] > 0.75 and prev[1 - h] < 0.15
    assert (ind.induction_score(r.weights1) > 0.95).all()
    assert (ind.induction_score(rc.weights1) < 0.05).all()
    acc = {
        side: ind.induction_accuracy(model(test_tokens, remove={side: [h]}), test_tokens)
        for side in "qkv"
    }
    assert ind.induction_accuracy(r.logits, test_tokens) > 0.99
    assert acc["k"] < 0.1 and acc["q"] > 0.99 and acc["v"] > 0.99, acc
    comp = ind.composition_scores(model)
    assert comp["k"][h].min() > 1.5 * max(comp["k"][1 - h].max(), comp["q"].max(), comp["v"].max())


def test_shipped_log_shows_the_phase_change():
    log = ind.read_log()
    phase = ind.phase_change_step(log)
    assert 500 <= phase <= 1200
    assert np.nanmean(log["repeated"][-200:]) < 0.05
    assert abs(np.nanmean(log["control_repeated"][-200:]) - ind.CHANCE) < 0.05
    assert np.nanmin(ind.running_mean(log["first"], 50)) > ind.CHANCE - 0.02


# The first steps of the run the shipped files came from, in `make test`: the same code,
# seed and batches, and Adam at a constant learning rate, so a shorter run is a prefix of
# the full one and must retrace the shipped log step by step (both models, every logged
# loss). The whole run (`make test-regenerate`, the third CI stage) rebuilds the files.
SHORT_STEPS = 150


def test_a_short_run_retraces_the_start_of_the_shipped_log(tmp_path):
    _, _, rows = ind.train_both(steps=SHORT_STEPS)
    ind.write_log(rows, tmp_path / "log.tsv")
    fresh = (tmp_path / "log.tsv").read_text(encoding="utf-8").splitlines()
    shipped = ind.LOG_PATH.read_text(encoding="utf-8").splitlines()[: SHORT_STEPS + 1]
    assert len(fresh) == SHORT_STEPS + 1
    assert_log_reproduced(fresh, shipped)


@pytest.mark.slow
@pytest.mark.regenerate
def test_training_command_regenerates_the_shipped_files(tmp_path, python):
    # byte for byte on the machine that made them; elsewhere up to float rounding
    # (tests/reproduce.py says how much and why)
    res = subprocess.run(
        [python, "-m", "attnlib.tasks.induction", "--train", "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert "induction accuracy 1.000" in res.stdout, res.stdout
    for shipped in (ind.WEIGHTS_PATH, ind.CONTROL_PATH):
        fresh = torch.load(tmp_path / shipped.name, weights_only=True)
        assert_state_reproduced(fresh, torch.load(shipped, weights_only=True), shipped.name)
    fresh_log = (tmp_path / ind.LOG_PATH.name).read_text(encoding="utf-8").splitlines()
    assert_log_reproduced(fresh_log, ind.LOG_PATH.read_text(encoding="utf-8").splitlines())


# ---------------------------------------------------------------------------- figures


def test_phase_change_plots_the_curves_and_their_running_means():
    steps = np.arange(6)
    curves = {"a": np.array([4.0, 4.0, 2.0, 1.0, 0.0, 0.0]), "b": np.full(6, 3.9)}
    ax = plot.phase_change(steps, curves, chance=3.91, phase_step=3, window=2)
    lines = ax.get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), curves["a"])
    np.testing.assert_allclose(lines[1].get_ydata(), ind.running_mean(curves["a"], 2))
    np.testing.assert_allclose(lines[3].get_ydata(), ind.running_mean(curves["b"], 2))
    assert lines[1].get_linestyle() != lines[3].get_linestyle()  # a second channel
    assert ax.figure.get_size_inches()[0] <= 8.0
    with pytest.raises(ValueError, match="curve"):
        plot.phase_change(steps, {"a": np.ones(5)}, chance=1.0)
    plt.close("all")


def test_ablation_bars_and_composition_maps_draw_their_numbers():
    results = {"intact": 1.0, "keys": 0.04, "queries": 0.99}
    ax = plot.ablation_bars(results, chance=0.02)
    np.testing.assert_allclose([p.get_width() for p in ax.patches], [1.0, 0.04, 0.99])
    comp = {s: np.arange(4.0).reshape(2, 2) / 10 + i for i, s in enumerate("qkv")}
    fig = plot.composition_maps(comp, baseline=0.12)
    maps = fig.axes[:3]
    for ax, side in zip(maps, "qkv", strict=True):
        np.testing.assert_allclose(ax.images[0].get_array(), comp[side])
        assert sorted(t.get_text() for t in ax.texts) == sorted(
            f"{v:.2f}" for v in comp[side].ravel()
        )
    assert len(fig.axes) == 4  # three maps and the colourbar
    assert fig.get_size_inches()[0] <= 8.0
    plt.close("all")


def test_head_patterns_rings_the_cells_it_is_given():
    w = _random_causal(5, 1, 2, 6)[0]  # (2, 6, 6)
    marks = [[(1, 0), (2, 1)], [(5, 3)]]
    fig = plot.head_patterns(w, titles=["a", "b"], marks=marks, mark_label=["x", "y"])
    for ax, cells in zip(fig.axes[:2], marks, strict=True):
        np.testing.assert_allclose(ax.collections[-1].get_offsets(), [(k, q) for q, k in cells])
        np.testing.assert_allclose(
            ax.images[0].get_array().filled(np.nan)[np.tril_indices(6)],
            w[fig.axes.index(ax)].numpy()[np.tril_indices(6)],
            rtol=1e-6,
        )
        assert ax.images[0].get_array().mask[np.triu_indices(6, 1)].all()  # masked cells
    with pytest.raises(ValueError, match="titles"):
        plot.head_patterns(w, titles=["a"], marks=marks)
    plt.close("all")


# ---------------------------------------------------------------------------- explorer


def test_induction_state_splits_the_matched_keys_score_exactly(model):
    tokens = ind.make_sequences(1, 8, generator=torch.Generator().manual_seed(1))[0]
    with torch.no_grad():
        r = model.run(tokens[None])
    for t in range(9, 16):
        s = induction_state(model, tokens, t, head=1, prev_head=0)
        assert s.matched == t - 8 + 1
        np.testing.assert_allclose(
            s.weights, r.weights1[0, 1, t, : t + 1].double().numpy(), rtol=1e-6
        )
        qk = float(r.q1[0, 1, t] @ r.k1[0, 1, s.matched]) / math.sqrt(model.d_head)
        assert s.score == pytest.approx(qk, rel=1e-4)
        assert int(np.argmax(s.margin)) == 1  # head 0.0's part lifts the winner most
    with pytest.raises(ValueError, match="position"):
        induction_state(model, tokens, 0)
    with pytest.raises(ValueError, match="head"):
        induction_state(model, tokens, 3, head=2)
    with pytest.raises(TypeError, match="InductionModel"):
        induction_state(object(), tokens, 3)


def test_induction_explorer_follows_its_controls_and_is_stored_as_a_still(model):
    from IPython.core.formatters import DisplayFormatter

    from attnlib.explorers._render import STILL_CAPTION

    tokens = ind.make_sequences(1, 8, generator=torch.Generator().manual_seed(1))[0]
    box = induction_explorer(model, tokens, 12, head=1)
    assert box.state.position == 12 and bytes(box.image.value).startswith(PNG_MAGIC)
    first = bytes(box.image.value)
    box.position_slider.value = 14
    assert box.state.position == 14 and box.state.matched == 7
    assert bytes(box.image.value) != first
    box.head_buttons.value = 0
    assert box.state.head == 0
    data, _ = DisplayFormatter().format(box)
    assert data["text/plain"] == STILL_CAPTION  # never "VBox(children=(..."
    assert base64.b64decode(data["image/png"]) == box.still_png()
    assert "application/vnd.jupyter.widget-view+json" in data
