"""Exercise checks that name the mistake.

``check(exercise, fn)`` runs a learner's function on fixed and random cases against the
reference. When it is right it prints one short line; when it is not written yet it says so
in one line and the lesson goes on; when it is wrong it raises ``AssertionError`` whose
message gives feedback in steps: first what it measured and a question that points at it
(``Misconception.question``); the named cause (``Misconception.explanation``) when the same
mistake shows again in this kernel, or on request with ``hint(exercise)``. A failure no known
mistake explains is localised instead: the smallest failing case, its first differing
entry, and the properties of the expected output the function keeps or breaks. In the
grader's kernel (``ATTNLIB_FEEDBACK=record``) the causes are named at once and the message
ends with the ids the class report reads back. ``forget()`` starts the steps afresh.

The cells after an exercise call ``yours_or_reference(exercise, fn)``: the learner's
function once written, the course's version (with a one-line note) until then.
``diagnose(exercise, fn)`` returns the identifiers of the misconceptions the function's
behaviour matches (empty for a correct function).

Exercises are defined in the ``ex_*`` modules of this package, one module per topic; each
module calls :func:`attnlib.checks._core.register`. ``exercises()`` lists their names.

An exercise worth two points that has two parts is graded in two locked cells of one point
each, one per part: each part is registered as an exercise of its own (:func:`part`, e.g.
``decode_step_cache`` and ``decode_step_output`` of ``decode_step``) that checks the same
learner function on some of its returned values or on its own cases. ``parts(name)`` lists
the parts of an exercise.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from collections.abc import Callable

import numpy as np

from attnlib._validate import type_name
from attnlib.checks._core import (
    Case,
    Exercise,
    Finding,
    Misconception,
    Report,
    Result,
    co_occurring,
    exercises,
    explanation,
    get_exercise,
    part,
    parts,
    read_results,
    register,
    result_line,
    run,
)
from attnlib.checks.protocol import FEEDBACK_ENV

__all__ = [
    "FEEDBACK_ENV",
    "Case",
    "Exercise",
    "Finding",
    "Misconception",
    "Report",
    "Result",
    "check",
    "check_hidden",
    "co_occurring",
    "diagnose",
    "exercises",
    "explanation",
    "forget",
    "get_exercise",
    "hint",
    "part",
    "parts",
    "read_results",
    "recording",
    "register",
    "result_line",
    "run",
    "yours_or_reference",
]


# Every exercise module registers its exercises in _core when it is imported: each is
# imported here by name (tests/test_layout.py checks that none is missing), so that the
# import graph shows them.
from attnlib.checks import (  # noqa: E402, F401 - imported to register their exercises
    ex_ablation,
    ex_attention,
    ex_backprop,
    ex_block,
    ex_blockwise,
    ex_decoding,
    ex_fewer_keys,
    ex_gpt2,
    ex_heads,
    ex_induction,
    ex_keys_values,
    ex_latent,
    ex_masks,
    ex_mha,
    ex_paged,
    ex_positions,
    ex_projections,
    ex_quant,
    ex_real_text,
    ex_relevance,
    ex_sampling,
    ex_scaling,
    ex_syntax,
    ex_welcome,
)


def diagnose(exercise: str, fn: Callable) -> list[str]:
    """Identifiers of the misconceptions found in ``fn``; ``[]`` if it is correct.

    Every mistake the exercise's inference measures is named (several at once when several
    things are wrong), in the order the exercise registers them. A function that is wrong
    in a way nothing explains also returns ``[]``; use :func:`run`
    (``run(exercise, fn).ok``) to tell the two apart, and ``run(...).findings`` for what
    was measured.
    """
    return list(run(exercise, fn).misconceptions)


def _stderr_note(report: Report) -> str:
    if not report.stderr:
        return ""
    text = " ".join(report.stderr.split())
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"  (your function wrote to stderr; not counted against you: {text})"


def check(exercise: str, fn: Callable) -> None:
    """Check a learner's function; print one line if right or not written yet, else raise.

    Parameters
    ----------
    exercise : str
        The exercise's name, e.g. ``"attend"`` (see :func:`exercises`).
    fn : callable
        The learner's function. It is called on copies of fixed and random inputs
        (non-square shapes, large scores, masks, fully masked rows); warnings it raises
        are silenced and what it writes to stderr is kept out of the cell.

    Raises
    ------
    AssertionError
        When ``fn`` disagrees with the reference on some case. The message names the case,
        what differed, and the probable misconception(s) with their explanation. A function
        that only raises ``NotImplementedError`` (the unwritten stub) is not an error: one
        line says it is not written yet, so that Run All reaches the end of the lesson.
    """
    report = run(exercise, fn)
    name = get_exercise(exercise).name
    note = _stderr_note(report)
    if report.ok and not report.called_reference and not report.tampering:
        from attnlib.checks import grading

        library = grading.library_calls(exercise, fn)  # the grade refuses these too
        if library:
            raise AssertionError(
                f"✘ {name}: your function calls {', '.join(library)} "
                f"({grading.LIBRARY_EQUIVALENT}). Write the computation yourself — the "
                f"point is to build it; it earns no credit when graded."
            )
        print(f"✔ {name}: correct on all {report.n_cases} cases" + (f"\n{note}" if note else ""))
        return
    if report.tampering:
        raise AssertionError(f"✘ {name}: {'; '.join(report.tampering)}. Leave the checks alone.")
    if report.ok:
        used = ", ".join(report.called_reference)
        raise AssertionError(
            f"✘ {name}: your function calls the course's reference ({used}). "
            f"Write the computation yourself — the point is to build it."
        )
    if "raised NotImplementedError" in report.first_failure and not report.misconceptions:
        # One line and no error: Run All goes on to the end of the lesson (the cells after
        # an exercise say what they use in its place). On stderr, so that nbgrader's
        # Validate still counts the cell as not passed; the grade is the grader's either way.
        print(
            f"✘ {name}: not written yet — replace `raise NotImplementedError()` in the cell "
            f"above with your code, run that cell, then this one.",
            file=sys.stderr,
        )
        return
    lines = [f"✘ {name}: {report.first_failure}"]
    whole = get_exercise(exercise).part_of
    if whole is not None:
        lines.append(f"(This cell grades one part of {whole}: {get_exercise(exercise).summary}.)")
    lines += _feedback(exercise, report, record=recording())
    if note:
        lines.append(note)
    raise AssertionError("\n".join(lines))


# ---- feedback in steps ------------------------------------------------------------------
#
# A failing check first says what it measured and asks a question that points at it; the
# cause is named when the same mistake shows again in this kernel, or on request
# (:func:`hint`). The grader's kernel sets FEEDBACK_ENV to "record": there the first failure
# names the causes and ends with the ids, which the class report reads back.

_asked: dict[str, set[str]] = {}  # exercise -> the mistakes whose question was shown
_last: dict[str, Report] = {}  # exercise -> its last failing report in this kernel


def recording() -> bool:
    """True in the grader's kernel (``ATTNLIB_FEEDBACK=record``): causes named at once."""
    import os

    return os.environ.get(FEEDBACK_ENV, "") == "record"


