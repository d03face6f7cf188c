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


def test_min_is_not_above_the_median_for_the_same_work():
    fns = {"sleep": lambda: time.sleep(0.001)}
    assert min_times(fns, repeats=5, warmup=0)["sleep"] >= 0.0009
    assert median_times(fns, repeats=5, warmup=0)["sleep"] >= 0.0009


@pytest.mark.parametrize("fn", [min_times, median_times])
def test_bad_counts_are_refused(fn):
    with pytest.raises(ValueError, match="repeats"):
        fn({"f": lambda: None}, repeats=0)
    with pytest.raises(TypeError, match="warmup"):
        fn({"f": lambda: None}, warmup=1.5)
