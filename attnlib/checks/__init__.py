"""Exercise checks that name the mistake.

``check(exercise, fn)`` runs a learner's function on fixed and random cases against the
reference. When it is right it prints one short line; when it is wrong it raises
``AssertionError`` whose message names the probable misconception and how to fix it.
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

from collections.abc import Callable

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
]


# Every exercise module registers its exercises in _core when it is imported: each is
# imported here by name (tests/test_layout.py checks that none is missing), so that the
# import graph shows them.
from attnlib.checks import (  # noqa: E402, F401 - imported to register their exercises
    ex_attention,
    ex_backprop,
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
    """Check a learner's function; print one line if right, raise AssertionError if not.

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
        what differed, and the probable misconception(s) with their explanation.
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
        raise AssertionError(
            f"✘ {name}: not written yet — replace `raise NotImplementedError()` in the cell "
            f"above with your code, run that cell, then this one."
        )
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
