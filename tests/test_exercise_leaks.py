"""No graded exercise is answered before it is asked (issue 15).

For every graded solution — the code between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
in a solution cell of any lesson — no earlier code cell (earlier in the same lesson, or in
any earlier lesson) may contain its substance. Worked solutions of earlier exercises are
not searched (in the learner's copy they are the learner's own code), nor are hidden tests.

What counts as "the substance", found by comparing syntax trees (``ast``), not text:

* **A run of statements.** Two or more consecutive non-trivial statements of the solution
  that stand, consecutively, in an earlier cell, carrying at least three operations
  between them (``e = np.exp(x - x.max(...))`` followed by ``return e / e.sum(...)``).
* **The key expression.** What the solution returns, with its intermediate variables
  substituted (``y = x @ weight.T; y = y + bias; return y`` gives ``x @ weight.T + bias``),
  found anywhere inside an earlier statement — itself also with the cell's intermediate
  variables substituted (``d_head = d_model // n_heads`` ... ``x.reshape(1, seq, n_heads,
  d_head).swapaxes(1, 2)``).

The solution is read as a *pattern*: every variable name in it (and every attribute that
holds data, such as ``layer.weight``) matches any expression — the same expression wherever
the same name recurs within one statement — while operators, constants, keyword arguments,
library functions (``np.exp``, ``torch.softmax``) and array methods (``.sum``, ``.T``,
``.reshape``) must agree. Comments, docstrings, imports and formatting never matter.

Not substance, so never a leak:

* statements without an operation of their own (``return out``, ``w = weights``,
  ``x = attnlib.attend(q, k, v)``): calls of the course's own helpers (``attnlib``,
  ``checks``, ``plot``, matplotlib) and of the learner's functions count as no operation;
* statements of the solution that repeat an earlier exercise's solution: a later exercise
  may build on an earlier one (lesson 04's bisection contains Exercise 3.1's softmax).

A demonstration that comes *after* the exercise's check is allowed: that is where
"this is now attnlib.X" and "whichever way you wrote it..." belong.

The test reads the notebooks as JSON (no nbformat: this file runs in well under a second).
"""

from __future__ import annotations

import ast
import builtins
import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"

# Array and tensor methods and properties: attributes that are operations, not data.
ARRAY_API = {n for n in dir(np.ndarray) if not n.startswith("_")} | {
    # torch.Tensor names numpy does not have (kept by hand: importing torch costs seconds)
    *"mT mH H t chunk view view_as masked_fill masked_fill_ unsqueeze squeeze permute".split(),
    *"contiguous expand expand_as softmax log_softmax exp log matmul detach numpy clone".split(),
    *"split unbind flatten unflatten narrow repeat repeat_interleave tril triu float".split(),
    *"double long bool half to norm pow sqrt add mul div sub masked_select scatter gather".split(),
    *"index_select where logsumexp amax amin abs neg sigmoid tanh relu new_zeros new_ones".split(),
    *"new_full new_empty zero_ copy_ fill_ add_ mul_ div_ sub_ exp_ size dim isfinite".split(),
    *"isinf isnan cpu cuda requires_grad_ backward grad type_as movedim moveaxis".split(),
}
BUILTINS = set(dir(builtins))
# Modules whose calls are the course's own helpers or display: no operation of the learner's.
HELPER_ROOTS = ("attnlib", "matplotlib", "ipywidgets", "IPython", "tqdm")

# A run of shared statements is a leak when it has at least this many non-trivial
# statements (not repeating an earlier solution) carrying at least this many operations.
MIN_RUN_STATEMENTS = 2
MIN_RUN_OPERATIONS = 3
MAX_SUBSTITUTED_NODES = 400  # keep substituted trees small (a name stays a name beyond)


# --- Reading the lessons ------------------------------------------------------------------


@dataclass
class Cell:
    lesson: str  # "03"
    notebook: str  # "03_attention.ipynb"
    index: int  # index of the cell in the notebook
    source: str
    nbgrader: dict


