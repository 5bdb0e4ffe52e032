"""Running strategies side by side for the benchmarks: one fresh work directory per (strategy, seed),
the same tasks, budget, batch size and measurer, and the comparisons the seeds report."""

from __future__ import annotations

import functools
import json
import math
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from rlcompile.kernel import strategies
from rlcompile.kernel.measurer import Measurer
from rlcompile.kernel.pretrained import PretrainedModel
from rlcompile.kernel.tasks import Task
from rlcompile.kernel.transfer import WarmStart
from rlcompile.kernel.tuner import Tuner
from rlcompile.kernel.workdir import WorkDir, read_journal

WITHIN = 1.05


def setup(out: Path, specs: str, seeds: str, target: str = "llvm") -> tuple[list[str], list[int], Measurer]:
    """What every kernel benchmark starts with: the output folder, the strategy specs and seeds from their
    comma-separated flags, one measurer for the local CPU (kernels for ``target``, this CPU by default), and
    TVM's one-off costs already paid."""
    from rlcompile.tvm_bridge import load_tensor_intrinsics, resolve_target

    out.mkdir(parents=True, exist_ok=True)
    measurer = Measurer(resolve_target(target))
    load_tensor_intrinsics(measurer.target)  # paid before anything is timed, not by whichever strategy runs first
    return [s for s in specs.split(",") if s], [int(s) for s in seeds.split(",") if s], measurer


def run_strategy(tasks: Sequence[Task], spec: str, seed: int, trials: int, batch_size: int, work_dir: Path,
                 measurer: Measurer, log: Callable[[str], None] = print, scheduler: str = "round-robin",
                 warm_start: WarmStart | None = None, pretrained: PretrainedModel | None = None,
                 target: str = "llvm") -> dict:  # fmt: skip
    """Tune ``tasks`` from scratch with strategy ``spec`` (e.g. ``sa+adaptive``); return the summary.

    ``target``: the measurer's target as the user wrote it (the work directory records it).
    ``scheduler``: round-robin by default, so that every strategy gets the same budget per task and the
    comparison is between searches, not between allocations driven by what each search found. Cold unless a
    ``pretrained`` prior is given (the benchmarks compare searches from the same starting point).
    """
    shutil.rmtree(work_dir, ignore_errors=True)
    name, options = strategies.parse_spec(spec)
    started = time.perf_counter()
    make = functools.partial(strategies.create, name, seed=seed, **options)
    states = Tuner(tasks, make, WorkDir(work_dir, target), measurer, trials=trials, batch_size=batch_size,
                   seed=seed, scheduler=scheduler, warm_start=warm_start, pretrained=pretrained).run()  # fmt: skip
    summary = {
        "strategy": spec,
        "seed": seed,
        "scheduler": scheduler,
        "work_dir": str(work_dir),
        "wall_seconds": time.perf_counter() - started,
        "measurements": sum(state.trials for state in states),
        "search_seconds": sum(state.strategy.stats.search_seconds for state in states),
        "search_steps": sum(state.strategy.stats.steps for state in states),
        "failures": sum(state.failures for state in states),
        "steps_per_batch": [s for state in states for s in getattr(state.strategy, "steps_per_batch", [])],
        "samples_per_batch": [s for state in states for s in getattr(state.strategy, "samples_per_batch", [])],
        "tasks": [state.summary() for state in states],
    }
    log(f"{spec} seed {seed}: {summary['measurements']} measurements, {describe_best(summary['tasks'])}, "
        f"search {summary['search_seconds']:.1f} s, total {summary['wall_seconds']:.0f} s")  # fmt: skip
    return summary


def describe_best(tasks: list[dict]) -> str:
    """One task: its best latency; several (a model): the calls-weighted sum of the tuned tasks' bests, the
    kernels' share of an end-to-end estimate, and how many tasks have a valid schedule at all."""
    if len(tasks) == 1:
        return f"best {tasks[0]['best_ms'] or math.nan:.4f} ms"
    tuned = [task for task in tasks if task["best_ms"]]
    weighted = sum(task["weight"] * task["best_ms"] for task in tuned)
    return f"tuned kernels {weighted:.3f} ms weighted ({len(tuned)} of {len(tasks)} tasks tuned)"


def first_within(history: list[dict], threshold_ms: float) -> tuple[int | None, float | None]:
    """Measurements and wall seconds after which the best latency is within the threshold."""
    for point in history:
        if point["best_ms"] <= threshold_ms:
            return point["trial"], point["elapsed"]
    return None, None


def kernel_history(entries: Sequence[dict], weights: dict[str, float], started: float) -> list[dict]:
    """A model run's end-to-end kernel estimate as it went: after each measurement that changed it, the
    calls-weighted sum of every task's best so far (ms), the estimate MetaSchedule's task scheduler uses.

    ``entries``: the run's journal, oldest first (``task``, ``status``, ``seconds``, ``at``);
    ``weights``: calls per task (its workload key); ``started``: the run's start (epoch seconds). Points
    begin once every task that ends with a valid schedule has one, so every point sums the same tasks.
    """
    final = {e["task"] for e in entries if e["status"] == "ok" and e["task"] in weights}
    best: dict[str, float] = {}
    history: list[dict] = []
    for trial, entry in enumerate(entries, 1):
        name = entry["task"]
        if entry["status"] != "ok" or name not in weights or entry["seconds"] >= best.get(name, math.inf):
            continue
        best[name] = entry["seconds"]
        if best.keys() == final:
            estimate = 1e3 * sum(weights[task] * seconds for task, seconds in best.items())
            history.append({"trial": trial, "elapsed": round(entry["at"] - started, 1), "best_ms": estimate})
    return history


