"""One graded course for the grading-flow tests: lessons released, submissions handed in,
ONE ``autograde`` run (each kernel in its own bubblewrap sandbox), feedback generated.

tests/test_grading.py grades several such courses, one per class, so that xdist
(``--dist loadscope``) runs them on all workers at once and no single fixture is long:

* the old scenarios on the three fixture lessons (tests/nbfixtures.py: softmax 1 point +
  attend 2 points; causal_mask 1 + padding_mask 1; decode_step in two parts of 1 point):
  edited and deleted test cells, an interrupt-swallowing loop, unreadable JSON, one part of
  two right, and two learners who go through nbgrader's exchange (release_assignment ->
  fetch -> submit -> collect -> autograde -> generate_feedback -> release_feedback ->
  fetch_feedback);
* the hostile and honest submissions of tests/hostile.py on the first fixture lesson, in two
  courses (one graded two at a time: the parallel path of ``autograde``);
* every graded lesson in notebooks/, its instructor version and its untouched release, in
  shards of a few lessons each.

Each course's fixture prints how long each phase took ("grading phases") and autograde the
class's time. Time: each submission costs a kernel start in its sandbox (torch and attnlib
imported) plus its lesson's run; the kernel is killed as soon as it is done, the largest
notebooks go first, and the fixture lessons' cells have a 10 s limit (the two submissions
that never finish a cell cost about two limits each).
"""

from __future__ import annotations

import csv
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
from nbfixtures import (
    LESSONS,
    PART_LESSONS,
    hidden_lines,
    reference_source,
    set_solution,
    solution_lines,
)
from nbfixtures import write_lessons as write_fixture_lessons
from pieces import need

from kvstaff.grader import export
from kvstaff.grader.autograde import autograde
from kvstaff.grader.course import is_graded, load_config, release
from kvstaff.grader.export import feedback
from kvstaff.hub import run_exchange
from kvstaff.lessons import lesson_paths

ROOT = Path(__file__).resolve().parents[1]
ATTNLIB = ROOT / "attnlib"
TIMEOUT = 60  # seconds per cell of the real lessons (the course's own limit)
# The fixture lessons' cells take well under a second (the first, which imports torch,
# about 2 s with three graders busy on two cores); their shorter limit is what the two
# submissions that never finish a cell (an interrupt-swallowing loop, replaced builtins)
# cost before their kernels are restarted (plus a probe of half the limit).
FIXTURE_TIMEOUT = 6

NESTED_SWALLOW_LOOP = """def softmax(x):
    while True:
        try:
            while True:
                pass
        except KeyboardInterrupt:
            continue
"""
WRONG_ATTEND = "def attend(q, k, v, mask=None):\n    return q, k\n"

LESSON_PATHS = [p for p in lesson_paths(ROOT / "notebooks") if is_graded(p)]
A, B = LESSONS
(C,) = PART_LESSONS  # decode_step in two parts of one point (cache, output)
FIXTURES = [*LESSONS, *PART_LESSONS]
PLANTED = (
    ATTNLIB
    / "checks"
    / "__pycache__"
    / (f"_core.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc")
)


def grade_ids(nb):
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}


def submit(course: Path, student: str, lesson: str, nb) -> None:
    d = course / "submitted" / student / lesson
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, str):
        (d / f"{lesson}.ipynb").write_text(nb)
    else:
        nbformat.write(nb, d / f"{lesson}.ipynb")


def release_copy(course: Path, lesson: str):
    return nbformat.read(course / "release" / lesson / f"{lesson}.ipynb", as_version=4)


def add_scenarios(course: Path, notebooks: Path) -> None:
    for lesson in (A, B):
        submit(course, "ref", lesson, nbformat.read(notebooks / f"{lesson}.ipynb", as_version=4))
        submit(course, "untouched", lesson, release_copy(course, lesson))

    # softmax right with its test cell deleted; attend wrong with its test cell stripped
    # of metadata and replaced by `pass`
    nb = release_copy(course, A)
    set_solution(nb, "l01-softmax-solution", reference_source("softmax"))
    set_solution(nb, "l01-attend-solution", WRONG_ATTEND)
    cells = grade_ids(nb)
    nb.cells.remove(cells["l01-softmax-check"])
    cells["l01-attend-check"].metadata.pop("nbgrader")
    cells["l01-attend-check"].source = "pass"
    submit(course, "tests_changed", A, nb)

    # causal_mask wrong with its (still locked) test cell edited to `pass`
    nb = release_copy(course, B)
    set_solution(
        nb,
        "l02-causal_mask-solution",
        "def causal_mask(seq):\n    return np.triu(np.ones((seq, seq), dtype=bool))\n",
    )
    set_solution(nb, "l02-padding_mask-solution", reference_source("padding_mask"))
    set_solution(nb, "l02-causal_mask-check", "pass")
    submit(course, "edited", B, nb)

    nb = release_copy(course, A)
    set_solution(nb, "l01-softmax-solution", NESTED_SWALLOW_LOOP)
    set_solution(nb, "l01-attend-solution", reference_source("attend"))
    submit(course, "looper", A, nb)

    submit(course, "corrupt", A, '{"cells": [ this is not json')

    # an exercise in two parts: the solution, the stub, and one part right (the cache
    # is right, the causal mask is aligned top-left so the output is wrong)
    submit(course, "ref", C, nbformat.read(notebooks / f"{C}.ipynb", as_version=4))
    submit(course, "untouched", C, release_copy(course, C))
    nb = release_copy(course, C)
    half = reference_source("decode_step").replace('"bottom_right"', '"top_left"')
    assert half != reference_source("decode_step")
    set_solution(nb, "l03-decode_step-solution", half)
    submit(course, "half", C, nb)


