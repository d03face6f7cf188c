"""Exercises of lesson 05 (keys versus values).

* ``lookup_batch(names, numbers, query_pos, n_names, n_numbers) -> (tokens, query, target)``
  — encode the lookup task (numpy);
* ``kv_prediction() -> bool array (8,)`` — lesson 05's "reason, then check": before any
  head is trained, the learner works out from the task and the three wirings whether each
  of eight statements (:data:`STATEMENTS`) is true or false.
  Four graded parts (:data:`PARTS`, two statements each, one point each) are judged by the
  grader only (hidden cases, :func:`answers`); the lesson's own cells check the format and
  judge nothing (:func:`recorded`), so answers cannot be found by trial and error. The
  answer key is not here: it is the grader's (``staff/kvstaff/grader/answer_keys.py``,
  which the sandbox hides from every graded kernel) and reaches this registry only in the
  grader's own process (:func:`install_answer_key`). The lesson prints no verdict: its
  measurements after the exercise are evidence the learner weighs.

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


def _lb_variant(*, target="right", query="name", layout="name-first", query_shape="3d"):
    """One way to build the batch; the defaults give the correct function.

    ``target``: "right", "first-token", "name", "pos" or "onehot" (the right number,
    one-hot); ``query``: "name" (right) or "leak"; ``layout``: "name-first" (right) or
    "number-first"; ``query_shape``: "3d" (batch, 1, d_model) or "flat" (batch, d_model).
    """

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
        q = np.concatenate(parts, axis=-1)
        q = q[:, None, :] if query_shape == "3d" else q
        if target == "right":
            t = numbers[rows, query_pos]
        elif target == "first-token":
            t = numbers[:, 0]
        elif target == "name":
            t = names[rows, query_pos]
        elif target == "onehot":
            return tokens, q, np.eye(n_numbers)[numbers[rows, query_pos]]
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
    if query.shape == (2, 8):
        found.append(
            Finding(
                "query-axis-missing",
                f"for a batch of 2 with d_model = 8 your query has shape {query.shape}.",
            )
        )
    if layout is not None and query.shape in ((2, 1, 8), (2, 8)):
        q = query.reshape(2, 8)
        num_block = q[:, :3] if layout == "number-first" else q[:, 5:]
        if np.array_equal(num_block, np.eye(_LB_N_NUMBERS)[numbers[rows, pos]]):
            found.append(
                Finding("query-leaks-answer", "the number block of your query is the asked number.")
            )
    if target.shape == (2, _LB_N_NUMBERS) and np.array_equal(
        target, np.eye(_LB_N_NUMBERS)[numbers[rows, pos]]
    ):
        found.append(
            Finding(
                "target-one-hot",
                f"your target has shape {target.shape} for a batch of 2 with 3 numbers; its "
                f"rows are {target.astype(int).tolist()}.",
            )
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
                "The target is the number of token 0, not of the token the query asks about. "
                "Each sequence asks about its own position, so the target takes, row by row, "
                "the number stored at that row's asked position.",
                (_lb_variant(target="first-token"),),
                {"target": "first-token"},
                question="Which token does the query of row 1 ask about, and which token's "
                "number is your target for that row?",
            ),
            Misconception(
                "target-is-position",
                "The target is the position of the asked token. The model must return what "
                "is stored there: the number carried by the token at that position.",
                (_lb_variant(target="pos"),),
                {"target": "pos"},
                question="What does your target hold for each row: something about where the "
                "asked token is, or something it carries? What must the model answer?",
            ),
            Misconception(
                "target-is-name",
                "The target is the asked token's name, which the query already contains. The "
                "answer is the other feature of that token: its number.",
                (_lb_variant(target="name"),),
                {"target": "name"},
                question="Your targets equal something the query already contains. Which of "
                "the asked token's two features must the model retrieve?",
            ),
            Misconception(
                "target-one-hot",
                "The target comes back one-hot encoded, (batch, n_numbers). The exercise asks "
                "for the asked number itself, one integer per row, of shape (batch,): a loss "
                "such as cross-entropy takes class indices.",
                (_lb_variant(target="onehot"),),
                {"target": "onehot"},
                question="What shape and dtype does your target have, and what does the "
                "docstring ask for?",
            ),
            Misconception(
                "query-leaks-answer",
                "The query contains the asked token's number: the answer is in the question, "
                "and the model can read it off without attending to anything. The query "
                "carries the asked name only; its number block stays zero.",
                (_lb_variant(query="leak"),),
                {"query": "leak"},
                question="Read the number block of your query for row 0. Could a model answer "
                "from the query alone, without looking at the tokens?",
            ),
            Misconception(
                "query-axis-missing",
                "The query has shape (batch, d_model): the query axis of length 1 is missing. "
                "Attention takes queries as (batch, seq_q, d_model), one query per sequence "
                "here, so the query is (batch, 1, d_model).",
                (_lb_variant(query_shape="flat"),),
                {"query_shape": "flat"},
                question="What shape does your query have, and what shape does attention "
                "expect for queries (batch, seq_q, d_model)?",
            ),
            Misconception(
                "feature-blocks-swapped",
                "The number block comes first. The layout is the one-hot name, then the "
                "one-hot number — names in the first n_names columns — for tokens and query "
                "alike.",
                (_lb_variant(layout="number-first"),),
                {"layout": "number-first"},
                question="Which columns of your tokens hold the name, and which the number? "
                "In which order does the exercise lay them out?",
            ),
        ),
    )
)


# ----------------------------------------------------------------------------------------
# kv_prediction: lesson 05's "predict, then check" — eight statements in four graded parts
# ----------------------------------------------------------------------------------------

#: The statements the learner marks true or false before any head is trained (lesson 05
#: lists them in this order). Each can be worked out from sections 1-2 of the lesson (the
#: one-hot tokens, the query with its number block at zero, and what each wiring makes
#: keys, values and scores of); the lesson's measurements afterwards are evidence the
#: learner reads, not verdicts. tests/test_kv_prediction.py proves the grader's key by
#: construction (weights that do what a statement says can be done, or the argument that
#: none can) and against the lesson's measurements.
STATEMENTS = (
    "1. the uniform control can do better than chance (1/8)",
    "2. given enough training, the uniform control could reach 95 % accuracy",
    "3. a separate head (d_head = 3) can choose W_K so that no score depends on any "
    "token's number, while W_V still lets the read-out tell all eight numbers apart",
    "4. if a separate head puts all its weight on the asked token, giving the five other "
    "tokens new numbers can still change its answer",
    "5. in a tied head, changing a token's number can change its value only if it changes "
    "its key as well",
    "6. in a tied head, the score a query gives a token cannot depend on the token's "
    "number, because the query's number block is zero",
    "7. a separate head of width d_head = 1 can be given weights with which the asked "
    "token gets the highest score in every book",
    "8. a tied head wide enough to give every name and every number a dimension of its own "
    "(d_head = 24) can be given weights that answer every book correctly",
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


# statement -> (misconception id, explanation, question). An id names what a statement is
# about, not which answer is right (a wrong answer to it is the misconception). The texts
# are read after grading,
# but they ship in this module, so they point at the reasoning without saying which answer
# is right (tests/test_kv_prediction.py checks that they do not).
_WHY = {
    1: (
        "control-vs-chance",
        "Statement 1 turns on what the control's read-out receives: the average of the six "
        "values, whichever token is asked. Numbers may repeat within a book (section 1), so "
        "ask how often the asked token's number is the one that appears most in its book, "
        "and whether a read-out of the average can use that. Section 3 measures the control.",
        "Statement 1: the control hands its read-out the average of the six values. What "
        "could a read-out learn from that average, given that numbers may repeat in a book?",
    ),
    2: (
        "control-ceiling",
        "Statement 2 turns on what the control's answer can depend on. Every weight is 1/6 "
        "whatever the query says, so its answer is the same whichever token is asked; it can "
        "then be right only when the asked number happens to be its one guess for the whole "
        "book. Section 3 asks the control about another token of the same books.",
        "Statement 2: can the control's answer change when the query names another token of "
        "the same book? How often can one answer per book be right?",
    ),
    3: (
        "separate-split",
        "Statement 3 turns on what a separate W_K and W_V can ignore. A token is the one-hot "
        "name next to the one-hot number, so a key is the sum of one row of W_K for the name "
        "and one for the number, and a value likewise with W_V; with separate matrices each "
        "can leave out the part it does not need. Ask also whether three numbers per vector "
        "leave room for 16 names and for 8 numbers. The optional part measures what the "
        "trained separate head's scores and read-out depend on.",
        "Statement 3: a key is one row of W_K for the name plus one row for the number. What "
        "can a separate W_K do with the rows for the numbers, and what does that leave W_V "
        "free to do?",
    ),
    4: (
        "separate-other-tokens",
        "Statement 4 turns on what the output is made of: the weighted average of the six "
        "values. With all the weight on the asked token, the other tokens' values are "
        "multiplied by zero. Section 4 gives the other tokens new numbers and counts the "
        "separate head's answers that change.",
        "Statement 4: write the head's output as a weighted average of the six values. What "
        "part do the other five tokens play when the asked token has all the weight?",
    ),
    5: (
        "tied-key-is-value",
        "Statement 5 turns on the definition of tying: one matrix makes both the key and the "
        "value, so each token's key and value are the very same vector. Section 2's model "
        "asserts that the two roles share one parameter.",
        "Statement 5: in a tied head, how are a token's key and its value related? Can one "
        "change without the other?",
    ),
    6: (
        "tied-score-and-number",
        "Statement 6 turns on where a score's dependence on the number could come from. The "
        "query's number block being zero makes the query itself independent of any number; "
        "the score is the dot product of that query with the token's key, so ask whether the "
        "key depends on the token's number (in a tied head it is also the value, which must "
        "carry the number). The lesson's optional part measures how much of the tied head's "
        "scores the number explains.",
        "Statement 6: the query has no number in it, but what about the key it is multiplied "
        "with? In a tied head, must the key carry the token's number?",
    ),
    7: (
        "width-one-selects",
        "Statement 7 turns on what a dot product can do in one dimension: every query and "
        "every key is a single number, so a query's score is its own number times the key's. "
        "For a positive query the highest score goes to the largest key, whatever the query "
        "asks for; try to make each of 16 names win when asked. The lesson's optional part "
        "trains separate heads of width 1, 2 and 3.",
        "Statement 7: with d_head = 1 a score is a product of two numbers. For a given "
        "query, which key gets the highest score, and does that depend on which name was "
        "asked?",
    ),
    8: (
        "tied-wide-enough",
        "Statement 8 turns on room: with d_head = 24 the tied matrix can keep every feature "
        "in a dimension of its own, the names in some and the numbers in others, and the "
        "query can then look only at the name dimensions while the read-out looks only at "
        "the number dimensions. Ask whether anything then stops the head from picking the "
        "asked token and reading its number. The lesson's optional part trains tied heads "
        "from 2 to 12 wide.",
        "Statement 8: if the tied vector had separate dimensions for the name and for the "
        "number, what could the query look at, and what could the read-out read?",
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
        "notebook in; this cell does not say whether they are right."
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
            Misconception(
                _WHY[s][0],
                _WHY[s][1],
                (_answer_with(**{f"flip_{s}": True}),),
                question=_WHY[s][2],
            )
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