@dataclass
class Solution:
    cell: Cell
    grade_id: str
    exercise: str  # "Exercise 3.2 — attend"
    code: str  # the solution region, dedented
    first_line: int  # line of the cell where the region starts (1-based)


def cell_source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def read_lessons(folder: Path = NOTEBOOKS) -> list[list[Cell]]:
    lessons = []
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        cells = [
            Cell(
                path.name[:2],
                path.name,
                i,
                cell_source(c),
                c.get("metadata", {}).get("nbgrader", {}),
            )
            if c.get("cell_type") == "code"
            else Cell(path.name[:2], path.name, i, cell_source(c), {"markdown": True})
            for i, c in enumerate(nb.get("cells", []))
        ]
        lessons.append(cells)
    return lessons


def _between(src: str, begin: str, end: str) -> list[tuple[int, int]]:
    """(first, last) 0-based line numbers strictly inside each begin/end marker pair."""
    lines, spans, start = src.splitlines(), [], None
    for n, line in enumerate(lines):
        if line.strip().startswith(begin):
            start = n
        elif line.strip().startswith(end) and start is not None:
            spans.append((start + 1, n - 1))
            start = None
    return spans


def blank_regions(src: str) -> str:
    """The cell's code with solution regions and hidden tests replaced by `pass`."""
    lines = src.splitlines()
    for begin, end in ((BEGIN, END), (BEGIN_HIDDEN, END_HIDDEN)):
        for first, last in _between(src, begin, end):
            for n in range(first, last + 1):
                indent = re.match(r"\s*", lines[n - 1] if n > 0 else "").group(0)
                lines[n] = indent + "pass" if n == first else ""
    return "\n".join(lines)


def exercise_title(cells: list[Cell], index: int) -> str:
    for c in reversed(cells[:index]):
        if c.nbgrader.get("markdown"):
            m = re.search(r"^###\s+(Exercise\s+[^\n]+)", c.source, re.M)
            if m:
                return m.group(1).strip()
    return "an exercise without a '### Exercise' heading"


def solutions_of(cells: list[Cell]) -> list[Solution]:
    found = []
    for c in cells:
        if not c.nbgrader.get("solution") or c.nbgrader.get("markdown"):
            continue
        lines = c.source.splitlines()
        for first, last in _between(c.source, BEGIN, END):
            code = textwrap.dedent("\n".join(lines[first : last + 1]))
            found.append(
                Solution(
                    c,
                    c.nbgrader.get("grade_id", "?"),
                    exercise_title(cells, c.index),
                    code,
                    first + 1,
                )
            )
    return found


def parse(src: str) -> ast.Module | None:
    """Parse a cell; IPython magics and shell lines are dropped. None if it is not Python."""
    kept = ["" if re.match(r"\s*[%!]", ln) else ln for ln in src.splitlines()]
    try:
        return ast.parse("\n".join(kept))
    except SyntaxError:
        return None


# --- Names: which are kept, which are data ------------------------------------------------


