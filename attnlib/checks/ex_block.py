"""Exercises of lesson 15: the block around attention.

* ``layer_norm(x, weight, bias, eps=1e-5) -> y`` — each position's features (the last
  axis) to mean 0 and variance 1, then times ``weight`` plus ``bias`` (torch, float64);
* ``block_forward(x, ln_1, attn, ln_2, mlp) -> x`` — one pre-LN decoder block given its
  four parts: ``x + attn(ln_1(x))``, then the MLP read through ``ln_2``, added the same way
  (no longer an exercise of the lesson, which shows the two lines; kept, with its
  mistakes, for a course that asks it);
* ``gpt2_weights(model) -> {name: tensor}`` — exercise 15.2, below.

The first two diagnose by measurement (:mod:`attnlib.checks._core`). For ``layer_norm`` the
probes read, from the learner's own outputs, the axis over which they have mean 0 and a
fixed spread, whether the mean was subtracted, the variance the rows come out with (1, or
(d − 1)/d when the variance was divided by d − 1, or about 1 over the input's variance when the
square root is missing), where ``eps`` entered (a row of small variance with a large
``eps``), and what ``weight`` and ``bias`` do (outputs with and without them compared
feature by feature: missing, swapped, or applied before normalising). For ``block_forward``
the learner's block is run on real parts (two different LayerNorms, causal attention, an
MLP; float64) and its output is matched against every way of wiring the same parts — where
the LayerNorm sits, which residual additions are there, whether one LayerNorm serves both
sublayers or the two are swapped, which sublayer comes first, whether both read the block's
input (the parallel block) — so each mistake is named by the wiring that reproduces the
output.

``gpt2_weights(model) -> {name: tensor}`` (exercise 15.2): the course GPT's weights under
the names of Hugging Face's ``GPT2LMHeadModel``. The check is handed a function of
``(model, tokens)`` that loads the learner's dict into ``GPT2LMHeadModel`` with
:func:`attnlib.gpt.run_gpt2` (strict) and returns its float64 logits and cached keys and
values; the cases are models of several shapes with every weight moved off its start (one
with ``vocab_size == d_model``, so that a transposed ``lm_head`` loads there and shows in
the numbers). A mapping that does not load is read from the load's own report (a Conv1D
weight, or ``lm_head``, with its two sizes swapped); one that loads is matched against the
mappings with attention's square ``c_proj`` or ``c_attn``'s blocks untransposed and with
``c_attn``'s blocks in each other order, and the findings say what the learner's outputs
show (block 0's cached keys are the course model's queries, the logits differ while the
cache agrees...).

Hidden cases (the grader's) draw their sizes and numbers from generators seeded with fixed
integers that the grader mixes with a seed of its own per run.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from attnlib.block import MLP, GPTAttention, LayerNorm
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


# ----------------------------------------------------------------------------------------
# block_forward(x, ln_1, attn, ln_2, mlp) -> (batch, seq, d_model)
# ----------------------------------------------------------------------------------------


def _block_build(
    *, norm="pre", residual="both", shared=False, order="attn_first", swapped=False, parallel=False
):
    """block_forward with the given wiring; the defaults give the correct (pre-LN) block.

    ``norm``: "pre" (each sublayer reads ln(x)), "post" (ln after the addition, the 2017
    Transformer's), "normalised" (the residual adds to the normalised stream: h = ln(x),
    x = h + sublayer(h)) or "none" (no LayerNorm); ``residual``: "both", "none",
    "attn_only" or "mlp_only"; ``shared``: the first sublayer's LayerNorm for both;
    ``order``: "attn_first" or "mlp_first" (the two lines swapped, each with its own
    LayerNorm); ``swapped``: ln_2 before attention and ln_1 before the MLP; ``parallel``:
    both sublayers read the block's input (GPT-J's parallel block), their outputs added.
    """

    def fn(x, ln_1, attn, ln_2, mlp):
        lns = {"attn": ln_2, "mlp": ln_1} if swapped else {"attn": ln_1, "mlp": ln_2}
        if shared:
            lns["mlp"] = lns["attn"]
        subs = [("attn", attn), ("mlp", mlp)]
        if order == "mlp_first":
            subs.reverse()
        x0 = x
        for name, sub in subs:
            ln = lns[name]
            src = x0 if parallel else x
            keep = residual in ("both", f"{name}_only")
            if norm == "pre":
                out = sub(ln(src))
                x = x + out if keep else out
            elif norm == "post":
                out = sub(src)
                x = ln(x + out) if keep else ln(out)
            elif norm == "normalised":
                h = ln(src)
                out = sub(h)
                x = (ln(x) if parallel else h) + out if keep else out
            else:
                out = sub(src)
                x = x + out if keep else out
        return x

    return fn


def _block_parts(g, d_model, n_heads, d_ff):
    """Two different LayerNorms, causal attention and an MLP (float64, evaluation mode),
    every parameter drawn from ``g`` so that the grader's seed changes them all."""
    ln_1, ln_2 = LayerNorm(d_model), LayerNorm(d_model)
    attn, mlp = GPTAttention(d_model, n_heads), MLP(d_model, d_ff)
    parts = [m.to(F64).eval() for m in (ln_1, attn, ln_2, mlp)]
    with torch.no_grad():
        for m in (ln_1, ln_2):
            m.weight.copy_(1.0 + 0.4 * torch.randn(d_model, generator=g, dtype=F64))
            m.bias.copy_(0.4 * torch.randn(d_model, generator=g, dtype=F64))
        for m in (attn, mlp):
            for p in m.parameters():
                fan_in = p.shape[-1] if p.ndim == 2 else 4.0
                p.copy_(torch.randn(p.shape, generator=g, dtype=F64) / math.sqrt(fan_in))
    for m in parts:
        m.requires_grad_(False)
    return parts


