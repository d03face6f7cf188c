"""`make lab` works: JupyterLab starts from the project's venv, serves the lessons, and
offers the course kernel. Talks to the server's REST API with the standard library only.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import pytest
from conftest import NOTEBOOKS, VENV_BIN
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