@dataclass
class Names:
    modules: set[str] = field(default_factory=set)  # aliases bound by imports: np, torch, F...
    helpers: set[str] = field(default_factory=set)  # ... of which the course's own helpers

    def add_imports(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    alias = a.asname or a.name.split(".")[0]
                    self.modules.add(alias)
                    if a.name.startswith(HELPER_ROOTS):
                        self.helpers.add(alias)
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    alias = a.asname or a.name
                    self.modules.add(alias)
                    if node.module.startswith(HELPER_ROOTS):
                        self.helpers.add(alias)

    def kept(self, name: str) -> bool:
        return name in self.modules or name in BUILTINS

    def root(self, node: ast.expr) -> str | None:
        while isinstance(node, ast.Attribute):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def is_data_attribute(self, node: ast.Attribute) -> bool:
        """`layer.weight`, `self.W_q`: data; `x.sum`, `np.exp`, `torch.nn.functional`: not."""
        return node.attr not in ARRAY_API and not self.kept(self.root(node) or "")

    def is_wild(self, node: ast.AST) -> bool:
        try:
            return node._leak_wild
        except AttributeError:
            pass
        if isinstance(node, ast.Name):
            node._leak_wild = not self.kept(node.id)
        else:
            node._leak_wild = isinstance(node, ast.Attribute) and self.is_data_attribute(node)
        return node._leak_wild

    def wild_key(self, node: ast.AST) -> str:
        return ast.unparse(node)

    # --- how many operations an expression performs -------------------------------------

    def operations(self, node: ast.AST | None) -> int:
        return 0 if node is None else self.summary(node)[0]

    def summary(self, node: ast.AST) -> tuple[int, frozenset, int]:
        """(operations, names read, number of nodes) of a tree; computed once per node."""
        try:
            return node._leak_summary
        except AttributeError:
            pass
        ops, read, size = self._own_operations(node), set(), 1
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            read.add(node.id)
        for child in ast.iter_child_nodes(node):
            o, r, n = self.summary(child)
            ops, size = ops + o, size + n
            read |= r
        node._leak_summary = (ops, frozenset(read), size)
        return node._leak_summary

    def _own_operations(self, sub: ast.AST) -> int:
        if isinstance(sub, ast.BinOp | ast.Compare | ast.BoolOp | ast.IfExp | ast.Lambda):
            return 1
        if isinstance(sub, ast.UnaryOp):
            return int(not isinstance(sub.operand, ast.Constant | ast.Attribute))  # -1, -np.inf
        if isinstance(sub, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            return 1
        if isinstance(sub, ast.Attribute):
            return int(sub.attr in {"T", "mT", "H", "mH"})
        if isinstance(sub, ast.Subscript):
            return int(self._subscript_operates(sub.slice))
        if isinstance(sub, ast.Call):
            return int(self._call_operates(sub.func))
        return 0

    def _subscript_operates(self, s: ast.expr) -> bool:
        if isinstance(s, ast.Constant | ast.UnaryOp):  # shape[-1], x[0]
            return False
        return True  # slices, None, ..., tuples, computed indices

    def _call_operates(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):  # a builtin, or the learner's own function
            return False
        if isinstance(func, ast.Attribute):
            root = self.root(func)
            if root in self.helpers:
                return False
            if root is not None and self.kept(root):
                return True  # np.exp, torch.softmax, math.sqrt
            return func.attr in ARRAY_API  # x.sum(...), x.reshape(...)
        return False


# --- Statements ----------------------------------------------------------------------------


@dataclass
class Stmt:
    kind: str  # "value" (assign, return, expression), "test" (if, while, assert), "loop"
    expr: ast.expr | None  # what is compared
    subst: ast.expr | None  # the same with the cell's earlier assignments substituted
    lines: tuple[int, int]  # first and last line in its source
    ops: int = 0
    known: bool = False  # repeats an earlier exercise's solution
    index: dict | None = field(default=None, repr=False)  # subtrees by type, for searching
    print: tuple | None = None  # a cheap summary of the root, to rule out most matches fast

    @property
    def trivial(self) -> bool:
        return self.ops == 0


def fingerprint(expr: ast.expr | None, names: Names) -> tuple | None:
    """What the root of a pattern requires of the root of a match (None: anything)."""
    if expr is None or names.is_wild(expr):
        return None
    detail = None
    if isinstance(expr, ast.BinOp | ast.UnaryOp | ast.BoolOp):
        detail = type(expr.op).__name__
    elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        detail = expr.func.attr if not names.is_wild(expr.func) else None
    elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        detail = expr.func.id if not names.is_wild(expr.func) else None
    return type(expr).__name__, detail


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _node_count(node: ast.AST, names: Names) -> int:
    return names.summary(node)[2]


def _replace(node: ast.AST, env: dict[str, ast.expr]) -> ast.AST:
    """A copy of the tree with names from env replaced; unchanged subtrees are shared."""
    if isinstance(node, ast.Name):
        return env.get(node.id, node) if isinstance(node.ctx, ast.Load) else node
    if isinstance(node, ast.Lambda | ast.comprehension):  # their own names shadow the cell's
        return node
    changed, fields = False, {}
    for name, value in ast.iter_fields(node):
        if isinstance(value, ast.AST):
            new = _replace(value, env)
        elif isinstance(value, list):
            new = [_replace(v, env) if isinstance(v, ast.AST) else v for v in value]
            new = value if all(a is b for a, b in zip(new, value, strict=True)) else new
        else:
            new = value
        changed |= new is not value
        fields[name] = new
    return type(node)(**fields) if changed else node


def substitute(expr: ast.expr | None, env: dict[str, ast.expr], names: Names) -> ast.expr | None:
    if expr is None or not env or env.keys().isdisjoint(names.summary(expr)[1]):
        return expr
    return _replace(expr, env)


def remember(env: dict[str, ast.expr], name: str, value: ast.expr | None, names: Names) -> None:
    """Substitute `value` for `name` from now on, unless it is too large to be useful."""
    if value is not None and _node_count(value, names) <= MAX_SUBSTITUTED_NODES:
        env[name] = value


def statements(tree: ast.Module, names: Names) -> list[Stmt]:
    """The statements of a cell or solution in reading order, compound ones flattened.

    A compound statement contributes its header (an `if`'s test, a `for`'s iterable) and
    then its body; function bodies are read but their `def` line is not. Straight-line
    assignments to one name are remembered and substituted into later statements;
    assignments inside loops and functions are forgotten afterwards.
    """
    out: list[Stmt] = []

    def add(kind, expr, node, env):
        out.append(
            Stmt(
                kind,
                expr,
                substitute(expr, env, names),
                (node.lineno, node.end_lineno),
                names.operations(expr),
                print=fingerprint(expr, names),
            )
        )

    def walk(body: list[ast.stmt], env: dict[str, ast.expr], in_loop: bool) -> None:
        for node in body:
            if _is_docstring(node) or isinstance(
                node, ast.Import | ast.ImportFrom | ast.Pass | ast.Global | ast.Nonlocal
            ):
                continue
            if isinstance(node, ast.Assign | ast.AnnAssign):
                value = node.value
                if value is None:
                    continue
                add("value", value, node, env)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                assigned = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                simple = len(targets) == 1 and isinstance(targets[0], ast.Name)
                for name in assigned:
                    env.pop(name, None)
                if simple and not in_loop:
                    remember(env, targets[0].id, out[-1].subst, names)
                elif (
                    not in_loop
                    and len(targets) == 1
                    and isinstance(targets[0], ast.Tuple)
                    and isinstance(value, ast.Tuple)
                    and len(targets[0].elts) == len(value.elts)
                ):  # seq, d_model = 3, 12
                    for t, v in zip(targets[0].elts, value.elts, strict=True):
                        if isinstance(t, ast.Name):
                            remember(env, t.id, substitute(v, env, names), names)
            elif isinstance(node, ast.AugAssign):
                target = (
                    ast.Name(node.target.id, ast.Load())
                    if isinstance(node.target, ast.Name)
                    else node.target
                )
                expr = ast.BinOp(target, node.op, node.value)
                add("value", expr, node, env)
                if isinstance(node.target, ast.Name):
                    env.pop(node.target.id, None)
                    if not in_loop:
                        remember(env, node.target.id, out[-1].subst, names)
            elif isinstance(node, ast.Return | ast.Expr):
                if node.value is not None:
                    add("value", node.value, node, env)
            elif isinstance(node, ast.Assert):
                add("test", node.test, node, env)
            elif isinstance(node, ast.If):
                add("test", node.test, node, env)
                walk(node.body, env, in_loop)  # read as if the branch is taken
                inner = dict(env)
                walk(node.orelse, inner, True)
            elif isinstance(node, ast.While):
                add("test", node.test, node, env)
                inner = dict(env)
                walk(node.body, inner, True)
                _forget_assigned(node, env)
            elif isinstance(node, ast.For | ast.AsyncFor):
                add("loop", node.iter, node, env)
                inner = dict(env)
                walk(node.body, inner, True)
                _forget_assigned(node, env)
            elif isinstance(node, ast.With | ast.AsyncWith):
                walk(node.body, env, in_loop)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                walk(node.body, {}, True)
                env.pop(node.name, None)
            elif isinstance(node, ast.ClassDef):
                walk(node.body, {}, True)
            elif isinstance(node, ast.Try):
                for part in (
                    node.body,
                    *[h.body for h in node.handlers],
                    node.orelse,
                    node.finalbody,
                ):
                    walk(part, env, in_loop)
            elif isinstance(node, ast.Raise) and node.exc is not None:
                add("value", node.exc, node, env)

    walk(tree.body, {}, False)
    return out


def _forget_assigned(node: ast.AST, env: dict) -> None:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            env.pop(sub.id, None)


# --- Matching a pattern (the solution) against code -------------------------------------------


_SKIP_FIELDS = {"ctx", "type_comment", "kind"}


def _const_equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float | complex) and isinstance(b, int | float | complex):
        return a == b
    return type(a) is type(b) and a == b


def _dump(node: ast.AST) -> str:
    """ast.dump, computed once per node (the trees are never changed after they are read)."""
    try:
        return node._leak_dump
    except AttributeError:
        node._leak_dump = ast.dump(node)
        return node._leak_dump


def match(p: ast.AST, t: ast.AST, names: Names, env: dict[str, str]) -> bool:
    """Does the pattern p (from a solution) match the concrete tree t?"""
    if isinstance(p, ast.expr) and names.is_wild(p):
        if not isinstance(t, ast.expr):
            return False
        key, seen = names.wild_key(p), _dump(t)
        if env.setdefault(key, seen) != seen:
            return False
        return True
    if type(p) is not type(t):
        return False
    if isinstance(p, ast.Constant):
        return _const_equal(p.value, t.value)
    if isinstance(p, ast.Name):
        return p.id == t.id
    if isinstance(p, ast.Call):
        if not match(p.func, t.func, names, env) or len(p.args) != len(t.args):
            return False
        if not all(match(a, b, names, env) for a, b in zip(p.args, t.args, strict=True)):
            return False
        kp = {k.arg: k.value for k in p.keywords}
        kt = {k.arg: k.value for k in t.keywords}
        return kp.keys() == kt.keys() and all(match(kp[k], kt[k], names, env) for k in kp)
    for name in p._fields:
        if name in _SKIP_FIELDS:
            continue
        a, b = getattr(p, name, None), getattr(t, name, None)
        if isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            if not all(
                match(x, y, names, env) if isinstance(x, ast.AST) else x == y
                for x, y in zip(a, b, strict=True)
            ):
                return False
        elif isinstance(a, ast.AST):
            if not isinstance(b, ast.AST) or not match(a, b, names, env):
                return False
        elif a != b:
            return False
    return True


def statements_match(p: Stmt, t: Stmt, names: Names) -> bool:
    if p.kind != t.kind or p.expr is None or t.expr is None:
        return False
    if p.print is not None and t.print is not None:
        if p.print[0] != t.print[0] or (p.print[1] is not None and p.print[1] != t.print[1]):
            return False
    if type(p.expr) is not type(t.expr) and not names.is_wild(p.expr):
        return False
    return match(p.expr, t.expr, names, {})


def same_statement(a: Stmt, b: Stmt, names: Names) -> bool:
    """Equal up to the names of variables: each matches the other as a pattern."""
    return statements_match(a, b, names) and statements_match(b, a, names)


def occurs_in(pattern: ast.expr, index: dict[type, list[ast.expr]], names: Names) -> bool:
    """Does the pattern match a subtree of a statement (``index``: its subtrees by type)?"""
    return any(match(pattern, node, names, {}) for node in index.get(type(pattern), ()))


def subtrees(stmt: Stmt) -> dict[type, list[ast.expr]]:
    if stmt.index is None:
        stmt.index = {}
        for tree in {id(t): t for t in (stmt.expr, stmt.subst) if t is not None}.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.expr):
                    stmt.index.setdefault(type(node), []).append(node)
    return stmt.index


