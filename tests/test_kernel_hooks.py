"""Work outside the learner's function: IPython hooks (kernel side) and processes (grader side).

The red team's b06/b07 registered a pre_run_cell/post_run_cell callback that filled a table
from the reference or rewrote exchange/out after check_hidden; d01 started a process that
computed answers from the grader's inputs. ``trust.tampering()`` now reports hooks defined
in the notebook; the grader stops the kernel's processes while it judges and reports
processes started since the kernel's snapshot. Fast: one IPython shell in a subprocess, one
``sleep`` tree; no kernel, no sandbox.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest
from sandbox_kernel import sandbox_kernel, wait

from attnlib.checks import trust
from kvstaff.grader import execution, sandbox

SHELL = r"""
import json
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
import attnlib.checks.grading as G
G.snapshot()
out = {"clean": G.tampering()}
ip.run_cell("%matplotlib agg\nimport numpy as np\nx = np.ones(2)")  # honest: no finding
out["honest"] = G.tampering()
ip.run_cell("get_ipython().events.register('pre_run_cell', lambda *a: None)")
out["event"] = G.tampering()
ip.events.callbacks["pre_run_cell"].clear()
ip.run_cell("class T:\n    def visit(self, n):\n        return n")
ip.run_cell("get_ipython().ast_transformers.append(T())")
out["ast"] = G.tampering()
ip.ast_transformers.clear()
ip.run_cell("get_ipython().input_transformers_cleanup.append(lambda lines: lines)")
out["input"] = G.tampering()
ip.input_transformers_cleanup.pop()
ip.run_cell("get_ipython().set_custom_exc((KeyError,), lambda *a, **k: None)")
out["exc"] = G.tampering()
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def shell_findings():
    env = dict(os.environ, MPLBACKEND="agg")
    run = subprocess.run(
        [sys.executable, "-c", SHELL], capture_output=True, text=True, timeout=300, env=env
    )
    assert run.returncode == 0, run.stderr[-2000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


def test_an_honest_shell_has_no_hook_findings(shell_findings):
    assert shell_findings["clean"] == []
    assert shell_findings["honest"] == []


@pytest.mark.parametrize(
    "key, where",
    [
        ("event", "(a pre_run_cell event callback)"),
        ("ast", "(ast_transformers)"),
        ("input", "(input_transformers_cleanup)"),
        ("exc", "(the custom exception handler)"),
    ],
)
def test_hooks_defined_in_the_notebook_are_tampering(shell_findings, key, where):
    found = shell_findings[key]
    assert len(found) == 1 and found[0].startswith("IPython runs ") and found[0].endswith(where)


def test_the_grader_stops_the_kernel_tree_and_sees_new_processes():
    # a "kernel" (sh) whose child (sleep) stands for a process started by the notebook
    kernel = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    try:
        fake = types.SimpleNamespace()
        fake._kernel_processes = lambda: execution._process_tree(kernel.pid)

        def started() -> bool:  # the child is forked and has become sleep (exec done)
            children = set(fake._kernel_processes()) - {kernel.pid}
            return any(execution._process_name(p) == "sleep" for p in children)

        deadline = time.monotonic() + 10
        while not started() and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = fake._kernel_processes()
        assert kernel.pid in tree and len(tree) == 2
        (child,) = set(tree) - {kernel.pid}
        assert execution._process_name(child) == "sleep"
        stopped = execution.ResilientExecute._stop_kernel(fake)
        assert set(stopped) == set(tree)
        assert set(execution._process_tree(kernel.pid).values()) == {"T"}  # stopped
        execution.ResilientExecute._continue_kernel(stopped)
        assert "T" not in execution._process_tree(kernel.pid).values()
        assert execution._process_tree(2**22 + 12345) == {}  # no such process
    finally:
        for pid in execution._process_tree(kernel.pid):
            if pid != kernel.pid:
                os.kill(pid, signal.SIGKILL)
        kernel.kill()
        kernel.wait()


def test_the_kernel_side_sees_processes_it_started(monkeypatch):

    # as after the grading kernel's snapshot (set here only for this test: this process
    # is pytest's, whose other children are none of the check's business)
    monkeypatch.setattr(trust, "_KERNEL_PROCESSES", set(trust._processes()))
    before = trust.foreign_processes()
    child = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while "sleep" not in trust.foreign_processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert trust.foreign_processes().count("sleep") == before.count("sleep") + 1
    finally:
        child.kill()
        child.wait()
    assert trust.foreign_processes().count("sleep") == before.count("sleep")


@pytest.mark.needs("bubblewrap")
def test_in_the_sandbox_both_sides_see_a_process_the_notebook_started():
    box = sandbox.Sandbox(slot=5)
    try:
        with sandbox_kernel(box, timeout=120) as (km, kc):

            def run(code):
                text, errors = wait(kc, kc.execute(code), timeout=120)
                assert not errors, errors
                return text.strip()

            run("import attnlib.checks.trust as G\nG.snapshot()")
            grader = types.SimpleNamespace()
            grader._kernel_processes = lambda: execution._process_tree(km.provisioner.pid)
            baseline = set(grader._kernel_processes())
            assert run("print(G._in_sandbox(), G.foreign_processes())") == "True []"
            run("import subprocess, time\n_p = subprocess.Popen(['sleep', '60'])\ntime.sleep(1)")
            assert run("print(G.foreign_processes())") == "['sleep']"
            stopped = execution.ResilientExecute._stop_kernel(grader)
            try:
                extra = [p for p in stopped if p not in baseline]
                assert [execution._process_name(p) for p in extra] == ["sleep"]
                assert set(execution._process_tree(km.provisioner.pid).values()) == {"T"}
            finally:
                execution.ResilientExecute._continue_kernel(stopped)
            assert run("_p.kill(); _p.wait(); print(G.foreign_processes())") == "[]"
    finally:
        box.cleanup()
