"""``rlcompile select``: a library per fusion group, chosen on the table and then by measurement.

1. Fold BatchNorm, form fusion groups, profile them per library (or reuse the table).
2. The libraries the table's exact optimum does as well without (within :func:`idle_band`) are left out of the
   plans (:func:`~rlcompile.layer.problem.idle_libraries`); the agent solves the table on the others (QS-DNN's
   Q-learning by default; every solver keeps its interface).
3. The candidates: the agent's plan, the table's exact optimum and every single-library plan. Each is
   cut into segments, compiled, checked against ONNX Runtime, and all are timed in one contest in one
   process together with ONNX Runtime and OpenVINO run natively on the original model.
4. The fastest candidate wins; candidates within :data:`TIE_BAND` of it, or within the noise the contest's
   identical sessions measured when that is larger, count as ties, and a tie goes to the plan with fewer
   segments. Because the single-library plans and the native runs are candidates, the result is never slower
   than the best single library beyond the timing noise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import onnx

from rlcompile import runtimes
from rlcompile.errors import ModelError, RlcompileError, first_line
from rlcompile.events import Event, Listener, Noise, Phase, Reuse, ignore
from rlcompile.layer import solvers
from rlcompile.layer.fit import apply_fit, fit_plans
from rlcompile.layer.group_table import (
    GroupedModel,
    group_model,
    load_or_profile_groups,
    merge_twins,
    single_library_plan,
    table_file,
)
from rlcompile.layer.in_context import (
    Drift,
    SegmentFit,
    TimedSegment,
    apply_group_prices,
    fit_group_prices,
    measure_drift,
    whole_model_prices,
)
from rlcompile.layer.problem import SelectionProblem, exact, idle_libraries
from rlcompile.layer.segments import Segment, SegmentEngine
from rlcompile.layer.solvers import SolverResult
from rlcompile.layer.table import LookupTable, save_table
from rlcompile.manifest import AccuracyRecord
from rlcompile.measure import (
    DECISION_ROUNDS,
    DEFAULT,
    NOISY,
    PLAN_RULE,
    Contender,
    KeepRule,
    LatencyStats,
    MachineLoad,
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
from rlcompile.runtimes.ort import run_proto
from rlcompile.verify import Agreement, compare_outputs

#: Candidates measured within this fraction of the fastest are ties (then fewer segments wins).
TIE_BAND = PLAN_RULE.tie_band
#: A second, identical ONNX Runtime session timed with the others: its ratio to the first is the noise.
NOISE_PROBE = "ort native (identical session)"
OPENVINO_NOISE_PROBE = "openvino native (identical session)"
PROBES = {NOISE_PROBE: "ort native", OPENVINO_NOISE_PROBE: "openvino native"}
#: The native runs that gauge each library's speed: timed at the calibration, in every refining probe and in the
#: final contest, so a plan is judged at its libraries' speed now by runs other than itself.
GAUGES = ("ort native", "openvino native")
#: Where no native run gauges a library (PyTorch, TVM's kernels), its single-library plan is compiled a second time
#: and timed in the final contest beside it, under this label: the plan is then judged at its library's speed by a
#: run other than itself, as ORT's and OpenVINO's are by their native runs. Without it PyTorch's drift since the
#: calibration was taken to be ORT's: over all 49 corpus models (select-predictions/58-all-corpus-pinned) 7 of the
#: 26 plans off their prediction by more than 15% were PyTorch's single-library plans (0.75-0.83x and 1.15-1.30x),
#: its speed having moved otherwise than ORT's (hf:vit: ORT native 1.20x its calibration, the PyTorch plan 1.57x).
PLAN_TWIN = "single:{} (identical plan)"
#: How a single-runtime plan's label starts (``single:openvino``).
SINGLE = "single:"
#: Rounds when timing the candidates (a slow spell of a shared machine then hits all of them).
ROUNDS = DECISION_ROUNDS
#: With a deadline, the final contest's first batch of rounds is fitted into this share of the time left; the
#: settling batches may use the rest (every plan while a batch of all of them fits, then those still in contention).
FIRST_BATCH_SHARE = 0.3
#: The final contest's settling batches time every plan, not only those close to the fastest (``Settle.everyone``):
#: each plan's measurement is reported and judged against its prediction, and on the 2-core VM one block runs
#: 1.3-1.5x another (its second core comes and goes), so five rounds can catch a majority of slow blocks. Over nine
#: tallies of twelve corpus models (select-predictions/30-38), the plans timed in later settling batches too came
#: within 15% of their prediction 188 times in 199, those left at the first batch's five rounds 222 times in 299;
#: with every plan settled, tally 39 had 64 of 72 plans within 15% (tally 37: 60 of 70).
SETTLE_EVERY_PLAN = True
#: With a deadline, the final contest's settling batches go on while they fit before it, however close its twins
#: already are (the :class:`~rlcompile.measure.contest.Settle` target 0): the twins say the contest is settled, not that
#: each plan is. In tally 66a (14 corpus models, ``select --budget 60s``, twins 1.3-4.8% apart) the plans timed in
#: every round came within 15% of their prediction 46 times in 46, those left at the first batch's five rounds 9
#: in 13, and 6 of the 14 runs ended with 7-30 s of their budget unused. Without a deadline the twins' target stands.
FILL_THE_DEADLINE = True
#: With a deadline, the share of the time left after grouping kept for compiling, checking and timing the
#: candidates (the final contest settles in what is left); the profile gets the rest.
FINAL_SHARE = 0.7
#: At most this many refining probes: each times the plans the previous one's corrections led the solvers to (a
#: plan the table has not seen in context is where its estimates err most in the plan's favour), and prices them;
#: the last one solves no more, so every mixed plan the final contest times was probed first when time allowed.
#: Solving after the last probe too had sent plans to the final contest that no probe had seen: on the corpus
#: (select-predictions/22, 23) 6 of 22 such plans came within 15% of their prediction (up to 3.7x off), and none
#: won a contest in nine tallies of twelve models.
REFINE_ROUNDS = 2
#: The plans a refining probe leads to, each compiled after it: the agent's and the exact optimum's on the corrected
#: table.
REFINED_PLANS = 2
#: With a deadline, the refining probe gets this share of the time left beyond the final contest's floor, and
#: runs only when twice its own floor fits there.
PROBE_SHARE = 0.3
#: A probe times again, in a second batch of rounds, each plan whose block medians spread more than this (slowest
#: over fastest, less 1), beside the native runs that gauge its speed (:class:`~rlcompile.measure.contest.Settle`'s
#: ``spread``), and so does the final contest within its batches: on the 2-core Zen 4 VM a plan of 13 segments
#: across ONNX Runtime and OpenVINO ran at 8.5 ms in most 0.1 s blocks and more than 1.3x that in a quarter of
#: them, and a probe of five rounds caught 23.7 ms (the final contest 9.3); after the exact refit (tally 44) every
#: miss left was a plan whose probe was 1.3-2.5x its final measurement.
BLOCK_SPREAD = 0.3
#: The probe's blocks, as a share of the final contest's (a deadline shortens both to fit). The table is fitted to the
#: probe, so a probe measurement that does not repeat becomes a prediction the final contest misses: until stop 67 the
#: probe timed a quarter of the final's blocks (``select --quick``: 5 rounds of 3 calls of a 9 ms plan), and 24 of the
#: 32 misses of tallies 66a-67a were plans priced within 5% of their probe and measured again outside 15% of it.
#: With full blocks (tally 67c against 67a, the same 14 models without a budget) 30 of 33 mixed plans measured within
#: 10% of their probe (26 of 31), within the spread of earlier tallies (74-97%); the runs took 0.76-1.43x as long
#: (1.09x in all). At ``select --budget 60s`` (tallies 67e-f, all 28 corpus models, the VM quieter than at stop 66):
#: 64 of 66 (66f: 28 of 36; 66d-e: 26 of 35), and 116 of 118 plans within 15% of their prediction.
PROBE_TIME_SHARE = 1.0
#: Without a deadline, the refining probe and the final contest time every plan in at least this many batches of
#: rounds, whatever the twins say (:class:`~rlcompile.measure.contest.Settle`'s ``min_batches``): the table is
#: fitted to the probe and judged by the final contest, and both had stopped after one batch (5 rounds) whenever the
#: twins agreed within 2%. In tally 68a (the first 14 corpus models, ``select --quick`` without a budget, stop 67's
#: code, a quiet 2-core Zen 3 VM) 30 of 47 probes were of 5 rounds; the measured/predicted ratios had an RMS log of
#: 0.063 (the probe against the final contest, the same plan at the table's speed, 0.066), and hf:gpt2's three mixed
#: plans, probed and measured in 5 rounds each, came out 0.86-0.91x their prediction. With two batches at least
#: (tally 68c, the same models, the VM as quiet): RMS log 0.041 (the probe against the final contest 0.043), every
#: plan within 1.111x, the 14 runs 1.05x as long in all.
UNHURRIED_BATCHES = 2
#: With a deadline, the probe's first batch is fitted into this share of its time, leaving the rest for that second
#: batch.
PROBE_FIRST_BATCH_SHARE = 0.6
#: With a deadline, a search (Q-learning, random) fits its episodes into this share of the time left: on the 2-core
#: VM in a slow spell, Q-learning's 1,620 episodes over convnext's 81 groups took 12 s of a 60 s budget.
SOLVE_SHARE = 0.05


def solve_seconds(deadline: float | None) -> float | None:
    """The time a solve may take before ``deadline`` (:data:`SOLVE_SHARE` of what is left; none without one)."""
    return None if deadline is None else max(0.0, SOLVE_SHARE * (deadline - time.monotonic()))


@dataclass
class Candidate:
    """One plan that was run end to end."""

    labels: list[str]
    assignment: list[str]
    predicted_ms: float
    #: the runtimes whose single-runtime plan this is (that runtime wherever it runs, ONNX Runtime elsewhere)
    single: list[str] = field(default_factory=list)
    engine: SegmentEngine | None = field(default=None, repr=False)
    agreement: Agreement | None = None
    measured: LatencyStats | None = None
    error: str | None = None
    #: a plan below fp32: the accuracy contract it met, and the held-out samples to check it again on
    accuracy: AccuracyRecord | None = None
    validation: dict[str, np.ndarray] | None = field(default=None, repr=False)
    #: the refining probe measured this plan, and corrected the table on it: its prediction is in sample
    probed: bool = False
    #: each segment's median milliseconds inside the plan's runs, when the probe timed them
    segment_ms: list[float] | None = None
    #: each segment's library's drift during that probe (its milliseconds over this are at the table's speed)
    segment_drift: list[float] | None = None
    #: the plan's block median in each round of the contest that measured it, by round number
    round_ms: dict[int, float] | None = None
    #: each probe's measurement of the whole plan, at the table's speed (over the plan's drift then)
    probe_ms: list[float] = field(default_factory=list)
    #: the table's price of the plan right after each probe's refit (beside :attr:`probe_ms`): whether the refit
    #: reproduced what the probe measured, apart from what later refits moved
    fitted_ms: list[float] = field(default_factory=list)
    #: how many rounds each probe timed the plan in (a second batch when its blocks disagreed: :data:`BLOCK_SPREAD`)
    probe_rounds: list[int] = field(default_factory=list)

    @property
    def segments(self) -> int:
        return len(self.engine.compiled) if self.engine else 0

    def library_mix(self) -> dict[str, int]:
        """Groups per library."""
        return {name: self.assignment.count(name) for name in dict.fromkeys(self.assignment)}

    def to_dict(self) -> dict:
        return {
            "labels": self.labels,
            "predicted_ms": self.predicted_ms,
            "measured_ms": self.measured.median_ms if self.measured else None,
            "measured_p90_ms": self.measured.p90_ms if self.measured else None,
            "segments": self.segments,
            "library_mix": self.library_mix(),
            "assignment": self.assignment,
            "agreement": self.agreement.to_dict() if self.agreement else None,
            "error": self.error,
            "accuracy": self.accuracy.to_json() if self.accuracy else None,
            "probed": self.probed,
            "single": self.single,
            "segment_ms": self.segment_ms,
            "round_ms": self.round_ms,
            "probe_ms": self.probe_ms,
            "fitted_ms": self.fitted_ms,
            "probe_rounds": self.probe_rounds,
        }


@dataclass
class Selection:
    """Everything ``select`` found: the table, the agent's result, the candidates and the winner."""

    model: LoadedModel = field(repr=False)
    grouped: GroupedModel = field(repr=False)
    agent: str
    threads: int
    table: LookupTable = field(repr=False)
    table_file: Path
    table_reused: bool
    result: SolverResult
    candidates: list[Candidate]
    chosen: Candidate
    natives: dict[str, LatencyStats] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    rounds: int = 0  # how many rounds the final contest took
    #: the native runs' timers (sessions compiled once: the precision searches' final contest times them again)
    native_calls: dict[str, Timer] = field(default_factory=dict, repr=False)
    #: each native run's block median in each round of the final contest, by round number
    native_round_ms: dict[str, dict[int, float]] = field(default_factory=dict)
    #: ONNX Runtime's outputs of the model on the grouped model's feeds (what the plans were checked against)
    reference: list[np.ndarray] | None = field(default=None, repr=False)
    #: the second compiles of the single-library plans no native run gauges (:data:`PLAN_TWIN`), by label
    plan_twin_calls: dict[str, Timer] = field(default_factory=dict, repr=False)
    #: what the final contest measured of them, and their block median in each of its rounds
    plan_twins: dict[str, LatencyStats] = field(default_factory=dict)
    plan_twin_round_ms: dict[str, dict[int, float]] = field(default_factory=dict)
    #: what else used the machine while the final contest ran
    load: MachineLoad | None = None
    #: how many of the final contest's blocks were timed again because the hypervisor took their time
    retimed: int = 0
    #: the libraries left out of the plans, by what the table's optimum would have gained with each
    #: (:func:`~rlcompile.layer.problem.idle_libraries`)
    left_out: dict[str, float] = field(default_factory=dict)

    def reference_outputs(self) -> list[np.ndarray]:
        """:attr:`reference`, computed on first use when the selection was made without it."""
        if self.reference is None:
            self.reference = run_proto(self.model.proto, self.grouped.feeds)
        return self.reference

    def take_final(self, final: Standings) -> None:
        """Record the final contest's native runs (their latencies and blocks by round) and its rounds, and pick the
        plan from the candidates' measurements in it, ties within its noise (:func:`pick`)."""
        names = self.native_calls or self.natives
        self.natives = {name: final[name] for name in names}
        self.native_round_ms = {name: final.round_ms.get(name, {}) for name in names}
        twins = [name for name in self.plan_twin_calls if name in final.stats]
        self.plan_twins = {name: final[name] for name in twins}
        self.plan_twin_round_ms = {name: final.round_ms.get(name, {}) for name in twins}
        self.rounds = final.rounds
        self.load = final.load
        self.retimed = final.retimed
        self.chosen = pick(self.candidates, noise=self.noise)

    @property
    def drift(self) -> float:
        """How much slower this machine runs ORT native now than when the table was calibrated (1 if unknown).

        A shared machine's speed changes over minutes; the table's predictions are scaled by this to be
        compared with today's measurements.
        """
        then = self.table.notes.get("ort_native_ms")
        now = self.natives.get("ort native")
        return now.median_ms / then if then and now else 1.0

    @property
    def drifts(self) -> Drift:
        """How much slower each library runs now than at the table's calibration, gauged by every run of the final
        contest (:meth:`gauged_drift`)."""
        return self.gauged_drift()

    def final_timers(self) -> dict[str, Timer]:
        """What a final contest times beside the candidates: the native runs and the plan twins (:data:`PLAN_TWIN`)."""
        return {**self.native_calls, **self.plan_twin_calls}

    def gauged_drift(self, judged: Candidate | None = None) -> Drift:
        """Each library's drift, gauged by runs other than ``judged`` (:func:`gauge_drift`): a plan is never judged
        against its own measurement; a library's single-library plan is gauged by its twin (:data:`PLAN_TWIN`)."""
        twins = {library: stats.median_ms for label, stats in self.plan_twins.items()
                 for library in twin_libraries(label)}  # fmt: skip
        singles = twins | single_library_times([c for c in self.candidates if c is not judged])
        natives = {label.split()[0]: self.natives[label].median_ms for label in GAUGES if label in self.natives}
        return gauge_drift(self.table.notes, singles, natives, self.drift)

    def expected_ms(self, candidate: Candidate) -> float:
        """The candidate's table prediction at each library's current speed, gauged by the other runs (the model run
        whole by a library that cannot run every group alone has no prediction: NaN)."""
        if not math.isfinite(candidate.predicted_ms):
            return candidate.predicted_ms
        return candidate.predicted_ms * plan_drift(self.gauged_drift(candidate), self.problem, candidate)

    def round_ratios(self, candidate: Candidate) -> list[float]:
        """The candidate's measurement over the table's prediction in each round of the final contest, the
        prediction at each library's speed in that same round, gauged by the other runs' blocks then
        (:func:`gauge_drift`). Only the rounds that gauged every library the plan uses count.

        Why by round: the 2-core Zen 4 VM ran ONNX Runtime 2x slower (OpenVINO 1.45x) in spells of 10-70 s
        (``benchmarks/machine_state.py``), a contest's rounds fall on both sides of a spell's edge, and the medians
        pooled over them mix the two speeds in different shares for each contender. A round is a few seconds: the
        plan and the libraries' speeds it is judged against are then measured in one state of the machine. Measured
        on 12 corpus models (``select --budget 60s``, a session when the VM ran 2.5-5x slower than usual and twins
        differed by 5-28%): the median of these ratios put 7 of 18 plans that are not single-library within 15%,
        the pooled ratio (:meth:`measured_over_expected`) 10; with 2-3 rounds a round's single-library blocks bring
        their own noise. So they are recorded (the manifest's ``round_ratios``), and the pooled ratio judges.
        """
        if not candidate.round_ms or not math.isfinite(candidate.predicted_ms):
            return []
        notes = self.table.notes
        plans_then, natives_then = notes.get("single_library_ms") or {}, notes.get("native_ms") or {}
        twins = {library: blocks for label, blocks in self.plan_twin_round_ms.items() if blocks
                 for library in twin_libraries(label) if library in plans_then}  # fmt: skip
        singles = twins | {library: c.round_ms for c in self.candidates if c.round_ms and c is not candidate
                           for library in c.single if library in plans_then}  # fmt: skip
        natives = {label.split()[0]: self.native_round_ms[label] for label in GAUGES
                   if self.native_round_ms.get(label) and label.split()[0] in natives_then}  # fmt: skip
        gauged = set(singles) | set(natives)  # a library gauged in some round must be gauged in a round judged
        then_ort = notes.get("ort_native_ms")
        ort = self.native_round_ms.get(f"{REFERENCE_RUNTIME} native", {})
        ratios = []
        for number, ms in sorted(candidate.round_ms.items()):
            plans_now = {library: blocks[number] for library, blocks in singles.items() if number in blocks}
            natives_now = {library: blocks[number] for library, blocks in natives.items() if number in blocks}
            if not then_ort or number not in ort:
                continue
            if any(name in gauged and name not in plans_now | natives_now for name in set(candidate.assignment)):
                continue
            drift = gauge_drift(notes, plans_now, natives_now, ort[number] / then_ort)
            ratios.append(ms / (candidate.predicted_ms * plan_drift(drift, self.problem, candidate)))
        return ratios

    def measured_over_expected(self, candidate: Candidate) -> float:
        """How far the table's prediction was off for a measured candidate: its pooled measurement over
        :meth:`expected_ms` (NaN without a prediction or a measurement)."""
        return candidate.measured.median_ms / self.expected_ms(candidate) if candidate.measured else float("nan")

    @cached_property
    def problem(self) -> SelectionProblem:
        """The selection problem on the final table."""
        return SelectionProblem(self.table)

    @property
    def noise(self) -> float | None:
        """The largest |ratio - 1| of two identical runs timed in this run: each library's native run and
        its identical second session, and a one-segment candidate that runs exactly the native model."""
        pairs = [(self.natives[probe], self.natives[native])
                 for probe, native in PROBES.items() if probe in self.natives and native in self.natives]  # fmt: skip
        for candidate in self.candidates:
            native = native_twin(candidate, self.model.proto, self.natives) if candidate.engine else None
            if candidate.measured and native:
                pairs.append((candidate.measured, self.natives[native]))
        ratios = [abs(a.median_ms / b.median_ms - 1) for a, b in pairs]
        return max(ratios) if ratios else None

    @property
    def calibration_noise(self) -> float | None:
        """The largest |ratio - 1| of two identical runs timed together when the table was calibrated (or
        recalibrated by a probe): a library's single-library plan that runs the model natively, against that
        library's native run (:data:`GAUGES`; ``notes["twin_noise"]``, kept when the pair was merged). A prediction
        carries this noise and :attr:`noise` both."""
        return table_noise(self.table)

    def single_library_ms(self, names: tuple[str, ...]) -> list[float]:
        """The measured latencies of the single-runtime plans of ``names`` (those that ran)."""
        return [c.measured.median_ms for c in self.candidates if c.measured and set(c.single) & set(names)]

    def to_dict(self) -> dict:
        return {
            "model": self.model.name,
            "agent": self.agent,
            "threads": self.threads,
            "libraries": list(self.table.layouts),
            "unavailable_libraries": self.unavailable,
            "left_out": self.left_out,
            "table": str(self.table_file),
            "table_reused": self.table_reused,
            "agent_predicted_ms": self.result.total_ms,
            "episodes": self.result.episodes,
            "solver": self.result.extra,
            "context_factor": self.table.notes.get("context_factor"),
            "candidates": [candidate.to_dict() for candidate in self.candidates],
            "chosen": self.chosen.to_dict(),
            "native_ms": {name: stats.median_ms for name, stats in self.natives.items()},
            "plan_twin_ms": {name: stats.median_ms for name, stats in self.plan_twins.items()},
            "noise": self.noise,
            "calibration_noise": self.calibration_noise,
            "rounds": self.rounds,
            "machine_load": self.load.to_dict() if self.load else None,
            "retimed_blocks": self.retimed,
            "drift": self.drift,
            "drift_by_library": self.drifts.to_dict(),
            "expected_ms": {", ".join(c.labels): self.expected_ms(c) for c in self.candidates},
            "measured_over_expected": {", ".join(c.labels): self.measured_over_expected(c)
                                       for c in self.candidates if c.measured},
            "round_ratios": {", ".join(c.labels): self.round_ratios(c) for c in self.candidates if c.measured},
            "native_round_ms": self.native_round_ms,
            "plan_twin_round_ms": self.plan_twin_round_ms,
            "groups": self.group_rows(),
        }

    def group_rows(self) -> list[dict]:
        """Per fusion group: its operators, the library chosen and every library's in-context time."""
        rows = []
        for group, library in zip(self.grouped.groups, self.chosen.assignment, strict=True):
            times = {name: round(ms, 4) for name, ms in self.table.options[group.name].items()}
            rows.append({"group": group.name, "ops": group.describe(), "library": library, "ms": times})
        return rows


