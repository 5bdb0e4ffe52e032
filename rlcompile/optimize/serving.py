"""``--objective throughput``: the plan and the runtime's serving knobs chosen together, under concurrent requests.

After the layer stage, each candidate plan of one segment on ONNX Runtime or OpenVINO (the plan chosen for latency,
the user's model run whole by each runtime, the fastest single-runtime plan of each runtime) is paired with its
runtime's serving configurations (:func:`~rlcompile.runtimes.serving.serving_candidates`: sessions x threads,
OpenVINO's hints and streams), and every pair serves ``--concurrency`` requests in flight in one throughput contest
(:mod:`rlcompile.measure.throughput`), beside a twin of ONNX Runtime's default serving of the user's model, whose
spread is the noise. The pair with the most inferences per second is kept: its plan is written, its configuration
recorded in the manifest (``serving``) and used by ``rlcompile.load(DIR).serve()`` and the export. Plans of several
segments are served as they are by latency only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rlcompile.events import Decision, Listener, Phase
from rlcompile.layer.selection.candidates import Candidate
from rlcompile.layer.selection.record import Selection
from rlcompile.measure.throughput import Server, ThroughputStandings, throughput_contest
from rlcompile.runtimes.serving import Serving, distinct_servers, servers, serving_candidates

#: Throughput is judged over this many rounds; each block is the time left for serving shared out, at least
#: :data:`MIN_BLOCK_S` (a block holds at least a few dozen requests of a 10 ms model).
ROUNDS = 4
MIN_BLOCK_S = 0.3
#: A block takes about this much longer than its serving time (the threads' start, a warm-up call each, the last
#: request finishing after the block's end).
BLOCK_OVERHEAD = 1.15
SERVED = ("ort", "openvino")
#: The share of a budget kept for serving under ``--objective throughput`` (every pair serves :data:`ROUNDS` rounds).
SERVING_SHARE = 0.2
#: Each block's serving time when no budget bounds the contest (``select`` without ``--budget``).
UNBOUNDED_BLOCK_S = 1.0
TWIN = " (identical)"


@dataclass
class ServingChoice:
    """The candidate and configuration kept (``label``: their server's), and what every pair measured."""

    candidate: Candidate
    serving: Serving
    label: str
    standings: ThroughputStandings
    concurrency: int

    def to_json(self) -> dict:
        best = self.standings[self.label]
        return {"objective": "throughput", "concurrency": self.concurrency, "serving": self.serving.to_json(),
                "kept": self.label, "per_s": best.per_s, "p50_ms": best.p50_ms, "p99_ms": best.p99_ms,
                "noise": self.standings.noise,
                "servers": {label: stats.to_dict() for label, stats in self.standings.stats.items()}}  # fmt: skip


def served_candidates(selection: Selection) -> list[Candidate]:
    """The plans of one segment on ONNX Runtime or OpenVINO worth serving: the chosen one, each runtime's
    untouched model and its fastest single-runtime plan."""
    single = [c for c in selection.candidates if c.engine is not None and c.measured is not None and c.error is None
              and c.segments == 1 and c.engine.compiled[0].segment.library in SERVED]  # fmt: skip
    picked = [selection.chosen] if selection.chosen in single else []
    for library in SERVED:
        mine = [c for c in single if c.engine.compiled[0].segment.library == library]
        picked += [c for c in mine if c.untouched][:1]
        picked += sorted(mine, key=lambda c: c.measured.median_ms)[:1]
    unique: list[Candidate] = []
    for candidate in picked:
        if not any(candidate is seen for seen in unique):
            unique.append(candidate)
    return unique


def choose_serving(selection: Selection, concurrency: int, deadline: float | None,
                   progress: Listener) -> ServingChoice | None:  # fmt: skip
    """Every (plan, serving) pair served ``concurrency`` requests in flight, its blocks fitted to end by ``deadline``
    (``time.monotonic()``; ``None``: blocks of :data:`UNBOUNDED_BLOCK_S`) once the pairs are compiled; the one that
    served the most per second (``None`` when no plan of one segment on ONNX Runtime or OpenVINO is at hand)."""
    candidates = served_candidates(selection)
    if not candidates:
        return None
    feeds = selection.grouped.feeds
    pairs, contenders = {}, []
    for candidate in candidates:
        segment = candidate.engine.compiled[0].segment
        found = serving_candidates(segment.library, concurrency, precision=segment.precision)
        for serving, callers in distinct_servers(found, segment.proto, feeds, concurrency):
            label = f"{'untouched ' if candidate.untouched else ''}{' + '.join(candidate.labels)}: {serving.label}"
            pairs[label] = (candidate, serving)
            contenders.append(Server(label, tuple(callers)))
    reference = contenders[0]
    twin_source = pairs[reference.label]
    twin = Server(reference.label + TWIN, tuple(servers(twin_source[1], twin_source[0].engine.compiled[0].segment.proto,
                                                        feeds, concurrency)), twin_of=reference.label)  # fmt: skip
    block_s = (UNBOUNDED_BLOCK_S if deadline is None else
               max(MIN_BLOCK_S, (deadline - time.monotonic()) / (ROUNDS * (len(contenders) + 1)) / BLOCK_OVERHEAD))
    progress(Phase("serving", f"serving {concurrency} requests in flight: {len(contenders)} plan and configuration "
                              f"pairs, {ROUNDS} rounds of {block_s:.1f} s blocks", "throughput"))  # fmt: skip
    started = time.monotonic()
    standings = throughput_contest([*contenders, twin], block_s, ROUNDS)
    best = standings.best([server.label for server in contenders])
    candidate, serving = pairs[best]
    default = standings[reference.label].per_s
    progress(Decision("serving", f"kept {best}: {standings[best].per_s:.1f}/s (p99 {standings[best].p99_ms:.2f} ms), "
                                 f"{standings[best].per_s / default:.2f}x {reference.label}; twins "
                                 f"{100 * (standings.noise or 0):.1f}% apart; {time.monotonic() - started:.0f} s",
                      kept=True, gain=standings[best].per_s / default - 1, noise=standings.noise))  # fmt: skip
    return ServingChoice(candidate, serving, best, standings, concurrency)
