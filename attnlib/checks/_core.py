"""The machinery behind :func:`attnlib.checks.check` and :func:`attnlib.checks.diagnose`.

An :class:`Exercise` holds a reference function, a set of cases (fixed and random
inputs, with non-square shapes so that a wrong transpose cannot pass), and the known
wrong variants — one per classic misconception. A learner's function is run on every
case; if it disagrees with the reference, its outputs are compared with each wrong
variant's, and every variant it agrees with on every case names a misconception.

Nothing here reads the learner's source code: only behaviour counts. The numpy
functions used for comparison are captured when this module is imported, so that
replacing ``np.allclose`` or ``np.testing`` in a notebook does not change the verdict.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

# Captured at import: later monkeypatching of numpy in a learner's kernel cannot reach these.
_asarray = np.asarray
_isclose = np.isclose
_array_equal = np.array_equal
_ndarray = np.ndarray
_tensor = torch.Tensor
_errstate = np.errstate
_catch_warnings = warnings.catch_warnings
_simplefilter = warnings.simplefilter
_type = type
_isinstance = isinstance


@dataclass(frozen=True)
class Case:
    """One input to an exercise: positional args, keyword args, and a label for hints."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Misconception:
    """A classic mistake: its identifier, what a learner reads, and a function making it."""

    id: str
    explanation: str
    variants: tuple[Callable, ...]


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

    def cases(self) -> list[Case]:
        return list(self.make_cases())


_REGISTRY: dict[str, Exercise] = {}


def register(exercise: Exercise) -> Exercise:
    if exercise.name in _REGISTRY:
        raise ValueError(f"exercise {exercise.name!r} is registered twice")
    ids = [m.id for m in exercise.misconceptions]
    if len(ids) != len(set(ids)):
        raise ValueError(f"exercise {exercise.name!r} has duplicate misconception ids: {ids}")
    _REGISTRY[exercise.name] = exercise
    return exercise


def get_exercise(name: str) -> Exercise:
    if not _isinstance(name, str):
        raise TypeError(f"exercise must be an exercise name (str), got {type(name).__name__}")
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


def _call(fn: Callable, case: Case) -> Any:
    args = tuple(_copy_arg(a) for a in case.args)
    kwargs = {k: _copy_arg(v) for k, v in case.kwargs.items()}
    try:
        with _catch_warnings():
            _simplefilter("ignore")
            with _errstate(all="ignore"):
                return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a learner's function may raise anything
        return _Raised(exc)


def _to_array(x: Any) -> np.ndarray | None:
    """A plain numpy array for an ndarray or tensor output; None for anything else."""
    if _type(x) is _ndarray or _isinstance(x, _ndarray) and _type(x).__eq__ is _ndarray.__eq__:
        return _asarray(x)
    if _isinstance(x, _tensor):
        return x.detach().cpu().numpy()
    return None


def _flatten(out: Any) -> list[Any] | None:
    if _type(out) is tuple or _type(out) is list:
        return list(out)
    return [out]


def _same(ex: Exercise, expected: Any, got: Any) -> tuple[bool, str]:
    """Do two outcomes agree? Returns (agree, reason-if-not)."""
    if _isinstance(expected, _Raised) or _isinstance(got, _Raised):
        both = _isinstance(expected, _Raised) and _isinstance(got, _Raised)
        return both, ("" if both else (repr(got) if _isinstance(got, _Raised) else "returned"))
    exp_parts, got_parts = _flatten(expected), _flatten(got)
    if len(exp_parts) != len(got_parts):
        return False, f"returned {len(got_parts)} value(s), expected {len(exp_parts)}"
    for i, (e, g) in enumerate(zip(exp_parts, got_parts, strict=True)):
        which = "" if len(exp_parts) == 1 else f"output {i}: "
        ea, ga = _to_array(e), _to_array(g)
        if ea is None:  # a non-array expected value (e.g. a float): compare as float
            try:
                ok = math.isclose(float(e), float(g), rel_tol=ex.rtol, abs_tol=ex.atol)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                return False, f"{which}got {g!r}, expected {e!r}"
            continue
        if ga is None:
            return False, f"{which}returned a {_type(g).__name__}, expected an array"
        if ga.shape != ea.shape:
            return False, f"{which}shape {ga.shape}, expected {ea.shape}"
        if ea.dtype == np.bool_ and ga.dtype != np.bool_:
            return False, f"{which}dtype {ga.dtype}, expected bool (True = may attend)"
        if ex.exact or ea.dtype == np.bool_:
            if not _array_equal(ea, ga):
                return False, f"{which}{int((ea != ga).sum())} of {ea.size} entries differ"
            continue
        ga64 = ga.astype(np.float64)
        ea64 = ea.astype(np.float64)
        close = _isclose(ga64, ea64, rtol=ex.rtol, atol=ex.atol, equal_nan=True)
        if not bool(close.all()):
            bad = int((~close).sum())
            nan = " (contains NaN or inf)" if not bool(np.isfinite(ga64).all()) else ""
            both = np.isfinite(ga64) & np.isfinite(ea64)
            diff = np.abs(ga64 - ea64)[both].max() if bool(both.any()) else float("nan")
            return False, (
                f"{which}{bad} of {ea.size} entries differ{nan}; largest difference "
                f"{float(diff):.3g}"
            )
    return True, ""


@dataclass
class Report:
    """What :func:`run` found. ``ok`` is True when every case matched the reference."""

    exercise: str
    ok: bool
    n_cases: int
    first_failure: str = ""
    misconceptions: list[str] = field(default_factory=list)
    called_reference: list[str] = field(default_factory=list)


def _forbidden_codes(ex: Exercise) -> dict:
    import importlib

    codes = {}
    for dotted in ex.forbidden:
        mod_name, attr = dotted.rsplit(".", 1)
        obj = getattr(importlib.import_module(mod_name), attr)
        codes[getattr(obj, "__code__", None)] = dotted
    codes.pop(None, None)
    return codes


def _run_watching(fn: Callable, cases: list[Case], codes: dict) -> tuple[list[Any], set[str]]:
    """Run fn on every case, noting any call into a forbidden reference function.

    Calls are seen through the interpreter's profiling hook, by code object, so an alias
    (``from attnlib import attend as my_attend``) is caught as well.
    """
    import sys

    seen: set[str] = set()

    def profiler(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            seen.add(codes[frame.f_code])

    outs = []
    previous = sys.getprofile()
    for case in cases:
        sys.setprofile(profiler if codes else previous)
        try:
            outs.append(_call(fn, case))
        finally:
            sys.setprofile(previous)
    return outs, seen


def run(exercise: str, fn: Callable) -> Report:
    """Run ``fn`` on every case of ``exercise``; compare with the reference and variants."""
    ex = get_exercise(exercise)
    if not callable(fn):
        raise TypeError(f"check({exercise!r}, fn): fn must be a function, got {_type(fn).__name__}")
    cases = ex.cases()
    expected = [_call(ex.reference, c) for c in cases]
    got, calls = _run_watching(fn, cases, _forbidden_codes(ex))
    report = Report(exercise=ex.name, ok=True, n_cases=len(cases))
    report.called_reference = sorted(calls)
    for case, e, g in zip(cases, expected, got, strict=True):
        agree, why = _same(ex, e, g)
        if not agree:
            report.ok = False
            report.first_failure = f"on case '{case.label}': {why}"
            break
    if report.ok:
        return report
    for m in ex.misconceptions:
        for variant in m.variants:
            outs = [_call(variant, c) for c in cases]
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