def create_libraries(names: list[str], tuning_db: Path | None) -> tuple[dict[str, Runtime], dict[str, str]]:
    """The usable runtimes by name (TVM with the tuning records of ``tuning_db`` when given), and why the
    others cannot be used here."""
    created, unavailable = {}, {}
    for name in names:
        runtime = create_runtime(name, tuning_db)
        reason = runtime.unavailable()
        if reason is None:
            created[name] = runtime
        else:
            unavailable[name] = reason
    return created, unavailable


def create_runtime(name: str, tuning_db: Path | None) -> Runtime:
    if name == "tvm" and tuning_db is not None:
        from rlcompile.kernel.artifact import TuningRecords

        return runtimes.create("tvm", tuning=TuningRecords(Path(tuning_db)))
    return runtimes.create(name)


def candidate_plans(problem: SelectionProblem, named: list[tuple[str, list[int] | list[str]]],
                    known: list[Candidate] | None = None) -> list[Candidate]:  # fmt: skip
    """Candidates for ``named`` plans (choice indices or library names), merged with ``known`` ones."""
    merged: dict[tuple, Candidate] = {tuple(c.assignment): c for c in known or []}
    for label, plan in named:
        assignment = [problem.options[k][c].primitive if isinstance(c, int) else c for k, c in enumerate(plan)]
        key = tuple(assignment)
        if key not in merged:
            merged[key] = Candidate([], assignment, problem.total(problem.choices(assignment)))
        if label not in merged[key].labels:
            merged[key].labels.append(label)
        if label.startswith(SINGLE):
            merged[key].single.append(label.removeprefix(SINGLE))
    return list(merged.values())


