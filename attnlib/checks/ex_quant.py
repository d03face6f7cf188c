"""Lesson 17's quantisation exercise: quantise a cache's numbers and read them back.

* ``quantize_dequantize(x, bits, axis) -> Tensor like x`` — asymmetric min–max quantisation
  and back in one function: each group (the numbers of ``x`` along ``axis``, the other
  indices fixed) gets ``zero = min`` and ``scale = (max - min) / (2**bits - 1)``; a number
  becomes the code ``round((x - zero) / scale)`` in ``0 .. 2**bits - 1`` and comes back as
  ``code · scale + zero``, what a quantised cache hands attention. A constant group comes
  back as its constant. For keys (..., seq, d_k), ``axis=-2`` is per channel (one scale per
  channel, over the tokens) and ``axis=-1`` per token.

The reference is written here in float32 and equals ``dequantize(quantize(x, bits, axis))``
of :mod:`attnlib.quant_cache` without the 4-bit packing (tests/test_ex_quant.py).

The cases are keys with outlier channels (a few channels several times larger than the
rest, as real keys have) and values, in shapes with seq ≠ d and batch dims, 8 and 4 bits,
per channel and per token, positive axes, and a constant channel and a constant token.
Rounding ties decide no case: every number within 0.15 of a step of a half-way point of
its group's grid is moved 0.2 of a step away from it before the cases are cast to float32
(tests/test_ex_quant.py checks at least 0.1 on the float32 numbers), so rounding with
torch, dividing or multiplying by the inverse step, working in float64 and casting back all
give the same codes; what is left between idioms is float32 rounding of the output (a few
1e-6 at most), well inside ``atol=1e-4``, while the smallest step in the cases is about
4e-3.

Diagnosis by inference (see :mod:`attnlib.checks._core`): the learner's function runs on
three square probes (6 × 6, 4 bits along each axis, then 8 bits) and on a constant
tensor. Its outputs on the probes are compared with every quantiser a combination of
known mistakes makes (:func:`_quantise`: which numbers share a scale, a scale reduced
without its kept dim, the range cut into 2**bits steps, codes rounded down, the zero
point's handling, codes returned), taken in order of how few mistakes they hold; the first
that gives the learner's numbers names them (square probes, so that a scale broadcast from
the wrong group runs instead of raising). Entries within 2e-3 of a rounding edge of that
quantiser are not compared: there two correct idioms may round apart. The constant tensor
tells a function whose constant groups come back as nan (or as 0) apart.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt

# ----------------------------------------------------------------------------------------
# The reference
# ----------------------------------------------------------------------------------------


def _reference(x, bits, axis):
    """Min–max quantisation along ``axis`` and back, in float32 (float64 for float64 x)."""
    work = torch.promote_types(x.dtype, torch.float32)
    xw = x.to(work)
    lo = xw.amin(dim=axis, keepdim=True)  # the zero point: code 0 stands for the minimum
    levels = 2**bits - 1
    scale = (xw.amax(dim=axis, keepdim=True) - lo) / levels  # one step
    step = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant group: code 0
    codes = torch.round((xw - lo) / step).clamp(0, levels)
    return (codes * scale + lo).to(x.dtype)


# ----------------------------------------------------------------------------------------
# Cases: keys with outlier channels and values, every number away from a rounding tie
# ----------------------------------------------------------------------------------------

_MARGIN = 0.15  # how far (in steps) every case's number stays from a half-way point


def _away_from_ties(x, bits, axis):
    """``x`` (float64 numpy) with every number at least _MARGIN of a step from the half-way
    points of its group's grid; each group's min and max stay where they are. float32."""
    lo = x.min(axis=axis, keepdims=True)
    scale = (x.max(axis=axis, keepdims=True) - lo) / (2**bits - 1)
    step = np.where(scale > 0, scale, 1.0)
    t = (x - lo) / step
    whole = np.floor(t)
    frac = t - whole
    near = np.abs(frac - 0.5) < _MARGIN
    moved = whole + np.where(frac < 0.5, 0.5 - _MARGIN - 0.05, 0.5 + _MARGIN + 0.05)
    t = np.where(near & (scale > 0), moved, t)
    return torch.from_numpy((lo + t * step).astype(np.float32))


def _keys(rng, shape, n_outliers=2, outlier=8.0):
    """Keys-like numbers (..., seq, d): channels with their own offset and width, and
    ``n_outliers`` channels ``outlier`` times larger than the rest."""
    d = shape[-1]
    width = rng.uniform(0.5, 1.5, d)
    width[rng.choice(d, size=n_outliers, replace=False)] *= outlier
    offset = rng.normal(0.0, 1.0, d) * width / 2
    return rng.standard_normal(shape) * width + offset  # (..., seq, d)


def _case(label, x, bits, axis):
    return Case(label, (_away_from_ties(x, bits, axis), bits, axis))


def _cases() -> list[Case]:
    rng = np.random.default_rng(1731)
    constant_channel = _keys(rng, (10, 6), n_outliers=1)
    constant_channel[:, 2] = 0.5  # a channel that never moves
    constant_token = rng.standard_normal((3, 7, 5))
    constant_token[1, 4] = -1.25  # one token with every channel the same
    return [
        _case("keys (seq 12, d_k 8), 2 outlier channels; 8 bits, per channel (axis=-2)",
              _keys(rng, (12, 8)), 8, -2),
        _case("keys (batch 2, heads 3, seq 10, d_k 6); 4 bits, per channel (axis=-2)",
              _keys(rng, (2, 3, 10, 6)), 4, -2),
        _case("keys (batch 2, heads 3, seq 10, d_k 6); 4 bits, per token (axis=-1)",
              _keys(rng, (2, 3, 10, 6)), 4, -1),
        _case("values (batch 1, heads 2, seq 7, d_v 16); 8 bits, per token (axis=-1)",
              rng.standard_normal((1, 2, 7, 16)), 8, -1),
        _case("keys (heads 2, seq 9, d_k 5), 8 bits, axis=1 (per channel, a positive axis)",
              _keys(rng, (2, 9, 5), n_outliers=1), 8, 1),
        _case("keys (seq 16, d_k 6), 4 bits, axis=1 (per token, a positive axis)",
              _keys(rng, (16, 6)), 4, 1),
        _case("keys (seq 10, d_k 6) with channel 2 constant (0.5); 4 bits, per channel",
              constant_channel, 4, -2),
        _case("values (heads 3, seq 7, d_v 5) with one constant token (-1.25); 8 bits, per "
              "token", constant_token, 8, -1),
        _case("keys (seq 5, d_k 7), an odd d_k; 4 bits, per token", _keys(rng, (5, 7)), 4, -1),
        _case("keys (seq 8, d_k 8), square; 4 bits, per token", _keys(rng, (8, 8)), 4, -1),
    ]  # fmt: skip


def _hidden_cases() -> list[Case]:
    # shapes, bits and axes drawn (the grader's seed changes them), one constant channel
    rng = np.random.default_rng(1732)
    out = []
    for i in range(4):
        seq, d = (int(v) for v in rng.choice(np.arange(3, 15), size=2, replace=False))
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), seq, d)
        bits, axis = (8, 4)[i % 2], (-2, -1)[i // 2]
        x = _keys(rng, shape, n_outliers=min(2, d - 1))
        if i == 0:
            x[..., int(rng.integers(d))] = float(rng.normal())  # a constant channel
        out.append(_case(f"hidden: keys {shape}, {bits} bits, axis={axis}", x, bits, axis))
    return out


# ----------------------------------------------------------------------------------------
# The mistake model: a quantiser with the given choices (the defaults are right)
# ----------------------------------------------------------------------------------------


def _quantise(x, bits, axis, *, groups="axis", keepdim="kept", levels="minus-one", clamp=True,
              rounding="round", zero="minmax", output="values", constant="guarded"):  # fmt: skip
    """(output, codes before rounding) of a quantiser with the given choices, float32.

    ``groups``: the numbers sharing a scale run along "axis", "other" (the other of the
    last two axes), "last" (the last axis whatever ``axis`` says) or "tensor" (one scale
    for everything); ``keepdim``: the per-group minimum and maximum are "kept" with their
    reduced dim, "dropped" (broadcast as they come, against the last axes) or "unsqueezed"
    (a new last dim); ``levels``: the range divided by 2**bits - 1 ("minus-one") or by
    2**bits ("pow2"); ``clamp``: the codes clamped to the codes the bits hold;
    ``rounding``: "round" or "floor"; ``zero``: "minmax" (subtracted, added back),
    "not-added" (codes times the scale), "not-subtracted" (codes of x / scale, zero added
    back), "none" (neither) or "symmetric" (scale from the largest magnitude, signed codes,
    no zero point); ``output``: "values" or "codes"; ``constant``: "guarded" (a zero scale
    divides as 1) or "nan" (divides as 0).
    """
    x = x.to(torch.float32)
    nd = x.ndim
    a = axis % nd
    g = {"axis": a, "other": nd - 2 if a == nd - 1 else nd - 1, "last": nd - 1}.get(groups)

    def stat(t, reduce):
        if g is None:
            return reduce(t)
        s = reduce(t, dim=g, keepdim=keepdim == "kept")
        return s.unsqueeze(-1) if keepdim == "unsqueezed" else s

    rnd = torch.round if rounding == "round" else torch.floor
    if zero == "symmetric":
        top = 2 ** (bits - 1) - (1 if levels == "minus-one" else 0)
        scale = stat(x.abs(), torch.amax) / top
        lo, low, high = 0.0, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    else:
        lo = stat(x, torch.amin)
        scale = (stat(x, torch.amax) - lo) / (2**bits - (1 if levels == "minus-one" else 0))
        low, high = 0, 2**bits - 1
    step = torch.where(scale > 0, scale, torch.ones_like(scale)) if constant == "guarded" else scale
    t = (x - lo if zero in ("minmax", "not-added") else x) / step
    codes = rnd(t)
    if clamp:
        codes = codes.clamp(low, high)
    if output == "codes":
        return codes, t
    return codes * scale + (lo if zero in ("minmax", "not-subtracted") else 0.0), t


def _build(**choices):
    """A quantize_dequantize with the given choices (see :func:`_quantise`)."""

    def fn(x, bits, axis):
        return _quantise(x, bits, axis, **choices)[0]

    return fn


# ----------------------------------------------------------------------------------------
# Inference: square probes, every combination of mistakes, the fewest first
# ----------------------------------------------------------------------------------------

_CHOICES = {  # the first value of each is right; clamp is a free choice (no mistake alone)
    "groups": ("axis", "other", "last", "tensor"),
    "keepdim": ("kept", "dropped", "unsqueezed"),
    "levels": ("minus-one", "pow2"),
    "rounding": ("round", "floor"),
    "zero": ("minmax", "not-added", "not-subtracted", "none", "symmetric"),
    "output": ("values", "codes"),
    "clamp": (True, False),
}
_IDS = {
    ("groups", "other"): ("groups-other-axis",),
    ("groups", "last"): ("axis-ignored",),
    ("groups", "tensor"): ("one-scale-for-all",),
    ("keepdim", "dropped"): ("scale-from-wrong-group",),
    ("keepdim", "unsqueezed"): ("scale-from-wrong-group",),
    ("levels", "pow2"): ("steps-two-to-the-bits",),
    ("rounding", "floor"): ("codes-rounded-down",),
    ("zero", "not-added"): ("zero-not-added-back",),
    ("zero", "not-subtracted"): ("zero-not-subtracted",),
    ("zero", "none"): ("zero-not-subtracted", "zero-not-added-back"),
    ("zero", "symmetric"): ("symmetric-no-zero-point",),
    ("output", "codes"): ("returns-codes",),
}
_ORDER = (
    "groups-other-axis", "axis-ignored", "one-scale-for-all", "scale-from-wrong-group",
    "steps-two-to-the-bits", "codes-rounded-down", "symmetric-no-zero-point",
    "zero-not-added-back", "zero-not-subtracted", "returns-codes", "constant-group-nan",
)  # fmt: skip


def _combos() -> list[tuple[dict, tuple[str, ...]]]:
    """Every combination of choices that makes a distinct quantiser, with its ids, the
    fewest mistakes first (unclamped after clamped)."""
    out = []
    keys = list(_CHOICES)
    for values in itertools.product(*_CHOICES.values()):
        c = dict(zip(keys, values, strict=True))
        if c["groups"] == "tensor" and c["keepdim"] != "kept":
            continue  # one scale for everything: no dim to keep
        if c["groups"] == "last" and c["keepdim"] == "unsqueezed":
            continue  # the last dim dropped and put back: the same as kept
        if c["output"] == "codes" and c["zero"] in ("not-added", "none"):
            continue  # the codes are returned: there is no adding back to forget
        ids = sorted({i for k, v in c.items() for i in _IDS.get((k, v), ())}, key=_ORDER.index)
        out.append((c, tuple(ids)))
    out.sort(key=lambda ci: (len(ci[1]), not ci[0]["clamp"]))
    return out


_COMBOS = _combos()
_N = 6  # the probes are 6 x 6: square, so that a scale broadcast from the wrong group runs


def _probe_numbers(seed):
    """A 6 x 6 probe: rows and columns with their own offsets and widths, of both signs."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(0.0, 1.5, (_N, 1))
    cols = rng.normal(0.0, 1.0, (1, _N))
    width = rng.uniform(0.3, 1.2, (_N, 1)) * rng.uniform(0.3, 1.2, (1, _N))
    x = rows + cols + width * rng.standard_normal((_N, _N))  # (6, 6)
    return torch.from_numpy(x.astype(np.float32))


