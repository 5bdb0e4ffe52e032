"""The first refining probe's fit, replayed from a ``select`` run: each timed segment's clock against its price.

    python benchmarks/segment_fit.py RUN [--out results/segment_fit/NAME.json]

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
label). Measured at stop 67 on the 2-core Emerald Rapids VM: ocr-det (``select-predictions/67c``), whose exact plan
(OpenVINO for 72 groups, ORT for the two ConvTransposes) had missed its prediction by 0.78-0.84x in three tallies:
replayed, its price 10.91 ms for a probe of 9.61 (the run: 11.01), the Q-learning plan of 16 segments 14.79 for
18.23 (the run: 14.29); after the fit the long OpenVINO segment's groups are priced 9.53 ms for a clock of 8.52 (at
the table's speed), while three of the Q-learning plan's OpenVINO segments (6, 18 and 22 groups) ran 1.0-1.1 ms over
their groups and crossings: one price per kind and library cannot serve both (``results/segment_fit/ocr-det-67c``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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
from rlcompile.layer.selection import Candidate, plan_price, pricing_problem
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


def replay(run: Path) -> dict:
    """The first probe's fit on ``run``'s table and plans, as prices and segment rows."""
    table = LookupTable.from_json(json.loads(next((run / "tables").glob("*.json")).read_text()))
    selection = json.loads((run / "plan" / "manifest.json").read_text())["selection"]
    problem = SelectionProblem(table).without(set(selection.get("left_out") or {}))
    plans = [plan for plan in selection["candidates"]
             if plan.get("probe_ms") and "(refined" not in plan["labels"][0]]  # fmt: skip
    record = {plan["labels"][0]: {"probe_ms": plan["probe_ms"][0], "price_ms": price(plan, problem),
                                  "run_fitted_ms": (plan.get("fitted_ms") or [None])[0]} for plan in plans}  # fmt: skip
    whole = SelectionProblem(whole_model_prices(problem.table))
    fit = fit_plans(problem.table, [(pricing_problem(manifest_candidate(p), problem, whole), p["assignment"],
                                     p["probe_ms"][0]) for p in plans])  # fmt: skip
    apply_fit(problem.table, fit)
    problem = problem.on(problem.table)
    timed = [(plan, segments) for plan in plans if plan["segments"] > 1 and (segments := timed_segments(plan))]
    for plan in plans:
        record[plan["labels"][0]]["after_plan_fit_ms"] = price(plan, problem)
    problem = apply_group_prices(problem, fit_group_prices(problem, [(p["assignment"], s) for p, s in timed]))
    for plan in plans:
        record[plan["labels"][0]]["after_segment_fit_ms"] = price(plan, problem)
    for plan, segments in timed:
        record[plan["labels"][0]]["segments"] = segment_rows(plan, segments, problem)
    return {"run": str(run), "model": selection.get("model"), "plans": record,
            "boundary_scales": problem.table.boundary_scales, "entry_ms": problem.table.segment_entry_ms}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a select run's folder: RUN/plan/manifest.json and RUN/tables/")
    parser.add_argument("--out", type=Path, default=None, help="write the replay as JSON here")
    args = parser.parse_args(argv)
    try:
        result = replay(args.run)
    except (OSError, StopIteration, KeyError, ValueError) as error:
        print(f"error: {args.run}: not a select run with a saved table and manifest ({error!r})", file=sys.stderr)
        return 2
    for label, plan in result["plans"].items():
        print(f"{label}: probe {plan['probe_ms']:.2f} ms; priced {plan['price_ms']:.2f} before the probe, "
              f"{plan['after_plan_fit_ms']:.2f} after the whole-plan fit, {plan['after_segment_fit_ms']:.2f} after "
              f"the segment fit (the run: {plan['run_fitted_ms'] or float('nan'):.2f})")  # fmt: skip
        for row in plan.get("segments", []):
            print(f"    {row['library']:>9} {row['groups']:3d} groups: clock {row['clock_ms']:.2f} ms, groups "
                  f"{row['groups_ms']:.2f} + crossings {row['crossings_ms']:.2f}")  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(args.out, json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
