"""attnlib.timing: interleaved rounds, median and minimum."""

from __future__ import annotations

import time

import pytest

from attnlib.timing import median_times, min_times


def _sleeper(durations):
    """A function whose n-th call sleeps durations[n] seconds (then the last one)."""
    calls = []

    def fn():
        time.sleep(durations[min(len(calls), len(durations) - 1)])
        calls.append(None)

    fn.calls = calls
    return fn


def test_min_times_keeps_the_fastest_timed_round():
    # one slow call among fast ones: the minimum ignores it, the median too, the mean would not
    slow_once = _sleeper([0.0, 0.0, 0.05, 0.002, 0.002, 0.002])
    t = min_times({"f": slow_once}, repeats=4, warmup=2)
    assert len(slow_once.calls) == 6
    assert 0.0015 < t["f"] < 0.03


def test_min_times_ignores_the_warmup_rounds():
    slow_first = _sleeper([0.05, 0.001])
    t = min_times({"f": slow_first}, repeats=3, warmup=1)
    assert t["f"] < 0.03


def test_min_times_interleaves_and_orders_variants():
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    min_times(fns, repeats=2, warmup=1)
    assert order == ["a", "b"] * 3


def test_min_and_median_of_the_same_rounds_differ_as_they_should():
    # five timed rounds of one function that sleeps 2, 20, 10, 30 and 12 ms in turn: the
    # minimum is the 2 ms round, the median the 12 ms one (a sleep overshoots, never
    # undershoots, so the bounds below hold on a busy machine too)
    rounds = [0.002, 0.02, 0.01, 0.03, 0.012]
    fastest = min_times({"f": _sleeper(rounds)}, repeats=5, warmup=0)["f"]
    middle = median_times({"f": _sleeper(rounds)}, repeats=5, warmup=0)["f"]
    assert 0.0019 <= fastest < 0.008, fastest
    assert 0.0119 <= middle, middle
    assert fastest < middle


@pytest.mark.parametrize("fn", [min_times, median_times])
def test_bad_counts_are_refused(fn):
    with pytest.raises(ValueError, match="repeats"):
        fn({"f": lambda: None}, repeats=0)
    with pytest.raises(TypeError, match="warmup"):
        fn({"f": lambda: None}, warmup=1.5)
