"""Exercise 16.2 of lesson 16: a head removed by zero ablation, the model left as it was.

* ``ablate_head(model, tokens, layer, head) -> (batch, seq, vocab_size)`` — the logits of an
  :class:`attnlib.gpt.GPT` on ``tokens`` with head ``head`` of block ``layer`` writing
  nothing: its ``d_head`` features of what the block's output projection ``attn.W_o`` reads
  (:func:`attnlib.heads.merge_heads`' order) set to zero, everything else computed as usual;
  the model exactly as before after the call.

The reference is written here, apart from :func:`attnlib.tasks.reading.ablated_logits` (the
library's version, which a solution must not call): the model's own forward pass in float64
with the head's columns of ``W_o`` zeroed. The cases are small random models in float64
with every weight moved off its start (so that every head, bias and gain matters) and the
lesson's copy model in float32; two cases in a row share one model and ask for another head,
so a function that leaves a hook attached or a weight zeroed changes the second one's
logits. The hidden cases (the grader's) draw their models and tokens from generators seeded
with fixed integers that the grader mixes with a seed of its own per run.

The inference calls the learner's function once on a probe model (3 blocks of 4 heads with
d_head 6, so that a slice computed with n_heads differs from one computed with d_head) and
measures three things: whether the model gives its old logits afterwards; whether the
output is logits, probabilities or log-probabilities; and which change to the model its
logits are the logits of. The last is read against every change a learner makes in a
realistic function — what is zeroed (the head's columns of ``W_o``, its rows, the head's
queries or keys, its value weights without their bias, nothing at all), which features (the
head's, a neighbour's, a slice computed with n_heads, the last head's, a slice to the end,
one feature, all of them), in which blocks (the one asked, a neighbour, every block) and
whether ``W_o``'s bias went too — all computed at once in one batched forward pass of the
probe (:func:`_candidate_log_probs`), and the change with the fewest departures from the
right one that gives the learner's logits names the mistakes.
"""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F

from attnlib._validate import type_name
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import fmt
from attnlib.training import torch_threads

F64 = torch.float64

# ----------------------------------------------------------------------------------------
# The reference, the cases and the mistakes a learner's function makes
# ----------------------------------------------------------------------------------------


def _reference(model, tokens, layer, head):
    """The model's logits in float64 with the head's columns of ``W_o`` zeroed.

    A model in another dtype is copied to float64 first; a float64 model is changed in
    place for the call and its columns are put back bit for bit afterwards.
    """
    if model.wte.weight.dtype != F64:
        model = copy.deepcopy(model).to(F64)
    weight = model.h[layer].attn.W_o.weight  # (d_model, d_model): column j reads feature j
    cols = slice(head * model.d_head, (head + 1) * model.d_head)
    with torch.no_grad(), torch_threads(1):
        kept = weight[:, cols].clone()
        weight[:, cols] = 0.0
        try:
            return model(tokens)  # (batch, seq, vocab_size)
        finally:
            weight[:, cols] = kept


def _random_gpt(g, vocab, d_model, n_heads, n_layers, max_len, d_ff):
    """A GPT in float64, eval mode, with every weight drawn from ``g`` away from its start
    (gains away from 1, biases away from 0), so that every head and every bias matters and
    the grader's seed changes them all. The global random state is left as it was."""
    from attnlib.gpt import GPT

    with torch.random.fork_rng(devices=[]):
        model = GPT(vocab, d_model, n_heads, n_layers, max_len, d_ff=d_ff).to(F64)
    with torch.no_grad():
        for name, p in model.named_parameters():  # lm_head.weight is wte.weight: set once
            r = torch.randn(p.shape, generator=g, dtype=F64)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1.0 + 0.3 * r)
            elif p.ndim == 1:
                p.copy_(0.5 * r)
            elif name.startswith(("wte", "wpe")):
                p.copy_(r)
            else:
                p.copy_(r / math.sqrt(p.shape[1]))  # (out, in): keeps the stream's scale
    return model.eval()


_SHIPPED: dict = {}  # the copy model's weights, read once


