"""Graded exercises with nbgrader: release, autograde, export, feedback — for course staff.

    python -m attnlib.course.gradebook release      # build/source from notebooks/, then release/
    python -m attnlib.course.gradebook autograde    # grade submitted/<student>/<lesson>/, export
    python -m attnlib.course.gradebook export       # gradebook CSV [--to F.csv], review flags
    python -m attnlib.course.gradebook feedback     # feedback/<student>/<lesson>/<lesson>.html
    python -m attnlib.course.gradebook validate     # nbgrader validate on every source lesson,
                                                    # validate --invert on every release

``make release``, ``make autograde`` and ``make feedback`` call these. The course folder is
the repository root (``nbgrader_config.py`` there holds the settings); nbgrader's source
folder is generated: ``build/source/<lesson>/<lesson>.ipynb`` is a copy of
``notebooks/<lesson>.ipynb`` for every lesson with graded cells (one assignment per
lesson, named like the notebook, e.g. ``03_attention``). Nothing is kept twice by hand.

What this adds to plain nbgrader (each point has a test in ``tests/test_grading.py``):

* :class:`ResilientExecute` — a cell that times out is interrupted; if the kernel stays
  stuck (a loop that swallows ``KeyboardInterrupt``) or dies (``os._exit``, a crash), the
  kernel is restarted, the cells that ran before are run again, and grading goes on, so
  the other exercises are still graded. The cell gets an error output saying what
  happened. It also calls :func:`attnlib.checks.grading.snapshot` at kernel start.
* :class:`StderrIsNotFailure` — nbgrader scores a test cell that wrote to stderr as
  failed; a library warning from a correct solution must not cost points, so stderr in
  graded test cells is shown as ordinary output (errors still fail the cell).
* :class:`ShortenHiddenTracebacks` — feedback shows no hidden-test source: tracebacks of
  cells with hidden tests are cut to their last line (with ``ClearHiddenTests``).
* The driver audits every submission outside the kernel: the learner-editable cells are
  parsed and anything that touches the testing machinery (assigning to attributes of
  numpy, torch, attnlib or builtins, ``setattr``, classes defining ``__eq__``, calls of
  the references, ``sys.settrace``...) flags the submission for manual review, as do the
  ``[needs-review]`` and ``[calls-reference]`` messages of the hidden tests.
* A submission that cannot be graded at all is reported on the console and in the CSV
  (status ``NOT GRADED``, empty score — never a silent zero); the other students'
  grades are kept.
* :class:`CourseCsvExport` — nbgrader's CSV plus ``status``, ``needs_review`` and
  ``notes`` columns; ``nbgrader export`` uses it too.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import os
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbclient.exceptions import DeadKernelError
from nbgrader.plugins import ExportPlugin
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Integer

from attnlib.course.lessons import course_root, lesson_paths

REPORT_NAME = "grading_report.json"
SOURCE_DIR = Path("build") / "source"

TIMEOUT_ENAME = "CellTimeoutError"
DIED_ENAME = "KernelDied"
RESTART_ENAME = "KernelRestarted"
TAMPER_TAG = "[needs-review]"  # the same tags as attnlib.checks.grading
REFERENCE_TAG = "[calls-reference]"

_SNAPSHOT_CODE = "__import__('attnlib.checks.grading', fromlist=['_']).snapshot()"


# ----------------------------------------------------------------------------------------
# nbgrader preprocessors (configured in nbgrader_config.py)
# ----------------------------------------------------------------------------------------


def _error_output(ename: str, evalue: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output(
        "error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]
    )


class ResilientExecute(Execute):
    """nbgrader's ``Execute``, recovering from a stuck or dead kernel.

    After a cell times out, a probe (``pass``) checks that the interrupt brought the
    kernel back. If it did not, or if the kernel died, the kernel is restarted, the code
    cells that completed before are run again (their new outputs discarded) and grading
    continues with the next cell. If the replay itself fails, the submission fails as in
    plain nbgrader (and the driver reports it as NOT GRADED).
    """

    probe_timeout = Integer(10, help="Seconds a probe may take after a timeout").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._completed: list[int] = []
        self._started = False
        return super().preprocess(nb, resources, km)

    def _run_quietly(self, source: str, index: int, timeout: int | None) -> nbformat.NotebookNode:
        cell = nbformat.v4.new_code_cell(source)
        saved, original = self.timeout, self.nb.cells[index]
        self.timeout = timeout
        try:
            self.execute_cell(cell, index, store_history=False)
        finally:
            self.timeout = saved
            self.nb.cells[index] = original  # nbclient stores the executed cell at index
        return cell

    @staticmethod
    def _timed_out(cell) -> bool:
        return any(
            o.get("output_type") == "error" and o.get("ename") == TIMEOUT_ENAME
            for o in cell.get("outputs", [])
        )

    def _restart_and_replay(self, index: int) -> None:
        from jupyter_core.utils import run_sync

        self.log.warning(
            "Restarting the kernel after cell %d and replaying %d cells",
            index,
            len(self._completed),
        )
        run_sync(self.km.restart_kernel)(now=True)
        run_sync(self.kc.wait_for_ready)(timeout=self.startup_timeout)
        self._run_quietly(_SNAPSHOT_CODE, index, self.startup_timeout)
        for i in self._completed:
            replay = self._run_quietly(self.nb.cells[i].source, i, self.timeout)
            if self._timed_out(replay):
                raise RuntimeError(f"replaying cell {i} after a kernel restart timed out")

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if not self._started:
            self._started = True
            # imports numpy, torch and attnlib: may take longer than a cell's limit on a busy
            # machine, so it gets the kernel start-up allowance
            self._run_quietly(_SNAPSHOT_CODE, index, self.startup_timeout)
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self.log.error("The kernel died while running cell %d", index)
            cell.outputs.append(
                _error_output(
                    DIED_ENAME,
                    "the kernel died while running this cell (os._exit, a crash or running out "
                    "of memory); it was restarted, the cells above were run again, and grading "
                    "went on. This cell scores 0.",
                )
            )
            self._restart_and_replay(index)
            return cell, self.resources
        if self._timed_out(cell):
            probe = self._run_quietly("pass", index, self.probe_timeout)
            if self._timed_out(probe):
                self.log.error("Cell %d timed out and the kernel ignored the interrupt", index)
                cell.outputs.append(
                    _error_output(
                        RESTART_ENAME,
                        "this cell ran past the time limit and ignored the interrupt; the kernel "
                        "was restarted, the cells above were run again, and grading went on.",
                    )
                )
                self._restart_and_replay(index)
            return cell, self.resources
        self._completed.append(index)
        return cell, self.resources


def _is_test_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and meta.get("grade", False) and not meta.get("solution", False)


class StderrIsNotFailure(NbGraderPreprocessor):
    """Show stderr of graded test cells as ordinary output, so it does not score 0.

    nbgrader fails a test cell with any stderr output; in this course a test fails by
    raising, and a warning printed by a library on a correct solution must not cost points.
    """

    def preprocess_cell(self, cell, resources, index):
        if _is_test_cell(cell):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream" and out.get("name") == "stderr":
                    out["name"] = "stdout"
                    out["text"] = "".join(f"[stderr] {line}\n" for line in out["text"].splitlines())
        return cell, resources


class ShortenHiddenTracebacks(NbGraderPreprocessor):
    """Cut tracebacks of cells with hidden tests to their last line (for feedback).

    IPython's traceback quotes the lines around the failing call, which can be hidden-test
    lines. Runs before ``ClearHiddenTests`` (which needs the markers to find the region).
    """

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and "BEGIN HIDDEN TESTS" in cell.source:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources


# ----------------------------------------------------------------------------------------
# The course folder
# ----------------------------------------------------------------------------------------


def is_graded(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    return any(c.get("metadata", {}).get("nbgrader", {}).get("grade", False) for c in nb.cells)


def build_source(notebooks: Path, course: Path) -> list[str]:
    """Copy every graded lesson to build/source/<lesson>/<lesson>.ipynb; return the names."""
    source = Path(course) / SOURCE_DIR
    names = []
    for path in lesson_paths(notebooks):
        if not is_graded(path):
            continue
        names.append(path.stem)
        dest = source / path.stem / path.name
        data = path.read_bytes()
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
        cfg.ResilientExecute.probe_timeout = min(10, int(timeout))
    return cfg


def _db_url(cfg) -> str:
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=cfg).db_url


def _run_app(app_cls, cfg, assignment: str, student: str = "*", **attrs) -> dict:
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
        result = _run_app(GenerateAssignment, cfg, name, ".", force=True)
        if not result["success"]:
            print(result.get("log", ""), result.get("error", ""), file=sys.stderr)
            raise SystemExit(f"nbgrader generate_assignment {name} failed")
        print(f"released {name} -> {Path(course) / 'release' / name}")
    return names


# ----------------------------------------------------------------------------------------
# Auditing a submission outside the kernel
# ----------------------------------------------------------------------------------------

_WATCHED_MODULES = {
    "np",
    "numpy",
    "torch",
    "attnlib",
    "checks",
    "grading",
    "builtins",
    "sys",
    "math",
    "warnings",
    "importlib",
    "nbgrader",
    "IPython",
    "os",
    "F",
    "nn",
    "testing",
}
_SUSPICIOUS_CALLS = {
    "setattr",
    "delattr",
    "exec",
    "eval",
    "compile",
    "__import__",
    "globals",
    "vars",
}
_SUSPICIOUS_ATTRS = {
    "settrace",
    "setprofile",
    "_getframe",
    "currentframe",
    "f_back",
    "f_globals",
    "f_locals",
    "__builtins__",
    "__globals__",
    "__code__",
    "__dict__",
    "__class__",
    "_exit",
    "modules",
    "_SNAPSHOT",
    "_REGISTRY",
}
_SUSPICIOUS_IMPORTS = {"builtins", "ctypes", "gc", "importlib", "unittest", "inspect", "signal"}
_LYING_DUNDERS = {
    "__eq__",
    "__ne__",
    "__array__",
    "__array_ufunc__",
    "__array_function__",
    "__torch_function__",
    "__float__",
    "__bool__",
    "__getattr__",
    "__getattribute__",
}


def _root_name(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"


def audit_code(source: str, forbidden: set[str]) -> list[str]:
    """Reasons to look at this learner code by hand (empty if nothing is suspicious)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - IPython missing or odd input: parse as it is
        pass
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    modules = set(_WATCHED_MODULES)
    for node in ast.walk(tree):  # aliases: import numpy as xp
        if isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in {"numpy", "torch", "attnlib"}:
                modules |= {a.asname or a.name for a in node.names}
    reasons: list[str] = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            if isinstance(t, (ast.Attribute, ast.Subscript)) and _root_name(t) in modules:
                reasons.append(f"assigns to {_dotted(t)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in _SUSPICIOUS_CALLS:
                reasons.append(f"calls {node.func.id}()")
        if isinstance(node, ast.Attribute):
            if node.attr in _SUSPICIOUS_ATTRS:
                reasons.append(f"uses {_dotted(node)}")
            if node.attr in forbidden and _root_name(node) in modules:
                reasons.append(f"uses {_dotted(node)} (a course reference)")
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            reasons.append("uses __builtins__")
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "attnlib":
                used = [a.name for a in node.names if a.name in forbidden or a.name == "*"]
                if used:
                    reasons.append(
                        f"imports {', '.join(used)} from {node.module} (a course reference)"
                    )
            if node.module.split(".")[0] in _SUSPICIOUS_IMPORTS:
                reasons.append(f"imports from {node.module}")
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in _SUSPICIOUS_IMPORTS:
                    reasons.append(f"imports {a.name}")
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in _LYING_DUNDERS:
                    reasons.append(f"defines {node.name}.{item.name}")
    return list(dict.fromkeys(reasons))


_CHECK_CALL = re.compile(r"""checks\.check(?:_hidden)?\(\s*["'](\w+)["']""")


def _forbidden_names(exercises: set[str] | None = None) -> set[str]:
    """Last names of the references the given exercises (default: all) forbid calling."""
    from attnlib import checks

    known = set(checks.exercises())
    names = set()
    for name in sorted(known if not exercises else exercises & known):
        names |= {d.rsplit(".", 1)[1] for d in checks.get_exercise(name).forbidden}
    return names


def audit_notebook(submitted: Path, released: Path | None) -> list[str]:
    """Audit the cells of a submitted notebook that the learner wrote or changed."""
    try:
        nb = nbformat.read(submitted, as_version=4)
    except Exception as err:  # noqa: BLE001
        return [f"the submitted notebook cannot be read: {err}"]
    unchanged = set()
    exercises: set[str] = set()
    if released is not None and released.exists():
        rel = nbformat.read(released, as_version=4)
        unchanged = {
            c.source
            for c in rel.cells
            if c.cell_type == "code"
            and not c.get("metadata", {}).get("nbgrader", {}).get("solution")
        }
        for c in rel.cells:  # the exercises this lesson checks
            exercises |= set(_CHECK_CALL.findall(c.source))
    forbidden = _forbidden_names(exercises)
    reasons = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("locked") and not meta.get("solution"):
            continue  # nbgrader restores locked cells from the gradebook
        if not meta.get("solution") and cell.source in unchanged:
            continue
        where = meta.get("grade_id", "an added or changed cell")
        reasons += [f"{where}: {r}" for r in audit_code(cell.source, forbidden)]
    return reasons


# ----------------------------------------------------------------------------------------
# Autograding
# ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What happened to one submission."""

    assignment: str
    student: str
    status: str = "graded"  # graded | graded with problems | NOT GRADED
    score: float | None = None
    max_score: float | None = None
    needs_review: bool = False
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _scan_autograded(path: Path, outcome: Outcome) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        where = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or "a cell"
        for out in cell.get("outputs", []):
            if out.get("output_type") != "error":
                continue
            ename, evalue = out.get("ename", ""), str(out.get("evalue", ""))
            if ename == TIMEOUT_ENAME:
                outcome.notes.append(f"{where}: timed out")
            elif ename == DIED_ENAME:
                outcome.notes.append(f"{where}: the kernel died (restarted, rest graded)")
            elif ename == RESTART_ENAME:
                outcome.notes.append(f"{where}: stuck after the timeout (restarted, rest graded)")
            if TAMPER_TAG in evalue:
                outcome.needs_review = True
                outcome.notes.append(f"{where}: hidden test found tampering: {evalue[:1200]}")
            elif REFERENCE_TAG in evalue or "calls the course's reference" in evalue:
                outcome.needs_review = True
                outcome.notes.append(f"{where}: calls the course reference")


def _scores(course: Path, cfg, assignment: str, student: str) -> tuple[float | None, float | None]:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(_db_url(cfg)) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return None, None
        return float(sub.score), float(sub.max_score)


def _read_report(course: Path) -> dict:
    path = Path(course) / REPORT_NAME
    return json.loads(path.read_text()) if path.exists() else {}


def _write_report(course: Path, outcomes: list[Outcome]) -> None:
    report = _read_report(course)
    for o in outcomes:
        report.setdefault(o.assignment, {})[o.student] = asdict(o)
    (Path(course) / REPORT_NAME).write_text(json.dumps(report, indent=1, sort_keys=True))


def find_submissions(submitted: Path) -> list[tuple[str, str]]:
    """(assignment, student) for every submitted/<student>/<assignment>/ with a notebook."""
    pairs = []
    for student_dir in sorted(p for p in Path(submitted).iterdir() if p.is_dir()):
        for a_dir in sorted(p for p in student_dir.iterdir() if p.is_dir()):
            if any(a_dir.glob("*.ipynb")):
                pairs.append((a_dir.name, student_dir.name))
    return pairs


def autograde(
    course: Path,
    notebooks: Path,
    *,
    timeout: int | None = None,
    students: list[str] | None = None,
    assignments: list[str] | None = None,
    to: Path | None = None,
    echo=print,
) -> list[Outcome]:
    """Grade every submission under <course>/submitted, write the report and the CSV."""
    from nbgrader.api import Gradebook
    from nbgrader.converters import Autograde, GenerateAssignment

    course = Path(course).resolve()
    submitted = course / "submitted"
    if not submitted.exists():
        raise SystemExit(
            f"no submissions: {submitted} does not exist (layout: "
            f"submitted/<student>/<lesson>/<lesson>.ipynb)"
        )
    names = build_source(notebooks, course)
    cfg = load_config(course, timeout)
    pairs = [
        (a, s)
        for a, s in find_submissions(submitted)
        if (not students or s in students) and (not assignments or a in assignments)
    ]
    with Gradebook(_db_url(cfg)) as gb:
        known = {a.name for a in gb.assignments}
    logs = course / "build" / "logs"
    outcomes = []
    t_all = time.perf_counter()
    for assignment in sorted({a for a, _ in pairs}):
        if assignment not in names:
            for a, s in pairs:
                if a == assignment:
                    o = Outcome(a, s, status="NOT GRADED", notes=[f"no graded lesson named {a}"])
                    outcomes.append(o)
                    echo(f"NOT GRADED {s}/{a}: there is no graded lesson of that name")
            continue
        if assignment not in known:  # released elsewhere: create it in this gradebook
            result = _run_app(GenerateAssignment, cfg, assignment, ".", force=True)
            if not result["success"]:
                raise SystemExit(
                    f"nbgrader generate_assignment {assignment} failed:\n{result.get('error', '')}"
                )
        for a, student in [(a, s) for a, s in pairs if a == assignment]:
            t0 = time.perf_counter()
            o = Outcome(a, student)
            result = _run_app(Autograde, cfg, a, student, force=True, create_student=True)
            o.seconds = round(time.perf_counter() - t0, 2)
            log_path = logs / a / f"{student}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(result.get("log", "") + "\n" + result.get("error", ""))
            nb_path = course / "autograded" / student / a / f"{a}.ipynb"
            if not result["success"] or not nb_path.exists():
                o.status = "NOT GRADED"
                o.needs_review = True
                last = (result.get("error") or "").strip().splitlines()[-1:] or ["unknown error"]
                o.notes.append(f"autograde failed ({last[0][:200]}); log: {log_path}")
            else:
                _scan_autograded(nb_path, o)
                o.score, o.max_score = _scores(course, cfg, a, student)
                if o.notes:
                    o.status = "graded with problems"
            release_nb = course / "release" / a / f"{a}.ipynb"
            reasons = audit_notebook(submitted / student / a / f"{a}.ipynb", release_nb)
            if reasons:
                o.needs_review = True
                o.notes += [f"audit: {r}" for r in reasons]
            outcomes.append(o)
            score = "-" if o.score is None else f"{o.score:g}/{o.max_score:g}"
            flag = "  REVIEW" if o.needs_review else ""
            echo(f"{o.status:>20}  {student}/{a}  {score}  {o.seconds:.1f} s{flag}")
            for n in o.notes:
                echo(f"{'':>22}- {n}")
    _write_report(course, outcomes)
    total = time.perf_counter() - t_all
    if outcomes:
        echo(
            f"graded {len(outcomes)} submission(s) in {total:.1f} s "
            f"({total / len(outcomes):.1f} s each)"
        )
    export(course, to=to, echo=echo)
    return outcomes


# ----------------------------------------------------------------------------------------
# Export and feedback
# ----------------------------------------------------------------------------------------

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
    "notes",
    "last_name",
    "first_name",
    "email",
    "duedate",
]