_PROBE_X = (_probe_numbers(1741), _probe_numbers(1742))
_PROBES = ((0, 4, -1), (0, 4, -2), (1, 8, -2))  # (which numbers, bits, axis)
_CONSTANT = 0.75
_CONSTANT_PROBE = (torch.full((5, 5), _CONSTANT), 4, -2)
_EDGE = 2e-3  # entries this close (in codes) to a rounding edge are not compared


def _fits(got, x, bits, axis, combo) -> bool:
    """Does ``got`` equal the output of the quantiser ``combo`` on (x, bits, axis)?"""
    try:
        cand, t = _quantise(x, bits, axis, **combo)
    except RuntimeError:  # a broadcast that cannot run on this probe
        return False
    cand, t = cand.double().numpy(), t.double().numpy()
    if cand.shape != got.shape:
        return False
    frac = t - np.floor(t)
    edge = np.abs(frac - 0.5) if combo["rounding"] == "round" else np.minimum(frac, 1 - frac)
    compared = ~(edge < _EDGE) & np.isfinite(t)
    return bool((np.abs(got - cand)[compared] <= 1e-4 + 1e-5 * np.abs(cand[compared])).all())


def _names(axis):
    return ("row", "rows") if axis == -1 else ("column", "columns")


def _detail(mid, combo, outs) -> str:
    """What was measured for ``mid``: how the learner's numbers on a probe differ from those
    of the same quantiser with this one choice made right."""
    right = {
        "groups-other-axis": {"groups": "axis"}, "axis-ignored": {"groups": "axis"},
        "one-scale-for-all": {"groups": "axis"}, "scale-from-wrong-group": {"keepdim": "kept"},
        "steps-two-to-the-bits": {"levels": "minus-one", "clamp": True},
        "codes-rounded-down": {"rounding": "round"}, "symmetric-no-zero-point": {"zero": "minmax"},
        "zero-not-added-back": {"zero": "not-subtracted" if combo["zero"] == "none" else "minmax"},
        "zero-not-subtracted": {"zero": "not-added" if combo["zero"] == "none" else "minmax"},
        "returns-codes": {"output": "values"},
    }[mid]  # fmt: skip
    fixed = {**combo, **right}
    for (which, bits, axis), got in zip(_PROBES, outs, strict=True):
        x = _PROBE_X[which]
        try:
            other = _quantise(x, bits, axis, **fixed)[0].double().numpy()
        except RuntimeError:
            continue
        differ = int((np.abs(got - other) > 1e-4 + 1e-5 * np.abs(other)).sum())
        if differ:
            break
    else:
        return ""
    one, many = _names(axis)
    where = f"on a {_N} × {_N} probe, {bits} bits, axis={axis} (a scale for each {one})"
    y = got
    if mid == "groups-other-axis":
        return (f"{where}, your numbers are those of a quantiser with one scale for each "
                f"{_names(-1 if axis == -2 else -2)[0]}; {differ} of {_N * _N} numbers differ "
                f"from one scale for each {one}.")  # fmt: skip
    if mid == "axis-ignored":
        return (f"asked for axis=-2 (a scale for each column) on a {_N} × {_N} probe, your "
                f"numbers are those of one scale for each row, as with axis=-1: {differ} of "
                f"{_N * _N} numbers differ from one scale for each column.")  # fmt: skip
    if mid == "one-scale-for-all":
        return (
            f"{where}, your numbers are those of one scale and one zero for all "
            f"{_N * _N} numbers; {differ} of them differ from a scale for each {one}."
        )
    if mid == "scale-from-wrong-group":
        g = {"axis": axis, "other": -1 if axis == -2 else -2, "last": -1}[combo["groups"]]
        index = "j" if combo["keepdim"] == "dropped" else "i"
        return (f"{where}, your number at (i, j) is quantised with the minimum and step of "
                f"{_names(g)[0]} {index}, not of the {_names(g)[0]} it is in; {differ} of "
                f"{_N * _N} numbers differ.")  # fmt: skip
    if mid == "steps-two-to-the-bits":
        return (f"{where}, your numbers lie on steps of (max − min) / {2**bits}, not "
                f"(max − min) / {2**bits - 1}; {differ} of {_N * _N} numbers differ from "
                f"steps of (max − min) / {2**bits - 1}.")  # fmt: skip
    if mid == "codes-rounded-down":
        below = int((y < other - 1e-4).sum())
        return (
            f"{where}, {below} of {_N * _N} numbers come back one step below where rounding to "
            f"the nearest code puts them, and none above."
        )
    if mid == "symmetric-no-zero-point":
        return (f"{where}, your numbers lie on a grid centred on 0 with steps of the largest "
                f"magnitude / {2 ** (bits - 1) - 1}; {differ} of {_N * _N} numbers differ "
                f"from a grid from each {one}'s minimum to its maximum.")  # fmt: skip
    if mid == "zero-not-added-back":
        shift = other - y
        return (f"{where}, your numbers are those of the codes times the step with nothing "
                f"added: {differ} of {_N * _N} numbers come back lower by their group's "
                f"minimum (shifts from {fmt(float(shift.min()))} to {fmt(float(shift.max()))}"
                f").")  # fmt: skip
    if mid == "zero-not-subtracted":
        return (f"{where}, your numbers are those of codes counted from 0 instead of from "
                f"each {one}'s minimum; {differ} of "
                f"{_N * _N} numbers differ.")  # fmt: skip
    codes = y[np.isfinite(y)]
    return (
        f"{where}, your output holds whole numbers from {fmt(float(codes.min()))} to "
        f"{fmt(float(codes.max()))}: codes, not numbers near the input's (which run from "
        f"{fmt(float(_PROBE_X[which].min()))} to {fmt(float(_PROBE_X[which].max()))})."
    )


