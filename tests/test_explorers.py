"""The lecture explorers, driven by setting widget values from code (no browser).

Each pure state function is checked against an independent computation (torch softmax,
SDPA, torch.distributions for the entropy, autograd for the Jacobian, fp64 numpy); each
widget is checked to show what its state function computes for the current control
values, and to change when a control moves.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import attnlib
from attnlib.explorers import (
    MASK_MODES,
    explorer_state,
    head_explorer,
    head_state,
    mask_explorer,
    mask_state,
    query_explorer,
    query_state,
    scaling_explorer,
)
from attnlib.explorers.scale import D_K_CHOICES, render_png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ query explorer


def test_query_state_matches_torch():
    s = query_state(40.0, 32, 0.7, seq_k=5, seed=2)
    q, k = torch.tensor(s.query), torch.tensor(s.keys)
    v = torch.tensor(s.values)
    expected = torch.softmax((k @ q) / math.sqrt(32) / 0.7, dim=-1)
    np.testing.assert_allclose(s.weights, expected.numpy(), rtol=1e-12)
    # the blended value is SDPA's output with the same scale (scale = 1/(√d_k·T))
    out = torch.nn.functional.scaled_dot_product_attention(
        q[None, None, None], k[None, None], v[None, None], scale=1 / (math.sqrt(32) * 0.7)
    )[0, 0, 0]
    np.testing.assert_allclose(s.output, out.numpy(), rtol=1e-10)
    assert s.query.shape == (32,) and s.keys.shape == (5, 32) and s.values.shape == (5, 2)
    assert np.linalg.norm(s.query) == pytest.approx(math.sqrt(32))
    assert s.entropy == pytest.approx(
        torch.distributions.Categorical(probs=torch.tensor(s.weights)).entropy().item()
    )
    # pure: same input, same output
    np.testing.assert_array_equal(s.weights, query_state(40.0, 32, 0.7, seq_k=5, seed=2).weights)


def test_query_direction_temperature_and_scaling():
    # angle 0 points the query along key 0: cosine similarity with key 0 is 1
    s0 = query_state(0.0, 64)
    cos = s0.query @ s0.keys[0] / np.linalg.norm(s0.query) / np.linalg.norm(s0.keys[0])
    assert cos == pytest.approx(1.0)
    # turning the query changes which key wins
    winners = {int(np.argmax(query_state(a, 64).weights)) for a in range(-180, 180, 15)}
    assert len(winners) >= 3, winners
    # temperature: higher is flatter (entropy up), lower is sharper
    e = [query_state(30.0, 64, t).entropy for t in (0.1, 1.0, 10.0)]
    assert e[0] < e[1] < e[2]
    assert query_state(30.0, 64, 1000.0).entropy == pytest.approx(math.log(6), abs=1e-2)
    # without the √d_k the weights sharpen as d_k grows; with it they stay comparable
    unscaled = [query_state(30.0, d, scaled=False).max_weight for d in (4, 512)]
    assert unscaled[1] > 0.99 > unscaled[0]
    for bad, match in [({"d_k": 0}, "d_k"), ({"temperature": 0.0}, "temperature")]:
        with pytest.raises(ValueError, match=match):
            query_state(0.0, **bad)
    with pytest.raises(ValueError, match="angle"):
        query_state(float("nan"))


def test_query_explorer_widget_follows_its_controls():
    box = query_explorer(angle=0.0, d_k=16, temperature=1.0)
    assert box.image.value[:8] == PNG_MAGIC
    before_png, before = box.image.value, box.state
    box.angle_slider.value = 120.0
    assert box.state.angle == 120.0
    np.testing.assert_array_equal(box.state.weights, query_state(120.0, 16, 1.0).weights)
    assert not np.array_equal(before.weights, box.state.weights)
    assert box.image.value != before_png
    box.temperature_slider.value = 10.0
    assert box.state.entropy > before.entropy
    box.scaled_checkbox.value = False
    np.testing.assert_array_equal(
        box.state.scores, query_state(120.0, 16, 10.0, scaled=False).scores
    )
    box.d_k_slider.value = 256
    assert box.state.d_k == 256 and "d_k = 256" in box.readout.value
    with pytest.raises(ValueError, match="d_k"):
        query_explorer(d_k=3)
    unscaled = query_explorer(angle=0.0, d_k=16, scaled=False, seq_k=4, seed=1)
    assert unscaled.scaled_checkbox.value is False and "not scaled" in unscaled.readout.value
    np.testing.assert_array_equal(
        unscaled.state.scores, query_state(0.0, 16, scaled=False, seq_k=4, seed=1).scores
    )


def _lesson_keys():
    """Lesson 03's keys and values: six tokens, d_k = 3 (noun, verb, modifier), d_v = 2."""
    keys = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1], [1, 0, 0]], float)
    values = np.array([[0, 0], [1, 0], [0, 1], [0, 0], [0.5, 0], [1, 0]], float)
    return keys, values, ["the", "cat", "chased", "the", "small", "mouse"]