def _copy_model():
    """A fresh copy of the lesson's copy model (float32, eval mode)."""
    from attnlib.gpt import GPT
    from attnlib.tasks import plays

    if not _SHIPPED:
        shipped = plays.load_model(plays.COPY_WEIGHTS_PATH)
        _SHIPPED["config"] = (shipped.vocab_size, shipped.d_model, shipped.n_heads,
                              shipped.n_layers, shipped.max_len, shipped.d_ff)  # fmt: skip
        _SHIPPED["state"] = {k: v.detach().clone() for k, v in shipped.state_dict().items()}
    vocab, d_model, n_heads, n_layers, max_len, d_ff = _SHIPPED["config"]
    with torch.random.fork_rng(devices=[]):
        model = GPT(vocab, d_model, n_heads, n_layers, max_len, d_ff=d_ff)
    model.load_state_dict(_SHIPPED["state"])
    return model.eval()


def _repeated(g, vocab, batch, period):
    block = torch.randint(0, vocab, (batch, period), generator=g)
    return torch.cat([block, block], dim=1)  # (batch, 2 period): something to copy


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(1661)
    a = _random_gpt(g, 10, 12, 3, 2, 16, 20)  # d_head 4, n_heads 3
    b = _random_gpt(g, 9, 16, 2, 3, 12, 24)  # d_head 8, n_heads 2
    return [
        Case("2 blocks of 3 heads (d_head 4), vocab 10; batch 2, seq 7; block 1, head 1",
             (a, torch.randint(0, 10, (2, 7), generator=g), 1, 1)),
        Case("the model of the case before, block 0, head 2; batch 3, seq 5",
             (a, torch.randint(0, 10, (3, 5), generator=g), 0, 2)),
        Case("3 blocks of 2 heads (d_head 8), vocab 9; batch 1, seq 6; block 1, head 0",
             (b, torch.randint(0, 9, (1, 6), generator=g), 1, 0)),
        Case("the lesson's copy model (float32); a block of 12 characters twice, batch 2; "
             "block 1, head 1", (_copy_model(), _repeated(g, 76, 2, 12), 1, 1)),
    ]  # fmt: skip


def _hidden_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1671)
    a = _random_gpt(g, 11, 20, 4, 3, 12, 16)  # d_head 5, n_heads 4
    return [
        Case("hidden: 3 blocks of 4 heads (d_head 5), vocab 11; batch 2, seq 9; block 1, head 2",
             (a, _repeated(g, 11, 2, 4)[:, :9].contiguous(), 1, 2)),
        Case("hidden: the model of the case before, block 2, head 1; batch 1, seq 8",
             (a, torch.randint(0, 11, (1, 8), generator=g), 2, 1)),
    ]  # fmt: skip


def _columns(columns, head, d_head, n_heads):
    """The features of what ``W_o`` reads that a function zeroes, by the choice it made."""
    return {
        "head": slice(head * d_head, (head + 1) * d_head),
        "neighbour": slice((head + 1) * d_head, (head + 2) * d_head),
        "previous": slice((head - 1) * d_head, head * d_head),
        "n_heads": slice(head * n_heads, (head + 1) * n_heads),
        "n_heads_d": slice(head * n_heads, head * n_heads + d_head),
        "last": slice((n_heads - 1) * d_head, n_heads * d_head),
        "to_end": slice(head * d_head, None),
        "one": slice(head, head + 1),
        "all": slice(None),
    }[columns]


def _layers(block, layer, n_layers):
    """The blocks a change acts on: the one asked, a neighbour, or every block."""
    if block == "every":
        return list(range(n_layers))
    return [layer + {"same": 0, "neighbour": 1, "previous": -1}[block]]


def _forgetful(cols):
    """A pre-hook that zeroes a copy of what ``W_o`` reads and never hands it back."""

    def hook(module, args):
        x = args[0].clone()
        x[..., cols] = 0.0  # (and then nothing is returned: the input stays as it was)

    return hook


def _zero_output(cols):
    def hook(module, args, out):
        out = out.clone()
        out[..., cols] = 0.0
        return out

    return hook


def _zero_attention(module, args, out):
    """A forward hook on the whole attention: its output (and W_o's bias with it) zeroed."""
    if isinstance(out, tuple):
        return (torch.zeros_like(out[0]), *out[1:])
    return torch.zeros_like(out)