def first_candidates(problem: SelectionProblem, result: SolverResult, agent: str, mixed: bool = True,
                     ) -> list[Candidate]:  # fmt: skip
    """The agent's plan, the exact optimum and each single-library plan, identical plans merged
    (only the single-library plans when not ``mixed``)."""
    named = [(agent, result.plan), ("exact", exact(problem).plan)] if mixed else []
    named += [(f"{SINGLE}{name}", single_library_plan(problem.table, name)) for name in problem.primitives()]
    return candidate_plans(problem, named)


def is_mixed(candidate: Candidate) -> bool:
    return len(set(candidate.assignment)) > 1


def pricing_problem(candidate: Candidate, problem: SelectionProblem, whole: SelectionProblem) -> SelectionProblem:
    """Which table prices ``candidate``: a plan of one library (or a single-library plan that falls back to the
    default library) at the calibrated prices (``whole``: :func:`~rlcompile.layer.in_context.whole_model_prices`), a
    mixed plan at the prices its segments' clocks corrected (``problem``)."""
    return whole if candidate.single or not is_mixed(candidate) else problem


def measured_plans(problem: SelectionProblem, candidates: list[Candidate], drift: Drift,
                   singles: bool = True) -> list[tuple[SelectionProblem, list[str], float]]:  # fmt: skip
    """The measured candidates as :func:`~rlcompile.layer.fit.fit_plans` takes them: each priced the way
    :func:`price_candidates` prices it, its measurement at the table's speed (``drift``); ``singles=False`` leaves the
    single-library plans out."""
    whole = SelectionProblem(whole_model_prices(problem.table))
    plans = []
    for candidate in candidates:
        if candidate.measured is None or (candidate.single and not singles):
            continue
        plans.append((pricing_problem(candidate, problem, whole), candidate.assignment,
                      at_table_speed(candidate, problem, drift)))
    return plans


