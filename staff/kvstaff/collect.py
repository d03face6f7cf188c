"""Collect: the exchange -> ``submitted/``, trusting nothing in it.

**Nothing in the exchange is trusted.** Every learner can write into ``inbound``, and each
submission folder nbgrader's submit makes is mode 0777. So :func:`collect` does not run
nbgrader's collect (which globs names, splits them from the right and copies, as the
instructor, following links). It walks ``inbound`` by directory descriptors, never through a
link, and for each of the lesson's submission folders:

1. parses the name strictly, as nbgrader 0.9.6's submit writes it:
   ``<student>+<lesson>+<YYYY-mm-dd HH:MM:SS.ffffff TZ>+<12 random characters>`` — one ``+``
   too many (``ada+zz+<lesson>+...``, a "student" ``ada+zz``), a timestamp that does not
   parse, or no random part (a name a classmate could guess: the folder is 0777) is refused;
2. takes the student from the folder's owner: the account that owns it must be the roster's
   learner the name gives (one learner handing in as another is refused);
3. copies it **once** into a staging folder of the instructor's (``<course>/.exchange/``,
   0700): regular files only (a link, FIFO, device or socket anywhere refuses it; a file is
   opened with ``O_PATH|O_NOFOLLOW`` and checked on its descriptor before a byte is read),
   every file and folder owned by that learner, no hard links, at most :data:`MAX_DEPTH`
   folders deep, :data:`MAX_FILES` files, :data:`MAX_FILE_BYTES` per file and
   :data:`MAX_TOTAL_BYTES` in all (read with a cap: a file's size is not believed); a folder
   or file that changes while it is copied refuses it;
4. checks the staged copy, never the exchange again: ``<lesson>.ipynb`` present and a
   notebook nbformat reads, ``submission_secret.txt`` the 128 hex digits nbgrader writes and
   no other learner's (a copied secret would name another learner's feedback page);
5. writes ``timestamp.txt`` (what autograde reads for lateness) from **the exchange's own
   record**: the newest status-change time (ctime) of the folder and everything copied from
   it. No user can set a ctime (``utime`` sets the others; any write moves ctime to *now*),
   so a submission is never earlier than its last change; a learner's own
   ``timestamp.txt`` and the name's timestamp are only shown when they claim earlier.
   (A learner who touches a submission later makes it later, which harms only them; an
   exchange copied or restored from a backup has new ctimes: collect before moving it);
6. moves the staged copy into ``<course>/submitted/<student>/<lesson>/``, as nbgrader's
   collect does (a newer submission replaces an older one).

Several submissions of one learner: the latest (by the folder's ctime) that passes these
checks is collected; each refused one on the way is named. A refused entry is moved aside
(``.refused-...`` with a random suffix, never onto an existing name) or, if even that fails,
left where it is; it never stops the class. What was collected is recorded in
``<course>/.exchange/collected-<lesson>.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kvstaff.exchange import (
    CLOEXEC,
    COURSE_ID,
    IGNORED,
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_TOTAL_BYTES,
    MAX_TRIES,
    PATH_FLAG,
    SECRET_RE,
    STAMP_FORMAT,
    account_name,
    check_exchange,
    current_account,
    exchange_config,
    kind_of,
    open_dir,
    open_tree,
    printable,
    quoted,
    read_json,
    state_dir,
    what_is,
    write_json,
)
from kvstaff.roster import NAME_RE, Roster, RosterError

__all__ = ["Collected", "collect", "collect_inbound", "parse_name"]


# ---- collect: the exchange read once, by descriptors ---------------------------------------------


class Refused(Exception):
    """One submission folder is not collected; the message says why."""


_NAME_RE = re.compile(
    r"(?P<student>[^+]*)\+(?P<lesson>[^+]*)\+(?P<stamp>[^+]*)\+(?P<random>[^+]*)", re.DOTALL
)
_STAMP_RE = re.compile(
    r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}) ([A-Za-z]{1,6}|[+-]\d{2}(?::?\d{2})?)"
)
_RANDOM_RE = re.compile(r"[A-Za-z0-9_-]{12}")  # base64.urlsafe_b64encode(os.urandom(9))


def parse_name(name: str, lesson: str) -> tuple[str, str]:
    """(student, claimed timestamp) of a submission folder's name, exactly as nbgrader
    0.9.6's submit writes it; :class:`Refused` naming what is wrong otherwise."""
    head = "not a name nbgrader's submit writes (<student>+<lesson>+<timestamp>+<random>)"
    fields = name.split("+")
    if len(fields) != 4:
        raise Refused(f"{head}: {len(fields)} '+'-separated fields, not 4")
    m = _NAME_RE.fullmatch(name)
    student, got, stamp, random = m["student"], m["lesson"], m["stamp"], m["random"]
    if not NAME_RE.match(student):
        raise Refused(f"{head}: {quoted(student)} is not an account name")
    if got != lesson:
        raise Refused(f"{head}: the lesson is {quoted(got)}, not {lesson!r}")
    s = _STAMP_RE.fullmatch(stamp)
    try:
        if s is None:
            raise ValueError
        datetime.strptime(s[1], "%Y-%m-%d %H:%M:%S.%f")
    except ValueError:
        raise Refused(f"{head}: the timestamp {quoted(stamp)} does not parse") from None
    if not _RANDOM_RE.fullmatch(random):
        raise Refused(
            f"{head}: the random part {quoted(random)} is not nbgrader's 12 characters "
            "(without it a classmate could guess the folder, which is open to all: 0777)"
        )
    return student, stamp


