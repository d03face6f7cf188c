"""The projector style of attnlib.plot, checked on the Figure objects every function returns.

* text: base font 12 pt and nothing under 10 pt (tick labels, legends, heat-map numbers);
* size: at most 8 in wide; stored (as the inline backend stores it, bbox "tight") at
  150 dpi and at most 8.5 in wide;
* colour: the Okabe–Ito palette, and a second channel for every series (marker or line
  style on lines, hatching on bars, marker shape on scatters, direct labels);
* heat maps: a colourbar, masked cells hatched grey with a "masked" legend entry;
* no rcParams change on import; ``use_course_style`` is the one call that changes them.
"""

from __future__ import annotations

import math
import struct
import subprocess
import sys

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.text import Text

from attnlib import plot
from attnlib.masks import causal_mask
from attnlib.plot._base import MASKED_HATCH

OKABE_ITO = ["#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"]


@pytest.fixture(autouse=True)
def close_all():
    yield
    plt.close("all")


def figure_of(result) -> Figure:
    if isinstance(result, Figure):
        return result
    if isinstance(result, np.ndarray | list | tuple):
        return result[0].figure
    return result.figure


def stored_png(fig: Figure) -> bytes:
    """The PNG a notebook stores for ``fig`` (the inline backend's path: fig.dpi, tight)."""
    from IPython.core.pylabtools import print_figure

    return print_figure(fig, "png", bbox_inches="tight")


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


# --------------------------------------------------------------------------- sample figures


def _history(rng, decay):
    from attnlib.training import History

    h = History()
    for i in range(60):
        h.add(
            **{
                "loss": math.exp(-i * decay) + 0.05 * rng.random(),
                "grad/W_q": 0.1 + rng.random(),
                "grad/W_k": 0.1 + rng.random(),
            }
        )
    return h


