"""The class misconception report: what a lecturer reads before the next class.

    python -m kvstaff.report                 # the course folder's autograded/
    python -m kvstaff.report --course DIR --out DIR
    python -m kvstaff.report --learners      # also one page per learner

``make report`` runs it after ``make autograde``. It reads every graded notebook,
``autograded/<student>/<lesson>/<lesson>.ipynb`` (nbgrader's layout), finds the check
cells (graded, locked cells calling ``checks.check``), and reads what each check said
from the cell's outputs — the result lines documented in :mod:`attnlib.checks._core`:

* ``✔ <exercise>: correct on all N cases`` and no error: correct;
* an ``AssertionError`` whose message ends ``Diagnosis for <exercise>: <id>, <id>``
  (the visible check) or says ``hidden tests failed ... (probable mistake: <id>, ...)``
  (the grader's hidden tests): wrong, with the misconceptions found;
  ``Diagnosis for <exercise>: unrecognised``: wrong, no known mistake explains it;
* ``✘ <exercise>: not written yet``: the stub was left in place (not submitted);
* ``[needs-review]`` / ``[calls-reference]`` / a call of a refused function: needs review.

A learner whose lesson was submitted (``submitted/<student>/<lesson>/``) but has no
autograded notebook is counted as "not graded".

Every output comes from a learner's kernel, so none may stop or slow the report: only
REGISTERED exercises and misconception ids are read (``attnlib.checks``' registry), so the
charts and tables are as small as the course's list of mistakes; of an output only its two
ends (``MAX_*`` below); verdicts only where the checks put them (``check``'s own pass and
"not written" lines in a stream, the rest in the cell's error: never a ``Diagnosis`` line
the learner's code printed). A 150,000-id line once made it run for minutes and die.

It writes, under ``build/report/`` (or ``--out``):

* ``index.html`` — one offline page (no scripts, no network): per lesson and exercise,
  how many learners submitted and how many were correct, each misconception with its
  count, its explanation and who made it, and a bar chart (PNG embedded in the page,
  Okabe–Ito colours, fonts of 12 pt and more, alt text on every image); at the top, the
  mistakes to reteach, most frequent first ("12 of 30 masked after the softmax");
* ``misconceptions.csv`` — the same counts, one row per (lesson, exercise, what, id):
  ``what`` is ``submitted``, ``correct``, ``misconception`` (``id`` set),
  ``unrecognised``, ``not-written``, ``needs-review`` or ``not-graded``; ``count`` of
  ``of`` learners of that lesson, and ``learners`` (student ids joined by ``;``).

With ``--learners`` it also writes ``learners/<student>.html`` and ``.md`` (the file name
is :func:`page_stem` of the student id: the id itself when it is lowercase letters, digits,
``_`` and ``-``, else escaped, one name per id): each learner's own results and
misconceptions, to send with the feedback: per lesson and exercise, passed; each
misconception named with the course's explanation (the registry's order); not
attempted (the stub left in place); stopped with an error (its first line); flagged for
review; not graded yet; or not handed in. A page holds only that learner's results (the
lesson names of the class aside) and escapes every text taken from a notebook or a folder
name; the Markdown twin is for an e-mail or an LMS comment. Only these files are written.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import html
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from attnlib import checks
from kvstaff.grader.execution import STDERR_PREFIX
from kvstaff.lessons import course_root

__all__ = [
    "CSV_FIELDS",
    "OKABE_ITO",
    "Entry",
    "ExerciseSummary",
    "Row",
    "bar_chart",
    "build",
    "build_learners",
    "collect",
    "learner_entries",
    "learner_markdown",
    "learner_page",
    "main",
    "page_stem",
    "read_notebook",
]

#: Okabe & Ito's colour-blind-safe palette (orange, sky blue, bluish green, yellow, blue,
#: vermillion, reddish purple, black).
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000")
COLOURS = {
    "correct": "#009E73",
    "misconception": "#D55E00",
    "unrecognised": "#E69F00",
    "not-written": "#56B4E9",
    "needs-review": "#CC79A7",
    "not-graded": "#000000",
}
FONT = {"font.size": 13, "axes.titlesize": 15, "axes.labelsize": 13, "xtick.labelsize": 13,
        "ytick.labelsize": 13, "legend.fontsize": 13}  # fmt: skip
CSV_FIELDS = ["lesson", "exercise", "what", "id", "count", "of", "learners", "explanation"]

_CHECK_CALL = re.compile(r"""checks\.check(?:_hidden)?\(\s*["'](\w+)["']""")

# What the report reads of a graded notebook (every output is the learner's kernel's).
MAX_OUTPUT_CHARS = 16_384  # of one output: its first and last half
MAX_LINE_CHARS = 4_000  # of one line of an output (a genuine result line is far shorter)
MAX_CELL_OUTPUTS = 200  # of one cell: its first and last half
MAX_SOURCE_CHARS = 20_000  # of a check cell's source, where exercise names are found
MAX_NOTEBOOK_BYTES = 64 * 2**20  # a larger graded notebook is not read at all
# The lines of a stream output that are check()'s own (a pass; the stub left in place): any
# other verdict or diagnosis in a stream was printed by the learner's code and is not read.
_STREAM_VERDICT = re.compile(
    r"^(?:✔ \w+: correct on all \d+ cases|✘ \w+: not written yet).*$", re.M
)


@dataclass
class Row:
    """One learner's result on one exercise."""

    student: str
    status: str  # correct | wrong | not written | needs review | not graded | unknown
    ids: list[str] = field(default_factory=list)


@dataclass
class ExerciseSummary:
    """The class on one exercise of one lesson."""

    lesson: str
    exercise: str
    rows: list[Row] = field(default_factory=list)

    def who(self, status: str) -> list[str]:
        return sorted(r.student for r in self.rows if r.status == status)

    @property
    def learners(self) -> int:
        return len(self.rows)

    @property
    def submitted(self) -> list[str]:
        return sorted(r.student for r in self.rows if r.status not in ("not written", "not graded"))

    @property
    def unrecognised(self) -> list[str]:
        return sorted(r.student for r in self.rows if r.status == "wrong" and not r.ids)

    def misconceptions(self) -> list[tuple[str, list[str]]]:
        """(id, learners) for every misconception found, most frequent first."""
        by_id: dict[str, list[str]] = {}
        for r in self.rows:
            for mid in r.ids:
                by_id.setdefault(mid, []).append(r.student)
        order = _registry_order(self.exercise)
        return sorted(
            ((mid, sorted(s)) for mid, s in by_id.items()),
            key=lambda item: (-len(item[1]), order.get(item[0], 999), item[0]),
        )


def _registry_order(exercise: str) -> dict[str, int]:
    """The exercise's registered misconception ids, in registry order ({} if unknown)."""
    try:
        return {m.id: i for i, m in enumerate(checks.get_exercise(exercise).misconceptions)}
    except (KeyError, TypeError):
        return {}


def _registered(exercise: str) -> bool:
    try:
        checks.get_exercise(exercise)
    except (KeyError, TypeError):
        return False
    return True


def _explanation(exercise: str, mid: str) -> str:
    try:
        text = checks.explanation(exercise, mid)
    except KeyError:
        return ""
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    return first


# ----------------------------------------------------------------------------------------
# Reading graded notebooks
# ----------------------------------------------------------------------------------------


def _text(value) -> str:
    """An output's text (a string, or nbformat's list of strings), at most
    :data:`MAX_OUTPUT_CHARS` (its two ends), every line cut at :data:`MAX_LINE_CHARS`."""
    if isinstance(value, list):
        value = "".join(v for v in value[:MAX_OUTPUT_CHARS] if isinstance(v, str))
    elif not isinstance(value, str):
        value = ""
    if len(value) > MAX_OUTPUT_CHARS:
        half = MAX_OUTPUT_CHARS // 2
        value = value[:half] + "\n" + value[-half:]
    return "\n".join(line[:MAX_LINE_CHARS] for line in value.split("\n"))


def _outputs_text(cell) -> tuple[str, list[str]]:
    """(the text verdicts are read from, the error names) of a check cell: of a stream or a
    display only ``check``'s own pass and "not written" lines, of an error all its message."""
    outputs = cell.get("outputs", [])
    if not isinstance(outputs, list):
        return "", []
    if len(outputs) > MAX_CELL_OUTPUTS:
        half = MAX_CELL_OUTPUTS // 2
        outputs = outputs[:half] + outputs[-half:]
    parts, errors = [], []
    for out in outputs:
        if not isinstance(out, dict):
            continue
        kind = out.get("output_type")
        if kind == "stream":
            text = _text(out.get("text", ""))
            # the grader shows a graded test cell's stderr with a prefix (StderrIsNotFailure)
            text = re.sub(f"^{re.escape(STDERR_PREFIX)}", "", text, flags=re.M)
            parts += [m.group(0) for m in _STREAM_VERDICT.finditer(text)]
        elif kind == "error":
            errors.append(_text(out.get("ename", "Error"))[:200])
            parts.append(_text(out.get("evalue", "")))
        elif kind in ("execute_result", "display_data"):
            data = out.get("data")
            plain = _text(data.get("text/plain", "")) if isinstance(data, dict) else ""
            parts += [m.group(0) for m in _STREAM_VERDICT.finditer(plain)]
    return "\n".join(parts), errors


def _read(path: Path):
    """A graded notebook as nbformat 4, without schema validation (slow on big outputs);
    ``ValueError`` past :data:`MAX_NOTEBOOK_BYTES`."""
    if Path(path).stat().st_size > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"{path} is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    text = Path(path).read_text(encoding="utf-8")
    return nbformat.convert(nbformat.reader.reads(text), 4)


def _check_cells(nb):
    """(cell, the registered exercises it checks) for every graded check cell."""
    for cell in nb.get("cells", []):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata")
        meta = meta.get("nbgrader") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or not meta.get("grade") or meta.get("solution"):
            continue
        source = cell.get("source", "")
        source = source if isinstance(source, str) else ""
        found = dict.fromkeys(_CHECK_CALL.findall(source[:MAX_SOURCE_CHARS]))
        names = [n for n in found if _registered(n)]
        if names:
            yield cell, names


def read_notebook(path: Path) -> dict[str, checks.Result]:
    """What the check cells of one graded notebook said, by registered exercise; an id the
    registry does not know is dropped (wrong with none left: unrecognised)."""
    nb = _read(path)
    results: dict[str, checks.Result] = {}
    for cell, names in _check_cells(nb):
        text, errors = _outputs_text(cell)
        found = checks.read_results(text)
        for name in names:
            if name in found:
                r = found[name]
                known = _registry_order(name)
                results[name] = checks.Result(name, r.status, [i for i in r.ids if i in known])
            elif errors:  # failed in a way no check reported (a NameError, a timeout...)
                results[name] = checks.Result(name, "wrong")
            else:
                results[name] = checks.Result(name, "unknown")
        # A later exercise of the same cell after a failing one did not run: unknown.
    return results


def _lesson_dirs(root: Path) -> Iterable[tuple[str, str, Path]]:
    """(student, lesson, folder) for every root/<student>/<lesson>/ with a notebook."""
    if not root.is_dir():
        return
    for student in sorted(p for p in root.iterdir() if p.is_dir()):
        for lesson in sorted(p for p in student.iterdir() if p.is_dir()):
            if any(lesson.glob("*.ipynb")):
                yield student.name, lesson.name, lesson


def collect(course: Path) -> list[ExerciseSummary]:
    """Every (lesson, exercise) of a graded class, with each learner's result."""
    course = Path(course)
    graded: dict[tuple[str, str], dict[str, checks.Result]] = {}
    for student, lesson, folder in _lesson_dirs(course / "autograded"):
        path = folder / f"{lesson}.ipynb"
        if not path.exists():
            path = sorted(folder.glob("*.ipynb"))[0]
        try:
            graded[(lesson, student)] = read_notebook(path)
        except Exception:  # noqa: BLE001 - an unreadable notebook is reported, not fatal
            graded[(lesson, student)] = {}
    submitted = {(lesson, student) for student, lesson, _ in _lesson_dirs(course / "submitted")}
    lessons = sorted({lesson for lesson, _ in graded} | {lesson for lesson, _ in submitted})
    summaries = []
    for lesson in lessons:
        students = sorted(
            {s for (ls, s) in graded if ls == lesson} | {s for (ls, s) in submitted if ls == lesson}
        )
        names: list[str] = []
        for s in students:
            for name in graded.get((lesson, s), {}):
                if name not in names:
                    names.append(name)
        for name in names:
            summary = ExerciseSummary(lesson, name)
            for s in students:
                if (lesson, s) not in graded:
                    summary.rows.append(Row(s, "not graded"))
                    continue
                r = graded[(lesson, s)].get(name)
                if r is None:
                    summary.rows.append(Row(s, "unknown"))
                else:
                    summary.rows.append(Row(s, r.status, list(r.ids)))
            summaries.append(summary)
    return summaries


# ----------------------------------------------------------------------------------------
# Figures, CSV and the page
# ----------------------------------------------------------------------------------------


def _bars(summary: ExerciseSummary) -> list[tuple[str, int, str]]:
    """(label, count, category) of every bar of an exercise's chart, top to bottom."""
    bars = [("correct", len(summary.who("correct")), "correct")]
    bars += [(mid, len(who), "misconception") for mid, who in summary.misconceptions()]
    for label, who, category in (
        ("unrecognised mistake", summary.unrecognised, "unrecognised"),
        ("not written", summary.who("not written"), "not-written"),
        ("needs review", summary.who("needs review"), "needs-review"),
        ("not graded", summary.who("not graded"), "not-graded"),
    ):
        if who:
            bars.append((label, len(who), category))
    return bars


def alt_text(summary: ExerciseSummary) -> str:
    counts = "; ".join(f"{label} {n}" for label, n, _ in _bars(summary))
    return (
        f"Bar chart of {summary.exercise} in {summary.lesson}, {summary.learners} learners: "
        f"{counts}."
    )


def bar_chart(summary: ExerciseSummary):
    """The chart of one exercise: a matplotlib Figure (no pyplot, no global state)."""
    import matplotlib as mpl
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    bars = _bars(summary)
    with mpl.rc_context(FONT):
        fig = Figure(figsize=(8.0, 1.2 + 0.55 * len(bars)), layout="constrained")
        ax = fig.add_subplot()
        labels = [label for label, _, _ in bars]
        values = [n for _, n, _ in bars]
        ys = list(range(len(bars)))[::-1]
        ax.barh(ys, values, color=[COLOURS[c] for _, _, c in bars], height=0.65)
        ax.set_yticks(ys, labels)
        n = max(summary.learners, 1)
        ax.set_xlim(0, n * 1.12)
        for y, v in zip(ys, values, strict=True):
            ax.text(v + n * 0.01, y, f"{v} of {summary.learners}", va="center")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("learners")
        ax.set_title(f"{summary.exercise} · {summary.lesson}", loc="left")
        ax.spines[["top", "right"]].set_visible(False)
    return fig


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def csv_rows(summaries: list[ExerciseSummary]) -> list[dict]:
    rows = []
    for s in summaries:

        def row(what, who, mid="", explanation="", s=s):
            return {
                "lesson": s.lesson, "exercise": s.exercise, "what": what, "id": mid,
                "count": len(who), "of": s.learners, "learners": ";".join(who),
                "explanation": explanation,
            }  # fmt: skip

        rows.append(row("submitted", s.submitted))
        rows.append(row("correct", s.who("correct")))
        for mid, who in s.misconceptions():
            rows.append(row("misconception", who, mid, _explanation(s.exercise, mid)))
        rows.append(row("unrecognised", s.unrecognised))
        rows.append(row("not-written", s.who("not written")))
        rows.append(row("needs-review", s.who("needs review")))
        rows.append(row("not-graded", s.who("not graded")))
    return rows


_CSS = """
body { font-family: system-ui, sans-serif; font-size: 16px; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; color: #111; line-height: 1.45; }
h1 { font-size: 1.8rem; } h2 { font-size: 1.45rem; margin-top: 2.5rem; }
h3 { font-size: 1.2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; }
th, td { border-bottom: 1px solid #ccc; padding: 0.3rem 0.7rem; text-align: left;
         vertical-align: top; }
code { font-size: 0.95em; } img { max-width: 100%; height: auto; }
.count { white-space: nowrap; font-weight: 600; } .who { color: #333; font-size: 0.95em; }
"""


def _e(x) -> str:
    return html.escape(str(x))


def page(summaries: list[ExerciseSummary], title: str = "Class misconception report") -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    if not summaries:
        out.append("<p>No graded notebooks were found.</p></body></html>")
        return "\n".join(out)
    reteach = [
        (len(who), s, mid, who)
        for s in summaries
        for mid, who in s.misconceptions()
    ]  # fmt: skip
    reteach.sort(key=lambda t: (-t[0], t[1].lesson, t[1].exercise, t[2]))
    out.append("<h2>What to reteach</h2>")
    if reteach:
        out.append("<table><tr><th>learners</th><th>lesson · exercise</th><th>mistake</th></tr>")
        for n, s, mid, _ in reteach[:12]:
            out.append(
                f'<tr><td class="count">{n} of {s.learners}</td>'
                f"<td>{_e(s.lesson)} · <code>{_e(s.exercise)}</code></td>"
                f"<td><code>{_e(mid)}</code> — {_e(_explanation(s.exercise, mid))}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>No misconception was found in this class.</p>")
    for lesson in dict.fromkeys(s.lesson for s in summaries):
        out.append(f"<h2>{_e(lesson)}</h2>")
        out.append(
            "<table><tr><th>exercise</th><th>learners</th><th>submitted</th><th>correct</th>"
            "<th>most frequent mistake</th></tr>"
        )
        mine = [s for s in summaries if s.lesson == lesson]
        for s in mine:
            top = s.misconceptions()[:1]
            top_txt = f"<code>{_e(top[0][0])}</code> ({len(top[0][1])})" if top else "—"
            out.append(
                f"<tr><td><code>{_e(s.exercise)}</code></td><td>{s.learners}</td>"
                f"<td>{len(s.submitted)}</td><td>{len(s.who('correct'))}</td><td>{top_txt}</td></tr>"
            )
        out.append("</table>")
        for s in mine:
            out.append(f"<h3><code>{_e(s.exercise)}</code></h3>")
            out.append(
                f"<p>{len(s.submitted)} of {s.learners} learners submitted; "
                f"{len(s.who('correct'))} of {s.learners} were correct.</p>"
            )
            out.append(
                f'<img src="data:image/png;base64,{_png(bar_chart(s))}" alt="{_e(alt_text(s))}">'
            )
            rows = s.misconceptions()
            extra = [
                ("unrecognised mistake", s.unrecognised, "wrong, but no known mistake explains it"),
                ("not written", s.who("not written"), "the stub was left in place"),
                ("needs review", s.who("needs review"), "flagged by the grader: look by hand"),
                ("not graded", s.who("not graded"), "submitted, but no graded notebook"),
            ]
            if rows or any(who for _, who, _ in extra):
                out.append(
                    "<table><tr><th>learners</th><th>mistake</th><th>what it means</th>"
                    "<th>who</th></tr>"
                )
                for mid, who in rows:
                    out.append(
                        f'<tr><td class="count">{len(who)} of {s.learners}</td>'
                        f"<td><code>{_e(mid)}</code></td>"
                        f"<td>{_e(_explanation(s.exercise, mid))}</td>"
                        f'<td class="who">{_e(", ".join(who))}</td></tr>'
                    )
                for label, who, meaning in extra:
                    if who:
                        out.append(
                            f'<tr><td class="count">{len(who)} of {s.learners}</td>'
                            f"<td>{_e(label)}</td><td>{_e(meaning)}</td>"
                            f'<td class="who">{_e(", ".join(who))}</td></tr>'
                        )
                out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)


def build(
    course: Path, out: Path | None = None, summaries: list[ExerciseSummary] | None = None
) -> tuple[Path, Path]:
    """Write ``index.html`` and ``misconceptions.csv``; return their paths."""
    course = Path(course)
    out = Path(out) if out is not None else course / "build" / "report"
    summaries = collect(course) if summaries is None else summaries
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "misconceptions.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(csv_rows(summaries))
    html_path = out / "index.html"
    html_path.write_text(page(summaries), encoding="utf-8")
    return html_path, csv_path


# ----------------------------------------------------------------------------------------
# Per-learner summaries: one page per learner, to send with the feedback (``--learners``).
# ----------------------------------------------------------------------------------------

GENERATOR = "kvstaff.report --learners"


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
        return _explanation(exercise, mid)


def _errors(path: Path) -> dict[str, str]:
    """First line of the error each failing graded check cell stopped with, by exercise."""
    found: dict[str, str] = {}
    try:
        for cell, names in _check_cells(_read(path)):
            for out in list(cell.get("outputs", []))[:MAX_CELL_OUTPUTS]:
                if isinstance(out, dict) and out.get("output_type") == "error":
                    value = _text(out.get("evalue", ""))[:MAX_LINE_CHARS].strip().splitlines()
                    ename = _text(out.get("ename", "Error"))[:200]
                    line = f"{ename}: {value[0] if value else ''}".strip()
                    for name in names:
                        found.setdefault(name, line[:300])
                    break
    except Exception:  # noqa: BLE001 - unreadable: read_notebook has said so already
        return found
    return found


def _notebook(folder: Path, lesson: str) -> Path | None:
    path = folder / f"{lesson}.ipynb"
    if path.exists():
        return path
    found = sorted(folder.glob("*.ipynb"))
    return found[0] if found else None


def learner_entries(
    course: Path, summaries: list[ExerciseSummary] | None = None
) -> dict[str, list[Entry]]:
    """Every learner's entries, lesson by lesson, exercises in the lesson's order."""
    course = Path(course)
    summaries = collect(course) if summaries is None else summaries
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
                order = _registry_order(s.exercise)
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


_LEARNER_CSS = """
body { font-family: system-ui, sans-serif; font-size: 16px; max-width: 48rem; margin: 2rem auto;
       padding: 0 1rem; color: #111; line-height: 1.45; }
h1 { font-size: 1.7rem; } h2 { font-size: 1.35rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; width: 100%; }
th, td { border-bottom: 1px solid #ccc; padding: 0.4rem 0.7rem; text-align: left;
         vertical-align: top; }
.ok { color: #00734f; font-weight: 600; } .bad { color: #a34700; font-weight: 600; }
ul { margin: 0.3rem 0; padding-left: 1.2rem; } pre { white-space: pre-wrap; margin: 0.3rem 0; }
"""


def _le(x) -> str:
    return html.escape(str(x))


def learner_page(student: str, entries: list[Entry]) -> str:
    """One learner's page: self-contained HTML, every notebook-derived text escaped."""
    title = f"Misconception summary for {student}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta name="generator" content="{_le(GENERATOR)}">',
        f"<title>{_le(title)}</title><style>{_LEARNER_CSS}</style></head><body>",
        f"<h1>{_le(title)}</h1>",
        "<p>What the automatic checks found in your graded work, exercise by exercise. "
        "A named mistake comes with what it means and how to fix it.</p>",
    ]
    for lesson in dict.fromkeys(e.lesson for e in entries):
        out.append(f"<h2>{_le(lesson)}</h2>")
        out.append("<table><tr><th>exercise</th><th>what the check found</th></tr>")
        for e in (e for e in entries if e.lesson == lesson):
            cls = "ok" if e.status == "correct" else "bad" if e.status == "wrong" else ""
            cell = f'<span class="{cls}">{_le(_says(e))}</span>' if cls else _le(_says(e))
            if e.ids:
                items = (f"<li><code>{_le(m)}</code> — {_le(_explain(e.exercise, m))}</li>"
                         for m in e.ids)  # fmt: skip
                cell += "<ul>" + "".join(items) + "</ul>"
            if e.error:
                cell += f"<pre>{_le(e.error)}</pre>"
            name = f"<code>{_le(e.exercise)}</code>" if e.exercise else "(whole lesson)"
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


