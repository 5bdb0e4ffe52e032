"""The thesis's evaluation (seed 004, chapter 5) on this CPU: ONNX Runtime's own optimiser, greedy, TASO,
the model-free PPO agent and the world-model agent on the same graphs, in one process.

    python benchmarks/graph_rewriting.py [--quick] [--models inception_v3,...] [--agents greedy,taso,ppo,world-model]
                                         [--steps 50] [--time-limit 300] [--train-episodes N]
                                         [--temperatures 0.5,1.0,1.5,2.0] [--sweep-model squeezenet1_1]

Per model and agent: the ONNX Runtime latency (ORT_ENABLE_ALL) of the original graph (= ONNX Runtime's
own optimiser only) and of the rewritten one, timed alternately; the cost-model estimate; the search or
training wall time; the rewrites. The RL rows also give training vs inference time, and the world-model
rows its step time against the real environment's and its prediction error. Then the seed's
temperature sweep for the world-model agent on one model. Writes ``graph_rewriting.json`` and ``.png``.
``--quick``: squeezenet1_1 with small budgets.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from rlcompile.graph.experiments import learning_table, plot, run_grid, table
from rlcompile.measure import DEFAULT, QUICK, environment

console = Console(width=170)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="inception_v3,resnet18,resnet50,squeezenet1_1,bert")
    parser.add_argument("--agents", default="greedy,taso,ppo,world-model")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--train-episodes", type=int, default=None, help="default: each agent's own")
    parser.add_argument("--temperatures", default="0.5,1.0,1.5,2.0")
    parser.add_argument("--sweep-model", default="squeezenet1_1")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("results/graph_rewriting"))
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.steps, args.time_limit, args.train_episodes = "squeezenet1_1", 5, 30.0, 4
        args.temperatures = "0.5,1.5"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    timing = QUICK if args.quick else DEFAULT
    options = {"max_steps": args.steps, "time_limit_s": args.time_limit, "train_episodes": args.train_episodes,
               "timing": timing}  # fmt: skip
    rows = run_grid([m for m in args.models.split(",") if m], [a for a in args.agents.split(",") if a], console,
                    **options)  # fmt: skip
    sweep = []
    for temperature in [float(t) for t in args.temperatures.split(",") if t]:
        sweep += run_grid([args.sweep_model], ["world-model"], console, temperature=temperature, **options)
    payload = {"arguments": {k: str(v) for k, v in vars(args).items()}, "environment": environment(),
               "runs": rows, "temperature_sweep": sweep}  # fmt: skip
    (args.out / "graph_rewriting.json").write_text(json.dumps(payload, indent=1))
    plot(rows, args.out / "graph_rewriting.png")
    console.print(
        table(rows, "Graph rewriting: ORT latency of each agent's graph vs the original (ORT's own optimiser)")
    )
    console.print(
        table(sweep, f"World-model agent on {args.sweep_model}, temperatures {args.temperatures} (rows in order)")
    )
    console.print(learning_table(rows + sweep, "RL agents: training vs inference, world model vs real environment"))
    console.print(f"wrote {args.out / 'graph_rewriting.json'} and {args.out / 'graph_rewriting.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