def _stamp(ns: int) -> str:
    t = datetime.fromtimestamp(ns // 10**9, UTC).replace(microsecond=(ns // 1000) % 10**6)
    return t.strftime(STAMP_FORMAT)


@dataclass
class _Budget:
    entries: int = 0
    files: int = 0
    bytes: int = 0
    newest_ns: int = 0
    accounts: dict[int, str] | None = None
    ctimes: dict[str, int] = field(default_factory=dict)  # rel path -> ctime (ns)


def _ignored(name: str) -> bool:
    return name in IGNORED or name.endswith(".pyc")


def _listdir(fd: int, limit: int | None = None) -> list[tuple[str, os.stat_result | None]]:
    """A folder's entries with their ``lstat`` (None: gone since it was listed), sorted;
    never following a link. At most ``limit`` + 1 of them are read."""
    out = []
    with os.scandir(fd) as it:
        for e in it:
            if limit is not None and len(out) > limit:
                break
            try:
                out.append((e.name, e.stat(follow_symlinks=False)))
            except OSError:
                out.append((e.name, None))
    return sorted(out, key=lambda x: x[0])


def _copy_tree(src: int, dst: int, rel: str, depth: int, uid: int, budget: _Budget) -> None:
    """Copy the folder ``src`` into ``dst`` (both descriptors), checking every entry."""
    before = os.fstat(src)
    where = quoted(rel) if rel else "the submission folder"
    if before.st_uid != uid:
        raise Refused(
            f"{where} belongs to {account_name(before.st_uid, budget.accounts)}, not to its learner"
        )
    entries = _listdir(src, MAX_ENTRIES - budget.entries)
    budget.entries += len(entries)
    if budget.entries > MAX_ENTRIES:
        raise Refused(f"more than {MAX_ENTRIES} entries")
    for name, lst in entries:
        path = f"{rel}/{name}" if rel else name
        shown = quoted(path)
        if _ignored(name):
            continue  # nbgrader's submit never copies these; neither is looked into
        if lst is None:
            raise Refused(f"{shown} changed while it was being collected")
        if stat.S_ISLNK(lst.st_mode):
            raise Refused(f"{shown} is {what_is(name, src, lst.st_mode)}")
        if stat.S_ISDIR(lst.st_mode):
            if depth >= MAX_DEPTH:
                raise Refused(f"folders nested more than {MAX_DEPTH} deep ({shown})")
            try:
                child = open_dir(name, dir_fd=src)
            except OSError as err:
                raise Refused(f"{shown} cannot be opened as a folder ({err.strerror})") from None
            try:
                os.mkdir(name, 0o755, dir_fd=dst)
                out = open_dir(name, dir_fd=dst)
                try:
                    _copy_tree(child, out, path, depth + 1, uid, budget)
                finally:
                    os.close(out)
            finally:
                os.close(child)
        elif stat.S_ISREG(lst.st_mode):
            _copy_file(src, dst, name, path, uid, budget)
        else:
            raise Refused(f"{shown} is {kind_of(lst.st_mode)}, not a plain file")
    after = os.fstat(src)
    if (after.st_ctime_ns, after.st_mtime_ns) != (before.st_ctime_ns, before.st_mtime_ns):
        raise Refused(f"{where} changed while it was being collected")
    budget.newest_ns = max(budget.newest_ns, after.st_ctime_ns)


def _copy_file(src: int, dst: int, name: str, path: str, uid: int, budget: _Budget) -> None:
    """One regular file, opened without following a link and checked on its descriptor
    (O_PATH: opening it has no effect, even on a FIFO or a device swapped in), read with a
    cap, written once into the staging folder."""
    shown = quoted(path)
    try:
        pfd = os.open(
            name, (PATH_FLAG or os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | CLOEXEC, dir_fd=src
        )
    except OSError as err:
        raise Refused(f"{shown} cannot be opened ({err.strerror})") from None
    try:
        st = os.fstat(pfd)
        if not stat.S_ISREG(st.st_mode):
            what = what_is(name, src, st.st_mode)
            raise Refused(f"{shown} is {what}, not a plain file")
        if st.st_uid != uid:
            raise Refused(
                f"{shown} belongs to {account_name(st.st_uid, budget.accounts)}, not to its learner"
            )
        if st.st_nlink != 1:
            raise Refused(f"{shown} is a hard link ({st.st_nlink} names for one file)")
        budget.files += 1
        if budget.files > MAX_FILES:
            raise Refused(f"more than {MAX_FILES} files")
        cap = min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - budget.bytes)
        if st.st_size > cap:
            raise Refused(_too_big(shown, st.st_size))
        fd = _reopen(pfd, name, src, st)
        try:
            out = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | CLOEXEC,
                0o644,
                dir_fd=dst,
            )
            with os.fdopen(out, "wb") as fh:
                left = cap + 1
                while left > 0:
                    chunk = os.read(fd, min(left, 2**20))
                    if not chunk:
                        break
                    left -= len(chunk)
                    fh.write(chunk)
                got = cap + 1 - left
            if got > cap:
                raise Refused(_too_big(shown, got))
            after = os.fstat(fd)
        finally:
            os.close(fd)
    finally:
        os.close(pfd)
    if (after.st_ctime_ns, after.st_mtime_ns, after.st_size) != (
        st.st_ctime_ns,
        st.st_mtime_ns,
        got,
    ):
        raise Refused(f"{shown} changed while it was being collected")
    budget.bytes += got
    budget.ctimes[path] = after.st_ctime_ns
    budget.newest_ns = max(budget.newest_ns, after.st_ctime_ns)


