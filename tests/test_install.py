"""attnlib installs as an ordinary package: a wheel, not an editable checkout; and that wheel,
what a learner installs, holds nothing of the staff side (the grader, an answer key, an
instructor solution), which is kvstaff's, a distribution of its own (staff/pyproject.toml).

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


def test_wheel_carries_the_lesson_data(installed):
    files = {str(p.relative_to(installed)) for p in installed.rglob("*") if p.is_file()}
    for name in (
        "attnlib/data/agreement_corpus.tsv",
        "attnlib/data/syntax_model.pt",
        "attnlib/data/plays.txt",
    ):
        assert name in files, f"{name} is missing from the wheel"


def test_the_learners_wheel_holds_no_grader_no_answer_key_and_no_solution(installed):
    files = [p for p in installed.rglob("*") if p.is_file()]
    names = [str(p.relative_to(installed)) for p in files]
    assert not [n for n in names if n.startswith("kvstaff")], "the staff package is in the wheel"
    assert not [n for n in names if "grader" in n or "answer_key" in n or "course" in n], names
    assert not [n for n in names if n.endswith(".ipynb")], "a lesson (with solutions) is in it"
    for p in files:
        if p.suffix == ".py":
            text = p.read_text(encoding="utf-8")
            assert "### BEGIN SOLUTION" not in text, p
            assert "import kvstaff" not in text and "from kvstaff" not in text, p


@pytest.fixture(scope="module")
def staff_installed(installed, tmp_path_factory) -> Path:
    """The staff distribution's wheel, installed beside the learners' one."""
    src = tmp_path_factory.mktemp("staff-src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "staff", src / "staff", ignore=ignore)
    wheels = tmp_path_factory.mktemp("staff-wheels")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = pip + ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels)]
    subprocess.run(build + [str(src / "staff")], check=True, capture_output=True, cwd=src)
    (wheel,) = wheels.glob("kvstaff-*.whl")
    subprocess.run(
        pip + ["install", "--no-deps", "--target", str(installed), str(wheel)],
        check=True,
        capture_output=True,
    )
    return installed


def test_the_staff_wheel_carries_the_grader_and_the_lecture_templates(staff_installed, tmp_path):
    files = {str(p.relative_to(staff_installed)) for p in staff_installed.rglob("*")}
    for name in (
        "kvstaff/grader/answer_keys.py",
        "kvstaff/lecture_templates/kv_reveal/index.html.j2",
        "kvstaff/lecture_templates/kv_lab/conf.json",
    ):
        assert name in files, f"{name} is missing from the staff wheel"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KEY_VECTORS_ROOT")}
    env["PYTHONPATH"] = str(staff_installed)
    code = "import kvstaff.lecture as l, kvstaff.grader.autograde; print(l.TEMPLATES.is_dir())"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr[-3000:]


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
