"""Hidden tests whose verdict the learner's kernel cannot forge.

nbgrader runs the test cells in the same kernel as the learner's code, so anything the
notebook can reach it can replace: ``np.testing.assert_allclose``, ``attnlib.checks``
itself, the exercise's reference, ``check_hidden``. The graded path therefore never asks
the kernel for a verdict:

* **Grading** (``make autograde``). The grader (outside the kernel, and outside the
  sandbox the kernel runs in) writes the inputs of an exercise's cases to the exchange
  folder only while it runs that test cell's hidden region (:func:`write_inputs`);
  :func:`check_hidden <attnlib.checks.check_hidden>` in the kernel just calls the
  learner's function on them and writes the outputs out (:func:`record`); the grader
  reads them back as plain data (``.npy`` without pickle, JSON) and compares them with
  its own reference (:func:`judge`). A kernel that replaced ``check_hidden``, skipped it
  or crashed writes no outputs: the exercise scores 0 and is flagged. The random numbers
  of the hidden cases are drawn with a seed the grader picks per run
  (:func:`attnlib.checks._core.hidden_seed`), so the cases that ship with the course are
  not the ones graded. What the kernel says about itself (tampering found by
  :func:`tampering`, calls seen by the profiling hook, the hook switched off, threads and
  processes started during the call) can only take credit away, never give it — and a
  kernel that replaces this module's code can forge it: :func:`record` uses only what it
  bound at import, but the source audit (``attnlib.course.gradebook``) is what catches a
  learner who goes further.
* **Anywhere else** (``nbgrader validate``, a learner running the hidden cell, tests):
  :func:`verify` does the same in-process, with a fresh copy of the checks loaded from
  their files, after refusing to run when numpy, torch, builtins or attnlib functions
  were replaced (compared with :func:`snapshot`, taken when the grading kernel starts).

Either way only real ``numpy.ndarray``/``torch.Tensor`` outputs count (no objects whose
``__eq__`` is always True), and a function that calls what the exercise asks you to
build earns nothing for it (:data:`LIBRARY_EQUIVALENTS`, :func:`refused_calls`): the
course's own reference, or a library function that does the same computation in one
call (``torch.softmax`` in the softmax exercise, ``scaled_dot_product_attention`` in
``attend``). Calls are seen by what runs (the interpreter's profiling hook, so aliases
and builtins are caught), not by names in the source. Building blocks (``@``,
``np.exp``, ``np.tril``, ``np.linalg.lstsq``...) are fine.

Failure messages carry tags the grading driver reads: ``[needs-review]`` (tampering, or
hidden tests that did not run) and ``[calls-reference]``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import io
import json
import math
import os
import pickle
import re
import secrets
import shutil
import stat
import sys
import sysconfig
import threading
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

_PACKAGE = "attnlib"
_gc_collect = gc.collect
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


_SNAPSHOT: dict[tuple[str, str], int] = {}


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
    _SNAPSHOT.clear()
    for name, space in _scanned_namespaces():
        for attr, obj in _namespace(space).items():
            _SNAPSHOT[(name, attr)] = id(obj)
        _SNAPSHOT[("sys.modules", name)] = id(space)
        for cls_name, cls in _own_classes(name, space):
            for attr, obj in _namespace(cls).items():
                _SNAPSHOT[(cls_name, attr)] = id(obj)
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
        for cls_name, cls in _own_classes(name, space):
            for attr, obj in _namespace(cls).items():
                key = (cls_name, attr)
                if key in _SNAPSHOT and _SNAPSHOT[key] != id(obj):
                    problems.append(f"{cls_name}.{attr} was rebound after the kernel started")
                elif key not in _SNAPSHOT and _SNAPSHOT and _untrusted(obj) is not None:
                    problems.append(f"{cls_name}.{attr} was set to {_untrusted(obj)}")
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
        why = _untrusted(events)
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
            why = _untrusted(obj)
            if why is not None:
                found.append(f"IPython runs {why} ({where})")
    except Exception as err:  # noqa: BLE001 - a shell changed beyond recognition
        why = _import(f"{_PACKAGE}._backend").type_name(err)
        found.append(f"the IPython shell's hooks cannot be read ({why})")
    return list(dict.fromkeys(found))


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
    core.import_fresh = import_fresh
    return core


def _tamper_error(exercise: str, problems: list[str]) -> AssertionError:
    shown = "; ".join(problems[:5]) + (
        f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    )
    return AssertionError(
        f"✘ {exercise}: {TAMPER_TAG} the hidden tests were not run because the testing "
        f"machinery in this kernel was changed: {shown}"
    )


# ----------------------------------------------------------------------------------------
# The policy: what a solution may not call
# ----------------------------------------------------------------------------------------

_SOFTMAX_EQUIVALENTS = (
    "torch.softmax",
    "torch.log_softmax",
    "torch._softmax",
    "torch._log_softmax",
    "torch.ops.aten.softmax",
    "torch.ops.aten._softmax",
    "torch.ops.aten.log_softmax",
    "torch.ops.aten._log_softmax",
    "torch.ops.aten.special_softmax",
    "torch.ops.aten.special_log_softmax",
    "torch._C._nn.softmax",
    "torch._C._nn.log_softmax",
    "torch.special.softmax",
    "torch.special.log_softmax",
    "torch.nn.functional.softmax",
    "torch.nn.functional.log_softmax",
    "torch.nn.functional.softmin",
    "torch.Tensor.softmax",
    "torch.Tensor.log_softmax",
    "scipy.special.softmax",
    "scipy.special.log_softmax",
)
_ATTENTION_EQUIVALENTS = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.ops.aten.scaled_dot_product_attention",
    "torch.ops.aten._scaled_dot_product_attention_math",
    "torch.ops.aten._scaled_dot_product_flash_attention",
    "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu",
    "torch.ops.aten._scaled_dot_product_efficient_attention",
    "torch.ops.aten._scaled_dot_product_cudnn_attention",
    "torch.ops.aten._native_multi_head_attention",
    "torch._native_multi_head_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention.forward",
)
_AUTOGRAD = (
    "torch.autograd.grad",
    "torch.autograd.backward",
    "torch.autograd.functional.vjp",
    "torch.autograd.functional.jacobian",
    "torch.func.grad",
    "torch.func.vjp",
    "torch.func.jacrev",
    "torch.func.jacfwd",
)
_LINEAR = ("torch.nn.functional.linear", "torch.nn.functional.bilinear")

#: The library functions that do, in one call, what a course reference does: refused
#: exactly where the reference is refused (an exercise's ``forbidden`` list), so that
#: ``torch.softmax`` earns nothing in the softmax exercise just as ``attnlib.softmax``
#: does, and stays allowed inside ``attend`` (whose references are attend's own).
LIBRARY_EQUIVALENTS: dict[str, tuple[str, ...]] = {
    "attnlib.core.softmax": _SOFTMAX_EQUIVALENTS,
    "attnlib.core._softmax_math": _SOFTMAX_EQUIVALENTS,
    "attnlib.core.attend": _ATTENTION_EQUIVALENTS,
    "attnlib.core._attend_math": _ATTENTION_EQUIVALENTS,
    "attnlib.core._attend_torch_fast": _ATTENTION_EQUIVALENTS,
    "attnlib.masks.causal_mask": ("torch.nn.Transformer.generate_square_subsequent_mask",),
    "attnlib.torch_mha.mha_forward": _ATTENTION_EQUIVALENTS,
    "attnlib.torch_mha.unpack_mha": (),
    "attnlib.projections.linear": _LINEAR,
    "attnlib.projections.project": _LINEAR,
    "attnlib.backprop.attention_backward": _AUTOGRAD,
    "attnlib.backprop.projection_grads": _AUTOGRAD,
    "attnlib.tasks.scaling.softmax_jacobian": _AUTOGRAD,
}

COURSE_REFERENCE = "the course's reference"
LIBRARY_EQUIVALENT = "a library function that computes what this exercise asks you to build"


def refused_calls(exercise: str, core=None) -> dict[str, str]:
    """Every function a solution of ``exercise`` may not call -> why (one of two kinds).

    The exercise's ``forbidden`` names (course references, and any library function it
    lists itself), plus the :data:`LIBRARY_EQUIVALENTS` of each course reference.
    """
    if core is None:
        core = _import(f"{_PACKAGE}.checks._core")
    refused: dict[str, str] = {}
    for dotted in core.get_exercise(exercise).forbidden:
        own = dotted.startswith(_PACKAGE + ".")
        refused[dotted] = COURSE_REFERENCE if own else LIBRARY_EQUIVALENT
        for eq in LIBRARY_EQUIVALENTS.get(dotted, ()):
            refused.setdefault(eq, LIBRARY_EQUIVALENT)
    return refused


def _resolve(dotted: str, importer: Callable | None = None):
    """The object a dotted name names, importing nothing that is not imported yet.

    attnlib's own modules come from ``importer`` when given (a fresh copy of the checks
    passes its own, so that a reference replaced in the session is not what is watched).
    """
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        mod_name = ".".join(parts[:cut])
        mod = None
        if mod_name == _PACKAGE or mod_name.startswith(_PACKAGE + "."):
            try:
                mod = (importer or _import)(mod_name)
            except (ImportError, KeyError):
                mod = None
        else:
            mod = _modules.get(mod_name)
        if mod is None:
            continue
        obj = mod
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


_realpath = os.path.realpath
_REAL_FILES: dict[str, str] = {}


def _real_file(filename: str) -> str:
    """The file a code object was compiled from, whatever spelling reached it.

    ``runpy.run_path(attnlib.__path__[0] + "//core.py")`` compiles a copy whose
    ``co_filename`` is spelt with ``//`` (or ``/./``, ``..``, a symbolic link): the key is
    the real path, looked up once per spelling.
    """
    real = _REAL_FILES.get(filename)
    if real is None:
        real = filename if filename.startswith("<") else _realpath(filename)
        _REAL_FILES[filename] = real
    return real


def _code_key(code) -> tuple:
    # By real file, line and name rather than identity, so that a fresh copy of attnlib
    # recognises calls into the copy the notebook imported (and into one run from its
    # file under another path spelling).
    return (_real_file(code.co_filename), code.co_firstlineno, code.co_name)


class _Watch:
    """What to recognise, by what runs: Python functions by code, builtins by owner+name."""

    def __init__(self, refused: dict[str, str], importer: Callable | None = None):
        self.codes: dict[tuple, str] = {}
        self.builtins: dict[tuple, str] = {}
        self.methods: list[tuple[type, str, str]] = []
        self.ops: dict[str, str] = {}  # torch.ops.aten.X: by the operator's name
        for dotted in refused:
            if dotted.startswith("torch.ops."):
                ns, _, op = dotted.removeprefix("torch.ops.").partition(".")
                self.ops[f"{ns}::{op}"] = dotted
                continue
            obj = _resolve(dotted, importer)
            if obj is None:
                continue
            obj = getattr(obj, "__func__", obj)
            while hasattr(obj, "__wrapped__"):
                obj = obj.__wrapped__
            code = getattr(obj, "__code__", None)
            if code is not None:
                self.codes[_code_key(code)] = dotted
            elif type(obj).__name__ == "method_descriptor":
                owner = _resolve(dotted.rsplit(".", 1)[0], importer)
                if isinstance(owner, type):
                    self.methods.append((owner, obj.__name__, dotted))
            elif isinstance(obj, types.BuiltinFunctionType):
                owner = getattr(obj, "__self__", None)
                self.builtins[(id(owner) if owner is not None else None, obj.__name__)] = dotted

    def __bool__(self) -> bool:
        return bool(self.codes or self.builtins or self.methods or self.ops)

    def seen(self, event: str, frame, arg) -> str | None:
        if event == "call":
            code = frame.f_code
            if self.ops and code in _OP_CALLS:  # torch.ops.aten.X(...) / X.default(...)
                op = frame.f_locals.get("self")
                name = getattr(op, "_qualified_op_name", None) or getattr(op, "_name", None)
                return self.ops.get(str(name))
            return self.codes.get(_code_key(code))
        if event == "c_call":
            owner = getattr(arg, "__self__", None)
            name = getattr(arg, "__name__", None)
            if owner is None:
                hit = self.builtins.get((None, name))
            elif isinstance(owner, types.ModuleType):
                hit = self.builtins.get((id(owner), name))
            else:
                hit = None
            if hit is None and owner is not None:
                for cls, method, dotted in self.methods:
                    if name == method and isinstance(owner, cls):
                        return dotted
            return hit
        return None


# ----------------------------------------------------------------------------------------
# Running a learner's function on given inputs (in whichever process holds it)
# ----------------------------------------------------------------------------------------

_ndarray = np.ndarray
_tensor = torch.Tensor
_TensorBase = torch._C.TensorBase  # C methods: cannot be replaced from Python
_getprofile, _setprofile = sys.getprofile, sys.setprofile
_thread_setprofile = threading.setprofile
_enumerate_threads, _Thread = threading.enumerate, threading.Thread
_redirect_stdout, _redirect_stderr = contextlib.redirect_stdout, contextlib.redirect_stderr
_catch_warnings, _simplefilter, _errstate = (
    warnings.catch_warnings,
    warnings.simplefilter,
    np.errstate,
)
_StringIO = io.StringIO
# What record() uses after the learner's function ran, bound now: a notebook that replaces
# json.dumps, np.save, open or a Path method does not change what record() writes.
_dumps = json.dumps
_np_save, _ascontiguous = np.save, np.ascontiguousarray
_open = open
_os_open, _os_close, _os_write = os.open, os.close, os.write
_os_mkdir, _os_path_isfile, _rmtree = os.mkdir, os.path.isfile, shutil.rmtree
_pickle_load = pickle.load
_type, _len = type, len

# Calls that move work out of the profiling hook's sight: switching the hook off (or a
# trace function on), starting a thread or a process. Seen as they are made, during the
# observed call: the hook sees the call of setprofile itself before it takes effect.
_HIDING_BUILTINS = {
    ("sys", "setprofile"),
    ("sys", "settrace"),
    ("_thread", "start_new_thread"),
    ("_thread", "start_joinable_thread"),
    ("posix", "fork"),
    ("posix", "forkpty"),
    ("posix", "posix_spawn"),
    ("posix", "posix_spawnp"),
    ("posix", "system"),
    ("posix", "execv"),
    ("posix", "execve"),
    ("_posixsubprocess", "fork_exec"),
}
_HIDING_CODES = {
    threading.setprofile.__code__: "threading.setprofile",
    threading.settrace.__code__: "threading.settrace",
    threading.Thread.start.__code__: "threading.Thread.start",
}
_OP_CALLS = frozenset(
    vars(cls)["__call__"].__code__
    for cls in (torch._ops.OpOverloadPacket, torch._ops.OpOverload)
    if "__call__" in vars(cls)
)
_THREAD_START = threading.Thread.start.__code__
_KERNEL_THREADS: set[int] | None = None  # threads alive when the kernel started (snapshot)


def _own_thread(t) -> bool:
    """A thread of the notebook's: a plain ``Thread`` (any target, thread pools too) or one
    of a class defined in the notebook; an installed library's own subclass (tqdm's
    monitor, IPython's history saver) is not."""
    cls = _type(t)
    return cls is _Thread or _untrusted(cls) is not None


