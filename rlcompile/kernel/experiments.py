"""Running strategies side by side for the benchmarks: one fresh work directory per (strategy, seed),
the same tasks, budget, batch size and measurer, and the comparisons the seeds report."""

from __future__ import annotations

import functools
import math
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rlcompile.kernel import strategies
from rlcompile.kernel.measurer import Measurer
from rlcompile.kernel.tasks import Task
from rlcompile.kernel.transfer import WarmStart
from rlcompile.kernel.tuner import Tuner
from rlcompile.kernel.workdir import WorkDir

WITHIN = 1.05


def setup(out: Path, specs: str, seeds: str) -> tuple[list[str], list[int], Measurer]:
    """What every kernel benchmark starts with: the output folder, the strategy specs and seeds from their
    comma-separated flags, one measurer for the local CPU, and TVM's one-off costs already paid."""
    from rlcompile.tvm_bridge import resolve_target

    out.mkdir(parents=True, exist_ok=True)
    measurer = Measurer(resolve_target("llvm"))
    warm_up()
    return [s for s in specs.split(",") if s], [int(s) for s in seeds.split(",") if s], measurer


def warm_up() -> None:
    """Pay TVM's one-off costs (MetaSchedule imports its tensor intrinsics, ~30 s) before anything is timed,
    so they are not charged to whichever strategy runs first."""
    import tvm.s_tir.tensor_intrin  # noqa: F401


def run_strategy(tasks: Sequence[Task], spec: str, seed: int, trials: int, batch_size: int, work_dir: Path,
                 measurer: Measurer, log: Callable[[str], None] = print, scheduler: str = "round-robin",
                 warm_start: WarmStart | None = None) -> dict:  # fmt: skip
    """Tune ``tasks`` from scratch with strategy ``spec`` (e.g. ``sa+adaptive``); return the summary.

    ``scheduler``: round-robin by default, so that every strategy gets the same budget per task and the
    comparison is between searches, not between allocations driven by what each search found.
    """
    shutil.rmtree(work_dir, ignore_errors=True)
    name, options = strategies.parse_spec(spec)
    started = time.perf_counter()
    make = functools.partial(strategies.create, name, seed=seed, **options)
    states = Tuner(tasks, make, WorkDir(work_dir, "llvm"), measurer, trials=trials, batch_size=batch_size,
                   seed=seed, scheduler=scheduler, warm_start=warm_start).run()  # fmt: skip
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
    best = [task["best_ms"] for task in summary["tasks"] if task["best_ms"]]
    log(f"{spec} seed {seed}: {summary['measurements']} measurements, best {min(best, default=math.nan):.4f} ms, "
        f"search {summary['search_seconds']:.1f} s, total {summary['wall_seconds']:.0f} s")  # fmt: skip
    return summary


def first_within(history: list[dict], threshold_ms: float) -> tuple[int | None, float | None]:
    """Measurements and wall seconds after which the best latency is within the threshold."""
    for point in history:
        if point["best_ms"] <= threshold_ms:
            return point["trial"], point["elapsed"]
    return None, None


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
