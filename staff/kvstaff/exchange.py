"""nbgrader's exchange on the class hub: its folders, and the instructor's steps through it
(release, collect, return feedback).

**The exchange** (nbgrader's ``Exchange.root``) is one folder every account reaches. Its
modes are nbgrader's, plus the sticky bit on the root: root ``1777`` (owned by root; the
sticky bit keeps a learner from renaming the course's folder and putting their own in its
place); ``<root>/key-vectors`` ``0755`` owned by the instructor; ``inbound`` ``2733`` (learners
add a submission but cannot list anyone's); ``outbound`` ``0755``; ``feedback`` ``0711``
(a learner reads only the page whose name their own submission's secret gives).
:func:`check_exchange` names every folder whose owner or mode is wrong and the command that
fixes it (:class:`ExchangeError`).

**Collecting** (:func:`collect`) checks what nbgrader would copy as the instructor: a folder in
``inbound`` named for one learner but owned by another account (a forged submission), a link,
a FIFO or a device inside a submission, or a submission without the lesson's notebook (a wrong
name) is set aside (renamed ``.refused-...``) and reported, never collected.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from kvstaff.roster import COURSE_ID, Roster, RosterError

__all__ = [
    "DEFAULT_EXCHANGE",
    "EXCHANGE_LAYOUT",
    "ExchangeError",
    "check_exchange",
    "collect",
    "prepare_exchange",
    "release",
    "return_feedback",
    "run_exchange",
]

DEFAULT_EXCHANGE = "/srv/nbgrader/exchange"
# folder (relative to the exchange root) -> (mode, owner: "root" or "instructor")
EXCHANGE_LAYOUT = {
    ".": (0o1777, "root"),
    COURSE_ID: (0o755, "instructor"),
    f"{COURSE_ID}/inbound": (0o2733, "instructor"),
    f"{COURSE_ID}/outbound": (0o755, "instructor"),
    f"{COURSE_ID}/feedback": (0o711, "instructor"),
}


class ExchangeError(RuntimeError):
    """nbgrader's exchange folder is missing or has the wrong owner or mode."""


# ---- nbgrader's exchange ------------------------------------------------------------------


def _owner_uid(owner: str, instructor: str) -> int:
    return 0 if owner == "root" else pwd.getpwnam(instructor).pw_uid


def prepare_exchange(root: Path | str, instructor: str) -> None:
    """Create the exchange with :data:`EXCHANGE_LAYOUT`'s owners and modes (as root)."""
    root = Path(root)
    uid = pwd.getpwnam(instructor).pw_uid
    gid = pwd.getpwnam(instructor).pw_gid
    for rel, (mode, owner) in EXCHANGE_LAYOUT.items():
        d = root / rel
        d.mkdir(parents=True, exist_ok=True)
        if owner == "instructor":
            os.chown(d, uid, gid)
        os.chmod(d, mode)


def check_exchange(root: Path | str, instructor: str) -> None:
    """Raise :class:`ExchangeError` naming every exchange folder whose owner or mode is
    wrong, and how to fix it; a missing course folder is fine (the first release makes it)."""
    root = Path(root)
    if not root.is_dir():
        raise ExchangeError(
            f"exchange {root}: no such folder (`make hub` creates it; or as root: "
            f"mkdir -p {root} && chmod 1777 {root})"
        )
    problems = []
    for rel, (mode, owner) in EXCHANGE_LAYOUT.items():
        d = root / rel
        if rel != "." and not d.exists():
            continue
        st = d.lstat()
        if not stat.S_ISDIR(st.st_mode):
            problems.append(f"{d} is not a folder (a link or a file)")
            continue
        have = stat.S_IMODE(st.st_mode)
        if have != mode:
            problems.append(
                f"{d} has mode {have:04o}, needs {mode:04o} "
                f"({stat.filemode(stat.S_IFDIR | mode)}): chmod {mode:04o} {d}"
            )
        uid = _owner_uid(owner, instructor)
        if st.st_uid != uid:
            problems.append(
                f"{d} is owned by uid {st.st_uid}, needs {owner} "
                f"({instructor if owner == 'instructor' else 'root'}): chown "
                f"{instructor if owner == 'instructor' else 'root'} {d}"
            )
    if problems:
        raise ExchangeError(
            "nbgrader's exchange has the wrong permissions:\n  " + "\n  ".join(problems)
        )


# ---- the instructor's steps -----------------------------------------------------------------


def _exchange_config(course: Path, exchange: Path | str):
    from kvstaff.grader.course import load_config

    cfg = load_config(course)
    cfg.CourseDirectory.course_id = COURSE_ID
    cfg.Exchange.root = str(exchange)
    return cfg


def _me() -> str:
    """The account running the instructor's step (the exchange's course folder is theirs)."""
    return pwd.getpwuid(os.getuid()).pw_name


def run_exchange(cfg, cls, assignment: str, student: str | None = None, **kw):
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory

    cd = CourseDirectory(config=cfg)
    cd.assignment_id = assignment
    if student is not None:
        cd.student_id = student
    app = cls(coursedir=cd, authenticator=Authenticator(config=cfg), config=cfg, **kw)
    app.start()
    return app


