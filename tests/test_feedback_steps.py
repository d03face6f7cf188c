"""A failing check gives feedback in steps: it asks first, names the cause on the second try.

First failure: what was measured and a question (``Misconception.question``), never the
cause; the same mistake again in the same kernel, or ``checks.hint``: the cause
(``Misconception.explanation``). The grader's kernel (``ATTNLIB_FEEDBACK=record``) names the
cause at once and ends with the ids the class report reads. A failure no known mistake
explains is localised: the smallest failing case, its first differing entry, the properties
kept and broken.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlib import checks
from attnlib.checks.protocol import FEEDBACK_ENV


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv(FEEDBACK_ENV, raising=False)
    checks.forget()
    yield
    checks.forget()


def softmax_over_queries(x):
    e = np.exp(x - x.max(axis=-2, keepdims=True))
    return e / e.sum(axis=-2, keepdims=True)


def softmax_row_reversed(x):  # a mistake no check knows: each row's weights reversed
    m = x.max(axis=-1, keepdims=True)
    e = np.exp(x - m)
    return (e / e.sum(axis=-1, keepdims=True))[..., ::-1]


def failure(exercise, fn) -> str:
    with pytest.raises(AssertionError) as err:
        checks.check(exercise, fn)
    return str(err.value)


def texts(exercise, mid):
    m = next(m for m in checks.get_exercise(exercise).misconceptions if m.id == mid)
    return m.question, m.explanation


def test_the_first_failure_asks_and_the_second_names_the_cause():
    ids = checks.diagnose("softmax", softmax_over_queries)
    assert ids, "the mistake is diagnosed"
    first = failure("softmax", softmax_over_queries)
    for mid in ids:
        question, explanation = texts("softmax", mid)
        assert question in first and explanation not in first
        assert mid not in first  # not even its id names it
    assert "checks.hint('softmax')" in first
    assert checks.read_results(first)["softmax"].ids == []  # nothing recorded as named
    assert checks.read_results(first)["softmax"].status == "wrong"

    second = failure("softmax", softmax_over_queries)
    for mid in ids:
        assert texts("softmax", mid)[1] in second
    assert checks.read_results(second)["softmax"].ids == ids


def test_hint_names_the_cause_on_request(capsys):
    checks.hint("softmax")
    assert "no failing check to explain yet" in capsys.readouterr().out
    failure("softmax", softmax_over_queries)
    checks.hint("softmax")
    out = capsys.readouterr().out
    for mid in checks.diagnose("softmax", softmax_over_queries):
        assert texts("softmax", mid)[1] in out
    # after the hint the next failure names it too
    assert texts("softmax", checks.diagnose("softmax", softmax_over_queries)[0])[1] in failure(
        "softmax", softmax_over_queries
    )


def test_forget_starts_the_steps_afresh():
    failure("softmax", softmax_over_queries)
    checks.forget("softmax")
    again = failure("softmax", softmax_over_queries)
    mid = checks.diagnose("softmax", softmax_over_queries)[0]
    assert texts("softmax", mid)[1] not in again


def test_the_graders_kernel_records_the_cause_on_the_first_failure(monkeypatch):
    monkeypatch.setenv(FEEDBACK_ENV, "record")
    assert checks.recording()
    first = failure("softmax", softmax_over_queries)
    ids = checks.diagnose("softmax", softmax_over_queries)
    for mid in ids:
        assert texts("softmax", mid)[1] in first
    assert checks.read_results(first)["softmax"].ids == ids


def test_a_failure_nothing_explains_is_localised():
    assert checks.diagnose("softmax", softmax_row_reversed) == []
    msg = failure("softmax", softmax_row_reversed)
    assert "Smallest failing case:" in msg
    assert "First differing entry at [" in msg and "expected" in msg and "got" in msg
    assert "Yours keeps:" in msg and "each row sums to 1 over the last axis" in msg
    assert checks.read_results(msg)["softmax"].ids == []
    assert "Diagnosis for softmax: unrecognised" in msg


def test_the_localisation_names_each_broken_property():
    from attnlib.checks._locate import properties

    rng = np.random.default_rng(0)
    w = np.tril(rng.random((4, 4)))  # causal weights: rows sum to 1, 0 above the diagonal
    w /= w.sum(axis=-1, keepdims=True)
    kept, broken = properties(w, w * 0.5)
    assert "the same numbers up to one factor: yours are 0.5 times them" in broken
    kept, broken = properties(w, w.T)
    assert "yours equals the expected output with its last two axes swapped" in broken
    assert any(b.startswith("0 wherever the expected output is 0 (6 entries)") for b in broken)
    leaky = w.copy()
    leaky[0, 1] = 0.1  # one future key let through
    kept, broken = properties(w, leaky)
    assert any("yours is not at 1 of them" in b for b in broken)
    assert "every entry finite" in kept and "no negative entries" in kept
    sym = w + w.T
    kept, broken = properties(sym, np.tril(sym))
    assert any(b.startswith("symmetric in its last two axes") for b in broken)
    nan = w.copy()
    nan[2, 0] = np.nan
    kept, broken = properties(w, nan)
    assert "every entry finite: 1 are NaN or inf" in broken


def test_a_bfloat16_answer_is_judged_not_a_crash():
    import torch

    def softmax_bf16(x):  # numpy holds no bfloat16: compared in float32, too coarse here
        return torch.softmax(torch.as_tensor(x).to(torch.bfloat16), -1)

    msg = failure("softmax", softmax_bf16)
    assert "First differing entry at [" in msg and "each row sums to 1" in msg
