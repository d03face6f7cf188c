"""Handed-in notebooks that are not what they seem: every cap is counted on nbformat 4.

The fourth red team handed in the same 600 code cells as nbformat 3, which keeps its cells
under ``worksheets``: the cap of 500 code cells counted ``cells`` (none), nbgrader converted
the notebook to version 4 and graded it 3/3; 20,000 cells took 101 s per submission,
unflagged. Now a notebook is read as nbgrader reads it (:func:`sandbox.read_submitted_notebook`),
a version other than 4 is refused outright (every Jupyter since 2015 saves 4; the course
releases 4), and the caps (size, cells, code cells, outputs) are counted on that notebook.
No kernel, no nbgrader run: :func:`autograde.grade_one` refuses before nbgrader copies
anything, and :func:`autograde.finish` makes that ``NOT GRADED``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest

from kvstaff.grader import autograde, sandbox
from kvstaff.grader.course import load_config

LESSON = "08_masks"


def _v3(code_cells: int) -> dict:
    cell = {"cell_type": "code", "input": "1", "language": "python", "metadata": {},
            "outputs": [], "collapsed": False}  # fmt: skip
    return {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {"name": ""},
        "worksheets": [{"cells": [dict(cell) for _ in range(code_cells)], "metadata": {}}],
    }


def _v4(code_cells: int = 1, markdown_cells: int = 0, outputs: int = 0) -> dict:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1") for _ in range(code_cells)]
    nb.cells += [nbformat.v4.new_markdown_cell("m") for _ in range(markdown_cells)]
    if outputs:
        out = nbformat.v4.new_output("stream", name="stdout", text="")
        nb.cells[0].outputs = [dict(out) for _ in range(outputs)]
    return nb


def _hand_in(tmp_path: Path, nb, student: str = "s") -> Path:
    folder = tmp_path / "submitted" / student / LESSON
    folder.mkdir(parents=True)
    data = nb if isinstance(nb, (str, bytes)) else json.dumps(nb)
    path = folder / f"{LESSON}.ipynb"
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return folder


def test_nbformat_3_is_refused_however_few_cells_it_has(tmp_path):
    refuse, _ = sandbox.inspect_submission(_hand_in(tmp_path, _v3(600)))
    assert refuse == [
        "'08_masks.ipynb' is in nbformat 3, not 4: the grader reads only nbformat 4 "
        "(open it in Jupyter and save it, which converts it)"
    ]
    refuse, _ = sandbox.inspect_submission(_hand_in(tmp_path, _v3(3), "t"))
    assert len(refuse) == 1 and "nbformat 3, not 4" in refuse[0]
    # what nbgrader would have graded: nbformat converts it to 600 code cells of version 4
    nb = nbformat.reads(json.dumps(_v3(600)), as_version=4)
    assert sum(c.cell_type == "code" for c in nb.cells) == 600


@pytest.mark.parametrize(
    "version", [1, 2, 5, "4", 4.0, None, True], ids=lambda v: f"nbformat={v!r}"
)
def test_every_other_version_is_refused(tmp_path, version):
    nb = dict(_v4())
    nb["nbformat"] = version
    refuse, _ = sandbox.inspect_submission(_hand_in(tmp_path, nb))
    assert len(refuse) == 1 and "not 4: the grader reads only nbformat 4" in refuse[0]


def test_the_caps_count_the_nbformat_4_notebook(tmp_path):
    cases = {
        "code": (_v4(code_cells=sandbox.MAX_CODE_CELLS + 1), "501 code cells (more than 500)"),
        "cells": (_v4(markdown_cells=sandbox.MAX_CELLS), "2001 cells (more than 2000)"),
        "outputs": (_v4(outputs=sandbox.MAX_OUTPUTS + 1), "10001 outputs (more than 10000)"),
    }
    for who, (nb, said) in cases.items():
        refuse, _ = sandbox.inspect_submission(_hand_in(tmp_path, nb, who))
        assert len(refuse) == 1 and said in refuse[0], (who, refuse)
    # at the caps: fine
    nb = _v4(code_cells=sandbox.MAX_CODE_CELLS, outputs=sandbox.MAX_OUTPUTS)
    assert sandbox.inspect_submission(_hand_in(tmp_path, nb, "at-caps")) == ([], [])


def test_a_duplicate_key_is_read_as_nbgrader_reads_it(tmp_path):
    # json.loads keeps the last "cells": so does nbformat, so does the inspection
    many = json.dumps(_v4(code_cells=600)["cells"])
    text = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5, "cells": ' + many
    refuse, _ = sandbox.inspect_submission(_hand_in(tmp_path, text + "}"))
    assert refuse == ["'08_masks.ipynb' has 600 code cells (more than 500)"]
    assert len(nbformat.reads(text + "}", as_version=4).cells) == 600


@pytest.mark.parametrize(
    "data, said",
    [
        ('{"cells": [ this is not json', "not a notebook the grader can read (NotJSONError)"),
        ("[1, 2, 3]", "not a notebook the grader can read (AttributeError)"),
        ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}}', "can read (AttributeError)"),
        ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": 7}', "can read"),
        (json.dumps(_v4()).encode("utf-16"), "(UnicodeDecodeError)"),
        ("[" * 100_000 + "]" * 100_000, "not a notebook the grader can read (RecursionError)"),
    ],
    ids=["not-json", "a-list", "no-cells", "cells-not-a-list", "utf-16", "deep"],
)
def test_what_nbgrader_could_not_read_is_refused_before_it_tries(tmp_path, data, said):
    refuse, _ = sandbox.inspect_submission(_hand_in(tmp_path, data))
    assert len(refuse) == 1 and said in refuse[0], refuse


def test_20000_cells_are_refused_in_seconds(tmp_path):
    # Refused from one read of the file, never executed: about 0.3 s on a quiet 2-core machine,
    # 1.3 s measured under a full `make test`; the bound catches the pathological case (nbgrader
    # executing 20,000 cells takes minutes), not the machine's load.
    for who, nb in (("v3", _v3(20_000)), ("v4", _v4(code_cells=20_000))):
        folder = _hand_in(tmp_path, nb, who)
        t0 = time.perf_counter()
        refuse, _ = sandbox.inspect_submission(folder)
        assert refuse and time.perf_counter() - t0 < 10.0, who


def test_a_refused_notebook_is_not_graded_and_nbgrader_never_runs(tmp_path, monkeypatch):
    _hand_in(tmp_path, _v3(600))

    def never(*args, **kwargs):
        raise AssertionError("nbgrader ran on a refused submission")

    monkeypatch.setattr(autograde, "run_app", never)
    result = autograde.grade_one(str(tmp_path), LESSON, "s", 10, "bwrap", 1, slot=0)
    assert not result["success"] and "nbformat 3, not 4" in result["error"]
    outcome = autograde.finish(tmp_path, load_config(tmp_path), result, "bwrap")
    assert outcome.status == "NOT GRADED" and outcome.score is None and outcome.needs_review
    assert any("nbformat 3, not 4" in n for n in outcome.notes)
