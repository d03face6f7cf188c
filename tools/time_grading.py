"""Time `make autograde` on a small class: per-submission seconds and the class's wall time.

    python tools/time_grading.py                          # 03_attention, 6 learners, JOBS=1 and 2
    python tools/time_grading.py --lesson 08_masks --learners 8 --jobs 2
    python tools/time_grading.py --unsafe-no-sandbox      # the same without bubblewrap

The class is built in a temporary course folder from notebooks/: half the learners hand in
the instructor's solution, half the untouched release (stubs). Each configuration grades
the same class from scratch (a fresh gradebook), in the sandbox unless told otherwise, and
prints one line: learners, workers, wall time, median seconds per submission, the load
average before and after (the machine may be shared: compare numbers taken under similar
load).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quiet_warnings() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="Object of type")  # nbgrader's SQLAlchemy use
    warnings.filterwarnings("ignore", message="Cell is missing an id field")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def grade_class(lesson: str, learners: int, jobs: int, unsafe: bool, timeout: int) -> dict:
    import nbformat

    from kvstaff.grader.autograde import autograde
    from kvstaff.grader.course import release

    with tempfile.TemporaryDirectory(prefix="kv-timing-") as tmp:
        notebooks, course = Path(tmp) / "notebooks", Path(tmp) / "course"
        notebooks.mkdir()
        shutil.copy(ROOT / "notebooks" / f"{lesson}.ipynb", notebooks)
        course.mkdir()
        release(course, notebooks, [lesson])
        for i in range(learners):
            src = notebooks if i % 2 == 0 else course / "release" / lesson
            nb = nbformat.read(src / f"{lesson}.ipynb", as_version=4)
            dest = course / "submitted" / f"learner{i:02d}" / lesson
            dest.mkdir(parents=True)
            nbformat.write(nb, dest / f"{lesson}.ipynb")
        before = _load()
        t0 = time.perf_counter()
        outcomes = autograde(
            course,
            notebooks,
            timeout=timeout,
            jobs=jobs,
            unsafe_no_sandbox=unsafe,
            echo=lambda line: None,
        )
        wall = time.perf_counter() - t0
        bad = [o for o in outcomes if o.status not in ("graded",)]
        if bad:
            raise SystemExit(f"unexpected outcomes: {[(o.student, o.status) for o in bad]}")
        seconds = [o.seconds for o in outcomes]
        return {
            "wall": wall,
            "median": statistics.median(seconds),
            "load_before": before,
            "load_after": _load(),
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lesson", default="03_attention")
    p.add_argument("--learners", type=int, default=6)
    p.add_argument("--jobs", type=int, action="append", help="workers (repeatable; default 1, 2)")
    p.add_argument("--unsafe-no-sandbox", action="store_true")
    p.add_argument("--timeout", type=int, default=60, help="seconds per cell")
    args = p.parse_args(argv)
    _quiet_warnings()
    sandbox = "NONE (--unsafe-no-sandbox)" if args.unsafe_no_sandbox else "bubblewrap"
    for jobs in args.jobs or [1, 2]:
        r = grade_class(args.lesson, args.learners, jobs, args.unsafe_no_sandbox, args.timeout)
        print(
            f"{args.lesson}: {args.learners} learners, JOBS={jobs}, sandbox {sandbox}: "
            f"class {r['wall']:.1f} s, median {r['median']:.1f} s per submission "
            f"(load average {r['load_before']} before, {r['load_after']} after)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
