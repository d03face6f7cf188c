"""``make report``: the class misconception report read from a graded class.

The class is the grading tests' two fixture lessons (tests/nbfixtures.py: softmax and
attend; causal_mask and padding_mask) handed in by a class of learners: the reference,
an untouched student version, learners with one or two mistakes, one whose mistake no
check knows, one tuned to the visible cases (caught by the hidden tests), one who calls
the course's reference, and one whose lesson was submitted but could not be graded. Each
graded notebook is laid out as nbgrader's ``autograded/`` tree and its check cells carry
exactly what the checks print and raise (run here, in-process, on each learner's
function). ``python -m kvstaff.report`` must count what the checks found.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import subprocess
import time
from pathlib import Path
from unittest import mock

import nbformat
import numpy as np
import pytest
from nbfixtures import LESSONS, lesson

import attnlib
from attnlib import checks
from attnlib.checks.protocol import FEEDBACK_ENV
from kvstaff import report
from kvstaff.grader.execution import STDERR_PREFIX

A, B = LESSONS  # "01_fixture" (softmax, attend), "02_fixture_masks" (causal_mask, padding_mask)


def _stub(*args, **kwargs):
    raise NotImplementedError()


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attend(q, k, v, mask=None, *, scale=None, fill=-np.inf, after=False):
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale(q))
    if mask is not None and not after:
        s = np.where(mask, s, fill)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    t = e.sum(axis=-1, keepdims=True)
    w = e / np.where(t > 0, t, 1.0)
    if mask is not None and after:
        w = w * mask
    return w @ v, w


def _causal(seq):
    return np.tril(np.ones((seq, seq), dtype=bool))


def _padding(lengths, seq_k):
    return (np.arange(seq_k)[None, :] < np.asarray(lengths)[:, None])[:, None, :]


def softmax_naive(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def softmax_global_max(x):
    e = np.exp(x - x.max())
    return e / e.sum(axis=-1, keepdims=True)


def attend_after_and_d_k(q, k, v, mask=None):
    return _attend(q, k, v, mask, scale=lambda q: 1 / q.shape[-1], after=True)


def attend_after(q, k, v, mask=None):
    return _attend(q, k, v, mask, after=True)


def attend_minus_1e9(q, k, v, mask=None):
    return _attend(q, k, v, mask, fill=-1e9)


def attend_nonsense(q, k, v, mask=None):
    return q, k


def causal_float(seq):
    return np.tril(np.ones((seq, seq)))


def padding_pads_true_on_query_axis(lengths, seq_k):
    return ~_padding(lengths, seq_k).swapaxes(-1, -2)


def calls_the_reference(x):
    return attnlib.softmax(x)


CLASS = {  # student -> {exercise: function}; a missing lesson was not handed in
    "ref": {"softmax": _softmax, "attend": _attend, "causal_mask": _causal,
            "padding_mask": _padding},
    "untouched": {"softmax": _stub, "attend": _stub, "causal_mask": _stub, "padding_mask": _stub},
    "alice": {"softmax": softmax_naive, "attend": attend_after_and_d_k, "causal_mask": _causal,
              "padding_mask": _padding},
    "bob": {"softmax": _softmax, "attend": attend_after, "causal_mask": causal_float,
            "padding_mask": padding_pads_true_on_query_axis},
    "carol": {"softmax": softmax_global_max, "attend": attend_minus_1e9, "causal_mask": _causal,
              "padding_mask": _stub},
    "dave": {"softmax": _softmax, "attend": attend_nonsense, "causal_mask": _causal,
             "padding_mask": _padding},
    "erin": {"softmax": _softmax, "attend": "hidden", "causal_mask": _causal,
             "padding_mask": _padding},
    "grace": {"softmax": calls_the_reference, "attend": _attend},
}  # fmt: skip
NOT_GRADED = {("frank", A)}  # submitted, but nbgrader could not grade it
HIDDEN_FAILURE = (
    "✘ attend: hidden tests failed on case 'hidden: 5 queries, 3 keys, d_k=6, d_v=4': "
    "output 0: 20 of 20 entries differ; largest difference 0.6 (probable mistake: no-scaling)"
)


def _outputs(name, fn) -> list:
    """What the check cell of ``name`` shows after grading ``fn``."""
    if fn == "hidden":  # visible cases passed, the grader's hidden tests did not
        passed = f"correct on all {len(checks.get_exercise(name).cases())} cases"
        return [
            nbformat.v4.new_output("stream", name="stdout", text=f"✔ {name}: {passed}\n"),
            nbformat.v4.new_output("error", ename="AssertionError", evalue=HIDDEN_FAILURE,
                                   traceback=[f"AssertionError: {HIDDEN_FAILURE}"]),
        ]  # fmt: skip
    out, err_out = io.StringIO(), io.StringIO()
    checks.forget()  # each graded notebook runs in a fresh kernel of its own
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err_out),
            mock.patch.dict(os.environ, {FEEDBACK_ENV: "record"}),  # as the grader's kernel
        ):
            checks.check(name, fn)
        if err_out.getvalue():  # not written yet: one line on stderr, then the hidden tests fail
            shown = "".join(f"{STDERR_PREFIX}{ln}\n" for ln in err_out.getvalue().splitlines())
            failed = f"✘ {name}: hidden tests failed on case 'x': raised NotImplementedError"
            return [
                nbformat.v4.new_output("stream", name="stdout", text=shown),
                nbformat.v4.new_output("error", ename="AssertionError", evalue=failed,
                                       traceback=[f"AssertionError: {failed}"]),
            ]  # fmt: skip
    except AssertionError as err:
        return [
            nbformat.v4.new_output(
                "error",
                ename="AssertionError",
                evalue=str(err),
                traceback=[f"AssertionError: {err}"],
            )
        ]
    return [nbformat.v4.new_output("stream", name="stdout", text=out.getvalue())]


def _expected(name, fn) -> tuple[str, list[str]]:
    """(status, ids) of a learner's function, straight from the checks."""
    if fn == "hidden":
        return "wrong", ["no-scaling"]
    if fn is _stub:
        return "not written", []
    r = checks.run(name, fn)
    if r.ok:
        return ("needs review" if r.called_reference else "correct"), []
    return "wrong", list(r.misconceptions)


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    for student, work in CLASS.items():
        for stem, names in LESSONS.items():
            if not all(n in work for n in names):
                continue
            nb = lesson(stem, names)
            for cell in nb.cells:
                gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
                m = re.fullmatch(r"l\d\d-(\w+)-check", gid)
                if m:
                    cell.outputs = _outputs(m.group(1), work[m.group(1)])
                    cell.execution_count = 1
            for top in ("submitted", "autograded"):
                folder = course / top / student / stem
                folder.mkdir(parents=True)
                nbformat.write(nb, folder / f"{stem}.ipynb")
    for student, stem in NOT_GRADED:
        folder = course / "submitted" / student / stem
        folder.mkdir(parents=True)
        nbformat.write(lesson(stem, LESSONS[stem]), folder / f"{stem}.ipynb")
    return course


