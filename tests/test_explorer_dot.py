"""The dot-product explorer of lesson 01, driven by setting the slider from code."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlib.explorers import dot_explorer, dot_state
from attnlib.explorers.dot import render_dot

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KEYS = np.array([[2.0, 1.0], [-1.0, 2.0], [-2.0, -1.0]])  # aligned, orthogonal, opposite


def test_dot_state_matches_torch_and_the_geometry():
    s = dot_state(26.565051177077994, KEYS, length=math.sqrt(20), labels=["a", "o", "p"])
    q = torch.tensor(s.query)
    np.testing.assert_allclose(s.scores, (torch.tensor(KEYS) @ q).numpy(), rtol=1e-12)
    np.testing.assert_allclose(s.query, [4.0, 2.0], atol=1e-12)  # the direction of key 0
    np.testing.assert_allclose(s.scores, [10.0, 0.0, -10.0], atol=1e-9)
    np.testing.assert_allclose(s.cosines, [1.0, 0.0, -1.0], atol=1e-12)
    assert "best key a" in s.summary()


def test_dot_state_validates():
    with pytest.raises(ValueError, match="shape"):
        dot_state(0.0, np.ones((3, 3)))
    with pytest.raises(ValueError, match="labels"):
        dot_state(0.0, KEYS, labels=["a"])
    with pytest.raises(ValueError, match="length"):
        dot_state(0.0, KEYS, length=0.0)
    with pytest.raises(TypeError, match="angle"):
        dot_state("0", KEYS)


def test_dot_explorer_follows_its_slider():
    box = dot_explorer(KEYS, angle=0.0, length=2.0)
    assert bytes(box.image.value).startswith(PNG_MAGIC)
    assert box.still_png().startswith(PNG_MAGIC)
    first = bytes(box.image.value)
    box.angle_slider.value = 90.0
    np.testing.assert_allclose(box.state.scores, dot_state(90.0, KEYS, length=2.0).scores)
    assert bytes(box.image.value) != first and "90°" in box.readout.value
    assert render_dot(box.state).startswith(PNG_MAGIC)
    bundle = box._repr_mimebundle_()
    assert "image/png" in bundle and "VBox" not in bundle["text/plain"]
