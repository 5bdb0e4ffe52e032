"""The one contest every decision goes through: contenders timed in turns beside identical twins.

Every level keeps a result only if it measures faster: the graph level a rewrite over the original,
the layer level a plan over the single libraries and the native runs, ``run A B`` one saved result
over another. They all time the same way, here:

* **Rounds in turns.** Each contender is timed for a block, then the next, for ``rounds`` rounds; the
  first round goes in the given order, later rounds in seeded shuffles, so a shared machine's slow spell
  lands on every contender instead of one, and no contender always follows the same neighbour (a
  library whose threads are still winding down slows whoever runs next). Medians pool every round. A
  contender whose library keeps spinning after its runs (an ONNX Runtime session run exclusively) is
  followed by a wait until the process is idle again (:func:`wind_down`, at most a few times
  ``Contender.wind_down_s``): measured, it slowed the next plan 1.4-2.2x at once and not at all 50 ms later.
* **Twins.** A contender may be the identical twin of another (a second session of the same model):
  the ratio of their medians is the noise of this very measurement.
* **Settling** (:class:`Settle`): a decision's contest runs more batches of rounds, pooled, while its twins
  differ by more than a target and its time allows, so the noise is made small by measuring longer rather
  than by a wider band (measured on a 2-core Xeon, mpnet from the corpus, five contenders: 5 rounds of
  0.04 s blocks left twins 6-10% apart, 20 rounds 2-3%, 40 rounds 1.9% on average).
* **A keep rule** (:class:`KeepRule`): a challenger replaces the incumbent only when it is faster by
  more than that noise and by at least a minimum gain; among the fastest, contenders within a tie band
  count as ties and the simplest wins.

The rules the levels use are named here, with the reason for each (:data:`REWRITE_RULE`,
:data:`PLAN_RULE`), and so are the round counts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from rlcompile.measure.load import MachineLoad, cpu_ticks, machine_load
from rlcompile.measure.timing import DEFAULT, LatencyStats, MeasureConfig, measure_latency, summarize

#: Rounds for a decision (graph judge, layer selection, calibration): enough turns that a slow spell of a
#: shared machine is spread over every contender (measured: 2 rounds left 2-6% between twins on a busy
#: 2-core machine, 5 rounds 0.1-1.3%).
DECISION_ROUNDS = 5
#: Rounds for a report that decides nothing (``run A B``, ``select``'s per-operator plan beside ORT).
REPORT_ROUNDS = 2
#: A settled contest stops adding rounds once its twins differ by at most this: below the 3% a decision may
#: claim on a quiet machine, with room for the chance that one batch happens to measure low.
SETTLED_NOISE = 0.02
#: Beyond this spread a run says that the machine was too noisy to judge small gains.
NOISY = 0.05
#: A contest past its deadline still finishes this many rounds: one round alone is one slow spell away from a
#: wrong order.
MIN_ROUNDS = 2


@dataclass(frozen=True)
class KeepRule:
    """When a challenger beats the incumbent, and when contenders tie.

    ``min_gain``: the least relative gain worth keeping a change for, even when the noise is smaller (a
    rewrite that saves 0.3% is not worth a different graph). ``tie_band``: contenders measured within
    this fraction of the fastest are ties, and a tie goes to the simplest.
    """

    min_gain: float = 0.0
    tie_band: float = 0.0


#: A graph rewrite is kept only if ORT runs it >= 1% faster and faster than the twins differ: below 1% a
#: rewrite's gain is within what the same graph varies between two processes.
REWRITE_RULE = KeepRule(min_gain=0.01)
#: Plans within 2% of the fastest are ties and the one with fewest segments wins: a segment boundary is a
#: risk (another library's threads, a copy) that a gain inside the run-to-run spread does not pay for; the band
#: widens to the contest's noise when that is larger (:func:`fastest`).
PLAN_RULE = KeepRule(tie_band=0.02)


@dataclass(frozen=True)
class Timer:
    """One call of a compiled model on inputs already in place (``call``), and the seconds its library's idle
    threads keep a core busy after it (``wind_down_s``, the runner's): a native run as the contests time it."""

    call: Callable[[], object]
    wind_down_s: float = 0.0

    def __call__(self) -> object:
        return self.call()


@dataclass(frozen=True)
class Contender:
    """One thing to time. ``twin_of``: the label of the contender this one runs identically (a noise
    probe). ``simplicity``: lower is simpler (fewer segments); ties go to the simplest."""

    label: str
    call: Callable[[], object]
    twin_of: str | None = None
    simplicity: float = 0.0
    #: about how long its library's idle threads keep a core busy after its turn, which the contest waits out
    #: (:func:`wind_down`; :data:`~rlcompile.threads.SPIN_WIND_DOWN_S` for an ONNX Runtime session that spins)
    wind_down_s: float = 0.0

    @classmethod
    def from_timer(cls, label: str, timer: Timer, twin_of: str | None = None) -> Contender:
        """``timer`` as a contender: its call, followed by its wind-down."""
        return cls(label, timer.call, twin_of, wind_down_s=timer.wind_down_s)


@dataclass(frozen=True)
class Settle:
    """Keep a contest going while its twins disagree: after the first ``rounds``, another batch of as many
    rounds (pooled with the rest) while the noise exceeds ``target``, up to ``max_batches`` batches in all,
    and never past ``deadline`` (``time.monotonic()``; a batch starts only when one more fits before it).

    Later batches time only the contenders still in contention: those within ``contention`` of the fastest
    (far beyond any noise a settled contest leaves), and every twin with the contender it copies. A plan
    measured 1.5x slower than the best after the first batch keeps that measurement; timing it longer would
    change no decision and would take the time the close ones need. With ``everyone``, a batch times every
    contender while a batch of all of them fits, and only those in contention when just that fits: for a
    contest whose every measurement is reported and checked against a prediction (the layer level's final one), unless
    its twins differ by more than ``noisy``: then the batches go to the contenders in contention.

    With ``spread``, a contest the twins leave settled still gives another batch to each contender whose blocks
    disagree (its slowest block median more than ``1 + spread`` times its fastest), timed beside the twins and the
    contenders they copy (the gauges its speed is judged by), within the batches and the deadline: a plan that
    runs slow in one block in five is measured in more of the machine's states before its median is taken.

    With ``min_batches``, every contender is timed in that many batches, within the deadline, however close the
    twins are: the twins agreeing says the machine was steady, not that each contender's median of a few blocks is
    (for a contest each of whose measurements is checked against a prediction).

    With ``noisy``, a contest whose twins still differ by more than that after ``max_batches`` goes on for up to
    ``noisy_batches`` more, before the deadline, each with blocks ``grow`` times as long as the last (up to
    ``longest_s``): short blocks meet a shared machine's slow spells unevenly (:data:`NOISY_TARGET`).
    """

    target: float = SETTLED_NOISE
    max_batches: int = 4
    deadline: float | None = None
    contention: float = 0.10
    everyone: bool = False
    spread: float | None = None
    min_batches: int = 1
    noisy: float | None = None
    noisy_batches: int = 0
    grow: float = 1.0
    longest_s: float = 0.0

    def allows(self, noise: float | None, batches: int, batch_seconds: float) -> bool:
        """Whether one more batch is measured while the twins disagree."""
        return noise is not None and noise > self.target and self.has_room(batches, batch_seconds, noise)

    def too_noisy(self, noise: float | None) -> bool:
        """Whether the twins differ by more than :attr:`noisy`: the settling batches then time only the contenders in
        contention, even with :attr:`everyone`, so the time left goes to the decision."""
        return self.noisy is not None and noise is not None and noise > self.noisy

    def has_room(self, batches: int, batch_seconds: float, noise: float | None = None) -> bool:
        """Whether one more batch of ``batch_seconds`` fits within the batches (those for a noisy contest too, when
        ``noise`` is beyond :attr:`noisy`) and before the deadline."""
        limit = self.max_batches + (self.noisy_batches if self.too_noisy(noise) else 0)
        if batches >= limit:
            return False
        return self.deadline is None or time.monotonic() + batch_seconds <= self.deadline

    def lengthened(self, timing: MeasureConfig, batches: int) -> MeasureConfig:
        """The blocks of the batch after ``batches`` batches: past :attr:`max_batches`, ``grow`` times the last's."""
        extra = batches - self.max_batches + 1
        if extra <= 0 or self.grow <= 1.0:
            return timing
        longest = max(self.longest_s, timing.min_time_s)
        return replace(timing, min_time_s=min(timing.min_time_s * self.grow**extra, longest),
                       max_time_s=max(timing.max_time_s, longest))  # fmt: skip


#: A decision settles within 4 batches (20 rounds: 1.9% between twins on average in the measurement above, 40
#: rounds no better); a contest without twins never extends.
SETTLE = Settle()
#: A final contest whose twins differ by more than this settles only the contenders in contention, and after its
#: batches measures longer (:attr:`Settle.noisy`): beyond it, a plan's gain over the native cannot be told from the
#: machine's noise.
NOISY_TARGET = 0.03


@dataclass
class Standings:
    """What a contest measured: every contender's latency, the twins' spread as the noise, and how many
    rounds it took."""

    stats: dict[str, LatencyStats]
    twins: dict[str, str] = field(default_factory=dict)
    simplicity: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    #: each contender's block median by round number: what it ran at in the machine's state of that round
    round_ms: dict[str, dict[int, float]] = field(default_factory=dict)
    #: what else used the machine while the contest ran (``None`` where that cannot be read)
    load: MachineLoad | None = None
    #: how many blocks were timed again because the machine was taken from them (:func:`undisturbed_block`)
    retimed: int = 0

    def __getitem__(self, label: str) -> LatencyStats:
        return self.stats[label]

    def median(self, label: str) -> float:
        return self.stats[label].median_ms

    @property
    def noise(self) -> float | None:
        """The largest |ratio - 1| between a twin and the contender it copies, judged round by round
        (:meth:`ratio`; ``None`` without twins)."""
        ratios = [abs(self.ratio(twin, original) - 1) for twin, original in self.twins.items()]
        return max(ratios) if ratios else None

    def ratio(self, label: str, other: str) -> float:
        """How long ``label`` took over ``other``: the median over the rounds both were timed in of their blocks'
        ratio (:func:`pair_ratio`)."""
        return pair_ratio(self.round_ms.get(label), self.round_ms.get(other), self.median(label), self.median(other))

    def gain(self, challenger: str, incumbent: str) -> float:
        """How much faster ``challenger`` ran than ``incumbent`` (negative: slower)."""
        return 1 - self.median(challenger) / self.median(incumbent)

    def beats(self, challenger: str, incumbent: str, rule: KeepRule) -> bool:
        """Whether ``challenger`` replaces ``incumbent`` under ``rule`` and this contest's noise."""
        return beats(self.median(incumbent), self.median(challenger), self.noise or 0.0, rule)

    def winner(self, rule: KeepRule, labels: Sequence[str] | None = None) -> str:
        """The fastest of ``labels`` (default: every contender that is not a twin); among those within the
        rule's tie band of it, the simplest."""
        pool = list(labels) if labels is not None else [label for label in self.stats if label not in self.twins]
        return fastest([(label, self.median(label), self.simplicity.get(label, 0.0)) for label in pool], rule)


def beats(incumbent_ms: float, challenger_ms: float, noise: float, rule: KeepRule) -> bool:
    """The keep rule itself: faster by more than the noise and by at least ``rule.min_gain``."""
    return 1 - challenger_ms / incumbent_ms > max(noise, rule.min_gain)


def fastest(entries: Sequence[tuple[str, float, float | tuple[float, ...]]], rule: KeepRule, noise: float = 0.0) -> str:
    """Of ``(label, median ms, simplicity)`` entries, the fastest; among those within ``rule.tie_band`` of it, or
    within ``noise`` (the contest's twins' spread) when that is wider, the simplest (the least simplicity, a number or
    a tuple compared in order; then the faster): as
    :func:`beats` asks a challenger to beat the noise, a simpler contender is passed over only beyond it."""
    best = min(ms for _, ms, _ in entries)
    ties = [entry for entry in entries if entry[1] <= best * (1 + max(rule.tie_band, noise))]
    return min(ties, key=lambda entry: (entry[2], entry[1]))[0]


def spread_over(timing: MeasureConfig, rounds: int) -> MeasureConfig:
    """``timing`` split into ``rounds`` shorter blocks: about twice the time in all, finer turns."""
    return replace(timing, min_time_s=timing.min_time_s * 2 / rounds,
                   min_repeats=max(3, timing.min_repeats * 2 // rounds))  # fmt: skip


#: A contest fitted into a deadline still gives each contender at least this ``min_time_s`` (half a second in all),
#: unless its timing says less (:attr:`MeasureConfig.floor_time_s`).
FLOOR_TIME_S = MeasureConfig.floor_time_s


def contest_seconds(timing: MeasureConfig, contenders: int) -> float:
    """About how long a contest of ``contenders`` takes at ``timing``: :func:`spread_over` rounds give each about
    twice ``min_time_s``, and warm-ups add a tenth."""
    return 2.2 * max(contenders, 1) * timing.min_time_s


def floor_seconds(calls_s: Sequence[float], rounds: int = DECISION_ROUNDS) -> float:
    """The least time a contest fitted into a deadline (:func:`fit_within`, blocks :func:`spread_over` ``rounds``)
    takes when its contenders' calls take ``calls_s``: :data:`MIN_ROUNDS` rounds, each turn a warm-up call and a
    block of at least one call lasting its share of :data:`FLOOR_TIME_S`. A model that takes most of a second per
    call needs this reserved before the time is spent elsewhere."""
    block_s = FLOOR_TIME_S * 2 / rounds
    return MIN_ROUNDS * sum(call_s * (1 + math.ceil(block_s / call_s)) if call_s > 0 else block_s
                            for call_s in calls_s)  # fmt: skip


def fit_within(timing: MeasureConfig, contenders: int, seconds: float) -> MeasureConfig:
    """``timing`` shortened, if need be, so that a contest of ``contenders`` ends within ``seconds``
    (:func:`contest_seconds`); never below ``timing.floor_time_s`` (the noise then says what the shorter contest
    costs). A block then ends at its time, or after one call of a model slower than that (one warm-up call
    before it): a model taking most of a second per call cannot stretch a block to ten calls."""
    fitted = timing.min_time_s * seconds / contest_seconds(timing, contenders)
    min_time_s = max(timing.floor_time_s, min(timing.min_time_s, fitted))
    return replace(timing, min_time_s=min_time_s, warmup=min(timing.warmup, 1), min_repeats=1, floor_repeats=1,
                   max_time_s=min(timing.max_time_s, min_time_s))  # fmt: skip


#: A wind-down watches this process's CPU time in slices this long ...
IDLE_SLICE_S = 0.002
#: ... and ends after two slices in a row in which its threads used less than this share of one core ...
IDLE_SHARE = 0.1
#: ... or after this many times the wait the runner expects, whichever comes first.
WIND_DOWN_CAP = 4.0


def wind_down(expected_s: float) -> float:
    """Wait while the threads of the library that has just run keep a core busy, up to :data:`WIND_DOWN_CAP` times
    ``expected_s``; the seconds waited. How long they spin is the CPU's, not a constant: ONNX Runtime's workers spin
    for 2**20 rounds of a loop around a PAUSE instruction, whose length differs several-fold between CPUs: measured
    on a 2-core Emerald Rapids VM, 34-48 ms of CPU after a native call of hf:deit, against the 50 ms that
    :data:`~rlcompile.threads.SPIN_WIND_DOWN_S` expects from the Zen 4 VM where it was measured. So the wait ends
    when the process is idle (two quiet slices of :data:`IDLE_SLICE_S`), however long that takes."""
    started = time.monotonic()
    limit = started + WIND_DOWN_CAP * expected_s
    quiet = 0
    while quiet < 2 and time.monotonic() < limit:
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(IDLE_SLICE_S)
        busy = time.process_time() - cpu
        quiet = quiet + 1 if busy < IDLE_SHARE * (time.monotonic() - wall) else 0
    return time.monotonic() - started


#: A block of calls during which the hypervisor gave other guests more than this share of the CPUs' time is timed
#: again (:func:`undisturbed_block`). Measured on the 2-core Emerald Rapids VM while it lost
#: 18% of its time to other guests (hf:mpnet, ORT and OpenVINO native and their twins, 196 blocks of 0.25 s, each
#: block's steal from ``/proc/stat``; ad hoc): blocks with under 2% stolen ran at 1.00-1.02x the quiet blocks'
#: median, 2-10% at 1.07-1.08x, 10-20% at 1.15x and over 20% at 2.96x; 38 of the 44 blocks slower than 1.15x had
#: over 5% stolen (the correlation of a block's slowness with its stolen share: 0.85-0.91 per contender). A clock
#: tick is 10 ms of one CPU: over 5% is at least two ticks in a 0.1 s block on two CPUs. (Other programs' share is
#: not judged per block: it is busy ticks less this process's CPU seconds, and a tick's rounding alone is 5% there.)
DISTURBED_SHARE = 0.05
#: At most this many times again per block; the last timing is kept whatever was taken from it.
RETIMES = 2


def undisturbed_block(call: Callable[[], object], config: MeasureConfig,
                      deadline: float | None = None) -> tuple[LatencyStats, int]:  # fmt: skip
    """A block of ``call`` (:func:`measure_latency`) that the machine was not taken from: timed again, up to
    :data:`RETIMES` times and while ``deadline`` is not past, while the hypervisor gave more than
    :data:`DISTURBED_SHARE` of the CPUs' time to other guests during it. Returns the block kept and how many were
    timed again."""
    retimed = 0
    while True:
        before = cpu_ticks()
        block = measure_latency(call, config)
        load = machine_load(before, cpu_ticks())
        disturbed = load is not None and load.steal > DISTURBED_SHARE
        if not disturbed or retimed == RETIMES or (deadline is not None and time.monotonic() > deadline):
            return block, retimed
        retimed += 1


def take_turns(calls: Sequence[Callable[[], object]], samples: list[list[float]], config: MeasureConfig,
               rounds: int, rng: np.random.Generator, in_order_first: bool = True,
               deadline: float | None = None, wind_down_s: Sequence[float] | None = None,
               blocks: Sequence[dict[int, float]] | None = None, first_round: int = 0,
               ) -> tuple[list[float], int, int]:  # fmt: skip
    """Time each call in turn for ``rounds`` rounds, adding to its ``samples``: the first round in the given
    order (unless ``in_order_first`` is off), the others in shuffles from ``rng``; past ``deadline``, no further
    round starts once :data:`MIN_ROUNDS` are done; ``wind_down_s``: each call's expected wind-down (:func:`wind_down`);
    ``blocks``: each call's block median by round number (counted from ``first_round``). Each block is one the
    machine was not taken from (:func:`undisturbed_block`).
    Returns the seconds each call's turns took (warm-ups, waits and blocks timed again included), the rounds done and
    how many blocks were timed again."""
    seconds, retimed = [0.0] * len(calls), 0
    for round_index in range(rounds):
        if deadline is not None and round_index >= MIN_ROUNDS and time.monotonic() > deadline:
            return seconds, round_index, retimed
        order = range(len(calls)) if round_index == 0 and in_order_first else rng.permutation(len(calls))
        for index in order:
            started = time.monotonic()
            block, again = undisturbed_block(calls[index], config, deadline)
            retimed += again
            samples[index].extend(block.samples_ms)
            if blocks is not None:
                blocks[index][first_round + round_index] = block.median_ms
            if wind_down_s and wind_down_s[index] > 0:
                wind_down(wind_down_s[index])
            seconds[index] += time.monotonic() - started
    return seconds, rounds, retimed


def time_in_turns(calls: Sequence[Callable[[], object]], config: MeasureConfig = DEFAULT,
                  rounds: int = REPORT_ROUNDS) -> list[LatencyStats]:  # fmt: skip
    """Time several calls in turn, ``rounds`` times over, pooling each one's samples.

    The first round goes in the given order, later rounds in seeded shuffles of it.
    """
    samples: list[list[float]] = [[] for _ in calls]
    take_turns(calls, samples, config, rounds, np.random.default_rng(0))
    return [summarize(values) for values in samples]


def run_contest(contenders: Sequence[Contender], timing: MeasureConfig = DEFAULT, rounds: int = DECISION_ROUNDS,
                settle: Settle | None = None) -> Standings:  # fmt: skip
    """Time ``contenders`` in turns for ``rounds`` rounds (each block ``timing``); the standings.

    With ``settle``, further batches of ``rounds`` rounds follow while the twins differ by more than its
    target (:class:`Settle`); every sample of every batch is pooled. The standings also say what else used the
    machine meanwhile (:attr:`Standings.load`).
    """
    labels = [contender.label for contender in contenders]
    if len(set(labels)) != len(labels):
        raise ValueError(f"contender labels must be unique: {labels}")
    started = cpu_ticks()
    calls = [contender.call for contender in contenders]
    pauses = [contender.wind_down_s for contender in contenders]
    samples: list[list[float]] = [[] for _ in calls]
    blocks: list[dict[int, float]] = [{} for _ in calls]
    rng = np.random.default_rng(0)
    deadline = settle.deadline if settle is not None else None
    # seconds per contender, for the next batch's estimate; a slow model's first batch stops at the deadline
    turns, done, retimed = take_turns(calls, samples, timing, rounds, rng, deadline=deadline, wind_down_s=pauses,
                                      blocks=blocks)  # fmt: skip
    standings, batches = tally(contenders, samples, done, blocks), 1
    while settle is not None and done == batches * rounds:
        blocks_now, last_s = settle.lengthened(timing, batches), settle.lengthened(timing, batches - 1).min_time_s
        longer = blocks_now.min_time_s / last_s if last_s > 0 else 1.0  # the next batch's turns, estimated
        active = settling_batch(contenders, standings, settle, batches, [seconds * longer for seconds in turns])
        if not active:
            break
        spent, _, again = take_turns([calls[i] for i in active], [samples[i] for i in active], blocks_now, rounds,
                                     rng, in_order_first=False, wind_down_s=[pauses[i] for i in active],
                                     blocks=[blocks[i] for i in active], first_round=done)  # fmt: skip
        retimed += again
        for index, seconds in zip(active, spent, strict=True):
            turns[index] = seconds
        batches, done = batches + 1, done + rounds
        standings = tally(contenders, samples, done, blocks)
    return replace(standings, load=machine_load(started, cpu_ticks()), retimed=retimed)


def settling_batch(contenders: Sequence[Contender], standings: Standings, settle: Settle, batches: int,
                   turns: Sequence[float]) -> list[int]:  # fmt: skip
    """Indices of the contenders the next settling batch times, by how long each one's turns took in the last
    batch (``turns``); none when the contest is settled or out of time (:class:`Settle`)."""
    if batches < settle.min_batches and settle.has_room(batches, sum(turns)):
        return list(range(len(contenders)))
    noise = standings.noise
    if settle.everyone and settle.allows(noise, batches, sum(turns)) and not settle.too_noisy(noise):
        return list(range(len(contenders)))
    close = in_contention(contenders, standings, settle.contention)
    if settle.allows(noise, batches, sum(turns[i] for i in close)):
        return close
    return spread_batch(contenders, standings, settle, batches, turns)


def spread_batch(contenders: Sequence[Contender], standings: Standings, settle: Settle, batches: int,
                 turns: Sequence[float]) -> list[int]:  # fmt: skip
    """Indices of the contenders whose block medians spread beyond ``settle.spread`` (:class:`Settle`), with the
    twins and the contenders they copy; none when no contender spreads so or the batch does not fit."""
    if settle.spread is None:
        return []
    gauges = set(standings.twins) | set(standings.twins.values())
    spread = [index for index, c in enumerate(contenders) if c.label not in gauges
              and block_spread(standings.round_ms.get(c.label, {})) > settle.spread]  # fmt: skip
    if not spread:
        return []
    active = sorted(set(spread) | {index for index, c in enumerate(contenders) if c.label in gauges})
    return active if settle.has_room(batches, sum(turns[i] for i in active)) else []


def block_spread(blocks: dict[int, float]) -> float:
    """How far a contender's block medians spread: the slowest over the fastest, less 1 (0 for fewer than two)."""
    values = [ms for ms in blocks.values() if ms > 0]
    return max(values) / min(values) - 1 if len(values) > 1 else 0.0


def in_contention(contenders: Sequence[Contender], standings: Standings, contention: float) -> list[int]:
    """Indices of the contenders a settling batch still times: the twins, the contenders they copy, and every
    other one within ``contention`` of the fastest non-twin."""
    copied = set(standings.twins.values())
    racing = [c.label for c in contenders if c.label not in standings.twins]
    best = min(standings.median(label) for label in racing) if racing else 0.0
    kept = {label for label in racing if standings.median(label) <= best * (1 + contention)}
    return [index for index, c in enumerate(contenders) if c.label in kept | copied | set(standings.twins)]


def tally(contenders: Sequence[Contender], samples: list[list[float]], rounds: int,
          blocks: Sequence[dict[int, float]] | None = None) -> Standings:  # fmt: skip
    """The standings of ``contenders`` from their pooled ``samples`` (and their blocks by round), each median judged
    round by round against the fastest contender that has a twin (:func:`yardstick`)."""
    by_round = {c.label: dict(one) for c, one in zip(contenders, blocks, strict=True)} if blocks else {}
    pooled = {c.label: summarize(values) for c, values in zip(contenders, samples, strict=True)}
    twins = {c.label: c.twin_of for c in contenders if c.twin_of is not None}
    reference = yardstick(pooled, by_round, list(dict.fromkeys(twins.values())) or [c.label for c in contenders[:1]])
    return Standings(paired_medians(pooled, by_round, reference), twins,
                     {c.label: c.simplicity for c in contenders}, rounds, by_round)  # fmt: skip


def yardstick(pooled: dict[str, LatencyStats], by_round: dict[str, dict[int, float]],
              originals: Sequence[str]) -> str | None:
    """The contender every median is judged against round by round: of the ``originals`` (the contenders with a twin:
    the native runs), the fastest, judged round by round against the first. A plan's gain over the faster native, the
    decision a contest exists for, is then the median of their blocks' ratios in the same rounds, and the twins of
    that native gauge exactly that comparison's noise."""
    if not originals:
        return None
    first = paired_medians(pooled, by_round, originals[0])
    return min(originals, key=lambda label: first[label].median_ms)


def paired_medians(pooled: dict[str, LatencyStats], by_round: dict[str, dict[int, float]],
                   reference: str | None) -> dict[str, LatencyStats]:
    """Each contender's median judged round by round: the ``reference``'s pooled median times the median, over the
    rounds both were timed in, of the contender's block over the reference's block in that round.

    A spell of the machine that lasts a round slows both blocks of the round alike, while pooled samples take each
    contender's spells as they fell: on the 2-core Zen 4 VM the machine's speed flips by 1.5x for seconds at a time,
    and an ORT plan identical in work to ORT native pooled 1.28x it with the twins 0.6% apart. A contender without
    rounds shared with the reference keeps its pooled median (its :attr:`LatencyStats.pooled_median_ms` stays
    ``None``)."""
    if reference not in pooled or not by_round.get(reference):
        return pooled
    base, anchor = by_round[reference], pooled[reference].median_ms
    paired = {}
    for label, stats in pooled.items():
        ratio = round_ratio(by_round.get(label) or {}, base)
        if label == reference or ratio is None:
            paired[label] = stats
        else:
            paired[label] = replace(stats, median_ms=anchor * ratio, pooled_median_ms=stats.median_ms)
    return paired


def pair_ratio(blocks: dict[int, float] | None, other_blocks: dict[int, float] | None, median_ms: float,
               other_ms: float) -> float:  # fmt: skip
    """One contender's time over another's: the median of their blocks' ratios over the rounds both were timed in
    (:func:`round_ratio`), their medians' ratio where they share no round. How every twin pair's noise is judged (the
    contest's and the layer selection's); decisions compare medians, each already paired with the yardstick."""
    ratio = round_ratio(blocks or {}, other_blocks or {})
    return ratio if ratio is not None else median_ms / other_ms


def round_ratio(blocks: dict[int, float], reference: dict[int, float]) -> float | None:
    """The median, over the rounds both were timed in, of a block over ``reference``'s block in the same round
    (``None`` without such a round): a ratio a spell lasting a round does not move."""
    ratios = [blocks[number] / reference[number] for number in blocks if reference.get(number, 0) > 0]
    return float(np.median(ratios)) if ratios else None
