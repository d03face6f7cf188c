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

What this adds to plain nbgrader (each point has a test in ``tests/test_grading.py`` or
``tests/test_sandbox.py``):

* **A sandbox per submission** (:mod:`attnlib.course.sandbox`): every kernel nbgrader starts
  runs inside bubblewrap — read-only course and venv, a folder with only its submission, no
  network, a separate uid, memory and CPU limits. Without bubblewrap, grading refuses
  unless told ``--unsafe-no-sandbox`` (and the CSV says so on every row).
* :class:`ResilientExecute` — runs a test cell's visible part as the cell and its hidden
  region as a separate, silent execution whose outputs the grader judges itself
  (:func:`attnlib.checks.grading.judge`): the verdict is made outside the kernel. A cell
  that times out is interrupted; if the kernel stays stuck (a loop that swallows
  ``KeyboardInterrupt``) or dies (``os._exit``, a crash), it is restarted, the cells that
  ran before are run again, and grading goes on. It also calls
  :func:`attnlib.checks.grading.snapshot` at kernel start.
* :func:`results_are_not_scores` — nbgrader reads a test cell's displayed result as its
  score (partial credit) before any error the grader added; in graded test cells a result
  is shown as plain output instead, so only errors — the grader's verdicts — count.
* :class:`StderrIsNotFailure` — nbgrader scores a test cell that wrote to stderr as
  failed; a library warning from a correct solution must not cost points, so stderr in
  graded test cells is shown as ordinary output (errors still fail the cell).
* :class:`ShortenHiddenTracebacks` — feedback shows no hidden-test source: tracebacks of
  cells with hidden tests are cut to their last line (with ``ClearHiddenTests``).
* The driver audits the notebook nbgrader graded, outside the kernel
  (:func:`audit_notebook`): every cell that is not one of the instructor's is parsed,
  aliases are followed, and anything that touches the testing machinery, IPython's hooks,
  files or the gradebook flags the submission, as do nbgrader's own "attribute changed"
  warnings (:func:`log_findings`) and the hidden tests' ``[needs-review]`` and
  ``[calls-reference]`` verdicts. A flagged submission's score is left empty
  (status ``FLAGGED``), with the reasons — never a number.
* A submission that cannot be graded at all is reported on the console and in the CSV
  (status ``NOT GRADED``, empty score — never a silent zero); the other students'
  grades are kept.
* ``jobs`` workers grade submissions in parallel (one sandbox each; writes to
  gradebook.db serialised by a file lock), with a progress bar and the class's time.
* :class:`CourseCsvExport` — nbgrader's CSV plus ``status``, ``needs_review``,
  ``sandbox`` and ``notes`` columns; ``nbgrader export`` uses it too.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import fcntl
import json
import os
import re
import shutil
import signal
import stat
import sys
import threading
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbclient.exceptions import DeadKernelError
from nbgrader.plugins import ExportPlugin
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Enum, Integer, Unicode

from attnlib._validate import type_name
from attnlib.checks import grading
from attnlib.course.lessons import course_root, lesson_paths
from attnlib.course.sandbox import (
    Limits,
    Sandbox,
    SandboxKernelManager,
    inspect_submission,
    remove_tree,
)
from attnlib.course.sandbox import unavailable as sandbox_unavailable

REPORT_NAME = "grading_report.json"
SOURCE_DIR = Path("build") / "source"

TIMEOUT_ENAME = "CellTimeoutError"
DIED_ENAME = "KernelDied"
RESTART_ENAME = "KernelRestarted"
OUTPUT_CAPPED = "[the grader kept no more of this cell's output: it printed more than the limit]"
TAMPER_TAG = grading.TAMPER_TAG  # in the hidden tests' messages
REFERENCE_TAG = grading.REFERENCE_TAG

_SNAPSHOT_CODE = "__import__('attnlib.checks.grading', fromlist=['_']).snapshot()"


# ----------------------------------------------------------------------------------------
# nbgrader preprocessors (configured in nbgrader_config.py)
# ----------------------------------------------------------------------------------------


