"""Files the course ships in ``data/`` (the package ``attnlib.data``), found through
:mod:`importlib.resources` so that a non-editable ``pip install`` finds them too."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from attnlib._validate import type_name

__all__ = ["DATA_PACKAGE", "data_file"]

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
