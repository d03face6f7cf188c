"""The machinery behind :func:`attnlib.checks.check` and :func:`attnlib.checks.diagnose`.

An :class:`Exercise` holds a reference function, a set of cases (fixed and random
inputs, with non-square shapes so that a wrong transpose cannot pass), and the known
wrong variants — one per classic misconception. A learner's function is run on every
case; if it disagrees with the reference, its outputs are compared with each wrong
variant's, and every variant it agrees with on every case names a misconception.

Nothing here reads the learner's source code: only behaviour counts. The numpy
functions used for comparison are captured when this module is imported, so that
replacing ``np.allclose`` or ``np.testing`` in a notebook does not change the verdict.

Diagnosis by inference
----------------------
Most exercises also have an ``infer`` function (``Exercise.infer``). When the learner's
function disagrees with the reference, ``infer`` calls it on probe inputs chosen for the
purpose (through :class:`Learner`, on copies, with warnings silenced) and *measures*
properties of its behaviour — which axis the weights sum to 1 over, the multiplier the
scores were scaled by, what a fully masked row gets, where each input number of a reshape
ended up... It returns one :class:`Finding` per deviation, each with a misconception id
and a sentence saying what was measured, so several mistakes made at once are all named.
The wrong variants registered per misconception are then the test suite of the inference
(``tests/test_checks_registry.py``): every variant, and every pair of mistakes that can
co-occur (built from ``Misconception.settings`` with ``Exercise.build``), must be
diagnosed as exactly its ids. Exercises without ``infer`` (or when it measures nothing)
keep the variant matching described above.

Result lines (read back by ``kvstaff.report`` from graded notebooks; keep stable)
---------------------------------------------------------------------------------------
``check`` prints ``✔ <exercise>: correct on all <n> cases`` when right. When wrong, its
``AssertionError`` message starts with ``✘ <exercise>: `` and, unless the stub was left
in place (``✘ <exercise>: not written yet``), ends with one line made by
:func:`result_line`::

    Diagnosis for <exercise>: <id>, <id>        (the misconceptions found, in registry order)
    Diagnosis for <exercise>: unrecognised      (wrong, but no known mistake explains it)

:func:`read_results` parses text containing these lines (and the hidden tests'
``(probable mistake: <id>, ...)`` hint) back into :class:`Result` objects.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnlib._validate import is_int, type_name

# Captured at import: later monkeypatching of numpy in a learner's kernel cannot reach these.
_asarray = np.asarray
_isclose = np.isclose
_array_equal = np.array_equal
_ndarray = np.ndarray
_tensor = torch.Tensor
_errstate = np.errstate
_isfinite = np.isfinite
_absolute = np.absolute
_bool = np.bool_
_float64 = np.float64
_finfo = np.finfo
_catch_warnings = warnings.catch_warnings
_simplefilter = warnings.simplefilter
_type = type
_isinstance = isinstance
_TensorBase = torch._C.TensorBase  # a C type: its methods cannot be replaced from Python
_redirect_stderr = contextlib.redirect_stderr
_redirect_stdout = contextlib.redirect_stdout
_StringIO = io.StringIO
_getprofile = sys.getprofile
_setprofile = sys.setprofile
_NUMBERS = (float, int, np.float64, np.float32, np.int64, np.int32)
_NO_NUMPY = (torch.bfloat16,)  # torch dtypes numpy cannot hold

# How forbidden functions are found; grading.py points this at a fresh copy of attnlib.
_import_module = importlib.import_module


@dataclass(frozen=True)
class Case:
    """One input to an exercise: positional args, keyword args, and a label for hints."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Misconception:
    """A classic mistake: its identifier, what a learner reads, and a function making it.

    What a learner reads comes in two steps (:func:`attnlib.checks.check`): ``question``
    on the first failure that shows this mistake — it points at the symptom the learner
    can observe and asks what leads to the cause, without naming it; ``explanation`` on a
    second failure with the same mistake or on request (:func:`attnlib.checks.hint`) —
    the named cause and why it gives the symptom. Neither holds code that answers the
    exercise.

    ``settings`` (optional) are the keyword arguments of the exercise's ``build`` that make
    this mistake; two misconceptions whose settings share no key can co-occur, and the
    registry tests diagnose ``build(**a.settings, **b.settings)`` as both ids.
    """

    id: str
    explanation: str
    variants: tuple[Callable, ...]
    settings: dict | None = None
    question: str = ""


