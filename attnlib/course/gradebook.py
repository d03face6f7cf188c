"""Graded exercises with nbgrader, for course staff: the entry point of the grader.

    python -m attnlib.course.gradebook release      # build/source from notebooks/, then release/
    python -m attnlib.course.gradebook autograde    # grade submitted/<student>/<lesson>/, export
    python -m attnlib.course.gradebook export       # gradebook CSV [--to F.csv], review flags
    python -m attnlib.course.gradebook feedback     # feedback/<student>/<lesson>/<lesson>.html
    python -m attnlib.course.gradebook validate     # nbgrader validate on every source lesson,
                                                    # validate --invert on every release

``make release``, ``make autograde`` and ``make feedback`` call these. The grader itself is
the package :mod:`attnlib.course.grader`, one concern per module (see its docstring); this
module runs its command line (:func:`attnlib.course.grader.cli.main`) and names the
nbgrader plugins ``nbgrader_config.py`` configures.
"""

from __future__ import annotations

from attnlib.course.grader.cli import main
from attnlib.course.grader.execution import (
    ResilientExecute,
    ShortenHiddenTracebacks,
    StderrIsNotFailure,
)
from attnlib.course.grader.export import CourseCsvExport

__all__ = [
    "CourseCsvExport",
    "ResilientExecute",
    "ShortenHiddenTracebacks",
    "StderrIsNotFailure",
    "main",
]

if __name__ == "__main__":
    raise SystemExit(main())
