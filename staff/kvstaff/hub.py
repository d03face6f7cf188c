"""The class hub: a roster, system accounts made from it, nbgrader's exchange, and the hub.

    python -m kvstaff.hub check      # read the roster, check the exchange; change nothing
    python -m kvstaff.hub accounts   # create the roster's system accounts (root)
    python -m kvstaff.hub remove     # remove the accounts this tool made (root)
    python -m kvstaff.hub start      # accounts + exchange + state, then JupyterHub
                                            # (`make hub`; hub/jupyterhub_config.py)
    # the instructor's steps, as the instructor (a terminal in their hub server):
    python -m kvstaff.hub release LESSON     # student version -> the exchange
    python -m kvstaff.hub collect LESSON     # the exchange -> submitted/, checked
    python -m kvstaff.hub return LESSON      # feedback pages -> the exchange

Options: ``--roster`` (default ``hub/roster.csv``, or ``$KV_HUB_ROSTER``), ``--exchange``
(default ``/srv/nbgrader/exchange``, or ``$KV_EXCHANGE``), ``--homes`` (default ``/home``, or
``$KV_HUB_HOMES``), ``--course`` (the instructor's course folder, default
``~/key-vectors``).

**The roster** is a CSV file with a header: ``username,role`` and, optionally, ``name``,
``section``, ``canvas_id``, ``sis_user_id``, ``sis_login_id`` (the last four go into the Canvas
export, :mod:`kvstaff.grader.canvas`). ``role`` is ``instructor`` or ``learner``; there
is at least one instructor. A username is a system account's name: lowercase letters, digits
and ``-``, starting with a letter, at most 32 characters (no ``+``: nbgrader's exchange splits
folder names on it). Each mistake is reported with its line (:class:`RosterError`).

**Accounts**: the hub's default spawner (``LocalProcessSpawner``) starts each user's server as
the system account of the same name, so every roster entry becomes one (``useradd``), with a
home folder of mode 0700 (no learner reads another's files) and the comment
:data:`ACCOUNT_MARK`: an existing account without it is refused, never taken over, and
``remove`` deletes only marked accounts.

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

At module level this imports the standard library only (attnlib's package would load torch):
the hub's configuration loads this file alone to read the roster (hub/jupyterhub_config.py).
"""

from __future__ import annotations

import argparse
import csv
import grp
import os
import pwd
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "run_exchange",
    "ACCOUNT_MARK",
    "COURSE_ID",
    "ExchangeError",
    "Person",
    "Roster",
    "RosterError",
    "check_exchange",
    "collect",
    "ensure_accounts",
    "prepare_exchange",
    "private_view",
    "read_roster",
    "release",
    "remove_accounts",
    "return_feedback",
]

COURSE_ID = "key-vectors"
ACCOUNT_MARK = "key-vectors class hub"
ROLES = ("instructor", "learner")
COLUMNS = ("username", "role", "name", "section", "canvas_id", "sis_user_id", "sis_login_id")
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
DEFAULT_EXCHANGE = "/srv/nbgrader/exchange"
# folder (relative to the exchange root) -> (mode, owner: "root" or "instructor")
EXCHANGE_LAYOUT = {
    ".": (0o1777, "root"),
    COURSE_ID: (0o755, "instructor"),
    f"{COURSE_ID}/inbound": (0o2733, "instructor"),
    f"{COURSE_ID}/outbound": (0o755, "instructor"),
    f"{COURSE_ID}/feedback": (0o711, "instructor"),
}


class RosterError(ValueError):
    """A roster that cannot be used: the message names the file, the line and the entry."""


class ExchangeError(RuntimeError):
    """nbgrader's exchange folder is missing or has the wrong owner or mode."""


# ---- the roster ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Person:
    username: str
    role: str
    name: str = ""
    section: str = ""
    canvas_id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""


@dataclass
class Roster:
    path: Path
    people: list[Person] = field(default_factory=list)

    @property
    def instructors(self) -> list[Person]:
        return [p for p in self.people if p.role == "instructor"]

    @property
    def learners(self) -> list[Person]:
        return [p for p in self.people if p.role == "learner"]

    def get(self, username: str) -> Person:
        for p in self.people:
            if p.username == username:
                return p
        raise RosterError(
            f"unknown learner {username!r}: not in the roster {self.path} "
            f"({len(self.people)} entries; add a line for them, then `make hub` again)"
        )


