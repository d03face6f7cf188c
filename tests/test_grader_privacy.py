"""No other account can read a sandbox while a submission is graded in it (the fourth red team).

A learner with an account on the grading machine polled ``/tmp/kv-sbx-*/work/`` (then 0755,
notebooks 0644) while the instructor graded, and copied two classmates' submissions and the
hidden inputs of ``exchange/in/``. Here a real grading run — nbgrader's ``Execute`` as the
course runs it (:class:`kvstaff.grader.execution.ResilientExecute`: the kernel in its
sandbox, the hidden region judged by the grader) — grades a correct ``softmax``, and another
account (made with ``useradd``, removed afterwards) tries to list and read every path of
that sandbox through ``setpriv`` (and the attacker's globs): once while the grader's hidden
inputs are in ``exchange/in/``, once while the kernel's recorded outputs are in
``exchange/out/``; the kernel waits for each look (a file the test puts in ``work/``), so
no moment is missed on a busy machine. The other account may see the sandbox's name and
mode in ``/tmp`` and nothing else, and the submission still earns its point.

Two ways of grading: as root (the kernel gets uid ``64000 + slot`` and reaches the grader's
folders through its own group) and as an ordinary staff account (the kernel keeps that uid;
everything is 0700/0600; the run gets a private mount view for a Python under ``/root``, as
tests/test_staff_user.py does). Each takes ~8 s.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, base_prefix, project_python
from nbfixtures import lesson, set_solution

from kvstaff.hub import private_view

PEEKER = "kv-privacy-peek"
STAFF = "kv-privacy-staff"

# The learner's softmax: right, and during the hidden run (the grader's inputs are then in
# exchange/in/) it waits until the test has looked; a file of the kernel's own in its working
# folder; a last cell that waits while the recorded outputs are in exchange/out/. The test (as
# root) says "seen" by putting a file in work/, the one folder both see: no race, no sleeps.
SLOW_SOFTMAX = """import os, time
open("notes.txt", "w").write("my own notes")
_IN = os.path.join(os.environ.get("KEY_VECTORS_GRADING_EXCHANGE", "/nowhere"), "in")


def wait_for(name):
    t = time.monotonic()
    while not os.path.exists(name) and time.monotonic() - t < 30:
        time.sleep(0.01)


def softmax(x):
    if os.path.exists(os.path.join(_IN, "softmax.pkl")):
        wait_for("seen-inputs")
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
"""
HOLD = 'wait_for("seen-outputs")  # meanwhile the recorded outputs are in exchange/out/'

GRADE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import nbformat
    from kvstaff.grader.execution import ResilientExecute
    folder, name = Path(sys.argv[1]), sys.argv[2]
    nb = nbformat.read(folder / name, as_version=4)
    ex = ResilientExecute(timeout=60, kernel_name="key-vectors", kernel_threads=1)
    nb, _ = ex.preprocess(nb, {"metadata": {"path": str(folder)}})
    errors = [o.get("evalue", "") for c in nb.cells for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    print("RESULT " + json.dumps({"errors": errors}))
    """
)

# What the other account runs: for each path, its mode if it can stat it, and whether it
# could list it (a folder) or read a byte of it (a file); then the attacker's own globs.
PEEK = r"""
for p in "$@"; do
  m=$(stat -c '%a %u:%g' "$p" 2>/dev/null) || m="-"
  if [ -d "$p" ]; then
    if ls -A "$p" >/dev/null 2>&1; then r=LISTED; else r=denied; fi
  else
    if head -c 1 "$p" >/dev/null 2>&1; then r=READ; else r=denied; fi
  fi
  echo "$r $m $p"
done
for f in /tmp/kv-sbx-*/* /tmp/kv-sbx-*/work/* /tmp/kv-sbx-*/exchange/in/* \
         /tmp/kv-sbx-*/exchange/out/*/*; do
  if [ -e "$f" ]; then echo "GLOB $f"; fi
done
"""


def _account(name: str) -> None:
    made = subprocess.run(["useradd", "-r", "-M", "-s", "/usr/sbin/nologin", name])
    assert made.returncode in (0, 9), f"useradd {name} failed"  # 9: exists already


def _peek(paths: list[str]) -> list[str]:
    argv = ["setpriv", f"--reuid={PEEKER}", f"--regid={PEEKER}", "--clear-groups"]
    argv += ["sh", "-c", PEEK, "sh", *paths]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd="/")
    return done.stdout.splitlines()


