"""Exercises of lesson 15: the block around attention.

* ``layer_norm(x, weight, bias, eps=1e-5) -> y`` — each position's features (the last
  axis) to mean 0 and variance 1, then times ``weight`` plus ``bias`` (torch, float64);
* ``block_forward(x, ln_1, attn, ln_2, mlp) -> x`` — one pre-LN decoder block given its
  four parts: ``x + attn(ln_1(x))``, then the MLP read through ``ln_2``, added the same way.

Both diagnose by measurement (:mod:`attnlib.checks._core`). For ``layer_norm`` the probes
read, from the learner's own outputs, the axis over which they have mean 0 and a fixed
spread, whether the mean was subtracted, the variance the rows come out with (1, or
(d − 1)/d when the variance was divided by d − 1), where ``eps`` entered (a row of small
variance with a large ``eps``), and what ``weight`` and ``bias`` do (outputs with and
without them compared feature by feature). For ``block_forward`` the learner's block is
run on real parts (two different LayerNorms, causal attention, an MLP; float64) and its
output is matched against every way of wiring the same parts — where the LayerNorm sits,
which residual additions are there, whether ``ln_1`` serves both sublayers, which sublayer
comes first — so each mistake is named by the wiring that reproduces the output.

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


def _ln_build(*, axis="last", centre=True, variance="biased", eps_at="inside", affine="both"):
    """layer_norm with the given choices; the defaults give the correct function.

    ``axis``: "last" (each position's features), "positions" (-2), "first" (0) or "all";
    ``centre``: subtract the mean or not (dividing by the root mean square); ``variance``:
    "biased" (divide by d) or "unbiased" (by d − 1, torch's default ``var``/``std``);
    ``eps_at``: "inside" the square root, "outside" it (added to the standard deviation), or
    "missing"; ``affine``: "both", "none", "weight" (weight only) or "bias" (bias only).
    """

    def fn(x, weight, bias, eps=1e-5):
        dims = _dims(x, axis)
        n = math.prod(x.shape[i] for i in dims)
        c = x - x.mean(dim=dims, keepdim=True) if centre else x
        var = (c * c).sum(dim=dims, keepdim=True) / (n - 1 if variance == "unbiased" else n)
        if eps_at == "inside":
            y = c / torch.sqrt(var + eps)
        elif eps_at == "outside":
            y = c / (torch.sqrt(var) + eps)
        else:
            y = c / torch.sqrt(var)
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


def _infer_layer_norm(learner) -> list[Finding]:
    x = _ln_probe_x()
    ones, zeros = torch.ones(4, dtype=F64), torch.zeros(4, dtype=F64)
    y1 = _ln_shape(learner, x, ones, zeros, 1e-12)
    stats = None if y1 is None else _ln_statistics(y1)
    if stats is None:
        return []
    axis, centred, variance, n = stats
    found = []
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
                f"the means of your output's rows are not 0 (from {fmt(float(rows.min()))} to "
                f"{fmt(float(rows.max()))}), while the means of their squares are 1.",
            )
        )
    if variance == "unbiased":
        found.append(
            Finding(
                "variance-with-bessel",
                f"your normalised rows of {n} numbers come out with variance "
                f"{fmt((n - 1) / n)} = {n - 1}/{n}, not 1: the variance was divided by "
                f"{n - 1}, not {n}.",
            )
        )
    # eps: rows of variance ≈ 0.01 with eps = 0.05, where it matters most.
    g = torch.Generator().manual_seed(1512)
    x2 = torch.randn(3, 5, 4, generator=g, dtype=F64) * 0.1
    y2 = _ln_shape(learner, x2, ones, zeros, 0.05)
    if y2 is not None:
        for eps_at in ("inside", "outside", "missing"):
            model = _ln_build(axis=axis, centre=centred, variance=variance, eps_at=eps_at)
            # the three differ by ~10 % here: a float32 computation is told apart as well
            if close(y2, model(x2, ones, zeros, 0.05).numpy(), 1e-4, 1e-6):
                if eps_at == "outside":
                    found.append(
                        Finding(
                            "eps-outside-sqrt",
                            "with eps = 0.05 and rows of variance about 0.01 your output "
                            "equals the centred row divided by (its standard deviation + eps).",
                        )
                    )
                elif eps_at == "missing":
                    found.append(
                        Finding(
                            "eps-missing",
                            "with eps = 0.05 and rows of variance about 0.01 your output is "
                            "the same as with eps = 0: eps is not used.",
                        )
                    )
                break
    # weight and bias: the same input with and without them, feature by feature.
    w = torch.tensor([0.5, -1.5, 2.0, 3.0], dtype=F64)
    b = torch.tensor([0.3, -0.7, 1.1, 2.0], dtype=F64)
    y3 = _ln_shape(learner, x, w, b, 1e-12)
    if y3 is not None:
        wn, bn = w.numpy(), b.numpy()
        what = {
            "none": y1,
            "weight": y1 * wn,
            "bias": y1 + bn,
        }
        said = {
            "none": "is the same as with weight 1 and bias 0: neither is applied",
            "weight": "is your plain output times weight, with no bias added",
            "bias": "is your plain output plus bias, not multiplied by weight",
        }
        if not close(y3, y1 * wn + bn, 1e-7, 1e-9):
            for key, value in what.items():
                if close(y3, value, 1e-7, 1e-9):
                    found.append(
                        Finding(
                            "weight-bias-missing",
                            f"with weight = [0.5, -1.5, 2, 3] and bias = [0.3, -0.7, 1.1, 2] "
                            f"your output {said[key]}.",
                        )
                    )
                    break
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
        misconceptions=(
            Misconception(
                "normalised-wrong-axis",
                "LayerNorm normalises each position on its own, over its d_model features: "
                "take the mean and the variance over the last axis (dim=-1, keepdim=True), "
                "not over the positions, the batch or the whole tensor.",
                (_ln_build(axis="positions"), _ln_build(axis="first"), _ln_build(axis="all")),
                {"axis": "positions"},
            ),
            Misconception(
                "mean-not-subtracted",
                "The mean is not subtracted: dividing x by the root of the mean of x² is "
                "RMSNorm, another normalisation. LayerNorm centres each row first, then divides "
                "by the square root of the centred row's variance (plus eps).",
                (_ln_build(centre=False),),
                {"centre": False},
            ),
            Misconception(
                "variance-with-bessel",
                "The variance is divided by d − 1 (Bessel's correction: torch's var() and "
                "std() do this by default). LayerNorm uses the plain mean of the squared "
                "deviations, divided by d: var(dim=-1, unbiased=False), or correction=0.",
                (_ln_build(variance="unbiased"),),
                {"variance": "unbiased"},
            ),
            Misconception(
                "eps-outside-sqrt",
                "eps is added to the standard deviation. It belongs under the square root, "
                "added to the variance: (x − mean) / √(var + eps). The two differ most for rows "
                "of small variance, and only the second is what torch and GPT-2 compute.",
                (_ln_build(eps_at="outside"),),
                {"eps_at": "outside"},
            ),
            Misconception(
                "eps-missing",
                "eps is not used. Add it to the variance under the square root: it keeps a "
                "row whose features are all equal (variance 0) from dividing by zero, and the "
                "model was trained with it there.",
                (_ln_build(eps_at="missing"),),
                {"eps_at": "missing"},
            ),
            Misconception(
                "weight-bias-missing",
                "weight and bias are the learned gain and shift of each feature, applied after "
                "normalising: multiply by weight, then add bias. Without them every layer's "
                "input would be stuck at mean 0 and variance 1.",
                (_ln_build(affine="none"), _ln_build(affine="weight"), _ln_build(affine="bias")),
                {"affine": "none"},
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# block_forward(x, ln_1, attn, ln_2, mlp) -> (batch, seq, d_model)
# ----------------------------------------------------------------------------------------


def _block_build(*, norm="pre", residual="both", shared=False, order="attn_first"):
    """block_forward with the given wiring; the defaults give the correct (pre-LN) block.

    ``norm``: "pre" (each sublayer reads ln(x)), "post" (ln after the addition, the 2017
    Transformer's), "normalised" (the residual adds to the normalised stream: h = ln(x),
    x = h + sublayer(h)) or "none" (no LayerNorm); ``residual``: "both", "none",
    "attn_only" or "mlp_only"; ``shared``: ln_1 for both sublayers; ``order``:
    "attn_first" or "mlp_first" (the two lines swapped, each with its own LayerNorm).
    """

    def fn(x, ln_1, attn, ln_2, mlp):
        lns = {"attn": ln_1, "mlp": ln_1 if shared else ln_2}
        subs = [("attn", attn), ("mlp", mlp)]
        if order == "mlp_first":
            subs.reverse()
        for name, sub in subs:
            ln = lns[name]
            keep = residual in ("both", f"{name}_only")
            if norm == "pre":
                out = sub(ln(x))
                x = x + out if keep else out
            elif norm == "post":
                out = sub(x)
                x = ln(x + out) if keep else ln(out)
            elif norm == "normalised":
                h = ln(x)
                out = sub(h)
                x = h + out if keep else out
            else:
                out = sub(x)
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


_DEFAULT_WIRING = {"norm": "pre", "residual": "both", "shared": False, "order": "attn_first"}
_WIRINGS = sorted(
    (
        dict(zip(_DEFAULT_WIRING, values, strict=True))
        for values in itertools.product(
            ("pre", "post", "normalised", "none"),
            ("both", "none", "attn_only", "mlp_only"),
            (False, True),
            ("attn_first", "mlp_first"),
        )
    ),
    key=lambda w: sum(w[k] != v for k, v in _DEFAULT_WIRING.items()),
)  # the fewest changes first: the simplest wiring that reproduces an output names it


def _wiring_text(w) -> str:
    """The block a wiring computes, as one line of pseudo-code."""
    lines = []
    names = ["attn", "mlp"] if w["order"] == "attn_first" else ["mlp", "attn"]
    for name in names:
        ln = "ln_1" if name == "attn" or w["shared"] else "ln_2"
        keep = w["residual"] in ("both", f"{name}_only")
        if w["norm"] == "pre":
            step = f"x + {name}({ln}(x))" if keep else f"{name}({ln}(x))"
        elif w["norm"] == "post":
            step = f"{ln}(x + {name}(x))" if keep else f"{ln}({name}(x))"
        elif w["norm"] == "normalised":
            step = f"{ln}(x) + {name}({ln}(x))" if keep else f"{name}({ln}(x))"
        else:
            step = f"x + {name}(x)" if keep else f"{name}(x)"
        lines.append(f"x = {step}")
    return "; then ".join(lines)


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
        found.append(Finding("layer-norm-shared", f"{yours}: ln_1 serves both sublayers."))
    if w["order"] == "mlp_first":
        found.append(Finding("mlp-before-attention", f"{yours}: the MLP runs first."))
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
        ),
        misconceptions=(
            Misconception(
                "post-ln",
                "The LayerNorm is applied after the addition, ln(x + sublayer(x)): the 2017 "
                "Transformer's post-LN block. GPT-2's block is pre-LN: each sublayer reads a "
                "normalised copy, ln(x), and its output is added to x itself, so the stream "
                "itself is never normalised inside the block.",
                (_block_build(norm="post"),),
                {"norm": "post"},
            ),
            Misconception(
                "layer-norm-missing",
                "ln_1 and ln_2 are not used: attention and the MLP read the raw stream. Each "
                "sublayer reads its LayerNorm's output — ln_1 before attention, ln_2 before "
                "the MLP.",
                (_block_build(norm="none"),),
                {"norm": "none"},
            ),
            Misconception(
                "residual-from-normalised",
                "The sublayer's output is added to the normalised stream (h = ln(x); "
                "x = h + sublayer(h)). The residual path carries x itself: normalise only "
                "the copy the sublayer reads, and add its output to the x you were given.",
                (_block_build(norm="normalised"),),
                {"norm": "normalised"},
            ),
            Misconception(
                "residual-missing",
                "A sublayer's output replaces x instead of being added to it. Both attention "
                "and the MLP write into the residual stream: x = x + (what the sublayer "
                "computes), so that x passes through the block unchanged and gradients have "
                "a direct path back.",
                (
                    _block_build(residual="none"),
                    _block_build(residual="attn_only"),
                    _block_build(residual="mlp_only"),
                ),
                {"residual": "none"},
            ),
            Misconception(
                "layer-norm-shared",
                "ln_1 is used before both sublayers. The block has two LayerNorms with "
                "their own weight and bias: ln_1 before attention, ln_2 before the MLP.",
                (_block_build(shared=True),),
                {"shared": True},
            ),
            Misconception(
                "mlp-before-attention",
                "The MLP runs before attention. In GPT-2's block attention comes first: the "
                "positions exchange information, then the MLP works on each position.",
                (_block_build(order="mlp_first"),),
                {"order": "mlp_first"},
            ),
        ),
    )
)
