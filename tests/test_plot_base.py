"""attnlib.plot (base figures): each draws the given data, returns Axes/Figure, leaves
matplotlib's global state alone and never calls plt.show()."""

from __future__ import annotations

import re

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from attnlib import plot
from attnlib.plot import _base


def _rc_snapshot() -> dict:
    return {k: v for k, v in mpl.rcParams.items() if k != "backend"}


@pytest.fixture(autouse=True)
def guarded(monkeypatch):
    """Fail on plt.show(); fail if rcParams changed; close every figure afterwards."""

    def no_show(*args, **kwargs):
        raise AssertionError("attnlib.plot must never call plt.show()")

    monkeypatch.setattr(plt, "show", no_show)
    before = _rc_snapshot()
    yield
    after = _rc_snapshot()
    changed = sorted(k for k in before if before[k] != after[k])
    plt.close("all")
    assert not changed, f"rcParams changed by the call: {changed}"


def tick_texts(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels()]


W = np.array([[0.7, 0.2, 0.1], [0.0, 0.5, 0.5]])  # (seq_q=2, seq_k=3)


def test_heatmap_draws_the_matrix_with_labels_and_scale():
    ax = plot.heatmap(W, queries=["the", "cat"], keys=["a", "b", "c"], title="weights")
    assert isinstance(ax, Axes)
    (im,) = ax.images
    np.testing.assert_array_equal(np.asarray(im.get_array()), W)
    assert im.get_clim() == (0.0, 1.0) and im.get_cmap().name == plot.WEIGHTS_CMAP
    assert tick_texts(ax.xaxis) == ["a", "b", "c"]
    assert tick_texts(ax.yaxis) == ["the", "cat"]
    assert ax.get_xlabel() == "key position" and ax.get_ylabel() == "query position"
    assert ax.get_title() == "weights"
    # annotated with each value (2 x 3 <= 10 x 10), and a colorbar axes next to it
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{x:.2f}" for x in W.ravel())
    assert len(ax.figure.axes) == 2


def test_heatmap_scores_are_centred_and_accept_tensors():
    s = torch.tensor([[2.0, -3.0], [0.5, 1.0]], requires_grad=True)
    ax = plot.heatmap(s * 1, kind="scores", annotate=False, colorbar=False)
    (im,) = ax.images
    np.testing.assert_array_equal(np.asarray(im.get_array()), s.detach().numpy())
    assert im.get_clim() == (-3.0, 3.0) and im.get_cmap().name == plot.SCORES_CMAP
    assert len(ax.texts) == 0 and len(ax.figure.axes) == 1
    assert tick_texts(ax.xaxis) == ["0", "1"]


def test_heatmap_draws_on_a_given_axes():
    fig, (a1, a2) = plt.subplots(1, 2)
    ax = plot.heatmap(W, ax=a2, colorbar=False)
    assert ax is a2 and len(a1.images) == 0 and len(a2.images) == 1


def test_long_maps_keep_a_sane_size_and_few_ticks():
    m = np.full((300, 400), 1 / 400)
    ax = plot.heatmap(m)
    w, h = ax.figure.get_size_inches()
    assert w <= _base.MAX_FIGSIZE[0] and h <= _base.MAX_FIGSIZE[1]
    assert len(ax.get_xticks()) <= 12 and len(ax.texts) == 0  # no 120000 annotations
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), m)


def test_bars_heights_labels_and_highlight():
    vals = np.array([1.5, -0.5, 3.0, 0.0])
    ax = plot.bars(vals, ["a", "b", "c", "d"], highlight=2, title="scores", ylabel="q·k")
    assert isinstance(ax, Axes)
    heights = [p.get_height() for p in ax.patches]
    np.testing.assert_array_equal(heights, vals)
    assert tick_texts(ax.xaxis) == ["a", "b", "c", "d"]
    colours = [to_hex(p.get_facecolor()) for p in ax.patches]
    assert colours[2] == plot.PALETTE[1].lower()
    assert set(colours[:2] + colours[3:]) == {plot.PALETTE[0].lower()}
    # the highlight is hatched too: not colour alone
    assert [p.get_hatch() for p in ax.patches] == [None, None, "//", None]
    assert ax.get_title() == "scores" and ax.get_ylabel() == "q·k"