def sample_figures():
    """(name, callable) for every public figure function, on small made-up data."""
    from attnlib.explorers import explorer_state
    from attnlib.tasks import scaling

    rng = np.random.default_rng(0)
    d_ks = [4, 16, 64, 256]
    sweep = scaling.width_sweep(d_ks, seq_k=8, n_rows=20, seed=0)
    sc, un = sweep["scaled"], sweep["unscaled"]
    scales = np.geomspace(1e-2, 10, 12)
    temp = scaling.temperature_sweep(scales, d_k=16, seq_k=8, n_rows=20)
    raw = {d: rng.standard_normal(400) * math.sqrt(d) for d in d_ks}
    w = rng.dirichlet(np.ones(6), size=6)
    runs = {"1/√d_k": _history(rng, 0.05), "1": _history(rng, 0.1), "1/d_k": _history(rng, 0.01)}
    states = [explorer_state(64, c) for c in (1 / 8, 1.0, 1e-3)]
    pts = {"keys": rng.standard_normal((64, 2)), "values": rng.standard_normal((64, 2))}
    return [
        ("heatmap", lambda: plot.heatmap(w, queries=list("abcdef"), keys=list("abcdef"))),
        (
            "heatmap-masked",
            lambda: plot.heatmap(w * causal_mask(6), mask=causal_mask(6), title="t"),
        ),
        ("heatmap-scores", lambda: plot.heatmap(rng.standard_normal((5, 7)), kind="scores")),
        ("bars", lambda: plot.bars(w[0], list("abcdef"), highlight=1, title="weights")),
        ("vectors", lambda: plot.vectors(rng.standard_normal((3, 2)), ["q", "k0", "k1"])),
        ("attention_grid", lambda: plot.attention_grid(np.stack([w] * 5), titles=list("abcde"))),
        (
            "variance_vs_width",
            lambda: plot.variance_vs_width(d_ks, d_ks, scaled=[1.0] * 4, tolerance=[0.1] * 4),
        ),
        ("score_histograms", lambda: plot.score_histograms(raw)),
        ("saturation_vs_width", lambda: plot.saturation_vs_width(d_ks, sc, un, seq_k=8)),
        ("gradient_vs_width", lambda: plot.gradient_vs_width(d_ks, sc, un)),
        (
            "entropy_gradient_vs_scale",
            lambda: plot.entropy_gradient_vs_scale(scales, temp, mark=0.25, seq_k=8),
        ),
        ("training_curves", lambda: plot.training_curves(runs)),
        ("explorer_view", lambda: plot.explorer_view(states[0])),
        ("explorer_grid", lambda: plot.explorer_grid(states)),
        (
            "learning_curves",
            lambda: plot.learning_curves(
                {"separate": rng.random(80), "tied": rng.random(80), "uniform": rng.random(80)},
                chance=0.1,
            ),
        ),
        (
            "feature_spaces",
            lambda: plot.feature_spaces(
                pts, {"name": np.arange(64) % 16, "number": np.arange(64) % 4}
            ),
        ),
        (
            "grad_norm_curves",
            lambda: plot.grad_norm_curves(
                {
                    "W_Q": rng.random(50) + 0.1,
                    "W_K": rng.random(50) + 0.1,
                    "W_V": rng.random(50) + 0.1,
                }
            ),
        ),
        ("entropy_curve", lambda: plot.entropy_curve(rng.random(50), seq_k=6)),
        (
            "cost_curves",
            lambda: plot.cost_curves(
                [64, 128, 256], {"no cache": [1, 2, 4], "cache": [1, 1.1, 1.2], "mqa": [1, 1, 1]}
            ),
        ),
        (
            "cost_curves-decades",
            lambda: plot.cost_curves(
                [256, 512, 1024],
                {"a": [1, 4, 16], "b": [1, 2, 3]},
                equal_decades=True,
                slopes=(1, 2),
                legend="right",
            ),
        ),
        (
            "score_tiles",
            lambda: plot.score_tiles(
                rng.standard_normal((8, 8)).round(1), block_q=3, block_k=3, causal=True, walk=2
            ),
        ),
        (
            "score_tiles-carried",
            lambda: plot.score_tiles(
                np.where(np.arange(12) < 4, -np.inf, rng.standard_normal((2, 12))),
                block_q=2,
                block_k=4,
                walk=0,
                carried=["m\nℓ"] * 3,
            ),
        ),
        ("position_codes", lambda: plot.position_codes(rng.uniform(-1, 1, (16, 32)))),
        (
            "score_vs_offset",
            lambda: plot.score_vs_offset(
                np.arange(-5, 6), {"q at 3": rng.random(11), "q at 7": rng.random(11)}
            ),
        ),
        (
            "role_scatter",
            lambda: plot.role_scatter(
                rng.standard_normal((60, 2)), np.arange(60) % 4, ["s", "o", "a", "x"]
            ),
        ),
        (
            "grouped_bars",
            lambda: plot.grouped_bars(
                rng.random((3, 2)), ["h0", "h1", "h2"], ["subject", "attractor"]
            ),
        ),
        (  # lesson 09: the four noun roles, one panel each; four series of bars
            "role_scatter_panels",
            lambda: plot.role_scatter(
                rng.standard_normal((60, 2)), np.arange(60) % 4, ["f", "s", "a", "o"], panels=True
            ),
        ),
        (
            "grouped_bars_four_series",
            lambda: plot.grouped_bars(
                rng.random((4, 4)), [f"head {h}" for h in range(4)], ["s0", "a0", "s1", "a1"]
            ),
        ),
        (
            "tradeoff_scatter",
            lambda: plot.tradeoff_scatter(
                {"full": (512.0, 1.0), "window": (160.0, 0.45), "latent": (24.0, 0.46)},
                chance=0.0625,
            ),
        ),
        (
            "accuracy_vs_distance",
            lambda: plot.accuracy_vs_distance(
                np.arange(1, 25), {"full": np.ones(24), "window": rng.random(24)}, window=8
            ),
        ),
        ("live_curve", lambda: _live_curve(rng.random(50) + 2.0)),
        (
            "cache_bars",
            lambda: plot.cache_bars(
                {"A": 4.0, "B": 1.0, "C": 0.5}, kinds={"A": "full", "B": "grouped", "C": "latent"}
            ),
        ),
        ("sampling_view", lambda: plot.sampling_view(_sampling_states(rng)[1])),
        ("sampling_views", lambda: plot.sampling_views(_sampling_states(rng))),
    ]