# --- Finding leaks ----------------------------------------------------------------------------


@dataclass
class Leak:
    solution: Solution
    cell: Cell
    how: str
    cell_lines: tuple[int, int]
    solution_lines: tuple[int, int]

    def describe(self) -> str:
        sol, c = self.solution, self.cell
        src, (a, b) = c.source.splitlines(), self.cell_lines
        shown = "\n".join(f"    {n:4d} | {src[n - 1]}" for n in range(a, min(b, len(src)) + 1))
        code, (sa, sb) = sol.code.splitlines(), self.solution_lines
        solution = "\n".join(f"         | {code[n - 1].rstrip()}" for n in range(sa, sb + 1))
        where = f"line {a}" if a == b else f"lines {a}-{b}"
        return (
            f"lesson {c.lesson} ({c.notebook}), cell {c.index}, {where}: {self.how} of "
            f"{sol.exercise} (lesson {sol.cell.lesson}, solution cell {sol.cell.index}, "
            f"{sol.grade_id})\n{shown}\n  the solution:\n{solution}"
        )


@dataclass
class Course:
    lessons: list[list[Cell]]
    names: Names
    cell_stmts: dict[tuple[str, int], list[Stmt]]
    solution_stmts: dict[str, list[Stmt]]
    solutions: list[Solution]


