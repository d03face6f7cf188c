"""Per-learner misconception summaries: one page per learner, to send with the feedback.

    python -m attnlib.course.report --learners      # the class report and these pages

For each learner (student id) of a graded class (``autograded/<student>/<lesson>/``, read
as :mod:`attnlib.course.report` reads it) it writes, under ``build/report/learners/``:

* ``<student>.html`` — one offline page (no scripts, no images, nothing fetched) listing,
  per lesson and exercise, what the learner's check found: passed; or each misconception
  named, with the course's explanation of it (the registry's order); or that the exercise
  was not attempted (the stub left in place), stopped with an error (its first line), was
  flagged for review, was not graded yet, or that the lesson was not handed in;
* ``<student>.md`` — the same facts as plain text (Markdown), for an e-mail or an LMS
  comment.

A page holds only that learner's results (the lesson names of the class aside); every
text taken from a notebook or a folder name is escaped. Only these files are written.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from attnlib import checks
from attnlib.course import report

__all__ = ["Entry", "build_learners", "learner_entries", "learner_markdown", "learner_page"]

GENERATOR = "attnlib.course.report --learners"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.@+-]")


@dataclass
class Entry:
    """What one learner's check found on one exercise (``exercise`` empty: the lesson)."""

    lesson: str
    exercise: str
    status: str  # correct | wrong | not written | needs review | not graded | unknown | absent
    ids: list[str] = field(default_factory=list)
    error: str = ""  # first line of the error a failing check cell stopped with


def _explain(exercise: str, mid: str) -> str:
    """The course's whole explanation (what went wrong and the fix); ``""`` if unknown."""
    try:
        return checks.explanation(exercise, mid)
    except KeyError:
        return report._explanation(exercise, mid)


