"""Exercise checks that name the mistake.

``check(exercise, fn)`` runs a learner's function on fixed and random cases against the
reference. When it is right it prints one short line; when it is wrong it raises
``AssertionError`` whose message names the probable misconception and how to fix it.
``diagnose(exercise, fn)`` returns the identifiers of the misconceptions the function's
behaviour matches (empty for a correct function).

Exercises are defined in the ``ex_*`` modules of this package, one module per topic; each
module calls :func:`attnlib.checks._core.register`. ``exercises()`` lists their names.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from attnlib.checks._core import (
    Case,
    Exercise,
    Misconception,
    Report,
    exercises,
    explanation,
    get_exercise,
    register,
    run,
)

__all__ = [
    "Case",
    "Exercise",
    "Misconception",
    "Report",
    "check",
    "check_hidden",
    "diagnose",
    "exercises",
    "explanation",
    "get_exercise",
    "register",
    "run",
]


def _load_exercise_modules() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("ex_"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_exercise_modules()


def diagnose(exercise: str, fn: Callable) -> list[str]:
    """Identifiers of the known misconceptions ``fn`` matches; ``[]`` if it is correct.

    A function that is wrong in a way no known variant explains also returns ``[]``;
    use :func:`run` (``run(exercise, fn).ok``) to tell the two apart.
    """
    return list(run(exercise, fn).misconceptions)


def check(exercise: str, fn: Callable) -> None:
    """Check a learner's function; print one line if right, raise AssertionError if not."""
    report = run(exercise, fn)
    name = get_exercise(exercise).name
    if report.ok and not report.called_reference:
        print(f"✔ {name}: correct on all {report.n_cases} cases")
        return
    if report.ok:
        used = ", ".join(report.called_reference)
        raise AssertionError(
            f"✘ {name}: your function calls the course's reference ({used}). "
            f"Write the computation yourself — the point is to build it."
        )
    lines = [f"✘ {name}: {report.first_failure}"]
    if report.misconceptions:
        lines.append("Probable mistake:")
        for mid in report.misconceptions:
            lines.append(f"  [{mid}] {explanation(exercise, mid)}")
    else:
        lines.append(
            "This does not match any of the classic mistakes the check knows; compare your "
            "shapes with the docstring and print your output for a tiny input."
        )
    raise AssertionError("\n".join(lines))


def check_hidden(exercise: str, fn: Callable) -> None:
    """The grader's check: like :func:`check`, silent when right.

    Used inside nbgrader's hidden-test regions. The grading set-up strengthens it against
    tampering (see ``attnlib.checks.grading``).
    """
    report = run(exercise, fn)
    if report.ok and not report.called_reference:
        return
    if report.ok:
        raise AssertionError(f"✘ {exercise}: the solution calls the course's reference")
    ids = ", ".join(report.misconceptions) or "no known misconception"
    raise AssertionError(f"✘ {exercise}: hidden tests failed ({ids}) {report.first_failure}")