def _build(*, where="input", columns="head", block="same", restore=True, output="logits",
           bias="kept"):  # fmt: skip
    """An ablation with the given choices, as a learner writes it; the defaults give the
    correct one.

    ``where``: what is zeroed — "input" (the columns of ``W_o``), "rows" (rows of ``W_o``,
    features of the stream; its bias kept), "rows_out" (a forward hook zeroing those
    features of ``W_o``'s output, bias included), "query" (the head's rows of ``W_q`` and
    its bias), "key" (the rows of ``W_k``, bias kept), "value" (the rows of ``W_v``, bias
    kept), "attn_out" (the whole attention's output) or "nothing" (a pre-hook that never
    returns its zeroed copy); ``columns``: which features (:func:`_columns`); ``block``:
    "same", "neighbour" (layer + 1), "previous" (layer - 1) or "every"; ``restore``: True
    or False (weights zeroed in place and left so); ``output``: "logits", "probs" or
    "log_probs"; ``bias``: "kept" or "zeroed" (``W_o``'s bias zeroed too).
    """

    def fn(model, tokens, layer, head):
        layers = _layers(block, layer, model.n_layers)
        cols = _columns(columns, head, model.d_head, model.n_heads)
        saved, handles = [], []

        def zero(t, index):
            saved.append((t, index, t[index].clone()))
            t[index] = 0.0

        try:
            with torch.no_grad():
                for i in layers:
                    attn = model.h[i].attn
                    if where == "input":
                        zero(attn.W_o.weight, (slice(None), cols))
                    elif where == "rows":
                        zero(attn.W_o.weight, (cols,))
                    elif where == "rows_out":
                        handles.append(attn.W_o.register_forward_hook(_zero_output(cols)))
                    elif where == "query":
                        zero(attn.W_q.weight, (cols,))
                        zero(attn.W_q.bias, (cols,))
                    elif where == "key":
                        zero(attn.W_k.weight, (cols,))
                    elif where == "value":
                        zero(attn.W_v.weight, (cols,))
                    elif where == "attn_out":
                        handles.append(attn.register_forward_hook(_zero_attention))
                    elif where == "nothing":
                        handles.append(attn.W_o.register_forward_pre_hook(_forgetful(cols)))
                    if bias == "zeroed":
                        zero(attn.W_o.bias, (slice(None),))
                logits = model(tokens)  # (batch, seq, vocab_size)
        finally:
            with torch.no_grad():
                for h in handles:
                    h.remove()
                if restore:
                    for t, index, value in reversed(saved):
                        t[index] = value
        if output == "probs":
            return torch.softmax(logits, dim=-1)
        if output == "log_probs":
            return torch.log_softmax(logits, dim=-1)
        return logits

    return fn


# ----------------------------------------------------------------------------------------
# Inference: one call on a probe model, measured against every realistic change
# ----------------------------------------------------------------------------------------

_PROBE_SIZES = (13, 24, 4, 3, 16, 32)  # vocab, d_model, n_heads (d_head 6), n_layers, ...
_PROBE_AT = (1, 1)  # the (layer, head) asked for: a neighbour on each side of both
_PROBE_TOKENS = (2, 9)  # batch, seq

# What a change zeroes (kinds), which features (columns), in which blocks, and W_o's bias:
# the first of each is right. "rows_out" zeroes the stream features with their bias.
_KINDS = ("input", "rows", "rows_out", "query", "key", "value")
_COLUMN_CHOICES = ("head", "previous", "neighbour", "n_heads", "n_heads_d", "last", "to_end",
                   "one", "all")  # fmt: skip
_BLOCKS = ("same", "previous", "neighbour", "every")
_BIASES = ("kept", "zeroed")

_RIGHT = ("input", "head", "same", "kept")  # the right change: the first choice of each

_KIND_ID = {
    "rows": "stream-slice-zeroed",
    "rows_out": "stream-slice-zeroed",
    "query": "query-or-key-zeroed",
    "key": "query-or-key-zeroed",
    "value": "value-bias-kept",
}
_COLUMNS_ID = {
    "previous": "head-off-by-one",
    "neighbour": "head-off-by-one",
    "n_heads": "slice-uses-n-heads",
    "n_heads_d": "slice-uses-n-heads",
    "last": "last-head",
    "to_end": "slice-to-end",
    "one": "single-channel",
    "all": "whole-layer",
}
_BLOCK_ID = {
    "previous": "layer-off-by-one",
    "neighbour": "layer-off-by-one",
    "every": "every-layer",
}

