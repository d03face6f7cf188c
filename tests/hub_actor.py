"""One person's step of the class-hub flow (tests/test_hub.py), run AS that person's system
account (setpriv) inside the hub's private mount namespace:

    python tests/hub_actor.py ACTION '{"json": "arguments"}'

Prints one line ``RESULT {json}``. Actions:

* ``release``  (instructor) the fixture lesson's student version into the exchange;
* ``learn``    (a learner) fetch through nbgrader's exchange, write the work the learner's
  ``kind`` says (honest, wrong, hostile, late, resub, misnamed, backdated, racer), submit;
  a hostile learner also forges a submission in another learner's name and leaves in
  inbound every attack on nbgrader's exchange it knows (:func:`attack_inbound`);
  ``backdated`` makes its submission folder by hand, after the due date, claiming an
  earlier time; ``racer`` then watches its submission folder (inotify) and, 20 ms after
  collect opens it, swaps the notebook for a link to a classmate's collected one
  (:func:`swap_when_collected`);
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
    return app


def fetch_and_submit(exchange: str, edit, submit: bool = True):
    """Fetch (once), edit the notebook, submit; returns nbgrader's submit app (its
    ``assignment_filename`` is the submission folder's name in inbound)."""
    import nbformat
    from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit

    home = Path.home()
    if not (home / A).exists():
        _learner_app(ExchangeFetchAssignment, exchange, home)
    path = home / A / f"{A}.ipynb"
    nb = nbformat.read(path, as_version=4)
    edit(nb)
    nbformat.write(nb, path)
    return _learner_app(ExchangeSubmit, exchange, home) if submit else None


def _random() -> str:
    """The random part of a submission folder's name, as nbgrader's submit makes it."""
    import base64

    return base64.urlsafe_b64encode(os.urandom(9)).decode("ascii")


STAMP = "2099-01-01 00:00:00.000000 UTC"


def attack_inbound(inbound: Path, me: str, notebook: Path, args: dict) -> dict:
    """Every attack on nbgrader's filesystem exchange this learner can make with their own
    account, each a folder (or a link) in inbound; returns attack -> the entry's name.
    ``victim``'s collected notebook and secret and the gradebook are the targets."""
    victim = Path(args["course"]) / "submitted" / args["victim"] / A
    made: dict[str, str] = {}

    def folder(label: str, name: str | None = None, stamp: str = STAMP) -> Path:
        entry = inbound / (name or f"{me}+{A}+{stamp}+{_random()}")
        entry.mkdir()
        (entry / f"{A}.ipynb").write_bytes(notebook.read_bytes())
        (entry / "timestamp.txt").write_text(stamp)
        (entry / "submission_secret.txt").write_text(os.urandom(64).hex())
        made[label] = entry.name
        return entry

    # 1: '+' in the student's field: nbgrader collects it as the student '<me>+zz', copying
    # through these links as the instructor
    plus = folder("plus in the name", f"{me}+zz+{A}+{STAMP}+r1")
    (plus / f"{A}.ipynb").unlink()
    (plus / f"{A}.ipynb").symlink_to(victim / f"{A}.ipynb")
    (plus / "gradebook.html").symlink_to(args["gradebook"])
    # 2: feedback under a classmate's secret: a fake student 'zz+y', and a name that parses
    fake = folder("fake student zz+y", f"zz+y+{A}+{STAMP}+{_random()}")
    linked = folder("secret linked")
    for entry in (fake, linked):
        (entry / "submission_secret.txt").unlink()
        (entry / "submission_secret.txt").symlink_to(victim / "submission_secret.txt")
    # 4: one entry each that stopped collect for the whole class
    folder("bad timestamp", stamp="2026-02-30 25:61:00.000000 UTC")
    dangling = folder("dangling link")
    (dangling / "gone").symlink_to(dangling / "no-such-file")
    taken = inbound / (".refused-" + dangling.name.replace("+", "_"))
    (taken / "full").mkdir(parents=True)  # the name the old collect moved it to, taken
    made["taken refused name"] = taken.name
    fd = os.open(folder("1,100 nested folders"), os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1100):
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)
    with open(folder("sparse 101 MB") / "big.bin", "wb") as fh:
        fh.truncate(101 * 10**6)
    zero = folder("link to /dev/zero")
    (zero / f"{A}.ipynb").unlink()
    (zero / f"{A}.ipynb").symlink_to("/dev/zero")
    os.mkfifo(folder("a FIFO") / "pipe")
    os.chmod(folder("a closed folder"), 0)
    top = inbound / f"{me}+{A}+{STAMP}+{_random()}"
    top.symlink_to(victim)  # the whole submission a link to the classmate's
    made["a link as the folder"] = top.name
    return made


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

    result = {"user": os.environ["USER"], "uid": os.getuid()}
    if kind == "misnamed":  # the answer handed in under another file name
        from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit

        _learner_app(ExchangeFetchAssignment, exchange, Path.home())
        nb = nbformat.read(Path.home() / A / f"{A}.ipynb", as_version=4)
        honest(nb)
        nbformat.write(nb, Path.home() / A / "my_answers.ipynb")
        (Path.home() / A / f"{A}.ipynb").unlink()
        _learner_app(ExchangeSubmit, exchange, Path.home())
    elif kind == "backdated":  # by hand, after the due date, claiming an hour before it
        result["backdated"] = backdated(exchange, args["claim"], honest)
    elif kind == "racer":  # the answer 'wrong' gives, then the race during collect
        app = fetch_and_submit(exchange, wrong)
        folder = Path(exchange) / COURSE_ID / "inbound" / app.assignment_filename
        result.update(swap_when_collected(folder, Path(args["target"])))
    elif kind == "resub":
        fetch_and_submit(exchange, lambda nb: None)  # first: the untouched stubs
        time.sleep(1.1)  # nbgrader's timestamps: the second is the later one
        fetch_and_submit(exchange, honest)
    else:
        fetch_and_submit(
            exchange, {"honest": honest, "late": honest, "wrong": wrong, "hostile": hostile}[kind]
        )
    if kind == "hostile":  # a submission folder in another learner's name, with full marks
        inbound = Path(exchange) / COURSE_ID / "inbound"
        forged = inbound / f"{args['victim']}+{A}+{STAMP}+{_random()}"
        forged.mkdir()
        nb = nbformat.read(Path.home() / A / f"{A}.ipynb", as_version=4)
        honest(nb)
        nbformat.write(nb, forged / f"{A}.ipynb")
        (forged / "timestamp.txt").write_text("2099-01-01 00:00:00.000000 UTC")
        result["forged"] = forged.name
        stranger = inbound / f"kvt-nobody+{A}+{STAMP}+{_random()}"
        stranger.mkdir()  # and one for someone who is not in the class at all
        result["stranger"] = stranger.name
        me = os.environ["USER"]
        result["attacks"] = attack_inbound(inbound, me, Path.home() / A / f"{A}.ipynb", args)
        try:
            result["listed_inbound"] = os.listdir(inbound)
        except PermissionError:
            result["listed_inbound"] = None
    return result


