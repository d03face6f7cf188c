"""Diagnosis by inference for lessons 10–12, tried on submissions written the way learners
write them: decoding with the mask's diagonal in the wrong place, the mask inverted, the
cache appended after attending (or stored and never read) or the scores scaled by the wrong
factor; an online softmax that takes the block's exponentials against a stale max (or one
max for every row), rescales the block's own terms too, divides the numerator at every step
or sums the block without keeping the summed axis; rotary embeddings with wrong
frequencies, an in-place rotation, sines of one sign or only the queries turned — alone and
two at a time.

Each must be named with exactly its ids (two mistakes: two ids, each with a measured
line), and fail the hidden check too. The first failure shows what was measured and a
question, never the cause; the second names it (tests/test_feedback_steps.py holds the
steps for every exercise). tests/test_checks_inference.py holds the idioms shared with
other lessons; the registry tests hold every registered variant and pair.
"""

from __future__ import annotations

import numpy as np
import pytest
from named import assert_correct, assert_named

from attnlib import checks
from attnlib.checks import get_exercise
from attnlib.masks import causal_mask

# ----------------------------------------------------------------------------------------
# Helpers a learner would have written earlier
# ----------------------------------------------------------------------------------------


def _softmax(s):
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    t = e.sum(axis=-1, keepdims=True)
    return e / np.where(t > 0, t, 1.0)