def _readable(o, shape):
    if not o.ok or o.arity != 1:
        return None
    a = o.array(0)
    if a is None or a.shape != shape:
        return None
    return a


def _infer(learner) -> list[Finding]:
    outs = []
    for which, bits, axis in _PROBES:
        x = _PROBE_X[which]
        a = _readable(learner(x.clone(), bits, axis), tuple(x.shape))
        if a is None or not np.isfinite(a).all():
            return []
        outs.append(a)
    found: list[Finding] = []
    matched = None
    for combo, ids in _COMBOS:
        if all(_fits(got, _PROBE_X[w], b, ax, combo)
               for got, (w, b, ax) in zip(outs, _PROBES, strict=True)):  # fmt: skip
            matched = (combo, ids)
            break
    if matched is not None:
        combo, ids = matched
        for mid in ids:
            found.append(Finding(mid, _detail(mid, combo, outs)))
    x, bits, axis = _CONSTANT_PROBE
    c = _readable(learner(x.clone(), bits, axis), tuple(x.shape))
    if c is not None:
        bad = int((~np.isfinite(c)).sum())
        if bad:
            found.append(
                Finding(
                    "constant-group-nan",
                    f"on a 5 × 5 tensor whose numbers are all {_CONSTANT} (every "
                    f"group constant), {bad} of 25 numbers came back as nan or inf.",
                )
            )
        elif matched is not None and not matched[1] and not np.allclose(c, _CONSTANT):
            found.append(Finding("constant-group-nan",
                                 f"on a 5 × 5 tensor whose numbers are all {_CONSTANT} (every "
                                 f"group constant), your numbers came back as "
                                 f"{fmt(float(np.median(c)))} (median)."))  # fmt: skip
    return found