def release(
    course: Path,
    notebooks: Path,
    lesson: str,
    exchange: Path | str,
    *,
    force: bool = False,
    echo=print,
) -> Path:
    """Generate the student version of ``lesson`` and put it in the exchange's outbound.

    A lesson already in the exchange is refused unless ``force``: learners may have fetched
    it, and a silent replacement would leave them with a different notebook than the one
    graded."""
    from nbgrader.exchange.default import ExchangeReleaseAssignment

    from kvstaff.grader.course import release as generate

    check_exchange(exchange, _me())
    out = Path(exchange) / COURSE_ID / "outbound" / lesson
    if out.exists() and not force:
        raise SystemExit(
            f"lesson {lesson!r} is already released to the exchange ({out}); learners may "
            "have fetched it. Release it again only on purpose: add --force"
        )
    generate(course, notebooks, [lesson])
    run_exchange(_exchange_config(course, exchange), ExchangeReleaseAssignment, lesson, force=True)
    echo(f"released {lesson} to {out}")
    return out


def _refuse(entry: Path, why: str, refused: list[str], echo) -> None:
    target = entry.with_name(".refused-" + entry.name.replace("+", "_"))
    entry.rename(target)
    refused.append(f"{entry.name}: {why}")
    echo(f"REFUSED {entry.name}: {why} (moved to {target.name})")


def _inside_problem(folder: Path) -> str | None:
    """A link, FIFO, device or socket anywhere inside ``folder`` (never followed)."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                rel = os.path.relpath(os.path.join(dirpath, name), folder)
                return f"holds {rel!r}, which is not a plain file or folder"
    return None


def collect(
    course: Path, lesson: str, exchange: Path | str, roster: Roster, echo=print
) -> list[str]:
    """Collect ``lesson``'s submissions into ``course/submitted/``, after checking each.

    A submission folder is refused (renamed ``.refused-...`` in inbound, never copied) when it
    names someone not in the roster, when the account that owns it is not the learner it
    names (one learner handing in as another), when it holds anything but plain files and
    folders, or when it lacks ``<lesson>.ipynb``. Returns the refusals, one line each."""
    from nbgrader.exchange.default import ExchangeCollect

    check_exchange(exchange, _me())
    inbound = Path(exchange) / COURSE_ID / "inbound"
    refused: list[str] = []
    for entry in sorted(inbound.iterdir()):
        parts = entry.name.split("+")
        if entry.name.startswith(".") or len(parts) < 3 or parts[1] != lesson:
            continue
        st = entry.lstat()
        student = parts[0]
        if not stat.S_ISDIR(st.st_mode):
            _refuse(entry, "not a folder", refused, echo)
            continue
        try:
            roster.get(student)
        except RosterError as err:
            _refuse(entry, str(err), refused, echo)
            continue
        owner = pwd.getpwuid(st.st_uid).pw_name if _uid_known(st.st_uid) else str(st.st_uid)
        if owner != student:
            _refuse(entry, f"handed in as {student!r} by the account {owner!r}", refused, echo)
            continue
        problem = _inside_problem(entry)
        if problem is None and not (entry / f"{lesson}.ipynb").is_file():
            held = sorted(p.name for p in entry.glob("*.ipynb"))
            problem = f"no {lesson}.ipynb in it (it holds {held}): a notebook with the wrong name"
        if problem:
            _refuse(entry, f"{student}'s submission {problem}", refused, echo)
    cfg = _exchange_config(course, exchange)
    run_exchange(cfg, ExchangeCollect, lesson, update=True)
    _enrol(cfg, roster)
    got = sorted(p.parent.name for p in (Path(course) / "submitted").glob(f"*/{lesson}"))
    echo(f"collected {lesson}: {len(got)} learner(s); {len(refused)} submission(s) refused")
    return refused


def _enrol(cfg, roster: Roster) -> None:
    """Every learner of the roster in the gradebook, so that one who never submitted gets a
    ``no submission`` row (0) in grades.csv instead of no row at all."""
    from nbgrader.api import Gradebook

    from kvstaff.grader.course import db_url

    with Gradebook(db_url(cfg)) as gb:
        for p in roster.learners:
            last, _, first = p.name.partition(", ")
            gb.update_or_create_student(
                p.username, last_name=last or None, first_name=first or None
            )


def _uid_known(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def return_feedback(course: Path, lesson: str, exchange: Path | str, echo=print) -> int:
    """Feedback pages of ``lesson`` (no hidden tests) into the exchange for learners to fetch."""
    from nbgrader.exchange.default import ExchangeReleaseFeedback

    from kvstaff.grader.export import feedback

    check_exchange(exchange, _me())
    feedback(course, echo=echo)
    students = sorted(p.parent.name for p in (Path(course) / "feedback").glob(f"*/{lesson}"))
    cfg = _exchange_config(course, exchange)
    for s in students:
        run_exchange(cfg, ExchangeReleaseFeedback, lesson, s)
    echo(f"returned feedback on {lesson} to {len(students)} learner(s)")
    return len(students)
