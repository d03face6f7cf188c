"""`make lab` works: JupyterLab starts from the project's venv, serves the lessons, and
offers the course kernel. Talks to the server's REST API with the standard library only.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from conftest import NOTEBOOKS, ROOT, VENV_BIN

pytestmark = pytest.mark.slow

# ~60 s is plenty alone (6 s measured); 29 s was seen with 8 engineers sharing 2 cores.
START_TIMEOUT = 90.0


def free_port() -> int:
    # Port 0: the OS picks a port that is free now (safe under pytest-xdist: each worker
    # gets its own).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, token: str, timeout: float = 5.0):
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    jupyter = VENV_BIN / "jupyter"
    if not jupyter.exists():
        pytest.fail(f"{jupyter} is missing: run `make setup` first")
    port, token = free_port(), secrets.token_hex(16)
    runtime = tmp_path_factory.mktemp("jupyter-runtime")
    cmd = [
        str(jupyter),
        "lab",
        "--no-browser",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={ROOT}",
        "--ServerApp.port_retries=0",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    # a private runtime dir: no clash with a lab the user is running, no stale files left
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime))
    log = (runtime / "lab.log").open("w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        status = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                status = get_json(f"{base}/api/status", token, timeout=2.0)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(0.5)
        if status is None:
            log.seek(0)
            pytest.fail(
                f"JupyterLab did not answer /api/status within {START_TIMEOUT:.0f} s "
                f"(exit code {proc.poll()}):\n{log.read()[-3000:]}"
            )
        yield {"base": base, "token": token, "status": status}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


def test_lab_answers_status(lab):
    assert "started" in lab["status"]


def test_lab_refuses_requests_without_the_token(lab):
    with pytest.raises(urllib.error.HTTPError) as err:
        get_json(f"{lab['base']}/api/contents/notebooks", token="wrong")
    assert err.value.code == 403


def test_lab_lists_the_lessons(lab):
    listing = get_json(f"{lab['base']}/api/contents/notebooks", lab["token"])
    assert listing["type"] == "directory"
    served = {item["name"] for item in listing["content"] if item["type"] == "notebook"}
    lessons = {p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
    assert lessons, "no lessons in notebooks/"
    assert lessons <= served, f"not served: {sorted(lessons - served)}"


def test_lab_offers_the_course_kernel(lab):
    specs = get_json(f"{lab['base']}/api/kernelspecs", lab["token"])
    assert "key-vectors" in specs["kernelspecs"], sorted(specs["kernelspecs"])
    spec = specs["kernelspecs"]["key-vectors"]["spec"]
    assert spec["display_name"] == "Key Vectors (Python 3)"
    # the kernel runs the venv's python, so lessons import the installed attnlib
    python = spec["argv"][0]
    assert os.path.realpath(python) == os.path.realpath(VENV_BIN / "python"), python
