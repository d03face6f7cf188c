"""The checks of lesson 07: split_heads and merge_heads.

References are compared with an independent oracle (explicit index loops and einops-style
slicing). That every known wrong variant is diagnosed as exactly its own misconception,
and that check() names it, is tested for every exercise in tests/test_checks_registry.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from named import assert_named

from attnlib import checks
from attnlib.checks import get_exercise

EXERCISES = ("split_heads", "merge_heads")


def _split_oracle(x, n_heads):
    batch, seq, d_model = x.shape
    d_head = d_model // n_heads
    out = np.empty((batch, n_heads, seq, d_head))
    for b in range(batch):
        for h in range(n_heads):
            for s in range(seq):
                out[b, h, s] = x[b, s, h * d_head : (h + 1) * d_head]
    return out


def _merge_oracle(x):
    return np.concatenate([x[:, h] for h in range(x.shape[1])], axis=-1)  # (batch, seq, d_model)


def test_references_match_oracles():
    for case in get_exercise("split_heads").cases():
        got = get_exercise("split_heads").reference(*case.args)
        np.testing.assert_array_equal(got, _split_oracle(*case.args), err_msg=case.label)
    for case in get_exercise("merge_heads").cases():
        got = get_exercise("merge_heads").reference(*case.args)
        np.testing.assert_array_equal(got, _merge_oracle(*case.args), err_msg=case.label)


def test_references_equal_attnlib_mha():
    from attnlib.heads import merge_heads, split_heads

    for case in get_exercise("split_heads").cases():
        want = split_heads(*case.args)
        np.testing.assert_array_equal(get_exercise("split_heads").reference(*case.args), want)
    for case in get_exercise("merge_heads").cases():
        want = merge_heads(*case.args)
        np.testing.assert_array_equal(get_exercise("merge_heads").reference(*case.args), want)


def test_merge_undoes_split_on_the_split_cases():
    split, merge = get_exercise("split_heads"), get_exercise("merge_heads")
    for case in split.cases():
        x = case.args[0]
        np.testing.assert_array_equal(merge.reference(split.reference(*case.args)), x)


def test_a_case_has_batch_seq_heads_and_d_head_all_different():
    def sizes(c):
        batch, seq, d_model = c.args[0].shape
        return {batch, seq, c.args[1], d_model // c.args[1]}

    assert any(len(sizes(c)) == 4 for c in get_exercise("split_heads").cases())
    assert any(len(set(c.args[0].shape)) == 4 for c in get_exercise("merge_heads").cases())


def test_other_correct_solutions_pass():
    def split_einsum_free(x, n_heads):
        return np.stack(np.split(x, n_heads, axis=-1), axis=1)  # (batch, n_heads, seq, d_head)

    def merge_transpose(x):
        b, h, s, d = x.shape
        return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)

    checks.check("split_heads", split_einsum_free)
    checks.check("merge_heads", merge_transpose)


def test_calling_the_course_reference_is_refused():
    from attnlib.heads import merge_heads, split_heads

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("split_heads", lambda x, n: split_heads(x, n))
    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("merge_heads", merge_heads)


def test_a_result_off_in_one_entry_is_caught():
    def almost(x, n_heads):
        out = _split_oracle(x, n_heads)
        out[0, -1, -1, -1] += 1e-9
        return out

    with pytest.raises(AssertionError, match="1 of"):
        checks.check("split_heads", almost)


# ---- realistic mistakes, written as learners write them ----------------------------------


def split_folded_like_torch(x, n_heads):
    batch, seq, d_model = x.shape
    x = x.reshape(batch, seq, n_heads, d_model // n_heads).transpose(0, 2, 1, 3)
    return x.reshape(batch * n_heads, seq, d_model // n_heads)  # torch's internal layout


def split_interleaved_folded(x, n_heads):
    batch, seq, d_model = x.shape
    x = x.reshape(batch, seq, d_model // n_heads, n_heads).transpose(0, 3, 1, 2)
    return x.reshape(batch * n_heads, seq, d_model // n_heads)


def merge_average(x):
    return x.mean(axis=1)  # "combine the heads"


def merge_sum_loop(x):
    out = np.zeros_like(x[:, 0])
    for h in range(x.shape[1]):
        out = out + x[:, h]
    return out


def split_reshape_only(x, n_heads):
    batch, seq, d_model = x.shape
    return np.reshape(x, (batch, n_heads, seq, d_model // n_heads))


@pytest.mark.parametrize(
    ("name", "fn", "ids"),
    [
        ("split_heads", split_folded_like_torch, ["heads-folded-into-batch"]),
        (
            "split_heads",
            split_interleaved_folded,
            ["heads-interleaved-features", "heads-folded-into-batch"],
        ),
        ("split_heads", split_reshape_only, ["heads-reshape-without-transpose"]),
        ("merge_heads", merge_average, ["merge-heads-averaged"]),
        ("merge_heads", merge_sum_loop, ["merge-heads-summed"]),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_a_realistic_mistake_is_named_by_what_it_does(name, fn, ids):
    # by measurement, with the feedback in steps (questions, then the causes)
    assert_named(name, fn, ids)
