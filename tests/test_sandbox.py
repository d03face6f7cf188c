"""The sandbox every graded kernel runs in, and the verdict made outside it.

* :mod:`kvstaff.grader.sandbox`: what a process inside sees and may do (run for real with
  bubblewrap; skipped with the reason only where bwrap cannot run — CI installs it);
* :mod:`attnlib.checks.grading`: the exchange of hidden-test inputs and outputs as plain
  data, judged by the grader (no kernel needed).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from sandbox_kernel import sandbox_kernel, wait

from attnlib.checks import grading, protocol
from kvstaff.grader import audit, autograde, execution, export, judging, sandbox
from kvstaff.grader.course import release, wall_clock

ROOT = Path(__file__).resolve().parents[1]
# Run wherever bubblewrap itself can (its own probe, tests/pieces.py), never "wherever the
# code under test says it works": a broken sandbox fails these tests instead of skipping them.
needs_sandbox = pytest.mark.needs("bubblewrap")


def good_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture
def box():
    b = sandbox.Sandbox(slot=3)
    yield b
    b.cleanup()


def _run_inside(box, code: str, timeout=60) -> dict:
    (box.work / "probe.py").write_text(code)
    box.hand_over(box.work)
    argv = box.command([sys.executable, "probe.py"], log=False)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


PROBE = r"""
import json, os, resource, socket, sys
out = {"uid": os.getuid(), "cwd": os.getcwd(), "env": dict(os.environ)}
def can_write(path):
    try:
        with open(path, "a"):
            pass
        return True
    except OSError:
        return False
out["exists"] = {p: os.path.exists(p) for p in COURSE_PATHS}
out["write"] = {p: can_write(p) for p in WRITE_PATHS}
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=3).close()
    out["net"] = "connected"
except OSError as err:
    out["net"] = type(err).__name__
