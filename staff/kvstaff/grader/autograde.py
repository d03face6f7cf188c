"""The class run: every submission graded in its sandbox, in parallel, then judged and audited.

:func:`autograde` grades every ``submitted/<student>/<lesson>/`` with nbgrader's Autograde
(one worker process per core, each kernel in its own sandbox, the largest notebooks
first), under a wall clock per submission. In the worker that graded it, a submission is
audited (:func:`timed_audit`, under its own wall clock; a submission nbgrader could not
grade is not audited). In the parent, :func:`finish` reads the verdicts the grader wrote
into the notebook, nbgrader's log and the audit into an :class:`Outcome`: a flagged
submission's score is left empty (``FLAGGED``), one that could not be graded is
``NOT GRADED`` — never a silent zero — and the others' grades are kept. Writes to
gradebook.db are serialised across workers by a file lock (:class:`GradebookLock`).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import threading
import time
from pathlib import Path

import nbformat

from attnlib._backend import type_name
from attnlib.checks.protocol import LIBRARY_EQUIVALENT, REFERENCE_TAG, TAMPER_TAG
from kvstaff.grader import shards
from kvstaff.grader.audit import audit_notebook, log_findings
from kvstaff.grader.course import (
    SOURCE_DIR,
    build_source,
    db_url,
    find_submissions,
    load_config,
    run_app,
    wall_clock,
)
from kvstaff.grader.execution import (
    DIED_ENAME,
    OUTPUT_CAPPED,
    RESTART_ENAME,
    TIMEOUT_ENAME,
)
from kvstaff.grader.export import (
    SANDBOXED,
    UNSAFE,
    Outcome,
    export,
    printable,
    write_report,
)
from kvstaff.grader.sandbox import inspect_submission
from kvstaff.grader.sandbox import unavailable as sandbox_unavailable

# A check's diagnosis is the last line of the error it raises: the same line in a graded
# test cell's printed output was printed by the learner's code, imitating the checks.
_PRINTED_DIAGNOSIS = re.compile(r"^Diagnosis for \w+:", re.M)


def _printed_text(out) -> str:
    if out.get("output_type") == "stream":
        return str(out.get("text", ""))
    return str((out.get("data") or {}).get("text/plain", ""))


def _scan_autograded(path: Path, outcome: Outcome) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        where = meta.get("grade_id") or "a cell"
        test_cell = meta.get("grade") and not meta.get("solution")
        imitated = False
        for out in cell.get("outputs", []):
            if OUTPUT_CAPPED in str((out.get("data") or {}).get("text/plain", "")):
                outcome.needs_review = True
                outcome.notes.append(f"{where}: printed more output than the grader keeps (cut)")
            if test_cell and not imitated and out.get("output_type") != "error":
                if _PRINTED_DIAGNOSIS.search(_printed_text(out)):
                    imitated = outcome.needs_review = True
                    outcome.notes.append(
                        f"{where}: printed a 'Diagnosis for ...' line, which only a failing "
                        "check writes (in its error): the learner's code imitates the checks"
                    )
            if out.get("output_type") != "error":
                continue
            ename, evalue = out.get("ename", ""), str(out.get("evalue", ""))
            if ename == TIMEOUT_ENAME:
                outcome.notes.append(f"{where}: timed out")
            elif ename == DIED_ENAME:
                outcome.notes.append(f"{where}: the kernel died (restarted, rest graded)")
            elif ename == RESTART_ENAME:
                outcome.notes.append(f"{where}: stuck after the timeout (restarted, rest graded)")
            for line in evalue.splitlines():
                if TAMPER_TAG in line or "Leave the checks alone" in line:
                    outcome.needs_review = True
                    outcome.notes.append(f"{where}: hidden test found tampering: {line[:1200]}")
                elif (
                    REFERENCE_TAG in line
                    or "calls the course's reference" in line
                    or LIBRARY_EQUIVALENT in line
                ):
                    outcome.needs_review = True
                    what = (
                        "a library equivalent"
                        if "library function" in line
                        else "the course reference"
                    )
                    outcome.notes.append(f"{where}: calls {what}: {line[:600]}")


def _scores(course: Path, cfg, assignment: str, student: str) -> tuple[float | None, float | None]:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url(cfg)) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return None, None
        return float(sub.score), float(sub.max_score)


class GradebookLock:
    """One writer at a time on gradebook.db across the grading workers (a file lock).

    Installed into nbgrader's ``Gradebook`` (held from opening a gradebook to closing it;
    nbgrader's preprocessors open it only around their reads and writes, never while a
    kernel runs), so SQLite never sees two writers.
    """

    def __init__(self, path: Path):
        self.path, self.fd, self.depth = Path(path), None, 0
        self.mutex = threading.RLock()

    def acquire(self) -> None:
        self.mutex.acquire()
        if self.depth == 0:
            self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.depth += 1

    def release(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
        self.mutex.release()

    def install(self) -> None:
        from nbgrader.api import Gradebook

        if getattr(Gradebook, "_key_vectors_lock", None) is not None:
            Gradebook._key_vectors_lock = self
            return
        init, close = Gradebook.__init__, Gradebook.close

        def locked_init(gb, *args, **kwargs):
            lock = Gradebook._key_vectors_lock
            lock.acquire()
            try:
                init(gb, *args, **kwargs)
            except BaseException:
                lock.release()
                raise
            gb._key_vectors_held = lock

        def locked_close(gb):
            try:
                close(gb)
            finally:
                lock = gb.__dict__.pop("_key_vectors_held", None)
                if lock is not None:
                    lock.release()

        Gradebook.__init__, Gradebook.close = locked_init, locked_close
        Gradebook._key_vectors_lock = self


_WORKER: dict = {}


def _worker_init(counter, lock_path: str) -> None:
    with counter.get_lock():
        _WORKER["slot"] = counter.value
        counter.value += 1
    GradebookLock(Path(lock_path)).install()


def grade_one(
    course: str,
    assignment: str,
    student: str,
    timeout,
    sandbox: str,
    threads: int,
    slot=None,
    gradebook: str | None = None,
) -> dict:
    """Run nbgrader's Autograde on one submission (in a worker process or in this one),
    into the class's gradebook or the one named by the URL ``gradebook`` (a shard's)."""
    from nbgrader.converters import Autograde

    if isinstance(timeout, dict):  # per lesson, with a default under None
        timeout = timeout.get(assignment, timeout.get(None))
    cfg = load_config(Path(course), timeout)
    if gradebook:
        cfg.CourseDirectory.db_url = gradebook
    cfg.ResilientExecute.sandbox = sandbox
    cfg.ResilientExecute.sandbox_slot = _WORKER.get("slot", 0) if slot is None else slot
    cfg.ResilientExecute.kernel_threads = threads
    t0 = time.perf_counter()
    # Before nbgrader copies anything (its copy follows symlinks, as the staff user):
    # links, FIFOs and devices refuse the submission; other extra files flag it.
    refuse, review = inspect_submission(Path(course) / "submitted" / student / assignment)
    if refuse:
        result = {"success": False, "error": "refused: " + "; ".join(refuse)[:1500]}
    else:
        with wall_clock(WALL_LIMIT):
            result = run_app(Autograde, cfg, assignment, student, force=True, create_student=True)
    course = Path(course)
    graded = course / "autograded" / student / assignment / f"{assignment}.ipynb"
    source = course / SOURCE_DIR / assignment / f"{assignment}.ipynb"
    # in the worker, not in the parent that collects the results: a slow audit costs this
    # submission its own time, never the class's; a submission nbgrader could not grade
    # is not audited (its status says so already)
    audit = timed_audit(graded, source) if result.get("success") and graded.exists() else []
    return {
        "assignment": assignment,
        "student": student,
        "success": bool(result.get("success")),
        "log": result.get("log", "") or "",
        "error": result.get("error", "") or "",
        "seconds": round(time.perf_counter() - t0, 2),
        "review": review,
        "audit": audit,
    }


AUDIT_LIMIT = 120  # seconds the source audit of one submission may take


def timed_audit(graded: Path, source: Path, seconds: int | None = None, audit=None) -> list[str]:
    """:func:`audit_notebook` under a wall clock: past it, a finding that says so.

    The audit is linear in the notebook's size, but a notebook of megabytes of code still
    takes its time: past ``seconds`` (default :data:`AUDIT_LIMIT`) the submission is
    flagged for a person to read, and the class goes on.
    """
    seconds = AUDIT_LIMIT if seconds is None else seconds
    try:
        with wall_clock(seconds):
            return (audit or audit_notebook)(graded, source)
    except TimeoutError:
        return [
            f"the audit stopped after {seconds} s (a very large notebook): a person must read it"
        ]


WALL_LIMIT = 1800  # seconds one submission may take in all, whatever its kernel does


def finish(course: Path, cfg, result: dict, sandbox: str) -> Outcome:
    """Everything after nbgrader ran, in the grader: scores, verdict scan, audit, status."""
    a, student = result["assignment"], result["student"]
    o = Outcome(a, student, seconds=result["seconds"])
    o.sandbox = SANDBOXED if sandbox == "bwrap" else UNSAFE
    log_path = course / "build" / "logs" / a / f"{student}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(result["log"] + "\n" + result["error"])
    nb_path = course / "autograded" / student / a / f"{a}.ipynb"
    if not result["success"] or not nb_path.exists():
        o.status = "NOT GRADED"
        o.needs_review = True
        last = result["error"].strip().splitlines()[-1:] or ["unknown error"]
        o.notes.append(f"autograde failed ({last[0][:200]}); log: {log_path}")
    else:
        _scan_autograded(nb_path, o)
        o.score, o.max_score = _scores(course, cfg, a, student)
    review, notes = log_findings(result["log"])
    review += [f"submission: {r}" for r in result.get("review", [])]
    o.notes += [f"nbgrader: {n}" for n in notes]
    if review:
        o.needs_review = True
        o.notes += [r if r.startswith("submission: ") else f"nbgrader: {r}" for r in review]
    reasons = result.get("audit", [])  # made in the worker (only for graded submissions)
    if reasons:
        o.needs_review = True
        o.notes += [f"audit: {r}" for r in reasons]
    if sandbox != "bwrap":
        o.notes.append(
            "graded WITHOUT a sandbox (--unsafe-no-sandbox): its kernel could reach the "
            "course folder"
        )
    troubled = any(k in n for n in o.notes for k in ("timed out", "kernel died", "stuck after"))
    if o.status != "NOT GRADED":
        if o.needs_review:  # never a number: a person decides
            o.status, o.auto_score, o.score = "FLAGGED", o.score, None
        elif troubled:
            o.status = "graded with problems"
    return o


def _bar(done: int, total: int, width: int = 24) -> str:
    filled = round(width * done / max(total, 1))
    return f"[{'#' * filled}{'.' * (width - filled)}] {done:>{len(str(total))}}/{total}"


def kernel_threads(jobs: int) -> int:
    """Threads each learner's kernel may use (0: torch's default).

    ``OMP_NUM_THREADS`` of the grader's own environment when it is set (the staff member,
    or a test run that shares the machine, chose it), else the cores shared out among the
    ``jobs`` at once; one job alone keeps the default.
    """
    chosen = os.environ.get("OMP_NUM_THREADS", "")
    if chosen.isdigit() and int(chosen) > 0:
        return int(chosen)
    return max(1, default_jobs() // jobs) if jobs > 1 else 0


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


def refresh_bytecode() -> None:
    """Rebuild attnlib's ``__pycache__`` from its sources before grading.

    A sandboxed kernel cannot write bytecode (the course is read-only in the sandbox), but
    an earlier unsandboxed run could have planted some; recompiling every module overwrites
    it, and the kernels then load this trusted bytecode instead of compiling attnlib each.
    """
    import compileall

    import attnlib

    for pkg in attnlib.__path__:
        for cache in Path(pkg).rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)
        try:
            compileall.compile_dir(pkg, quiet=2, force=True)
        except OSError:  # a read-only installation: nothing could have been planted there
            pass


def _sandbox_fix(why: str) -> str:
    """What to do about the sandbox's refusal ``why`` (only blames namespaces when it is)."""
    if "not installed" in why or "needs Linux" in why:
        return (
            "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; see "
            "tools/ensure_bubblewrap.sh)"
        )
    if "cannot be imported inside the sandbox" in why or "could not use the path" in why:
        return (
            "The sandbox binds the venv and attnlib at their real paths: install attnlib "
            "(pip install -e .) from this checkout into this venv, or grade with that "
            "checkout's venv; `python -m kvstaff.sandbox` shows what it binds"
        )
    if any(k in why.lower() for k in ("namespace", "uid map", "operation not permitted")):
        return (
            "bubblewrap is installed but this system refuses its user namespaces (in a "
            "container: user namespaces, seccomp); `python -m kvstaff.sandbox` "
            "shows what it tried"
        )
    return (
        "bubblewrap is installed but could not start a sandbox here; "
        "`python -m kvstaff.sandbox` shows what it tried"
    )


