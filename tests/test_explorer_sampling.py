"""Lesson 17's explorer (sampling) and its figures (attnlib/plot/_sampling.py).

The explorer's pure state is checked against an independent computation: the filters
written again here in plain torch (temperature, then top-k, top-p and min-p, in Hugging
Face's order), torch.distributions for the entropy, and small hand-worked rows; and, value
for value, against the softmax of attnlib.sampling.filter_logits, which the lesson
teaches. The plays model's logits are checked against a forward pass of the shipped model;
the widget to show what the state computes for the current control values, and to be
stored as a captioned still. The figures are checked for the projector style (at most
8 in wide, 150 dpi, no text under 10 pt, marks that differ by more than colour) and for
drawing exactly the state they were given.
"""

from __future__ import annotations

import base64
import struct

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.text import Text

from attnlib import plot
from attnlib.explorers import (
    SamplingState,
    plays_next_logits,
    sampling_explorer,
    sampling_state,
)
from attnlib.explorers._render import STILL_CAPTION
from attnlib.explorers.sampling import render_sampling
from attnlib.sampling import filter_logits
from attnlib.tasks import plays

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PROMPT = "MIRANDA.\n"


@pytest.fixture(autouse=True)
def close_all():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def vocab():
    return plays.vocabulary()


@pytest.fixture(scope="module")
def model():
    return plays.load_model()


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def _row(vocab: int = 30, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 2.0 * torch.randn(vocab, generator=g)  # float32, as a model gives them


def _labels(n: int) -> str:
    return "".join(chr(ord("a") + i) for i in range(n - 2)) + " \n"


# ------------------------------------------------------------------ the pure state


def _by_hand(logits, temperature=1.0, top_k=None, top_p=None, min_p=None):
    """The filters in plain torch, float64: which tokens are kept, and the renormalised
    probabilities over them (independent of attnlib.sampling)."""
    t = logits.double() / temperature  # (vocab,)
    keep = torch.ones_like(t, dtype=torch.bool)
    if top_k is not None:
        kth = torch.sort(t, descending=True).values[top_k - 1]
        keep &= t >= kth  # ties with the k-th are kept
    if top_p is not None:
        p = torch.softmax(t.masked_fill(~keep, -torch.inf), -1)
        order = torch.argsort(p, descending=True)
        above = torch.cumsum(p[order], 0) - p[order]  # mass of the tokens ranked above
        nucleus = torch.zeros_like(keep)
        nucleus[order] = above < top_p
        keep &= nucleus
    if min_p is not None:
        p = torch.softmax(t.masked_fill(~keep, -torch.inf), -1)
        keep &= p >= min_p * p.max()
    probs = torch.softmax(t.masked_fill(~keep, -torch.inf), -1)
    return keep, probs


SETTINGS = [
    {},
    {"temperature": 0.7, "top_k": 10},
    {"temperature": 1.3, "top_p": 0.9},
    {"min_p": 0.1},
    {"temperature": 0.5, "top_k": 20, "top_p": 0.8, "min_p": 0.05},
    {"temperature": 2.0, "top_p": 0.3},
]


@pytest.mark.parametrize("kw", SETTINGS, ids=lambda kw: ",".join(kw) or "none")
@pytest.mark.parametrize("seed", [0, 1])
def test_state_is_the_softmax_of_filter_logits_and_matches_torch(kw, seed):
    logits = _row(30, seed)
    s = sampling_state(logits, _labels(30), shown=12, **kw)
    x = logits.double()
    ids = list(s.ids)
    # the order: most likely first
    assert ids == torch.argsort(x, descending=True, stable=True)[:12].tolist()
    # exactly the softmax of what the lesson's filter_logits returns (in float64)
    sampled = torch.softmax(filter_logits(x, **{"temperature": 1.0, **kw}), -1)
    np.testing.assert_array_equal(s.after, sampled[ids].numpy())
    # and what the filters written out again here give
    keep, probs = _by_hand(logits, **kw)
    np.testing.assert_array_equal(s.kept, keep[ids].numpy())
    assert s.n_kept == int(keep.sum()) and s.vocab_size == 30
    np.testing.assert_allclose(s.after, probs[ids].numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(s.before, torch.softmax(x, -1)[ids].numpy(), rtol=1e-12)
    assert s.before.dtype == s.after.dtype == np.float64
    assert (s.after[~s.kept] == 0).all() and (s.after[s.kept] > 0).all()
    tempered = torch.softmax(x / kw.get("temperature", 1.0), -1)
    assert s.kept_mass == pytest.approx(float(tempered[keep].sum()), rel=1e-12)
    np.testing.assert_allclose(s.after[s.kept], tempered[ids].numpy()[s.kept] / s.kept_mass)
    entropy = torch.distributions.Categorical(probs=probs).entropy()  # float64
    assert isinstance(s.entropy, float)
    assert s.entropy == pytest.approx(entropy.item(), rel=1e-12, abs=1e-15)
    model = torch.distributions.Categorical(probs=torch.softmax(x, -1)).entropy().item()
    assert s.entropy_before == pytest.approx(model, rel=1e-12)


def test_hand_worked_rows():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    s = sampling_state(logits, "abcd", top_p=0.7)  # 0.5 < 0.7: 0.3 crosses 0.7 and is kept
    assert s.kept.tolist() == [True, True, False, False] and s.n_kept == 2
    assert s.kept_mass == pytest.approx(0.8)
    np.testing.assert_allclose(s.after, [0.625, 0.375, 0, 0], rtol=1e-6)
    s = sampling_state(logits, "abcd", min_p=0.2)  # the bar: 0.2 x 0.5 = 0.1
    assert s.n_kept == 3 and s.kept_mass == pytest.approx(0.95)
    greedy = sampling_state(logits, "abcd", temperature=1.7, top_k=1)
    assert greedy.n_kept == 1 and greedy.after[0] == 1.0 and greedy.entropy == 0.0
    s = sampling_state(logits, "abcd", temperature=0.5)  # p² renormalised: no token removed
    p2 = np.array([0.25, 0.09, 0.0225, 0.0025])
    np.testing.assert_allclose(s.after, p2 / p2.sum(), rtol=1e-6)
    assert s.n_kept == 4 and s.kept_mass == pytest.approx(1.0)
    np.testing.assert_allclose(s.before, [0.5, 0.3, 0.15, 0.05], rtol=1e-6)
    # top-k before top-p: p is measured on the 3 tokens left (0.4/0.9 + 0.3/0.9 > 0.75)
    four = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    assert sampling_state(four, "abcd", top_p=0.75).n_kept == 3
    assert sampling_state(four, "abcd", top_k=3, top_p=0.75).n_kept == 2
    # ties at the k-th are kept, as top_k_filter keeps them
    assert sampling_state(torch.tensor([3.0, 2.0, 2.0, 0.0]), "abcd", top_k=2).n_kept == 3


def test_labels_are_readable_and_the_state_is_pure(vocab):
    logits = torch.tensor([1.0, 3.0, 2.0, 0.0])
    s = sampling_state(logits, ["x", " ", "\n", " the"])
    assert s.labels == ("␣", "⏎", "x", "␣the") and s.ids == (1, 2, 0, 3)
    assert sampling_state(logits, "x \nq").labels == ("␣", "⏎", "x", "q")
    copy = logits.clone()
    a = sampling_state(logits, "abcd", temperature=0.8, top_p=0.9, shown=10)
    b = sampling_state(logits.numpy(), "abcd", temperature=0.8, top_p=0.9, shown=10)
    torch.testing.assert_close(logits, copy)  # the input is left alone
    assert len(a.labels) == 4  # shown is at most the vocabulary
    for name in ("before", "after", "kept"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert (a.n_kept, a.kept_mass, a.entropy) == (b.n_kept, b.kept_mass, b.entropy)
    assert isinstance(a, SamplingState)
    row = plays_next_logits(PROMPT)
    assert sampling_state(row, vocab).labels == sampling_state(row, vocab.chars).labels
    s = sampling_state(row, vocab.chars, temperature=0.7, top_k=10, prompt=PROMPT)
    assert s.settings() == ["T = 0.7", "top-k 10"] and s.prompt_end() == "MIRANDA.⏎"
    assert "keeps 10 of 76" in s.summary() and "after 'MIRANDA.⏎'" in s.summary()
    assert sampling_state(row, vocab.chars, prompt="x" * 30 + PROMPT).prompt_end().startswith("…")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"logits": torch.zeros(2, 4)}, ValueError, "logits must have shape"),
        ({"logits": torch.zeros(0)}, ValueError, "logits"),
        ({"logits": torch.arange(4)}, TypeError, "logits"),
        ({"logits": [1.0, 2.0, 3.0, 4.0]}, TypeError, "logits"),
        ({"logits": torch.tensor([0.0, float("nan"), 1.0, 2.0])}, ValueError, "logits"),
        ({"labels": "abc"}, ValueError, "labels has 3 names for 4 logits"),
        ({"labels": [1, 2, 3, 4]}, TypeError, "labels"),
        ({"labels": 5}, TypeError, "labels"),
        ({"temperature": 0.0}, ValueError, "temperature"),
        ({"temperature": "hot"}, TypeError, "temperature"),
        ({"top_k": 0}, ValueError, "top_k"),
        ({"top_k": 5}, ValueError, "top_k"),
        ({"top_k": 2.5}, TypeError, "top_k"),
        ({"top_p": 0.0}, ValueError, "top_p"),
        ({"top_p": 1.5}, ValueError, "top_p"),
        ({"min_p": -0.1}, ValueError, "min_p"),
        ({"min_p": float("nan")}, ValueError, "min_p"),
        ({"shown": 0}, ValueError, "shown"),
        ({"prompt": 3}, TypeError, "prompt"),
    ],
)
def test_state_rejects_bad_input_naming_the_argument(kwargs, error, match):
    args = {"logits": torch.tensor([1.0, 2.0, 3.0, 4.0]), "labels": "abcd", **kwargs}
    with pytest.raises(error, match=match) as info:
        sampling_state(args.pop("logits"), args.pop("labels"), **args)
    assert str(info.value).startswith("sampling_state: ")


