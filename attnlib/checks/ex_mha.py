"""Exercise of lesson 07: multi-head attention by hand.

* ``mha_by_hand(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
  out_proj_bias, n_heads, batch_first) -> (out, weights)`` — ``nn.MultiheadAttention``
  recomputed from its unpacked parameters (torch, float64).

Lesson 07's split_heads and merge_heads are in :mod:`attnlib.checks.ex_heads`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, tolerances

# ----------------------------------------------------------------------------------------
# mha_by_hand(...) -> (out, weights averaged over heads), as nn.MultiheadAttention computes
# ----------------------------------------------------------------------------------------


def _mha_reference(
    query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
    n_heads, batch_first,
):  # fmt: skip
    d_model = query.shape[-1]
    mha = nn.MultiheadAttention(
        d_model, n_heads, batch_first=batch_first, dtype=query.dtype
    )  # the oracle: torch's own module, in the inputs' dtype (the cases: float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(in_proj_weight)
        mha.in_proj_bias.copy_(in_proj_bias)
        mha.out_proj.weight.copy_(out_proj_weight)
        mha.out_proj.bias.copy_(out_proj_bias)
        mha.eval()
        return mha(query, key, value, need_weights=True, average_attn_weights=True)


def _mha_cases() -> list[Case]:
    g = torch.Generator().manual_seed(6060)

    def case(label, batch, seq_q, seq_k, d_model, n_heads, batch_first, self_attn=False):
        def r(*shape, s=1.0):
            return torch.randn(*shape, generator=g, dtype=torch.float64) * s

        def seq_shape(seq):
            return (batch, seq, d_model) if batch_first else (seq, batch, d_model)

        query = r(*seq_shape(seq_q))
        key = query.clone() if self_attn else r(*seq_shape(seq_k))
        value = query.clone() if self_attn else r(*seq_shape(seq_k))
        w = d_model**-0.5
        params = (r(3 * d_model, d_model, s=w), r(3 * d_model, s=0.5), r(d_model, d_model, s=w),
                  r(d_model, s=0.5))  # fmt: skip
        return Case(label, (query, key, value, *params, n_heads, batch_first))

    return [
        case("batch_first, batch=2, seq_q=3, seq_k=5, d_model=6, 2 heads", 2, 3, 5, 6, 2, True),
        case(
            "seq first (batch_first=False): seq=4, batch=3, d_model=8, 4 heads",
            3,
            4,
            4,
            8,
            4,
            False,
            self_attn=True,
        ),  # fmt: skip
        case(
            "batch_first=False, batch=2, seq_q=3, seq_k=5, d_model=6, 3 heads", 2, 3, 5, 6, 3, False
        ),  # fmt: skip
    ]


def _mha_hidden_cases() -> list[Case]:
    g = torch.Generator().manual_seed(6061)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return [
        Case(
            "batch_first, batch=1, seq_q=5, seq_k=2, d_model=4, 2 heads",
            (r(1, 5, 4), r(1, 2, 4), r(1, 2, 4), r(12, 4), r(12), r(4, 4), r(4), 2, True),
        )
    ]


def _mha_variant(
    *, order="qkv", split="blocks", out_proj=True, batch_first_respected=True,
    scale_by="head", heads="heads-then-dim", average=True, transpose_in=True,
    in_bias=True, out_transposed=True, merge="transpose", out_bias=True,
):  # fmt: skip
    """``nn.MultiheadAttention`` by hand with one step changed; defaults give the right one.

    ``in_bias=False`` leaves out in_proj_bias; ``out_transposed=False`` applies out_proj as
    ``merged @ out_proj_weight``; ``merge="reshape"`` merges the heads by a plain reshape
    of (batch, n_heads, seq, d_head), without moving the head axis back first;
    ``heads="reshape"`` splits the heads by a reshape straight to (batch, n_heads, seq,
    d_head); ``scale_by`` "head" (right), "model" or "none"; ``out_bias=False`` leaves out
    out_proj_bias.
    """

    def fn(query, key, value, W_in, b_in, W_out, b_out, n_heads, batch_first):
        d = query.shape[-1]
        if split == "blocks":
            Ws, bs = list(W_in.reshape(3, d, d)), list(b_in.reshape(3, d))
        else:  # "interleaved": reshape (d, 3, d) takes every third row
            Ws, bs = list(W_in.reshape(d, 3, d).transpose(0, 1)), list(b_in.reshape(d, 3).T)
        idx = tuple("qkv".index(c) for c in order)  # order names the blocks' roles
        W_q, W_k, W_v = (Ws[i] for i in idx)
        b_q, b_k, b_v = (bs[i] for i in idx)
        if not batch_first and batch_first_respected:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        batch, seq_q, _ = query.shape
        d_head = d // n_heads

        def split_heads(x):
            if heads == "heads-then-dim":
                return x.reshape(batch, x.shape[1], n_heads, d_head).transpose(1, 2)
            if heads == "reshape":  # the right shape, the numbers in memory order
                return x.reshape(batch, n_heads, x.shape[1], d_head)
            return x.reshape(batch, x.shape[1], d_head, n_heads).permute(0, 3, 1, 2)

        if not transpose_in:  # x @ W as stored: rows of W are outputs, so this mixes them
            W_q, W_k, W_v = W_q.T, W_k.T, W_v.T
        if not in_bias:
            b_q, b_k, b_v = (torch.zeros_like(b) for b in (b_q, b_k, b_v))
        q = split_heads(query @ W_q.T + b_q)
        k = split_heads(key @ W_k.T + b_k)
        v = split_heads(value @ W_v.T + b_v)
        s = q @ k.transpose(-1, -2) / math.sqrt({"head": d_head, "model": d, "none": 1}[scale_by])
        A = torch.softmax(s, dim=-1)  # (batch, n_heads, seq_q, seq_k)
        o = A @ v  # (batch, n_heads, seq_q, d_head)
        if merge == "reshape":
            o = o.reshape(batch, seq_q, d)  # head axis not moved back: positions mixed
        elif heads in ("heads-then-dim", "reshape"):
            o = o.transpose(1, 2).reshape(batch, seq_q, d)
        else:
            o = o.permute(0, 2, 3, 1).reshape(batch, seq_q, d)
        if out_proj:
            o = o @ (W_out.T if out_transposed else W_out) + (b_out if out_bias else 0)
        if not batch_first and batch_first_respected:
            o = o.transpose(0, 1)
        return o, (A.mean(dim=1) if average else A)

    return fn


def _mha_probe(
    batch_first: bool,
    seed: int,
    out_weight: float | None = 1.0,
    out_bias: float = 0.0,
    sizes=(2, 3, 4),
):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    (batch, seq_q, seq_k), d_model, n_heads = sizes, 6, 2
    shape = (
        (lambda seq: (batch, seq, d_model)) if batch_first else (lambda seq: (seq, batch, d_model))
    )
    query, key, value = r(*shape(seq_q)), r(*shape(seq_k)), r(*shape(seq_k))
    w_in, b_in = r(3 * d_model, d_model) * d_model**-0.5, r(3 * d_model) * 0.5
    if out_weight is None:  # a random, not symmetric out_proj (drawn after the rest)
        w_out, b_out = r(d_model, d_model) * d_model**-0.5, r(d_model) * 0.5
    else:
        w_out = torch.eye(d_model, dtype=torch.float64) * out_weight
        b_out = torch.full((d_model,), out_bias, dtype=torch.float64)
    return [query, key, value, w_in, b_in, w_out, b_out, n_heads, batch_first]


def _mha_parts(o):
    ok = o.ok and o.arity == 2 and all(x is not None for x in o.parts)
    return o.parts if ok else None


def _mha_choices(order, split, heads, scale_by, transpose_in, d_model, n_heads):
    """The findings for the in-projection and head choices that reproduce a result."""
    found = []
    if order != "qkv":
        found.append(
            Finding(
                "in-proj-order",
                "with one head your weights already differ from the module's; they agree "
                f"when the module's three blocks of in_proj_weight are read in the order "
                f"({', '.join(order.upper())}).",
            )
        )
    if split == "interleaved":
        found.append(
            Finding(
                "in-proj-split-wrong-axis",
                "with one head your weights already differ from the module's; they agree "
                "when each of the module's projections is given every third row of "
                "in_proj_weight.",
            )
        )
    if not transpose_in:
        found.append(
            Finding(
                "in-proj-not-transposed",
                "with one head your weights already differ from the module's; they agree "
                "when each projection's matrix is used as it is stored, rows against the "
                "input's features read as columns.",
            )
        )
    if heads == "dim-then-heads":
        found.append(
            Finding(
                "heads-split-wrong-order",
                f"with {n_heads} heads your weights differ from the module's, with 1 head "
                "they agree; they are reproduced by heads that each hold every "
                f"{n_heads}-th feature.",
            )
        )
    if heads == "reshape":
        found.append(
            Finding(
                "heads-split-without-transpose",
                f"with {n_heads} heads your weights differ from the module's, with 1 head "
                "(and the same parameters) they agree.",
            )
        )
    if scale_by == "model":
        found.append(
            Finding(
                "scale-by-d-model",
                f"with d_model = {d_model} and {n_heads} heads your weights are flatter than "
                f"the module's, exactly as if its scores were divided by a further "
                f"√{n_heads}.",
            )
        )
    if scale_by == "none":
        found.append(
            Finding(
                "scores-not-scaled",
                f"with d_model = {d_model} and {n_heads} heads your weights are more peaked "
                f"than the module's, exactly as if its scores were multiplied by "
                f"√{d_model // n_heads}.",
            )
        )
    return found


def _infer_mha(learner) -> list[Finding]:
    args = _mha_probe(True, 1)
    first = learner(*args)
    got = _mha_parts(first)
    if got is None:
        return []
    rel, abs_ = tolerances(first.eps)
    out, w = got
    found = []
    batch, seq_q, seq_k, d_model, n_heads = 2, 3, 4, 6, 2
    if out.shape != (batch, seq_q, d_model):
        return []
    if w.shape == (batch, n_heads, seq_q, seq_k):
        found.append(
            Finding(
                "weights-not-averaged",
                f"the weights come back with shape {w.shape} = (batch, n_heads, seq_q, seq_k).",
            )
        )
    elif w.shape != (batch, seq_q, seq_k):
        return []
    # out_proj: the same inputs with out_proj_weight = 2·I and out_proj_bias = 1.
    twice = _mha_parts(learner(*_mha_probe(True, 1, out_weight=2.0, out_bias=1.0)))
    other = _mha_parts(learner(*_mha_probe(True, 3)))  # other inputs: out must depend on them
    alive = other is not None and other[0].shape == out.shape and not close(other[0], out)
    if alive and twice is not None and twice[0].shape == out.shape:
        if close(twice[0], out, rel=1e-9, abs_=1e-12):
            found.append(
                Finding(
                    "out-proj-missing",
                    "changing out_proj_weight from I to 2·I and out_proj_bias from 0 to 1 "
                    "leaves your output unchanged.",
                )
            )
    # The in-projection, then the heads: which choices reproduce out (out_proj = I here)
    # and w. One head first (the head split and √d_head vs √d_model do not matter there,
    # only whether the scores are scaled at all), so the two grids are searched one after
    # the other, not as one product.
    average = w.ndim == 3
    one = args[:7] + [1, True]
    got1 = _mha_parts(learner(*one))

    def same(choices, probe, target):
        with torch.no_grad():
            c_out, c_w = _mha_variant(out_proj=False, average=average, **choices)(*probe)
        return close(c_out.numpy(), target[0], rel, abs_) and (
            c_w.shape == target[1].shape and close(c_w.numpy(), target[1], rel, abs_)
        )

    layouts = [
        {"order": order, "split": split, "transpose_in": t, "in_bias": bias, "scale_by": scale}
        for scale in ("head", "none")
        for bias in (True, False)
        for t in (True, False)
        for order in ("qkv", "kqv", "qvk", "vkq", "kvq", "vqk")
        for split in ("blocks", "interleaved")
    ]
    layout = None
    if got1 is not None:
        layout = next((c for c in layouts if same(c, one, got1)), None)
    chosen = None
    if layout is not None:
        grid = [
            {"heads": heads, "scale_by": scale_by, "merge": merge}
            for merge in ("transpose", "reshape")
            for heads in ("heads-then-dim", "dim-then-heads", "reshape")
            for scale_by in (("none",) if layout["scale_by"] == "none" else ("head", "model"))
        ]
        chosen = next((c for c in grid if same({**layout, **c}, args, (out, w))), None)
    if chosen is not None:
        found += _mha_choices(
            layout["order"], layout["split"], chosen["heads"], chosen["scale_by"],
            layout["transpose_in"], d_model, n_heads,
        )  # fmt: skip
        if not layout["in_bias"]:
            found.append(
                Finding(
                    "in-proj-bias-missing",
                    "with in_proj_bias drawn at random your output and weights equal those "
                    "of projections that have no bias.",
                )
            )
        if chosen["merge"] == "reshape":
            found.append(
                Finding(
                    "merge-without-transpose",
                    "your output is reproduced by heads put back with a plain reshape of "
                    "(batch, n_heads, seq_q, d_head) to (batch, seq_q, d_model), the head "
                    "axis not moved back first.",
                )
            )
        # out_proj with a weight that is not symmetric and a bias: applied transposed or
        # as stored, with or without the bias?
        probe = _mha_probe(True, 1, out_weight=None)
        got_t = _mha_parts(learner(*probe))
        if got_t is not None and got_t[0].shape == out.shape:
            with torch.no_grad():
                merged, _ = _mha_variant(out_proj=False, **{**layout, **chosen})(*probe)
                W_out, b_out = probe[5], probe[6]
                ways = {
                    (t, b): (merged @ (W_out.T if t else W_out) + (b_out if b else 0)).numpy()
                    for t in (True, False)
                    for b in (True, False)
                }
            way = next((w for w, o in ways.items() if close(got_t[0], o, rel, abs_)), None)
            if way is not None and not way[0]:
                found.append(
                    Finding(
                        "out-proj-not-transposed",
                        "with an out_proj_weight that is not symmetric your output equals "
                        "the merged heads times out_proj_weight as stored, not its transpose.",
                    )
                )
            if way is not None and not way[1]:
                found.append(
                    Finding(
                        "out-proj-bias-missing",
                        "with out_proj_bias drawn at random your output equals the merged "
                        "heads times the projection alone: the bias changes nothing.",
                    )
                )
    # batch_first=False: does batch element 1 leak into batch element 0? (seq_q = seq_k, so
    # that attention along the wrong axis runs)
    a = _mha_probe(False, 2, sizes=(3, 4, 4))
    b = [x.clone() if isinstance(x, torch.Tensor) else x for x in a]
    for t in b[:3]:
        t[:, 1] += 1.0
    oa, ob = _mha_parts(learner(*a)), _mha_parts(learner(*b))
    if oa is not None and ob is not None and oa[0].shape == ob[0].shape == (4, 3, d_model):
        if not close(oa[0][:, 0], ob[0][:, 0], rel=1e-9, abs_=1e-12):
            found.append(
                Finding(
                    "batch-first-ignored",
                    "with batch_first=False, changing batch element 1 changes the output of "
                    "batch element 0.",
                )
            )
    return found


register(
    Exercise(
        name="mha_by_hand",
        summary="mha_by_hand(query, key, value, in_proj_weight, in_proj_bias, "
        "out_proj_weight, out_proj_bias, n_heads, batch_first) -> (out, weights): "
        "nn.MultiheadAttention from its parameters",
        reference=_mha_reference,
        make_cases=_mha_cases,
        make_hidden_cases=_mha_hidden_cases,
        rtol=1e-7,
        atol=1e-9,
        forbidden=(
            "attnlib.torch_mha.mha_forward",
            "attnlib.torch_mha.unpack_mha",
            "torch.nn.functional.multi_head_attention_forward",
        ),
        infer=_infer_mha,
        build=_mha_variant,
        # without out_proj there is no out_proj_weight whose transposition could be seen
        exclusive=(
            frozenset({"out-proj-missing", "out-proj-not-transposed"}),
            frozenset({"out-proj-missing", "out-proj-bias-missing"}),
        ),
        misconceptions=(
            Misconception(
                "in-proj-order",
                "in_proj_weight stacks the three matrices in the order Q, K, V: its first "
                "d_model rows make the queries, the next d_model the keys, the last d_model "
                "the values. Two of the three blocks were given each other's roles.",
                (_mha_variant(order="kqv"),),
                {"order": "kqv"},
                question="Which rows of in_proj_weight did you use to make the queries, which "
                "the keys and which the values? In what order does the module stack them?",
            ),
            Misconception(
                "in-proj-split-wrong-axis",
                "in_proj_weight, of shape (3·d_model, d_model), holds three blocks of rows one "
                "after the other. Cutting it as (d_model, 3, d_model) deals the rows out like "
                "cards, every third row to each projection. Cut the first axis into three "
                "consecutive blocks of d_model rows instead.",
                (_mha_variant(split="interleaved"),),
                {"split": "interleaved"},
                question="Which rows of in_proj_weight end up in your query matrix: rows 0, 1, "
                "2, ... or rows 0, 3, 6, ...? How are the three matrices stacked?",
            ),
            Misconception(
                "in-proj-not-transposed",
                "Each block of in_proj_weight is stored like an nn.Linear weight, (out_features, "
                "in_features), and a projection multiplies the input by its transpose (plus "
                "the bias). Multiplying by the block as stored mixes the wrong entries; with "
                "d_model by d_model blocks the shapes still fit, so nothing raises.",
                (_mha_variant(transpose_in=False),),
                {"transpose_in": False},
                question="How does nn.Linear store its weight, and what does it multiply its "
                "input by? Would your projection give the same result as an nn.Linear holding "
                "that block?",
            ),
            Misconception(
                "out-proj-missing",
                "The output projection is missing. After the heads are merged, the module "
                "applies out_proj, an nn.Linear of its own (weight out_proj_weight, bias "
                "out_proj_bias), which mixes the heads' outputs.",
                (_mha_variant(out_proj=False),),
                {"out_proj": False},
                question="Change out_proj_weight and out_proj_bias: does your output change? "
                "What does the module do after merging the heads?",
            ),
            Misconception(
                "batch-first-ignored",
                "With batch_first False the inputs are (seq, batch, d_model), and attention, "
                "which works on the last two axes, then runs across the batch instead of "
                "across the positions: sequences mix with each other. Bring the inputs to "
                "(batch, seq, d_model) first, and the output back to the input's layout at "
                "the end.",
                (_mha_variant(batch_first_respected=False),),
                {"batch_first_respected": False},
                question="With batch_first False, what does each axis of query count? Change "
                "one sequence of the batch: does another sequence's output change in yours?",
            ),
            Misconception(
                "scale-by-d-model",
                "The scores are divided by the square root of d_model. Each head compares "
                "query and key vectors of width d_head = d_model / n_heads, so the scale that "
                "keeps the scores' spread near 1 is one over the square root of d_head. The "
                "weights come out flatter than the module's.",
                (_mha_variant(scale_by="model"),),
                {"scale_by": "model"},
                question="How wide are the vectors a single head compares? What did you "
                "divide its scores by, and how wide were the vectors that number is made for?",
            ),
            Misconception(
                "scores-not-scaled",
                "The scores are not scaled at all. Like every dot-product attention (lesson "
                "04), each head divides its scores by the square root of the width it "
                "compares, d_head; without it the weights come out more peaked than the "
                "module's.",
                (_mha_variant(scale_by="none"),),
                {"scale_by": "none"},
                question="Are your weights more or less peaked than the module's? What does "
                "every head do to its scores before the softmax (lesson 04)?",
            ),
            Misconception(
                "heads-split-wrong-order",
                "The heads were cut as (..., d_head, n_heads), so each head gets every "
                "n_heads-th feature. The module cuts each position's features into (n_heads, "
                "d_head): head h owns a contiguous block of d_head features.",
                (_mha_variant(heads="dim-then-heads"),),
                {"heads": "dim-then-heads"},
                question="Which features of a position does your head 0 get? Which block "
                "should it own (Exercise 7.1)?",
            ),
            Misconception(
                "heads-split-without-transpose",
                "The heads were split by a reshape straight to (batch, n_heads, seq, d_head), "
                "which reads the numbers in memory order: a head's rows hold features of "
                "other positions, so each head attends between scrambled tokens. Cut each "
                "position's features into (n_heads, d_head) first, then move the head axis "
                "in front of the positions — what your split_heads of Exercise 7.1 does.",
                (_mha_variant(heads="reshape"),),
                {"heads": "reshape"},
                question="With one head your function may agree with the module; with two it "
                "does not. What does your head split do to the positions — does row p of "
                "head 1 hold position p's features?",
            ),
            Misconception(
                "in-proj-bias-missing",
                "in_proj_bias is left out. Each projection adds its block of in_proj_bias "
                "(the first d_model entries for the queries, the next for the keys, the last "
                "for the values). torch starts them at zero, but a trained or loaded module "
                "has other values.",
                (_mha_variant(in_bias=False),),
                {"in_bias": False},
                question="Set in_proj_bias to zero: does your function then agree with the "
                "module? What does each projection add besides the matrix product?",
            ),
            Misconception(
                "merge-without-transpose",
                "The heads were merged by a plain reshape of (batch, n_heads, seq_q, d_head): "
                "that reads head 0's positions one after another, so a row of the result "
                "mixes positions. The head axis must move back behind the positions before "
                "the reshape — what your merge_heads of Exercise 7.2 does.",
                (_mha_variant(merge="reshape"),),
                {"merge": "reshape"},
                question="Your weights may be right while your output is not. Which "
                "positions do the numbers in row 0 of your merged heads come from?",
            ),
            Misconception(
                "out-proj-not-transposed",
                "out_proj is applied with its weight as stored. Like every nn.Linear it keeps "
                "(out_features, in_features) and multiplies the input by the transpose, then "
                "adds its bias; with a d_model by d_model weight the wrong way round still "
                "runs.",
                (_mha_variant(out_transposed=False),),
                {"out_transposed": False},
                question="Try an out_proj_weight that is not symmetric: does your output "
                "equal what nn.Linear with that weight gives on your merged heads?",
            ),
            Misconception(
                "out-proj-bias-missing",
                "out_proj_bias is left out: the output projection is an nn.Linear, matrix "
                "product and then its bias. torch starts the bias at zero, so the omission "
                "only shows on a module whose bias has changed.",
                (_mha_variant(out_bias=False),),
                {"out_bias": False},
                question="Set out_proj_bias to zero: does your function then agree? What "
                "does an nn.Linear add after its matrix product?",
            ),
            Misconception(
                "weights-not-averaged",
                "The weights come back per head, (batch, n_heads, seq_q, seq_k). With its "
                "defaults nn.MultiheadAttention returns them averaged over the heads, "
                "(batch, seq_q, seq_k).",
                (_mha_variant(average=False),),
                {"average": False},
                question="What shape do your weights have, and what shape does the module "
                "return with its defaults? What happened to the head axis there?",
            ),
        ),
    )
)
