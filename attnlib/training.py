"""A small, seeded training loop shared by every lesson that trains a model.

Lessons write the model and a ``step`` that returns the loss (and, optionally, extra
numbers to record); :func:`train` runs the optimiser, shows a progress bar, and returns a
:class:`History` that lessons plot and assert on.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from attnlib._validate import check_choice, check_int, check_number, type_name

__all__ = ["History", "train", "grad_norms", "progress_bar", "torch_threads"]


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)``; the previous setting is restored.

    The course's models are tiny: on one thread they train faster than on several (no
    synchronisation, and immune to a busy machine), and their float sums are added in one
    order, so the numbers do not depend on the machine's core count. ``None`` leaves the
    setting alone.
    """
    if n is None:
        yield
        return
    n = check_int("torch_threads", "n", n, minimum=1)
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def progress_bar(steps: int, desc: str = "training", enabled: bool = True) -> tqdm:
    """A plain-text progress bar on stdout with a fixed layout.

    On stdout, not tqdm's default stderr: a lesson then stores no stderr output (which
    reads as a warning) and a graded cell that trains writes nothing nbgrader would count
    against it.

    tqdm's default layout gives the bar whatever room the rate text leaves, so the number of
    ``#`` would change from run to run; here the bar is always 30 characters wide and shows
    no rate, so a stored notebook output compares equal once times are sanitized. Use it as
    a context manager or call ``close()``.
    """
    return tqdm(
        total=steps,
        desc=desc,
        disable=not enabled,
        file=sys.stdout,  # stdout: a stored notebook keeps no stderr, graders see none
        mininterval=0.5,
        ascii=True,
        bar_format="{desc}: {percentage:3.0f}%|{bar:30}| {n_fmt}/{total_fmt} "
        "[{elapsed}<{remaining}]",
    )


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
    threads: int | None = None,
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
        Show a progress bar (plain-text tqdm on stdout; stable under nbval).
    clip : float, optional
        Clip the global gradient norm to this value.
    threads : int, optional
        Train with ``torch.set_num_threads(threads)`` (restored afterwards); 1 suits the
        course's tiny models. Default: leave torch's setting alone.

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
        raise TypeError(f"train: step must be callable, step(i) -> loss; got {type_name(step)}")
    steps = check_int("train", "steps", steps, minimum=1)
    lr = check_number("train", "lr", lr, positive=True)
    clip = check_number("train", "clip", clip, positive=True, none_ok=True)
    check_choice("train", "optimizer", optimizer, ("adam", "sgd"))
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(params, lr=lr)
    with torch_threads(threads), progress_bar(steps, desc, progress) as bar:
        return _loop(params, step, steps, opt, track, clip, bar)


def _loop(params, step, steps, opt, track, clip, bar) -> History:
    history = History()
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        result = step(i)
        loss, extras = result if isinstance(result, tuple) else (result, {})
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            bar.close()
            is_t = isinstance(loss, torch.Tensor)
            what = f"shape {tuple(loss.shape)}" if is_t else type_name(loss)
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
        bar.update(1)
    if not math.isfinite(history.last("loss")):
        raise FloatingPointError("train: the final loss is not finite")
    return history