# ----------------------------------------------------------------------------------------
# Variants as learners write them (each also made by _build with its settings)
# ----------------------------------------------------------------------------------------


def _no_keepdim(x, bits, axis):
    lo, hi = x.amin(dim=axis), x.amax(dim=axis)  # the reduced dim dropped: broadcast from the end
    scale = (hi - lo) / (2**bits - 1)
    step = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round((x - lo) / step).clamp(0, 2**bits - 1) * scale + lo


def _cast_to_uint8(x, bits, axis):
    lo = x.amin(dim=axis, keepdim=True)
    scale = (x.amax(dim=axis, keepdim=True) - lo) / (2**bits - 1)
    step = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = ((x - lo) / step).to(torch.uint8)  # the cast cuts the fraction off
    return codes * scale + lo


def _uint8_codes(x, bits, axis):
    lo = x.amin(dim=axis, keepdim=True)
    scale = (x.amax(dim=axis, keepdim=True) - lo) / (2**bits - 1)
    step = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round((x - lo) / step).clamp(0, 2**bits - 1).to(torch.uint8)


def _mistake(mid, settings, explanation, question, *extra):
    return Misconception(mid, explanation, (_build(**settings), *extra), settings,
                         question=question)  # fmt: skip


register(
    Exercise(
        name="quantize_dequantize",
        summary="quantize_dequantize(x, bits, axis) -> Tensor like x: each group along axis "
        "quantised min–max to 2**bits - 1 steps (zero = min, codes rounded to the nearest and "
        "clamped) and read back as code times scale plus zero; a constant group stays itself",
        reference=_reference,
        make_cases=_cases,
        make_hidden_cases=_hidden_cases,
        rtol=1e-5,
        atol=1e-4,
        forbidden=(
            "attnlib.quant_cache.quantize",
            "attnlib.quant_cache.dequantize",
            "torch.fake_quantize_per_channel_affine",
            "torch.fake_quantize_per_tensor_affine",
        ),
        infer=_infer,
        build=_build,
        exclusive=(
            # one scale for everything: there is no group to take it from by mistake
            frozenset({"one-scale-for-all", "scale-from-wrong-group"}),
            # the codes are returned: no dequantising step to forget the zero point in
            frozenset({"returns-codes", "zero-not-added-back"}),
            # x / 0 is ±inf, not nan, and clamping turns it into a code: nothing shows
            frozenset({"zero-not-subtracted", "constant-group-nan"}),
            # the symmetric step of a constant group that is not 0 is not 0
            frozenset({"symmetric-no-zero-point", "constant-group-nan"}),
        ),
        misconceptions=(
            _mistake(
                "groups-other-axis",
                {"groups": "other"},
                "The numbers that share a scale run along the other axis: axis names the axis "
                "a group runs along, not the one that counts the groups. Per channel (over "
                "the tokens) each channel gets its own scale, which its tokens share; taken "
                "the other way, each token gets one scale and the outlier channels set every "
                "token's step.",
                "Which numbers share one scale in your output: those along the axis you were "
                "given, or those across it? How many scales should a (seq, d) tensor get "
                "when each channel has its own?",
            ),
            _mistake(
                "axis-ignored",
                {"groups": "last"},
                "The groups always run along the last axis, whatever axis asks for: the "
                "reductions are written for one axis instead of the one given. Per channel "
                "(the tokens' axis, second from last) then becomes per token.",
                "Does your output change when you ask for the other axis? Where in your "
                "function is the axis you were given used?",
            ),
            _mistake(
                "one-scale-for-all",
                {"groups": "tensor"},
                "One minimum and one maximum for the whole tensor: the reductions run over "
                "every number instead of along one axis. Every group then gets the step of "
                "the widest range, which outlier channels make large, and the small channels "
                "lose their precision.",
                "How many different steps does your output use? Should a small channel and "
                "an outlier channel share one?",
            ),
            _mistake(
                "scale-from-wrong-group",
                {"keepdim": "dropped"},
                "Each group's minimum and step are computed, but the reduced axis was dropped "
                "and the numbers broadcast against the wrong axis: a number is quantised with "
                "another group's minimum and step (on most shapes this cannot broadcast and "
                "raises; on a square one it runs). Keep the reduced axis with size 1, so each "
                "group's scale lines up with its own numbers.",
                "What shape do your minimum and scale have before they meet the numbers? "
                "Along which axis do they line up with them?",
                _no_keepdim,
            ),
            _mistake(
                "steps-two-to-the-bits",
                {"levels": "pow2"},
                "The range is divided by 2 to the bits instead of 2 to the bits minus 1. "
                "With b bits the codes are 0 to 2 to the b minus 1: that is 2 to the b "
                "minus 1 steps between the minimum and the maximum. One step too many makes "
                "each step too small, and the largest code then falls short of the maximum "
                "(or, unclamped, needs a code the bits cannot hold).",
                "Does the largest number of each group come back as itself? How many steps "
                "lie between code 0 and the largest code the bits hold?",
                _build(levels="pow2", clamp=False),
            ),
            _mistake(
                "codes-rounded-down",
                {"rounding": "floor"},
                "The codes are rounded down (floor, or a cast to an integer type, which cuts "
                "the fraction off) instead of to the nearest code. Rounding down moves a "
                "number by up to a whole step, always downward; rounding to the nearest moves "
                "it by at most half a step.",
                "Are your numbers ever above the input? How far below it are they at most, "
                "counted in steps?",
                _cast_to_uint8,
            ),
            _mistake(
                "symmetric-no-zero-point",
                {"zero": "symmetric"},
                "This is symmetric quantisation: a scale from the largest magnitude, codes "
                "centred on 0 and no zero point. The exercise asks for the asymmetric "
                "(min–max) kind, whose grid runs from each group's minimum to its maximum; a "
                "group far from 0 (a key channel running from 2 to 6) wastes half the "
                "symmetric codes on numbers it never holds.",
                "Where does your grid of codes start and end for a group whose numbers are "
                "all positive? Is its minimum one of the numbers that come back exactly?",
            ),
            _mistake(
                "zero-not-added-back",
                {"zero": "not-added"},
                "When reading back, the zero point is not added: code times scale counts "
                "steps from the group's minimum, so the minimum must be added back. Every "
                "number comes back shifted down by its group's minimum.",
                "What does the smallest number of each group come back as? What does code 0 "
                "stand for?",
            ),
            _mistake(
                "zero-not-subtracted",
                {"zero": "not-subtracted"},
                "The codes are computed from the number divided by the step, without first "
                "subtracting the group's minimum, while reading back adds the minimum. The "
                "codes must count steps from the minimum; counted from 0, they clamp at 0 for "
                "numbers below 0 and come back shifted.",
                "From which number do your codes count steps? What code does a group's "
                "minimum get, and what does it come back as?",
            ),
            _mistake(
                "returns-codes",
                {"output": "codes"},
                "The function returns the integer codes instead of the numbers read back from "
                "them. The codes are what the cache stores; attention needs numbers near the "
                "originals: code times scale plus zero.",
                "What range do your output's numbers span, and the input's? Are they numbers "
                "attention could use as keys?",
                _uint8_codes,
            ),
            _mistake(
                "constant-group-nan",
                {"constant": "nan"},
                "A constant group has maximum equal to minimum: its step is 0, and the number "
                "minus the minimum divided by it is 0 / 0, which is nan. Such a group needs a "
                "step it can divide by (any code then comes back as the constant, since it "
                "is multiplied by the true step of 0); replacing nan by 0 afterwards loses "
                "the constant.",
                "What does a group whose numbers are all equal come back as? What is its "
                "step, and what happens when you divide by it?",
            ),
        ),
    )
)
