"""Graded exercises with nbgrader, for course staff: the entry point of the grader.

    python -m kvstaff.gradebook release      # build/source from notebooks/, then release/
    python -m kvstaff.gradebook autograde    # grade submitted/<student>/<lesson>/, export
    python -m kvstaff.gradebook export       # gradebook CSV [--to F.csv], review flags
    python -m kvstaff.gradebook feedback     # feedback/<student>/<lesson>/<lesson>.html
    python -m kvstaff.gradebook validate     # nbgrader validate on every source lesson,
                                                    # validate --invert on every release

``make release``, ``make autograde`` and ``make feedback`` call these. The grader itself is
the package :mod:`kvstaff.grader`, one concern per module (see its docstring); this
module runs its command line (:func:`kvstaff.grader.cli.main`) and names the
nbgrader plugins ``nbgrader_config.py`` configures.
"""

from __future__ import annotations

from kvstaff.grader.cli import main
from kvstaff.grader.execution import (
    ResilientExecute,
    ShortenHiddenTracebacks,
    StderrIsNotFailure,
)
from kvstaff.grader.export import CourseCsvExport

__all__ = [
    "CourseCsvExport",
    "ResilientExecute",
    "ShortenHiddenTracebacks",
    "StderrIsNotFailure",
    "main",
]

if __name__ == "__main__":
    raise SystemExit(main())
