"""Diagnosis by inference for lesson 09's mistakes added with issue 36, on functions written
the way learners write them: a probe that returns how many test rows it got right instead of
the fraction, and a per-head summary averaged over every axis at once — alone and together
with the older mistakes (tests/test_inference_lessons_06_09.py holds those).

Each must be named with exactly its ids, fail the hidden check, and show on its first
failure what was measured and a question, the cause only on the second.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from named import assert_named

from attnlib import checks
from attnlib.checks import get_exercise


def _fit_and_predict(X_train, y_train, X_test, y_test, *, ones=True):
    k = int(max(y_train.max(), y_test.max())) + 1
    if ones:
        X_train = np.hstack([X_train, np.ones((len(X_train), 1))])
        X_test = np.hstack([X_test, np.ones((len(X_test), 1))])
    W = np.linalg.lstsq(X_train, np.eye(k)[y_train], rcond=None)[0]
    return (X_test @ W).argmax(axis=1)


def probe_counts_right_rows(X_train, y_train, X_test, y_test):
    return (_fit_and_predict(X_train, y_train, X_test, y_test) == y_test).sum()


def probe_counts_without_ones(X_train, y_train, X_test, y_test):
    pred = _fit_and_predict(X_train, y_train, X_test, y_test, ones=False)
    return int(np.count_nonzero(pred == y_test))


def probe_counts_on_training_rows(X_train, y_train, X_test, y_test):
    pred = _fit_and_predict(X_train, y_train, X_train, y_train)
    return int((pred == y_train).sum())


def on_mean_of_everything(weights, positions):
    return weights[torch.arange(len(positions)), :, positions].mean()


def on_broadcast_mean_of_everything(weights, positions):
    return weights[:, :, positions].mean()


def on_sum_of_everything(weights, positions):
    return weights[torch.arange(len(positions)), :, positions].sum()


REALISTIC = [
    ("probe_accuracy", probe_counts_right_rows, ["accuracy-as-count"]),
    ("probe_accuracy_heldout", probe_counts_right_rows, ["accuracy-as-count"]),
    ("probe_accuracy_bias", probe_counts_without_ones, ["probe-no-bias", "accuracy-as-count"]),
    (
        "probe_accuracy",
        probe_counts_on_training_rows,
        ["probe-scored-on-train", "accuracy-as-count"],
    ),
    ("attention_on", on_mean_of_everything, ["mean-over-everything"]),
    ("attention_on", on_broadcast_mean_of_everything, ["index-broadcast", "mean-over-everything"]),
    ("attention_on", on_sum_of_everything, ["mean-over-everything", "sum-not-mean"]),
]


def _message(name, fn) -> str:
    with pytest.raises(AssertionError) as err:
        checks.check(name, fn)
    return str(err.value)


@pytest.mark.parametrize(
    ("name", "fn", "ids"),
    [pytest.param(n, f, i, id=f"{n}-{f.__name__}") for n, f, i in REALISTIC],
)
def test_a_realistic_mistake_is_named_with_all_its_ids(name, fn, ids):
    assert_named(name, fn, ids)
    checks.forget()
    try:
        first, second = _message(name, fn), _message(name, fn)
    finally:
        checks.forget()
    for mid in ids:  # measured and asked first, named the second time
        m = next(m for m in get_exercise(name).misconceptions if m.id == mid)
        assert m.question in first and f"[{mid}]" not in first
        assert f"[{mid}]" in second and m.explanation in second


def test_a_count_is_measured_against_the_number_of_test_rows():
    report = checks.run("probe_accuracy", probe_counts_right_rows)
    (finding,) = report.findings
    assert "test rows, and your results are above 1" in finding.detail
    assert "fraction" not in finding.detail  # the cause waits for the second failure


def test_a_single_number_is_measured_by_its_shape():
    (finding,) = checks.run("attention_on", on_mean_of_everything).findings
    assert "a single number, shape ()" in finding.detail
