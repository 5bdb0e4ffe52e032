"""Graph-level baselines over the zoo: greedy rewriting and TASO's backtracking search, side by side.

    python benchmarks/graph_baselines.py [--quick] [--models a,b] [--agents greedy,taso]
                                         [--steps 50] [--time-limit 60] [--out results/graph_baselines]

For every model and agent: the rewrites applied, the estimated cost (sum of per-operator ONNX Runtime
times) before and after, the search time, and the ONNX Runtime latency (ORT_ENABLE_ALL) of the
original and the optimised graph timed alternately in this process, with their ratio. Every output
graph is checked against the original on random inputs. Also how well the cost model predicts the
measured latency: rank correlation over the zoo, the ratio estimate/measured, and whether the
estimated change and the measured change point the same way.
Writes ``graph_baselines.json`` and ``graph_baselines.png``. ``--quick``: SqueezeNet and ResNet-18, 5 steps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from rlcompile.graph.experiments import cost_model_accuracy, plot, run_grid, table
from rlcompile.machine import environment
from rlcompile.measure import DEFAULT, QUICK
from rlcompile.models import ZOO

console = Console(width=170)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--agents", default="greedy,taso")
    parser.add_argument("--steps", type=int, default=50, help="graphs expanded per search")
    parser.add_argument("--time-limit", type=float, default=60.0, help="search seconds per model and agent")
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--cost", default="context", help="cost model the searches use (default context)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("results/graph_baselines"))
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.steps, args.time_limit = "squeezenet1_1,resnet18", 5, 30.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = run_grid([m for m in args.models.split(",") if m], [a for a in args.agents.split(",") if a], console,
                    max_steps=args.steps, time_limit_s=args.time_limit, alpha=args.alpha, cost=args.cost,
                    timing=QUICK if args.quick else DEFAULT)  # fmt: skip
    accuracy = cost_model_accuracy(rows)
    payload = {"arguments": {k: str(v) for k, v in vars(args).items()}, "environment": environment(),
               "runs": rows, "cost_model": accuracy}  # fmt: skip
    (args.out / "graph_baselines.json").write_text(json.dumps(payload, indent=1))
    plot(rows, args.out / "graph_baselines.png")
    console.print(table(rows, "Graph baselines: ONNX Runtime (ORT_ENABLE_ALL) latency, optimised vs original"))
    console.print(f"cost model over {accuracy['graphs']} graphs: {accuracy}")
    console.print(f"wrote {args.out / 'graph_baselines.json'} and {args.out / 'graph_baselines.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