_KERNEL_PROCESSES: set[int] | None = None  # pids alive at the snapshot (None: no snapshot)
_listdir, _getpid = os.listdir, os.getpid


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


def process_state(pid: int, state: str, proc: str = "/proc") -> str:
    """The state of process ``pid`` counting all its threads: ``state`` (its main thread's,
    from ``/proc/<pid>/stat``) unless that is ``Z``/``X`` and another thread still runs.

    A helper that ends its main thread with a raw exit syscall shows ``Z`` while a worker
    thread of it keeps computing: the grader and the kernel read ``/proc/<pid>/task/*``.
    Shared by both sides (the grader reads the host's /proc, the kernel its own).
    """
    if state not in "ZX":
        return state
    try:
        tasks = _listdir(f"{proc}/{pid}/task")
    except OSError:
        return state
    for tid in tasks:
        try:
            with _open(f"{proc}/{pid}/task/{tid}/stat") as fh:
                line = fh.read()
        except OSError:
            continue
        task_state = line[line.rfind(")") + 2 :].split()[:1]
        if task_state and task_state[0] not in "ZX":
            return task_state[0]
    return state


def _in_sandbox() -> bool:
    """In the grader's sandbox (its own pid namespace, bwrap as pid 1)?"""
    try:
        with _open("/proc/1/stat") as fh:
            return "(bwrap)" in fh.read()
    except OSError:
        return False