def build(lessons: list[list[Cell]]) -> Course:
    names = Names()
    trees = {}
    for cells in lessons:
        for c in cells:
            if c.nbgrader.get("markdown"):
                continue
            tree = parse(blank_regions(c.source))
            if tree is not None:
                names.add_imports(tree)
                trees[(c.notebook, c.index)] = tree
    cell_stmts = {key: statements(tree, names) for key, tree in trees.items() if tree is not None}
    solutions = [s for cells in lessons for s in solutions_of(cells)]
    solution_stmts = {}
    for s in solutions:
        tree = parse(s.code)
        solution_stmts[s.grade_id] = statements(tree, names) if tree is not None else []
    # Statements that repeat an earlier exercise's solution are building blocks, not
    # substance: a run of two or more statements equal to an earlier solution's (up to
    # names), or a whole earlier solution of three operations or more.
    for i, s in enumerate(solutions):
        mine = solution_stmts[s.grade_id]
        for e in solutions[:i]:
            theirs = solution_stmts[e.grade_id]
            for a in range(len(mine)):
                for b in range(len(theirs)):
                    run = 0
                    while (
                        a + run < len(mine)
                        and b + run < len(theirs)
                        and same_statement(mine[a + run], theirs[b + run], names)
                    ):
                        run += 1
                    whole = run == len(theirs) and sum(st.ops for st in theirs) >= 3
                    if run >= 2 or whole:
                        for st in mine[a : a + run]:
                            st.known = True
    return Course(lessons, names, cell_stmts, solution_stmts, solutions)


