"""What a failing check says, step by step, holds no code that answers the exercise.

Every misconception of every exercise has a ``question`` (the first failure's step: it
points at the symptom) and an ``explanation`` (the named cause, on a second failure with the
same mistake or on request). Neither may carry code: no backticked code, no keyword
arguments (``axis=-1``), no method calls or transposes (``x.max(``, ``k.T``). Words for a
concept ("each row's maximum", "the last axis") are what they say instead.
"""

from __future__ import annotations

import re

import pytest

from attnlib import checks

EXERCISES = checks.exercises()

CODE = {
    "a backticked code span": re.compile(r"`"),
    "a keyword argument": re.compile(r"\b[A-Za-z_]\w*=(?!=)\S"),
    "a method call": re.compile(r"\b[A-Za-z_]\w*\.[A-Za-z_]\w*\("),
    "a transpose": re.compile(r"\b[A-Za-z_]\w*\.(T|mT|transpose)\b"),
}


def code_in(text: str) -> list[str]:
    """What in ``text`` reads as code (the names of the patterns found, with the match)."""
    return [f"{name}: {m.group(0)!r}" for name, rx in CODE.items() if (m := rx.search(text))]


def test_the_code_patterns_find_code_and_leave_prose_alone():
    assert code_in("Divide by e.sum(axis=-1, keepdims=True).")
    assert code_in("use `softmax(x)`")
    assert code_in("scores are q @ k.T")
    assert not code_in("Each row must sum to 1 over its keys: normalise along the last axis.")
    assert not code_in("exp() of a large score overflows; every exponent is then <= 0.")


@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_mistake_asks_first_and_names_its_cause_without_code(exercise):
    ex = checks.get_exercise(exercise)
    problems = []
    for m in ex.misconceptions:
        if not m.question.strip():
            problems.append(f"[{m.id}] has no question (the first failure's step)")
        if not m.explanation.strip():
            problems.append(f"[{m.id}] has no explanation (the named cause)")
        for field, text in (("question", m.question), ("explanation", m.explanation)):
            problems += [f"[{m.id}] {field} holds {c}" for c in code_in(text)]
        if m.question.strip() and m.question.strip() == m.explanation.strip():
            problems.append(f"[{m.id}] asks nothing its explanation does not already say")
    assert not problems, f"{exercise}:\n" + "\n".join(problems)
