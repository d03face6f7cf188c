"""What staff and learners get: the report, the gradebook's CSV, the feedback pages.

:func:`export` writes nbgrader's CSV plus ``status``, ``needs_review``, ``sandbox`` and
``notes`` columns (:class:`CourseCsvExport` does the same for ``nbgrader export``): a
submission that could not be graded has status ``NOT GRADED`` and a flagged one
``FLAGGED``, both with an empty score, never a number a script would upload.
:func:`printable` and :func:`csv_cell` keep a learner's text (a grade_id, a file name, an
error) from acting on a console or a spreadsheet. :func:`feedback` writes the feedback
pages, each under a wall clock.
"""

from __future__ import annotations

import csv
import json
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nbgrader.plugins import ExportPlugin

from kvstaff.grader.course import db_url, find_submissions, load_config, run_app, wall_clock

REPORT_NAME = "grading_report.json"
SANDBOXED = "bubblewrap"
UNSAFE = "NONE (--unsafe-no-sandbox)"


@dataclass
class Outcome:
    """What happened to one submission."""

    assignment: str
    student: str
    status: str = "graded"  # graded | graded with problems | FLAGGED | NOT GRADED
    score: float | None = None
    max_score: float | None = None
    needs_review: bool = False
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sandbox: str = SANDBOXED
    auto_score: float | None = None  # nbgrader's number, kept for staff when FLAGGED


def read_report(course: Path) -> dict:
    path = Path(course) / REPORT_NAME
    return json.loads(path.read_text()) if path.exists() else {}


def write_report(course: Path, outcomes: list[Outcome]) -> None:
    report = read_report(course)
    for o in outcomes:
        report.setdefault(o.assignment, {})[o.student] = asdict(o)
    (Path(course) / REPORT_NAME).write_text(json.dumps(report, indent=1, sort_keys=True))


CSV_KEYS = [
    "assignment",
    "student_id",
    "status",
    "needs_review",
    "score",
    "max_score",
    "raw_score",
    "late_submission_penalty",
    "timestamp",
    "sandbox",
    "notes",
    "last_name",
    "first_name",
    "email",
    "duedate",
]


def printable(text) -> str:
    """``text`` with control, format and unpaired-surrogate characters shown as escapes.

    A grade_id, a file name or an error message comes from the learner: printed raw, its
    terminal escape codes would clear or retitle the staff's console, and bidirectional
    controls would reorder what staff read.
    """
    text = str(text)
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


_CSV_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """A CSV cell a spreadsheet shows as text: printable, never starting a formula."""
    if not isinstance(value, str):
        return value
    value = printable(value)
    return "'" + value if value.startswith(_CSV_FORMULA) else value