def test_vectors_draws_one_arrow_per_vector():
    v = np.array([[1.0, 0.5], [-2.0, 1.0], [0.3, -0.7]])
    ax = plot.vectors(torch.from_numpy(v), ["q", "k1", "k2"], title="space")
    assert isinstance(ax, Axes)
    arrows = [a for a in ax.texts if isinstance(a, mpl.text.Annotation)]
    np.testing.assert_allclose([a.xy for a in arrows], v)
    labels = [t.get_text() for t in ax.texts if not isinstance(t, mpl.text.Annotation)]
    assert labels == ["q", "k1", "k2"]
    lim = 2.0 * 1.3
    np.testing.assert_allclose(ax.get_xlim(), (-lim, lim))
    np.testing.assert_allclose(ax.get_ylim(), (-lim, lim))


def test_attention_grid_one_map_per_panel():
    w = np.random.default_rng(0).dirichlet(np.ones(4), size=(3, 2))  # (n_maps=3, 2, 4)
    fig = plot.attention_grid(w, titles=["h0", "h1", "h2"], ncols=2, suptitle="heads")
    assert isinstance(fig, Figure)
    maps = [ax for ax in fig.axes if ax.images]
    # 2 x 2 grid, last panel off, and one colourbar shared by the maps
    assert len(maps) == 3 and len(fig.axes) == 5
    assert fig.axes[4].get_label() == "<colorbar>" and fig.axes[4].get_ylabel() == "weights"
    for i, ax in enumerate(maps):
        np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), w[i])
        assert ax.get_title() == f"h{i}"
    assert not fig.axes[3].axison
    assert fig._suptitle.get_text() == "heads"


def test_new_axes_and_course_style():
    fig, ax0 = plt.subplots()
    assert plot.new_axes(ax0) is ax0
    ax = plot.new_axes(figsize=(3.0, 2.0))
    np.testing.assert_allclose(ax.figure.get_size_inches(), (3.0, 2.0))
    before = mpl.rcParams["axes.spines.top"]
    with plot.course_style():
        assert mpl.rcParams["axes.spines.top"] is False
        assert [c.lower() for c in mpl.rcParams["axes.prop_cycle"].by_key()["color"]] == [
            c.lower() for c in plot.PALETTE
        ]
    assert mpl.rcParams["axes.spines.top"] == before
    # the course look is on the figures: no top/right spine
    ax = plot.bars([1.0, 2.0])
    assert not ax.spines["top"].get_visible() and not ax.spines["right"].get_visible()


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (
            lambda: plot.heatmap(np.zeros((2, 3, 4))),
            "heatmap: matrix must be 2-D (seq_q, seq_k), got shape (2, 3, 4)",
        ),
        (
            lambda: plot.heatmap(W, kind="probs"),
            "heatmap: kind must be 'weights' or 'scores', got 'probs'",
        ),
        (lambda: plot.heatmap(W, keys=["a", "b"]), "heatmap: 2 keys labels for 3 positions"),
        (lambda: plot.heatmap(W, queries=["a"]), "heatmap: 1 queries labels for 2 positions"),
        (lambda: plot.bars(np.zeros((2, 2))), "bars: values must be 1-D, got shape (2, 2)"),
        (lambda: plot.bars([1, 2], ["a"]), "bars: 1 labels for 2 values"),
        (
            lambda: plot.vectors(np.zeros((3, 3))),
            "vectors: vecs must have shape (n, 2) with n >= 1, got (3, 3)",
        ),
        (
            lambda: plot.vectors(np.zeros((0, 2))),
            "vectors: vecs must have shape (n, 2) with n >= 1, got (0, 2)",
        ),
        (lambda: plot.vectors(np.ones((2, 2)), ["a"]), "vectors: 1 labels for 2 vectors"),
        (
            lambda: plot.attention_grid(W),
            "attention_grid: weights must be (n_maps, seq_q, seq_k), got (2, 3)",
        ),
    ],
)
def test_errors(call, pattern):
    with pytest.raises(ValueError, match=re.escape(pattern)):
        call()


def test_live_curve_keeps_every_point_and_refuses_more_after_close():
    curve = plot.LiveCurve(xlabel="step", ylabel="loss", label="run", every=3, xlim=(0, 10))
    for step in range(8):  # 8 points: redrawn after 3 and 6, the last two only by close()
        curve.add(step, 4.0 - 0.1 * step)
    assert len(curve.line.get_xdata()) == 6
    ax = curve.close()
    assert list(ax.lines[0].get_xdata()) == list(range(8))
    assert ax.get_xlim() == (0.0, 10.0)  # a fixed range stays fixed while the curve grows
    with pytest.raises(RuntimeError, match="closed"):
        curve.add(9, 3.0)
    with pytest.raises(ValueError, match="every"):
        plot.LiveCurve(xlabel="x", ylabel="y", label="z", every=0)
    plt.close("all")