def autograde(
    course: Path,
    notebooks: Path,
    *,
    timeout: int | None = None,
    students: list[str] | None = None,
    assignments: list[str] | None = None,
    to: Path | None = None,
    echo=print,
    jobs: int | None = None,
    unsafe_no_sandbox: bool = False,
    timeouts: dict[str, int] | None = None,
    shard: tuple[int, int] | None = None,
) -> list[Outcome]:
    """Grade every submission under <course>/submitted, write the report and the CSV.

    ``jobs`` submissions are graded at once (default: one per core), each in its own
    sandbox, the largest notebooks first (so that no long one is left for the end while
    the other workers idle). ``timeout`` is the time limit per cell (default: the
    config's), ``timeouts`` a limit per lesson that overrides it. Without bubblewrap this
    refuses unless ``unsafe_no_sandbox``. ``shard=(K, N)`` grades only the learners of
    shard K of N, into that shard's own gradebook, report and CSV (:mod:`.shards`).
    """
    course = Path(course).resolve()
    submitted = course / "submitted"
    if not submitted.exists():
        raise SystemExit(
            f"no submissions: {submitted} does not exist (layout: "
            f"submitted/<student>/<lesson>/<lesson>.ipynb)"
        )
    _refuse_without_sandbox(unsafe_no_sandbox)
    sandbox = "none" if unsafe_no_sandbox else "bwrap"
    refresh_bytecode()
    cfg = load_config(course, timeout)
    part = shards.start(course, cfg, assignments, *shard) if shard else None
    if part:  # its own gradebook (a copy of the class's), report and CSV
        cfg.CourseDirectory.db_url = part.db_url
        students = part.learners(submitted, students)
    outcomes: list[Outcome] = []
    tasks = _tasks(course, notebooks, cfg, students, assignments, outcomes, echo, part)
    if timeouts:
        timeout = {None: timeout, **timeouts}
    jobs = max(1, min(jobs or default_jobs(), len(tasks) or 1))
    t_all = time.perf_counter()
    report_dir = part.folder if part else course

    def done(result: dict) -> None:
        outcomes.append(
            _report_one(course, cfg, result, sandbox, outcomes, len(tasks), echo, report_dir)
        )

    _run_all(course, tasks, timeout, sandbox, jobs, done, part)
    _summary(outcomes, time.perf_counter() - t_all, jobs, sandbox, echo)
    if part is not None:
        shards.write_grades(part, assignments, echo)
    else:
        export(course, to=to, echo=echo)
    return outcomes


