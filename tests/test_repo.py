"""Repository-level promises: pinned requirements, an installable attnlib with the public
names of docs/ARCHITECTURE.md §2, modules importable on their own, and no side effects on import."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
from conftest import ROOT, project_python

PUBLIC_NAMES = [
    "softmax",
    "scores",
    "attend",
    "causal_mask",
    "padding_mask",
    "MultiHeadAttention",
    "seed_everything",
]


def requirement_lines() -> list[str]:
    text = (ROOT / "requirements.txt").read_text()
    return [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.split("#", 1)[0].strip()]


def test_requirements_pin_torch_2_13_0():
    assert "torch==2.13.0" in requirement_lines()


def test_every_requirement_is_pinned_exactly():
    lines = requirement_lines()
    assert len(lines) >= 10
    pin = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[0-9][0-9A-Za-z.+!-]*$")
    loose = [ln for ln in lines if not pin.match(ln)]
    assert not loose, f"not pinned with ==: {loose}"
    names = [re.split(r"[\[=]", ln)[0].lower().replace("_", "-") for ln in lines]
    assert len(names) == len(set(names)), "a package is listed twice"


def test_pyproject_declares_the_attnlib_package():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "attnlib"
    assert meta["project"]["requires-python"].startswith(">=3.11")
    packages = meta["tool"]["setuptools"]["packages"]
    on_disk = {
        "attnlib" + "".join("." + part for part in init.parent.relative_to(ROOT / "attnlib").parts)
        for init in (ROOT / "attnlib").rglob("__init__.py")
    }
    assert set(packages) == on_disk | {"attnlib.data"}, "pyproject's package list is out of date"
    assert meta["tool"]["setuptools"]["package-dir"] == {"attnlib.data": "data"}
    # and it is installed (editable) into the environment the tests run in
    spec = importlib.util.find_spec("attnlib")
    assert spec is not None and spec.origin is not None
    assert str(ROOT / "attnlib") in spec.origin


def test_public_names_of_design_section_3():
    import attnlib

    have_mha = importlib.util.find_spec("attnlib.mha") is not None
    for name in PUBLIC_NAMES:
        if name == "MultiHeadAttention" and not have_mha:
            continue
        assert callable(getattr(attnlib, name)), name
    for name in attnlib.__all__:
        assert hasattr(attnlib, name)
    if not have_mha:
        pytest.skip("attnlib.mha (MultiHeadAttention, lesson 07) does not exist yet")
    import torch

    assert issubclass(attnlib.MultiHeadAttention, torch.nn.Module)


def attnlib_modules() -> list[str]:
    mods = []
    for path in sorted((ROOT / "attnlib").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__":
            continue
        mods.append(".".join(parts))
    return mods


def test_module_list_is_not_empty():
    mods = attnlib_modules()
    assert {"attnlib", "attnlib.core", "attnlib.masks", "attnlib.plot"} <= set(mods)


def third_party_imports() -> list[str]:
    """Top-level names of the non-attnlib packages that attnlib's modules import."""
    names = set()
    for path in (ROOT / "attnlib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return sorted(n for n in names - {"attnlib", "__future__"} if n not in sys.stdlib_module_names)


# Each module must import on its own, with nothing from attnlib loaded before it, and
# importing it must not change matplotlib's rcParams or any RNG state, nor warn. One
# interpreter imports the third-party packages once (torch, matplotlib, ...: seconds), then
# forks a fresh child per module, so each child starts with no attnlib module loaded and
# costs milliseconds. argv: comma-separated third-party names, then the modules.
PROBE = r"""
import importlib, json, os, random, sys, traceback, warnings
import matplotlib
matplotlib.use("Agg")
import matplotlib as mpl
import matplotlib.pyplot
import numpy as np
import torch

for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
    except Exception:
        pass  # the child that needs it will report the error
assert not any(m == "attnlib" or m.startswith("attnlib.") for m in sys.modules)

def snapshot():
    rc = {k: repr(v) for k, v in mpl.rcParams.items() if k != "backend"}
    return rc, random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state()

for mod in sys.argv[2:]:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        res = {"module": mod}
        try:
            before = snapshot()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                importlib.import_module(mod)
            after = snapshot()
            res.update(
                error=None,
                warnings=[f"{w.category.__name__}: {w.message}" for w in caught],
                rc_changed=sorted(k for k in before[0] if before[0][k] != after[0].get(k)),
                random=before[1] == after[1],
                numpy=before[2] == after[2],
                torch=bool(torch.equal(before[3], after[3])),
            )
        except BaseException:
            res["error"] = traceback.format_exc()
        print(json.dumps(res))
        sys.stdout.flush()
        os._exit(0)
    os.waitpid(pid, 0)
"""

# A canary that does everything a module must not do, to prove the probe can fail.
CANARY = "import random, torch, matplotlib as mpl\ntorch.manual_seed(0)\nrandom.seed(0)\n"
CANARY += "mpl.rcParams['font.size'] = 3\n"


@pytest.fixture(scope="module")
def import_probes(tmp_path_factory):
    canary_dir = tmp_path_factory.mktemp("canary")
    (canary_dir / "kv_probe_canary.py").write_text(CANARY)
    env = dict(os.environ, PYTHONPATH=str(canary_dir))
    modules = [*attnlib_modules(), "kv_probe_canary", "kv_no_such_module"]
    res = subprocess.run(
        [project_python(), "-c", PROBE, ",".join(third_party_imports()), *modules],
        capture_output=True,
        text=True,
        cwd=ROOT / "tests",  # not the repo root: the installed package must be found
        env=env,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    results = {}
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["module"]] = r
    return results


@pytest.mark.parametrize("module", attnlib_modules())
def test_module_imports_on_its_own_without_side_effects(module, import_probes):
    res = import_probes.get(module)
    assert res is not None, f"no result for {module} (the child crashed)"
    assert res["error"] is None, f"`import {module}` failed in a fresh interpreter:\n{res['error']}"
    assert res["rc_changed"] == [], f"{module} changes rcParams on import: {res['rc_changed']}"
    assert res["random"] and res["numpy"] and res["torch"], f"{module} touches an RNG: {res}"
    assert res["warnings"] == [], f"{module} warns on import: {res['warnings']}"


def test_import_probe_can_fail(import_probes):
    canary = import_probes["kv_probe_canary"]
    assert canary["error"] is None
    assert canary["rc_changed"] == ["font.size"]
    assert canary["torch"] is False and canary["random"] is False and canary["numpy"] is True
    assert "ModuleNotFoundError" in import_probes["kv_no_such_module"]["error"]
