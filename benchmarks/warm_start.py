"""Transfer across tasks: does a cost model warm-started on other layers need fewer measurements?

    python benchmarks/warm_start.py [--sources L1,L2,L3,L4,L5] [--targets L6,L7,L8] [--strategy sa]
                                    [--trials 64] [--source-trials 64] [--seeds 0,1] [--out results/warm_start]

The source layers are tuned once (into ``OUT/work/source/LAYER``, resumable); each target layer is then
tuned from scratch twice per seed, cold and warm-started from every source directory (``--warm-start``),
alternating which goes first. Seeds already in the JSON for the same sources and budget are kept, so
more seeds can be added later (``--seeds 0,1,2,3``). The targets are layers the sources never saw (by
default ResNet-18's convolutions, warm-started from AlexNet's and VGG-16's). Reported per target: the
best after the first ``--batch-size`` measurements (one batch; about two where adaptive sampling makes
batches smaller) and at the end, and the measurements each needs to come within 5% of the
cold run's final best. A target whose design space matches no source's structure gets no prior (0
samples): its "warm" run is a second cold run, i.e. the noise of identical runs.
Output: ``warm_start.json`` (rewritten after every run).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlcompile import atomic
from rlcompile.kernel import strategies
from rlcompile.kernel.experiments import WITHIN, first_within, run_strategy, setup, show
from rlcompile.kernel.tasks import seed_layer
from rlcompile.kernel.transfer import WarmStart
from rlcompile.kernel.tuner import Tuner
from rlcompile.kernel.workdir import WorkDir
from rlcompile.machine import environment

console = Console(width=150)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", default="L1,L2,L3,L4,L5")
    parser.add_argument("--targets", default="L6,L7,L8")
    parser.add_argument("--strategy", default="sa")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--source-trials", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--out", type=Path, default=Path("results/warm_start"))
    return parser.parse_args(argv)


def tune_sources(args, measurer, target) -> list[Path]:
    directories = []
    for layer in args.sources.split(","):
        directory = args.out / "work" / "source" / layer
        console.log(f"source {layer}: {args.source_trials} measurements with {args.strategy} (resumes)")
        make = functools.partial(strategies.create, args.strategy, seed=0)
        Tuner([seed_layer(layer, target)], make, WorkDir(directory, "llvm"), measurer, trials=args.source_trials,
              batch_size=args.batch_size).run()  # fmt: skip
        directories.append(directory)
    return directories


def summarise(cold: dict, warm: dict, batch_size: int) -> dict:
    cold_task, warm_task = cold["tasks"][0], warm["tasks"][0]
    goal = cold_task["best_ms"] * WITHIN
    return {
        "cold_first_batch_ms": cold_task["history"][batch_size - 1]["best_ms"],
        "warm_first_batch_ms": warm_task["history"][batch_size - 1]["best_ms"],
        "cold_best_ms": cold_task["best_ms"], "warm_best_ms": warm_task["best_ms"],
        "cold_to_goal": first_within(cold_task["history"], goal)[0],
        "warm_to_goal": first_within(warm_task["history"], goal)[0],
        "warm_start_samples": warm_task["warm_start_samples"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _, seeds, measurer = setup(args.out, args.strategy, args.seeds)
    target = measurer.target
    warm = WarmStart.load(tune_sources(args, measurer, target), target, "llvm")
    console.log(f"warm start: {warm.samples} measurements from {args.sources}")
    path = args.out / "warm_start.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    experiment = {key: str(getattr(args, key)) for key in ("sources", "strategy", "trials", "source_trials")}
    same = all(saved.get("args", {}).get(key) == value for key, value in experiment.items())
    results: dict = saved.get("layers", {}) if same else {}  # runs of the same experiment are kept, not repeated
    for layer in args.targets.split(","):
        task = seed_layer(layer, target)
        done = {row["seed"] for row in results.get(layer, {}).get("seeds", [])}
        for seed in [s for s in seeds if s not in done]:
            order = ("cold", "warm") if seed % 2 == 0 else ("warm", "cold")
            runs = {}
            for kind in order:
                work_dir = args.out / "work" / "target" / layer / f"{kind}-seed{seed}"
                runs[kind] = run_strategy([task], args.strategy, seed, args.trials, args.batch_size, work_dir, measurer,
                                          lambda m, layer=layer, kind=kind: console.log(f"{layer} {kind} {m}"),
                                          warm_start=warm if kind == "warm" else None)  # fmt: skip
            results.setdefault(layer, {"label": task.label, "seeds": []})["seeds"].append(
                {"seed": seed, **summarise(runs["cold"], runs["warm"], args.batch_size), "runs": runs})
            payload = {"benchmark": "warm_start", "args": {k: str(v) for k, v in vars(args).items()},
                       "environment": environment(), "layers": results}  # fmt: skip
            atomic.write_json(path, payload, indent=1)
    table = Table(title=f"{args.strategy}, {args.trials} measurements, warm-started from {args.sources} "
                  f"({warm.samples} measurements); median over seeds {seeds}")  # fmt: skip
    for column in ("layer", "prior samples", "first batch cold ms", "first batch warm ms", "final cold ms",
                   "final warm ms", "to cold's final (cold)", "to cold's final (warm)"):  # fmt: skip
        table.add_column(column, justify="left" if column == "layer" else "right")
    for layer, result in results.items():
        rows = result["seeds"]

        def median(key: str, rows=rows) -> float | None:
            values = [row[key] for row in rows if row[key] is not None]
            return statistics.median(values) if values else None

        reached = sum(1 for row in rows if row["warm_to_goal"] is not None)
        table.add_row(layer, str(rows[0]["warm_start_samples"]), show(median("cold_first_batch_ms"), ".4f"),
                      show(median("warm_first_batch_ms"), ".4f"),
                      show(median("cold_best_ms"), ".4f"), show(median("warm_best_ms"), ".4f"),
                      show(median("cold_to_goal"), ".0f"),
                      f"{show(median('warm_to_goal'), '.0f')} ({reached}/{len(rows)} reached)")  # fmt: skip
    console.print(table)
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