def work_dir_kernel_history(work_dir: Path, weights: dict[str, float]) -> list[dict] | None:
    """:func:`kernel_history` of a work directory (its start: when ``environment.json`` was recorded);
    None when the directory or its journal is gone."""
    path = Path(work_dir)
    if not (path / "measurements.jsonl").exists() or not (path / "environment.json").exists():
        return None
    recorded = json.loads((path / "environment.json").read_text())["recorded"]["recorded_at"]
    entries = list(read_journal(path / "measurements.jsonl"))
    return kernel_history(entries, weights, datetime.fromisoformat(recorded).timestamp())


def compare_to_reference(runs: dict[str, list[dict]], reference: str) -> dict:
    """Per strategy (single-task runs): mean final best, and the measurements and seconds needed to come
    within 5% of the reference strategy's mean final best (the first strategy when the reference did not run)."""

    def best(run: dict) -> float | None:
        return run["tasks"][0]["best_ms"]

    reference = reference if reference in runs else next(iter(runs))  # fall back to the first strategy
    reference_runs = runs[reference]
    reference_best = statistics.mean(b for r in reference_runs if (b := best(r)))
    rows = {}
    for name, seeded in runs.items():
        hits = [hit for r in seeded if (hit := first_within(r["tasks"][0]["history"], WITHIN * reference_best))[0]]
        bests = [b for r in seeded if (b := best(r))]
        rows[name] = {
            "best_ms": statistics.mean(bests) if bests else None,
            "gflops": statistics.mean(r["tasks"][0]["gflops"] for r in seeded),
            "search_seconds": statistics.mean(r["search_seconds"] for r in seeded),
            "search_steps": statistics.mean(r["search_steps"] for r in seeded),
            "wall_seconds": statistics.mean(r["tasks"][0]["elapsed_seconds"] for r in seeded),
            "measurements": statistics.mean(r["measurements"] for r in seeded),
            "reached": f"{len(hits)}/{len(seeded)}",
            "measurements_to_reference": statistics.mean(n for n, _ in hits) if hits else None,
            "seconds_to_reference": statistics.mean(t for _, t in hits) if hits else None,
            "failures": sum(r["failures"] for r in seeded),
        }
    return {"reference": reference, "reference_best_ms": reference_best, "strategies": rows}


def spread(values: Sequence[float]) -> dict | None:
    """Median and range over seeds (None when there is nothing to summarise)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def show_spread(value: dict | None, spec: str = ".2f") -> str:
    """``median (min-max)`` of a :func:`spread`, the one value when there is one, ``-`` when none."""
    if value is None:
        return "-"
    if value["n"] == 1:
        return format(value["median"], spec)
    return f"{value['median']:{spec}} ({value['min']:{spec}}-{value['max']:{spec}})"


def final_ms(run: dict) -> float | None:
    """The best latency a single-task run ended at."""
    return run["tasks"][0]["best_ms"]


def per_iteration(run: dict, key: str) -> float:
    """``search_steps`` or ``measurements`` of a run per search iteration (batch); a model run's
    iterations are every task's batches (``batches_per_task``, saved in place of the tasks)."""
    batches = sum(run["batches_per_task"]) if "batches_per_task" in run else run["tasks"][0]["batches"]
    return run[key] / max(batches, 1)


def reach_ratio(runs: dict[str, list[dict]], baseline: str, subject: str, goal_from: str) -> dict:
    """How many times fewer measurements (and less wall time) ``subject`` needs than ``baseline`` to come
    within 5% of the latency ``goal_from`` ended at, seed by seed (runs pair by seed). A seed where either
    never comes within 5% gives no ratio but counts in ``reached`` (``k/n``: pairs where both did)."""
    by_seed = {name: {run["seed"]: run for run in runs.get(name, [])} for name in (baseline, subject, goal_from)}
    measurement_ratios, time_ratios, pairs = [], [], 0
    for seed, goal_run in by_seed[goal_from].items():
        if seed not in by_seed[baseline] or seed not in by_seed[subject] or final_ms(goal_run) is None:
            continue
        pairs += 1
        goal = final_ms(goal_run) * WITHIN
        base = first_within(by_seed[baseline][seed]["tasks"][0]["history"], goal)
        ours = first_within(by_seed[subject][seed]["tasks"][0]["history"], goal)
        if base[0] and ours[0]:
            measurement_ratios.append(base[0] / ours[0])
            time_ratios.append(base[1] / ours[1])
    return ratios(measurement_ratios, time_ratios, pairs)