def _block_case(g, label, batch, seq, d_model, n_heads, d_ff):
    parts = _block_parts(g, d_model, n_heads, d_ff)
    x = torch.randn(batch, seq, d_model, generator=g, dtype=F64) * 2.0 + 0.5  # the stream
    return Case(label, (x, *parts))


def _block_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1521)
    return [
        _block_case(g, "batch=2, seq=5, d_model=8, 2 heads, d_ff=12", 2, 5, 8, 2, 12),
        _block_case(g, "batch=1, seq=3, d_model=6, 3 heads, d_ff=24", 1, 3, 6, 3, 24),
        _block_case(g, "batch=3, seq=4, d_model=4, 1 head, d_ff=16", 3, 4, 4, 1, 16),
    ]


def _block_hidden_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1522)
    rng = np.random.default_rng(1523)
    batch, seq, n_heads = (int(n) for n in rng.integers(1, 4, size=3))
    d_model = n_heads * int(rng.integers(2, 5))
    d_ff = int(rng.integers(5, 20))
    return [
        _block_case(
            g,
            f"hidden: batch={batch}, seq={seq + 2}, d_model={d_model}, {n_heads} heads, "
            f"d_ff={d_ff}",
            batch,
            seq + 2,
            d_model,
            n_heads,
            d_ff,
        ),  # fmt: skip
        _block_case(g, "hidden: batch=2, seq=6, d_model=10, 2 heads, d_ff=7", 2, 6, 10, 2, 7),
    ]


_DEFAULT_WIRING = {
    "norm": "pre",
    "residual": "both",
    "shared": False,
    "order": "attn_first",
    "swapped": False,
    "parallel": False,
}
_WIRINGS = sorted(
    (
        dict(zip(_DEFAULT_WIRING, values, strict=True))
        for values in itertools.product(
            ("pre", "post", "normalised", "none"),
            ("both", "none", "attn_only", "mlp_only"),
            (False, True),
            ("attn_first", "mlp_first"),
            (False, True),
            (False, True),
        )
    ),
    key=lambda w: sum(w[k] != v for k, v in _DEFAULT_WIRING.items()),
)  # the fewest changes first: the simplest wiring that reproduces an output names it


def _wiring_text(w) -> str:
    """The block a wiring computes, as one line of pseudo-code."""
    lines = []
    names = ["attn", "mlp"] if w["order"] == "attn_first" else ["mlp", "attn"]
    lns = {"attn": "ln_2", "mlp": "ln_1"} if w["swapped"] else {"attn": "ln_1", "mlp": "ln_2"}
    if w["shared"]:
        lns["mlp"] = lns["attn"]
    for name in names:
        ln = lns[name]
        src = "x0" if w["parallel"] else "x"
        keep = w["residual"] in ("both", f"{name}_only")
        if w["norm"] == "pre":
            step = f"x + {name}({ln}({src}))" if keep else f"{name}({ln}({src}))"
        elif w["norm"] == "post":
            step = f"{ln}(x + {name}({src}))" if keep else f"{ln}({name}({src}))"
        elif w["norm"] == "normalised":
            step = f"{ln}(x) + {name}({ln}({src}))" if keep else f"{name}({ln}({src}))"
        else:
            step = f"x + {name}({src})" if keep else f"{name}({src})"
        lines.append(f"x = {step}")
    start = "x0 = x; then " if w["parallel"] else ""
    return start + "; then ".join(lines)


