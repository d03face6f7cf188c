"""Every registered exercise, every misconception, every variant (parametrised over the registry).

Exercises are registered by the ``attnlib/checks/ex_*.py`` modules of every lesson, so a
new exercise is covered here as soon as its module exists:

* the reference is diagnosed ``[]`` and ``check`` prints exactly one line;
* every variant of every misconception is diagnosed as exactly its id (or a documented
  superset, listed in ``SUPERSETS``), by ``check`` and by the hidden check;
* ``check`` on a variant raises ``AssertionError`` naming the id and its explanation;
* the cases are non-square where the inputs are matrices, and every variant differs
  from the reference on at least one case (a variant the cases cannot see is a defect);
* where an exercise diagnoses by inference (``Exercise.infer``), the registry is the test
  suite of the inference: every variant is named by the measurement (with a sentence
  saying what was measured), and every pair of mistakes that can co-occur
  (``checks.co_occurring``, built from ``Misconception.settings``) is diagnosed as
  exactly both ids, in registry order, with the check's last line naming them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from named import grader_check_hidden

from attnlib import checks
from attnlib.checks import get_exercise
from attnlib.checks.grading import REFERENCE_TAG

# What check_hidden says in a kernel without the grader's answer key.
KEYED_LINE = "your answers are judged by the grader when you hand the notebook in"

# (exercise, misconception id) -> the ids diagnose() may return for its variants, when a
# variant is, by construction, also another known mistake. Empty: none needed so far.
SUPERSETS: dict[tuple[str, str], list[str]] = {}

# Exercises whose matrices are square by definition, and how their cases still catch a
# transpose instead.
SQUARE_BY_NATURE = {
    "previous_token_score": "self-attention weights are (seq, seq); the cases are causal "
    "(lower-triangular) maps, so reading them transposed gives zeros (query-key-swapped)",
    "prefix_matching_score": "self-attention weights are (seq, seq); the cases are causal maps, "
    "so reading them transposed gives zeros (query-key-swapped)",
}

# The exercises the grading issue requires, with their required misconception ids.
REQUIRED = {
    "softmax": {"unstable-softmax", "softmax-wrong-axis", "weights-not-normalized"},
    "attend": {
        "softmax-over-queries",
        "no-scaling",
        "scale-not-sqrt",
        "mask-after-softmax",
        "mask-inverted",
        "keys-not-transposed",
        "weights-transposed",
        "unstable-softmax",
    },
    "causal_mask": {"causal-inverted", "causal-diagonal-excluded"},
    "padding_mask": {"padding-inverted", "padding-on-query-axis"},
}

EXERCISES = checks.exercises()
VARIANTS = [
    pytest.param(name, m.id, i, v, id=f"{name}-{m.id}-{i}")
    for name in EXERCISES
    for m in get_exercise(name).misconceptions
    for i, v in enumerate(m.variants)
]
INFERRED = [name for name in EXERCISES if get_exercise(name).infer is not None]
PAIRS = [
    pytest.param(name, ids, fn, id=f"{name}-{ids[0]}+{ids[1]}")
    for name in INFERRED
    for ids, fn in checks.co_occurring(name)
]
# The exercises the inference issue requires a property view for.
# Every graded exercise diagnoses by inference (it measures the learner's function), except
# these, with the reason.
NOT_INFERRED = {
    name: "true/false statements: an answer is right or wrong, there is nothing to measure"
    for name in (
        "kv_prediction",
        "kv_prediction_control",
        "kv_prediction_separate",
        "kv_prediction_tied",
        "kv_prediction_width",
    )
}
REQUIRED_INFERENCE = set(checks.exercises()) - set(NOT_INFERRED)


def _in_registry_order(name, ids):
    order = [m.id for m in get_exercise(name).misconceptions]
    return sorted(ids, key=order.index)


def _arrays(case):
    values = list(case.args) + list(case.kwargs.values())
    return [a for a in values if isinstance(a, (np.ndarray, torch.Tensor))]


def test_required_exercises_and_ids_are_registered():
    for name, ids in REQUIRED.items():
        have = {m.id for m in get_exercise(name).misconceptions}
        assert ids <= have, f"{name} misses {sorted(ids - have)}"


def _checked_in_lessons() -> dict[str, set[str]]:
    """Exercise name -> the lessons whose cells check it (``check``, ``check_hidden``, or a
    lesson's own checking helper called with the exercise's name as a string)."""
    import json
    import re

    from conftest import NOTEBOOKS

    names = set(EXERCISES)
    found: dict[str, set[str]] = {}
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            for quoted in re.findall(r"""\(\s*["']([a-z_0-9]+)["']""", src):
                if quoted in names:
                    found.setdefault(quoted, set()).add(path.stem)
    return found


def test_every_exercise_is_checked_by_a_lesson_and_every_check_is_registered():
    # an exercise no lesson checks is dead weight (or a lesson lost its check cell); a name
    # a lesson checks that the registry does not know fails only when that cell runs
    import json
    import re

    from conftest import NOTEBOOKS

    used = _checked_in_lessons()
    orphans = [
        n
        for n in EXERCISES
        if n not in used
        and not any(p in used for p in checks.parts(n))
        and not any(n in checks.parts(w) for w in used)
    ]
    assert orphans == [], f"registered but checked by no lesson: {orphans}"
    unknown = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            src = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
            for name in re.findall(r"""checks\.check(?:_hidden)?\(\s*["']([^"']+)["']""", src):
                if name not in EXERCISES:
                    unknown.append(f"{path.stem}: {name}")
    assert unknown == [], f"lessons check exercises nobody registered: {unknown}"


@pytest.mark.parametrize("name", EXERCISES)
def test_every_misconception_has_an_explanation_and_a_variant(name):
    for m in get_exercise(name).misconceptions:
        assert len(m.explanation) > 40, (name, m.id)
        assert m.variants, (name, m.id)


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_is_clean_and_check_prints_one_line(name, capsys):
    ex = get_exercise(name)
    assert checks.diagnose(name, ex.reference) == []
    assert checks.run(name, ex.reference, hidden=True).ok
    checks.check(name, ex.reference)
    assert capsys.readouterr().out == f"✔ {name}: correct on all {len(ex.cases())} cases\n"


@pytest.mark.parametrize("name", EXERCISES)
def test_hidden_check_accepts_the_reference_or_names_the_reference_call(name, capsys):
    # A reference that calls attnlib is itself "a solution calling the reference" to the
    # hidden check; any other failure would be a broken hidden case.
    if get_exercise(name).key_installed is not None:  # judged with the grader's key
        checks.check_hidden(name, get_exercise(name).reference)  # a kernel cannot judge it
        assert capsys.readouterr().out == f"{name}: {KEYED_LINE}\n"
        grader_check_hidden(name, get_exercise(name).reference)
        return
    try:
        checks.check_hidden(name, get_exercise(name).reference)
    except AssertionError as err:
        assert REFERENCE_TAG in str(err)
    assert capsys.readouterr().out == ""


def _matrices(name: str) -> list:
    cases = get_exercise(name).cases(hidden=True)
    return [a for c in cases for a in _arrays(c) if a.ndim >= 2 and a.dtype != bool]


# Exercises whose cases hold matrices (the others take sizes or lengths only), less those
# square by nature.
MATRIX_EXERCISES = [n for n in EXERCISES if n not in SQUARE_BY_NATURE and _matrices(n)]


def test_the_square_check_leaves_out_only_named_or_matrix_free_exercises():
    assert set(SQUARE_BY_NATURE) <= set(EXERCISES), set(SQUARE_BY_NATURE) - set(EXERCISES)
    assert len(MATRIX_EXERCISES) >= len(EXERCISES) // 2, MATRIX_EXERCISES
    for name in set(EXERCISES) - set(MATRIX_EXERCISES) - set(SQUARE_BY_NATURE):
        assert _matrices(name) == [], name


@pytest.mark.parametrize("name", MATRIX_EXERCISES)
def test_cases_are_non_square_where_inputs_are_matrices(name):
    mats = _matrices(name)
    assert any(a.shape[-1] != a.shape[-2] for a in mats), f"{name}: all matrices are square"


@pytest.mark.parametrize(("name", "mid", "index", "variant"), VARIANTS)
def test_variant_is_diagnosed_as_exactly_its_misconception(name, mid, index, variant):
    expected = SUPERSETS.get((name, mid), [mid])
    report = checks.run(name, variant)
    if get_exercise(name).blind:  # graded true/false answers: the lesson's check reveals nothing
        assert report.ok and checks.diagnose(name, variant) == []
        assert checks.run(name, variant, hidden=True).misconceptions == expected
        return
    assert not report.ok, f"{name}: no visible case tells variant {mid}-{index} from the reference"
    assert report.misconceptions == expected
    assert checks.diagnose(name, variant) == expected
    assert checks.run(name, variant, hidden=True).misconceptions == expected
    if name in INFERRED:  # named by what was measured, not by matching the variant
        assert not report.inference_error
        assert [f.id for f in report.findings] == expected
        assert all(len(f.detail) > 20 for f in report.findings)


def test_the_required_exercises_diagnose_by_inference():
    assert REQUIRED_INFERENCE <= set(INFERRED)
    for name in INFERRED:
        ex = get_exercise(name)
        assert ex.build is not None, name
        missing = [m.id for m in ex.misconceptions if m.settings is None]
        assert not missing, f"{name}: misconceptions without settings {missing}"


@pytest.mark.parametrize("name", INFERRED)
def test_settings_rebuild_each_misconception(name):
    ex = get_exercise(name)
    assert checks.diagnose(name, ex.build()) == []
    for m in ex.misconceptions:
        assert checks.diagnose(name, ex.build(**m.settings)) == [m.id], m.id


@pytest.mark.parametrize(("name", "ids", "fn"), PAIRS)
def test_co_occurring_mistakes_are_diagnosed_as_exactly_both(name, ids, fn, graders_feedback):
    expected = _in_registry_order(name, ids)
    report = checks.run(name, fn)
    assert not report.ok
    assert not report.inference_error
    assert report.misconceptions == expected
    with pytest.raises(AssertionError) as err:
        checks.check(name, fn)
    message = str(err.value)
    assert message.splitlines()[-1] == checks.result_line(name, expected)
    details = {f.id: f.detail for f in report.findings}
    for mid in expected:  # as the grader records it: each cause named, with its measurement
        assert f"Cause [{mid}]: {checks.explanation(name, mid)}" in message
        assert f"Measured: {details[mid]}" in message


def test_there_are_pairs_for_every_exercise_with_independent_choices():
    counts = {name: len(checks.co_occurring(name)) for name in INFERRED}
    assert counts["attend"] >= 200
    assert sum(counts.values()) >= 290


@pytest.mark.parametrize(("name", "mid", "index", "variant"), VARIANTS)
def test_check_on_variant_asks_first_then_names_the_misconception(
    name, mid, index, variant, capsys, learners_feedback
):
    if get_exercise(name).blind:  # a wrong answer passes the lesson's check, unnamed
        checks.check(name, variant)
        shown = capsys.readouterr().out
        assert f"[{mid}]" not in shown and checks.explanation(name, mid) not in shown
        return
    question = next(m.question for m in get_exercise(name).misconceptions if m.id == mid)
    # the first failure: what was measured and the question, not the cause
    with pytest.raises(AssertionError) as err:
        checks.check(name, variant)
    first = str(err.value)
    assert question in first
    assert f"[{mid}]" not in first and checks.explanation(name, mid) not in first
    # the same mistake again: the cause, named
    with pytest.raises(AssertionError) as err:
        checks.check(name, variant)
    second = str(err.value)
    assert f"[{mid}]" in second
    assert checks.explanation(name, mid) in second
    assert capsys.readouterr().out == ""  # a failing check prints nothing


@pytest.mark.parametrize(("name", "mid", "index", "variant"), VARIANTS)
def test_hidden_check_fails_the_variant(name, mid, index, variant):
    # Judged as the grader judges a hand-in (observed, then compared in this process); the
    # kernel's own check_hidden loads a fresh copy of the checks first, which
    # test_hidden_check_accepts_the_reference_or_names_the_reference_call and
    # tests/test_checks_core.py exercise.
    with pytest.raises(AssertionError, match="hidden tests failed") as err:
        grader_check_hidden(name, variant)
    assert mid in str(err.value)
