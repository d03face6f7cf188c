"""Shared test set-up: paths, the project's interpreter, and hypothesis settings.

Nothing here is autouse: each test file asks for what it needs.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pieces
import pytest
from hypothesis import HealthCheck, settings
from nbgrader import api as nbgrader_api

from kvstaff.grader import answer_keys

# The tests that every graded course must pass live in this helper (grading_course.EveryCourse,
# shared by two test files): pytest explains their failed asserts as it does in test files.
pytest.register_assert_rewrite("grading_course")

# The test process judges hidden cases as the grader does, so it holds the grader's answer
# keys (lesson 05's statements); a learner's kernel never has them (tests/test_kv_prediction.py).
answer_keys.install()

# nbgrader asks `alembic heads` in a subprocess (0.85 s) for every new gradebook; the answer is
# a constant of the installed nbgrader, so each test process asks once (a grading course
# creates its gradebook in the test process).
nbgrader_api.get_alembic_version = functools.cache(nbgrader_api.get_alembic_version)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
VENV_BIN = ROOT / ".venv" / "bin"

# Property tests: deterministic in CI (same examples every run, no example database
# written into the repository), a larger random search on demand:
#   HYPOTHESIS_PROFILE=explore .venv/bin/python -m pytest tests/test_core.py
settings.register_profile(
    "course",
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "course"))


def free_port_block(n: int = 3) -> int:
    """A port p with p, p+1, ..., p+n-1 free on 127.0.0.1 (a hub, its API, its proxy's)."""
    import socket

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            for i in range(1, n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
    raise RuntimeError("no block of free ports")


def base_prefix(python: Path | str) -> Path:
    """The Python installation ``python`` (a venv's interpreter) was made from."""
    import subprocess

    out = subprocess.run(
        [str(python), "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip()).resolve()


def project_python() -> str:
    """The venv's interpreter if it exists (as `make test` runs), else this one."""
    venv_python = VENV_BIN / "python"
    return str(venv_python) if venv_python.exists() else sys.executable


@pytest.fixture
def graders_feedback(monkeypatch):
    """Checks that give the grader's feedback (``ATTNLIB_FEEDBACK=record``): every failure
    names its causes and ends with the ids at once, from a fresh memory. For the tests of
    what a diagnosis says; tests/test_feedback_steps.py tests the learner's steps."""
    from attnlib import checks
    from attnlib.checks.protocol import FEEDBACK_ENV

    monkeypatch.setenv(FEEDBACK_ENV, "record")
    checks.forget()
    yield
    checks.forget()


@pytest.fixture
def learners_feedback(monkeypatch):
    """Checks that give a learner's feedback in steps (question first), from a fresh memory."""
    from attnlib import checks
    from attnlib.checks.protocol import FEEDBACK_ENV

    monkeypatch.delenv(FEEDBACK_ENV, raising=False)
    checks.forget()
    yield
    checks.forget()


@pytest.fixture
def three_threads():
    """torch on 3 threads for the test (restored after): `make test` runs with
    OMP_NUM_THREADS=1, and a test that a setting of 1 thread is undone needs another one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(3)
    yield 3
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def python() -> str:
    return project_python()


def pytest_collection_modifyitems(config, items):
    """The sandboxed grading courses (tests/test_grading.py, and in the second stage
    tests/test_grading_lessons.py) and the class hub (tests/test_hub.py) first, the rest in
    their order.

    Grading is by far the longest work. Under `make test` (xdist with `--dist loadscope
    --no-loadscope-reorder`) each of that file's classes grades its own course and is one
    unit of work, so the workers start grading at once and then share out the rest,
    instead of one worker grading while the other waits behind files with more (shorter)
    tests.
    """
    grading = ("tests/test_grading.py", "tests/test_grading_lessons.py")
    # the class hub (~60 s) and the hub's isolation attacks (~50 s)
    first = {**dict.fromkeys(grading, 0), "tests/test_hub.py": 1, "tests/test_hub_isolation.py": 1}
    # then the next longest files, longest first (seconds in one `make test`, 2026-12-06), so
    # that the run does not end with one worker busy on a long file while the others wait
    first |= {path: 2 + rank for rank, path in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::")[0], 2 + len(LONGEST_FILES)))


LONGEST_FILES = (
    "tests/test_pieces.py",  # 33 s: pytest run inside pytest, twice
    "notebooks/16_real_text.ipynb",  # 28 s
    "tests/test_sandbox.py",  # 16 s
    "tests/test_report.py",  # 12 s
    "tests/test_staff_user.py",  # 12 s
    "tests/test_grader_privacy.py",  # 12 s
    "tests/test_install.py",  # 11 s
    "tests/test_recall.py",  # 10 s
    "tests/test_plays_model.py",  # 10 s
    "notebooks/17_inference.ipynb",  # 9 s
    "notebooks/15_block.ipynb",  # 7 s
)


def pytest_runtest_setup(item):
    """``@pytest.mark.needs("bubblewrap", ...)``: skip without it, fail in CI (tests/pieces)."""
    for mark in item.iter_markers("needs"):
        pieces.need(*mark.args)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI's strict mode (``KEY_VECTORS_CI=1``, set by .ci/run) a skip is a failure.

    CI installs every piece the suite uses, so no test has a reason to be left out there: a
    skip means something on the way to it broke (a probe, a fixture, an install step).
    """
    report = yield
    if pieces.ci_mode() and report.skipped and not hasattr(report, "wasxfail"):
        where = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"CI ({pieces.CI_ENV}=1) allows no skipped test; this one was skipped: {where}"
        )
    return report