_BLOCK_PROBE: list = []


def _block_probe():
    if not _BLOCK_PROBE:
        g = torch.Generator().manual_seed(1531)
        _BLOCK_PROBE.append(_block_case(g, "probe", 2, 4, 6, 2, 10).args)
    return _BLOCK_PROBE[0]


def _infer_block(learner) -> list[Finding]:
    x, ln_1, attn, ln_2, mlp = _block_probe()
    o = learner(x.clone(), ln_1, attn, ln_2, mlp)
    y = o.array(0) if o.ok and o.arity == 1 else None
    if y is None or y.shape != tuple(x.shape):
        return []
    with torch.no_grad():
        w = next(
            (
                w
                for w in _WIRINGS
                if close(y, _block_build(**w)(x, ln_1, attn, ln_2, mlp).numpy(), 1e-7, 1e-9)
            ),
            None,
        )
    if w is None or w == _DEFAULT_WIRING:
        return []
    yours = f"your output is the block x = {_wiring_text(w)}"
    found = []
    if w["norm"] == "post":
        found.append(Finding("post-ln", f"{yours}: each LayerNorm after its addition."))
    if w["norm"] == "none":
        found.append(Finding("layer-norm-missing", f"{yours}: ln_1 and ln_2 are never applied."))
    if w["norm"] == "normalised":
        found.append(
            Finding(
                "residual-from-normalised",
                f"{yours}: the sublayer's output is added to the normalised stream, not to x.",
            )
        )
    if w["residual"] != "both":
        which = {"none": "attention's or the MLP's", "attn_only": "the MLP's",
                 "mlp_only": "attention's"}[w["residual"]]  # fmt: skip
        replaces = f"{which} output replaces x instead of adding to it"
        found.append(Finding("residual-missing", f"{yours}: {replaces}."))
    if w["shared"]:
        found.append(Finding("layer-norm-shared", f"{yours}: one LayerNorm serves both sublayers."))
    if w["swapped"]:
        found.append(
            Finding("layer-norms-swapped", f"{yours}: attention reads ln_2, the MLP ln_1.")
        )
    if w["order"] == "mlp_first":
        found.append(Finding("mlp-before-attention", f"{yours}: the MLP runs first."))
    if w["parallel"]:
        found.append(
            Finding("parallel-sublayers", f"{yours}: both sublayers read x0, the block's input.")
        )
    return found