def _csv_rows(gradebook, report: dict, students=(), assignments=()) -> list[dict]:
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
                notes="",
            )
            if info:
                row["status"] = info["status"]
                row["needs_review"] = "yes" if info["needs_review"] else "no"
                row["notes"] = " | ".join(info["notes"])
                if info["status"] == "NOT GRADED":
                    row.update(score="", raw_score="", late_submission_penalty="")
            rows.append(row)
    return rows


class CourseCsvExport(ExportPlugin):
    """nbgrader's CSV export plus ``status``, ``needs_review`` and ``notes``.

    A submission the autograder could not grade has status ``NOT GRADED`` and an empty
    score, never a zero. Reads ``grading_report.json`` from the course folder (the
    current directory when run as ``nbgrader export``).
    """

    def export(self, gradebook) -> None:
        dest = Path(self.to or "grades.csv")
        report = _read_report(Path.cwd())
        rows = _csv_rows(gradebook, report, self.student, self.assignment)
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
    with Gradebook(_db_url(cfg)) as gb:
        rows = _csv_rows(gb, _read_report(course))
    with open(dest, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_KEYS)
        writer.writeheader()
        writer.writerows(rows)
    review = sum(r["needs_review"] == "yes" for r in rows)
    failed = sum(r["status"] == "NOT GRADED" for r in rows)
    echo(f"exported {len(rows)} rows to {dest} ({failed} not graded, {review} to review)")
    return dest