# ------------------------------------------------------------------ the plays model


def test_plays_next_logits_is_the_models_last_row(model, vocab):
    row = plays_next_logits(PROMPT)
    with torch.no_grad():
        expected = model(vocab.encode(PROMPT)[None])[0, -1]
    assert row.shape == (vocab.size,) and row.dtype == torch.float32
    torch.testing.assert_close(row, expected)
    # characters the plays never use are dropped; a long prompt is read to its last max_len
    torch.testing.assert_close(plays_next_logits("MIRA€NDA.\n"), row)
    long = "O, wonder! How many goodly creatures are there here!\n" * 6  # 318 characters
    with torch.no_grad():
        tail = model(vocab.encode(long[-model.max_len :])[None])[0, -1]
    torch.testing.assert_close(plays_next_logits(long), tail)
    torch.testing.assert_close(plays_next_logits(PROMPT, model=model, vocab=vocab), row)
    with pytest.raises(ValueError, match="prompt needs at least 1 character"):
        plays_next_logits("€€")
    with pytest.raises(TypeError, match="prompt"):
        plays_next_logits(None)
    with pytest.raises(ValueError, match="vocab has 3 characters"):
        plays_next_logits(PROMPT, vocab=plays.CharVocab("abc"))


# ------------------------------------------------------------------ the widget


