"""Latency statistics and the repeat/stop rules of the measurement loop."""

from __future__ import annotations

import itertools

import pytest

from rlcompile.machine import cpu_mismatch, cpu_signature, environment
from rlcompile.measure import MeasureConfig, measure_latency, summarize


class FakeClock:
    """A clock that advances by a fixed step per call to the timed function."""

    def __init__(self, seconds_per_call: float) -> None:
        self.now = 0.0
        self.step = seconds_per_call
        self.calls = 0

    def __call__(self) -> float:
        return self.now

    def work(self) -> None:
        self.calls += 1
        self.now += self.step


def test_summarize_median_and_p90() -> None:
    stats = summarize([5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 7.0, 8.0, 9.0])
    assert stats.median_ms == 5.5
    assert stats.p90_ms == pytest.approx(9.1)  # linear interpolation between 9 and 10
    assert stats.min_ms == 1.0 and stats.max_ms == 10.0
    assert stats.mean_ms == 5.5
    assert stats.repeats == 10


def test_summarize_single_sample_and_empty() -> None:
    stats = summarize([2.5])
    assert stats.median_ms == stats.p90_ms == 2.5 and stats.stdev_ms == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_repeats_until_min_repeats_and_min_time() -> None:
    clock = FakeClock(0.01)
    config = MeasureConfig(warmup=2, min_repeats=5, min_time_s=0.2, max_time_s=10)
    stats = measure_latency(clock.work, config, clock)
    assert stats.repeats == 20  # 0.2 s of 10 ms calls; min_repeats alone would stop at 5
    assert clock.calls == 22  # plus the warm-up calls, which are not in the samples
    assert stats.median_ms == pytest.approx(10.0)
    assert stats.warmup == 2


def test_min_repeats_dominates_for_slow_calls() -> None:
    clock = FakeClock(0.5)
    stats = measure_latency(clock.work, MeasureConfig(warmup=0, min_repeats=4, min_time_s=0.1, max_time_s=60), clock)
    assert stats.repeats == 4


def test_max_time_bounds_very_slow_calls() -> None:
    clock = FakeClock(4.0)
    config = MeasureConfig(warmup=3, min_repeats=10, min_time_s=1.0, max_time_s=10.0, floor_repeats=3)
    stats = measure_latency(clock.work, config, clock)
    assert stats.repeats == 3  # 12 s > max_time after the floor of 3 runs
    assert stats.warmup == 1  # warm-up stops once it took min_time


def test_samples_are_the_measured_durations() -> None:
    durations = itertools.cycle([0.001, 0.003])
    clock = FakeClock(0.0)

    def work() -> None:
        clock.now += next(durations)

    stats = measure_latency(work, MeasureConfig(warmup=0, min_repeats=4, min_time_s=0.0), clock)
    assert stats.samples_ms == pytest.approx((1.0, 3.0, 1.0, 3.0))
    assert stats.median_ms == pytest.approx(2.0)


def test_invalid_config_is_refused() -> None:
    with pytest.raises(ValueError):
        MeasureConfig(min_repeats=0)
    with pytest.raises(ValueError):
        MeasureConfig(max_time_s=0)


def test_environment_records_machine_and_versions() -> None:
    env = environment(threads=2)
    assert env["threads"] == 2 and env["cores"] >= 1
    assert env["cpu"]
    for package in ("apache-tvm", "onnxruntime", "torch", "onnx"):
        assert env["packages"][package], package


def test_cpus_with_one_marketing_name_are_told_apart_by_their_signature() -> None:
    here = environment()
    assert here["cpu_signature"] == cpu_signature() and cpu_mismatch(here) is None
    assert cpu_mismatch({"cpu": here["cpu"]}) is None  # recorded before signatures: the name is compared alone
    other = {**here, "cpu_signature": "AuthenticAMD 26/2/0 avx512f avx2 fma avx"}  # same name, a Zen 5
    assert "avx512f" in cpu_mismatch(other)
    assert "Some Other CPU" in cpu_mismatch({**here, "cpu": "Some Other CPU"})
