"""Grades in Canvas's gradebook-import layout, and the rows a person must look at first.

``grades.csv`` (:mod:`kvstaff.grader.export`) is nbgrader's layout: one row per
(assignment, student). Canvas imports one row per student and one column per assignment:

    Student,ID,SIS User ID,SIS Login ID,Section,03_attention (4101),08_masks (4102)
    Points Possible,,,,,3.0,2.0
    "Lovelace, Ada",1001,S1001,alovelace,A,3.0,
    ...

The layout followed here is Canvas's own gradebook export, which its import reads back: the
five identifying columns ``Student`` (sortable name, "Last, First"), ``ID`` (Canvas's user
id), ``SIS User ID``, ``SIS Login ID``, ``Section``; then one column per assignment headed
"Name (id)" with Canvas's assignment id in brackets (a header without an id makes Canvas
create a new assignment of that name); a second row that starts ``Points Possible`` and gives
each assignment's maximum. Sources: the Ohio State CarmenCanvas guide "Import CSV File for
Carmen Grades" (teaching.resources.osu.edu: Student Name or Student ID or SIS User ID to
identify a student, SIS Login ID, Section, then assignment columns) and VCU's Canvas guide
"Gradebook Action Menu" (ts.vcu.edu: read-only columns such as totals are ignored on
re-upload, and a blank cell leaves a grade alone). Column names are Canvas's, case and
spacing included.

What goes in a cell: a graded submission's score; ``0`` for a learner of the roster with no
submission; **blank** for ``FLAGGED`` and ``NOT GRADED`` (Canvas leaves a blank cell's grade
alone, so nothing a script uploads pretends to be a grade) — those are written to a second
file, ``canvas_review.csv`` (student, assignment, status, notes), for a person. A student of
``grades.csv`` missing from the roster is not exported (Canvas could not match them) and is
listed for review too.

One row per Canvas user: two people with one username, ``ID``, ``SIS User ID`` or ``SIS
Login ID`` (compared as :func:`kvstaff.roster.identity_key` compares them) are refused with
both names, before anything is written — Canvas would import both rows into one gradebook
row, the second grade silently replacing the first. :func:`kvstaff.roster.read_roster`
refuses such a roster with the lines; this holds for people from anywhere else too.
"""

from __future__ import annotations

import csv
from pathlib import Path

from kvstaff.grader.export import csv_cell
from kvstaff.roster import IDENTITY_COLUMNS, identity_key

IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
POINTS_ROW = "Points Possible"
REVIEW_KEYS = ["student", "assignment", "status", "notes"]
BLANK_STATUSES = ("FLAGGED", "NOT GRADED")


def column_name(assignment: str, canvas_id: str | None) -> str:
    """``Name (id)`` as Canvas heads an assignment column; ``Name`` when no id is known."""
    return f"{assignment} ({canvas_id})" if canvas_id else assignment


def canvas_rows(grade_rows: list[dict], people, assignment_ids: dict[str, str] | None = None):
    """(header, rows, review) from the rows of ``grades.csv`` and the roster's learners.

    ``people``: objects with ``username``, ``name``, ``canvas_id``, ``sis_user_id``,
    ``sis_login_id``, ``section`` (the roster's learners, :class:`kvstaff.hub.Person`);
    ``assignment_ids``: lesson -> Canvas assignment id.
    """
    ids = assignment_ids or {}
    people = list(people)
    _one_row_per_canvas_user(people)
    assignments = sorted({r["assignment"] for r in grade_rows})
    unknown_ids = sorted(set(ids) - set(assignments))
    if unknown_ids:
        raise ValueError(
            f"assignment_ids names {unknown_ids}, not in grades.csv (its assignments: "
            f"{assignments})"
        )
    max_score = {r["assignment"]: r["max_score"] for r in grade_rows}
    header = IDENTITY + [column_name(a, ids.get(a)) for a in assignments]
    points = [POINTS_ROW, "", "", "", ""] + [max_score[a] for a in assignments]
    by_pair = {(r["student_id"], r["assignment"]): r for r in grade_rows}
    roster = {p.username: p for p in people}
    review = []
    rows = []
    for p in people:
        cells = [p.name or p.username, p.canvas_id, p.sis_user_id, p.sis_login_id, p.section]
        for a in assignments:
            r = by_pair.get((p.username, a))
            if r is None or r["status"] == "no submission":
                cells.append(0)
            elif r["status"] in BLANK_STATUSES or r["score"] in ("", None):
                cells.append("")
                review.append(
                    {
                        "student": p.username,
                        "assignment": a,
                        "status": r["status"],
                        "notes": r.get("notes", ""),
                    }
                )
            else:
                cells.append(r["score"])
        rows.append([csv_cell(c) for c in cells])
    for (student, a), r in sorted(by_pair.items()):
        if student not in roster:
            review.append(
                {
                    "student": student,
                    "assignment": a,
                    "status": r["status"],
                    "notes": "not in the roster: not exported to Canvas",
                }
            )
    return header, [points] + rows, [{k: csv_cell(v) for k, v in x.items()} for x in review]


def _one_row_per_canvas_user(people) -> None:
    """``ValueError`` naming every pair of people who would be one Canvas user."""
    first: dict[tuple[str, str], str] = {}
    clashes = []
    for p in people:
        keys = [("username", p.username)]
        keys += [(c, identity_key(c, getattr(p, c, ""))) for c in IDENTITY_COLUMNS]
        for column, key in keys:
            if not key:
                continue
            if (column, key) in first:
                clashes.append(
                    f"{p.username!r} and {first[(column, key)]!r} share {column} "
                    f"{getattr(p, column)!r}"
                )
            else:
                first[(column, key)] = p.username
    if clashes:
        raise ValueError(
            "two rows for one Canvas user (Canvas would keep one grade of the two): "
            + "; ".join(clashes)
        )


def canvas_export(
    grades_csv: Path,
    people,
    to: Path,
    review_to: Path | None = None,
    assignment_ids: dict[str, str] | None = None,
    echo=print,
) -> Path:
    """Write ``to`` (Canvas's import layout) and ``review_to`` (the blank cells' reasons)."""
    grades_csv = Path(grades_csv)
    if not grades_csv.is_file():
        raise FileNotFoundError(f"grades_csv {grades_csv}: no such file (make autograde first)")
    with open(grades_csv, newline="", encoding="utf-8") as fh:
        grade_rows = list(csv.DictReader(fh))
    header, rows, review = canvas_rows(grade_rows, people, assignment_ids)
    to = Path(to)
    with open(to, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    review_to = Path(review_to) if review_to else to.with_name("canvas_review.csv")
    with open(review_to, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=REVIEW_KEYS)
        w.writeheader()
        w.writerows(review)
    echo(
        f"canvas: {len(rows) - 1} learner(s) x {len(header) - len(IDENTITY)} assignment(s) "
        f"-> {to}; {len(review)} cell(s) left blank or unmatched, listed in {review_to}"
    )
    return to