def _errors(path: Path) -> dict[str, str]:
    """First line of the error each failing graded check cell stopped with, by exercise."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - unreadable: read_notebook has said so already
        return {}
    found: dict[str, str] = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                value = str(out.get("evalue", "")).strip().splitlines()
                line = f"{out.get('ename', 'Error')}: {value[0] if value else ''}".strip()
                for name in dict.fromkeys(report._CHECK_CALL.findall(cell.source)):
                    found.setdefault(name, line[:300])
                break
    return found


def _notebook(folder: Path, lesson: str) -> Path | None:
    path = folder / f"{lesson}.ipynb"
    if path.exists():
        return path
    found = sorted(folder.glob("*.ipynb"))
    return found[0] if found else None


def learner_entries(
    course: Path, summaries: list[report.ExerciseSummary] | None = None
) -> dict[str, list[Entry]]:
    """Every learner's entries, lesson by lesson, exercises in the lesson's order."""
    course = Path(course)
    summaries = report.collect(course) if summaries is None else summaries
    lessons = list(dict.fromkeys(s.lesson for s in summaries))
    students = sorted({r.student for s in summaries for r in s.rows})
    errors: dict[tuple[str, str], dict[str, str]] = {}
    out: dict[str, list[Entry]] = {}
    for student in students:
        entries: list[Entry] = []
        for lesson in lessons:
            mine = [
                (s, r) for s in summaries if s.lesson == lesson for r in s.rows
                if r.student == student
            ]  # fmt: skip
            if not mine:
                entries.append(Entry(lesson, "", "absent"))
                continue
            if all(r.status == "not graded" for _, r in mine):
                entries.append(Entry(lesson, "", "not graded"))
                continue
            for s, r in mine:
                entry = Entry(lesson, s.exercise, r.status)
                order = report._registry_order(s.exercise)
                entry.ids = sorted(r.ids, key=lambda m: (order.get(m, 999), m))
                if r.status == "wrong" and not r.ids:
                    if (student, lesson) not in errors:
                        path = _notebook(course / "autograded" / student / lesson, lesson)
                        errors[(student, lesson)] = _errors(path) if path else {}
                    entry.error = errors[(student, lesson)].get(s.exercise, "")
                entries.append(entry)
        out[student] = entries
    return out


_SAYS = {
    "correct": "Passed: correct on every case the check tried.",
    "not written": "Not attempted: the starter code was left in place.",
    "needs review": "Flagged for your teacher to look at by hand (no automatic verdict).",
    "unknown": "No result: the check did not report on this exercise (its cell did not "
    "run to this check).",
    "not graded": "Submitted, but not graded yet.",
    "absent": "Not handed in.",
}


def _says(e: Entry) -> str:
    if e.status == "wrong" and not e.ids:
        if e.error and not e.error.startswith("AssertionError"):
            return "Not correct: the check stopped with an error."
        return "Not correct, and no mistake the course knows explains the result."
    if e.status == "wrong":
        which = "this mistake" if len(e.ids) == 1 else "these mistakes"
        return f"Not correct. The check recognised {which}:"
    return _SAYS.get(e.status, e.status)


_CSS = """
body { font-family: system-ui, sans-serif; font-size: 16px; max-width: 48rem; margin: 2rem auto;
       padding: 0 1rem; color: #111; line-height: 1.45; }
h1 { font-size: 1.7rem; } h2 { font-size: 1.35rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; width: 100%; }
th, td { border-bottom: 1px solid #ccc; padding: 0.4rem 0.7rem; text-align: left;
         vertical-align: top; }
.ok { color: #00734f; font-weight: 600; } .bad { color: #a34700; font-weight: 600; }
ul { margin: 0.3rem 0; padding-left: 1.2rem; } pre { white-space: pre-wrap; margin: 0.3rem 0; }
"""


def _e(x) -> str:
    return html.escape(str(x))


def learner_page(student: str, entries: list[Entry]) -> str:
    """One learner's page: self-contained HTML, every notebook-derived text escaped."""
    title = f"Misconception summary for {student}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta name="generator" content="{_e(GENERATOR)}">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        "<p>What the automatic checks found in your graded work, exercise by exercise. "
        "A named mistake comes with what it means and how to fix it.</p>",
    ]
    for lesson in dict.fromkeys(e.lesson for e in entries):
        out.append(f"<h2>{_e(lesson)}</h2>")
        out.append("<table><tr><th>exercise</th><th>what the check found</th></tr>")
        for e in (e for e in entries if e.lesson == lesson):
            cls = "ok" if e.status == "correct" else "bad" if e.status == "wrong" else ""
            cell = f'<span class="{cls}">{_e(_says(e))}</span>' if cls else _e(_says(e))
            if e.ids:
                items = (f"<li><code>{_e(m)}</code> — {_e(_explain(e.exercise, m))}</li>"
                         for m in e.ids)  # fmt: skip
                cell += "<ul>" + "".join(items) + "</ul>"
            if e.error:
                cell += f"<pre>{_e(e.error)}</pre>"
            name = f"<code>{_e(e.exercise)}</code>" if e.exercise else "(whole lesson)"
            out.append(f"<tr><td>{name}</td><td>{cell}</td></tr>")
        out.append("</table>")
    if not entries:
        out.append("<p>No graded work was found.</p>")
    out.append("</body></html>")
    return "\n".join(out)


def _md(x) -> str:
    """Text for Markdown: no HTML can survive, no Markdown syntax is taken from a notebook."""
    return re.sub(r"([\\`*_\[\]<>#|!])", r"\\\1", str(x))


def learner_markdown(student: str, entries: list[Entry]) -> str:
    """The same facts as :func:`learner_page`, as Markdown."""
    out = [f"# Misconception summary for {_md(student)}", ""]
    for lesson in dict.fromkeys(e.lesson for e in entries):
        out += [f"## {_md(lesson)}", ""]
        for e in (e for e in entries if e.lesson == lesson):
            name = _md(e.exercise) if e.exercise else "(whole lesson)"
            out.append(f"* {name}: {_md(_says(e))}")
            for m in e.ids:
                out.append(f"  * {_md(m)}: {_md(_explain(e.exercise, m))}")
            if e.error:
                out.append(f"  * {_md(e.error)}")
        out.append("")
    return "\n".join(out)


def _file_stem(student: str) -> str:
    stem = _SAFE_NAME.sub("_", student).lstrip(".")
    return stem or "_"


def build_learners(
    course: Path, out: Path | None = None, summaries: list[report.ExerciseSummary] | None = None
) -> list[Path]:
    """Write ``learners/<student>.html`` and ``.md`` under ``out``; return the HTML paths."""
    course = Path(course)
    out = (Path(out) if out is not None else course / "build" / "report") / "learners"
    entries = learner_entries(course, summaries)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    used: set[str] = set()
    for student, mine in entries.items():
        stem = _file_stem(student)
        while stem in used:  # two ids that differ only in unsafe characters
            stem += "_"
        used.add(stem)
        page = out / f"{stem}.html"
        page.write_text(learner_page(student, mine), encoding="utf-8")
        (out / f"{stem}.md").write_text(learner_markdown(student, mine), encoding="utf-8")
        written.append(page)
    return written