def at_table_speed(candidate: Candidate, problem: SelectionProblem, drift: Drift) -> float:
    """A measured candidate's milliseconds at the table's speed: over its plan's drift (:func:`plan_drift`)."""
    return candidate.measured.median_ms / plan_drift(drift, problem, candidate)


def pick(candidates: list[Candidate], rule: KeepRule = PLAN_RULE, noise: float | None = None) -> Candidate:
    """The fastest measured candidate; among those within the rule's tie band of it (or within ``noise``, the
    contest's identical sessions' difference, when that is wider), the one with fewest segments, then the faster.

    A plan of more segments must beat a simpler one by more than the two identical sessions differed: the
    gain is then measured, not drawn from the noise. On the 2-core VM, ``select`` kept a 13-segment plan of
    bert-minilm for 27.4 ms against OpenVINO native's 28.6 ms while its twins differed by 44.5%.
    """
    runnable = {str(index): c for index, c in enumerate(candidates) if c.measured is not None}
    entries = [(key, c.measured.median_ms, c.segments) for key, c in runnable.items()]
    return runnable[contest.fastest(entries, rule, noise or 0.0)]


def select_segments(
    model: LoadedModel,
    agent: str = "qlearning",
    seed: int = 0,
    threads: int = 1,
    library_names: list[str] | None = None,
    tuning_db: Path | None = None,
    table_dir: Path | None = None,
    timing: MeasureConfig = DEFAULT,
    progress: Listener = ignore,
    baseline: LoadedModel | None = None,
    mixed: bool = True,
    deadline: float | None = None,
    leave_out_idle: bool = True,
    **solver_options: object,
) -> Selection:
    """Choose a library per fusion group; run, verify and time the candidates; keep the fastest.

    ``baseline``: the model the user started from, when ``model`` is a rewrite of it (``optimize``'s graph
    stage). The plans are then checked against the baseline's outputs, the native runs are the
    baseline's, and the baseline run natively by each library joins the candidates, so the result is
    never slower than what the user had, whatever the rewrite does to one library.
    ``mixed=False``: only single-library plans are candidates (no library switches).
    ``deadline`` (``time.monotonic()``): the profile stops adding libraries when :data:`FINAL_SHARE` of the
    time left is what remains, and the refining probe is skipped past it; the final contest always runs.
    ``leave_out_idle=False``: every library stays in the plans, even one the table's optimum does as well without
    (:func:`~rlcompile.layer.problem.idle_libraries`): ``select`` and ``optimize`` pass it when the user named the
    libraries (``--libraries``), whose choice is then the user's.
    """
    solver = solvers.create(agent, **solver_options)
    created, unavailable = create_libraries(library_names or runtimes.parse(None, tuning_db is not None), tuning_db)
    for name, why in unavailable.items():
        progress(Event("layer", f"library {name} left out: {why}"))
    progress(Phase("layer", "folding batch norms, forming fusion groups, reading activations", "group"))
    grouped = group_model(model, seed)
    path = table_file(model, list(created), threads, table_dir, tuning_db)
    original = baseline or model
    started = time.monotonic()
    natives = native_timers(original, grouped.feeds, threads, created, progress)
    gauges = gauge_calls(natives)
    ungauged = ungauged_libraries(created, gauges)
    compile_s = (time.monotonic() - started) / len(natives)  # a whole-model compile, until plans are timed
    profile_deadline, calibrate_by, call_s = None, None, 0.0
    if deadline is not None:  # the contests' least times and the compiles after the profile, then a share
        call_s = call_seconds(natives["ort native"])
        floor_s = contest.floor_seconds([call_s] * (len(natives) + len(ungauged) + len(created) + 2), ROUNDS)
        calibration_s = contest.floor_seconds([call_s] * (len(created) + len(gauges)))  # each library's plan, gauges
        reserved = floor_s + calibration_s + (later_compiles(len(created)) + len(ungauged)) * compile_s
        profile_deadline = deadline - reserved - FINAL_SHARE * max(0.0, deadline - reserved - time.monotonic())
        calibrate_by = profile_deadline + calibration_s + len(created) * compile_s
    table, reused = load_or_profile_groups(grouped, created, threads, path, progress, profile_deadline, calibrate_by,
                                           gauges)  # fmt: skip
    if reused:
        progress(Reuse("layer", f"reused the lookup table {path}", "table"))
    elif table.notes.get("cut_short") or table.notes.get("boundaries_estimated"):
        cut, estimated = table.notes["cut_short"], table.notes["boundaries_estimated"]
        progress(Event("layer", f"the profile was cut short by the deadline ({cut} groups on {REFERENCE_RUNTIME} "
                                f"only, {estimated} boundary shapes estimated): the table is not saved, a later run "
                                "completes it"))  # fmt: skip
    else:
        progress(Event("layer", f"wrote the lookup table {path}"))
    problem = SelectionProblem(table)
    band = idle_band(table)
    left_out = idle_libraries(problem, band) if mixed and leave_out_idle else {}
    if left_out:
        problem = problem.without(left_out)
        progress(Event("layer", left_out_words(left_out, band)))
    progress(Phase("layer", f"solving with {agent} over {len(problem)} fusion groups", "solve"))
    result = solver.solve(problem, seed, solve_seconds(deadline))
    candidates = first_candidates(problem, result, agent, mixed)
    reference = run_proto(original.proto, grouped.feeds)
    reserve = FinalReserve(call_s, len(natives), native_runtimes(natives), compile_s, len(ungauged))
    compile_s = max([compile_s, *compile_candidates(grouped, candidates, created, threads, reference, progress)])
    # the refining probes, each followed by a compile of the plans it found, then the final contest: a probe runs
    # only when it leaves those compiles and the final contest their time
    for round_index in range(1, REFINE_ROUNDS + 1):
        timed = [c for c in probe_candidates(candidates) if c.engine is not None and c.error is None]
        if not any(is_mixed(c) and not c.probed for c in timed):
            break
        refined = plans_found(round_index)
        probe_floor_s = contest.floor_seconds([call_s, *plan_seconds(timed, call_s)])
        fits, until = probe_deadline(deadline, reserve.after_probe_s(candidates, compile_s, refined), probe_floor_s)
        if not fits:
            break
        later = plans_found(round_index + 1)
        ready = None if until is None else until + refined * compile_s  # this probe's finds compiled
        solve = refined > 0 and another_probe_fits(
            deadline, ready, reserve.after_probe_s(candidates, compile_s, later, refined + later), probe_floor_s)
        problem, result = refine(problem, result, candidates, natives, grouped.feeds, solver, seed, agent, timing,
                                 progress, until, round_index, solve, original.proto)  # fmt: skip
        save_table(problem.table, path)
        compile_s = max([compile_s, *compile_candidates(grouped, candidates, created, threads, reference, progress)])
    price_candidates(problem, candidates)
    # the model as the user has it, run natively by ORT and OpenVINO, is always a candidate: a runtime that cannot
    # take every fusion group alone (its single-runtime plan falls back to ORT per group) still runs it whole
    candidates += baseline_candidates(original, grouped, created, threads, reference, rewritten=baseline is not None,
                                      skip=natively_run(candidates, original))  # fmt: skip
    twins = plan_twin_timers(grouped, candidates, created, threads, ungauged, progress)
    final = time_candidates(grouped, candidates, natives | twins, timing, progress, deadline, original.proto)
    selection = Selection(original, grouped, agent, threads, problem.table, path, reused, result, candidates,
                          pick(candidates), unavailable=unavailable, native_calls=natives,
                          reference=reference, plan_twin_calls=twins, left_out=left_out)  # fmt: skip
    selection.take_final(final)  # the pick again, ties now within the contest's noise
    return selection