def _error_output(ename: str, evalue: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output(
        "error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]
    )


_HIDDEN_REGION = re.compile(
    r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS[^\n]*(?:\n|$)",
    re.S | re.M,
)
_HIDDEN_CALL = re.compile(r"""check_hidden\(\s*["'](\w+)["']""")


def split_hidden(source: str) -> tuple[str, str] | None:
    """(the visible part, the hidden part) of a test cell; None if it has no hidden tests."""
    regions = _HIDDEN_REGION.findall(source)
    if not regions:
        return None
    return _HIDDEN_REGION.sub("", source), "\n".join(regions)


def _process_tree(root: int) -> dict[int, str]:
    """``root`` and every process below it (host's /proc): pid -> one-letter state."""
    parent: dict[int, int] = {}
    state: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_line = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat_line[stat_line.rfind(")") + 2 :].split()
        pid = int(entry.name)
        # a process whose main thread exited (Z) while another thread runs is running
        state[pid], parent[pid] = grading.process_state(pid, fields[0]), int(fields[1])
    if root not in state:
        return {}
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree[pid] = state[pid]
            todo += children.get(pid, [])
    return tree


def _process_name(pid: int) -> str:
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"
    return "".join(c if c.isprintable() else "?" for c in name)[:15]


class ResilientExecute(Execute):
    """nbgrader's ``Execute``: each kernel in a sandbox, hidden tests judged by the grader.

    * The kernel runs inside :mod:`attnlib.course.sandbox` (``sandbox = "bwrap"``), or,
      when told ``sandbox = "none"`` (``--unsafe-no-sandbox``), as a plain local process.
    * A test cell with hidden tests runs in two steps. Its visible part runs as the cell
      (its outputs are what the learner sees in feedback). Only if that passed, the grader
      writes the inputs of the exercises named in the hidden region to the exchange folder
      and runs the hidden region as a separate, silent execution: nothing it prints reaches
      the notebook. ``check_hidden`` in the kernel writes the learner's outputs; the grader
      compares them with its own reference (:func:`attnlib.checks.grading.judge`) and adds
      an error output to the cell when they are wrong, missing or unreadable — so the
      cell's score is nbgrader's usual "no error = full points", decided outside the kernel.
    * After a cell times out, a probe (``pass``) checks that the interrupt brought the kernel
      back. If it did not, or if the kernel died, the kernel is restarted, the code cells
      that completed before are run again (their new outputs discarded) and grading goes on.
      If the replay itself fails, the submission fails as in plain nbgrader (and the driver
      reports it as NOT GRADED).
    """

    probe_timeout = Integer(10, help="Seconds a probe may take after a timeout").tag(config=True)
    sandbox = Unicode(
        "bwrap", help="'bwrap': every kernel in a bubblewrap sandbox; 'none': unsafe"
    ).tag(config=True)
    sandbox_slot = Integer(0, help="Worker number (the kernel's uid is 64000 + slot)").tag(
        config=True
    )
    kernel_threads = Integer(0, help="OMP/torch threads per kernel (0: the default)").tag(
        config=True
    )
    memory_limit = Integer(Limits().memory_bytes, help="Address-space limit, bytes").tag(
        config=True
    )
    cpu_limit = Integer(Limits().cpu_seconds, help="CPU seconds per kernel").tag(config=True)
    # A graded kernel's state is thrown away: kill it at once rather than wait (~2.5 s per
    # submission) for a graceful exit of the sandboxed process.
    shutdown_kernel = Enum(["graceful", "immediate"], default_value="immediate").tag(config=True)
    max_output_bytes = Integer(
        4 * 2**20, help="Bytes of output kept per cell while it runs (errors always kept)"
    ).tag(config=True)
    max_notebook_output_bytes = Integer(
        32 * 2**20, help="Bytes of output kept for the whole notebook (errors kept, cut short)"
    ).tag(config=True)
    max_outputs = Integer(1000, help="Outputs kept per cell (an empty display counts too)").tag(
        config=True
    )
    max_notebook_outputs = Integer(5000, help="Outputs kept for the whole notebook").tag(
        config=True
    )

    def output(self, outs, msg, display_id, cell_index):
        """nbclient's output handler, with caps on what one cell, and all cells, pile up.

        Past ``max_output_bytes`` in a cell, or ``max_notebook_output_bytes`` in the
        notebook, outputs are dropped and the cell gets one :data:`OUTPUT_CAPPED` note (the
        driver flags it for review). An error is always kept — it decides the cell's
        score — but past the notebook's cap its message and traceback are cut short.
        """
        content = msg.get("content", {})
        if msg.get("msg_type") == "error":
            if isinstance(content, dict):
                tb = content.get("traceback")
                tb = [str(t) for t in tb] if isinstance(tb, list) else []
                size = len(str(content.get("evalue", ""))) + sum(len(t) for t in tb)
                if self._output_total + size > self.max_notebook_output_bytes:
                    content["evalue"] = str(content.get("evalue", ""))[:2000]
                    content["traceback"] = [t[:2000] for t in tb[-5:]]
                    size = 12_000
                self._output_total += size
            return super().output(outs, msg, display_id, cell_index)
        size = len(str(content.get("text", "")))
        size += sum(len(str(v)) for v in (content.get("data") or {}).values())
        used = self._output_bytes.get(cell_index, 0) + size
        self._output_bytes[cell_index] = used
        total = self._output_total + size
        # each display is an output of its own (a stream message extends the last one)
        count = self._output_count.get(cell_index, 0) + (msg.get("msg_type") != "stream")
        self._output_count[cell_index] = count
        cap = self._output_cap(used, total, count, self._output_number + 1)
        if cap is not None:
            if cell_index not in self._output_capped:  # once per cell
                self._output_capped.add(cell_index)
                note = f"{OUTPUT_CAPPED} ({cap})"
                outs.append(nbformat.v4.new_output("display_data", data={"text/plain": note}))
            return None
        self._output_total = total
        self._output_number += msg.get("msg_type") != "stream"
        return super().output(outs, msg, display_id, cell_index)

    def _output_cap(self, used: int, total: int, count: int, number: int) -> str | None:
        """The cap one more output would pass (bytes or outputs, cell or notebook), or None."""
        if used > self.max_output_bytes:
            return f"{self.max_output_bytes // 2**20} MiB"
        if total > self.max_notebook_output_bytes:
            return f"{self.max_notebook_output_bytes // 2**20} MiB for the whole notebook"
        if count > self.max_outputs:
            return f"{self.max_outputs} outputs"
        if number > self.max_notebook_outputs:
            return f"{self.max_notebook_outputs} outputs for the whole notebook"
        return None

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxKernelManager)
        super().__init__(*args, **kwargs)
        self._output_count: dict[int, int] = {}
        self._output_number = 0

    def preprocess(self, nb, resources=None, km=None):
        self._completed: list[int] = []
        self._output_bytes: dict[int, int] = {}
        self._output_total = 0
        self._output_count: dict[int, int] = {}
        self._output_number = 0
        self._output_capped: set[int] = set()
        self._started = False
        limits = Limits(memory_bytes=self.memory_limit, cpu_seconds=self.cpu_limit)
        self._box = Sandbox(slot=self.sandbox_slot, limits=limits)
        path = ((resources or {}).get("metadata") or {}).get("path")
        try:
            if self.sandbox == "bwrap":
                self._box.fill_work(Path(path) if path else None)
            return super().preprocess(nb, resources, km)
        finally:
            self._log_kernel_output()
            self._box.cleanup()

    def _log_kernel_output(self) -> None:
        """Put the tail of the kernel process's own stdout/stderr into nbgrader's log."""
        path = self._box.run / "kernel.log"
        try:  # the kernel owns run/: never block on a FIFO planted there, nor follow a link
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            self.log.warning("run/kernel.log is not a regular file: the kernel replaced it")
            return
        with os.fdopen(fd, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4000))
            text = fh.read().decode("utf-8", "replace").strip()
        if text:
            self.log.info("The kernel process wrote (outside any cell):\n%s", text)

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        threads = self.kernel_threads or None
        if self.sandbox == "bwrap":
            if not isinstance(km, SandboxKernelManager):
                raise RuntimeError("the sandbox needs SandboxKernelManager as kernel manager")
            km.use(self._box, threads=threads)
        else:  # unsafe: a plain local kernel that still finds the exchange folder
            env = dict(km.kernel_spec.env or {})
            env[grading.EXCHANGE_ENV] = str(self._box.exchange)
            if threads:
                env["OMP_NUM_THREADS"] = str(threads)
            km.kernel_spec.env = env
        return km

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
        grading.clear_inputs(self._box.exchange)
        run_sync(self.km.restart_kernel)(now=True)
        run_sync(self.kc.wait_for_ready)(timeout=self.startup_timeout)
        self._run_quietly(_SNAPSHOT_CODE, index, self.startup_timeout)
        self._kernel_baseline = set(self._kernel_processes())
        for i in self._completed:
            replay = self._run_quietly(self.nb.cells[i].source, i, self.timeout)
            if self._timed_out(replay):
                raise RuntimeError(f"replaying cell {i} after a kernel restart timed out")

    def _died(self, cell, index: int, during: str = "this cell") -> None:
        self.log.error("The kernel died while running cell %d", index)
        cell.outputs.append(
            _error_output(
                DIED_ENAME,
                f"the kernel died while running {during} (os._exit, a crash or running out "
                "of memory); it was restarted, the cells above were run again, and grading "
                "went on. This cell scores 0.",
            )
        )
        self._restart_and_replay(index)

    def _after_timeout(self, cell, index: int) -> None:
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

    def _execute(self, cell, resources, index):
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._died(cell, index)
            return cell, self.resources
        if self._timed_out(cell):
            self._after_timeout(cell, index)
            return cell, self.resources
        self._completed.append(index)
        return cell, self.resources

    def _hidden_tests(self, cell, hidden: str, index: int) -> None:
        exchange = self._box.exchange
        exercises = list(dict.fromkeys(_HIDDEN_CALL.findall(hidden)))
        problems = []
        try:  # nothing left over from an earlier run counts; never through a link
            remove_tree(exchange / "out", keep_root=True)
        except OSError as err:
            names = ", ".join(exercises) or "the hidden tests"
            why = f"{TAMPER_TAG} the exchange folder out/ could not be cleared safely ({err})"
            cell.outputs.append(_error_output("AssertionError", f"✘ {names}: {why}"))
            return
        for name in list(exercises):
            try:
                grading.write_inputs(name, exchange)
            except KeyError:
                exercises.remove(name)
                problems.append(f"✘ {name}: no exercise of that name is registered")
        try:
            run = self._run_quietly(hidden, index, self.timeout)
        except DeadKernelError:
            self._died(cell, index, during="the hidden tests")
            return
        finally:
            grading.clear_inputs(exchange)
        if self._timed_out(run):
            cell.outputs.append(
                _error_output(TIMEOUT_ENAME, "the hidden tests ran past the time limit")
            )
            self._after_timeout(cell, index)
            return
        errors = [o for o in run.outputs if o.get("output_type") == "error"]
        if errors and not exercises:
            problems.append(f"the hidden tests raised {errors[0].get('ename', 'an error')}")
        # Nothing in the sandbox runs while the grader reads what the kernel wrote (a hook
        # or a process could rewrite exchange/out), and a process the notebook started
        # (a watcher computing answers from the grader's inputs) is tampering.
        stopped = self._stop_kernel()
        try:
            baseline = getattr(self, "_kernel_baseline", None)
            extra = sorted(
                p
                for p, st in stopped.items()
                if baseline is not None and p not in baseline and st not in "ZX"  # not reaped
            )
            for name in exercises:
                if extra:
                    names = ", ".join(dict.fromkeys(_process_name(p) for p in extra[:5]))
                    problems.append(
                        f"✘ {name}: {TAMPER_TAG} {len(extra)} process(es) started by the "
                        f"notebook ({names}) were running during the hidden tests: their work "
                        "is not seen"
                    )
                    continue
                verdict = grading.judge(name, exchange)
                if not verdict.ok:
                    problems.append(verdict.message)
        finally:
            self._continue_kernel(stopped)
        if problems:
            cell.outputs.append(_error_output("AssertionError", "\n".join(problems)))

    def _kernel_processes(self) -> dict[int, str]:
        """The kernel's processes seen from here: bwrap's (or the kernel's) and its tree."""
        provisioner = getattr(getattr(self, "km", None), "provisioner", None)
        pid = getattr(provisioner, "pid", None)
        return _process_tree(pid) if isinstance(pid, int) else {}

    def _stop_kernel(self) -> dict[int, str]:
        """SIGSTOP every process of the kernel's tree (new ones too); pid -> state before."""
        seen: dict[int, str] = {}
        for _ in range(10):  # until a listing shows nothing new (a fork meanwhile)
            new = {p: st for p, st in self._kernel_processes().items() if p not in seen}
            if not new:
                break
            for pid in new:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
            seen |= new
        return seen

    @staticmethod
    def _continue_kernel(stopped: dict[int, str]) -> None:
        for pid in stopped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if not self._started:
            self._started = True
            # imports numpy, torch and attnlib: may take longer than a cell's limit on a busy
            # machine, so it gets the kernel start-up allowance
            self._run_quietly(_SNAPSHOT_CODE, index, self.startup_timeout)
            self._kernel_baseline = set(self._kernel_processes())
        parts = split_hidden(cell.source) if _is_test_cell(cell) else None
        if parts is None:
            cell, resources = self._execute(cell, resources, index)
            if _is_test_cell(cell):
                results_are_not_scores(cell)
            return cell, resources
        visible, hidden = parts
        full = cell.source
        cell.source = visible
        try:
            cell, resources = self._execute(cell, resources, index)
        finally:
            cell.source = full
        if not any(o.get("output_type") == "error" for o in cell.outputs):
            self._hidden_tests(cell, hidden, index)
        results_are_not_scores(cell)
        return cell, self.resources