@pytest.mark.parametrize("angle", [0.0, 45.0, 90.0, 150.0])
def test_query_state_with_given_keys_matches_torch(angle):
    keys, values, labels = _lesson_keys()
    plane = [[2.0, 0, 0], [0, 0, 0.5]]  # rows are normalised: only directions count
    s = query_state(angle, keys=keys, values=values, plane=plane, length=4.0, labels=labels)
    a = math.radians(angle)
    q = torch.tensor([4 * math.cos(a), 0.0, 4 * math.sin(a)], dtype=torch.float64)
    k, v = torch.tensor(keys), torch.tensor(values)
    np.testing.assert_allclose(s.query, q.numpy(), atol=1e-12)
    out = torch.nn.functional.scaled_dot_product_attention(
        q[None, None, None], k[None, None], v[None, None]
    )[0, 0, 0]  # SDPA scales by 1/√3 itself
    np.testing.assert_allclose(s.weights, torch.softmax(k @ q / math.sqrt(3), -1).numpy())
    np.testing.assert_allclose(s.output, out.numpy(), rtol=1e-10)
    assert s.d_k == 3 and s.seq_k == 6 and s.labels == tuple(labels)
    assert f"(key {labels[int(np.argmax(s.weights))]})" in s.summary()
    np.testing.assert_array_equal(s.keys, keys)  # not the seed's random keys


def test_query_state_with_given_keys_rejects_bad_input():
    keys, values, labels = _lesson_keys()
    plane = [[1.0, 0, 0], [0, 0, 1]]
    with pytest.raises(ValueError, match="plane"):
        query_state(0.0, keys=keys)
    with pytest.raises(ValueError, match=r"plane must have shape \(2, d_k\) = \(2, 3\)"):
        query_state(0.0, keys=keys, plane=[[1.0, 0], [0, 1]])
    with pytest.raises(ValueError, match=r"values must have shape .*\(6, 3\)"):
        query_state(0.0, keys=keys, plane=plane, values=np.ones((6, 3)))
    with pytest.raises(ValueError, match="labels has 2 names for 6 keys"):
        query_state(0.0, keys=keys, plane=plane, labels=["a", "b"])
    with pytest.raises(ValueError, match="d_k=16"):
        query_state(0.0, 16, keys=keys, plane=plane)
    with pytest.raises(ValueError, match="only used together with keys"):
        query_state(0.0, plane=plane)
    with pytest.raises(ValueError, match="length"):
        query_state(0.0, keys=keys, plane=plane, length=0.0)


def test_query_explorer_with_given_keys():
    keys, values, labels = _lesson_keys()
    plane = [[1.0, 0, 0], [0, 0, 1]]
    kw = dict(keys=keys, values=values, plane=plane, length=4.0, labels=labels)
    box = query_explorer(angle=0.0, **kw)
    assert box.d_k_slider.disabled and box.d_k_slider.value == 3
    assert "(key cat)" in box.readout.value  # angle 0 looks for a noun
    png = box.image.value
    box.angle_slider.value = 90.0
    np.testing.assert_array_equal(box.state.weights, query_state(90.0, **kw).weights)
    assert box.state.labels[int(np.argmax(box.state.weights))] in {"the", "small"}
    assert box.image.value != png
    box.scaled_checkbox.value = False
    np.testing.assert_array_equal(box.state.scores, query_state(90.0, scaled=False, **kw).scores)


# ------------------------------------------------------------------ mask editor