register(
    Exercise(
        name="block_forward",
        summary="block_forward(x, ln_1, attn, ln_2, mlp) -> one pre-LN decoder block: "
        "attention, then the MLP, each reading a LayerNorm and adding to x",
        reference=_block_build(),
        make_cases=_block_cases,
        make_hidden_cases=_block_hidden_cases,
        rtol=1e-7,
        atol=1e-9,
        infer=_infer_block,
        build=_block_build,
        exclusive=(
            # without LayerNorms there is nothing to share
            frozenset({"layer-norm-missing", "layer-norm-shared"}),
            # without residuals, adding to the normalised stream adds to nothing
            frozenset({"residual-from-normalised", "residual-missing"}),
            # without LayerNorms there is nothing to swap
            frozenset({"layer-norm-missing", "layer-norms-swapped"}),
            # sublayers that both read the block's input run in no order
            frozenset({"mlp-before-attention", "parallel-sublayers"}),
        ),
        misconceptions=(
            Misconception(
                "post-ln",
                "The LayerNorm is applied after the addition, to x plus the sublayer's output: "
                "the 2017 Transformer's post-LN block. GPT-2's block is pre-LN: each sublayer "
                "reads a normalised copy of x, and its output is added to x itself, so the "
                "stream is never normalised inside the block.",
                (_block_build(norm="post"),),
                {"norm": "post"},
                question="In your block, does the stream itself pass through a LayerNorm, or "
                "only the copy each sublayer reads? Which of the two does GPT-2's block do?",
            ),
            Misconception(
                "layer-norm-missing",
                "ln_1 and ln_2 are not used: attention and the MLP read the raw stream. Each "
                "sublayer reads its LayerNorm's output: ln_1 before attention, ln_2 before the "
                "MLP.",
                (_block_build(norm="none"),),
                {"norm": "none"},
                question="Your output does not change when ln_1 and ln_2 change. What does each "
                "sublayer read?",
            ),
            Misconception(
                "residual-from-normalised",
                "The sublayer's output is added to the normalised stream (the LayerNorm's "
                "output), not to x. The residual path carries x itself: normalise only the copy "
                "the sublayer reads, and add its output to the x you were given.",
                (_block_build(norm="normalised"),),
                {"norm": "normalised"},
                question="What is the sublayer's output added to in your block: the stream as "
                "it came in, or its normalised copy? Which one should pass through unchanged?",
            ),
            Misconception(
                "residual-missing",
                "A sublayer's output replaces x instead of being added to it. Both attention "
                "and the MLP write into the residual stream: x becomes x plus what the "
                "sublayer computes, so that x passes through the block and gradients have a "
                "direct path back.",
                (
                    _block_build(residual="none"),
                    _block_build(residual="attn_only"),
                    _block_build(residual="mlp_only"),
                ),
                {"residual": "none"},
                question="If attention and the MLP both returned zeros, what would your block "
                "return? What should it return?",
            ),
            Misconception(
                "layer-norm-shared",
                "ln_1 is used before both sublayers. The block has two LayerNorms with their "
                "own weight and bias: ln_1 before attention, ln_2 before the MLP.",
                (_block_build(shared=True),),
                {"shared": True},
                question="Your output does not change when ln_2 changes. Which LayerNorm does "
                "your MLP read through?",
            ),
            Misconception(
                "layer-norms-swapped",
                "The two LayerNorms are swapped: attention reads through ln_2 and the MLP "
                "through ln_1. Each LayerNorm learned the gain and shift for its own "
                "sublayer: ln_1 belongs before attention, ln_2 before the MLP.",
                (_block_build(swapped=True),),
                {"swapped": True},
                question="Both LayerNorms are used, but is each where the numbers in their "
                "names say? Which one does attention read through in yours?",
            ),
            Misconception(
                "mlp-before-attention",
                "The MLP runs before attention. In GPT-2's block attention comes first: the "
                "positions exchange information, then the MLP works on each position.",
                (_block_build(order="mlp_first"),),
                {"order": "mlp_first"},
                question="In which order do your two sublayers run? Which of them lets the "
                "positions exchange information, and which one should see the result?",
            ),
            Misconception(
                "parallel-sublayers",
                "Attention and the MLP both read the stream as it came into the block, and "
                "both outputs are added at once (the parallel block of GPT-J and PaLM). In "
                "GPT-2's block they run one after the other: the MLP reads the stream after "
                "attention's output has been added to it.",
                (_block_build(parallel=True),),
                {"parallel": True},
                question="Does your MLP see what attention just added to the stream, or the "
                "stream from before attention ran?",
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# gpt2_weights(model) -> {GPT-2 name: tensor}, checked through GPT2LMHeadModel
# ----------------------------------------------------------------------------------------

_ORDERS = ("qkv", "qvk", "kqv", "kvq", "vqk", "vkq")


def _gpt2_weights_build(*, transpose="all", order="qkv", names="gpt2", head="copied"):
    """The mapping of a course GPT's weights to GPT-2's names, with the given choices.

    Returns ``fn(model, tokens)``: what ``GPT2LMHeadModel`` computes with the mapped weights
    (:func:`attnlib.gpt.run_gpt2`: logits, cached keys, cached values). The defaults give
    the correct mapping. ``transpose``: "all" (every Conv1D weight as (in, out)),
    "c_proj" (attention's square output projection copied as (out, in)), "c_attn_blocks"
    (W_q, W_k, W_v, each (out, in), set side by side: the right shape, each block
    untransposed), "c_attn_blocks_c_proj" (both of these: every weight of attention as
    (out, in)) or "none" (no Conv1D weight transposed); ``order``: the order of the
    query, key and value blocks in ``c_attn`` (weights and biases); ``names``: "gpt2" or
    "no_prefix" (the blocks, embeddings and ``ln_f`` without ``transformer.``); ``head``:
    "copied" or "transposed" (``lm_head.weight``, an ``nn.Linear`` in GPT-2, transposed as
    if it were a Conv1D).
    """
    from attnlib.gpt import run_gpt2

    def weights_of(model):
        top = "transformer." if names == "gpt2" else ""
        lm = model.lm_head.weight
        sd = {
            top + "wte.weight": model.wte.weight,
            top + "wpe.weight": model.wpe.weight,
            top + "ln_f.weight": model.ln_f.weight,
            top + "ln_f.bias": model.ln_f.bias,
            "lm_head.weight": lm.T if head == "transposed" else lm,
        }
        for i, block in enumerate(model.h):
            p, a = f"{top}h.{i}.", block.attn
            parts = {"q": a.W_q, "k": a.W_k, "v": a.W_v}
            ws = [parts[c].weight for c in order]
            if transpose in ("c_attn_blocks", "c_attn_blocks_c_proj"):
                c_attn = torch.cat(ws, dim=1)  # (d_model, 3 d_model), each block (out, in)
            elif transpose == "none":
                c_attn = torch.cat(ws)  # (3 d_model, d_model)
            else:
                c_attn = torch.cat(ws).T
            flip = transpose in ("all", "c_attn_blocks")  # attention's square c_proj
            sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = block.ln_1.weight, block.ln_1.bias
            sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = block.ln_2.weight, block.ln_2.bias
            sd[p + "attn.c_attn.weight"] = c_attn
            sd[p + "attn.c_attn.bias"] = torch.cat([parts[c].bias for c in order])
            sd[p + "attn.c_proj.weight"] = a.W_o.weight.T if flip else a.W_o.weight
            sd[p + "attn.c_proj.bias"] = a.W_o.bias
            for name in ("c_fc", "c_proj"):
                lin = getattr(block.mlp, name)
                w = lin.weight if transpose == "none" else lin.weight.T
                sd[p + f"mlp.{name}.weight"], sd[p + f"mlp.{name}.bias"] = w, lin.bias
        return {k: v.detach().clone().contiguous() for k, v in sd.items()}

    def fn(model, tokens):
        return run_gpt2(model, weights_of(model), tokens)

    return fn


def _gpt2_reference(model, tokens):
    from attnlib.gpt import gpt2_state_dict, run_gpt2

    return run_gpt2(model, gpt2_state_dict(model), tokens)


def _gpt2_model(g, vocab, d_model, n_heads, n_layers, max_len, d_ff):
    """A course GPT in float64 with every weight moved away from its start (gains, biases,
    both embeddings), drawn from ``g`` so that the grader's seed changes them all."""
    from attnlib.gpt import GPT

    model = GPT(vocab, d_model, n_heads, n_layers, max_len, d_ff=d_ff).to(F64)
    with torch.no_grad():
        for name, p in model.named_parameters():  # lm_head.weight is wte.weight: set once
            r = torch.randn(p.shape, generator=g, dtype=F64)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1.0 + 0.3 * r)  # gains away from 1
            elif p.ndim == 1:
                p.copy_(0.3 * r)  # biases and shifts away from 0
            elif name.startswith(("wte", "wpe")):
                p.copy_(0.5 * r)
            else:
                p.copy_(r / math.sqrt(p.shape[1]))  # (out, in): keeps the stream's scale
    return model.eval().requires_grad_(False)


def _gpt2_case(g, label, batch, seq, vocab, d_model, n_heads, n_layers, max_len, d_ff):
    model = _gpt2_model(g, vocab, d_model, n_heads, n_layers, max_len, d_ff)
    tokens = torch.randint(0, vocab, (batch, seq), generator=g)
    return Case(label, (model, tokens))


def _gpt2_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1541)
    return [
        _gpt2_case(g, "2 blocks, d_model=16, 4 heads, d_ff=64, vocab 11; batch 2, seq 7",
                   2, 7, 11, 16, 4, 2, 24, 64),
        _gpt2_case(g, "1 block, d_model=12, 3 heads, d_ff=20, vocab 9; batch 3, seq 5",
                   3, 5, 9, 12, 3, 1, 16, 20),
        _gpt2_case(g, "3 blocks, d_model=8, 2 heads, d_ff=24, vocab 8; batch 1, seq 10",
                   1, 10, 8, 8, 2, 3, 12, 24),
    ]  # fmt: skip


def _gpt2_hidden_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1542)
    rng = np.random.default_rng(1543)
    n_heads, d_head = (int(n) for n in rng.integers(2, 5, size=2))
    n_layers, batch = (int(n) for n in rng.integers(1, 4, size=2))
    vocab, d_ff = int(rng.integers(5, 20)), int(rng.integers(6, 40))
    d_model = n_heads * d_head
    return [
        _gpt2_case(
            g,
            f"hidden: {n_layers} block(s), d_model={d_model}, {n_heads} heads, d_ff={d_ff}, "
            f"vocab {vocab}; batch {batch}, seq 9",
            batch, 9, vocab, d_model, n_heads, n_layers, 12, d_ff,
        ),
        _gpt2_case(g, "hidden: 2 blocks, d_model=10, 5 heads, d_ff=10, vocab 10; batch 2, seq 6",
                   2, 6, 10, 10, 5, 2, 8, 10),
    ]  # fmt: skip


_GPT2_PROBE: list = []


def _gpt2_probe():
    if not _GPT2_PROBE:
        g = torch.Generator().manual_seed(1551)
        _GPT2_PROBE.append(_gpt2_case(g, "probe", 2, 6, 9, 12, 3, 2, 8, 20).args)
    return _GPT2_PROBE[0]


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(", ") if n)


