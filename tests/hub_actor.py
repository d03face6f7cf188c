"""One person's step of the class-hub flow (tests/test_hub.py), run AS that person's system
account (setpriv) inside the hub's private mount namespace:

    python tests/hub_actor.py ACTION '{"json": "arguments"}'

Prints one line ``RESULT {json}``. Actions:

* ``release``  (instructor) the fixture lesson's student version into the exchange;
* ``learn``    (a learner) fetch through nbgrader's exchange, write the work the learner's
  ``kind`` says (honest, wrong, hostile, late, resub,
  misnamed), submit; a hostile learner also forges
  a submission in another learner's name;
* ``grade``    (instructor) set the due date, collect (checked), autograde in the sandbox,
  generate and return the feedback; report grades, lateness and refusals;
* ``feedback`` (a learner) fetch their feedback, then try to read what is not theirs: every
  other home, the exchange's inbound and feedback folders, the instructor's course folder.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

# A learner's steps import neither attnlib nor torch (kvstaff.hub would): the
# instructor's do (hub.release, hub.collect...), each where it needs them.
COURSE_ID = "key-vectors"

A = "01_fixture"
# Imported where needed (nbformat, nbgrader, attnlib): seven learners start a Python each at
# once, and an import one step does not use costs every one of them.
WRONG_ATTEND = "def attend(q, k, v, mask=None):\n    return q, k\n"
HOSTILE = """import sqlite3, os
for _p in ({gradebook!r},):
    try:
        sqlite3.connect(_p).execute("UPDATE grade SET manual_score = 3")
        print('WROTE', _p)
    except Exception as err:
        print('cannot reach', _p, type(err).__name__)
for _d in {others!r}:
    try:
        print(os.listdir(_d))
    except Exception as err:
        print('cannot list', _d, type(err).__name__)
