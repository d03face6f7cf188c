"""The checks of lessons 10–12: decode_step, online_softmax_update, rotary_attend.

References are compared with independent oracles (torch's scaled_dot_product_attention,
attention over all blocks at once, rotation as complex multiplication). That every known
wrong variant is diagnosed as exactly its own misconception, that check() names it and
that check_hidden() fails it, is tested for every exercise in tests/test_checks_registry.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from attnlib import checks
from attnlib.checks import ex_blockwise as exb
from attnlib.checks import ex_decoding as exd
from attnlib.checks import ex_positions as exr
from attnlib.checks import get_exercise

EXERCISES = ("decode_step", "online_softmax_update", "rotary_attend")

# Correct implementations written independently of the attnlib reference functions.
INDEPENDENT = {
    "decode_step": exd._decode_variant(),
    "online_softmax_update": exb._online_variant(),
    "rotary_attend": exr._rotary_variant(),
}


def test_decode_step_reference_matches_sdpa_on_the_whole_sequence():
    for case in get_exercise("decode_step").cases():
        q_new, k_new, v_new, k_cache, v_cache = (torch.as_tensor(a) for a in case.args)
        out, k_all, v_all = exd._decode_reference(*case.args)
        past, new = k_cache.shape[-2], q_new.shape[-2]
        # oracle: queries for every position, causal SDPA over the concatenation; keep the
        # rows of the new positions
        k_full = torch.cat([k_cache, k_new], -2)
        v_full = torch.cat([v_cache, v_new], -2)
        q_full = torch.cat(
            [torch.zeros(*q_new.shape[:-2], past, q_new.shape[-1]).double(), q_new], -2
        )
        want = F.scaled_dot_product_attention(q_full, k_full, v_full, is_causal=True)[..., past:, :]
        assert want.shape[-2] == new
        np.testing.assert_allclose(out, want.numpy(), rtol=1e-10, atol=1e-12, err_msg=case.label)
        np.testing.assert_array_equal(k_all, k_full.numpy())
        np.testing.assert_array_equal(v_all, v_full.numpy())


def test_online_update_folded_over_blocks_equals_attention_over_all_keys():
    rng = np.random.default_rng(0)
    q, k, v = (
        rng.standard_normal((5, 8)),
        rng.standard_normal((23, 8)),
        rng.standard_normal((23, 3)),
    )
    s = q @ k.T  # (seq_q, seq_k), unscaled
    m, l, acc = np.full((5, 1), -np.inf), np.zeros((5, 1)), np.zeros((5, 3))
    ref = get_exercise("online_softmax_update").reference
    for j in range(0, 23, 4):
        m, l, acc = ref(m, l, acc, s[:, j : j + 4], v[j : j + 4])
    want = F.scaled_dot_product_attention(*(torch.as_tensor(a) for a in (q, k, v)), scale=1.0)
    np.testing.assert_allclose(acc / l, want.numpy(), rtol=1e-12)
    np.testing.assert_allclose(m[:, 0], s.max(axis=1))


def test_rotary_reference_matches_complex_rotation_oracle():
    for case in get_exercise("rotary_attend").cases():
        q, k, v, pos = case.args
        d_k = q.shape[-1]
        theta = 10000.0 ** (-np.arange(0, d_k, 2) / d_k)
        phase = np.exp(1j * pos[:, None] * theta)  # (seq, d_k/2)

        def rot(x, phase=phase):
            z = (x[..., 0::2] + 1j * x[..., 1::2]) * phase
            return np.stack([z.real, z.imag], -1).reshape(x.shape)

        want = F.scaled_dot_product_attention(*(torch.as_tensor(a) for a in (rot(q), rot(k), v)))
        out, w = exr._rotary_reference(q, k, v, pos)
        np.testing.assert_allclose(out, want.numpy(), rtol=1e-10, atol=1e-12, err_msg=case.label)
        np.testing.assert_allclose(w.sum(-1), 1.0)


def test_cases_are_non_square_and_cover_the_edge_cases():
    labels = [c.label for c in get_exercise("decode_step").cases()]
    assert any("empty cache" in lab for lab in labels)
    assert any(c.args[0].shape[-2] > 1 for c in get_exercise("decode_step").cases())
    online = get_exercise("online_softmax_update").cases()
    assert any(np.isneginf(c.args[0]).all() for c in online), "a first-block case"
    assert any(np.isneginf(c.args[3]).any() for c in online), "a masked case"
    for c in get_exercise("rotary_attend").cases():
        q, k, v, pos = c.args
        assert q.shape[-1] >= 6, "d_k >= 6 so that pairing and frequencies matter"
        assert len(pos) == q.shape[-2]
    assert any(c.args[2].shape[-1] % 2 == 0 for c in get_exercise("rotary_attend").cases())


@pytest.mark.parametrize("name", EXERCISES)
def test_an_independent_correct_solution_passes_with_one_line(name, capsys):
    checks.check(name, INDEPENDENT[name])
    n_cases = len(get_exercise(name).cases())
    assert capsys.readouterr().out == f"✔ {name}: correct on all {n_cases} cases\n"


def test_calling_the_course_reference_is_refused():
    from attnlib.blockwise import online_softmax_update
    from attnlib.positions import apply_rotary

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("online_softmax_update", lambda *a: online_softmax_update(*a))

    def lazy_rotary(q, k, v, positions):
        return exd._attend(apply_rotary(q, positions), apply_rotary(k, positions), v)

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("rotary_attend", lazy_rotary)


def test_decode_step_off_by_one_position_is_caught_without_a_diagnosis():
    def shifted(q_new, k_new, v_new, k_cache, v_cache):
        out, k_all, v_all = exd._decode_reference(q_new, k_new, v_new, k_cache, v_cache)
        return out[..., ::-1, :].copy(), k_all, v_all  # new queries in the wrong order

    report = checks.run("decode_step", shifted)
    assert not report.ok
    assert report.misconceptions == []


@pytest.mark.parametrize("name", EXERCISES)
def test_hidden_cases_exist_and_an_independent_solution_passes_them_silently(name, capsys):
    ex = get_exercise(name)
    assert len(ex.cases(hidden=True)) > len(ex.cases())
    assert checks.run(name, INDEPENDENT[name], hidden=True).ok
    checks.check_hidden(name, INDEPENDENT[name])
    assert capsys.readouterr().out == ""


def test_online_update_keeps_a_row_with_nothing_seen_yet_empty():
    """Exercise 11.1's edge case: a row whose keys so far are all masked stays empty, no NaN."""
    cases = [c for c in get_exercise("online_softmax_update").cases() if "fully masked" in c.label]
    assert len(cases) == 1
    m, l, acc, s_block, v_block = cases[0].args
    row = np.isneginf(s_block).all(axis=-1)
    assert row.any() and np.isneginf(m[row]).all()
    m_new, l_new, acc_new = get_exercise("online_softmax_update").reference(*cases[0].args)
    assert np.isneginf(m_new[row]).all()
    assert (l_new[row] == 0).all() and (acc_new[row] == 0).all()
    assert np.isfinite(l_new).all() and np.isfinite(acc_new).all()
    # the next block (keys now visible) proceeds normally from the empty state
    s_next = np.random.default_rng(3).standard_normal(s_block.shape)
    _, l2, acc2 = get_exercise("online_softmax_update").reference(
        m_new, l_new, acc_new, s_next, v_block
    )
    w = np.exp(s_next[row] - s_next[row].max(-1, keepdims=True))
    np.testing.assert_allclose(acc2[row] / l2[row], (w / w.sum(-1, keepdims=True)) @ v_block)
    assert checks.diagnose("online_softmax_update", exb._online_variant(guard_empty=False)) == [
        "masked-row-nan"
    ]
