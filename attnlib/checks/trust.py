"""What in the learner's kernel can be trusted: replaced names, hooks, threads, processes.

Kernel side of the hidden tests (see :mod:`attnlib.checks.grading`). When the grading
kernel starts, :func:`snapshot` records which object every scanned name is bound to (numpy,
torch, builtins, attnlib's modules and the attributes of attnlib's own classes), which
threads and processes exist and which IPython shell runs; :func:`tampering` later says
what was replaced (by identity, or by something defined in the notebook), which IPython
hooks the notebook installed, and :func:`foreign_threads` / :func:`foreign_processes` say
which threads and processes it started. What these find can only take credit away.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import sysconfig
import threading
import types
from pathlib import Path

from attnlib._backend import type_name
from attnlib.checks.protocol import process_state

_PACKAGE = "attnlib"
_ATTNLIB_DIR = str(Path(__file__).resolve().parents[1])
_modules = sys.modules
_FunctionType = types.FunctionType
_MethodType = types.MethodType
_ModuleType = types.ModuleType
_open = open
_type = type
_enumerate_threads, _Thread = threading.enumerate, threading.Thread

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
    # what record() itself uses to write its report (it keeps private references too)
    "os",
    "json",
    "pathlib",
    "shutil",
    "pickle",
    "threading",
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


def untrusted(obj) -> str | None:
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


def _own_classes(name: str, space) -> list[tuple[str, type]]:
    """The classes an attnlib module defines (the watcher's among them): their attributes
    are compared with the snapshot too — patching ``_Watch.seen`` is tampering."""
    if not (name == _PACKAGE or name.startswith(_PACKAGE + ".")) or not isinstance(
        space, _ModuleType
    ):
        return []
    return [
        (f"{name}.{attr}", obj)
        for attr, obj in _namespace(space).items()
        if isinstance(obj, type) and getattr(obj, "__module__", None) == name
    ]


SNAPSHOT: dict[tuple[str, str], int] = {}


def snapshot() -> int:
    """Record which object every scanned name is bound to; returns how many were recorded.

    The autograder calls this in a fresh kernel before the notebook's first cell, so that
    :func:`tampering` can tell a replaced name even when the replacement is another
    installed function (``np.isclose = np.equal``).
    """
    global _KERNEL_THREADS, _SHELL, _KERNEL_PROCESSES
    _KERNEL_THREADS = {t.ident for t in threading.enumerate()}
    _SHELL = _ipython_shell()
    _KERNEL_PROCESSES = set(_processes())
    SNAPSHOT.clear()
    for name, space in _scanned_namespaces():
        for attr, obj in _namespace(space).items():
            SNAPSHOT[(name, attr)] = id(obj)
        SNAPSHOT[("sys.modules", name)] = id(space)
        for cls_name, cls in _own_classes(name, space):
            for attr, obj in _namespace(cls).items():
                SNAPSHOT[(cls_name, attr)] = id(obj)
    return len(SNAPSHOT)


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
            if key in SNAPSHOT and SNAPSHOT[key] != id(space):
                problems.append(f"sys.modules[{name!r}] was replaced")
        volatile = _VOLATILE.get(name, set())
        for attr, obj in _namespace(space).items():
            if name == "builtins" and attr in ("_", "__", "___"):
                continue  # the last results shown: anything at all
            why = untrusted(obj)
            if why is not None:
                problems.append(f"{name}.{attr} was replaced by {why}")
                continue
            key = (name, attr)
            if name in _REBINDS or attr in volatile:
                continue  # torch rebinds some of its own names lazily (torch.manual_seed)
            if key in SNAPSHOT and SNAPSHOT[key] != id(obj):
                problems.append(f"{name}.{attr} was rebound after the kernel started")
        for cls_name, cls in _own_classes(name, space):
            for attr, obj in _namespace(cls).items():
                key = (cls_name, attr)
                # by identity only: dataclasses make their methods with exec ("<string>")
                if key in SNAPSHOT and SNAPSHOT[key] != id(obj):
                    problems.append(f"{cls_name}.{attr} was rebound after the kernel started")
    hook = sys.gettrace()
    if hook is not None and not _untrusted_hook_ok(hook):
        problems.append("a trace function (sys.settrace) is installed")
    problems += _shell_hooks()
    return problems


_SHELL = None  # the IPython shell the kernel started with (snapshot)


def _ipython_shell():
    mod = _modules.get("IPython.core.interactiveshell")
    cls = getattr(mod, "InteractiveShell", None)
    try:
        return cls.instance() if cls is not None and cls.initialized() else None
    except Exception:  # noqa: BLE001
        return None


def _shell_hooks() -> list[str]:
    """IPython hooks defined in the notebook: code that runs around every cell, outside
    the learner's functions (a pre_run_cell callback that reads the grader's inputs...)."""
    shell = _SHELL if _SHELL is not None else _ipython_shell()
    if shell is None:
        return []
    found = []
    try:
        hooks: list[tuple[str, object]] = []
        events = shell.events
        why = untrusted(events)
        if why is not None:
            found.append(f"the IPython event manager was replaced by {why}")
        for attr, obj in _namespace(events).items():
            if attr != "callbacks" and callable(obj):
                hooks.append((f"events.{attr}", obj))
        for event, callbacks in dict(events.callbacks).items():
            hooks += [(f"a {event} event callback", f) for f in list(callbacks)]
        for attr in ("input_transformers_cleanup", "input_transformers_post", "ast_transformers"):
            hooks += [(attr, f) for f in list(getattr(shell, attr, None) or [])]
        custom = tuple(getattr(shell, "custom_exceptions", ()) or ())
        if custom:
            hooks += [("custom_exceptions", c) for c in custom]
            handler = getattr(getattr(shell, "CustomTB", None), "__func__", None)
            for cell in getattr(handler, "__closure__", None) or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    if callable(cell.cell_contents):
                        hooks.append(("the custom exception handler", cell.cell_contents))
        for where, obj in hooks:
            why = untrusted(obj)
            if why is not None:
                found.append(f"IPython runs {why} ({where})")
    except Exception as err:  # noqa: BLE001 - a shell changed beyond recognition
        why = type_name(err)
        found.append(f"the IPython shell's hooks cannot be read ({why})")
    return list(dict.fromkeys(found))


def _untrusted_hook_ok(hook) -> bool:
    # Debuggers and coverage tools installed from site-packages are fine.
    return untrusted(hook) is None


# ---- threads and processes the notebook started ------------------------------------------

_KERNEL_THREADS: set[int] | None = None  # threads alive when the kernel started (snapshot)
_KERNEL_PROCESSES: set[int] | None = None  # pids alive at the snapshot (None: no snapshot)
_listdir, _getpid = os.listdir, os.getpid


def own_thread(t) -> bool:
    """A thread of the notebook's: a plain ``Thread`` (any target, thread pools too) or one
    of a class defined in the notebook; an installed library's own subclass (tqdm's
    monitor, IPython's history saver) is not."""
    cls = _type(t)
    return cls is _Thread or untrusted(cls) is not None