@dataclass(frozen=True)
class Finding:
    """One deviation measured by an exercise's ``infer``: an id and what was measured."""

    id: str
    detail: str = ""


@dataclass
class Exercise:
    """A checked exercise; see :func:`register`."""

    name: str
    summary: str
    reference: Callable
    make_cases: Callable[[], Sequence[Case]]
    misconceptions: Sequence[Misconception] = ()
    rtol: float = 1e-5
    atol: float = 1e-6
    exact: bool = False  # compare exactly (masks, integer results)
    # Names of attnlib reference functions a solution must not simply call.
    forbidden: Sequence[str] = ()
    # Extra cases only the grader's check_hidden runs (other seeds and shapes), so that a
    # function tuned to the visible cases does not pass. Optional.
    make_hidden_cases: Callable[[], Sequence[Case]] | None = None
    # Diagnosis by inference: infer(Learner) -> list[Finding]; see the module docstring.
    infer: Callable[[Learner], Sequence[Finding]] | None = None
    # The mistake model: build(**settings) makes a function with the given mistakes
    # (Misconception.settings); ``exclusive`` lists sets of ids that cannot be seen together
    # (one hides the other), so the registry tests do not pair them.
    build: Callable[..., Callable] | None = None
    exclusive: Sequence[frozenset] = ()
    # A graded part of another exercise (made by :func:`part`): the whole exercise's name,
    # and which of the returned values this part compares (None: all of them).
    part_of: str | None = None
    outputs: tuple[int, ...] | None = None
    # A blind exercise (true/false statements): its visible cases check only the format of
    # the answer, so ``check`` in the lesson judges nothing and answers cannot be found by
    # trial and error; only the hidden cases (the grader's) judge the answers.
    blind: bool = False
    # An exercise judged against an answer key only the grader holds (lesson 05's
    # statements): ``key_installed()`` says whether this process has the key. Without it
    # the exercise can be recorded but not judged (see attnlib.checks.grading.verify).
    key_installed: Callable[[], bool] | None = None

    def cases(self, *, hidden: bool = False) -> list[Case]:
        cases = list(self.make_cases())
        if hidden and self.make_hidden_cases is not None:
            with _reseeded(_HIDDEN_SEED[0]):
                cases += list(self.make_hidden_cases())
        return cases


# The grader's seed for hidden cases (None: the seeds written in the exercises). Hidden
# cases ship with the course, so with their own seeds a notebook could compute the
# reference's answers ahead of time; the grader draws a seed per run and per exercise
# (attnlib.checks.grading.write_inputs) and builds the same cases again to judge them.
_HIDDEN_SEED: list[int | None] = [None]


@contextlib.contextmanager
def hidden_seed(seed: int | None):
    """Within this block, every exercise's hidden cases are drawn with ``seed`` mixed in."""
    saved = _HIDDEN_SEED[0]
    _HIDDEN_SEED[0] = seed
    try:
        yield
    finally:
        _HIDDEN_SEED[0] = saved


@contextlib.contextmanager
def _reseeded(seed: int | None):
    """While hidden cases are built: ``np.random.default_rng(s)`` and
    ``torch.Generator().manual_seed(s)`` with an integer ``s`` draw from ``(s, seed)``.

    Generic, so that no exercise's builder has to change: the shapes and constructions of
    the hidden cases stay, their random numbers change with the grader's seed.
    """
    if seed is None:
        yield
        return
    np_rng, torch_gen = np.random.default_rng, torch.Generator

    def default_rng(s=None):
        if is_int(s):
            return np_rng([int(s) & 0xFFFFFFFF, seed & 0xFFFFFFFF])
        return np_rng(s)

    class _Gen:
        def __new__(cls, *args, **kwargs):
            gen = torch_gen(*args, **kwargs)
            real = gen.manual_seed

            class Seeded:
                def manual_seed(self, s):
                    return real((int(s) * 1_000_003 + seed) % 2**63)

                def __getattr__(self, name):
                    return getattr(gen, name)

            return Seeded()

    np.random.default_rng, torch.Generator = default_rng, _Gen
    try:
        yield
    finally:
        np.random.default_rng, torch.Generator = np_rng, torch_gen


_REGISTRY: dict[str, Exercise] = {}


