"""Exercises of lesson 05 (keys versus values).

* ``lookup_batch(names, numbers, query_pos, n_names, n_numbers) -> (tokens, query, target)``
  — encode the lookup task (numpy);
* ``kv_prediction() -> bool array (8,)`` — lesson 05's "predict, then check": before any
  head is trained, the learner marks eight statements (:data:`STATEMENTS`) true or false.
  Four graded parts (:data:`PARTS`, two statements each, one point each) are judged by the
  grader only (hidden cases, :func:`answers`); the lesson's own cells check the format and
  judge nothing (:func:`recorded`), so answers cannot be found by trial and error. The
  answer key is not here: it is the grader's (``staff/kvstaff/grader/answer_keys.py``,
  which the sandbox hides from every graded kernel) and reaches this registry only in the
  grader's own process (:func:`install_answer_key`); the lesson measures every statement.

Lesson 06's exercises are in :mod:`attnlib.checks.ex_backprop`, lesson 07's
``mha_by_hand`` in :mod:`attnlib.checks.ex_mha`.
"""

from __future__ import annotations

import sys

import numpy as np

from attnlib._validate import type_name
from attnlib.checks._core import Case, Exercise, Finding, Misconception, part, register
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


# A probe where every wrong reading gives other numbers: the asked token is never token 0,
# its number differs from token 0's, and names, numbers and positions differ from each other.
_LB_NAMES = np.array([[4, 0, 2], [1, 3, 0]])
_LB_NUMBERS = np.array([[0, 2, 1], [2, 0, 1]])
_LB_POS = np.array([1, 2])
_LB_N_NAMES, _LB_N_NUMBERS = 5, 3


def _infer_lookup(learner) -> list[Finding]:
    names, numbers, pos = _LB_NAMES, _LB_NUMBERS, _LB_POS
    o = learner(names.copy(), numbers.copy(), pos.copy(), _LB_N_NAMES, _LB_N_NUMBERS)
    if not o.ok or o.arity != 3 or any(o.array(i) is None for i in range(3)):
        return []
    tokens, query, target = (o.array(i) for i in range(3))
    rows = np.arange(2)
    a, b = np.eye(_LB_N_NAMES)[names], np.eye(_LB_N_NUMBERS)[numbers]  # (2, 3, 5), (2, 3, 3)
    layouts = {
        "name-first": np.concatenate([a, b], axis=-1),
        "number-first": np.concatenate([b, a], axis=-1),
    }
    layout = next(
        (k for k, v in layouts.items() if tokens.shape == v.shape and np.array_equal(tokens, v)),
        None,
    )
    found = []
    if layout == "number-first":
        found.append(
            Finding(
                "feature-blocks-swapped",
                "with 5 names and 3 numbers, each token's first 3 columns hold its number.",
            )
        )
    if layout is not None and query.shape == (2, 1, 8):
        q = query[:, 0]
        num_block = q[:, :3] if layout == "number-first" else q[:, 5:]
        if np.array_equal(num_block, np.eye(_LB_N_NUMBERS)[numbers[rows, pos]]):
            found.append(
                Finding("query-leaks-answer", "the number block of your query is the asked number.")
            )
    if target.shape == (2,):
        readings = {
            "target-from-wrong-token": (numbers[:, 0], "the number of token 0"),
            "target-is-name": (names[rows, pos], "the asked token's name"),
            "target-is-position": (pos, "the asked position"),
        }
        for mid, (value, what) in readings.items():
            if np.array_equal(target, value):
                found.append(Finding(mid, f"your targets {target.tolist()} are {what}."))
    return found