def add_hostile_and_honest(course: Path, subs) -> None:
    """Submissions of tests/hostile.py, each on the first fixture lesson, with the files,
    links and FIFOs handed in beside them."""
    for sub in subs:
        nb = release_copy(course, A)
        values = {"course": str(course), "attnlib": str(ATTNLIB)}
        set_solution(nb, "l01-softmax-solution", fill(sub.softmax, values))
        set_solution(nb, "l01-attend-solution", fill(sub.attend, values))
        if sub.edit is not None:
            sub.edit(nb)
        submit(course, sub.student, A, nb)
        folder = course / "submitted" / sub.student / A  # what is handed in beside it
        for rel, text in sub.files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
        for name, target in sub.links.items():
            (folder / name).symlink_to(fill(target, values))
        for name in sub.fifos:
            os.mkfifo(folder / name)


def fill(source: str, values: dict) -> str:
    for k, v in values.items():
        source = source.replace("{" + k + "}", v)
    return source


# ---- nbgrader's exchange, with two learner identities -----------------------------------

LEARNERS = ("alice", "bob")
BOB_ATTACK = """import sqlite3

for _p in ('{course}/gradebook.db', '{exchange}/key-vectors/inbound'):
    try:
        _db = sqlite3.connect(_p + ('' if _p.endswith('.db') else '/x.db'))
        _db.execute("UPDATE grade SET manual_score = 0, auto_score = 0")
        _db.commit()
        print('WROTE', _p)
    except Exception as err:
        print('cannot reach', _p, type(err).__name__)


def softmax(x):
    raise NotImplementedError()
"""


_exchange = run_exchange  # one nbgrader exchange step, as the class hub runs it


def _exchange_config(course: Path, exchange: Path, who: str = "instructor"):
    cfg = load_config(course)
    cfg.Exchange.root = str(exchange)
    cfg.Exchange.cache = str(exchange.parent / "cache" / who)  # each user's own, as on a hub
    return cfg


def exchange_out(course: Path, exchange: Path, homes: Path) -> None:
    from nbgrader.exchange.default import (
        ExchangeCollect,
        ExchangeFetchAssignment,
        ExchangeReleaseAssignment,
        ExchangeSubmit,
    )

    cfg = _exchange_config(course, exchange)
    _exchange(cfg, ExchangeReleaseAssignment, A, force=True)
    for who in LEARNERS:
        home = homes / who
        home.mkdir(parents=True)
        mine = _exchange_config(course, exchange, who)
        _exchange(mine, ExchangeFetchAssignment, A, who, assignment_dir=str(home))
        path = home / A / f"{A}.ipynb"
        nb = nbformat.read(path, as_version=4)
        if who == "alice":
            set_solution(nb, "l01-softmax-solution", reference_source("softmax"))
            set_solution(nb, "l01-attend-solution", reference_source("attend"))
        else:
            attack = fill(BOB_ATTACK, {"course": str(course), "exchange": str(exchange)})
            set_solution(nb, "l01-softmax-solution", attack)
        nbformat.write(nb, path)
        _exchange(mine, ExchangeSubmit, A, who, assignment_dir=str(home))
    _exchange(cfg, ExchangeCollect, A, update=True)


def exchange_back(course: Path, exchange: Path, homes: Path) -> None:
    from nbgrader.exchange.default import ExchangeFetchFeedback, ExchangeReleaseFeedback

    cfg = _exchange_config(course, exchange)
    for who in LEARNERS:  # (the other submissions did not come through the exchange)
        _exchange(cfg, ExchangeReleaseFeedback, A, who)
        mine = _exchange_config(course, exchange, who)
        _exchange(mine, ExchangeFetchFeedback, A, who, assignment_dir=str(homes / who))


# ---- the one graded course ----------------------------------------------------------------