def _refuse_without_sandbox(unsafe_no_sandbox: bool) -> None:
    why = None if unsafe_no_sandbox else sandbox_unavailable()
    if why:
        raise SystemExit(
            f"autograde: cannot sandbox the learners' kernels: {why}.\n"
            f"{_sandbox_fix(why)}, or grade without a sandbox with "
            f"--unsafe-no-sandbox (every row of the CSV then says so)."
        )


def _tasks(course, notebooks, cfg, students, assignments, outcomes, echo, shard=None) -> list:
    """(assignment, student) to grade, largest notebooks first; unknown lessons reported.
    A shard never releases a lesson (every shard would rewrite release/ at once)."""
    from nbgrader.api import Gradebook
    from nbgrader.converters import GenerateAssignment

    submitted = course / "submitted"
    if shard is not None and not students:
        return []  # a shard no one who handed in falls into (no filter means everyone)
    names = build_source(notebooks, course)
    pairs = [
        (a, s)
        for a, s in find_submissions(submitted)
        if (not students or s in students) and (not assignments or a in assignments)
    ]
    with Gradebook(db_url(cfg)) as gb:
        known = {a.name for a in gb.assignments}
    tasks = []
    for a, s in pairs:
        if a not in names:
            outcomes.append(
                Outcome(a, s, status="NOT GRADED", notes=[f"no graded lesson named {a}"])
            )
            echo(printable(f"NOT GRADED {s}/{a}: there is no graded lesson of that name"))
            continue
        if a not in known and shard is not None:
            raise SystemExit(
                f"shard {shard.index}/{shard.count}: lesson {a} is not in the class's "
                f"gradebook: release it first (python -m kvstaff.gradebook release {a})"
            )
        if a not in known:  # released elsewhere: create it in this gradebook
            result = run_app(GenerateAssignment, cfg, a, ".", force=True)
            if not result["success"]:
                raise SystemExit(
                    f"nbgrader generate_assignment {a} failed:\n{result.get('error', '')}"
                )
            known.add(a)
        tasks.append((a, s))
    size = {
        (a, s): sum(p.lstat().st_size for p in (submitted / s / a).glob("*.ipynb"))
        for a, s in tasks
    }
    return sorted(tasks, key=lambda t: -size[t])  # stable: ties keep their order


