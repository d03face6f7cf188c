"""The layout of attnlib (DESIGN.md §3): each room imports only from the rooms below it.

    course      staff tooling: grading, student versions, lecture builds, bench
    checks      exercise checks and diagnosis
    explorers   ipywidgets explorers
    plot        figures
    tasks       lesson tasks, generated data, small models
    library     attnlib's top-level modules: the attention a learner builds

Read from the source with ``ast`` (nothing is imported), so a violation is reported with
its file and line whether or not that code path ever runs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "attnlib"
RANK = {"library": 0, "data": 0, "tasks": 1, "plot": 2, "explorers": 3, "checks": 4, "course": 5}
# Only staff tooling (and tests/tools) may import the notebook machinery.
STAFF_ONLY = {"nbgrader", "nbconvert", "nbformat", "nbclient"}
# Private modules of their package: importable inside attnlib, but only their public names.
PRIVATE_MODULES = {
    "attnlib._backend",
    "attnlib._validate",
    "attnlib.plot._base",
    "attnlib.checks._core",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in RANK and (PKG / parts[1]).is_dir():
        return parts[1]
    return "library"


def sources() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def imports(path: Path):
    """(line, imported module, names or None) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield node.lineno, mod, [a.name for a in node.names]


def attnlib_modules() -> set[str]:
    return {module_name(p) for p in sources()}


def test_rooms_import_only_downwards():
    known = attnlib_modules()
    bad = []
    for path in sources():
        here = room(module_name(path))
        for line, mod, names in imports(path):
            if not mod.startswith("attnlib"):
                continue
            targets = [mod]
            if names:  # `from attnlib import plot` imports the module attnlib.plot
                targets += [f"{mod}.{n}" for n in names if f"{mod}.{n}" in known]
            for target in targets:
                there = room(target)
                if RANK[there] > RANK[here]:
                    where = f"{path.relative_to(ROOT)}:{line}"
                    bad.append(f"{where} ({here}) imports {target} ({there})")
    assert not bad, "imports that point up:\n" + "\n".join(bad)


def test_no_import_cycles_between_modules():
    known = attnlib_modules()
    graph: dict[str, set[str]] = {m: set() for m in known}
    for path in sources():
        here = module_name(path)
        for _, mod, names in imports(path):
            if mod in known:
                graph[here].add(mod)
            for n in names or ():
                if f"{mod}.{n}" in known:
                    graph[here].add(f"{mod}.{n}")
    # A package's __init__ re-exporting its own modules is not a cycle of ideas.
    for m in known:
        graph[m] = {
            t for t in graph[m] if t != m and not (t.startswith(m + ".") or m.startswith(t + "."))
        }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycle = stack[stack.index(t) :] + [t]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(known):
        if m not in state:
            visit(m)


def test_notebook_machinery_only_in_course_tooling():
    bad = []
    for path in sources():
        if room(module_name(path)) == "course":
            continue
        for line, mod, _ in imports(path):
            if mod.split(".")[0] in STAFF_ONLY:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    assert not bad, "\n".join(bad)


def test_no_private_name_crosses_a_module_boundary():
    """`from attnlib.x import _y` and `x._y` on an imported attnlib module are refused."""
    known = attnlib_modules()
    bad = []
    for path in sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for line, mod, names in imports(path):
            if not mod.startswith("attnlib"):
                continue
            for n in names or ():
                full = f"{mod}.{n}"
                if full in known:
                    aliases[n] = full
                elif n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {n} from {mod}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("attnlib") and a.asname:
                        aliases[a.asname] = a.name
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and f"{aliases[node.value.id]}.{node.attr}" not in known
            ):
                bad.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} uses {node.value.id}.{node.attr}"
                )
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


def test_every_room_exists_and_says_what_it_is_for():
    for name in ("tasks", "explorers", "plot", "checks", "course"):
        init = PKG / name / "__init__.py"
        assert init.is_file(), f"attnlib/{name}/ is missing"
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 40, f"attnlib/{name}/__init__.py has no docstring"


def test_lessons_use_public_names_and_no_staff_tooling():
    import nbformat

    private = re.compile(
        r"\battnlib(?:\.\w+)*\._(?!_)\w*|from attnlib[\w.]* import [^\n]*\b_(?!_)\w+"
    )
    staff = re.compile(r"\battnlib\.course\b")
    bad = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            for pattern in (private, staff):
                for m in pattern.finditer(cell.source):
                    bad.append(f"{path.name} cell {i}: {m.group(0)}")
    assert not bad, "lessons must import public library names only:\n" + "\n".join(bad)
