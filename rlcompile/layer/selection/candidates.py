"""The plans ``select`` weighs: each a library per fusion group, cut into segments, compiled and checked against ONNX
Runtime; the pick among the measured ones (ties within the noise go to fewer segments)."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from rlcompile import runtimes
from rlcompile.errors import ModelError, first_line
from rlcompile.events import Listener, Phase
from rlcompile.layer.group_table import (
    GroupedModel,
    single_library_plan,
)
from rlcompile.layer.problem import SelectionProblem, exact
from rlcompile.layer.segments import Segment, SegmentEngine
from rlcompile.layer.solvers import SolverResult
from rlcompile.manifest import AccuracyRecord
from rlcompile.measure import (
    PLAN_RULE,
    KeepRule,
    LatencyStats,
    contest,
)
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.names import REFERENCE_RUNTIME
from rlcompile.runtimes import Runtime
from rlcompile.verify import Agreement, compare_outputs

#: Candidates measured within this fraction of the fastest are ties (then fewer segments wins).
TIE_BAND = PLAN_RULE.tie_band
#: How a single-runtime plan's label starts (``single:openvino``).
SINGLE = "single:"
#: The runtimes that run the user's model natively, each also a candidate run whole (:func:`baseline_candidates`).
NATIVE_RUNTIMES = (REFERENCE_RUNTIME, "openvino")


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
    #: the user's model as given, run whole by one library: what every other plan must beat (:func:`pick`)
    untouched: bool = False
    #: the intra-op threads its engine runs at, where fewer than the selection's
    #: (:mod:`~rlcompile.layer.selection.fewer_threads`); ``None``: the selection's
    threads: int | None = None

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
            "untouched": self.untouched,
            "threads": self.threads,
        }


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


def pick(candidates: list[Candidate], rule: KeepRule = PLAN_RULE, noise: float | None = None) -> Candidate:
    """The plan kept: the faster untouched native run (the user's model as given, run whole by one library), unless
    another plan beats it by more than the rule's tie band and more than ``noise`` (the contest's identical
    sessions' difference); among the plans that do, the fastest, and among those within the band (or the noise) of
    it, the one with fewest segments, then the least error (a lowered precision's excess over fp32's), then the
    faster: on all-MiniLM-L6-v2 (2-core Zen 5) four int8 plans ran within 1.8% of each other, twins 1.3% apart, and
    the fastest by 0.07% had three times the error of the next.

    A tie, within the band or within the noise, keeps the user's model untouched, whatever a rewritten or cleaned
    graph's segment count: a gain the twins cannot tell from noise is no gain, and from outside the cleaned graph of
    a 1.9 ms classifier ran 1.01-1.03x ORT's on the original. Which native run is the reference is their medians'
    order (the contest settles until its twins agree), not the tie rule. Without an untouched candidate (a precision
    search's plans, a model no library runs whole), the fastest, ties to the simplest.
    On the 2-core VM, ``select`` kept a 13-segment plan of bert-minilm for 27.4 ms against OpenVINO native's
    28.6 ms while its twins differed by 44.5%: a plan of more segments must beat a simpler one beyond the noise.
    """
    runnable = [c for c in candidates if c.measured is not None]
    band = max(rule.tie_band, noise or 0.0)
    natives = [c for c in runnable if c.untouched]
    if natives:
        reference = min(natives, key=lambda c: c.measured.median_ms)
        runnable = [c for c in runnable if not c.untouched
                    and c.measured.median_ms < reference.measured.median_ms * (1 - band)]  # fmt: skip
        if not runnable:
            return reference
    entries = [(str(index), c.measured.median_ms, (c.segments, c.accuracy.excess if c.accuracy else 0.0))
               for index, c in enumerate(runnable)]  # fmt: skip
    return runnable[int(contest.fastest(entries, rule, noise or 0.0))]


def mark_untouched(candidates: list[Candidate], original: LoadedModel) -> None:
    """Mark the candidates that run ``original`` as given (its :attr:`~LoadedModel.native_proto`) whole in one library
    (:attr:`Candidate.untouched`)."""
    for candidate in candidates:
        candidate.untouched = (candidate.threads is None and candidate.engine is not None
                               and candidate.engine.runs_whole(original.native_proto))  # fmt: skip


def natively_run(candidates: list[Candidate], original: LoadedModel) -> set[str]:
    """The runtimes whose candidate already is the original model run whole (a one-segment single-runtime plan)."""
    return {c.engine.libraries[0] for c in candidates
            if c.threads is None and c.engine and c.engine.runs_whole(original.native_proto)}  # fmt: skip


def whole_segment(original: LoadedModel, grouped: GroupedModel, name: str) -> Segment:
    """``original`` as the user gave it (its :attr:`~LoadedModel.native_proto`), one segment of every fusion group run
    by ``name``: that library's native run as a plan."""
    everything = list(range(len(grouped.groups)))
    return Segment(name, everything, list(grouped.inputs), list(grouped.outputs), original.native_proto)


#: The words a plan's label ends with when it runs the user's graph while the selection's model is a rewrite of it.
ORIGINAL_GRAPH = " (original graph)"


def native_label(name: str, rewritten: bool, threads: str = "") -> str:
    """The label of the user's model run whole by ``name`` (``threads``: the words of a count other than the
    natives', e.g. ``1 thread``), said to be the original graph where the selection's model is a rewrite of it."""
    label = f"native:{name}" + (f" at {threads}" if threads else "")
    return label + (ORIGINAL_GRAPH if rewritten else "")


def mark_disagreement(candidate: Candidate) -> None:
    """Record as the candidate's error that its outputs (:attr:`Candidate.agreement`) disagree with ONNX Runtime's,
    where they do."""
    if not candidate.agreement.within():
        candidate.error = f"disagrees with ONNX Runtime (max rel err {candidate.agreement.max_rel:.1e})"


def baseline_candidates(baseline: LoadedModel, grouped: GroupedModel, created, threads: int,
                        reference: list[np.ndarray], rewritten: bool = True,
                        skip: set[str] = frozenset()) -> list[Candidate]:  # fmt: skip
    """The user's original model run natively, as one-segment plans, by ONNX Runtime and OpenVINO (except the
    runtimes in ``skip``, whose candidate already is that)."""
    candidates = []
    for name in NATIVE_RUNTIMES:
        if name not in created or name in skip:
            continue
        segment = whole_segment(baseline, grouped, name)
        candidate = Candidate([native_label(name, rewritten)], [name] * len(grouped.groups), float("nan"))
        try:
            candidate.engine = SegmentEngine.compile([segment], grouped.inputs, grouped.outputs, threads, created)
            candidate.agreement = compare_outputs(reference, candidate.engine.run(grouped.feeds))
        except Exception as error:  # reported with the candidates, never fatal
            candidate.error = first_line(error)
        candidates.append(candidate)
    return candidates


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
        mark_disagreement(candidate)
    if not any(c.engine is not None and c.error is None for c in candidates):
        raise ModelError("no candidate plan ran and agreed with ONNX Runtime: "
                         + "; ".join(f"{', '.join(c.labels)}: {c.error}" for c in candidates))  # fmt: skip
    return seconds


def native_twin(candidate: Candidate, native_proto: onnx.ModelProto | None, natives: Collection[str]) -> str | None:
    """The label among ``natives`` of the native run ``candidate`` is identical to (one segment running the very
    ``native_proto`` in that library at the natives' threads), if any."""
    if native_proto is None or candidate.threads is not None or not candidate.engine.runs_whole(native_proto):
        return None
    label = f"{candidate.engine.libraries[0]} native"
    return label if label in natives else None
