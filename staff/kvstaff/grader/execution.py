"""Execution: nbgrader's preprocessors that run a submission, each kernel in its sandbox.

* :class:`ResilientExecute` — nbgrader's ``Execute`` with every kernel in a sandbox
  (:mod:`kvstaff.grader.sandbox`); a test cell's visible part runs as the cell and
  its hidden region as a separate, silent execution whose outputs the grader judges itself
  (:mod:`kvstaff.grader.judging`), with the kernel stopped while it does. A cell
  that times out is interrupted; a kernel that stays stuck or dies is restarted, the
  cells that ran before are run again, and grading goes on. Outputs are capped per cell
  and per notebook, in bytes and in number.
* :func:`results_are_not_scores` — a graded test cell's displayed result is shown as plain
  output, never read by nbgrader as its score.
* :class:`StderrIsNotFailure` — stderr in graded test cells is ordinary output.
* :class:`ShortenHiddenTracebacks` — feedback shows no hidden-test source.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import signal
import stat
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import DeadKernelError
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Enum, Float, Integer, Unicode

from attnlib.checks.protocol import EXCHANGE_ENV, FEEDBACK_ENV, TAMPER_TAG, process_state
from kvstaff.grader.judging import clear_inputs, clear_outputs, judge, write_inputs
from kvstaff.grader.sandbox import Limits, Sandbox, SandboxKernelManager

TIMEOUT_ENAME = "CellTimeoutError"
# How a graded test cell's stderr is shown once it is no failure (StderrIsNotFailure).
STDERR_PREFIX = "[stderr] "
DIED_ENAME = "KernelDied"
RESTART_ENAME = "KernelRestarted"
OUTPUT_CAPPED = "[the grader kept no more of this cell's output: it printed more than the limit]"

# run in a fresh kernel before the notebook's first cell (a code string for the kernel)
_SNAPSHOT_CODE = "__import__('attnlib.checks.grading', fromlist=['_']).snapshot()"


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


def too_deep_to_compile(source: str) -> tuple[str, str] | None:
    """``(ename, evalue)`` if Python cannot compile the cell ``source`` (nested too deeply).

    IPython stalls on such a cell (its check for top-level ``await`` compiles it, and the
    RecursionError leaves the request unanswered), so the grader does not send it: the cell
    gets an error at once instead of running to its time limit. Anything else that does
    not compile (a SyntaxError) is left to the kernel, which reports it as usual.
    """
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        code = TransformerManager().transform_cell(source)  # %magics and !commands
        compile(code, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except (RecursionError, MemoryError) as err:
        ename = "RecursionError" if isinstance(err, RecursionError) else "MemoryError"
        return ename, (
            "this cell is nested too deeply for Python to compile it; "
            "it was not run (a kernel stalls on such a cell)"
        )
    except Exception:  # noqa: BLE001 - the kernel shows the learner what is wrong
        return None
    return None


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
        state[pid], parent[pid] = process_state(pid, fields[0]), int(fields[1])
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

    * The kernel runs inside :mod:`kvstaff.sandbox` (``sandbox = "bwrap"``), or,
      when told ``sandbox = "none"`` (``--unsafe-no-sandbox``), as a plain local process.
    * A test cell with hidden tests runs in two steps. Its visible part runs as the cell
      (its outputs are what the learner sees in feedback). Only if that passed, the grader
      writes the inputs of the exercises named in the hidden region to the exchange folder
      and runs the hidden region as a separate, silent execution: nothing it prints reaches
      the notebook. ``check_hidden`` in the kernel writes the learner's outputs; the grader
      compares them with its own reference (:func:`kvstaff.grader.judging.judge`) and adds
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
    after_timeout_iopub = Float(
        1.0, help="Seconds to wait for a timed-out cell's last outputs after the interrupt"
    ).tag(config=True)
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
            env[EXCHANGE_ENV] = str(self._box.exchange)
            env[FEEDBACK_ENV] = "record"  # causes named at once, ids for the class report
            if threads:
                env["OMP_NUM_THREADS"] = str(threads)
            km.kernel_spec.env = env
        return km

    async def _async_handle_timeout(self, timeout, cell=None):
        """nbclient's interrupt after a timeout, then a short wait for the cell's last outputs.

        The cell scores nothing either way; a kernel that ignores the interrupt would
        otherwise hold the class for nbclient's whole ``iopub_timeout`` (4 s), twice: after
        the cell and after the probe. :meth:`_one_cell` puts the setting back.
        """
        reply = await super()._async_handle_timeout(timeout, cell)
        self.iopub_timeout = min(self.iopub_timeout, self.after_timeout_iopub)
        return reply

    @contextlib.contextmanager
    def _one_cell(self, timeout: int | None = None):
        """One execution (under ``timeout`` if given); the limits are restored after it."""
        saved = self.timeout, self.iopub_timeout
        if timeout is not None:
            self.timeout = timeout
        try:
            yield
        finally:
            self.timeout, self.iopub_timeout = saved

    def _run_quietly(self, source: str, index: int, timeout: int | None) -> nbformat.NotebookNode:
        cell = nbformat.v4.new_code_cell(source)
        original = self.nb.cells[index]
        try:
            with self._one_cell(timeout):
                self.execute_cell(cell, index, store_history=False)
        finally:
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
        clear_inputs(self._box.exchange)
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
        refused = too_deep_to_compile(cell.source)
        if refused is not None:
            cell.outputs = [_error_output(*refused)]
            cell.execution_count = None
            return cell, self.resources
        try:
            with self._one_cell():
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
        """Run a test cell's hidden region silently; judge what it recorded (see the class)."""
        exercises = list(dict.fromkeys(_HIDDEN_CALL.findall(hidden)))
        problems: list[str] = []
        run = self._run_hidden(cell, hidden, index, exercises, problems)
        if run is None:
            return
        errors = [o for o in run.outputs if o.get("output_type") == "error"]
        if errors and not exercises:
            problems.append(f"the hidden tests raised {errors[0].get('ename', 'an error')}")
        problems += self._judge_hidden(exercises)
        if problems:
            cell.outputs.append(_error_output("AssertionError", "\n".join(problems)))

    def _run_hidden(self, cell, hidden: str, index: int, exercises: list, problems: list):
        """Inputs out, the hidden region run, inputs cleared; None when the cell is decided
        already (out/ not clearable, the kernel died or the run timed out)."""
        exchange = self._box.exchange
        try:  # nothing left over from an earlier run counts; never through a link
            clear_outputs(exchange)
        except OSError as err:
            names = ", ".join(exercises) or "the hidden tests"
            why = f"{TAMPER_TAG} the exchange folder out/ could not be cleared safely ({err})"
            cell.outputs.append(_error_output("AssertionError", f"✘ {names}: {why}"))
            return None
        for name in list(exercises):
            try:
                write_inputs(name, exchange)
            except KeyError:
                exercises.remove(name)
                problems.append(f"✘ {name}: no exercise of that name is registered")
        try:
            run = self._run_quietly(hidden, index, self.timeout)
        except DeadKernelError:
            self._died(cell, index, during="the hidden tests")
            return None
        finally:
            clear_inputs(exchange)
        if self._timed_out(run):
            cell.outputs.append(
                _error_output(TIMEOUT_ENAME, "the hidden tests ran past the time limit")
            )
            self._after_timeout(cell, index)
            return None
        return run

    def _judge_hidden(self, exercises: list[str]) -> list[str]:
        """The grader's verdicts on what the kernel recorded, with the kernel stopped.

        Nothing in the sandbox runs while the grader reads what the kernel wrote (a hook or
        a process could rewrite exchange/out), and a process the notebook started (a
        watcher computing answers from the grader's inputs) is tampering — any process
        with a live thread, though its main thread may have exited.
        """
        problems = []
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
                verdict = judge(name, self._box.exchange)
                if not verdict.ok:
                    problems.append(verdict.message)
        finally:
            self._continue_kernel(stopped)
        return problems

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
        # SIGSTOP is delivered asynchronously: wait (briefly) until each process is seen
        # stopped, so nothing of the kernel's runs while the grader looks at it
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            states = self._kernel_processes()
            if all(st in ("t", "T", "Z", "X") for p, st in states.items() if p in seen):
                break
            time.sleep(0.002)
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
                    lines = out["text"].splitlines()
                    out["text"] = "".join(f"{STDERR_PREFIX}{line}\n" for line in lines)
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
