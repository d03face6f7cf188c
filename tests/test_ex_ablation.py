"""Lesson 16's Exercise 16.2, ``ablate_head``: submissions written the way learners write
them, named by measurement; the reference against independent oracles.

* Correct functions written differently (a pre-hook on ``W_o``, a copy with ``W_o``'s
  columns zeroed, the weights zeroed in place and put back, the head's values zeroed with
  their bias, a forward hook taking the head's part back out) pass with no diagnosis, and
  the source audit finds nothing in the hook and copy solutions.
* Realistic mistakes, each as a learner writes it with hooks or weights (the stream's
  features zeroed by a hook on ``W_o``'s output, the keys' weights zeroed, heads and blocks
  counted from 1, a pre-hook that forgets to return, a forward hook changing the input too
  late, ``[..., -d_head:]``, a hook left attached, ...), and two at once, are named with
  exactly their ids.
* The reference equals a float64 deep copy with ``W_o``'s columns zeroed, a pre-hook
  zeroing the head's features and ``attnlib.tasks.reading.ablated_logits`` on every case,
  and leaves the model bit for bit as it was, hooks included.
* The inference's batched forward pass equals the model's own, and the changes it tells
  apart are far apart on its probe: two changes closer than 1e-2 name the same mistakes.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from named import assert_correct, assert_named, grader_check_hidden

from attnlib import checks
from attnlib.checks import ex_ablation, get_exercise
from attnlib.tasks import reading

NAME = "ablate_head"


def _cols(model, head):
    return slice(head * model.d_head, (head + 1) * model.d_head)


# ----------------------------------------------------------------------------------------
# Correct, written differently
# ----------------------------------------------------------------------------------------


def with_pre_hook(model, tokens, layer, head):
    cols = _cols(model, head)

    def remove(module, args):
        x = args[0].clone()
        x[..., cols] = 0.0
        return (x,)

    handle = model.h[layer].attn.W_o.register_forward_pre_hook(remove)
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        handle.remove()


def with_a_copy(model, tokens, layer, head):
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.h[layer].attn.W_o.weight[:, _cols(model, head)] = 0
        return twin(tokens)


def in_place_and_back(model, tokens, layer, head):
    w = model.h[layer].attn.W_o.weight
    cols = _cols(model, head)
    saved = w[:, cols].clone()
    with torch.no_grad():
        w[:, cols] = 0
        try:
            return model(tokens)
        finally:
            w[:, cols] = saved


def values_with_their_bias(model, tokens, layer, head):
    # every value of the head 0 (weights and bias): its weighted average is 0 too
    twin = copy.deepcopy(model)
    v = twin.h[layer].attn.W_v
    with torch.no_grad():
        v.weight[_cols(model, head)] = 0
        v.bias[_cols(model, head)] = 0
        return twin(tokens)


def subtract_the_heads_part(model, tokens, layer, head):
    cols = _cols(model, head)
    seen = {}
    w_o = model.h[layer].attn.W_o

    def keep(module, args):
        seen["x"] = args[0]

    def take_out(module, args, out):
        return out - seen["x"][..., cols] @ module.weight[:, cols].T

    handles = [w_o.register_forward_pre_hook(keep), w_o.register_forward_hook(take_out)]
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        for h in handles:
            h.remove()


@pytest.mark.parametrize(
    "fn",
    [with_pre_hook, with_a_copy, in_place_and_back, values_with_their_bias,
     subtract_the_heads_part],
)  # fmt: skip
def test_correct_ablations_written_differently_pass(fn):
    assert_correct(NAME, fn)


HOOK_SOLUTION = """
def ablate_head(model, tokens, layer, head):
    d_head = model.d_head
    cols = slice(head * d_head, (head + 1) * d_head)

    def remove(module, args):
        x = args[0].clone()
        x[..., cols] = 0.0
        return (x,)

    handle = model.h[layer].attn.W_o.register_forward_pre_hook(remove)
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        handle.remove()
"""

COPY_SOLUTION = """
import copy

def ablate_head(model, tokens, layer, head):
    twin = copy.deepcopy(model)
    d = twin.d_head
    with torch.no_grad():
        twin.h[layer].attn.W_o.weight[:, head * d:(head + 1) * d] = 0
        out = twin(tokens)
    return out
