"""Where the course is, and which notebooks are its lessons — written once for every staff tool.

* :func:`course_root` — the course checkout the tools work on: ``$KEY_VECTORS_ROOT`` if set,
  else the nearest folder at or above the current one holding ``nbgrader_config.py`` and
  ``notebooks/``, else the checkout this package was installed from (editable installs).
* :func:`lesson_paths` — every ``NN_name.ipynb`` of a notebooks folder, in lesson order;
* :func:`lesson_info` / :func:`discover_lessons` — the same with each lesson's number,
  title and time estimate read from the notebook;
* :func:`lesson_length` — how long a lesson's core really is: its words, code cells, figures
  and exercise minutes, and the time they add up to by the course's rule (:data:`WORDS_PER_MINUTE`
  of reading, :data:`MINUTES_PER_CODE_CELL` to read and run a cell,
  :data:`MINUTES_PER_FIGURE` per figure, each exercise's own estimate but at least
  :data:`MIN_EXERCISE_MINUTES` for its difficulty). The optional part at a lesson's end
  (from a ``## Optional`` heading to the further reading) is counted apart; the core is at
  most :data:`MAX_CORE_MINUTES`.
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
    "Length",
    "MAX_CORE_MINUTES",
    "MAX_CORE_WORDS",
    "discover_lessons",
    "lesson_info",
    "exercise_minutes",
    "lesson_length",
    "lesson_paths",
    "stated_minutes",
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


# ----------------------------------------------------------------------------------------
# How long a lesson is
# ----------------------------------------------------------------------------------------

#: The rule is calibrated on careful first readings: three expert readers and a learner working
#: alone each timed the lessons (issue 36) at 1.5-2x what words/150 + 0.2 min per code cell
#: gave. Study reading of technical prose with maths, pausing on the figure a paragraph points
#: at, runs at ~100 words/minute (plain prose: ~240).
WORDS_PER_MINUTE = 100
#: Reading a code cell, running it and reading what it prints.
MINUTES_PER_CODE_CELL = 0.5
#: Looking at a figure a code cell draws (each image in a stored output) until it says
#: what the prose claims.
MINUTES_PER_FIGURE = 1.0
#: The least an exercise takes by its difficulty, whatever its own estimate says: a ★ is
#: read, written, run and fixed once; a ★★ needs a derivation or a choice; ★★★ both.
MIN_EXERCISE_MINUTES = {1: 5, 2: 10, 3: 15}
#: The most words a lesson's core may have; more goes to its optional part or a new lesson.
MAX_CORE_WORDS = 2500
#: The longest core a lesson may have, in minutes by the rule: one sitting. What goes
#: further is its optional part (``## Optional · ...`` after the core), timed apart.
MAX_CORE_MINUTES = 45
OPTIONAL_RE = re.compile(r"^##\s+Optional\b")
END_RE = re.compile(r"^##\s+(Further reading|Summary)\b")
EXERCISE_TIME_RE = re.compile(r"\*\*Time\*\*\s*:?\s*~?\s*(\d+)\s*min")
DIFFICULTY_RE = re.compile(r"\*\*Difficulty\*\*\s*:?\s*(★+)")
STATED_RE = re.compile(r"~\s*(\d+)\s*minutes")


def exercise_minutes(markdown: str) -> int:
    """An exercise's minutes by the rule: its own ``**Time**: ~N min``, but at least
    :data:`MIN_EXERCISE_MINUTES` for its ``**Difficulty**`` (0 for a cell that is no
    exercise).

    >>> exercise_minutes("**Difficulty**: ★★ · **Time**: ~6 min")
    10
    >>> exercise_minutes("**Difficulty**: ★ · **Time**: ~8 min")
    8
    >>> exercise_minutes("A paragraph that mentions **Time** but is no exercise.")
    0
    """
    if "**Difficulty**" not in markdown:
        return 0
    own = EXERCISE_TIME_RE.search(markdown)
    stars = DIFFICULTY_RE.search(markdown)
    least = MIN_EXERCISE_MINUTES.get(len(stars.group(1)), 15) if stars else 5
    return max(int(own.group(1)) if own else 0, least)


@dataclass(frozen=True)
class Length:
    """A lesson's size by the course's rule (see :func:`lesson_length`).

    Attributes
    ----------
    words, code_cells, figures, exercise_minutes : the core's markdown words, code cells,
        figures (images in stored outputs) and the sum of its exercises' minutes
        (:func:`exercise_minutes`).
    optional_words, optional_code_cells, optional_figures, optional_exercise_minutes : the
        same for the optional part (0 when the lesson has none).
    """

    words: int
    code_cells: int
    exercise_minutes: int
    optional_words: int = 0
    optional_code_cells: int = 0
    optional_exercise_minutes: int = 0
    figures: int = 0
    optional_figures: int = 0

    @staticmethod
    def _minutes(words: int, code: int, figures: int, exercises: int) -> float:
        return (
            words / WORDS_PER_MINUTE
            + MINUTES_PER_CODE_CELL * code
            + MINUTES_PER_FIGURE * figures
            + exercises
        )

    @property
    def minutes(self) -> float:
        """The core's time: reading + code cells + figures + exercises."""
        return self._minutes(self.words, self.code_cells, self.figures, self.exercise_minutes)

    @property
    def optional_minutes(self) -> float:
        return self._minutes(
            self.optional_words,
            self.optional_code_cells,
            self.optional_figures,
            self.optional_exercise_minutes,
        )


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _figures(cell) -> int:
    return sum(1 for out in cell.get("outputs", []) if "image/png" in out.get("data", {}))


def lesson_length(path: str | Path) -> Length:
    """Count a lesson's core and optional part by the course's rule.

    The optional part starts at a markdown cell whose first line is a ``## Optional …``
    heading and runs to just before ``## Further reading`` (or ``## Summary``); everything
    else is the core. Words are whitespace-separated tokens of markdown cells (maths and
    link targets included; notes for lecturers are not the learner's reading); figures are
    the images in the code cells' stored outputs; exercise minutes come from
    :func:`exercise_minutes` of each exercise (a markdown cell with ``**Difficulty**``).
    """
    import json

    path = Path(path)
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    # optional? -> words, code cells, figures, exercise minutes
    counts = {False: [0, 0, 0, 0], True: [0, 0, 0, 0]}
    optional = False
    for cell in cells:
        src = _source(cell)
        first = src.lstrip().split("\n", 1)[0]
        if cell["cell_type"] == "markdown":
            if cell.get("metadata", {}).get("slideshow", {}).get("slide_type") == "notes":
                continue  # speaker notes ("For lecturers"): not the learner's reading
            if OPTIONAL_RE.match(first):
                optional = True
            elif END_RE.match(first):
                optional = False
            counts[optional][0] += len(src.split())
            counts[optional][3] += exercise_minutes(src)
        elif cell["cell_type"] == "code":
            counts[optional][1] += 1
            counts[optional][2] += _figures(cell)
    (w, c, f, e), (ow, oc, of, oe) = counts[False], counts[True]
    return Length(w, c, e, ow, oc, oe, figures=f, optional_figures=of)


def stated_minutes(path: str | Path) -> int | None:
    """The ``~N minutes`` a lesson's ``**Time**:`` line states (None if it states none)."""
    m = STATED_RE.search(lesson_info(path).time)
    return int(m.group(1)) if m else None
