"""Exercises of lessons 05 (keys versus values) and 06 (learning keys by backprop).

* ``lookup_batch(names, numbers, query_pos, n_names, n_numbers) -> (tokens, query, target)``
  — encode the lookup task (numpy);
* ``attention_backward(q, k, v, d_out) -> (dq, dk, dv)`` — the backward pass of attention
  by hand (numpy);
* ``mha_by_hand(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
  out_proj_bias, n_heads, batch_first) -> (out, weights)`` — ``nn.MultiheadAttention``
  recomputed from its unpacked parameters (torch, float64).

* ``kv_prediction() -> bool array (5,)`` — lesson 05's "predict, run, then check": before
  training, the learner marks five statements (:data:`STATEMENTS`) true or false. The
  lesson measures each one and asserts that the measurements agree with :data:`TRUTH`, so
  the check compares the prediction with what was measured.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from attnlib.backprop import attention_backward as _attention_backward
from attnlib.checks._core import Case, Exercise, Misconception, register
from attnlib.tasks.lookup import lookup_batch as _lookup_batch

# ----------------------------------------------------------------------------------------
# lookup_batch(names, numbers, query_pos, n_names, n_numbers) -> (tokens, query, target)
# ----------------------------------------------------------------------------------------


def _lookup_cases() -> list[Case]:
    rng = np.random.default_rng(5005)

    def draw(batch, seq_k, n_names, n_numbers):
        names = np.argsort(rng.random((batch, n_names)), axis=-1)[:, :seq_k]
        numbers = rng.integers(0, n_numbers, (batch, seq_k))
        query_pos = rng.integers(0, seq_k, batch)
        query_pos[0] = seq_k - 1  # not always token 0
        return (names, numbers, query_pos, n_names, n_numbers)

    fixed = (
        np.array([[2, 0, 3], [1, 3, 0]]),  # names
        np.array([[4, 1, 0], [2, 2, 3]]),  # numbers
        np.array([1, 2]),  # query_pos
        4,  # n_names
        5,  # n_numbers
    )
    return [
        Case("batch=2, seq_k=3, 4 names, 5 numbers (fixed)", fixed),
        Case("batch=5, seq_k=4, 7 names, 3 numbers", draw(5, 4, 7, 3)),
        Case("batch=3, seq_k=6, 6 names, 9 numbers", draw(3, 6, 6, 9)),
        Case("batch=4, seq_k=5, 8 names, 8 numbers (n_names == n_numbers)", draw(4, 5, 8, 8)),
    ]


def _lookup_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(5006)
    names = np.argsort(rng.random((6, 10)), axis=-1)[:, :7]
    numbers = rng.integers(0, 4, (6, 7))
    return [
        Case(
            "batch=6, seq_k=7, 10 names, 4 numbers", (names, numbers, rng.integers(0, 7, 6), 10, 4)
        )
    ]


def _lb_variant(*, target="right", query="name", layout="name-first"):
    """One way to build the batch; the defaults give the correct function."""

    def fn(names, numbers, query_pos, n_names, n_numbers):
        names, numbers, query_pos = (np.asarray(a) for a in (names, numbers, query_pos))
        batch, seq_k = names.shape
        rows = np.arange(batch)
        a, b = np.eye(n_names)[names], np.eye(n_numbers)[numbers]
        tokens = np.concatenate([a, b] if layout == "name-first" else [b, a], axis=-1)
        asked = names[rows, query_pos]
        name_part = np.eye(n_names)[asked]
        if query == "name":
            num_part = np.zeros((batch, n_numbers))
        else:  # "leak": the query is the whole asked token, number included
            num_part = np.eye(n_numbers)[numbers[rows, query_pos]]
        parts = [name_part, num_part] if layout == "name-first" else [num_part, name_part]
        q = np.concatenate(parts, axis=-1)[:, None, :]
        if target == "right":
            t = numbers[rows, query_pos]
        elif target == "first-token":
            t = numbers[:, 0]
        elif target == "name":
            t = names[rows, query_pos]
        else:  # "pos": the position, not what is stored there
            t = query_pos.copy()
        return tokens, q, t.astype(np.int64)

    return fn


register(
    Exercise(
        name="lookup_batch",
        summary="lookup_batch(names, numbers, query_pos, n_names, n_numbers) -> (tokens, "
        "query, target): the lookup task as model inputs",
        reference=_lookup_batch,
        make_cases=_lookup_cases,
        make_hidden_cases=_lookup_hidden_cases,
        forbidden=("attnlib.tasks.lookup.lookup_batch", "attnlib.tasks.lookup.sample_lookup"),
        misconceptions=(
            Misconception(
                "target-from-wrong-token",
                "The target is the number of token 0, not of the token the query asks for. "
                "Take it from the asked position: numbers[np.arange(batch), query_pos].",
                (_lb_variant(target="first-token"),),
            ),
            Misconception(
                "target-is-position",
                "The target is the position of the asked token. The model must return what "
                "is stored there: numbers[np.arange(batch), query_pos].",
                (_lb_variant(target="pos"),),
            ),
            Misconception(
                "target-is-name",
                "The target is the asked token's name — which the query already contains. "
                "The answer is the *number* carried by that token.",
                (_lb_variant(target="name"),),
            ),
            Misconception(
                "query-leaks-answer",
                "The query contains the asked token's number: the answer is in the question, "
                "and the model can skip attention altogether. Leave the number block of the "
                "query at zero.",
                (_lb_variant(query="leak"),),
            ),
            Misconception(
                "feature-blocks-swapped",
                "The number block comes first. The layout is [one_hot(name), "
                "one_hot(number)] — names in the first n_names columns — for tokens and query "
                "alike.",
                (_lb_variant(layout="number-first"),),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# attention_backward(q, k, v, d_out) -> (dq, dk, dv)
# ----------------------------------------------------------------------------------------


def _backward_cases() -> list[Case]:
    rng = np.random.default_rng(6006)
    n = rng.standard_normal

    def case(label, *shape_q_k_v):
        (sq, sk, dk, dv), batch = shape_q_k_v[0], shape_q_k_v[1:]
        return Case(
            label,
            (n((*batch, sq, dk)), n((*batch, sk, dk)), n((*batch, sk, dv)), n((*batch, sq, dv))),
        )

    return [
        case("seq_q=3, seq_k=5, d_k=4, d_v=2", (3, 5, 4, 2)),
        case(
            "seq_q=seq_k=4, d_k=3, d_v=2 (square scores, so a missing transpose runs)", (4, 4, 3, 2)
        ),
        case("batch=2: seq_q=2, seq_k=6, d_k=5, d_v=3", (2, 6, 5, 3), 2),
        case("seq_q=1, seq_k=3, d_k=8, d_v=8", (1, 3, 8, 8)),
    ]


def _backward_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(6007)
    n = rng.standard_normal
    return [
        Case(
            "batch=2, n_heads=3: seq_q=5, seq_k=5, d_k=2, d_v=4",
            (n((2, 3, 5, 2)), n((2, 3, 5, 2)), n((2, 3, 5, 4)), n((2, 3, 5, 4))),
        )
    ]


def _bw_variant(*, correction=True, corr_axis=-1, scale=True, dk_t=True, dv_t=True):
    """The backward pass with one step changed; the defaults give the correct function."""

    def fn(q, k, v, d_out):
        T = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
        s = q @ T(k) / math.sqrt(q.shape[-1])
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        A = e / e.sum(axis=-1, keepdims=True)
        dv = (T(A) if dv_t else A) @ d_out
        dA = d_out @ T(v)
        dS = A * (dA - (A * dA).sum(axis=corr_axis, keepdims=True)) if correction else A * dA
        c = 1 / math.sqrt(q.shape[-1]) if scale else 1.0
        dq = dS @ k * c
        dk = (T(dS) if dk_t else dS) @ q * c
        return dq, dk, dv

    return fn


register(
    Exercise(
        name="attention_backward",
        summary="attention_backward(q, k, v, d_out) -> (dq, dk, dv): the backward pass of "
        "softmax(q kᵀ/√d_k) v",
        reference=lambda q, k, v, d_out: _attention_backward(q, k, v, d_out),
        make_cases=_backward_cases,
        make_hidden_cases=_backward_hidden_cases,
        rtol=1e-6,
        atol=1e-9,
        forbidden=("attnlib.backprop.attention_backward", "attnlib.backprop.projection_grads"),
        misconceptions=(
            Misconception(
                "softmax-jacobian-diagonal-only",
                "dS = A ⊙ dA keeps only the diagonal of the softmax Jacobian. Every weight in "
                "a row depends on every score of that row (they share the denominator): "
                "subtract the row's weighted mean, dS = A ⊙ (dA − Σ_j A·dA).",
                (_bw_variant(correction=False),),
            ),
            Misconception(
                "softmax-jacobian-wrong-axis",
                "The correction Σ A·dA is summed over queries (axis=-2). The softmax runs "
                "over the keys of one query row, so sum over axis=-1 with keepdims=True.",
                (_bw_variant(corr_axis=-2),),
            ),
            Misconception(
                "backward-scale-missing",
                "dq and dk are missing the factor 1/√d_k. The forward pass multiplied the "
                "scores by it, so the chain rule brings it back in both gradients.",
                (_bw_variant(scale=False),),
            ),
            Misconception(
                "dk-not-transposed",
                "dk = dS @ q pairs queries with keys the wrong way round; it only runs when "
                "seq_q == seq_k. Key j collects from every query i that scored it: "
                "dk = dSᵀ @ q · scale, shape (..., seq_k, d_k).",
                (_bw_variant(dk_t=False),),
            ),
            Misconception(
                "dv-not-transposed",
                "dv = A @ d_out; it only runs when seq_q == seq_k. Value j receives from "
                "every query in proportion to its weight A[i, j]: dv = Aᵀ @ d_out.",
                (_bw_variant(dv_t=False),),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# mha_by_hand(...) -> (out, weights averaged over heads), as nn.MultiheadAttention computes
# ----------------------------------------------------------------------------------------


def _mha_reference(
    query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
    n_heads, batch_first,
):  # fmt: skip
    d_model = query.shape[-1]
    mha = nn.MultiheadAttention(
        d_model, n_heads, batch_first=batch_first, dtype=torch.float64
    )  # the oracle: torch's own module
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
    scale_by="head", heads="heads-then-dim", average=True,
):  # fmt: skip
    """``nn.MultiheadAttention`` by hand with one step changed; defaults give the right one."""

    def fn(query, key, value, W_in, b_in, W_out, b_out, n_heads, batch_first):
        d = query.shape[-1]
        if split == "blocks":
            Ws, bs = list(W_in.reshape(3, d, d)), list(b_in.reshape(3, d))
        else:  # "interleaved": reshape (d, 3, d) takes every third row
            Ws, bs = list(W_in.reshape(d, 3, d).transpose(0, 1)), list(b_in.reshape(d, 3).T)
        idx = {"qkv": (0, 1, 2), "kqv": (1, 0, 2)}[order]
        W_q, W_k, W_v = (Ws[i] for i in idx)
        b_q, b_k, b_v = (bs[i] for i in idx)
        if not batch_first and batch_first_respected:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        batch, seq_q, _ = query.shape
        d_head = d // n_heads

        def split_heads(x):
            if heads == "heads-then-dim":
                return x.reshape(batch, x.shape[1], n_heads, d_head).transpose(1, 2)
            return x.reshape(batch, x.shape[1], d_head, n_heads).permute(0, 3, 1, 2)

        q = split_heads(query @ W_q.T + b_q)
        k = split_heads(key @ W_k.T + b_k)
        v = split_heads(value @ W_v.T + b_v)
        s = q @ k.transpose(-1, -2) / math.sqrt(d_head if scale_by == "head" else d)
        A = torch.softmax(s, dim=-1)  # (batch, n_heads, seq_q, seq_k)
        o = A @ v  # (batch, n_heads, seq_q, d_head)
        if heads == "heads-then-dim":
            o = o.transpose(1, 2).reshape(batch, seq_q, d)
        else:
            o = o.permute(0, 2, 3, 1).reshape(batch, seq_q, d)
        if out_proj:
            o = o @ W_out.T + b_out
        if not batch_first and batch_first_respected:
            o = o.transpose(0, 1)
        return o, (A.mean(dim=1) if average else A)

    return fn


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
        misconceptions=(
            Misconception(
                "in-proj-order",
                "in_proj_weight stacks the three matrices in the order Q, K, V (rows 0..d-1 "
                "make queries, d..2d-1 keys, 2d..3d-1 values); here two of them are swapped.",
                (_mha_variant(order="kqv"),),
            ),
            Misconception(
                "in-proj-split-wrong-axis",
                "in_proj_weight (3·d_model, d_model) holds three stacked blocks of rows. "
                "reshape(d_model, 3, d_model) interleaves them (every third row); split along "
                "dim 0 into three blocks: reshape(3, d_model, d_model) or .chunk(3, dim=0).",
                (_mha_variant(split="interleaved"),),
            ),
            Misconception(
                "out-proj-missing",
                "After merging the heads the module applies out_proj: out = merged @ "
                "out_proj_weightᵀ + out_proj_bias.",
                (_mha_variant(out_proj=False),),
            ),
            Misconception(
                "batch-first-ignored",
                "With batch_first=False the inputs are (seq, batch, d_model): attention then "
                "mixes the wrong axis. Transpose to (batch, seq, d_model) first and back at "
                "the end.",
                (_mha_variant(batch_first_respected=False),),
            ),
            Misconception(
                "scale-by-d-model",
                "Scores are divided by √d_model. Each head compares vectors of width d_head = "
                "d_model / n_heads, so divide by √d_head.",
                (_mha_variant(scale_by="model"),),
            ),
            Misconception(
                "heads-split-wrong-order",
                "The heads are split as (..., d_head, n_heads). The module reshapes to "
                "(batch, seq, n_heads, d_head): each head owns a contiguous block of d_head "
                "features.",
                (_mha_variant(heads="dim-then-heads"),),
            ),
            Misconception(
                "weights-not-averaged",
                "The weights come back per head, (batch, n_heads, seq_q, seq_k). "
                "nn.MultiheadAttention returns them averaged over heads by default: "
                "(batch, seq_q, seq_k).",
                (_mha_variant(average=False),),
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# kv_prediction() -> five booleans: lesson 05's "predict, run, then check"
# ----------------------------------------------------------------------------------------

#: The statements the learner predicts (lesson 05 lists them in this order). Each is
#: measured in the lesson, which asserts that the measurement agrees with ``TRUTH``.
STATEMENTS = (
    "1. separate K, V reaches at least 95 % accuracy within 150 steps",
    "2. tied K = V reaches at least 95 % accuracy within 150 steps",
    "3. tied K = V ends more than 15 points above the uniform control",
    "4. in the tied head, a token's key changes with the number it carries",
    "5. a tied head twice as wide (d_head = 6) reaches 95 % given 400 steps",
)
TRUTH = (True, False, False, True, True)


def _flipped(i: int):
    answer = [(not t) if j == i else t for j, t in enumerate(TRUTH)]
    return lambda: np.array(answer)


register(
    Exercise(
        name="kv_prediction",
        summary="kv_prediction() -> bool array (5,): statements 1-5 of lesson 05, true or false",
        reference=lambda: np.array(TRUTH),
        make_cases=lambda: [Case("statements 1-5 (entry i is statement i + 1)", ())],
        exact=True,
        misconceptions=(
            Misconception(
                "separate-fails",
                "Statement 1 is true: with its own W_K the key spends all d_head dimensions on "
                "names and the value all of its own on numbers; the separate head solves the "
                "lookup within 150 steps.",
                (_flipped(0),),
            ),
            Misconception(
                "tied-only-slower",
                "Statement 2 is false: tying is not just fewer parameters. At d_head = 3 one "
                "vector cannot both be matched on the name and carry the number, and the tied "
                "head stays far below 95 %.",
                (_flipped(1),),
            ),
            Misconception(
                "tied-selects-anyway",
                "Statement 3 is false: the tied head ends only a few points above the control "
                "that cannot select at all — its keys are too disturbed by the numbers to pick "
                "the asked token reliably.",
                (_flipped(2),),
            ),
            Misconception(
                "tied-key-ignores-content",
                "Statement 4 is true: with k = v the key must carry the number (the value "
                "needs it), so the number moves every score — that is what disturbs the match.",
                (_flipped(3),),
            ),
            Misconception(
                "tying-is-impossible",
                "Statement 5 is true: with twice the width a tied head can keep names and "
                "numbers in different directions of one vector; it just needs more room and "
                "more steps than separate matrices.",
                (_flipped(4),),
            ),
        ),
    )
)
