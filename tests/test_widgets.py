"""The scaling explorer, driven by setting widget values from code (no browser).

``explorer_state`` is checked against independent computations (attnlib.softmax,
torch.distributions for the entropy, autograd for the Jacobian); the widget is checked
to show exactly what ``explorer_state`` computes for its current slider values.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import attnlib
from attnlib.explorers.scale import D_K_CHOICES, explorer_state, render_png, scaling_explorer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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

    box.standard_button.click()  # scale = 1/√d_k
    assert box.scale_slider.value == pytest.approx(1 / 32, rel=0.06)  # slider step 0.05 in log10
    _same_state(box.state, explorer_state(1024, box.scale_slider.value))
    assert box.state.curve_at_scale > 2.0

    box.scale_slider.value = 1.0
    assert box.state.max_weight > 0.99


def test_explorer_rejects_unknown_width():
    with pytest.raises(ValueError, match="d_k must be one of"):
        scaling_explorer(d_k=100)
    assert 64 in D_K_CHOICES and 1024 in D_K_CHOICES
