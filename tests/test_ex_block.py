"""Lesson 15's exercises: realistic submissions, named by measurement; the references
against independent oracles; the lesson's figure function in the projector style.

* ``layer_norm``: functions written the way learners write them (torch's ``var``/``std``
  with their default Bessel correction, ``eps`` added to the standard deviation, the wrong
  ``dim``, RMSNorm, a forgotten gain or shift, the variance without its square root, the
  gain and shift applied before normalising or the other way round), one mistake or two at
  once, each named with all of its ids; correct functions written differently pass with no
  diagnosis; the reference equals ``torch.nn.LayerNorm`` (and its gradient autograd's
  through it) in float64 on every visible and hidden case; torch's own layer norm earns
  nothing.
* ``gpt2_weights`` (checked through ``attnlib.gpt.run_gpt2``: GPT2LMHeadModel's float64
  logits and cached keys and values with the learner's state dict): mappings written other
  ways pass; a square Conv1D weight or c_attn's blocks left untransposed, c_attn's blocks in
  another order, a transposed lm_head, each named from what the load reports or from the
  numbers; names GPT-2 does not have fail with the load's own list of them; the reference
  equals the course model; the course's own mapping earns nothing.
"""

from __future__ import annotations

import contextlib
import io

import matplotlib
import numpy as np
import pytest
import torch
from named import assert_correct, assert_named, grader_check_hidden

from attnlib import checks, plot
from attnlib.checks import get_exercise

matplotlib.use("Agg")

# ----------------------------------------------------------------------------------------
# layer_norm(x, weight, bias, eps=1e-5)
# ----------------------------------------------------------------------------------------


def ln_right_var_correction(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, correction=0)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def ln_right_rsqrt_and_sum(x, weight, bias, eps=1e-5):
    d = x.shape[-1]
    c = x - x.sum(-1, keepdim=True) / d
    return weight * (c * torch.rsqrt((c * c).sum(-1, keepdim=True) / d + eps)) + bias


def ln_right_unbiased_false(x, weight, bias, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)
    return torch.addcmul(bias, (x - mean) / (var + eps).sqrt(), weight)


def ln_torch_var_default(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight + bias


def ln_std_plus_eps(x, weight, bias, eps=1e-5):
    mean, std = x.mean(-1, keepdim=True), x.std(-1, unbiased=False, keepdim=True)
    return (x - mean) / (std + eps) * weight + bias


def ln_torch_std_plus_eps(x, weight, bias, eps=1e-5):  # two mistakes: Bessel and eps outside
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) * weight + bias


def ln_over_positions(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-2, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-2, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def ln_over_everything(x, weight, bias, eps=1e-5):
    return (x - x.mean()) / torch.sqrt(x.var(correction=0) + eps) * weight + bias


def ln_rms(x, weight, bias, eps=1e-5):
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * weight + bias


def ln_forgot_affine(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + eps)


def ln_forgot_bias_and_var_default(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight


def ln_no_eps(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / ((x - mean) ** 2).mean(-1, keepdim=True).sqrt() * weight + bias


def ln_var_not_rooted(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / (var + eps) * weight + bias


def ln_torch_var_not_rooted(x, weight, bias, eps=1e-5):  # Bessel too
    return (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True) + eps) * weight + bias


def ln_gain_before(x, weight, bias, eps=1e-5):
    x = x * weight + bias
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, correction=0) + eps)


def ln_gain_before_bessel(x, weight, bias, eps=1e-5):
    x = weight * x + bias
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps)


def ln_weight_bias_swapped(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, correction=0)
    return (x - mean) / torch.sqrt(var + eps) * bias + weight


def ln_weight_bias_swapped_eps_outside(x, weight, bias, eps=1e-5):
    mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True, correction=0)
    return bias * (x - mean) / (std + eps) + weight


def ln_numpy_axis0(x, weight, bias, eps=1e-5):
    a = x.numpy()
    mean = a.mean(axis=0, keepdims=True)
    var = a.var(axis=0, keepdims=True)  # numpy's var divides by n: only the axis is wrong
    return (a - mean) / np.sqrt(var + eps) * weight.numpy() + bias.numpy()


@pytest.mark.parametrize(
    "fn", [ln_right_var_correction, ln_right_rsqrt_and_sum, ln_right_unbiased_false]
)
def test_correct_layer_norms_written_differently_pass(fn):
    assert_correct("layer_norm", fn)


