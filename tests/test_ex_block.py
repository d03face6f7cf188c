"""Lesson 15's exercises: realistic submissions, named by measurement; the references
against independent oracles; the lesson's figure function in the projector style.

* ``layer_norm``: functions written the way learners write them (torch's ``var``/``std``
  with their default Bessel correction, ``eps`` added to the standard deviation, the wrong
  ``dim``, RMSNorm, a forgotten gain or shift), one mistake or two at once, each named with
  all of its ids; correct functions written differently pass with no diagnosis; the
  reference equals ``torch.nn.LayerNorm`` (and its gradient autograd's through it) in float64
  on every visible and hidden case; torch's own layer norm earns nothing.
* ``block_forward``: post-LN, missing additions, the residual added to the normalised
  stream, one LayerNorm for both sublayers, the MLP first, no LayerNorm; the reference equals
  attnlib's ``DecoderBlock`` and Hugging Face's ``GPT2Block`` carrying the same parts.
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
from attnlib.block import DecoderBlock
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
# block_forward(x, ln_1, attn, ln_2, mlp)
# ----------------------------------------------------------------------------------------


def block_right_named_steps(x, ln_1, attn, ln_2, mlp):
    a = attn(ln_1(x))
    h = x + a
    return h + mlp(ln_2(h))


def block_right_in_place(x, ln_1, attn, ln_2, mlp):
    x = x.clone()
    x += attn(ln_1(x))
    x += mlp(ln_2(x))
    return x


def block_post_ln(x, ln_1, attn, ln_2, mlp):
    x = ln_1(x + attn(x))
    return ln_2(x + mlp(x))


def block_no_residual(x, ln_1, attn, ln_2, mlp):
    return mlp(ln_2(attn(ln_1(x))))


def block_forgot_second_addition(x, ln_1, attn, ln_2, mlp):
    x = x + attn(ln_1(x))
    return mlp(ln_2(x))


def block_normalised_stream(x, ln_1, attn, ln_2, mlp):
    x = ln_1(x)
    x = x + attn(x)
    x = ln_2(x)
    return x + mlp(x)


def block_one_layer_norm(x, ln_1, attn, ln_2, mlp):
    x = x + attn(ln_1(x))
    return x + mlp(ln_1(x))


def block_mlp_first(x, ln_1, attn, ln_2, mlp):
    x = x + mlp(ln_2(x))
    return x + attn(ln_1(x))


def block_no_layer_norm(x, ln_1, attn, ln_2, mlp):
    x = x + attn(x)
    return x + mlp(x)


def block_post_ln_one_norm(x, ln_1, attn, ln_2, mlp):
    x = ln_1(x + attn(x))
    return ln_1(x + mlp(x))


def block_mlp_first_no_residual(x, ln_1, attn, ln_2, mlp):
    return attn(ln_1(mlp(ln_2(x))))


@pytest.mark.parametrize("fn", [block_right_named_steps, block_right_in_place])
def test_correct_blocks_written_differently_pass(fn):
    assert_correct("block_forward", fn)


@pytest.mark.parametrize(
    ("fn", "ids"),
    [
        (block_post_ln, ["post-ln"]),
        (block_no_residual, ["residual-missing"]),
        (block_forgot_second_addition, ["residual-missing"]),
        (block_normalised_stream, ["residual-from-normalised"]),
        (block_one_layer_norm, ["layer-norm-shared"]),
        (block_mlp_first, ["mlp-before-attention"]),
        (block_no_layer_norm, ["layer-norm-missing"]),
        (block_post_ln_one_norm, ["post-ln", "layer-norm-shared"]),
        (block_mlp_first_no_residual, ["residual-missing", "mlp-before-attention"]),
    ],
    ids=lambda v: v.__name__ if callable(v) else "+".join(v),
)
def test_realistic_block_mistakes_are_named(fn, ids):
    assert_named("block_forward", fn, ids)


def test_the_block_findings_show_the_wiring_measured():
    (finding,) = checks.run("block_forward", block_forgot_second_addition).findings
    assert "x = x + attn(ln_1(x)); then x = mlp(ln_2(x))" in finding.detail
    assert "the MLP's output replaces x" in finding.detail


def _oracle_block(ln_1, attn, ln_2, mlp) -> DecoderBlock:
    d_model = ln_1.weight.shape[0]
    block = DecoderBlock(d_model, attn.n_heads, mlp.c_fc.out_features).to(torch.float64)
    block.ln_1, block.attn, block.ln_2, block.mlp = ln_1, attn, ln_2, mlp
    return block.eval()


def test_the_block_reference_is_attnlibs_decoder_block_on_every_case():
    ex = get_exercise("block_forward")
    for case in ex.cases(hidden=True):
        x, *parts = case.args
        with torch.no_grad():
            expected = _oracle_block(*parts)(x)
            got = ex.reference(x, *parts)
        assert torch.allclose(got, expected, rtol=0, atol=1e-12), case.label


def test_the_block_reference_is_hugging_faces_gpt2_block():
    transformers = pytest.importorskip("transformers")
    from attnlib.gpt import GPT, gpt2_config, gpt2_state_dict

    torch.manual_seed(4)
    model = GPT(vocab_size=11, d_model=12, n_heads=3, n_layers=1, max_len=16).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    config = gpt2_config(model) | dict(bos_token_id=None, eos_token_id=None)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config)).double()
    hf.load_state_dict(gpt2_state_dict(model))
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    b = model.h[0]
    with torch.no_grad():
        ours = get_exercise("block_forward").reference(x, b.ln_1, b.attn, b.ln_2, b.mlp)
        theirs = hf.eval().transformer.h[0](x)
    theirs = theirs[0] if isinstance(theirs, tuple) else theirs
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-10)


def test_a_wrong_block_fails_the_graders_hidden_check():
    with pytest.raises(AssertionError, match="post-ln"):
        grader_check_hidden("block_forward", block_post_ln)


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
        checks.check("block_forward", get_exercise("block_forward").reference)
    assert out.getvalue() == "✔ block_forward: correct on all 3 cases\n"
