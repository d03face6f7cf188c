"""Lesson 14's explorer (keys_kept) and figures (attnlib/plot/_fewer_keys.py).

The explorer's pure state is checked against an independent computation (explicit loops
for the reach of each scheme, torch's softmax for the weights, the cache written out by
hand as layers x tokens x numbers x bytes); the widget is checked to show what the state
computes for the current control values and to be stored as a captioned still. Every
figure is drawn on small made-up data and checked for the projector style (at most 8 in
wide, 150 dpi, no text under 10 pt, series that differ by more than colour) and for
plotting exactly the data it was given.
"""

from __future__ import annotations

import base64
import struct

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.text import Text

from attnlib import plot
from attnlib.explorers import KeysKeptState, keys_kept_explorer, keys_kept_state
from attnlib.explorers._render import STILL_CAPTION
from attnlib.explorers.keys_kept import MODEL

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(autouse=True)
def close_all():
    yield
    plt.close("all")


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


# ------------------------------------------------------------------ the pure state


def _by_hand_bytes(seq, *, per_token_layer, layers, held=None):
    """Cache bytes written out: layers x positions held x numbers per token x 2 bytes."""
    return layers * (seq if held is None else min(seq, held)) * per_token_layer * 2


@pytest.mark.parametrize(("window", "k", "d_latent", "query"), [(4, 3, 64, 15), (1, 20, 32, 7)])
def test_state_reach_weights_and_bytes_match_an_independent_computation(window, k, d_latent, query):
    s = keys_kept_state(window, k, d_latent, query=query, seed=3)
    seq = query + 1
    assert s.reach.shape == s.weights.shape == (5, seq)
    full, win, top, lat, shared = s.reach
    assert full.all() and lat.all() and shared.all()  # nothing dropped: every past key
    assert [j for j in range(seq) if win[j]] == [j for j in range(seq) if query - j < window]
    assert top.sum() == min(k, seq) and s.n_reached[2] == min(k, seq)
    # the weights are the softmax of one set of raw scores over each row's reach
    full_w = torch.tensor(s.weights[0])
    for row in range(5):
        expected = torch.where(torch.tensor(s.reach[row]), full_w, 0.0)
        torch.testing.assert_close(torch.tensor(s.weights[row]), expected / expected.sum())
    m = MODEL
    mha = 2 * m["n_heads"] * m["d_head"]  # keys and values of every head
    layers = m["n_layers"]
    assert s.cache_bytes == (
        _by_hand_bytes(seq, per_token_layer=mha, layers=layers),
        _by_hand_bytes(seq, per_token_layer=mha, layers=layers, held=window),
        _by_hand_bytes(seq, per_token_layer=mha + m["d_index"], layers=layers),
        _by_hand_bytes(seq, per_token_layer=d_latent + m["d_rope"], layers=layers),
        _by_hand_bytes(seq, per_token_layer=mha, layers=layers // 2),
    )
    assert "KiB" in s.summary() and f"query {query}" in s.summary()


def test_state_is_pure_and_rejects_bad_controls():
    a = keys_kept_state(5, 3, 128, query=12, seed=1)
    b = keys_kept_state(5, 3, 128, query=12, seed=1)
    np.testing.assert_array_equal(a.reach, b.reach)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert isinstance(a, KeysKeptState)
    for bad, match in [
        ({"window": 0}, "window"),
        ({"k": 0}, "k"),
        ({"d_latent": 0}, "d_latent"),
        ({"query": 0}, "query"),
    ]:
        args = {"window": 4, "k": 4, "d_latent": 64, **bad}
        query = args.pop("query", 15)
        with pytest.raises(ValueError, match=match):
            keys_kept_state(**args, query=query)
    with pytest.raises(TypeError, match="window"):
        keys_kept_state(2.5, 4, 64)


# ------------------------------------------------------------------ the widget


def test_explorer_follows_its_controls_and_is_stored_as_a_still():
    from IPython.core.formatters import DisplayFormatter

    box = keys_kept_explorer(window=4, k=3, d_latent=64, query=15)
    assert box.state.window == 4 and box.state.k == 3 and box.state.d_latent == 64
    first = box.still_png()
    box.window_slider.value = 8
    assert box.state.window == 8
    np.testing.assert_array_equal(box.state.reach, keys_kept_state(8, 3, 64, query=15).reach)
    assert box.image.value != first and box.still_png() == first  # the still stays put
    box.latent_dropdown.value = 256
    box.k_slider.value = 6
    box.query_slider.value = 20
    expected = keys_kept_state(8, 6, 256, query=20)
    np.testing.assert_array_equal(box.state.reach, expected.reach)
    assert box.state.cache_bytes == expected.cache_bytes
    assert f"{expected.cache_bytes[0] / 1024:.0f} KiB" in box.readout.value
    data, _ = DisplayFormatter().format(box)
    assert data["text/plain"] == STILL_CAPTION
    assert data[WIDGET_VIEW]["model_id"] == box.model_id
    assert png_size(base64.b64decode(data["image/png"]))[0] <= 8.5 * 150


# ------------------------------------------------------------------ the figures


def _readable(fig):
    width, _ = fig.get_size_inches()
    assert width <= plot.MAX_WIDTH + 1e-9 and fig.dpi >= 150
    fig.canvas.draw()
    small = [
        (t.get_text(), t.get_fontsize())
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < plot.MIN_FONT
    ]
    assert not small, small


def test_tradeoff_scatter_puts_one_labelled_point_per_variant():
    points = {"full": (2048, 0.98), "window": (512, 0.55), "latent 16": (96, 0.7)}
    ax = plot.tradeoff_scatter(points, chance=0.1, title="t")
    _readable(ax.figure)
    got = [tuple(c.get_offsets()[0]) for c in ax.collections]
    assert got == [(2048.0, 0.98), (512.0, 0.55), (96.0, 0.7)]
    assert [t.get_text() for t in ax.texts if t.get_text() != "chance"] == list(points)
    markers = {c.get_paths()[0].vertices.round(3).tobytes() for c in ax.collections}
    assert len(markers) == 3  # a marker shape per variant, not colour alone
    assert ax.get_xscale() == "log"
    # variants at one place share a label; no two labels overlap
    same = plot.tradeoff_scatter(
        {"a": (256, 1.0), "b": (256, 1.0), "c": (300, 1.0), "d": (64, 0.5)}
    )
    _readable(same.figure)
    assert [t.get_text() for t in same.texts] == ["a = b", "c", "d"]
    boxes = [t.get_window_extent() for t in same.texts]
    assert not any(boxes[i].overlaps(boxes[j]) for i in range(3) for j in range(i + 1, 3))
    with pytest.raises(ValueError, match="must not be empty"):
        plot.tradeoff_scatter({})


def test_accuracy_vs_distance_draws_the_window_edge():
    d = np.arange(1, 13)
    curves = {"full": np.ones(12), "window": (d < 6).astype(float), "hybrid": np.full(12, 0.9)}
    ax = plot.accuracy_vs_distance(d, curves, window=6, reach=10, chance=0.05)
    _readable(ax.figure)
    lines = ax.get_lines()
    for line, (label, y) in zip(lines, curves.items(), strict=False):
        assert line.get_label() == label
        np.testing.assert_array_equal(line.get_ydata(), y)
    assert len({(ln.get_marker(), str(ln.get_linestyle())) for ln in lines[:3]}) == 3
    edges = [ln for ln in lines if list(np.asarray(ln.get_xdata(), dtype=float)) == [5.5, 5.5]]
    assert len(edges) == 1  # between d = W - 1 (seen) and d = W (dropped)
    reach = [ln for ln in lines if list(np.asarray(ln.get_xdata(), dtype=float)) == [10.5, 10.5]]
    assert len(reach) == 1 and reach[0].get_linestyle() == ":"
    with pytest.raises(ValueError, match="curve 'x' has shape"):
        plot.accuracy_vs_distance(d, {"x": np.ones(3)})


def test_cache_bars_label_their_sizes_and_hatch_their_kinds():
    values = {"Llama 2 7B": 2.0, "Mistral 7B": 0.25, "DeepSeek-V2": 0.5}
    kinds = {"Llama 2 7B": "every head", "Mistral 7B": "window", "DeepSeek-V2": "latent"}
    ax = plot.cache_bars(values, kinds=kinds)
    _readable(ax.figure)
    assert [p.get_width() for p in ax.patches] == [2.0, 0.25, 0.5]
    assert len({p.get_hatch() for p in ax.patches}) == 3
    assert [t.get_text().strip() for t in ax.texts] == ["2.00 GiB", "0.25 GiB", "0.50 GiB"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["every head", "window", "latent"]
    with pytest.raises(ValueError, match=">= 0"):
        plot.cache_bars({"a": -1.0})


def test_keys_kept_view_shows_the_reach_hatched():
    from matplotlib.collections import PatchCollection

    state = keys_kept_state(4, 3, 64, query=9)
    axes = plot.keys_kept_view(state)
    _readable(axes[0].figure)
    shown = axes[0].images[0].get_array()
    np.testing.assert_array_equal(np.ma.getmaskarray(shown), ~state.reach)
    (hatched,) = [c for c in axes[0].collections if isinstance(c, PatchCollection)]
    assert len(hatched.get_paths()) == int((~state.reach).sum())
    np.testing.assert_allclose(
        [p.get_width() for p in axes[1].patches], np.array(state.cache_bytes) / 1024
    )


def test_importing_the_figures_changes_no_rcparams():
    before = dict(mpl.rcParams)
    import attnlib.plot._fewer_keys  # noqa: F401

    assert dict(mpl.rcParams) == before
