"""`make lab` works: JupyterLab starts from the project's venv, serves the lessons, and
offers the course kernel — and it is the learners' lean Lab: nbgrader's server and Lab
extensions off, no news prompt (jupyter/ copied into the venv by tools/setup_env.sh), while
`make lab-staff`'s settings (jupyter/staff) switch nbgrader back on. Talks to the server's
REST API with the standard library only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request

import pytest
from conftest import NOTEBOOKS, ROOT, VENV_BIN
from labserver import get_json, running_lab

pytestmark = pytest.mark.slow

# ~60 s is plenty alone (6 s measured); 29 s was seen with 8 engineers sharing 2 cores.
START_TIMEOUT = 90.0


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("jupyter-runtime"), START_TIMEOUT) as server:
        yield server


def test_lab_answers_status(lab):
    assert "started" in lab["status"]


def test_lab_refuses_requests_without_the_token(lab):
    with pytest.raises(urllib.error.HTTPError) as err:
        get_json(f"{lab['base']}/api/contents/notebooks", token="wrong")
    assert err.value.code == 403


def test_lab_lists_the_lessons(lab):
    listing = get_json(f"{lab['base']}/api/contents/notebooks", lab["token"])
    assert listing["type"] == "directory"
    served = {item["name"] for item in listing["content"] if item["type"] == "notebook"}
    lessons = {p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
    assert lessons, "no lessons in notebooks/"
    assert lessons <= served, f"not served: {sorted(lessons - served)}"


def test_lab_offers_the_course_kernel(lab):
    specs = get_json(f"{lab['base']}/api/kernelspecs", lab["token"])
    assert "key-vectors" in specs["kernelspecs"], sorted(specs["kernelspecs"])
    spec = specs["kernelspecs"]["key-vectors"]["spec"]
    assert spec["display_name"] == "Key Vectors (Python 3)"
    # the kernel runs the venv's python, so lessons import the installed attnlib
    python = spec["argv"][0]
    assert os.path.realpath(python) == os.path.realpath(VENV_BIN / "python"), python


# --- the learners' Lab: lean, and staff switch nbgrader on -------------------------------

NBGRADER_SERVER = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.validate_assignment",
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.course_list",
)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


def test_learners_lab_loads_no_nbgrader(lab):
    # nbgrader's server extensions are off: no formgrader page
    code, _ = _get(f"{lab['base']}/formgrader?token={lab['token']}")
    assert code == 404, f"/formgrader answered {code}: nbgrader's server extension is on"
    # and its JupyterLab extension is disabled in the page the browser gets
    code, page = _get(f"{lab['base']}/lab?token={lab['token']}")
    assert code == 200
    config = json.loads(
        re.search(
            r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S
        ).group(1)
    )
    assert "@jupyter/nbgrader" in config["disabledExtensions"], config["disabledExtensions"]


def test_learners_lab_asks_nothing_about_news(lab):
    settings = get_json(
        f"{lab['base']}/lab/api/settings/@jupyterlab/apputils-extension:notification",
        lab["token"],
    )
    defaults = {k: v.get("default") for k, v in settings["schema"]["properties"].items()}
    assert defaults["fetchNews"] == "false" and defaults["checkForUpdates"] is False


def test_venv_holds_the_course_settings():
    """tools/setup_env.sh copied jupyter/'s learner settings into the venv (not ~/.jupyter)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "lab_settings", ROOT / "tools" / "lab_settings.py"
    )
    lab_settings = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab_settings)
    for src, dest in lab_settings.COPIES:
        for f in (lab_settings.SETTINGS / src).glob("*.json"):
            target = VENV_BIN.parent / dest / f.name
            assert target.is_file(), f"{target} missing: run `make setup`"
            assert lab_settings.installed(target, f), f"{target} lacks the settings of {f}"


STAFF_PROBE = """
import json
from jupyter_core.paths import jupyter_config_path
from jupyter_server.extension.config import ExtensionConfigManager
from jupyterlab_server.config import get_static_page_config
server = ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()
page = get_static_page_config(level="all")
print(json.dumps({"server": server, "disabled": page.get("disabledExtensions", {})}))
"""


@pytest.mark.parametrize("staff", [False, True], ids=["learner", "staff"])
def test_staff_settings_switch_nbgrader_on(staff, tmp_path):
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path))
    env.pop("JUPYTER_CONFIG_PATH", None)
    if staff:  # what `make lab-staff` sets
        env["JUPYTER_CONFIG_PATH"] = str(ROOT / "jupyter" / "staff")
    run = subprocess.run(
        [str(VENV_BIN / "python"), "-c", STAFF_PROBE], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert {m: seen["server"].get(m) for m in NBGRADER_SERVER} == dict.fromkeys(
        NBGRADER_SERVER, staff
    )
    assert bool(seen["disabled"].get("@jupyter/nbgrader")) is not staff