def earlier_cells(course: Course, sol: Solution) -> list[Cell]:
    out = []
    for cells in course.lessons:
        for c in cells:
            if c.nbgrader.get("markdown"):
                continue
            if c.lesson < sol.cell.lesson or (
                c.notebook == sol.cell.notebook and c.index < sol.cell.index
            ):
                out.append(c)
    return out


def run_length(pattern: list[Stmt], target: list[Stmt], i: int, j: int, names: Names) -> int:
    """How many statements match one by one from pattern[i] and target[j] on."""
    n = 0
    while (
        i + n < len(pattern)
        and j + n < len(target)
        and statements_match(pattern[i + n], target[j + n], names)
    ):
        n += 1
    return n


def shared_run(sol: Solution, pattern: list[Stmt], c: Cell, target: list[Stmt], names: Names):
    """The first run of the solution's statements that stands in the cell, if substantial."""
    by_root: dict[str, list[int]] = {}
    for j, t in enumerate(target):
        by_root.setdefault(t.print[0] if t.print else "", []).append(j)
    for i, first in enumerate(pattern):
        if first.trivial or first.known or not first.print:
            continue  # a run worth reporting starts with a substantive statement
        for j in by_root.get(first.print[0], ()):
            run = run_length(pattern, target, i, j, names)
            substantive = [st for st in pattern[i : i + run] if not st.trivial and not st.known]
            if (
                len(substantive) >= MIN_RUN_STATEMENTS
                and sum(st.ops for st in substantive) >= MIN_RUN_OPERATIONS
            ):
                return Leak(
                    sol,
                    c,
                    f"{run} consecutive statements",
                    (target[j].lines[0], target[j + run - 1].lines[1]),
                    (pattern[i].lines[0], pattern[i + run - 1].lines[1]),
                )
    return None