def _run_all(course: Path, tasks: list, timeout, sandbox: str, jobs: int, done, shard=None):
    """Grade ``tasks`` in this process (one job) or in ``jobs`` worker processes."""
    threads = kernel_threads(jobs)
    db = shard.db_url if shard else None
    if jobs == 1:
        for a, s in tasks:
            done(grade_one(str(course), a, s, timeout, sandbox, threads, slot=0, gradebook=db))
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    lock = GradebookLock((shard.folder if shard else course) / ".gradebook.lock")
    ctx = mp.get_context("spawn")
    counter = ctx.Value("i", 0)
    lock.install()
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=ctx,
        initializer=_worker_init,
        initargs=(counter, str(lock.path)),
    ) as pool:
        futures = [
            pool.submit(grade_one, str(course), a, s, timeout, sandbox, threads, gradebook=db)
            for a, s in tasks
        ]
        for fut in as_completed(futures):
            done(fut.result())


def _report_one(course, cfg, result: dict, sandbox, outcomes, total: int, echo, report_dir=None):
    """The outcome of one graded submission, written to the report (in ``report_dir``,
    default the course folder) and the console."""
    try:
        o = finish(course, cfg, result, sandbox)
    except Exception as err:  # noqa: BLE001 - one submission must not stop the class
        a, s = result["assignment"], result["student"]
        o = Outcome(a, s, status="NOT GRADED", needs_review=True, seconds=result["seconds"])
        o.sandbox = SANDBOXED if sandbox == "bwrap" else UNSAFE
        why = f"{type_name(err)}: {err}"[:300]
        o.notes.append(f"the grader failed after nbgrader ran ({why})")
    write_report(report_dir or course, [o])  # after each one: a stopped run keeps what it graded
    score = "-" if o.score is None else f"{o.score:g}/{o.max_score:g}"
    flag = "  REVIEW" if o.needs_review else ""
    n = sum(1 for x in outcomes if x.seconds) + (1 if o.seconds else 0)
    where = f"{o.student}/{o.assignment}"
    echo(f"{_bar(n, total)} {o.status:>20}  {printable(where)}  {score}  {o.seconds:.1f} s{flag}")
    for note in o.notes:
        echo(f"{'':>22}- {printable(note)}")
    return o


def _summary(outcomes: list, wall: float, jobs: int, sandbox: str, echo) -> None:
    each = sorted(o.seconds for o in outcomes if o.seconds)
    if not each:
        return
    mid = len(each) // 2
    median = each[mid] if len(each) % 2 else (each[mid - 1] + each[mid]) / 2
    echo(
        f"graded {len(each)} submission(s) in {wall:.1f} s with {jobs} worker(s) "
        f"({wall / len(each):.1f} s each; median {median:.1f} s per submission; "
        f"sandbox: {SANDBOXED if sandbox == 'bwrap' else UNSAFE})"
    )
