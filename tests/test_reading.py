"""attnlib.tasks.reading and the reading explorer (lesson 16), against independent oracles.

* ``queries_keys``: the softmax of its q · k / √d_head under the causal mask is the model's
  own weights; q and k are W_q and W_k of ln_1 of the stream, computed here by hand;
* ``windowed_logits``: with a window of seq it is the model itself; with a window w, the
  logits at t do not change when a token w or more positions back changes (one block) and
  do change when one inside the window changes; a window of 1 makes every position a
  function of its own token and position only;
* ``entropy``, ``char_class``, ``show_char``, the two probes on data made by hand;
* ``reading_state`` shows what ``queries_keys`` computes; the explorer follows its controls,
  its query slider runs over the line's positions only (as the line changes too), and it
  is stored as a captioned still; its figure labels every character of a 31-character
  line on the key axis, at least ``KEY_INCHES`` apart.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnlib.explorers import reading_explorer, reading_state
from attnlib.explorers._render import STILL_CAPTION
from attnlib.gpt import GPT
from attnlib.tasks import plays, reading


@pytest.fixture(autouse=True)
def close_all():
    yield
    plt.close("all")


def small_model(n_layers=2, seed=0):
    torch.manual_seed(seed)
    model = GPT(vocab_size=13, d_model=16, n_heads=4, n_layers=n_layers, max_len=24).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # sharper than the initialisation
    return model


def tokens(batch=2, seq=20, seed=1):
    return torch.randint(0, 13, (batch, seq), generator=torch.Generator().manual_seed(seed))


def test_queries_and_keys_give_the_models_own_weights():
    model, x = small_model(), tokens()
    runs = reading.queries_keys(model, x)
    assert len(runs) == model.n_layers
    causal = torch.ones(20, 20, dtype=torch.bool).tril()
    stream = model.wte(x) + model.wpe(torch.arange(20))
    with torch.no_grad():
        for block, r in zip(model.h, runs, strict=True):
            h = block.ln_1(stream)
            q = block.attn.W_q(h).view(2, 20, 4, 4).transpose(1, 2)  # by hand
            torch.testing.assert_close(r.q, q)
            w = torch.softmax(r.scores.masked_fill(~causal, float("-inf")), dim=-1)
            torch.testing.assert_close(w, r.weights, atol=1e-6, rtol=1e-5)
            stream = block(stream)
    assert r.q.shape == r.k.shape == (2, 4, 20, 4)
    assert not model.h[0].attn._forward_hooks  # the hooks are removed


def test_a_window_of_seq_is_the_model_itself():
    model, x = small_model(), tokens()
    with torch.no_grad():
        full = model(x)
    torch.testing.assert_close(reading.windowed_logits(model, x, 20), full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(reading.windowed_logits(model, x, 99), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [1, 3, 6])
def test_a_window_hides_exactly_the_keys_outside_it(window):
    model, x = small_model(n_layers=1), tokens(batch=1)
    base = reading.windowed_logits(model, x, window)
    t = 15
    for back in range(0, 8):
        changed = x.clone()
        changed[0, t - back] = (changed[0, t - back] + 1) % 13
        moved = (reading.windowed_logits(model, changed, window)[0, t] - base[0, t]).abs().max()
        assert (moved > 1e-6) == (back < window), (window, back)


def test_a_window_of_one_leaves_each_position_alone():
    model = small_model()
    a, b = tokens(seed=3), tokens(seed=4)
    b[:, 10] = a[:, 10]
    la, lb = reading.windowed_logits(model, a, 1), reading.windowed_logits(model, b, 1)
    torch.testing.assert_close(la[:, 10], lb[:, 10])


def test_entropy_char_classes_and_labels():
    w = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.25, 0.5]])
    torch.testing.assert_close(
        reading.entropy(w), torch.tensor([0.0, -(0.5 * math.log(0.25) + 0.5 * math.log(0.5))])
    )
    classes = [reading.CHAR_CLASSES[reading.char_class(c)] for c in " \nuzQ!'9"]
    assert classes == [
        "space", "newline", "vowel", "consonant", "capital", "punctuation", "punctuation",
        "punctuation",
    ]  # fmt: skip
    assert [reading.show_char(c) for c in " \na"] == ["␣", "⏎", "a"]
    with pytest.raises(ValueError, match="one character"):
        reading.char_class("ab")


def test_the_probes_on_data_made_by_hand():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    # the class sits in three small directions (one per class); a large fourth one is noise
    x = np.c_[np.eye(3)[y] + 0.05 * rng.normal(size=(600, 3)), 50 * rng.normal(size=600)]
    half = np.arange(600) < 300
    assert reading.linear_probe_accuracy(x[half], y[half], x[~half], y[~half]) == 1.0
    assert reading.nearest_centroid_accuracy(x[half], y[half], x[~half], y[~half]) < 0.6
    assert reading.nearest_centroid_accuracy(x[half, :3], y[half], x[~half, :3], y[~half]) == 1.0
    with pytest.raises(ValueError, match="one d"):
        reading.nearest_centroid_accuracy(x, y, x[:, :1], y)


def test_refuses_bad_input():
    model = small_model()
    with pytest.raises(TypeError, match="GPT"):
        reading.queries_keys(object(), tokens())
    with pytest.raises(ValueError, match="max_len"):
        reading.windowed_logits(model, tokens(seq=30), 3)
    with pytest.raises(ValueError, match="window"):
        reading.windowed_logits(model, tokens(), 0)


# ------------------------------------------------------------------ the explorer


@pytest.fixture(scope="module")
def shipped():
    return plays.load_model(), plays.vocabulary()


def test_reading_state_shows_the_models_weights(shipped):
    model, vocab = shipped
    s = reading_state(model, vocab, "Now tell me", layer=1, head=2, query=7)
    w = reading.queries_keys(model, vocab.encode("Now tell me")[None])[1].weights[0, 2]
    np.testing.assert_allclose(s.weights, w.double().numpy())
    assert s.labels[3] == "␣" and s.query == 7
    row = s.weights[7, :8]
    assert list(s.top) == list(np.argsort(-row, kind="stable")[:3])
    assert f"query 7 '{s.labels[7]}'" in s.summary()
    assert reading_state(model, vocab, "Now tell me").query == 10  # default: the last


def test_reading_state_refuses_bad_controls(shipped):
    model, vocab = shipped
    with pytest.raises(ValueError, match="at least 2"):
        reading_state(model, vocab, "§")
    with pytest.raises(ValueError, match="layer"):
        reading_state(model, vocab, "Now", layer=model.n_layers)
    with pytest.raises(ValueError, match="head"):
        reading_state(model, vocab, "Now", head=-1)


def test_reading_explorer_follows_its_controls_and_is_stored_as_a_still(shipped):
    from IPython.core.formatters import DisplayFormatter

    model, vocab = shipped
    box = reading_explorer(model, vocab, "Now tell me", layer=0, head=2)
    assert box.state.text == "Now tell me" and box.state.head == 2
    first = bytes(box.image.value)
    box.head_buttons.value = 1
    assert box.state.head == 1 and bytes(box.image.value) != first
    box.text_box.value = "MIRANDA.\nIf"
    assert box.state.text == "MIRANDA.\nIf" and box.state.query == 10
    box.query_slider.value = 4
    assert box.state.query == 4 and "query 4" in box.readout.value
    data, _ = DisplayFormatter().format(box)
    assert data["text/plain"] == STILL_CAPTION
    assert "image/png" in data


def test_the_query_slider_spans_the_line_and_nothing_past_it(shipped):
    model, vocab = shipped
    box = reading_explorer(model, vocab, "Now tell me, Ariel. Now tell me", layer=1)
    slider = box.query_slider
    assert (slider.min, slider.max, slider.value) == (0, 30, 30)  # 31 characters
    assert slider.layout.width == "95%"  # wide enough to pick one character of 31
    slider.value = 12
    box.text_box.value = "Now tell me"  # shorter: the query is clamped to its end
    assert (slider.max, slider.value, box.state.query) == (10, 10, 10)
    box.text_box.value = "Now tell me, Ariel."  # longer, from the end: to the new end
    assert (slider.max, slider.value, box.state.query) == (18, 18, 18)
    slider.value = 3
    box.text_box.value = "Now tell me §§"  # unknown characters do not count
    assert (slider.max, slider.value, box.state.query) == (11, 3, 3)


def test_the_explorers_axes_label_each_character_of_a_line_apart():
    from attnlib.explorers.reading import KEY_INCHES, KEYS_INCHES, ROW_INCHES, _labelled

    assert _labelled(31, KEY_INCHES, KEYS_INCHES) == list(range(31))  # every key, full width
    rows = _labelled(31, ROW_INCHES, 3.4, keep=7)  # every second row, and the query's
    assert 7 in rows and 6 not in rows and 8 not in rows and len(rows) == 15
    assert min(np.diff(rows)) * 3.4 / 31 >= ROW_INCHES
    keys = _labelled(256, KEY_INCHES, KEYS_INCHES)
    assert (keys[1] - keys[0]) * KEYS_INCHES / 256 >= KEY_INCHES