def key_expressions(sol: Solution, pattern: list[Stmt], names: Names) -> list[Stmt]:
    """The solution's return statements whose value (substituted) performs an operation."""
    tree = parse(sol.code)
    returns = set()
    if tree is not None:
        returns = {(n.lineno, n.end_lineno) for n in ast.walk(tree) if isinstance(n, ast.Return)}
    return [
        st
        for st in pattern
        if st.kind == "value"
        and st.lines in returns
        and st.subst is not None
        and not st.known
        and names.operations(st.subst) >= 1
    ]


def shared_key(sol: Solution, keys: list[Stmt], c: Cell, target: list[Stmt], names: Names):
    for st in keys:
        for t in target:
            if occurs_in(st.subst, subtrees(t), names):
                how = f"the key expression `{ast.unparse(st.subst)}`"
                return Leak(sol, c, how, t.lines, (1, len(sol.code.splitlines())))
    return None


def find_leaks(course: Course, sol: Solution) -> list[Leak]:
    """Every earlier cell that shows the solution's substance (one finding per cell)."""
    names, leaks = course.names, []
    pattern = course.solution_stmts[sol.grade_id]
    keys = key_expressions(sol, pattern, names)
    for c in earlier_cells(course, sol):
        target = course.cell_stmts.get((c.notebook, c.index), [])
        if target:
            found = shared_run(sol, pattern, c, target, names) or shared_key(
                sol, keys, c, target, names
            )
            if found:
                leaks.append(found)
    return leaks


# --- The tests ------------------------------------------------------------------------------


COURSE = build(read_lessons())


@pytest.mark.parametrize("sol", COURSE.solutions, ids=[s.grade_id for s in COURSE.solutions])
def test_no_earlier_cell_shows_the_solution(sol):
    leaks = find_leaks(COURSE, sol)
    if leaks:
        pytest.fail(
            f"{sol.exercise} is answered before it is asked (demonstrate on a different "
            "function, or move the demonstration after the check):\n\n"
            + "\n\n".join(leak.describe() for leak in leaks),
            pytrace=False,
        )


def test_every_lesson_solution_was_read():
    # Every solution cell yields a solution region that parses, with at least one statement.
    for s in COURSE.solutions:
        assert parse(s.code) is not None, f"{s.grade_id}: the solution region does not parse"
        assert COURSE.solution_stmts[s.grade_id], f"{s.grade_id}: no statements"
    assert len(COURSE.solutions) >= 13  # lessons 01-12 have graded exercises


# The detector itself, on small made-up lessons: it must flag copies and nothing ordinary.


def _lesson(nn: str, *cells: tuple[str, str | None]) -> list[Cell]:
    out = []
    for i, (src, role) in enumerate(cells):
        if role == "md":
            out.append(Cell(nn, f"{nn}_x.ipynb", i, src, {"markdown": True}))
            continue
        meta = {"solution": True, "grade_id": f"l{nn}-x{i}-solution"} if role == "solution" else {}
        out.append(Cell(nn, f"{nn}_x.ipynb", i, src, meta))
    return out