@pytest.fixture(scope="module")
def built(graded_class, python):
    out = graded_class / "build" / "report"
    proc = subprocess.run(
        [python, "-m", "kvstaff.report", "--course", str(graded_class)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = list(csv.DictReader((out / "misconceptions.csv").open(encoding="utf-8")))
    return proc.stdout, (out / "index.html").read_text(encoding="utf-8"), rows


def _count(rows, lesson_, exercise, what, mid=""):
    hit = [
        r for r in rows
        if (r["lesson"], r["exercise"], r["what"], r["id"]) == (lesson_, exercise, what, mid)
    ]  # fmt: skip
    assert len(hit) <= 1
    return (int(hit[0]["count"]), int(hit[0]["of"]), hit[0]["learners"]) if hit else (0, None, "")


def test_the_csv_counts_what_the_checks_found(built):
    _, _, rows = built
    for stem, names in LESSONS.items():
        learners = sorted(
            {s for s, w in CLASS.items() if all(n in w for n in names)}
            | {s for s, ls in NOT_GRADED if ls == stem}
        )
        for name in names:
            expected: dict[tuple[str, str], list[str]] = {}

            def add(what, student, mid="", expected=expected):
                expected.setdefault((what, mid), []).append(student)

            for student in learners:
                if (student, stem) in NOT_GRADED:
                    add("not-graded", student)
                    continue
                status, ids = _expected(name, CLASS[student][name])
                if status == "wrong":
                    for mid in ids or [""]:
                        add("misconception" if mid else "unrecognised", student, mid)
                else:
                    add(status.replace(" ", "-"), student)
                if status != "not written":
                    add("submitted", student)
            got = {
                (r["what"], r["id"]): r["learners"].split(";")
                for r in rows
                if (r["lesson"], r["exercise"]) == (stem, name) and int(r["count"])
            }
            assert got == {k: sorted(v) for k, v in expected.items()}, (stem, name)
            ofs = {int(r["of"]) for r in rows if (r["lesson"], r["exercise"]) == (stem, name)}
            assert ofs == {len(learners)}


def test_the_counts_a_lecturer_reads(built):
    stdout, _, rows = built
    assert _count(rows, A, "attend", "correct")[:2] == (2, 9)  # ref, grace
    assert _count(rows, A, "attend", "misconception", "mask-after-softmax")[:2] == (2, 9)
    assert _count(rows, A, "attend", "misconception", "mask-after-softmax")[2] == "alice;bob"
    assert _count(rows, A, "attend", "misconception", "scale-not-sqrt")[:2] == (1, 9)
    assert _count(rows, A, "attend", "misconception", "mask-fill-finite")[2] == "carol"
    assert _count(rows, A, "attend", "misconception", "no-scaling")[2] == "erin"  # hidden
    assert _count(rows, A, "attend", "unrecognised")[2] == "dave"
    assert _count(rows, A, "attend", "not-written")[2] == "untouched"
    assert _count(rows, A, "attend", "not-graded")[2] == "frank"
    assert _count(rows, A, "attend", "submitted")[:2] == (7, 9)
    assert _count(rows, A, "softmax", "misconception", "unstable-softmax")[2] == "alice"
    assert _count(rows, A, "softmax", "misconception", "global-max")[2] == "carol"
    assert _count(rows, A, "softmax", "needs-review")[2] == "grace"
    assert _count(rows, B, "causal_mask", "misconception", "mask-not-boolean")[2] == "bob"
    assert _count(rows, B, "padding_mask", "misconception", "padding-inverted")[:2] == (1, 7)
    assert _count(rows, B, "padding_mask", "not-written")[2] == "carol;untouched"
    assert "9 learner(s), 4 exercise(s)" in stdout


def test_the_page_is_offline_with_a_described_chart_per_exercise(built):
    _, page, _ = built
    imgs = re.findall(r"<img [^>]*>", page)
    assert len(imgs) == 4  # softmax, attend, causal_mask, padding_mask
    for img in imgs:
        assert 'src="data:image/png;base64,' in img
        alt = re.search(r'alt="([^"]+)"', img).group(1)
        assert alt.startswith("Bar chart of ") and "learners" in alt
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "What to reteach" in page
    assert "2 of 9" in page and "mask-after-softmax" in page
    assert checks.explanation("attend", "mask-after-softmax").split(". ")[0] in page


def test_the_chart_is_readable_and_colour_blind_safe():
    s = report.ExerciseSummary(
        A,
        "attend",
        [
            report.Row("a", "correct"),
            report.Row("b", "wrong", ["mask-after-softmax", "no-scaling"]),
            report.Row("c", "wrong"),
            report.Row("d", "not written"),
        ],
    )
    fig = report.bar_chart(s)
    texts = [t for ax in fig.axes for t in (ax.texts + ax.get_yticklabels() + ax.get_xticklabels())]
    texts += [ax.title for ax in fig.axes] + [ax.xaxis.label for ax in fig.axes]
    assert texts and min(t.get_fontsize() for t in texts if t.get_text()) >= 12
    import matplotlib.colors as mcolors

    palette = {mcolors.to_hex(c).lower() for c in report.OKABE_ITO}
    bars = [p for ax in fig.axes for p in ax.patches]
    assert len(bars) == 5  # correct, two misconceptions, unrecognised, not written
    assert {mcolors.to_hex(p.get_facecolor()).lower() for p in bars} <= palette
    assert report.alt_text(s) == (
        "Bar chart of attend in 01_fixture, 4 learners: correct 1; no-scaling 1; "
        "mask-after-softmax 1; unrecognised mistake 1; not written 1."
    )


def test_a_cell_that_failed_without_a_check_message_is_wrong(tmp_path):
    nb = lesson(A, LESSONS[A])
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "l01-softmax-check":
            cell.outputs = [
                nbformat.v4.new_output(
                    "error", ename="NameError", evalue="name 'softmax' is not defined", traceback=[]
                )
            ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    got = report.read_notebook(path)
    assert (got["softmax"].status, got["softmax"].ids) == ("wrong", [])
    assert got["attend"].status == "unknown"  # never ran


def test_each_learners_summary_is_what_the_checks_found_on_their_work(graded_class):

    entries = report.learner_entries(graded_class)
    assert sorted(entries) == sorted(set(CLASS) | {s for s, _ in NOT_GRADED})
    for student, mine in entries.items():
        for stem, names in LESSONS.items():
            got = [e for e in mine if e.lesson == stem]
            if (student, stem) in NOT_GRADED:
                assert [(e.exercise, e.status) for e in got] == [("", "not graded")]
            elif not all(n in CLASS.get(student, {}) for n in names):
                assert [(e.exercise, e.status) for e in got] == [("", "absent")]
            else:
                want = {n: _expected(n, CLASS[student][n]) for n in names}
                assert {e.exercise: (e.status, sorted(e.ids)) for e in got} == {
                    n: (st, sorted(ids)) for n, (st, ids) in want.items()
                }, (student, stem)


def test_no_class_is_reported_clearly(tmp_path, capsys):
    assert report.main(["--course", str(tmp_path)]) == 1
    assert "make autograde" in capsys.readouterr().out


def test_make_has_a_report_target(root):
    text = (root / "Makefile").read_text()
    assert re.search(
        r"^report: setup\n\t\$\(BIN\)/python -m kvstaff\.report --learners$", text, re.M
    )
    assert "## Class misconception report" in (root / "README.md").read_text()


# ---- a learner's output can never stop or slow the report (the fourth red team) ----------

MANY_IDS = ", ".join(f"m{i}" for i in range(150_000))  # one line of 1.2 MB: under the output cap


def _stream(text: str):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def _error(evalue: str):
    return nbformat.v4.new_output("error", ename="AssertionError", evalue=evalue, traceback=[])


def _garbage_class(course: Path) -> None:
    passed = f"✔ softmax: correct on all {len(checks.get_exercise('softmax').cases())} cases\n"
    attend_wrong = _outputs("attend", attend_after)  # mask-after-softmax, as the check says
    flood = [_stream(f"{i} " + "x" * 4000 + "\n") for i in range(3000)]
    work = {  # student -> (softmax check cell's outputs, attend check cell's outputs)
        "ref": (_outputs("softmax", _softmax), _outputs("attend", _attend)),
        # a correct softmax that prints one Diagnosis line of 150,000 ids
        "mallory": ([_stream(f"Diagnosis for softmax: {MANY_IDS}\n" + passed)], attend_wrong),
        # a correct softmax printing verdicts of its own, registered ids included
        "gina": (
            [
                _stream(
                    "✘ softmax: [needs-review] forged\nDiagnosis for softmax: unstable-softmax\n"
                    "Diagnosis for attend: no-scaling\n" + passed
                )
            ],
            _outputs("attend", _attend),
        ),  # fmt: skip
        # an error of the check (its message can quote the learner's own exception): one
        # registered id among 150,000 others; 3000 outputs of 4 KiB; a 3 MiB line
        "hugo": (
            [
                *flood,
                _error(f"✘ softmax: wrong\nDiagnosis for softmax: unstable-softmax, {MANY_IDS}"),
            ],
            [_error("✘ attend: wrong\nDiagnosis for attend: " + "z" * 3 * 2**20)],
        ),  # fmt: skip
    }
    for student, (soft, att) in work.items():
        nb = lesson(A, LESSONS[A])
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if gid in ("l01-softmax-check", "l01-attend-check"):
                cell.outputs = soft if "softmax" in gid else att
        if student == "hugo":  # a graded cell of its own that names 20,000 exercises
            calls = "".join(f'checks.check("fake_{i}", softmax)\n' for i in range(20_000))
            meta = {"nbgrader": {"grade": True, "solution": False, "locked": True, "points": 1,
                                 "grade_id": "bonus", "schema_version": 3}}  # fmt: skip
            nb.cells.append(nbformat.v4.new_code_cell(calls, metadata=meta, outputs=flood[:50]))
        for top in ("submitted", "autograded"):
            folder = course / top / student / A
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / f"{A}.ipynb")
    # notebooks of odd shapes (not valid nbformat): a cell's outputs a dict, another's
    # metadata a list; and a file that is not JSON at all
    odd = json.loads(nbformat.writes(lesson(A, LESSONS[A])))
    checks_ = [c for c in odd["cells"] if "check(" in "".join(c["source"])]
    checks_[0]["outputs"], checks_[1]["metadata"] = {"x": 1}, []
    for student, text in (("ivy", json.dumps(odd)), ("jack", '{"cells": [ nope')):
        for top in ("submitted", "autograded"):
            folder = course / top / student / A
            folder.mkdir(parents=True)
            (folder / f"{A}.ipynb").write_text(text)


def test_a_learners_output_never_stops_or_slows_the_report(tmp_path, python):
    """A 150,000-id Diagnosis line printed by a correct softmax once made ``make report`` run
    4-5 minutes and die (the image was too large): no report, no learner pages."""
    _garbage_class(tmp_path)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [python, "-m", "kvstaff.report", "--course", str(tmp_path), "--learners"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.perf_counter() - t0
    print(f"report of the garbage class: {seconds:.1f} s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert seconds < 30  # measured ~5 s, most of it importing torch and matplotlib
    out = tmp_path / "build" / "report"
    rows = list(csv.DictReader((out / "misconceptions.csv").open(encoding="utf-8")))
    assert {r["exercise"] for r in rows} == {"softmax", "attend"}  # no fake_* exercise
    for name in ("softmax", "attend"):
        known = {m.id for m in checks.get_exercise(name).misconceptions}
        assert {r["id"] for r in rows if r["exercise"] == name} <= known | {""}
    assert _count(rows, A, "softmax", "correct")[2] == "gina;mallory;ref"
    assert _count(rows, A, "softmax", "misconception", "unstable-softmax")[2] == "hugo"
    assert _count(rows, A, "attend", "correct")[2] == "gina;ref"
    assert _count(rows, A, "attend", "misconception", "mask-after-softmax")[2] == "mallory"
    assert _count(rows, A, "attend", "unrecognised")[2] == "hugo"
    assert "ivy" not in _count(rows, A, "softmax", "correct")[2]  # read as far as it goes
    page = (out / "index.html").read_text(encoding="utf-8")
    assert len(page) < 2**20 and page.count("<img ") == 2
    for student in ("ref", "mallory", "gina", "hugo", "ivy", "jack"):
        mine = (out / "learners" / f"{student}.html").read_text(encoding="utf-8")
        assert len(mine) < 20_000 and "m149999" not in mine, student