def _foreign_processes() -> list[str]:
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


def _foreign_threads() -> list[str]:
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
        if _own_thread(t):
            found.append(t.name)
    return found


class Raised:
    """A call that raised: its exception's class name and (shortened) message."""

    def __init__(self, name: str, message: str = ""):
        self.name, self.message = name, message


@dataclass
class Observation:
    """What a learner's function did on every case: outputs, refused calls, tampering."""

    outputs: list = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)


def _copy(a):
    if type(a) is _ndarray:
        return a.copy()
    if isinstance(a, _tensor):
        return _TensorBase.clone(_TensorBase.detach(a))
    if type(a) in (list, tuple):
        return type(a)(_copy(x) for x in a)
    return a


def observe(fn: Callable, cases: list[tuple[tuple, dict]], watch: _Watch) -> Observation:
    """Call ``fn`` on a copy of each case's inputs; keep outputs, refused calls, hook changes.

    Whatever ``fn`` prints is kept out of the cell (stdout and stderr are redirected),
    warnings are silenced, numpy's floating-point errors ignored. The hook is also set for
    threads started during the call; switching it off, starting a thread or a process,
    or a thread of the notebook's alive during the call, are tampering.
    """
    obs = Observation()
    seen: set[str] = set()
    hiding: set[str] = set()
    own = observe.__code__

    def profiler(frame, event, arg):
        if event == "c_call":
            owner = getattr(arg, "__self__", None)
            key = (getattr(owner, "__name__", None), getattr(arg, "__name__", None))
            if key in _HIDING_BUILTINS and frame.f_code is not own:
                if frame.f_code is not _THREAD_START:  # (judged at Thread.start's call)
                    hiding.add(".".join(str(k) for k in key))
        elif event == "call" and frame.f_code in _HIDING_CODES:
            back = frame.f_back
            if back is None or back.f_code is not own:
                if frame.f_code is not _THREAD_START or _own_thread(frame.f_locals.get("self")):
                    hiding.add(_HIDING_CODES[frame.f_code])
        hit = watch.seen(event, frame, arg)
        if hit is not None:
            seen.add(hit)

    previous = _getprofile()
    for args, kwargs in cases:
        threads = _foreign_threads() if watch else []
        if threads:
            obs.tampering.append(
                f"threads started by the notebook were running during the hidden cases "
                f"({', '.join(threads[:3])}): their work is not seen"
            )
        args = tuple(_copy(a) for a in args)
        kwargs = {k: _copy(v) for k, v in kwargs.items()}
        sink = _StringIO()
        hook = profiler if watch else previous
        _thread_setprofile(hook if watch else None)
        _setprofile(hook)
        try:
            with _redirect_stdout(sink), _redirect_stderr(sink), _catch_warnings():
                _simplefilter("ignore")
                with _errstate(all="ignore"):
                    out = fn(*args, **kwargs)
                    # Fixed now, while the hook still sees what runs: a finalizer or a
                    # __del__ that fills the output later would change nothing judged.
                    out = _copy(out)
                    del args, kwargs  # finalizers on the inputs run now, under the hook
                    _gc_collect(1)
        except Exception as exc:  # noqa: BLE001 - a learner's function may raise anything
            out = Raised(type(exc).__name__, str(exc)[:300])
        finally:
            changed = watch and _getprofile() is not hook
            _setprofile(previous)
            _thread_setprofile(None)
        if changed:
            obs.tampering.append("the function replaced the interpreter's profiling hook")
        obs.outputs.append(out)
    if hiding:
        obs.tampering.append(
            "the function called "
            + ", ".join(sorted(hiding))
            + " (the profiling hook, a thread or a process): what it ran there is not seen"
        )
    obs.calls = sorted(seen)
    obs.tampering = list(dict.fromkeys(obs.tampering))
    return obs