def feedback(course: Path, echo=print) -> list[Path]:
    """Feedback HTML (no hidden tests) for every autograded submission."""
    from nbgrader.converters import GenerateFeedback

    course = Path(course).resolve()
    cfg = load_config(course)
    autograded = course / "autograded"
    written = []
    if not autograded.exists():
        raise SystemExit(f"nothing to give feedback on: {autograded} does not exist")
    for a, s in find_submissions(autograded):
        result = _run_app(GenerateFeedback, cfg, a, s, force=True)
        if not result["success"]:
            echo(f"feedback for {s}/{a} failed:\n{result.get('error', '')}")
            continue
        written += sorted((course / "feedback" / s / a).glob("*.html"))
    echo(f"wrote {len(written)} feedback file(s) under {course / 'feedback'}")
    return written


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnlib.course.gradebook",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command", choices=["build", "release", "autograde", "export", "feedback", "validate"]
    )
    parser.add_argument("names", nargs="*", help="lessons (default: every graded lesson)")
    parser.add_argument("--course", type=Path, default=None, help="nbgrader course folder")
    parser.add_argument("--notebooks", type=Path, default=None, help="default: COURSE/notebooks")
    parser.add_argument("--timeout", type=int, default=None, help="seconds per cell")
    parser.add_argument("--student", action="append", default=None, help="only this student")
    parser.add_argument("--to", type=Path, default=None, help="CSV file (default grades.csv)")
    args = parser.parse_args(argv)
    if args.course is None:
        args.course = course_root()
    if args.notebooks is None:
        args.notebooks = args.course / "notebooks"
    if args.command == "build":
        for n in build_source(args.notebooks, args.course):
            print(n)
    elif args.command == "release":
        release(args.course, args.notebooks, args.names or None)
    elif args.command == "autograde":
        outcomes = autograde(
            args.course,
            args.notebooks,
            timeout=args.timeout,
            students=args.student,
            assignments=args.names or None,
            to=args.to,
        )
        return 1 if any(o.status == "NOT GRADED" for o in outcomes) else 0
    elif args.command == "export":
        export(args.course, args.to)
    elif args.command == "feedback":
        feedback(args.course)
    elif args.command == "validate":
        return 0 if validate(args.course, args.notebooks) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
