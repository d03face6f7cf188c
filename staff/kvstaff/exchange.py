"""nbgrader's exchange on the class hub: its folders, and the instructor's steps through it
(release, collect, return feedback).

**The exchange** (nbgrader's ``Exchange.root``) is one folder every account reaches. Its
modes are nbgrader's, plus the sticky bit on the root: root ``1777`` (owned by root; the
sticky bit keeps a learner from renaming the course's folder and putting their own in its
place); ``<root>/key-vectors`` ``0755`` owned by the instructor; ``inbound`` ``2733`` (learners
add a submission but cannot list anyone's); ``outbound`` ``0755``; ``feedback`` ``0711``
(a learner reads only the page whose name their own submission's secret gives).
:func:`prepare_exchange` (root) makes them and :func:`check_exchange` names every folder
whose owner or mode is wrong and the command that fixes it (:class:`ExchangeError`); neither
follows a link: a link where a folder should be is refused, never chowned through.

The instructor's steps through it: :func:`release` here, :func:`kvstaff.collect.collect`
(the exchange -> ``submitted/``, trusting nothing in it) and
:func:`kvstaff.feedback.return_feedback` (feedback pages -> the exchange). The helpers here
open files and folders one at a time by descriptor and never through a link.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import secrets
import stat
import unicodedata
from pathlib import Path

from kvstaff.roster import COURSE_ID

__all__ = [
    "DEFAULT_EXCHANGE",
    "EXCHANGE_LAYOUT",
    "MAX_DEPTH",
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "ExchangeError",
    "check_exchange",
    "prepare_exchange",
    "release",
    "run_exchange",
    "CLOEXEC",
    "account_name",
    "current_account",
    "exchange_config",
    "open_dir",
    "open_problem",
    "open_tree",
    "printable",
    "quoted",
    "read_json",
    "state_dir",
    "what_is",
    "write_json",
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

# What one submission may hold (the largest lesson, outputs included, is ~1.5 MB; the
# grader refuses a notebook past 20 MiB and reviews more than 200 files anyway).
MAX_FILE_BYTES = 20 * 2**20
MAX_TOTAL_BYTES = 50 * 2**20
MAX_FILES = 200
MAX_ENTRIES = 1000  # directory entries looked at, skipped ones included
MAX_DEPTH = 8  # folders below the submission folder
MAX_TRIES = 20  # a learner's submissions examined, latest first, until one is collected
MAX_PAGE_BYTES = 50 * 2**20
# nbgrader's CourseDirectory.ignore: never copied by its submit, never looked into here
IGNORED = (".ipynb_checkpoints", "__pycache__", "feedback")
STAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format
SECRET_RE = re.compile(r"[0-9a-f]{128}")  # nbgrader's submit: secrets.token_hex(64)
STATE = ".exchange"  # in the course folder: staging, records, lock (0700)


class ExchangeError(RuntimeError):
    """nbgrader's exchange folder is missing, is a link, or has the wrong owner or mode."""


# ---- descriptors: never through a link ------------------------------------------------------

CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | CLOEXEC
PATH_FLAG = getattr(os, "O_PATH", 0)


def open_dir(name, dir_fd: int | None = None) -> int:
    """A folder's descriptor; ``OSError`` (ELOOP, ENOTDIR) when ``name`` is a link or not a
    folder."""
    return os.open(name, DIR_FLAGS, dir_fd=dir_fd)


