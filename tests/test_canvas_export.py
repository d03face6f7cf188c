"""The Canvas export (staff/kvstaff/grader/canvas.py) against Canvas's documented import
layout: five identifying columns named as Canvas names them, one column per assignment headed
"Name (id)", a "Points Possible" row, and FLAGGED / NOT GRADED cells left blank and listed for
review. The grades come as grades.csv's own columns (export.CSV_KEYS)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from kvstaff.grader.canvas import canvas_export, canvas_rows
from kvstaff.grader.cli import main
from kvstaff.grader.export import CSV_KEYS
from kvstaff.hub import read_roster

# Canvas's gradebook columns, in Canvas's order, spelt as its export writes them.
CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]

ROSTER = """username,role,name,section,canvas_id,sis_user_id,sis_login_id
kv-teach,instructor,"Hopper, Grace",,,,
ada,learner,"Lovelace, Ada",A,1001,S1001,alovelace
alan,learner,"Turing, Alan",A,1002,S1002,aturing
emmy,learner,"Noether, Emmy",B,1003,S1003,enoether
claude,learner,"=cmd|' /C calc'!A0",B,1004,S1004,cshannon
grace,learner,"Hamilton, Margaret",B,1005,S1005,mhamilton
"""


def grade_row(student, assignment, status, score, max_score, notes=""):
    row = dict.fromkeys(CSV_KEYS, "")
    row.update(
        assignment=assignment,
        student_id=student,
        status=status,
        score=score,
        max_score=max_score,
        notes=notes,
        needs_review="yes" if status in ("FLAGGED", "NOT GRADED") else "no",
    )
    return row


GRADES = [
    grade_row("ada", "01_fixture", "graded", "3.0", "3.0"),
    grade_row("alan", "01_fixture", "graded", "1.0", "3.0"),
    grade_row("emmy", "01_fixture", "FLAGGED", "", "3.0", "audit: imports sqlite3"),
    grade_row("claude", "01_fixture", "NOT GRADED", "", "3.0", "nbgrader failed"),
    grade_row("grace", "01_fixture", "no submission", "0.0", "3.0"),
    grade_row("ada", "02_fixture_masks", "graded with problems", "1.0", "2.0"),
    grade_row("stranger", "01_fixture", "graded", "2.0", "3.0"),
]


@pytest.fixture
def course(tmp_path) -> Path:
    (tmp_path / "roster.csv").write_text(ROSTER)
    with open(tmp_path / "grades.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_KEYS)
        w.writeheader()
        w.writerows(GRADES)
    return tmp_path


def run_cli(course: Path, *extra) -> tuple[list[list[str]], list[dict]]:
    rc = main(["canvas", "--course", str(course), "--roster", str(course / "roster.csv"), *extra])
    assert rc == 0
    with open(course / "canvas_grades.csv", newline="") as fh:
        table = list(csv.reader(fh))
    with open(course / "canvas_review.csv", newline="") as fh:
        review = list(csv.DictReader(fh))
    return table, review


def test_the_columns_are_canvas_columns_and_assignments_are_headed_name_and_id(course):
    table, _ = run_cli(
        course, "--assignment-id", "01_fixture=4101", "--assignment-id", "02_fixture_masks=4102"
    )
    header = table[0]
    assert header[:5] == CANVAS_IDENTITY
    heads = [re.fullmatch(r"(.+) \((\d+)\)", h) for h in header[5:]]
    assert all(heads), header
    assert [(m.group(1), m.group(2)) for m in heads] == [
        ("01_fixture", "4101"),
        ("02_fixture_masks", "4102"),
    ]


def test_the_second_row_is_points_possible_with_each_maximum(course):
    table, _ = run_cli(course)
    points = table[1]
    assert points[0] == "Points Possible"
    assert points[1:5] == ["", "", "", ""]
    assert [float(x) for x in points[5:]] == [3.0, 2.0]
    assert table[0][5:] == ["01_fixture", "02_fixture_masks"]  # no id: Canvas makes new ones


def test_every_learner_of_the_roster_is_one_row_with_their_canvas_identity(course):
    table, _ = run_cli(course)
    rows = {r[3]: dict(zip(table[0], r, strict=True)) for r in table[2:]}  # by SIS Login ID
    assert sorted(rows) == ["alovelace", "aturing", "cshannon", "enoether", "mhamilton"]
    ada = rows["alovelace"]
    assert (ada["Student"], ada["ID"], ada["SIS User ID"], ada["Section"]) == (
        "Lovelace, Ada",
        "1001",
        "S1001",
        "A",
    )
    assert "Hopper, Grace" not in [r["Student"] for r in rows.values()]  # the instructor


def test_scores_zero_for_no_submission_and_blank_for_flagged_and_not_graded(course):
    table, review = run_cli(course)
    rows = {r[3]: dict(zip(table[0], r, strict=True)) for r in table[2:]}
    assert rows["alovelace"]["01_fixture"] == "3.0"
    assert rows["alovelace"]["02_fixture_masks"] == "1.0"  # graded with problems: a grade
    assert rows["aturing"]["01_fixture"] == "1.0"
    assert rows["enoether"]["01_fixture"] == ""  # FLAGGED
    assert rows["cshannon"]["01_fixture"] == ""  # NOT GRADED
    assert rows["mhamilton"]["01_fixture"] == "0"  # no submission
    assert rows["aturing"]["02_fixture_masks"] == "0"  # not in the gradebook at all
    listed = {(r["student"], r["assignment"], r["status"]) for r in review}
    assert ("emmy", "01_fixture", "FLAGGED") in listed
    assert ("claude", "01_fixture", "NOT GRADED") in listed
    assert ("stranger", "01_fixture", "graded") in listed  # not in the roster
    assert len(review) == 3
    assert "sqlite3" in next(r["notes"] for r in review if r["student"] == "emmy")


def test_a_student_missing_from_the_roster_is_not_exported(course):
    table, _ = run_cli(course)
    assert all("stranger" not in cell for row in table for cell in row)


def test_a_cell_that_would_start_a_formula_is_text(course):
    table, _ = run_cli(course)
    claude = next(r for r in table[2:] if r[3] == "cshannon")
    assert claude[0].startswith("'=")


def test_bad_arguments_are_named(course, capsys):
    roster = read_roster(course / "roster.csv")
    with pytest.raises(ValueError, match="assignment_ids names \\['99_nothing'\\]"):
        canvas_rows(GRADES, roster.learners, {"99_nothing": "1"})
    with pytest.raises(FileNotFoundError, match="grades_csv .*missing.csv: no such file"):
        canvas_export(course / "missing.csv", roster.learners, course / "out.csv")
    with pytest.raises(SystemExit):
        main(
            [
                "canvas",
                "--course",
                str(course),
                "--roster",
                str(course / "roster.csv"),
                "--assignment-id",
                "01_fixture",
            ]
        )
    assert "expected LESSON=ID" in capsys.readouterr().err


def test_one_canvas_user_never_gets_two_rows(course, capsys):
    from kvstaff.roster import Person

    ada = Person("ada", "learner", "Lovelace, Ada", "A", "1001", "S1001", "alovelace")
    twin = Person("ada2", "learner", "Lovelace, Ada", "A", "01001", "S9", "other")
    with pytest.raises(ValueError, match=r"'ada2' and 'ada' share canvas_id '01001'"):
        canvas_rows(GRADES, [ada, twin])
    same_login = Person("al", "learner", "X", "A", "1009", "S9", "ALOVELACE")
    with pytest.raises(ValueError, match=r"'al' and 'ada' share sis_login_id 'ALOVELACE'"):
        canvas_rows(GRADES, [ada, same_login])
    with pytest.raises(ValueError, match=r"'ada' and 'ada' share username 'ada'"):
        canvas_rows(GRADES, [ada, ada])
    # the roster itself is refused with its lines, and nothing is written
    (course / "roster.csv").write_text(ROSTER + "ada-again,learner,Twin,A,1001,S7,x\n")
    rc = main(["canvas", "--course", str(course), "--roster", str(course / "roster.csv")])
    assert rc == 2 and not (course / "canvas_grades.csv").exists()
    said = capsys.readouterr().out
    assert "line 8: duplicate canvas_id '1001' of 'ada-again': already 'ada''s (line 3)" in said
    # people from anywhere else: the export refuses before it writes
    with pytest.raises(ValueError, match="two rows for one Canvas user"):
        canvas_export(course / "grades.csv", [ada, twin], course / "canvas_grades.csv")
    assert not (course / "canvas_grades.csv").exists()