def _sampling_states(rng):
    """Lesson 17's four settings on one random row of 30 logits (ties are impossible)."""
    from attnlib.explorers import sampling_state

    logits = torch.as_tensor(rng.standard_normal(30) * 2)
    labels = [chr(ord("a") + i) for i in range(26)] + [" ", "\n", ".", ","]
    settings = [{}, {"temperature": 0.7, "top_k": 10}, {"top_p": 0.9}, {"min_p": 0.1}]
    return [sampling_state(logits, labels, shown=12, **s) for s in settings]


def _live_curve(losses):
    curve = plot.LiveCurve(
        xlabel="step",
        ylabel="loss",
        label="this run",
        every=7,
        reference=3.4,
        reference_label="unigram baseline",
    )
    for step, loss in enumerate(losses):
        curve.add(step, loss)
    return curve.close()


SAMPLES = sample_figures()


@pytest.fixture(scope="module", params=SAMPLES, ids=[name for name, _ in SAMPLES])
def drawn(request):
    """Each sample figure, drawn once for the tests that read it (pytest groups them by
    sample), then closed."""
    name, make = request.param
    fig = figure_of(make())
    fig.canvas.draw()  # tick labels exist once drawn
    yield name, fig
    plt.close(fig)


# --------------------------------------------------------------------------- the style


def test_style_constants():
    assert [c.upper() for c in plot.PALETTE] == OKABE_ITO
    assert plot.STYLE["font.size"] >= 12 and plot.MIN_FONT >= 10
    assert plot.STYLE["figure.dpi"] >= 150 and plot.STYLE["savefig.dpi"] >= 150
    for key in ("xtick.labelsize", "ytick.labelsize", "legend.fontsize", "axes.labelsize"):
        assert plot.STYLE[key] >= 10, key
    assert plot.MAX_WIDTH <= 8
    cycle = plot.STYLE["axes.prop_cycle"].by_key()
    assert len(set(map(str, cycle["linestyle"][:4]))) == 4  # plain plt.plot gets line styles
    # series styles: the first 16 all differ in (colour, marker)
    pairs = {(plot.series_style(i)["color"], plot.series_style(i)["marker"]) for i in range(16)}
    assert len(pairs) == 16


def _look(handle) -> tuple:
    """What tells a legend entry apart, colour aside."""
    from matplotlib.container import BarContainer, ErrorbarContainer

    if isinstance(handle, ErrorbarContainer):
        handle = handle.lines[0]
    if isinstance(handle, BarContainer):
        handle = handle.patches[0]
    if isinstance(handle, mpl.lines.Line2D):
        return ("line", handle.get_marker(), str(handle.get_linestyle()))
    if isinstance(handle, mpl.patches.Patch):
        return ("patch", handle.get_hatch())
    if isinstance(handle, mpl.collections.PathCollection):
        return ("points", handle.get_paths()[0].vertices.round(3).tobytes())
    return ("other", type(handle).__name__)


def test_every_figure_is_readable_from_the_back_row(drawn):
    """At most 8 in wide, 150 dpi, no text under 10 pt, stored at most 8.5 in wide, and
    legend entries that never differ by colour alone."""
    name, fig = drawn
    width, height = fig.get_size_inches()
    assert width <= plot.MAX_WIDTH + 1e-9, f"{name}: {width:.2f} in wide"
    assert fig.dpi >= 150, f"{name}: {fig.dpi} dpi"
    small = sorted(
        {
            (round(t.get_fontsize(), 1), t.get_text())
            for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and t.get_fontsize() < plot.MIN_FONT
        }
    )
    assert not small, f"{name}: text under {plot.MIN_FONT} pt: {small[:8]}"
    w_px, h_px = png_size(stored_png(fig))
    assert w_px / fig.dpi <= 8.5, f"{name}: stored {w_px} px = {w_px / fig.dpi:.2f} in wide"
    for ax in fig.axes:
        if ax.get_legend() is None:
            continue
        looks = [_look(h) for h in ax.get_legend_handles_labels()[0]]
        if not looks:  # a legend made from explicit handles (e.g. the "masked" entry)
            looks = [_look(h) for h in ax.get_legend().legend_handles]
        assert len(set(looks)) == len(looks), f"{name}: legend entries differ by colour only"


