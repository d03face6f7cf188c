"""The Examples of attnlib's library modules run as doctests (part of `make test`).

Every top-level module of attnlib (the library room, see docs/ARCHITECTURE.md) is searched
with ``doctest.DocTestFinder``; each docstring with examples is one test, run with the
module's globals and default print options, so an example that drifts from the code fails
here. The examples are seeded and print rounded numbers, shapes or booleans only.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import numpy as np
import pytest
import torch

import attnlib

MODULES = sorted(f"attnlib.{m.name}" for m in pkgutil.iter_modules(attnlib.__path__) if not m.ispkg)


def _examples():
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for test in finder.find(module, name, globs=vars(module)):
            if test.examples:
                found.append(pytest.param(test, id=test.name))
    return found


EXAMPLES = _examples()


def test_the_public_api_has_examples():
    assert len(EXAMPLES) >= 55, f"only {len(EXAMPLES)} docstrings with examples"
    named = {p.values[0].name for p in EXAMPLES}
    for name in (
        "attnlib.core.attend",
        "attnlib.masks.causal_mask",
        "attnlib.mha.MultiHeadAttention",
    ):
        assert name in named


@pytest.mark.parametrize("test", EXAMPLES)
def test_docstring_examples(test):
    torch.manual_seed(0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    test.globs = dict(test.globs)  # a fresh copy: one example cannot leak names into another
    with np.printoptions(precision=8, suppress=False, linewidth=75), torch.inference_mode(False):
        torch.set_printoptions(profile="default")
        result = runner.run(test, out=lambda text: pytest.fail(text, pytrace=False))
    assert result.failed == 0 and result.attempted == len(test.examples)