def _processes() -> dict[int, tuple[int, str, str]]:
    """Every process this kernel sees: pid -> (parent pid, state, name).

    The state is the process's as a whole: a process whose main thread has exited (``Z``)
    while another of its threads still runs is running (:func:`process_state`).
    """
    found = {}
    for entry in _listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with _open(f"/proc/{entry}/stat") as fh:
                line = fh.read()
        except OSError:
            continue
        name = line[line.find("(") + 1 : line.rfind(")")]
        fields = line[line.rfind(")") + 2 :].split()
        found[int(entry)] = (int(fields[1]), process_state(int(entry), fields[0]), name)
    return found


def _in_sandbox() -> bool:
    """In the grader's sandbox (its own pid namespace, bwrap as pid 1)?"""
    try:
        with _open("/proc/1/stat") as fh:
            return "(bwrap)" in fh.read()
    except OSError:
        return False


def foreign_processes() -> list[str]:
    """Processes the notebook started that are still running (work the hook would not see).

    In the sandbox: any process started since the snapshot. Elsewhere: the kernel's
    descendants started since the snapshot. Without a snapshot (not a grading kernel, e.g.
    the checks used in-process by a test suite whose process has children of its own)
    nothing is reported.
    """
    if _KERNEL_PROCESSES is None:
        return []
    try:
        procs = _processes()
    except (OSError, ValueError, IndexError):
        return []
    me = _getpid()
    if _in_sandbox():
        new = {p for p in procs if p not in _KERNEL_PROCESSES and p != me}
    else:
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        new, todo = set(), list(children.get(me, []))
        while todo:
            pid = todo.pop()
            if pid not in new:
                new.add(pid)
                todo += children.get(pid, [])
        new -= _KERNEL_PROCESSES
    names = [
        "".join(c if c.isprintable() else "?" for c in procs[p][2])
        for p in sorted(new)
        if procs[p][1] not in "ZX"  # exited, not reaped yet
    ]
    return names


def foreign_threads() -> list[str]:
    """Threads the notebook started that are still alive (work the hook would not see).

    A thread alive since the kernel started (ipykernel's own) is fine, and so is one of
    an installed library's own Thread classes (tqdm's monitor); a plain ``Thread`` or one
    of a class defined in the notebook, started since, is not.
    """
    if _KERNEL_THREADS is None:
        return []
    found = []
    for t in _enumerate_threads():
        if t.ident in _KERNEL_THREADS or t is threading.main_thread():
            continue
        if own_thread(t):
            found.append(t.name)
    return found
