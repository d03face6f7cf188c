"""nbgrader settings for the Key Vectors course (read by `nbgrader ...` and
kvstaff.gradebook).

The course folder is this repository. nbgrader's source folder is generated from
notebooks/ by `make release` (build/source/<lesson>/<lesson>.ipynb, one assignment per
graded lesson); releases go to release/, submissions are read from
submitted/<student>/<lesson>/, and autograded/, feedback/, gradebook.db and grades.csv are
written here. See the README's "Grading" section.
"""

import os
from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)

from kvstaff.gradebook import (
    CourseCsvExport,
    ResilientExecute,
    ShortenHiddenTracebacks,
    StderrIsNotFailure,
)
from kvstaff.safe_outputs import SafeOutputs

c = get_config()  # noqa: F821 - provided by nbgrader's config loader

c.CourseDirectory.root = str(Path(__file__).resolve().parent)
c.CourseDirectory.course_id = "key-vectors"
c.CourseDirectory.source_directory = os.path.join("build", "source")

# Per-cell time limit (nbgrader's default is 30 s). A lesson cell that trains a small model
# takes seconds; a learner's infinite loop is cut off after this many seconds.
c.Execute.timeout = 60
# With the default (True) a loop that swallows KeyboardInterrupt aborts the whole
# submission with no score recorded.
c.Execute.raise_on_iopub_timeout = False
c.Execute.interrupt_on_timeout = True
# When a notebook is done (graded or validated) its kernel is killed at once, its state
# thrown away: a graceful shutdown waits ~2.5 s per notebook for the process to exit.
c.Execute.shutdown_kernel = "immediate"

# A deleted (or metadata-stripped) test cell is put back and graded, not silently scored 0.
c.OverwriteCells.add_missing_cells = True

# Every grading kernel runs in a bubblewrap sandbox (staff/kvstaff/sandbox.py): read-only
# course and venv, its own folder, no network, a separate uid, these limits. The driver
# (`make autograde`) switches to "none" only when told --unsafe-no-sandbox, and sets the
# worker slot and threads per kernel when it grades several submissions at once.
c.ResilientExecute.sandbox = "bwrap"
c.ResilientExecute.memory_limit = 6 * 2**30  # bytes of address space per kernel
c.ResilientExecute.cpu_limit = 900  # CPU seconds per kernel (all its cells)

# Autograde: nbgrader's list, with Execute replaced by one that sandboxes the kernel, judges
# hidden tests outside it and survives stuck or dead kernels, and stderr in graded test
# cells not counted as failure.
c.Autograde.autograde_preprocessors = [
    ResilientExecute,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SafeOutputs,  # no HTML/JavaScript/SVG of the kernel's in the notebook staff open
    StderrIsNotFailure,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]

# Feedback without hidden tests: tracebacks shortened first, then the regions removed; and
# nothing of the kernel's that a browser would run (outputs kept: plain text and PNG).
c.GenerateFeedback.preprocessors = [
    GetGrades,
    ShortenHiddenTracebacks,
    ClearHiddenTests,
    SafeOutputs,
    CSSHTMLHeaderPreprocessor,
]
c.HTMLExporter.sanitize_html = True  # a second layer: nbconvert cleans markdown and HTML

# `nbgrader export` writes the same CSV as `make autograde` (status, needs_review, notes).
c.ExportApp.plugin_class = CourseCsvExport
