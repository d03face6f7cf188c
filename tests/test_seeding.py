"""attnlib.seeding — one seed makes random, numpy and torch reproducible; import seeds nothing."""

from __future__ import annotations

import json
import random
import re
import subprocess

import numpy as np
import pytest
import torch
from conftest import ROOT, project_python

import attnlib
from attnlib.seeding import seed_everything


def draw() -> list[float]:
    return [
        random.random(),
        float(np.random.random()),  # noqa: NPY002 - the global generator is what is seeded
        float(torch.rand(1)),
        float(torch.randn(1)),
    ]


def test_same_seed_same_numbers_in_every_library():
    g1 = seed_everything(123)
    a = draw() + [float(g1.random())]
    g2 = seed_everything(123)
    b = draw() + [float(g2.random())]
    assert a == b
    assert len(set(a)) == len(a)  # five different numbers, not one repeated constant
    assert attnlib.seed_everything is seed_everything


def test_different_seeds_give_different_numbers_in_every_library():
    seed_everything(1)
    a = draw()
    seed_everything(2)
    b = draw()
    assert all(x != y for x, y in zip(a, b, strict=True))


def test_returned_generator_is_default_rng_of_the_seed():
    g = seed_everything(7)
    assert isinstance(g, np.random.Generator)
    assert g.random(3).tolist() == np.random.default_rng(7).random(3).tolist()


def test_matches_each_library_seeded_by_hand():
    seed_everything(42)
    mine = draw()
    random.seed(42)
    np.random.seed(42)  # noqa: NPY002
    torch.manual_seed(42)
    assert mine == draw()


def test_large_and_numpy_int_seeds():
    seed_everything(np.int64(5))
    a = draw()
    seed_everything(5)
    assert draw() == a
    big = 2**40 + 5
    seed_everything(big)
    mine = draw()
    random.seed(big)
    np.random.seed(big % 2**32)  # noqa: NPY002 - numpy's global generator takes 32 bits
    torch.manual_seed(big)
    assert mine == draw()
    seed_everything(2**64 - 1)  # the largest seed torch accepts
    assert torch.initial_seed() == 2**64 - 1


@pytest.mark.parametrize(
    ("seed", "error", "pattern"),
    [
        (1.5, TypeError, "seed_everything: seed must be an int, got float"),
        ("0", TypeError, "seed_everything: seed must be an int, got str"),
        (True, TypeError, "seed_everything: seed must be an int, got bool"),
        (None, TypeError, "seed must be an int, got NoneType"),
        (-1, ValueError, "seed_everything: seed must be in 0..2**64 - 1, got -1"),
        (2**64, ValueError, "seed must be in 0..2**64 - 1"),
    ],
)
def test_bad_seeds(seed, error, pattern):
    state = torch.get_rng_state()
    with pytest.raises(error, match=re.escape(pattern)):
        seed_everything(seed)
    assert torch.equal(torch.get_rng_state(), state)  # refused before seeding anything


FRESH = r"""
import json, random
import numpy as np
import torch

before = (random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state())
import attnlib
after = (random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state())
unchanged = [before[0] == after[0], before[1] == after[1], bool(torch.equal(before[2], after[2]))]
unseeded = [random.random(), float(np.random.random()), torch.rand(3).tolist()]
attnlib.seed_everything(0)
seeded = [random.random(), float(np.random.random()), torch.rand(3).tolist()]
print(json.dumps({"unchanged": unchanged, "unseeded": unseeded,
                  "seeded": seeded}))
"""


@pytest.fixture(scope="module")
def fresh_runs():
    # two fresh interpreters, started together to halve the wait
    procs = [
        subprocess.Popen(
            [project_python(), "-c", FRESH],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(2)
    ]
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return runs


def test_import_attnlib_seeds_nothing(fresh_runs):
    for run in fresh_runs:
        assert run["unchanged"] == [True, True, True]  # random, numpy, torch states
    a, b = fresh_runs
    # random, numpy and (since torch 2.x) torch start from OS entropy: two fresh
    # interpreters draw different numbers unless something seeds them
    assert a["unseeded"][0] != b["unseeded"][0]
    assert a["unseeded"][1] != b["unseeded"][1]
    assert a["unseeded"][2] != b["unseeded"][2]


def test_seed_everything_reproduces_across_processes(fresh_runs):
    a, b = fresh_runs
    assert a["seeded"] == b["seeded"]
    seed_everything(0)
    here = [random.random(), float(np.random.random()), torch.rand(3).tolist()]  # noqa: NPY002
    assert here == a["seeded"]