# ---- plain-data encoding (kernel -> grader): JSON and .npy, never pickle ------------------

MANIFEST = "manifest.json"
MAX_FILE_BYTES = 64 * 2**20  # one output array
MAX_EXERCISE_BYTES = 128 * 2**20  # all the arrays of one exercise's hidden cases
MAX_MANIFEST_BYTES = 2**20


class _Budget:
    """Bytes the grader may still read for one exercise; every file at most once."""

    def __init__(self, left: int):
        self.left, self.names = left, set()

    def take(self, name: str, size: int) -> None:
        if name in self.names:
            raise ValueError(f"{name} is named twice")
        self.names.add(name)
        self.left -= size
        if self.left < 0:
            raise ValueError("the outputs are larger than the grader reads")


_NAME_OK = re.compile(r"[^A-Za-z0-9_.]")


def _clean_name(name: str) -> str:
    return _NAME_OK.sub("_", str(name))[:60] or "?"


def _encode(value, folder: Path, files: list[int], depth: int = 0) -> dict:
    if isinstance(value, Raised):
        return {"t": "raised", "name": _clean_name(value.name), "msg": value.message[:300]}
    if value is None:
        return {"t": "none"}
    if type(value) in (bool, int, float):
        return {"t": "number", "type": type(value).__name__, "v": value}
    if type(value) in (np.float64, np.float32, np.int64, np.int32):
        return {
            "t": "number",
            "type": "float" if value.dtype.kind == "f" else "int",
            "v": value.item(),
        }
    if type(value) is _ndarray or type(value) is _tensor:
        kind = "ndarray" if type(value) is _ndarray else "tensor"
        if kind == "tensor":
            dtype = str(value.dtype)
            t = _TensorBase.detach(value)
            if t.dtype in (torch.bfloat16, torch.float16):
                t = _TensorBase.float(t)
            arr = _TensorBase.numpy(_TensorBase.cpu(t))
        else:
            dtype, arr = str(value.dtype), value
        if arr.dtype.kind not in "biuf":
            return {"t": "other", "name": f"{kind} of dtype {_clean_name(arr.dtype)}"}
        name = f"{_len(files)}.npy"
        files.append(1)
        _np_save(str(folder) + "/" + name, _ascontiguous(arr), allow_pickle=False)
        return {"t": kind, "f": name, "dtype": dtype}
    if type(value) in (tuple, list) and depth == 0:
        items = [_encode(v, folder, files, depth + 1) for v in value]
        return {"t": type(value).__name__, "items": items}
    return {"t": "other", "name": _clean_name(type(value).__name__)}


