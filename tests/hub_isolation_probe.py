"""What an account can reach from where its hub server runs (tests/test_hub_isolation.py).

Started through the hub's own spawner (tests/hub_isolation_spawner.py) as a learner or the
instructor, so it runs in that account's view with that account's rights; its source is
passed with ``python -c`` (a learner's view has no tests/ folder):

    python -c "$(cat tests/hub_isolation_probe.py)" '{"out": ..., "paths": [...], ...}'

It tries, as an attacker with a learner's account would, and writes what happened to
``out`` (JSON, in the account's home):

* ``paths``: open each file or list each folder (the answer keys, lesson 05 with its
  solutions, the git history, a staff member's scratch copy in /tmp, another learner's home,
  the instructor's course folder);
* ``imports``: ``import kvstaff.grader.answer_keys`` in a python (a terminal's) and, with
  ``kernel``, in the course kernel the server starts (jupyter_client, kernel key-vectors);
* ``shell``: ``cat`` the answer keys from bash (a terminal);
* ``escape``: a user namespace of its own (``unshare -Urm``) to unmount what covers the
  checkout; ``/proc/PID/root`` of every process it can see;
* ``search`` (with ``search``): every ``.ipynb`` it can list anywhere (from /) that holds
  ``### BEGIN SOLUTION``, with the hashes of its solution blocks, and every
  ``answer_keys*.py*`` file;
* ``limits``: its rlimits, cgroups and no_new_privs.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import time

MARK_BEGIN, MARK_END = "### BEGIN SOLUTION", "### END SOLUTION"
KEYS_MODULE = "kvstaff.grader.answer_keys"
SKIP = ("/proc", "/sys", "/dev", "/run")


def solution_blocks(text: str) -> set[str]:
    """sha256 of each solution block (the lines between the markers, stripped) in a
    notebook's JSON text: the same block in another copy gives the same hash."""
    out = set()
    for source in _sources(text):
        inside, block = False, []
        for line in source.splitlines():
            if MARK_BEGIN in line:
                inside, block = True, []
            elif MARK_END in line and inside:
                inside = False
                body = "\n".join(x.rstrip() for x in block).strip()
                if len(body) > 20:
                    out.add(hashlib.sha256(body.encode()).hexdigest())
            elif inside:
                block.append(line)
    return out


def _sources(text: str) -> list[str]:
    try:
        nb = json.loads(text)
        cells = nb.get("cells", []) if isinstance(nb, dict) else []
        return ["".join(c.get("source", "")) for c in cells if isinstance(c, dict)]
    except (ValueError, AttributeError, TypeError):
        return [text]


def attempt(path: str) -> str:
    """READ, or the error's name (FileNotFoundError: not in this view at all)."""
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as fh:
                fh.read(64)
        return "READ"
    except OSError as err:
        return type(err).__name__


def run(argv: list[str], timeout: float = 60) -> dict:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return {"rc": done.returncode, "out": done.stdout[-400:], "err": done.stderr[-400:]}
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"rc": None, "err": str(err)}


KERNEL_CODE = """
import json, importlib
res = {}
try:
    m = importlib.import_module(%(module)r)
    res['import'] = 'IMPORTED ' + str(m.__file__)
except Exception as err:
    res['import'] = type(err).__name__
res['paths'] = {}
for p in %(paths)r:
    try:
        open(p, 'rb').read(64)
        res['paths'][p] = 'READ'
    except Exception as err:
        res['paths'][p] = type(err).__name__
import attnlib.tasks.shipped as shipped
res['attnlib'] = str(shipped.__file__)
print('KV-RESULT ' + json.dumps(res))
"""


def in_kernel(paths: list[str]) -> dict:
    """Run KERNEL_CODE in the course kernel (key-vectors), as the server would start it."""
    from jupyter_client.manager import start_new_kernel

    t0 = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="key-vectors", startup_timeout=120)
    lines: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            lines.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            lines.append("ERROR " + msg["content"]["ename"])

    try:
        code = KERNEL_CODE % {"module": KEYS_MODULE, "paths": paths}
        kc.execute_interactive(code, output_hook=hook, timeout=120)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(lines)
    found = [ln for ln in text.splitlines() if ln.startswith("KV-RESULT ")]
    res = json.loads(found[-1].removeprefix("KV-RESULT ")) if found else {"raw": text[-500:]}
    res["seconds"] = round(time.perf_counter() - t0, 1)
    return res


def search(top: str = "/") -> dict:
    """Every readable .ipynb with a solution marker (and its blocks' hashes) and every
    answer_keys*.py* file, anywhere this account can list."""
    marked, keys, listed, t0 = {}, [], 0, time.perf_counter()
    for root, dirs, files in os.walk(top):
        if root == "/":
            dirs[:] = [d for d in dirs if "/" + d not in SKIP]
        listed += len(files)
        for name in files:
            path = os.path.join(root, name)
            if name.startswith("answer_keys") and ".py" in name:
                keys.append(path)
            if not name.endswith(".ipynb"):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            if MARK_BEGIN in text:
                marked[path] = sorted(solution_blocks(text))
    return {
        "marked": marked,
        "answer_keys": keys,
        "files_listed": listed,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def escape(repo: str, keys: str) -> dict:
    out = {
        "unshare_umount": run(
            ["unshare", "-Urm", "sh", "-c", f"umount -l {repo}; cat {keys} | head -c 64"]
        )
    }
    read_via_proc = []
    for pid in os.listdir("/proc"):
        path = f"/proc/{pid}/root{keys}"
        if pid.isdigit() and attempt(path) == "READ":
            read_via_proc.append(path)
    out["proc_root"] = read_via_proc
    out["processes_seen"] = sum(p.isdigit() for p in os.listdir("/proc"))
    return out


def limits() -> dict:
    names = ("RLIMIT_NPROC", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_CORE")
    status = open("/proc/self/status").read()
    return {
        "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in names},
        "cgroup": open("/proc/self/cgroup").read().splitlines(),
        "no_new_privs": [ln for ln in status.splitlines() if ln.startswith("NoNewPrivs")],
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MEM_LIMIT", "CPU_LIMIT")},
    }


def main(args: dict) -> dict:
    keys = args["keys"]
    out = {"uid": os.getuid(), "paths": {p: attempt(p) for p in args["paths"]}}
    out["imports"] = {
        "python": run([sys.executable, "-c", f"import {KEYS_MODULE} as k; print(k.__file__)"]),
    }
    out["shell"] = run(["bash", "-c", f"cat {keys} | head -c 64"])
    if args.get("kernel"):
        out["imports"]["kernel"] = in_kernel(list(args["paths"]))
    out["escape"] = escape(args["repo"], keys)
    if args.get("search"):
        out["search"] = search()
    out["limits"] = limits()
    return out


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    result = main(request)
    with open(request["out"], "w") as fh:
        json.dump(result, fh)