def read_roster(path: Path | str) -> Roster:
    """Read and check the roster CSV; every problem is reported at once, with its line."""
    path = Path(path)
    if not path.is_file():
        raise RosterError(f"roster {path}: no such file (see hub/roster.csv for the format)")
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in ("username", "role") if c not in header]
        unknown = [c for c in header if c not in COLUMNS]
        if missing or unknown:
            raise RosterError(
                f"roster {path}: header {header}: "
                + (f"missing column(s) {missing}; " if missing else "")
                + (f"unknown column(s) {unknown}; " if unknown else "")
                + f"the columns are {list(COLUMNS)} (username and role required)"
            )
        rows = [
            ({k.strip(): (v or "").strip() for k, v in r.items() if k}, reader.line_num)
            for r in reader
        ]
    problems, people, seen = [], [], {}
    for row, line in rows:
        name, role = row.get("username", ""), row.get("role", "")
        where = f"line {line}"
        if not NAME_RE.match(name):
            problems.append(
                f"{where}: bad name {name!r}: a username is lowercase letters, digits and '-', "
                "starting with a letter, at most 32 characters"
            )
            continue
        if name in seen:
            problems.append(f"{where}: duplicate {name!r} (first on line {seen[name]})")
            continue
        if role not in ROLES:
            problems.append(f"{where}: {name!r} has role {role!r}; a role is one of {ROLES}")
            continue
        seen[name] = line
        people.append(Person(**{k: row.get(k, "") for k in COLUMNS}))
    if not problems and not any(p.role == "instructor" for p in people):
        problems.append("no instructor: one line needs role 'instructor'")
    if problems:
        raise RosterError(f"roster {path}:\n  " + "\n  ".join(problems))
    return Roster(path, people)


# ---- system accounts ----------------------------------------------------------------------


def _account(username: str):
    try:
        return pwd.getpwnam(username)
    except KeyError:
        return None


