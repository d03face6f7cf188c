"""Reproducible randomness for lessons: the numbers in the prose are the numbers you get."""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["seed_everything"]


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python's ``random``, numpy's global generator and torch.

    Call it in a lesson's first code cell (and again before any cell whose random
    numbers the prose quotes). Returns a fresh ``numpy.random.Generator`` seeded with
    the same seed, for code that prefers an explicit generator.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed_everything: seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - the global generator is what lessons seed
    torch.manual_seed(seed)
    return np.random.default_rng(seed)