def csv_rows(gradebook, report: dict, students=(), assignments=()) -> list[dict]:
    """One row per (assignment, student) of the gradebook, then the report's refused ones.

    Long: one loop builds a row from the gradebook and the report together (its status
    decides which numbers the row may carry); splitting it would pass a dozen values.
    """
    from nbgrader.api import MissingEntry

    rows = []
    for assignment in gradebook.assignments:
        if assignments and assignment.name not in assignments:
            continue
        for student in gradebook.students:
            if students and student.id not in students:
                continue
            info = report.get(assignment.name, {}).get(student.id)
            row = {
                "assignment": assignment.name,
                "student_id": student.id,
                "last_name": student.last_name or "",
                "first_name": student.first_name or "",
                "email": student.email or "",
                "duedate": assignment.duedate or "",
                "max_score": assignment.max_score,
            }
            try:
                sub = gradebook.find_submission(assignment.name, student.id)
            except MissingEntry:
                row.update(
                    status="no submission",
                    needs_review="no",
                    score=0.0,
                    raw_score=0.0,
                    late_submission_penalty=0.0,
                    timestamp="",
                    sandbox="",
                    notes="",
                )
                rows.append(row)
                continue
            penalty = sub.late_submission_penalty or 0.0
            row.update(
                status="graded",
                needs_review="no",
                raw_score=sub.score,
                late_submission_penalty=penalty,
                score=max(0.0, sub.score - penalty),
                timestamp=sub.timestamp or "",
                sandbox="",
                notes="",
            )
            notes = list(info["notes"]) if info else []
            if sub.needs_manual_grade:
                notes.append("some cells await manual grading in the formgrader")
            if not info:  # not graded by this driver (or its run stopped): no verdict
                info = {"status": "NOT GRADED", "needs_review": True}
                notes.append(f"no entry in {REPORT_NAME}: not graded by make autograde")
            row["status"] = info["status"]
            row["needs_review"] = "yes" if info["needs_review"] else "no"
            row["sandbox"] = info.get("sandbox", "")
            if info["status"] in ("NOT GRADED", "FLAGGED"):
                # never a number a script would upload: the reason is in the notes
                row.update(score="", raw_score="", late_submission_penalty="")
            row["notes"] = " | ".join(notes)
            rows.append(row)
    # Submissions the driver refused before nbgrader ran (links, FIFOs beside the
    # notebook): in the report, not in the gradebook; they still get their row.
    known = {(r["assignment"], r["student_id"]) for r in rows}
    names = {a.name: a for a in gradebook.assignments}
    for a, entries in sorted(report.items()):
        for s, info in sorted(entries.items()):
            if (a, s) in known or a not in names or (assignments and a not in assignments):
                continue
            if students and s not in students:
                continue
            rows.append(
                {
                    **dict.fromkeys(CSV_KEYS, ""),
                    "assignment": a,
                    "student_id": s,
                    "status": info["status"],
                    "needs_review": "yes" if info["needs_review"] else "no",
                    "max_score": names[a].max_score,
                    "duedate": names[a].duedate or "",
                    "sandbox": info.get("sandbox", ""),
                    "notes": " | ".join(info["notes"]),
                }
            )
    return [{k: csv_cell(v) for k, v in row.items()} for row in rows]


class CourseCsvExport(ExportPlugin):
    """nbgrader's CSV export plus ``status``, ``needs_review`` and ``notes``.

    A submission the autograder could not grade has status ``NOT GRADED`` and an empty
    score, never a zero. Reads ``grading_report.json`` from the course folder (the
    current directory when run as ``nbgrader export``).
    """

    def export(self, gradebook) -> None:
        dest = Path(self.to or "grades.csv")
        report = read_report(Path.cwd())
        rows = csv_rows(gradebook, report, self.student, self.assignment)
        with open(dest, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=CSV_KEYS)
            writer.writeheader()
            writer.writerows(rows)
        self.log.info("Exported %d rows to %s", len(rows), dest)


def export(course: Path, to: Path | None = None, echo=print) -> Path:
    from nbgrader.api import Gradebook

    course = Path(course).resolve()
    dest = Path(to) if to else course / "grades.csv"
    cfg = load_config(course)
    with Gradebook(db_url(cfg)) as gb:
        rows = csv_rows(gb, read_report(course))
    with open(dest, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_KEYS)
        writer.writeheader()
        writer.writerows(rows)
    review = sum(r["needs_review"] == "yes" for r in rows)
    failed = sum(r["status"] == "NOT GRADED" for r in rows)
    echo(f"exported {len(rows)} rows to {dest} ({failed} not graded, {review} to review)")
    return dest


FEEDBACK_LIMIT = 300  # seconds the feedback page of one submission may take


def feedback(course: Path, echo=print) -> list[Path]:
    """Feedback HTML (no hidden tests) for every autograded submission.

    Each page is made under a wall clock (:data:`FEEDBACK_LIMIT`): one that takes longer
    is reported and skipped, the others are written.
    """
    from nbgrader.converters import GenerateFeedback

    course = Path(course).resolve()
    cfg = load_config(course)
    autograded = course / "autograded"
    written = []
    if not autograded.exists():
        raise SystemExit(f"nothing to give feedback on: {autograded} does not exist")
    for a, s in find_submissions(autograded):
        try:
            with wall_clock(FEEDBACK_LIMIT):
                result = run_app(GenerateFeedback, cfg, a, s, force=True)
        except TimeoutError as err:
            result = {"success": False, "error": f"{err}; no feedback written"}
        if not result["success"]:
            echo(f"feedback for {printable(f'{s}/{a}')} failed:\n{result.get('error', '')}")
            continue
        written += sorted((course / "feedback" / s / a).glob("*.html"))
    echo(f"wrote {len(written)} feedback file(s) under {course / 'feedback'}")
    return written
