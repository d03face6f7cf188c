"""Student versions of the lessons: ``python -m kvstaff.student notebooks workbook``.

``make student`` runs this. For every lesson ``notebooks/NN_topic.ipynb`` it writes
``workbook/NN_topic.ipynb`` with

* every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region replaced by
  ``raise NotImplementedError()`` (nbgrader's own ``ClearSolutions``, so the workbook
  matches what ``make release`` hands out),
* every ``### BEGIN HIDDEN TESTS`` region removed,
* every note for lecturers left out (a markdown cell whose slide type is ``notes``: the
  lecturer's "ask the room" prompts and their expected answers; JupyterLab shows a
  collapsed cell again whenever Run All renders it, so a note in a learner's copy would not
  stay out of sight),
* all outputs and execution counts cleared;

and ``workbook/solutions/NN_topic.ipynb``: the lesson as the instructor has it, solutions
and outputs included (hidden tests and lecturer notes left out), read-only, rewritten
whenever the lesson changes: a learner working alone opens it after trying an exercise.

It never overwrites a notebook the learner has edited. ``workbook/.generated.json``
stores, for each notebook written, a hash of its cells' types and sources as generated
(``cells``) and the SHA-256 of the lesson file it was made from (``source``: with both,
``tools/workbook_fresh.py`` tells `make lab` in a fraction of a second, with the standard
library alone, that there is nothing to do);
a workbook notebook whose cells no longer hash the same has been edited and is skipped
(and reported). Running cells changes only outputs, which are not hashed, so an
untouched-but-run notebook is regenerated. A notebook in workbook/ that this tool did not
write is never touched. Delete a workbook notebook to get a fresh copy.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from kvstaff.lessons import lesson_paths

MANIFEST = ".generated.json"


def cell_hash(nb: nbformat.NotebookNode) -> str:
    """Hash of what a learner edits: the cells' types and sources (not outputs)."""
    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(cell.cell_type.encode())
        h.update(b"\0")
        h.update(cell.source.encode())
        h.update(b"\1")
    return h.hexdigest()


#: The rule learner copies are made by; a copy made by another rule is made again (if the
#: learner has not edited it). 2: lecturer notes left out, solutions/ written beside.
RULE = 2
SOLUTIONS = "solutions"


def is_lecturer_note(cell) -> bool:
    """A note for lecturers: a markdown cell whose slide type is ``notes``."""
    slide = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
    return cell.get("cell_type") == "markdown" and slide == "notes"


def without_lecturer_notes(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` without its notes for lecturers (a new notebook)."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    nb.cells = [c for c in nb.cells if not is_lecturer_note(c)]
    return nb


def learner_copy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """What a learner is given: the student version without the notes for lecturers."""
    return without_lecturer_notes(student_version(nb))


def solutions_copy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The lesson with its solutions and outputs, hidden tests and lecturer notes left out."""
    from nbgrader.preprocessors import ClearHiddenTests

    nb = without_lecturer_notes(nb)
    nb, _ = ClearHiddenTests().preprocess(nb, {})
    return nb


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student version of a lesson (a new notebook; the input is not changed)."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearOutput, ClearSolutions

    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    resources = {}
    for pp in (ClearSolutions(), ClearHiddenTests(), ClearOutput()):
        nb, resources = pp.preprocess(nb, resources)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.execution_count = None
            cell.outputs = []
    return nb


@dataclass
class Result:
    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)  # edited by the learner, or not ours


def _written_as(entry) -> str | None:
    """The cell hash a manifest entry records (older manifests stored the hash alone)."""
    if isinstance(entry, dict):
        return entry.get("cells")
    return entry if isinstance(entry, str) else None


def generate(notebooks: Path, workbook: Path) -> Result:
    """Write student versions of every lesson in ``notebooks`` into ``workbook``."""
    notebooks, workbook = Path(notebooks), Path(workbook)
    lessons = lesson_paths(notebooks) if notebooks.is_dir() else []
    if not lessons:
        raise SystemExit(f"no lessons (NN_name.ipynb) in {notebooks}")
    workbook.mkdir(parents=True, exist_ok=True)
    manifest_path = workbook / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    result = Result()
    for src in lessons:
        dest = workbook / src.name
        lesson = nbformat.read(src, as_version=4)
        new = learner_copy(lesson)
        new_hash = cell_hash(new)
        source_sha = hashlib.sha256(src.read_bytes()).hexdigest()
        solutions_sha = _write_solutions(solutions_copy(lesson), workbook / SOLUTIONS / src.name)
        entry = {"cells": new_hash, "source": source_sha, "rule": RULE, "solutions": solutions_sha}
        if dest.exists():
            try:
                current = cell_hash(nbformat.read(dest, as_version=4))
            except Exception:  # noqa: BLE001 - unreadable means: not ours to overwrite
                current = None
            written_as = _written_as(manifest.get(src.name))
            if written_as is None or current != written_as:
                result.skipped.append(dest)
                continue
            if current == new_hash:
                manifest[src.name] = entry
                result.unchanged.append(dest)
                continue
        tmp = dest.with_suffix(".ipynb.tmp")
        nbformat.write(new, tmp)
        tmp.replace(dest)
        manifest[src.name] = entry
        result.written.append(dest)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return result


def _write_solutions(nb: nbformat.NotebookNode, dest: Path) -> str:
    """Write the read-only solutions copy (ours alone: always rewritten); its SHA-256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    data = (nbformat.writes(nb) + "\n").encode()
    if not dest.is_file() or dest.is_symlink() or dest.read_bytes() != data:
        tmp = dest.with_suffix(".ipynb.tmp")
        tmp.unlink(missing_ok=True)
        tmp.write_bytes(data)
        tmp.chmod(0o444)
        tmp.replace(dest)
    return hashlib.sha256(data).hexdigest()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m kvstaff.student NOTEBOOKS_DIR WORKBOOK_DIR", file=sys.stderr)
        return 2
    result = generate(Path(argv[0]), Path(argv[1]))
    for p in result.written:
        print(f"wrote     {p}")
    for p in result.unchanged:
        print(f"up to date {p}")
    if result.written or result.unchanged or result.skipped:
        print(f"solutions (read-only; try each exercise first): {Path(argv[1]) / SOLUTIONS}/")
    for p in result.skipped:
        print(
            f"SKIPPED   {p}: you have edited it (or it was not made by this tool); "
            f"delete it to get a fresh copy"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