SOFTMAX_SOLUTION = (
    "def softmax(x):\n    ### BEGIN SOLUTION\n"
    "    e = np.exp(x - x.max(axis=-1, keepdims=True))\n"
    "    return e / e.sum(axis=-1, keepdims=True)\n    ### END SOLUTION\n"
)


def _leaks(*lessons):
    course = build(list(lessons))
    return {
        (leak.cell.lesson, leak.cell.index)
        for s in course.solutions
        for leak in find_leaks(course, s)
    }


def test_detector_flags_a_renamed_copy_in_an_earlier_lesson():
    early = _lesson(
        "00",
        ("import numpy as np", None),
        (
            "def stable(scores):\n    ex = np.exp(scores - scores.max(axis=-1, keepdims=True))"
            "  # shift\n    out = ex / ex.sum(axis=-1, keepdims=True)\n    return out",
            None,
        ),
    )
    late = _lesson("03", ("### Exercise 3.1 — softmax", "md"), (SOFTMAX_SOLUTION, "solution"))
    assert _leaks(early, late) == {("00", 1)}


def test_detector_flags_a_key_expression_and_a_substituted_one():
    early = _lesson(
        "01",
        ("import numpy as np", None),
        ("S = Q @ K.T", None),
        (
            "d_head = d_model // n_heads\n"
            "right = x.reshape(1, seq, n_heads, d_head).swapaxes(1, 2)",
            None,
        ),
        ("y = x_t @ layer.weight.T + layer.bias", None),
    )
    late = _lesson(
        "02",
        ("### Exercise 2.1 — scores", "md"),
        (
            "def f(Q, K):\n    ### BEGIN SOLUTION\n    return Q @ K.T\n    ### END SOLUTION",
            "solution",
        ),
        (
            "def g(x, n_heads):\n    ### BEGIN SOLUTION\n    batch, seq, d_model = x.shape\n"
            "    x = x.reshape(batch, seq, n_heads, d_model // n_heads)\n"
            "    return x.swapaxes(1, 2)\n    ### END SOLUTION",
            "solution",
        ),
        (
            "def h(x, weight, bias=None):\n    ### BEGIN SOLUTION\n    y = x @ weight.T\n"
            "    if bias is not None:\n        y = y + bias\n    return y\n    ### END SOLUTION",
            "solution",
        ),
    )
    assert _leaks(early, late) == {("01", 1), ("01", 2), ("01", 3)}


def test_detector_ignores_library_calls_imports_later_cells_and_earlier_solutions():
    early = _lesson(
        "00",
        ("import numpy as np\nimport attnlib\nfrom attnlib import checks", None),
        (
            "out, w = attnlib.attend(q, k, v)\nout2, w2 = attnlib.attend(q, k, v, mask=m)\n"
            "checks.check('softmax', softmax)",
            None,
        ),
        ("e = np.exp(x)\nw = e / e.sum(axis=-1, keepdims=True)", None),  # the naive softmax
        ("### Exercise 0.1 — softmax", "md"),
        (SOFTMAX_SOLUTION, "solution"),  # an earlier exercise's solution is not a leak...
    )
    late = _lesson(
        "04",
        ("### Exercise 4.1 — entropy", "md"),
        (
            "def entropy(z):\n    ### BEGIN SOLUTION\n"  # ... and a later one may build on it
            "    p = np.exp(z - z.max(axis=-1, keepdims=True))\n"
            "    p = p / p.sum(axis=-1, keepdims=True)\n"
            "    return -(p * np.log(p)).sum(axis=-1)\n    ### END SOLUTION",
            "solution",
        ),
        (
            "e = np.exp(s - s.max(axis=-1, keepdims=True))\ne = e / e.sum(axis=-1, keepdims=True)\n"
            "h = -(e * np.log(e)).sum(axis=-1)",
            None,
        ),  # after the exercise: allowed
    )
    assert _leaks(early, late) == set()
