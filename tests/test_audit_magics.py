"""The audit reads the code an allowed magic runs (%%time, %timeit, %prun) like a cell's own.

IPython turns ``%%time`` + body into ``get_ipython().run_cell_magic('time', '', body)``: the
body is one string constant, and an audit that only excused the call never read it (the red
team's b01/b06/d01 hid a pre_run_cell hook, a table of the reference's answers or a
background process that way). Fast: no kernel, no sandbox.
"""

from __future__ import annotations

import pytest

from kvstaff.grader import audit

FORBIDDEN = {"attend", "softmax"}

HOOK = (
    "from attnlib.checks import _core as C\n"
    "_t = {}\n"
    "def _fill(*_):\n"
    "    e = C.get_exercise('softmax')\n"
    "    for c in e.cases():\n"
    "        _t[repr(c.args)] = e.reference(*c.args)\n"
    "get_ipython().events.register('pre_run_cell', _fill)\n"
    "def softmax(x):\n"
    "    return _t[repr((x,))]\n"
)


@pytest.mark.parametrize(
    "source",
    [
        "%timeit softmax(x)",
        "%timeit -n1 -r1 -q softmax(x)",
        "t = %timeit -o -n 2 softmax(x)",
        "%time y = softmax(x)",
        "%time --no-raise-error y = softmax(x)",
        "%%time\ny = softmax(x)\nprint(y)",
        "%%timeit -n1 -r1 x = np.ones(3)\nsoftmax(x)",
        "%prun -q -l 5 -s cumulative softmax(x)",
        "%%prun -q\nsoftmax(x)",
        "%matplotlib inline",
        "%precision 3",
        "%%time\n%timeit softmax(x)\nz = 1",
    ],
)
def test_ordinary_magics_are_no_finding(source):
    assert audit.audit_code(source, FORBIDDEN) == []


@pytest.mark.parametrize(
    "source, reason",
    [
        ("%%time\n" + HOOK, "uses get_ipython().events"),
        ("%%time\n" + HOOK, "uses C.get_exercise"),
        ("%%time\nfrom attnlib import attend", "imports attend from attnlib (a course reference)"),
        ("%%time\nimport subprocess\nsubprocess.Popen(['sleep', '9'])", "imports subprocess"),
        ("%time import subprocess", "imports subprocess"),
        (
            "%timeit -n1 -r1 np.testing.assert_allclose = print",
            "assigns to np.testing.assert_allclose",
        ),
        ("%%timeit -n1 -r1 import pickle\npass", "imports pickle"),
        ("%prun -q open('x.py', 'w')", "opens a file for writing"),
        ("%%time\n%timeit -n1 -r1 import sqlite3", "imports sqlite3"),
        # IPython refuses or the audit cannot excuse these: the get_ipython() call is reported
        ("%prun -D /tmp/x.prof softmax(x)", "calls get_ipython()"),
        ("%precision {open('x', 'w')}", "calls get_ipython()"),
        ("%matplotlib $backend", "calls get_ipython()"),
        ("get_ipython().run_cell_magic('time', '', code)", "calls get_ipython()"),
        ("%timeit -z softmax(x)", "calls get_ipython()"),
        # code the audit cannot parse is a finding of its own
        (
            "%%time\nx = (",
            "the audit could not read this cell (the code given to %time is not Python):"
            " a person must",
        ),
    ],
)
def test_code_given_to_a_magic_is_audited(source, reason):
    assert reason in audit.audit_code(source, FORBIDDEN)


def test_aliases_made_inside_a_magic_are_followed_in_other_cells():
    found = audit.audit_cells(
        ["%%time\nimport attnlib.checks as _c\nx = 1", "_c.check_hidden = lambda *a, **k: None"],
        FORBIDDEN,
    )
    assert found[1] == ["assigns to _c.check_hidden"]
    found = audit.audit_cells(["_g = get_ipython", "%%time\n_h = _g().events"], set())
    assert "uses _g().events" in found[1]
