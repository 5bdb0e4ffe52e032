"""Timing the plans: the native runs and their identical twins, one contest between plans and natives (the refining
probe's and the final one), and how each settles."""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import onnx

from rlcompile import runtimes
from rlcompile.errors import RlcompileError, first_line
from rlcompile.events import Event, Listener, Noise, Phase, ignore
from rlcompile.layer.group_table import (
    GroupedModel,
)
from rlcompile.layer.selection.candidates import Candidate, native_twin
from rlcompile.measure import (
    DECISION_ROUNDS,
    NOISY,
    Contender,
    MeasureConfig,
    Settle,
    Standings,
    Timer,
    contest,
    run_contest,
    spread_over,
)
from rlcompile.measure.load import load_words
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.names import REFERENCE_RUNTIME
from rlcompile.runtimes import Runtime, RuntimeOptions

#: A second, identical ONNX Runtime session timed with the others: its ratio to the first is the noise.
NOISE_PROBE = "ort native (identical session)"
OPENVINO_NOISE_PROBE = "openvino native (identical session)"
PROBES = {NOISE_PROBE: "ort native", OPENVINO_NOISE_PROBE: "openvino native"}
#: Where no native run gauges a library (PyTorch, TVM's kernels), its single-library plan is compiled twice and the
#: copy timed in the final contest under this label: the plan is then judged at its library's speed by a run other than
#: itself (without it, PyTorch's plans drifted otherwise than ORT's and missed their prediction by 15-30%).
PLAN_TWIN = "single:{} (identical plan)"
#: Rounds when timing the candidates (a slow spell of a shared machine then hits all of them).
ROUNDS = DECISION_ROUNDS
#: With a deadline, the final contest's first batch of rounds is fitted into this share of the time left; the
#: settling batches may use the rest (every plan while a batch of all of them fits and the twins are within
#: :data:`~rlcompile.measure.contest.NOISY_TARGET`, then those still in contention).
FIRST_BATCH_SHARE = 0.3
#: The final contest's settling batches time every plan, not only those near the fastest: each plan is judged against
#: its prediction, and five rounds on a 2-core VM can catch a majority of slow blocks (``benchmarks/real_world.py
#: --commands select``: settled plans within 15% of their prediction 94% of the time, unsettled 74%).
SETTLE_EVERY_PLAN = True
#: With a deadline, the settling batches go on while they fit, however close the twins already are: the twins say the
#: contest is settled, not that each plan is (plans timed in every round came within 15% of their prediction 46 times
#: in 46, those left at five rounds 9 in 13). Without a deadline the twins' target stands.
FILL_THE_DEADLINE = True
#: A probe, and the final contest within its batches, times again each plan whose block medians spread more than this
#: (slowest over fastest, less 1), beside the runs that gauge its speed: on a 2-core VM a 13-segment plan ran 1.3x its
#: usual time in a quarter of its blocks, and a probe of five rounds caught 2.5x its final measurement.
BLOCK_SPREAD = 0.3
#: Without a deadline, the refining probe and the final contest time every plan in at least this many batches of rounds,
#: whatever the twins say: with one batch the predictions missed by an RMS log of 0.063, with two by 0.041, every plan
#: within 1.111x (runs 1.05x as long).
UNHURRIED_BATCHES = 2
#: A final contest whose twins still differ by more than :data:`~rlcompile.measure.contest.NOISY_TARGET` after its
#: batches goes on for up to this many more, each with blocks twice as long as the last, up to
#: :data:`LONGEST_BLOCK_S`, before its deadline. Measured on the 2-core Zen 4 VM (ocr-cls, ORT and OpenVINO native and
#: their twins, ``benchmarks/contest_noise.py``): ``--quick``'s 0.04 s blocks over 5 rounds left ORT's twins 8-111%
#: apart, the same blocks over 15 rounds 0.6-1.4%, 0.7 s blocks 0.3-1.8%; waiting 2 s after the compiles or warming
#: each session for 0.3 s first changed nothing, while the machine's speed moved 2x between contests minutes apart.
NOISY_BATCHES = 4
LONGEST_BLOCK_S = 0.35


