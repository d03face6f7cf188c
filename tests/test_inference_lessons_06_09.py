"""Diagnosis by inference for the graded exercises of lessons 06-09, tried as learners try it.

Like tests/test_checks_inference.py, but for attention_backward, weight_grads (06),
split_heads, merge_heads, mha_by_hand (07), causal_mask, padding_mask (08), attention_on
and probe_accuracy with its two graded parts (09): functions written the way learners write
them — loops, einsum, torch instead of numpy, one or two mistakes at once — must be named
with exactly their ids (two mistakes as two), and correct functions written differently
must pass with no diagnosis, the inference run directly measuring nothing. The last tests
check that the visible and hidden cases exercise every rule the exercises' texts state.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from named import assert_correct, assert_named, in_registry_order

from attnlib import checks
from attnlib.checks import get_exercise

# ----------------------------------------------------------------------------------------
# Lesson 06: attention_backward and weight_grads
# ----------------------------------------------------------------------------------------


def _T(x):
    return np.swapaxes(x, -1, -2)


def _weights(q, k):
    s = q @ _T(k) / math.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def backward_both_untransposed(q, k, v, g):
    # "the shapes work out" on square scores: dS @ q and A @ g
    A = _weights(q, k)
    dA = g @ _T(v)
    dS = A * (dA - (A * dA).sum(-1, keepdims=True))
    c = 1 / math.sqrt(q.shape[-1])
    return dS @ k * c, dS @ q * c, A @ g


def backward_wrong_axis_unscaled(q, k, v, g):
    A = _weights(q, k)
    dA = g @ _T(v)
    dS = A * (dA - (A * dA).sum(-2, keepdims=True))  # summed over the queries
    return dS @ k, _T(dS) @ q, _T(A) @ g  # and the 1/sqrt(d_k) forgotten


def backward_jacobian_without_weights(q, k, v, g):
    # the row's weighted mean subtracted, the leading A forgotten
    A = _weights(q, k)
    dA = g @ _T(v)
    dS = dA - (A * dA).sum(-1, keepdims=True)
    c = 1 / math.sqrt(q.shape[-1])
    return dS @ k * c, _T(dS) @ q * c, _T(A) @ g


def backward_loop_correct(q, k, v, g):
    A = _weights(q, k)
    dA = g @ _T(v)
    dS = np.empty_like(A)
    for idx in np.ndindex(*A.shape[:-1]):
        a, d = A[idx], dA[idx]
        dS[idx] = (np.diag(a) - np.outer(a, a)) @ d
    c = 1 / math.sqrt(q.shape[-1])
    return dS @ k * c, _T(dS) @ q * c, _T(A) @ g


def _attention_grads(q, k, v, g):
    A = _weights(q, k)
    dA = g @ _T(v)
    dS = A * (dA - (A * dA).sum(-1, keepdims=True))
    c = 1 / math.sqrt(q.shape[-1])
    return dS @ k * c, _T(dS) @ q * c, _T(A) @ g


def _qkv(x_q, x_kv, W_q, W_k, W_v):
    return x_q @ W_q.T, x_kv @ W_k.T, x_kv @ W_v.T


def wg_math_convention(x_q, x_kv, W_q, W_k, W_v, d_out):
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    return ((_T(x_q) @ dq).sum(0), (_T(x_kv) @ dk).sum(0), (_T(x_kv) @ dv).sum(0))


def wg_mean_over_batch(x_q, x_kv, W_q, W_k, W_v, d_out):
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    return ((_T(dq) @ x_q).mean(0), (_T(dk) @ x_kv).mean(0), (_T(dv) @ x_kv).mean(0))


def wg_loop_overwrites(x_q, x_kv, W_q, W_k, W_v, d_out):
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    for b in range(len(x_q)):  # = instead of +=: only the last sentence is kept
        dW_q, dW_k, dW_v = dq[b].T @ x_q[b], dk[b].T @ x_kv[b], dv[b].T @ x_kv[b]
    return dW_q, dW_k, dW_v


def wg_first_sentence(x_q, x_kv, W_q, W_k, W_v, d_out):
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    return dq[0].T @ x_q[0], dk[0].T @ x_kv[0], dv[0].T @ x_kv[0]


def wg_one_input_for_all(x_q, x_kv, W_q, W_k, W_v, d_out):
    # a self-attention habit: every gradient taken from the keys' input
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    x = x_kv
    return (np.einsum("bij,bim->jm", dq, x), np.einsum("bij,bim->jm", dk, x),
            np.einsum("bij,bim->jm", dv, x))  # fmt: skip


def wg_inputs_swapped(x_q, x_kv, W_q, W_k, W_v, d_out):
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    return (np.einsum("bij,bim->jm", dq, x_kv), np.einsum("bij,bim->jm", dk, x_q),
            np.einsum("bij,bim->jm", dv, x_q))  # fmt: skip


def wg_math_convention_and_mean(x_q, x_kv, W_q, W_k, W_v, d_out):
    return tuple(g.T / len(x_q) for g in wg_loop_correct(x_q, x_kv, W_q, W_k, W_v, d_out))


def wg_unscaled_backward(x_q, x_kv, W_q, W_k, W_v, d_out):
    q, k, v = _qkv(x_q, x_kv, W_q, W_k, W_v)
    A = _weights(q, k)
    dA = d_out @ _T(v)
    dS = A * (dA - (A * dA).sum(-1, keepdims=True))
    dq, dk, dv = dS @ k, _T(dS) @ q, _T(A) @ d_out  # no 1/sqrt(d_k)
    return (np.einsum("bij,bim->jm", dq, x_q), np.einsum("bij,bim->jm", dk, x_kv),
            np.einsum("bij,bim->jm", dv, x_kv))  # fmt: skip


def wg_per_sentence(x_q, x_kv, W_q, W_k, W_v, d_out):
    # einsum that keeps the batch axis: one gradient per sentence
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    grads = (("bij,bim->bjm", dq, x_q), ("bij,bim->bjm", dk, x_kv), ("bij,bim->bjm", dv, x_kv))
    return tuple(np.einsum(rule, g, x) for rule, g, x in grads)


def wg_everything_scaled(x_q, x_kv, W_q, W_k, W_v, d_out):
    # 1/sqrt(d_k) applied to all three gradients
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    dv = dv / math.sqrt(W_k.shape[0])
    return tuple(np.einsum("bij,bim->jm", g, x) for g, x in ((dq, x_q), (dk, x_kv), (dv, x_kv)))


def wg_loop_correct(x_q, x_kv, W_q, W_k, W_v, d_out):
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    dW = [np.zeros_like(W_q), np.zeros_like(W_k), np.zeros_like(W_v)]
    for b in range(len(x_q)):
        dW[0] += dq[b].T @ x_q[b]
        dW[1] += dk[b].T @ x_kv[b]
        dW[2] += dv[b].T @ x_kv[b]
    return tuple(dW)


def wg_tensordot(x_q, x_kv, W_q, W_k, W_v, d_out):
    dq, dk, dv = _attention_grads(*_qkv(x_q, x_kv, W_q, W_k, W_v), d_out)
    return tuple(np.tensordot(g, x, axes=([0, 1], [0, 1])) for g, x in
                 ((dq, x_q), (dk, x_kv), (dv, x_kv)))  # fmt: skip


def wg_torch(x_q, x_kv, W_q, W_k, W_v, d_out):
    # the same chain rule in torch, by hand (autograd would compute the answer for you)
    t = [torch.from_numpy(a) for a in (x_q, x_kv, W_q, W_k, W_v, d_out)]
    xq, xkv, Wq, Wk, Wv, g = t
    q, k, v = xq @ Wq.mT, xkv @ Wk.mT, xkv @ Wv.mT
    A = torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, dim=-1)
    dA = g @ v.mT
    dS = A * (dA - (A * dA).sum(-1, keepdim=True)) / q.shape[-1] ** 0.5
    dq, dk, dv = dS @ k, dS.mT @ q, A.mT @ g
    return tuple(torch.einsum("bij,bim->jm", d, x) for d, x in ((dq, xq), (dk, xkv), (dv, xkv)))


# ----------------------------------------------------------------------------------------
# Lesson 07: mha_by_hand (split_heads / merge_heads are in test_checks_inference.py)
# ----------------------------------------------------------------------------------------


def _mha(query, key, value, W, b, Wo, bo, n_heads, batch_first, *, bias=True, merge="swap",
         out_t=True, by="head", average=True, split_by="swap", out_bias=True):  # fmt: skip
    if not batch_first:
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    d = query.shape[-1]
    dh = d // n_heads
    Wq, Wk, Wv = W.chunk(3)
    bq, bk, bv = b.chunk(3) if bias else (0.0, 0.0, 0.0)

    def split(t):
        if split_by == "reshape":  # straight to (batch, n_heads, seq, d_head)
            return t.reshape(t.shape[0], n_heads, t.shape[1], dh)
        return t.reshape(t.shape[0], t.shape[1], n_heads, dh).transpose(1, 2)

    q, k, v = split(query @ Wq.T + bq), split(key @ Wk.T + bk), split(value @ Wv.T + bv)
    scale = {"head": math.sqrt(dh), "model": math.sqrt(d), "none": 1.0}[by]
    A = torch.softmax(q @ k.transpose(-1, -2) / scale, dim=-1)
    o = A @ v  # (batch, n_heads, seq_q, d_head)
    o = o.transpose(1, 2).reshape(o.shape[0], -1, d) if merge == "swap" else o.reshape(
        o.shape[0], -1, d)  # fmt: skip
    o = o @ (Wo.T if out_t else Wo) + (bo if out_bias else 0.0)
    if not batch_first:
        o = o.transpose(0, 1)
    return o, (A.mean(1) if average else A)


def mha_no_in_bias(*a):
    return _mha(*a, bias=False)


def mha_merge_by_reshape(*a):
    return _mha(*a, merge="reshape")


def mha_out_proj_as_stored(*a):
    return _mha(*a, out_t=False)


def mha_no_bias_per_head_weights(*a):
    return _mha(*a, bias=False, average=False)


def mha_reshape_merge_and_d_model(*a):
    return _mha(*a, merge="reshape", by="model")


def mha_out_as_stored_no_bias(*a):
    return _mha(*a, out_t=False, bias=False)


def mha_split_by_reshape(*a):
    return _mha(*a, split_by="reshape")


def mha_unscaled(*a):
    return _mha(*a, by="none")


def mha_no_out_bias(*a):
    return _mha(*a, out_bias=False)


def mha_split_by_reshape_unscaled_no_out_bias(*a):
    return _mha(*a, split_by="reshape", by="none", out_bias=False)


def mha_with_linear_and_einsum(query, key, value, W, b, Wo, bo, n_heads, batch_first):
    # correct, written with F.linear, unflatten and einsum (and no attnlib)
    if not batch_first:
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    d = query.shape[-1]
    (Wq, Wk, Wv), (bq, bk, bv) = W.split(d), b.split(d)
    lin = torch.nn.functional.linear

    def split(t):
        return t.unflatten(-1, (n_heads, -1))  # (batch, seq, n_heads, d_head)

    q, k, v = split(lin(query, Wq, bq)), split(lin(key, Wk, bk)), split(lin(value, Wv, bv))
    w = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q, k) / q.shape[-1] ** 0.5, -1)
    out = lin(torch.einsum("bhqk,bkhd->bqhd", w, v).flatten(-2), Wo, bo)
    return (out if batch_first else out.transpose(0, 1)), w.mean(1)


# ----------------------------------------------------------------------------------------
# Lesson 08: causal_mask and padding_mask
# ----------------------------------------------------------------------------------------


def causal_triu_float(seq):
    return np.triu(np.ones((seq, seq)), k=1)  # "1 = future" read as may attend, and floats


def causal_torch_float(seq):
    return torch.tril(torch.ones(seq, seq))


def causal_strict_arange(seq):
    i = np.arange(seq)
    return i[None, :] < i[:, None]


def causal_one_ahead(seq):
    return np.tri(seq, k=1, dtype=bool)  # k=1: one key past the diagonal


def causal_additive(seq):
    return np.where(np.tril(np.ones((seq, seq), dtype=bool)), 0.0, -np.inf)


def causal_one_ahead_triu_float(seq):
    i = np.arange(seq)
    return (i[None, :] <= i[:, None] + 1).astype(np.float32)


def padding_le(lengths, seq_k):
    return (np.arange(seq_k)[None, :] <= np.asarray(lengths)[:, None])[:, None, :]


def padding_pads_true(lengths, seq_k):
    return (np.arange(seq_k)[None, :] >= np.asarray(lengths)[:, None])[:, None, :]


def padding_torch_float_query_axis(lengths, seq_k):
    m = torch.arange(seq_k)[None, :] < torch.as_tensor(lengths)[:, None]
    return m[:, :, None].float()


def padding_square(lengths, seq_k):
    real = np.arange(seq_k)[None, :] < np.asarray(lengths)[:, None]
    return real[:, :, None] & real[:, None, :]  # pad queries blocked as well


def padding_left(lengths, seq_k):
    return (np.arange(seq_k)[None, :] >= seq_k - np.asarray(lengths)[:, None])[:, None, :]


def padding_left_le_int(lengths, seq_k):
    real = np.arange(seq_k)[None, :] > seq_k - np.asarray(lengths)[:, None] - 2
    return real[:, None, :].astype(int)


def padding_where(lengths, seq_k):
    lengths = np.asarray(lengths)
    return np.where(np.arange(seq_k) < lengths[:, None, None], True, False)


# ----------------------------------------------------------------------------------------
# Lesson 09: attention_on and probe_accuracy
# ----------------------------------------------------------------------------------------


def on_broadcast(weights, positions):
    return weights[:, :, positions].mean(dim=(0, 2))


def on_sum(weights, positions):
    return weights[range(len(positions)), :, positions].sum(0)


def on_mean_over_heads(weights, positions):
    return weights[torch.arange(weights.shape[0]), :, positions].mean(1)


def on_broadcast_sum(weights, positions):
    return weights[:, :, positions].sum(dim=(0, 2))


def on_gather(weights, positions):
    idx = positions[:, None, None].expand(-1, weights.shape[1], 1)
    return weights.gather(2, idx).squeeze(2).mean(0)


def on_loop(weights, positions):
    total = torch.zeros(weights.shape[1], dtype=weights.dtype)
    for b, p in enumerate(positions.tolist()):
        total += weights[b, :, p]
    return total / len(positions)


def _fit(X, y, n, ones=True):
    if ones:
        X = np.hstack([X, np.ones((len(X), 1))])
    W, *_ = np.linalg.lstsq(X, np.eye(n)[y], rcond=None)
    return W


def _pred(X, W, ones=True):
    if ones:
        X = np.hstack([X, np.ones((len(X), 1))])
    return (X @ W).argmax(1)


def _n(y_train, y_test):
    return int(max(y_train.max(), y_test.max())) + 1


def probe_no_ones(X_train, y_train, X_test, y_test):
    W = _fit(X_train, y_train, _n(y_train, y_test), ones=False)
    return float((_pred(X_test, W, ones=False) == y_test).mean())


def probe_sets_swapped(X_train, y_train, X_test, y_test):
    W = _fit(X_test, y_test, _n(y_train, y_test))  # fitted on the test rows...
    return float((_pred(X_train, W) == y_train).mean())  # ...scored on the training rows


def probe_train_accuracy(X_train, y_train, X_test, y_test):
    W = _fit(X_train, y_train, _n(y_train, y_test))
    return float((_pred(X_train, W) == y_train).mean())


def probe_sorted_labels_no_ones(X_train, y_train, X_test, y_test):
    W = _fit(X_train, np.sort(y_train), _n(y_train, y_test), ones=False)
    return float((_pred(X_test, W, ones=False) == y_test).mean())


def probe_pinv(X_train, y_train, X_test, y_test):
    n = _n(y_train, y_test)
    A = np.c_[X_train, np.ones(len(X_train))]
    W = np.linalg.pinv(A) @ (y_train[:, None] == np.arange(n)).astype(float)
    return float(((np.c_[X_test, np.ones(len(X_test))] @ W).argmax(1) == y_test).mean())


def probe_torch(X_train, y_train, X_test, y_test):
    n = _n(y_train, y_test)
    A = torch.from_numpy(np.c_[np.ones(len(X_train)), X_train])  # the ones column first
    Y = torch.nn.functional.one_hot(torch.from_numpy(y_train), n).double()
    W = torch.linalg.lstsq(A, Y, driver="gelsd").solution
    pred = (torch.from_numpy(np.c_[np.ones(len(X_test)), X_test]) @ W).argmax(1)
    return (pred == torch.from_numpy(y_test)).double().mean().item()


REALISTIC = [
    ("attention_backward", backward_both_untransposed, ["dk-not-transposed", "dv-not-transposed"]),
    ("attention_backward", backward_jacobian_without_weights, ["softmax-jacobian-missing-weights"]),
    ("attention_backward", backward_wrong_axis_unscaled,
     ["softmax-jacobian-wrong-axis", "backward-scale-missing"]),
    ("weight_grads", wg_math_convention, ["weight-grad-transposed"]),
    ("weight_grads", wg_mean_over_batch, ["batch-mean"]),
    ("weight_grads", wg_loop_overwrites, ["batch-one-element"]),
    ("weight_grads", wg_first_sentence, ["batch-one-element"]),
    ("weight_grads", wg_one_input_for_all, ["query-grad-from-kv-input"]),
    ("weight_grads", wg_inputs_swapped, ["query-grad-from-kv-input", "kv-grads-from-query-input"]),
    ("weight_grads", wg_math_convention_and_mean, ["weight-grad-transposed", "batch-mean"]),
    ("weight_grads", wg_unscaled_backward, ["backward-scale-missing"]),
    ("weight_grads", wg_per_sentence, ["batch-not-reduced"]),
    ("weight_grads", wg_everything_scaled, ["scale-on-values"]),
    ("mha_by_hand", mha_no_in_bias, ["in-proj-bias-missing"]),
    ("mha_by_hand", mha_merge_by_reshape, ["merge-without-transpose"]),
    ("mha_by_hand", mha_out_proj_as_stored, ["out-proj-not-transposed"]),
    ("mha_by_hand", mha_no_bias_per_head_weights, ["in-proj-bias-missing", "weights-not-averaged"]),
    ("mha_by_hand", mha_reshape_merge_and_d_model, ["scale-by-d-model", "merge-without-transpose"]),
    ("mha_by_hand", mha_out_as_stored_no_bias, ["in-proj-bias-missing", "out-proj-not-transposed"]),
    ("mha_by_hand", mha_split_by_reshape, ["heads-split-without-transpose"]),
    ("mha_by_hand", mha_unscaled, ["scores-not-scaled"]),
    ("mha_by_hand", mha_no_out_bias, ["out-proj-bias-missing"]),
    ("mha_by_hand", mha_split_by_reshape_unscaled_no_out_bias,
     ["scores-not-scaled", "heads-split-without-transpose", "out-proj-bias-missing"]),
    ("causal_mask", causal_triu_float, ["causal-inverted", "mask-not-boolean"]),
    ("causal_mask", causal_torch_float, ["mask-not-boolean"]),
    ("causal_mask", causal_strict_arange, ["causal-diagonal-excluded"]),
    ("causal_mask", causal_one_ahead, ["causal-one-future-key"]),
    ("causal_mask", causal_additive, ["mask-not-boolean"]),
    ("causal_mask", causal_one_ahead_triu_float, ["causal-one-future-key", "mask-not-boolean"]),
    ("padding_mask", padding_le, ["padding-off-by-one"]),
    ("padding_mask", padding_pads_true, ["padding-inverted"]),
    ("padding_mask", padding_torch_float_query_axis, ["padding-on-query-axis", "mask-not-boolean"]),
    ("padding_mask", padding_square, ["padding-square"]),
    ("padding_mask", padding_left, ["padding-left-aligned"]),
    ("padding_mask", padding_left_le_int,
     ["padding-left-aligned", "padding-off-by-one", "mask-not-boolean"]),
    ("attention_on", on_broadcast, ["index-broadcast"]),
    ("attention_on", on_sum, ["sum-not-mean"]),
    ("attention_on", on_mean_over_heads, ["mean-over-heads"]),
    ("attention_on", on_broadcast_sum, ["index-broadcast", "sum-not-mean"]),
    ("probe_accuracy", probe_no_ones, ["probe-no-bias"]),
    ("probe_accuracy", probe_train_accuracy, ["probe-scored-on-train"]),
    ("probe_accuracy", probe_sets_swapped, ["probe-trained-on-test", "probe-scored-on-train"]),
    ("probe_accuracy", probe_sorted_labels_no_ones, ["labels-misaligned", "probe-no-bias"]),
    ("probe_accuracy_bias", probe_no_ones, ["probe-no-bias"]),
    ("probe_accuracy_bias", probe_sets_swapped, ["probe-trained-on-test", "probe-scored-on-train"]),
    ("probe_accuracy_heldout", probe_sets_swapped,
     ["probe-trained-on-test", "probe-scored-on-train"]),
    ("probe_accuracy_heldout", probe_train_accuracy, ["probe-scored-on-train"]),
]  # fmt: skip

CORRECT = {
    "attention_backward": [backward_loop_correct],
    "weight_grads": [wg_loop_correct, wg_tensordot, wg_torch],
    "mha_by_hand": [mha_with_linear_and_einsum],
    "padding_mask": [padding_where],
    "attention_on": [on_gather, on_loop],
    "probe_accuracy": [probe_pinv, probe_torch],
    "probe_accuracy_heldout": [probe_pinv, probe_torch],
    "probe_accuracy_bias": [probe_pinv, probe_torch],
}


@pytest.mark.parametrize(
    ("name", "fn", "ids"),
    [pytest.param(n, f, i, id=f"{n}-{f.__name__}") for n, f, i in REALISTIC],
)
def test_a_realistic_mistake_is_named_with_all_its_ids(name, fn, ids):
    assert_named(name, fn, ids)


@pytest.mark.parametrize(
    ("name", "fn"),
    [pytest.param(n, f, id=f"{n}-{f.__name__}") for n, fs in CORRECT.items() for f in fs],
)
def test_a_correct_function_written_differently_passes_and_measures_nothing(name, fn):
    assert_correct(name, fn)


@pytest.mark.parametrize(
    "name",
    ["weight_grads", "mha_by_hand", "attention_on", "probe_accuracy", "probe_accuracy_heldout",
     "probe_accuracy_bias"],
)  # fmt: skip
def test_every_pair_of_mistakes_is_named_as_two(name):
    # test_checks_registry runs the same pairs; here the count is pinned so that a new
    # choice without its pairs is noticed
    pairs = checks.co_occurring(name)
    assert pairs, name
    for ids, fn in pairs:
        assert checks.diagnose(name, fn) == in_registry_order(name, ids), ids


def test_the_pair_counts_cover_every_independent_choice():
    counts = {n: len(checks.co_occurring(n)) for n in ("weight_grads", "mha_by_hand")}
    # weight_grads: 8 choices, three of one key (batch), two of another (scale); mha: 14
    # choices, two of one key (scale), two of another (heads), 2 exclusive pairs
    assert counts == {"weight_grads": 24, "mha_by_hand": 87}


def test_the_pair_counts_cover_every_independent_choice_of_lesson_09():
    counts = {n: len(checks.co_occurring(n)) for n in ("attention_on", "probe_accuracy")}
    assert counts == {"attention_on": 5, "probe_accuracy": 10}


# ----------------------------------------------------------------------------------------
# The cases exercise every rule the exercise texts state
# ----------------------------------------------------------------------------------------


def _wg_sizes(case):
    x_q, x_kv, W_q, W_k, W_v, d_out = case.args
    batch, seq_q, d_model = x_q.shape
    return batch, seq_q, x_kv.shape[1], d_model, W_k.shape[0], W_v.shape[0]


@pytest.mark.parametrize("hidden", [False, True])
def test_weight_grads_cases_cover_the_stated_rules(hidden):
    cases = get_exercise("weight_grads").cases(hidden=hidden)
    sizes = [_wg_sizes(c) for c in cases]
    assert any(b >= 2 for b, *_ in sizes)  # the batch is summed
    assert any(sq != sk for _, sq, sk, *_ in sizes)  # cross-attention
    assert any(sq == sk for _, sq, sk, *_ in sizes)  # where wrong inputs still run
    assert all(dm != dk for _, _, _, dm, dk, _ in sizes)  # a transposed gradient has its shape
    assert any(dk != dv for *_, dk, dv in sizes)
    assert any(not np.array_equal(c.args[0], c.args[1][:, : c.args[0].shape[1]]) for c in cases)


def test_mha_cases_cover_the_stated_rules():
    cases = get_exercise("mha_by_hand").cases(hidden=True)
    layouts = {c.args[-1] for c in cases}
    assert layouts == {True, False}  # both input layouts
    assert any(c.args[0].shape != c.args[1].shape for c in cases)  # cross-attention
    assert any(c.args[0] is not c.args[1] and torch.equal(c.args[0], c.args[1]) for c in cases)
    assert all(c.args[4].abs().min() > 0 for c in cases)  # biases that count
    assert len({c.args[-2] for c in cases}) >= 3  # several head counts


def test_mask_cases_cover_the_stated_rules():
    causal = [c.args[0] for c in get_exercise("causal_mask").cases(hidden=True)]
    assert 1 in causal and max(causal) >= 4
    pads = [c.args for c in get_exercise("padding_mask").cases(hidden=True)]
    assert any(0 in lengths for lengths, _ in pads)  # an empty sequence: a row of False
    assert any(max(lengths) < seq_k for lengths, seq_k in pads)  # padded beyond every length
    assert any(seq_k in lengths for lengths, seq_k in pads)  # a sequence without padding


def test_syntax_cases_cover_the_stated_rules():
    shapes = []
    for case in get_exercise("attention_on").cases(hidden=True):
        weights, positions = case.args
        assert positions.shape == (weights.shape[0],)
        shapes.append(tuple(weights.shape))
    assert any(len(set(s)) == 3 for s in shapes)  # batch, n_heads, seq_k all differ
    assert any(s[0] == s[1] for s in shapes)  # a mean over the heads has the right shape
    centred = get_exercise("probe_accuracy_heldout").cases(hidden=True)
    for case in centred:
        X_train, y_train, _, _ = case.args
        assert np.allclose(X_train.mean(0), 0) and len(set(np.bincount(y_train))) == 1
    far = get_exercise("probe_accuracy_bias").cases(hidden=True)
    assert all(np.abs(c.args[0].mean(0)).max() > 0.5 for c in far)
    classes = {int(max(c.args[1].max(), c.args[3].max())) + 1 for c in far + centred}
    assert {2, 3, 4} <= classes


def test_a_check_of_several_mistakes_stays_well_under_a_second():
    # CPU time of this process: other jobs on a shared machine do not count against it.
    import time

    worst = {}
    for name, fn, _ in REALISTIC:
        t0 = time.process_time()
        checks.run(name, fn)
        worst[f"{name}/{fn.__name__}"] = time.process_time() - t0
    slowest = max(worst, key=worst.get)
    assert worst[slowest] < 1.0, (slowest, worst[slowest])