def forget(exercise: str | None = None) -> None:
    """Forget which questions were asked (for ``exercise``, or all): the next failure asks again."""
    for store in (_asked, _last):
        if exercise is None:
            store.clear()
        else:
            store.pop(exercise, None)


def _cause_lines(exercise: str, report: Report, ids: list[str]) -> list[str]:
    details = {f.id: f.detail for f in report.findings}
    lines = []
    for mid in ids:
        lines.append(f"  Cause [{mid}]: {explanation(exercise, mid)}")
        if details.get(mid):
            lines.append(f"      Measured: {details[mid]}")
    return lines


def _locate_lines(exercise: str, report: Report) -> list[str]:
    from attnlib.checks._locate import locate

    ex = get_exercise(exercise)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            found = locate(report.failures, ex.rtol, ex.atol)
    except Exception:  # noqa: BLE001 - a learner's odd output must not break the message
        found = []
    return [
        "No mistake the check knows explains this; here is where it goes wrong:",
        *[f"  {line}" for line in found],
        "  Redo the smallest case by hand (or print your intermediate arrays for it) and "
        "compare entry by entry.",
    ]


def _feedback(exercise: str, report: Report, record: bool) -> list[str]:
    """The lines after the first: step one (measured + questions) or step two (causes)."""
    name = get_exercise(exercise).name
    ids = list(report.misconceptions)
    _last[exercise] = report
    if not ids:
        return [*_locate_lines(exercise, report), result_line(name, ids)]
    asked = _asked.setdefault(exercise, set())
    again = [m for m in ids if m in asked]
    new = [m for m in ids if m not in asked]
    asked.update(ids)
    lines: list[str] = []
    named = ids if record else again
    if named:
        lines.append("Probable mistakes:" if len(named) > 1 else "Probable mistake:")
        lines += _cause_lines(exercise, report, named)
    ask = [] if record else new
    if ask:
        details = {f.id: f.detail for f in report.findings}
        lines.append(
            "What the check measured, and a question:"
            if len(ask) == 1
            else "What the check measured, and questions:"
        )
        for mid in ask:
            if details.get(mid):
                lines.append(f"  Measured: {details[mid]}")
            lines.append(f"  ? {_question(exercise, mid)}")
        lines.append(
            f"Change your function and run this check again: if the same mistake is still "
            f"there, the check names it. To see the cause now: checks.hint({exercise!r})"
        )
    if record or not ask:
        lines.append(result_line(name, ids))
    else:
        lines.append(f"Diagnosis for {name}: not named yet (a question first)")
    return lines


