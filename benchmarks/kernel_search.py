"""Kernel search strategies side by side on the seeds' layers (RELEASE/Chameleon Table 2: L1-L8).

    python benchmarks/kernel_search.py [--quick] [--layers L1,L6] [--strategies random,sa,droplet,evolutionary]
                                       [--trials 64] [--batch-size 16] [--seeds 0] [--out results/kernel_search]

Every strategy gets the same measurement budget, batch size and seeds, in one process, one layer at a
time. Output: ``kernel_search.json`` (per layer, strategy and seed: best latency after every measurement
with the wall time spent so far, search and measurement seconds, failures) and ``kernel_search.png``
(best latency vs measurements and vs wall time). The table gives, per layer and strategy, the final best,
and the measurements and wall time needed to come within 5% of ``evolutionary``'s final best.
``--quick`` tunes L6 and L8 with 32 measurements each: a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import shutil
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlcompile.kernel import strategies
from rlcompile.kernel.measurer import Measurer
from rlcompile.kernel.tasks import SEED_LAYERS, seed_layer
from rlcompile.kernel.tuner import Tuner
from rlcompile.kernel.workdir import WorkDir
from rlcompile.measure import environment
from rlcompile.tvm_bridge import resolve_target

console = Console(width=160)
REFERENCE = "evolutionary"
WITHIN = 1.05


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default=",".join(SEED_LAYERS))
    parser.add_argument("--strategies", default="random,sa,droplet,evolutionary,rl,chameleon",
                        help="names; NAME+adaptive adds adaptive sampling (e.g. sa+adaptive)")  # fmt: skip
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seeds", default="0", help="comma-separated; results are per seed and averaged")
    parser.add_argument("--quick", action="store_true", help="L6 and L8, 32 measurements each")
    parser.add_argument("--out", type=Path, default=Path("results/kernel_search"))
    args = parser.parse_args(argv)
    if args.quick:
        args.layers, args.trials = "L6,L8", 32
    return args


def first_within(history: list[dict], threshold_ms: float) -> tuple[int | None, float | None]:
    """Measurements and wall seconds after which the best latency is within the threshold."""
    for point in history:
        if point["best_ms"] <= threshold_ms:
            return point["trial"], point["elapsed"]
    return None, None


def run_one(task, name: str, seed: int, args, measurer: Measurer) -> dict:
    work_dir = args.out / "work" / task.name / name.replace("+", "_") / f"seed{seed}"
    shutil.rmtree(work_dir, ignore_errors=True)
    started = time.perf_counter()
    strategy, options = strategies.parse_spec(name)
    make = functools.partial(strategies.create, strategy, seed=seed, **options)
    tuner = Tuner([task], make, WorkDir(work_dir, "llvm"), measurer,
                  trials=args.trials, batch_size=args.batch_size, seed=seed)  # fmt: skip
    state = tuner.run()[0]
    summary = state.summary()
    summary["wall_seconds"] = time.perf_counter() - started
    console.log(f"{task.name} {name} seed {seed}: best {summary['best_ms']} ms after {state.trials} measurements, "
                f"search {summary['search_seconds']:.1f} s, measure {summary['measure_seconds']:.1f} s")  # fmt: skip
    return summary


def compare_to_reference(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Per strategy: mean final best and the cost of reaching 5% of the reference's final best."""
    reference_runs = runs.get(REFERENCE) or next(iter(runs.values()))
    reference_best = statistics.mean(r["best_ms"] for r in reference_runs if r["best_ms"])
    rows = {}
    for name, seeded in runs.items():
        reached = [first_within(r["history"], WITHIN * reference_best) for r in seeded]
        hits = [(n, t) for n, t in reached if n is not None]
        bests = [r["best_ms"] for r in seeded if r["best_ms"]]
        rows[name] = {
            "best_ms": statistics.mean(bests) if bests else None,
            "gflops": statistics.mean(r["gflops"] for r in seeded),
            "search_seconds": statistics.mean(r["search_seconds"] for r in seeded),
            "wall_seconds": statistics.mean(r["elapsed_seconds"] for r in seeded),
            "reached": f"{len(hits)}/{len(seeded)}",
            "measurements_to_reference": statistics.mean(n for n, _ in hits) if hits else None,
            "seconds_to_reference": statistics.mean(t for _, t in hits) if hits else None,
            "failures": sum(sum(v for k, v in r["statuses"].items() if k != "ok") for r in seeded),
        }  # fmt: skip
    return {"reference_best_ms": reference_best, "strategies": rows}


def show(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = list(results)
    figure, axes = plt.subplots(len(layers), 2, figsize=(11, 3.2 * len(layers)), squeeze=False)
    for row, layer in enumerate(layers):
        for name, seeded in results[layer]["runs"].items():
            history = seeded[0]["history"]
            trials = [p["trial"] for p in history if math.isfinite(p["best_ms"])]
            best = [p["best_ms"] for p in history if math.isfinite(p["best_ms"])]
            elapsed = [p["elapsed"] for p in history if math.isfinite(p["best_ms"])]
            axes[row][0].plot(trials, best, label=name)
            axes[row][1].plot(elapsed, best, label=name)
        label = results[layer]["label"]
        axes[row][0].set_title(f"{layer}: {label}", fontsize=9)
        axes[row][0].set_xlabel("measurements")
        axes[row][1].set_xlabel("wall time (s): search + build + run")
        for column in (0, 1):
            axes[row][column].set_ylabel("best latency (ms)")
            axes[row][column].set_yscale("log")
        axes[row][0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    target = resolve_target("llvm")
    names = [n for n in args.strategies.split(",") if n]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    measurer = Measurer(target)
    results: dict[str, dict] = {}
    for layer in args.layers.split(","):
        task = seed_layer(layer, target)
        runs = {name: [run_one(task, name, seed, args, measurer) for seed in seeds] for name in names}
        results[layer] = {"label": task.label, "flops": task.flops, "runs": runs} | compare_to_reference(runs)
        payload = {"benchmark": "kernel_search", "args": {k: str(v) for k, v in vars(args).items()},
                   "environment": environment(), "layers": results}  # fmt: skip
        (args.out / "kernel_search.json").write_text(json.dumps(payload, indent=1))
    table = Table(title=f"Kernel search, {args.trials} measurements, batch {args.batch_size}, seeds {seeds}")
    for column in ("layer", "strategy", "best ms", "GFLOPS", "vs evolutionary", "reached 5%",
                   "measurements to 5%", "seconds to 5%", "search s", "total s", "failed"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("layer", "strategy") else "right")
    for layer, result in results.items():
        for name, row in result["strategies"].items():
            ratio = row["best_ms"] / result["reference_best_ms"] if row["best_ms"] else math.nan
            table.add_row(
                layer, name, show(row["best_ms"], ".4f"), show(row["gflops"], ".1f"), f"{ratio:.2f}x", row["reached"],
                show(row["measurements_to_reference"], ".0f"), show(row["seconds_to_reference"], ".0f"),
                show(row["search_seconds"], ".1f"), show(row["wall_seconds"], ".0f"), str(row["failures"]),
            )  # fmt: skip
    console.print(table)
    plot(results, args.out / "kernel_search.png")
    console.print(f"wrote {args.out / 'kernel_search.json'} and {args.out / 'kernel_search.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