"""


@pytest.mark.parametrize("source", [HOOK_SOLUTION, COPY_SOLUTION], ids=["hook", "copy"])
def test_the_source_audit_finds_nothing_in_hook_or_copy_solutions(source):
    from kvstaff.grader.audit import _forbidden_names, audit_code

    forbidden = _forbidden_names({NAME, "prefix_matching_score"})  # lesson 16's exercises
    assert "ablated_logits" in forbidden
    assert audit_code(source, forbidden) == []
    assert audit_code("from attnlib.tasks.reading import ablated_logits", forbidden)


# ----------------------------------------------------------------------------------------
# Mistakes as learners write them
# ----------------------------------------------------------------------------------------


def _with_pre_hook(model, tokens, layer, cols, *, keep=False):
    def remove(module, args):
        x = args[0].clone()
        x[..., cols] = 0.0
        return (x,)

    handle = model.h[layer].attn.W_o.register_forward_pre_hook(remove)
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        if not keep:
            handle.remove()


def stream_features_by_a_forward_hook(model, tokens, layer, head):
    cols = _cols(model, head)

    def remove(module, args, out):
        out = out.clone()
        out[..., cols] = 0.0  # what W_o writes: features of the stream
        return out

    handle = model.h[layer].attn.W_o.register_forward_hook(remove)
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        handle.remove()


def rows_of_a_copy(model, tokens, layer, head):
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.h[layer].attn.W_o.weight[_cols(model, head)] = 0  # rows: the stream's features
        return twin(tokens)


def keys_zeroed(model, tokens, layer, head):
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.h[layer].attn.W_k.weight[_cols(model, head)] = 0  # "the head finds nothing"
        return twin(tokens)


def queries_zeroed(model, tokens, layer, head):
    twin = copy.deepcopy(model)
    q = twin.h[layer].attn.W_q
    with torch.no_grad():
        q.weight[_cols(model, head)] = 0
        q.bias[_cols(model, head)] = 0
        return twin(tokens)


def values_zeroed(model, tokens, layer, head):
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.h[layer].attn.W_v.weight[_cols(model, head)] = 0
        return twin(tokens)


def forgets_to_return(model, tokens, layer, head):
    cols = _cols(model, head)

    def remove(module, args):
        x = args[0].clone()
        x[..., cols] = 0.0

    handle = model.h[layer].attn.W_o.register_forward_pre_hook(remove)
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        handle.remove()


def forward_hook_too_late(model, tokens, layer, head):
    cols = _cols(model, head)

    def remove(module, args, out):
        args[0][..., cols] = 0.0  # W_o has already read it

    handle = model.h[layer].attn.W_o.register_forward_hook(remove)
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        handle.remove()


def heads_from_one(model, tokens, layer, head):
    d = model.d_head
    return _with_pre_hook(model, tokens, layer, slice((head - 1) * d, head * d))


def heads_and_blocks_from_one(model, tokens, layer, head):
    d = model.d_head
    return _with_pre_hook(model, tokens, layer - 1, slice((head - 1) * d, head * d))


def n_heads_for_d_head(model, tokens, layer, head):
    h = model.n_heads
    return _with_pre_hook(model, tokens, layer, slice(head * h, (head + 1) * h))


def n_heads_start(model, tokens, layer, head):
    start = head * model.n_heads
    return _with_pre_hook(model, tokens, layer, slice(start, start + model.d_head))


def last_heads_slice(model, tokens, layer, head):
    return _with_pre_hook(model, tokens, layer, slice(-model.d_head, None))


def open_ended_slice(model, tokens, layer, head):
    return _with_pre_hook(model, tokens, layer, slice(head * model.d_head, None))


def one_column(model, tokens, layer, head):
    return _with_pre_hook(model, tokens, layer, head)


def whole_attention(model, tokens, layer, head):
    def remove(module, args, out):
        return (torch.zeros_like(out[0]), out[1])  # the block asks for the weights too

    handle = model.h[layer].attn.register_forward_hook(remove)
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        handle.remove()


def every_block(model, tokens, layer, head):
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for block in twin.h:
            block.attn.W_o.weight[:, _cols(model, head)] = 0
        return twin(tokens)


def bias_too(model, tokens, layer, head):
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.h[layer].attn.W_o.weight[:, _cols(model, head)] = 0
        twin.h[layer].attn.W_o.bias.zero_()
        return twin(tokens)


def hook_left_attached(model, tokens, layer, head):
    return _with_pre_hook(model, tokens, layer, _cols(model, head), keep=True)


def zeroed_in_place(model, tokens, layer, head):
    with torch.no_grad():
        model.h[layer].attn.W_o.weight[:, _cols(model, head)] = 0
        return model(tokens)


def probabilities(model, tokens, layer, head):
    return torch.softmax(with_pre_hook(model, tokens, layer, head), dim=-1)


def log_probabilities(model, tokens, layer, head):
    return torch.log_softmax(with_pre_hook(model, tokens, layer, head), dim=-1)


def hook_left_and_probabilities(model, tokens, layer, head):
    return torch.softmax(hook_left_attached(model, tokens, layer, head), dim=-1)


def rows_in_every_block(model, tokens, layer, head):
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for block in twin.h:
            block.attn.W_o.weight[_cols(model, head)] = 0
        return twin(tokens)


REALISTIC = [
    (stream_features_by_a_forward_hook, ["stream-slice-zeroed"]),
    (rows_of_a_copy, ["stream-slice-zeroed"]),
    (keys_zeroed, ["query-or-key-zeroed"]),
    (queries_zeroed, ["query-or-key-zeroed"]),
    (values_zeroed, ["value-bias-kept"]),
    (forgets_to_return, ["nothing-ablated"]),
    (forward_hook_too_late, ["nothing-ablated"]),
    (heads_from_one, ["head-off-by-one"]),
    (n_heads_for_d_head, ["slice-uses-n-heads"]),
    (n_heads_start, ["slice-uses-n-heads"]),
    (last_heads_slice, ["last-head"]),
    (open_ended_slice, ["slice-to-end"]),
    (one_column, ["single-channel"]),
    (whole_attention, ["whole-layer"]),
    (every_block, ["every-layer"]),
    (bias_too, ["output-bias-zeroed"]),
    (hook_left_attached, ["model-changed"]),
    (zeroed_in_place, ["model-changed"]),
    (probabilities, ["not-logits"]),
    (log_probabilities, ["not-logits"]),
    (heads_and_blocks_from_one, ["head-off-by-one", "layer-off-by-one"]),
    (hook_left_and_probabilities, ["not-logits", "model-changed"]),
    (rows_in_every_block, ["stream-slice-zeroed", "every-layer"]),
]


@pytest.mark.parametrize(
    ("fn", "ids"),
    [  # two at once, as the learner reads them: a question each, then each cause
        (heads_and_blocks_from_one, ["head-off-by-one", "layer-off-by-one"]),
        (hook_left_and_probabilities, ["not-logits", "model-changed"]),
    ],
    ids=lambda v: v.__name__ if callable(v) else "+".join(v),
)
def test_realistic_ablation_mistakes_are_named_in_steps(fn, ids):
    assert_named(NAME, fn, ids)


@pytest.mark.parametrize(
    ("fn", "ids"), REALISTIC, ids=lambda v: v.__name__ if callable(v) else "+".join(v)
)
def test_realistic_ablation_mistakes_are_named_by_measurement(fn, ids):
    report = checks.run(NAME, fn)
    assert not report.ok and not report.inference_error
    assert [f.id for f in report.findings] == ids, report.findings
    assert all(len(f.detail) > 20 for f in report.findings)


def test_the_findings_say_what_was_measured():
    (finding,) = checks.run(NAME, heads_from_one).findings
    assert "features 0 .. 5, another head's" in finding.detail
    assert "6 .. 11" not in finding.detail  # the right features are the answer: not told
    (finding,) = checks.run(NAME, zeroed_in_place).findings
    assert finding.detail.startswith("after your function returned, the model itself gives")


def test_a_changed_model_shows_in_the_case_that_shares_it():
    report = checks.run(NAME, hook_left_attached, infer=False)
    assert report.first_failure.startswith("on case 'the model of the case before")


# ----------------------------------------------------------------------------------------
# The reference, the cases and the inference's own forward pass
# ----------------------------------------------------------------------------------------


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_the_reference_equals_independent_ablations_and_leaves_the_model_as_it_was():
    ex = get_exercise(NAME)
    for case in ex.cases(hidden=True):
        model, tokens, layer, head = case.args
        before = _state(model)
        got = ex.reference(model, tokens, layer, head)
        assert got.dtype == torch.float64 and got.shape == (*tokens.shape, model.vocab_size)
        twin = copy.deepcopy(model).double()
        with torch.no_grad():
            twin.h[layer].attn.W_o.weight[:, _cols(model, head)] = 0
            torch.testing.assert_close(got, twin(tokens), rtol=0, atol=1e-12)
        hooked = with_pre_hook(copy.deepcopy(model).double(), tokens, layer, head)
        torch.testing.assert_close(got, hooked, rtol=0, atol=1e-10)
        library = reading.ablated_logits(model, tokens, [(layer, head)]).double()
        atol = 1e-10 if model.wte.weight.dtype == torch.float64 else 1e-4
        torch.testing.assert_close(got, library, rtol=0, atol=atol)
        after = _state(model)
        assert all(torch.equal(before[k], after[k]) for k in before), case.label
        assert not model.h[layer].attn.W_o._forward_pre_hooks
        assert not model.h[layer].attn.W_o._forward_hooks


def test_the_cases_reach_every_shape_a_mistake_needs():
    cases = get_exercise(NAME).cases(hidden=True)
    shapes = {(m.n_layers, m.n_heads, m.d_head) for m, *_ in (c.args for c in cases)}
    assert any(h != d for _, h, d in shapes)  # a slice made with n_heads differs
    assert any(layer not in (0, m.n_layers - 1) for m, _, layer, _ in (c.args for c in cases))
    assert any(0 < head < m.n_heads - 1 for m, _, _, head in (c.args for c in cases))
    for first, second in zip(cases, cases[1:], strict=False):  # a model used twice in a row
        if second.label.startswith(("the model of the case before", "hidden: the model")):
            assert second.args[0] is first.args[0]
    copy_model = cases[3].args[0]  # the lesson's copy model, as the lesson loads it
    assert copy_model.wte.weight.dtype == torch.float32 and copy_model.vocab_size == 76
    assert copy_model.wte.weight.requires_grad  # in-place edits need torch.no_grad there too


def test_the_inferences_forward_pass_is_the_models():
    model, tokens = ex_ablation._probe_model()
    specs, log_probs = ex_ablation._candidate_log_probs()
    with torch.no_grad():
        clean = torch.log_softmax(model(tokens), -1).numpy()
    right = torch.log_softmax(get_exercise(NAME).reference(model, tokens, 1, 1), -1).numpy()
    assert specs[0] == ex_ablation._RIGHT
    np.testing.assert_allclose(log_probs[specs.index("nothing")], clean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(log_probs[0], right, rtol=0, atol=1e-10)


def test_the_changes_the_inference_tells_apart_are_far_apart():
    specs, log_probs = ex_ablation._candidate_log_probs()
    flat = log_probs.reshape(len(specs), -1)
    for a in range(len(specs)):
        gaps = np.abs(flat - flat[a]).max(-1)  # (changes,): how far each is from change a
        for b in np.nonzero(gaps < 1e-2)[0]:
            assert ex_ablation._spec_ids(specs[a]) == ex_ablation._spec_ids(specs[b]), (
                specs[a],
                specs[b],
            )
    assert ex_ablation._MATCH < 1e-2 / 10


def test_calling_the_library_earns_nothing():
    def library(model, tokens, layer, head):
        return reading.ablated_logits(model, tokens, [(layer, head)])

    with pytest.raises(AssertionError, match="calls"):
        checks.check(NAME, library)
    with pytest.raises(AssertionError):
        grader_check_hidden(NAME, library)


def test_the_stub_is_one_line_and_the_next_cells_get_the_reference(capsys):
    def ablate_head(model, tokens, layer, head):
        raise NotImplementedError()

    checks.check(NAME, ablate_head)
    assert capsys.readouterr().err.startswith(f"✘ {NAME}: not written yet")
    assert checks.yours_or_reference(NAME, ablate_head) is get_exercise(NAME).reference


def test_a_wrong_answer_fails_the_graders_hidden_check():
    with pytest.raises(AssertionError, match="model-changed"):
        grader_check_hidden(NAME, zeroed_in_place)
    with pytest.raises(AssertionError, match="stream-slice-zeroed"):
        grader_check_hidden(NAME, rows_of_a_copy)