def test_series_differ_in_colour_and_marker():
    rng = np.random.default_rng(1)
    ax = plot.learning_curves({k: rng.random(30) for k in "abc"})
    smooth = ax.get_lines()[1::2][:3]
    assert len({ln.get_color() for ln in smooth}) == 3
    assert len({ln.get_marker() for ln in smooth}) == 3
    ax = plot.grouped_bars(rng.random((2, 3)), ["g0", "g1"], ["x", "y", "z"])
    hatches = [p.get_hatch() for p in ax.patches]
    assert len(set(hatches)) == 3  # one hatch per series
    fig = plot.feature_spaces(
        {"keys": rng.standard_normal((40, 2))},
        {"name": np.arange(40) % 10, "number": np.arange(40) % 5},
        names={"name": [f"n{i}" for i in range(10)]},
    )
    ax = fig.axes[0]  # 10 groups, more than 8 colours: each group named, no colour reused
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"n{i}" for i in range(10))
    dots = ax.collections[0]
    assert len({mpl.colors.to_hex(c) for c in dots.get_facecolor()}) == 1
    (dots,) = fig.axes[1].collections  # 5 groups: a marker and a colour each, and a legend
    shapes = {p.vertices.round(3).tobytes() for p in dots.get_paths()}
    assert len(shapes) == 5 and len(fig.axes[1].get_legend().legend_handles) == 5


def test_multi_panel_figures_can_be_split():
    from attnlib.explorers import explorer_state
    from attnlib.tasks import scaling

    rng = np.random.default_rng(2)
    runs = {"a": _history(rng, 0.05), "b": _history(rng, 0.1)}
    assert len(plot.training_curves(runs).axes) == 3
    only = plot.training_curves(runs, panels="loss")
    assert [ax.get_title() for ax in only.axes] == ["loss"]
    two = plot.training_curves(runs, panels=("grad/W_q", "grad/W_k"))
    assert len(two.axes) == 2 and two.get_size_inches()[0] <= plot.MAX_WIDTH
    sweep = scaling.width_sweep([4, 64], seq_k=8, n_rows=10, seed=0)
    one = plot.saturation_vs_width(
        [4, 64], sweep["scaled"], sweep["unscaled"], seq_k=8, panels="max_weight"
    )
    assert len(one.axes) == 1
    raw = {d: rng.standard_normal(100) for d in (4, 16, 64, 256, 1024, 4096)}
    assert plot.score_histograms(raw).get_size_inches()[0] <= plot.MAX_WIDTH
    assert len(plot.score_histograms(raw, rows="scaled").axes) == 6
    grid = plot.explorer_grid([explorer_state(16, c) for c in (0.1, 1, 10)], ncols=2)
    assert grid.get_size_inches()[0] <= plot.MAX_WIDTH and len(grid.axes) == 4
    with pytest.raises(ValueError, match="panels must be a non-empty selection"):
        plot.training_curves(runs, panels="accuracy")
    fig, axes = plot.subplots(1, 4, figsize=(16, 3))
    assert fig.get_size_inches()[0] == plot.MAX_WIDTH and fig.dpi >= 150 and len(axes) == 4


# --------------------------------------------------------------------------- heat maps


def test_heatmaps_have_colourbars():
    w = np.full((3, 4), 0.25)
    ax = plot.heatmap(w)
    (cbar,) = [a for a in ax.figure.axes if a.get_label() == "<colorbar>"]
    assert cbar.get_ylabel() == "weights"
    fig = plot.attention_grid(np.stack([w, w]))
    assert [a.get_label() for a in fig.axes].count("<colorbar>") == 1
    ax = plot.position_codes(np.zeros((4, 6)))
    assert any(a.get_label() == "<colorbar>" for a in ax.figure.axes)


