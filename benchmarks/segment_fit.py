"""The first refining probe's fit, replayed from a ``select`` run: each timed segment's clock against its price.

    python benchmarks/segment_fit.py RUN [RUN ...] [--out results/segment_fit/NAME.json]

``RUN`` is the folder a ``select -o RUN/plan --table-dir RUN/tables`` wrote (``benchmarks/real_world.py`` keeps one
per model under ``runs/<model>/select``): its saved table (as calibrated, before any probe) and its manifest (the
plans the first probe measured, with their whole time at the table's speed and their segments' clocks). The replay
fits as ``select`` did (:func:`~rlcompile.layer.fit.fit_plans` on the plans' whole times, then
:func:`~rlcompile.layer.in_context.fit_group_prices` on the segments of the mixed ones) and prints, per plan, its
price before and after each fit against the probe, and per segment its clock against its groups' prices and the
crossings it receives. Where the fitted price of a plan stays far from its own probe, the segment rows show which
segments the table's terms cannot fit together (one price per kind of group and library for long and short
segments alike).

The segments' clocks come from the manifest at the probe's speed; they are scaled to the plan's probe at the table's
speed (their sum is the plan's median: ``segment_shares``). A plan that a second probe timed again keeps only its
last clocks in the manifest, so the replay is of the first probe's plans (those without "(refined)" in their first
label). Measured on the 2-core Emerald Rapids VM: ocr-det (``select-predictions/67c``), whose exact plan
(OpenVINO for 72 groups, ORT for the two ConvTransposes) had missed its prediction by 0.78-0.84x in three tallies:
replayed, its price 10.91 ms for a probe of 9.61 (the run: 11.01), the Q-learning plan of 16 segments 14.79 for
18.23 (the run: 14.29); after the fit the long OpenVINO segment's groups are priced 9.53 ms for a clock of 8.52 (at
the table's speed), while three of the Q-learning plan's OpenVINO segments (6, 18 and 22 groups) ran 1.0-1.1 ms over
their groups and crossings: one price per kind and library cannot serve both.

A fit reproduces the plans it was fitted to: what it is worth is its price for a plan it has not seen, as the plans
the solvers find on the corrected table are. So each plan of more than one segment is also priced by the fit to the
run's other plans alone (``left_out_ms``), and with several runs the summary counts the plans priced within 5, 10
and 15% of their probe, fitted to and left out. Over 14 runs (``select --quick`` without a budget,
``results/segment_fit/segment_fit.json``): 20 mixed plans, fitted 20/20/20 (median 0.5%), left out
16/19/20 (median 3.2%; ocr-det's exact plan +8.0%, priced from the Q-learning plan's short segments alone). A cost for
leaving a library, charged to the sending segment beside the entry the receiving one pays, changed neither count
(16/19/20, median 3.4%) and was not kept.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rlcompile import atomic
from rlcompile.layer.fit import apply_fit, fit_plans
from rlcompile.layer.in_context import (
    TimedSegment,
    apply_group_prices,
    fit_group_prices,
    segment_predictions,
    whole_model_prices,
)
from rlcompile.layer.problem import SelectionProblem
from rlcompile.layer.segments import library_runs
from rlcompile.layer.selection.candidates import Candidate
from rlcompile.layer.selection.pricing import plan_price, pricing_problem
from rlcompile.layer.table import LookupTable


def manifest_candidate(plan: dict) -> Candidate:
    """A plan of the manifest as ``select`` held it, for its own pricing functions (no engine, no measurement)."""
    return Candidate(plan["labels"], plan["assignment"], float("nan"), single=plan.get("single") or [])


def price(plan: dict, problem: SelectionProblem) -> float:
    """What the table says ``plan`` costs, priced as ``select`` prices it (:func:`~rlcompile.layer.selection.
    plan_price`)."""
    return plan_price(manifest_candidate(plan), problem, SelectionProblem(whole_model_prices(problem.table)))


def timed_segments(plan: dict) -> list[TimedSegment] | None:
    """The plan's segments with their clocks at the table's speed, or ``None`` when the manifest has no clocks."""
    runs, clocks = library_runs(plan["assignment"]), plan.get("segment_ms") or []
    if len(runs) != len(clocks) or not clocks or not plan.get("probe_ms"):
        return None
    scale = plan["probe_ms"][0] / sum(clocks)
    return [TimedSegment(plan["assignment"][run[0]], tuple(run), ms * scale)
            for run, ms in zip(runs, clocks, strict=True)]  # fmt: skip


def segment_rows(plan: dict, segments: list[TimedSegment], problem: SelectionProblem) -> list[dict]:
    predictions = segment_predictions(problem, problem.choices(plan["assignment"]), segments)
    return [{"library": segment.library, "groups": len(segment.groups), "clock_ms": segment.ms, "groups_ms": own,
             "crossings_ms": crossings}
            for segment, (own, crossings) in zip(segments, predictions, strict=True)]  # fmt: skip


def read_run(run: Path) -> tuple[LookupTable, dict, list[dict]]:
    """(the run's table as calibrated, its manifest's selection, the plans its first probe measured)."""
    table = LookupTable.from_json(json.loads(next((run / "tables").glob("*.json")).read_text()))
    selection = json.loads((run / "plan" / "manifest.json").read_text())["selection"]
    plans = [plan for plan in selection["candidates"]
             if plan.get("probe_ms") and "(refined" not in plan["labels"][0]]  # fmt: skip
    return table, selection, plans


def run_problem(table: LookupTable, selection: dict) -> SelectionProblem:
    """The problem ``select`` solved on ``table``: without the libraries it left out."""
    return SelectionProblem(table).without(set(selection.get("left_out") or {}))


def fitted_problem(table: LookupTable, selection: dict, plans: list[dict],
                   records: Sequence[dict] = ()) -> SelectionProblem:  # fmt: skip
    """The problem on ``table`` after the first probe's two fits to ``plans``, as ``select`` fits them (the table is
    changed in place); each of ``records`` (a plan's record, its ``plan`` in it) gets its price between the fits."""
    problem = run_problem(table, selection)
    whole = SelectionProblem(whole_model_prices(problem.table))
    fit = fit_plans(problem.table, [(pricing_problem(manifest_candidate(p), problem, whole), p["assignment"],
                                     p["probe_ms"][0]) for p in plans])  # fmt: skip
    apply_fit(problem.table, fit)
    problem = problem.on(problem.table)
    for record in records:
        record["after_plan_fit_ms"] = price(record["plan"], problem)
    timed = [(plan["assignment"], segments) for plan in plans
             if plan["segments"] > 1 and (segments := timed_segments(plan))]  # fmt: skip
    return apply_group_prices(problem, fit_group_prices(problem, timed)) if timed else problem


def replay(run: Path) -> dict:
    """The first probe's fit on ``run``'s table and plans, as prices and segment rows; and each plan of more than one
    segment priced by the fit to the others alone (``left_out_ms``): what the table predicts for a plan it has not
    seen, as it predicts the plans a solver finds on the corrected table."""
    table, selection, plans = read_run(run)
    calibrated = copy.deepcopy(table)  # each fit changes its table in place
    start = run_problem(table, selection)
    prices = {plan["labels"][0]: {"plan": plan, "probe_ms": plan["probe_ms"][0], "price_ms": price(plan, start),
                                  "run_fitted_ms": (plan.get("fitted_ms") or [None])[0]} for plan in plans}  # fmt: skip
    problem = fitted_problem(table, selection, plans, list(prices.values()))
    for record in prices.values():
        plan = record.pop("plan")
        record["after_segment_fit_ms"] = price(plan, problem)
        if plan["segments"] > 1 and (segments := timed_segments(plan)):
            record["segments"] = segment_rows(plan, segments, problem)
            others = [other for other in plans if other is not plan]
            record["left_out_ms"] = price(plan, fitted_problem(copy.deepcopy(calibrated), selection, others))
    return {"run": str(run), "model": selection.get("model"), "plans": prices,
            "boundary_scales": problem.table.boundary_scales, "entry_ms": problem.table.segment_entry_ms}  # fmt: skip


def fit_summary(replays: list[dict]) -> dict:
    """How close the prices of every replayed plan come to its own probe: counts within 5, 10 and 15%, and the median
    relative error, after the fit to every plan (for the plans of more than one segment, those the segment fit
    prices, and for all) and for the mixed plans left out of it (out of sample)."""
    kinds = (("mixed", "after_segment_fit_ms"), ("all", "after_segment_fit_ms"), ("mixed, left out", "left_out_ms"))
    summary = {}
    for kind, key in kinds:
        errors = [abs(plan[key] / plan["probe_ms"] - 1) for result in replays for plan in result["plans"].values()
                  if plan["probe_ms"] > 0 and (kind == "all" or "segments" in plan) and key in plan]  # fmt: skip
        summary[kind] = {"plans": len(errors), **{f"within_{band}pct": sum(e <= band / 100 for e in errors)
                                                   for band in (5, 10, 15)},
                         "median_error": float(np.median(errors)) if errors else None}  # fmt: skip
    return summary


def print_replay(result: dict) -> None:
    print(f"{result['model']} ({result['run']})")
    for label, plan in result["plans"].items():
        print(f"  {label}: probe {plan['probe_ms']:.2f} ms; priced {plan['price_ms']:.2f} before the probe, "
              f"{plan['after_plan_fit_ms']:.2f} after the whole-plan fit, {plan['after_segment_fit_ms']:.2f} after "
              f"the segment fit (the run: {plan['run_fitted_ms'] or float('nan'):.2f})"
              + (f"; {plan['left_out_ms']:.2f} by the fit to the others" if "left_out_ms" in plan else ""))  # fmt: skip
        for row in plan.get("segments", []):
            print(f"      {row['library']:>9} {row['groups']:3d} groups: clock {row['clock_ms']:.2f} ms, groups "
                  f"{row['groups_ms']:.2f} + crossings {row['crossings_ms']:.2f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN",
                        help="a select run's folder: RUN/plan/manifest.json and RUN/tables/")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="write the replays and their summary as JSON here")
    args = parser.parse_args(argv)
    replays, skipped = [], []
    for run in args.runs:
        try:
            replays.append(replay(run))
        except (OSError, StopIteration, KeyError, ValueError) as error:
            skipped.append(str(run))
            print(f"error: {run}: not a select run with a saved table and manifest ({error!r})", file=sys.stderr)
    if not replays:
        return 2
    for result in replays:
        print_replay(result)
    summary = fit_summary(replays)
    for kind, counts in summary.items():
        print(f"{kind} plans: {counts['plans']}, priced within 5/10/15% of their probe: "
              f"{counts['within_5pct']}/{counts['within_10pct']}/{counts['within_15pct']}, median error "
              f"{counts['median_error'] or float('nan'):.1%}")  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(args.out, json.dumps({"summary": summary, "skipped": skipped, "runs": replays}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
