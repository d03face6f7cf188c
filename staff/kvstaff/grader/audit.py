"""The source audit: what a submission's code does that a person must look at.

The audit reads the notebook nbgrader graded (after it put locked cells back), trusts no
cell metadata, and looks at every code cell that is not, character for character, one of
the instructor's non-solution cells. It follows aliases (``c = attnlib.checks``,
``import numpy as xp``, ``for m in (np, torch)``, a module passed to a function,
``print.__self__``) in one linear pass, and reports what touches the testing machinery or
the grading machine (the tables are in :mod:`kvstaff.grader.audit_rules`). It runs
in the grader, in the worker that graded the submission and under a wall clock
(:func:`kvstaff.grader.autograde.timed_audit`); nothing in it depends on the kernel.
:func:`log_findings` reads nbgrader's own log of the submission for what it put back.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

from attnlib.checks import exercises as registered_exercises
from attnlib.checks import get_exercise
from kvstaff.grader import audit_rules as R
from kvstaff.grader.export import printable


def _root_name(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"


def _folded_string(node) -> str | None:
    """A string constant, or a concatenation of them ("mk" + "fifo"); else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = node.left, node.right
        if isinstance(left, (ast.Constant, ast.BinOp)) and isinstance(right, ast.Constant):
            a, b = _folded_string(left), _folded_string(right)
            if a is not None and b is not None:
                return a + b
    return None


def _parse(source: str) -> ast.AST | None:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - IPython missing or odd input: parse as it is
        pass
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None  # the kernel cannot run it either
    except (RecursionError, MemoryError, ValueError) as err:
        return _Unreadable(type(err).__name__)
    # The code an allowed magic runs (%%time, %timeit -n1 ..., %prun) is a string
    # argument of get_ipython().run_*_magic(): read it as the cell's own code.
    try:
        magics = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _magic_code(n)]
        for call in magics:
            for code in _magic_code(call):
                inner = _parse(code)
                if inner is None or isinstance(inner, _Unreadable):
                    why = inner.why if inner is not None else "not Python"
                    return _Unreadable(f"the code given to %{call.args[0].value} is {why}")
                tree.body.extend(inner.body)
    except RecursionError:
        return _Unreadable("RecursionError")
    return tree


class _OptionTable:
    options_table: dict = {}  # what IPython's Magics.parse_options reads from its magic


def _magic_code(call: ast.Call) -> list[str] | None:
    """The code an allowed magic runs ([] for none), as IPython splits its arguments.

    None when ``call`` is not a get_ipython().run_*_magic() call the audit may excuse: another
    magic, computed arguments, ``{expr}``/``$name`` in a line IPython expands, %prun -D/-T
    (writes files) or arguments IPython itself would refuse.
    """
    f = call.func
    if not (
        isinstance(f, ast.Attribute)
        and f.attr in ("run_line_magic", "run_cell_magic")
        and isinstance(f.value, ast.Call)
        and isinstance(f.value.func, ast.Name)
        and f.value.func.id == "get_ipython"
        and not call.keywords
        and len(call.args) == (3 if f.attr == "run_cell_magic" else 2)
        and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)
    ):
        return None
    name, line, *rest = (a.value for a in call.args)
    cell = rest[0] if rest else None
    if name not in R.SAFE_MAGICS:
        return None
    if name not in ("time", "timeit", "prun"):  # they take no code, but expand {expr} in line
        return [] if cell is None and not any(c in line for c in "{$") else None
    try:
        from IPython.core.magic import Magics
        from IPython.core.magic_arguments import parse_argstring
        from IPython.core.magics.execution import ExecutionMagics

        if name == "time":
            _, extra = parse_argstring(ExecutionMagics.time, line, partial=True)
            code = [" ".join(extra), cell or ""]
        elif name == "timeit":
            _, stmt = Magics.parse_options(
                _OptionTable(),
                line,
                "n:r:tcp:qov:",
                posix=False,
                strict=False,
                preserve_non_opts=True,
            )
            code = [stmt, cell or ""]
        else:
            opts, stmt = Magics.parse_options(
                _OptionTable(), line, "D:l:rs:T:q", list_all=True, posix=False
            )
            if "D" in opts or "T" in opts:
                return None
            code = [stmt + ("\n" + cell if cell is not None else "")]
    except (Exception, SystemExit):  # noqa: BLE001 - IPython missing, or it refuses these
        return None
    return [c for c in code if c.strip()]


