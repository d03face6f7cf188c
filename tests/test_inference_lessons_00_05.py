"""Realistic wrong submissions for the exercises of lessons 00-05, written by hand
as a learner would write them (not built from the mistake model), and the mistakes the
checks must name: each single mistake as one id, two mistakes as exactly those two.

The mistake model itself (every variant, every pair built from ``Misconception.settings``)
is tested for every exercise in tests/test_checks_registry.py; these are the independent
submissions the inference must read the same way.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from named import assert_named

from attnlib import checks


def _sm(x, *, shift=None, axis=-1, scale=1.0):
    z = x * scale
    if shift == "row":
        z = z - z.max(axis=-1, keepdims=True)
    elif shift == "all":
        z = z - z.max()
    e = np.exp(z)
    return e / (e.sum() if axis is None else e.sum(axis=axis, keepdims=True))


SOFTMAX = {
    "exp over the whole sum": (
        lambda x: np.exp(x) / np.exp(x).sum(),
        ["unstable-softmax", "softmax-sums-everything"],
    ),
    "axis 0, no shift": (
        lambda x: np.exp(x) / np.exp(x).sum(axis=0),
        ["unstable-softmax", "softmax-wrong-axis"],
    ),
    "one max for the array": (lambda x: _sm(x, shift="all"), ["global-max"]),
    "keepdims forgotten": (
        lambda x: np.exp(x - x.max(axis=-1)) / np.exp(x - x.max(axis=-1)).sum(axis=-1),
        ["keepdims-missing"],
    ),
    "scaled inside, no shift": (
        lambda x: _sm(x, scale=1 / math.sqrt(x.shape[-1])),
        ["unstable-softmax", "softmax-scaled"],
    ),
    "shifted by the row minimum": (
        lambda x: (lambda e: e / e.sum(axis=-1, keepdims=True))(
            np.exp(x - x.min(axis=-1, keepdims=True))
        ),
        ["shift-by-min"],
    ),
    "centred on the row mean": (
        lambda x: (lambda e: e / e.sum(axis=-1, keepdims=True))(
            np.exp(x - np.mean(x, axis=-1, keepdims=True))
        ),
        ["shift-by-mean"],
    ),
    "shifted by the row minimum, sum over everything": (
        lambda x: (lambda e: e / e.sum())(np.exp(x - np.min(x, axis=-1, keepdims=True))),
        ["shift-by-min", "softmax-sums-everything"],
    ),
}


def _attend_no_scale_2d(q, k, v, mask=None):
    s = q @ k.T  # 2-D transpose only, no 1/√d_k
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return w @ v, w


def _attend_dk_mask_after(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / q.shape[-1]  # 1/d_k
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    if mask is not None:
        w = w * mask  # masked after the softmax
    return w @ v, w


def _attend_by_hand(
    *, scale="sqrt", axis=-1, mask_at="before", kt="swap", fill=-np.inf, order="ow"
):
    """attend as a learner writes it, with one or two slips (independent of the checks'
    own mistake model): scale by √d_k / d_k / √d_v / nothing, softmax axis, mask before or
    after the softmax (or ignored), k transposed with swapaxes / .T / not at all, the fill
    value of blocked scores, the order of the returned pair."""

    def attend(q, k, v, mask=None):
        kk = np.swapaxes(k, -1, -2) if kt == "swap" else (k.T if kt == "T" else k)
        s = q @ kk
        div = {"sqrt": math.sqrt(q.shape[-1]), "d": q.shape[-1], "dv": math.sqrt(v.shape[-1])}
        s = s / div[scale] if scale in div else s
        if mask is not None and mask_at == "before":
            s = np.where(mask, s, fill)
        m = s.max(axis=axis, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
        t = e.sum(axis=axis, keepdims=True)
        w = e / np.where(t > 0, t, 1.0)
        if mask is not None and mask_at == "after":
            w = w * mask
        out = w @ v
        return (out, w) if order == "ow" else (w, out)

    return attend


ATTEND_PAIRS = {
    "softmax over queries, no scale": (
        _attend_by_hand(scale=None, axis=-2),
        ["softmax-over-queries", "no-scaling"],
    ),
    "softmax over queries, 1/d_k": (
        _attend_by_hand(scale="d", axis=-2),
        ["softmax-over-queries", "scale-not-sqrt"],
    ),
    "mask after the softmax, no scale": (
        _attend_by_hand(scale=None, mask_at="after"),
        ["no-scaling", "mask-after-softmax"],
    ),
    "fill -1e9, 1/√d_v": (
        _attend_by_hand(scale="dv", fill=-1e9),
        ["scale-sqrt-d-v", "mask-fill-finite"],
    ),
    "k.T on a batch, fill -1e9": (
        _attend_by_hand(kt="T", fill=-1e9),
        ["mask-fill-finite", "batch-not-supported"],
    ),
    "outputs swapped, no scale": (
        _attend_by_hand(scale=None, order="wo"),
        ["no-scaling", "outputs-swapped"],
    ),
    "mask ignored, 1/d_k": (
        _attend_by_hand(scale="d", mask_at="none"),
        ["scale-not-sqrt", "mask-ignored"],
    ),
    "k not transposed, mask after": (
        _attend_by_hand(kt="none", mask_at="after"),
        ["mask-after-softmax", "keys-not-transposed"],
    ),
}


def _attend_min_shift(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    lo = s.min(axis=-1, keepdims=True)  # the row minimum, not the maximum
    e = np.exp(s - np.where(np.isfinite(lo), lo, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    w = e / np.where(total > 0, total, 1.0)
    return w @ v, w


def _attend_min_shift_no_scale(q, k, v, mask=None):
    s = np.matmul(q, np.swapaxes(k, -1, -2))
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = np.min(s, axis=-1, keepdims=True)
    m[~np.isfinite(m)] = 0.0
    e = np.exp(s - m)
    w = e / np.maximum(e.sum(axis=-1, keepdims=True), 1e-300)
    return w @ v, w


def _attend_mean_shift(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    centre = s.mean(axis=-1, keepdims=True)  # the row mean, not the maximum
    e = np.exp(s - np.where(np.isfinite(centre), centre, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    w = e / np.where(total > 0, total, 1.0)
    return w @ v, w


ATTEND = {
    "shifted by the row minimum": (_attend_min_shift, ["shift-by-min"]),
    "centred on the row mean": (_attend_mean_shift, ["shift-by-mean"]),
    "shifted by the row minimum, no scale": (
        _attend_min_shift_no_scale,
        ["no-scaling", "shift-by-min"],
    ),
    "no scale, k.T, -inf fill": (
        _attend_no_scale_2d,
        ["no-scaling", "fully-masked-nan", "batch-not-supported"],
    ),
    "1/d_k and the mask after the softmax": (
        _attend_dk_mask_after,
        ["scale-not-sqrt", "mask-after-softmax"],
    ),
}


LINEAR = {
    "weight as stored": (
        lambda x, weight, bias=None: x @ weight + (0 if bias is None else bias),
        ["weight-not-transposed"],
    ),
    "weight as stored, bias forgotten": (
        lambda x, weight, bias=None: x @ weight,
        ["weight-not-transposed", "bias-missing"],
    ),
    "one token per column, bias subtracted": (
        lambda x, weight, bias=None: (
            weight @ np.swapaxes(x, -1, -2) - (0 if bias is None else bias[:, None])
        ),
        ["wrong-side-multiplication", "bias-subtracted"],
    ),
    "bias subtracted, None not handled": (
        lambda x, weight, bias=None: x @ weight.T - bias,
        ["bias-none-not-handled", "bias-subtracted"],
    ),
    "np.matmul, None not handled": (
        lambda x, weight, bias=None: np.matmul(x, weight.T) + bias,
        ["bias-none-not-handled"],
    ),
    "weight as stored, None not handled": (
        lambda x, weight, bias=None: x @ weight + bias,
        ["weight-not-transposed", "bias-none-not-handled"],
    ),
    "bias added to the input": (
        lambda x, weight, bias=None: (x if bias is None else x + bias) @ weight.T,
        ["bias-before-product"],
    ),
    "bias added to the input, weight as stored": (
        lambda x, weight, bias=None: np.matmul(x + (0.0 if bias is None else bias), weight),
        ["weight-not-transposed", "bias-before-product"],
    ),
}


def _split(W_qkv, starts, widths):
    return [W_qkv[:, a : a + n] for a, n in zip(starts, widths, strict=True)]


PROJECT = {
    "q and k blocks swapped": (
        lambda x, W, d_k: tuple(x @ m for m in (W[:, d_k : 2 * d_k], W[:, :d_k], W[:, 2 * d_k :])),
        ["projections-swapped"],
    ),
    "blocks read as q, v, k": (
        lambda x, W, d_k: (
            x @ W[:, :d_k],
            x @ W[:, W.shape[1] - d_k :],
            x @ W[:, d_k : W.shape[1] - d_k],
        ),
        ["projections-swapped"],
    ),
    "np.split into three": (
        lambda x, W, d_k: tuple(np.split(x @ W, 3, axis=-1)),
        ["split-in-thirds"],
    ),
    "thirds by integer division": (
        lambda x, W, d_k: tuple(
            x @ m
            for m in _split(W, [0, W.shape[1] // 3, 2 * (W.shape[1] // 3)], [W.shape[1] // 3] * 3)
        ),
        ["split-in-thirds"],
    ),
    "every block d_k wide": (
        lambda x, W, d_k: tuple(x @ W[:, i * d_k : (i + 1) * d_k] for i in range(3)),
        ["v-width-d-k"],
    ),
    "np.split into three, k first": (
        lambda x, W, d_k: (lambda a, b, c: (b, a, c))(*np.split(x @ W, 3, axis=-1)),
        ["projections-swapped", "split-in-thirds"],
    ),
}

VARIANCE = {
    "√d_k and the scale not squared": (
        lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: math.sqrt(d_k) * scale * var_q * var_k,
        ["variance-is-sqrt-dk", "scale-not-squared"],
    ),
    "scale not squared, variances added": (
        lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: d_k * scale * (var_q + var_k),
        ["scale-not-squared", "variances-added"],
    ),
    "√d_k, variances added": (
        lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: math.sqrt(d_k) * (var_q + var_k) * scale**2,
        ["variance-is-sqrt-dk", "variances-added"],
    ),
    "no width, scale not squared": (
        lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: scale * var_q * var_k,
        ["variance-is-one", "scale-not-squared"],
    ),
    "standard deviation returned": (
        lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: math.sqrt(d_k * var_q * var_k) * scale,
        ["std-not-variance"],
    ),
    "standard deviation of the sum, √d_k forgotten inside": (
        lambda d_k, scale=1.0, var_q=1.0, var_k=1.0: (
            math.sqrt(math.sqrt(d_k) * var_q * var_k) * scale
        ),
        None,  # a square root of a wrong variance: off the mistake model, nothing named
    ),
}


JACOBIAN = {
    "the diagonal p(1 - p) alone": (
        lambda p: p[..., :, None] * (1 - p)[..., :, None] * np.eye(p.shape[-1]),
        ["jacobian-diagonal-only"],
    ),
    "np.diag of p(1 - p)": (
        lambda p: np.diag(p * (1 - p)),
        ["jacobian-diagonal-only", "jacobian-one-row-only"],
    ),
    "outer product minus the diagonal": (
        lambda p: np.einsum("...i,...j->...ij", p, p) - p[..., :, None] * np.eye(p.shape[-1]),
        ["jacobian-sign"],
    ),
}


def _choose_by_sum(raw_scores, min_entropy):
    def total_entropy(c):
        z = c * raw_scores
        e = np.exp(z - z.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
        return -(p * np.log(np.maximum(p, 1e-300))).sum()  # over rows and keys

    lo, hi = 0.0, 1.0
    while total_entropy(hi) >= min_entropy:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if total_entropy(mid) >= min_entropy else (lo, mid)
    return lo


CHOOSE = {"entropies summed over the rows": (_choose_by_sum, ["entropy-summed-over-rows"])}

NORMALISE = {
    "divided by the row maximum": (
        lambda x: x / x.max(axis=-1, keepdims=True),
        ["divided-by-row-max"],
    ),
    "divided by the sum of everything": (lambda x: x / np.sum(x), ["sum-over-everything"]),
}


def _norm(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


SCORE_MATRIX = {
    "K @ Q.T": (lambda Q, K: K @ Q.T, ["scores-transposed"]),
    "row by row, as in relevance_scores": (
        lambda Q, K: (Q * K).sum(axis=-1),
        ["paired-by-position"],
    ),
    "np.einsum over matching positions, scaled": (
        lambda Q, K: np.einsum("id,id->i", Q, K) / np.sqrt(Q.shape[-1]),
        ["paired-by-position", "scaled-too-early"],
    ),
    "K @ Q.T / √d_k": (
        lambda Q, K: K @ Q.T / np.sqrt(Q.shape[-1]),
        ["scores-transposed", "scaled-too-early"],
    ),
    "np.dot(Q, K) / √d_k": (
        lambda Q, K: np.dot(Q, K) / np.sqrt(K.shape[-1]),
        ["keys-not-transposed", "scaled-too-early"],
    ),
    "cosines, transposed": (
        lambda Q, K: _norm(K) @ _norm(Q).T,
        ["cosine-not-dot", "scores-transposed"],
    ),
    "einsum over the keys": (lambda Q, K: np.einsum("qd,kd->qd", Q, K), ["summed-over-wrong-axis"]),
}

RELEVANCE = {
    "query @ keys / √d_k": (
        lambda q, K: q @ K / np.sqrt(q.shape[-1]),
        ["keys-not-transposed", "scaled-too-early"],
    ),
    "cosines": (lambda q, K: _norm(K) @ _norm(q), ["cosine-not-dot"]),
    "products, scaled": (
        lambda q, K: K * q / np.sqrt(q.shape[-1]),
        ["elementwise-not-summed", "scaled-too-early"],
    ),
}


def _lookup(names, numbers, query_pos, n_names, n_numbers, *, target, leak=False, swap=False):
    rows = np.arange(len(names))
    a, b = np.eye(n_names)[names], np.eye(n_numbers)[numbers]
    tokens = np.concatenate([b, a] if swap else [a, b], axis=-1)
    asked = np.eye(n_names)[names[rows, query_pos]]
    num = np.eye(n_numbers)[numbers[rows, query_pos]] if leak else np.zeros((len(names), n_numbers))
    query = np.concatenate([num, asked] if swap else [asked, num], axis=-1)[:, None]
    return tokens, query, target(names, numbers, query_pos, rows)


LOOKUP = {
    "target from token 0, query is the whole token": (
        lambda *a: _lookup(*a, target=lambda na, nu, qp, r: nu[:, 0], leak=True),
        ["target-from-wrong-token", "query-leaks-answer"],
    ),
    "numbers first, target is the position": (
        lambda *a: _lookup(*a, target=lambda na, nu, qp, r: qp.copy(), swap=True),
        ["target-is-position", "feature-blocks-swapped"],
    ),
    "target is the name": (
        lambda *a: _lookup(*a, target=lambda na, nu, qp, r: na[r, qp]),
        ["target-is-name"],
    ),
}

CASES = [
    pytest.param(exercise, fn, ids, id=f"{exercise}: {label}")
    for exercise, table in (
        ("softmax", SOFTMAX),
        ("attend", ATTEND),
        ("attend", ATTEND_PAIRS),
        ("linear_forward", LINEAR),
        ("project", PROJECT),
        ("score_variance", VARIANCE),
        ("softmax_jacobian", JACOBIAN),
        ("choose_scale", CHOOSE),
        ("normalise_rows", NORMALISE),
        ("score_matrix", SCORE_MATRIX),
        ("relevance_scores", RELEVANCE),
        ("lookup_batch", LOOKUP),
    )
    for label, (fn, ids) in table.items()
]


@pytest.mark.parametrize(("exercise", "fn", "expected"), CASES)
def test_a_realistic_submission_is_named_by_what_it_does(exercise, fn, expected, graders_feedback):
    if expected is None:  # wrong in a way no registered mistake explains: named as nothing
        report = checks.run(exercise, fn)
        assert not report.ok and not report.inference_error
        assert report.misconceptions == []
        return
    assert_named(exercise, fn, expected)


def test_a_submission_off_the_mistake_model_is_not_named():
    def squared_width(d_k, scale=1.0, var_q=1.0, var_k=1.0):
        return (scale * d_k) ** 2 * var_q * var_k

    report = checks.run("score_variance", squared_width)
    assert not report.ok and report.misconceptions == []


def _naive_softmax(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


STEPS = [
    ("softmax", _naive_softmax, "unstable-softmax"),
    ("linear_forward", lambda x, weight, bias=None: x @ weight + bias, "weight-not-transposed"),
    ("project", lambda x, W, d_k: tuple(np.split(x @ W, 3, axis=-1)), "split-in-thirds"),
    ("attend", _attend_min_shift, "shift-by-min"),
    ("normalise_rows", lambda x: x / x.sum(), "sum-over-everything"),
]


@pytest.mark.parametrize(("exercise", "fn", "mid"), STEPS, ids=[s[0] for s in STEPS])
def test_the_first_failure_asks_and_the_same_mistake_again_names_it(exercise, fn, mid, monkeypatch):
    """Exercises 2.1, 2.2, 3.1, 3.2 and lesson 00's practice: a first failure shows what was
    measured and the mistake's question, not its cause; the same mistake again names it."""
    monkeypatch.delenv(checks.FEEDBACK_ENV, raising=False)
    checks.forget()
    (m,) = [m for m in checks.get_exercise(exercise).misconceptions if m.id == mid]
    with pytest.raises(AssertionError) as first:
        checks.check(exercise, fn)
    assert m.question in str(first.value)
    assert m.explanation not in str(first.value)
    with pytest.raises(AssertionError) as second:
        checks.check(exercise, fn)
    assert m.explanation in str(second.value)
    checks.forget()
