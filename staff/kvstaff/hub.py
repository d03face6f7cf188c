"""The class hub: a roster, system accounts made from it, nbgrader's exchange, and the hub.

Options: ``--roster`` (default ``hub/roster.csv``, or ``$KV_HUB_ROSTER``), ``--exchange``
(default ``/srv/nbgrader/exchange``, or ``$KV_EXCHANGE``), ``--homes`` (default ``/home``, or
``$KV_HUB_HOMES``), ``--course`` (the instructor's course folder, default
``~/key-vectors``).

The pieces: :mod:`kvstaff.roster` (the roster and the accounts made from it),
:mod:`kvstaff.exchange` (nbgrader's exchange and the instructor's steps through it), and
here the hub itself: its state, the private view it runs in, what each learner's server
is given (:func:`server_preexec`: its own view without the checkout, its limits and its
cgroup; hub/jupyterhub_config.py's spawner calls it) and this command line.

Root's set-up steps never follow a link that someone else could have made: the instructor's
course folder is made *as the instructor* and checked without following links
(:func:`instructor_course`), the hub's state folder and files are opened with
``O_NOFOLLOW`` (:func:`hub_state`); a link where a folder should be is refused with
:class:`HubError`, naming it.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import pwd
import resource
import secrets
import shlex
import signal
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvstaff.collect import collect
from kvstaff.exchange import (
    DEFAULT_EXCHANGE,
    EXCHANGE_LAYOUT,
    ExchangeError,
    check_exchange,
    prepare_exchange,
    release,
    run_exchange,
)
from kvstaff.feedback import return_feedback
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
    "Cgroups",
    "DEFAULT_EXCHANGE",
    "EXCHANGE_LAYOUT",
    "ExchangeError",
    "HubError",
    "ServerLimits",
    "View",
    "SYSTEM_FOLDERS",
    "beyond_the_system",
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
    "server_preexec",
]


class HubError(RuntimeError):
    """A set-up step of the hub refused to go on: the message names the path and why."""


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


# ---- what a learner's server is given: its own view, its limits, its cgroup ---------------
#
# hub/jupyterhub_config.py's spawner (LocalProcessSpawner's own start(): one Popen) passes
# :func:`server_preexec` as the preexec_fn: in the forked child, still root, it joins the
# server's cgroups, makes the child's own mount namespace (the checkout covered, only what a
# learner's server needs bound back), sets the limits, then becomes the account. Everything
# the server starts (kernels, terminals) inherits all of it; the account cannot undo any of it.

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_SLAVE = 32, 4096, 16384, 1 << 19
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
PR_SET_NO_NEW_PRIVS = 38
# statvfs's flags of a mount -> mount(2)'s, kept when a bound path is remounted
_KEPT_FLAGS = {
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}


# The folders directly under / that a learner's server keeps: the operating system's own.
# Everything else there (/home, /root, /srv, /opt, /mnt, /media, a checkout's /work or
# /check, any folder someone makes tomorrow) is hidden unless named: a copy of the course
# that nobody listed (a staff member's clone, a second checkout) is not in a learner's world.
SYSTEM_FOLDERS = (
    "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys",
    "usr", "var",
)  # fmt: skip


def beyond_the_system(top: str | Path = "/", keep: tuple[str, ...] = SYSTEM_FOLDERS) -> list[str]:
    """Every folder directly under ``top`` but those named in ``keep`` (and links, which
    lead into a kept one or to a folder listed here anyway): what a view that hides all but
    the operating system covers.

    >>> import tempfile
    >>> top = Path(tempfile.mkdtemp())
    >>> for name in ("usr", "etc", "srv", "clone-of-the-course"):
    ...     (top / name).mkdir()
    >>> (top / "bin").symlink_to("usr")
    >>> (top / "notes.txt").write_text("a file is no folder")
    19
    >>> [Path(p).name for p in beyond_the_system(top)]
    ['clone-of-the-course', 'srv']
    """
    top = Path(top)
    return sorted(
        str(p) for p in top.iterdir() if p.name not in keep and p.is_dir() and not p.is_symlink()
    )


@dataclass(frozen=True)
class View:
    """A server's own mount namespace: ``hide`` maps folders to the options of the empty,
    root-owned tmpfs put over each (the checkout, the shared temporary folders, the other
    homes); ``read_only`` and ``writable`` are paths under a hidden folder bound back, from
    where they are, read-only or as they are (nosuid and nodev either way). Paths that do
    not exist are left out; a path under no hidden folder needs no binding.
    ``own_processes``: a /proc where the account sees only its own processes."""

    hide: dict[str, str] = field(default_factory=dict)
    read_only: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    # a /proc of its own where only the account's own processes are listed (hidepid=2)
    own_processes: bool = True

    def with_writable(self, *paths: str | Path) -> View:
        return replace(self, writable=(*self.writable, *map(str, paths)))

    def plan(self) -> tuple[list[tuple[str, str]], list[tuple[str, bool]]]:
        """(hidden folder, tmpfs options), outermost only, and (bound path, read-only); all
        real paths (the configuration's links, root's, resolved)."""
        hide = {os.path.realpath(p): opts for p, opts in self.hide.items()}
        hidden: list[tuple[str, str]] = []
        for path in sorted(hide, key=len):
            inside = any(Path(path).is_relative_to(h) for h, _ in hidden)
            if os.path.isdir(path) and not inside:
                hidden.append((path, hide[path]))
        binds = [(p, True) for p in self.read_only] + [(p, False) for p in self.writable]
        binds = [
            (real, ro)
            for p, ro in binds
            if os.path.exists(real := os.path.realpath(p))
            and any(Path(real).is_relative_to(h) for h, _ in hidden)
        ]
        return hidden, sorted(binds, key=lambda b: len(Path(b[0]).parts))


@dataclass(frozen=True)
class ServerLimits:
    """One account's limits (``None``: none). ``processes`` is RLIMIT_NPROC (per account:
    every process and thread of theirs) and the cgroup's pids.max; ``memory`` the cgroup's
    memory limit (all the server's processes together); ``address_space`` (RLIMIT_AS) and
    ``file_size`` (RLIMIT_FSIZE) are per process; ``cpu`` the cgroup's CPU quota in cores."""

    processes: int | None = None
    memory: int | None = None
    address_space: int | None = None
    cpu: float | None = None
    file_size: int | None = None

    def rlimits(self) -> list[tuple[int, int]]:
        pairs = [
            (resource.RLIMIT_NPROC, self.processes),
            (resource.RLIMIT_AS, self.address_space),
            (resource.RLIMIT_FSIZE, self.file_size),
            (resource.RLIMIT_CORE, 0),
        ]
        return [(r, n) for r, n in pairs if n is not None]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    libc.unshare.argtypes = [ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    return libc


def _sys(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(libc, source, target, fstype, flags: int, data=None) -> None:
    enc = [None if v is None else os.fsencode(v) for v in (source, target, fstype, data)]
    _sys(libc.mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {target}")


def _enter_view(
    libc, hidden: list[tuple[str, str]], binds: list[tuple[str, bool]], own_processes: bool
) -> None:
    """In the forked child, as root: a mount namespace of its own where each hidden folder
    is an empty tmpfs and each bound path is back in place. Mounts made here never reach the
    hub's view (the copy is made a slave first), and an account can neither unmount nor
    see under them: copied into a namespace it could make, they are locked together."""
    _sys(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(libc, None, "/", None, MS_REC | MS_SLAVE)
    fds = [os.open(p, os.O_PATH | os.O_CLOEXEC) for p, _ in binds]  # before they are covered
    for folder, options in hidden:
        _mount(libc, "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for fd, (path, read_only) in zip(fds, binds, strict=True):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.makedirs(path, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        kept = os.fstatvfs(fd).f_flag
        flags = MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
        flags |= sum(ms for st_flag, ms in _KEPT_FLAGS.items() if kept & st_flag)
        _mount(libc, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        _mount(libc, None, path, None, MS_REMOUNT | MS_BIND | flags)
        os.close(fd)
    if own_processes:  # the same processes, each visible to its own account only
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")


def server_preexec(
    username: str,
    view: View | None = None,
    limits: ServerLimits | None = None,
    cgroups: list[Path] | tuple[Path, ...] = (),
    no_new_privileges: bool = False,
) -> Callable[[], None]:
    """A ``preexec_fn`` starting a server as ``username``, as JupyterHub's own does (its
    group and groups, then its uid, in its home), after joining ``cgroups``, entering
    ``view`` (with the account's home bound back) and setting ``limits``' rlimits (hard
    and soft). ``no_new_privileges``: setuid programs no longer raise anyone's rights.
    Everything is looked up here, in the hub; the child makes only system calls."""
    pw = pwd.getpwnam(username)
    gids = os.getgrouplist(username, pw.pw_gid)
    hidden, binds = view.with_writable(pw.pw_dir).plan() if view else ([], [])
    rlimits = limits.rlimits() if limits else []
    procs = [os.fsencode(Path(d) / "cgroup.procs") for d in cgroups]
    libc = _libc()

    def preexec() -> None:
        pid = str(os.getpid()).encode()
        for path in procs:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        if view is not None:
            _enter_view(libc, hidden, binds, view.own_processes)
        for which, n in rlimits:
            resource.setrlimit(which, (n, n))
        os.setgid(pw.pw_gid)
        os.setgroups(gids)
        os.setuid(pw.pw_uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise PermissionError(f"could not become {username}")
        if no_new_privileges:
            _sys(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        os.chdir(pw.pw_dir)

    return preexec


class Cgroups:
    """One cgroup per server, ``<the hub's own cgroup>/<parent>/<user>`` in each hierarchy
    that has the memory, pids or cpu controller: cgroup v1 (one tree per controller) or v2
    (one tree; the controllers switched on for the children). Made by :meth:`create` with
    the limits, emptied and removed by :meth:`close`. ``problem`` says why some or all are
    missing (the limits are then the rlimits alone). Tested on cgroup v1 only (this
    development machine); the v2 code follows the kernel's documented interface."""

    CONTROLLERS = ("memory", "pids", "cpu")

    def __init__(self, parent: str = "key-vectors-hub"):
        self.parent = parent
        self.problem: str | None = None
        try:
            self.trees = self._trees()
        except OSError as err:
            self.trees, self.problem = {}, f"cannot read this process's cgroups: {err}"
        for c, (kind, own) in list(self.trees.items()):
            if kind == "v2":  # the controller on for the hub's children: refused (EBUSY)
                try:  # when the hub shares a non-root cgroup with other processes
                    (own / "cgroup.subtree_control").write_text(f"+{c}")
                except OSError as err:
                    del self.trees[c]
                    self.problem = f"cgroup v2: cannot switch {c} on in {own}: {err}"
        missing = [c for c in self.CONTROLLERS if c not in self.trees]
        if missing and self.problem is None:
            self.problem = f"no writable cgroup with {', '.join(missing)} for this process"

    @staticmethod
    def _own() -> tuple[dict[str, str], str | None]:
        v1, v2 = {}, None
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hid, ctrls, path = line.split(":", 2)
            if hid == "0" and not ctrls:
                v2 = path
            for c in ctrls.split(","):
                v1[c] = path
        return v1, v2

    def _trees(self) -> dict[str, tuple[str, Path]]:
        """controller -> ("v1" | "v2", the hub's own cgroup folder holding it)."""
        v1_own, v2_own = self._own()
        v1: dict[str, Path] = {}
        v2: dict[str, Path] = {}
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields, _, tail = line.partition(" - ")
            mount, (fstype, _, options) = fields.split()[4], tail.split()[:3]
            if fstype == "cgroup":
                for c in set(options.split(",")) & set(self.CONTROLLERS) & set(v1_own):
                    v1[c] = Path(mount) / v1_own[c].lstrip("/")
            elif fstype == "cgroup2" and v2_own is not None:
                own = Path(mount) / v2_own.lstrip("/")
                try:
                    on = (own / "cgroup.controllers").read_text().split()
                except OSError:
                    continue
                v2.update({c: own for c in self.CONTROLLERS if c in on})
        found = {c: ("v2", f) for c, f in v2.items()} | {c: ("v1", f) for c, f in v1.items()}
        return {c: t for c, t in found.items() if os.access(t[1], os.W_OK)}

    def folders(self, user: str) -> list[Path]:
        return sorted({own / self.parent / user for _, own in self.trees.values()})

    def create(self, user: str, limits: ServerLimits) -> list[Path]:
        """The server's cgroups, with ``limits``; processes left in them by an earlier
        server of ``user`` are killed first."""
        self.close(user, remove=False)
        for c, (kind, own) in sorted(self.trees.items()):
            folder = own / self.parent / user
            for _ in range(3):  # the parent may be removed by another server's close()
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                    break
                except FileNotFoundError:
                    continue
            if kind == "v2":  # and on for the servers' cgroups
                (own / self.parent / "cgroup.subtree_control").write_text(f"+{c}")
            for name, value in self._settings(c, kind, limits):
                if (folder / name).exists():
                    (folder / name).write_text(value)
        return self.folders(user)

    @staticmethod
    def _settings(controller: str, kind: str, limits: ServerLimits) -> list[tuple[str, str]]:
        if controller == "memory" and limits.memory:
            if kind == "v1":  # memory first, then memory + swap
                n = str(limits.memory)
                return [("memory.limit_in_bytes", n), ("memory.memsw.limit_in_bytes", n)]
            return [("memory.max", str(limits.memory)), ("memory.swap.max", "0")]
        if controller == "pids" and limits.processes:
            return [("pids.max", str(limits.processes))]
        if controller == "cpu" and limits.cpu:
            quota = str(int(limits.cpu * 100_000))
            if kind == "v1":
                return [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", quota)]
            return [("cpu.max", f"{quota} 100000")]
        return []

    def pids(self, user: str) -> set[int]:
        out: set[int] = set()
        for folder in self.folders(user):
            try:
                out |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
            except FileNotFoundError:
                pass
        return out

    def close(self, user: str, remove: bool = True, timeout: float = 10) -> int:
        """Kill every process left in ``user``'s server cgroups (a kernel or a fork bomb that
        outlived the server) and remove them. Returns how many processes were killed."""
        killed, t0 = 0, time.monotonic()
        while (left := self.pids(user)) and time.monotonic() - t0 < timeout:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        for folder in self.folders(user) if remove else []:
            for f in (folder, folder.parent):  # the parent too, once it is empty
                try:
                    f.rmdir()
                except OSError:
                    break
        return killed


# ---- the hub --------------------------------------------------------------------------------


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_folder(shown: Path, name: str | Path, dir_fd: int | None = None) -> int:
    """A descriptor of the folder ``name`` (in ``dir_fd``), never through a link: a link in
    its place is refused with :class:`HubError` naming ``shown`` and where the link points."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
            target = os.readlink(name, dir_fd=dir_fd)
            raise HubError(
                f"{shown} is a link (to {target}), not a folder: the hub's set-up runs as root "
                f"and follows no link it did not make. Remove the link (rm {shown}) and run "
                "it again: it makes the folder itself"
            ) from None
        raise HubError(f"{shown} is not a folder") from None


def _as_account(pw: pwd.struct_passwd, action: Callable[[], None]) -> None:
    """Run ``action`` in a forked child that has become the account ``pw`` (its uid and
    group, no other group): whatever it touches, it touches with that account's rights."""
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then _exit
        code = 1
        try:
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            action()
            code = 0
        except BaseException as err:  # noqa: BLE001 - reported, then the child exits
            os.write(2, f"hub: as {pw.pw_name}: {err}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise HubError(f"the step run as {pw.pw_name} failed (its message is above)")


def hub_state(state: Path, roster: Roster) -> dict[str, str]:
    """The hub's secrets in ``state`` (mode 0700), made once: the learners' shared password
    and the instructor's admin password for SharedPasswordAuthenticator.

    ``state`` must be a folder of this process's own account, reached without following a
    link; each file is created with ``O_EXCL`` and read with ``O_NOFOLLOW`` inside it."""
    state = Path(state)
    state.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(state, 0o700)
    except FileExistsError:
        pass
    fd = _open_folder(state, state)
    try:
        owner = os.fstat(fd).st_uid
        if owner != os.geteuid():
            raise HubError(
                f"{state} is owned by uid {owner}, not by this account (uid {os.geteuid()}): "
                "the hub keeps its passwords only in a folder of its own"
            )
        os.fchmod(fd, 0o700)
        out = {}
        for name, size in (("learner_password", 12), ("admin_password", 40)):
            new = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                f = os.open(name, new, 0o600, dir_fd=fd)
                with os.fdopen(f, "w") as fh:
                    fh.write(secrets.token_urlsafe(size)[:size] + "\n")
            except FileExistsError:
                pass
            try:
                f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as err:
                raise HubError(f"{state / name} is not a plain file ({err.strerror})") from None
            with os.fdopen(f) as fh:
                out[name] = fh.read().strip()
        return out
    finally:
        os.close(fd)


def course_root() -> Path:
    """The course checkout (:func:`kvstaff.lessons.course_root`)."""
    from kvstaff.lessons import course_root as root

    return root()


def instructor_course(person: Person, homes: Path) -> Path:
    """The instructor's course folder ``~/key-vectors`` (mode 0700), made by the instructor.

    Runs as root in a home its owner controls, so it neither follows nor hands over anything
    there: the folder is checked through the home's descriptor without following a link,
    and made, when missing, by a process that has become the instructor (nothing is chowned).
    A link in its place (to a root-owned folder, say) or a folder that is someone else's is
    refused with :class:`HubError`, naming it."""
    pw = pwd.getpwnam(person.username)
    home, course = Path(pw.pw_dir), Path(pw.pw_dir) / COURSE_ID
    hfd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the path useradd made
    try:
        if (owner := os.fstat(hfd).st_uid) != pw.pw_uid:
            raise HubError(f"{home}, {person.username}'s home, is owned by uid {owner}")
        try:
            os.lstat(COURSE_ID, dir_fd=hfd)
        except FileNotFoundError:
            _as_account(pw, lambda: os.mkdir(course, 0o700))
        cfd = _open_folder(course, COURSE_ID, dir_fd=hfd)
        try:
            if (owner := os.fstat(cfd).st_uid) != pw.pw_uid:
                raise HubError(
                    f"{course} is owned by uid {owner}, not by {person.username}: the hub "
                    "hands nothing over in a home. Remove it, or chown it yourself if it "
                    "is the course folder"
                )
        finally:
            os.close(cfd)
    finally:
        os.close(hfd)
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
    except (RosterError, ExchangeError, HubError, PermissionError) as err:
        print(f"hub: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
