"""Timing one call honestly: warm up, repeat until a count and a time are reached, report the median.

A measurement warms up, then repeats the call until both a minimum count and a minimum time are
reached (bounded by a maximum time so a slow model cannot stall a run), and reports the median and
the 90th percentile. :func:`measure_alternating` times several calls in turn; comparing contenders
and deciding which one wins is :mod:`rlcompile.measure.contest`'s job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True)
class MeasureConfig:
    """How long and how often to time a call.

    Warm-up runs ``warmup`` calls, or fewer (at least one) once they took ``min_time_s``. Repeats
    continue until at least ``min_repeats`` calls *and* ``min_time_s`` seconds have passed, but stop
    once ``max_time_s`` is exceeded (after at least ``floor_repeats`` calls) so a model that takes
    seconds per call still finishes.
    """

    warmup: int = 3
    min_repeats: int = 10
    min_time_s: float = 1.0
    max_time_s: float = 30.0
    #: a block's most calls: a model of microseconds per call gains nothing from more (LeNet-5, 0.03-0.05 ms a call,
    #: on the 2-core VM, three runs of 4-8 contests: ORT's twins a median 1.8-5.3% apart at 1000 calls a block and
    #: 5.2-10.3% at 10000, OpenVINO's 5.2-8.7% and 2.1-17.7%, each contest in a third of the time;
    #: ``benchmarks/contest_noise.py --models lenet5 --variants default,uncapped``)
    max_repeats: int = 1000
    floor_repeats: int = 3
    #: the shortest ``min_time_s`` a contest fitted into a deadline may shorten its blocks to
    #: (:func:`~rlcompile.measure.contest.fit_within`; half a second a contender in all)
    floor_time_s: float = 0.25

    def __post_init__(self) -> None:
        if self.min_repeats < 1 or self.floor_repeats < 1 or self.warmup < 0:
            raise ValueError("repeats must be >= 1 and warmup >= 0")
        if self.min_time_s < 0 or self.max_time_s <= 0 or self.floor_time_s < 0:
            raise ValueError("times must be positive")


DEFAULT = MeasureConfig()
QUICK = MeasureConfig(warmup=1, min_repeats=3, min_time_s=0.1, max_time_s=5.0, floor_repeats=1)


@dataclass(frozen=True)
class LatencyStats:
    """Summary of repeated timings, all in milliseconds."""

    median_ms: float
    p90_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float
    repeats: int
    warmup: int
    samples_ms: tuple[float, ...] = field(repr=False)
    #: the median of the samples themselves, where :attr:`median_ms` was judged round by round against another
    #: contender in a contest (:func:`~rlcompile.measure.contest.paired_medians`); ``None`` where they are the same
    pooled_median_ms: float | None = None

    def to_dict(self) -> dict:
        return asdict(self) | {"samples_ms": list(self.samples_ms)}


def summarize(samples_ms: Sequence[float], warmup: int = 0) -> LatencyStats:
    """Median, p90 (linear interpolation), mean, min, max and standard deviation of the samples."""
    if len(samples_ms) == 0:
        raise ValueError("cannot summarise zero samples")
    values = np.asarray(samples_ms, dtype=np.float64)
    return LatencyStats(
        median_ms=float(np.median(values)),
        p90_ms=float(np.percentile(values, 90)),
        mean_ms=float(values.mean()),
        min_ms=float(values.min()),
        max_ms=float(values.max()),
        stdev_ms=float(values.std(ddof=1)) if len(values) > 1 else 0.0,
        repeats=len(values),
        warmup=warmup,
        samples_ms=tuple(float(v) for v in values),
    )


def measure_latency(
    fn: Callable[[], object],
    config: MeasureConfig = DEFAULT,
    clock: Callable[[], float] = time.perf_counter,
) -> LatencyStats:
    """Time ``fn()`` after warming up; see :class:`MeasureConfig` for when repetition stops.

    ``fn`` must block until its work is finished (synchronise devices inside it).
    """
    warmup_started = clock()
    warmups = 0
    while warmups < config.warmup and (warmups == 0 or clock() - warmup_started < config.min_time_s):
        fn()
        warmups += 1
    samples: list[float] = []
    started = clock()
    while True:
        before = clock()
        fn()
        after = clock()
        samples.append((after - before) * 1e3)
        elapsed = after - started
        enough = len(samples) >= config.min_repeats and elapsed >= config.min_time_s
        too_long = elapsed >= config.max_time_s and len(samples) >= config.floor_repeats
        if enough or too_long or len(samples) >= config.max_repeats:
            return summarize(samples, warmup=warmups)


def measure_after(before: Callable[[], object] | None, after: Callable[[], object], repeats: int,
                  warmup: int = 3) -> float:  # fmt: skip
    """Median ms of ``after()`` when it runs right after ``before()``: what a hand-off from one library to
    the next costs (``before``'s threads still spinning, ``after``'s waking up). ``warmup`` pairs first."""
    samples = []
    for _ in range(warmup + repeats):
        if before is not None:
            before()
        started = time.perf_counter()
        after()
        samples.append(time.perf_counter() - started)
    return float(np.median(samples[warmup:])) * 1e3