def results_are_not_scores(cell) -> None:
    """Show a graded test cell's result as plain output, never as its score.

    nbgrader reads a test cell's ``execute_result`` as partial credit and stops reading
    there — before the error the grader appends when the hidden tests fail. The value a
    cell shows is the kernel's to choose, so it becomes ``display_data``: a test cell's
    score is "no error: its points; an error: 0", and the errors are the grader's. (An
    exercise with parts gives partial credit with one graded cell per part instead.)
    """
    for i, out in enumerate(cell.get("outputs", [])):
        if out.get("output_type") == "execute_result":
            cell.outputs[i] = nbformat.v4.new_output(
                "display_data", data=out.get("data", {}), metadata=out.get("metadata", {})
            )


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
        cfg.ResilientExecute.probe_timeout = max(2, min(10, int(timeout) // 2))
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
#
# The audit reads the notebook nbgrader graded (after it put locked cells back), trusts no
# cell metadata, and looks at every code cell that is not, character for character, one of
# the instructor's non-solution cells. It follows aliases (``c = attnlib.checks``,
# ``import numpy as xp``, ``for m in (np, torch)``, a module passed to a function) and
# reports what touches the testing machinery or the grading machine. It runs in the
# grader; nothing in it depends on the kernel.

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
    "ipykernel",
    "os",
    "F",
    "nn",
    "testing",
    "scipy",
    # what the grader's own code in the kernel uses to write its report, and ways around
    # the profiling hook (threads, processes)
    "json",
    "pathlib",
    "shutil",
    "pickle",
    "types",
    "threading",
    "_thread",
    "asyncio",
    "concurrent",
    "multiprocessing",
    "subprocess",
    "runpy",
}
# Calls that reach around the language (exec and friends) or rebind things by name.
_SUSPICIOUS_CALLS = {
    "setattr",
    "delattr",
    "exec",
    "eval",
    "compile",
    "__import__",
    "globals",
    "vars",
    "locals",
    "breakpoint",
    "get_ipython",
    "get_exercise",  # the checks' registry: the reference and the hidden cases
}
_SUSPICIOUS_ATTRS = {
    "settrace",
    "setprofile",
    "_getframe",
    "currentframe",
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "__builtins__",
    "__globals__",
    "__code__",
    "__dict__",
    "__class__",
    "__setattr__",
    "__getattribute__",
    "__delattr__",
    "__subclasses__",
    "__loader__",
    "__spec__",
    "CodeType",
    "FunctionType",
    "_exit",
    "modules",
    "meta_path",
    "path_hooks",
    "addaudithook",
    "_SNAPSHOT",
    "_REGISTRY",
    # IPython's hooks: they run code around (or instead of) the later cells
    "input_transformers_cleanup",
    "input_transformers_post",
    "ast_transformers",
    "events",
    "set_custom_exc",
    "set_hook",
    "register_magic_function",
    "register_magics",
    "displayhook",
    "excepthook",
    "user_ns",
    "user_global_ns",
    # the checks' registry: the course's reference and the (hidden) cases of an exercise
    "get_exercise",
    "reference",
    "make_hidden_cases",
    "make_cases",
    # work done where the profiling hook does not look (another thread or process)
    "ThreadPoolExecutor",
    "ProcessPoolExecutor",
    "Thread",
    "start_new_thread",
    "run_in_executor",
    "to_thread",
    "setprofile_all_threads",
    "settrace_all_threads",
    "mkfifo",
    # another builtin's owner is the builtins module (print.__self__.exec)
    "__self__",
    # running a module's file under another name (runpy.run_path(".../attnlib//core.py"))
    "run_path",
    "run_module",
}
# "attnlib.core.softmax", "attnlib:attend": a dotted path whose last name is looked up
# by a resolver (pydoc.locate, pkgutil.resolve_name) when a string names it.
_ATTNLIB_PATH = re.compile(r"\battnlib(?:[.:]\w+)*[.:](\w+)")
# Attribute names that, spelled as a string (getattr(sys, "setprofile")), are a finding.
_SUSPICIOUS_NAME_STRINGS = {
    a for a in _SUSPICIOUS_ATTRS if a not in ("events", "modules", "reference", "Thread")
} | {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "mkfifo", "symlink"}
_SUSPICIOUS_IMPORTS = {
    "builtins",
    "ctypes",
    "gc",
    "importlib",
    "unittest",
    "inspect",
    "signal",
    "sqlite3",
    "marshal",
    "pickle",
    "dill",
    "threading",
    "_thread",
    "multiprocessing",
    "concurrent",
    "subprocess",
    "socket",
    "atexit",
    "faulthandler",
    "py_compile",
    "compileall",
    "IPython",
    "ipykernel",
    "nbgrader",
    "nbformat",
    "nbclient",
    "jupyter_client",
    "zmq",
    "pty",
    "resource",
    "mmap",
    "fcntl",
    "code",
    "codeop",
    "shutil",
    "tempfile",
    "sysconfig",
    "site",
    "runpy",
}
# Files: what a solution never needs to do. Method names that are also common list/str
# methods (replace, remove) count only on os/shutil/pathlib roots.
_WRITE_ATTRS = {"write_text", "write_bytes", "symlink_to", "hardlink_to", "touch", "tofile"}
_OS_CALLS = {
    "system",
    "popen",
    "fork",
    "forkpty",
    "kill",
    "killpg",
    "putenv",
    "unsetenv",
    "remove",
    "unlink",
    "rename",
    "renames",
    "replace",
    "rmdir",
    "removedirs",
    "chmod",
    "chown",
    "lchown",
    "symlink",
    "link",
    "open",
    "write",
    "truncate",
    "makedirs",
    "mkdir",
    "chdir",
    "execv",
    "execve",
    "execvp",
    "execvpe",
    "execl",
    "execle",
    "execlp",
    "execlpe",
    "spawnv",
    "spawnve",
    "spawnvp",
    "spawnvpe",
    "spawnl",
    "spawnle",
    "spawnlp",
    "spawnlpe",
    "posix_spawn",
    "posix_spawnp",
    "register_at_fork",
    "save",
    "savez",
    "savez_compressed",
    "savetxt",
}
_SUSPICIOUS_STRINGS = (
    "gradebook",
    "__pycache__",
    ".pyc",
    "site-packages",
    "autograded",
    "submitted",
    "/proc/",
    "sqlite",
    "KEY_VECTORS_GRADING",
    "nbgrader",
    "kernel.log",
    "manifest.json",
    "exchange/",
)
# Magics a learner may use in a solution cell (IPython turns them into get_ipython() calls).
_SAFE_MAGICS = {"time", "timeit", "matplotlib", "precision", "pprint", "who", "whos", "prun"}
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
    "__instancecheck__",
    "__subclasscheck__",
    # reprs a browser would render or run (feedback, formgrader): the grader drops them
    "_repr_html_",
    "_repr_javascript_",
    "_repr_svg_",
    "_repr_markdown_",
    "_repr_latex_",
    "_repr_mimebundle_",
    "_ipython_display_",
}


