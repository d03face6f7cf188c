"""A class graded in shards (several graders at once, e.g. the pods of a Kubernetes Job),
then merged into the class's gradebook, report and grades.csv.

``python -m kvstaff.gradebook autograde LESSON --shard K/N`` grades only the learners of
shard ``K`` of ``N`` (``0 <= K < N``, as Kubernetes numbers the pods of an Indexed Job).
A learner's shard is :func:`shard_of`: the first eight bytes of the SHA-256 of their id, as
a number, modulo ``N``. It depends on the id alone — not on who else handed in, on the
order of a folder listing or on the machine — so every grader computes the same split
without talking to the others, and a learner who hands in late still lands in the same
shard.

A shard never writes a file another shard writes. Its own folder,
``build/shards/<LESSON>/<K>-of-<N>/``, holds its gradebook (a copy of the class's
``gradebook.db``, taken when the shard starts: the lesson must be released, so the
assignment and the roster are in it), its ``grading_report.json`` and its ``grades.csv``
(the rows of its learners only). What else it writes is per learner:
``autograded/<learner>/``, ``build/logs/<lesson>/<learner>.log``. So SQLite never sees two
graders, even on a network file system where file locks do not hold between machines.

``python -m kvstaff.gradebook merge-shards LESSON --shards N`` (:func:`merge_shards`), once
every shard has finished, checks the shards' grades files against each other — every
file there, every learner of the class (the gradebook's students and everyone who handed
the lesson in) in exactly one file, and in the shard :func:`shard_of` gives — and refuses,
naming the learner or the file, when one is missing, duplicated or misplaced. Only then
does it copy each shard's submissions (scores, comments, late penalties) into the class's
``gradebook.db`` (what the formgrader and the feedback pages read), their entries into
``grading_report.json``, and write ``grades.csv`` as ``export`` does: the same file a
one-grader run writes.
"""

from __future__ import annotations

import csv
import hashlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from kvstaff.grader.course import db_url, find_submissions, load_config
from kvstaff.grader.export import (
    CSV_KEYS,
    REPORT_NAME,
    csv_cell,
    csv_rows,
    export,
    printable,
    read_report,
)

SHARDS_DIR = Path("build") / "shards"
GRADES_NAME = "grades.csv"