def backdated(exchange: str, claim: str, edit) -> dict:
    """A submission folder made by hand after the due date, with ``claim`` (before it) as
    its name's time and its timestamp.txt, and nbgrader's cache entry for it (so that Fetch
    Feedback finds its page)."""
    import shutil

    from jupyter_core.paths import jupyter_data_dir

    fetch_and_submit(exchange, edit, submit=False)
    me = os.environ["USER"]
    name = f"{me}+{A}+{claim}"
    entry = Path(exchange) / COURSE_ID / "inbound" / f"{name}+{_random()}"
    cache = Path(jupyter_data_dir()) / "nbgrader_cache" / COURSE_ID / name
    secret = os.urandom(64).hex()
    for folder in (entry, cache):
        folder.mkdir(parents=True)
        shutil.copy(Path.home() / A / f"{A}.ipynb", folder / f"{A}.ipynb")
        (folder / "timestamp.txt").write_text(claim)
        (folder / "submission_secret.txt").write_text(secret)
    os.chmod(entry, 0o777)
    return {"entry": entry.name, "claim": claim}


IN_OPEN = 0x20  # inotify: a file or folder was opened


def swap_when_collected(folder: Path, target: Path, wait: float = 600) -> dict:
    """Watch the learner's own submission folder; 20 ms after someone (collect) opens it,
    swap the notebook for a link to ``target`` (a classmate's collected notebook), as the
    attack on nbgrader's collect did: its check listed the folder, its copy came later and
    followed the link. Writes ~/race-ready once watching."""
    import ctypes
    import hashlib
    import select

    own = hashlib.sha256((folder / f"{A}.ipynb").read_bytes()).hexdigest()
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, os.fsencode(folder), IN_OPEN) < 0:
        raise OSError(ctypes.get_errno(), "inotify")
    (Path.home() / "race-ready").write_text(folder.name)
    out = {"entry": folder.name, "own_sha256": own, "swapped": False}
    if select.select([fd], [], [], wait)[0]:
        os.read(fd, 4096)
        time.sleep(0.02)
        tmp = folder / ".swap"
        tmp.symlink_to(target)
        os.rename(tmp, folder / f"{A}.ipynb")
        out["swapped"] = (folder / f"{A}.ipynb").is_symlink()
    os.close(fd)
    return out


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
