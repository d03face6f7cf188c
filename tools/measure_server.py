"""Measure one learner's server with lesson 16's kernel running: memory, CPU, start time.

    python tools/measure_server.py                  # 3 runs, notebooks/16_real_text.ipynb
    python tools/measure_server.py --runs 5 --json build/server_size.json
    flock /tmp/kv-system-tests.lock python tools/measure_server.py   # on a shared machine

One run: JupyterLab from the course environment, with the settings the class hub gives a
learner (``JUPYTER_CONFIG_PATH=jupyter/hub-learner``, ``OMP_NUM_THREADS=1``, the exchange at
a private temporary folder) and a private runtime and config folder (nothing of ``~/.jupyter``
is read), serving a folder holding a copy of the lesson. When ``/api/status`` answers, a
kernel is started through the server's REST API (``POST /api/kernels``), as the Lab does
when a learner opens the notebook; every code cell of the lesson then runs in that kernel,
sent over the kernel's own channels (jupyter_client's ``BlockingKernelClient`` on the
connection file the server wrote). The server process and the kernel process are read
from ``/proc`` (no psutil): ``VmHWM`` (peak resident set) and ``VmRSS``, user + system CPU
seconds. It prints each run and the minimum and maximum over the runs.

Not the hub's single-user server itself (``jupyterhub-singleuser`` needs a hub to talk
to): the same JupyterLab and extensions, without the hub's authentication layer. The kernel
is the lesson's memory; the server's own share is small beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
TICKS = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, token: str, method: str = "GET", body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    return json.loads(text) if text else None


def proc_numbers(pid: int) -> dict:
    """Peak and current resident memory (bytes) and CPU seconds of ``pid``, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    kib = {k: int(fields[k].split()[0]) * 1024 for k in ("VmHWM", "VmRSS")}
    stat = Path(f"/proc/{pid}/stat").read_text()
    after_name = stat.rsplit(")", 1)[1].split()  # the name may hold spaces
    utime, stime = int(after_name[11]), int(after_name[12])  # fields 14 and 15
    return {"peak_rss": kib["VmHWM"], "rss": kib["VmRSS"], "cpu": (utime + stime) / TICKS}


def _kernel_pid(server_pid: int, kernel_id: str) -> int:
    """The process among the server's children whose command line names the kernel."""
    for _ in range(100):
        for task in Path(f"/proc/{server_pid}/task").iterdir():
            children = (task / "children").read_text().split()
            for child in children:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                if kernel_id.encode() in cmdline:
                    return int(child)
        time.sleep(0.1)
    raise RuntimeError(f"no child of the server runs kernel {kernel_id}")


def code_cells(notebook: Path) -> list[str]:
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def one_run(notebook: Path, cell_timeout: float = 600.0) -> dict:
    from jupyter_client import BlockingKernelClient

    with tempfile.TemporaryDirectory(prefix="kv-measure-") as tmp:
        tmp = Path(tmp)
        home, runtime, exchange = tmp / "home", tmp / "runtime", tmp / "exchange"
        for d in (home, runtime, exchange):
            d.mkdir()
        shutil.copy(notebook, home / notebook.name)
        port, token = _free_port(), secrets.token_hex(16)
        env = dict(
            os.environ,
            JUPYTER_CONFIG_PATH=str(ROOT / "jupyter" / "hub-learner"),  # as the hub sets it
            JUPYTER_CONFIG_DIR=str(tmp / "config"),
            JUPYTER_RUNTIME_DIR=str(runtime),
            JUPYTER_DATA_DIR=str(tmp / "data"),
            JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
            KV_EXCHANGE=str(exchange),
            KV_COURSE_ID="key-vectors",
            OMP_NUM_THREADS="1",  # the hub's learner: one core
            HOME=str(home),
            PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        cmd = [
            str(VENV_BIN / "jupyter"),
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={home}",
        ]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        log = (tmp / "server.log").open("w+")
        t0 = time.perf_counter()
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=home, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            while True:
                if server.poll() is not None or time.perf_counter() - t0 > 120:
                    log.seek(0)
                    raise RuntimeError(f"the server did not start:\n{log.read()[-2000:]}")
                try:
                    _request(f"{base}/api/status", token)
                    break
                except (urllib.error.URLError, OSError):
                    time.sleep(0.1)
            ready = time.perf_counter() - t0
            idle = proc_numbers(server.pid)
            t1 = time.perf_counter()
            kernel = _request(f"{base}/api/kernels", token, "POST", {"name": "python3"})
            kpid = _kernel_pid(server.pid, kernel["id"])
            client = BlockingKernelClient()
            client.load_connection_file(str(runtime / f"kernel-{kernel['id']}.json"))
            client.start_channels()
            client.wait_for_ready(timeout=60)
            kernel_ready = time.perf_counter() - t1
            errors = []
            t2 = time.perf_counter()
            for i, source in enumerate(code_cells(home / notebook.name)):
                reply = client.execute_interactive(
                    source, timeout=cell_timeout, output_hook=lambda msg: None
                )
                if reply["content"]["status"] != "ok":
                    errors.append(f"cell {i}: {reply['content'].get('ename')}")
            cells = time.perf_counter() - t2
            kern, serv = proc_numbers(kpid), proc_numbers(server.pid)
            client.stop_channels()
            _request(f"{base}/api/kernels/{kernel['id']}", token, "DELETE")
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            log.close()
    return {
        "server_ready_s": round(ready, 2),
        "kernel_ready_s": round(kernel_ready, 2),
        "cells_s": round(cells, 2),
        "server_idle_rss": idle["rss"],
        "server_peak_rss": serv["peak_rss"],
        "server_cpu_s": round(serv["cpu"], 2),
        "kernel_peak_rss": kern["peak_rss"],
        "kernel_rss_after": kern["rss"],
        "kernel_cpu_s": round(kern["cpu"], 2),
        "errors": errors,
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebook", type=Path, default=ROOT / "notebooks" / "16_real_text.ipynb")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the runs here")
    args = parser.parse_args(argv)
    runs = []
    for i in range(args.runs):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        r = one_run(args.notebook)
        r["load_before"] = load
        runs.append(r)
        print(
            f"run {i + 1}: server ready {r['server_ready_s']} s "
            f"(idle {_mib(r['server_idle_rss'])}), "
            f"kernel ready {r['kernel_ready_s']} s, cells {r['cells_s']} s; "
            f"peak RSS server {_mib(r['server_peak_rss'])} kernel {_mib(r['kernel_peak_rss'])}; "
            f"CPU server {r['server_cpu_s']} s kernel {r['kernel_cpu_s']} s; "
            f"load {load}; errors {r['errors'] or 'none'}",
            flush=True,
        )
    keys = [k for k in runs[0] if k not in ("errors", "load_before")]
    summary = {k: (min(r[k] for r in runs), max(r[k] for r in runs)) for k in keys}
    for k, (lo, hi) in summary.items():
        shown = (_mib(lo), _mib(hi)) if "rss" in k else (lo, hi)
        print(f"{k:>18}: min {shown[0]}, max {shown[1]}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": runs, "min_max": summary}, indent=1))
    return 1 if any(r["errors"] for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
