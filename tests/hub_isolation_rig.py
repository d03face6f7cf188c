"""The rig of tests/test_hub_isolation.py: the accounts and the stand-in hub, the test's own
cgroup around the attacks, the real hub (`python -m kvstaff.hub start`), and a bystander
(another learner's Jupyter server, the grader's sandbox) whose answers are timed.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from conftest import ROOT, free_port_block, project_python

from kvstaff import hub

PYTHON = project_python()
PROBE = (Path(__file__).parent / "hub_isolation_probe.py").read_text()
LESSON_05 = ROOT / "notebooks" / "05_keys_vs_values.ipynb"
# The test's own caps around everything the stand-in starts (independent of the hub's code,
# so that the machine survives a fork bomb or an allocation even if the limits failed).
OUTER_PIDS, OUTER_MEMORY = 1200, 12 * 2**30


# ---- the test's own cap, the stand-in hub ----------------------------------------------------


class OuterCap:
    """A pids and a memory cgroup of the test's own, made with plain writes (none of the
    hub's code), around the stand-in hub and all it starts: were the hub's limits to fail,
    a fork bomb or an allocation still ends here. cgroup v1 (this machine) or v2 where the
    test's own cgroup can hand the controllers to a child (a root cgroup)."""

    LIMITS = {"pids": "pids.max", "memory": "memory.limit_in_bytes"}

    def __init__(self, name: str, pids: int, memory: int):
        own, v2_own = {}, None
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hid, ctrls, path = line.split(":", 2)
            v2_own = path if hid == "0" and not ctrls else v2_own
            own.update({c: path for c in ctrls.split(",") if ctrls})
        v1, v2 = {}, None
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields, _, tail = line.partition(" - ")
            mount, (fstype, _, options) = Path(fields.split()[4]), tail.split()[:3]
            for c in set(self.LIMITS) & set(options.split(",")) if fstype == "cgroup" else ():
                v1[c] = mount / own[c].lstrip("/") / name
            if fstype == "cgroup2" and v2_own is not None:
                v2 = mount / v2_own.lstrip("/")
        values = {"pids": str(pids), "memory": str(memory)}
        if set(v1) == set(self.LIMITS):
            self.folders = list(v1.values())
            settings = {v1[c]: [(f, values[c])] for c, f in self.LIMITS.items()}
        elif v2 is not None:
            (v2 / "cgroup.subtree_control").write_text("+pids +memory")
            self.folders = [v2 / name]
            settings = {v2 / name: [("pids.max", values["pids"]), ("memory.max", values["memory"])]}
        else:
            raise RuntimeError("no pids and memory cgroups to put around the attacks")
        for folder, pairs in settings.items():
            folder.mkdir()
            for f, v in pairs:
                (folder / f).write_text(v)
        self.procs = [str(f / "cgroup.procs") for f in self.folders]

    def join(self) -> None:
        """A preexec_fn: the child (and all it starts) inside the cap."""
        for p in self.procs:
            fd = os.open(p, os.O_WRONLY)
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)

    def pids(self) -> set[int]:
        out: set[int] = set()
        for f in self.folders:
            for procs in f.rglob("cgroup.procs"):
                out |= {int(p) for p in procs.read_text().split()}
        return out

    def remove(self) -> None:
        for _ in range(200):
            left = self.pids()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        for f in self.folders:
            for d in sorted((p for p in f.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                d.rmdir()
            f.rmdir()


class Hub:
    """Accounts from a roster (an instructor, then learners), the exchange, the hub's state,
    and the stand-in hub (tests/hub_isolation_spawner.py) in the hub's private view, inside
    :class:`OuterCap`."""

    def __init__(self, base: Path, instructor: str, learners: list[str]):
        self.base = base
        self.homes, self.exchange, self.state = base / "home", base / "exchange", base / "state"
        self.roster_path = base / "roster.csv"
        lines = [f"{instructor},instructor,Teacher"] + [f"{u},learner,{u}" for u in learners]
        self.roster_path.write_text("username,role,name\n" + "\n".join(lines) + "\n")
        self.roster = hub.read_roster(self.roster_path)
        self.proc = None
        self.cap = None

    def home(self, user: str) -> Path:
        return Path(pwd.getpwnam(user).pw_dir)

    def set_up(self) -> None:
        hub.ensure_accounts(self.roster, self.homes, echo=lambda *_: None)
        hub.prepare_exchange(self.exchange, self.roster.instructors[0].username)
        hub.instructor_course(self.roster.instructors[0], self.homes)
        hub.hub_state(self.state, self.roster)
        # a staff member's scratch copy of lesson 05, with its solutions, in the shared /tmp
        self.scratch = self.base / "scratch" / LESSON_05.name
        self.scratch.parent.mkdir()
        shutil.copyfile(LESSON_05, self.scratch)
        os.chmod(self.scratch, 0o644)
        # and a staff member's clone of the course, readable by all, in a folder of its own
        # directly under / that no configuration names (as a second checkout would be)
        self.stray = Path(tempfile.mkdtemp(prefix="kvi-stray-clone-", dir="/"))
        os.chmod(self.stray, 0o755)
        shutil.copytree(ROOT / "notebooks", self.stray / "notebooks")
        for path in (self.stray / "notebooks").rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        self.env = dict(
            os.environ,
            KV_HUB_ROSTER=str(self.roster_path),
            KV_EXCHANGE=str(self.exchange),
            KV_HUB_STATE=str(self.state),
            KV_HUB_HOMES=str(self.homes),
            KV_HUB_PORT="8000",  # never listened on: no hub runs
        )
        self.cap = OuterCap(f"kv-isolation-test-{os.getpid()}", OUTER_PIDS, OUTER_MEMORY)
        argv = [PYTHON, str(ROOT / "tests" / "hub_isolation_spawner.py")]
        self.log = open(self.base / "spawner.log", "w")
        self.proc = subprocess.Popen(
            self.view(argv),
            env=self.env,
            cwd=self.base,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            preexec_fn=self.cap.join,
        )
        self.lock = threading.Lock()

    def view(self, argv: list[str]) -> list[str]:
        return hub.private_view(argv, [hub.python_prefix(), ROOT], self.base / "view")

    def ask(self, **req) -> dict:
        with self.lock:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        assert line, "the stand-in hub died: " + (self.base / "spawner.log").read_text()[-3000:]
        return json.loads(line)

    def start(self, key: str, user: str, cmd: list[str]) -> int:
        return self.ask(op="start", key=key, user=user, cmd=cmd)["pid"]

    def wait(self, key: str, timeout: float) -> int | None:
        return self.ask(op="wait", key=key, timeout=timeout)["returncode"]

    def stop(self, key: str) -> None:
        self.ask(op="stop", key=key)

    def probe(self, user: str, out: str, **args) -> dict:
        """tests/hub_isolation_probe.py as ``user`` through the spawner; its findings."""
        path = self.home(user) / out
        request = dict(args, out=str(path))
        self.start(out, user, [PYTHON, "-c", PROBE, json.dumps(request)])
        rc = self.wait(out, timeout=300)
        self.stop(out)
        assert rc == 0 and path.exists(), (rc, (self.base / "spawner.log").read_text()[-3000:])
        return json.loads(path.read_text())

    def tear_down(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # the stand-in stops what is left
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.log.close()
        if self.cap is not None:
            self.cap.remove()
        hub.remove_accounts(self.roster, echo=lambda *_: None)
        if getattr(self, "stray", None) is not None:
            shutil.rmtree(self.stray, ignore_errors=True)


# ---- the real hub ---------------------------------------------------------------------------


class RealHub:
    """`python -m kvstaff.hub start` (what `make hub` runs) on the test's roster, driven
    through its REST API with a service token."""

    def __init__(self, h: Hub):
        self.h, self.port, self.token = h, free_port_block(), os.urandom(16).hex()
        env = dict(h.env, KV_HUB_PORT=str(self.port), KV_HUB_API_TOKEN=self.token)
        argv = [PYTHON, "-m", "kvstaff.hub", "start", "--roster", str(h.roster_path)]
        argv += ["--exchange", str(h.exchange), "--homes", str(h.homes)]
        self.log_path = h.base / "hub.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=h.base,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        t0 = time.perf_counter()
        while True:
            assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
            try:
                if self.api("GET", "/hub/api/")[0] == 200:  # the hub, not just its proxy
                    break
            except OSError:
                pass
            assert time.perf_counter() - t0 < 60, self.log_path.read_text()[-3000:]
            time.sleep(0.1)

    def api(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                text = resp.read().decode()
                return resp.status, (json.loads(text) if text.strip() else None)
        except urllib.error.HTTPError as err:
            return err.code, None

    def start_server(self, user: str) -> None:
        status, _ = self.api("POST", f"/hub/api/users/{user}/server")
        assert status in (201, 202), (status, self.log_path.read_text()[-3000:])
        t0 = time.perf_counter()
        while True:
            status, info = self.api("GET", f"/hub/api/users/{user}")
            assert status == 200, (status, self.log_path.read_text()[-3000:])
            if info["servers"].get("", {}).get("ready"):
                return
            assert time.perf_counter() - t0 < 90, self.log_path.read_text()[-3000:]
            time.sleep(0.2)

    def run_in_kernel(self, user: str, code: str) -> str:
        """Start the course kernel in ``user``'s server (its REST API), run ``code`` there
        (its websocket), return what it printed and the names of its errors."""
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        status, kernel = self.api("POST", f"/user/{user}/api/kernels", {"name": "key-vectors"})
        assert status == 201, status
        url = f"ws://127.0.0.1:{self.port}/user/{user}/api/kernels/{kernel['id']}/channels"
        msg_id = uuid.uuid4().hex
        request = {
            "header": {
                "msg_id": msg_id,
                "msg_type": "execute_request",
                "username": user,
                "session": uuid.uuid4().hex,
                "version": "5.3",
            },
            "parent_header": {},
            "metadata": {},
            "channel": "shell",
            "buffers": [],
            "content": {
                "code": code,
                "silent": False,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
        }

        async def talk() -> str:
            headers = {"Authorization": f"token {self.token}"}
            ws = await websocket_connect(HTTPRequest(url, headers=headers))
            await ws.write_message(json.dumps(request))
            out = []
            while True:
                msg = json.loads(await asyncio.wait_for(ws.read_message(), 120))
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    out.append(content["text"])
                elif kind == "error":
                    out.append("ERROR " + content["ename"])
                elif kind == "status" and content["execution_state"] == "idle":
                    ws.close()
                    return "".join(out)

        try:
            return asyncio.run(talk())
        finally:
            self.api("DELETE", f"/user/{user}/api/kernels/{kernel['id']}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the hub stops its servers first
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def server_pid(user: str) -> int:
    uid = pwd.getpwnam(user).pw_uid
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid:
                if b"jupyterhub-singleuser" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return int(pid)
        except OSError:
            pass
    raise AssertionError(f"no server process of {user}")


# ---- the bystander, and the attacker's traces --------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bystander:
    """Bob's Jupyter server (the course's jupyter-server, started by the spawner as Bob),
    and the grader's sandbox: how long each takes to answer."""

    def __init__(self, h: Hub, user: str):
        self.h, self.token, self.port = h, os.urandom(8).hex(), free_port()
        cmd = [str(Path(PYTHON).parent / "jupyter-server"), "--ServerApp.ip=127.0.0.1"]
        cmd += [f"--ServerApp.port={self.port}", f"--IdentityProvider.token={self.token}"]
        cmd += ["--ServerApp.open_browser=False", "--ServerApp.port_retries=0"]
        h.start("bystander", user, cmd)
        self.sandbox()  # imported once, before anything is timed
        t0 = time.perf_counter()
        while self.api() is None:
            assert time.perf_counter() - t0 < 90, "Bob's server did not answer"
            time.sleep(0.2)

    def api(self, timeout: float = 30) -> float | None:
        """Seconds for Bob's server to answer /api/contents (None if it did not)."""
        url = f"http://127.0.0.1:{self.port}/api/contents?token={self.token}"
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                resp.read()
            return time.perf_counter() - t0
        except OSError:
            return None

    @staticmethod
    def sandbox() -> float:
        """Seconds for the grader's sandbox (bubblewrap, as autograde starts each kernel) to
        start a python that imports attnlib (and with it torch)."""
        from kvstaff.grader.sandbox import Sandbox

        box = Sandbox(slot=7)
        try:
            argv = box.command([PYTHON, "-c", "import attnlib; print('ok')"], log=False)
            t0 = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            seconds = time.perf_counter() - t0
        finally:
            box.cleanup()
        assert done.stdout.strip() == "ok", done.stderr[-2000:]
        return seconds

    def measure(self, seconds: float) -> dict:
        """Bob's API every 0.25 s and the sandbox now and then, for ``seconds``."""
        api, box, t0 = [], [], time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            api.append(self.api())
            if len(api) % 12 == 1:
                box.append(self.sandbox())
            time.sleep(0.25)
        answered = [a for a in api if a is not None]
        return {
            "api_n": len(api),
            "api_unanswered": len(api) - len(answered),
            "api_median_s": round(sorted(answered)[len(answered) // 2], 3) if answered else None,
            "api_max_s": round(max(answered), 3) if answered else None,
            "sandbox_s": [round(b, 2) for b in box],
        }


def tasks_of(user: str) -> int:
    """Every process and thread of the account, machine-wide (what RLIMIT_NPROC counts)."""
    uid, n = pwd.getpwnam(user).pw_uid, 0
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid:
                n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return n


def memory_peak(h: Hub, user: str) -> int:
    """The most memory the account's server cgroup held (v1 max_usage_in_bytes, v2 peak)."""
    kind, own = h.ask(op="config")["cgroups"]["memory"]
    folder = Path(own) / "key-vectors-hub" / user
    name = "memory.max_usage_in_bytes" if kind == "v1" else "memory.peak"
    return int((folder / name).read_text())


def gone(user: str, timeout: float = 20) -> tuple[int, float]:
    """Wait for the account's processes to be gone (the exited bomb's orphans are reaped
    by init); how many are left, and after how many seconds."""
    t0 = time.perf_counter()
    while (n := tasks_of(user)) and time.perf_counter() - t0 < timeout:
        time.sleep(0.1)
    return n, round(time.perf_counter() - t0, 1)