"""


def _config(exchange: str, who: str):
    from traitlets.config import Config

    cfg = Config()
    cfg.CourseDirectory.course_id = COURSE_ID
    cfg.Exchange.root = exchange
    return cfg


def _learner_app(cls, exchange: str, assignment_dir: Path):
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory

    cfg = _config(exchange, os.environ["USER"])
    cd = CourseDirectory(config=cfg)
    cd.assignment_id = A
    app = cls(
        coursedir=cd,
        authenticator=Authenticator(config=cfg),
        config=cfg,
        assignment_dir=str(assignment_dir),
    )
    app.start()


def fetch_and_submit(exchange: str, edit) -> None:
    import nbformat
    from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit

    home = Path.home()
    if not (home / A).exists():
        _learner_app(ExchangeFetchAssignment, exchange, home)
    path = home / A / f"{A}.ipynb"
    nb = nbformat.read(path, as_version=4)
    edit(nb)
    nbformat.write(nb, path)
    _learner_app(ExchangeSubmit, exchange, home)


def learn(args: dict) -> dict:
    import nbformat
    from nbfixtures import reference_source, set_solution

    kind, exchange = args["kind"], args["exchange"]

    def honest(nb):
        set_solution(nb, "l01-softmax-solution", reference_source("softmax"))
        set_solution(nb, "l01-attend-solution", reference_source("attend"))

    def wrong(nb):
        set_solution(nb, "l01-softmax-solution", reference_source("softmax"))
        set_solution(nb, "l01-attend-solution", WRONG_ATTEND)

    def hostile(nb):
        source = HOSTILE.format(gradebook=args["gradebook"], others=args["others"])
        source += reference_source("softmax")
        set_solution(nb, "l01-softmax-solution", source)
        set_solution(nb, "l01-attend-solution", reference_source("attend"))

    if kind == "misnamed":  # the answer handed in under another file name
        from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit

        _learner_app(ExchangeFetchAssignment, exchange, Path.home())
        nb = nbformat.read(Path.home() / A / f"{A}.ipynb", as_version=4)
        honest(nb)
        nbformat.write(nb, Path.home() / A / "my_answers.ipynb")
        (Path.home() / A / f"{A}.ipynb").unlink()
        _learner_app(ExchangeSubmit, exchange, Path.home())
    elif kind == "resub":
        fetch_and_submit(exchange, lambda nb: None)  # first: the untouched stubs
        time.sleep(1.1)  # nbgrader's timestamps: the second is the later one
        fetch_and_submit(exchange, honest)
    else:
        fetch_and_submit(
            exchange, {"honest": honest, "late": honest, "wrong": wrong, "hostile": hostile}[kind]
        )
    result = {"user": os.environ["USER"], "uid": os.getuid()}
    if kind == "hostile":  # a submission folder in another learner's name, with full marks
        inbound = Path(exchange) / COURSE_ID / "inbound"
        forged = inbound / f"{args['victim']}+{A}+2099-01-01 00:00:00.000000 UTC+forged"
        forged.mkdir()
        nb = nbformat.read(Path.home() / A / f"{A}.ipynb", as_version=4)
        honest(nb)
        nbformat.write(nb, forged / f"{A}.ipynb")
        (forged / "timestamp.txt").write_text("2099-01-01 00:00:00.000000 UTC")
        result["forged"] = forged.name
        stranger = inbound / f"kvt-nobody+{A}+2099-01-01 00:00:00.000000 UTC+x"
        stranger.mkdir()  # and one for someone who is not in the class at all
        result["stranger"] = stranger.name
        try:
            result["listed_inbound"] = os.listdir(inbound)
        except PermissionError:
            result["listed_inbound"] = None
    return result


def release(args: dict) -> dict:
    from kvstaff import hub

    hub.release(
        Path(args["course"]), Path(args["notebooks"]), A, args["exchange"], echo=lambda *_: None
    )
    refused_twice = ""
    try:
        hub.release(Path(args["course"]), Path(args["notebooks"]), A, args["exchange"])
    except SystemExit as err:
        refused_twice = str(err)
    return {"uid": os.getuid(), "refused_twice": refused_twice}


def grade(args: dict) -> dict:
    from nbgrader.api import Gradebook

    from kvstaff import hub
    from kvstaff.grader.autograde import autograde
    from kvstaff.grader.course import db_url, load_config

    course, exchange = Path(args["course"]), args["exchange"]
    roster = hub.read_roster(args["roster"])
    with Gradebook(db_url(load_config(course))) as gb:
        gb.update_or_create_assignment(A, duedate=args["due"])
    lines: list[str] = []
    t_start = time.perf_counter()
    refused = hub.collect(course, A, exchange, roster, echo=lines.append)
    t0 = time.perf_counter()
    autograde(
        course, Path(args["notebooks"]), timeout=60, timeouts={A: 6}, jobs=2, echo=lines.append
    )
    seconds = {"collect": t0 - t_start, "autograde": time.perf_counter() - t0}
    t0 = time.perf_counter()
    hub.return_feedback(course, A, exchange, echo=lines.append)
    seconds["feedback"] = time.perf_counter() - t0
    with Gradebook(db_url(load_config(course))) as gb:
        late = {s.student.id: s.total_seconds_late for s in gb.assignment_submissions(A)}
    with open(course / "grades.csv", newline="") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh) if r["assignment"] == A}
    return {
        "uid": os.getuid(),
        "refused": refused,
        "late": late,
        "rows": rows,
        "autograde_seconds": seconds,
        "lines": lines,
    }


def feedback(args: dict) -> dict:
    home = Path.home()
    if args.get("fetch", True):
        from nbgrader.exchange.default import ExchangeFetchFeedback

        _learner_app(ExchangeFetchFeedback, args["exchange"], home)
    pages = sorted(str(p) for p in (home / A / "feedback").glob("*/*.html"))
    probes = {}
    for path in args["probe"]:
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                with open(path, "rb") as fh:
                    fh.read(1)
            probes[path] = "READ"
        except (PermissionError, FileNotFoundError, NotADirectoryError) as err:
            probes[path] = type(err).__name__
    return {"uid": os.getuid(), "pages": pages, "probes": probes}


if __name__ == "__main__":
    action, payload = sys.argv[1], json.loads(sys.argv[2])
    out = {"release": release, "learn": learn, "grade": grade, "feedback": feedback}[action](
        payload
    )
    print("RESULT " + json.dumps(out, default=str))
