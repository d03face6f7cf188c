"""Refresh lesson 00's table of lessons (section 6) from the lessons themselves.

    .venv/bin/python tools/lesson_table.py [--rule]

Default: each lesson's stated **Time** line (~N minutes, and ~M for the optional part).
--rule: the minutes kvstaff.lessons.lesson_length gives now, rounded to 5 (for use while
the stated times are being restated). Re-execute lesson 00 afterwards
(tools/execute_notebooks.py); tests/test_ex_welcome.py checks the table.
"""

import os
import re
import sys
from pathlib import Path

import nbformat

from kvstaff.lessons import lesson_info, lesson_length, lesson_paths

ROOT = Path(__file__).resolve().parents[1]

ONE_LINE = {
    "00": "this page: the workbook, the check rhythm, the vocabulary",
    "01": "a query scores every key of a six-word sentence by a dot product",
    "02": "three learned matrices make a query, a key and a value",
    "03": "a stable softmax turns scores into weights that blend values",
    "04": "measured: dot products grow with d_k; unscaled softmax is too sharp to learn",
    "05": "what you match on differs from what you retrieve",
    "06": "the backward pass of attention by hand, checked against autograd",
    "07": "one softmax, one weighted average per head; a task that needs two heads",
    "08": "causal and padding masks act on key scores before the softmax",
    "09": "a small trained model whose keys mark a noun's role",
    "10": "past keys and values never change, so decoding caches them",
    "11": "an online softmax over blocks of keys",
    "12": "attention ignores order until positions enter queries and keys",
    "13": 'a key that says "the token before me", written by an earlier head',
    "14": "compressed, windowed, selected and shared keys: cache bytes against accuracy",
    "15": "LayerNorm, MLP, the residual path: two inits, four trained variants; equal to GPT-2",
    "16": "heads found by measurement, confirmed by ablation, in a GPT trained on Shakespeare",
    "17": "a decoding step reads memory; paged and quantised caches; choosing a token",
}


def minutes(path, rule: bool):
    if rule:
        L = lesson_length(path)
        core = 5 * round(L.minutes / 5)
        opt = 5 * round(L.optional_minutes / 5) if L.optional_minutes else None
        return core, (max(opt, 5) if opt is not None else None)
    found = [int(m) for m in re.findall(r"~\s*(\d+)", lesson_info(path).time)]
    opt = found[1] if len(found) > 1 else None  # as tests/test_lesson_length.py reads it
    return found[0], opt


def rows(rule: bool = False) -> list[str]:
    out = []
    for path in lesson_paths(ROOT / "notebooks"):
        info = lesson_info(path)
        title = info.title.split("·", 1)[1].strip()
        core, opt = minutes(path, rule)
        out.append(
            f"| {info.number} | {title} | {ONE_LINE[info.number]} | ~{core} | "
            f"{f'~{opt}' if opt else '—'} |"
        )
    return out


if __name__ == "__main__":
    os.chdir(ROOT)
    p = "notebooks/00_welcome.ipynb"
    nb = nbformat.read(p, as_version=4)
    (cell,) = [c for c in nb.cells if c.source.startswith("## 6 · The lessons")]
    head, sep, _ = cell.source.partition("|---|---|---|---|---|\n")
    assert sep, "the table's header row is missing"
    cell.source = head + sep + "\n".join(rows("--rule" in sys.argv))
    nbformat.write(nb, p)
    print("\n".join(rows("--rule" in sys.argv)))