_STEM_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
MAX_STEM_CHARS = 200


def page_stem(student: str) -> str:
    """The file name of a learner's page (``<stem>.html``, ``<stem>.md``): one per student id,
    never another's, on any file system.

    A student id of lowercase letters, digits, ``_`` and ``-`` (every roster username) is
    its own name; every other character becomes ``~`` and two hex digits per UTF-8 byte
    (``a?`` -> ``a~3f``, ``Ada`` -> ``~41da``). That escaping can be read back, so two ids
    never share a name, and the names hold no capital letter, so they stay apart where
    ``A`` and ``a`` are one file (macOS, Windows). An id whose name would pass
    :data:`MAX_STEM_CHARS` keeps the start of it, then ``~~`` (never made by the escaping)
    and the SHA-256 of the id.
    """
    raw = student.encode("utf-8", "surrogatepass")  # an undecodable folder name too
    stem = "".join(
        ch
        if ch in _STEM_CHARS
        else "".join(f"~{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
        for ch in student
    )
    if len(stem) > MAX_STEM_CHARS:
        stem = stem[:150] + "~~" + hashlib.sha256(raw).hexdigest()
    return stem or "~"  # an empty id: "~" alone is never made by the escaping


def build_learners(
    course: Path, out: Path | None = None, summaries: list[ExerciseSummary] | None = None
) -> list[Path]:
    """Write ``learners/<student>.html`` and ``.md`` under ``out``; return the HTML paths."""
    course = Path(course)
    out = (Path(out) if out is not None else course / "build" / "report") / "learners"
    entries = learner_entries(course, summaries)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for student, mine in entries.items():
        stem = page_stem(student)  # one name per id, whatever the others are
        page = out / f"{stem}.html"
        page.write_text(learner_page(student, mine), encoding="utf-8")
        (out / f"{stem}.md").write_text(learner_markdown(student, mine), encoding="utf-8")
        written.append(page)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvstaff.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--course", type=Path, default=None, help="the graded course folder")
    parser.add_argument("--out", type=Path, default=None, help="default: COURSE/build/report")
    parser.add_argument(
        "--learners",
        action="store_true",
        help="also write OUT/learners/<student>.html and .md: each learner's own summary",
    )
    args = parser.parse_args(argv)
    course = args.course if args.course is not None else course_root()
    if not course.is_dir():
        print(f"no course folder: {course} does not exist")
        return 1
    if not (course / "autograded").is_dir():
        print(f"no graded class: {course / 'autograded'} does not exist (run make autograde)")
        return 1
    if not any(course.joinpath("autograded").glob("*/*/*.ipynb")):
        print(f"no graded class: no notebook in {course / 'autograded'} (run make autograde)")
        return 1
    summaries = collect(course)
    html_path, csv_path = build(course, args.out, summaries)
    print(f"report of {len({r.student for s in summaries for r in s.rows})} learner(s), "
          f"{len(summaries)} exercise(s): {html_path} and {csv_path}")  # fmt: skip
    if args.learners:
        pages = build_learners(course, args.out, summaries)
        folder = pages[0].parent if pages else html_path.parent / "learners"
        print(f"learner summaries of {len(pages)} learner(s): {folder}/<student>.html and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