def test_masked_cells_are_hatched_grey_with_a_legend_entry():
    mask = causal_mask(4)  # True = may attend
    w = np.tril(np.full((4, 4), 0.25))
    ax = plot.heatmap(w, mask=mask, title="causal")
    (hatched,) = [c for c in ax.collections if isinstance(c, PatchCollection)]
    assert hatched.get_hatch() == MASKED_HATCH
    assert len(hatched.get_paths()) == int((~mask).sum()) == 6
    assert ax.get_legend() is not None
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["masked"]
    # no number is written in a masked cell; every allowed cell has its number
    numbers = {(round(t.get_position()[1]), round(t.get_position()[0])) for t in ax.texts}
    assert numbers == {(int(i), int(j)) for i, j in zip(*np.nonzero(mask), strict=True)}
    # the image itself hides the masked cells (drawn in the "bad" colour)
    shown = ax.images[0].get_array()
    assert np.array_equal(np.ma.getmaskarray(shown), ~mask)


def test_non_finite_scores_are_drawn_as_masked():
    s = np.array([[1.0, -np.inf], [0.5, 2.0]])
    ax = plot.heatmap(s, kind="scores")
    assert ax.images[0].get_clim() == (-2.0, 2.0)
    (hatched,) = [c for c in ax.collections if isinstance(c, PatchCollection)]
    assert len(hatched.get_paths()) == 1


def test_attention_grid_masks_with_one_legend_entry():
    w = np.stack([np.tril(np.full((3, 3), 1 / 3))] * 3)
    fig = plot.attention_grid(w, mask=causal_mask(3))
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 1
    assert all(
        any(isinstance(c, PatchCollection) for c in ax.collections) for ax in fig.axes if ax.images
    )


@pytest.mark.parametrize(
    ("mask", "error", "pattern"),
    [
        (np.ones((2, 2)), TypeError, "mask must be boolean"),
        (np.ones((3, 3), dtype=bool), ValueError, r"mask of shape \(3, 3\) does not broadcast"),
    ],
)
def test_heatmap_mask_errors(mask, error, pattern):
    with pytest.raises(error, match=pattern):
        plot.heatmap(np.zeros((2, 2)), mask=mask)


# --------------------------------------------------------------------------- global state