_NOTHING_HIDES = ("head-off-by-one", "slice-uses-n-heads", "last-head", "slice-to-end",
                  "single-channel", "whole-layer", "layer-off-by-one", "every-layer",
                  "output-bias-zeroed", "model-changed")  # fmt: skip

_PROBE_STATE: dict = {}  # the probe model's weights and tokens, drawn once
_PROBE: list = []  # ([specs], their log-probabilities on the probe (C, batch, seq, vocab))


def _probe_model():
    """A fresh probe model (it is the learner's to change) and its tokens."""
    from attnlib.gpt import GPT

    vocab, d_model, n_heads, n_layers, max_len, d_ff = _PROBE_SIZES
    if not _PROBE_STATE:
        g = torch.Generator().manual_seed(1681)
        model = _random_gpt(g, *_PROBE_SIZES)
        _PROBE_STATE["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        _PROBE_STATE["tokens"] = torch.randint(0, vocab, _PROBE_TOKENS, generator=g)
    with torch.random.fork_rng(devices=[]):
        model = GPT(vocab, d_model, n_heads, n_layers, max_len, d_ff=d_ff).to(F64)
    model.load_state_dict(_PROBE_STATE["state"])
    return model.eval(), _PROBE_STATE["tokens"].clone()


def _spec_ids(spec) -> list[str]:
    """The misconceptions a change departs from the right one by (``nothing``: one)."""
    if spec == "nothing":
        return ["nothing-ablated"]
    kind, columns, block, bias = spec
    ids = []
    if columns == "all" and kind in ("input", "rows", "rows_out"):
        ids.append("whole-layer")  # every feature, read or written, bias or not: one mistake
    else:
        if kind in _KIND_ID:
            ids.append(_KIND_ID[kind])
        if columns in _COLUMNS_ID:
            ids.append(_COLUMNS_ID[columns])
        if bias == "zeroed":
            ids.append("output-bias-zeroed")
    if block in _BLOCK_ID:
        ids.append(_BLOCK_ID[block])
    return ids


def _specs() -> list:
    """Every change the inference knows, fewest departures from the right one first."""
    specs = list(itertools.product(_KINDS, _COLUMN_CHOICES, _BLOCKS, _BIASES))
    specs.append("nothing")

    def departures(spec):
        if spec == "nothing":
            return 1
        return sum(c != first for c, first in zip(spec, _RIGHT, strict=True))

    return sorted(specs, key=departures)  # stable: the order above breaks ties


def _masks(specs, n_layers, d_model, n_heads, layer, head):
    """Per change, per block, a multiplier per feature for each place a change acts."""
    d_head = d_model // n_heads
    places = ("q", "k_w", "v_w", "o_in", "o_w", "o_b")
    m = {p: torch.ones(len(specs), n_layers, d_model, dtype=F64) for p in places}
    for c, spec in enumerate(specs):
        if spec == "nothing":
            continue
        kind, columns, block, bias = spec
        cols = _columns(columns, head, d_head, n_heads)
        for i in _layers(block, layer, n_layers):
            if kind == "input":
                m["o_in"][c, i, cols] = 0.0
            elif kind == "rows":
                m["o_w"][c, i, cols] = 0.0
            elif kind == "rows_out":
                m["o_w"][c, i, cols] = 0.0
                m["o_b"][c, i, cols] = 0.0
            elif kind == "query":
                m["q"][c, i, cols] = 0.0
            elif kind == "key":
                m["k_w"][c, i, cols] = 0.0
            elif kind == "value":
                m["v_w"][c, i, cols] = 0.0
            if bias == "zeroed":
                m["o_b"][c, i] = 0.0
    return m


def _batched_logits(state, tokens, masks, n_heads, eps):
    """The GPT's forward pass for every change at once: (changes, batch, seq, vocab).

    Written out from the model's weights (embeddings, pre-LN blocks with causal attention
    scaled by 1/sqrt(d_head) and a tanh-GELU MLP, the final LayerNorm, the tied
    unembedding), each change a multiplier on a projection's features (:func:`_masks`).
    """
    wte, wpe = state["wte.weight"], state["wpe.weight"]
    batch, seq = tokens.shape
    d_model = wte.shape[1]
    d_head = d_model // n_heads
    n_changes, n_layers = masks["q"].shape[:2]
    x = (wte[tokens] + wpe[:seq]).expand(n_changes, batch, seq, d_model)
    hidden = ~torch.ones(seq, seq, dtype=torch.bool).tril()  # keys after the query

    def heads(t):  # (C, batch, seq, d_model) -> (C, batch, n_heads, seq, d_head)
        return t.reshape(n_changes, batch, seq, n_heads, d_head).transpose(2, 3)

    for i in range(n_layers):

        def w(name, i=i):
            return state[f"h.{i}.{name}"]

        def at(place, i=i):
            return masks[place][:, i, None, None, :]  # (C, 1, 1, d_model)

        a = F.layer_norm(x, (d_model,), w("ln_1.weight"), w("ln_1.bias"), eps)
        q = (a @ w("attn.W_q.weight").T + w("attn.W_q.bias")) * at("q")
        k = (a @ w("attn.W_k.weight").T) * at("k_w") + w("attn.W_k.bias")
        v = (a @ w("attn.W_v.weight").T) * at("v_w") + w("attn.W_v.bias")
        scores = heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(d_head)
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        merged = (weights @ heads(v)).transpose(2, 3).reshape(n_changes, batch, seq, d_model)
        out = (merged * at("o_in")) @ w("attn.W_o.weight").T
        x = x + out * at("o_w") + w("attn.W_o.bias") * at("o_b")
        h = F.layer_norm(x, (d_model,), w("ln_2.weight"), w("ln_2.bias"), eps)
        h = F.gelu(h @ w("mlp.c_fc.weight").T + w("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ w("mlp.c_proj.weight").T + w("mlp.c_proj.bias")
    x = F.layer_norm(x, (d_model,), state["ln_f.weight"], state["ln_f.bias"], eps)
    return x @ wte.T


def _candidate_log_probs():
    """(specs, their log-probabilities on the probe, (C, batch, seq, vocab)), made once."""
    if not _PROBE:
        model, tokens = _probe_model()
        _, d_model, n_heads, n_layers, _, _ = _PROBE_SIZES
        specs = _specs()
        masks = _masks(specs, n_layers, d_model, n_heads, *_PROBE_AT)
        state = {k: v.detach() for k, v in model.state_dict().items()}
        with torch.no_grad(), torch_threads(1):
            logits = _batched_logits(state, tokens, masks, n_heads, model.eps)
        _PROBE.append((specs, torch.log_softmax(logits, dim=-1).numpy()))
    return _PROBE[0]


_MATCH = 1e-4  # log-probabilities this close are the same change (changes differ by >1e-2)


def _as_log_probs(a: np.ndarray):
    """(what the output is, its log-probabilities): "probs" when every row is positive and
    sums to 1, "log_probs" when every row's exponentials do, else "logits"."""
    if bool((a >= 0).all()) and bool((np.abs(a.sum(-1) - 1.0) < 1e-6).all()):
        return "probs", np.log(np.maximum(a, 1e-300))
    top = a.max(-1, keepdims=True)
    lse = top[..., 0] + np.log(np.exp(a - top).sum(-1))
    if bool((np.abs(lse) < 1e-6).all()):
        return "log_probs", a
    return "logits", a - lse[..., None]


def _where(spec, d_head, n_heads):
    """The features a change zeroes, as a learner reads them (e.g. "features 6 .. 11")."""
    cols = _columns(spec[1], _PROBE_AT[1], d_head, n_heads)
    idx = range(d_head * n_heads)[cols]
    return f"feature {idx[0]}" if len(idx) == 1 else f"features {idx[0]} .. {idx[-1]}"


def _findings(spec, kind_of_output, changed) -> list[Finding]:
    """One finding per departure the measured change, output and model show."""
    vocab, d_model, n_heads, n_layers, _, _ = _PROBE_SIZES
    d_head = d_model // n_heads
    layer, head = _PROBE_AT
    asked = f"asked for block {layer}, head {head} of {n_heads} (d_head {d_head})"
    said = {}
    if spec is not None and spec != "nothing":
        kind, columns, block, bias = spec
        where = _where(spec, d_head, n_heads)
        in_block = "every block" if block == "every" else f"block {_layers(block, layer, 0)[0]}"
        said["stream-slice-zeroed"] = (
            f"{asked}, your logits are the model's with {where} of what {in_block}'s "
            "attention adds to the residual stream set to "
            + ("zero." if kind == "rows_out" else "the output projection's bias.")
        )
        said["query-or-key-zeroed"] = (
            f"{asked}, your logits are the model's with the "
            + ("heads" if columns == "all" else "head")
            + f" of {where} in {in_block} attending evenly to every key it can see."
            if columns in ("head", "previous", "neighbour", "last", "all")
            else f"{asked}, your logits are the model's with the "
            + ("queries" if kind == "query" else "keys")
            + f" of {where} in {in_block} set to zero."
        )
        said["value-bias-kept"] = (
            f"{asked}, your logits are the model's with the value weights of {where} in "
            f"{in_block} set to zero and their biases kept."
        )
        said["whole-layer"] = (
            f"{asked}, your logits are the model's with all {n_heads} heads of {in_block} removed."
        )
        said["head-off-by-one"] = f"{asked}, your function zeroes {where}, another head's."
        said["slice-uses-n-heads"] = (
            f"{asked}, your function zeroes {where}: not the block of {d_head} features "
            "of any one head."
        )
        said["last-head"] = f"{asked}, your function zeroes {where}, those of the last head."
        said["slice-to-end"] = (
            f"{asked}, your function zeroes {where}: {d_model - head * d_head} features, "
            f"heads {head} to {n_heads - 1}."
        )
        said["single-channel"] = (
            f"{asked}, your function zeroes one feature, {where.split()[-1]}, where a head "
            f"has {d_head}."
        )
        said["layer-off-by-one"] = f"{asked}, the change your function makes is in {in_block}."
        said["every-layer"] = f"{asked}, your function changes all {n_layers} blocks."
        said["output-bias-zeroed"] = (
            f"{asked}, your logits are the model's with, besides the head, the {d_model} "
            f"biases of {in_block}'s output projection set to zero."
        )
    said["nothing-ablated"] = f"{asked}, your logits are the model's own: nothing was removed."
    found = [Finding(i, said[i]) for i in (_spec_ids(spec) if spec is not None else [])]
    if kind_of_output == "probs":
        found.append(
            Finding(
                "not-logits",
                f"every row of your output is positive and sums to 1 over the {vocab} "
                "tokens of the vocabulary, as probabilities do.",
            )
        )
    elif kind_of_output == "log_probs":
        found.append(
            Finding(
                "not-logits",
                f"the exponentials of every row of your output sum to 1 over the {vocab} "
                "tokens of the vocabulary, as log-probabilities do.",
            )
        )
    if changed:
        found.append(Finding("model-changed", changed))
    return found


def _infer(learner) -> list[Finding]:
    with torch_threads(1):  # a model this small runs fastest on one thread
        return _measure(learner)


def _measure(learner) -> list[Finding]:
    model, tokens = _probe_model()
    with torch.no_grad():
        before = model(tokens).numpy()
    out = learner(model, tokens, *_PROBE_AT)
    try:
        with torch.no_grad():
            after = model(tokens).numpy()
        gap = float(np.abs(after - before).max())
        changed = (
            f"after your function returned, the model itself gives logits up to {fmt(gap)} "
            "away from those it gave on the same tokens before the call."
            if gap > 1e-9
            else ""
        )
    except Exception as exc:  # noqa: BLE001 - a model the learner broke is a finding
        changed = f"after your function returned, calling the model raised {type_name(exc)}."
    a = out.array(0) if out.arity == 1 else None
    if a is None or a.shape != before.shape or not bool(np.isfinite(a).all()):
        return _findings(None, "logits", changed)
    kind_of_output, lp = _as_log_probs(a)
    specs, candidates = _candidate_log_probs()
    gaps = np.abs(candidates - lp).reshape(len(specs), -1).max(-1)
    matched = [s for s, g in zip(specs, gaps, strict=True) if g <= _MATCH]
    spec = matched[0] if matched else None
    return _findings(spec, kind_of_output, changed)


# ----------------------------------------------------------------------------------------
# The exercise
# ----------------------------------------------------------------------------------------

register(
    Exercise(
        name="ablate_head",
        summary="ablate_head(model, tokens, layer, head) -> (batch, seq, vocab_size): the "
        "model's logits with head head of block layer writing nothing (its features of what "
        "the output projection reads set to zero), the model unchanged afterwards",
        reference=_reference,
        make_cases=_cases,
        make_hidden_cases=_hidden_cases,
        rtol=1e-4,  # the copy model computes in float32, the reference in float64
        atol=1e-4,
        forbidden=("attnlib.tasks.reading.ablated_logits",),
        infer=_infer,
        build=_build,
        exclusive=(
            # a function that removes nothing has no features, block or bias to get wrong,
            # and leaves nothing behind
            *(frozenset({"nothing-ablated", other}) for other in _NOTHING_HIDES),
            # every row of W_o zeroed is every column zeroed: W_o then writes its bias alone
            frozenset({"stream-slice-zeroed", "whole-layer"}),
            # the whole attention removed takes its bias with it: one mistake, not two
            frozenset({"whole-layer", "output-bias-zeroed"}),
        ),
        misconceptions=(
            Misconception(
                "stream-slice-zeroed",
                "The rows of the output projection are zeroed (features of the residual "
                "stream), not the columns that read the head's output. The output "
                "projection mixes every head into every feature of the stream: its columns "
                "come in blocks of d_head, one block per head, in the order the heads were "
                "merged, while a block of its rows holds a share of every head's "
                "contribution. Zeroing rows removes part of every head and keeps most of "
                "the head you meant to remove.",
                (_build(where="rows"), _build(where="rows_out")),
                {"where": "rows"},
                question="Your change removes part of what every head of the block adds to "
                "the stream. On which side of the output projection are the heads still "
                "apart, one block of features each: what it reads, or what it writes?",
            ),
            Misconception(
                "query-or-key-zeroed",
                "The head's queries (or keys) are zeroed. Its scores are then all equal, its "
                "attention is spread evenly over the keys it can see, and it still writes "
                "the average of its values into the stream: the head is changed, not "
                "removed. Zero ablation sets what the head writes, its output, to zero.",
                (_build(where="query"), _build(where="key")),
                {"where": "query"},
                question="With your change, does the head still write something into the "
                "stream? What does a head write when its scores are all equal?",
            ),
            Misconception(
                "value-bias-kept",
                "The head's rows of the value projection are zeroed but its value bias is "
                "kept. Every value of the head is then that bias, any weighted average of "
                "them is the bias too, and the head keeps writing it at every position "
                "(mixed into the stream by the output projection). Zeroing the head's "
                "output, or its values including their bias, removes it.",
                (_build(where="value"),),
                {"where": "value"},
                question="With your change, the head writes the same thing at every "
                "position instead of nothing. Where can a head's output get a part that "
                "does not depend on the text?",
            ),
            Misconception(
                "nothing-ablated",
                "The change never reaches the forward pass that makes the logits: for "
                "example a hook that zeroes a copy of its input but does not return it (a "
                "pre-hook changes what the module reads only through what it returns), a "
                "forward hook changing the input after the module has already read it, or "
                "logits computed before the change. The logits are the model's own.",
                (_build(where="nothing"),),
                {"where": "nothing"},
                question="Your logits are exactly the model's without any ablation. Does "
                "your change take effect during the forward pass that computes them?",
            ),
            Misconception(
                "head-off-by-one",
                "A neighbouring head is removed: the slice of features starts one head too "
                "late or too early (heads counted from 1, or the end of head h's block "
                "taken as its start). Head h owns features h times d_head up to, but not "
                "including, (h + 1) times d_head.",
                (_build(columns="neighbour"), _build(columns="previous")),
                {"columns": "neighbour"},
                question="The features your function zeroes are a whole head's, but not "
                "the head you were asked for. Which features belong to head 0, and which "
                "to head 1?",
            ),
            Misconception(
                "slice-uses-n-heads",
                "The slice is computed with the number of heads where the width of one "
                "head belongs. The heads sit side by side in blocks of d_head features "
                "(d_model divided by n_heads): head h's block starts at h times d_head and "
                "is d_head wide. With n_heads in its place the slice cuts across heads.",
                (_build(columns="n_heads"),),
                {"columns": "n_heads"},
                question="The features your function zeroes are not one head's block. How "
                "wide is one head's block of features, and where does head h's block "
                "start?",
            ),
            Misconception(
                "last-head",
                "The last head is removed whatever head is asked: the slice is counted from "
                "the end, or its start does not use the head's index.",
                (_build(columns="last"),),
                {"columns": "last"},
                question="Which head does your function remove when asked for head 1, and "
                "which when asked for head 2? Where does your code use the head's index?",
            ),
            Misconception(
                "slice-to-end",
                "The slice runs from the head's first feature to the end of the features: "
                "head h and every head after it are removed. A slice needs its end as well, "
                "d_head features after its start.",
                (_build(columns="to_end"),),
                {"columns": "to_end"},
                question="Your function zeroes more features than one head has. Where does "
                "your slice of features end?",
            ),
            Misconception(
                "single-channel",
                "A single feature (numbered like the head) is zeroed, not the head's block "
                "of d_head features: what the output projection reads has d_model "
                "features, d_head for each head, side by side.",
                (_build(columns="one"),),
                {"columns": "one"},
                question="Your function zeroes fewer features than one head has. How many "
                "features of what the output projection reads come from one head?",
            ),
            Misconception(
                "whole-layer",
                "Every head of the block is removed (the attention's whole output, or every "
                "feature the output projection reads), not one: the logits are those of a "
                "model without that block's attention. Keep the other heads, and the "
                "output projection's bias.",
                (_build(columns="all"), _build(where="attn_out")),
                {"columns": "all"},
                question="Your logits change as if the block's attention were gone "
                "altogether. How many of the block's heads does removing one head take "
                "away?",
            ),
            Misconception(
                "layer-off-by-one",
                "The head is removed from a neighbouring block: the block index is off by "
                "one (blocks counted from 1, or shifted). The model's blocks are numbered "
                "from 0, and the exercise's layer is that number.",
                (_build(block="neighbour"), _build(block="previous")),
                {"block": "neighbour"},
                question="The block your function changes is not the one asked for. How "
                "does the model number its blocks?",
            ),
            Misconception(
                "every-layer",
                "The head is removed from every block (a loop over the blocks), not only "
                "from the block asked for: head h of each block is a different head, with "
                "weights of its own.",
                (_build(block="every"),),
                {"block": "every"},
                question="Your function changes more than one block. Which block does the "
                "exercise name, and is head h of another block the same head?",
            ),
            Misconception(
                "output-bias-zeroed",
                "The output projection's bias is zeroed along with the head. The bias "
                "belongs to no head: it is added to the stream whatever the heads write, so "
                "removing one head keeps it.",
                (_build(bias="zeroed"),),
                {"bias": "zeroed"},
                question="Besides the head, your change removes something that does not "
                "depend on any head. What does the output projection add whatever the "
                "heads write?",
            ),
            Misconception(
                "not-logits",
                "Probabilities (a softmax over the vocabulary) or log-probabilities are "
                "returned, not the logits: what the model itself returns, before any "
                "softmax.",
                (_build(output="probs"), _build(output="log_probs")),
                {"output": "probs"},
                question="What do the rows of your output add up to, or their "
                "exponentials? Which of the model's numbers does the exercise ask for?",
            ),
            # Last: its variants leave the check's models changed, and the variants after
            # it would run on them.
            Misconception(
                "model-changed",
                "The model is left changed after the call: a hook still attached, or "
                "weights zeroed in place and not put back. Every later use of the model "
                "(the next head you measure, the next case) then runs with the head still "
                "removed. Remove the hook by its handle, or put the weights back, also "
                "when the forward pass fails; or change a copy of the model instead.",
                (_build(restore=False),),
                {"restore": False},
                question="Call the model on the same tokens after your function has "
                "returned: does it give the logits it gave before? What does your function "
                "leave behind?",
            ),
        ),
    )
)