@pytest.mark.parametrize(
    ("fn", "ids"),
    [
        (ln_torch_var_default, ["variance-with-bessel"]),
        (ln_std_plus_eps, ["eps-outside-sqrt"]),
        (ln_torch_std_plus_eps, ["variance-with-bessel", "eps-outside-sqrt"]),
        (ln_over_positions, ["normalised-wrong-axis"]),
        (ln_over_everything, ["normalised-wrong-axis"]),
        (ln_numpy_axis0, ["normalised-wrong-axis"]),
        (ln_rms, ["mean-not-subtracted"]),
        (ln_forgot_affine, ["weight-bias-missing"]),
        (ln_forgot_bias_and_var_default, ["variance-with-bessel", "weight-bias-missing"]),
        (ln_no_eps, ["eps-missing"]),
        (ln_var_not_rooted, ["variance-not-rooted"]),
        (ln_torch_var_not_rooted, ["variance-with-bessel", "variance-not-rooted"]),
        (ln_gain_before, ["affine-before-normalising"]),
        (ln_gain_before_bessel, ["variance-with-bessel", "affine-before-normalising"]),
        (ln_weight_bias_swapped, ["weight-bias-swapped"]),
        (ln_weight_bias_swapped_eps_outside, ["eps-outside-sqrt", "weight-bias-swapped"]),
    ],
    ids=lambda v: v.__name__ if callable(v) else "+".join(v),
)
def test_realistic_layer_norm_mistakes_are_named(fn, ids):
    assert_named("layer_norm", fn, ids)


def test_the_bessel_finding_says_what_was_measured():
    report = checks.run("layer_norm", ln_torch_var_default)
    (finding,) = report.findings
    assert "0.75 = 3/4" in finding.detail


def test_torch_layer_norm_earns_nothing():
    def via_torch(x, weight, bias, eps=1e-5):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    with pytest.raises(AssertionError, match="calls"):
        checks.check("layer_norm", via_torch)
    with pytest.raises(AssertionError):
        grader_check_hidden("layer_norm", via_torch)


def test_the_layer_norm_reference_is_torch_nn_layer_norm_on_every_case():
    ex = get_exercise("layer_norm")
    for case in ex.cases(hidden=True):
        x, weight, bias = case.args
        eps = case.kwargs.get("eps", 1e-5)
        oracle = torch.nn.LayerNorm(x.shape[-1], eps=eps, dtype=torch.float64)
        with torch.no_grad():
            oracle.weight.copy_(weight)
            oracle.bias.copy_(bias)
            expected = oracle(x)
        got = ex.reference(x, weight, bias, **case.kwargs)
        assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12), case.label


def test_the_layer_norm_reference_has_torchs_gradient():
    x = torch.randn(3, 4, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, dtype=torch.float64, requires_grad=True)
    b = torch.randn(7, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 4, 7, dtype=torch.float64)
    ours = torch.autograd.grad(get_exercise("layer_norm").reference(x, w, b), (x, w, b), g)
    theirs = torch.autograd.grad(torch.nn.functional.layer_norm(x, (7,), w, b), (x, w, b), g)
    for a, t in zip(ours, theirs, strict=True):
        assert torch.allclose(a, t, rtol=1e-10, atol=1e-12)


def test_the_stub_is_one_line_and_the_next_cells_get_the_reference(capsys):
    def layer_norm(x, weight, bias, eps=1e-5):
        raise NotImplementedError()

    checks.check("layer_norm", layer_norm)
    assert capsys.readouterr().err.startswith("✘ layer_norm: not written yet")
    fn = checks.yours_or_reference("layer_norm", layer_norm)
    assert fn is get_exercise("layer_norm").reference


# ----------------------------------------------------------------------------------------
# gpt2_weights(model), checked through run_gpt2(model, weights, tokens)
# ----------------------------------------------------------------------------------------


def _attn(block):
    a = block.attn
    return a, {"q": a.W_q, "k": a.W_k, "v": a.W_v}