def table_noise(table: LookupTable) -> float | None:
    """How far apart the identical runs timed together at the table's calibration were, at most (``None`` when none
    were: :attr:`Selection.calibration_noise`)."""
    apart = table.notes.get("twin_noise") or {}
    return max(apart.values()) if apart else None


def idle_band(table: LookupTable) -> float:
    """The least gain that keeps a library in the plans (:func:`~rlcompile.layer.problem.idle_libraries`): the tie
    band, or the calibration's noise when that is wider, as :func:`pick` widens ties to the contest's noise: a gain
    the table's own measurements cannot tell from their noise. In tally 66b (``select --budget 60s``) the table gave
    PyTorch more than 2% on hf:deit, calibrated while identical runs differed by 10.6%, and its two plans with PyTorch
    groups (12 and 21 segments) measured 0.69x and 0.81x their prediction (the probe had timed them 1.4-1.6x
    slower)."""
    return max(TIE_BAND, table_noise(table) or 0.0)


def left_out_words(left_out: Mapping[str, float], band: float) -> str:
    """What leaving ``left_out`` (:func:`~rlcompile.layer.problem.idle_libraries`) out of the plans is, in words."""
    gains = ", ".join(f"{library} {gain:.1%}" for library, gain in left_out.items())
    return (f"left {' and '.join(left_out)} out of the plans: the table's optimum gains less with "
            f"{'it' if len(left_out) == 1 else 'them'} ({gains}) than the {band:.1%} its measurements tell apart")


def natively_run(candidates: list[Candidate], original: LoadedModel) -> set[str]:
    """The runtimes whose candidate already is the original model run whole (a one-segment single-runtime plan)."""
    return {c.engine.libraries[0] for c in candidates if c.engine and c.engine.runs_whole(original.proto)}


def baseline_candidates(baseline: LoadedModel, grouped: GroupedModel, created, threads: int,
                        reference: list[np.ndarray], rewritten: bool = True,
                        skip: set[str] = frozenset()) -> list[Candidate]:  # fmt: skip
    """The user's original model run natively, as one-segment plans, by ONNX Runtime and OpenVINO (except the
    runtimes in ``skip``, whose candidate already is that)."""
    everything = list(range(len(grouped.groups)))
    candidates = []
    for name in (REFERENCE_RUNTIME, "openvino"):
        if name not in created or name in skip:
            continue
        segment = Segment(name, everything, list(grouped.inputs), list(grouped.outputs), baseline.proto)
        label = f"native:{name} (original graph)" if rewritten else f"native:{name}"
        candidate = Candidate([label], [name] * len(everything), float("nan"))
        try:
            candidate.engine = SegmentEngine.compile([segment], grouped.inputs, grouped.outputs, threads, created)
            candidate.agreement = compare_outputs(reference, candidate.engine.run(grouped.feeds))
        except Exception as error:  # reported with the candidates, never fatal
            candidate.error = first_line(error)
        candidates.append(candidate)
    return candidates


