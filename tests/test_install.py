"""attnlib installs as an ordinary package: a wheel, not an editable checkout.

The wheel is built from a copy of the project's sources (so the checkout gains no build/
or egg-info), installed with ``pip install --target`` into a temporary folder, and used from
a process whose working folder is outside the checkout: every module imports, and lesson
09's shipped corpus and trained weights load through ``importlib.resources``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import importlib, json, pkgutil, sys
import attnlib
mods = sorted(m.name for m in pkgutil.walk_packages(attnlib.__path__, "attnlib."))
for name in mods:
    importlib.import_module(name)
from attnlib.tasks import corpus, syntax
sentences = corpus.load_corpus()
model = syntax.load_model()
n_params = sum(p.numel() for p in model.parameters())
print(json.dumps({
    "attnlib": attnlib.__file__,
    "corpus": str(corpus.CORPUS_PATH),
    "weights": str(syntax.WEIGHTS_PATH),
    "sentences": len(sentences),
    "params": n_params,
    "modules": mods,
}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("attnlib", "data"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    wheels = tmp_path_factory.mktemp("wheels")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = pip + ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels)]
    subprocess.run(build + [str(src)], check=True, capture_output=True, cwd=src)
    (wheel,) = wheels.glob("attnlib-*.whl")
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        pip + ["install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return target


def test_wheel_carries_the_data_and_the_lecture_templates(installed):
    files = {str(p.relative_to(installed)) for p in installed.rglob("*") if p.is_file()}
    for name in (
        "attnlib/data/agreement_corpus.tsv",
        "attnlib/data/syntax_model.pt",
        "attnlib/data/plays.txt",
        "attnlib/course/lecture_templates/kv_reveal/index.html.j2",
    ):
        assert name in files, f"{name} is missing from the wheel"


def test_installed_package_imports_and_loads_lesson_data_outside_the_checkout(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KEY_VECTORS_ROOT")}
    env["PYTHONPATH"] = str(installed)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("attnlib", "corpus", "weights"):
        assert Path(got[key]).is_relative_to(installed), (key, got[key], "not the installed copy")
    assert got["sentences"] == 3000
    assert got["params"] > 1000
    on_disk = {
        "attnlib." + ".".join(p.relative_to(ROOT / "attnlib").with_suffix("").parts)
        for p in (ROOT / "attnlib").rglob("*.py")
        if p.name != "__init__.py"
    }
    assert on_disk <= set(got["modules"]), sorted(on_disk - set(got["modules"]))
