"""Are the learner's copies in workbook/ up to date? Standard library only, in ~0.1 s.

    python tools/workbook_fresh.py notebooks workbook    # exit 0: nothing to do; 1: run
                                                         # python -m kvstaff.student

`make lab` asks this first, so that a warm start does not import torch, nbformat and
nbgrader (~10 s) only to find that all the copies are current. A lesson is up to date when
workbook/.generated.json records, for it, the SHA-256 of the lesson file it was made from
(unchanged since), the rule the copy was made by and the hash of the cells it was written
with, the copy's cells (types and sources; outputs are not hashed) still hash the same —
the rule ``kvstaff.student`` applies, computed here on the notebook's JSON — and its
read-only solutions copy is there as written.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

MANIFEST = ".generated.json"
RULE = 2  # kvstaff.student.RULE: the rule the copies were made by
SOLUTIONS = "solutions"  # kvstaff.student.SOLUTIONS: the read-only solutions beside them
LESSON_RE = re.compile(r"^\d\d_[A-Za-z0-9_]+\.ipynb$")


def json_cell_hash(path: Path) -> str:
    """``kvstaff.student.cell_hash`` of a notebook file, read as plain JSON."""
    h = hashlib.sha256()
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        src = cell.get("source", "")
        h.update(cell["cell_type"].encode())
        h.update(b"\0")
        h.update(("".join(src) if isinstance(src, list) else src).encode())
        h.update(b"\1")
    return h.hexdigest()


def stale(notebooks: Path, workbook: Path) -> list[str]:
    """Names of the lessons whose copy must be looked at by the full tool (empty: none)."""
    lessons = sorted(p for p in notebooks.glob("*.ipynb") if LESSON_RE.match(p.name))
    try:
        manifest = json.loads((workbook / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [p.name for p in lessons] or ["(no lessons)"]
    out = []
    for src in lessons:
        entry, copy = manifest.get(src.name), workbook / src.name
        try:
            solutions = workbook / SOLUTIONS / src.name
            fresh = (
                isinstance(entry, dict)
                and entry.get("rule") == RULE
                and entry.get("source") == hashlib.sha256(src.read_bytes()).hexdigest()
                and copy.is_file()
                and json_cell_hash(copy) == entry.get("cells")
                and solutions.is_file()
                and hashlib.sha256(solutions.read_bytes()).hexdigest() == entry.get("solutions")
            )
        except (OSError, ValueError, KeyError, TypeError):
            fresh = False
        if not fresh:
            out.append(src.name)
    return out if lessons else ["(no lessons)"]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tools/workbook_fresh.py NOTEBOOKS_DIR WORKBOOK_DIR", file=sys.stderr)
        return 2
    notebooks, workbook = Path(argv[0]), Path(argv[1])
    todo = stale(notebooks, workbook)
    if todo:
        return 1
    n = sum(1 for p in notebooks.glob("*.ipynb") if LESSON_RE.match(p.name))
    print(f"workbook: your {n} lesson copies in {workbook}/ are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