def native_timers(model: LoadedModel, feeds: dict[str, np.ndarray], threads: int, created,
                  progress: Listener = ignore) -> dict[str, Timer]:  # fmt: skip
    """ONNX Runtime (and OpenVINO when it takes the whole model) on the original model, as a user would run it.

    Each runs twice, in two identical sessions: their ratio is the timing noise of this run. OpenVINO refusing
    the model whole (an operator its converter rejects) leaves it out of the native runs, said in an event.
    """

    def twins(runtime, options: RuntimeOptions, names: tuple[str, str]) -> dict[str, Timer]:
        runners = model.compile_copies(runtime, len(names), options)
        return {name: runner.timed(feeds) for name, runner in zip(names, runners, strict=True)}

    timers = twins(runtimes.create(REFERENCE_RUNTIME), RuntimeOptions(threads, exclusive=True),
                   (NOISE_PROBE, "ort native"))  # fmt: skip
    if "openvino" in created:
        try:
            openvino = twins(created["openvino"], RuntimeOptions(threads), (OPENVINO_NOISE_PROBE, "openvino native"))
        except RlcompileError as error:  # OpenVINO cannot take the model whole: the native run is ONNX Runtime's
            progress(Event("layer", f"OpenVINO does not run the whole model natively: {first_line(error)}"))
        else:
            timers |= openvino
    return timers


def time_candidates(grouped: GroupedModel, candidates: list[Candidate], natives: dict[str, Timer],
                    timing: MeasureConfig, progress: Listener, deadline: float | None = None,
                    native_proto: onnx.ModelProto | None = None) -> Standings:  # fmt: skip
    """The final measurement: every candidate and every native run, in one contest (shortened to end by
    ``deadline`` when there is one, down to a floor), settled (:func:`final_settle`). Returns its standings."""
    runnable = sum(c.engine is not None and c.error is None for c in candidates)
    if deadline is not None:  # the first batch of rounds takes a part of the time left, settling the rest
        seconds = FIRST_BATCH_SHARE * (deadline - time.monotonic())
        timing = contest.fit_within(timing, runnable + len(natives), seconds)
    progress(Phase("layer", f"timing {runnable} plans and {len(natives)} native runs in turns", "measure"))
    return time_candidates_once(candidates, natives, timing, grouped.feeds, native_proto, final_settle(deadline),
                                progress)  # fmt: skip


def time_candidates_once(candidates: list[Candidate], natives: dict[str, Timer], timing: MeasureConfig,
                         feeds: dict[str, np.ndarray], native_proto: onnx.ModelProto | None = None,
                         settle: Settle | None = None, progress: Listener = ignore,
                         clocked: bool = False) -> Standings:  # fmt: skip
    """One contest between the runnable candidates and the native runs; fills ``candidate.measured`` (and, when
    ``clocked``, ``candidate.segment_ms``: each segment's share of the plan's median, :func:`segment_shares`), and
    returns the standings (the native runs under their names).

    The twins are the native runs' identical sessions and every one-segment candidate that runs
    ``native_proto`` (the model the native runs run) in a library that is also run natively; ``settle``
    extends the contest while they disagree.
    """
    runnable = [c for c in candidates if c.engine is not None and c.error is None]
    # the twins run first and ORT native last in the first round, so their ratio spans the round
    probes = [Contender.from_timer(name, timer, twin_of=PROBES[name])
              for name, timer in natives.items() if name in PROBES]  # fmt: skip
    clocks = [[[] for _ in c.engine.compiled] if clocked else None for c in runnable]
    plans = [Contender(f"plan {index}", lambda c=c, clock=clock: c.engine.run(feeds, clock),
                       native_twin(c, native_proto, natives), c.segments, c.engine.wind_down_s)
             for index, (c, clock) in enumerate(zip(runnable, clocks, strict=True))]  # fmt: skip
    others = [Contender.from_timer(name, timer) for name, timer in natives.items() if name not in PROBES]
    standings = run_contest([*probes, *plans, *others], spread_over(timing, ROUNDS), ROUNDS, settle)
    report_noise(standings, progress)
    for candidate, contender, clock in zip(runnable, plans, clocks, strict=True):
        candidate.measured = standings[contender.label]
        candidate.round_ms = standings.round_ms.get(contender.label)
        if clock is not None:
            candidate.segment_ms = segment_shares(clock, candidate.measured.median_ms)
    return standings


def segment_shares(clock: Sequence[Sequence[float]], plan_ms: float) -> list[float]:
    """Each segment's milliseconds inside a plan's runs (``clock``: seconds per call, a list per segment), adding
    up to the plan's median over those same calls (``plan_ms``): the plan's time shared out by each segment's mean.

    Not each segment's own median: a segment's time is skewed (now and then a call waits for another library's
    threads), so the medians of many segments add up to less than the plan's median. On the 2-core Zen 4 VM they
    added up to 0.80x of it for ocr-det's plan of 17 segments (15.77 ms of
    medians, 19.82 ms measured whole, 19.52 by the final contest) and 0.76x for hf:deit's of 24; the table, fitted
    to the medians, priced those plans 20-25% low. The means add up to the mean of the whole, and scaled to its
    median they share out what the plan is judged by; a slow call counts in the segment it happened in."""
    means = [float(np.mean(seconds)) if len(seconds) else 0.0 for seconds in clock]
    total = sum(means)
    if total <= 0 or not math.isfinite(plan_ms):
        return [1e3 * float(np.median(seconds)) if len(seconds) else 0.0 for seconds in clock]
    return [plan_ms * mean / total for mean in means]