def _root_name(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"


def _folded_string(node) -> str | None:
    """A string constant, or a concatenation of them ("mk" + "fifo"); else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = node.left, node.right
        if isinstance(left, (ast.Constant, ast.BinOp)) and isinstance(right, ast.Constant):
            a, b = _folded_string(left), _folded_string(right)
            if a is not None and b is not None:
                return a + b
    return None


def _parse(source: str) -> ast.AST | None:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - IPython missing or odd input: parse as it is
        pass
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None  # the kernel cannot run it either
    except (RecursionError, MemoryError, ValueError) as err:
        return _Unreadable(type(err).__name__)
    # The code an allowed magic runs (%%time, %timeit -n1 ..., %prun) is a string
    # argument of get_ipython().run_*_magic(): read it as the cell's own code.
    try:
        magics = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _magic_code(n)]
        for call in magics:
            for code in _magic_code(call):
                inner = _parse(code)
                if inner is None or isinstance(inner, _Unreadable):
                    why = inner.why if inner is not None else "not Python"
                    return _Unreadable(f"the code given to %{call.args[0].value} is {why}")
                tree.body.extend(inner.body)
    except RecursionError:
        return _Unreadable("RecursionError")
    return tree


class _OptionTable:
    options_table: dict = {}  # what IPython's Magics.parse_options reads from its magic


def _magic_code(call: ast.Call) -> list[str] | None:
    """The code an allowed magic runs ([] for none), as IPython splits its arguments.

    None when ``call`` is not a get_ipython().run_*_magic() call the audit may excuse: another
    magic, computed arguments, ``{expr}``/``$name`` in a line IPython expands, %prun -D/-T
    (writes files) or arguments IPython itself would refuse.
    """
    f = call.func
    if not (
        isinstance(f, ast.Attribute)
        and f.attr in ("run_line_magic", "run_cell_magic")
        and isinstance(f.value, ast.Call)
        and isinstance(f.value.func, ast.Name)
        and f.value.func.id == "get_ipython"
        and not call.keywords
        and len(call.args) == (3 if f.attr == "run_cell_magic" else 2)
        and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)
    ):
        return None
    name, line, *rest = (a.value for a in call.args)
    cell = rest[0] if rest else None
    if name not in _SAFE_MAGICS:
        return None
    if name not in ("time", "timeit", "prun"):  # they take no code, but expand {expr} in line
        return [] if cell is None and not any(c in line for c in "{$") else None
    try:
        from IPython.core.magic import Magics
        from IPython.core.magic_arguments import parse_argstring
        from IPython.core.magics.execution import ExecutionMagics

        if name == "time":
            _, extra = parse_argstring(ExecutionMagics.time, line, partial=True)
            code = [" ".join(extra), cell or ""]
        elif name == "timeit":
            _, stmt = Magics.parse_options(
                _OptionTable(),
                line,
                "n:r:tcp:qov:",
                posix=False,
                strict=False,
                preserve_non_opts=True,
            )
            code = [stmt, cell or ""]
        else:
            opts, stmt = Magics.parse_options(
                _OptionTable(), line, "D:l:rs:T:q", list_all=True, posix=False
            )
            if "D" in opts or "T" in opts:
                return None
            code = [stmt + ("\n" + cell if cell is not None else "")]
    except (Exception, SystemExit):  # noqa: BLE001 - IPython missing, or it refuses these
        return None
    return [c for c in code if c.strip()]


class _Unreadable(ast.Module):
    """A cell the audit could not parse (nested too deep...): a finding of its own."""

    def __init__(self, why: str):
        super().__init__(body=[], type_ignores=[])
        self.why = why


class _Aliases:
    """Names that refer to the watched modules or to objects inside them."""

    def __init__(self) -> None:
        self.names = set(_WATCHED_MODULES)
        self.attnlib = {"attnlib", "checks", "grading"}  # names rooted in attnlib

    def refers(self, e) -> bool:
        """Does evaluating ``e`` give (a part of) a watched object, not a computed value?"""
        if isinstance(e, ast.Name):
            return e.id in self.names
        if isinstance(e, ast.Attribute) and e.attr == "__self__":
            return True  # any builtin's __self__ is the builtins module
        if isinstance(e, (ast.Attribute, ast.Subscript)):
            return self.refers(e.value)
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Name) and f.id in ("getattr", "__import__", "vars", "globals"):
                return True
            if isinstance(f, ast.Attribute) and f.attr in ("import_module", "get", "pop"):
                return self.refers(f.value) or f.attr == "import_module"
            return False
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            return any(self.refers(x) for x in e.elts)
        if isinstance(e, ast.IfExp):
            return self.refers(e.body) or self.refers(e.orelse)
        if isinstance(e, ast.BoolOp):
            return any(self.refers(x) for x in e.values)
        if isinstance(e, ast.NamedExpr):
            return self.refers(e.value)
        return False

    def refs(self, e) -> tuple[bool, set[str]]:
        """What :meth:`refers` of ``e`` depends on: (always, the names it would need).

        ``e`` refers to a watched object if ``always``, or once any of the names is known
        as an alias. Mirrors :meth:`refers` without looking at what is known yet.
        """
        if isinstance(e, ast.Name):
            return False, {e.id}
        if isinstance(e, ast.Attribute) and e.attr == "__self__":
            return True, set()  # print.__self__ is the builtins module
        if isinstance(e, (ast.Attribute, ast.Subscript)):
            return self.refs(e.value)
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Name) and f.id in ("getattr", "__import__", "vars", "globals"):
                return True, set()
            if isinstance(f, ast.Attribute) and f.attr in ("import_module", "get", "pop"):
                return (True, set()) if f.attr == "import_module" else self.refs(f.value)
            return False, set()
        parts: list = []
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            parts = e.elts
        elif isinstance(e, ast.IfExp):
            parts = [e.body, e.orelse]
        elif isinstance(e, ast.BoolOp):
            parts = e.values
        elif isinstance(e, ast.NamedExpr):
            parts = [e.value]
        always, names = False, set()
        for part in parts:
            a, n = self.refs(part)
            always, names = always or a, names | n
        return always, names

    def collect(self, trees: list[ast.AST]) -> None:
        """Every alias of a watched object, in any cell order: linear in the cells' size.

        Each binding (an assignment, a loop or ``with`` target, a parameter given a watched
        argument) is an edge from the names its value needs to the names it binds; the
        known aliases spread along the edges once each (no fixpoint over all the cells).
        """
        params: dict[str, list[str]] = {}
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    name = getattr(node, "name", None)
                    if name:
                        a = node.args
                        params[name] = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
        bindings: list[tuple[list[str], bool]] = []  # (names bound, value rooted in attnlib)
        by_name: dict[str, list[int]] = {}  # name -> bindings that follow when it is known
        by_root: dict[str, list[int]] = {}  # name -> bindings rooted at it (attnlib spread)
        todo: list[str] = []

        def add(name: str, attnlib: bool) -> None:
            if name not in self.names:
                self.names.add(name)
                todo.append(name)
            if attnlib and name not in self.attnlib:
                self.attnlib.add(name)
                todo.append(name)

        def bind(target, value) -> None:
            names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
            if not names:
                return
            always, needs = self.refs(value)
            root = None if isinstance(value, ast.Call) else _root_name(value)
            i = len(bindings)
            bindings.append((names, root))
            if always:
                for n in names:
                    add(n, root is None or root in self.attnlib)
            for n in needs:
                by_name.setdefault(n, []).append(i)
            if root is not None:
                by_root.setdefault(root, []).append(i)

        for tree in trees:
            for node in ast.walk(tree):
                self._collect_node(node, params, bind, add)
        todo += list(self.names)
        while todo:
            name = todo.pop()
            for i in by_name.get(name, ()):
                names, root = bindings[i]
                for n in names:
                    add(n, root is None or root in self.attnlib)
            if name in self.attnlib:
                for i in by_root.get(name, ()):
                    for n in bindings[i][0]:
                        add(n, True)

    @staticmethod
    def _collect_node(node, params: dict, bind, add) -> None:
        """The bindings and imports of one node (see :meth:`collect`)."""
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in _WATCHED_MODULES or top in _SUSPICIOUS_IMPORTS:
                    add(a.asname or top, a.name.startswith("attnlib"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top in {"numpy", "torch", "attnlib", "scipy"} | _SUSPICIOUS_IMPORTS:
                for a in node.names:
                    add(a.asname or a.name, top == "attnlib")
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                bind(t, node.value)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value:
            bind(node.target, node.value)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            bind(node.target, node.iter)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    bind(item.optional_vars, item.context_expr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            names = params.get(node.func.id, [])
            for i, arg in enumerate(node.args):
                if i < len(names):
                    bind(ast.Name(names[i]), arg)
            for kw in node.keywords:
                if kw.arg in names:
                    bind(ast.Name(kw.arg), kw.value)


def _os_call(name: str) -> bool:
    """An os function a solution never needs: files, processes (every spawn/exec/fork)."""
    return name in _OS_CALLS or name.startswith(("spawn", "exec", "fork", "posix_spawn"))


def _write_mode(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(ch in mode.value for ch in "wax+")
    return True  # a computed mode: say so


def _safe_magic_receivers(tree) -> set[int]:
    """ids of the get_ipython() calls that only run an allowed magic (%timeit ...)."""
    safe = set()
    for node in ast.walk(tree):
        # the code such a magic runs was added to the tree by _parse, and is audited there
        if isinstance(node, ast.Call) and _magic_code(node) is not None:
            safe.add(id(node.func.value))
    return safe


def _audit_tree(tree, forbidden: set[str], aliases: _Aliases) -> list[str]:
    reasons: list[str] = []
    safe = _safe_magic_receivers(tree)
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for sub in ast.walk(t) if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                if isinstance(sub, (ast.Attribute, ast.Subscript)) and aliases.refers(sub.value):
                    reasons.append(f"assigns to {_dotted(sub)}")
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                if f.id in _SUSPICIOUS_CALLS and not (f.id == "get_ipython" and id(node) in safe):
                    reasons.append(f"calls {f.id}()")
                if f.id == "open" and _write_mode(node):
                    reasons.append("opens a file for writing")
            elif isinstance(f, ast.Attribute):
                root = _root_name(f.value)
                if f.attr in _WRITE_ATTRS:
                    reasons.append(f"writes files ({_dotted(f)})")
                elif root in aliases.names and root not in ("np", "torch") and _os_call(f.attr):
                    reasons.append(f"calls {_dotted(f)}()")
                elif f.attr in _SUSPICIOUS_CALLS and aliases.refers(f.value):
                    reasons.append(f"calls {_dotted(f)}()")  # print.__self__.exec(...)
                elif root in ("np", "numpy", "torch") and f.attr in ("save", "savez", "savetxt"):
                    reasons.append(f"writes files ({_dotted(f)})")
                elif f.attr in ("open",) and _write_mode(node):
                    reasons.append(f"opens a file for writing ({_dotted(f)})")
        if isinstance(node, ast.Attribute):
            if node.attr in _SUSPICIOUS_ATTRS:
                reasons.append(f"uses {_dotted(node)}")
            if node.attr in forbidden and _root_name(node) in aliases.attnlib:
                reasons.append(f"uses {_dotted(node)} (a course reference)")
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            reasons.append("uses __builtins__")
        text = _folded_string(node)
        if text is not None:
            hits = [s for s in _SUSPICIOUS_STRINGS if s in text]
            if hits:
                reasons.append(f"names {hits[0]!r} in a string")
            elif text in _SUSPICIOUS_NAME_STRINGS:
                reasons.append(f"names {text!r} in a string")
            elif any(
                name in forbidden for name in _ATTNLIB_PATH.findall(text)
            ):  # pydoc.locate("attnlib.softmax"), pkgutil.resolve_name("attnlib:softmax")
                reasons.append(f"names the course reference {text!r} in a string")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and aliases.refers(node.args[0])
        ):
            reasons.append(f"calls {node.func.id}() on {_dotted(node.args[0])}")
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


def audit_cells(
    sources: list[str], forbidden: set[str], context: list[str] = ()
) -> list[list[str]]:
    """Reasons to look at each of these cells by hand (aliases followed across all of them).

    ``context`` holds the notebook's other code cells: searched for aliases, not reported.
    """
    trees = [_parse(s) for s in sources]
    aliases = _Aliases()
    try:
        others = [t for t in map(_parse, context) if t]
        aliases.collect([t for t in trees if t is not None] + others)
    except RecursionError:
        aliases.names.add("?")  # (each cell is still read below)
    return [_audit_one(t, forbidden, aliases) for t in trees]


def _audit_one(tree, forbidden: set[str], aliases: _Aliases) -> list[str]:
    if tree is None:
        return []
    if isinstance(tree, _Unreadable):
        return [f"the audit could not read this cell ({tree.why}): a person must"]
    try:
        return _audit_tree(tree, forbidden, aliases)
    except RecursionError:
        return ["the audit could not read this cell (RecursionError): a person must"]


def audit_code(source: str, forbidden: set[str]) -> list[str]:
    """Reasons to look at this learner code by hand (empty if nothing is suspicious)."""
    return audit_cells([source], forbidden)[0]


_CHECK_CALL = re.compile(r"""checks\.check(?:_hidden)?\(\s*["'](\w+)["']""")


def _forbidden_names(exercises: set[str] | None = None) -> set[str]:
    """Last names of the course references the given exercises (default: all) refuse."""
    from attnlib import checks

    known = set(checks.exercises())
    names = set()
    for name in sorted(known if not exercises else exercises & known):
        names |= {
            d.rsplit(".", 1)[1]
            for d in checks.get_exercise(name).forbidden
            if d.startswith("attnlib.")
        }
    return names


def audit_notebook(graded: Path, source: Path | None) -> list[str]:
    """Audit the notebook nbgrader graded against the instructor's version of the lesson.

    Every code cell that is not exactly one of the instructor's non-solution cells is
    read — whatever its metadata says (a solution cell re-marked as locked is still read).
    """
    try:
        nb = nbformat.read(graded, as_version=4)
    except Exception as err:  # noqa: BLE001
        return [f"the submitted notebook cannot be read: {err}"]
    fixed: set[str] = set()
    exercises: set[str] = set()
    mine: list = []  # the instructor's code cells that are not solutions
    if source is not None and Path(source).exists():
        src = nbformat.read(source, as_version=4)
        mine = [
            c
            for c in src.cells
            if c.cell_type == "code"
            and not c.get("metadata", {}).get("nbgrader", {}).get("solution")
        ]
        fixed = {c.source for c in mine}
        for c in src.cells:  # the exercises this lesson checks
            exercises |= set(_CHECK_CALL.findall(c.source))
    forbidden = _forbidden_names(exercises)
    # What the instructor's own cells do (a lesson imports its references for demos) is no
    # finding when a learner's edited copy of such a cell does it too. A use of a course
    # reference is excused only in an edited copy of the very cell that has it (matched
    # by grade_id or cell id, never in a solution cell): elsewhere it is the solution.
    mine_found = audit_cells([c.source for c in mine], forbidden)
    own: dict[str, set[str]] = {}
    for c, why in zip(mine, mine_found, strict=True):
        for key in _cell_keys(c):
            own.setdefault(key, set()).update(why)
    baseline = {r for why in mine_found for r in why if _COURSE_REFERENCE not in r}
    code = [c for c in nb.cells if c.cell_type == "code"]
    audited = [c for c in code if c.source not in fixed]
    context = [c.source for c in code if c.source in fixed]
    found = audit_cells([c.source for c in audited], forbidden, context)
    reasons = []
    for cell, why in zip(audited, found, strict=True):
        where = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or "a learner cell"
        excused = set().union(*(own.get(k, set()) for k in _cell_keys(cell)))
        reasons += [
            printable(f"{where}: {r}") for r in why if r not in baseline and r not in excused
        ]
    return reasons


_COURSE_REFERENCE = "(a course reference)"


def _cell_keys(cell) -> list[str]:
    keys = []
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    if gid:
        keys.append(f"grade_id:{gid}")
    if cell.get("id"):
        keys.append(f"id:{cell.get('id')}")
    return keys


_CHANGED = re.compile(
    r"Attribute '(\w+)' for cell (\S+) has changed! \(should be: (.*?), got: (.*?)\)"
)
_UNKNOWN_CELL = re.compile(r"Cell '([^']*)' does not exist in the database")
_MISSING_CELL = re.compile(r"Missing grade cell (\S+) encountered")


def log_findings(log: str) -> tuple[list[str], list[str]]:
    """(reasons to review, plain notes) from nbgrader's autograde log of one submission.

    nbgrader puts back what a submission changed in a cell's nbgrader metadata and says so
    in its log; a change of ``locked``, ``cell_type`` or ``points`` is a deliberate edit of
    the JSON. (The "checksum has changed" line appears for every cell with hidden tests.)
    """
    review, notes = [], []
    for attr, cell, should, got in _CHANGED.findall(log):
        if attr != "checksum":
            review.append(
                f"{cell}: the submitted notebook changed this cell's {attr} "
                f"(should be {should}, was {got}); nbgrader put it back"
            )
    for cell in _UNKNOWN_CELL.findall(log):
        review.append(f"a cell claims the grade_id {cell!r}, which this lesson does not have")
    for cell in _MISSING_CELL.findall(log):
        notes.append(f"{cell}: missing from the submission; put back and graded")
    return list(dict.fromkeys(review)), list(dict.fromkeys(notes))


# ----------------------------------------------------------------------------------------
# Autograding
# ----------------------------------------------------------------------------------------

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


def _scan_autograded(path: Path, outcome: Outcome) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        where = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or "a cell"
        for out in cell.get("outputs", []):
            if OUTPUT_CAPPED in str((out.get("data") or {}).get("text/plain", "")):
                outcome.needs_review = True
                outcome.notes.append(f"{where}: printed more output than the grader keeps (cut)")
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
                    or grading.LIBRARY_EQUIVALENT in line
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


class _GradebookLock:
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
    _GradebookLock(Path(lock_path)).install()


def _grade_one(
    course: str, assignment: str, student: str, timeout, sandbox: str, threads: int, slot=None
) -> dict:
    """Run nbgrader's Autograde on one submission (in a worker process or in this one)."""
    from nbgrader.converters import Autograde

    if isinstance(timeout, dict):  # per lesson, with a default under None
        timeout = timeout.get(assignment, timeout.get(None))
    cfg = load_config(Path(course), timeout)
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
        with _wall_clock(WALL_LIMIT):
            result = _run_app(Autograde, cfg, assignment, student, force=True, create_student=True)
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
        with _wall_clock(seconds):
            return (audit or audit_notebook)(graded, source)
    except TimeoutError:
        return [
            f"the audit stopped after {seconds} s (a very large notebook): a person must read it"
        ]


WALL_LIMIT = 1800  # seconds one submission may take in all, whatever its kernel does


@contextlib.contextmanager
def _wall_clock(seconds: int):
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


def _finish(course: Path, cfg, result: dict, sandbox: str) -> Outcome:
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
            "checkout's venv; `python -m attnlib.course.sandbox` shows what it binds"
        )
    if any(k in why.lower() for k in ("namespace", "uid map", "operation not permitted")):
        return (
            "bubblewrap is installed but this system refuses its user namespaces (in a "
            "container: user namespaces, seccomp); `python -m attnlib.course.sandbox` "
            "shows what it tried"
        )
    return (
        "bubblewrap is installed but could not start a sandbox here; "
        "`python -m attnlib.course.sandbox` shows what it tried"
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
) -> list[Outcome]:
    """Grade every submission under <course>/submitted, write the report and the CSV.

    ``jobs`` submissions are graded at once (default: one per core), each in its own
    sandbox, the largest notebooks first (so that no long one is left for the end while
    the other workers idle). ``timeout`` is the time limit per cell (default: the
    config's), ``timeouts`` a limit per lesson that overrides it. Without bubblewrap this
    refuses unless ``unsafe_no_sandbox``.
    """
    from nbgrader.api import Gradebook
    from nbgrader.converters import GenerateAssignment

    course = Path(course).resolve()
    submitted = course / "submitted"
    if not submitted.exists():
        raise SystemExit(
            f"no submissions: {submitted} does not exist (layout: "
            f"submitted/<student>/<lesson>/<lesson>.ipynb)"
        )
    why = None if unsafe_no_sandbox else sandbox_unavailable()
    if why:
        fix = _sandbox_fix(why)
        raise SystemExit(
            f"autograde: cannot sandbox the learners' kernels: {why}.\n"
            f"{fix}, or grade without a sandbox with "
            f"--unsafe-no-sandbox (every row of the CSV then says so)."
        )
    sandbox = "none" if unsafe_no_sandbox else "bwrap"
    refresh_bytecode()
    names = build_source(notebooks, course)
    cfg = load_config(course, timeout)
    pairs = [
        (a, s)
        for a, s in find_submissions(submitted)
        if (not students or s in students) and (not assignments or a in assignments)
    ]
    with Gradebook(_db_url(cfg)) as gb:
        known = {a.name for a in gb.assignments}
    outcomes: list[Outcome] = []
    tasks = []
    for a, s in pairs:
        if a not in names:
            outcomes.append(
                Outcome(a, s, status="NOT GRADED", notes=[f"no graded lesson named {a}"])
            )
            echo(printable(f"NOT GRADED {s}/{a}: there is no graded lesson of that name"))
            continue
        if a not in known:  # released elsewhere: create it in this gradebook
            result = _run_app(GenerateAssignment, cfg, a, ".", force=True)
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
    tasks.sort(key=lambda t: -size[t])  # stable: ties keep their order
    if timeouts:
        timeout = {None: timeout, **timeouts}
    jobs = max(1, min(jobs or default_jobs(), len(tasks) or 1))
    threads = max(1, default_jobs() // jobs) if jobs > 1 else 0
    total = len(tasks)
    t_all = time.perf_counter()

    def done(result: dict) -> None:
        try:
            o = _finish(course, cfg, result, sandbox)
        except Exception as err:  # noqa: BLE001 - one submission must not stop the class
            a, s = result["assignment"], result["student"]
            o = Outcome(a, s, status="NOT GRADED", needs_review=True, seconds=result["seconds"])
            o.sandbox = SANDBOXED if sandbox == "bwrap" else UNSAFE
            why = f"{type_name(err)}: {err}"[:300]
            o.notes.append(f"the grader failed after nbgrader ran ({why})")
        outcomes.append(o)
        _write_report(course, [o])  # after each one: a stopped run keeps what it graded
        score = "-" if o.score is None else f"{o.score:g}/{o.max_score:g}"
        flag = "  REVIEW" if o.needs_review else ""
        n = sum(1 for x in outcomes if x.seconds)
        where = f"{o.student}/{o.assignment}"
        echo(
            f"{_bar(n, total)} {o.status:>20}  {printable(where)}  {score}  {o.seconds:.1f} s{flag}"
        )
        for note in o.notes:
            echo(f"{'':>22}- {printable(note)}")

    lock = _GradebookLock(course / ".gradebook.lock")
    if jobs == 1:
        for a, s in tasks:
            done(_grade_one(str(course), a, s, timeout, sandbox, threads, slot=0))
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

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
                pool.submit(_grade_one, str(course), a, s, timeout, sandbox, threads)
                for a, s in tasks
            ]
            for fut in as_completed(futures):
                done(fut.result())
    wall = time.perf_counter() - t_all
    each = sorted(o.seconds for o in outcomes if o.seconds)
    if each:
        median = (
            each[len(each) // 2]
            if len(each) % 2
            else (each[len(each) // 2 - 1] + each[len(each) // 2]) / 2
        )
        echo(
            f"graded {len(each)} submission(s) in {wall:.1f} s with {jobs} worker(s) "
            f"({wall / len(each):.1f} s each; median {median:.1f} s per submission; "
            f"sandbox: {SANDBOXED if sandbox == 'bwrap' else UNSAFE})"
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
            with _wall_clock(FEEDBACK_LIMIT):
                result = _run_app(GenerateFeedback, cfg, a, s, force=True)
        except TimeoutError as err:
            result = {"success": False, "error": f"{err}; no feedback written"}
        if not result["success"]:
            echo(f"feedback for {printable(f'{s}/{a}')} failed:\n{result.get('error', '')}")
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
    parser.add_argument(
        "--jobs", type=int, default=None, help="submissions graded at once (default: cores)"
    )
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="grade without bubblewrap (learners' kernels can reach the course folder)",
    )
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
            jobs=args.jobs,
            unsafe_no_sandbox=args.unsafe_no_sandbox,
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