out["limits"] = {k: resource.getrlimit(getattr(resource, k))[0]
                 for k in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE")}
import attnlib
out["attnlib"] = attnlib.__file__
print(json.dumps(out))
"""


@needs_sandbox
def test_a_sandboxed_process_sees_only_its_folder_and_a_read_only_course(box, tmp_path):
    course = tmp_path / "course"
    (course / "submitted" / "someone").mkdir(parents=True)
    (course / "gradebook.db").write_text("secret")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    attnlib_dir = ROOT / "attnlib"
    code = (
        PROBE.replace("COURSE_PATHS", repr([str(course / "gradebook.db"), str(course)]))
        .replace(
            "WRITE_PATHS",
            repr(
                [
                    str(attnlib_dir / "checks" / "_core.py"),
                    str(attnlib_dir / "checks" / "__pycache__" / "x.pyc"),
                    sys.prefix + "/x",
                    str(box.exchange / "in" / "x.pkl"),
                    str(box.exchange / "out" / "x"),
                    str(box.work / "mine.txt"),
                    "/tmp/scratch",
                ]
            ),
        )
        .replace("PORT", str(port))
    )
    try:
        out = _run_inside(box, code)
    finally:
        listener.close()
    assert out["exists"] == {str(course / "gradebook.db"): False, str(course): False}
    w = out["write"]
    assert not w[str(attnlib_dir / "checks" / "_core.py")]
    assert not w[str(attnlib_dir / "checks" / "__pycache__" / "x.pyc")]
    assert not w[sys.prefix + "/x"]
    assert not w[str(box.exchange / "in" / "x.pkl")]  # the grader's inputs: read-only
    assert w[str(box.exchange / "out" / "x")] and w[str(box.work / "mine.txt")]
    assert w["/tmp/scratch"] and not Path("/tmp/scratch").exists()  # a private /tmp
    assert out["net"] != "connected"  # its own network namespace: the host's port is not there
    assert out["cwd"] == str(box.work)
    assert out["env"]["PYTHONDONTWRITEBYTECODE"] == "1"
    assert out["env"][protocol.EXCHANGE_ENV] == str(box.exchange)
    assert not {k for k in out["env"] if k.startswith("JPY_") or "TOKEN" in k.upper()}
    assert out["limits"]["RLIMIT_AS"] == box.limits.memory_bytes
    assert out["limits"]["RLIMIT_CPU"] == box.limits.cpu_seconds
    assert out["limits"]["RLIMIT_FSIZE"] == box.limits.file_bytes
    assert out["attnlib"].startswith(str(attnlib_dir))
    if os.geteuid() == 0:
        assert out["uid"] == sandbox.UID_BASE + 3


def test_the_command_line_binds_no_course_folder(box, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    argv = box.command([sys.executable, "-m", "ipykernel_launcher", "-f", "k.json"])
    assert argv[0] == "/usr/bin/bwrap"
    for flag in ("--unshare-net", "--unshare-pid", "--die-with-parent", "--clearenv"):
        assert flag in argv
    binds = {argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")}
    assert str(ROOT) not in binds  # the checkout itself (gradebook.db, submitted/) is not
    assert str(ROOT / "attnlib") in binds and str(tmp_path) not in binds
    rw = {argv[i + 1] for i, a in enumerate(argv) if a == "--bind"}
    # only the kernel's three folders are writable, each a mount point in the read-only
    # sandbox root: none of them can be renamed or replaced by a link from inside
    assert rw == {str(box.work), str(box.run), str(box.exchange / "out")}
    ro = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    assert str(box.root) in ro and str(box.exchange / "in") in ro
    assert argv[-5:] == [sys.executable, "-m", "ipykernel_launcher", "-f", "k.json"]


@needs_sandbox
def test_a_kernel_runs_in_the_sandbox_over_ipc_and_can_be_interrupted(box):
    from jupyter_core.utils import run_sync

    with sandbox_kernel(box) as (km, kc):
        assert km.transport == "ipc" and Path(km.connection_file).parent == box.run
        text, _ = wait(kc, kc.execute("import os, time; print(os.getuid(), os.getcwd())"))
        if os.geteuid() == 0:
            assert text.split()[0] == str(sandbox.UID_BASE + 3)
        assert text.split()[1] == str(box.work)
        loop = kc.execute("while True:\n    time.sleep(0.01)")
        import time

        time.sleep(1.0)
        run_sync(km.interrupt_kernel)()
        assert [e.split(":")[0] for e in wait(kc, loop)[1]] == ["KeyboardInterrupt"]
        assert wait(kc, kc.execute("print('alive')"))[0].strip() == "alive"


def test_without_bubblewrap_grading_refuses_unless_told_unsafe(tmp_path, monkeypatch):
    (tmp_path / "submitted").mkdir()
    monkeypatch.setattr(autograde, "sandbox_unavailable", lambda: "bwrap is not installed")
    with pytest.raises(SystemExit, match="Install bubblewrap.*--unsafe-no-sandbox"):
        autograde.autograde(tmp_path, tmp_path)
    # installed but refused by the machine: no advice to install it
    monkeypatch.setattr(autograde, "sandbox_unavailable", lambda: "bwrap could not start")
    with pytest.raises(SystemExit, match="is installed but could not start") as err:
        autograde.autograde(tmp_path, tmp_path)
    assert "Install bubblewrap" not in str(err.value)
    # a path the sandbox could not bind is named, and no user namespace is blamed
    why = sandbox._probe_failure("bwrap: execvp /x/.venv/bin/python: No such file or directory")
    assert "/x/.venv/bin/python" in why and sys.executable in why
    monkeypatch.setattr(autograde, "sandbox_unavailable", lambda: why)
    with pytest.raises(SystemExit, match="/x/.venv/bin/python") as err:
        autograde.autograde(tmp_path, tmp_path)
    assert "namespace" not in str(err.value)
    why = sandbox._probe_failure("Traceback\nSystemExit: KV-PROBE cannot import attnlib")
    assert why.startswith("attnlib cannot be imported inside the sandbox")
    assert str(sandbox._package_dirs(resolve=False)[0]) in why


@needs_sandbox
def test_a_venv_reached_through_a_link_works_in_the_sandbox(tmp_path):
    """.venv may be a link to a venv elsewhere: the sandbox recreates the link."""
    link = tmp_path / "venv-link"
    link.symlink_to(Path(sys.prefix).resolve())
    python = link / "bin" / Path(sys.executable).name
    done = subprocess.run(
        [str(python), "-m", "kvstaff.sandbox"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sandbox: ok" in done.stdout


def test_unavailable_says_why(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    sandbox.unavailable.cache_clear()
    try:
        assert "not installed" in sandbox.unavailable()
    finally:
        sandbox.unavailable.cache_clear()


# ---- the verdict outside the kernel --------------------------------------------------------


@pytest.fixture
def exchange(tmp_path):
    for sub in ("in", "out"):
        (tmp_path / sub).mkdir()
    return tmp_path


def test_outputs_go_out_as_plain_data_and_the_grader_judges_them(exchange):
    assert judging.write_inputs("softmax", exchange) == len(
        grading.fresh_core().get_exercise("softmax").cases(hidden=True)
    )
    assert grading.record("softmax", good_softmax, exchange)
    assert judging.judge("softmax", exchange).ok
    files = sorted(p.name for p in (exchange / "out" / "softmax").iterdir())
    assert "manifest.json" in files and all(f.endswith((".npy", ".json")) for f in files)

    def wrong(x):  # softmax over the wrong axis
        e = np.exp(x - x.max(axis=0, keepdims=True))
        return e / e.sum(axis=0, keepdims=True)

    grading.record("softmax", wrong, exchange)
    verdict = judging.judge("softmax", exchange)
    assert not verdict.ok and not verdict.review and "hidden tests failed" in verdict.message


def test_missing_forged_or_hostile_outputs_earn_nothing_and_are_flagged(exchange):
    verdict = judging.judge("softmax", exchange)  # check_hidden never ran
    assert not verdict.ok and verdict.review and protocol.TAMPER_TAG in verdict.message

    judging.write_inputs("softmax", exchange)
    grading.record("softmax", good_softmax, exchange)
    folder = exchange / "out" / "softmax"
    manifest = json.loads((folder / "manifest.json").read_text())
    # a pickled object instead of an array is never unpickled
    np.save(folder / "0.npy", np.array([object()]), allow_pickle=True)
    verdict = judging.judge("softmax", exchange)
    assert not verdict.ok and verdict.review
    # a symlink out of the exchange folder is not followed
    (folder / "0.npy").unlink()
    (folder / "0.npy").symlink_to("/etc/hostname")
    assert not judging.judge("softmax", exchange).ok
    # a FIFO under the manifest's name does not hang the grader
    (folder / "manifest.json").unlink()
    os.mkfifo(folder / "manifest.json")
    assert not judging.judge("softmax", exchange).ok
    (folder / "manifest.json").unlink()
    # fewer results than cases
    grading.record("softmax", good_softmax, exchange)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["outputs"] = manifest["outputs"][:2]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert "results for" in judging.judge("softmax", exchange).message
    # tampering the kernel reported about itself only ever takes credit away
    grading.record("softmax", good_softmax, exchange)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["tampering"] = ["numpy.isclose was rebound after the kernel started"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    verdict = judging.judge("softmax", exchange)
    assert not verdict.ok and verdict.review


def test_outside_a_graded_run_check_hidden_is_a_no_op_until_the_grader_asks(exchange, monkeypatch):
    monkeypatch.setenv(protocol.EXCHANGE_ENV, str(exchange))
    from attnlib import checks

    checks.check_hidden("softmax", lambda x: None)  # no inputs: nothing asked, nothing done
    assert not (exchange / "out" / "softmax").exists()


def test_library_equivalents_are_named_as_such_not_as_the_course_reference():
    refused = protocol.refused_calls("softmax")
    assert refused["attnlib.core.softmax"] == protocol.COURSE_REFERENCE
    assert refused["torch.softmax"] == protocol.LIBRARY_EQUIVALENT
    assert "torch.softmax" not in protocol.refused_calls("attend")  # allowed inside attend
    assert (
        protocol.refused_calls("attend")["torch.nn.functional.scaled_dot_product_attention"]
        == protocol.LIBRARY_EQUIVALENT
    )


@pytest.mark.grading
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Object of type:Warning")
def test_grading_without_a_sandbox_says_so_on_every_row(tmp_path):
    import csv

    import nbformat
    from nbfixtures import LESSONS, write_lessons

    notebooks, course = tmp_path / "notebooks", tmp_path / "course"
    write_lessons(notebooks, {"01_fixture": LESSONS["01_fixture"]})
    release(course, notebooks)
    for who in ("a", "b"):
        d = course / "submitted" / who / "01_fixture"
        d.mkdir(parents=True)
        src = notebooks if who == "a" else course / "release" / "01_fixture"
        nbformat.write(
            nbformat.read(src / "01_fixture.ipynb", as_version=4), d / "01_fixture.ipynb"
        )
    autograde.autograde(course, notebooks, timeout=30, jobs=1, unsafe_no_sandbox=True, echo=print)
    with open(course / "grades.csv") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert rows["a"]["score"] == "3.0" and rows["b"]["score"] == "0.0"  # still judged outside
    for row in rows.values():
        assert row["sandbox"] == export.UNSAFE
        assert "WITHOUT a sandbox" in row["notes"]


# ---- what the red team found (tests/hostile.py replays each through nbgrader) -------------


def test_a_submission_is_walked_without_following_links(tmp_path):
    sub = tmp_path / "sub"
    (sub / "attnlib").mkdir(parents=True)
    (sub / "01_x.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    (sub / "attnlib" / "__init__.py").write_text("x = 1")
    (sub / ".ipynb_checkpoints").mkdir()
    (sub / ".ipynb_checkpoints" / "01_x-checkpoint.ipynb").write_text("{}")
    refuse, review = sandbox.inspect_submission(sub)
    assert refuse == []
    assert review == [
        "a folder 'attnlib/' was handed in beside the notebook",
        "a file 'attnlib/__init__.py' was handed in beside the notebook",
    ]
    (sub / "x_shadow").symlink_to("/etc/shadow")
    os.mkfifo(sub / "pipe.npy")
    refuse, _ = sandbox.inspect_submission(sub)
    assert refuse == [
        "'pipe.npy' is not a regular file (a FIFO, device or socket)",
        "'x_shadow' is a symbolic link (to '/etc/shadow')",
    ]


def test_only_the_notebook_reaches_the_sandbox(box, tmp_path):
    sub = tmp_path / "sub"
    (sub / "attnlib").mkdir(parents=True)
    (sub / "01_x.ipynb").write_text("{}")
    (sub / "attnlib" / "__init__.py").write_text("raise SystemExit('shadowed')")
    (sub / "other.ipynb").symlink_to(tmp_path / "elsewhere.ipynb")
    (tmp_path / "elsewhere.ipynb").write_text("secret")
    box.fill_work(sub)
    assert sorted(p.name for p in box.work.iterdir()) == ["01_x.ipynb"]


@needs_sandbox
def test_the_working_folder_is_not_on_sys_path_in_the_sandbox(box):
    (box.work / "attnlib").mkdir()
    (box.work / "attnlib" / "__init__.py").write_text("raise SystemExit('shadowed')")
    out = _run_inside(
        box,
        "import json, os, sys\nimport attnlib\n"
        "print(json.dumps({'file': attnlib.__file__, 'path': sys.path, 'cwd': os.getcwd()}))",
    )
    assert out["file"].startswith(str(ROOT / "attnlib")) or "site-packages" in out["file"]
    assert "" not in out["path"] and out["cwd"] not in out["path"]
    assert sandbox.command(["x"], box)[-1] == "x"
    assert "PYTHONSAFEPATH" in sandbox.command(["x"], box)


def test_a_course_under_tmp_is_bound_but_the_sandboxes_own_folders_are_not(monkeypatch):
    fake = [Path("/tmp/course-checkout/attnlib"), Path("/tmp/kv-sbx-abc/attnlib")]
    monkeypatch.setattr(sandbox, "_package_dirs", lambda: fake)
    monkeypatch.setattr(Path, "exists", lambda self: True)
    paths = sandbox.readonly_paths()
    assert Path("/tmp/course-checkout/attnlib") in paths
    assert Path("/tmp/kv-sbx-abc/attnlib") not in paths and Path("/tmp") not in paths


def test_a_fifo_in_place_of_the_kernel_log_does_not_block_the_grader(caplog):
    ex = execution.ResilientExecute()
    ex._box = sandbox.Sandbox()
    try:
        (ex._box.run / "kernel.log").unlink(missing_ok=True)
        os.mkfifo(ex._box.run / "kernel.log")
        t0 = time.monotonic()
        # bounded: a grader that waited for a writer would fail here, not hang the suite
        with wall_clock(10), caplog.at_level("WARNING"):
            ex.log.propagate = True
            ex._log_kernel_output()
        assert time.monotonic() - t0 < 5
        assert "run/kernel.log is not a regular file" in caplog.text
    finally:
        ex._box.cleanup()


def test_a_grader_that_blocks_gives_up_at_its_wall_clock(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(TimeoutError), wall_clock(1):
        os.open(tmp_path / "fifo", os.O_RDONLY)  # no writer: would wait forever


def test_a_forged_manifest_is_refused_before_its_arrays_are_read(exchange):
    judging.write_inputs("softmax", exchange)
    grading.record("softmax", good_softmax, exchange)
    folder = exchange / "out" / "softmax"
    manifest = json.loads((folder / "manifest.json").read_text())
    n = len(manifest["outputs"])
    one = manifest["outputs"][0]
    for outputs, why in (
        ([one] * 40, "40 results for"),  # too many: refused before any array is read
        ([one] * n, "named twice"),  # the right count, one file named again and again
    ):
        (folder / "manifest.json").write_text(json.dumps({**manifest, "outputs": outputs}))
        verdict = judging.judge("softmax", exchange)
        assert not verdict.ok and verdict.review and why in verdict.message, verdict.message
    big = np.zeros(protocol.MAX_FILE_BYTES // 8 - 64)
    for i in range(3):
        np.save(folder / f"{i}.npy", big)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    verdict = judging.judge("softmax", exchange)
    assert not verdict.ok and "larger than the grader reads" in verdict.message


def test_hidden_inputs_are_drawn_per_run_and_judged_on_the_same_draw(exchange):
    import pickle

    judging.write_inputs("softmax", exchange)
    first = pickle.loads((exchange / "in" / "softmax.pkl").read_bytes())["cases"]
    grading.record("softmax", good_softmax, exchange)
    assert judging.judge("softmax", exchange).ok
    judging.write_inputs("softmax", exchange)
    second = pickle.loads((exchange / "in" / "softmax.pkl").read_bytes())["cases"]
    shipped = grading.fresh_core().get_exercise("softmax").cases(hidden=True)
    assert len(first) == len(second) == len(shipped)
    differ = [not np.array_equal(a[0][0], b[0][0]) for a, b in zip(first, second, strict=True)]
    assert any(differ)  # the hidden ones changed (the visible ones did not)
    assert any(not np.array_equal(a[0][0], c.args[0]) for a, c in zip(second, shipped, strict=True))


def _observed(exercise, fn):
    core = grading.fresh_core()
    cases = [(c.args, c.kwargs) for c in core.get_exercise(exercise).cases(hidden=True)]
    return grading.observe(fn, cases, grading._Watch(protocol.refused_calls(exercise)))


def test_hiding_a_call_from_the_profiling_hook_is_tampering():
    import attnlib

    off = sys.setprofile  # (a01 spelled it getattr(sys, "setprofile"): the same object)

    def toggled(x):
        hook = sys.getprofile()
        off(None)
        try:
            return attnlib.softmax(x)
        finally:
            off(hook)

    def threaded(x):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(attnlib.softmax, x).result()

    obs = _observed("softmax", toggled)
    assert obs.calls == [] and "sys.setprofile" in " ".join(obs.tampering)
    obs = _observed("softmax", threaded)
    assert "threading.Thread.start" in " ".join(obs.tampering)
    honest = _observed("softmax", good_softmax)
    assert honest.calls == [] and honest.tampering == []


def test_torch_internals_that_do_the_exercise_are_refused_by_what_runs():
    import torch

    def private(x):
        return torch._softmax(torch.as_tensor(x), -1, False).numpy()

    def aten(x):
        return torch.ops.aten._softmax.default(torch.as_tensor(x), -1, False).numpy()

    assert _observed("softmax", private).calls == ["torch._softmax"]
    assert _observed("softmax", aten).calls == ["torch.ops.aten._softmax"]

    def sdpa(q, k, v, mask=None):
        q, k, v = (torch.as_tensor(a) for a in (q, k, v))
        m = None if mask is None else torch.as_tensor(mask)
        out = torch.ops.aten.scaled_dot_product_attention(q, k, v, m)
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if m is not None:
            s = s.masked_fill(~m, float("-inf"))
        return out.numpy(), torch.softmax(s, -1).numpy()

    assert _observed("attend", sdpa).calls == ["torch.ops.aten.scaled_dot_product_attention"]


def test_the_audit_survives_cells_it_cannot_parse_and_baselines_per_cell():
    deep = "if False:\n    y = x" + ".a" * 3000 + "\n"
    assert audit.audit_cells([deep], set()) == [
        ["the audit could not read this cell (RecursionError): a person must"]
    ]
    # 03_attention's demo cells use attnlib.attend; a solution cell that does is reported
    import nbformat

    lesson = ROOT / "notebooks" / "03_attention.ipynb"
    nb = nbformat.read(lesson, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "l03-attend-solution":
            cell.source = (
                "def attend(q, k, v, mask=None):\n    return attnlib.attend(q, k, v, mask)\n"
            )
    path = ROOT / "build" / "test_sandbox_baseline.ipynb"
    path.parent.mkdir(exist_ok=True)
    try:
        nbformat.write(nb, path)
        assert autograde.audit_notebook(path, lesson) == [
            "l03-attend-solution: uses attnlib.attend (a course reference)"
        ]
        assert autograde.audit_notebook(lesson, lesson) == []
    finally:
        path.unlink(missing_ok=True)


def test_a_submission_missing_from_the_report_is_not_graded():
    class Sub:
        score, late_submission_penalty, timestamp, needs_manual_grade = 3.0, 0.0, "", False

    class Book:
        assignments = [type("A", (), {"name": "01_x", "duedate": None, "max_score": 3.0})]
        students = [type("S", (), {"id": "s", "last_name": "", "first_name": "", "email": ""})]

        def find_submission(self, a, s):
            return Sub()

    (row,) = export.csv_rows(Book(), {})
    assert (row["status"], row["needs_review"], row["score"]) == ("NOT GRADED", "yes", "")
    # refused before nbgrader ran (so unknown to the gradebook): still a row
    refused = {"status": "NOT GRADED", "needs_review": True, "notes": ["refused: a link"]}
    rows = export.csv_rows(Book(), {"01_x": {"t": refused}})
    assert [(r["student_id"], r["status"], r["score"]) for r in rows] == [
        ("s", "NOT GRADED", ""),
        ("t", "NOT GRADED", ""),
    ]
    assert rows[1]["notes"] == "refused: a link"


def test_outputs_a_browser_would_run_are_dropped():
    import nbformat

    from kvstaff.safe_outputs import SafeOutputs

    cell = nbformat.v4.new_code_cell("Note()")
    cell.outputs = [
        nbformat.v4.new_output(
            "execute_result",
            data={"text/html": "<script>x()</script>", "application/javascript": "x()"},
        ),
        nbformat.v4.new_output("display_data", data={"text/plain": "t", "image/png": "iVBO"}),
    ]
    md = nbformat.v4.new_markdown_cell("hi <img src=x onerror=alert(1)>")
    for c in (cell, md):
        SafeOutputs().preprocess_cell(c, {}, 0)
    assert list(cell.outputs[0].data) == ["text/plain"]
    assert "removed by the grader" in cell.outputs[0].data["text/plain"]
    assert dict(cell.outputs[1].data) == {"text/plain": "t", "image/png": "iVBO"}
    assert "<img" not in md.source and "&lt;img" in md.source


# ---- no other account reads a sandbox (red team 4; the real accounts: test_grader_privacy) ---


def _mode(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_mode & 0o7777, st.st_uid, st.st_gid


@pytest.mark.parametrize(
    "as_root",
    [  # the uid switch happens only when grading runs as root
        pytest.param(True, id="graded-as-root", marks=pytest.mark.needs("root")),
        pytest.param(False, id="graded-as-staff"),
    ],
)
def test_sandbox_folders_and_the_graders_files_are_closed_to_other_accounts(
    as_root, monkeypatch, tmp_path
):
    if not as_root:  # an ordinary staff user: the kernel keeps the grader's uid
        monkeypatch.setattr(sandbox.Sandbox, "uid", property(lambda self: None))
    box = sandbox.Sandbox(slot=2)
    try:
        me, kernel = os.geteuid(), sandbox.UID_BASE + 2
        for rel, mode in box.modes().items():
            assert _mode(box.root / rel)[0] == mode, rel
            assert mode & 0o007 == 0, rel  # nothing for other accounts, anywhere
        if as_root:  # the grader's folders reach the kernel through its own group only
            assert _mode(box.root) == (0o710, me, kernel)
            assert _mode(box.exchange / "in") == (0o750, me, kernel)
            assert _mode(box.work) == (0o700, kernel, kernel)
        else:
            assert {m & 0o077 for m in box.modes().values()} == {0}
        judging.write_inputs("softmax", box.exchange)  # the hidden inputs
        pkl = _mode(box.exchange / "in" / "softmax.pkl")
        assert pkl == ((0o640, me, kernel) if as_root else (0o600, me, os.getegid()))
        sub = tmp_path / "sub"
        sub.mkdir()
        (sub / "01_x.ipynb").write_text("{}")
        os.chmod(sub / "01_x.ipynb", 0o644)
        box.fill_work(sub)  # the learner's notebook
        assert _mode(box.work / "01_x.ipynb")[0] == 0o600
        assert "os.umask(0o077)" in sandbox.LAUNCHER and "0o644" not in sandbox.LAUNCHER
    finally:
        box.cleanup()