def _open_inside(root: Path, parts: list[str]) -> int:
    """Open root/parts... for reading without following a symlink anywhere below root."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for i, part in enumerate(parts):
            if part in ("", ".", "..") or "/" in part:
                raise ValueError(f"bad name {part!r}")
            last = i == len(parts) - 1
            # O_NONBLOCK: a FIFO planted under a file's name must not hang the grader
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            raise ValueError(f"{'/'.join(parts)} is not a regular file of a sane size")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _check_npy_header(fh, size: int) -> None:
    """Refuse an ``.npy`` whose header does not describe what the file holds (then rewind).

    ``np.load`` allocates what the header claims before it reads: a 128-byte file can
    claim 8 TiB. Only plain numeric dtypes, and no more data than the file's bytes.
    """
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    if version == (1, 0):
        shape, _, dtype = fmt.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, _, dtype = fmt.read_array_header_2_0(fh)
    else:
        raise ValueError(f"an .npy file of format version {version}")
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"an array of dtype {dtype}")
    if dtype.kind not in "biuf" or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"an array of dtype {dtype} and shape {shape}")
    if math.prod(shape) * dtype.itemsize > size - fh.tell():
        raise ValueError(f"an .npy header claims shape {shape} of {dtype}: more than the file")
    fh.seek(0)


def _decode(entry: dict, root: Path, sub: list[str], depth: int = 0, budget=None):
    t = entry.get("t")
    if t == "raised":
        return Raised(_clean_name(entry.get("name", "Exception")), "")
    if t == "none":
        return None
    if t == "number":
        v = entry.get("v")
        kind = {"bool": bool, "int": int, "float": float}.get(entry.get("type"))
        if kind is None or type(v) not in (bool, int, float):
            raise ValueError("bad number")
        return kind(v)
    if t in ("ndarray", "tensor"):
        name = str(entry.get("f"))
        fd = _open_inside(root, [*sub, name])
        if budget is not None:
            try:
                budget.take(name, os.fstat(fd).st_size)
            except ValueError:
                os.close(fd)
                raise
        with os.fdopen(fd, "rb") as fh:
            _check_npy_header(fh, os.fstat(fh.fileno()).st_size)
            arr = np.load(fh, allow_pickle=False)
        if type(arr) is not _ndarray or arr.dtype.kind not in "biuf":
            raise ValueError("bad array")
        if t == "ndarray":
            return arr
        out = torch.from_numpy(arr)
        dtype = getattr(torch, str(entry.get("dtype", "")).removeprefix("torch."), None)
        return out.to(dtype) if isinstance(dtype, torch.dtype) else out
    if t in ("tuple", "list") and depth == 0:
        items = [_decode(e, root, sub, depth + 1, budget) for e in entry.get("items", [])[:16]]
        return tuple(items) if t == "tuple" else items
    if t == "other":
        return type(_clean_name(entry.get("name", "object")), (), {})()
    raise ValueError(f"unknown entry {t!r}")


# ---- the exchange folder -----------------------------------------------------------------
#
#   <exchange>/in/<exercise>.pkl            written by the grader just before a hidden run
#   <exchange>/out/<exercise>/manifest.json written by record() in the kernel, with N.npy
#
# In the sandbox, in/ belongs to root and is read-only for the kernel; out/ is the kernel's.

EXCHANGE_ENV = "KEY_VECTORS_GRADING_EXCHANGE"
# Grader side: the seed of the hidden cases last written for (exchange folder, exercise).
_SEEDS: dict[tuple[str, str], int] = {}


def exchange_folder() -> Path | None:
    """The exchange folder when this kernel is being graded (set by the grader)."""
    value = os.environ.get(EXCHANGE_ENV)
    return Path(value) if value else None


def write_inputs(exercise: str, exchange: Path) -> int:
    """Grader side: put the inputs of every case of ``exercise`` where record() finds them."""
    core = _import(f"{_PACKAGE}.checks._core")
    seed = _SEEDS[(str(exchange), exercise)] = secrets.randbits(32)
    with core.hidden_seed(seed):  # drawn now: no table made in advance has these inputs
        cases = core.get_exercise(exercise).cases(hidden=True)
    data = {
        "exercise": exercise,
        "cases": [(c.args, c.kwargs) for c in cases],
        "refused": refused_calls(exercise),
    }
    inbox = Path(exchange) / "in"
    tmp = inbox / f".{exercise}.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.chmod(tmp, 0o644)
    os.replace(tmp, inbox / f"{exercise}.pkl")
    return len(cases)


def clear_inputs(exchange: Path) -> None:
    for p in (Path(exchange) / "in").glob("*.pkl"):
        p.unlink()


def record(exercise: str, fn: Callable, exchange: Path) -> bool:
    """Kernel side: run ``fn`` on the grader's inputs and write what it returned.

    Returns False (and does nothing) when the grader has not asked for this exercise
    now — for example when a learner calls ``check_hidden`` in a cell of their own.
    """
    source = f"{exchange}/in/{exercise}.pkl"
    if not _os_path_isfile(source):
        return False
    with _open(source, "rb") as fh:
        data = _pickle_load(fh)  # written by the grader: trusted in this direction
    if not callable(fn):
        raise TypeError(f"check_hidden({exercise!r}, fn): fn must be a function")
    running = _foreign_processes()
    obs = observe(fn, data["cases"], _Watch(data["refused"]))
    running += _foreign_processes()
    if running:
        obs.tampering.append(
            f"processes started by the notebook were running during the hidden cases "
            f"({', '.join(list(dict.fromkeys(running))[:3])}): their work is not seen"
        )
    # From here on only what was bound when this module was imported (the learner's
    # function has run and may have replaced json.dumps, np.save, Path methods...).
    folder = f"{exchange}/out/{exercise}"
    _rmtree(folder, ignore_errors=True)
    _os_mkdir(folder)
    files: list[int] = []
    manifest = {
        "exercise": exercise,
        "outputs": [_encode(o, folder, files) for o in obs.outputs],
        "calls": obs.calls,
        "tampering": [*tampering(), *obs.tampering],
    }
    fd = _os_open(f"{folder}/{MANIFEST}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _os_write(fd, _dumps(manifest).encode("utf-8"))
    finally:
        _os_close(fd)
    return True


@dataclass
class Verdict:
    """The grader's decision on one exercise's hidden tests."""

    exercise: str
    ok: bool
    message: str = ""
    review: bool = False
    misconceptions: list[str] = field(default_factory=list)


def _replay(outputs: list):
    it = iter(list(outputs))

    def replay(*args, **kwargs):
        out = next(it)
        if isinstance(out, Raised):
            raise type(out.name, (Exception,), {})(out.message)
        return out

    return replay


def _calls_message(exercise: str, calls: list[str], refused: dict[str, str]) -> str:
    ours = [c for c in calls if refused.get(c) == COURSE_REFERENCE]
    libs = [c for c in calls if refused.get(c) != COURSE_REFERENCE]
    parts = []
    if ours:
        parts.append(f"the solution calls {COURSE_REFERENCE} ({', '.join(ours)})")
    if libs:
        parts.append(f"the solution calls {', '.join(libs)} ({LIBRARY_EQUIVALENT})")
    return f"✘ {exercise}: {REFERENCE_TAG} {'; '.join(parts)}; no credit for this exercise"


def judge_observation(exercise: str, obs: Observation, core=None) -> Verdict:
    """Compare an observation with the reference (of ``core``, default: this process's)."""
    if core is None:
        core = _import(f"{_PACKAGE}.checks._core")
    if obs.tampering:
        return Verdict(exercise, False, str(_tamper_error(exercise, obs.tampering)), review=True)
    n = len(core.get_exercise(exercise).cases(hidden=True))
    if len(obs.outputs) != n:
        return Verdict(
            exercise,
            False,
            f"✘ {exercise}: {TAMPER_TAG} the hidden tests returned {len(obs.outputs)} "
            f"results for {n} cases",
            review=True,
        )
    report = core.run(exercise, _replay(obs.outputs), hidden=True)
    if not report.ok:
        ids = ", ".join(report.misconceptions)
        hint = f" (probable mistake: {ids})" if ids else ""
        return Verdict(
            exercise,
            False,
            f"✘ {exercise}: hidden tests failed {report.first_failure}{hint}",
            misconceptions=list(report.misconceptions),
        )
    refused = refused_calls(exercise, core)
    calls = [c for c in obs.calls if c in refused]
    if calls:
        return Verdict(exercise, False, _calls_message(exercise, calls, refused), review=True)
    return Verdict(exercise, True)


def judge(exercise: str, exchange: Path) -> Verdict:
    """Grader side: read what the kernel wrote for ``exercise`` and decide, as plain data."""
    root = Path(exchange)
    sub = ["out", exercise]
    with _import(f"{_PACKAGE}.checks._core").hidden_seed(_SEEDS.get((str(exchange), exercise))):
        try:
            return _judge(exercise, root, sub)
        except _UNREADABLE as err:  # whatever the outputs were, one exercise scores 0
            msg = f"{TAMPER_TAG} the grader could not read or judge the outputs"
            why = f"{_import(f'{_PACKAGE}._backend').type_name(err)}: {str(err)[:200]}"
            return Verdict(exercise, False, f"✘ {exercise}: {msg} ({why})", review=True)


# what reading or judging a kernel's outputs may raise: a flagged 0, never a failed run
_UNREADABLE = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    MemoryError,
    RecursionError,
    EOFError,
    OverflowError,
    UnicodeError,
)