def ensure_accounts(roster: Roster, homes: Path, echo=print) -> list[str]:
    """Create a system account (home 0700) for every roster entry; return those created.

    An account that exists is kept if this tool made it (:data:`ACCOUNT_MARK` in its comment)
    and refused otherwise: a roster must never hand a hub login to someone's real account.
    """
    if os.geteuid() != 0:
        raise PermissionError("creating the roster's accounts needs root (useradd)")
    foreign = [
        p.username
        for p in roster.people
        if (a := _account(p.username)) is not None and ACCOUNT_MARK not in a.pw_gecos
    ]
    if foreign:
        raise RosterError(
            f"roster {roster.path}: account(s) {foreign} exist on this machine and were not "
            f"made for the class hub (their comment lacks {ACCOUNT_MARK!r}); choose other names"
        )
    homes = Path(homes)
    homes.mkdir(parents=True, exist_ok=True)
    made = []
    for p in roster.people:
        if _account(p.username) is None:
            subprocess.run(
                [
                    "useradd",
                    "--create-home",
                    "--home-dir",
                    str(homes / p.username),
                    "--shell",
                    "/bin/bash",
                    "--user-group",
                    "--comment",
                    f"{ACCOUNT_MARK}, {p.role}",
                    p.username,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            made.append(p.username)
        home = Path(_account(p.username).pw_dir)
        home.mkdir(parents=True, exist_ok=True)
        shutil.chown(home, p.username, p.username)
        os.chmod(home, 0o700)
    if made:
        echo(f"hub: created {len(made)} account(s): {', '.join(made)}")
    return made


def remove_accounts(roster: Roster, echo=print) -> list[str]:
    """Remove the roster's accounts that this tool made (and their homes and groups)."""
    removed = []
    for p in roster.people:
        a = _account(p.username)
        if a is None or ACCOUNT_MARK not in a.pw_gecos:
            continue
        subprocess.run(["pkill", "-KILL", "-u", p.username], capture_output=True)
        subprocess.run(["userdel", "--remove", p.username], capture_output=True, text=True)
        try:
            grp.getgrnam(p.username)
            subprocess.run(["groupdel", p.username], capture_output=True)
        except KeyError:
            pass
        removed.append(p.username)
    if removed:
        echo(f"hub: removed {len(removed)} account(s)")
    return removed


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


# ---- a private view of a closed interpreter -------------------------------------------------


def _closed_ancestor(path: Path) -> Path | None:
    """The first folder above ``path`` that other users cannot enter, if any."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not os.stat(parent).st_mode & 0o001:
            return parent
    return None


def private_view(argv: list[str], paths: list[Path], stage: Path) -> list[str]:
    """``argv`` wrapped so that it runs in a private mount namespace where every one of
    ``paths`` is reachable for other accounts: each closed folder above one of them (a
    pyenv Python under ``/root``) is covered by an empty tmpfs (0755) holding just those
    paths, bound back from where they are. Nothing on the host changes; the hub and every
    server it starts share the view. ``argv`` itself when nothing is closed."""
    keep = [(p, c) for p in paths if (c := _closed_ancestor(p)) is not None]
    if not keep:
        return list(argv)
    lines = ["set -e"]
    for i, (p, _) in enumerate(keep):  # set each path aside...
        lines.append(f"mkdir -p {stage}/{i} && mount --bind {shlex.quote(str(p))} {stage}/{i}")
    for closed in dict.fromkeys(c for _, c in keep):  # ...cover each closed folder...
        lines.append(f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(closed))}")
    for i, (p, _) in enumerate(keep):  # ...and put the paths back on top
        q = shlex.quote(str(p))
        lines.append(f"mkdir -p {q} && mount --bind {stage}/{i} {q}")
    lines.append("exec " + shlex.join(argv))
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "; ".join(lines)]


def python_prefix() -> Path:
    return Path(sys.base_prefix).resolve()


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


# ---- the hub --------------------------------------------------------------------------------


def hub_state(state: Path, roster: Roster) -> dict[str, str]:
    """The hub's secrets in ``state`` (mode 0700), made once: the learners' shared password
    and the instructor's admin password for SharedPasswordAuthenticator."""
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)
    out = {}
    for name, size in (("learner_password", 12), ("admin_password", 40)):
        f = state / name
        if not f.exists():
            f.write_text(secrets.token_urlsafe(size)[:size] + "\n")
            os.chmod(f, 0o600)
        out[name] = f.read_text().strip()
    return out


def course_root() -> Path:
    """The course checkout (:func:`kvstaff.lessons.course_root`)."""
    from kvstaff.lessons import course_root as root

    return root()


def instructor_course(person: Person, homes: Path) -> Path:
    course = Path(pwd.getpwnam(person.username).pw_dir) / COURSE_ID
    course.mkdir(exist_ok=True)
    shutil.chown(course, person.username, person.username)
    return course


def start(args) -> int:
    """`make hub`: accounts, exchange, state, then JupyterHub in the interpreter's view."""
    roster = read_roster(args.roster)
    ensure_accounts(roster, args.homes)
    prepare_exchange(args.exchange, roster.instructors[0].username)
    check_exchange(args.exchange, roster.instructors[0].username)
    for p in roster.instructors:
        instructor_course(p, args.homes)
    root = course_root()
    state = Path(os.environ.get("KV_HUB_STATE", root / "build" / "hub"))
    secrets_ = hub_state(state, roster)
    proxy = root / "node_modules" / ".bin" / "configurable-http-proxy"
    if not proxy.exists():
        raise SystemExit(f"{proxy} is missing: run `npm ci --ignore-scripts` (make hub does)")
    env = dict(
        os.environ,
        KV_HUB_ROSTER=str(Path(args.roster).resolve()),
        KV_EXCHANGE=str(args.exchange),
        KV_HUB_HOMES=str(args.homes),
        KV_HUB_STATE=str(state),
    )
    port = env.setdefault("KV_HUB_PORT", "8000")
    print(
        f"hub: http://127.0.0.1:{port}/  learners: {len(roster.learners)}, password in "
        f"{state / 'learner_password'}: {secrets_['learner_password']}; instructor(s) "
        f"{[p.username for p in roster.instructors]} log in with {state / 'admin_password'}",
        flush=True,
    )
    argv = [
        str(Path(sys.executable).parent / "jupyterhub"),
        "-f",
        str(root / "hub" / "jupyterhub_config.py"),
    ]
    argv = private_view(argv, [python_prefix(), root], state / "view")
    os.execvpe(argv[0], argv, env)
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvstaff.hub",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command", choices=["check", "accounts", "remove", "start", "release", "collect", "return"]
    )
    parser.add_argument("lesson", nargs="?", help="release/collect/return: the lesson")
    env = os.environ.get
    parser.add_argument(
        "--roster",
        type=Path,
        default=Path(env("KV_HUB_ROSTER", course_root() / "hub" / "roster.csv")),
    )
    parser.add_argument("--exchange", type=Path, default=Path(env("KV_EXCHANGE", DEFAULT_EXCHANGE)))
    parser.add_argument("--homes", type=Path, default=Path(env("KV_HUB_HOMES", "/home")))
    parser.add_argument("--course", type=Path, default=Path("~").expanduser() / COURSE_ID)
    parser.add_argument("--notebooks", type=Path, default=course_root() / "notebooks")
    parser.add_argument("--force", action="store_true", help="release: again, on purpose")
    args = parser.parse_args(argv)
    try:
        roster = read_roster(args.roster)
        if args.command in ("release", "collect", "return") and not args.lesson:
            parser.error(f"{args.command} needs a lesson, e.g. 03_attention")
        if args.command == "check":
            check_exchange(args.exchange, roster.instructors[0].username)
            print(
                f"roster {args.roster}: {len(roster.instructors)} instructor(s), "
                f"{len(roster.learners)} learner(s); exchange {args.exchange}: ok"
            )
        elif args.command == "accounts":
            ensure_accounts(roster, args.homes)
        elif args.command == "remove":
            remove_accounts(roster)
        elif args.command == "start":
            return start(args)
        elif args.command == "release":
            release(args.course, args.notebooks, args.lesson, args.exchange, force=args.force)
        elif args.command == "collect":
            collect(args.course, args.lesson, args.exchange, roster)
        elif args.command == "return":
            return_feedback(args.course, args.lesson, args.exchange)
    except (RosterError, ExchangeError, PermissionError) as err:
        print(f"hub: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
