"""Reproducible randomness for lessons: the numbers in the prose are the numbers you get."""

from __future__ import annotations

import random

import numpy as np
import torch

from attnlib._validate import check_int

__all__ = ["seed_everything"]


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python's ``random``, numpy's global generator and torch.

    Call it in a lesson's first code cell (and again before any cell whose random
    numbers the prose quotes). Nothing is seeded when attnlib is imported.

    Parameters
    ----------
    seed : int
        In 0 .. 2**64 - 1 (numpy's global generator gets ``seed % 2**32``).

    Returns
    -------
    numpy.random.Generator
        A fresh generator seeded with the same seed, for code that prefers an explicit
        generator.

    See Also
    --------
    numpy.random.default_rng : the generator returned.
    torch.manual_seed : what it calls for torch.

    Examples
    --------
    >>> import torch
    >>> rng = seed_everything(0)
    >>> a = torch.rand(2)
    >>> _ = seed_everything(0)
    >>> torch.equal(a, torch.rand(2))
    True
    """
    seed = check_int("seed_everything", "seed", seed)
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed_everything: seed must be in 0..2**64 - 1, got {seed}")
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - the global generator is what lessons seed
    torch.manual_seed(seed)
    return np.random.default_rng(seed)
