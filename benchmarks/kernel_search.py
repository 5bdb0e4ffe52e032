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
import json
import math
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlcompile.kernel.experiments import compare_to_reference, history_panels, run_layer, setup, show
from rlcompile.kernel.tasks import SEED_LAYERS, seed_layer
from rlcompile.machine import environment
from rlcompile.report.plots import tuning_curves

console = Console(width=160)
REFERENCE = "evolutionary"


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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names, seeds, measurer = setup(args.out, args.strategies, args.seeds)
    target = measurer.target
    results: dict[str, dict] = {}
    for layer in args.layers.split(","):
        task = seed_layer(layer, target)

        def log(message: str, layer: str = layer) -> None:
            console.log(f"{layer} {message}")

        runs = run_layer(task, names, seeds, args.trials, args.batch_size, args.out, measurer, log)
        results[layer] = {"label": task.label, "flops": task.flops, "runs": runs}
        results[layer] |= compare_to_reference(runs, REFERENCE)
        payload = {"benchmark": "kernel_search", "args": {k: str(v) for k, v in vars(args).items()},
                   "environment": environment(), "layers": results}  # fmt: skip
        (args.out / "kernel_search.json").write_text(json.dumps(payload, indent=1))
    reference = next(iter(results.values()))["reference"] if results else REFERENCE
    table = Table(title=f"Kernel search, {args.trials} measurements, batch {args.batch_size}, seeds {seeds}")
    for column in ("layer", "strategy", "best ms", "GFLOPS", f"vs {reference}", "reached 5%",
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
    tuning_curves(history_panels(results), args.out / "kernel_search.png")
    console.print(f"wrote {args.out / 'kernel_search.json'} and {args.out / 'kernel_search.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
