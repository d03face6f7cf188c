"""The class hub against attackers with real learner accounts: what a learner's server can
read, what root's set-up follows, and what one learner's processes can take from the others.

The hub's configuration file is loaded as JupyterHub loads it and its spawner starts
commands as real accounts (tests/hub_isolation_spawner.py, the "stand-in hub"): the
pre_spawn_hook, LocalProcessSpawner's own start() — one Popen with the spawner's preexec_fn
and environment — and stop(). A command started that way runs exactly where that account's
hub server, and so its kernels and terminals, would run: its mount view, its limits, its
cgroup. One real hub (`python -m kvstaff.hub start`, ~6 s) then shows that JupyterHub's own
spawn of a learner's server gives it the same. tests/test_hub.py runs the instructor's whole
flow through the same hub and spawner. The attacks:

* **a probe** (tests/hub_isolation_probe.py) as a learner: read lesson 05's answer keys and
  the lessons with their solutions by path, the git history, a staff member's scratch copy
  in /tmp, a staff member's clone of the course in a folder directly under / that no
  configuration names (a second checkout, as CI's machine has), another learner's home;
  ``import kvstaff.grader.answer_keys`` in a python, in bash and in the course kernel;
  unmount the cover from a user namespace of its own; go through ``/proc/PID/root``; search
  the whole file system it can list for notebooks with ``### BEGIN SOLUTION``. The same
  probe run as the same learner *without* the spawner (setpriv, in the hub's view) reads all
  of it: the probe finds what is there. As the instructor it reads and imports the staff
  side (their server keeps the checkout). On the real hub: links the learner plants in her
  home, read through her server's contents API, and the import in a kernel her real server
  starts.
* **a fork bomb** (bounded: a budget of its own, a deadline, and the test's own cgroup
  around everything the stand-in starts) and **a 30 GB allocation** as one learner, while
  another learner's Jupyter server answers its API and the grader's sandbox starts a
  python; the numbers are printed.
* the instructor's course folder replaced by **a link to a root-owned 0700 folder**: the
  set-up refuses it and changes nothing (and the hub's state folder likewise).

Runs as root (it creates accounts; `flock /tmp/kv-system-tests.lock` around it when other
system tests may run). About 55 s.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT
from hub_isolation_probe import solution_blocks
from hub_isolation_rig import (
    LESSON_05,
    PROBE,
    PYTHON,
    Bystander,
    Hub,
    RealHub,
    gone,
    memory_peak,
    server_pid,
    tasks_of,
)

from kvstaff import hub

pytestmark = [
    pytest.mark.second_stage,  # CI's second stage: make test-course
    # accounts, the grader's sandbox, the real hub's proxy: each a failure, not a skip, in CI
    pytest.mark.needs("root", "account tools", "bubblewrap", "npm assets", "cgroups"),
]

PREFIX = "kvi-"
TEACH, MALLORY, BOB = f"{PREFIX}teach", f"{PREFIX}mallory", f"{PREFIX}bob"
KEYS = ROOT / "staff" / "kvstaff" / "grader" / "answer_keys.py"
BOMB_BUDGET, BOMB_SECONDS = 800, 10  # the bomb's own bound on processes; its deadline


def probe_request(h: Hub, **extra) -> dict:
    paths = [
        str(KEYS),
        str(LESSON_05),
        str(ROOT / "notebooks"),
        str(ROOT / "staff"),
        str(ROOT / ".git" / "HEAD"),
        str(ROOT / "tests"),
        str(h.scratch),
        str(stray_lesson(h)),
        str(h.home(BOB)),
        str(h.home(TEACH)),
        str(h.home(TEACH) / hub.COURSE_ID),
        str(h.state / "admin_password"),
    ]
    return dict(paths=paths, keys=str(KEYS), repo=str(ROOT), **extra)


def stray_lesson(h: Hub) -> Path:
    """Lesson 05 with its solutions in the staff member's clone directly under /."""
    return h.stray / "notebooks" / LESSON_05.name


