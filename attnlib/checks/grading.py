"""Hidden tests whose verdict the learner's kernel cannot forge: the kernel side.

nbgrader runs the test cells in the same kernel as the learner's code, so anything the
notebook can reach it can replace: ``np.testing.assert_allclose``, ``attnlib.checks``
itself, the exercise's reference, ``check_hidden``. The graded path therefore never asks
the kernel for a verdict:

* **Grading** (``make autograde``). The grader (outside the kernel, and outside the
  sandbox the kernel runs in) writes the inputs of an exercise's cases to the exchange
  folder only while it runs that test cell's hidden region
  (:func:`kvstaff.grader.judging.write_inputs`); :func:`check_hidden
  <attnlib.checks.check_hidden>` in the kernel just calls the learner's function on them
  and writes the outputs out (:func:`record`); the grader reads them back as plain data
  (``.npy`` without pickle, JSON) and compares them with its own reference
  (:func:`kvstaff.grader.judging.judge`). A kernel that replaced ``check_hidden``,
  skipped it or crashed writes no outputs: the exercise scores 0 and is flagged. The
  random numbers of the hidden cases are drawn with a seed the grader picks per run
  (:func:`attnlib.checks._core.hidden_seed`), so the cases that ship with the course are
  not the ones graded. What the kernel says about itself (tampering found by
  :func:`attnlib.checks.trust.tampering`, calls seen by the profiling hook, the hook
  switched off, threads and processes started during the call) can only take credit
  away, never give it — and a kernel that replaces this module's code can forge it:
  :func:`record` uses only what it bound at import, but the source audit
  (:mod:`kvstaff.grader.audit`) is what catches a learner who goes further.
* **Anywhere else** (``nbgrader validate``, a learner running the hidden cell, tests):
  :func:`verify` does the same in-process, with a fresh copy of the checks loaded from
  their files (:func:`fresh_core`), after refusing to run when numpy, torch, builtins or
  attnlib functions were replaced (compared with :func:`attnlib.checks.trust.snapshot`,
  taken when the grading kernel starts).

Either way only real ``numpy.ndarray``/``torch.Tensor`` outputs count (no objects whose
``__eq__`` is always True), and a function that calls what the exercise asks you to
build earns nothing for it (:func:`attnlib.checks.protocol.refused_calls`): the course's
own reference, or a library function that does the same computation in one call
(``torch.softmax`` in the softmax exercise, ``scaled_dot_product_attention`` in
``attend``). Calls are seen by what runs (the interpreter's profiling hook, so aliases
and builtins are caught), by the real file of their code (whatever path spelling ran
it), not by names in the source. Building blocks (``@``, ``np.exp``, ``np.tril``,
``np.linalg.lstsq``...) are fine.

What both sides share (the exchange's layout, the tags ``[needs-review]`` and
``[calls-reference]``, the policy, the judging of an observation) is
:mod:`attnlib.checks.protocol`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import json
import os
import pickle
import shutil
import sys
import threading
import types
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attnlib.checks import _core
from attnlib.checks.protocol import (
    COURSE_REFERENCE,
    EXCHANGE_ENV,
    LIBRARY_EQUIVALENT,
    LIBRARY_EQUIVALENTS,
    MANIFEST,
    REFERENCE_TAG,
    TAMPER_TAG,
    Observation,
    Raised,
    Verdict,
    clean_name,
    exchange_folder,
    judge_observation,
    process_state,
    refused_calls,
    tamper_error,
)
from attnlib.checks.trust import SNAPSHOT as _SNAPSHOT  # noqa: F401 - tests reset it
from attnlib.checks.trust import (
    foreign_processes,
    foreign_threads,
    own_thread,
    snapshot,
    tampering,
)

__all__ = [
    "COURSE_REFERENCE",
    "EXCHANGE_ENV",
    "LIBRARY_EQUIVALENT",
    "LIBRARY_EQUIVALENTS",
    "REFERENCE_TAG",
    "TAMPER_TAG",
    "Observation",
    "Raised",
    "Verdict",
    "exchange_folder",
    "fresh_core",
    "judge_observation",
    "library_calls",
    "observe",
    "process_state",
    "record",
    "refused_calls",
    "snapshot",
    "tampering",
    "verify",
]

_PACKAGE = "attnlib"
_gc_collect = gc.collect
_modules = sys.modules
_import = importlib.import_module  # resolves the dotted names an exercise refuses (data)


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

    Long: the profiling hook is a closure that must compare each frame with this
    function's own code and share what it saw with the loop that sets and checks it.
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
                if frame.f_code is not _THREAD_START or own_thread(frame.f_locals.get("self")):
                    hiding.add(_HIDING_CODES[frame.f_code])
        hit = watch.seen(event, frame, arg)
        if hit is not None:
            seen.add(hit)

    previous = _getprofile()
    for args, kwargs in cases:
        threads = foreign_threads() if watch else []
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


def _encode(value, folder: Path, files: list[int], depth: int = 0) -> dict:
    if isinstance(value, Raised):
        return {"t": "raised", "name": clean_name(value.name), "msg": value.message[:300]}
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
            return {"t": "other", "name": f"{kind} of dtype {clean_name(arr.dtype)}"}
        name = f"{_len(files)}.npy"
        files.append(1)
        _np_save(str(folder) + "/" + name, _ascontiguous(arr), allow_pickle=False)
        return {"t": kind, "f": name, "dtype": dtype}
    if type(value) in (tuple, list) and depth == 0:
        items = [_encode(v, folder, files, depth + 1) for v in value]
        return {"t": type(value).__name__, "items": items}
    return {"t": "other", "name": clean_name(type(value).__name__)}


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
    running = foreign_processes()
    obs = observe(fn, data["cases"], _Watch(data["refused"]))
    running += foreign_processes()
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


def library_calls(exercise: str, fn: Callable) -> list[str]:
    """The refused library functions ``fn`` calls on the visible cases (for ``check``).

    ``check`` already names calls of the course's reference; this adds the library
    equivalents, so that the visible check and the grade agree.
    """
    core = _core
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
    docstring) and never raises: the grader decides. An exercise judged against a key only
    the grader holds (``Exercise.key_installed``) cannot be judged here: it says so in one
    line (the format was checked by the visible cell).
    """
    exchange = exchange_folder()
    if exchange is not None:
        record(exercise, fn, exchange)
        return
    problems = tampering()
    if problems:
        raise tamper_error(exercise, problems)
    core = fresh_core()
    keyed = core.get_exercise(exercise).key_installed
    if keyed is not None and not keyed():  # the key is the grader's: record, do not judge
        print(f"{exercise}: your answers are judged by the grader when you hand the notebook in")
        return
    cases = [(c.args, c.kwargs) for c in core.get_exercise(exercise).cases(hidden=True)]
    obs = observe(fn, cases, _Watch(refused_calls(exercise, core), core.import_fresh))
    obs.tampering += tampering()
    verdict = judge_observation(exercise, obs, core)
    if not verdict.ok:
        raise AssertionError(verdict.message)


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
        # The one import made from a string in attnlib, on purpose: the session's modules
        # are set aside, so this loads a fresh copy from the files; a static import would
        # give the session's (maybe tampered) module. tests/test_layout.py allows it here.
        core = importlib.import_module("attnlib.checks._core")
        importlib.import_module("attnlib.checks")  # registers every ex_* exercise in it
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