def _attend(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = _softmax(s)
    return w @ v, w


def _grow(k_new, v_new, k_cache, v_cache, *, new_first=False):
    ks, vs = (
        ([k_new, k_cache], [v_new, v_cache]) if new_first else ([k_cache, k_new], [v_cache, v_new])
    )
    return np.concatenate(ks, axis=-2), np.concatenate(vs, axis=-2)


# ----------------------------------------------------------------------------------------
# decode_step: where the new queries sit
# ----------------------------------------------------------------------------------------


def decode_strict_less_than(q_new, k_new, v_new, k_cache, v_cache):
    k, v = _grow(k_new, v_new, k_cache, v_cache)
    seq_past, seq_new = k_cache.shape[-2], q_new.shape[-2]
    mask = np.arange(k.shape[-2])[None, :] < seq_past + np.arange(seq_new)[:, None]  # `<`
    return _attend(q_new, k, v, mask)[0], k, v


def decode_tril_one_too_far(q_new, k_new, v_new, k_cache, v_cache):
    k, v = _grow(k_new, v_new, k_cache, v_cache)
    seq_past, seq_new = k_cache.shape[-2], q_new.shape[-2]
    mask = np.tril(np.ones((seq_new, k.shape[-2]), dtype=bool), k=seq_past + 1)
    return _attend(q_new, k, v, mask)[0], k, v


def decode_offset_by_seq_new(q_new, k_new, v_new, k_cache, v_cache):
    k, v = _grow(k_new, v_new, k_cache, v_cache)
    seq_new = q_new.shape[-2]
    mask = np.tril(np.ones((seq_new, k.shape[-2]), dtype=bool), k=seq_new)  # not seq_past
    return _attend(q_new, k, v, mask)[0], k, v


def decode_first_rows_of_full_mask(q_new, k_new, v_new, k_cache, v_cache):
    k, v = _grow(k_new, v_new, k_cache, v_cache)
    mask = causal_mask(k.shape[-2])[: q_new.shape[-2]]  # the first rows, not the last
    return _attend(q_new, k, v, mask)[0], k, v


def decode_strict_and_old_cache(q_new, k_new, v_new, k_cache, v_cache):
    out, _, _ = decode_strict_less_than(q_new, k_new, v_new, k_cache, v_cache)
    return out, k_cache, v_cache


def decode_one_too_far_axis_0(q_new, k_new, v_new, k_cache, v_cache):
    k, v = np.concatenate([k_cache, k_new]), np.concatenate([v_cache, v_new])
    seq_past, seq_new = k_cache.shape[-2], q_new.shape[-2]
    mask = np.tril(np.ones((seq_new, k.shape[-2]), dtype=bool), k=seq_past + 1)
    return _attend(q_new, k, v, mask)[0], k, v


def _decode_scaled(scale_of):
    def decode_step(q_new, k_new, v_new, k_cache, v_cache):
        k, v = _grow(k_new, v_new, k_cache, v_cache)
        mask = causal_mask(q_new.shape[-2], k.shape[-2], align="bottom_right")
        s = q_new @ np.swapaxes(k, -1, -2) * scale_of(q_new, v)
        w = _softmax(np.where(mask, s, -np.inf))
        return w @ v, k, v

    return decode_step


decode_unscaled = _decode_scaled(lambda q, v: 1.0)
decode_scaled_by_sqrt_d_v = _decode_scaled(lambda q, v: 1 / np.sqrt(v.shape[-1]))


def decode_append_after_attending(q_new, k_new, v_new, k_cache, v_cache):
    out = np.zeros((*q_new.shape[:-1], v_new.shape[-1]))
    if k_cache.shape[-2]:  # attend first, over what is cached so far ...
        out = _attend(q_new, k_cache, v_cache)[0]
    k, v = _grow(k_new, v_new, k_cache, v_cache)  # ... then store the new token
    return out, k, v


def decode_among_the_new_only(q_new, k_new, v_new, k_cache, v_cache):
    k, v = _grow(k_new, v_new, k_cache, v_cache)  # stored ...
    seq_new = q_new.shape[-2]
    return _attend(q_new, k_new, v_new, causal_mask(seq_new))[0], k, v  # ... never read


def decode_triu_as_blocked(q_new, k_new, v_new, k_cache, v_cache):
    k, v = _grow(k_new, v_new, k_cache, v_cache)
    seq_past, seq_new = k_cache.shape[-2], q_new.shape[-2]
    blocked = np.triu(np.ones((seq_new, k.shape[-2]), dtype=bool), k=seq_past + 1)  # the future
    return _attend(q_new, k, v, blocked)[0], k, v  # ... passed where "may attend" belongs


def decode_unscaled_top_left(q_new, k_new, v_new, k_cache, v_cache):
    k, v = _grow(k_new, v_new, k_cache, v_cache)
    s = q_new @ np.swapaxes(k, -1, -2)
    w = _softmax(np.where(causal_mask(q_new.shape[-2], k.shape[-2]), s, -np.inf))
    return w @ v, k, v


# ----------------------------------------------------------------------------------------
# online_softmax_update: which max the exponentials use
# ----------------------------------------------------------------------------------------


def online_stale_max(m, l, acc, s, v):
    m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
    alpha = np.exp(m - m_new)
    p = np.exp(s - m)  # the old max
    return m_new, alpha * l + p.sum(axis=-1, keepdims=True), alpha * acc + p @ v


def online_update_max_last(m, l, acc, s, v):
    p = np.exp(s - m)  # everything against the old max, the max updated at the end
    l = l + p.sum(axis=-1, keepdims=True)
    acc = acc + p @ v
    return np.maximum(m, s.max(axis=-1, keepdims=True)), l, acc


def online_max_without_axis(m, l, acc, s, v):
    m_new = np.maximum(m, s.max())  # one max for the whole block
    safe = np.where(np.isfinite(m_new), m_new, 0.0)
    alpha, p = np.exp(m - safe), np.exp(s - safe)
    return m_new, alpha * l + p.sum(axis=-1, keepdims=True), alpha * acc + p @ v


def online_stale_max_upside_down(m, l, acc, s, v):
    m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
    alpha = np.exp(m_new - m)
    p = np.exp(s - m)
    return m_new, alpha * l + p.sum(axis=-1, keepdims=True), alpha * acc + p @ v


def online_alpha_on_everything(m, l, acc, s, v):
    m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
    safe = np.where(np.isfinite(m_new), m_new, 0.0)
    alpha, p = np.exp(m - safe), np.exp(s - safe)
    return m_new, alpha * (l + p.sum(axis=-1, keepdims=True)), alpha * (acc + p @ v)


def online_normalised_every_step(m, l, acc, s, v):
    m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
    safe = np.where(np.isfinite(m_new), m_new, 0.0)
    alpha, p = np.exp(m - safe), np.exp(s - safe)
    l_new = alpha * l + p.sum(axis=-1, keepdims=True)
    out = (alpha * acc + p @ v) / np.where(l_new > 0, l_new, 1.0)  # the output so far
    return m_new, l_new, out


def online_sum_without_keepdims(m, l, acc, s, v):
    m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
    safe = np.where(np.isfinite(m_new), m_new, 0.0)
    alpha, p = np.exp(m - safe), np.exp(s - safe)
    return m_new, alpha * l + p.sum(axis=-1), alpha * acc + p @ v  # (seq_q, 1) + (seq_q,)


def online_max_without_axis_sum_kept(m, l, acc, s, v):
    m_new = np.maximum(m, s.max())
    safe = np.where(np.isfinite(m_new), m_new, 0.0)
    alpha, p = np.exp(m - safe), np.exp(s - safe)
    return m_new, l + p.sum(axis=-1, keepdims=True), alpha * acc + p @ v


# ----------------------------------------------------------------------------------------
# rotary_attend: the frequencies and the rotation itself
# ----------------------------------------------------------------------------------------


def _rotation(theta_of, *, overwrite=False, sign=1.0, minus_both=False):
    def rotate(x, positions):
        theta = theta_of(x.shape[-1])  # (d_k/2,)
        angle = sign * np.asarray(positions)[:, None] * theta  # (seq, d_k/2)
        cos, sin = np.cos(angle), np.sin(angle)
        out = x.copy()
        if overwrite:  # in place: the first coordinate is gone when the second is made
            out[..., 0::2] = out[..., 0::2] * cos - out[..., 1::2] * sin
            out[..., 1::2] = out[..., 0::2] * sin + out[..., 1::2] * cos
        elif minus_both:  # "a rotation subtracts the sine"
            x0, x1 = x[..., 0::2], x[..., 1::2]
            out[..., 0::2] = x0 * cos - x1 * sin
            out[..., 1::2] = x1 * cos - x0 * sin
        else:
            x0, x1 = x[..., 0::2], x[..., 1::2]
            out[..., 0::2] = x0 * cos - x1 * sin
            out[..., 1::2] = x0 * sin + x1 * cos
        return out

    return rotate


def _right(d):
    return 10000.0 ** (-np.arange(0, d, 2) / d)


def _two_counted_twice(d):
    return 10000.0 ** (-2 * np.arange(0, d, 2) / d)


def _exponent_flipped(d):
    return 10000.0 ** (np.arange(0, d, 2) / d)


def _two_missing(d):
    return 1.0 / 10000.0 ** (np.arange(d // 2) / d)


def _rotary(rotate, *, rotate_values=False, keys=True):
    def rotary_attend(q, k, v, positions):
        v_used = rotate(v, positions) if rotate_values else v
        return _attend(rotate(q, positions), rotate(k, positions) if keys else k, v_used)

    return rotary_attend


rotary_2i_times_2 = _rotary(_rotation(_two_counted_twice))
rotary_exponent_flipped = _rotary(_rotation(_exponent_flipped))
rotary_i_not_2i = _rotary(_rotation(_two_missing))
rotary_overwrites = _rotary(_rotation(_right, overwrite=True))
rotary_overwrites_backwards = _rotary(_rotation(_right, overwrite=True, sign=-1.0))
rotary_2i_times_2_values = _rotary(_rotation(_two_counted_twice), rotate_values=True)
rotary_exponent_flipped_backwards = _rotary(_rotation(_exponent_flipped, sign=-1.0))
rotary_queries_only = _rotary(_rotation(_right), keys=False)
rotary_minus_both = _rotary(_rotation(_right, minus_both=True))
rotary_minus_both_values = _rotary(_rotation(_right, minus_both=True), rotate_values=True)
rotary_queries_only_backwards = _rotary(_rotation(_right, sign=-1.0), keys=False)


REALISTIC = [
    ("decode_step", decode_strict_less_than, ["mask-wrong-offset"]),
    ("decode_step", decode_tril_one_too_far, ["mask-wrong-offset"]),
    ("decode_step", decode_offset_by_seq_new, ["mask-wrong-offset"]),
    ("decode_step", decode_first_rows_of_full_mask, ["mask-blocks-past"]),
    ("decode_step", decode_strict_and_old_cache, ["cache-not-appended", "mask-wrong-offset"]),
    ("decode_step", decode_one_too_far_axis_0, ["cache-wrong-axis", "mask-wrong-offset"]),
    ("decode_step", decode_unscaled, ["decode-scale-wrong"]),
    ("decode_step", decode_scaled_by_sqrt_d_v, ["decode-scale-wrong"]),
    ("decode_step", decode_unscaled_top_left, ["mask-blocks-past", "decode-scale-wrong"]),
    ("decode_step", decode_append_after_attending, ["new-key-not-included"]),
    ("decode_step", decode_triu_as_blocked, ["decode-mask-inverted"]),
    ("decode_step", decode_among_the_new_only, ["cache-not-read"]),
    ("online_softmax_update", online_stale_max, ["stale-max"]),
    ("online_softmax_update", online_max_without_axis, ["max-over-whole-block"]),
    ("online_softmax_update", online_stale_max_upside_down, ["stale-max", "rescale-inverted"]),
    (
        "online_softmax_update",
        online_max_without_axis_sum_kept,
        ["sum-not-rescaled", "max-over-whole-block"],
    ),
    (
        "online_softmax_update",
        online_update_max_last,
        ["sum-not-rescaled", "acc-not-rescaled", "stale-max"],
    ),
    ("online_softmax_update", online_alpha_on_everything, ["block-terms-rescaled"]),
    ("online_softmax_update", online_normalised_every_step, ["acc-normalised"]),
    ("online_softmax_update", online_sum_without_keepdims, ["sum-keepdims-lost"]),
    ("rotary_attend", rotary_2i_times_2, ["wrong-frequencies"]),
    ("rotary_attend", rotary_exponent_flipped, ["wrong-frequencies"]),
    ("rotary_attend", rotary_i_not_2i, ["wrong-frequencies"]),
    ("rotary_attend", rotary_overwrites, ["rotation-overwrites-input"]),
    ("rotary_attend", rotary_overwrites_backwards, ["angle-sign", "rotation-overwrites-input"]),
    ("rotary_attend", rotary_2i_times_2_values, ["rotates-values", "wrong-frequencies"]),
    ("rotary_attend", rotary_exponent_flipped_backwards, ["angle-sign", "wrong-frequencies"]),
    ("rotary_attend", rotary_queries_only, ["only-queries-rotated"]),
    ("rotary_attend", rotary_minus_both, ["sines-same-sign"]),
    ("rotary_attend", rotary_minus_both_values, ["rotates-values", "sines-same-sign"]),
    (
        "rotary_attend",
        rotary_queries_only_backwards,
        ["angle-sign", "only-queries-rotated"],
    ),
]


def _message(name, fn) -> str:
    with pytest.raises(AssertionError) as err:
        checks.check(name, fn)
    return str(err.value)


def _first_and_second(name, fn) -> tuple[str, str]:
    """The first failure's message in a fresh kernel, then the second's (same mistake)."""
    checks.forget()
    try:
        return _message(name, fn), _message(name, fn)
    finally:
        checks.forget()


@pytest.mark.parametrize(
    ("name", "fn", "ids"),
    [pytest.param(n, f, i, id=f"{n}-{f.__name__}") for n, f, i in REALISTIC],
)
def test_a_realistic_mistake_is_named_with_all_its_ids(name, fn, ids):
    assert_named(name, fn, ids)
    first, second = _first_and_second(name, fn)
    for mid in ids:  # each mistake: measured and asked first, named the second time
        m = next(m for m in get_exercise(name).misconceptions if m.id == mid)
        assert m.question in first and m.explanation not in first and f"[{mid}]" not in first
        assert f"[{mid}]" in second and m.explanation in second


@pytest.mark.parametrize(
    ("part", "fn"),
    [
        ("decode_step_output", decode_strict_less_than),
        ("decode_step_output", decode_tril_one_too_far),
        ("decode_step_output", decode_triu_as_blocked),
        ("decode_step_output", decode_among_the_new_only),
        ("online_softmax_update_blocks", online_sum_without_keepdims),
        ("online_softmax_update_blocks", online_normalised_every_step),
        ("online_softmax_update_masked_rows", online_alpha_on_everything),
        ("rotary_attend_weights", rotary_minus_both),
        ("rotary_attend_weights", rotary_queries_only),
        ("online_softmax_update_blocks", online_stale_max),
        ("online_softmax_update_blocks", online_max_without_axis),
        ("online_softmax_update_masked_rows", online_max_without_axis),
        ("rotary_attend_weights", rotary_2i_times_2),
        ("rotary_attend_weights", rotary_overwrites),
    ],
)
def test_the_graded_part_fails_and_names_the_mistake(part, fn):
    report = checks.run(part, fn)
    assert not report.ok and report.misconceptions
    with pytest.raises(AssertionError, match="hidden tests failed"):
        checks.check_hidden(part, fn)


def test_a_decode_offset_message_gives_the_measured_key_sets():
    first, _ = _first_and_second("decode_step", decode_strict_less_than)
    assert "sees keys 0..i + 3" in first and "no new query sees its own key" in first
    assert "seq_past + i" not in first  # where the new query stands is the learner's to derive


def test_the_stale_max_message_gives_the_measured_factor():
    first, _ = _first_and_second("online_softmax_update", online_stale_max)
    assert "times the block's exponentials taken against the new max: more than 1" in first


@pytest.mark.parametrize(
    ("fn", "turns"),
    [
        (rotary_2i_times_2, "[1.0, 0.01, 0.0001, 1e-06]"),
        (rotary_exponent_flipped, "[1.0, 10.0, 100.0, 1000.0]"),
        (rotary_i_not_2i, "[1.0, 0.3162, 0.1, 0.03162]"),
    ],
)
def test_the_frequency_message_measures_how_fast_each_plane_turns(fn, turns):
    first, second = _first_and_second("rotary_attend", fn)
    assert f"planes 0 to 3 turn by {turns} radians per position" in first
    assert "counted twice" not in first and "counted twice" in second


def test_the_first_failure_for_the_wrong_sign_does_not_tell_the_fix():
    # Exercise 12.1: the mechanism and a question first; which signs to write is not shown
    backwards = _rotary(_rotation(_right, sign=-1.0))
    first, second = _first_and_second("rotary_attend_weights", backwards)
    assert "mirrored" in first and "unit vector (1, 0)" in first
    for fix in ("cos", "sin", "turn clockwise", "turns clockwise"):
        assert fix not in first, fix
    assert "[angle-sign]" in second and "The planes turn clockwise" in second


# ----------------------------------------------------------------------------------------
# Correct functions written in other ways pass, and the inference measures nothing
# ----------------------------------------------------------------------------------------


def decode_with_tril(q_new, k_new, v_new, k_cache, v_cache):
    k, v = _grow(k_new, v_new, k_cache, v_cache)
    mask = np.tril(np.ones((q_new.shape[-2], k.shape[-2]), dtype=bool), k=k_cache.shape[-2])
    return _attend(q_new, k, v, mask)[0], k, v


def online_with_where_guard(m, l, acc, s, v):
    m_new = np.maximum(m, np.max(s, axis=-1, keepdims=True))
    with np.errstate(invalid="ignore"):
        alpha = np.where(np.isneginf(m_new), 0.0, np.exp(m - m_new))
        p = np.where(np.isneginf(m_new), 0.0, np.exp(s - m_new))
    return m_new, alpha * l + p.sum(-1, keepdims=True), alpha * acc + np.matmul(p, v)


rotary_right = _rotary(_rotation(_right))


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("decode_step", decode_with_tril),
        ("online_softmax_update", online_with_where_guard),
        ("rotary_attend", rotary_right),
    ],
)
def test_a_correct_function_passes_with_no_diagnosis(name, fn):
    assert_correct(name, fn)