def register(exercise: Exercise) -> Exercise:
    if exercise.name in _REGISTRY:
        raise ValueError(f"exercise {exercise.name!r} is registered twice")
    ids = [m.id for m in exercise.misconceptions]
    if len(ids) != len(set(ids)):
        raise ValueError(f"exercise {exercise.name!r} has duplicate misconception ids: {ids}")
    unknown = sorted({i for group in exercise.exclusive for i in group} - set(ids))
    if unknown:
        raise ValueError(f"exercise {exercise.name!r}: exclusive names unknown ids {unknown}")
    _REGISTRY[exercise.name] = exercise
    return exercise


def part(
    whole: Exercise,
    name: str,
    summary: str,
    *,
    ids: Sequence[str],
    outputs: Sequence[int] | None = None,
    make_cases: Callable[[], Sequence[Case]] | None = None,
    make_hidden_cases: Callable[[], Sequence[Case]] | None = None,
) -> Exercise:
    """One graded part of ``whole``: an exercise of its own, checked on the same function.

    An exercise worth several points grades each part in its own locked cell, one point
    each (nbgrader adds them up), and each part's verdict is made outside the kernel like
    any exercise's (:mod:`attnlib.checks.grading`). A part compares a subset of the
    returned values (``outputs``: indices into the returned tuple), or the whole result on
    its own cases (``make_cases``), or both. ``ids`` are the misconceptions of ``whole``
    that make this part fail; the part diagnoses them with ``whole``'s inference (its
    findings kept to ``ids``) and variants. Reference, tolerances and forbidden calls are
    ``whole``'s.
    """
    keep = tuple(ids)
    known = [m.id for m in whole.misconceptions]
    unknown = sorted(set(keep) - set(known))
    if unknown:
        raise ValueError(f"part {name!r} of {whole.name!r}: unknown misconception ids {unknown}")
    infer = None
    if whole.infer is not None:

        def infer(learner, _infer=whole.infer, _keep=frozenset(keep)):
            return [f for f in _infer(learner) if f.id in _keep]

    if make_cases is None:
        make_cases, make_hidden_cases = whole.make_cases, whole.make_hidden_cases
    return Exercise(
        name=name,
        summary=summary,
        reference=whole.reference,
        make_cases=make_cases,
        misconceptions=tuple(m for m in whole.misconceptions if m.id in keep),
        rtol=whole.rtol,
        atol=whole.atol,
        exact=whole.exact,
        forbidden=tuple(whole.forbidden),
        make_hidden_cases=make_hidden_cases,
        infer=infer,
        build=whole.build,
        exclusive=tuple(g for g in whole.exclusive if g <= set(keep)),
        part_of=whole.name,
        outputs=None if outputs is None else tuple(outputs),
        blind=whole.blind,
        key_installed=whole.key_installed,
    )


def parts(name: str) -> list[str]:
    """The registered parts of exercise ``name``, in registration order."""
    return [n for n, ex in _REGISTRY.items() if ex.part_of == name]


def get_exercise(name: str) -> Exercise:
    if not _isinstance(name, str):
        raise TypeError(f"exercise must be an exercise name (str), got {type_name(name)}")
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"unknown exercise {name!r}; known exercises: {known}") from None


def exercises() -> list[str]:
    return sorted(_REGISTRY)


# ----------------------------------------------------------------------------------------
# Running and comparing.
# ----------------------------------------------------------------------------------------


