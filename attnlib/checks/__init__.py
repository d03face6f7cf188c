"""Exercise checks that name the mistake.

``check(exercise, fn)`` runs a learner's function on fixed and random cases against the
reference. When it is right it prints one short line; when it is wrong it raises
``AssertionError`` whose message names the probable misconception and how to fix it; when
it is not written yet it says so in one line and the lesson goes on. The cells after an
exercise call ``yours_or_reference(exercise, fn)``: the learner's function once written,
the course's version (with a one-line note) until then.
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

__all__ = [
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
    "get_exercise",
    "part",
    "parts",
    "read_results",
    "register",
    "result_line",
    "run",
    "yours_or_reference",
]


# Every exercise module registers its exercises in _core when it is imported: each is
# imported here by name (tests/test_layout.py checks that none is missing), so that the
# import graph shows them.
from attnlib.checks import (  # noqa: E402, F401 - imported to register their exercises
    ex_attention,
    ex_backprop,
    ex_block,
    ex_blockwise,
    ex_decoding,
    ex_fewer_keys,
    ex_heads,
    ex_induction,
    ex_keys_values,
    ex_latent,
    ex_masks,
    ex_mha,
    ex_positions,
    ex_projections,
    ex_real_text,
    ex_relevance,
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
    if report.misconceptions:
        lines.append(
            "Probable mistakes:" if len(report.misconceptions) > 1 else "Probable mistake:"
        )
        details = {f.id: f.detail for f in report.findings}
        for mid in report.misconceptions:
            measured = details.get(mid, "")
            if measured:
                lines.append(f"  [{mid}] Measured: {measured}")
                lines.append(f"      {explanation(exercise, mid)}")
            else:
                lines.append(f"  [{mid}] {explanation(exercise, mid)}")
    else:
        lines.append(
            "This does not match any of the classic mistakes the check knows; compare your "
            "shapes with the docstring and print your output for a tiny input."
        )
    if note:
        lines.append(note)
    lines.append(result_line(name, report.misconceptions))
    raise AssertionError("\n".join(lines))


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
