"""Exercise of lesson 15: LayerNorm, the first part of the block around attention.

* ``layer_norm(x, weight, bias, eps=1e-5) -> y`` — each position's features (the last
  axis) to mean 0 and variance 1, then times ``weight`` plus ``bias`` (torch, float64).

Lesson 15's other exercise, ``gpt2_weights`` (15.2: the course GPT's weights under the
names of Hugging Face's ``GPT2LMHeadModel``), is in :mod:`attnlib.checks.ex_gpt2`.

It diagnoses by measurement (:mod:`attnlib.checks._core`): the probes read, from the
learner's own outputs, the axis over which they have mean 0 and a fixed spread, whether the
mean was subtracted, the variance the rows come out with (1, or (d − 1)/d when the variance
was divided by d − 1, or about 1 over the input's variance when the square root is
missing), where ``eps`` entered (a row of small variance with a large ``eps``), and what
``weight`` and ``bias`` do (outputs with and without them compared feature by feature:
missing, swapped, or applied before normalising).

Hidden cases (the grader's) draw their sizes and numbers from generators seeded with fixed
integers that the grader mixes with a seed of its own per run.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlib.block import layer_norm as _layer_norm
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, fmt

F64 = torch.float64

# ----------------------------------------------------------------------------------------
# layer_norm(x, weight, bias, eps=1e-5) -> (..., d_model)
# ----------------------------------------------------------------------------------------


def _ln_reference(x, weight, bias, eps=1e-5):
    return _layer_norm(x, weight, bias, eps=eps)


def _ln_case(g, label, shape, *, eps=None, scale=1.0, offset=0.0, constant_row=False):
    x = torch.randn(*shape, generator=g, dtype=F64) * scale + offset
    if constant_row:
        x.reshape(-1, shape[-1])[0] = 1.5  # one position whose features are all equal
    d = shape[-1]
    weight = 1.0 + 0.5 * torch.randn(d, generator=g, dtype=F64)
    bias = 0.5 * torch.randn(d, generator=g, dtype=F64)
    return Case(label, (x, weight, bias), {} if eps is None else {"eps": eps})


def _ln_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1501)
    return [
        _ln_case(g, "(batch=2, seq=3, d_model=5), weight and bias", (2, 3, 5), scale=2.0),
        _ln_case(g, "(seq=4, d_model=6), eps=0.1, small features", (4, 6), eps=0.1, scale=0.3),
        _ln_case(g, "(batch=1, seq=3, d_model=4), one constant row", (1, 3, 4), constant_row=True),
        _ln_case(g, "(batch=3, seq=2, d_model=8), features around 100", (3, 2, 8), offset=100.0),
    ]


def _ln_hidden_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1502)
    rng = np.random.default_rng(1503)
    batch, seq = (int(n) for n in rng.integers(1, 5, size=2))
    d1, d2 = (int(n) for n in rng.integers(3, 12, size=2))
    eps = float(rng.uniform(0.02, 0.5))
    return [
        _ln_case(g, f"hidden: (batch={batch}, seq={seq + 1}, d_model={d1})", (batch, seq + 1, d1)),
        _ln_case(
            g,
            f"hidden: (seq={seq + 2}, d_model={d2}), eps={eps:.3f}",
            (seq + 2, d2),
            eps=eps,
            scale=0.2,
        ),  # fmt: skip
        _ln_case(g, f"hidden: (seq=3, d_model={d1}), one constant row", (3, d1), constant_row=True),
    ]


_AXES = {"last": (-1,), "positions": (-2,), "first": (0,), "all": None}


def _dims(x, axis: str) -> tuple[int, ...]:
    return tuple(range(x.ndim)) if _AXES[axis] is None else _AXES[axis]


def _ln_build(
    *,
    axis="last",
    centre=True,
    variance="biased",
    eps_at="inside",
    root=True,
    affine="both",
    affine_at="after",
):
    """layer_norm with the given choices; the defaults give the correct function.

    ``axis``: "last" (each position's features), "positions" (-2), "first" (0) or "all";
    ``centre``: subtract the mean or not (dividing by the root mean square); ``variance``:
    "biased" (divide by d) or "unbiased" (by d − 1, torch's default ``var``/``std``);
    ``eps_at``: "inside" the square root, "outside" it (added to the standard deviation), or
    "missing"; ``root``: False divides by the variance (+ eps) itself, no square root;
    ``affine``: "both", "none", "weight" (weight only), "bias" (bias only) or "swapped"
    (times bias, plus weight); ``affine_at``: "after" normalising or "before" (the input
    scaled and shifted, then normalised).
    """

    def fn(x, weight, bias, eps=1e-5):
        if affine_at == "before":
            x = x * weight + bias
        dims = _dims(x, axis)
        n = math.prod(x.shape[i] for i in dims)
        c = x - x.mean(dim=dims, keepdim=True) if centre else x
        var = (c * c).sum(dim=dims, keepdim=True) / (n - 1 if variance == "unbiased" else n)
        if not root:
            y = c / (var + (0.0 if eps_at == "missing" else eps))
        elif eps_at == "inside":
            y = c / torch.sqrt(var + eps)
        elif eps_at == "outside":
            y = c / (torch.sqrt(var) + eps)
        else:
            y = c / torch.sqrt(var)
        if affine_at == "before":
            return y
        if affine == "swapped":
            return y * bias + weight
        if affine in ("both", "weight"):
            y = y * weight
        if affine in ("both", "bias"):
            y = y + bias
        return y

    return fn


def _ln_probe_x() -> torch.Tensor:
    g = torch.Generator().manual_seed(1511)
    return torch.randn(3, 5, 4, generator=g, dtype=F64) * 3.0 + 1.0  # (batch, seq, d_model)


_AXIS_NAMES = {
    "positions": "axis -2 (the 5 positions of each sequence)",
    "first": "axis 0 (the 3 sequences of the batch)",
    "all": "the whole (3, 5, 4) array at once",
}


def _ln_shape(learner, x, weight, bias, eps):
    o = learner(x.clone(), weight.clone(), bias.clone(), eps=eps)
    y = o.array(0) if o.ok and o.arity == 1 else None
    return y if y is not None and y.shape == tuple(x.shape) and np.isfinite(y).all() else None


def _ln_statistics(y: np.ndarray):
    """(axis, centred, variance, n) under which ``y`` (3, 5, 4) is normalised, or None."""
    for axis in ("last", "positions", "first", "all"):
        dims = _dims(y, axis)
        n = math.prod(y.shape[i] for i in dims)
        m1 = y.mean(axis=dims, keepdims=True)
        for centred in (True, False):
            if centred and np.abs(m1).max() > 1e-6:
                continue
            c = y - m1 if centred else y
            s = (c * c).mean(axis=dims)
            for variance, target in (("biased", 1.0), ("unbiased", (n - 1) / n)):
                if np.abs(s - target).max() < 1e-6:
                    return axis, centred, variance, n
    return None


def _ln_not_rooted(x, y1) -> tuple[str, Finding] | None:
    """variance-not-rooted: rows centred and divided by their variance, not its root.

    Returns the variance convention that reproduces ``y1`` and the finding, or None.
    """
    ones, zeros = torch.ones(4, dtype=F64), torch.zeros(4, dtype=F64)
    for variance in ("biased", "unbiased"):
        model = _ln_build(root=False, variance=variance)(x, ones, zeros, 1e-12).numpy()
        if close(y1, model, 1e-5, 1e-7):  # float32 computations too
            var_in = x.var(dim=-1, correction=0).numpy().ravel()
            var_out = y1.var(axis=-1).ravel()
            i, j = int(var_in.argmax()), int(var_in.argmin())
            return variance, Finding(
                "variance-not-rooted",
                f"your rows come out with mean 0 but not variance 1: a row of variance "
                f"{fmt(float(var_in[i]))} comes out with variance {fmt(float(var_out[i]))}, "
                f"one of variance {fmt(float(var_in[j]))} with {fmt(float(var_out[j]))}.",
            )
    return None


_W = [0.5, -1.5, 2.0, 3.0]
_B = [0.3, -0.7, 1.1, 2.0]
_WB = "with weight = [0.5, -1.5, 2, 3] and bias = [0.3, -0.7, 1.1, 2]"


def _infer_layer_norm(learner) -> list[Finding]:
    x = _ln_probe_x()
    ones, zeros = torch.ones(4, dtype=F64), torch.zeros(4, dtype=F64)
    y1 = _ln_shape(learner, x, ones, zeros, 1e-12)
    if y1 is None:
        return []
    # weight and bias used the other way round: with weight 1 and bias 0 every output is 1,
    # and the plain normalised output is what weight 0 and bias 1 give.
    swapped = bool(np.abs(y1 - 1).max() < 1e-9)
    if swapped:
        y1 = _ln_shape(learner, x, zeros, ones, 1e-12)
        if y1 is None:
            return []
    found = []
    stats = _ln_statistics(y1)
    if stats is None:
        rooted = _ln_not_rooted(x, y1)
        if rooted is None:
            return []
        variance, finding = rooted
        axis, centred, eps_at, n = "last", True, "inside", 4
        if variance == "unbiased":
            found.append(
                Finding(
                    "variance-with-bessel",
                    "your output equals the centred rows divided by their variance computed "
                    "with a divisor of 3 for rows of 4 numbers, not 4.",
                )
            )
        found.append(finding)
    else:
        axis, centred, variance, n = stats
        eps_at = "inside"
        if axis != "last":
            found.append(
                Finding(
                    "normalised-wrong-axis",
                    f"for a (batch=3, seq=5, d_model=4) input your output has a fixed mean and "
                    f"spread over {_AXIS_NAMES[axis]}, not over each position's 4 features.",
                )
            )
        if not centred:
            rows = y1.mean(axis=_dims(y1, axis))
            found.append(
                Finding(
                    "mean-not-subtracted",
                    f"the means of your output's rows are not 0 (from {fmt(float(rows.min()))} "
                    f"to {fmt(float(rows.max()))}), while the means of their squares are 1.",
                )
            )
        if variance == "unbiased":
            found.append(
                Finding(
                    "variance-with-bessel",
                    f"your normalised rows of {n} numbers come out with variance "
                    f"{fmt((n - 1) / n)} = {n - 1}/{n}, not 1.",
                )
            )
        # eps: rows of variance ≈ 0.01 with eps = 0.05, where it matters most.
        g = torch.Generator().manual_seed(1512)
        x2 = torch.randn(3, 5, 4, generator=g, dtype=F64) * 0.1
        w2, b2 = (zeros, ones) if swapped else (ones, zeros)
        y2 = _ln_shape(learner, x2, w2, b2, 0.05)
        if y2 is not None:
            for where in ("inside", "outside", "missing"):
                model = _ln_build(axis=axis, centre=centred, variance=variance, eps_at=where)
                # the three differ by ~10 % here: a float32 computation is told apart as well
                if close(y2, model(x2, ones, zeros, 0.05).numpy(), 1e-4, 1e-6):
                    eps_at = where
                    if where == "outside":
                        right = _ln_reference(x2, ones, zeros, 0.05).var(dim=-1, correction=0)
                        found.append(
                            Finding(
                                "eps-outside-sqrt",
                                "with eps = 0.05, rows of variance about 0.01 come out with "
                                f"variance {fmt(float(y2.var(axis=-1).mean()))} on average, "
                                "where torch's LayerNorm gives "
                                f"{fmt(float(right.mean()))}.",
                            )
                        )
                    elif where == "missing":
                        found.append(
                            Finding(
                                "eps-missing",
                                "with eps = 0.05 and rows of variance about 0.01 your output "
                                "is the same as with eps = 0.",
                            )
                        )
                    break
    # weight and bias: the same input with and without them, feature by feature.
    w = torch.tensor(_W, dtype=F64)
    b = torch.tensor(_B, dtype=F64)
    y3 = _ln_shape(learner, x, w, b, 1e-12)
    if y3 is None:
        return found
    wn, bn = w.numpy(), b.numpy()
    if swapped:
        if close(y3, y1 * bn + wn, 1e-5, 1e-6):
            found.append(
                Finding(
                    "weight-bias-swapped",
                    f"{_WB} your output is your plain output (weight 0, bias 1) times bias, "
                    "plus weight; with weight 1 and bias 0 every output is 1.",
                )
            )
        return found
    if close(y3, y1 * wn + bn, 1e-7, 1e-9):
        return found
    what = {"none": y1, "weight": y1 * wn, "bias": y1 + bn}
    said = {
        "none": "is the same as with weight 1 and bias 0",
        "weight": "equals your output at weight 1 and bias 0, times weight",
        "bias": "equals your output at weight 1 and bias 0, plus bias",
    }
    for key, value in what.items():
        if close(y3, value, 1e-7, 1e-9):
            found.append(Finding("weight-bias-missing", f"{_WB} your output {said[key]}."))
            return found
    before = _ln_build(
        axis=axis,
        centre=centred,
        variance=variance,
        eps_at=eps_at,
        root=not any(f.id == "variance-not-rooted" for f in found),
        affine_at="before",
    )
    if close(y3, before(x, w, b, 1e-12).numpy(), 1e-5, 1e-6):
        found.append(
            Finding(
                "affine-before-normalising",
                f"{_WB} your output is still normalised: its rows have the same mean and "
                "spread as with weight 1 and bias 0.",
            )
        )
    return found


register(
    Exercise(
        name="layer_norm",
        summary="layer_norm(x, weight, bias, eps=1e-5) -> each position normalised over its "
        "features, then times weight plus bias",
        reference=_ln_reference,
        make_cases=_ln_cases,
        make_hidden_cases=_ln_hidden_cases,
        rtol=1e-7,
        atol=1e-9,
        forbidden=(
            "attnlib.block.layer_norm",
            "torch.nn.functional.layer_norm",
            "torch.layer_norm",
        ),
        infer=_infer_layer_norm,
        build=_ln_build,
        exclusive=(
            # dividing by the variance is read on the last axis of centred rows only
            frozenset({"variance-not-rooted", "normalised-wrong-axis"}),
            frozenset({"variance-not-rooted", "mean-not-subtracted"}),
            # without the square root there is no standard deviation to add eps to
            frozenset({"variance-not-rooted", "eps-outside-sqrt"}),
            frozenset({"variance-not-rooted", "eps-missing"}),
            # weight and bias applied before normalising: how they are applied is undone
            frozenset({"affine-before-normalising", "weight-bias-missing"}),
            frozenset({"affine-before-normalising", "weight-bias-swapped"}),
        ),
        misconceptions=(
            Misconception(
                "normalised-wrong-axis",
                "LayerNorm normalises each position on its own, over its d_model features: the "
                "mean and the variance are taken over the last axis, keeping that axis so that "
                "they line up with the features again. Statistics over the positions, the batch "
                "or the whole tensor mix positions together, so one position's output depends "
                "on the others.",
                (_ln_build(axis="positions"), _ln_build(axis="first"), _ln_build(axis="all")),
                {"axis": "positions"},
                question="For an input of shape (batch, seq, d_model), over which numbers does "
                "your output have mean 0 and a fixed spread? Which numbers should share one "
                "mean and one variance?",
            ),
            Misconception(
                "mean-not-subtracted",
                "The mean is not subtracted: dividing a row by the root of the mean of its "
                "squares is RMSNorm, another normalisation. LayerNorm centres each row first, "
                "then divides by the square root of the centred row's variance plus eps.",
                (_ln_build(centre=False),),
                {"centre": False},
                question="Your output's rows have mean squares of 1 but means that are not 0. "
                "What does the formula do to each row before it divides?",
            ),
            Misconception(
                "variance-with-bessel",
                "The variance is divided by d - 1 (Bessel's correction, which torch's var and "
                "std apply unless told otherwise). LayerNorm's variance is the plain mean of "
                "the squared deviations, divided by d: ask torch for no correction, or take "
                "the mean of the squared deviations yourself.",
                (_ln_build(variance="unbiased"),),
                {"variance": "unbiased"},
                question="Your normalised rows of d numbers come out with variance (d - 1)/d, "
                "not 1. By what did your variance divide the sum of squared deviations, and "
                "what does torch's variance divide by when you give it only the axis?",
            ),
            Misconception(
                "eps-outside-sqrt",
                "eps is added to the standard deviation. It belongs under the square root, "
                "added to the variance: the centred row divided by the square root of "
                "(variance + eps). The two differ most for rows of small variance, and only "
                "the second is what torch and GPT-2 compute.",
                (_ln_build(eps_at="outside"),),
                {"eps_at": "outside"},
                question="Your output differs most for rows of small variance with a large "
                "eps. In the formula's denominator, what is eps added to: the variance, or "
                "the standard deviation?",
            ),
            Misconception(
                "eps-missing",
                "eps is not used. It is added to the variance under the square root: it keeps "
                "a row whose features are all equal (variance 0) from dividing by zero, and "
                "the model was trained with it there.",
                (_ln_build(eps_at="missing"),),
                {"eps_at": "missing"},
                question="Your output with eps = 0.05 is the same as with eps = 0. What would "
                "your function return for a row whose features are all equal?",
            ),
            Misconception(
                "variance-not-rooted",
                "The centred row is divided by the variance plus eps, not by its square root. "
                "Dividing by the variance leaves a row with variance about 1 over its old "
                "variance; only the standard deviation, the square root of (variance + eps), "
                "brings every row to variance 1.",
                (_ln_build(root=False),),
                {"root": False},
                question="Your rows come out with mean 0, but a row that had a large spread "
                "comes out with a small one. What does dividing by a row's variance do to its "
                "spread, and what must you divide by so that every row ends with variance 1?",
            ),
            Misconception(
                "weight-bias-missing",
                "weight and bias are the learned gain and shift of each feature, applied after "
                "normalising: the normalised row is multiplied by weight, then bias is added. "
                "Without them every layer's input would be stuck at mean 0 and variance 1.",
                (_ln_build(affine="none"), _ln_build(affine="weight"), _ln_build(affine="bias")),
                {"affine": "none"},
                question="Run your function with weight 1 and bias 0, then with the weight and "
                "bias of a case, and compare the two outputs feature by feature. What should "
                "each of them do to a feature?",
            ),
            Misconception(
                "weight-bias-swapped",
                "weight and bias are used the other way round: the normalised row is "
                "multiplied by bias and weight is added to it. weight is the gain (it "
                "multiplies) and bias the shift (it is added).",
                (_ln_build(affine="swapped"),),
                {"affine": "swapped"},
                question="Compare your output with your output at weight 1 and bias 0, feature "
                "by feature: by which of the two vectors is each feature multiplied, and "
                "which is added?",
            ),
            Misconception(
                "affine-before-normalising",
                "weight and bias are applied to the input, before normalising, so the "
                "normalisation undoes them: every row still comes out with mean 0 and variance "
                "1. They are the gain and shift of the output: normalise first, then multiply "
                "by weight and add bias.",
                (_ln_build(affine_at="before"),),
                {"affine_at": "before"},
                question="With a weight and bias that are not 1 and 0, your output's rows still "
                "have mean 0 and variance 1. Should they? At which step of the formula do "
                "weight and bias act?",
            ),
        ),
    )
)