class _Raised:
    """Outcome of a call that raised: kept so that "raises on this case" can be compared."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def __repr__(self) -> str:
        return f"raised {_type(self.exc).__name__}: {self.exc}"


def _copy_arg(a: Any) -> Any:
    if _isinstance(a, _ndarray):
        return a.copy()
    if _isinstance(a, _tensor):
        return a.detach().clone()
    if _isinstance(a, list):
        return [_copy_arg(x) for x in a]
    return a


def _call(fn: Callable, case: Case, stderr: list[str] | None = None) -> Any:
    """Call fn on a copy of the case's inputs; warnings are silenced, stderr is collected.

    Whatever fn writes to stderr (a library warning printed directly, a debug print) is
    appended to ``stderr`` instead of reaching the notebook: nbgrader scores a test cell
    that writes to stderr as failed, and a correct solution must not lose points for it.
    """
    args = tuple(_copy_arg(a) for a in case.args)
    kwargs = {k: _copy_arg(v) for k, v in case.kwargs.items()}
    buffer = _StringIO()
    try:
        with _redirect_stderr(buffer), _catch_warnings():
            _simplefilter("ignore")
            with _errstate(all="ignore"):
                return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a learner's function may raise anything
        return _Raised(exc)
    finally:
        if stderr is not None and buffer.getvalue():
            stderr.append(buffer.getvalue())


def _to_array(x: Any) -> np.ndarray | None:
    """A plain numpy array for an ndarray or tensor output; None for anything else.

    Only exact ``numpy.ndarray`` and ``torch.Tensor`` objects count: a subclass or an
    array-like object could compare equal to anything or compute its values lazily.
    """
    if _type(x) is _ndarray:
        return x
    if _type(x) is _tensor:
        t = _TensorBase.cpu(_TensorBase.detach(x))
        if t.dtype in _NO_NUMPY:  # numpy has no bfloat16: compared in float32, exactly
            t = _TensorBase.float(t)
        return _TensorBase.numpy(t)
    return None


def _flatten(out: Any) -> list[Any] | None:
    if _type(out) is tuple or _type(out) is list:
        return list(out)
    return [out]


class _Unpicked:
    """A result a part cannot take its values from (not a tuple of the expected length)."""

    def __init__(self, why: str):
        self.why = why


def _pick(ex: Exercise, value: Any, like: Any) -> Any:
    """The returned values part ``ex`` compares (``ex.outputs``); ``like``: the reference's."""
    if ex.outputs is None or _isinstance(value, (_Raised, _Unpicked)):
        return value
    n = len(like) if _type(like) in (tuple, list) else 1
    if _type(value) not in (tuple, list) or len(value) != n:
        got = len(value) if _type(value) in (tuple, list) else 1
        return _Unpicked(f"returned {got} value(s), expected {n}")
    chosen = tuple(value[i] for i in ex.outputs)
    return chosen if len(chosen) > 1 else chosen[0]


def _same(ex: Exercise, expected: Any, got: Any) -> tuple[bool, str]:
    """Do two outcomes agree? Returns (agree, reason-if-not)."""
    if _isinstance(got, _Unpicked):
        return False, got.why
    if _isinstance(expected, _Raised) or _isinstance(got, _Raised):
        both = _isinstance(expected, _Raised) and _isinstance(got, _Raised)
        return both, ("" if both else (repr(got) if _isinstance(got, _Raised) else "returned"))
    exp_parts = _flatten(expected)
    # a single expected output is compared with the whole result (a list is not an array)
    got_parts = _flatten(got) if len(exp_parts) > 1 or _type(expected) in (tuple, list) else [got]
    if len(exp_parts) != len(got_parts):
        return False, f"returned {len(got_parts)} value(s), expected {len(exp_parts)}"
    for i, (e, g) in enumerate(zip(exp_parts, got_parts, strict=True)):
        which = "" if len(exp_parts) == 1 else f"output {i}: "
        ea, ga = _to_array(e), _to_array(g)
        if ea is None:  # a non-array expected value (e.g. a float): compare as float
            if _type(g) not in _NUMBERS:
                return False, f"{which}returned a {_type(g).__name__}, expected a number"
            try:
                ok = math.isclose(float(e), float(g), rel_tol=ex.rtol, abs_tol=ex.atol)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                return False, f"{which}got {g!r}, expected {e!r}"
            continue
        if ga is None:
            return False, (
                f"{which}returned a {_type(g).__name__}, expected a numpy.ndarray or torch.Tensor"
            )
        if ga.dtype.kind not in "biuf":
            return False, f"{which}dtype {ga.dtype}, expected numbers (or bool for a mask)"
        if ga.shape != ea.shape:
            return False, f"{which}shape {ga.shape}, expected {ea.shape}"
        if ea.dtype == _bool and ga.dtype != _bool:
            return False, f"{which}dtype {ga.dtype}, expected bool (True = may attend)"
        if ex.exact or ea.dtype == _bool:
            if not _array_equal(ea, ga):
                return False, f"{which}{int((ea != ga).sum())} of {ea.size} entries differ"
            continue
        ga64 = ga.astype(_float64)
        ea64 = ea.astype(_float64)
        close = _isclose(ga64, ea64, rtol=ex.rtol, atol=ex.atol, equal_nan=True)
        if not bool(close.all()):
            bad = int((~close).sum())
            n_bad_values = int((~_isfinite(ga64)).sum())
            nan = f" ({n_bad_values} of them NaN or inf)" if n_bad_values else ""
            # The largest difference among entries that are finite in both and differ.
            finite_bad = _isfinite(ga64) & _isfinite(ea64) & ~close
            largest = ""
            if bool(finite_bad.any()):
                diff = float(_absolute(ga64[finite_bad] - ea64[finite_bad]).max())  # no inf - inf
                largest = f"; largest difference {diff:.3g}"
            return False, f"{which}{bad} of {ea.size} entries differ{nan}{largest}"
    return True, ""


