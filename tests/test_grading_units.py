"""Small units of the grader against the second red team's payloads (no kernel, no nbgrader run).

* c03: terminal escape codes and a CSV formula in a learner cell's grade_id;
* g01: an exchange ``.npy`` whose header claims far more data than the file holds;
* g02: a notebook with many cells that each print just under the per-cell output cap.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from attnlib.checks import grading, protocol
from kvstaff.grader import autograde, execution, export, judging, sandbox

ROOT = Path(__file__).resolve().parents[1]
EVIL_ID = '=HYPERLINK("http://evil")\x1b]0;owned\x07\x1b[2J\x1b[1;31mALL GOOD\u202e'


def _no_controls(text: str) -> bool:
    return not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c == "\u202e" for c in text)


def test_printable_shows_control_characters_as_escapes():
    shown = export.printable(EVIL_ID + "\ud800\n")
    assert _no_controls(shown)
    assert "\\x1b]0;owned\\x07" in shown and shown.endswith("\\u202e\\ud800\\n")
    assert export.printable("l08-causal-mask: uses torch.tril") == (
        "l08-causal-mask: uses torch.tril"
    )


def test_the_audit_names_a_hostile_grade_id_harmlessly(tmp_path):
    lesson = ROOT / "notebooks" / "08_masks.ipynb"
    nb = nbformat.read(lesson, as_version=4)
    cell = nbformat.v4.new_code_cell("import ctypes\n")
    cell.metadata["nbgrader"] = {
        "grade_id": EVIL_ID,
        "solution": False,
        "grade": False,
        "locked": False,
    }
    nb.cells.insert(3, cell)
    path = tmp_path / "08_masks.ipynb"
    nbformat.write(nb, path)
    reasons = autograde.audit_notebook(path, lesson)
    assert len(reasons) == 1 and reasons[0].endswith(": imports ctypes")
    assert _no_controls(reasons[0]) and "\\x1b[2J" in reasons[0]


def test_csv_cells_are_text_never_formulas():
    class Sub:
        score, late_submission_penalty, timestamp, needs_manual_grade = 3.0, 0.0, "", False

    class Book:
        assignments = [type("A", (), {"name": "08_masks", "duedate": None, "max_score": 3.0})]
        students = [
            type("S", (), {"id": "s", "last_name": "", "first_name": "@SUM(A1)", "email": ""})
        ]

        def find_submission(self, a, s):
            return Sub()

    report = {
        "08_masks": {
            "s": {
                "status": "FLAGGED",
                "needs_review": True,
                "notes": [f"{EVIL_ID}: imports ctypes"],
            },
            "t": {"status": "NOT GRADED", "needs_review": True, "notes": ["-1+cmd|' /C calc'!A0"]},
        }
    }
    rows = export.csv_rows(Book(), report)
    assert rows[0]["notes"].startswith("'=HYPERLINK(") and _no_controls(rows[0]["notes"])
    assert rows[0]["first_name"] == "'@SUM(A1)"
    assert rows[1]["notes"] == "'-1+cmd|' /C calc'!A0"
    assert rows[0]["max_score"] == 3.0  # numbers stay numbers
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=export.CSV_KEYS)
    writer.writeheader()
    writer.writerows(rows)
    for row in csv.reader(io.StringIO(buf.getvalue())):
        assert not [c for c in row if c[:1] in ("=", "+", "-", "@", "\t", "\r")]


def good_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _npy(shape: str, descr: str = "<f8", body: bytes = b"\0" * 64) -> bytes:
    hdr = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {shape}, }}"
    hdr = hdr + " " * (128 - 10 - len(hdr) - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + body


@pytest.fixture
def exchange(tmp_path):
    for sub in ("in", "out"):
        (tmp_path / sub).mkdir()
    judging.write_inputs("softmax", tmp_path)
    assert grading.record("softmax", good_softmax, tmp_path)
    assert judging.judge("softmax", tmp_path).ok
    return tmp_path


@pytest.mark.parametrize(
    "payload",
    [
        _npy("(1099511627776,)"),  # g01: 8 TiB claimed by a 192-byte file
        _npy("(2**62, 4)".replace("2**62", str(2**62))),  # overflows an int64 product
        _npy("(9,)"),  # 72 bytes claimed, 64 held
        _npy("(2,)", descr="|O"),
        _npy("(2,)", descr="<U4"),
        b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f8'",  # a header cut short
        b"\x93NUMPY",
    ],
)
def test_an_npy_that_lies_about_its_size_is_a_flagged_zero(exchange, payload):
    target = exchange / "out" / "softmax" / "0.npy"
    target.unlink()
    target.write_bytes(payload)
    verdict = judging.judge("softmax", exchange)  # no exception out of the grader
    assert not verdict.ok and verdict.review and protocol.TAMPER_TAG in verdict.message


def test_an_honest_npy_still_reads():
    buf = io.BytesIO()
    np.save(buf, np.arange(12.0).reshape(3, 4))
    size = buf.tell()
    buf.seek(0)
    judging._check_npy_header(buf, size)
    assert buf.tell() == 0
    np.testing.assert_array_equal(np.load(buf), np.arange(12.0).reshape(3, 4))


def test_judging_errors_become_a_flagged_zero(exchange, monkeypatch):
    for err in (MemoryError, RecursionError, EOFError, OverflowError, ValueError):

        def boom(*args, err=err, **kwargs):
            raise err("from the outputs")

        monkeypatch.setattr(judging, "judge_observation", boom)
        verdict = judging.judge("softmax", exchange)
        assert not verdict.ok and verdict.review and err.__name__ in verdict.message


def _stream(text: str) -> dict:
    return {
        "msg_type": "stream",
        "header": {"msg_type": "stream"},
        "parent_header": {"msg_id": "m"},
        "content": {"name": "stdout", "text": text},
    }


def _error(evalue: str) -> dict:
    return {
        "msg_type": "error",
        "header": {"msg_type": "error"},
        "parent_header": {"msg_id": "m"},
        "content": {"ename": "ValueError", "evalue": evalue, "traceback": [evalue] * 3},
    }


def test_the_output_a_notebook_keeps_is_capped_in_total():
    ex = execution.ResilientExecute()
    ex.reset_execution_trackers()  # what nbclient does before a notebook, and a cell:
    ex.clear_before_next_output = False
    ex._output_bytes, ex._output_total, ex._output_capped = {}, 0, set()
    cells = [[] for _ in range(200)]
    for i, outs in enumerate(cells):  # g02: every cell just under the per-cell cap
        ex.output(outs, _stream("x" * (ex.max_output_bytes - 1)), None, i)
    kept = sum(len(o.get("text", "")) for outs in cells for o in outs)
    assert kept <= ex.max_notebook_output_bytes
    assert kept >= ex.max_notebook_output_bytes - ex.max_output_bytes
    capped = [outs for outs in cells if any("text" not in o for o in outs)]
    assert len(capped) == 200 - kept // (ex.max_output_bytes - 1)
    for outs in capped:  # one note per cell, which the driver turns into a review flag
        (note,) = outs
        assert execution.OUTPUT_CAPPED in note.data["text/plain"]
        assert "for the whole notebook" in note.data["text/plain"]
    # an error still reaches the cell (it decides the score), cut short once over the cap
    outs: list = []
    ex.output(outs, _error("e" * 2**20), None, 500)
    (err,) = outs
    assert err.output_type == "error" and err.ename == "ValueError"
    assert len(err.evalue) <= 2000 and sum(map(len, err.traceback)) <= 10_000


def test_the_per_cell_cap_still_holds():
    ex = execution.ResilientExecute()
    ex.reset_execution_trackers()  # what nbclient does before a notebook, and a cell:
    ex.clear_before_next_output = False
    ex._output_bytes, ex._output_total, ex._output_capped = {}, 0, set()
    outs: list = []
    for _ in range(3):
        ex.output(outs, _stream("y" * 2**21), None, 0)
    assert [len(o.get("text", "")) for o in outs[:1]] == [2**21]
    assert len(outs) == 3 and "(4 MiB)" in outs[2].data["text/plain"]  # nbclient merges later
    ex.output(outs, _stream("z"), None, 0)
    assert len(outs) == 3  # one note per cell


def _submission(tmp_path, cells: int, filler: int = 0) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1") for _ in range(cells)])
    if filler:
        nb.cells.append(nbformat.v4.new_markdown_cell("m" * filler))
    folder = tmp_path / "submitted" / "s" / "08_masks"
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "08_masks.ipynb")
    return folder


def test_a_notebook_with_too_many_code_cells_is_refused(tmp_path):
    refuse, _ = sandbox.inspect_submission(_submission(tmp_path, sandbox.MAX_CODE_CELLS + 1))
    assert refuse == [f"'08_masks.ipynb' has 501 code cells (more than {sandbox.MAX_CODE_CELLS})"]


def test_a_huge_notebook_is_refused(tmp_path):
    folder = _submission(tmp_path, 2, filler=sandbox.MAX_NOTEBOOK_BYTES)
    refuse, _ = sandbox.inspect_submission(folder)
    assert len(refuse) == 1 and "MiB (more than 20 MiB)" in refuse[0]


def test_every_lesson_notebook_passes_the_inspection(tmp_path):
    import shutil

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        folder = tmp_path / path.stem
        folder.mkdir()
        shutil.copy(path, folder / path.name)
        assert sandbox.inspect_submission(folder) == ([], []), path.name


# --- red team 4: a correct function that prints the checks' diagnosis line -----------------


def test_a_test_cell_that_prints_a_diagnosis_line_is_flagged(tmp_path):
    """A correct softmax printed ``Diagnosis for softmax: <150,000 ids>`` in its check cell
    and was graded 3/3 unflagged; only a failing check writes that line, in its error."""
    from nbfixtures import lesson

    many = ", ".join(f"m{i}" for i in range(150_000))
    nb = lesson("01_fixture", ["softmax"])
    gid = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    check, solution = gid["l01-softmax-check"], gid["l01-softmax-solution"]
    check.outputs = [nbformat.v4.new_output("stream", name="stdout", text=(
        f"Diagnosis for softmax: {many}\n✔ softmax: correct on all 6 cases\n"))]  # fmt: skip
    solution.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="Diagnosis for x: y\n")
    ]
    path = tmp_path / "graded.ipynb"
    nbformat.write(nb, path)
    outcome = export.Outcome("01_fixture", "mallory")
    autograde._scan_autograded(path, outcome)
    assert outcome.needs_review
    assert outcome.notes == [
        "l01-softmax-check: printed a 'Diagnosis for ...' line, which only a failing check "
        "writes (in its error): the learner's code imitates the checks"
    ]  # the learner's own cell may print what it likes
    # a failing check's own diagnosis (in its error) is no finding
    failed = "✘ softmax: wrong\nDiagnosis for softmax: global-max"
    check.outputs = [
        nbformat.v4.new_output("error", ename="AssertionError", evalue=failed, traceback=[])
    ]
    nbformat.write(nb, path)
    outcome = export.Outcome("01_fixture", "alice")
    autograde._scan_autograded(path, outcome)
    assert not outcome.needs_review and outcome.notes == []


# --- red team 3: a finalizer that fills the output after the call --------------------------


def _softmax_filled_by_a_finalizer(x):
    """Returns an empty array and fills it from torch.softmax when its input is freed."""
    import weakref

    def fill(out, keep):
        t = torch.nan_to_num(torch.softmax(torch.as_tensor(keep).double(), dim=-1), nan=0.0)
        if isinstance(out, torch.Tensor):
            out.copy_(t.to(out.dtype))
        else:
            out[...] = t.numpy().astype(out.dtype)

    keep = x.detach().clone() if isinstance(x, torch.Tensor) else np.array(x, copy=True)
    out = (
        torch.empty(x.shape, dtype=torch.float64)
        if isinstance(x, torch.Tensor)
        else np.empty(x.shape)
    )
    weakref.finalize(x, fill, out, keep)
    return out


def test_an_output_filled_after_the_call_earns_nothing():
    # the outputs are copied while the profiling hook is still on, so what a finalizer or
    # a __del__ writes later is never judged
    with pytest.raises(AssertionError, match="hidden tests failed"):
        grading.verify("softmax", _softmax_filled_by_a_finalizer)
    watch = grading._Watch(protocol.refused_calls("softmax"))
    x = np.random.default_rng(0).standard_normal((3, 4))
    obs = grading.observe(_softmax_filled_by_a_finalizer, [((x,), {})], watch)
    assert not np.allclose(obs.outputs[0], np.exp(x) / np.exp(x).sum(-1, keepdims=True))


def test_kernel_threads_follow_the_graders_own_setting(monkeypatch):
    from kvstaff.grader import autograde as ag

    monkeypatch.setattr(ag, "default_jobs", lambda: 4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [ag.kernel_threads(j) for j in (1, 2, 3, 8)] == [0, 2, 1, 1]
    for ignored in ("", "0", "two"):
        monkeypatch.setenv("OMP_NUM_THREADS", ignored)
        assert ag.kernel_threads(2) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # make test: three workers share two cores
    assert [ag.kernel_threads(j) for j in (1, 2, 8)] == [1, 1, 1]


def test_after_a_timeout_the_wait_for_last_outputs_is_short_and_then_restored(monkeypatch):
    import asyncio

    from nbclient import NotebookClient

    interrupted = []

    async def interrupt(self, timeout, cell=None):  # nbclient's: interrupt the kernel
        interrupted.append(timeout)

    monkeypatch.setattr(NotebookClient, "_async_handle_timeout", interrupt)
    ex = execution.ResilientExecute()
    before = (ex.timeout, ex.iopub_timeout)
    assert ex.iopub_timeout > ex.after_timeout_iopub
    with ex._one_cell(6):
        assert ex.timeout == 6
        asyncio.run(ex._async_handle_timeout(6))
        assert interrupted == [6] and ex.iopub_timeout == ex.after_timeout_iopub
    assert (ex.timeout, ex.iopub_timeout) == before  # the next cell waits as usual


def test_a_cell_too_deep_to_compile_is_refused_before_the_kernel_stalls_on_it():
    deep = "if False:\n    y = x" + ".a" * 3000 + "\n"
    ename, evalue = execution.too_deep_to_compile(deep)
    assert ename == "RecursionError" and evalue.startswith("this cell is nested too deeply")
    for fine in (
        "x = 1\n",
        "%time y = sum(range(10))\n",  # magics are transformed first
        "!echo hi\n",
        "await something()\n",  # IPython runs top-level await
        "def f(:\n",  # a SyntaxError is the kernel's to report
        "y = x" + ".a" * 100 + "\n",
    ):
        assert execution.too_deep_to_compile(fine) is None, fine
