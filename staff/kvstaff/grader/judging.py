"""Judging, the grader's side of the exchange: inputs out, outputs read back and compared.

For each hidden-test region the grader runs, :func:`write_inputs` draws the exercise's
hidden cases with a seed picked now and writes their inputs to ``<exchange>/in/``;
after the kernel ran the region (and while it is stopped), :func:`judge` reads what
``record`` wrote to ``<exchange>/out/<exercise>/`` as plain data — JSON and ``.npy``
without pickle, every file opened below the exchange folder without following a link,
within byte budgets, headers checked before arrays are allocated — and compares it with
the grader's own reference (:func:`attnlib.checks.protocol.judge_observation`).
:func:`clear_outputs` empties ``out/`` before a run without following a link the kernel
put there. The layout is in :mod:`attnlib.checks.protocol`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import secrets
import stat
from pathlib import Path

import numpy as np
import torch

from attnlib._backend import type_name
from attnlib.checks._core import get_exercise, hidden_seed
from attnlib.checks.protocol import (
    MANIFEST,
    MAX_EXERCISE_BYTES,
    MAX_FILE_BYTES,
    MAX_MANIFEST_BYTES,
    TAMPER_TAG,
    Observation,
    Raised,
    Verdict,
    clean_name,
    judge_observation,
    refused_calls,
)
from kvstaff.grader import answer_keys
from kvstaff.grader.sandbox import remove_tree

_ndarray = np.ndarray
# The keys of the exercises whose answer is a choice live only here, in the grader's process.
answer_keys.install()
# Grader side: the seed of the hidden cases last written for (exchange folder, exercise).
_SEEDS: dict[tuple[str, str], int] = {}


class _Budget:
    """Bytes the grader may still read for one exercise; every file at most once."""

    def __init__(self, left: int):
        self.left, self.names = left, set()

    def take(self, name: str, size: int) -> None:
        if name in self.names:
            raise ValueError(f"{name} is named twice")
        self.names.add(name)
        self.left -= size
        if self.left < 0:
            raise ValueError("the outputs are larger than the grader reads")


def _open_inside(root: Path, parts: list[str]) -> int:
    """Open root/parts... for reading without following a symlink anywhere below root."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for i, part in enumerate(parts):
            if part in ("", ".", "..") or "/" in part:
                raise ValueError(f"bad name {part!r}")
            last = i == len(parts) - 1
            # O_NONBLOCK: a FIFO planted under a file's name must not hang the grader
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            raise ValueError(f"{'/'.join(parts)} is not a regular file of a sane size")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _check_npy_header(fh, size: int) -> None:
    """Refuse an ``.npy`` whose header does not describe what the file holds (then rewind).

    ``np.load`` allocates what the header claims before it reads: a 128-byte file can
    claim 8 TiB. Only plain numeric dtypes, and no more data than the file's bytes.
    """
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    if version == (1, 0):
        shape, _, dtype = fmt.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, _, dtype = fmt.read_array_header_2_0(fh)
    else:
        raise ValueError(f"an .npy file of format version {version}")
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"an array of dtype {dtype}")
    if dtype.kind not in "biuf" or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"an array of dtype {dtype} and shape {shape}")
    if math.prod(shape) * dtype.itemsize > size - fh.tell():
        raise ValueError(f"an .npy header claims shape {shape} of {dtype}: more than the file")
    fh.seek(0)


def _decode(entry: dict, root: Path, sub: list[str], depth: int = 0, budget=None):
    t = entry.get("t")
    if t == "raised":
        return Raised(clean_name(entry.get("name", "Exception")), "")
    if t == "none":
        return None
    if t == "number":
        v = entry.get("v")
        kind = {"bool": bool, "int": int, "float": float}.get(entry.get("type"))
        if kind is None or type(v) not in (bool, int, float):
            raise ValueError("bad number")
        return kind(v)
    if t in ("ndarray", "tensor"):
        name = str(entry.get("f"))
        fd = _open_inside(root, [*sub, name])
        if budget is not None:
            try:
                budget.take(name, os.fstat(fd).st_size)
            except ValueError:
                os.close(fd)
                raise
        with os.fdopen(fd, "rb") as fh:
            _check_npy_header(fh, os.fstat(fh.fileno()).st_size)
            arr = np.load(fh, allow_pickle=False)
        if type(arr) is not _ndarray or arr.dtype.kind not in "biuf":
            raise ValueError("bad array")
        if t == "ndarray":
            return arr
        out = torch.from_numpy(arr)
        dtype = getattr(torch, str(entry.get("dtype", "")).removeprefix("torch."), None)
        return out.to(dtype) if isinstance(dtype, torch.dtype) else out
    if t in ("tuple", "list") and depth == 0:
        items = [_decode(e, root, sub, depth + 1, budget) for e in entry.get("items", [])[:16]]
        return tuple(items) if t == "tuple" else items
    if t == "other":
        return type(clean_name(entry.get("name", "object")), (), {})()
    raise ValueError(f"unknown entry {t!r}")