def _tree(root: Path) -> list[str]:
    """Every path below ``root`` (seen as root), ``root`` first."""
    paths = [str(root)]
    for here, dirs, files in os.walk(root):
        paths += [os.path.join(here, n) for n in dirs + files]
    return paths


def _grade_and_peek(grader: list[str], folder: Path, name: str) -> tuple[dict, dict]:
    """Run ``grader``; peek into its sandbox while the inputs, then the outputs, are there."""
    proc = subprocess.Popen(grader, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[str, list[str]] = {}
    box = None
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            if box is None:
                box = next((p for p in Path("/tmp").glob("kv-sbx-*") if (p / "work" / name)
                            .exists()), None)  # fmt: skip
            if box is not None and len(seen) < 2:
                paths = _tree(box)
                rel = {os.path.relpath(p, box) for p in paths}
                for moment, mark in (
                    ("inputs", "exchange/in/softmax.pkl"),
                    ("outputs", "exchange/out/softmax/manifest.json"),
                ):
                    if moment not in seen and mark in rel:
                        seen[moment] = _peek(paths)
                        (box / "work" / f"seen-{moment}").touch()  # the kernel goes on
            time.sleep(0.01)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, err[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT ")), seen


def _submission(tmp: Path) -> tuple[Path, str]:
    name = f"privacy_{secrets.token_hex(4)}.ipynb"  # this run's sandbox, among others
    nb = lesson("01_fixture", ["softmax"])
    set_solution(nb, "l01-softmax-solution", SLOW_SOFTMAX)
    nb.cells.insert(-1, nbformat.v4.new_code_cell(HOLD))
    folder = tmp / "submitted"
    folder.mkdir()
    nbformat.write(nb, folder / name)
    return folder, name


def _assert_private(result: dict, seen: dict) -> None:
    assert result["errors"] == []  # the kernel's own uid still works inside: 1 of 1
    assert set(seen) == {"inputs", "outputs"}, seen  # both moments were caught
    print("\nwhat another account saw (access, mode uid:gid, path):")
    for moment, lines in seen.items():
        print(f"  -- while the {moment} were there")
        for line in lines:
            print("  ", line)
    for lines in seen.values():
        assert any(ln.endswith("/work/notes.txt") or "/work/privacy_" in ln for ln in lines)
        got = [ln for ln in lines if ln.split()[0] in ("READ", "LISTED", "GLOB")]
        assert got == [], got
        # the sandbox's name in /tmp is all: no mode below it can even be seen
        assert [ln for ln in lines if ln.split()[1] != "-"] == lines[:1], lines


@pytest.mark.grading
@pytest.mark.needs("bubblewrap", "root", "account tools")
def test_another_account_reads_nothing_of_a_sandbox_graded_as_root(tmp_path):
    _account(PEEKER)
    try:
        folder, name = _submission(tmp_path)
        script = tmp_path / "grade.py"
        script.write_text(GRADE)
        grader = [project_python(), str(script), str(folder), name]
        result, seen = _grade_and_peek(grader, folder, name)
    finally:
        subprocess.run(["userdel", PEEKER], capture_output=True)
    _assert_private(result, seen)
    root_line = seen["inputs"][0].split()
    assert root_line[1] == "710" and root_line[2].split(":")[0] == "0"  # root's, kernel's group


@pytest.mark.grading
@pytest.mark.needs("bubblewrap", "root", "account tools")
def test_another_account_reads_nothing_of_a_sandbox_graded_by_a_staff_account():
    python = Path(project_python())
    for who in (PEEKER, STAFF):
        _account(who)
    tmp = Path(tempfile.mkdtemp(prefix="kv-privacy-test-"))  # not under pytest's 0700 folder
    try:
        os.chmod(tmp, 0o755)
        work = tmp / "staff"
        work.mkdir()
        folder, name = _submission(work)
        (work / "grade.py").write_text(GRADE)
        for p in [work, *work.rglob("*")]:
            shutil.chown(p, STAFF, STAFF)
        env = ["env", "-i", f"HOME={work}", f"PATH={python.parent}:/usr/bin:/bin", "LANG=C.UTF-8"]
        argv = ["setpriv", f"--reuid={STAFF}", f"--regid={STAFF}", "--clear-groups", *env]
        argv += [str(python), str(work / "grade.py"), str(folder), name]
        grader = private_view(argv, [base_prefix(python), ROOT], tmp / "view")
        result, seen = _grade_and_peek(grader, folder, name)
    finally:
        for who in (PEEKER, STAFF):
            subprocess.run(["userdel", who], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    _assert_private(result, seen)
    assert seen["inputs"][0].split()[1] == "700"
