"""One sandbox per graded submission: bubblewrap around the kernel nbgrader starts.

nbgrader stays the engine; only the kernel process is put in a box. The grading driver
(:mod:`kvstaff.grader.autograde`) gives each submission a fresh host folder::

    /tmp/kv-sbx-XXXX/         the sandbox root (short: it holds unix sockets)      0710
        work/                 the kernel's working folder: a copy of the submission's   0700
                              notebook
        run/                  the connection file and the kernel's ipc sockets          0700
        exchange/             hidden-test inputs (written by the grader) and outputs    0750
            in/               the grader's inputs (``<exercise>.pkl``, 0640)            0750
            out/              what the kernel recorded                                  0700

No other account may read any of it (a learner polling ``/tmp`` while the instructor grades
would otherwise copy classmates' notebooks and the hidden inputs): when grading runs as
root, the root, ``exchange/`` and ``in/`` belong to root and the kernel's *group*
(``64000 + slot``, a gid no account has), the kernel's three folders to the kernel's uid;
as an ordinary staff user everything is that user's, with no group or other bits at all.
Every file the grader puts there is created ``0600`` (the inputs ``0640`` to the kernel's
group), and the kernel runs with umask ``077``. See :meth:`Sandbox.modes`.

and :func:`command` wraps the kernel's argv (``python -m ipykernel_launcher -f ...``) in

    bwrap --die-with-parent --unshare-pid --unshare-net --unshare-ipc --unshare-uts
          --unshare-cgroup-try --clearenv
          --ro-bind /usr /usr  (+ /lib, /lib64, /bin as in the host)  --proc /proc --dev /dev
          --ro-bind <python installation> --ro-bind <venv> --ro-bind <attnlib> --ro-bind <data>
          --tmpfs <kvstaff> --remount-ro (the staff package, were it bound: an empty folder)
          --size 512MiB --tmpfs /tmp     --ro-bind <root> <root>  --chdir <root>/work
          --bind <root>/work, <root>/run, <root>/exchange/out (each onto itself)
          -- python -I -S -c LAUNCHER --uid 64000+slot --as 6GiB --cpu 900 ... -- <kernel argv>

What the kernel then sees and can do:

* **Files**: the system's /usr, the Python installation, the venv and the course package
  (attnlib and its data) — all read-only, with the grader wing (this package, and with it
  the answer keys) replaced by an empty folder; its own folder; a private /tmp. Nothing else of
  the course folder exists in its world: no gradebook.db, no submitted/, autograded/,
  feedback/, other learners, or the repository's other files. The course package is
  bound read-only, so no bytecode (``__pycache__``) can be written where another kernel
  would read it; ``PYTHONDONTWRITEBYTECODE=1`` is set as well. Its folder holds only the
  notebook (:meth:`Sandbox.fill_work`) and is not on ``sys.path`` (``PYTHONSAFEPATH=1``):
  nothing there can shadow an installed module. Submissions holding links, FIFOs or
  devices are refused before nbgrader copies them (:func:`inspect_submission`).
* **Network**: none (``--unshare-net``: only its own loopback). The kernel talks to
  nbgrader over zmq's *ipc* transport, unix sockets in ``run/``, the one folder both sides
  see (TCP on loopback would not cross the network namespace).
* **Identity**: when grading runs as root, the launcher drops to uid/gid ``64000 + slot``
  (one uid per parallel worker, no groups, no capabilities; bwrap sets no_new_privs and
  mounts everything nosuid). Not as root, bwrap makes a user namespace and the kernel
  keeps the staff user's uid — it still sees only the folders above.
* **Processes**: its own pid namespace; the kernel dies with the grader (``--die-with-parent``).
* **Limits** (``setrlimit`` in the launcher, before the kernel starts): address space,
  CPU seconds, size of a written file, number of processes (per uid, so only as root).
  All per process: a kernel that forks gets them again in every child, and the folders
  above are on the host's /tmp (only one file's size is capped). See the README's
  "Not defended".

Where bubblewrap cannot run (macOS, a kernel without user namespaces) :func:`unavailable`
says why; the driver then refuses to grade unless told ``--unsafe-no-sandbox``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

from attnlib.checks.protocol import EXCHANGE_ENV, FEEDBACK_ENV

__all__ = [
    "Limits",
    "Sandbox",
    "SandboxKernelManager",
    "bwrap_path",
    "command",
    "inspect_submission",
    "notebook_problems",
    "read_submitted_notebook",
    "readonly_paths",
    "unavailable",
]

UID_BASE = 64000  # the kernel's uid when grading runs as root: UID_BASE + worker slot
SANDBOX_PREFIX = "kv-sbx-"  # /tmp/kv-sbx-XXXX: one sandbox's host folder

# Runs inside the sandbox before the kernel: set the limits, drop to the sandbox uid, exec.
# Plain standard library, started with `python -I -S` (no site, no environment) so that it
# costs ~20 ms and trusts nothing of the environment.
LAUNCHER = r"""
import os, resource, sys
args = sys.argv[1:]
cut = args.index("--")
opts, argv = dict(zip(args[:cut:2], args[1:cut:2])), args[cut + 1:]
for key, name in (("--as", "RLIMIT_AS"), ("--cpu", "RLIMIT_CPU"),
                  ("--fsize", "RLIMIT_FSIZE"), ("--nproc", "RLIMIT_NPROC")):
    if key in opts:
        n = int(opts[key])
        resource.setrlimit(getattr(resource, name), (n, n))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if "--uid" in opts:
    uid = int(opts["--uid"])
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        sys.exit("sandbox launcher: could not drop root")
if "--log" in opts:  # the kernel's own stdout/stderr (start-up notes, fatal errors)
    fd = os.open(opts["--log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
os.umask(0o077)  # nothing the kernel writes is for other accounts to read
os.execvp(argv[0], argv)
"""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed kernel (``setrlimit``; ``None`` = no limit)."""

    memory_bytes: int | None = 6 * 2**30  # address space (torch reserves a lot of it)
    cpu_seconds: int | None = 900  # CPU time of the kernel process, all cells together
    file_bytes: int | None = 512 * 2**20  # largest file the kernel may write
    processes: int | None = 512  # threads count too; per uid, so applied only as root
    tmp_bytes: int = 512 * 2**20  # size of the private /tmp (memory-backed)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _package_dirs(resolve: bool = True) -> list[Path]:
    dirs = []
    for name in ("attnlib", "attnlib.data"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            paths = [Path(p) for p in spec.submodule_search_locations]
            dirs += [p.resolve() for p in paths] if resolve else paths
    return dirs


def readonly_paths() -> list[Path]:
    """What a kernel may read besides the system: Python, the venv, attnlib and its data."""
    # Not sys.path: it holds the current folder (the course folder, gradebook.db and all)
    # when the driver runs as `python -m kvstaff.gradebook`.
    paths = [Path(sys.base_prefix), Path(sys.base_exec_prefix), Path(sys.prefix)]
    scheme = sysconfig.get_paths()
    paths += [
        Path(scheme[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in scheme
    ]
    paths += _package_dirs()
    out: list[Path] = []
    for p in sorted({q.resolve() for q in paths if q.exists()}, key=lambda q: len(q.parts)):
        if any(p == o or o in p.parents for o in out):
            continue  # already inside a bound folder
        if p == Path("/") or p.parts[1:2] == ("usr",):
            continue  # /usr is bound anyway
        if p == Path("/tmp") or (
            p.parts[1:2] == ("tmp",) and p.parts[2].startswith(SANDBOX_PREFIX)
        ):
            continue  # the sandboxes' own folders (a course checked out under /tmp is fine)
        out.append(p)
    return out


def _system_binds() -> list[str]:
    """/usr read-only, and /bin, /lib, /lib64, /sbin as the host has them (usrmerge links)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/alternatives"):
        if os.path.exists(etc):
            args += ["--ro-bind", etc, etc]
    return args


def _spellings() -> list[Path]:
    """Paths the kernel is started or finds its packages by, as spelt (not resolved)."""
    return [Path(sys.executable), Path(sys.prefix), *_package_dirs(resolve=False)]


def _link_binds(bound: list[Path]) -> list[str]:
    """``--symlink`` for every link on the way to the venv's python or attnlib.

    ``.venv`` may be a link to a venv elsewhere (and an editable install may point at
    another checkout): the sandbox binds the resolved folders, and recreates the links by
    which ``sys.executable`` and the packages are reached, so that both spellings work.
    """
    args: list[str] = []
    made: set[Path] = set()
    for path in _spellings():
        path = Path(os.path.abspath(path))
        for p in [*reversed(path.parents), path]:
            if any(q in made for q in (p, *p.parents)) or not p.is_symlink():
                continue  # made already, or reached through a link made already
            if any(p == b or b in p.parents for b in bound):
                continue  # inside a bound folder: the link is there as it is
            target = p.resolve()
            if not any(target == b or b in target.parents for b in bound):
                continue  # leads to nothing the sandbox has (an unrelated link)
            made.add(p)
            args += _parent_dirs([p])
            args += ["--symlink", str(target), str(p)]
    return args


def _parent_dirs(paths: list[Path]) -> list[str]:
    """``--dir`` for every folder above a bind, world-readable (bwrap makes them 0700)."""
    args: list[str] = []
    seen: set[Path] = set()
    for p in paths:
        for parent in reversed(p.parents):
            if parent in (Path("/"), Path("/tmp")) or parent in seen:
                continue
            seen.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


@dataclass
class Sandbox:
    """The host folder and identity of one sandboxed kernel; see the module docstring."""

    slot: int = 0
    limits: Limits = field(default_factory=Limits)
    root: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=SANDBOX_PREFIX, dir="/tmp"))  # 0700 already
        for sub in ("work", "run", "exchange", "exchange/in", "exchange/out"):
            (self.root / sub).mkdir(mode=0o700)
        # exchange/ and exchange/in/ stay the grader's (read-only for the kernel, and bound
        # read-only below for when there is no uid switch); the kernel writes exchange/out/.
        for rel, mode in self.modes().items():
            path = self.root / rel
            if rel in ("work", "run", "exchange/out"):
                self._own(path)
            elif self.uid is not None:  # the grader's, reachable for the kernel's group only
                os.chown(path, -1, self.uid, follow_symlinks=False)
            os.chmod(path, mode)  # made just now, in a 0700 folder: never a link

    def modes(self) -> dict[str, int]:
        """The mode of the root (``"."``) and of each folder in it.

        With a uid switch (grading as root) the kernel reaches the grader's folders through
        its group, a gid of its own that no account has; without one (an ordinary staff
        user, whose kernel keeps that uid) every folder is the user's own and nothing is
        open to a group or to others. Either way no other account can list or enter any of
        them, nor read a file inside.
        """
        shared = self.uid is not None
        return {
            ".": 0o710 if shared else 0o700,
            "work": 0o700,
            "run": 0o700,
            "exchange": 0o750 if shared else 0o700,
            "exchange/in": 0o750 if shared else 0o700,
            "exchange/out": 0o700,
        }

    @property
    def uid(self) -> int | None:
        """The kernel's uid, or None when grading does not run as root (no switch)."""
        return UID_BASE + self.slot if os.geteuid() == 0 else None

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def exchange(self) -> Path:
        return self.root / "exchange"

    def _own(self, path: Path) -> None:
        if self.uid is not None:  # never through a symlink the kernel may have planted
            os.chown(path, self.uid, self.uid, follow_symlinks=False)

    def hand_over(self, path: Path) -> None:
        """Make a file the grader wrote (connection file, copied submission) the kernel's."""
        self._own(path)
        if path.is_dir() and not path.is_symlink():
            for p in path.rglob("*"):
                self._own(p)

    def fill_work(self, folder: Path | None) -> None:
        """Copy the submission's notebook(s) — nothing else — into work/.

        Only regular ``*.ipynb`` files at the top of the folder are copied, never through
        a link: a file handed in beside the notebook (an ``attnlib/`` package that would
        shadow the installed one, a symlink to another learner's work) never reaches the
        kernel. (The driver refuses such submissions before nbgrader copies anything:
        :func:`inspect_submission`.)
        """
        if folder is not None and Path(folder).is_dir():
            for entry in os.scandir(folder):
                if entry.name.endswith(".ipynb") and entry.is_file(follow_symlinks=False):
                    copy = self.work / entry.name
                    shutil.copyfile(entry.path, copy, follow_symlinks=False)
                    os.chmod(copy, 0o600)  # before the kernel starts: not a link
        self.hand_over(self.work)

    def command(self, argv: list[str], threads: int | None = None, log: bool = True) -> list[str]:
        return command(argv, self, threads=threads, log=log)

    def cleanup(self) -> None:
        """Remove the sandbox's host folder, however deep the kernel nested it."""
        with contextlib.suppress(OSError):
            remove_tree(self.root)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _open_dir(name: str | Path, dir_fd: int | None = None) -> int:
    """Open a folder, never through a link; one the kernel made unreadable is made readable
    first (the grader owns it when grading runs as root or as the kernel's own uid)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=dir_fd, follow_symlinks=False)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def remove_tree(path: Path, keep_root: bool = False) -> None:
    """Delete ``path`` and everything below it without following a symbolic link.

    Iterative, one directory file descriptor open at a time (plus its parent while going
    up): 2,500 nested folders cost neither recursion nor file descriptors, and a link the
    kernel planted anywhere below (``out/`` replaced by a link to ``submitted/``) is
    removed as a link, never followed. ``path`` itself must be a real folder (``O_NOFOLLOW``:
    a link there raises ``OSError``). With ``keep_root`` only its contents go.
    """
    fd = _open_dir(path)
    root = os.fstat(fd)
    names: list[str] = []  # the folders entered below path, in order
    pending: list[list[str]] = [[]]  # per level: sub-folders still to remove
    try:
        while True:
            subdirs = pending[-1]
            if not subdirs:
                with os.scandir(fd) as it:
                    for entry in it:
                        if entry.is_dir(follow_symlinks=False):
                            subdirs.append(entry.name)
                        else:
                            os.unlink(entry.name, dir_fd=fd)
            if subdirs:
                name = subdirs[-1]
                try:
                    child = _open_dir(name, dir_fd=fd)
                except FileNotFoundError:
                    subdirs.pop()
                    continue
                os.close(fd)
                fd = child
                names.append(name)
                pending.append([])
                continue
            # this folder is empty: go up and remove it there
            pending.pop()
            if not names:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            name = names.pop()
            pending[-1].pop()
            os.rmdir(name, dir_fd=fd)
            here = os.fstat(fd)
            if not names and (here.st_ino, here.st_dev) != (root.st_ino, root.st_dev):
                raise OSError(f"remove_tree: {path} was moved while it was being removed")
    finally:
        os.close(fd)
    if not keep_root:
        os.rmdir(path)


_HARMLESS_DIRS = {".ipynb_checkpoints"}  # Jupyter's autosaves (never given to the kernel)
_EXCHANGE_FILES = {"timestamp.txt", "submission_secret.txt"}  # written by nbgrader's exchange
# A handed-in notebook past these is refused before any kernel runs it (the largest lesson,
# outputs included, is ~1.5 MB with 103 cells, 39 of them code, and 41 outputs). Every count
# is made on the notebook as nbgrader reads it: nbformat 4 (nbformat 3 and older refused).
MAX_NOTEBOOK_BYTES = 20 * 2**20
MAX_CODE_CELLS = 500
MAX_CELLS = 2000  # all cells: nbgrader's preprocessors walk each one
MAX_OUTPUTS = 10_000  # outputs handed in (cleared before grading, but read and validated)
NBFORMAT = 4


def read_submitted_notebook(path: str | Path, rel: str | None = None):
    """``(notebook, reasons to refuse)``: a handed-in notebook read as nbgrader reads it.

    Read once, never through a link and never waiting on a FIFO, at most
    :data:`MAX_NOTEBOOK_BYTES`, by nbformat's own steps: the same JSON nbgrader will see
    (duplicate keys and all), and for version 4 the same notebook
    ``nbformat.read(..., as_version=4)`` returns, nothing converted. A notebook of another
    major version is refused rather than converted: nbformat 3 keeps its cells under
    ``worksheets`` (the shape a cap on ``cells`` once missed), every Jupyter since 2015
    saves version 4 and the course releases version 4, so only a hand-made file is older,
    and opening it in Jupyter and saving it converts it; one shape means every check, the
    audit and the report read what nbgrader ran. The notebook is ``None`` when it is
    refused for what it is (size, encoding, JSON, version); the caps on its cells and
    outputs are :func:`notebook_problems`'.
    """
    from nbformat import reader, versions

    rel = rel or Path(path).name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None, [f"{rel!r} is not a regular file"]
            data = fh.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as err:
        return None, [f"cannot read {rel!r}: {err.strerror}"]
    if len(data) > MAX_NOTEBOOK_BYTES:
        return None, [f"{rel!r} is more than {MAX_NOTEBOOK_BYTES // 2**20} MiB"]
    try:  # nbformat.read's own steps (json.loads, then the version's reader), one by one
        raw = reader.parse_json(data.decode("utf-8"))
        major, minor = reader.get_version(raw)
        if major != NBFORMAT or type(major) is not int:
            return None, [
                f"{rel!r} is in nbformat {major!r}, not {NBFORMAT}: the grader reads only "
                f"nbformat {NBFORMAT} (open it in Jupyter and save it, which converts it)"
            ]
        nb = versions[NBFORMAT].to_notebook_json(raw, minor=minor)
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError, MemoryError) as err:
        why = type(err).__name__
        return None, [f"{rel!r} is not a notebook the grader can read ({why})"]
    return nb, []


def notebook_problems(path: str | Path, rel: str | None = None) -> list[str]:
    """Reasons to refuse a handed-in notebook: unreadable, not nbformat 4, or past a cap.

    Caps, all counted on the nbformat 4 notebook (:func:`read_submitted_notebook`):
    :data:`MAX_NOTEBOOK_BYTES`, :data:`MAX_CELLS` cells, :data:`MAX_CODE_CELLS` code cells,
    :data:`MAX_OUTPUTS` outputs.
    """
    rel = rel or Path(path).name
    nb, refuse = read_submitted_notebook(path, rel)
    if nb is None:
        return refuse
    cells = nb.get("cells")
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        return [f"{rel!r} is not a notebook the grader can read (its cells are not a list)"]
    code = [c for c in cells if c.get("cell_type") == "code"]
    outputs = sum(len(o) for c in code if isinstance(o := c.get("outputs"), list))
    if len(cells) > MAX_CELLS:
        refuse.append(f"{rel!r} has {len(cells)} cells (more than {MAX_CELLS})")
    if len(code) > MAX_CODE_CELLS:
        refuse.append(f"{rel!r} has {len(code)} code cells (more than {MAX_CODE_CELLS})")
    if outputs > MAX_OUTPUTS:
        refuse.append(f"{rel!r} holds {outputs} outputs (more than {MAX_OUTPUTS})")
    return refuse


def _notebook_too_big(path: str, rel: str, size: int) -> list[str]:
    """Reasons to refuse a top-level notebook (its size first: nothing past it is read)."""
    if size > MAX_NOTEBOOK_BYTES:
        return [f"{rel!r} is {size / 2**20:.1f} MiB (more than {MAX_NOTEBOOK_BYTES // 2**20} MiB)"]
    return notebook_problems(path, rel)


def inspect_submission(folder: Path, limit: int = 200) -> tuple[list[str], list[str]]:
    """(reasons to refuse, reasons to review) for a submission folder, before grading.

    Walks ``folder`` with ``lstat`` (never following a link). Anything that is not a
    regular file or a folder — a symlink (to gradebook.db, another learner's notebook,
    /etc/shadow), a FIFO, a device, a socket — is a reason to refuse: nbgrader's own copy
    into ``autograded/`` would follow it, as the staff user. A regular file other than a
    top-level notebook (``attnlib/__init__.py`` beside the notebook) is a reason to review:
    the kernel never sees it (:meth:`Sandbox.fill_work`), but no lesson asks for it. A
    notebook that is not nbformat 4, or past a cap counted on its nbformat 4 form
    (:func:`notebook_problems`), is refused too.
    """
    refuse: list[str] = []
    review: list[str] = []
    root = Path(folder)
    seen = 0
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError as err:
            refuse.append(f"cannot list {here}: {err.strerror}")
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                refuse.append(f"more than {limit} files in the submission folder")
                return refuse, review
            rel = os.path.relpath(entry.path, root)
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                refuse.append(f"{rel!r} is a symbolic link (to {os.readlink(entry.path)!r})")
            elif stat.S_ISDIR(mode):
                if rel.split(os.sep)[0] not in _HARMLESS_DIRS:
                    review.append(f"a folder {rel + '/'!r} was handed in beside the notebook")
                stack.append(Path(entry.path))
            elif not stat.S_ISREG(mode):
                refuse.append(f"{rel!r} is not a regular file (a FIFO, device or socket)")
            elif rel.split(os.sep)[0] in _HARMLESS_DIRS:
                continue
            elif here == root and entry.name in _EXCHANGE_FILES:
                continue
            elif here != root or not entry.name.endswith(".ipynb"):
                review.append(f"a file {rel!r} was handed in beside the notebook")
            else:
                size = entry.stat(follow_symlinks=False).st_size
                refuse += _notebook_too_big(entry.path, rel, size)
    return refuse, review


def _launcher_args(sandbox: Sandbox, log: bool = True) -> list[str]:
    lim = sandbox.limits
    args = [sys.executable, "-I", "-S", "-c", LAUNCHER]
    for flag, value in (
        ("--as", lim.memory_bytes),
        ("--cpu", lim.cpu_seconds),
        ("--fsize", lim.file_bytes),
        ("--nproc", lim.processes if sandbox.uid is not None else None),
        ("--uid", sandbox.uid),
        ("--log", sandbox.run / "kernel.log" if log else None),
    ):
        if value is not None:
            args += [flag, str(value if flag == "--log" else int(value))]
    return args + ["--"]


def command(
    argv: list[str], sandbox: Sandbox, threads: int | None = None, log: bool = True
) -> list[str]:
    """The bwrap command line that runs ``argv`` (a kernel) inside ``sandbox``.

    With ``log``, the process's stdout and stderr go to ``run/kernel.log``.

    Long: the command line is written out in the order bwrap applies it (namespaces,
    system, private /tmp, read-only binds, the kernel's three writable folders, links,
    environment), so that one reading shows everything the kernel will see.
    """
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError("bwrap (bubblewrap) is not installed")
    ro = readonly_paths()
    home = "/tmp"  # the private tmpfs: IPython's and matplotlib's caches go there
    cmd = [bwrap, "--die-with-parent"]
    if os.geteuid() != 0:
        cmd += ["--unshare-user"]
    cmd += [
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        *_system_binds(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(sandbox.limits.tmp_bytes),
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        str(64 * 2**20),
        "--tmpfs",
        "/dev/shm",
        *_parent_dirs([*ro, sandbox.root]),
    ]
    for p in ro:
        cmd += ["--ro-bind", str(p), str(p)]
    # The staff package is not the kernel's to read, answer keys included: it lives outside
    # attnlib (nothing above binds it), and should it sit inside a bound folder (installed
    # into the venv's site-packages), an empty, read-only folder takes its place.
    staff = str(Path(__file__).resolve().parents[1])
    cmd += ["--perms", "0555", "--tmpfs", staff, "--remount-ro", staff]
    # The kernel may write in work/, run/ and exchange/out/ only, and none of the three can
    # be renamed or replaced from inside (each is a mount point in a read-only parent): the
    # grader, which reads and clears them as the staff user when grading is not run as
    # root, never meets a link the kernel put in their place.
    root, inbox = str(sandbox.root), str(sandbox.exchange / "in")
    cmd += ["--ro-bind", root, root]
    for rw in (sandbox.work, sandbox.run, sandbox.exchange / "out"):
        cmd += ["--bind", str(rw), str(rw)]
    cmd += ["--ro-bind", inbox, inbox]
    cmd += _link_binds(ro)
    cmd += ["--chdir", str(sandbox.work)]
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": home,
        "USER": "learner",
        "LOGNAME": "learner",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        # the working folder is not on sys.path (IPython honours sys.flags.safe_path): no
        # file there can shadow an installed module
        "PYTHONSAFEPATH": "1",
        "PYTHONNOUSERSITE": "1",
        "MPLCONFIGDIR": "/tmp/matplotlib",
        "IPYTHONDIR": "/tmp/ipython",
        EXCHANGE_ENV: str(sandbox.exchange),
        # the checks name every mistake's cause at once and end with its ids, which the
        # class report reads back (a learner's own kernel asks a question first)
        FEEDBACK_ENV: "record",
    }
    if threads:
        env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd += ["--clearenv"]
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    return [*cmd, "--", *_launcher_args(sandbox, log), *argv]


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why no kernel can be sandboxed here (None when bubblewrap works)."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux (this is {sys.platform})"
    if bwrap_path() is None:
        return "bwrap (Debian/Ubuntu package bubblewrap) is not installed"
    box = Sandbox(slot=0)
    try:
        probe = (  # finds the course package without importing torch: ~0.1 s
            "import importlib.util as u, os, sys\n"
            "missing = [n for n in ('attnlib', 'torch') if u.find_spec(n) is None]\n"
            "if missing: sys.exit('KV-PROBE cannot import ' + ', '.join(missing))\n"
            "sys.stdout.write(str(os.getuid()))"
        )
        argv = box.command([sys.executable, "-c", probe], log=False)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bwrap could not start: {err}"
        if done.returncode != 0:
            return _probe_failure(done.stderr)
        if box.uid is not None and done.stdout.strip() != str(box.uid):
            return f"the sandbox did not switch to uid {box.uid} (got {done.stdout.strip()!r})"
        return None
    finally:
        box.cleanup()


def _probe_failure(stderr: str) -> str:
    """Why the probe failed, naming the path the sandbox could not use when that is why."""
    lines = stderr.strip().splitlines() or ["no message"]
    tail = lines[-1]
    bound = ", ".join(str(p) for p in readonly_paths())
    if any("KV-PROBE cannot import" in ln for ln in lines):
        what = next(ln for ln in lines if "KV-PROBE" in ln).split("cannot import ", 1)[1]
        where = ", ".join(str(p) for p in _package_dirs(resolve=False)) or "not found"
        return (
            f"{what} cannot be imported inside the sandbox (attnlib is installed from "
            f"{where}; the sandbox binds read-only: {bound})"
        )
    if "execvp" in stderr or "No such file" in tail or "Can't" in tail:
        return (
            f"the sandbox could not use the path in this message: {tail} (python is "
            f"{sys.executable}, real path {Path(sys.executable).resolve()}; the sandbox "
            f"binds read-only: {bound})"
        )
    return f"bwrap could not start a sandbox here: {tail}"


class SandboxKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs inside a :class:`Sandbox` (ipc transport).

    Set ``sandbox`` before the kernel starts. The connection file and the sockets live in
    the sandbox's ``run/`` folder; interrupts are sent as messages (a signal to bwrap's
    process group does not reach into the pid namespace reliably).
    """

    sandbox: Sandbox | None = None
    threads: int | None = None

    def use(self, sandbox: Sandbox, threads: int | None = None) -> None:
        self.sandbox = sandbox
        self.threads = threads
        self.transport = "ipc"
        self.ip = str(sandbox.run / "kernel")
        self.connection_file = str(sandbox.run / "kernel.json")
        if self.kernel_spec is not None:
            self.kernel_spec.interrupt_mode = "message"

    def write_connection_file(self, **kwargs):
        """Write the connection file, never through a link the kernel left in run/.

        run/ is the kernel's: before a restart it could replace ``kernel.json`` by a link
        to a file of the staff user, which a plain write would follow.
        """
        if self.sandbox is not None and self.connection_file:
            path = Path(self.connection_file)
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISREG(os.lstat(path).st_mode) or os.lstat(path).st_nlink != 1:
                    os.unlink(path)
                    self._connection_file_written = False
        return super().write_connection_file(**kwargs)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        if self.sandbox is None:
            return cmd
        self.sandbox.hand_over(Path(self.connection_file))
        return self.sandbox.command(cmd, threads=self.threads)


def main() -> int:
    """``python -m kvstaff.sandbox``: can graded kernels be sandboxed here?"""
    why = unavailable()
    if why:
        print(f"sandbox: NOT available: {why}")
        return 1
    box = Sandbox()
    try:
        print(f"sandbox: ok ({bwrap_path()}; kernel uid {box.uid or 'unchanged'})")
        print("read-only:", ", ".join(str(p) for p in readonly_paths()))
    finally:
        box.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
