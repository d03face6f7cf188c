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


# --- the rotate-half layout -------------------------------------------------------------------


def _rotate_half_oracle(x, positions, base=10000.0):
    """RoPE as GPT-NeoX / Hugging Face Llama write it: x·cos + rotate_half(x)·sin."""
    d_k = x.shape[-1]
    theta = base ** (-np.arange(0, d_k, 2) / d_k)  # (d_k/2,)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * theta  # (seq, d_k/2)
    cos, sin = np.concatenate([np.cos(ang)] * 2, -1), np.concatenate([np.sin(ang)] * 2, -1)
    x1, x2 = x[..., : d_k // 2], x[..., d_k // 2 :]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


def test_rotary_halves_matches_the_rotate_half_formula():
    from attnlib.positions import apply_rotary_halves

    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 12))
    pos = np.array([0, 3, 9, 2, 40])
    np.testing.assert_allclose(apply_rotary_halves(x, pos), _rotate_half_oracle(x, pos), atol=1e-12)
    t = apply_rotary_halves(torch.tensor(x, dtype=torch.float32), pos)
    assert t.dtype == torch.float32
    np.testing.assert_allclose(t.numpy(), _rotate_half_oracle(x, pos), atol=1e-5)


def test_the_two_layouts_differ_by_a_permutation_and_give_the_same_scores():
    from attnlib.positions import apply_rotary_halves, rotary_halves_permutation

    perm = rotary_halves_permutation(8)
    np.testing.assert_array_equal(perm, [0, 4, 1, 5, 2, 6, 3, 7])
    assert sorted(perm) == list(range(8))
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((6, 8)), rng.standard_normal((6, 8))
    pos = np.arange(6)
    np.testing.assert_allclose(
        apply_rotary_halves(q, pos)[:, perm], apply_rotary(q[:, perm], pos), atol=1e-12
    )
    # permuting q and k alike leaves q·k unchanged: the same scores from both layouts
    s_halves = apply_rotary_halves(q, pos) @ apply_rotary_halves(k, pos).T
    s_pairs = apply_rotary(q[:, perm], pos) @ apply_rotary(k[:, perm], pos).T
    np.testing.assert_allclose(s_halves, s_pairs, atol=1e-12)
    # ... but the layouts are not the same function of the same vector
    assert np.abs(apply_rotary_halves(q, pos) - apply_rotary(q, pos)).max() > 1e-3


def test_rotary_halves_errors():
    from attnlib.positions import apply_rotary_halves, rotary_halves_permutation

    with pytest.raises(ValueError, match="odd d_k=7"):
        apply_rotary_halves(np.zeros((2, 7)))
    with pytest.raises(ValueError, match="even"):
        rotary_halves_permutation(5)
    with pytest.raises(TypeError, match="d_k must be an int"):
        rotary_halves_permutation(4.0)


# --- ALiBi ----------------------------------------------------------------------------------


def test_alibi_slopes_follow_the_paper():
    from attnlib.positions import alibi_slopes

    np.testing.assert_allclose(alibi_slopes(8), [2.0 ** -(h + 1) for h in range(8)])
    np.testing.assert_allclose(alibi_slopes(4), [2.0 ** -(2 * (h + 1)) for h in range(4)])
    # not a power of two: the 4-head slopes, then slopes 0 and 2 of the 8-head sequence
    np.testing.assert_allclose(alibi_slopes(6), [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8])
    assert alibi_slopes(1).tolist() == [2.0**-8]
    with pytest.raises(ValueError, match="n_heads must be >= 1"):
        alibi_slopes(0)
    with pytest.raises(TypeError, match="n_heads must be an int"):
        alibi_slopes(True)


def test_alibi_bias_is_minus_slope_times_distance():
    from attnlib.positions import alibi_bias, alibi_slopes

    bias = alibi_bias(5, n_heads=4)
    assert bias.shape == (4, 5, 5)
    slopes = alibi_slopes(4)
    for h in range(4):
        for i in range(5):
            for j in range(5):
                assert bias[h, i, j] == pytest.approx(-slopes[h] * abs(i - j), abs=1e-15)
    # it depends on the distance only: shifting query and key together changes nothing
    assert np.allclose(np.diagonal(bias, 1, 1, 2), np.diagonal(bias, 1, 1, 2)[:, :1])
    assert not np.signbit(bias[:, 0, 0]).any()  # +0.0 on the diagonal, not -0.0


def test_alibi_bias_for_decoding_and_as_a_tensor():
    from attnlib.positions import alibi_bias

    full = alibi_bias(6, n_heads=2)
    last_two = alibi_bias(2, 6, n_heads=2)  # the last 2 of 6 positions ask
    np.testing.assert_array_equal(last_two, full[:, 4:])
    t = alibi_bias(3, n_heads=2, like=torch.zeros(1, dtype=torch.float32))
    assert t.dtype == torch.float32 and t.shape == (2, 3, 3)
    with pytest.raises(ValueError, match="seq_k=2 < seq_q=3"):
        alibi_bias(3, 2, n_heads=2)
    with pytest.raises(TypeError, match="seq_q must be an int"):
        alibi_bias(2.0, n_heads=2)


def test_alibi_bias_through_attend_favours_near_keys_in_steep_heads():
    from attnlib.positions import alibi_bias

    q = np.zeros((8, 1, 4))  # equal content scores: only the bias speaks
    k = np.zeros((8, 12, 4))
    bias = alibi_bias(1, 12, n_heads=8)  # (n_heads, 1, seq_k)
    s = q @ np.swapaxes(k, -1, -2) + bias
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    near = w[:, 0, -1]  # weight on the query's own position
    assert np.all(np.diff(near) < 0)  # steeper slope (head 0) -> more weight on itself
