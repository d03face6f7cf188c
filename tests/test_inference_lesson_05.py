"""Diagnosis by inference for lesson 05's lookup_batch: the mistakes added for issue 36.

Like tests/test_inference_lessons_00_05.py (which keeps the earlier ones): functions written
the way learners write them, one or several mistakes at once, must be named with exactly
their ids — measured by the inference, not matched to a registered variant.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlib import checks
from attnlib.checks import get_exercise


def _parts(names, numbers, query_pos, n_names, n_numbers):
    rows = np.arange(len(names))
    tokens = np.concatenate([np.eye(n_names)[names], np.eye(n_numbers)[numbers]], axis=-1)
    asked = names[rows, query_pos]
    query = np.concatenate([np.eye(n_names)[asked], np.zeros((len(names), n_numbers))], -1)
    return rows, tokens, query


def lookup_one_hot_target(names, numbers, query_pos, n_names, n_numbers):
    rows, tokens, query = _parts(names, numbers, query_pos, n_names, n_numbers)
    target = np.eye(n_numbers)[numbers[rows, query_pos]]  # "the model outputs 8 scores"
    return tokens, query[:, None, :], target


def lookup_flat_query(names, numbers, query_pos, n_names, n_numbers):
    rows, tokens, query = _parts(names, numbers, query_pos, n_names, n_numbers)
    return tokens, query, numbers[rows, query_pos]  # one query per row: no axis for it


def lookup_flat_query_one_hot_target(names, numbers, query_pos, n_names, n_numbers):
    rows, tokens, query = _parts(names, numbers, query_pos, n_names, n_numbers)
    return tokens, query, np.eye(n_numbers)[numbers[rows, query_pos]]


def lookup_flat_query_leaks(names, numbers, query_pos, n_names, n_numbers):
    rows, tokens, _ = _parts(names, numbers, query_pos, n_names, n_numbers)
    return tokens, tokens[rows, query_pos], numbers[rows, query_pos]  # the whole asked token


REALISTIC = [
    (lookup_one_hot_target, ["target-one-hot"]),
    (lookup_flat_query, ["query-axis-missing"]),
    (lookup_flat_query_one_hot_target, ["target-one-hot", "query-axis-missing"]),
    (lookup_flat_query_leaks, ["query-leaks-answer", "query-axis-missing"]),
]


def _in_registry_order(ids):
    order = [m.id for m in get_exercise("lookup_batch").misconceptions]
    return sorted(ids, key=order.index)


@pytest.mark.parametrize(("fn", "ids"), REALISTIC, ids=[f.__name__ for f, _ in REALISTIC])
def test_a_realistic_mistake_is_named_with_all_its_ids(fn, ids):
    expected = _in_registry_order(ids)
    report = checks.run("lookup_batch", fn)
    assert not report.ok and not report.inference_error
    assert report.misconceptions == expected
    assert [f.id for f in report.findings] == expected  # measured, not matched to a variant
    assert all(len(f.detail) > 20 for f in report.findings)
    assert checks.run("lookup_batch", fn, hidden=True).misconceptions == expected
    # the feedback in steps: first the questions, the causes when the mistake comes back
    mistakes = {m.id: m for m in get_exercise("lookup_batch").misconceptions}
    checks.forget("lookup_batch")
    messages = []
    for _ in range(2):
        with pytest.raises(AssertionError) as err:
            checks.check("lookup_batch", fn)
        messages.append(str(err.value))
    for mid in expected:
        assert mistakes[mid].question in messages[0]
        assert mistakes[mid].explanation not in messages[0]
        assert mistakes[mid].explanation in messages[1]
    checks.forget("lookup_batch")


def test_every_pair_of_lookup_mistakes_is_named_as_two():
    pairs = checks.co_occurring("lookup_batch")
    # target (4 wrong readings) x query leak, x layout, x query axis; leak x layout, x axis;
    # layout x axis
    assert len(pairs) == 4 * 3 + 2 + 1
    for ids, fn in pairs:
        assert checks.diagnose("lookup_batch", fn) == _in_registry_order(ids), ids
