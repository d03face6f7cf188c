"""Exercise 15.2 of lesson 15: the course GPT inside Hugging Face's GPT-2.

* ``gpt2_weights(model) -> {name: tensor}`` — the course GPT's weights under the names of
  Hugging Face's ``GPT2LMHeadModel``.

Lesson 15's other exercise, ``layer_norm``, is in :mod:`attnlib.checks.ex_block`.

The check is handed a function of ``(model, tokens)`` that loads the learner's dict into
``GPT2LMHeadModel`` with :func:`attnlib.gpt.run_gpt2` (strict) and returns its float64
logits and cached keys and values; the cases are models of several shapes with every weight
moved off its start (one with ``vocab_size == d_model``, so that a transposed ``lm_head``
loads there and shows in the numbers). A mapping that does not load is read from the load's
own report (a Conv1D weight, or ``lm_head``, with its two sizes swapped); one that loads is
matched against the mappings with attention's square ``c_proj`` or ``c_attn``'s blocks
untransposed and with ``c_attn``'s blocks in each other order, and the findings say what
the learner's outputs show (block 0's cached keys are the course model's queries, the
logits differ while the cache agrees...).

Hidden cases (the grader's) draw their sizes and numbers from generators seeded with fixed
integers that the grader mixes with a seed of its own per run.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, fmt

F64 = torch.float64

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
