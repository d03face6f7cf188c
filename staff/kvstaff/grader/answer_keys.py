"""Answer keys the grader keeps to itself: exercises whose answer is a choice, not a function.

Most exercises are judged against a reference *function* (the learner's output is compared
with the reference's on cases drawn by the grader), which the learner's kernel may hold:
seeing the reference answers nothing about the hidden cases. Lesson 05's true/false
statements (Exercise 5.2, ``kv_prediction``) are different: the answer *is* the key, one
bit per statement, so the key must not be anywhere a learner's kernel can read it.

It lives here, in the grader wing, and nowhere else:

* the kernel side (:mod:`attnlib.checks.ex_keys_values`) registers the exercise without
  it: the visible cells check the format only, the hidden cells record the answers;
* the sandbox hides this whole package from every graded kernel (an empty, read-only
  folder in its place: :func:`kvstaff.grader.sandbox.bwrap_command`);
* the grader installs the key into its own process before judging
  (:mod:`kvstaff.grader.judging` calls :func:`install` on import).

A learner's server on a class hub should be built without ``staff/kvstaff/grader`` (the
staff image has it); a learner working alone with the whole repository has the
instructor lessons, and with them every solution, anyway.

The key is proven in ``tests/test_kv_prediction.py``: each statement by a construction (weights
that do what it says can be done), an argument checked numerically (what no weights can do),
or the definition of the wiring — and against what lesson 05 measures after the exercise.
The lesson itself prints no verdict.
"""

from __future__ import annotations

from attnlib.checks import ex_keys_values

#: Exercise 5.2: statement -> true or false (the statements: attnlib.checks.ex_keys_values).
KV_PREDICTION: dict[int, bool] = {
    1: True,
    2: False,
    3: True,
    4: False,
    5: True,
    6: False,
    7: False,
    8: True,
}


def install() -> None:
    """Install every answer key into this process's exercise registry (the grader's)."""
    ex_keys_values.install_answer_key(KV_PREDICTION)