def _too_big(shown: str, size: int) -> str:
    if size > MAX_FILE_BYTES:
        return f"{shown} is {size / 2**20:.1f} MiB (more than {MAX_FILE_BYTES // 2**20} MiB)"
    return f"more than {MAX_TOTAL_BYTES // 2**20} MiB in all (at {shown})"


def _reopen(pfd: int, name: str, src: int, st: os.stat_result) -> int:
    """A readable descriptor of the very file ``pfd`` (an O_PATH descriptor) is."""
    flags = os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | CLOEXEC
    if PATH_FLAG:
        try:
            return os.open(f"/proc/self/fd/{pfd}", flags)
        except FileNotFoundError:  # no /proc: open the name again and compare
            pass
        except OSError as err:
            raise Refused(f"{quoted(name)} cannot be read ({err.strerror})") from None
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW, dir_fd=src)
        except OSError as err:
            raise Refused(f"{quoted(name)} cannot be read ({err.strerror})") from None
        again = os.fstat(fd)
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise Refused(f"{quoted(name)} changed while it was being collected")
        return fd
    return os.dup(pfd)


@dataclass
class _Staged:
    entry: str  # the name in inbound
    student: str
    claimed: str  # the timestamp the name claims
    folder: Path  # the staged copy (the instructor's)
    time_ns: int = 0
    secret: str = ""
    secret_ns: int = 0  # ctime of the secret in the exchange (who had it first)
    notebooks: list[str] = field(default_factory=list)