def _judge(exercise: str, root: Path, sub: list[str]) -> Verdict:
    try:
        fd = _open_inside(root, [*sub, MANIFEST])
    except FileNotFoundError:
        return Verdict(
            exercise,
            False,
            f"✘ {exercise}: {TAMPER_TAG} the hidden tests did not run: check_hidden was not "
            f"reached, was replaced, or the kernel stopped it",
            review=True,
        )
    except (OSError, ValueError) as err:
        return Verdict(exercise, False, f"✘ {exercise}: {TAMPER_TAG} bad outputs ({err})", True)
    try:
        with os.fdopen(fd, "rb") as fh:
            manifest = json.loads(fh.read(MAX_MANIFEST_BYTES + 1).decode("utf-8"))
        entries = manifest["outputs"]
        n = len(_import(f"{_PACKAGE}.checks._core").get_exercise(exercise).cases(hidden=True))
        if type(entries) is not list or len(entries) != n:  # before reading any array
            raise ValueError(f"{len(entries)} results for {n} cases")
        budget = _Budget(MAX_EXERCISE_BYTES)
        outputs = [_decode(e, root, sub, budget=budget) for e in entries]
        calls = [str(c) for c in manifest.get("calls", [])][:50]
        problems = [str(p)[:300] for p in manifest.get("tampering", [])][:20]
    except _UNREADABLE as err:
        msg = f"✘ {exercise}: {TAMPER_TAG} the hidden tests wrote unreadable outputs ({err})"
        return Verdict(exercise, False, msg, review=True)
    return judge_observation(exercise, Observation(outputs, calls, problems))