class Graded:
    """What the one autograde run produced."""

    def __init__(self, course: Path, notebooks: Path, outcomes, lines, seconds, homes):
        self.course, self.notebooks, self.homes = course, notebooks, homes
        self.outcomes = {(o.student, o.assignment): o for o in outcomes}
        self.lines = lines
        self.seconds = seconds
        with open(course / "grades.csv") as fh:
            self.rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(fh)}

    def autograded(self, student: str, lesson: str):
        path = self.course / "autograded" / student / lesson / f"{lesson}.ipynb"
        return nbformat.read(path, as_version=4)

    def score(self, student: str, lesson: str = A):
        row = self.rows[(student, lesson)]
        return row["score"], row["max_score"], row["status"], row["needs_review"]


def grade(
    tmp: Path,
    *,
    scenarios: bool = False,
    hostile=(),
    lessons: list[Path] = (),
    jobs: int = 1,
) -> Graded:
    """Release, hand in, autograde and give feedback for one course under ``tmp``.

    ``scenarios``: the three fixture lessons with the old scenarios and the two learners of
    nbgrader's exchange; ``hostile``: the first fixture lesson with these
    submissions of tests/hostile.py; ``lessons``: these graded lessons of notebooks/, each with its
    instructor version and its untouched release. ``jobs`` submissions at a time.
    """
    notebooks, course, homes = tmp / "notebooks", tmp / "course", tmp / "homes"
    phases: dict[str, float] = {}
    t = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        phases[name] = round(now - t, 1)
        t = now

    notebooks.mkdir(parents=True)
    if scenarios:
        write_fixture_lessons(notebooks)
        write_fixture_lessons(notebooks, PART_LESSONS)
    elif hostile:
        write_fixture_lessons(notebooks, {A: LESSONS[A]})
    for path in lessons:
        shutil.copy(path, notebooks / path.name)
    course.mkdir()
    names = release(course, notebooks)
    phase("release")
    if scenarios:
        add_scenarios(course, notebooks)
    if hostile:
        add_hostile_and_honest(course, hostile)
    for path in lessons:  # the copies: lessons may change while this runs
        copy = nbformat.read(notebooks / path.name, as_version=4)
        submit(course, "instructor", path.stem, copy)
        submit(course, "untouched", path.stem, release_copy(course, path.stem))
    phase("submissions")
    if scenarios:
        exchange_out(course, tmp / "exchange", homes)
        phase("exchange out")
    lines: list[str] = []
    outcomes = autograde(
        course,
        notebooks,
        timeout=TIMEOUT,
        timeouts=dict.fromkeys(FIXTURES, FIXTURE_TIMEOUT),
        jobs=jobs,
        echo=lines.append,
    )
    phase("autograde")
    print("\n".join(lines))
    feedback(course, echo=lines.append)
    phase("feedback")
    if scenarios:
        exchange_back(course, tmp / "exchange", homes)
        phase("exchange back")
    print("grading phases (s):", phases, "total", round(sum(phases.values()), 1))
    graded = Graded(course, notebooks, outcomes, lines, phases["autograde"], homes)
    graded.names, graded.phases, graded.jobs = names, phases, jobs
    return graded


# ---- what every graded course must satisfy ---------------------------------------------


def graded_course(tmp_path_factory, name: str, **what):
    """Course ``name`` graded once (where bubblewrap can run; in CI, always: tests/pieces.py).

    Whether to run is decided by bubblewrap's own probe, never by the grader's sandbox, so a
    sandbox broken by the course's code fails here instead of skipping every course.
    """
    need("bubblewrap")
    return grade(tmp_path_factory.mktemp(name), **what)


def leaks(text: str, lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln in text]


class EveryCourse:
    """What every graded course must satisfy, whatever was handed in (a mixin of tests for
    the classes of tests/test_grading.py and tests/test_grading_lessons.py; each defines a
    class-scoped ``graded`` fixture)."""

    def test_feedback_contains_no_hidden_tests(self, graded):
        files = sorted((graded.course / "feedback").rglob("*.html"))
        done = [k for k, o in graded.outcomes.items() if o.status != "NOT GRADED"]
        assert len(files) == len(done)
        for path in files:
            text = path.read_text()
            lesson = path.parent.name
            src = nbformat.read(graded.notebooks / f"{lesson}.ipynb", as_version=4)
            assert "HIDDEN TESTS" not in text, path
            assert leaks(text, hidden_lines(src)) == [], path
            if path.parts[-3] == "untouched":
                assert leaks(text, solution_lines(src)) == [], path

    def test_course_csv_export_plugin(self, graded, monkeypatch, tmp_path):
        from nbgrader.api import Gradebook

        monkeypatch.chdir(graded.course)
        plugin = export.CourseCsvExport(to=str(tmp_path / "g.csv"))
        with Gradebook(f"sqlite:///{graded.course / 'gradebook.db'}") as gb:
            plugin.export(gb)
        with open(tmp_path / "g.csv") as fh:
            rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(fh)}
        assert rows == graded.rows
