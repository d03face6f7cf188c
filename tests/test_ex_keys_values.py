"""The checks of lessons 05-07: lookup_batch, attention_backward, weight_grads, mha_by_hand,
and the prediction of lesson 05.

References are compared with independent oracles (a Python loop; torch autograd, and for
weight_grads attnlib.backprop.projection_grads; nn.MultiheadAttention itself and
attnlib.torch_mha.mha_forward). That every known wrong
variant is diagnosed as exactly its own misconception, that check() names it and that
check_hidden() fails it, is tested for every exercise in tests/test_checks_registry.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from attnlib import checks
from attnlib.checks import ex_backprop as BP
from attnlib.checks import ex_keys_values as KV
from attnlib.checks import ex_mha as MHA
from attnlib.checks import get_exercise
from attnlib.torch_mha import mha_forward

EXERCISES = (
    "lookup_batch",
    "attention_backward",
    "weight_grads",
    "mha_by_hand",
    "kv_prediction",
    *KV.PARTS,
)


CORRECT = {
    "lookup_batch": KV._lb_variant(),
    "attention_backward": BP._bw_variant(),
    "weight_grads": BP._wg_build(),
    "mha_by_hand": MHA._mha_variant(),
    "kv_prediction": KV.answers(
        lambda: np.array([True, False, True, False, True, False, False, True])
    ),
    **{
        part: KV.answers(lambda: np.array([True, False, True, False, True, False, False, True]))
        for part in KV.PARTS
    },
}


@pytest.mark.parametrize("name", EXERCISES)
def test_an_independent_correct_version_passes_with_one_line(name, capsys):
    """The variants' builder with its defaults is a second, independent correct solution."""
    correct = CORRECT[name]
    assert checks.run(name, correct, hidden=True).ok
    checks.check(name, correct)
    n_cases = len(get_exercise(name).cases())
    assert capsys.readouterr().out == f"✔ {name}: correct on all {n_cases} cases\n"
    checks.check_hidden(name, correct)


# ---- the references against independent oracles ------------------------------------------


def test_lookup_reference_matches_a_loop():
    for case in get_exercise("lookup_batch").cases(hidden=True):
        names, numbers, query_pos, n_names, n_numbers = case.args
        tokens, query, target = get_exercise("lookup_batch").reference(*case.args)
        for b in range(len(names)):
            for j in range(names.shape[1]):
                row = np.zeros(n_names + n_numbers)
                row[names[b, j]] = row[n_names + numbers[b, j]] = 1
                np.testing.assert_array_equal(tokens[b, j], row)
            qrow = np.zeros(n_names + n_numbers)
            qrow[names[b, query_pos[b]]] = 1
            np.testing.assert_array_equal(query[b, 0], qrow)
            assert target[b] == numbers[b, query_pos[b]]


def test_backward_reference_matches_autograd():
    for case in get_exercise("attention_backward").cases(hidden=True):
        q, k, v, d_out = (torch.tensor(a, requires_grad=True) for a in case.args)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        (torch.softmax(s, -1) @ v).backward(d_out.detach())
        got = get_exercise("attention_backward").reference(*case.args)
        for g, t in zip(got, (q, k, v), strict=True):
            np.testing.assert_allclose(
                g, t.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=case.label
            )


def test_mha_reference_matches_attnlib_torch_mha():
    for case in get_exercise("mha_by_hand").cases(hidden=True):
        query, key, value, W_in, b_in, W_out, b_out, n_heads, batch_first = case.args
        mha = nn.MultiheadAttention(query.shape[-1], n_heads, batch_first=batch_first,
                                    dtype=torch.float64).eval()  # fmt: skip
        with torch.no_grad():
            mha.in_proj_weight.copy_(W_in)
            mha.in_proj_bias.copy_(b_in)
            mha.out_proj.weight.copy_(W_out)
            mha.out_proj.bias.copy_(b_out)
            want = mha_forward(mha, query, key, value)
        got = get_exercise("mha_by_hand").reference(*case.args)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_mha_cases_expose_the_mistakes():
    cases = get_exercise("mha_by_hand").cases()
    assert any(not c.args[-1] for c in cases), "a batch_first=False case"
    for c in cases:
        query, n_heads, batch_first = c.args[0], c.args[-2], c.args[-1]
        assert n_heads >= 2, "scaling by d_model differs from d_head only with >= 2 heads"
        if not batch_first:
            assert query.shape[0] != query.shape[1], "seq != batch, so a wrong axis shows"


def test_backward_cases_include_square_and_non_square_scores():
    shapes = [(c.args[0].shape[-2], c.args[1].shape[-2]) for c in get_exercise(
        "attention_backward").cases()]  # fmt: skip
    assert any(a == b for a, b in shapes) and any(a != b for a, b in shapes)


# ---- solutions that must not pass -----------------------------------------------------------


def test_calling_the_reference_is_refused():
    from attnlib.backprop import attention_backward
    from attnlib.tasks.lookup import lookup_batch

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("attention_backward", lambda q, k, v, d: attention_backward(q, k, v, d))
    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("lookup_batch", lambda *a: lookup_batch(*a))


def test_calling_torch_multi_head_attention_forward_is_refused():
    def via_torch(query, key, value, W_in, b_in, W_out, b_out, n_heads, batch_first):
        mha = nn.MultiheadAttention(query.shape[-1], n_heads, batch_first=batch_first,
                                    dtype=torch.float64)  # fmt: skip
        with torch.no_grad():
            mha.in_proj_weight.copy_(W_in)
            mha.in_proj_bias.copy_(b_in)
            mha.out_proj.weight.copy_(W_out)
            mha.out_proj.bias.copy_(b_out)
        return mha(query, key, value)  # training mode: the Python path

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("mha_by_hand", via_torch)


def test_an_unknown_mistake_fails_without_a_diagnosis():
    def zeros(q, k, v, d_out):
        return np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)

    report = checks.run("attention_backward", zeros)
    assert not report.ok and report.misconceptions == []


# ---- the prediction of lesson 05: tests/test_kv_prediction.py ------------------------------


def test_weight_grads_reference_matches_attnlib_projection_grads():
    from attnlib.backprop import projection_grads

    for case in get_exercise("weight_grads").cases(hidden=True):
        x_q, x_kv, W_q, W_k, W_v, d_out = case.args
        got = get_exercise("weight_grads").reference(*case.args)  # torch autograd
        want = projection_grads(x_q, x_kv, W_q.T, W_k.T, W_v.T, d_out)  # math convention
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w.T, rtol=1e-10, atol=1e-12, err_msg=case.label)
