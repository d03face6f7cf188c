"""attnlib.tasks.reading.ablated_logits and per_position_loss (lesson 16), against
independent oracles.

* zero ablation equals a deep copy of the model whose ``W_o`` columns for that head are
  zeroed (float64, to 1e-12);
* mean and resample ablation equal the model's forward pass written out here by hand, with
  torch's own pieces (``F.layer_norm``, ``F.gelu``, a masked softmax) and ``W_o`` split
  into one block of columns per head, each head's output replaced by the mean (or the
  row) of its output on the reference, taken from a clean run of the same hand-written
  pass;
* ablating nothing is the model itself; the model (its logits, hooks and mode) is
  unchanged after a call, and after an exception inside one;
* the weights of the ablated run are the hand-written pass's (a layer's own weights do not
  move when its heads' outputs are replaced; later layers' do);
* ``per_position_loss`` is ``-log softmax`` of the hand-written pass at each target, its
  mean is ``plays.validation_loss`` on the same windows, and with heads it is the ablated
  pass's.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.nn import functional as F

from attnlib.gpt import GPT
from attnlib.tasks import plays, reading
from attnlib.training import torch_threads

VOCAB, D_MODEL, N_HEADS, SEQ = 13, 16, 4, 12
D_HEAD = D_MODEL // N_HEADS


def small_model(n_layers=3, seed=0, dtype=torch.float64, **options):
    torch.manual_seed(seed)
    model = GPT(VOCAB, D_MODEL, N_HEADS, n_layers, max_len=24, **options).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # sharper than the initialisation
    return model


def tokens(batch=3, seq=SEQ, seed=1):
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def by_hand(model, x, replace=None, weights=None):
    """The model's logits on ``x``, written out with torch's own pieces, and every head's
    output per layer, (batch, n_heads, seq, d_head), before any replacement. ``weights``:
    a list to which every layer's attention weights are appended.

    ``replace``: {(layer, head): Tensor broadcasting to (batch, seq, d_head)} — that head's
    output is replaced before ``W_o``, which is applied one head's columns at a time.
    """
    replace = replace or {}
    batch, seq = x.shape
    d = model.d_model
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    stream = model.wte.weight[x] + model.wpe.weight[:seq]  # (batch, seq, d_model)
    heads_out = []
    with torch.no_grad():
        for i, b in enumerate(model.h):
            a = b.attn
            h = F.layer_norm(stream, (d,), b.ln_1.weight, b.ln_1.bias, b.ln_1.eps)

            def proj(lin, h=h):
                y = h @ lin.weight.T + lin.bias  # (batch, seq, d_model)
                return y.view(batch, seq, N_HEADS, D_HEAD).transpose(1, 2)

            q, k, v = proj(a.W_q), proj(a.W_k), proj(a.W_v)  # (batch, n_heads, seq, d_head)
            s = (q @ k.transpose(-2, -1) / math.sqrt(D_HEAD)).masked_fill(~causal, -math.inf)
            w = torch.softmax(s, dim=-1)  # (batch, n_heads, seq, seq)
            if weights is not None:
                weights.append(w)
            z = w @ v  # (batch, n_heads, seq, d_head)
            heads_out.append(z.clone())
            for (layer, head), r in replace.items():
                if layer == i:
                    z[:, head] = r
            out = a.W_o.bias + sum(
                z[:, j] @ a.W_o.weight[:, j * D_HEAD : (j + 1) * D_HEAD].T for j in range(N_HEADS)
            )
            stream = stream + out
            m = F.layer_norm(stream, (d,), b.ln_2.weight, b.ln_2.bias, b.ln_2.eps)
            m = F.gelu(m @ b.mlp.c_fc.weight.T + b.mlp.c_fc.bias, approximate="tanh")
            stream = stream + m @ b.mlp.c_proj.weight.T + b.mlp.c_proj.bias
        f = F.layer_norm(stream, (d,), model.ln_f.weight, model.ln_f.bias, model.ln_f.eps)
        return f @ model.wte.weight.T, heads_out


HEADS = [
    [(1, 0)],
    [(0, 2)],
    [(0, 1), (2, 3)],
    [(1, 0), (1, 1), (1, 0)],  # a head named twice is ablated once
    [(0, 0), (0, 1), (0, 2), (0, 3)],
]


def test_the_hand_written_pass_is_the_model():
    model, x = small_model(), tokens()
    with torch.no_grad():
        torch.testing.assert_close(by_hand(model, x)[0], model(x), atol=1e-12, rtol=0)


@pytest.mark.parametrize("heads", HEADS)
def test_zero_ablation_is_zeroing_the_heads_columns_of_W_o(heads):
    model, x = small_model(), tokens()
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for layer, head in heads:
            zeroed.h[layer].attn.W_o.weight[:, head * D_HEAD : (head + 1) * D_HEAD] = 0.0
        want = zeroed(x)
    got = reading.ablated_logits(model, x, heads)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    assert (got - model(x).detach()).abs().max() > 1e-3  # the heads mattered


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("ref_batch, ref_seq", [(5, SEQ), (2, SEQ + 6)])
def test_mean_ablation_is_the_heads_mean_output_on_the_reference(heads, ref_batch, ref_seq):
    model, x, ref = small_model(), tokens(), tokens(ref_batch, ref_seq, seed=7)
    clean = by_hand(model, ref[:, :SEQ])[1]  # per layer (ref_batch, n_heads, seq, d_head)
    want = by_hand(model, x, {(lay, h): clean[lay][:, h].mean(0) for lay, h in heads})[0]
    got = reading.ablated_logits(model, x, heads, how="mean", reference=ref)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_mean_ablation_defaults_to_the_tokens_own_batch():
    model, x, heads = small_model(), tokens(), [(1, 2), (2, 0)]
    clean = by_hand(model, x)[1]
    want = by_hand(model, x, {(lay, h): clean[lay][:, h].mean(0) for lay, h in heads})[0]
    got = reading.ablated_logits(model, x, heads, how="mean")
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    # one row: its mean is itself, so nothing changes
    one = x[:1]
    torch.testing.assert_close(
        reading.ablated_logits(model, one, heads, how="mean"),
        model(one).detach(),
        atol=1e-12,
        rtol=0,
    )


@pytest.mark.parametrize("heads", HEADS)
def test_resample_ablation_is_the_heads_output_on_the_reference_row(heads):
    model, x, ref = small_model(), tokens(), tokens(seed=9)
    clean = by_hand(model, ref)[1]  # from a clean run, even with heads of several layers
    want = by_hand(model, x, {(lay, h): clean[lay][:, h] for lay, h in heads})[0]
    got = reading.ablated_logits(model, x, heads, how="resample", reference=ref)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    same = reading.ablated_logits(model, x, heads, how="resample", reference=x)
    torch.testing.assert_close(same, model(x).detach(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("how", reading.ABLATIONS)
def test_ablating_nothing_is_the_model(how):
    model, x = small_model(), tokens()
    reference = tokens(seed=5) if how != "zero" else None
    with torch.no_grad(), torch_threads(1):
        want = model(x)
    got = reading.ablated_logits(model, x, (), how=how, reference=reference)
    assert torch.equal(got, want)


def test_float32_and_a_model_in_training_mode():
    model = small_model(dtype=torch.float32, dropout=0.5, attn_dropout=0.5).train()
    x = tokens()
    got = reading.ablated_logits(model, x, [(1, 0)])
    assert model.training  # its mode restored
    zeroed = copy.deepcopy(model).eval()
    with torch.no_grad():
        zeroed.h[1].attn.W_o.weight[:, :D_HEAD] = 0.0
        torch.testing.assert_close(got, zeroed(x), atol=1e-5, rtol=1e-5)  # no dropout: eval
    assert got.dtype == torch.float32 and not got.requires_grad


def no_hooks(model):
    return not any(b.attn.W_o._forward_pre_hooks for b in model.h)


@pytest.mark.parametrize("how", reading.ABLATIONS)
def test_the_model_is_unchanged_after_a_call_and_after_an_exception(how):
    model, x = small_model(), tokens()
    reference = tokens(seed=5) if how != "zero" else None
    with torch.no_grad():
        before = model(x)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    reading.ablated_logits(model, x, [(0, 1), (2, 2)], how=how, reference=reference)
    assert no_hooks(model)
    with torch.no_grad():
        assert torch.equal(model(x), before)

    calls = []

    def fail_on_the_ablated_run(module, args, out):
        calls.append(1)
        if len(calls) == (1 if how == "zero" else 2):  # the run with the ablation in place
            raise RuntimeError("boom")

    model.train()
    trap = model.h[2].mlp.register_forward_hook(fail_on_the_ablated_run)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            reading.ablated_logits(model, x, [(0, 1), (2, 2)], how=how, reference=reference)
    finally:
        trap.remove()
    assert no_hooks(model) and model.training
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_refuses_bad_arguments_naming_them():
    model, x = small_model(), tokens()
    f = reading.ablated_logits
    with pytest.raises(TypeError, match="model must be an attnlib.gpt.GPT"):
        f(object(), x, [(0, 0)])
    with pytest.raises(TypeError, match="tokens must be a LongTensor"):
        f(model, x.float(), [(0, 0)])
    with pytest.raises(ValueError, match="tokens has seq=30, over max_len = 24"):
        f(model, tokens(seq=30), [(0, 0)])
    with pytest.raises(ValueError, match=r"heads\[0\]'s layer must be <= 2, got 3"):
        f(model, x, [(3, 0)])
    with pytest.raises(ValueError, match=r"heads\[1\]'s head must be <= 3, got 4"):
        f(model, x, [(0, 0), (1, 4)])
    with pytest.raises(ValueError, match=r"heads\[0\]'s layer must be >= 0"):
        f(model, x, [(-1, 0)])
    with pytest.raises(TypeError, match=r"heads\[0\] must be a \(layer, head\) pair"):
        f(model, x, (1, 0))  # one pair, not a list of pairs
    with pytest.raises(TypeError, match="heads must be an iterable"):
        f(model, x, 3)
    with pytest.raises(ValueError, match="how must be one of 'zero', 'mean', 'resample'"):
        f(model, x, [(0, 0)], how="mean_ablate")
    with pytest.raises(ValueError, match="reference is read only by how='mean'"):
        f(model, x, [(0, 0)], reference=x)
    with pytest.raises(ValueError, match="how='resample' needs a reference"):
        f(model, x, [(0, 0)], how="resample")
    with pytest.raises(ValueError, match=r"tokens' shape \(3, 12\), got \(3, 13\)"):
        f(model, x, [(0, 0)], how="resample", reference=tokens(seq=13))
    with pytest.raises(ValueError, match="seq_r >= seq = 12"):
        f(model, x, [(0, 0)], how="mean", reference=tokens(seq=11))
    with pytest.raises(TypeError, match="reference must be a LongTensor"):
        f(model, x, [(0, 0)], how="mean", reference=x.double())
    with pytest.raises(ValueError, match="reference must have shape"):
        f(model, x, [(0, 0)], how="mean", reference=x[0])
    with pytest.raises(ValueError, match="reference holds ids from"):
        f(model, x, [(0, 0)], how="mean", reference=x + VOCAB)
    assert no_hooks(model)


@pytest.mark.parametrize("how", reading.ABLATIONS)
def test_the_ablated_runs_weights(how):
    model, x = small_model(), tokens()
    heads = [(0, 1), (1, 3)]
    reference = tokens(seed=5) if how != "zero" else None
    logits, weights = reading.ablated_logits(
        model, x, heads, how=how, reference=reference, return_weights=True
    )
    assert torch.equal(
        logits, reading.ablated_logits(model, x, heads, how=how, reference=reference)
    )
    clean = by_hand(model, x if reference is None else reference)[1]
    fill = {
        "zero": lambda lay, h: 0.0,
        "mean": lambda lay, h: clean[lay][:, h].mean(0),
        "resample": lambda lay, h: clean[lay][:, h],
    }[how]
    want = []
    by_hand(model, x, {(lay, h): fill(lay, h) for lay, h in heads}, weights=want)
    assert len(weights) == model.n_layers
    for got, w in zip(weights, want, strict=True):
        torch.testing.assert_close(got, w, atol=1e-12, rtol=0)
    with torch.no_grad():
        _, plain = model(x, return_weights=True)
    assert torch.equal(weights[0], plain[0])  # layer 0's weights come before its outputs
    assert (weights[2] - plain[2]).abs().max() > 1e-3  # a later layer reads what changed


def test_per_position_loss_is_the_next_tokens_cross_entropy():
    model, x = small_model(), tokens(seq=SEQ + 1)
    loss = reading.per_position_loss(model, x)
    assert loss.shape == (3, SEQ) and loss.dtype == torch.float64
    logp = torch.log_softmax(by_hand(model, x[:, :-1])[0], dim=-1)  # (batch, seq, vocab)
    want = -logp.gather(-1, x[:, 1:, None])[..., 0]
    torch.testing.assert_close(loss, want, atol=1e-12, rtol=0)
    assert loss.mean().item() == pytest.approx(plays.validation_loss(model, x), abs=1e-12)
    # the longest: max_len + 1 tokens, every position the model has
    longest = tokens(seq=model.max_len + 1)
    assert reading.per_position_loss(model, longest).shape == (3, model.max_len)


@pytest.mark.parametrize("how", reading.ABLATIONS)
def test_per_position_loss_with_heads_ablated(how):
    model, x = small_model(), tokens(seq=SEQ + 1)
    heads = [(1, 0), (2, 1)]
    reference = {
        "zero": None,
        "mean": tokens(4, SEQ + 3, seed=6),
        "resample": tokens(seed=8, seq=SEQ + 1),
    }[how]
    loss = reading.per_position_loss(model, x, heads=heads, how=how, reference=reference)
    ref = x if reference is None else reference
    clean = by_hand(model, ref[:, :SEQ])[1]
    fill = {
        "zero": lambda lay, h: 0.0,
        "mean": lambda lay, h: clean[lay][:, h].mean(0),
        "resample": lambda lay, h: clean[lay][:, h],
    }[how]
    logits = by_hand(model, x[:, :-1], {(lay, h): fill(lay, h) for lay, h in heads})[0]
    want = F.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")
    torch.testing.assert_close(loss, want, atol=1e-12, rtol=0)
    assert (loss - reading.per_position_loss(model, x)).abs().max() > 1e-3


def test_per_position_loss_refuses_bad_arguments_naming_them():
    model, x = small_model(), tokens()
    f = reading.per_position_loss
    with pytest.raises(
        ValueError, match=r"per_position_loss: tokens must have shape \(batch >= 1, seq >= 2\)"
    ):
        f(model, x[:, :1])
    with pytest.raises(ValueError, match="tokens has seq=26, over max_len \\+ 1 = 25"):
        f(model, tokens(seq=26))
    with pytest.raises(
        ValueError, match="per_position_loss: how='resample' needs reference of tokens' shape"
    ):
        f(model, x, heads=[(0, 0)], how="resample", reference=x[:, :-1])
    with pytest.raises(ValueError, match=r"per_position_loss: heads\[0\]'s head must be <= 3"):
        f(model, x, heads=[(0, 4)])
    with pytest.raises(TypeError, match="return_weights must be a bool"):
        reading.ablated_logits(model, x, [], return_weights=1)