def test_explorer_follows_its_controls_and_is_stored_as_a_still(vocab):
    from IPython.core.formatters import DisplayFormatter

    before = plt.get_fignums()
    box = sampling_explorer(PROMPT, temperature=0.7, top_k=10)
    row = plays_next_logits(PROMPT)

    def same(**kw):
        expected = sampling_state(row, vocab.chars, prompt=PROMPT, **kw)
        np.testing.assert_array_equal(box.state.after, expected.after)
        np.testing.assert_array_equal(box.state.kept, expected.kept)
        assert box.state.n_kept == expected.n_kept

    same(temperature=0.7, top_k=10)
    assert box.top_k_slider.value == 10 and box.top_p_slider.value == 1.0
    first = box.still_png()
    box.temperature_slider.value = 1.5
    same(temperature=1.5, top_k=10)
    assert box.image.value != first and box.still_png() == first  # the still stays put
    box.top_k_slider.value = 0  # off
    assert box.state.top_k is None and box.state.n_kept == vocab.size
    box.top_p_slider.value = 0.5
    same(temperature=1.5, top_p=0.5)
    box.min_p_slider.value = 0.2
    same(temperature=1.5, top_p=0.5, min_p=0.2)
    box.top_p_slider.value = 1.0  # off
    same(temperature=1.5, min_p=0.2)
    assert box.state.top_p is None and "min-p 0.2" in box.readout.value
    box.prompt_box.value = "PROSPERO.\nThou art th"
    assert box.state.prompt == "PROSPERO.\nThou art th"
    expected = sampling_state(
        plays_next_logits("PROSPERO.\nThou art th"), vocab.chars, temperature=1.5, min_p=0.2
    )
    np.testing.assert_array_equal(box.state.after, expected.after)
    assert "Thou␣art␣th" in box.readout.value
    box.prompt_box.value = "Bell & book"  # the readout is HTML: escaped
    assert "Bell␣&amp;␣book" in box.readout.value
    data, _ = DisplayFormatter().format(box)
    assert data["text/plain"] == STILL_CAPTION
    assert data[WIDGET_VIEW]["model_id"] == box.model_id
    assert png_size(base64.b64decode(data["image/png"]))[0] <= 8.5 * 150
    assert plt.get_fignums() == before  # drawn without pyplot


def test_explorer_rejects_settings_off_its_sliders():
    for kw, match in [
        ({"temperature": 5.0}, r"temperature must be in \[0.1, 2\]"),
        ({"top_p": 0.01}, "top_p"),
        ({"min_p": 0.8}, "min_p"),
        ({"top_k": 0}, "top_k"),
    ]:
        with pytest.raises(ValueError, match=match):
            sampling_explorer(PROMPT, **kw)
    with pytest.raises(ValueError, match="prompt"):
        sampling_explorer("€")