@pytest.fixture(scope="module")
def hub_box():
    base = Path(tempfile.mkdtemp(prefix="kv-iso-test-"))  # in /tmp, 0755: as others' are
    os.chmod(base, 0o755)
    h = Hub(base, TEACH, [MALLORY, BOB])
    try:
        h.set_up()
        yield h
    finally:
        h.tear_down()
        shutil.rmtree(base, ignore_errors=True)
    left = [u for u in (TEACH, MALLORY, BOB) if _account(u)]
    assert not left, f"accounts left: {left}"


def _account(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="module")
def probes(hub_box):
    """The probe as Mallory through the spawner (with the course kernel and the search), as
    the instructor through the spawner (with the kernel), and as Mallory without it."""
    h = hub_box
    out = {}
    t0 = time.perf_counter()
    out["learner"] = h.probe(MALLORY, "learner.json", **probe_request(h, kernel=True, search=True))
    out["instructor"] = h.probe(TEACH, "instructor.json", **probe_request(h, kernel=True))
    out["unconfined"] = unconfined_probe(h, MALLORY, probe_request(h, search=True))
    print(
        f"\nprobes: {time.perf_counter() - t0:.1f} s; the learner's search listed "
        f"{out['learner']['search']['files_listed']} files in "
        f"{out['learner']['search']['seconds']} s"
    )
    return out


