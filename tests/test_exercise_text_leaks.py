"""No graded exercise is answered in the *text* before it is asked (issue 23).

tests/test_exercise_leaks.py compares code: earlier code cells against each solution, with
docstrings and prose left out. This file covers what it skips — the stub's docstring (it
survives ``make student``), the learning goals, the exercise's own text and the notes cells
before the check: every code span in that text (inline ``code``, and docstring clauses)
is parsed, and the solution's key expression (what it returns, intermediate variables
substituted — the same pattern test_exercise_leaks.py uses) must not occur in any of them.

``LESSONS`` lists the lessons held to it: all of them.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict

import pytest
from test_exercise_leaks import COURSE, Solution, key_expressions, occurs_in

LESSONS = tuple(f"{n:02d}" for n in range(17))  # every lesson

_SPAN = re.compile(r"`([^`\n]+)`")


def _expressions(text: str) -> list[ast.expr]:
    """Every piece of ``text`` that parses as a Python expression: inline code spans, and
    the clauses of plain text (split at colons, semicolons and sentence ends)."""
    chunks = _SPAN.findall(text)
    chunks += [c.strip(" .,") for c in re.split(r"[:;\n]|\.\s", text)]
    found = []
    for chunk in chunks:
        try:
            found.append(ast.parse(chunk, mode="eval").body)
        except SyntaxError:
            continue
    return found


def _docstring(source: str) -> str:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    docs = [ast.get_docstring(n) or "" for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    return "\n".join(docs)


def _texts_before_check(sol: Solution) -> list[tuple[str, str]]:
    """(where, text): the lesson's markdown up to the solution, and the stub's docstring."""
    cells = next(cs for cs in COURSE.lessons if cs and cs[0].notebook == sol.cell.notebook)
    texts = [
        (f"markdown cell {c.index}", c.source)
        for c in cells[: sol.cell.index]
        if c.nbgrader.get("markdown")
    ]
    texts.append((f"the docstring of cell {sol.cell.index}", _docstring(sol.cell.source)))
    return texts


OURS = [s for s in COURSE.solutions if s.cell.lesson in LESSONS]


@pytest.mark.parametrize("sol", OURS, ids=[s.grade_id for s in OURS])
def test_no_text_before_the_check_states_the_answer(sol):
    pattern = COURSE.solution_stmts[sol.grade_id]
    keys = key_expressions(sol, pattern, COURSE.names)
    for where, text in _texts_before_check(sol):
        for expr in _expressions(text):
            index = defaultdict(list)
            for node in ast.walk(expr):
                index[type(node)].append(node)
            for key in keys:
                if occurs_in(key.subst, index, COURSE.names):
                    pytest.fail(
                        f"{sol.exercise}: {where} states the answer `{ast.unparse(expr)}` "
                        f"(the solution returns `{ast.unparse(key.subst)}`)",
                        pytrace=False,
                    )


def test_the_detector_reads_docstrings_and_goals():
    sol = next(s for s in COURSE.solutions if s.grade_id == "l02-linear-forward-solution")
    pattern = COURSE.solution_stmts[sol.grade_id]
    keys = key_expressions(sol, pattern, COURSE.names)
    for text in (
        '"""What nn.Linear computes: x @ weight.T + bias."""',
        "* read `nn.Linear`: it computes `x @ weight.T + bias`. Match the two.",
    ):
        hits = []
        for expr in _expressions(text.strip('"')):
            index = defaultdict(list)
            for node in ast.walk(expr):
                index[type(node)].append(node)
            hits += [k for k in keys if occurs_in(k.subst, index, COURSE.names)]
        assert hits, text