register(
    Exercise(
        name="lookup_batch",
        summary="lookup_batch(names, numbers, query_pos, n_names, n_numbers) -> (tokens, "
        "query, target): the lookup task as model inputs",
        reference=_lookup_batch,
        make_cases=_lookup_cases,
        make_hidden_cases=_lookup_hidden_cases,
        forbidden=("attnlib.tasks.lookup.lookup_batch", "attnlib.tasks.lookup.sample_lookup"),
        infer=_infer_lookup,
        build=_lb_variant,
        misconceptions=(
            Misconception(
                "target-from-wrong-token",
                "The target is the number of token 0, not of the token the query asks for. "
                "Take it from the asked position: numbers[np.arange(batch), query_pos].",
                (_lb_variant(target="first-token"),),
                {"target": "first-token"},
            ),
            Misconception(
                "target-is-position",
                "The target is the position of the asked token. The model must return what "
                "is stored there: numbers[np.arange(batch), query_pos].",
                (_lb_variant(target="pos"),),
                {"target": "pos"},
            ),
            Misconception(
                "target-is-name",
                "The target is the asked token's name — which the query already contains. "
                "The answer is the *number* carried by that token.",
                (_lb_variant(target="name"),),
                {"target": "name"},
            ),
            Misconception(
                "query-leaks-answer",
                "The query contains the asked token's number: the answer is in the question, "
                "and the model can skip attention altogether. Leave the number block of the "
                "query at zero.",
                (_lb_variant(query="leak"),),
                {"query": "leak"},
            ),
            Misconception(
                "feature-blocks-swapped",
                "The number block comes first. The layout is [one_hot(name), "
                "one_hot(number)] — names in the first n_names columns — for tokens and query "
                "alike.",
                (_lb_variant(layout="number-first"),),
                {"layout": "number-first"},
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# kv_prediction: lesson 05's "predict, then check" — eight statements in four graded parts
# ----------------------------------------------------------------------------------------

#: The statements the learner marks true or false before any head is trained (lesson 05
#: lists them in this order). Each can be reasoned out from how the three heads are wired;
#: each is measured in the lesson (section 7); tests/test_kv_prediction.py holds the
#: grader's key to those measurements.
STATEMENTS = (
    "1. the uniform control does better than chance (1/8)",
    "2. given enough training, the uniform control could reach 95 % accuracy",
    "3. the separate head (d_head = 3) reaches at least 95 % accuracy within 150 steps",
    "4. changing the numbers of the tokens the query does not ask about changes more than "
    "5 % of the separate head's answers",
    "5. the tied head (d_head = 3) reaches at least 95 % accuracy within 150 steps",
    "6. changing the numbers of the tokens the query does not ask about changes more than "
    "5 % of the tied head's answers",
    "7. in the tied head, the score a query gives a token depends on the token's number, "
    "not only on its name",
    "8. no tied head can reach 95 % accuracy, however wide it is",
)

#: The graded parts of the exercise: exercise name -> the statements it checks.
PARTS = {
    "kv_prediction_control": (1, 2),
    "kv_prediction_separate": (3, 4),
    "kv_prediction_tied": (5, 6),
    "kv_prediction_width": (7, 8),
}

# The answer key is not in this module, which every learner's kernel loads: the grader
# holds it (staff/kvstaff/grader/answer_keys.py, hidden from graded kernels by the
# sandbox) and installs it into its own process's registry before judging. A kernel
# without the key can record answers but not judge them. (What stops trial and error in
# the lesson is that nothing there judges the answers: the visible cases check only the
# format; the judged cases are hidden, and judged outside the kernel — see `answers`.)
_ANSWER_KEY: dict[int, bool] = {}


def install_answer_key(key) -> None:
    """Give this process the answer key: ``{statement: bool}`` for statements 1-8.

    The grader calls it (:mod:`kvstaff.grader.answer_keys`); a learner's kernel
    never has the key, so it can record answers (:func:`answers`) but not judge them.
    """
    if sorted(key) != list(range(1, len(STATEMENTS) + 1)):
        n = len(STATEMENTS)
        raise ValueError(f"install_answer_key: expected statements 1-{n}, got {sorted(key)}")
    if not all(type(v) is bool for v in key.values()):
        raise TypeError("install_answer_key: every answer must be a bool")
    _ANSWER_KEY.clear()
    _ANSWER_KEY.update(key)


def has_answer_key() -> bool:
    """Can this process judge the statements (has the grader installed the key)?"""
    return len(_ANSWER_KEY) == len(STATEMENTS)


def _keyed(statement: int) -> np.ndarray:
    if statement not in _ANSWER_KEY:
        raise LookupError(
            f"kv_prediction: the answer to statement {statement} is not in this kernel; the "
            "grader judges the statements when the notebook is handed in"
        )
    return np.array([_ANSWER_KEY[statement]])


# statement -> (misconception id, explanation). An explanation is read after grading, but it
# ships in this module, so it points at the measurement without saying which answer is right.
_WHY = {
    1: (
        "control-at-chance",
        "Statement 1: compare the control's accuracy in section 3 with chance (1/8). The "
        "control cannot select, but ask what its read-out can still learn from the average "
        "of the six values.",
    ),
    2: (
        "control-can-select",
        "Statement 2: section 3 asks the control about another token of the same books. "
        "What does a head whose answer does not depend on the query get right at best?",
    ),
    3: (
        "separate-fails",
        "Statement 3: see the separate head's accuracy in section 3, and count how many "
        "dimensions its key and its value each need for names and for numbers.",
    ),
    4: (
        "separate-reads-whole-book",
        "Statement 4: section 4 changes the other tokens' numbers and counts the separate "
        "head's answers that change.",
    ),
    5: (
        "tied-only-slower",
        "Statement 5: see the tied head's accuracy in section 3, and section 5 on what one "
        "vector of three numbers has to do when it is key and value at once.",
    ),
    6: (
        "tied-selects-anyway",
        "Statement 6: section 4 changes the other tokens' numbers and counts the tied head's "
        "answers that change.",
    ),
    7: (
        "tied-key-ignores-content",
        "Statement 7: with k = v, what must the key carry so that the value can do its job? "
        "Section 6 measures how much of the tied head's scores the number explains.",
    ),
    8: (
        "tying-is-impossible",
        "Statement 8: section 5 trains tied heads from 2 to 12 wide; see which widths reach "
        "95 % within 400 steps.",
    ),
}


def _prediction(prediction) -> np.ndarray:
    """The learner's eight answers, or an error that says what came back instead."""
    got = prediction()
    if type(got) is not np.ndarray or got.dtype != np.bool_:
        raise TypeError(
            "kv_prediction() must return a numpy array of booleans, e.g. "
            f"np.array([True, False, ...]); got {type_name(got)}"
        )
    if got.shape != (len(STATEMENTS),):
        raise ValueError(
            f"kv_prediction() must return {len(STATEMENTS)} answers, shape "
            f"({len(STATEMENTS)},); got shape {got.shape}"
        )
    return got


def answers(prediction):
    """``answer(kind, statement)`` from a learner's ``kv_prediction``: what the checks call.

    ``answer("format", s)`` is ``array([True])`` when ``prediction()`` is a bool array of
    shape (8,) (and raises a clear error otherwise): the visible cases check only that, so
    a check in the lesson says nothing about whether an answer is right.
    ``answer("judge", s)`` is the answer to statement ``s`` as ``array([bool])``: only the
    hidden cases, judged by the grader with its key, compare it with the key.
    """

    def answer(kind, statement):
        got = _prediction(prediction)
        if kind == "format":
            return np.array([True])
        return np.array([bool(got[statement - 1])])

    return answer


def recorded(part: str, prediction) -> None:
    """The visible half of a graded part: check the format, echo the answers, judge nothing."""
    statements = PARTS[part] if part in PARTS else tuple(range(1, len(STATEMENTS) + 1))
    try:
        got = _prediction(prediction)
    except NotImplementedError:  # one line (stderr: Validate says "not passed"), no error
        print(
            f"✘ {part}: not written yet — replace `raise NotImplementedError()` in the cell "
            f"above with your answers, run that cell, then this one.",
            file=sys.stderr,
        )
        return
    except (TypeError, ValueError) as err:
        raise AssertionError(f"✘ {part}: {err}") from None
    except Exception as err:  # noqa: BLE001 - the learner's function may raise anything
        msg = f"✘ {part}: kv_prediction() raised {type_name(err)}: {err}"
        raise AssertionError(msg) from None
    said = ", ".join(f"{s}: {'true' if got[s - 1] else 'false'}" for s in statements)
    print(
        f"Recorded your answers to statements {said}. They are graded when you hand the "
        "notebook in; this cell does not say whether they are right (section 7 measures them)."
    )


def _reference(kind, statement):
    return np.array([True]) if kind == "format" else _keyed(statement)


def _answer_with(**flip):
    """The key's ``answer(kind, statement)`` with the statements in ``flip`` answered wrongly."""
    wrong = {int(k.split("_")[1]) for k, v in flip.items() if v}

    def answer(kind, statement):
        if kind == "format" or statement not in wrong:
            return _reference(kind, statement)
        return ~_keyed(statement)

    return answer


def _prediction_cases(statements):
    return lambda: [
        Case(f"the format of your answer to statement {s}", ("format", s)) for s in statements
    ]


def _prediction_hidden_cases(statements):
    return lambda: [Case(f"statement {s}", ("judge", s)) for s in statements]


# The visible cases check the format only; the hidden cases judge the answers. They do not
# change with the grader's seed: a statement is true or false once and for all. The whole
# exercise (all eight) is graded in four parts of two statements, one locked cell each.
_ALL = tuple(range(1, len(STATEMENTS) + 1))
_WHOLE = register(
    Exercise(
        name="kv_prediction",
        summary="answers(kv_prediction): statements 1-8 of lesson 05, each true or false",
        reference=_reference,
        make_cases=_prediction_cases(_ALL),
        make_hidden_cases=_prediction_hidden_cases(_ALL),
        exact=True,
        blind=True,
        key_installed=has_answer_key,
        misconceptions=tuple(
            Misconception(_WHY[s][0], _WHY[s][1], (_answer_with(**{f"flip_{s}": True}),))
            for s in _ALL
        ),
    )
)
for _name, _statements in PARTS.items():
    register(
        part(
            _WHOLE,
            _name,
            f"answers(kv_prediction): statements {_statements[0]}-{_statements[-1]} of lesson 05",
            ids=[_WHY[s][0] for s in _statements],
            make_cases=_prediction_cases(_statements),
            make_hidden_cases=_prediction_hidden_cases(_statements),
        )
    )