def _load_errors(message: str):
    """What ``load_state_dict`` reported: (missing, unexpected, [(name, got, want)])."""
    import re

    def listed(label):
        m = re.search(label + r' key\(s\) in state_dict: ((?:"[^"]+"(?:, )?)+)', message)
        return re.findall(r'"([^"]+)"', m.group(1)) if m else []

    sizes = [
        (
            name,
            tuple(int(n) for n in got.split(", ") if n),
            tuple(int(n) for n in want.split(", ") if n),
        )
        for name, got, want in re.findall(
            r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\(\[([\d, ]*)\]\) "
            r"from checkpoint, the shape in current model is torch\.Size\(\[([\d, ]*)\]\)",
            message,
        )
    ]
    return listed("Missing"), listed("Unexpected"), sizes


_CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def _course_qkv(model, tokens) -> dict[str, np.ndarray]:
    """Block 0's queries, keys and values in the course model: (batch, n_heads, seq, d_head)."""
    from attnlib.heads import split_heads

    with torch.no_grad():
        pos = torch.arange(tokens.shape[1])
        block = model.h[0]
        h = block.ln_1(model.wte(tokens) + model.wpe(pos))
        return {
            name: split_heads(getattr(block.attn, f"W_{c}")(h), model.n_heads).numpy()
            for c, name in (("q", "queries"), ("k", "keys"), ("v", "values"))
        }