def gpt2_map(model, *, conv=lambda w: w.T, order="qkv", top="transformer.", head=lambda w: w):
    """A mapping written as a learner might: one loop over the blocks, named choices."""
    sd = {
        top + "wte.weight": model.wte.weight,
        top + "wpe.weight": model.wpe.weight,
        top + "ln_f.weight": model.ln_f.weight,
        top + "ln_f.bias": model.ln_f.bias,
        "lm_head.weight": head(model.wte.weight),
    }
    for i, block in enumerate(model.h):
        p = f"{top}h.{i}."
        a, qkv = _attn(block)
        sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = block.ln_1.weight, block.ln_1.bias
        sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = block.ln_2.weight, block.ln_2.bias
        sd[p + "attn.c_attn.weight"] = torch.cat([conv(qkv[c].weight) for c in order], dim=1)
        sd[p + "attn.c_attn.bias"] = torch.cat([qkv[c].bias for c in order])
        sd[p + "attn.c_proj.weight"], sd[p + "attn.c_proj.bias"] = conv(a.W_o.weight), a.W_o.bias
        sd[p + "mlp.c_fc.weight"] = block.mlp.c_fc.weight.T
        sd[p + "mlp.c_fc.bias"] = block.mlp.c_fc.bias
        sd[p + "mlp.c_proj.weight"] = block.mlp.c_proj.weight.T
        sd[p + "mlp.c_proj.bias"] = block.mlp.c_proj.bias
    return {k: v.detach().clone() for k, v in sd.items()}


def through(mapping):
    from attnlib.gpt import run_gpt2

    def fn(model, tokens):
        return run_gpt2(model, mapping(model), tokens)

    fn.__name__ = mapping.__name__
    return fn


def gpt2_right_per_block(model):  # each block of c_attn transposed on its own, side by side
    return gpt2_map(model)


def gpt2_right_from_state_dict(model):  # by renaming the course's state dict
    ours = model.state_dict()
    sd = {}
    for name, t in ours.items():
        if name.startswith("h."):
            i, rest = name[2:].split(".", 1)
            p = f"transformer.h.{i}."
            if rest.startswith("attn.W_") and rest[7] in "qkv":
                continue
            if rest.startswith("attn.W_o"):
                rest = rest.replace("W_o", "c_proj")
            if rest.endswith("weight") and rest.split(".")[0] in ("attn", "mlp"):
                t = t.T
            sd[p + rest] = t
        elif name == "lm_head.weight":
            sd[name] = t
        else:
            sd["transformer." + name] = t
    for i in range(model.n_layers):
        w = [ours[f"h.{i}.attn.W_{c}.weight"] for c in "qkv"]
        b = [ours[f"h.{i}.attn.W_{c}.bias"] for c in "qkv"]
        sd[f"transformer.h.{i}.attn.c_attn.weight"] = torch.cat(w).T
        sd[f"transformer.h.{i}.attn.c_attn.bias"] = torch.cat(b)
    return {k: v.clone() for k, v in sd.items()}


def gpt2_square_not_transposed(model):  # c_attn fixed after the load error, c_proj forgotten
    sd = gpt2_map(model)
    for i, block in enumerate(model.h):
        sd[f"transformer.h.{i}.attn.c_proj.weight"] = block.attn.W_o.weight.detach().clone()
    return sd


def gpt2_blocks_side_by_side(model):  # the right shape, each block (out, in)
    return gpt2_map(model, conv=lambda w: w)


def gpt2_no_transposes(model):  # nothing transposed: the load refuses
    sd = gpt2_map(model, conv=lambda w: w)
    for i, block in enumerate(model.h):
        a, qkv = _attn(block)
        sd[f"transformer.h.{i}.attn.c_attn.weight"] = torch.cat([qkv[c].weight for c in "qkv"])
        for name in ("c_fc", "c_proj"):
            w = getattr(block.mlp, name).weight.detach().clone()
            sd[f"transformer.h.{i}.mlp.{name}.weight"] = w
    return {k: v.detach().clone() for k, v in sd.items()}


def gpt2_keys_first(model):
    return gpt2_map(model, order="kqv")


def gpt2_values_first_and_square(model):
    sd = gpt2_map(model, order="vqk")
    for i, block in enumerate(model.h):
        sd[f"transformer.h.{i}.attn.c_proj.weight"] = block.attn.W_o.weight.detach().clone()
    return sd


def gpt2_no_prefix(model):
    return gpt2_map(model, top="")


def gpt2_forgot_lm_head(model):
    sd = gpt2_map(model)
    del sd["lm_head.weight"]
    return sd


def gpt2_head_transposed(model):  # everything transposed, lm_head too
    return gpt2_map(model, head=lambda w: w.T.contiguous())


@pytest.mark.parametrize("mapping", [gpt2_right_per_block, gpt2_right_from_state_dict])
def test_correct_mappings_written_differently_pass(mapping):
    assert_correct("gpt2_weights", through(mapping))


