"""The class's roster and the system accounts made from it (stdlib only: the hub's
configuration imports this module, and nothing here loads attnlib or torch).

**The roster** is a CSV file with a header: ``username,role`` and, optionally, ``name``,
``section``, ``canvas_id``, ``sis_user_id``, ``sis_login_id`` (the last four go into the Canvas
export, :mod:`kvstaff.grader.canvas`). ``role`` is ``instructor`` or ``learner``; there
is at least one instructor. A username is a system account's name: lowercase letters, digits
and ``-``, starting with a letter, at most 32 characters (no ``+``: nbgrader's exchange splits
folder names on it). Each mistake is reported with its line (:class:`RosterError`),
among them two people with one Canvas identity: a ``canvas_id``, ``sis_user_id`` or
``sis_login_id`` given twice (:func:`identity_key`: Canvas ids as numbers, SIS ids without
regard to case), which would put two rows for one Canvas user in the Canvas export.

**Accounts**: the hub's default spawner (``LocalProcessSpawner``) starts each user's server as
the system account of the same name, so every roster entry becomes one (``useradd``), with a
home folder of mode 0700 (no learner reads another's files) and the comment
:data:`ACCOUNT_MARK`: an existing account without it is refused, never taken over, and
``remove`` deletes only marked accounts.
"""

from __future__ import annotations

import csv
import grp
import os
import pwd
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ACCOUNT_MARK",
    "COURSE_ID",
    "Person",
    "Roster",
    "RosterError",
    "ensure_accounts",
    "identity_key",
    "read_roster",
    "remove_accounts",
]

COURSE_ID = "key-vectors"
ACCOUNT_MARK = "key-vectors class hub"
ROLES = ("instructor", "learner")
COLUMNS = ("username", "role", "name", "section", "canvas_id", "sis_user_id", "sis_login_id")
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
# The columns that name a person in Canvas: each may be empty, never the same for two people.
IDENTITY_COLUMNS = ("canvas_id", "sis_user_id", "sis_login_id")


def identity_key(column: str, value: str) -> str | None:
    """What two values of an identity column must not share (None for an empty one).

    A Canvas id is a number (``01001`` is ``1001``); SIS ids are compared without regard to
    case (an institution's login ``ALovelace`` is ``alovelace``).
    """
    value = (value or "").strip()
    if not value:
        return None
    if column == "canvas_id" and value.isascii() and value.isdigit():
        return str(int(value))
    return value.casefold()


class RosterError(ValueError):
    """A roster that cannot be used: the message names the file, the line and the entry."""


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
    identities: dict[tuple[str, str], tuple[str, int]] = {}  # (column, key) -> first holder
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
        person = Person(**{k: row.get(k, "") for k in COLUMNS})
        shared = _shared_identities(person, line, identities)
        if shared:
            problems += [f"{where}: {s}" for s in shared]
            continue
        people.append(person)
    if not problems and not any(p.role == "instructor" for p in people):
        problems.append("no instructor: one line needs role 'instructor'")
    if problems:
        raise RosterError(f"roster {path}:\n  " + "\n  ".join(problems))
    return Roster(path, people)


def _shared_identities(
    person: Person, line: int, identities: dict[tuple[str, str], tuple[str, int]]
) -> list[str]:
    """Why ``person`` shares a Canvas identity with someone before; else record theirs."""
    keys = {c: identity_key(c, getattr(person, c)) for c in IDENTITY_COLUMNS}
    problems = [
        f"duplicate {c} {getattr(person, c)!r} of {person.username!r}: already "
        f"{identities[(c, k)][0]!r}'s (line {identities[(c, k)][1]}); one Canvas identity "
        "per person"
        for c, k in keys.items()
        if k is not None and (c, k) in identities
    ]
    if not problems:
        for c, k in keys.items():
            if k is not None:
                identities[(c, k)] = (person.username, line)
    return problems


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
