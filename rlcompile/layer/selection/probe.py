"""The refining probe: a short measurement of the plans not measured yet, which refits the table to them, prices the
groups in context, and leads the solvers to new plans."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import onnx

from rlcompile.events import Event, Listener, Phase
from rlcompile.layer.fit import apply_fit, fit_plans
from rlcompile.layer.group_table import (
    merge_twins,
)
from rlcompile.layer.in_context import (
    apply_group_prices,
    measure_drift,
    whole_model_prices,
)
from rlcompile.layer.problem import SelectionProblem, exact
from rlcompile.layer.selection.candidates import Candidate, candidate_plans
from rlcompile.layer.selection.deadline import solve_seconds
from rlcompile.layer.selection.pricing import (
    at_table_speed,
    gauge_calls,
    gauge_drift,
    measured_plans,
    plan_price,
    price_in_context,
    single_library_times,
)
from rlcompile.layer.selection.timing import probe_settle, time_candidates_once
from rlcompile.layer.solvers import SolverResult
from rlcompile.layer.table import LookupTable
from rlcompile.measure import (
    MeasureConfig,
    Timer,
    contest,
)
from rlcompile.names import REFERENCE_RUNTIME

#: The probe's blocks as a share of the final contest's (a deadline shortens both to fit). The table is fitted to the
#: probe, so a probe measurement that does not repeat becomes a missed prediction: with a quarter of the blocks, 24 of
#: 32 misses were such plans; with full blocks, 116 of 118 plans came within 15% of their prediction.
PROBE_TIME_SHARE = 1.0
#: With a deadline, the probe's first batch is fitted into this share of its time, leaving the rest for that second
#: batch.
PROBE_FIRST_BATCH_SHARE = 0.6


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
    short measurement gives with that contest's noise. Measured on a 2-core VM: the three
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
