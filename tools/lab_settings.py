"""Install the course's Jupyter settings into the environment that runs this script.

    .venv/bin/python tools/lab_settings.py        # tools/setup_env.sh runs it every time

Copies, from ``jupyter/`` in the repository into ``sys.prefix`` (the venv):

* ``jupyter/learner/jupyter_server_config.d/*.json`` → ``etc/jupyter/jupyter_server_config.d/``
  — nbgrader's server extensions (formgrader, assignment list, ...) off;
* ``jupyter/learner/labconfig/page_config.json`` → ``etc/jupyter/labconfig/`` — nbgrader's
  JupyterLab extension (its menu, Validate button and Create Assignment panel) off;
* ``jupyter/lab-settings/overrides.json`` → ``share/jupyter/lab/settings/`` — JupyterLab
  defaults: no "Jupyter news" prompt, no update check, no extension manager.

So a plain ``jupyter lab`` from the venv (``make lab``) is the learners' lean Lab. Staff
switch nbgrader back on with ``JUPYTER_CONFIG_PATH=jupyter/staff`` (``make lab-staff``):
that folder ranks above the environment's settings. Nothing is written outside the venv
(not ``~/.jupyter``). Standard library only; safe to run again.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

SETTINGS = Path(__file__).resolve().parents[1] / "jupyter"
COPIES = (
    ("learner/jupyter_server_config.d", "etc/jupyter/jupyter_server_config.d"),
    ("learner/labconfig", "etc/jupyter/labconfig"),
    ("lab-settings", "share/jupyter/lab/settings"),
)


def covers(have, want) -> bool:
    """True if the JSON value ``have`` holds every setting of ``want`` (extra keys allowed:
    ``jupyter labextension list`` adds ``lockedExtensions`` to page_config.json, for one)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            k in have and covers(have[k], v) for k, v in want.items()
        )
    return have == want


def installed(target: Path, source: Path) -> bool:
    try:
        return covers(json.loads(target.read_text()), json.loads(source.read_text()))
    except (OSError, ValueError):
        return False


def install(prefix: Path = Path(sys.prefix)) -> list[Path]:
    """Copy the learner settings into ``prefix``; return the files written."""
    written = []
    for src, dest in COPIES:
        for f in sorted((SETTINGS / src).glob("*.json")):
            target = prefix / dest / f.name
            if installed(target, f):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
            written.append(target)
    return written


if __name__ == "__main__":
    for path in install():
        print(f"lab settings: wrote {path}")