# ------------------------------------------------------------------ the figures


def _readable(fig):
    """At most 8 in wide, 150 dpi, no text under 10 pt, stored at most 8.5 in wide."""
    from IPython.core.pylabtools import print_figure

    width, _ = fig.get_size_inches()
    assert width <= plot.MAX_WIDTH + 1e-9 and fig.dpi >= 150
    fig.canvas.draw()
    small = [
        (t.get_text(), t.get_fontsize())
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < plot.MIN_FONT
    ]
    assert not small, small
    stored = print_figure(fig, "png", bbox_inches="tight")
    assert png_size(stored)[0] / fig.dpi <= 8.5


def _marks(legend) -> list[tuple]:
    """What tells the legend's entries apart, colour aside (as tests/test_plot_style.py)."""
    looks = []
    for h in legend.legend_handles:
        if isinstance(h, plt.Line2D):
            looks.append(("line", h.get_marker(), str(h.get_linestyle())))
        else:
            looks.append(("patch", h.get_hatch()))
    return looks


def _state(**kw):
    logits = torch.tensor([4.0, 3.5, 3.0, 2.0, 1.5, 1.0, 0.5, 0.0, -1.0, -3.0, -4.0, -5.0])
    return sampling_state(logits, "ab cdefgh\nij", prompt="KING.\nWhat", **kw)


def test_sampling_view_draws_the_state():
    from matplotlib.patches import Rectangle

    s = _state(temperature=0.8, top_k=4)
    ax = plot.sampling_view(s)
    _readable(ax.figure)
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    kept = bars[: s.n_kept]
    np.testing.assert_allclose([p.get_width() for p in kept], s.after[s.kept])
    bands = bars[s.n_kept :]
    assert len(bands) == int((~s.kept).sum()) and all(p.get_hatch() for p in bands)
    ticks = ax.lines[0]
    np.testing.assert_allclose(ticks.get_xdata(), s.before)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == list(s.labels) == ["a", "b", "␣", "c", "d", "e", "f", "g", "h", "⏎", "i", "j"]
    greys = [t.get_color() == "0.45" for t in ax.get_yticklabels()]
    assert greys == (~s.kept).tolist()  # a dropped token's name is grey, and its row hatched
    assert "T = 0.8, top-k 4: keeps 4 of 12" in ax.get_title()
    assert "KING.⏎What" in ax.get_ylabel()
    legend = ax.get_legend()
    names = ["model (T = 1)", "sampled from", "dropped"]
    assert [t.get_text() for t in legend.get_texts()] == names
    assert len(set(_marks(legend))) == 3  # a tick, a plain bar, a hatched band
    assert ax.get_xlim()[1] >= max(s.before.max(), s.after.max())


def test_sampling_views_fit_and_share_the_tokens():
    states = [
        _state(),
        _state(temperature=0.7, top_k=3),
        _state(top_p=0.9),
        _state(temperature=0.5, top_k=10, top_p=0.8, min_p=0.1),
    ]
    fig = plot.sampling_views(states)
    _readable(fig)
    assert len(fig.axes) == 4
    assert fig.get_suptitle() == "next token after 'KING.⏎What'"
    for ax, s in zip(fig.axes, states, strict=True):
        assert f"keeps {s.n_kept}," in ax.get_title()
        bands = [p for p in ax.patches if p.get_hatch()]
        assert len(bands) == int((~s.kept).sum())
        np.testing.assert_allclose(ax.lines[0].get_xdata(), s.before)
        assert ax.get_xlim() == fig.axes[0].get_xlim()  # one probability axis
    assert "T = 0.5, top-k 10,\ntop-p 0.8,\nmin-p 0.1\n" in fig.axes[3].get_title()
    shown = [[t.get_text() for t in ax.get_yticklabels() if t.get_visible()] for ax in fig.axes]
    assert shown[0] == list(states[0].labels)  # the tokens named once, on the left
    assert shown[1:] == [[], [], []]
    (legend,) = fig.legends
    assert len(set(_marks(legend))) == 3
    with pytest.raises(ValueError, match="states is empty"):
        plot.sampling_views([])
    with pytest.raises(ValueError, match="at most 5"):
        plot.sampling_views([_state()] * 6)


def test_the_figures_colours_stay_apart_under_cvd():
    from test_plot_style import cvd_close_pairs, distinguished_colours

    s = _state(top_p=0.7)
    ax = plot.sampling_view(s)
    assert cvd_close_pairs(distinguished_colours(ax)) == []


def test_render_leaves_pyplot_alone_and_is_at_most_8_in():
    before = plt.get_fignums()
    png = render_sampling(_state(min_p=0.2))
    assert plt.get_fignums() == before
    assert png_size(png)[0] <= 8 * 150
