"""Honest latency measurement shared by every level.

A measurement warms up, then repeats the call until both a minimum count and a minimum time are
reached (bounded by a maximum time so a slow model cannot stall a run), and reports the median and
the 90th percentile. Every result carries the environment it was taken in, so numbers from different
machines or library versions are never compared by mistake.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

#: Libraries whose versions change latencies; recorded with every result.
RECORDED_PACKAGES = (
    "rlcompile",
    "apache-tvm",
    "apache-tvm-ffi",
    "onnx",
    "onnxruntime",
    "openvino",
    "torch",
    "numpy",
    "xgboost-cpu",
)


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
    max_repeats: int = 10_000
    floor_repeats: int = 3

    def __post_init__(self) -> None:
        if self.min_repeats < 1 or self.floor_repeats < 1 or self.warmup < 0:
            raise ValueError("repeats must be >= 1 and warmup >= 0")
        if self.min_time_s < 0 or self.max_time_s <= 0:
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


def host_cores() -> int:
    """Cores this process may run on (respects CPU affinity and container limits)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name, read from /proc/cpuinfo (falls back to ``platform.processor``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: The /proc/cpuinfo flags that change which kernels a compiler emits and how fast they run.
VECTOR_FLAGS = ("amx_tile", "avx512_bf16", "avx512_vnni", "avx512f", "avx2", "fma", "avx", "sse4_2", "neon", "asimd")


@functools.cache
def cpu_signature() -> str:
    """What tells apart CPUs that share a marketing name (every EPYC under KVM is "AMD EPYC"): vendor,
    family, model and stepping, and the vector extensions present, e.g. ``AuthenticAMD 25/1/1 avx2 fma avx``.

    A Zen 5 and a Zen 3 both report "AMD EPYC"; only this shows that one has AVX-512 and the other not.
    """
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break  # the first processor describes them all
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return f"{platform.machine()} {platform.processor()}".strip()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    ident = "/".join(fields.get(k, "?") for k in ("cpu family", "model", "stepping"))
    vendor = fields.get("vendor_id") or fields.get("CPU implementer") or platform.machine()
    return " ".join([vendor, ident, *(flag for flag in VECTOR_FLAGS if flag in flags)])


def cpu_identity() -> str:
    """Name and signature together: what caches of timings are keyed by."""
    return f"{cpu_model()} | {cpu_signature()}"


def cpu_mismatch(saved: dict) -> str | None:
    """Why a result recorded in environment ``saved`` was not made on this CPU, or None if it was.

    Results recorded before the signature existed carry only the marketing name; that is compared alone.
    """
    if saved.get("cpu") != cpu_model():
        return f"made on {saved.get('cpu')!r}, this CPU is {cpu_model()!r}"
    if "cpu_signature" in saved and saved["cpu_signature"] != cpu_signature():
        return f"made on {saved['cpu_signature']!r}, this CPU is {cpu_signature()!r}"
    return None


def package_versions(names: Sequence[str] = RECORDED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of the given distributions (``None`` when absent)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def environment(threads: int | None = None) -> dict:
    """Metadata stored with every result: machine, thread count and library versions."""
    return {
        "cpu": cpu_model(),
        "cpu_signature": cpu_signature(),
        "cores": host_cores(),
        "threads": threads if threads is not None else host_cores(),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "packages": package_versions(),
        "recorded_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def measure_alternating(
    functions: Sequence[Callable[[], object]], config: MeasureConfig = DEFAULT, rounds: int = 2
) -> list[LatencyStats]:
    """Time several calls in turn, ``rounds`` times over, pooling each one's samples.

    Alternating spreads a shared machine's slow spells over every contestant instead of one. The first
    round goes in the given order, later rounds in seeded shuffles of it, so no call always follows
    the same neighbour (a library whose threads are still winding down slows whoever runs next).
    """
    samples: list[list[float]] = [[] for _ in functions]
    rng = np.random.default_rng(0)
    for round_index in range(rounds):
        order = range(len(functions)) if round_index == 0 else rng.permutation(len(functions))
        for index in order:
            samples[index].extend(measure_latency(functions[index], config).samples_ms)
    return [summarize(values) for values in samples]