def ratios(measurement_ratios: list[float], time_ratios: list[float], pairs: int) -> dict:
    """A claim's per-seed ratios, their spreads, and in how many of ``pairs`` seed pairs they exist."""
    return {"measurement_ratios": measurement_ratios, "time_ratios": time_ratios, "pairs": pairs,
            "measurement_ratio": spread(measurement_ratios), "time_ratio": spread(time_ratios),
            "reached": f"{len(measurement_ratios)}/{pairs}"}  # fmt: skip


#: The seeds' claims as (label, baseline, subject, whose final latency is the goal); ``steps`` compares
#: search steps per iteration (Figure 5) instead of the cost of reaching a latency.
SEED_CLAIMS: tuple[tuple[str, str, str, str], ...] = (
    ("search steps per iteration, sa / rl (seed: 2.88x)", "sa", "rl", "steps"),
    ("search steps per iteration, sa / chameleon", "sa", "chameleon", "steps"),
    ("adaptive sampling: sa / sa+adaptive to reach sa's final (seed: 1.98x)", "sa", "sa+adaptive", "sa"),
    ("adaptive sampling: rl / chameleon to reach rl's final (seed: 2.33x)", "rl", "chameleon", "rl"),
    ("chameleon vs sa (AutoTVM) to reach sa's final (seed: 4.45x less time)", "sa", "chameleon", "sa"),
    ("chameleon vs evolutionary to reach evolutionary's final", "evolutionary", "chameleon", "evolutionary"),
)


def seed_claims(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Every claim of :data:`SEED_CLAIMS` that the strategies in ``runs`` can test, on one layer."""
    claims = {}
    for label, baseline, subject, goal in SEED_CLAIMS:
        if baseline not in runs or subject not in runs:
            continue
        if goal == "steps":
            subject_by_seed = {run["seed"]: run for run in runs[subject]}
            steps = [per_iteration(run, "search_steps") / per_iteration(subject_by_seed[run["seed"]], "search_steps")
                     for run in runs[baseline] if run["seed"] in subject_by_seed]  # fmt: skip
            claims[label] = ratios(steps, [], len(steps))
        elif goal in runs:
            claims[label] = reach_ratio(runs, baseline, subject, goal)
    return claims


def pooled_claims(layers: dict[str, dict]) -> dict[str, dict]:
    """Each claim over every layer and seed at once: the seeds' headline numbers are such pooled figures."""
    pooled: dict[str, dict] = {}
    for result in layers.values():
        for label, claim in seed_claims(result["runs"]).items():
            into = pooled.setdefault(label, {"measurement_ratios": [], "time_ratios": [], "pairs": 0})
            into["measurement_ratios"] += claim["measurement_ratios"]
            into["time_ratios"] += claim["time_ratios"]
            into["pairs"] += claim["pairs"]
    return {label: ratios(p["measurement_ratios"], p["time_ratios"], p["pairs"]) for label, p in pooled.items()}


def strategy_row(runs: dict[str, list[dict]], strategy: str, goal_from: str = "evolutionary") -> dict:
    """One strategy's line of the layer table: final latency, the measurements and seconds to come within 5%
    of ``goal_from``'s final (seed by seed), search steps and measurements per iteration, wall time."""
    goals = {run["seed"]: final_ms(run) for run in runs.get(goal_from, []) if final_ms(run)}
    hits = [first_within(run["tasks"][0]["history"], goals[run["seed"]] * WITHIN)
            for run in runs[strategy] if run["seed"] in goals]  # fmt: skip
    searched = strategy != "evolutionary"  # its generations are not comparable search steps
    return {
        "best_ms": spread([final_ms(run) for run in runs[strategy]]),
        "measurements_to_goal": spread([n for n, _ in hits]),
        "seconds_to_goal": spread([t for _, t in hits]),
        "reached": f"{sum(n is not None for n, _ in hits)}/{len(hits)}",
        "steps_per_iteration": spread([per_iteration(r, "search_steps") for r in runs[strategy]]) if searched else None,
        "measurements_per_iteration": spread([per_iteration(r, "measurements") for r in runs[strategy]]),
        "wall_seconds": spread([run["wall_seconds"] for run in runs[strategy]]),
    }


def show(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def run_layer(task: Task, specs: Sequence[str], seeds: Sequence[int], trials: int, batch_size: int, out: Path,
              measurer: Measurer, log: Callable[[str], None] = print) -> dict[str, list[dict]]:  # fmt: skip
    """Every strategy on one task, each seed in its own fresh work directory under ``out/work/TASK``."""
    return {
        spec: [run_strategy([task], spec, seed, trials, batch_size,
                            out / "work" / task.name / spec.replace("+", "_") / f"seed{seed}", measurer, log)
               for seed in seeds]
        for spec in specs
    }  # fmt: skip


def history_panels(layers: dict[str, dict]) -> dict[str, dict[str, list[dict]]]:
    """Plot panels (one per layer) of the first seed's best-latency history of every strategy."""
    return {
        f"{layer}: {result['label']}": {spec: runs[0]["tasks"][0]["history"] for spec, runs in result["runs"].items()}
        for layer, result in layers.items()
    }
