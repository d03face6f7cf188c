"""Start JupyterLab from the project's venv for a test, and stop it afterwards.

Shared by the smoke test (tests/test_lab_smoke.py) and the real-browser check
(tests/test_browser.py). Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, VENV_BIN


def free_port() -> int:
    # Port 0: the OS picks a port that is free now (safe under pytest-xdist).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, token: str, timeout: float = 5.0):
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


@contextlib.contextmanager
def running_lab(
    runtime: Path,
    start_timeout: float,
    stop_timeout: float = 20.0,
    root: Path = ROOT,
    extra_args: tuple[str, ...] = (),
):
    """Yield ``{"base", "token", "status"}`` of a JupyterLab serving ``root`` (the
    repository; a learner's workbook folder for the learner's view), with ``extra_args``.

    ``runtime`` is a private folder for the server's runtime files, workspaces, user config
    and user settings (no clash with a lab the user runs, nothing read from or written to
    ``~/.jupyter``): the server sees exactly the venv's settings, i.e. the learners' Lab
    that ``make lab`` starts (tools/lab_settings.py). The server is terminated (then
    killed) on exit; that also stops any kernel a page started.
    """
    jupyter = VENV_BIN / "jupyter"
    if not jupyter.exists():
        pytest.fail(f"{jupyter} is missing: run `make setup` first")
    port, token = free_port(), secrets.token_hex(16)
    cmd = [
        str(jupyter),
        "lab",
        "--no-browser",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.port_retries=0",
        f"--LabApp.workspaces_dir={runtime / 'workspaces'}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    cmd += list(extra_args)
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(runtime),
        JUPYTER_CONFIG_DIR=str(runtime / "config"),
        JUPYTERLAB_SETTINGS_DIR=str(runtime / "user-settings"),
    )
    env.pop("JUPYTER_CONFIG_PATH", None)
    log = (runtime / "lab.log").open("w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline, status = time.monotonic() + start_timeout, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status = get_json(f"{base}/api/status", token, timeout=2.0)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(0.5)
        if status is None:
            log.seek(0)
            pytest.fail(
                f"JupyterLab did not answer /api/status within {start_timeout:.0f} s "
                f"(exit code {proc.poll()}):\n{log.read()[-3000:]}"
            )
        yield {"base": base, "token": token, "status": status}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=stop_timeout)
        log.close()