def _stage(
    inbound: int, name: str, uid: int, student: str, staging: Path, accounts: dict[int, str]
) -> _Staged:
    """Copy the submission folder ``name`` into a new folder under ``staging``, checking
    everything on the way; :class:`Refused` otherwise (the partial copy is removed)."""
    try:
        src = open_dir(name, dir_fd=inbound)
    except OSError as err:
        if isinstance(err, PermissionError):
            raise Refused("the folder cannot be read (its learner closed it)") from None
        raise Refused(f"it is {what_is(name, inbound)}, not a folder") from None
    folder = staging / secrets.token_hex(8)
    try:
        st = os.fstat(src)
        if st.st_uid != uid:  # the owner, again, of exactly what is copied
            raise Refused(f"it belongs to {account_name(st.st_uid, accounts)} now")
        os.mkdir(folder, 0o700)
        dst = open_dir(folder)
        budget = _Budget(accounts=accounts)
        try:
            _copy_tree(src, dst, "", 0, uid, budget)
        finally:
            os.close(dst)
        staged = _Staged(name, student, "", folder, time_ns=budget.newest_ns)
        staged.secret_ns = budget.ctimes.get("submission_secret.txt", 0)
        return staged
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        os.close(src)


def _check_staged(staged: _Staged, lesson: str, released: set[str]) -> None:
    """The checks autograde and feedback rely on, on the staged copy (the instructor's)."""
    import nbformat

    folder = staged.folder
    notebooks = sorted(p.name for p in folder.glob("*.ipynb"))
    if f"{lesson}.ipynb" not in notebooks:
        raise Refused(
            f"no {lesson}.ipynb in it (it holds {notebooks}): a notebook with the wrong name"
        )
    staged.notebooks = sorted({lesson} | {n[: -len(".ipynb")] for n in notebooks} & released)
    for nb in staged.notebooks:
        path = folder / f"{nb}.ipynb"
        try:
            nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
        except Exception as err:  # noqa: BLE001 - any reason nbformat gives
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise Refused(f"{nb}.ipynb is not a notebook nbformat reads ({first[:200]})") from None
    secret_path = folder / "submission_secret.txt"
    if not secret_path.exists():
        raise Refused("no submission_secret.txt (nbgrader's submit writes one)")
    secret = secret_path.read_bytes()[:200].decode("ascii", "replace")
    if not SECRET_RE.fullmatch(secret):
        raise Refused(
            "its submission_secret.txt is not the 128 hex digits nbgrader's submit writes"
        )
    staged.secret = secret
    claimed = folder / "timestamp.txt"
    if claimed.exists():  # the learner's own claim: shown, never used
        staged.claimed = claimed.read_bytes()[:80].decode("utf-8", "replace").strip()
        claimed.unlink()
    (folder / "timestamp.txt").write_text(_stamp(staged.time_ns))


def _move_aside(inbound: int, name: str) -> str | None:
    """Rename a refused entry to ``.refused-<name>-<random>`` in inbound, never onto an
    existing name (renameat2 RENAME_NOREPLACE; a learner who knows their own folder's
    name cannot guess the random suffix anyway). None when it could not be moved."""
    base = "".join(c if c.isprintable() and c not in "+/" else "_" for c in name)[:120]
    for _ in range(5):
        target = f".refused-{base}-{secrets.token_hex(4)}"
        try:
            _rename_noreplace(inbound, name, target)
            return target
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


def _rename_noreplace(dir_fd: int, old: str, new: str) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:  # no renameat2: check, then rename (the random name is not guessable)
        try:
            os.stat(new, dir_fd=dir_fd, follow_symlinks=False)
            raise FileExistsError(new)
        except FileNotFoundError:
            os.rename(old, new, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return
    rc = fn(dir_fd, os.fsencode(old), dir_fd, os.fsencode(new), 1)  # RENAME_NOREPLACE
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), new)


@dataclass
class Collected:
    """What :func:`collect_inbound` did: submissions collected (student -> record, see
    ``collected-<lesson>.json``), left as they were, and refused (one line each)."""

    accepted: dict[str, dict] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _released(course: Path, lesson: str) -> set[str]:
    """The lesson's notebooks as released (``release/<lesson>/*.ipynb``), else the lesson."""
    got = {p.stem for p in (Path(course) / "release" / lesson).glob("*.ipynb")}
    return got or {lesson}


def _held_secrets(course: Path, state: Path) -> dict[str, set[str]]:
    """secret -> students whose collected submissions (any lesson) hold it."""
    held: dict[str, set[str]] = {}
    for record in state.glob("collected-*.json"):
        for student, rec in read_json(record).items():
            held.setdefault(rec.get("secret", ""), set()).add(student)
    for path in (Path(course) / "submitted").glob("*/*/submission_secret.txt"):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                secret = fh.read(200).decode("ascii", "replace")
        except OSError:
            continue
        held.setdefault(secret, set()).add(path.parent.parent.name)
    held.pop("", None)
    return held