# ----------------------------------------------------------------------------------------
# Diagnosis by inference: the learner's function as the probes see it.
# ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One probe call: the raw value, the exception if it raised, and the outputs as arrays.

    ``parts`` has one entry per returned value (a tuple or list is unpacked): a numpy array
    for an exact ``numpy.ndarray`` or ``torch.Tensor`` (bool kept as bool, anything else as
    float64), ``None`` for anything else.
    """

    value: Any
    raised: BaseException | None
    parts: list
    eps: float = 2.220446049250313e-16  # the coarsest machine epsilon among float outputs

    @property
    def ok(self) -> bool:
        return self.raised is None

    @property
    def arity(self) -> int:
        return len(self.parts)

    def array(self, i: int = 0) -> np.ndarray | None:
        return self.parts[i] if self.ok and i < len(self.parts) else None

    def error(self) -> str:
        return "" if self.raised is None else f"{_type(self.raised).__name__}: {self.raised}"


class Learner:
    """The learner's function for an exercise's ``infer``: ``learner(*args, **kwargs)``.

    Each call runs on copies of the inputs, with warnings silenced and stderr collected
    (like the cases) and stdout discarded, and returns an :class:`Outcome`. At most
    ``limit`` calls are made; later calls return an outcome that raised, so a runaway
    inference stays bounded.
    """

    def __init__(self, fn: Callable, limit: int = 400):
        self.fn = fn
        self.calls = 0
        self.limit = limit

    def __call__(self, *args, **kwargs) -> Outcome:
        self.calls += 1
        if self.calls > self.limit:
            return Outcome(None, RuntimeError("probe limit reached"), [])
        with _redirect_stdout(_StringIO()):  # what a probe prints is not the learner's output
            out = _call(self.fn, Case("probe", args, kwargs))
        if _isinstance(out, _Raised):
            return Outcome(None, out.exc, [])
        parts = _flatten(out) if _type(out) in (tuple, list) else [out]
        arrays, eps = [], 2.220446049250313e-16
        for part in parts:
            a = _to_array(part)
            if a is not None and a.dtype.kind == "f":
                eps = max(eps, float(_finfo(a.dtype).eps))
            if a is not None and a.dtype.kind in "iuf":
                a = a.astype(_float64)
            elif a is not None and a.dtype.kind != "b":
                a = None
            arrays.append(a)
        return Outcome(out, None, arrays, eps)


def _inferred(ex: Exercise, fn: Callable) -> tuple[list[Finding], str]:
    """Run the exercise's inference; (findings with registered ids, error text if it broke)."""
    try:
        found = list(ex.infer(Learner(fn)))
    except Exception as exc:  # noqa: BLE001 - a defect of the inference must not break a check
        return [], f"{_type(exc).__name__}: {exc}"
    order = {m.id: i for i, m in enumerate(ex.misconceptions)}
    unknown = [f.id for f in found if f.id not in order]
    if unknown:
        return [], f"inference returned unregistered ids {unknown}"
    first: dict[str, Finding] = {}
    for f in found:
        first.setdefault(f.id, f)
    return sorted(first.values(), key=lambda f: order[f.id]), ""


def co_occurring(exercise: str) -> list[tuple[tuple[str, str], Callable]]:
    """Every pair of misconceptions that can be made together, with a function making both.

    Built from ``Misconception.settings`` and ``Exercise.build``: two mistakes whose
    settings share a key are alternatives of one choice (they cannot co-occur), and pairs
    listed together in ``Exercise.exclusive`` hide each other.
    """
    ex = get_exercise(exercise)
    if ex.build is None:
        return []
    ms = [m for m in ex.misconceptions if m.settings is not None]
    pairs = []
    for i, a in enumerate(ms):
        for b in ms[i + 1 :]:
            if set(a.settings) & set(b.settings):
                continue
            if any({a.id, b.id} <= set(group) for group in ex.exclusive):
                continue
            pairs.append(((a.id, b.id), ex.build(**a.settings, **b.settings)))
    return pairs


