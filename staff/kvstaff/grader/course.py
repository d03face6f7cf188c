"""The course folder and nbgrader's applications, as the grader drives them.

The course folder is the repository root (``nbgrader_config.py`` there holds the settings);
nbgrader's source folder is generated: ``build/source/<lesson>/<lesson>.ipynb`` is a copy of
``notebooks/<lesson>.ipynb`` for every lesson with graded cells (:func:`build_source`).
:func:`run_app` runs one nbgrader application (generate_assignment, autograde,
generate_feedback) on one assignment, :func:`wall_clock` bounds what may block.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import nbformat

from kvstaff.lessons import course_root, lesson_paths

SOURCE_DIR = Path("build") / "source"


def is_graded(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    return any(c.get("metadata", {}).get("nbgrader", {}).get("grade", False) for c in nb.cells)


def build_source(notebooks: Path, course: Path) -> list[str]:
    """Copy every graded lesson to build/source/<lesson>/<lesson>.ipynb; return the names.

    The copy leaves out the notes for lecturers (:func:`kvstaff.student.is_lecturer_note`):
    what nbgrader releases from it is what learners get, and a note is no grading matter.
    """
    from kvstaff.student import without_lecturer_notes

    source = Path(course) / SOURCE_DIR
    names = []
    for path in lesson_paths(notebooks):
        if not is_graded(path):
            continue
        names.append(path.stem)
        dest = source / path.stem / path.name
        lesson = without_lecturer_notes(nbformat.read(path, as_version=4))
        data = (nbformat.writes(lesson) + "\n").encode()
        if not dest.exists() or dest.read_bytes() != data:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    if source.exists():
        for stale in source.iterdir():
            if stale.is_dir() and stale.name not in names:
                shutil.rmtree(stale)
    return names


def _venv_on_path() -> None:
    # nbgrader runs the `alembic` executable of its own environment to check the gradebook
    # schema; when this runs as .venv/bin/python without an activated venv it is not on PATH.
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def load_config(course: Path, timeout: int | None = None):
    """The repository's nbgrader_config.py with the course folder set to ``course``."""
    from traitlets.config.loader import PyFileConfigLoader

    _venv_on_path()
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course_root())).load_config()
    cfg.CourseDirectory.root = str(Path(course).resolve())
    if timeout is not None:
        cfg.Execute.timeout = int(timeout)
        cfg.ResilientExecute.probe_timeout = max(2, min(10, int(timeout) // 2))
    return cfg


def db_url(cfg) -> str:
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=cfg).db_url


def run_app(app_cls, cfg, assignment: str, student: str = "*", **attrs) -> dict:
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import capture_log

    coursedir = CourseDirectory(config=cfg)
    coursedir.assignment_id = assignment
    coursedir.student_id = student
    app = app_cls(coursedir=coursedir, config=cfg)
    for k, v in attrs.items():
        setattr(app, k, v)
    return capture_log(app)


def release(course: Path, notebooks: Path, assignments: list[str] | None = None) -> list[str]:
    """Generate nbgrader releases (release/<lesson>/) for every graded lesson."""
    from nbgrader.converters import GenerateAssignment

    names = build_source(notebooks, course)
    if assignments:
        unknown = sorted(set(assignments) - set(names))
        if unknown:
            raise SystemExit(f"no graded lesson named {unknown}; graded lessons: {names}")
        names = [n for n in names if n in assignments]
    cfg = load_config(course)
    for name in names:
        result = run_app(GenerateAssignment, cfg, name, ".", force=True)
        if not result["success"]:
            print(result.get("log", ""), result.get("error", ""), file=sys.stderr)
            raise SystemExit(f"nbgrader generate_assignment {name} failed")
        print(f"released {name} -> {Path(course) / 'release' / name}")
    return names


def find_submissions(submitted: Path) -> list[tuple[str, str]]:
    """(assignment, student) for every submitted/<student>/<assignment>/ with a notebook."""
    pairs = []
    for student_dir in sorted(p for p in Path(submitted).iterdir() if p.is_dir()):
        for a_dir in sorted(p for p in student_dir.iterdir() if p.is_dir()):
            if any(a_dir.glob("*.ipynb")):
                pairs.append((a_dir.name, student_dir.name))
    return pairs


@contextlib.contextmanager
def wall_clock(seconds: int):
    """Raise TimeoutError in this (main) thread after ``seconds``: a grader that blocks
    (on a file the kernel planted, say) gives up on that submission, not on the class.
    Nested clocks: the outer one is put back (with what is left of it) afterwards."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def stop(signum, frame):
        raise TimeoutError(f"grading this submission took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    outer = signal.alarm(seconds)
    t0 = time.monotonic()
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.alarm(max(1, outer - int(time.monotonic() - t0)))


def validate(course: Path, notebooks: Path, echo=print) -> bool:
    """``nbgrader validate`` on every graded source lesson, ``--invert`` on every release."""
    from nbgrader.validator import Validator

    course = Path(course).resolve()
    cfg = load_config(course)
    ok = True
    for name in build_source(notebooks, course):
        for path, invert in (
            (Path(notebooks) / f"{name}.ipynb", False),
            (course / "release" / name / f"{name}.ipynb", True),
        ):
            if invert and not path.exists():
                echo(f"skip {path}: not released (run make release)")
                continue
            v = Validator(config=cfg)
            v.invert = invert
            result = v.validate(str(path))
            label = "validate --invert" if invert else "validate"
            echo(f"{'ok' if not result else 'FAILED'}: nbgrader {label} {path}")
            if result:
                ok = False
                echo(json.dumps(result, indent=1)[:2000])
    return ok