@pytest.mark.parametrize(
    ("mapping", "ids"),
    [
        (gpt2_square_not_transposed, ["conv1d-not-transposed"]),
        (gpt2_blocks_side_by_side, ["conv1d-not-transposed"]),
        (gpt2_no_transposes, ["conv1d-not-transposed"]),
        (gpt2_keys_first, ["qkv-order"]),
        (gpt2_values_first_and_square, ["conv1d-not-transposed", "qkv-order"]),
        (gpt2_head_transposed, ["linear-transposed"]),
    ],
    ids=lambda v: v.__name__ if callable(v) else "+".join(v),
)
def test_realistic_mapping_mistakes_are_named(mapping, ids):
    assert_named("gpt2_weights", through(mapping), ids)


def test_the_mapping_findings_say_what_was_measured():
    (finding,) = checks.run("gpt2_weights", through(gpt2_no_transposes)).findings
    assert (
        "c_attn.weight with shape (36, 12) where GPT2LMHeadModel holds (12, 36)" in finding.detail
    )
    (finding,) = checks.run("gpt2_weights", through(gpt2_keys_first)).findings
    assert "block 0's cached keys are the course model's queries" in finding.detail


@pytest.mark.parametrize("mapping", [gpt2_no_prefix, gpt2_forgot_lm_head])
def test_a_mapping_that_does_not_load_shows_the_names_the_load_reports(mapping):
    report = checks.run("gpt2_weights", through(mapping))
    assert not report.ok and report.misconceptions == []
    assert "Missing key(s) in state_dict" in report.first_failure
    assert "lm_head.weight" in report.first_failure or "transformer.wte" in report.first_failure


def test_the_mapping_reference_is_the_course_model_on_every_case():
    ex = get_exercise("gpt2_weights")
    for case in ex.cases(hidden=True):
        model, tokens = case.args
        logits, keys, values = ex.reference(model, tokens)
        caches = model.new_caches(tokens.shape[0])
        with torch.no_grad():
            ours = model(tokens, caches)
        assert (logits - ours).abs().max() <= 1e-10, case.label
        assert ours.abs().max() > 1  # logits of a real size
        for layer, cache in enumerate(caches):
            k, v = cache.read()
            assert (keys[layer] - k).abs().max() <= 1e-10 and (
                values[layer] - v
            ).abs().max() <= 1e-10


def test_the_course_mapping_earns_nothing():
    from attnlib.gpt import gpt2_state_dict

    report = checks.run("gpt2_weights", through(gpt2_state_dict))
    assert report.called_reference == ["attnlib.gpt.gpt2_state_dict"]


def test_a_wrong_mapping_fails_the_graders_hidden_check():
    with pytest.raises(AssertionError, match="qkv-order"):
        grader_check_hidden("gpt2_weights", through(gpt2_keys_first))


# ----------------------------------------------------------------------------------------
# plot.curves: the projector style
# ----------------------------------------------------------------------------------------


def test_curves_keep_the_projector_style():
    from matplotlib.text import Text

    x = np.arange(1, 13)
    ax = plot.curves(
        x,
        {"a": np.geomspace(1, 1e4, 12), "b": np.ones(12), "c": np.linspace(1, 2, 12)},
        xlabel="block",
        ylabel="std",
        log=True,
        reference=1.0,
        reference_label="ref",
        integer_x=True,
    )
    fig = ax.figure
    fig.canvas.draw()
    assert fig.get_size_inches()[0] <= plot.MAX_WIDTH and fig.dpi >= 150
    small = [t.get_text() for t in fig.findobj(Text) if t.get_text() and t.get_fontsize() < 10]
    assert not small
    lines = ax.get_legend().get_lines()[:3]
    looks = {(ln.get_color(), ln.get_marker(), str(ln.get_linestyle())) for ln in lines}
    assert len({c for c, _, _ in looks}) == 3 and len({m for _, m, _ in looks}) == 3
    assert ax.get_yscale() == "log"
    matplotlib.pyplot.close("all")


def test_curves_refuse_mismatched_series():
    with pytest.raises(ValueError, match="series 'a' has shape"):
        plot.curves([1, 2, 3], {"a": [1, 2]}, xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="empty"):
        plot.curves([1, 2, 3], {}, xlabel="x", ylabel="y")


def test_check_prints_one_line_for_the_reference():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check("layer_norm", get_exercise("layer_norm").reference)
    assert out.getvalue() == "✔ layer_norm: correct on all 4 cases\n"
