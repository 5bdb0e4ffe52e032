"""``select_segments``: the selection from the table to the plan chosen, each step's time kept under a deadline."""

from __future__ import annotations

import time
from pathlib import Path

from rlcompile import runtimes
from rlcompile.events import Event, Listener, Phase, Reuse, ignore
from rlcompile.layer import solvers
from rlcompile.layer.group_table import (
    group_model,
    load_or_profile_groups,
    table_file,
)
from rlcompile.layer.problem import SelectionProblem, idle_libraries
from rlcompile.layer.selection.candidates import (
    baseline_candidates,
    compile_candidates,
    create_libraries,
    first_candidates,
    is_mixed,
    mark_untouched,
    natively_run,
    pick,
)
from rlcompile.layer.selection.deadline import (
    FINAL_SHARE,
    REFINE_ROUNDS,
    FinalReserve,
    another_probe_fits,
    call_seconds,
    later_compiles,
    native_runtimes,
    plan_seconds,
    plans_found,
    probe_deadline,
    settle_seconds,
    solve_seconds,
)
from rlcompile.layer.selection.fewer_threads import fewer_threads_candidates, first_screens, screen_seconds
from rlcompile.layer.selection.pricing import gauge_calls, idle_band, left_out_words, price_candidates
from rlcompile.layer.selection.probe import probe_candidates, refine
from rlcompile.layer.selection.record import Selection
from rlcompile.layer.selection.timing import (
    ROUNDS,
    native_timers,
    plan_twin_timers,
    time_candidates,
    ungauged_libraries,
)
from rlcompile.layer.table import save_table
from rlcompile.measure import (
    DEFAULT,
    MeasureConfig,
    contest,
)
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.names import REFERENCE_RUNTIME
from rlcompile.runtimes.ort import run_proto


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
    time left is what remains, and the refining probe is skipped past it; the final contest always runs, with a share
    of the time (:data:`~rlcompile.layer.selection.deadline.SETTLE_SHARE`) that nothing before it may use.
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
    settle_s = settle_seconds(deadline)
    started = time.monotonic()
    natives = native_timers(original, grouped.feeds, threads, created, progress)
    gauges = gauge_calls(natives)
    ungauged = ungauged_libraries(created, gauges)
    compile_s = (time.monotonic() - started) / len(natives)  # a whole-model compile, until plans are timed
    profile_deadline, calibrate_by, call_s = None, None, 0.0
    fewer = first_screens(threads, native_runtimes(natives))
    if deadline is not None:  # the contests' least times and the compiles after the profile, then a share
        call_s = call_seconds(natives["ort native"])
        floor_s = contest.floor_seconds([call_s] * (len(natives) + len(ungauged) + len(created) + 2 + fewer), ROUNDS)
        calibration_s = contest.floor_seconds([call_s] * (len(created) + len(gauges)))  # each library's plan, gauges
        compiles = later_compiles(len(created)) + len(ungauged) + fewer
        reserved = floor_s + calibration_s + compiles * compile_s + fewer * screen_seconds(call_s) + settle_s
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
    reserve = FinalReserve(call_s, len(natives), native_runtimes(natives), compile_s, len(ungauged), settle_s, fewer)
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
                                 progress, until, round_index, solve, original.native_proto)  # fmt: skip
        save_table(problem.table, path)
        compile_s = max([compile_s, *compile_candidates(grouped, candidates, created, threads, reference, progress)])
    price_candidates(problem, candidates)
    # the model as the user has it, run natively by ORT and OpenVINO, is always a candidate: a runtime that cannot
    # take every fusion group alone (its single-runtime plan falls back to ORT per group) still runs it whole
    candidates += baseline_candidates(original, grouped, created, threads, reference, rewritten=baseline is not None,
                                      skip=natively_run(candidates, original))  # fmt: skip
    candidates += fewer_threads_candidates(original, grouped, created, threads, reference, natives,
                                           rewritten=baseline is not None, progress=progress)  # fmt: skip
    mark_untouched(candidates, original)
    twins = plan_twin_timers(grouped, candidates, created, threads, ungauged, progress)
    final = time_candidates(grouped, candidates, natives | twins, timing, progress, deadline, original.native_proto)
    selection = Selection(original, grouped, agent, threads, problem.table, path, reused, result, candidates,
                          pick(candidates), unavailable=unavailable, native_calls=natives,
                          reference=reference, plan_twin_calls=twins, left_out=left_out)  # fmt: skip
    selection.take_final(final)  # the pick again, ties now within the contest's noise
    return selection
