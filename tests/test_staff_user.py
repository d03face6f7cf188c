"""Grading as an ordinary (non-root) staff user, for real: the README supports it, and it is
the set-up in which a kernel once deleted another learner's work (issue 24, attack 1).

As root (CI), this test creates a system account, and runs a small class autograde as that
account: the honest reference and ``a01_out_swap`` from tests/hostile.py, whose solution
cell renames the exchange folder ``out/`` and puts a link to the course's ``submitted/`` in
its place, so that a grader clearing ``out/`` as the staff user would empty every learner's
submission. Not as root, bubblewrap gives the kernel a user namespace and the staff user's
own uid, so nothing but the sandbox's mount points stands between the kernel and the
course. The account is removed afterwards.

The interpreter, or the checkout itself, may live under a folder other users cannot enter
(a pyenv Python under ``/root``, a checkout under a private folder): the run gets a private
mount namespace in which just those two are made reachable, so nothing on the host changes
(``kvstaff.hub.private_view``, which the class hub uses for the same reason).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, base_prefix, project_python

from kvstaff.hub import private_view

USER = "kvstaff-test"

pytestmark = [
    pytest.mark.grading,
    pytest.mark.needs("root", "bubblewrap", "account tools"),  # CI: a failure if missing
]

RUN = textwrap.dedent(
    """
    import json, os, sys, tempfile
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from grading_course import A, grade
    from hostile import HONEST, HOSTILE
    subs = [s for s in HOSTILE if s.student == "a01_out_swap"]
    subs += [s for s in HONEST if s.student == "ok_reference"]
    tmp = Path(tempfile.mkdtemp(prefix="kv-staff-", dir={work!r}))
    graded = grade(tmp, hostile=subs, jobs=1)
    kept = sorted(str(p.relative_to(graded.course)) for p in
                  (graded.course / "submitted").rglob("*.ipynb"))
    rows = {{s: graded.rows[(s, A)] for s in ("a01_out_swap", "ok_reference")}}
    print("RESULT " + json.dumps({{"uid": os.getuid(), "rows": rows, "kept": kept}}))
    """
)


def test_a_non_root_staff_user_grades_and_no_kernel_reaches_another_learners_work():
    python = Path(project_python())
    made = subprocess.run(["useradd", "-r", "-M", "-s", "/usr/sbin/nologin", USER])
    assert made.returncode in (0, 9), "useradd failed"  # 9: the account exists already
    tmp = Path(tempfile.mkdtemp(prefix="kv-staff-test-"))  # not under pytest's 0700 folder
    os.chmod(tmp, 0o755)
    work = tmp / "staff"
    work.mkdir()
    shutil.chown(work, USER, USER)
    script = work / "run.py"
    script.write_text(RUN.format(tests=str(ROOT / "tests"), work=str(work)))
    env = ["env", "-i", f"HOME={work}", f"PATH={python.parent}:/usr/bin:/bin", "LANG=C.UTF-8"]
    argv = [
        "setpriv",
        f"--reuid={USER}",
        f"--regid={USER}",
        "--clear-groups",
        *env,
        str(python),
        str(script),
    ]
    try:
        done = subprocess.run(
            private_view(argv, [base_prefix(python), ROOT], tmp / "view"),
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        subprocess.run(["userdel", USER], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["uid"] != 0  # the grader really ran as the staff account
    attacker, honest = result["rows"]["a01_out_swap"], result["rows"]["ok_reference"]
    assert attacker["status"] == "FLAGGED" and attacker["score"] == "", attacker
    assert (honest["status"], honest["score"], honest["needs_review"]) == ("graded", "3.0", "no")
    assert honest["sandbox"] == attacker["sandbox"] == "bubblewrap"
    # every learner's submission is still there after the run
    assert result["kept"] == [
        "submitted/a01_out_swap/01_fixture/01_fixture.ipynb",
        "submitted/ok_reference/01_fixture/01_fixture.ipynb",
    ], result["kept"]