def unconfined_probe(h: Hub, user: str, request: dict) -> dict:
    """The same probe as ``user``, started without the spawner (setpriv in the hub's view,
    as tests/test_hub.py's actors are): what the account could reach without its view."""
    path = h.home(user) / "unconfined.json"
    request = dict(request, out=str(path))
    argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    argv += ["env", "-i", f"HOME={h.home(user)}", f"PATH={Path(PYTHON).parent}:/usr/bin:/bin"]
    argv += [PYTHON, "-c", PROBE, json.dumps(request)]
    done = subprocess.run(h.view(argv), cwd=h.home(user), capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(path.read_text())


def our_solutions() -> set[str]:
    """The hashes of every solution block of the instructor's lessons."""
    out: set[str] = set()
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        out |= solution_blocks(nb.read_text())
    assert len(out) > 20, "the lessons' solution blocks were not found"
    return out


# ---- 1. no answer key, no solution ----------------------------------------------------------


def test_the_hub_starts_every_server_through_the_course_spawner(hub_box):
    info = hub_box.ask(op="config")
    assert info["spawner"].endswith("CourseSpawner")
    assert "LocalProcessSpawner" in info["bases"]
    assert info["start"] == "LocalProcessSpawner.start"  # the probes took the hub's own path
    assert info["cgroups_problem"] is None, info  # memory, pids and cpu on this machine
    assert set(info["cgroups"]) == {"memory", "pids", "cpu"}


def test_a_learner_can_neither_read_nor_import_any_answer_key_or_solution(probes, hub_box):
    res = probes["learner"]
    assert res["uid"] == pwd.getpwnam(MALLORY).pw_uid
    assert not [p for p, v in res["paths"].items() if v == "READ"], res["paths"]
    # the checkout is not in the learner's world at all, apart from what its server needs
    assert res["paths"][str(KEYS)] == res["paths"][str(LESSON_05)] == "FileNotFoundError"
    # nor is any folder directly under / but the system's: a clone nobody configured is gone
    assert res["paths"][str(stray_lesson(hub_box))] == "FileNotFoundError"
    # import in a python (a terminal's), cat in bash, and in the course kernel
    assert res["imports"]["python"]["rc"] != 0
    assert "No module named 'kvstaff'" in res["imports"]["python"]["err"]
    assert res["shell"]["out"] == "" and "No such file" in res["shell"]["err"]
    kernel = res["imports"]["kernel"]
    assert kernel["import"] == "ModuleNotFoundError", kernel
    assert not [p for p, v in kernel["paths"].items() if v == "READ"], kernel["paths"]
    assert kernel["attnlib"].startswith(str(ROOT / "attnlib")), kernel  # the course works
    print(f"\nthe learner's course kernel started and ran in {kernel['seconds']} s")


def test_no_solution_anywhere_a_learner_can_list(probes):
    search = probes["learner"]["search"]
    ours = our_solutions()
    leaked = {p: h for p, h in search["marked"].items() if ours & set(h)}
    assert not leaked, f"the learner found the lessons' solutions in: {sorted(leaked)}"
    # what is left holding a marker is nbgrader's own documentation and test files
    site = ROOT / ".venv" / "lib"
    others = [
        p for p in search["marked"] if not (Path(p).is_relative_to(site) and "/nbgrader/" in p)
    ]
    assert not others, others
    assert search["answer_keys"] == [], search["answer_keys"]
    assert search["files_listed"] > 10_000  # it did search the machine


def nbgrader_file(path: Path, lib: Path) -> bool:
    return path.is_relative_to(lib) and "site-packages/nbgrader/" in str(path)


def test_a_learner_cannot_undo_the_view(probes):
    esc = probes["learner"]["escape"]
    assert esc["unshare_umount"]["out"] == "", esc  # the cover is locked in their namespace
    assert esc["proc_root"] == [], esc
    # its own /proc lists the learner's own processes only
    assert esc["processes_seen"] < probes["unconfined"]["escape"]["processes_seen"]


def test_the_same_probe_without_the_learners_view_finds_everything(probes, hub_box):
    """The probes are not blind: run as the same learner account outside its server's
    view, they read the answer keys, the lessons, the scratch copy and find the solutions."""
    res = probes["unconfined"]
    for p in (KEYS, LESSON_05, stray_lesson(hub_box)):
        assert res["paths"][str(p)] == "READ"
    # its search finds the solutions in the stray clone too
    assert any(Path(p).is_relative_to(hub_box.stray) for p in res["search"]["marked"])
    assert res["imports"]["python"]["rc"] == 0
    found = set().union(*map(set, res["search"]["marked"].values()))
    assert our_solutions() <= found
    assert any(p.endswith("answer_keys.py") for p in res["search"]["answer_keys"])


def test_the_instructor_still_reaches_the_whole_course(probes):
    res = probes["instructor"]
    assert res["uid"] == pwd.getpwnam(TEACH).pw_uid
    for p in (KEYS, LESSON_05, ROOT / "notebooks", ROOT / "staff"):
        assert res["paths"][str(p)] == "READ", p
    assert res["imports"]["python"]["rc"] == 0
    assert res["imports"]["kernel"]["import"].startswith("IMPORTED "), res["imports"]["kernel"]
    assert res["paths"][str(hub_course(TEACH))] == "READ"
    assert res["limits"]["rlimits"]["RLIMIT_NPROC"][0] != 256  # no learner's limits


def hub_course(user: str) -> Path:
    return Path(pwd.getpwnam(user).pw_dir) / hub.COURSE_ID


def test_a_learner_server_runs_with_its_limits_and_cgroup(probes):
    lim = probes["learner"]["limits"]
    r = lim["rlimits"]
    assert r["RLIMIT_NPROC"] == [256, 256] and r["RLIMIT_AS"] == [6 * 2**30] * 2
    assert r["RLIMIT_CORE"] == [0, 0]
    for c in ("memory", "pids", "cpu"):
        line = next(ln for ln in lim["cgroup"] if f":{c}:" in ln or f",{c}:" in ln)
        assert line.endswith(f"/key-vectors-hub/{MALLORY}"), lim["cgroup"]
    assert lim["no_new_privs"] == ["NoNewPrivs:\t1"]
    assert lim["env"] == {"OMP_NUM_THREADS": "1", "MEM_LIMIT": str(4 * 2**30), "CPU_LIMIT": "1.0"}


# ---- the real hub: a learner's server as JupyterHub starts it ---------------------------------


def test_the_real_hub_starts_a_learners_server_in_its_view_with_its_limits(hub_box):
    """`make hub`'s own start, JupyterHub's own spawn: Mallory's real server (and a kernel
    it starts) has the limits and the cgroup, and neither its contents API (following links
    Mallory plants in her home) nor its kernel reaches the answer keys or the lessons."""
    h, t0 = hub_box, time.perf_counter()
    real = RealHub(h)
    try:
        up = time.perf_counter() - t0
        real.start_server(MALLORY)
        ready = time.perf_counter() - t0 - up
        pid = server_pid(MALLORY)
        status = Path(f"/proc/{pid}/status").read_text()
        assert f"Uid:\t{pwd.getpwnam(MALLORY).pw_uid}\t" in status and "NoNewPrivs:\t1" in status
        limits = Path(f"/proc/{pid}/limits").read_text()
        assert " 256 " in next(ln for ln in limits.splitlines() if "Max processes" in ln)
        cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        assert cgroups.count(f"/key-vectors-hub/{MALLORY}\n") == 3, cgroups
        # its world, as root sees it through /proc/PID/root
        world = Path(f"/proc/{pid}/root")
        assert not (world / KEYS.relative_to("/")).exists()
        assert not (world / LESSON_05.relative_to("/")).exists()
        assert (world / ROOT.relative_to("/") / "attnlib" / "__init__.py").exists()
        assert not (world / stray_lesson(h).relative_to("/")).exists()
        # links planted in her home, read through her server's contents API
        home, pw = h.home(MALLORY), pwd.getpwnam(MALLORY)
        targets = {"keys": KEYS, "lesson": LESSON_05, "attnlib": ROOT / "attnlib" / "__init__.py"}
        got = {}
        for name, target in targets.items():
            link = home / f"link-{name}"
            os.symlink(target, link)
            os.lchown(link, pw.pw_uid, pw.pw_gid)
            got[name] = real.api("GET", f"/user/{MALLORY}/api/contents/link-{name}")[0]
        # the server follows links (attnlib is read); to the keys and lesson 05 they dangle
        assert got["attnlib"] == 200 and got["keys"] in (400, 404), got
        assert got["lesson"] in (400, 404), got
        # and in a kernel of her real server
        code = (
            "import importlib\n"
            "for m in ('kvstaff.grader.answer_keys', 'attnlib'):\n"
            "    try:\n        importlib.import_module(m); print(m, 'IMPORTED')\n"
            "    except Exception as err:\n        print(m, type(err).__name__)\n"
            "import os\n"  # her tasks (server and kernel): her /proc lists only hers
            "print('TASKS', sum(len(os.listdir(f'/proc/{p}/task')) for p in os.listdir('/proc')"
            " if p.isdigit()))\n"
            f"print(open({str(KEYS)!r}).read(64))\n"
        )
        printed = real.run_in_kernel(MALLORY, code)
        assert "kvstaff.grader.answer_keys ModuleNotFoundError" in printed, printed
        assert "attnlib IMPORTED" in printed and "ERROR FileNotFoundError" in printed, printed
        tasks = int(printed.split("TASKS ")[1].split()[0])
        assert tasks < 256 // 2, printed  # room under the cap for several kernels
        print(
            f"\nthe real hub: up in {up:.1f} s, Mallory's server ready {ready:.1f} s later; "
            f"her server with one kernel: {tasks} tasks; whole test "
            f"{time.perf_counter() - t0:.1f} s"
        )
    finally:
        real.stop()
    assert gone(MALLORY)[0] == 0


# ---- 2. the set-up follows no link -----------------------------------------------------------


def test_a_link_in_place_of_the_course_folder_is_refused_and_nothing_changes(hub_box, capsys):
    h = hub_box
    teacher = h.roster.instructors[0]
    course, pw = hub_course(TEACH), pwd.getpwnam(TEACH)
    secret = h.base / "root-only"
    secret.mkdir(mode=0o700)
    try:
        course.rmdir()  # the empty course folder the set-up made, replaced by a link
        os.symlink(secret, course)
        os.lchown(course, pw.pw_uid, pw.pw_gid)  # as if the instructor had made it
        with pytest.raises(hub.HubError, match="is a link") as err:
            hub.instructor_course(teacher, h.homes)
        assert str(secret) in str(err.value) and f"rm {course}" in str(err.value)
        st = secret.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)  # not chowned, not opened
        # the whole `make hub` stops there, with the message, before JupyterHub starts
        args = ["start", "--roster", str(h.roster_path), "--exchange", str(h.exchange)]
        args += ["--homes", str(h.homes)]
        capsys.readouterr()
        assert hub.main(args) == 2
        said = capsys.readouterr().err
        assert f"hub: {course} is a link (to {secret})" in said, said
        assert secret.stat().st_uid == 0
        # a folder of someone else's in its place is refused too; none at all is made by them
        course.unlink()
        course.mkdir(mode=0o755)
        with pytest.raises(hub.HubError, match="owned by uid 0"):
            hub.instructor_course(teacher, h.homes)
        course.rmdir()
        made = hub.instructor_course(teacher, h.homes)
        st = made.lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == pw.pw_uid
        assert stat.S_IMODE(st.st_mode) == 0o700
    finally:
        if course.is_symlink():
            course.unlink()
        if not course.exists():
            hub.instructor_course(teacher, h.homes)
        secret.rmdir()


