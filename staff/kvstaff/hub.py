"""The class hub: a roster, system accounts made from it, nbgrader's exchange, and the hub.

Options: ``--roster`` (default ``hub/roster.csv``, or ``$KV_HUB_ROSTER``), ``--exchange``
(default ``/srv/nbgrader/exchange``, or ``$KV_EXCHANGE``), ``--homes`` (default ``/home``, or
``$KV_HUB_HOMES``), ``--course`` (the instructor's course folder, default
``~/key-vectors``).

The pieces: :mod:`kvstaff.roster` (the roster and the accounts made from it),
:mod:`kvstaff.exchange` (nbgrader's exchange and the instructor's steps through it), and
here the hub itself: its state, the private view it runs in, and this command line.
"""

from __future__ import annotations

import argparse
import os
import pwd
import secrets
import shlex
import shutil
import sys
from pathlib import Path

from kvstaff.exchange import (
    DEFAULT_EXCHANGE,
    EXCHANGE_LAYOUT,
    ExchangeError,
    check_exchange,
    collect,
    prepare_exchange,
    release,
    return_feedback,
    run_exchange,
)
from kvstaff.roster import (
    ACCOUNT_MARK,
    COURSE_ID,
    Person,
    Roster,
    RosterError,
    ensure_accounts,
    read_roster,
    remove_accounts,
)

__all__ = [
    "run_exchange",
    "ACCOUNT_MARK",
    "COURSE_ID",
    "DEFAULT_EXCHANGE",
    "EXCHANGE_LAYOUT",
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