@dataclass
class Report:
    """What :func:`run` found. ``ok`` is True when every case matched the reference."""

    exercise: str
    ok: bool
    n_cases: int
    first_failure: str = ""
    misconceptions: list[str] = field(default_factory=list)
    called_reference: list[str] = field(default_factory=list)
    stderr: str = ""  # what the learner's function wrote to stderr (kept out of the cell)
    tampering: list[str] = field(default_factory=list)  # changes to the checking machinery
    # What the inference measured, one Finding per misconception id (empty when the ids
    # came from variant matching); inference_error is set if the inference itself broke.
    findings: list[Finding] = field(default_factory=list)
    inference_error: str = ""
    # every failing case as (case, expected, got, reason), in case order: what
    # attnlib.checks._locate reads to localise a failure no known mistake explains
    failures: list[tuple[Case, Any, Any, str]] = field(default_factory=list, repr=False)


_REAL_FILES: dict[str, str] = {}
_realpath = os.path.realpath


def _code_key(code) -> tuple:
    # By real file, line and name rather than identity, so that a fresh copy of attnlib
    # (see attnlib.checks.grading) recognises calls into the copy the notebook imported,
    # and a copy run from another spelling of its path (runpy, "attnlib//core.py") too.
    name = code.co_filename
    real = _REAL_FILES.get(name)
    if real is None:
        real = _REAL_FILES[name] = name if name.startswith("<") else _realpath(name)
    return (real, code.co_firstlineno, code.co_name)


def _forbidden_codes(ex: Exercise) -> dict:
    codes = {}
    for dotted in ex.forbidden:
        mod_name, attr = dotted.rsplit(".", 1)
        obj = getattr(_import_module(mod_name), attr)
        # a validated function (attnlib._validate.validated) is a generic wrapper around
        # its body: watch the body, whose code is the function's own
        while hasattr(obj, "__wrapped__"):
            obj = obj.__wrapped__
        code = getattr(obj, "__code__", None)
        if code is not None:
            codes[_code_key(code)] = dotted
    return codes


def _run_watching(
    fn: Callable, cases: list[Case], codes: dict, stderr: list[str]
) -> tuple[list[Any], set[str], list[str]]:
    """Run fn on every case, noting any call into a forbidden reference function.

    Calls are seen through the interpreter's profiling hook (by file, line and name), so
    an alias (``from attnlib import attend as my_attend``) is caught as well. A function
    that removes the hook is reported as tampering.
    """
    seen: set[str] = set()
    tampering: list[str] = []

    def profiler(frame, event, arg):
        if event == "call":
            key = _code_key(frame.f_code)
            if key in codes:
                seen.add(codes[key])

    outs = []
    previous = _getprofile()
    for case in cases:
        hook = profiler if codes else previous
        _setprofile(hook)
        try:
            outs.append(_call(fn, case, stderr))
        finally:
            if codes and _getprofile() is not hook:
                tampering.append("the function replaced the interpreter's profiling hook")
            _setprofile(previous)
    return outs, seen, tampering