def refine(problem: SelectionProblem, result: SolverResult, candidates: list[Candidate], natives: dict[str, Timer],
           feeds: dict, solver, seed: int, agent: str, timing: MeasureConfig, progress: Listener,
           deadline: float | None = None, round_index: int = 1, solve: bool = True,
           whole: onnx.ModelProto | None = None) -> tuple[SelectionProblem, SolverResult]:  # fmt: skip
    """Learn from a short measurement of the plans not measured yet (the probe); solve again on what it taught.

    It fits the table to every plan it measured (:func:`~rlcompile.layer.fit.fit_plans`): on the first probe each
    library's factor and each pair of libraries' crossing factor together, the single-library plans included (the
    speed of each library and what its fall-backs cost are one question); on later ones the crossings alone, over
    the mixed plans (the library factors would scale prices the segments have corrected since). Then, from each
    segment timed inside its plan's runs, the in-context price of the groups the plans put in each library
    (:mod:`rlcompile.layer.in_context`): the solver's own picks are re-priced where it picked them. A late
    calibration's speeds are replaced by the first probe's (:func:`recalibrate`). The single-library plans are
    timed in every probe: each library's speed now against the calibration's
    (:class:`~rlcompile.layer.in_context.Drift`).

    The plans found on the corrected table join the candidates (labelled "(refined)"), so the final measurement
    compares the first and the refined answers side by side; a later round probes the refined plans in turn (up to
    :data:`REFINE_ROUNDS`). ``solve=False``: the corrections are kept and nothing is solved again (the last probe).
    ``whole``: the model the native runs run (:func:`recalibrate`'s twins). ``deadline``: the probe is fitted to end
    by then (past it, no round starts after the first :data:`~rlcompile.measure.contest.MIN_ROUNDS`). A plan whose
    blocks disagree is timed in a second batch of rounds, beside the native runs (:data:`BLOCK_SPREAD`), when it fits.
    """
    progress(Phase("layer", "probing the plans to check the table's boundary costs", "probe"))
    timed = probe_candidates(candidates)
    probe = replace(timing, min_time_s=timing.min_time_s * PROBE_TIME_SHARE,
                    min_repeats=max(3, timing.min_repeats // 2))  # fmt: skip
    settle = probe_settle(deadline)
    gauges = gauge_calls(natives)
    if deadline is not None:
        runnable = sum(c.engine is not None and c.error is None for c in timed)
        first_batch_s = PROBE_FIRST_BATCH_SHARE * (deadline - time.monotonic())
        probe = contest.fit_within(probe, runnable + len(gauges), first_batch_s)
    stats = time_candidates_once(timed, gauges, probe, feeds, settle=settle, clocked=True)
    gauged = {label.split()[0]: stats[label].median_ms for label in gauges}
    first = round_index == 1
    recalibrated = first and late_calibration(problem.table) and recalibrate(problem.table, timed, gauged, progress,
                                                                             whole)  # fmt: skip
    then = problem.table.notes.get("ort_native_ms")
    ort_drift = stats["ort native"].median_ms / then if then else 1.0
    if not recalibrated:
        pool_fall_backs(problem.table, timed, gauged, ort_drift, whole)
    drift = gauge_drift(problem.table.notes, single_library_times(timed), gauged, ort_drift)
    for candidate in timed:
        if candidate.measured is not None:
            candidate.probe_ms.append(at_table_speed(candidate, problem, drift))
            candidate.probe_rounds.append(len(candidate.round_ms or {}))
    fit = fit_plans(problem.table, measured_plans(problem, timed, drift, singles=first), libraries=first)
    moved = {f"x{factor:.2f} on {library}'s groups": factor for library, factor in fit.library_factors.items()
             if abs(factor - 1) > 0.05}  # fmt: skip
    moved |= {f"x{scale:.2f} the standalone estimate between {pair.replace('|', ' and ')}": scale
              for pair, scale in fit.boundary_scales.items()
              if abs(scale / problem.table.boundary_scale(pair) - 1) > 0.05}  # fmt: skip
    if moved:
        progress(Event("layer", f"the measured plans refit the table: {', '.join(sorted(moved))}"))
        apply_fit(problem.table, fit)
        problem = problem.on(problem.table)
    for candidate in timed:
        if candidate.segment_ms is not None:
            candidate.segment_drift = [drift.of(item.segment.library) for item in candidate.engine.compiled]
    priced = price_in_context(problem, candidates, progress)
    if priced:
        problem = apply_group_prices(problem, priced)
    calibrated = SelectionProblem(whole_model_prices(problem.table))
    for candidate in timed:
        if candidate.measured is not None:
            candidate.fitted_ms.append(plan_price(candidate, problem, calibrated))
    if solve and (moved or recalibrated or priced):
        progress(Event("layer", "solving again on the corrected table"))
        result = solver.solve(problem, seed, solve_seconds(deadline))
        suffix = "(refined)" if round_index == 1 else f"(refined {round_index})"
        refined = [(f"{agent} {suffix}", result.plan), (f"exact {suffix}", exact(problem).plan)]
        candidates[:] = candidate_plans(problem, refined, candidates)
    for candidate in timed:
        candidate.probed = candidate.probed or candidate.measured is not None
    for candidate in candidates:
        candidate.measured, candidate.round_ms = None, None
    return problem, result


def probe_candidates(candidates: list[Candidate]) -> list[Candidate]:
    """What a probe times: the plans no probe has measured yet, and the single-library plans (each library's speed
    now against the calibration's)."""
    return [c for c in candidates if not c.probed or c.single]


def plan_drift(drift: Drift, problem: SelectionProblem, candidate: Candidate) -> float:
    """How much slower ``candidate`` runs now than at the table's calibration: by its libraries' shares of its time,
    a plan of one library as that library. A single-library plan that falls back to ONNX Runtime for the groups its
    library does not run is such a mix: on the slowed 2-core VM (select-predictions/25) OpenVINO's fall-back plans of
    10-16 segments, half their groups in ORT, drifted as OpenVINO alone came out 1.18-1.24x their prediction.

    A plan of one library throughout drifts as that library: so does a precision plan, one runtime running the model
    whole, whose runtime the table may have no price for on some groups (a profile cut short prices them in the
    default library only)."""
    if len(libraries := set(candidate.assignment)) == 1:
        return drift.of(libraries.pop())
    return drift.of_plan(problem, problem.choices(candidate.assignment))


def price_candidates(problem: SelectionProblem, candidates: list[Candidate]) -> None:
    """Set each candidate's prediction: a single-library plan (one library wherever it runs, the default library
    for the rest) as the calibration measured it (``notes["single_library_ms"]``: the boundary factors fitted since
    do not move it), a mixed plan at the prices its segments' clocks corrected."""
    whole = SelectionProblem(whole_model_prices(problem.table))
    for candidate in candidates:
        candidate.predicted_ms = plan_price(candidate, problem, whole)


def plan_price(candidate: Candidate, problem: SelectionProblem, whole: SelectionProblem) -> float:
    """What the table says ``candidate`` costs (:func:`price_candidates`); ``whole``: ``problem`` at the calibrated
    prices (:func:`~rlcompile.layer.in_context.whole_model_prices`)."""
    calibrated = problem.table.notes.get("single_library_ms") or {}
    if candidate.single and candidate.single[0] in calibrated:
        return calibrated[candidate.single[0]]
    priced_by = pricing_problem(candidate, problem, whole)
    return priced_by.total(priced_by.choices(candidate.assignment))


def price_in_context(problem: SelectionProblem, candidates: list[Candidate],
                     progress: Listener) -> SegmentFit:  # fmt: skip
    """The group prices the segment clocks correct (:func:`~rlcompile.layer.in_context.fit_group_prices`), over
    every plan of more than one segment a probe timed, this probe or an earlier one (each segment at the table's
    speed by its library's drift then): the prices now must fit them all, not the newest plans alone (a second
    probe that fitted only the plans the first one led to re-priced OpenVINO's groups on hf:clip-vision from 21
    segments of a few groups each, and the exact optimum, one OpenVINO segment over 62 groups that the first probe had
    timed at 14.5 ms, was predicted at 9.0 ms for 14.6 measured); said in an event."""
    plans = []
    for candidate in candidates:
        if candidate.segment_ms is None or candidate.segment_drift is None or candidate.segments < 2:
            continue  # a one-segment plan is the calibration's own measurement: its factor is the library's
        segments = [TimedSegment(item.segment.library, tuple(item.segment.groups), ms / drift)
                    for item, ms, drift in zip(candidate.engine.compiled, candidate.segment_ms,
                                               candidate.segment_drift, strict=True)]  # fmt: skip
        plans.append((candidate.assignment, segments))
    fit = fit_group_prices(problem, plans)
    values = [factor for by_library in fit.group_factors.values() for factor in by_library.values()]
    if values:
        progress(Event("layer", f"{len(values)} group price(s) corrected by the segments timed in {len(plans)} "
                                f"plan(s): x{min(values):.2f}-x{max(values):.2f} the table's estimate"))  # fmt: skip
    if fit.boundary_scales:
        pairs = ", ".join(f"x{scale:.2f} the standalone estimate between {pair.replace('|', ' and ')}"
                          for pair, scale in sorted(fit.boundary_scales.items()))  # fmt: skip
        progress(Event("layer", f"the segments' crossings refit the table: {pairs}"))
    if fit.entry_ms:
        entries = ", ".join(f"{switch} {ms:.3f} ms" for switch, ms in sorted(fit.entry_ms.items()))
        progress(Event("layer", f"the segments price switching from one library to another: {entries}"))
    return fit


def gauge_calls(natives: Mapping[str, Timer]) -> dict[str, Timer]:
    """The native runs among ``natives`` that gauge a library's speed (:data:`GAUGES`), by label."""
    return {label: natives[label] for label in GAUGES if label in natives}


def gauge_drift(notes: Mapping, plans_now: Mapping[str, float], natives_now: Mapping[str, float],
                default: float) -> Drift:  # fmt: skip
    """Each library's drift from the table's ``notes`` (its calibration) to now: its single-library plan's time now
    (``plans_now``) over then where both are known, else its native run's (``natives_now``, :data:`GAUGES`), else
    ``default`` (ORT native's)."""
    by_native = measure_drift(notes.get("native_ms"), natives_now, default)
    by_plan = measure_drift(notes.get("single_library_ms"), plans_now, default)
    return Drift({**by_native.by_library, **by_plan.by_library}, default)


def single_library_times(candidates: list[Candidate]) -> dict[str, float]:
    """The measured milliseconds of each library's single-library plan, by library."""
    return {library: c.measured.median_ms for c in candidates if c.measured is not None for library in c.single}


def late_calibration(table: LookupTable) -> bool:
    """Whether the table's calibration ran past the profile's deadline (two short rounds, one call per turn)."""
    return bool(table.notes.get("cut_short") or table.notes.get("boundaries_estimated"))


def recalibrate(table: LookupTable, candidates: list[Candidate], native_ms: Mapping[str, float],
                progress: Listener, whole: onnx.ModelProto | None = None) -> bool:  # fmt: skip
    """Take the refining probe's measurement of the single-library plans (the engines the late calibration timed in
    two short rounds; the probe times them in :data:`ROUNDS`) and of the native runs (``native_ms``, by library:
    :data:`GAUGES`) as the table's speed; the probe's fit then scales the table to them. A plan that runs ``whole``
    (the model the native runs run) and its library's native run are one measurement twice: both take their
    geometric mean (:func:`~rlcompile.layer.group_table.merge_twins`). Returns whether any single-library plan was
    measured.

    Measured on 12 corpus models at ``select --budget 60s``, where every profile was cut short: the late
    calibration's ORT native was 0.58-1.43x what the final contest measured, and its factors carried that error.
    """
    measured = {library: c.measured.median_ms for c in candidates if c.measured is not None for library in c.single}
    if not measured:
        return False
    natives = dict(native_ms)
    twins = [library for c in candidates if c.measured is not None and whole is not None
             and c.engine is not None and c.engine.runs_whole(whole) for library in c.single]  # fmt: skip
    table.notes["twin_noise"] = merge_twins(measured, natives, twins)
    table.notes["ort_native_ms"] = natives.get(REFERENCE_RUNTIME)
    table.notes["native_ms"] = natives
    table.notes["single_library_ms"] = measured
    progress(Event("layer", "the calibration ran late: the probe's longer measurement of the single-library plans "
                            f"({', '.join(sorted(measured))}) takes its place"))  # fmt: skip
    return True


def pool_fall_backs(table: LookupTable, timed: list[Candidate], native_ms: Mapping[str, float], ort_drift: float,
                    whole: onnx.ModelProto | None) -> None:  # fmt: skip
    """Pool a probe's measurement of each single-library plan that falls back to the default library (not the
    model run whole) with the calibration's and the earlier probes' (``notes["single_library_samples"]``), each at
    the calibration's speed by its library's native run then and now (``native_ms``; ``ort_drift``, ORT native's
    now over then, for a library without one):
    ``notes["single_library_ms"]`` becomes their geometric mean.

    Such a plan is not its native run's twin: what it takes beside that run is a quantity of its own, which one
    short measurement gives with that contest's noise. Measured on the 2-core VM (select-predictions/28): the three
    fall-back plans the calibration alone predicted at 0.80-1.23x their measurement (hf:mobilenet-v2's PyTorch plan
    of 34 segments: 28.6 ms calibrated, 24.5 in the probe, 23.3 in the final contest) had been measured within
    3.7-5.2% of the final contest by the probe. A plan that runs the model whole is left as calibrated: its native
    run in the same contest predicts it better than any earlier measurement."""
    notes = table.notes
    plans = notes.get("single_library_ms") or {}
    drift = measure_drift(notes.get("native_ms"), native_ms, ort_drift)
    samples = notes.setdefault("single_library_samples", {})
    for candidate in timed:
        if candidate.measured is None or not candidate.single or candidate.single[0] not in plans:
            continue
        if candidate.engine is None or (whole is not None and candidate.engine.runs_whole(whole)):
            continue
        library = candidate.single[0]
        kept = samples.setdefault(library, [plans[library]])
        kept.append(candidate.measured.median_ms / drift.of(library))
        plans[library] = float(np.exp(np.mean(np.log(kept))))


def compile_candidates(grouped: GroupedModel, candidates: list[Candidate], created, threads: int,
                       reference: list[np.ndarray], progress: Listener) -> list[float]:  # fmt: skip
    """Compile and verify every candidate that has no engine yet (a failure is recorded, never fatal); the seconds
    each one took."""
    seconds = []
    for candidate in candidates:
        if candidate.engine is not None or candidate.error is not None:
            continue
        progress(Phase("layer", f"compiling and checking the plan of {', '.join(candidate.labels)}", "compile"))
        started = time.monotonic()
        try:
            candidate.engine = grouped.engine(candidate.assignment, threads, created)
            candidate.agreement = compare_outputs(reference, candidate.engine.run(grouped.feeds))
        except Exception as error:  # a plan that cannot be built is reported, never fatal
            candidate.error = first_line(error)
            continue
        finally:
            seconds.append(time.monotonic() - started)
        if not candidate.agreement.within():
            candidate.error = f"disagrees with ONNX Runtime (max rel err {candidate.agreement.max_rel:.1e})"
    if not any(c.engine is not None and c.error is None for c in candidates):
        raise ModelError("no candidate plan ran and agreed with ONNX Runtime: "
                         + "; ".join(f"{', '.join(c.labels)}: {c.error}" for c in candidates))  # fmt: skip
    return seconds


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
    threads), so the medians of many segments add up to less than the plan's median. On the 2-core Zen 4 VM (tally
    42, ``select-predictions/42-*``) they added up to 0.80x of it for ocr-det's plan of 17 segments (15.77 ms of
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