class _Unreadable(ast.Module):
    """A cell the audit could not parse (nested too deep...): a finding of its own."""

    def __init__(self, why: str):
        super().__init__(body=[], type_ignores=[])
        self.why = why


class _Aliases:
    """Names that refer to the watched modules or to objects inside them."""

    def __init__(self) -> None:
        self.names = set(R.WATCHED_MODULES)
        self.attnlib = {"attnlib", "checks", "grading"}  # names rooted in attnlib

    def refers(self, e) -> bool:
        """Does evaluating ``e`` give (a part of) a watched object, not a computed value?"""
        if isinstance(e, ast.Name):
            return e.id in self.names
        if isinstance(e, ast.Attribute) and e.attr == "__self__":
            return True  # any builtin's __self__ is the builtins module
        if isinstance(e, (ast.Attribute, ast.Subscript)):
            return self.refers(e.value)
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Name) and f.id in ("getattr", "__import__", "vars", "globals"):
                return True
            if isinstance(f, ast.Attribute) and f.attr in ("import_module", "get", "pop"):
                return self.refers(f.value) or f.attr == "import_module"
            return False
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            return any(self.refers(x) for x in e.elts)
        if isinstance(e, ast.IfExp):
            return self.refers(e.body) or self.refers(e.orelse)
        if isinstance(e, ast.BoolOp):
            return any(self.refers(x) for x in e.values)
        if isinstance(e, ast.NamedExpr):
            return self.refers(e.value)
        return False

    def refs(self, e) -> tuple[bool, set[str]]:
        """What :meth:`refers` of ``e`` depends on: (always, the names it would need).

        ``e`` refers to a watched object if ``always``, or once any of the names is known
        as an alias. Mirrors :meth:`refers` without looking at what is known yet.
        """
        if isinstance(e, ast.Name):
            return False, {e.id}
        if isinstance(e, ast.Attribute) and e.attr == "__self__":
            return True, set()  # print.__self__ is the builtins module
        if isinstance(e, (ast.Attribute, ast.Subscript)):
            return self.refs(e.value)
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Name) and f.id in ("getattr", "__import__", "vars", "globals"):
                return True, set()
            if isinstance(f, ast.Attribute) and f.attr in ("import_module", "get", "pop"):
                return (True, set()) if f.attr == "import_module" else self.refs(f.value)
            return False, set()
        parts: list = []
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            parts = e.elts
        elif isinstance(e, ast.IfExp):
            parts = [e.body, e.orelse]
        elif isinstance(e, ast.BoolOp):
            parts = e.values
        elif isinstance(e, ast.NamedExpr):
            parts = [e.value]
        always, names = False, set()
        for part in parts:
            a, n = self.refs(part)
            always, names = always or a, names | n
        return always, names

    def collect(self, trees: list[ast.AST]) -> None:
        """Every alias of a watched object, in any cell order: linear in the cells' size.

        Each binding (an assignment, a loop or ``with`` target, a parameter given a watched
        argument) is an edge from the names its value needs to the names it binds; the
        known aliases spread along the edges once each (no fixpoint over all the cells).
        """
        params: dict[str, list[str]] = {}
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    name = getattr(node, "name", None)
                    if name:
                        a = node.args
                        params[name] = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
        bindings: list[tuple[list[str], bool]] = []  # (names bound, value rooted in attnlib)
        by_name: dict[str, list[int]] = {}  # name -> bindings that follow when it is known
        by_root: dict[str, list[int]] = {}  # name -> bindings rooted at it (attnlib spread)
        todo: list[str] = []

        def add(name: str, attnlib: bool) -> None:
            if name not in self.names:
                self.names.add(name)
                todo.append(name)
            if attnlib and name not in self.attnlib:
                self.attnlib.add(name)
                todo.append(name)

        def bind(target, value) -> None:
            names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
            if not names:
                return
            always, needs = self.refs(value)
            root = None if isinstance(value, ast.Call) else _root_name(value)
            i = len(bindings)
            bindings.append((names, root))
            if always:
                for n in names:
                    add(n, root is None or root in self.attnlib)
            for n in needs:
                by_name.setdefault(n, []).append(i)
            if root is not None:
                by_root.setdefault(root, []).append(i)

        for tree in trees:
            for node in ast.walk(tree):
                self._collect_node(node, params, bind, add)
        todo += list(self.names)
        while todo:
            name = todo.pop()
            for i in by_name.get(name, ()):
                names, root = bindings[i]
                for n in names:
                    add(n, root is None or root in self.attnlib)
            if name in self.attnlib:
                for i in by_root.get(name, ()):
                    for n in bindings[i][0]:
                        add(n, True)

    @staticmethod
    def _collect_node(node, params: dict, bind, add) -> None:
        """The bindings and imports of one node (see :meth:`collect`)."""
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in R.WATCHED_MODULES or top in R.SUSPICIOUS_IMPORTS:
                    add(a.asname or top, a.name.startswith("attnlib"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top in {"numpy", "torch", "attnlib", "scipy"} | R.SUSPICIOUS_IMPORTS:
                for a in node.names:
                    add(a.asname or a.name, top == "attnlib")
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                bind(t, node.value)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value:
            bind(node.target, node.value)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            bind(node.target, node.iter)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    bind(item.optional_vars, item.context_expr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            names = params.get(node.func.id, [])
            for i, arg in enumerate(node.args):
                if i < len(names):
                    bind(ast.Name(names[i]), arg)
            for kw in node.keywords:
                if kw.arg in names:
                    bind(ast.Name(kw.arg), kw.value)


def _os_call(name: str) -> bool:
    """An os function a solution never needs: files, processes (every spawn/exec/fork)."""
    return name in R.OS_CALLS or name.startswith(("spawn", "exec", "fork", "posix_spawn"))


def _write_mode(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(ch in mode.value for ch in "wax+")
    return True  # a computed mode: say so


def _safe_magic_receivers(tree) -> set[int]:
    """ids of the get_ipython() calls that only run an allowed magic (%timeit ...)."""
    safe = set()
    for node in ast.walk(tree):
        # the code such a magic runs was added to the tree by _parse, and is audited there
        if isinstance(node, ast.Call) and _magic_code(node) is not None:
            safe.add(id(node.func.value))
    return safe


def _audit_tree(tree, forbidden: set[str], aliases: _Aliases) -> list[str]:
    """Every finding in one cell's tree, in one walk.

    Long: one pass over the tree, one branch per kind of node (assignments, calls,
    attributes, strings, imports, class bodies); each branch is a few lines.
    """
    reasons: list[str] = []
    safe = _safe_magic_receivers(tree)
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for sub in ast.walk(t) if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                if isinstance(sub, (ast.Attribute, ast.Subscript)) and aliases.refers(sub.value):
                    reasons.append(f"assigns to {_dotted(sub)}")
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                if f.id in R.SUSPICIOUS_CALLS and not (f.id == "get_ipython" and id(node) in safe):
                    reasons.append(f"calls {f.id}()")
                if f.id == "open" and _write_mode(node):
                    reasons.append("opens a file for writing")
            elif isinstance(f, ast.Attribute):
                root = _root_name(f.value)
                if f.attr in R.WRITE_ATTRS:
                    reasons.append(f"writes files ({_dotted(f)})")
                elif root in aliases.names and root not in ("np", "torch") and _os_call(f.attr):
                    reasons.append(f"calls {_dotted(f)}()")
                elif f.attr in R.SUSPICIOUS_CALLS and aliases.refers(f.value):
                    reasons.append(f"calls {_dotted(f)}()")  # print.__self__.exec(...)
                elif root in ("np", "numpy", "torch") and f.attr in ("save", "savez", "savetxt"):
                    reasons.append(f"writes files ({_dotted(f)})")
                elif f.attr in ("open",) and _write_mode(node):
                    reasons.append(f"opens a file for writing ({_dotted(f)})")
        if isinstance(node, ast.Attribute):
            if node.attr in R.SUSPICIOUS_ATTRS:
                reasons.append(f"uses {_dotted(node)}")
            if node.attr in forbidden and _root_name(node) in aliases.attnlib:
                reasons.append(f"uses {_dotted(node)} (a course reference)")
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            reasons.append("uses __builtins__")
        text = _folded_string(node)
        if text is not None:
            hits = [s for s in R.SUSPICIOUS_STRINGS if s in text]
            if hits:
                reasons.append(f"names {hits[0]!r} in a string")
            elif text in R.SUSPICIOUS_NAME_STRINGS:
                reasons.append(f"names {text!r} in a string")
            elif any(
                name in forbidden for name in R.ATTNLIB_PATH.findall(text)
            ):  # pydoc.locate("attnlib.softmax"), pkgutil.resolve_name("attnlib:softmax")
                reasons.append(f"names the course reference {text!r} in a string")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and aliases.refers(node.args[0])
        ):
            reasons.append(f"calls {node.func.id}() on {_dotted(node.args[0])}")
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "attnlib":
                used = [a.name for a in node.names if a.name in forbidden or a.name == "*"]
                if used:
                    reasons.append(
                        f"imports {', '.join(used)} from {node.module} (a course reference)"
                    )
            if node.module.split(".")[0] in R.SUSPICIOUS_IMPORTS:
                reasons.append(f"imports from {node.module}")
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in R.SUSPICIOUS_IMPORTS:
                    reasons.append(f"imports {a.name}")
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in R.LYING_DUNDERS:
                    reasons.append(f"defines {node.name}.{item.name}")
    return list(dict.fromkeys(reasons))


def audit_cells(
    sources: list[str], forbidden: set[str], context: list[str] = ()
) -> list[list[str]]:
    """Reasons to look at each of these cells by hand (aliases followed across all of them).

    ``context`` holds the notebook's other code cells: searched for aliases, not reported.
    """
    trees = [_parse(s) for s in sources]
    aliases = _Aliases()
    try:
        others = [t for t in map(_parse, context) if t]
        aliases.collect([t for t in trees if t is not None] + others)
    except RecursionError:
        aliases.names.add("?")  # (each cell is still read below)
    return [_audit_one(t, forbidden, aliases) for t in trees]


def _audit_one(tree, forbidden: set[str], aliases: _Aliases) -> list[str]:
    if tree is None:
        return []
    if isinstance(tree, _Unreadable):
        return [f"the audit could not read this cell ({tree.why}): a person must"]
    try:
        return _audit_tree(tree, forbidden, aliases)
    except RecursionError:
        return ["the audit could not read this cell (RecursionError): a person must"]


def audit_code(source: str, forbidden: set[str]) -> list[str]:
    """Reasons to look at this learner code by hand (empty if nothing is suspicious)."""
    return audit_cells([source], forbidden)[0]


_CHECK_CALL = re.compile(r"""checks\.check(?:_hidden)?\(\s*["'](\w+)["']""")


def _forbidden_names(exercises: set[str] | None = None) -> set[str]:
    """Last names of the course references the given exercises (default: all) refuse."""
    known = set(registered_exercises())
    names = set()
    for name in sorted(known if not exercises else exercises & known):
        names |= {
            d.rsplit(".", 1)[1] for d in get_exercise(name).forbidden if d.startswith("attnlib.")
        }
    return names


def audit_notebook(graded: Path, source: Path | None) -> list[str]:
    """Audit the notebook nbgrader graded against the instructor's version of the lesson.

    Every code cell that is not exactly one of the instructor's non-solution cells is
    read — whatever its metadata says (a solution cell re-marked as locked is still read).
    """
    try:
        nb = nbformat.read(graded, as_version=4)
    except Exception as err:  # noqa: BLE001
        return [f"the submitted notebook cannot be read: {err}"]
    fixed: set[str] = set()
    exercises: set[str] = set()
    mine: list = []  # the instructor's code cells that are not solutions
    if source is not None and Path(source).exists():
        src = nbformat.read(source, as_version=4)
        mine = [
            c
            for c in src.cells
            if c.cell_type == "code"
            and not c.get("metadata", {}).get("nbgrader", {}).get("solution")
        ]
        fixed = {c.source for c in mine}
        for c in src.cells:  # the exercises this lesson checks
            exercises |= set(_CHECK_CALL.findall(c.source))
    forbidden = _forbidden_names(exercises)
    # What the instructor's own cells do (a lesson imports its references for demos) is no
    # finding when a learner's edited copy of such a cell does it too. A use of a course
    # reference is excused only in an edited copy of the very cell that has it (matched
    # by grade_id or cell id, never in a solution cell): elsewhere it is the solution.
    mine_found = audit_cells([c.source for c in mine], forbidden)
    own: dict[str, set[str]] = {}
    for c, why in zip(mine, mine_found, strict=True):
        for key in _cell_keys(c):
            own.setdefault(key, set()).update(why)
    baseline = {r for why in mine_found for r in why if _COURSE_REFERENCE not in r}
    code = [c for c in nb.cells if c.cell_type == "code"]
    audited = [c for c in code if c.source not in fixed]
    context = [c.source for c in code if c.source in fixed]
    found = audit_cells([c.source for c in audited], forbidden, context)
    reasons = []
    for cell, why in zip(audited, found, strict=True):
        where = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or "a learner cell"
        excused = set().union(*(own.get(k, set()) for k in _cell_keys(cell)))
        reasons += [
            printable(f"{where}: {r}") for r in why if r not in baseline and r not in excused
        ]
    return reasons


_COURSE_REFERENCE = "(a course reference)"


def _cell_keys(cell) -> list[str]:
    keys = []
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    if gid:
        keys.append(f"grade_id:{gid}")
    if cell.get("id"):
        keys.append(f"id:{cell.get('id')}")
    return keys


_CHANGED = re.compile(
    r"Attribute '(\w+)' for cell (\S+) has changed! \(should be: (.*?), got: (.*?)\)"
)
_UNKNOWN_CELL = re.compile(r"Cell '([^']*)' does not exist in the database")
_MISSING_CELL = re.compile(r"Missing grade cell (\S+) encountered")


def log_findings(log: str) -> tuple[list[str], list[str]]:
    """(reasons to review, plain notes) from nbgrader's autograde log of one submission.

    nbgrader puts back what a submission changed in a cell's nbgrader metadata and says so
    in its log; a change of ``locked``, ``cell_type`` or ``points`` is a deliberate edit of
    the JSON. (The "checksum has changed" line appears for every cell with hidden tests.)
    """
    review, notes = [], []
    for attr, cell, should, got in _CHANGED.findall(log):
        if attr != "checksum":
            review.append(
                f"{cell}: the submitted notebook changed this cell's {attr} "
                f"(should be {should}, was {got}); nbgrader put it back"
            )
    for cell in _UNKNOWN_CELL.findall(log):
        review.append(f"a cell claims the grade_id {cell!r}, which this lesson does not have")
    for cell in _MISSING_CELL.findall(log):
        notes.append(f"{cell}: missing from the submission; put back and graded")
    return list(dict.fromkeys(review)), list(dict.fromkeys(notes))
