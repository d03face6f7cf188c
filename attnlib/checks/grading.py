"""Hidden tests that do not trust the learner's kernel.

nbgrader runs the hidden tests in the same kernel as the learner's code, so anything the
notebook can reach it can replace: ``np.testing.assert_allclose``, ``torch.testing``,
``np.isclose``, a builtin, ``attnlib.checks`` itself, or the exercise's reference. This
module is what :func:`attnlib.checks.check_hidden` calls. :func:`verify`

1. refuses to grade when the functions the checks and references rely on were replaced:
   every function or class reachable from numpy, torch, builtins, math and attnlib must
   come from an installed file (a function defined in the notebook does not), and when
   :func:`snapshot` ran at kernel start (the autograder does this) every such name must
   still be bound to the very object it was bound to then;
2. loads a fresh copy of attnlib and its checks from their files, under ``sys.modules``
   names that are put back afterwards, so that patched checks, a patched registry or a
   patched reference in the learner's session are not used;
3. runs the visible and hidden cases with that copy, accepting only real
   ``numpy.ndarray``/``torch.Tensor`` outputs (no objects whose ``__eq__`` is always True,
   no lazy array-likes), and fails a function that calls the course's reference (seen
   through the profiling hook, so aliases are caught).

A determined learner controls their own kernel and can still defeat any check that runs
in it (for example by replacing ``check_hidden`` before the test cell runs). That is why
the grading driver (:mod:`attnlib.course.gradebook`) also audits the submitted source outside the
kernel and flags such submissions for manual review. The failure messages carry tags the
driver reads: ``[needs-review]`` (tampering) and ``[calls-reference]``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import sysconfig
import types
from collections.abc import Callable
from pathlib import Path

_PACKAGE = "attnlib"
_ATTNLIB_DIR = str(Path(__file__).resolve().parents[1])
_import = importlib.import_module
_modules = sys.modules
_FunctionType = types.FunctionType
_MethodType = types.MethodType
_ModuleType = types.ModuleType

# Modules whose functions the checks, the references and the lessons' tests rely on.
SCANNED_MODULES = (
    "builtins",
    "math",
    "sys",
    "warnings",
    "contextlib",
    "io",
    "importlib",
    "numpy",
    "numpy.testing",
    "numpy.linalg",
    "torch",
    "torch.testing",
    "torch.nn.functional",
)
# Names IPython rebinds as it runs cells (still checked for where they come from).
_VOLATILE = {
    "builtins": {"_", "__", "___", "input", "getpass", "raw_input"},
    "sys": {
        "excepthook",
        "displayhook",
        "stdout",
        "stderr",
        "stdin",
        "__stdout__",
        "__stderr__",
        "last_type",
        "last_value",
        "last_traceback",
        "last_exc",
        "ps1",
        "ps2",
    },
}

# Namespaces checked only for where their functions come from, not for identity: torch
# replaces some of its own functions after import (seen: torch.manual_seed in a lesson).
_REBINDS = {"torch", "torch.nn.functional", "torch.Tensor"}

TAMPER_TAG = "[needs-review]"
REFERENCE_TAG = "[calls-reference]"


def _trusted_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {str(Path(r).resolve()) for r in list(roots)}
    roots |= {_ATTNLIB_DIR, sys.base_prefix, sys.prefix}
    # The shipped data (data/ in a checkout) is installed as the package attnlib.data.
    data = importlib.util.find_spec(_PACKAGE + ".data")
    if data is not None and data.submodule_search_locations:
        roots |= {str(Path(p).resolve()) for p in data.submodule_search_locations}
    return tuple(sorted(r for r in roots if r))


_ROOTS = _trusted_roots()


def _trusted_file(filename: str | None) -> bool:
    if not filename or filename.startswith("<"):
        return filename in ("<frozen>",) or bool(filename and filename.startswith("<frozen "))
    return filename.startswith(_ROOTS)


def _untrusted(obj) -> str | None:
    """Why ``obj`` looks like something defined in the notebook, or None if it looks installed."""
    if isinstance(obj, _MethodType):
        obj = obj.__func__
    if type(obj).__name__ == "partial" and hasattr(obj, "func"):
        obj = obj.func
    if isinstance(obj, _FunctionType):
        file = obj.__code__.co_filename
        return None if _trusted_file(file) else f"a function defined in {file}"
    if isinstance(obj, _ModuleType):
        file = getattr(obj, "__file__", None)
        if not isinstance(file, str) or not Path(file).is_absolute() or _trusted_file(file):
            return None  # built-in modules and torch's virtual ones (torch.ops) have no path
        return f"a module loaded from {file}"
    cls = obj if isinstance(obj, type) else type(obj)
    module = getattr(cls, "__module__", "") or ""
    if module == "__main__" or module.startswith("unittest.mock"):
        return f"an object of class {cls.__qualname__} from {module}"
    return None


def _scanned_namespaces() -> list[tuple[str, dict]]:
    names = list(SCANNED_MODULES) + sorted(
        n for n in list(_modules) if n == _PACKAGE or n.startswith(_PACKAGE + ".")
    )
    spaces = []
    for name in names:
        mod = _modules.get(name)
        if mod is None:
            continue
        spaces.append((name, mod))
    torch = _modules.get("torch")
    if torch is not None and isinstance(getattr(torch, "Tensor", None), type):
        spaces.append(("torch.Tensor", torch.Tensor))
    return spaces


def _namespace(obj) -> dict:
    return dict(vars(obj)) if hasattr(obj, "__dict__") else {}


_SNAPSHOT: dict[tuple[str, str], int] = {}


def snapshot() -> int:
    """Record which object every scanned name is bound to; returns how many were recorded.

    The autograder calls this in a fresh kernel before the notebook's first cell, so that
    :func:`tampering` can tell a replaced name even when the replacement is another
    installed function (``np.isclose = np.equal``).
    """
    _SNAPSHOT.clear()
    for name, space in _scanned_namespaces():
        for attr, obj in _namespace(space).items():
            _SNAPSHOT[(name, attr)] = id(obj)
        _SNAPSHOT[("sys.modules", name)] = id(space)
    return len(_SNAPSHOT)


def tampering() -> list[str]:
    """What in the kernel was replaced; empty if nothing looks tampered with."""
    problems = []
    for name, space in _scanned_namespaces():
        if not isinstance(space, (_ModuleType, type)):
            problems.append(f"sys.modules[{name!r}] is not a module")
            continue
        if name != "torch.Tensor":
            file = getattr(space, "__file__", None)
            if file is not None and not _trusted_file(file):
                problems.append(f"{name} is loaded from {file}")
            key = ("sys.modules", name)
            if key in _SNAPSHOT and _SNAPSHOT[key] != id(space):
                problems.append(f"sys.modules[{name!r}] was replaced")
        volatile = _VOLATILE.get(name, set())
        for attr, obj in _namespace(space).items():
            if name == "builtins" and attr in ("_", "__", "___"):
                continue  # the last results shown: anything at all
            why = _untrusted(obj)
            if why is not None:
                problems.append(f"{name}.{attr} was replaced by {why}")
                continue
            key = (name, attr)
            if name in _REBINDS or attr in volatile:
                continue  # torch rebinds some of its own names lazily (torch.manual_seed)
            if key in _SNAPSHOT and _SNAPSHOT[key] != id(obj):
                problems.append(f"{name}.{attr} was rebound after the kernel started")
    hook = sys.gettrace()
    if hook is not None and not _untrusted_hook_ok(hook):
        problems.append("a trace function (sys.settrace) is installed")
    return problems


def _untrusted_hook_ok(hook) -> bool:
    # Debuggers and coverage tools installed from site-packages are fine.
    return _untrusted(hook) is None


def fresh_core():
    """A fresh ``attnlib.checks._core`` (with every ``ex_*`` exercise) loaded from files.

    The notebook's own ``attnlib`` modules are set aside in ``sys.modules`` while the
    fresh copy is imported and put back afterwards, so the learner's session is not
    changed and nothing the learner changed in it is used. Forbidden-reference detection
    of the fresh copy resolves names inside the fresh copy.
    """
    own = [n for n in list(_modules) if n == _PACKAGE or n.startswith(_PACKAGE + ".")]
    saved = {n: _modules.pop(n) for n in own}
    fresh: dict[str, object] = {}
    try:
        core = _import(f"{_PACKAGE}.checks._core")
        _import(f"{_PACKAGE}.checks")  # registers every ex_* exercise in the fresh core
        fresh = {
            n: m for n, m in list(_modules.items()) if n == _PACKAGE or n.startswith(_PACKAGE + ".")
        }
    finally:
        for n in [n for n in list(_modules) if n == _PACKAGE or n.startswith(_PACKAGE + ".")]:
            del _modules[n]
        _modules.update(saved)

    def import_fresh(name: str):
        return fresh[name] if name in fresh else _import(name)

    core._import_module = import_fresh
    return core


def _tamper_error(exercise: str, problems: list[str]) -> AssertionError:
    shown = "; ".join(problems[:5]) + (
        f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    )
    return AssertionError(
        f"✘ {exercise}: {TAMPER_TAG} the hidden tests were not run because the testing "
        f"machinery in this kernel was changed: {shown}"
    )


def verify(exercise: str, fn: Callable) -> None:
    """The hidden test of one exercise: silent when right, AssertionError when not."""
    problems = tampering()
    if problems:
        raise _tamper_error(exercise, problems)
    core = fresh_core()
    report = core.run(exercise, fn, hidden=True)
    problems = list(report.tampering) + tampering()
    if problems:
        raise _tamper_error(exercise, problems)
    if not report.ok:  # a wrong result is a wrong result, whatever the function calls
        ids = ", ".join(report.misconceptions)
        hint = f" (probable mistake: {ids})" if ids else ""
        raise AssertionError(f"✘ {exercise}: hidden tests failed {report.first_failure}{hint}")
    if report.called_reference:
        used = ", ".join(report.called_reference)
        raise AssertionError(
            f"✘ {exercise}: {REFERENCE_TAG} the solution calls the course's reference ({used}); "
            f"no credit for this exercise"
        )