def _default_accounts(roster: Roster) -> dict[int, str]:
    accounts = {}
    for p in roster.people:
        with contextlib.suppress(KeyError):
            accounts[pwd.getpwnam(p.username).pw_uid] = p.username
    return accounts


def collect_inbound(
    course: Path,
    lesson: str,
    inbound: Path | str | int,
    roster: Roster,
    *,
    accounts: dict[int, str] | None = None,
    echo=print,
) -> Collected:
    """Collect ``lesson``'s submissions from the folder ``inbound`` (a path, opened without
    following a link, or a descriptor) into ``course/submitted/``; see the module's text.

    ``accounts`` maps a uid to the roster name it is (default: the system's accounts of the
    roster's people); the folder's owner must be the learner its name gives."""
    course = Path(course)
    accounts = _default_accounts(roster) if accounts is None else accounts
    state = state_dir(course)
    lock = os.open(state / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | CLOEXEC, 0o600)
    own_fd = not isinstance(inbound, int)
    fd = open_dir(str(inbound)) if own_fd else inbound
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        staging = state / "staging"
        shutil.rmtree(staging, ignore_errors=True)  # a crashed run's
        os.mkdir(staging, 0o700)
        try:
            return _collect(course, lesson, fd, roster, accounts, state, staging, echo)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        if own_fd:
            os.close(fd)
        os.close(lock)


def _collect(course, lesson, inbound, roster, accounts, state, staging, echo) -> Collected:
    out = Collected()

    def refuse(name: str, why: str) -> None:
        target = _move_aside(inbound, name)
        shown = printable(name)
        out.refused.append(f"{shown}: {why}")
        moved = f"moved to {target}" if target else "left in inbound: it could not be moved"
        echo(f"REFUSED {shown}: {why} ({moved})")

    # 1. the lesson's entries (nbgrader's collect globs *+<lesson>+*), names parsed strictly
    candidates: dict[str, list[tuple[int, str, str]]] = {}
    for name, lst in _listdir(inbound):
        if lst is None or name.startswith(".") or lesson not in name.split("+")[1:-1]:
            continue  # gone since it was listed, hidden, or not this lesson's
        try:
            student, claimed = parse_name(name, lesson)
            try:
                roster.get(student)
            except RosterError as err:
                raise Refused(str(err)) from None
            if accounts.get(lst.st_uid) != student:
                raise Refused(
                    f"handed in as {student!r} by the account {account_name(lst.st_uid, accounts)}"
                )
        except Refused as why:
            refuse(name, str(why))
            continue
        candidates.setdefault(student, []).append((lst.st_ctime_ns, name, claimed))

    # 2. per learner, the latest submission that passes, each copied once into staging
    staged: dict[str, _Staged] = {}
    seen: list[tuple[str, str, int]] = []  # (secret, student, its ctime) of each staged
    released = _released(course, lesson)
    uid_of = {name: uid for uid, name in accounts.items()}
    for student, entries in sorted(candidates.items()):
        entries.sort(reverse=True)
        for i, (_, name, claimed) in enumerate(entries):
            if i >= MAX_TRIES:
                out.notes.append(
                    f"{student}: {len(entries) - i} older submission(s) not examined "
                    f"(at most {MAX_TRIES} are)"
                )
                break
            try:
                s = _stage(inbound, name, uid_of[student], student, staging, accounts)
                try:
                    _check_staged(s, lesson, released)
                except BaseException:
                    shutil.rmtree(s.folder, ignore_errors=True)
                    raise
            except Refused as why:
                refuse(name, f"{student}'s submission {why}")
                continue
            except Exception as err:  # noqa: BLE001 - one entry never stops the class
                refuse(name, f"{student}'s submission could not be collected ({err!r:.300})")
                continue
            s.claimed = s.claimed or claimed
            seen.append((s.secret, student, s.secret_ns))
            staged[student] = s
            break

    # 3. a secret is one submission's: a copy of another learner's is refused
    held = _held_secrets(course, state)
    for student, s in sorted(staged.items()):
        others = sorted(held.get(s.secret, set()) - {student})
        earlier = sorted(
            {o for sec, o, ns in seen if sec == s.secret and o != student and ns <= s.secret_ns}
        )
        if others or earlier:
            refuse(
                s.entry,
                f"{student}'s submission has the submission_secret.txt of "
                f"{', '.join(others or earlier)}'s submission: a copied secret (its feedback "
                "page would be theirs)",
            )
            shutil.rmtree(s.folder, ignore_errors=True)
            del staged[student]

    # 4. into submitted/<student>/<lesson>/, the way nbgrader's collect does it
    record_path = state / f"collected-{lesson}.json"
    record = read_json(record_path)
    for student, s in sorted(staged.items()):
        try:
            _place(course, lesson, s, record, out)
        except OSError as err:
            out.refused.append(f"{printable(s.entry)}: could not be placed in submitted/ ({err})")
            echo(f"REFUSED {printable(s.entry)}: could not be placed in submitted/ ({err})")
        claim = _claim_ns(s.claimed)
        if claim is not None and s.time_ns - claim > 60 * 10**9:
            out.notes.append(
                f"{student}: {printable(s.entry)} claims {printable(s.claimed)}; the exchange "
                f"records {_stamp(s.time_ns)} (used)"
            )
    write_json(record_path, record)
    for note in out.notes:
        echo(f"NOTE {note}")
    return out


