"""Time a class on the class hub: N learners whose servers the hub starts, each fetching the
first fixture lesson and submitting it through their server's nbgrader handlers.

    sudo .venv/bin/python tools/time_class_hub.py                 # 30 learners
    sudo .venv/bin/python tools/time_class_hub.py --learners 10

As root (it creates N + 1 system accounts ``kvs-...`` and removes them afterwards, also on
failure). Uses the test hub of tests/test_hub.py (hub/jupyterhub_config.py, a private exchange
and state under /tmp). Prints: the hub's start, the wall time for the hub to start every
learner's server (all asked at once), the wall time for every learner to fetch, answer and
submit (``--parallel`` at a time), the number collected by the instructor, and the load
average before and after (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--learners", type=int, default=30)
    p.add_argument("--parallel", type=int, default=8, help="learners acting at once")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("time_class_hub: run as root (it creates system accounts)")
    from nbfixtures import LESSONS, write_lessons
    from test_hub import A, ClassHub, through_the_hub

    from kvstaff import hub

    learners = {f"l{i:02d}": f"kvs-l{i:02d}" for i in range(args.learners)}
    base = Path(tempfile.mkdtemp(prefix="kv-hub-time-"))
    os.chmod(base, 0o755)
    h = ClassHub(base, learners, instructor="kvs-teach")
    load0 = os.getloadavg()
    try:
        h.start()
        write_lessons(h.notebooks, {A: LESSONS[A]})
        paths = dict(course=str(h.course), notebooks=str(h.notebooks), exchange=str(h.exchange))
        release = h.act(h.instructor, "release", **paths)
        up = h.wait_up()
        h.result(release)
        t0 = time.perf_counter()
        for user in learners.values():
            h.spawn(user)
        for user in learners.values():
            h.wait_ready(user, timeout=600)
        spawned = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            list(pool.map(lambda u: through_the_hub(h, u), learners.values()))
        submitted = time.perf_counter() - t0
        inbound = h.exchange / hub.COURSE_ID / "inbound"
        got = len({p.name.split("+")[0] for p in inbound.iterdir()})
        print(
            f"learners {args.learners}, parallel {args.parallel}: hub up {up:.1f} s; "
            f"all servers started {spawned:.1f} s; all fetched + submitted {submitted:.1f} s "
            f"({submitted / args.learners:.2f} s per learner); {got} submissions in inbound; "
            f"load {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}"
        )
        return 0 if got == args.learners else 1
    finally:
        h.stop()
        hub.remove_accounts(h.roster, echo=lambda *_: None)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