def shard_of(learner: str, count: int) -> int:
    """The shard (0 .. count-1) learner ``learner`` is graded in, out of ``count``."""
    if count < 1:
        raise ValueError(f"a class is graded in at least one shard, not {count}")
    digest = hashlib.sha256(learner.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)``, with ``0 <= K < N``; ValueError otherwise."""
    index, sep, count = text.partition("/")
    if not sep or not index.isdigit() or not count.isdigit():
        raise ValueError(f"--shard {text!r}: expected K/N, e.g. 0/4 (K counts from 0)")
    k, n = int(index), int(count)
    if n < 1 or k >= n:
        raise ValueError(f"--shard {text!r}: K must be 0 .. N-1 (N >= 1)")
    return k, n


def lessons_tag(assignments: list[str] | None) -> str:
    """The folder name of a run's lessons under build/shards/ ('all' for every lesson)."""
    return "+".join(sorted(assignments)) if assignments else "all"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` of the lessons ``tag`` in ``course``: its files."""

    course: Path
    tag: str
    index: int
    count: int

    @property
    def folder(self) -> Path:
        return Path(self.course) / SHARDS_DIR / self.tag / f"{self.index}-of-{self.count}"

    @property
    def gradebook(self) -> Path:
        return self.folder / "gradebook.db"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.gradebook}"

    @property
    def grades(self) -> Path:
        return self.folder / GRADES_NAME

    def holds(self, learner: str) -> bool:
        return shard_of(learner, self.count) == self.index

    def learners(self, submitted: Path, only: list[str] | None = None) -> list[str]:
        """This shard's learners among those who handed something in (or ``only``)."""
        names = only or sorted({s for _, s in find_submissions(submitted)})
        return [s for s in names if self.holds(s)]


def _sqlite_path(url: str) -> Path:
    if not url.startswith("sqlite:///"):
        raise SystemExit(f"grading in shards needs nbgrader's SQLite gradebook, not {url!r}")
    return Path(url[len("sqlite:///") :])


def _copy_sqlite(src: Path, dest: Path) -> None:
    """A consistent copy of the SQLite file ``src`` (read-only) at ``dest``, replaced whole."""
    part = dest.with_name(dest.name + ".part")
    part.unlink(missing_ok=True)
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as source:
        target = sqlite3.connect(part)
        try:
            source.backup(target)
        finally:
            target.close()
    os.replace(part, dest)


def start(course: Path, cfg, assignments: list[str] | None, index: int, count: int) -> Shard:
    """Make the shard's folder afresh: its gradebook a copy of the class's, no report yet."""
    shard = Shard(Path(course), lessons_tag(assignments), index, count)
    class_db = _sqlite_path(db_url(cfg))
    if not class_db.exists():
        raise SystemExit(
            f"shard {index}/{count}: no class gradebook at {class_db}: release the lesson "
            "first (python -m kvstaff.gradebook release LESSON) so that every shard starts "
            "from the same assignment and roster"
        )
    shard.folder.mkdir(parents=True, exist_ok=True)
    for stale in (shard.folder / REPORT_NAME, shard.grades):
        stale.unlink(missing_ok=True)
    _copy_sqlite(class_db, shard.gradebook)
    return shard


def write_grades(shard: Shard, assignments: list[str] | None, echo=print) -> Path:
    """The shard's grades.csv: the rows of its learners only (as ``export`` writes them)."""
    from nbgrader.api import Gradebook

    report = read_report(shard.folder)
    with Gradebook(shard.db_url) as gb:
        learners = {s.id for s in gb.students} | {s for e in report.values() for s in e}
        mine = sorted(s for s in learners if shard.holds(s))
        # an empty filter means "everyone" to the CSV builder: a shard with no learner
        # writes the header alone
        rows = csv_rows(gb, report, mine, assignments or ()) if mine else []
    with open(shard.grades, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_KEYS)
        writer.writeheader()
        writer.writerows(rows)
    echo(f"shard {shard.index}/{shard.count}: {len(rows)} rows in {shard.grades}")
    return shard.grades


class ShardError(SystemExit):
    """The shards' files do not add up to the class: nothing was merged."""


def _read_shards(course: Path, tag: str, count: int) -> dict[tuple[str, str], int]:
    """(lesson, learner) -> the shard whose grades file has that row; refuses a missing
    file, a duplicated row and a learner in a shard that is not theirs."""
    where: dict[tuple[str, str], int] = {}
    missing = []
    for k in range(count):
        path = Shard(course, tag, k, count).grades
        if not path.exists():
            missing.append(str(path))
            continue
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                key = (row["assignment"], row["student_id"])
                learner = printable(key[1])
                if key in where:
                    raise ShardError(
                        f"merge-shards: {learner} ({key[0]}) is in shard {where[key]} "
                        f"and in shard {k}: nothing merged"
                    )
                if shard_of(key[1], count) != k:
                    raise ShardError(
                        f"merge-shards: {learner} is in shard {k}'s file but belongs to "
                        f"shard {shard_of(key[1], count)} of {count} (a file of another "
                        "split?): nothing merged"
                    )
                where[key] = k
    if missing:
        raise ShardError(
            "merge-shards: no grades from " + ", ".join(missing) + " (did that shard "
            "finish?): nothing merged"
        )
    return where


def _class_learners(course: Path, gb, lessons: list[str]) -> set[str]:
    submitted = Path(course) / "submitted"
    handed_in = (
        {s for a, s in find_submissions(submitted) if a in lessons} if submitted.exists() else set()
    )
    return {s.id for s in gb.students} | handed_in


def _copy_submission(src, dest, assignment: str, learner: str) -> None:
    """One learner's submission from shard gradebook ``src`` into ``dest``, cell by cell."""
    from nbgrader.api import MissingEntry

    sub = src.find_submission(assignment, learner)
    student = sub.student
    try:
        dest.find_student(learner)
    except MissingEntry:
        dest.add_student(
            learner,
            first_name=student.first_name,
            last_name=student.last_name,
            email=student.email,
            lms_user_id=student.lms_user_id,
        )
    target = dest.update_or_create_submission(assignment, learner)
    target.timestamp, target.extension = sub.timestamp, sub.extension
    for nb in sub.notebooks:
        tnb = dest.find_submission_notebook(nb.name, assignment, learner)
        tnb.flagged, tnb.late_submission_penalty = nb.flagged, nb.late_submission_penalty
        for g in nb.grades:
            t = dest.find_grade(g.name, nb.name, assignment, learner)
            t.auto_score, t.manual_score = g.auto_score, g.manual_score
            t.extra_credit, t.needs_manual_grade = g.extra_credit, g.needs_manual_grade
        for c in nb.comments:
            t = dest.find_comment(c.name, nb.name, assignment, learner)
            t.auto_comment, t.manual_comment = c.auto_comment, c.manual_comment
    dest.db.commit()


def merge_shards(
    course: Path,
    assignments: list[str] | None,
    count: int,
    to: Path | None = None,
    echo=print,
) -> Path:
    """Check the ``count`` shards of ``assignments`` add up to the class, then merge them
    into the class's gradebook and report and write grades.csv (``to``, default
    ``<course>/grades.csv``). Raises :class:`ShardError` (merging nothing) otherwise."""
    from nbgrader.api import Gradebook, MissingEntry

    course = Path(course).resolve()
    tag = lessons_tag(assignments)
    where = _read_shards(course, tag, count)
    cfg = load_config(course)
    with Gradebook(db_url(cfg)) as gb:
        lessons = list(assignments or [a.name for a in gb.assignments])
        learners = _class_learners(course, gb, lessons)
        absent = sorted(
            f"{printable(s)} ({a})"
            for a in lessons
            for s in learners
            if (a, csv_cell(s)) not in where
        )
        if absent:
            raise ShardError(
                f"merge-shards: in no shard's grades file: {', '.join(absent[:20])}"
                f"{' ...' if len(absent) > 20 else ''}: nothing merged"
            )
        report = read_report(course)
        for k in range(count):
            shard = Shard(course, tag, k, count)
            part = read_report(shard.folder)
            with Gradebook(shard.db_url) as sgb:
                for a, s in sorted(key for key, at in where.items() if at == k):
                    try:
                        _copy_submission(sgb, gb, a, s)
                    except MissingEntry:  # no submission, or refused before nbgrader ran
                        pass
                    if s in part.get(a, {}):
                        report.setdefault(a, {})[s] = part[a][s]
    (course / REPORT_NAME).write_text(_dumps(report))
    echo(f"merged {count} shard(s) of {tag}: {len(where)} rows")
    return export(course, to=to, echo=echo)


def _dumps(report: dict) -> str:
    import json

    return json.dumps(report, indent=1, sort_keys=True)
