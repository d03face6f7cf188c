"""Helpers shared by the cache tests (KVCache, paged, quantised, sinks).

``one_thread`` is a fixture: a test module that imports it and lists it in ``pytestmark``
(``pytest.mark.usefixtures("one_thread")``) runs its tiny per-token operations on one torch
thread, where more threads only add synchronisation cost on a busy machine.
"""

from __future__ import annotations

import pytest
import torch

from attnlib.training import torch_threads


@pytest.fixture
def one_thread():
    with torch_threads(1):
        yield


def rand(*shape, seed=0, dtype=torch.float64):
    """A standard-normal tensor from its own seeded generator (the global one untouched)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
