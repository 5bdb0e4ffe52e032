"""Throughput under concurrent requests: completed inferences per second with N requests in flight, in turns.

A :class:`Server` is one configuration serving requests: one callable per request in flight (``callers``), each
called over and over by its own thread, as a server's workers call their model. A throughput contest gives every
server a block of ``block_s`` seconds in turns, for ``rounds`` rounds (the first in the given order, later ones in
seeded shuffles, so a slow spell of the machine lands on every server); each block starts every thread at once after
one warm-up call each, and counts the requests completed and each one's latency. A server's rate is the first
server's median rate times the median, over the rounds, of its block's rate over the first server's in the same round
(as :func:`~rlcompile.measure.contest.paired_medians` judges latency); its latency is the median and the 99th
percentile over every request it served. A twin (an identical second server) gives the noise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

#: Seconds a server serves per block, and rounds per contest: a 2-core VM's throughput twins stayed within 2-3% at
#: 1 s blocks over 5 rounds on a 5 ms model.
BLOCK_S = 1.0
ROUNDS = 5


@dataclass(frozen=True)
class Server:
    """A configuration serving requests: one caller per request in flight; ``twin_of``: the server it copies."""

    label: str
    callers: tuple[Callable[[], object], ...]
    twin_of: str | None = None

    @property
    def concurrency(self) -> int:
        return len(self.callers)


@dataclass(frozen=True)
class ServingStats:
    """What a server did: inferences per second (judged round by round), request latency (median, 99th percentile)."""

    label: str
    per_s: float
    p50_ms: float
    p99_ms: float
    requests: int
    rounds: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ThroughputStandings:
    stats: dict[str, ServingStats]
    twins: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, label: str) -> ServingStats:
        return self.stats[label]

    @property
    def noise(self) -> float | None:
        """The largest |ratio - 1| of a twin's rate to its original's (``None`` without twins)."""
        ratios = [abs(self.stats[twin].per_s / self.stats[original].per_s - 1) for twin, original in self.twins.items()]
        return max(ratios) if ratios else None

    def best(self, labels: Sequence[str] | None = None) -> str:
        """The highest rate among ``labels`` (default: every server that is not a twin)."""
        pool = labels if labels is not None else [label for label in self.stats if label not in self.twins]
        return max(pool, key=lambda label: self.stats[label].per_s)

    def to_dict(self) -> dict:
        return {"servers": {label: stats.to_dict() for label, stats in self.stats.items()}, "noise": self.noise}


def serve_block(callers: Sequence[Callable[[], object]], seconds: float) -> tuple[int, list[float], float]:
    """Every caller called over and over by its own thread for ``seconds`` (one warm-up call each first, then all
    released at once): requests completed, each one's latency in ms, and the seconds from release to the last end."""
    start = threading.Barrier(len(callers) + 1)
    latencies: list[list[float]] = [[] for _ in callers]
    errors: list[BaseException] = []

    def work(call: Callable[[], object], found: list[float]) -> None:
        try:
            call()
        except BaseException as error:  # reported in the caller's thread below
            errors.append(error)
        start.wait()
        stop = time.perf_counter() + seconds
        try:
            while not errors:
                began = time.perf_counter()
                call()
                ended = time.perf_counter()
                found.append(1e3 * (ended - began))
                if ended >= stop:
                    break
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(call, found), daemon=True)
               for call, found in zip(callers, latencies, strict=True)]  # fmt: skip
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    flat = [value for found in latencies for value in found]
    return len(flat), flat, elapsed


def throughput_contest(servers: Sequence[Server], block_s: float = BLOCK_S, rounds: int = ROUNDS,
                       seed: int = 0, noise_target: float | None = None,
                       max_rounds: int | None = None) -> ThroughputStandings:  # fmt: skip
    """Every server served in turns (see the module's docstring); the standings. With ``noise_target``, rounds go on
    past ``rounds`` while the twins' spread is above it, up to ``max_rounds`` in all."""
    rates: list[list[float]] = [[] for _ in servers]
    latencies: list[list[float]] = [[] for _ in servers]
    rng = np.random.default_rng(seed)
    done = 0
    while True:
        order = range(len(servers)) if done == 0 else rng.permutation(len(servers))
        for index in order:
            count, found, elapsed = serve_block(servers[index].callers, block_s)
            rates[index].append(count / elapsed)
            latencies[index].extend(found)
        done += 1
        standings = standings_of(servers, rates, latencies)
        if done >= rounds and (noise_target is None or done >= (max_rounds or rounds)
                               or (standings.noise or 0.0) <= noise_target):  # fmt: skip
            return standings


def standings_of(servers: Sequence[Server], rates: list[list[float]],
                 latencies: list[list[float]]) -> ThroughputStandings:  # fmt: skip
    """Each server's rate judged round by round against the first server's, and its request latency."""
    reference = np.asarray(rates[0])
    stats = {}
    for server, rate, found in zip(servers, rates, latencies, strict=True):
        per_s = float(np.median(reference) * np.median(np.asarray(rate) / reference))
        p50, p99 = float(np.median(found)), float(np.percentile(found, 99))
        stats[server.label] = ServingStats(server.label, per_s, p50, p99, len(found), len(rate))
    return ThroughputStandings(stats, {s.label: s.twin_of for s in servers if s.twin_of is not None})
