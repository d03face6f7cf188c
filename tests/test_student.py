"""`make student`: student versions in workbook/, never overwriting a learner's edits.

Run on fixture lessons (in the course's nbgrader markup) and on every real lesson in
notebooks/: no solution line and no hidden test survives; outputs are cleared; solution
regions become ``raise NotImplementedError()``; no note for lecturers is in a learner's
copy; edited notebooks are skipped and reported; untouched ones are regenerated when the
lesson changes; the read-only solutions copies beside them keep the solutions and outputs,
never a hidden test or a note.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbfixtures import hidden_lines, set_solution, solution_lines, write_lessons

from kvstaff import student

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _code(nb):
    return "\n".join(c.source for c in nb.cells)


def _assert_student_version(src_path, dest_path):
    src = nbformat.read(src_path, as_version=4)
    out = nbformat.read(dest_path, as_version=4)
    text = _code(out)
    for line in solution_lines(src):
        if line not in _code_outside_solutions(src):
            assert line not in text, f"solution line leaked into {dest_path.name}: {line}"
    for line in hidden_lines(src):
        assert line not in text, f"hidden test leaked into {dest_path.name}: {line}"
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
    for cell in out.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    n_solutions = sum(
        c.metadata.get("nbgrader", {}).get("solution", False)
        for c in src.cells
        if c.cell_type == "code"
    )
    assert text.count("raise NotImplementedError()") >= n_solutions
    # every cell of the lesson but its notes for lecturers, in order
    kept = [c for c in src.cells if not student.is_lecturer_note(c)]
    assert [c.cell_type for c in out.cells] == [c.cell_type for c in kept]
    assert not any(student.is_lecturer_note(c) for c in out.cells)
    assert "For lecturers" not in "\n".join(c.source for c in out.cells)


def _code_outside_solutions(nb):
    import re

    return re.sub(r"### BEGIN SOLUTION\n.*?### END SOLUTION", "", _code(nb), flags=re.S)


def test_student_versions_of_fixture_lessons(tmp_path, capsys):
    paths = write_lessons(tmp_path / "notebooks")
    wb = tmp_path / "workbook"
    assert student.main([str(tmp_path / "notebooks"), str(wb)]) == 0
    assert capsys.readouterr().out.count("wrote") == len(paths)
    for p in paths:
        _assert_student_version(p, wb / p.name)
    out = nbformat.read(wb / paths[0].name, as_version=4)
    sol = next(c for c in out.cells if c.metadata.get("nbgrader", {}).get("solution"))
    assert sol.source.startswith("def softmax(x):")  # the signature and docstring stay
    assert sol.source.rstrip().endswith("raise NotImplementedError()")


def test_an_edited_notebook_is_never_overwritten(tmp_path, capsys):
    src_dir, wb = tmp_path / "notebooks", tmp_path / "workbook"
    first, second = write_lessons(src_dir)
    student.main([str(src_dir), str(wb)])
    capsys.readouterr()

    # the learner solves exercise 1 in the first lesson and only runs the second one
    mine = nbformat.read(wb / first.name, as_version=4)
    set_solution(mine, "l01-softmax-solution", "def softmax(x):\n    return x  # my attempt")
    nbformat.write(mine, wb / first.name)
    ran = nbformat.read(wb / second.name, as_version=4)
    ran.cells[1].outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    nbformat.write(ran, wb / second.name)
    mine_bytes = (wb / first.name).read_bytes()
    ran_bytes = (wb / second.name).read_bytes()

    # nothing changed in the lessons: the edited one is skipped, the run one left alone
    student.main([str(src_dir), str(wb)])
    out = capsys.readouterr().out
    assert f"SKIPPED   {wb / first.name}: you have edited it" in out
    assert f"up to date {wb / second.name}" in out
    assert (wb / first.name).read_bytes() == mine_bytes
    assert (wb / second.name).read_bytes() == ran_bytes

    # the lessons change: the untouched one is regenerated, the edited one still skipped
    for p in (first, second):
        nb = nbformat.read(p, as_version=4)
        nb.cells[0].source += "\n\nA new sentence."
        nbformat.write(nb, p)
    student.main([str(src_dir), str(wb)])
    out = capsys.readouterr().out
    assert f"wrote     {wb / second.name}" in out
    assert f"SKIPPED   {wb / first.name}" in out
    assert (wb / first.name).read_bytes() == mine_bytes
    assert "A new sentence." in nbformat.read(wb / second.name, as_version=4).cells[0].source

    # deleting the edited notebook gets a fresh copy
    (wb / first.name).unlink()
    student.main([str(src_dir), str(wb)])
    assert f"wrote     {wb / first.name}" in capsys.readouterr().out
    assert "my attempt" not in (wb / first.name).read_text()


def test_a_notebook_it_did_not_write_is_left_alone(tmp_path, capsys):
    src_dir, wb = tmp_path / "notebooks", tmp_path / "workbook"
    first, _ = write_lessons(src_dir)
    wb.mkdir()
    (wb / first.name).write_text("not a notebook")
    student.main([str(src_dir), str(wb)])
    assert f"SKIPPED   {wb / first.name}" in capsys.readouterr().out
    assert (wb / first.name).read_text() == "not a notebook"


def test_no_lessons_is_an_error(tmp_path):
    with pytest.raises(SystemExit, match="no lessons"):
        student.generate(tmp_path, tmp_path / "wb")


@pytest.mark.skipif(not NOTEBOOKS, reason="no lessons in notebooks/ yet")
def test_make_student_on_every_lesson(tmp_path, root, python):
    wb = tmp_path / "workbook"
    run = subprocess.run(
        [python, "-m", "kvstaff.student", str(root / "notebooks"), str(wb)],
        capture_output=True,
        text=True,
        check=True,
    )
    lessons = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert run.stdout.count("wrote") == len(lessons)
    notes = 0
    for p in lessons:
        _assert_student_version(p, wb / p.name)
        notes += sum(student.is_lecturer_note(c) for c in nbformat.read(p, as_version=4).cells)
        _assert_solutions_copy(p, wb / "solutions" / p.name)
    assert notes > 100  # the lessons do carry notes for lecturers: they were left out


def _assert_solutions_copy(src_path, path):
    src = nbformat.read(src_path, as_version=4)
    sol = nbformat.read(path, as_version=4)
    assert not path.stat().st_mode & 0o222, f"{path} is writable"
    text = _code(sol)
    for line in solution_lines(src):
        assert line in text, f"{path.name}: the solution line {line!r} is missing"
    for line in hidden_lines(src):
        if line not in _code_outside_hidden(src):
            assert line not in text, f"hidden test in {path.name}: {line}"
    assert not any(student.is_lecturer_note(c) for c in sol.cells)
    kept = [c for c in src.cells if not student.is_lecturer_note(c)]
    assert [c.outputs for c in sol.cells if c.cell_type == "code"] == [
        c.outputs for c in kept if c.cell_type == "code"
    ]


def _code_outside_hidden(nb):
    import re

    return re.sub(r"### BEGIN HIDDEN TESTS\n.*?### END HIDDEN TESTS", "", _code(nb), flags=re.S)


def _fresh(src_dir, wb, python):
    return subprocess.run(
        [python, str(ROOT / "tools" / "workbook_fresh.py"), str(src_dir), str(wb)],
        capture_output=True,
        text=True,
    )


def test_the_quick_check_agrees_with_the_tool_and_imports_nothing_heavy(tmp_path, python):
    # `make lab` asks tools/workbook_fresh.py first: it must say "up to date" exactly when
    # kvstaff.student would write nothing, without importing torch or nbgrader
    src_dir, wb = tmp_path / "notebooks", tmp_path / "workbook"
    first, second = write_lessons(src_dir)
    assert _fresh(src_dir, wb, python).returncode == 1  # no copies yet
    student.main([str(src_dir), str(wb)])
    run = _fresh(src_dir, wb, python)
    assert run.returncode == 0 and "2 lesson copies" in run.stdout, run.stderr

    ran = nbformat.read(wb / second.name, as_version=4)  # running cells changes no hash
    ran.cells[1].outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    nbformat.write(ran, wb / second.name)
    assert _fresh(src_dir, wb, python).returncode == 0

    mine = nbformat.read(wb / first.name, as_version=4)  # an edit: the tool must look
    set_solution(mine, "l01-softmax-solution", "def softmax(x):\n    return x")
    nbformat.write(mine, wb / first.name)
    assert _fresh(src_dir, wb, python).returncode == 1
    (wb / first.name).unlink()
    student.main([str(src_dir), str(wb)])
    assert _fresh(src_dir, wb, python).returncode == 0

    (wb / "solutions" / second.name).unlink()  # a solutions copy gone: the tool must look
    assert _fresh(src_dir, wb, python).returncode == 1
    student.main([str(src_dir), str(wb)])
    assert _fresh(src_dir, wb, python).returncode == 0
    manifest = json.loads((wb / ".generated.json").read_text())  # copies by an older rule
    manifest[second.name]["rule"] = 1
    (wb / ".generated.json").write_text(json.dumps(manifest))
    assert _fresh(src_dir, wb, python).returncode == 1
    student.main([str(src_dir), str(wb)])

    nb = nbformat.read(second, as_version=4)  # the lesson changes: the tool must look
    nb.cells[0].source += "\n\nNew."
    nbformat.write(nb, second)
    assert _fresh(src_dir, wb, python).returncode == 1

    probe = (
        "import runpy, sys\n"
        "tool, sys.argv = sys.argv[1], sys.argv[1:]\n"
        "try:\n    runpy.run_path(tool, run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('HEAVY', sorted(m for m in ('torch', 'nbformat', 'nbgrader', 'attnlib')"
        " if m in sys.modules))\n"
    )
    run = subprocess.run(
        [python, "-c", probe, str(ROOT / "tools" / "workbook_fresh.py"), str(src_dir), str(wb)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "HEAVY []" in run.stdout, run.stdout + run.stderr
