"""The practice check of lesson 00: normalise_rows.

The reference is compared with an independent oracle (a loop over rows in float64). That
every known wrong variant is diagnosed as exactly its own misconception, that check() names
it and that check_hidden() fails it, is tested for every exercise in
tests/test_checks_registry.py.
"""

from __future__ import annotations

import numpy as np

from attnlib import checks
from attnlib.checks import get_exercise


def _loop_oracle(x):
    flat = x.reshape(-1, x.shape[-1])
    out = np.empty_like(flat)
    for i, row in enumerate(flat):
        total = 0.0
        for value in row:
            total += value
        out[i] = row / total
    return out.reshape(x.shape)


def test_reference_matches_a_loop_and_rows_sum_to_one():
    ex = get_exercise("normalise_rows")
    assert len(ex.cases(hidden=True)) > len(ex.cases()), "the grader has cases of its own"
    for case in ex.cases(hidden=True):
        (x,) = case.args
        got = ex.reference(x)
        np.testing.assert_allclose(got, _loop_oracle(x), rtol=1e-12, err_msg=case.label)
        np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-12, err_msg=case.label)


def test_cases_hold_one_row_a_square_and_a_non_square_matrix():
    shapes = [case.args[0].shape for case in get_exercise("normalise_rows").cases()]
    assert any(len(s) == 1 for s in shapes), "one row: the whole-array sum is right there"
    assert any(len(s) == 2 and s[0] == s[1] for s in shapes), "square: keepdims-missing runs"
    assert any(len(s) == 2 and s[0] != s[1] for s in shapes), "non-square: it raises"
    assert any(len(s) == 3 for s in shapes), "a batch"


def test_any_correct_implementation_passes(capsys):
    def with_a_loop(x):
        return _loop_oracle(x)

    def with_a_division_by_a_column(x):
        return x / x.sum(axis=-1)[..., None]

    for fn in (with_a_loop, with_a_division_by_a_column):
        assert checks.diagnose("normalise_rows", fn) == []
        checks.check("normalise_rows", fn)
    assert capsys.readouterr().out.count("✔ normalise_rows") == 2


def test_lesson_00_lists_every_lesson_with_its_stated_times():
    """Section 6 of lesson 00 has one row per lesson: its number, its title and the minutes
    its **Time** line states (the core, and the optional part when it has one)."""
    import re

    import nbformat
    from conftest import NOTEBOOKS

    from kvstaff.lessons import lesson_info, lesson_paths

    nb = nbformat.read(NOTEBOOKS / "00_welcome.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.source.startswith("## 6 · The lessons")]
    table = {}
    for line in cell.source.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) == 5 and re.fullmatch(r"\d\d", cols[0]):
            table[cols[0]] = cols
    problems = []
    for path in lesson_paths(NOTEBOOKS):
        info = lesson_info(path)
        stated = [int(m) for m in re.findall(r"~\s*(\d+)", info.time)]
        optional = f"~{stated[1]}" if len(stated) > 1 else "—"  # as test_lesson_length reads it
        want = [info.number, info.title.split("·", 1)[1].strip(), f"~{stated[0]}", optional]
        row = table.pop(info.number, None)
        if row is None or [row[0], row[1], row[3], row[4]] != want:
            problems.append(f"{path.name}: the table says {row}, the lesson {want}")
    problems += [f"the table lists lesson {n}, which does not exist" for n in table]
    assert not problems, "lesson 00's table of lessons is out of date:\n" + "\n".join(problems)