def library_calls(exercise: str, fn: Callable) -> list[str]:
    """The refused library functions ``fn`` calls on the visible cases (for ``check``).

    ``check`` already names calls of the course's reference; this adds the library
    equivalents, so that the visible check and the grade agree.
    """
    core = _import(f"{_PACKAGE}.checks._core")
    if fn is core.get_exercise(exercise).reference:
        return []  # the oracle may call anything
    refused = {k: v for k, v in refused_calls(exercise, core).items() if v == LIBRARY_EQUIVALENT}
    cases = [(c.args, c.kwargs) for c in core.get_exercise(exercise).cases()]
    return observe(fn, cases, _Watch(refused)).calls


# ----------------------------------------------------------------------------------------
# The hidden test: graded (record) or in this process (verify)
# ----------------------------------------------------------------------------------------


def verify(exercise: str, fn: Callable) -> None:
    """The hidden test of one exercise: silent when right, AssertionError when not.

    Under the autograder it only records ``fn``'s outputs for the grader (see the module
    docstring) and never raises: the grader decides.
    """
    exchange = exchange_folder()
    if exchange is not None:
        record(exercise, fn, exchange)
        return
    problems = tampering()
    if problems:
        raise _tamper_error(exercise, problems)
    core = fresh_core()
    cases = [(c.args, c.kwargs) for c in core.get_exercise(exercise).cases(hidden=True)]
    obs = observe(fn, cases, _Watch(refused_calls(exercise, core), core.import_fresh))
    obs.tampering += tampering()
    verdict = judge_observation(exercise, obs, core)
    if not verdict.ok:
        raise AssertionError(verdict.message)