def _gpt2_silent_findings(model, tokens, got, transpose, order) -> list[Finding]:
    """What a mapping that loads but computes otherwise shows: measured on its outputs."""
    logits, keys, values = got
    with torch.no_grad():
        ours = model(tokens).numpy()
    gap = fmt(float(np.abs(logits - ours).max()))
    course = _course_qkv(model, tokens)

    def which(x):
        return next((n for n, v in course.items() if close(x, v, 1e-9, 1e-10)), None)

    k_is, v_is = which(keys[0]), which(values[0])
    found = []
    if transpose != "all":
        found.append(
            Finding(
                "conv1d-not-transposed",
                "every tensor of yours has GPT-2's shape and loads, yet the logits differ "
                f"from the course model's by up to {gap}"
                + (
                    "; block 0's cached keys and values are the course model's."
                    if (k_is, v_is) == ("keys", "values")
                    else "; block 0's cached keys match none of the course model's queries, "
                    "keys or values."
                    if k_is is None
                    else "."
                ),
            )
        )
    if order != "qkv":
        said = (
            f"block 0's cached keys are the course model's {k_is} and its cached values the "
            f"course model's {v_is}"
            if k_is and v_is
            else "block 0's cached keys or values are not the course model's"
        )
        found.append(Finding("qkv-order", f"every tensor of yours loads, but {said}."))
    return found