def _sdpa_weights(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Weights via torch: masked_fill(-inf) then softmax (independent of attnlib)."""
    s = torch.tensor(scores).masked_fill(~torch.tensor(mask), float("-inf"))
    return torch.softmax(s, dim=-1).numpy()


@pytest.mark.parametrize("mode", MASK_MODES)
def test_mask_state_matches_torch(mode):
    s = mask_state(mode, 4, seq=6, seed=1)
    np.testing.assert_allclose(s.weights, _sdpa_weights(s.scores, s.mask), rtol=1e-12)
    np.testing.assert_allclose(s.weights.sum(axis=1), 1.0)
    assert np.all(s.weights[~s.mask] == 0)
    i, j = np.indices((6, 6))
    expected = np.ones((6, 6), bool)
    if "causal" in mode:
        expected &= j <= i
    if "padding" in mode:
        expected &= j < 4
    np.testing.assert_array_equal(s.mask, expected)
    np.testing.assert_array_equal(s.visible, expected.sum(axis=1))


def test_mask_state_errors():
    with pytest.raises(ValueError, match="mode"):
        mask_state("future")
    with pytest.raises(ValueError, match="length"):
        mask_state("padding", 0)
    with pytest.raises(ValueError, match="length"):
        mask_state("padding", 7, seq=6)


def test_mask_explorer_widget_follows_its_controls():
    box = mask_explorer("none", seq=5)
    assert box.state.mask.all() and box.image.value[:8] == PNG_MAGIC
    png = box.image.value
    box.mode_buttons.value = "causal"
    assert box.state.visible.tolist() == [1, 2, 3, 4, 5]
    assert box.image.value != png
    box.mode_buttons.value = "causal + padding"
    box.length_slider.value = 2
    assert box.state.visible.tolist() == [1, 2, 2, 2, 2]
    np.testing.assert_array_equal(
        box.state.weights, mask_state("causal + padding", 2, seq=5).weights
    )
    assert "length 2 of 5" in box.readout.value


# ------------------------------------------------------------------ head selector


def _mha_weights():
    """Per-head weights of a real nn.MultiheadAttention (one sequence): (n_heads, seq, seq)."""
    g = torch.Generator().manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 4, batch_first=True)
    x = torch.randn(1, 5, 8, generator=g)
    with torch.no_grad():
        _, w = mha(x, x, x, need_weights=True, average_attn_weights=False)
    return w[0]  # (n_heads, seq_q, seq_k)


def test_head_state_on_a_torch_model():
    w = _mha_weights()
    for h in range(4):
        s = head_state(w, h)
        np.testing.assert_allclose(s.weights, w[h].numpy(), rtol=1e-6)
        np.testing.assert_array_equal(s.argmax, w[h].argmax(-1).numpy())
        ent = torch.distributions.Categorical(probs=w[h].double()).entropy().numpy()
        np.testing.assert_allclose(s.entropy, ent, rtol=1e-6)
    assert s.n_heads == 4


def test_head_state_rejects_bad_input():
    w = _mha_weights()
    with pytest.raises(ValueError, match=r"\(n_heads, seq_q, seq_k\).*\(1, 4, 5, 5\)"):
        head_state(w[None], 0)
    with pytest.raises(ValueError, match="head"):
        head_state(w, 4)
    with pytest.raises(ValueError, match="sum to 1"):
        head_state(torch.randn(2, 3, 3).abs() * 5, 0)  # scores, not weights
    with pytest.raises(TypeError, match="dtype"):
        head_state(np.ones((1, 2, 2), dtype=int), 0)


def test_head_explorer_widget_follows_its_slider():
    w = _mha_weights()
    tokens = ["the", "cat", "sat", "on", "mat"]
    box = head_explorer(w, queries=tokens, keys=tokens)
    assert box.head_slider.max == 3 and box.state.head == 0
    png = box.image.value
    box.head_slider.value = 2
    assert box.state.head == 2
    np.testing.assert_allclose(box.state.weights, w[2].numpy(), rtol=1e-6)
    assert box.image.value != png and "head 2 of 4" in box.readout.value
    top = tokens[int(w[2, 0].argmax())]
    assert f"top key: {top}" in box.readout.value
    with pytest.raises(ValueError, match="keys has 2 labels"):
        head_explorer(w, keys=["a", "b"])


# ------------------------------------------------------------------ scaling explorer


def _same_state(a, b):
    assert (a.d_k, a.scale, a.seq_k) == (b.d_k, b.scale, b.seq_k)
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.curve_entropy, b.curve_entropy)
    assert a.entropy == b.entropy and a.curve_at_scale == b.curve_at_scale


def test_explorer_state_is_pure_and_correct():
    a = explorer_state(256, 0.1, seq_k=12, n_rows=50, seed=3)
    _same_state(a, explorer_state(256, 0.1, seq_k=12, n_rows=50, seed=3))
    assert a.raw.shape == (12,) and a.weights.shape == (12,)
    np.testing.assert_allclose(a.weights, attnlib.softmax(0.1 * a.raw), rtol=1e-12)
    probs = torch.tensor(a.weights)
    assert a.entropy == pytest.approx(torch.distributions.Categorical(probs=probs).entropy().item())
    assert a.max_weight == pytest.approx(a.weights.max())
    jac = torch.autograd.functional.jacobian(
        lambda s: torch.softmax(s, -1), torch.tensor(0.1 * a.raw)
    )
    assert a.jacobian_norm == pytest.approx(float(jac.norm()), rel=1e-10)
    # the curve is the mean entropy at each scale; at the state's scale it must agree
    near = np.argmin(np.abs(np.log(a.curve_scales / 0.1)))
    b = explorer_state(256, float(a.curve_scales[near]), seq_k=12, n_rows=50, seed=3)
    assert b.curve_at_scale == pytest.approx(a.curve_entropy[near], rel=1e-12)


def test_explorer_state_limits():
    uniform = explorer_state(64, 0.0)
    np.testing.assert_allclose(uniform.weights, 1 / 16)
    assert uniform.entropy == pytest.approx(math.log(16))
    sharp = explorer_state(1024, 1.0)
    assert sharp.max_weight > 0.99 and sharp.jacobian_norm < 0.01
    # the same picture at every width with the standard scale (same draws per d_k)
    s64, s1024 = explorer_state(64, 1 / 8), explorer_state(1024, 1 / 32)
    assert abs(s64.curve_at_scale - s1024.curve_at_scale) < 0.15
    with pytest.raises(ValueError, match="d_k"):
        explorer_state(0, 0.1)
    with pytest.raises(ValueError, match="scale"):
        explorer_state(64, float("nan"))


def test_render_png_leaves_pyplot_alone():
    before = plt.get_fignums()
    png = render_png(explorer_state(16, 0.25))
    assert png.startswith(PNG_MAGIC) and len(png) > 5000
    assert plt.get_fignums() == before


def test_every_explorer_draws_without_pyplot():
    before = plt.get_fignums()
    boxes = [query_explorer(), mask_explorer(), head_explorer(_mha_weights()), scaling_explorer()]
    assert all(bytes(b.image.value).startswith(PNG_MAGIC) for b in boxes)
    assert plt.get_fignums() == before


def test_explorer_shows_what_explorer_state_computes():
    box = scaling_explorer(d_k=64)
    assert box.d_k_slider.value == 64
    assert box.scale_slider.value == pytest.approx(1 / 8)
    _same_state(box.state, explorer_state(64, box.scale_slider.value))
    first_png = bytes(box.image.value)
    assert first_png.startswith(PNG_MAGIC)
    assert f"entropy {box.state.entropy:.2f}" in box.readout.value

    box.d_k_slider.value = 1024  # what dragging the slider does
    _same_state(box.state, explorer_state(1024, box.scale_slider.value))
    assert box.state.curve_at_scale < 1.5  # the old scale is far too large for d_k = 1024
    assert bytes(box.image.value) != first_png
    assert "d_k = 1024" in box.readout.value

    box.tie_toggle.value = True  # scale = 1/√d_k
    assert box.scale_slider.value == pytest.approx(1 / 32, rel=0.06)  # slider step 0.05 in log10
    box.tie_toggle.value = False
    _same_state(box.state, explorer_state(1024, box.scale_slider.value))
    assert box.state.curve_at_scale > 2.0

    box.scale_slider.value = 1.0
    assert box.state.max_weight > 0.99


def test_explorer_rejects_unknown_width():
    with pytest.raises(ValueError, match="d_k must be one of"):
        scaling_explorer(d_k=100)
    assert 64 in D_K_CHOICES and 1024 in D_K_CHOICES
