"""A small, seeded training loop shared by every lesson that trains a model.

Lessons write the model and a ``step`` that returns the loss (and, optionally, extra
numbers to record); :func:`train` runs the optimiser, shows a progress bar, and returns a
:class:`History` that lessons plot and assert on.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

__all__ = ["History", "train", "grad_norms"]


@dataclass
class History:
    """Per-step records of a training run: ``history["loss"]`` is a numpy array."""

    records: dict[str, list[float]] = field(default_factory=dict)

    def add(self, **values: float) -> None:
        for key, val in values.items():
            self.records.setdefault(key, []).append(float(val))

    def __getitem__(self, key: str) -> np.ndarray:
        return np.asarray(self.records[key])

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def keys(self):
        return self.records.keys()

    def last(self, key: str, n: int = 1) -> float:
        """Mean of the last ``n`` records of ``key``."""
        return float(np.mean(self.records[key][-n:]))

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {len(v)} steps" for k, v in self.records.items())
        return f"History({parts})"


def grad_norms(named: dict[str, torch.nn.Parameter | torch.Tensor]) -> dict[str, float]:
    """L2 norm of the gradient of each named parameter (0 where there is none)."""
    out = {}
    for name, p in named.items():
        g = p.grad
        out[name] = 0.0 if g is None else float(g.detach().norm())
    return out


def train(
    params: Iterable[torch.nn.Parameter],
    step: Callable[[int], torch.Tensor | tuple[torch.Tensor, dict[str, float]]],
    *,
    steps: int,
    lr: float = 1e-2,
    optimizer: str = "adam",
    track: dict[str, torch.Tensor] | None = None,
    desc: str = "training",
    progress: bool = True,
    clip: float | None = None,
) -> History:
    """Minimise the loss returned by ``step(i)`` for ``steps`` steps.

    Parameters
    ----------
    params : iterable of Parameter
        What the optimiser updates (e.g. ``model.parameters()``).
    step : callable
        ``step(i) -> loss`` or ``step(i) -> (loss, extras)``; ``extras`` is a dict of
        numbers recorded in the history under their own names (e.g. accuracy).
    steps : int
        Number of optimiser steps.
    lr : float
        Learning rate.
    optimizer : {"adam", "sgd"}
    track : dict of name -> Parameter, optional
        Gradient norms of these are recorded each step as ``"grad/<name>"``.
    progress : bool
        Show a progress bar (plain-text tqdm on stderr; stable under nbval).
    clip : float, optional
        Clip the global gradient norm to this value.

    Returns
    -------
    History
        ``loss`` per step, plus the extras and tracked gradient norms.

    Raises
    ------
    FloatingPointError
        When the loss becomes NaN or infinite (the step is named).
    TypeError, ValueError
        For bad arguments, or a ``step`` that does not return a one-element tensor.
    """
    if isinstance(params, torch.Tensor):
        params = [params]  # a single tensor, not an iterable of them
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("train: params has no parameter that requires grad")
    if not callable(step):
        raise TypeError(f"train: step must be callable, step(i) -> loss; got {type(step).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise TypeError(f"train: steps must be an int, got {type(steps).__name__}")
    if steps <= 0:
        raise ValueError(f"train: steps must be positive, got {steps}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
        raise ValueError(f"train: lr must be a positive finite number, got {lr!r}")
    if clip is not None and not (isinstance(clip, (int, float)) and 0 < clip < math.inf):
        raise ValueError(f"train: clip must be a positive finite number or None, got {clip!r}")
    if optimizer == "adam":
        opt = torch.optim.Adam(params, lr=lr)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr)
    else:
        raise ValueError(f"train: optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    history = History()
    bar = tqdm(
        range(steps),
        desc=desc,
        disable=not progress,
        file=sys.stderr,
        mininterval=0.5,
        ncols=80,
        ascii=True,
    )
    for i in bar:
        opt.zero_grad(set_to_none=True)
        result = step(i)
        loss, extras = result if isinstance(result, tuple) else (result, {})
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            bar.close()
            what = f"shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss)
            raise TypeError(
                f"train: step({i}) must return a one-element loss tensor (or (loss, extras)), "
                f"got {what}; reduce it with .mean() or .sum()"
            )
        if not torch.isfinite(loss):
            bar.close()
            raise FloatingPointError(f"train: the loss became {loss.item()} at step {i}")
        loss.backward()
        if track:
            history.add(**{f"grad/{k}": v for k, v in grad_norms(track).items()})
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        history.add(loss=loss.item(), **extras)
    bar.close()
    if not math.isfinite(history.last("loss")):
        raise FloatingPointError("train: the final loss is not finite")
    return history