def test_importing_changes_no_rcparams():
    code = (
        "import matplotlib as mpl\n"
        "before = {k: repr(v) for k, v in mpl.rcParams.items() if k != 'backend'}\n"
        "import attnlib, attnlib.plot, attnlib.explorers\n"
        "after = {k: repr(v) for k, v in mpl.rcParams.items() if k != 'backend'}\n"
        "print(sorted(k for k in before if before[k] != after[k]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_use_course_style_is_the_one_global_change():
    saved = mpl.rcParams.copy()
    try:
        plot.use_course_style()
        assert mpl.rcParams["figure.dpi"] == plot.STYLE["figure.dpi"]
        assert mpl.rcParams["font.size"] == plot.STYLE["font.size"]
        fig, ax = plt.subplots()  # a lesson's own figure gets the style too
        assert fig.dpi >= 150 and ax.xaxis.get_ticklabels()[0].get_fontsize() >= 10
    finally:
        mpl.rcParams.update(saved)


# --------------------------------------------------------------------------- colour vision
#
# Simulated colour-vision deficiency (CVD). Machado, Oliveira & Fernandes (2009), "A
# Physiologically-based Model for Simulation of Color Vision Deficiency", IEEE TVCG 15(6):
# one 3 x 3 matrix per deficiency, applied to linear RGB; these are their severity-1.0
# (dichromat) matrices. Two colours count as apart when their CIELAB distance (ΔE*76, D65)
# is at least CVD_MIN_DELTA_E under every simulation. The threshold: ΔE ≈ 2.3 is a just
# noticeable difference side by side under ideal viewing; small marks on a washed-out
# projector need far more. The Okabe–Ito palette, designed to stay distinct under the three
# dichromacies, keeps every pair of its eight colours at ΔE ≥ 16 in these simulations
# (tritanopia: bluish green vs sky blue, 16.1), so a pair below 15 is closer than any pair
# that palette allows. Use :func:`cvd_close_pairs` on any figure's colours.

MACHADO_2009 = {
    "protanopia": np.array(
        [
            [0.152286, 1.052583, -0.204868],
            [0.114503, 0.786281, 0.099216],
            [-0.003882, -0.048116, 1.051998],
        ]
    ),
    "deuteranopia": np.array(
        [
            [0.367322, 0.860646, -0.227968],
            [0.280085, 0.672501, 0.047413],
            [-0.011820, 0.042940, 0.968881],
        ]
    ),
    "tritanopia": np.array(
        [
            [1.255528, -0.076749, -0.178779],
            [-0.078411, 0.930809, 0.147602],
            [0.004733, 0.691367, 0.303900],
        ]
    ),
}
CVD_MIN_DELTA_E = 15.0
_SRGB_TO_XYZ = np.array(
    [
        [0.4124564, 0.3575761, 0.1804375],
        [0.2126729, 0.7151522, 0.0721750],
        [0.0193339, 0.1191920, 0.9503041],
    ]
)


def _linear_rgb(colour) -> np.ndarray:
    c = np.asarray(mpl.colors.to_rgb(colour), dtype=float)
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _lab(linear_rgb: np.ndarray) -> np.ndarray:
    white = _SRGB_TO_XYZ @ np.ones(3)
    xyz = _SRGB_TO_XYZ @ np.clip(linear_rgb, 0.0, 1.0) / white
    d = 6 / 29
    f = np.where(xyz > d**3, np.cbrt(xyz), xyz / (3 * d**2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def simulate_cvd(colour, deficiency: str | None) -> np.ndarray:
    """CIELAB of ``colour`` as seen with ``deficiency`` (None: normal vision)."""
    rgb = _linear_rgb(colour)
    return _lab(rgb if deficiency is None else MACHADO_2009[deficiency] @ rgb)


def cvd_delta_e(a, b, deficiency: str | None) -> float:
    return float(np.linalg.norm(simulate_cvd(a, deficiency) - simulate_cvd(b, deficiency)))


def cvd_close_pairs(
    colours, threshold: float = CVD_MIN_DELTA_E
) -> list[tuple[str, str, str, float]]:
    """Pairs of distinct colours closer than ``threshold`` under normal vision or any
    simulated dichromacy: (colour, colour, deficiency, ΔE). Empty when all stay apart."""
    unique = list(dict.fromkeys(mpl.colors.to_hex(c) for c in colours))
    close = []
    for i, a in enumerate(unique):
        for b in unique[i + 1 :]:
            for deficiency in (None, *MACHADO_2009):
                d = cvd_delta_e(a, b, deficiency)
                if d < threshold:
                    close.append((a, b, deficiency or "normal", round(d, 1)))
    return close


def _handle_colour(handle):
    from matplotlib.container import BarContainer, ErrorbarContainer

    if isinstance(handle, ErrorbarContainer):
        handle = handle.lines[0]
    if isinstance(handle, BarContainer):
        handle = handle.patches[0]
    if isinstance(handle, mpl.lines.Line2D):
        return (
            handle.get_color()
            if handle.get_linestyle() not in ("None", "none", "")
            else handle.get_markerfacecolor()
        )
    if isinstance(handle, mpl.patches.Patch):
        return handle.get_facecolor()
    if isinstance(handle, mpl.collections.Collection):
        fc = handle.get_facecolor()
        return fc[0] if len(fc) else None
    return None


def _neutral_grey(colour) -> bool:
    r, g, b = mpl.colors.to_rgb(colour)
    return abs(r - g) < 0.02 and abs(g - b) < 0.02 and 0.05 < r < 0.98


def distinguished_colours(ax) -> list:
    """The colours a reader must tell apart in one Axes: its legend entries' colours, or,
    without a legend, the colours of its bars (one colour per bar). Neutral greys are left
    out: the course draws reference lines (chance, a level) in grey, told apart by their line
    style and label rather than by colour; black, an Okabe–Ito colour, stays in."""
    legend = ax.get_legend()
    if legend is not None:
        colours = [_handle_colour(h) for h in legend.legend_handles]
        return [c for c in colours if c is not None and not _neutral_grey(c)]
    return [
        p.get_facecolor()
        for p in ax.patches
        if isinstance(p, mpl.patches.Rectangle) and p.get_width() > 0
    ][:16]


def test_the_threshold_is_the_okabe_ito_margin():
    deficiencies = (None, *MACHADO_2009)
    smallest = min(
        cvd_delta_e(a, b, d)
        for i, a in enumerate(OKABE_ITO)
        for b in OKABE_ITO[i + 1 :]
        for d in deficiencies
    )
    assert 15.0 <= smallest < 17.0, smallest  # 16.1: bluish green vs sky blue, tritanopia
    assert cvd_close_pairs(OKABE_ITO) == []
    # matplotlib's default red and green, the classic confusion, merge under deuteranopia
    bad = cvd_close_pairs(["#D62728", "#2CA02C"])
    assert [d for _, _, d, _ in bad] == ["deuteranopia"], bad


def test_the_colours_each_figure_distinguishes_stay_apart_under_cvd(drawn):
    name, fig = drawn
    for ax in fig.axes:
        close = cvd_close_pairs(distinguished_colours(ax))
        assert not close, f"{name}, panel {ax.get_title()!r}: colours merge: {close}"


def test_key_bars_follow_their_arrow_colours():
    from attnlib.explorers.dot import dot_state

    fig, (ax_v, ax_s) = plot.subplots(1, 2)
    keys = np.array([[2.0, 1.0], [-1.0, 2.0], [-2.0, -1.0]])
    plot.vectors(np.vstack([[4.0, 2.0], keys]), labels=["query", "a", "b", "c"], ax=ax_v)
    plot.bars(keys @ [4.0, 2.0], ["a", "b", "c"], ax=ax_s, highlight=0, colors=plot.PALETTE[1:4])
    arrows = [
        mpl.colors.to_hex(t.arrow_patch.get_edgecolor())
        for t in ax_v.texts
        if getattr(t, "arrow_patch", None) is not None
    ]
    bars = [mpl.colors.to_hex(p.get_facecolor()) for p in ax_s.patches]
    assert arrows[1:] == bars
    assert ax_s.patches[0].get_hatch() == "//"  # the highlight keeps its colour, gains hatching
    with pytest.raises(ValueError, match="2 colors for 3 values"):
        plot.bars([1.0, 2.0, 3.0], colors=plot.PALETTE[:2])
    assert dot_state(30.0, keys).scores.shape == (3,)


def _label_overlaps(fig) -> list[tuple[str, str]]:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        texts = [t for t in ax.texts if t.get_text()]
        boxes = [t.get_window_extent(renderer) for t in texts]
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                if boxes[i].overlaps(boxes[j]):
                    found.append((texts[i].get_text(), texts[j].get_text()))
    return found


def test_feature_spaces_labels_never_overlap_and_no_colour_is_reused():
    rng = np.random.default_rng(5)
    names = [f"name{i:02d}" for i in range(16)]
    centres = rng.standard_normal((16, 2)) * 0.4  # crowded: many names close together
    lab = np.repeat(np.arange(16), 8)
    pts = centres[lab] + 0.05 * rng.standard_normal((128, 2))
    numbers = np.tile(np.arange(8), 16)
    fig = plot.feature_spaces(
        {"scores": pts}, {"name": lab, "number": numbers}, names={"name": names}
    )
    assert _label_overlaps(fig) == []
    by_name, by_number = fig.axes[:2]
    assert sorted(t.get_text() for t in by_name.texts) == names  # 16 groups: named, not coloured
    assert len({mpl.colors.to_hex(c) for c in by_name.collections[0].get_facecolor()}) == 1
    handles = by_number.get_legend().legend_handles  # 8 groups: one colour and marker each
    looks = {(mpl.colors.to_hex(_handle_colour(h)), h.get_marker()) for h in handles}
    assert len(looks) == 8 and len({c for c, _ in looks}) == 8
    assert cvd_close_pairs([c for c, _ in looks]) == []


def test_the_query_explorer_labels_values_on_one_line_apart():
    from test_explorer_query import drawn

    from attnlib.explorers.query import query_state

    keys = np.array([[0.0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1], [1, 0, 0]])
    values = np.array([[0.0, 0], [1, 0], [0, 1], [0, 0], [0.5, 0], [1, 0]])
    words = ["the", "cats", "chase", "a", "small", "mouse"]
    state = query_state(
        0.0, keys=keys, values=values, plane=np.eye(3)[[0, 2]], length=4.0, labels=words
    )
    assert _label_overlaps(drawn(state)) == []  # drawn: render_query's one figure