def _place(course: Path, lesson: str, s: _Staged, record: dict, out: Collected) -> None:
    dest = course / "submitted" / s.student / lesson
    rec = {
        "entry": s.entry,
        "time": _stamp(s.time_ns),
        "time_ns": s.time_ns,
        "secret": s.secret,
        "notebooks": s.notebooks,
        "claimed": s.claimed,
    }
    old = record.get(s.student)
    if old and old.get("entry") == s.entry and old.get("time_ns") == s.time_ns and dest.is_dir():
        out.unchanged.append(s.student)
        shutil.rmtree(s.folder, ignore_errors=True)
        return
    if dest.is_dir() and not dest.is_symlink():
        existing = old.get("time_ns") if old else _existing_ns(dest)
        if existing is not None and existing > s.time_ns:
            out.unchanged.append(s.student)  # a later one was collected before
            shutil.rmtree(s.folder, ignore_errors=True)
            return
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(s.folder, 0o755)
    if dest.exists() or dest.is_symlink():
        trash = s.folder.with_name(s.folder.name + "-old")
        os.rename(dest, trash)
        os.rename(s.folder, dest)
        if trash.is_symlink() or not trash.is_dir():
            trash.unlink()
        else:
            shutil.rmtree(trash)  # fd-based on Linux: never follows a link
    else:
        os.rename(s.folder, dest)
    record[s.student] = rec
    out.accepted[s.student] = rec


def _claim_ns(text: str) -> int | None:
    """A timestamp as nbgrader writes it, in ns since the epoch; None if it does not parse."""
    from nbgrader.utils import parse_utc

    try:
        return int(parse_utc(text.strip()).replace(tzinfo=UTC).timestamp() * 10**9)
    except Exception:  # noqa: BLE001 - whatever dateutil makes of a learner's text
        return None


def _existing_ns(dest: Path) -> int | None:
    try:
        return _claim_ns((dest / "timestamp.txt").read_text()[:200])
    except (OSError, UnicodeDecodeError):
        return None


def collect(
    course: Path,
    lesson: str,
    exchange: Path | str,
    roster: Roster,
    echo=print,
    *,
    accounts: dict[int, str] | None = None,
) -> list[str]:
    """Collect ``lesson``'s submissions into ``course/submitted/``, after checking each
    (the module's text says how); every learner of the roster is put in the gradebook.
    Returns the refusals, one line each (``<entry>: <why>``)."""
    check_exchange(exchange, current_account())
    inbound = open_tree(exchange, [COURSE_ID, "inbound"])
    try:
        got = collect_inbound(course, lesson, inbound, roster, accounts=accounts, echo=echo)
    finally:
        os.close(inbound)
    _enrol(exchange_config(course, exchange), roster)
    have = sorted(p.parent.name for p in (Path(course) / "submitted").glob(f"*/{lesson}"))
    echo(
        f"collected {lesson}: {len(have)} learner(s) ({len(got.accepted)} new, "
        f"{len(got.unchanged)} unchanged); {len(got.refused)} submission(s) refused"
    )
    return got.refused


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
