"""Files the course ships in ``data/`` (the package ``attnlib.data``), found through
:mod:`importlib.resources` so that a non-editable ``pip install`` finds them too."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np

from attnlib._validate import type_name

__all__ = ["DATA_PACKAGE", "data_file", "read_log_table", "train_command"]

DATA_PACKAGE = "attnlib.data"


def data_file(name: str) -> Path:
    """The path of the shipped file ``name`` (e.g. ``"agreement_corpus.tsv"``).

    The path is returned whether or not the file exists yet, so that a generator can write
    it; readers get a ``FileNotFoundError`` naming the command that makes it.
    """
    if not isinstance(name, str):
        raise TypeError(f"data_file: name must be a str, got {type_name(name)} {name!r}")
    if not name or "/" in name or "\\" in name:
        raise ValueError(f"data_file: name must be a plain file name, got {name!r}")
    ref = resources.files(DATA_PACKAGE) / name
    if not isinstance(ref, Path):
        raise RuntimeError(
            f"data_file: {DATA_PACKAGE} is not installed as plain files ({type_name(ref)}); "
            "install attnlib from a wheel or a checkout, not a zip"
        )
    return ref


def train_command(
    argv, doc: str, what: str, default_dir: Path, run: Callable[[Path, bool], str]
) -> None:
    """The ``python -m attnlib.tasks.<topic> --train [--out-dir DIR] [--progress]`` command
    that regenerates a lesson's shipped files.

    ``doc`` is the module's docstring (its first line describes the command).
    ``run(out_dir, progress)`` trains, writes the files into ``out_dir`` and returns one line
    to print (what was measured); the command adds the training time and the folder.
    ``what`` is the help text of ``--train`` (e.g. ``"train both models and save them"``).
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--train", action="store_true", help=what)
    parser.add_argument(
        "--out-dir", default=None, help=f"folder for the files (default {default_dir})"
    )
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    args = parser.parse_args(argv)
    if not args.train:
        parser.error("nothing to do: pass --train")
    out = Path(args.out_dir) if args.out_dir else default_dir
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    report = run(out, args.progress)
    print(f"{report}\ntrained and saved in {time.perf_counter() - t0:.1f} s; wrote {out}")


def read_log_table(path, command: str, columns=None) -> dict[str, np.ndarray]:
    """A shipped training log (tab-separated numbers under a header line) as a dict of
    column name -> float64 array, one entry per step. ``command`` (the one that writes the
    log) is named if the file is missing; ``columns``, if given, must be the header."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"read_log: {path} does not exist; run `{command}`")
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    if columns is not None and tuple(header) != tuple(columns):
        raise ValueError(f"read_log: {path} has columns {header}, expected {list(columns)}")
    table = np.array([ln.split("\t") for ln in lines[1:]], dtype=np.float64)
    return {c: table[:, i] for i, c in enumerate(header)}