def _infer_gpt2(learner) -> list[Finding]:
    model, tokens = _gpt2_probe()
    o = learner(model, tokens)
    if not o.ok:
        _, _, sizes = _load_errors(o.error())
        found = []
        swapped = [(n, got, want) for n, got, want in sizes if got == want[::-1]]
        conv = [s for s in swapped if s[0].endswith(_CONV1D)]
        linear = [s for s in swapped if not s[0].endswith(_CONV1D)]
        if conv:
            n, got, want = conv[0]
            found.append(
                Finding(
                    "conv1d-not-transposed",
                    f"loading your weights reports {n} with shape {got} where GPT2LMHeadModel "
                    f"holds {want} ({len(conv)} such tensor(s)).",
                )
            )
        if linear:
            n, got, want = linear[0]
            found.append(
                Finding(
                    "linear-transposed",
                    f"loading your weights reports {n} with shape {got} where GPT2LMHeadModel "
                    f"holds {want}.",
                )
            )
        return found
    if o.arity != 3 or any(o.array(i) is None for i in range(3)):
        return []
    got = [o.array(i) for i in range(3)]
    with torch.no_grad():
        silent = ("all", "c_proj", "c_attn_blocks", "c_attn_blocks_c_proj")
        for transpose, order in itertools.product(silent, _ORDERS):
            if transpose == "all" and order == "qkv":
                continue
            model_out = _gpt2_weights_build(transpose=transpose, order=order)(model, tokens)
            if all(close(g, m.numpy(), 1e-9, 1e-10) for g, m in zip(got, model_out, strict=True)):
                return _gpt2_silent_findings(model, tokens, got, transpose, order)
    return []


register(
    Exercise(
        name="gpt2_weights",
        summary="gpt2_weights(model) -> the course GPT's weights under GPT2LMHeadModel's "
        "names, checked by what GPT2LMHeadModel computes with them (float64 logits, cached "
        "keys and values)",
        reference=_gpt2_reference,
        make_cases=_gpt2_cases,
        make_hidden_cases=_gpt2_hidden_cases,
        rtol=1e-9,
        atol=1e-10,
        forbidden=("attnlib.gpt.gpt2_state_dict",),
        infer=_infer_gpt2,
        build=_gpt2_weights_build,
        exclusive=(
            # a mapping that does not load hides what its numbers would have been
            frozenset({"linear-transposed", "qkv-order"}),
            frozenset({"linear-transposed", "conv1d-not-transposed"}),
        ),
        misconceptions=(
            Misconception(
                "conv1d-not-transposed",
                "GPT-2's Conv1D stores its weight as (input features, output features), the "
                "transpose of a Linear weight, which is (output features, input features). "
                "Every Conv1D weight (c_attn, attention's c_proj, the MLP's c_fc and c_proj) "
                "is the transpose of the course's Linear weight, and in c_attn each of the "
                "three blocks is transposed. A matrix that is not square fails to load the "
                "wrong way round; a square one (attention's c_proj, d_model by d_model) loads "
                "and silently multiplies by the transpose.",
                (
                    _gpt2_weights_build(transpose="c_proj"),
                    _gpt2_weights_build(transpose="c_attn_blocks"),
                    _gpt2_weights_build(transpose="c_attn_blocks_c_proj"),
                ),
                {"transpose": "c_proj"},
                question="GPT-2 keeps its linear maps in Conv1D modules. Which way round does "
                "a Conv1D hold its weight, inputs first or outputs first, and which way round "
                "does torch's Linear? Check every matrix you copy, the square ones too: a "
                "square matrix loads either way.",
            ),
            Misconception(
                "qkv-order",
                "GPT-2 splits the output of c_attn into three equal parts and reads them as "
                "query, key and value, in that order; the blocks of its weight and bias must "
                "be stacked in the same order. Another order gives every head the wrong "
                "projections (keys made by the query weights, for example), and since all "
                "three blocks have the same shape, nothing fails to load.",
                tuple(_gpt2_weights_build(order=o) for o in _ORDERS[1:]),
                {"order": "kqv"},
                question="Your weights load, yet the logits and the cached keys differ. "
                "c_attn makes the query, the key and the value in one product and then cuts "
                "its output into three: in which order does GPT-2 read the three parts, and "
                "in which order did you stack them?",
            ),
            Misconception(
                "linear-transposed",
                "Only GPT-2's Conv1D layers (c_attn, c_proj, c_fc) store their weights "
                "transposed. lm_head is an ordinary Linear, as in the course's model, and the "
                "token and position embeddings are tables with one row per token or position "
                "in both models: these are copied as they are.",
                (_gpt2_weights_build(head="transposed"),),
                {"head": "transposed"},
                question="Loading reports a tensor whose two sizes are swapped, and it is not "
                "in a Conv1D layer. Which of GPT-2's modules are Conv1D, and which are "
                "ordinary Linear or Embedding modules?",
            ),
        ),
    )
)
