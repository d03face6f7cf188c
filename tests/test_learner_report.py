"""``make report``'s per-learner misconception summaries (kvstaff.report --learners).

A tiny class of the grading tests' first fixture lesson (softmax, attend): learner A masks
after the softmax (a named misconception), learner B passed, and learner C's check cell
stopped with an error whose text is hostile HTML. Each graded notebook carries what the
checks print and raise on that learner's function (tests/test_report.py's helpers).
"""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbfixtures import LESSONS, lesson
from test_report import _expected, _outputs, _softmax, attend_after

from attnlib import checks
from kvstaff import report

STEM = "01_fixture"
NAMES = LESSONS[STEM]  # softmax, attend
A, B, C = "learner_a7", "learner_b3", "mallory_x9"
HOSTILE = "<script>alert('pwned')</script>"


def _correct_attend(q, k, v, mask=None):
    from test_report import _attend

    return _attend(q, k, v, mask)


WORK = {A: {"softmax": _softmax, "attend": attend_after},
        B: {"softmax": _softmax, "attend": _correct_attend}}  # fmt: skip


def _write(course: Path, student: str, nb) -> None:
    for top in ("submitted", "autograded"):
        folder = course / top / student / STEM
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{STEM}.ipynb")


@pytest.fixture(scope="module")
def tiny_class(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("tiny_course")
    for student, work in WORK.items():
        nb = lesson(STEM, NAMES)
        for cell in nb.cells:
            m = re.fullmatch(r"l\d\d-(\w+)-check", cell.metadata.get("nbgrader", {}).get(
                "grade_id", ""))  # fmt: skip
            if m:
                cell.outputs = _outputs(m.group(1), work[m.group(1)])
                cell.execution_count = 1
        _write(course, student, nb)
    nb = lesson(STEM, NAMES)  # C: a hostile print, then an error no check reported
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "l01-softmax-check":
            cell.outputs = [
                nbformat.v4.new_output("stream", name="stdout", text=f"{HOSTILE}\n"),
                nbformat.v4.new_output("error", ename="NameError", evalue=HOSTILE, traceback=[]),
            ]
    _write(course, C, nb)
    return course


@pytest.fixture(scope="module")
def pages(tiny_class, python):
    out = tiny_class / "build" / "report"
    keep = out / "learners" / "notes.txt"  # someone else's file: must survive
    keep.parent.mkdir(parents=True)
    keep.write_text("mine")
    proc = subprocess.run(
        [python, "-m", "kvstaff.report", "--course", str(tiny_class), "--learners"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert keep.read_text() == "mine"
    return proc.stdout, out


def _read(out: Path, student: str, ext: str = "html") -> str:
    return (out / "learners" / f"{student}.{ext}").read_text(encoding="utf-8")


def test_the_cli_writes_one_page_and_one_text_per_learner(pages):
    stdout, out = pages
    assert (out / "index.html").exists() and (out / "misconceptions.csv").exists()
    names = sorted(p.name for p in (out / "learners").iterdir())
    assert names == sorted([f"{s}.{x}" for s in (A, B, C) for x in ("html", "md")] + ["notes.txt"])
    assert "learner summaries of 3 learner(s)" in stdout


def test_a_names_exactly_its_misconception_with_its_explanation(pages):
    _, out = pages
    status, ids = _expected("attend", attend_after)
    assert status == "wrong" and ids == ["mask-after-softmax"]
    page, text = _read(out, A), _read(out, A, "md")
    found = set(re.findall(r"<li><code>([^<]+)</code>", page))
    assert found == {"mask-after-softmax"}
    explanation = checks.explanation("attend", "mask-after-softmax")
    assert explanation in page.replace("&#x27;", "'")
    assert report._explanation("attend", "mask-after-softmax") in page.replace("&#x27;", "'")
    assert "Passed" in page  # softmax
    assert "mask-after-softmax" in text and "Passed" in text
    others = {m.id for ex in NAMES for m in checks.get_exercise(ex).misconceptions}
    for mid in others - {"mask-after-softmax"}:
        assert mid not in page, mid


def test_b_passed_and_no_page_holds_another_learners_data(pages):
    _, out = pages
    page = _read(out, B)
    assert "<li>" not in page and "mask-after-softmax" not in page
    assert page.count("Passed: correct on every case") == 2
    for student in (A, B, C):
        for ext in ("html", "md"):
            text = _read(out, student, ext)
            assert student in text.replace("\\_", "_")
            for other in {A, B, C} - {student}:
                assert other not in text.replace("\\_", "_"), (student, other)


def test_hostile_notebook_text_is_escaped(pages):
    _, out = pages
    page, text = _read(out, C), _read(out, C, "md")
    assert "<script" not in page
    assert not re.search(r"(?<!\\)[<>]", text)  # Markdown: every < and > backslash-escaped
    assert "\\<script\\>" in text
    assert "NameError: &lt;script&gt;" in page
    assert "stopped with an error" in page
    assert "No result" in page  # attend shares no cell with the error: its check never ran
    for student in (A, B):
        assert "<script" not in _read(out, student) and "http" not in _read(out, student)


def test_a_lesson_not_handed_in_or_not_graded_is_said(tmp_path):
    entries = report.learner_entries(
        tmp_path,
        [report.ExerciseSummary("L1", "softmax", [report.Row("x", "correct")]),
         report.ExerciseSummary("L2", "attend", [report.Row("y", "not graded")])],
    )  # fmt: skip
    assert [(e.lesson, e.status) for e in entries["x"]] == [("L1", "correct"), ("L2", "absent")]
    assert [(e.lesson, e.status) for e in entries["y"]] == [("L1", "absent"), ("L2", "not graded")]
    page = report.learner_page("y", entries["y"])
    assert "Not handed in." in page and "Submitted, but not graded yet." in page


def test_a_missing_course_or_empty_autograded_names_the_path(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert report.main(["--course", str(missing), "--learners"]) == 1
    assert str(missing) in capsys.readouterr().out
    (tmp_path / "autograded" / "someone").mkdir(parents=True)
    assert report.main(["--course", str(tmp_path), "--learners"]) == 1
    said = capsys.readouterr().out
    assert str(tmp_path / "autograded") in said and "no notebook" in said
    assert not (tmp_path / "build").exists()


def test_page_names_never_collide_and_each_page_is_its_learners(tmp_path):
    """``a_``, ``a?`` and ``a__`` once shared names (``a?`` got ``a_.html``, ``a_`` got
    ``a__.html``, by sort order): each id now has one name of its own, whatever the others."""
    ids = ["a_", "a?", "a__", "a", "A", "a~3f", "a~", "~", "é", "e\u0301", "a/b", "..", "",
           "x" * 300, "x" * 299 + "y", "a\udcff"]  # fmt: skip
    stems = [report.page_stem(s) for s in ids]
    assert len(set(stems)) == len(ids)  # injective...
    assert len({s.lower() for s in stems}) == len(ids)  # ...where A and a are one file too
    assert all(re.fullmatch(r"[a-z0-9_~-]{1,220}", s) for s in stems), stems
    assert [report.page_stem(s) for s in ("a_", "a?", "a__", "kv-learner02")] == [
        "a_", "a~3f", "a__", "kv-learner02"]  # fmt: skip
    says = {"a_": "correct", "a?": "wrong", "a__": "not written"}
    summaries = [report.ExerciseSummary(STEM, "softmax", [report.Row(s, st) for s, st in
                                                          says.items()])]  # fmt: skip
    pages = report.build_learners(tmp_path, tmp_path / "out", summaries)
    assert sorted(p.name for p in pages) == sorted(f"{report.page_stem(s)}.html" for s in says)
    for student, status in says.items():
        page = (tmp_path / "out" / "learners" / f"{report.page_stem(student)}.html").read_text()
        assert f"Misconception summary for {html.escape(student)}<" in page, student
        assert report._says(report.Entry(STEM, "softmax", status)) in page, student