def _question(exercise: str, mid: str) -> str:
    for m in get_exercise(exercise).misconceptions:
        if m.id == mid:
            return m.question or "What does your output do differently on this case?"
    return "What does your output do differently on this case?"


def hint(exercise: str) -> None:
    """Print the named cause of ``exercise``'s last failing check in this kernel.

    Step two of a check's feedback, on request: the mistakes its last failure measured,
    each with its cause (or, when no known mistake explains it, where the output goes
    wrong). Nothing to say before the check has failed once.

    Examples
    --------
    >>> forget()
    >>> hint("softmax")
    softmax: no failing check to explain yet; run checks.check("softmax", ...) first
    """
    ex = get_exercise(exercise)
    report = _last.get(exercise)
    if report is None:
        print(
            f'{ex.name}: no failing check to explain yet; run checks.check("{exercise}", ...) first'
        )
        return
    ids = list(report.misconceptions)
    _asked.setdefault(exercise, set()).update(ids)
    lines = [f"{ex.name}, last failure {report.first_failure}"]
    if ids:
        lines.append("Probable mistakes:" if len(ids) > 1 else "Probable mistake:")
        lines += _cause_lines(exercise, report, ids)
    else:
        lines += _locate_lines(exercise, report)
    print("\n".join(lines))


def check_hidden(exercise: str, fn: Callable) -> None:
    """The grader's check, used inside nbgrader's hidden-test regions; silent when right.

    It does not trust the notebook's kernel: it refuses to grade when numpy, torch,
    builtins or attnlib functions have been replaced, runs the cases (visible and hidden)
    with a fresh copy of the checks loaded from their files, accepts only real arrays and
    tensors, and fails a function that calls the course's reference. Failure messages
    carry a tag the grading driver reads: ``[needs-review]`` for tampering,
    ``[calls-reference]`` for a solution that calls the reference. See
    :mod:`attnlib.checks.grading`.
    """
    from attnlib.checks import grading

    grading.verify(exercise, fn)


def yours_or_reference(exercise: str, fn: Callable) -> Callable:
    """The learner's function once it is written, else the course's version, said in a line.

    The cells after an exercise use it where they need the exercise's function, so that
    Run All reaches the end of a lesson before every exercise is solved. "Written" means
    ``fn`` does not raise ``NotImplementedError`` on the exercise's first case; a function
    that is written but wrong is used as it is (its results are yours to inspect).
    Grading never sees this: the grader judges the function the exercise's own cells hand
    in, and a solution that calls the course's version earns nothing.

    Parameters
    ----------
    exercise : str
        The exercise's name, e.g. ``"softmax"``.
    fn : callable
        The learner's function from the exercise's cell.

    Returns
    -------
    callable
        ``fn`` itself, or the exercise's reference (same arguments) with a printed note.

    Examples
    --------
    >>> def softmax(x):
    ...     raise NotImplementedError()
    >>> f = yours_or_reference("softmax", softmax)
    softmax is not written yet: this cell uses the course's version
    >>> f is softmax
    False
    """
    ex = get_exercise(exercise)
    if not callable(fn):
        msg = f"yours_or_reference({exercise!r}, fn): fn must be a function, got {type_name(fn)}"
        raise TypeError(msg)
    case = ex.cases()[0]
    args = tuple(a.copy() if hasattr(a, "copy") else a for a in case.args)
    try:  # a trial call: what it prints or warns is not the cell's output
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            fn(*args, **case.kwargs)
    except NotImplementedError:
        print(f"{ex.part_of or ex.name} is not written yet: this cell uses the course's version")
        return ex.reference
    except Exception:  # noqa: BLE001 - written but wrong: the learner's own to inspect
        return fn
    return fn