def native_twin(candidate: Candidate, native_proto: onnx.ModelProto | None, natives: Collection[str]) -> str | None:
    """The label among ``natives`` of the native run ``candidate`` is identical to (one segment running the very
    ``native_proto`` in that library), if any."""
    if native_proto is None or not candidate.engine.runs_whole(native_proto):
        return None
    label = f"{candidate.engine.libraries[0]} native"
    return label if label in natives else None


def ungauged_libraries(created: Collection[str], gauges: Collection[str]) -> list[str]:
    """The libraries among ``created`` that no native run among ``gauges`` (labels) gauges."""
    gauged = {label.split()[0] for label in gauges}
    return [name for name in created if name not in gauged]


def plan_twin_timers(grouped: GroupedModel, candidates: list[Candidate], created: Mapping[str, Runtime],
                     threads: int, ungauged: Collection[str],
                     progress: Listener = ignore) -> dict[str, Timer]:  # fmt: skip
    """A second compile of each runnable single-library plan whose libraries are all ``ungauged``, as a timer
    labelled :data:`PLAN_TWIN` (a compile that fails is said and left out: the plan is then gauged as before)."""
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
        except Exception as error:  # the plan keeps its library's drift by ORT native's, as before
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
    of all of them fits (:data:`SETTLE_EVERY_PLAN`), then for those in contention, then for each whose blocks
    disagree (:data:`BLOCK_SPREAD`)."""
    if deadline is not None:
        target = 0.0 if FILL_THE_DEADLINE else contest.SETTLED_NOISE
        return Settle(target=target, deadline=deadline, everyone=SETTLE_EVERY_PLAN, spread=BLOCK_SPREAD)
    return Settle(everyone=SETTLE_EVERY_PLAN, spread=BLOCK_SPREAD, min_batches=UNHURRIED_BATCHES)


def probe_settle(deadline: float | None) -> Settle:
    """How a refining probe settles: with a deadline, one more batch at most, for the plans whose blocks disagree
    (:data:`BLOCK_SPREAD`); without one, as the final contest does (:func:`final_settle`): the table is fitted to
    the probe, so its measurements must repeat as well as the final contest's."""
    if deadline is not None:
        return Settle(target=math.inf, max_batches=2, deadline=deadline, spread=BLOCK_SPREAD)
    return final_settle(None)


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


