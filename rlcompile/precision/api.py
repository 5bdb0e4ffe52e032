"""Precision as a decision: after the library choice, the searches lower what the accuracy contract allows.

1. The samples (``--data``, else random) are split into calibration and validation; the fp32 model's
   outputs on the validation samples are the reference, and its own error on them (zero for metrics
   that compare with fp32, its real error for metrics with labels) the base the tolerance adds to.
2. The modes this machine offers (ONNX Runtime fp32, OpenVINO fp32, OpenVINO bf16 where the CPU has it)
   and the fusion groups that can run in int8 span the space (:mod:`rlcompile.precision.space`).
3. The uniform plans, NNCF's greedy rule, the exact proxy optimum and the agent (Q-learning by default)
   search it, every plan measured end to end on the validation samples (error) and timed briefly.
4. The best plan within tolerance of each search joins the selection's candidates as a one-segment plan
   (the two fastest of distinct modes also built on the graph as the user gave it, where the graph level
   rewrote it: the rewrite was judged in fp32), and every candidate (the layer level's fp32 plans and the native
   runs included) is timed again in one contest, alternating; the fastest wins. A plan over its tolerance is never
   a candidate, so the result is never slower than the fp32 choice beyond the noise, and never less accurate than
   allowed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from rlcompile.errors import RlcompileError
from rlcompile.events import Event, Failed, Listener, Phase, Step, ignore
from rlcompile.layer.group_table import group_model
from rlcompile.layer.segments import CompiledSegment, Segment, SegmentEngine
from rlcompile.layer.selection.candidates import ORIGINAL_GRAPH, Candidate, create_libraries
from rlcompile.layer.selection.record import Selection
from rlcompile.layer.selection.timing import native_timers as make_native_timers
from rlcompile.layer.selection.timing import time_candidates
from rlcompile.manifest import AccuracyRecord
from rlcompile.measure import DEFAULT, MeasureConfig
from rlcompile.models.onnx_model import random_tensor
from rlcompile.precision.contract import AccuracyContract, Samples, load_metric, load_samples, mean_error
from rlcompile.precision.evaluate import BudgetSpent, Evaluation, Evaluator, failures
from rlcompile.precision.quantize import Quantizer
from rlcompile.precision.searches import SearchResult, create
from rlcompile.precision.searches.recipes import recipe_modes
from rlcompile.precision.smoothing import smooth
from rlcompile.precision.space import DEFAULT_RECIPE, Mode, PrecisionPlan, Recipe, Unit, modes, precision_units
from rlcompile.runtimes import Runner
from rlcompile.runtimes.ort import run_proto_on_each
from rlcompile.verify import compare_outputs

#: The searches run, in order (the agent's own comes last, with what the others measured in the cache).
SEARCHES = ("uniform", "recipes", "greedy", "proxy")
#: How many of the searches' plans (fastest first, distinct) join the final contest.
FINALISTS = 4
#: How many of them (each search's best, each lowered float mode alone, then the fastest within tolerance) are timed
#: in turns with the fp32 plans to decide which are faster (:meth:`Evaluator.screen`, :func:`screening_pool`).
SCREENED = 6
#: The label of a precision candidate starts with this.
PRECISION = "precision:"
#: The work folder of the plans that lower the graph as the user gave it.
AS_GIVEN = "original-graph"
#: How many finalists of distinct modes are built again on the user's graph: the fastest, and the next, whose recipe
#: may err less (all-MiniLM-L6-v2 through ``optimize``: the fastest on the merged graph left its residual Adds in float
#: alone, error 0.0066, the next added SmoothQuant, 0.0021); the final contest keeps the least error among ties.
AS_GIVEN_PLANS = 2


@dataclass
class PrecisionChoice:
    """What the precision searches found and which plan won."""

    contract: AccuracyContract
    samples: Samples = field(repr=False)
    fp32_error: float
    modes: list[Mode]
    left_out: dict[str, str]
    units: int
    searches: list[SearchResult]
    evaluations: list[Evaluation]
    finalists: list[Candidate]
    wall_s: float
    #: the evaluator the searches shared (its cache holds every plan measured)
    evaluator: Evaluator | None = field(default=None, repr=False)
    #: the fastest finalist's plan lowering the graph as the user gave it, measured (:func:`as_given_candidates`),
    #: as :func:`plan_record` keeps it
    as_given: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {search.solver: {"best": search.best.plan.label(self.units) if search.best else None,
                                "best_quick_ms": search.best.ms if search.best else None,
                                "error": search.best.error if search.best else None,
                                "evaluations": search.evaluations, **search.notes}
                for search in self.searches}  # fmt: skip

    def to_dict(self) -> dict:
        return {"contract": self.contract.describe(), "samples": self.samples.source,
                "calibration_samples": len(self.samples.calibration),
                "validation_samples": len(self.samples.validation), "fp32_error": self.fp32_error,
                "modes": [mode.label for mode in self.modes], "left_out": self.left_out, "units": self.units,
                "searches": self.summary(), "evaluations": len(self.evaluations), "wall_s": self.wall_s,
                "plans": [plan_record(e, self.units) for e in self.evaluations],
                "failures": failures(self.evaluations),
                "original_graph_plans": self.as_given}  # fmt: skip


def plan_record(evaluation: Evaluation, units: int) -> dict:
    """One measured plan as the manifest keeps it (``units``: how many the plan's graph has)."""
    e = evaluation
    return {"plan": e.plan.label(units), "error": e.error, "excess": e.excess, "quick_ms": e.ms if e.latency else None,
            "screened_ms": e.screened_ms, "within": e.within, "failure": e.failure}


def choose_precision(selection: Selection, contract: AccuracyContract, agent: str = "qlearning", seed: int = 0,
                     work: Path | None = None, timing: MeasureConfig = DEFAULT, progress: Listener = ignore,
                     deadline: float | None = None, max_evaluations: int | None = None,
                     final_deadline: float | None = None) -> PrecisionChoice:  # fmt: skip
    """Search the precision plans ``contract`` allows; add the best to ``selection`` and pick again, measured.

    ``deadline``: when the searches stop; ``final_deadline``: when the final contest should end (it is
    shortened to, down to a floor).
    """
    if contract.exact:
        raise RlcompileError("choose_precision: the contract allows fp32 only")
    started = time.monotonic()
    model, threads = selection.model, selection.threads
    grouped = source_graph(selection)
    progress(Phase("precision", f"precision: reading samples and the fp32 reference ({contract.metric})", "data"))
    specs = {spec.name: (tuple(int(d) for d in spec.shape), spec.dtype) for spec in model.inputs}
    samples = load_samples(contract, specs, seed,
                           lambda rng: {spec.name: random_tensor(spec, rng) for spec in model.inputs})  # fmt: skip
    metric = load_metric(contract.metric)
    reference = run_proto_on_each(model.proto, [samples.feeds(sample) for sample in samples.validation])
    fp32_error = mean_error(metric, samples, reference, reference)
    created, _ = create_libraries(["ort", "openvino"], None)
    allowed, left_out = modes(contract.lowered, created)
    for name, why in left_out.items():
        progress(Event("precision", f"precision: {name} left out: {why}"))
    evaluator = evaluator_for(grouped, contract, samples, metric, reference, fp32_error, created, threads, work,
                              deadline, max_evaluations)  # fmt: skip
    searches = run_searches(evaluator, allowed, agent, seed, progress)
    found = finalist_candidates(evaluator, searches, selection, contract, samples, fp32_error, final_deadline)
    finalists, twin = [candidate for *_, candidate in found], None
    whole = as_given_finalists(found, len(evaluator.units))
    if whole and rewritten(grouped, selection):
        folder = None if work is None else work / AS_GIVEN
        twin = evaluator_for(group_model(selection.model), contract, samples, metric, reference, fp32_error, created,
                             threads, folder, final_deadline, len(whole))  # fmt: skip
        for finalist, found_by in whole:
            finalists += as_given_candidates(evaluator, twin, finalist, found_by, selection, contract, samples,
                                             fp32_error, progress)  # fmt: skip
    progress(Phase("precision", f"precision: timing {len(finalists)} precision plans with the fp32 plans in turns",
                   "measure"))  # fmt: skip
    selection.candidates += finalists
    natives = selection.native_calls or make_native_timers(model, grouped.feeds, threads, created, progress)
    for candidate in selection.candidates:
        candidate.measured, candidate.round_ms = None, None
    selection.native_calls = natives
    selection.take_final(time_candidates(grouped, selection.candidates, selection.final_timers(), timing, progress,
                                         final_deadline, model.native_proto))  # fmt: skip
    for each in (evaluator, twin):
        if each is not None:
            each.close()
    evaluations = [evaluator.cache[plan] for plan in evaluator.visited]
    if grouped is not selection.grouped:
        progress(Event("precision", "precision: lowered the model as the user gave it (the rewritten graph ran "
                                    "slower in the layer stage's contest)"))  # fmt: skip
    choice = PrecisionChoice(contract, samples, fp32_error, allowed, left_out, len(evaluator.units), searches,
                             evaluations, finalists, time.monotonic() - started, evaluator,
                             [] if twin is None else [plan_record(e, len(twin.units)) for e in twin.cache.values()])
    for candidate in finalists:
        candidate.accuracy.searches = choice.summary()
    return choice


def evaluator_for(grouped, contract: AccuracyContract, samples: Samples, metric, reference: list[list[np.ndarray]],
                  fp32_error: float, created, threads: int, work: Path | None, deadline: float | None,
                  max_evaluations: int | None = None) -> Evaluator:  # fmt: skip
    """The evaluator of the plans that lower ``grouped`` (its fusion groups that can run in int8 the units, each
    recipe's quantizer made in its own folder of ``work``), ``max_evaluations`` at most (default: by the units)."""
    units = precision_units(grouped.proto, grouped.groups) if "int8" in contract.lowered else []
    quantizer_of = recipe_quantizers(grouped.proto, units, [samples.feeds(s) for s in samples.calibration], work)
    return Evaluator(units, quantizer_of(DEFAULT_RECIPE), created, samples, metric, reference, fp32_error,
                     contract.tolerance, threads, grouped=grouped,
                     max_evaluations=max_evaluations or max(40, 4 * len(units) + 12), deadline=deadline,
                     quantizer_factory=quantizer_of)  # fmt: skip


def as_given_finalists(found: list[tuple[Evaluation, str, Candidate]], units: int) -> list[tuple[Evaluation, str]]:
    """The finalists (fastest first) built again on the graph as the user gave it: those with every group in int8 or
    none, one per mode, at most :data:`AS_GIVEN_PLANS`."""
    chosen: dict[Mode, tuple[Evaluation, str]] = {}
    for evaluation, found_by, _ in found:
        if len(evaluation.plan.int8) in (0, units) and evaluation.plan.mode not in chosen:
            chosen[evaluation.plan.mode] = (evaluation, found_by)
    return list(chosen.values())[:AS_GIVEN_PLANS]


def as_given_candidates(evaluator: Evaluator, twin: Evaluator, finalist: Evaluation, found_by: str,
                        selection: Selection, contract: AccuracyContract, samples: Samples, fp32_error: float,
                        progress: Listener = ignore) -> list[Candidate]:  # fmt: skip
    """A finalist's plan (``finalist``) lowering the graph as the user gave it (``twin``'s), as a candidate of its own
    when it stays within the contract there: the same mode and recipe, every group in int8 or none (a plan of some
    groups names groups of the rewritten graph). The graph level keeps a rewrite that ONNX Runtime runs faster in
    fp32, and a lowered plan runs other kernels: on all-MiniLM-L6-v2 (2-core Zen 5) the projections merged into one
    MatMul ran 11-14% faster in ONNX Runtime fp32 and made OpenVINO's int8 plan 2% slower. The final contest decides."""
    plan = finalist.plan
    if 0 < len(plan.int8) < len(evaluator.units) or (plan.int8 and not twin.units):
        return []
    lowered = PrecisionPlan(plan.mode, frozenset(range(len(twin.units))) if plan.int8 else frozenset())
    progress(Event("precision", f"precision: {lowered.label(len(twin.units))} on the original graph"))
    try:
        found = twin(lowered)
    except BudgetSpent:
        return []
    if not found.within or found.failure:
        why = found.failure or f"error {found.error:.4g}, outside the tolerance"
        progress(Event("precision", f"precision: left out on the original graph: {why}"))
        return []
    candidate = candidate_of(twin, found, selection, contract, samples, fp32_error, found_by, ORIGINAL_GRAPH)
    candidate.accuracy.evaluations = len(evaluator.visited) + len(twin.visited)
    return [candidate]


def recipe_quantizers(proto: onnx.ModelProto, units: list[Unit], feeds: list[dict[str, np.ndarray]],
                      work: Path | None) -> Callable[[Recipe], Quantizer]:  # fmt: skip
    """How each recipe's quantizer is made: over ``proto`` smoothed at the recipe's alpha (on the units' MatMuls)
    or as it is, calibrated by its method on ``feeds``, in its own folder of ``work`` (its cache kept there)."""
    quantizable = [name for unit in units for name in (*unit.nodes, *unit.companions, *unit.attention)]
    anchors = [name for unit in units for name in unit.nodes]

    def make(recipe: Recipe) -> Quantizer:
        source = smooth(proto, feeds, recipe.smoothing, anchors) if recipe.smoothing else proto
        folder = ("int8" if recipe.quantizer_key == DEFAULT_RECIPE.quantizer_key
                  else f"int8-{recipe.calibration}-smooth{recipe.smoothing:g}")
        return Quantizer(source, feeds, None if work is None else work / folder, quantizable, recipe.calibration)

    return make


def source_graph(selection: Selection):
    """The graph the precision plans lower: the one the layer stage went on with, unless the graph stage rewrote
    it and the fastest fp32 plan measured ran the model as the user gave it (then that one, grouped)."""
    grouped = selection.grouped
    fastest = min((c for c in selection.candidates if c.measured), key=lambda c: c.measured.median_ms, default=None)
    as_given = fastest is not None and any(ORIGINAL_GRAPH in label for label in fastest.labels)
    if rewritten(grouped, selection) and as_given:
        return group_model(selection.model)
    return grouped


def rewritten(grouped, selection: Selection) -> bool:
    """Whether ``grouped`` is a rewrite of the model the user gave (the graph level's), not that model itself."""
    return grouped.original is not None and grouped.original is not selection.model


def run_searches(evaluator: Evaluator, allowed: list[Mode], agent: str, seed: int,
                 progress: Listener) -> list[SearchResult]:  # fmt: skip
    """The fixed searches, then the agent's, each reporting what it found."""
    names = [*SEARCHES, *([agent] if agent not in SEARCHES else [])]
    if not evaluator.units:
        names = ["uniform"]  # no group can run in int8: the modes are the whole space
    results = []
    for index, name in enumerate(names):
        allowed = recipe_modes(evaluator, allowed)
        progress(Step("precision", f"precision: {name} search ({len(evaluator.visited)} plans measured so far)",
                      index, len(names), "searches", name))  # fmt: skip
        evaluator.share_time(len(names) - index)
        result = create(name)(evaluator, allowed, seed)
        results.append(result)
        found = result.best.plan.label(len(evaluator.units)) if result.best else "nothing within tolerance"
        progress(Event("precision", f"precision: {name}: {found} ({result.evaluations} new plans measured)"))
    total = len(evaluator.cache)
    for why, count in failures(evaluator.cache.values()).items():
        progress(Failed("precision", f"precision: {count} of {total} plans measured failed: {why}", count, total, why))
    return results


def finalist_candidates(evaluator: Evaluator, searches: list[SearchResult], selection: Selection,
                        contract: AccuracyContract, samples: Samples, fp32_error: float,
                        deadline: float | None = None) -> list[tuple[Evaluation, str, Candidate]]:  # fmt: skip
    """The fastest distinct plans within tolerance (each search's best first), each with the search that found it
    and its one-segment candidate;
    only plans that run faster than every exact (fp32) plan when timed in turns with them (:meth:`Evaluator.screen`)."""
    exact = [e for e in evaluator.cache.values() if e.plan.exact and e.failure is None]
    pool = screening_pool(evaluator, searches)
    runners = evaluator.screen(exact + pool, deadline) if pool and exact else {}
    exact_ms = min((e.ranking_ms for e in exact), default=np.inf)
    chosen = sorted((e for e in pool if e.ranking_ms < exact_ms), key=lambda e: e.ranking_ms)[:FINALISTS]
    solvers = {id(s.best): s.solver for s in reversed(searches) if s.best}  # the first search to find it
    found = [(e, solvers.get(id(e), "measured")) for e in chosen]
    return [(e, found_by, candidate_of(evaluator, e, selection, contract, samples, fp32_error, found_by,
                                       runner=runners.get(e.plan))) for e, found_by in found]  # fmt: skip


def screening_pool(evaluator: Evaluator, searches: list[SearchResult]) -> list[Evaluation]:
    """The lowered plans within tolerance that are timed in turns with the fp32 plans, at most :data:`SCREENED`:
    each search's best, each lowered float mode with no group in int8 (OpenVINO bf16), then the rest by brief time.

    A mode alone runs other kernels than every int8 plan, and one brief block misjudges it as it does any plan: on
    PaddleOCR's classifier (Zen 4) OpenVINO bf16 was the fastest plan in the benchmark's contest, 0.90x
    OpenVINO fp32, and had not been screened: six int8 plans had measured faster in their one block each."""
    within = sorted((e for e in evaluator.cache.values() if e.within and e.failure is None and not e.plan.exact),
                    key=lambda e: e.ms)  # fmt: skip
    alone = [e for e in within if not e.plan.int8]
    pool: list[Evaluation] = []
    for evaluation in [*(s.best for s in searches if s.best and not s.best.plan.exact), *alone, *within]:
        if evaluation not in pool and len(pool) < SCREENED:
            pool.append(evaluation)
    return pool


def candidate_of(evaluator: Evaluator, evaluation: Evaluation, selection: Selection, contract: AccuracyContract,
                 samples: Samples, fp32_error: float, found_by: str, graph: str = "",
                 runner: Runner | None = None) -> Candidate:  # fmt: skip
    """A one-segment candidate that runs ``evaluation``'s plan (on ``runner`` when it is already compiled, as
    :meth:`Evaluator.screen` compiles it), with its accuracy record; ``graph``: words its label ends with."""
    source, grouped, plan = evaluator.grouped, selection.grouped, evaluation.plan
    units = evaluator.units
    segment = Segment(plan.mode.runtime, list(range(len(source.groups))), list(source.inputs),
                      list(source.outputs), evaluator.model(plan), plan.mode.floats)  # fmt: skip
    label = f"{PRECISION}{found_by} ({plan.label(len(units))}){graph}"
    candidate = Candidate([label], [plan.mode.runtime] * len(grouped.groups), evaluation.ranking_ms)
    runner = evaluator.compile(plan, exclusive=True) if runner is None else runner
    candidate.engine = SegmentEngine([CompiledSegment(segment, runner, runner.prepare_seconds)], grouped.inputs,
                                     grouped.outputs)  # fmt: skip
    candidate.agreement = compare_outputs(selection.reference_outputs(), candidate.engine.run(grouped.feeds))
    candidate.accuracy = AccuracyRecord(
        precision=contract.precision, metric=contract.metric, tolerance=contract.tolerance, data=samples.source,
        calibration_samples=len(samples.calibration), validation_samples=len(samples.validation),
        fp32_error=fp32_error, error=evaluation.error, excess=evaluation.excess, plan=plan.label(len(units)),
        mode={"runtime": plan.mode.runtime, "floats": plan.mode.floats, "recipe": plan.mode.recipe.to_dict()},
        int8_groups=[units[i].group for i in sorted(plan.int8)], evaluations=len(evaluator.visited),
        searches={}, real_data=samples.real)  # fmt: skip
    candidate.validation = validation_arrays(samples, evaluator.reference)
    return candidate


def validation_arrays(samples: Samples, reference: list[list[np.ndarray]]) -> dict[str, np.ndarray]:
    """The held-out samples and their fp32 outputs, as ``validation.npz`` stores them."""
    arrays = {}
    for index, (sample, outputs) in enumerate(zip(samples.validation, reference, strict=True)):
        arrays |= {f"{index}:sample:{key}": value for key, value in sample.items()}
        arrays |= {f"{index}:fp32:{k}": value for k, value in enumerate(outputs)}
    return arrays


__all__ = ["PRECISION", "PrecisionChoice", "PrecisionPlan", "choose_precision", "validation_arrays"]
