"""Timing that survives a busy machine: variants measured side by side, compared as ratios.

Lessons 10 and 11 and ``make bench`` time several ways of computing one thing. Absolute
seconds move by 40 % or more between a quiet and a busy spell on a shared machine, so every
round here calls each variant once, in turn: a slow spell slows all of them, and the ratio
between them stays meaningful.

* :func:`median_times` — the median of the rounds: the typical cost;
* :func:`min_times` — the fastest round: the cost of the work itself. Noise (another
  process, an interrupt, a page fault) only ever *adds* time, so the minimum of many short
  rounds is the most repeatable estimate of a small step (lesson 10's per-token times).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from attnlib._validate import check_int

__all__ = ["median_times", "min_times"]


def median_times(
    fns: dict[str, Callable[[], object]],
    *,
    repeats: int = 5,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
):
    """Median wall time (seconds) of each function, measured interleaved.

    Each round calls every function once, in order; after ``warmup`` rounds, ``repeats``
    rounds are timed.

    Parameters
    ----------
    fns : dict of name -> callable taking no argument
    repeats : int >= 1 — timed rounds.
    warmup : int >= 0 — untimed rounds first (caches, allocator, lazy initialisation).
    clock : callable returning seconds, default ``time.perf_counter`` (wall time).
        ``time.thread_time`` measures the CPU time of the calling thread only — with
        ``torch.set_num_threads(1)`` (:func:`attnlib.training.torch_threads` ``(1)``) that
        is all the work, and time spent waiting for a core on a busy machine is not
        counted.

    Returns
    -------
    dict of name -> float

    See Also
    --------
    min_times : the minimum of more rounds, for small differences.

    Examples
    --------
    >>> times = median_times({"sum": lambda: sum(range(100))}, repeats=3)
    >>> sorted(times), times["sum"] > 0
    (['sum'], True)
    >>> import time
    >>> nap = {"sleep": lambda: time.sleep(0.02)}  # waits, computes nothing
    >>> median_times(nap, repeats=1, warmup=0)["sleep"] >= 0.02
    True
    >>> median_times(nap, repeats=1, warmup=0, clock=time.thread_time)["sleep"] < 0.01
    True
    """
    times = _rounds("median_times", fns, repeats, warmup, clock)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _rounds(fn_name: str, fns, repeats: int, warmup: int, clock) -> dict[str, list[float]]:
    check_int(fn_name, "repeats", repeats, minimum=1)
    check_int(fn_name, "warmup", warmup, minimum=0)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(warmup + repeats):
        for name, fn in fns.items():
            t0 = clock()
            fn()
            dt = clock() - t0
            if r >= warmup:
                times[name].append(dt)
    return times


def min_times(
    fns: dict[str, Callable[[], object]],
    *,
    repeats: int = 15,
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
):
    """Fastest wall time (seconds) of each function over interleaved rounds.

    Each round calls every function once, in order; after ``warmup`` untimed rounds,
    ``repeats`` rounds are timed and the smallest time of each function is kept. A busy
    machine can only make a call slower, never faster, so the minimum of many rounds
    estimates the cost of the work itself and moves far less between runs than a mean or
    a median. Use it for steps of milliseconds; compare variants by their ratios.

    Parameters
    ----------
    fns : dict of name -> callable taking no argument
    repeats : int >= 1, default 15 — timed rounds.
    warmup : int >= 0, default 2 — untimed rounds first (caches, allocator, lazy set-up).
    clock : callable returning seconds, default ``time.perf_counter``
        As in :func:`median_times`: ``time.thread_time`` counts the calling thread's CPU
        time only, not the time spent waiting for a core.

    Returns
    -------
    dict of name -> float

    See Also
    --------
    median_times : the median, for a figure's typical time.

    Examples
    --------
    >>> times = min_times({"a": lambda: None, "b": lambda: sum(range(1000))}, repeats=5)
    >>> times["a"] < times["b"]
    True
    """
    times = _rounds("min_times", fns, repeats, warmup, clock)
    return {name: min(ts) for name, ts in times.items()}