def run(exercise: str, fn: Callable, *, hidden: bool = False, infer: bool = True) -> Report:
    """Run ``fn`` on every case of ``exercise``; compare with the reference; diagnose.

    ``hidden=True`` adds the exercise's hidden cases (used by ``check_hidden``). When ``fn``
    is wrong, the exercise's inference (if any, and unless ``infer=False``, e.g. for a
    function that can only replay recorded outputs) probes it and names every mistake it
    measures; otherwise, or if it measures nothing, the registered variants are matched.
    """
    ex = get_exercise(exercise)
    if not callable(fn):
        raise TypeError(f"check({exercise!r}, fn): fn must be a function, got {type_name(fn)}")
    if hidden and ex.key_installed is not None and not ex.key_installed():
        raise LookupError(
            f"{exercise}: the answers are judged against a key only the grader holds, and it "
            "is not in this kernel; the grader judges them when the notebook is handed in"
        )
    cases = ex.cases(hidden=hidden)
    expected = [_call(ex.reference, c) for c in cases]
    stderr: list[str] = []
    # The exercise's own reference may call the library (it is the oracle); anything else
    # that does is a solution calling the reference.
    codes = {} if fn is ex.reference else _forbidden_codes(ex)
    got, calls, tampering = _run_watching(fn, cases, codes, stderr)
    if ex.outputs is not None:  # a part: compare only its values
        got = [_pick(ex, g, e) for g, e in zip(got, expected, strict=True)]
        outs_of = expected
        expected = [_pick(ex, e, e) for e in expected]
    report = Report(exercise=ex.name, ok=True, n_cases=len(cases))
    report.called_reference = sorted(calls)
    report.tampering = tampering
    report.stderr = "".join(stderr)
    for case, e, g in zip(cases, expected, got, strict=True):
        agree, why = _same(ex, e, g)
        if not agree:
            if report.ok:
                report.first_failure = f"on case '{case.label}': {why}"
            report.ok = False
            report.failures.append((case, e, g, why))
    if report.ok:
        return report
    if infer and ex.infer is not None:
        report.findings, report.inference_error = _inferred(ex, fn)
        if report.findings:
            report.misconceptions = [f.id for f in report.findings]
            return report
    for m in ex.misconceptions:
        for variant in m.variants:
            outs = [_call(variant, c) for c in cases]
            if ex.outputs is not None:
                outs = [_pick(ex, o, e) for o, e in zip(outs, outs_of, strict=True)]
            if all(_isinstance(o, _Raised) for o in outs):
                continue  # raising on every case says nothing (a stub raises too)
            differs = any(not _same(ex, e, o)[0] for e, o in zip(expected, outs, strict=True))
            matches = all(_same(ex, o, g)[0] for o, g in zip(outs, got, strict=True))
            if differs and matches:
                report.misconceptions.append(m.id)
                break
    return report


def explanation(exercise: str, misconception_id: str) -> str:
    ex = get_exercise(exercise)
    for m in ex.misconceptions:
        if m.id == misconception_id:
            return m.explanation
    raise KeyError(f"exercise {exercise!r} has no misconception {misconception_id!r}")


# ----------------------------------------------------------------------------------------
# Result lines: what check() prints or raises, and reading it back (see the module docstring).
# ----------------------------------------------------------------------------------------

UNRECOGNISED = "unrecognised"
_ID = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_PASS_RE = re.compile(r"^✔ (\w+): correct on all \d+ cases", re.M)
_FAIL_RE = re.compile(r"^✘ (\w+): (.*)$", re.M)
_DIAGNOSIS_RE = re.compile(rf"^Diagnosis for (\w+): ((?:{_ID})(?:, {_ID})*)\s*$", re.M)
_HIDDEN_RE = re.compile(
    rf"^✘ (\w+): hidden tests failed.*\(probable mistake: ((?:{_ID})(?:, {_ID})*)\)", re.M
)


def result_line(exercise: str, ids: Sequence[str]) -> str:
    """The last line of a failing check's message: ``Diagnosis for <exercise>: <ids>``."""
    return f"Diagnosis for {exercise}: {', '.join(ids) if ids else UNRECOGNISED}"


@dataclass
class Result:
    """One exercise's check result read back from text (a notebook cell's outputs).

    ``status`` is ``"correct"`` (the ✔ line), ``"not written"`` (the stub),
    ``"needs review"`` (tampering or a call of the reference), or ``"wrong"``;
    ``ids`` are the misconceptions named (empty when wrong but unrecognised).
    """

    exercise: str
    status: str
    ids: list[str] = field(default_factory=list)


def read_results(text: str) -> dict[str, Result]:
    """Every check result found in ``text``, by exercise; a failure overrides a pass."""
    results: dict[str, Result] = {}
    for m in _PASS_RE.finditer(text):
        results.setdefault(m.group(1), Result(m.group(1), "correct"))
    for m in _FAIL_RE.finditer(text):
        name, rest = m.group(1), m.group(2)
        if rest.startswith("not written yet"):
            status = "not written"
        elif (
            "[needs-review]" in rest
            or "[calls-reference]" in rest
            or "calls " in rest[:40]
            or "Leave the checks alone" in rest
        ):
            status = "needs review"
        else:
            status = "wrong"
        if name in results and results[name].status == "not written":
            continue  # the grader's verdict on the hidden tests of an unwritten function
        results[name] = Result(name, status)
    for pattern in (_DIAGNOSIS_RE, _HIDDEN_RE):
        for m in pattern.finditer(text):
            name, ids = m.group(1), [i for i in m.group(2).split(", ") if i != UNRECOGNISED]
            r = results.setdefault(name, Result(name, "wrong"))
            if r.status == "correct":
                r.status = "wrong"
            r.ids = list(dict.fromkeys(r.ids + ids))
    return results