def later_compiles(libraries: int) -> int:
    """How many whole-model compiles follow the profile at most: the calibration's single-library plans, then the
    agent's plan, the exact optimum and the single-library plans, and OpenVINO native whole. Each
    is priced at what compiling a native session took (a 500 MB VGG: 5 s each)."""
    return 2 * libraries + 2


def call_seconds(native: Callable[[], object]) -> float:
    """One call of ``native``, timed after one warm call."""
    native()
    started = time.monotonic()
    native()
    return time.monotonic() - started


def plan_seconds(candidates: list[Candidate], call_s: float) -> list[float]:
    """A call of each runnable candidate, in seconds: the table's prediction (a native call's without one)."""
    return [c.predicted_ms / 1e3 if math.isfinite(c.predicted_ms) else call_s for c in candidates
            if c.engine is not None and c.error is None]  # fmt: skip


@dataclass(frozen=True)
class FinalReserve:
    """What must follow the refining probes before a deadline: the compiles of the plans they find and of the model
    run whole by each native runtime, then the final contest's floor (:func:`~rlcompile.measure.contest.floor_seconds`).

    ``call_s``: one native call (a contender without a prediction is priced at it); ``natives``: the native runs the
    final contest times (twins included); ``runtimes``: the native runtimes, each of which also runs the model whole as
    a candidate, compiled in ``whole_s`` (what a native session took). Until stop 56 every compile was priced at the
    slowest plan compile so far and each native run counted a whole-model candidate of its own: on hf:convnext
    (60 s) that reserved 3.8 s more than followed, and the second probe did not run."""

    call_s: float
    natives: int
    runtimes: int
    whole_s: float
    #: the plan twins compiled before the final contest (:data:`PLAN_TWIN`), each in ``whole_s``, and timed in it
    twins: int = 0

    def final_floor_s(self, candidates: list[Candidate], refined: int = REFINED_PLANS) -> float:
        """The final contest's least time: the runnable candidates at their predictions, and at a native call's each
        the ``refined`` plans refining probes add yet, the native runs, the plan twins and the model run whole by each
        runtime."""
        extra = refined + self.natives + self.twins + self.runtimes
        return contest.floor_seconds(plan_seconds(candidates, self.call_s) + [self.call_s] * extra, ROUNDS)

    def after_probe_s(self, candidates: list[Candidate], compile_s: float, compiles: int,
                      refined: int | None = None) -> float:  # fmt: skip
        """What must follow a refining probe: the compiles of the ``compiles`` plans it finds (``compile_s`` each) and
        of the whole models, then the final contest's floor with ``refined`` plans not found yet (``compiles`` by
        default). The last probe finds none: reserving two compiles and two contenders for it anyway had stopped
        hf:convnext's second probe (57 ms a call, 60 s), so its refined plans reached the final contest unprobed and
        measured 1.16-1.26x their prediction (select-predictions/49)."""
        refined = compiles if refined is None else refined
        whole = (self.runtimes + self.twins) * self.whole_s
        return self.final_floor_s(candidates, refined) + compiles * compile_s + whole


def plans_found(round_index: int) -> int:
    """How many plans the refining probe of ``round_index`` (from 1) leads to: :data:`REFINED_PLANS`, none from the
    last one (:data:`REFINE_ROUNDS`), which solves no more."""
    return 0 if round_index >= REFINE_ROUNDS else REFINED_PLANS


def native_runtimes(natives: Collection[str]) -> int:
    """How many runtimes the native runs (labelled ``"<runtime> native ..."``) run natively."""
    return len({label.split()[0] for label in natives})


def probe_deadline(deadline: float | None, after_s: float, probe_floor_s: float,
                   start: float | None = None) -> tuple[bool, float | None]:  # fmt: skip
    """Whether the refining probe runs, and when it must end: always, unlimited, without a deadline; with one, only
    when twice its floor fits beside ``after_s`` (what must follow it: the compiles of the plans it finds and the
    final contest's floor), and within :data:`PROBE_SHARE` of the time beyond that. ``start``: when the probe
    starts (``time.monotonic()``; now by default)."""
    if deadline is None:
        return True, None
    start = time.monotonic() if start is None else start
    spare = deadline - start - after_s
    if spare < 2 * probe_floor_s:
        return False, None
    return True, start + max(probe_floor_s, PROBE_SHARE * spare)


def another_probe_fits(deadline: float | None, ready: float | None, after_s: float, probe_floor_s: float) -> bool:
    """Whether one more probe fits once the plans this one finds are compiled (at ``ready``) and solved for
    (:data:`SOLVE_SHARE`): :func:`probe_deadline`'s rule, this probe's floor for the next one's, ``after_s`` what
    must follow the next probe. Only then are plans solved after this one, for the next probe to measure. A plan
    solved after the last probe reaches the final contest unseen: hf:convnext's refined plans, where one call takes
    57 ms and a 60 s budget fits one probe, came 1.46x and 1.85x their prediction (select-predictions/28, 30)."""
    if deadline is None or ready is None:
        return True
    return probe_deadline(deadline, after_s, probe_floor_s, start=ready + SOLVE_SHARE * (deadline - ready))[0]


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