def report_noise(standings: Standings, progress: Listener) -> None:
    """Say how many rounds the contest took and how far its twins stayed apart; beyond
    :data:`~rlcompile.measure.NOISY`, that gains below that spread cannot be judged on this machine now; and, when
    it was noticeable, what else used the machine meanwhile (:class:`~rlcompile.measure.load.MachineLoad`)."""
    if standings.noise is None:
        return
    text = f"identical sessions differ by {100 * standings.noise:.1f}% after {standings.rounds} rounds"
    if standings.noise > NOISY:
        text += ": the machine is too noisy now to judge gains below that"
    load = standings.load
    text += load_words(load)
    if standings.retimed:
        text += f"; {standings.retimed} block(s) timed again: the hypervisor had taken their time"
    progress(Noise("layer", text, noise=standings.noise, rounds=standings.rounds,
                   steal=load.steal if load else None, others=load.others if load else None,
                   retimed=standings.retimed))  # fmt: skip


def ungauged_libraries(created: Collection[str], gauges: Collection[str]) -> list[str]:
    """The libraries among ``created`` that no native run among ``gauges`` (labels) gauges."""
    gauged = {label.split()[0] for label in gauges}
    return [name for name in created if name not in gauged]


def plan_twin_timers(grouped: GroupedModel, candidates: list[Candidate], created: Mapping[str, Runtime],
                     threads: int, ungauged: Collection[str],
                     progress: Listener = ignore) -> dict[str, Timer]:  # fmt: skip
    """A second compile of each runnable single-library plan whose libraries are all ``ungauged``, as a timer
    labelled :data:`PLAN_TWIN` (a compile that fails is said and left out: the plan is then gauged by ORT native's
    drift)."""
    timers = {}
    for candidate in candidates:
        if candidate.engine is None or candidate.error is not None or not candidate.single:
            continue
        if not set(candidate.single) <= set(ungauged):
            continue
        label = PLAN_TWIN.format("+".join(candidate.single))
        progress(Phase("layer", f"compiling {label} to gauge its library's speed", "compile"))
        try:
            engine = grouped.compile_engine(candidate.assignment, threads, created)
        except Exception as error:  # the plan's library is then gauged by ORT native's drift
            progress(Event("layer", f"{label} did not compile ({first_line(error)}): its library is not gauged"))
            continue
        timers[label] = Timer(lambda engine=engine: engine.run(grouped.feeds), engine.wind_down_s)
    return timers


def twin_libraries(label: str) -> list[str]:
    """The libraries whose single-library plan the :data:`PLAN_TWIN` ``label`` copies."""
    return label.removeprefix("single:").split(" ")[0].split("+")


def final_settle(deadline: float | None) -> Settle:
    """How the final contest settles: more rounds while its twins differ by more than
    :data:`~rlcompile.measure.contest.SETTLED_NOISE` (with a deadline, while they fit before it:
    :data:`FILL_THE_DEADLINE`; without one, at least :data:`UNHURRIED_BATCHES` batches), for every plan while a batch
    of all of them fits and the twins are within :data:`~rlcompile.measure.contest.NOISY_TARGET`
    (:data:`SETTLE_EVERY_PLAN`), then for those in contention, then for each whose blocks
    disagree (:data:`BLOCK_SPREAD`); still noisy, with longer blocks (:data:`NOISY_BATCHES`)."""
    longer = {"noisy": contest.NOISY_TARGET, "noisy_batches": NOISY_BATCHES, "grow": 2.0,
              "longest_s": LONGEST_BLOCK_S}  # fmt: skip
    if deadline is not None:
        target = 0.0 if FILL_THE_DEADLINE else contest.SETTLED_NOISE
        return Settle(target=target, deadline=deadline, everyone=SETTLE_EVERY_PLAN, spread=BLOCK_SPREAD, **longer)
    return Settle(everyone=SETTLE_EVERY_PLAN, spread=BLOCK_SPREAD, min_batches=UNHURRIED_BATCHES, **longer)


def probe_settle(deadline: float | None) -> Settle:
    """How a refining probe settles: with a deadline, one more batch at most, for the plans whose blocks disagree
    (:data:`BLOCK_SPREAD`); without one, as the final contest does (:func:`final_settle`): the table is fitted to
    the probe, so its measurements must repeat as well as the final contest's."""
    if deadline is not None:
        return Settle(target=math.inf, max_batches=2, deadline=deadline, spread=BLOCK_SPREAD)
    return final_settle(None)