def write_inputs(exercise: str, exchange: Path) -> int:
    """Grader side: put the inputs of every case of ``exercise`` where record() finds them."""
    seed = _SEEDS[(str(exchange), exercise)] = secrets.randbits(32)
    with hidden_seed(seed):  # drawn now: no table made in advance has these inputs
        cases = get_exercise(exercise).cases(hidden=True)
    data = {
        "exercise": exercise,
        "cases": [(c.args, c.kwargs) for c in cases],
        "refused": refused_calls(exercise),
    }
    inbox = Path(exchange) / "in"
    tmp = inbox / f".{exercise}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        _share_like_folder(fh.fileno(), inbox)
        pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, inbox / f"{exercise}.pkl")
    return len(cases)


def _share_like_folder(fd: int, folder: Path) -> None:
    """Give the file ``fd`` the group of ``folder`` and its group's read bit, nothing more.

    In a sandbox graded as root, ``in/`` is ``0750`` for the kernel's own group: the inputs
    become ``0640`` of that group, readable by the kernel and by no other account. As an
    ordinary user (``in/`` ``0700``, the kernel keeps the user's uid) they stay ``0600``.
    """
    st = os.stat(folder)
    if os.geteuid() == 0 and st.st_mode & stat.S_IRGRP:
        os.fchown(fd, -1, st.st_gid)
        os.fchmod(fd, 0o640)


def clear_inputs(exchange: Path) -> None:
    for p in (Path(exchange) / "in").glob("*.pkl"):
        p.unlink()


def judge(exercise: str, exchange: Path) -> Verdict:
    """Grader side: read what the kernel wrote for ``exercise`` and decide, as plain data."""
    root = Path(exchange)
    sub = ["out", exercise]
    with hidden_seed(_SEEDS.get((str(exchange), exercise))):
        try:
            return _judge(exercise, root, sub)
        except _UNREADABLE as err:  # whatever the outputs were, one exercise scores 0
            msg = f"{TAMPER_TAG} the grader could not read or judge the outputs"
            why = f"{type_name(err)}: {str(err)[:200]}"
            return Verdict(exercise, False, f"✘ {exercise}: {msg} ({why})", review=True)


# what reading or judging a kernel's outputs may raise: a flagged 0, never a failed run
_UNREADABLE = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    MemoryError,
    RecursionError,
    EOFError,
    OverflowError,
    UnicodeError,
)


def _judge(exercise: str, root: Path, sub: list[str]) -> Verdict:
    try:
        fd = _open_inside(root, [*sub, MANIFEST])
    except FileNotFoundError:
        return Verdict(
            exercise,
            False,
            f"✘ {exercise}: {TAMPER_TAG} the hidden tests did not run: check_hidden was not "
            f"reached, was replaced, or the kernel stopped it",
            review=True,
        )
    except (OSError, ValueError) as err:
        return Verdict(exercise, False, f"✘ {exercise}: {TAMPER_TAG} bad outputs ({err})", True)
    try:
        with os.fdopen(fd, "rb") as fh:
            manifest = json.loads(fh.read(MAX_MANIFEST_BYTES + 1).decode("utf-8"))
        entries = manifest["outputs"]
        n = len(get_exercise(exercise).cases(hidden=True))
        if type(entries) is not list or len(entries) != n:  # before reading any array
            raise ValueError(f"{len(entries)} results for {n} cases")
        budget = _Budget(MAX_EXERCISE_BYTES)
        outputs = [_decode(e, root, sub, budget=budget) for e in entries]
        calls = [str(c) for c in manifest.get("calls", [])][:50]
        problems = [str(p)[:300] for p in manifest.get("tampering", [])][:20]
    except _UNREADABLE as err:
        msg = f"✘ {exercise}: {TAMPER_TAG} the hidden tests wrote unreadable outputs ({err})"
        return Verdict(exercise, False, msg, review=True)
    return judge_observation(exercise, Observation(outputs, calls, problems))


def clear_outputs(exchange: Path) -> None:
    """Empty ``<exchange>/out/`` before a hidden run: nothing left over from an earlier run
    counts. Never through a link: ``out/`` itself must be a real folder (``OSError`` if
    the kernel managed to replace it), a link inside it is removed as a link."""
    remove_tree(Path(exchange) / "out", keep_root=True)
