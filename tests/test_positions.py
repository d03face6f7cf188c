"""Sinusoidal positions and rotary embeddings (lesson 12).

Oracles: the formula written element by element, rotation as multiplication of complex
numbers, and the relative-offset property checked over random shifts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attnlib
from attnlib.positions import apply_rotary, rotary_angles, sinusoidal_positions


def test_sinusoidal_matches_the_formula_element_by_element():
    P = sinusoidal_positions(7, 6)
    for pos in range(7):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert P[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-15)
            assert P[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-15)
    np.testing.assert_array_equal(P[0], [0, 1, 0, 1, 0, 1])


def test_sinusoidal_torch_like_and_errors():
    t = sinusoidal_positions(4, 8, like=torch.zeros(1, dtype=torch.float32))
    assert t.dtype == torch.float32 and t.shape == (4, 8)
    np.testing.assert_allclose(t.numpy(), sinusoidal_positions(4, 8), rtol=1e-6)
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoidal_positions(4, 5)


def _complex_oracle(x, positions, base=10000.0):
    d_k = x.shape[-1]
    theta = base ** (-np.arange(0, d_k, 2) / d_k)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * np.asarray(positions)[:, None] * theta)
    return np.stack([z.real, z.imag], -1).reshape(x.shape)


def test_rotary_equals_complex_multiplication():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 8))
    pos = np.array([3, 0, 17, 4, 100])
    np.testing.assert_allclose(apply_rotary(x, pos), _complex_oracle(x, pos), atol=1e-12)
    np.testing.assert_allclose(apply_rotary(x), _complex_oracle(x, np.arange(5)), atol=1e-12)


def test_rotary_torch_matches_numpy_and_keeps_dtype_and_norms():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6, 16))
    t = apply_rotary(torch.tensor(x, dtype=torch.float32))
    assert t.dtype == torch.float32
    np.testing.assert_allclose(t.numpy(), apply_rotary(x), atol=1e-5)
    np.testing.assert_allclose(
        np.linalg.norm(apply_rotary(x), axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12
    )
    assert not np.allclose(apply_rotary(x)[:, 1:], x[:, 1:])  # it does rotate


@given(
    m=st.integers(0, 500),
    n=st.integers(0, 500),
    shift=st.integers(-200, 2000),
    seed=st.integers(0, 2**16),
)
def test_rotary_scores_depend_only_on_the_offset(m, n, shift, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((1, 8)), rng.standard_normal((1, 8))
    if m + shift < 0 or n + shift < 0:
        shift = 0

    def score(a, b):
        return float(apply_rotary(q, [a])[0] @ apply_rotary(k, [b])[0])

    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-9)


def test_rotary_scores_do_change_with_the_offset():
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((1, 8)), rng.standard_normal((1, 8))
    s = [float(apply_rotary(q, [0])[0] @ apply_rotary(k, [d])[0]) for d in range(6)]
    assert np.ptp(s) > 0.1


def test_rotary_angles_and_errors():
    ang = rotary_angles([0, 1, 2], 4)
    np.testing.assert_allclose(ang, [[0, 0], [1, 0.01], [2, 0.02]])
    with pytest.raises(ValueError, match="odd d_k=5"):
        apply_rotary(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="2 positions"):
        apply_rotary(np.zeros((3, 4)), [0, 1])


def test_attention_without_positions_is_permutation_equivariant():
    """The fact that motivates lesson 12, checked on attend and its torch oracle."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 8))
    Wq, Wk, Wv = (rng.standard_normal((8, 8)) for _ in range(3))
    perm = rng.permutation(6)
    out, _ = attnlib.attend(x @ Wq, x @ Wk, x @ Wv)
    out_p, _ = attnlib.attend(x[perm] @ Wq, x[perm] @ Wk, x[perm] @ Wv)
    np.testing.assert_allclose(out_p, out[perm], atol=1e-12)
    # with rotary positions (position = index in the new order) the outputs change
    q, k = apply_rotary(x @ Wq), apply_rotary(x @ Wk)
    q_p, k_p = apply_rotary(x[perm] @ Wq), apply_rotary(x[perm] @ Wk)
    out_r, _ = attnlib.attend(q, k, x @ Wv)
    out_rp, _ = attnlib.attend(q_p, k_p, x[perm] @ Wv)
    assert np.abs(out_rp - out_r[perm]).max() > 1e-3