def test_the_hub_state_folder_and_its_files_are_never_followed(hub_box, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    state = tmp_path / "state"
    os.symlink(target, state)
    with pytest.raises(hub.HubError, match="is a link"):
        hub.hub_state(state, hub_box.roster)
    assert stat.S_IMODE(target.stat().st_mode) == 0o755 and not list(target.iterdir())
    state.unlink()
    state.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.symlink(victim, state / "learner_password")
    with pytest.raises(hub.HubError, match="not a plain file"):
        hub.hub_state(state, hub_box.roster)
    assert victim.read_text() == "keep\n"


# ---- 3. one learner's fork bomb and allocation -----------------------------------------------

BOMB = r"""
import os, sys, time
seconds, budget, folder = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + seconds
made = os.open(os.path.join(folder, "forks"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
# A fork that passed the check below, was kept off the CPU by the other spinning processes
# and went through after the deadline can only have taken a place a sibling left by
# exiting: it is counted apart, as "late", since it says nothing about the cap.
late = os.open(os.path.join(folder, "late"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
refused = 0
while time.monotonic() < deadline:
    if time.monotonic() > deadline - 1.5 or os.fstat(made).st_size >= budget:
        continue  # the last 1.5 s (and past the bomb's own bound): spin, fork no more
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        os.write(made if time.monotonic() < deadline else late, b".")
        refused = 0
fd = os.open(os.path.join(folder, "refused"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, f"{refused}\n".encode())
os._exit(0)
"""

ALLOC = r"""
import json, os, sys
import numpy as np
folder, processes, gib_each = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def note(**kw):
    with open(os.path.join(folder, "alloc.jsonl"), "a") as fh:
        fh.write(json.dumps(dict(kw, pid=os.getpid())) + "\n")
try:
    whole = np.ones(30 * 10**9 // 8)  # 30 GB at once
    note(whole="allocated")
    del whole
except MemoryError:
    note(whole="MemoryError")
for _ in range(processes - 1):
    if os.fork() == 0:
        break
pieces = []
while len(pieces) < gib_each * 4:  # in pieces of 256 MiB, each written
    try:
        pieces.append(np.ones(2**25))
    except MemoryError:
        note(stopped="MemoryError", gib=len(pieces) / 4)
        break
    note(gib=len(pieces) / 4)
else:
    note(done=True, gib=len(pieces) / 4)
"""


@pytest.fixture(scope="module")
def bystander(hub_box):
    b = Bystander(hub_box, BOB)
    b.baseline = b.measure(4)
    print(f"\nbaseline (nothing running): {b.baseline}")
    yield b
    hub_box.stop("bystander")


def test_a_fork_bomb_stops_at_the_learners_cap_and_the_others_stay_responsive(hub_box, bystander):
    h, home = hub_box, hub_box.home(MALLORY)
    h.start("bomb", MALLORY, [PYTHON, "-c", BOMB, str(BOMB_SECONDS), str(BOMB_BUDGET), str(home)])
    peak, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            peak[0] = max(peak[0], tasks_of(MALLORY))
            time.sleep(0.2)

    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    time.sleep(1.0)  # the bomb reaches its cap within a second
    during = bystander.measure(BOMB_SECONDS - 2)
    rc = h.wait("bomb", timeout=60)
    stop.set()
    counter.join()
    h.stop("bomb")  # the spawner's stop: whatever is left of Mallory's server is killed
    forks, late = (home / "forks").stat().st_size, (home / "late").stat().st_size
    refused = [int(x) for x in (home / "refused").read_text().split()]
    left, reaped = gone(MALLORY)
    numbers = {
        "forks that succeeded": forks,
        "forks after the deadline (a sibling had exited)": late,
        "Mallory's tasks at the peak": peak[0],
        "forks refused (all processes)": sum(refused),
        "bomb processes that reported": len(refused),
        "left after stop": left,
        "seconds until every process was gone": reaped,
        "Bob and the grader during the bomb": during,
        "baseline": bystander.baseline,
    }
    print(f"\nfork bomb ({BOMB_SECONDS} s, cap 256): {json.dumps(numbers)}")
    assert rc == 0
    # stopped at the cap of 256 (the first process and at most 255 children)...
    assert 200 < forks < 256 and peak[0] <= 256, numbers
    assert sum(refused) > 1000, numbers  # ...and kept trying, in vain
    assert left == 0, numbers
    assert during["api_unanswered"] == 0 and during["api_max_s"] < 2.0, numbers
    assert max(during["sandbox_s"]) < max(10.0, 4 * max(bystander.baseline["sandbox_s"])), numbers


def test_a_30_gb_allocation_stops_at_the_learners_memory_and_the_others_stay_responsive(
    hub_box, bystander
):
    h, home = hub_box, hub_box.home(MALLORY)
    total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    results = {}
    for key, processes, gib_each in (("one process", 1, 30), ("two processes", 2, 3)):
        log = home / "alloc.jsonl"
        log.unlink(missing_ok=True)
        low, stop = [total], threading.Event()

        def watch(low=low, stop=stop):
            while not stop.is_set():
                for line in Path("/proc/meminfo").read_text().splitlines():
                    if line.startswith("MemAvailable:"):
                        low[0] = min(low[0], int(line.split()[1]) * 1024)
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        h.start(key, MALLORY, [PYTHON, "-c", ALLOC, str(home), str(processes), str(gib_each)])
        during = bystander.measure(4)
        rc = h.wait(key, timeout=120)
        stop.set()
        watcher.join()
        peak = memory_peak(h, MALLORY)
        h.stop(key)
        notes = [json.loads(x) for x in log.read_text().splitlines()]
        results[key] = {
            "returncode": rc,
            "30 GB at once": [n["whole"] for n in notes if "whole" in n],
            # the last note of each process: how far it got
            "GiB reached per process": {n["pid"]: n["gib"] for n in notes if "gib" in n},
            "finished": sum(1 for n in notes if n.get("done")),
            "MemoryError": sum(1 for n in notes if n.get("stopped") == "MemoryError"),
            "Mallory's memory at the peak (cgroup) GiB": round(peak / 2**30, 2),
            "lowest MemAvailable GiB": round(low[0] / 2**30, 1),
            "Bob and the grader": during,
            "left after stop": gone(MALLORY)[0],
        }
    for key, r in results.items():
        print(f"\nallocation, {key} (memory 4 GiB, address space 6 GiB): {json.dumps(r)}")
    one, two = results["one process"], results["two processes"]
    assert one["30 GB at once"] == ["MemoryError"], one  # RLIMIT_AS: refused at once
    # in pieces: killed by the cgroup's limit (SIGKILL) before it reached 4 GiB
    assert one["returncode"] == -signal.SIGKILL and max(one["GiB reached per process"].values()) < 4
    # two processes of 3 GiB each (each under RLIMIT_AS): the cgroup counts them together,
    # and one of them is killed
    assert two["finished"] < 2 and two["MemoryError"] == 0, two
    for r in (one, two):
        assert r["Mallory's memory at the peak (cgroup) GiB"] <= 4.0, r
    for r in results.values():
        assert r["left after stop"] == 0
        assert r["Bob and the grader"]["api_unanswered"] == 0, r
        assert r["Bob and the grader"]["api_max_s"] < 2.0, r


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s"]))
