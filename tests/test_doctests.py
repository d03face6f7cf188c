"""Every docstring example of attnlib runs as a doctest (part of `make test`).

Every module of the packages in ``PACKAGES`` (attnlib, attnlib.data and the staff package
kvstaff) is searched,
recursively: the package itself, its top-level modules and every subpackage with its
modules (attnlib.tasks, attnlib.plot, attnlib.explorers, attnlib.checks, kvstaff and
kvstaff.grader, ...), found by ``pkgutil.walk_packages``. A module that cannot be
imported is a failure, never a silent skip: its examples would otherwise quietly stop being
checked. Each docstring with examples (``doctest.DocTestFinder``) is one test, run with its
module's globals and default print options, so an example that drifts from the code fails
here. The examples are seeded and print rounded numbers, shapes or booleans only; they read
shipped data through attnlib (no files, no network) and close any figure they draw.

To check the examples of another package, add it to ``PACKAGES``.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import traceback

import numpy as np
import pytest
import torch

import attnlib
import kvstaff
from attnlib import data as attnlib_data

# The package roots whose modules are searched (each walked recursively). attnlib.data is
# listed on its own: it lives in data/ (pyproject's package-dir), outside attnlib's folder,
# so walking a checkout's attnlib does not reach it (an installed wheel's does: no matter).
# kvstaff: the staff package (staff/kvstaff, a distribution of its own).
PACKAGES = [attnlib, attnlib_data, kvstaff]

# Found today (docstrings with examples / ``>>>`` examples across PACKAGES); raise them when
# examples are added, so that losing a module's examples (e.g. to discovery) fails here.
MIN_DOCSTRINGS = 127
MIN_EXAMPLES = 445


def _module_names(packages):
    """Every module of ``packages``, the packages themselves and their subpackages included,
    and the modules that failed to import while walking (name -> traceback)."""
    names, broken = [], {}

    def onerror(name):  # walk_packages calls this when importing a subpackage fails
        broken[name] = traceback.format_exc()

    for package in packages:
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".", onerror):
            names.append(info.name)
    return sorted(set(names)), broken


def _examples():
    names, broken = _module_names(PACKAGES)
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception:  # reported by test_every_module_imports
            broken.setdefault(name, traceback.format_exc())
            continue
        for test in finder.find(module, name, globs=vars(module)):
            if test.examples:
                found.append(pytest.param(test, id=test.name))
    return names, broken, found


MODULES, BROKEN, EXAMPLES = _examples()


def test_every_module_imports():
    assert not BROKEN, "modules whose examples cannot be checked:\n" + "\n".join(
        f"{name}:\n{trace}" for name, trace in sorted(BROKEN.items())
    )


def test_every_module_is_searched():
    for name in (
        "attnlib",
        "attnlib.core",
        "attnlib.tasks.reading",
        "attnlib.plot._base",
        "attnlib.explorers.scale",
        "attnlib.checks.grading",
        "kvstaff.lessons",
        "kvstaff.grader.cli",
        "attnlib.data",
    ):
        assert name in MODULES, f"{name} is not searched for examples"


def test_the_public_api_has_examples():
    assert len(EXAMPLES) >= MIN_DOCSTRINGS, f"only {len(EXAMPLES)} docstrings with examples"
    total = sum(len(p.values[0].examples) for p in EXAMPLES)
    assert total >= MIN_EXAMPLES, f"only {total} examples across {PACKAGES}"
    named = {p.values[0].name for p in EXAMPLES}
    for name in (
        "attnlib.core.attend",
        "attnlib.masks.causal_mask",
        "attnlib.mha.MultiHeadAttention",
    ):
        assert name in named
    for subpackage in ("tasks", "plot", "explorers", "checks"):
        package = f"attnlib.{subpackage}"
        assert any(n == package or n.startswith(package + ".") for n in named), (
            f"no examples collected from {package}"
        )


@pytest.mark.parametrize("test", EXAMPLES)
def test_docstring_examples(test):
    torch.manual_seed(0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    test.globs = dict(test.globs)  # a fresh copy: one example cannot leak names into another
    with np.printoptions(precision=8, suppress=False, linewidth=75), torch.inference_mode(False):
        torch.set_printoptions(profile="default")
        result = runner.run(test, out=lambda text: pytest.fail(text, pytrace=False))
    assert result.failed == 0 and result.attempted == len(test.examples)
