"""Lesson 17's Exercise 17.3, ``quantize_dequantize``: the reference against the library and
a loop, the cases away from rounding ties, correct idioms passing, learners' mistakes named.

* The reference equals ``dequantize(quantize(x, bits, axis))`` of attnlib.quant_cache on
  every case it accepts (an even last dim at 4 bits) and a float64 loop over the groups on
  every case, visible and hidden.
* Every case's number lies at least 0.1 of a step from a half-way point of its group's grid
  (computed in float64 on the float32 numbers): no rounding tie decides a case, so the idioms
  below (methods chained, multiplied by the inverse step, computed in float64 and cast
  back, in numpy, transposed to the last axis, range · levels / (max − min), other guards
  for a constant group) all pass, with no diagnosis and nothing measured by the inference.
* Mistakes written the way learners write them are named with exactly their ids; the
  inference tells every combination of modelled mistakes with at most two ids apart.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from named import assert_correct, assert_named, grader_check_hidden

from attnlib import checks
from attnlib.checks import ex_quant, get_exercise
from attnlib.checks._core import Learner
from attnlib.quant_cache import dequantize, quantize

NAME = "quantize_dequantize"

# ----------------------------------------------------------------------------------------
# The reference and the cases
# ----------------------------------------------------------------------------------------


def _loop(x, bits, axis):
    """Group by group in float64: min, max, codes rounded to the nearest, read back."""
    a = np.moveaxis(x.double().numpy(), axis, -1)
    out = np.empty_like(a)
    levels = 2**bits - 1
    for idx in np.ndindex(*a.shape[:-1]):
        g = a[idx]
        lo, hi = g.min(), g.max()
        if hi == lo:
            out[idx] = lo
            continue
        scale = (hi - lo) / levels
        out[idx] = [lo + min(max(round((v - lo) / scale), 0), levels) * scale for v in g]
    return np.moveaxis(out, -1, axis)


def test_the_reference_is_the_library_and_a_loop_on_every_case():
    ex = get_exercise(NAME)
    with_library = 0
    for case in ex.cases(hidden=True):
        x, bits, axis = case.args
        got = ex.reference(x, bits, axis)
        assert got.shape == x.shape and got.dtype == x.dtype, case.label
        np.testing.assert_allclose(got.double(), _loop(x, bits, axis), rtol=0, atol=1e-5)
        if bits == 8 or x.shape[-1] % 2 == 0:
            assert torch.equal(got, dequantize(quantize(x, bits, axis))), case.label
            with_library += 1
    assert with_library >= len(ex.cases()) - 1


def _tie_distance(x, bits, axis):
    """The smallest distance, in steps, of a number from a half-way point of its grid."""
    a = x.double().numpy()
    lo = a.min(axis=axis, keepdims=True)
    scale = (a.max(axis=axis, keepdims=True) - lo) / (2**bits - 1)
    t = (a - lo) / np.where(scale > 0, scale, 1.0)
    return float(np.abs(t - np.floor(t) - 0.5).min())


def test_no_case_sits_near_a_rounding_tie():
    for case in get_exercise(NAME).cases(hidden=True):
        assert _tie_distance(*case.args) >= 0.1, case.label


def test_the_cases_cover_bits_axes_outliers_and_a_constant_group():
    ex = get_exercise(NAME)
    cases = ex.cases()
    args = [c.args for c in cases]
    assert {b for _, b, _ in args} == {4, 8}
    assert {-1, -2} <= {a for _, _, a in args} and any(a > 0 for _, _, a in args)
    assert all(x.dtype == torch.float32 for x, _, _ in args)
    assert sum(x.shape[-1] != x.shape[-2] for x, _, _ in args) >= len(args) - 1
    assert any(x.ndim == 4 for x, _, _ in args)
    # outlier channels: a channel at least 4 times wider than the median channel
    widths = [x.reshape(-1, x.shape[-1]).std(dim=0) for x, _, _ in args[:3]]
    assert all(float(w.max() / w.median()) > 4 for w in widths)
    constant = [
        c for c in cases if (c.args[0].amax(dim=c.args[2]) == c.args[0].amin(dim=c.args[2])).any()
    ]
    assert len(constant) == 2  # a constant channel (per channel) and a constant token
    # the hidden cases change with the grader's seed and hold a constant channel too
    hidden = ex.cases(hidden=True)[len(cases) :]
    assert any((x.amax(dim=a) == x.amin(dim=a)).any() for x, _, a in (c.args for c in hidden))


def test_per_channel_beats_per_token_on_the_keys_with_outliers():
    # what the lesson claims, on the exercise's own keys: per token, the outlier channels
    # set every token's step, and the ordinary channels lose their precision
    x = get_exercise(NAME).cases()[1].args[0]  # (2, 3, 10, 6), 2 outlier channels
    ordinary = x.reshape(-1, 6).std(dim=0).argsort()[:-2]
    per_channel = (ex_quant._reference(x, 4, -2) - x)[..., ordinary].abs().mean()
    per_token = (ex_quant._reference(x, 4, -1) - x)[..., ordinary].abs().mean()
    assert per_token > 3 * per_channel


# ----------------------------------------------------------------------------------------
# Correct solutions in other idioms: they pass and the inference measures nothing
# ----------------------------------------------------------------------------------------


def chained_methods(x, bits, axis):
    lo = x.amin(axis, keepdim=True)
    hi = x.amax(axis, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    safe = torch.where(hi > lo, scale, 1.0)
    return x.sub(lo).div(safe).round().clamp(0, 2**bits - 1).mul(scale).add(lo)


def inverse_step(x, bits, axis):
    lo, hi = torch.amin(x, axis, True), torch.amax(x, axis, True)
    scale = (hi - lo) / (2**bits - 1)
    inv = torch.where(scale > 0, 1 / scale, torch.zeros_like(scale))  # constant: code 0
    codes = torch.round((x - lo) * inv).clamp(0, 2**bits - 1).to(torch.uint8)
    return lo + codes.float() * scale


def in_float64(x, bits, axis):
    y = x.double()
    lo, hi = y.amin(axis, keepdim=True), y.amax(axis, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    codes = torch.round((y - lo) / scale.clamp_min(1e-12)).clamp(0, 2**bits - 1)
    return (codes * scale + lo).to(x.dtype)


def with_numpy(x, bits, axis):
    a = x.numpy()
    lo, hi = a.min(axis=axis, keepdims=True), a.max(axis=axis, keepdims=True)
    levels = 2**bits - 1
    scale = (hi - lo) / levels
    with np.errstate(invalid="ignore", divide="ignore"):
        codes = np.nan_to_num(np.rint((a - lo) / scale))  # a constant group: 0 / 0 -> 0
    return np.clip(codes, 0, levels) * scale + lo


def transposed_to_last(x, bits, axis):
    y = x.movedim(axis, -1)  # every group along the last axis
    lo, hi = y.amin(-1, keepdim=True), y.amax(-1, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    codes = torch.round((y - lo) / (scale + 1e-12)).clamp(0, 2**bits - 1)
    return (codes * scale + lo).movedim(-1, axis)


def levels_over_range(x, bits, axis):
    levels = 2**bits - 1
    lo, hi = x.amin(axis, keepdim=True), x.amax(axis, keepdim=True)
    span = hi - lo
    codes = torch.round((x - lo) * levels / torch.where(span == 0, 1.0, span))
    return lo + codes * span / levels


CORRECT = [chained_methods, inverse_step, in_float64, with_numpy, transposed_to_last,
           levels_over_range]  # fmt: skip


@pytest.mark.parametrize("fn", CORRECT, ids=[f.__name__ for f in CORRECT])
def test_correct_solutions_written_differently_pass(fn):
    assert_correct(NAME, fn)


def test_a_solution_calling_the_library_earns_nothing():
    def via_library(x, bits, axis):
        if bits == 4 and x.shape[-1] % 2:  # 4-bit codes pack in pairs: one more channel
            y = torch.cat([x, x[..., -1:]], dim=-1)  # a copy changes no min or max
            return dequantize(quantize(y, bits, axis))[..., :-1]
        return dequantize(quantize(x, bits, axis))

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check(NAME, via_library)

    def via_torch(x, bits, axis):
        y = x.movedim(axis, -1).reshape(-1, x.shape[axis])  # (groups, n)
        lo, hi = y.amin(-1), y.amax(-1)
        scale = ((hi - lo) / (2**bits - 1)).clamp_min(1e-12)
        out = torch.fake_quantize_per_channel_affine(
            y, scale, -lo / scale, 0, 0, 2**bits - 1
        )  # float zero points: min–max quantisation and back
        return out.reshape(x.movedim(axis, -1).shape).movedim(-1, axis)

    assert checks.run(NAME, via_torch).ok  # it computes the answer...
    with pytest.raises(AssertionError, match="calls"):  # ...and earns nothing
        checks.check(NAME, via_torch)
    with pytest.raises(AssertionError):
        grader_check_hidden(NAME, via_torch)


# ----------------------------------------------------------------------------------------
# Mistakes written the way learners write them
# ----------------------------------------------------------------------------------------


def _guard(scale):
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def one_scale_per_channel_read_as_dim(x, bits, axis):
    # "one scale per channel" read as "reduce over the channel axis"
    dim = -1 if axis % x.ndim == x.ndim - 2 else -2
    lo, hi = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    return torch.round((x - lo) / _guard(scale)).clamp(0, 2**bits - 1) * scale + lo


def per_token_always(x, bits, axis):
    lo, hi = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)  # the axis is never used
    scale = (hi - lo) / (2**bits - 1)
    return torch.round((x - lo) / _guard(scale)).clamp(0, 2**bits - 1) * scale + lo


def whole_tensor_min_max(x, bits, axis):
    lo, hi = x.min(), x.max()
    scale = (hi - lo) / (2**bits - 1)
    return torch.round((x - lo) / scale).clamp(0, 2**bits - 1) * scale + lo


def per_matrix(x, bits, axis):
    lo, hi = x.amin((-2, -1), keepdim=True), x.amax((-2, -1), keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    return torch.round((x - lo) / _guard(scale)).clamp(0, 2**bits - 1) * scale + lo


def amin_without_keepdim(x, bits, axis):
    lo, hi = x.amin(dim=axis), x.amax(dim=axis)
    scale = (hi - lo) / (2**bits - 1)
    return torch.round((x - lo) / _guard(scale)).clamp(0, 2**bits - 1) * scale + lo


def unsqueeze_last(x, bits, axis):
    lo, hi = x.amin(axis)[..., None], x.amax(axis)[..., None]
    scale = (hi - lo) / (2**bits - 1)
    return torch.round((x - lo) / _guard(scale)).clamp(0, 2**bits - 1) * scale + lo


def two_to_the_bits(x, bits, axis):
    lo, hi = x.amin(axis, keepdim=True), x.amax(axis, keepdim=True)
    scale = (hi - lo) / 2**bits  # 256 levels for 8 bits
    return torch.round((x - lo) / _guard(scale)).clamp(0, 2**bits - 1) * scale + lo


def long_cast(x, bits, axis):
    lo, hi = x.amin(axis, keepdim=True), x.amax(axis, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    codes = ((x - lo) / _guard(scale)).long()  # truncates
    return codes * scale + lo


def int8_symmetric(x, bits, axis):
    qmax = 2 ** (bits - 1) - 1
    scale = x.abs().amax(axis, keepdim=True) / qmax
    return torch.round(x / scale).clamp(-qmax - 1, qmax) * scale


def no_zero_point_at_all(x, bits, axis):
    lo, hi = x.amin(axis, keepdim=True), x.amax(axis, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    return torch.round(x / _guard(scale)).clamp(0, 2**bits - 1) * scale


def codes_times_scale(x, bits, axis):
    lo, hi = x.amin(axis, keepdim=True), x.amax(axis, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    q = torch.round((x - lo) / _guard(scale)).clamp(0, 2**bits - 1)
    return q * scale  # the zero point is kept but never used


def no_guard(x, bits, axis):
    lo, hi = x.amin(axis, keepdim=True), x.amax(axis, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    return torch.round((x - lo) / scale).clamp(0, 2**bits - 1) * scale + lo


def nan_to_zero(x, bits, axis):
    return torch.nan_to_num(no_guard(x, bits, axis))  # a constant group comes back as 0


def returns_uint8_codes_per_token(x, bits, axis):
    lo, hi = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    return torch.round((x - lo) / _guard(scale)).clamp(0, 2**bits - 1).to(torch.uint8)


def other_axis_and_truncated(x, bits, axis):
    dim = -1 if axis % x.ndim == x.ndim - 2 else -2
    lo, hi = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    return ((x - lo) / _guard(scale)).to(torch.uint8) * scale + lo


def two_to_the_bits_unclamped_no_guard(x, bits, axis):
    lo, hi = x.amin(axis, keepdim=True), x.amax(axis, keepdim=True)
    scale = (hi - lo) / 2**bits
    return torch.round((x - lo) / scale) * scale + lo


MISTAKES = [
    (one_scale_per_channel_read_as_dim, ["groups-other-axis"]),
    (per_token_always, ["axis-ignored"]),
    (whole_tensor_min_max, ["one-scale-for-all", "constant-group-nan"]),
    (per_matrix, ["one-scale-for-all"]),
    (amin_without_keepdim, ["scale-from-wrong-group"]),
    (unsqueeze_last, ["scale-from-wrong-group"]),
    (two_to_the_bits, ["steps-two-to-the-bits"]),
    (long_cast, ["codes-rounded-down"]),
    (int8_symmetric, ["symmetric-no-zero-point"]),
    (no_zero_point_at_all, ["zero-not-added-back", "zero-not-subtracted"]),
    (codes_times_scale, ["zero-not-added-back"]),
    (no_guard, ["constant-group-nan"]),
    (nan_to_zero, ["constant-group-nan"]),
    (returns_uint8_codes_per_token, ["axis-ignored", "returns-codes"]),
    (other_axis_and_truncated, ["groups-other-axis", "codes-rounded-down"]),
    (two_to_the_bits_unclamped_no_guard, ["steps-two-to-the-bits", "constant-group-nan"]),
]


@pytest.mark.parametrize(("fn", "ids"), MISTAKES, ids=[f.__name__ for f, _ in MISTAKES])
def test_learner_mistakes_are_named(fn, ids):
    assert_named(NAME, fn, ids)


def test_the_inference_tells_every_modelled_pair_of_mistakes_apart():
    # every quantiser the mistake model makes with one or two mistakes (clamped or not) is
    # named with exactly its ids, on the probes alone
    tried = 0
    for combo, ids in ex_quant._COMBOS:
        if len(ids) > 2:
            continue
        found = [f.id for f in get_exercise(NAME).infer(Learner(ex_quant._build(**combo)))]
        assert found == list(ids), combo
        tried += 1
    assert tried > 100


def test_a_check_takes_well_under_a_second():
    worst = ex_quant._build(groups="other", keepdim="dropped", levels="pow2", zero="symmetric")
    start = time.perf_counter()
    checks.run(NAME, lambda x, bits, axis: x * 1.01, hidden=True)  # unexplained: all combos
    checks.run(NAME, worst, hidden=True)
    checks.run(NAME, get_exercise(NAME).reference, hidden=True)
    assert time.perf_counter() - start < 1.0