def what_is(name: str, dir_fd: int | None, mode: int | None = None) -> str:
    """'a symbolic link (to ...)', 'a file', ... for a message about ``name`` (``mode``:
    what an earlier ``lstat`` saw, if the name is gone since)."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError as err:
        if mode is None:
            return f"unreadable ({err.strerror})"
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link (to {printable(os.readlink(name, dir_fd=dir_fd))})"
        except OSError:
            return "a symbolic link"
    return kind_of(mode)


def kind_of(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a file"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return what
    return "not a file"


def printable(name) -> str:
    """A name from the exchange as it may be printed: as is when it is plain printable text,
    else quoted with escapes (terminal codes, newlines, undecodable bytes)."""
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    ok = name.isprintable() and not any(
        unicodedata.category(c) in ("Cf", "Cs") or c == "\ufffd" for c in name
    )
    return name if ok else ascii(name)


def quoted(text) -> str:
    """``text`` quoted for a message: repr when plain, escaped (ascii) otherwise."""
    return repr(text) if printable(text) == text else ascii(text)


def open_tree(root: Path | str, rels: list[str]) -> int:
    """``root/rels[0]/rels[1]/...`` opened one folder at a time, none through a link."""
    try:
        fd = open_dir(str(root))
    except OSError as err:
        raise ExchangeError(f"exchange {root}: {open_problem(err, str(root), None)}") from None
    for i, name in enumerate(rels):
        try:
            child = open_dir(name, dir_fd=fd)
        except OSError as err:
            where = Path(root, *rels[: i + 1])
            problem = open_problem(err, name, fd)
            os.close(fd)
            raise ExchangeError(f"exchange folder {where}: {problem}") from None
        os.close(fd)
        fd = child
    return fd


def open_problem(err: OSError, name: str, dir_fd: int | None) -> str:
    if isinstance(err, FileNotFoundError):
        return "no such folder"
    if isinstance(err, PermissionError):
        return "permission denied"
    return f"is {what_is(name, dir_fd)}, not a folder: someone put it there; remove it"


def account_name(uid: int, accounts: dict[int, str] | None = None) -> str:
    """How an owner is named in a message: the roster's name, the system's, or the uid."""
    if accounts and uid in accounts:
        return repr(accounts[uid])
    try:
        return repr(pwd.getpwuid(uid).pw_name)
    except KeyError:
        return f"uid {uid}"


# ---- nbgrader's exchange ------------------------------------------------------------------


def _owner_uid(owner: str, instructor: str) -> int:
    return 0 if owner == "root" else pwd.getpwnam(instructor).pw_uid


def prepare_exchange(root: Path | str, instructor: str) -> None:
    """Create the exchange with :data:`EXCHANGE_LAYOUT`'s owners and modes (as root).

    Every folder is made (``mkdir`` never follows a link), then opened with ``O_NOFOLLOW``
    and changed through its descriptor (``fchown``, ``fchmod``): a link where a folder
    should be (a learner's, in the world-writable root, pointing at a classmate's home) or
    a folder someone else made is refused with :class:`ExchangeError`, and nothing is
    changed through it."""
    root = Path(root)
    account = pwd.getpwnam(instructor)
    root.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o700)
    fds: dict[str, int] = {}
    try:
        for rel, (mode, owner) in EXCHANGE_LAYOUT.items():
            parent, _, name = rel.rpartition("/")
            if rel == ".":
                where, name, dir_fd = root, str(root), None
            else:
                where, dir_fd = root / rel, fds[parent or "."]
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=dir_fd)
            try:
                fd = open_dir(name, dir_fd=dir_fd)
            except OSError as err:
                raise ExchangeError(
                    f"exchange folder {where} {open_problem(err, name, dir_fd)} (rm {where}), "
                    "then prepare the exchange again; nothing was changed through it"
                ) from None
            fds[rel] = fd
            st = os.fstat(fd)
            if st.st_uid not in (0, account.pw_uid):
                raise ExchangeError(
                    f"exchange folder {where} belongs to {account_name(st.st_uid)}, not to "
                    f"root or {instructor}: someone else made it; look inside, remove it "
                    "and prepare the exchange again"
                )
            if owner == "instructor":
                os.fchown(fd, account.pw_uid, account.pw_gid)
            elif st.st_uid != 0:
                os.fchown(fd, 0, 0)
            os.fchmod(fd, mode)
    finally:
        for fd in fds.values():
            os.close(fd)


def check_exchange(root: Path | str, instructor: str) -> None:
    """Raise :class:`ExchangeError` naming every exchange folder whose owner or mode is
    wrong, and how to fix it; a missing course folder is fine (the first release makes it).
    Each folder is looked at through its own descriptor, opened without following a link:
    a link in the layout is named, never followed."""
    root = Path(root)
    try:
        fd = open_dir(str(root))
    except FileNotFoundError:
        raise ExchangeError(
            f"exchange {root}: no such folder (`make hub` creates it; or as root: "
            f"mkdir -p {root} && chmod 1777 {root})"
        ) from None
    except OSError as err:
        raise ExchangeError(f"exchange {root} {open_problem(err, str(root), None)}") from None
    fds = {".": fd}
    problems = []
    try:
        for rel, (mode, owner) in EXCHANGE_LAYOUT.items():
            d = root / rel if rel != "." else root
            if rel != ".":
                parent, _, name = rel.rpartition("/")
                parent_fd = fds.get(parent or ".")
                if parent_fd is None:
                    continue
                try:
                    fds[rel] = open_dir(name, dir_fd=parent_fd)
                except FileNotFoundError:
                    continue
                except OSError as err:
                    problems.append(f"{d} {open_problem(err, name, parent_fd)}")
                    continue
            st = os.fstat(fds[rel])
            have = stat.S_IMODE(st.st_mode)
            if have != mode:
                problems.append(
                    f"{d} has mode {have:04o}, needs {mode:04o} "
                    f"({stat.filemode(stat.S_IFDIR | mode)}): chmod {mode:04o} {d}"
                )
            uid = _owner_uid(owner, instructor)
            if st.st_uid != uid:
                who = instructor if owner == "instructor" else "root"
                problems.append(
                    f"{d} is owned by uid {st.st_uid}, needs {owner} ({who}): chown {who} {d}"
                )
    finally:
        for fd in fds.values():
            os.close(fd)
    if problems:
        raise ExchangeError(
            "nbgrader's exchange has the wrong permissions:\n  " + "\n  ".join(problems)
        )


# ---- the instructor's steps -----------------------------------------------------------------


def exchange_config(course: Path, exchange: Path | str):
    from kvstaff.grader.course import load_config

    cfg = load_config(course)
    cfg.CourseDirectory.course_id = COURSE_ID
    cfg.Exchange.root = str(exchange)
    return cfg


def current_account() -> str:
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

    check_exchange(exchange, current_account())
    out = Path(exchange) / COURSE_ID / "outbound" / lesson
    if out.exists() and not force:
        raise SystemExit(
            f"lesson {lesson!r} is already released to the exchange ({out}); learners may "
            "have fetched it. Release it again only on purpose: add --force"
        )
    generate(course, notebooks, [lesson])
    run_exchange(exchange_config(course, exchange), ExchangeReleaseAssignment, lesson, force=True)
    echo(f"released {lesson} to {out}")
    return out


# ---- the course's own records of the exchange (0700, in the course folder) -------------------


def state_dir(course: Path) -> Path:
    state = Path(course) / STATE
    with contextlib.suppress(FileExistsError):
        os.makedirs(state, 0o700)
    try:
        fd = open_dir(str(state))
    except OSError as err:
        raise ExchangeError(f"{state}: {open_problem(err, str(state), None)}") from None
    try:
        if os.fstat(fd).st_uid != os.getuid():
            raise ExchangeError(f"{state} is not yours: remove it")
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return state


def read_json(path: Path) -> dict:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | CLOEXEC)
    except FileNotFoundError:
        return {}
    with os.fdopen(fd, "rb") as fh:
        return json.loads(fh.read())


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)
