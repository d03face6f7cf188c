"""Where the course is, and which notebooks are its lessons — written once for every staff tool.

* :func:`course_root` — the course checkout the tools work on: ``$KEY_VECTORS_ROOT`` if set,
  else the nearest folder at or above the current one holding ``nbgrader_config.py`` and
  ``notebooks/``, else the checkout this package was installed from (editable installs).
* :func:`lesson_paths` — every ``NN_name.ipynb`` of a notebooks folder, in lesson order;
* :func:`lesson_info` / :func:`discover_lessons` — the same with each lesson's number,
  title and time estimate read from the notebook.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "LESSON_RE",
    "Lesson",
    "course_root",
    "discover_lessons",
    "lesson_info",
    "lesson_paths",
]

LESSON_RE = re.compile(r"^(\d\d)_[A-Za-z0-9_]+\.ipynb$")
HEADING_RE = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
TIME_RE = re.compile(r"\*\*Time\*\*\s*:?\s*(.+)")
ROOT_ENV = "KEY_VECTORS_ROOT"


def _is_course(folder: Path) -> bool:
    return (folder / "nbgrader_config.py").is_file() and (folder / "notebooks").is_dir()


def course_root(start: str | Path | None = None) -> Path:
    """The course checkout (the folder holding ``nbgrader_config.py`` and ``notebooks/``).

    Raises
    ------
    FileNotFoundError
        If ``$KEY_VECTORS_ROOT`` names a folder that is not a course, or none is found.
    """
    env = os.environ.get(ROOT_ENV)
    if env:
        root = Path(env).resolve()
        if not _is_course(root):
            raise FileNotFoundError(
                f"course_root: ${ROOT_ENV}={env} holds no nbgrader_config.py and notebooks/"
            )
        return root
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if _is_course(folder):
            return folder
    installed_from = Path(__file__).resolve().parents[2]
    if _is_course(installed_from):
        return installed_from
    raise FileNotFoundError(
        f"course_root: no course checkout (nbgrader_config.py beside notebooks/) at or above "
        f"{here}; run from the course folder or set ${ROOT_ENV}"
    )


def lesson_paths(notebooks: str | Path) -> list[Path]:
    """Every ``NN_name.ipynb`` in ``notebooks``, in lesson order (by file name)."""
    notebooks = Path(notebooks)
    if not notebooks.is_dir():
        raise FileNotFoundError(f"lesson_paths: notebooks folder {notebooks} does not exist")
    return sorted(p for p in notebooks.iterdir() if LESSON_RE.match(p.name))


@dataclass(frozen=True)
class Lesson:
    """One lesson notebook.

    Attributes
    ----------
    path : Path — the ``NN_name.ipynb`` file.
    number : str — ``"NN"``.
    title : str — the text of the notebook's first ``# heading``.
    time : str — the lesson's ``**Time**:`` line (``""`` if it has none).
    """

    path: Path
    number: str
    title: str
    time: str

    @property
    def stem(self) -> str:
        return self.path.stem


def lesson_info(path: str | Path) -> Lesson:
    """Read a lesson's number, title (first ``# heading``) and time estimate.

    The time is the first ``**Time**:`` line of a markdown cell that is not an exercise
    (exercise cells carry their own ``**Time**`` beside a ``**Difficulty**``).
    """
    import nbformat

    path = Path(path)
    m = LESSON_RE.match(path.name)
    if m is None:
        raise ValueError(f"lesson_info: {path.name!r} is not named like a lesson (NN_name.ipynb)")
    nb = nbformat.read(path, as_version=4)
    title, time = None, ""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        if title is None and (h := HEADING_RE.search(cell.source)):
            title = h.group(1).strip()
        if not time and "**Difficulty**" not in cell.source and (t := TIME_RE.search(cell.source)):
            time = t.group(1).strip().rstrip(".")
        if title is not None and time:
            break
    if title is None:
        raise ValueError(f"lesson_info: {path} has no '# heading' in any markdown cell")
    return Lesson(path=path, number=m.group(1), title=title, time=time)


def discover_lessons(notebooks: str | Path) -> list[Lesson]:
    """Every lesson in ``notebooks`` with its number, title and time, in lesson order."""
    return [lesson_info(p) for p in lesson_paths(notebooks)]
