"""Lesson 04's class demo, driven through the scaling explorer's widgets.

The lecturer notes of lesson 04 script it: start at d_k = 64 with the standard scale, tie
the scale to 1/√d_k with the button and drag d_k from 4 to 1024 (the weights barely change);
untie it and drag again (the weights collapse onto one key by d_k = 1024, entropy near 0);
then drag the scale down to 0.001 (uniform weights). Setting a widget's ``value`` from code
is what the browser does when it is dragged or pressed.
"""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest

from attnlib.explorers import explorer_state, scaling_explorer
from attnlib.explorers.scale import D_K_CHOICES


def _same(box, d_k, scale):
    want = explorer_state(d_k, scale)
    assert box.state.d_k == d_k
    assert box.state.scale == pytest.approx(scale, rel=1e-12)
    np.testing.assert_allclose(box.state.weights, want.weights, rtol=1e-12)
    assert f"d_k = {d_k}," in box.readout.value


def test_the_scripted_demo_tie_drag_untie_drag_then_scale_down():
    box = scaling_explorer(d_k=64)
    assert box.tie_toggle.value is False  # starts untied, at the standard scale
    assert box.scale_slider.value == pytest.approx(1 / 8)
    assert not box.scale_slider.disabled

    # tie: the scale is 1/√d_k and the slider is locked
    box.tie_toggle.value = True
    assert box.scale_slider.disabled
    entropies = {}
    for d_k in D_K_CHOICES[::-1] + D_K_CHOICES:  # drag 1024 → 4 → 1024
        box.d_k_slider.value = d_k
        assert box.scale_slider.value == pytest.approx(1 / math.sqrt(d_k), rel=1e-12)
        _same(box, d_k, 1 / math.sqrt(d_k))
        entropies[d_k] = box.state.curve_at_scale
    # the weights barely change with d_k while tied
    assert max(entropies.values()) - min(entropies.values()) < 0.3
    assert min(entropies.values()) > 2.0

    # untie at d_k = 4 (scale 1/2): the slider is free, moving d_k leaves the scale alone
    box.d_k_slider.value = 4
    box.tie_toggle.value = False
    assert not box.scale_slider.disabled
    for d_k in D_K_CHOICES:
        box.d_k_slider.value = d_k
        assert box.scale_slider.value == pytest.approx(0.5, rel=1e-12)
        _same(box, d_k, 0.5)
    # ...so by d_k = 1024 the weights collapse onto one key (mean entropy near 0)
    assert box.state.max_weight > 0.95 and box.state.curve_at_scale < 0.3

    # then the scale down to 0.001: uniform weights
    box.scale_slider.value = 1e-3
    _same(box, 1024, 1e-3)
    assert box.state.entropy == pytest.approx(math.log(box.state.seq_k), abs=0.02)


def test_tying_again_snaps_the_scale_back_and_follows_d_k():
    box = scaling_explorer(d_k=16, scale=2.0)
    box.d_k_slider.value = 256
    assert box.scale_slider.value == pytest.approx(2.0)
    box.tie_toggle.value = True
    assert box.scale_slider.value == pytest.approx(1 / 16)
    box.d_k_slider.value = 32
    assert box.scale_slider.value == pytest.approx(1 / math.sqrt(32))
    _same(box, 32, 1 / math.sqrt(32))


def test_starting_tied():
    box = scaling_explorer(d_k=256, scale=3.0, tied=True)
    assert box.tie_toggle.value is True and box.scale_slider.disabled
    assert box.scale_slider.value == pytest.approx(1 / 16)  # tied wins over scale=
    box.d_k_slider.value = 4
    assert box.scale_slider.value == pytest.approx(0.5)


def test_the_still_is_the_first_state_whatever_the_toggle_does():
    from IPython.core.formatters import DisplayFormatter

    box = scaling_explorer(d_k=64)
    first = bytes(box.image.value)
    still = box.still_png()
    box.tie_toggle.value = True
    box.d_k_slider.value = 1024
    box.tie_toggle.value = False
    box.d_k_slider.value = 4
    assert bytes(box.image.value) != first  # the live figure moved...
    data, _ = DisplayFormatter().format(box)
    assert base64.b64decode(data["image/png"]) == still  # ...the still did not
    assert box.still_png() == still


def test_moving_d_k_while_tied_draws_the_new_setting_once(monkeypatch):
    import attnlib.explorers.scale as scale_mod

    drawn = []
    real = scale_mod.render_png

    def counting(state):
        drawn.append((state.d_k, state.scale))
        return real(state)

    monkeypatch.setattr(scale_mod, "render_png", counting)
    box = scale_mod.scaling_explorer(d_k=64, tied=True)
    drawn.clear()
    box.d_k_slider.value = 1024
    # the figure is never drawn for d_k = 1024 at the old scale, and drawn once at the new
    assert drawn == [(1024, pytest.approx(1 / 32))]
