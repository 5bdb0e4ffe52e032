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
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from rlcompile.graph.api import GraphRequest, optimize_graph
from rlcompile.measure import DEFAULT, QUICK, environment
from rlcompile.models import ZOO, load_model

console = Console(width=170)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--agents", default="greedy,taso")
    parser.add_argument("--steps", type=int, default=50, help="graphs expanded per search")
    parser.add_argument("--time-limit", type=float, default=60.0, help="search seconds per model and agent")
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("results/graph_baselines"))
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.steps, args.time_limit = "squeezenet1_1,resnet18", 5, 30.0
    return args


def ranks(values: list[float]) -> np.ndarray:
    return np.argsort(np.argsort(values)).astype(float)


def cost_model_accuracy(rows: list[dict]) -> dict:
    """How the per-operator sum relates to the measured latency, over every graph timed."""
    estimated = [row["original_cost_ms"] for row in rows] + [row["search"]["final_cost_ms"] for row in rows]
    measured = [row["ort_original_ms"] for row in rows] + [row["ort_optimized_ms"] for row in rows]
    ratio = [e / m for e, m in zip(estimated, measured, strict=True)]
    same_direction = [
        (row["search"]["final_cost_ms"] < row["search"]["initial_cost_ms"])
        == (row["ratio_optimized_over_original"] < 1)
        for row in rows
        if row["search"]["rewrites"]
    ]
    return {
        "graphs": len(estimated),
        "spearman": float(np.corrcoef(ranks(estimated), ranks(measured))[0, 1]) if len(estimated) > 2 else None,
        "pearson_log": float(np.corrcoef(np.log(estimated), np.log(measured))[0, 1]) if len(estimated) > 2 else None,
        "estimate_over_measured_median": statistics.median(ratio),
        "estimate_over_measured_range": [min(ratio), max(ratio)],
        "direction_agrees": f"{sum(same_direction)}/{len(same_direction)}",
    }


def run_all(args: argparse.Namespace) -> list[dict]:
    rows = []
    timing = QUICK if args.quick else DEFAULT
    for model_name in [name for name in args.models.split(",") if name]:
        model = load_model(model_name)
        for agent in [name for name in args.agents.split(",") if name]:
            request = GraphRequest(agent=agent, max_steps=args.steps, time_limit_s=args.time_limit, alpha=args.alpha,
                                   timing=timing)  # fmt: skip
            prefix = f"{model_name} {agent}"
            run = optimize_graph(
                model, request, progress=lambda message, prefix=prefix: console.log(f"{prefix}: {message}")
            )
            row = run.to_dict() | {
                "rules_applied": dict(Counter(r["rule"] for r in run.to_dict()["search"]["rewrites"]))
            }
            rows.append(row)
            search = row["search"]
            console.log(
                f"{prefix}: est {search['initial_cost_ms']:.2f} -> {search['final_cost_ms']:.2f} ms, "
                f"ORT {row['ort_original_ms']:.2f} -> {row['ort_optimized_ms']:.2f} ms "
                f"({row['ratio_optimized_over_original']:.3f}x), search {search['search_seconds']:.1f} s"
            )  # fmt: skip
    return rows


def table(rows: list[dict]) -> Table:
    result = Table(
        title="Graph baselines: ONNX Runtime (ORT_ENABLE_ALL) latency of the optimised graph vs the original"
    )
    columns = ("model", "agent", "rewrites", "est. before ms", "est. after ms", "ORT original ms", "ORT optimised ms",
               "optimised/original", "search s", "steps", "graphs", "max rel err", "rules applied")  # fmt: skip
    for column in columns:
        result.add_column(column, justify="left" if column in ("model", "agent", "rules applied") else "right")
    for row in rows:
        search = row["search"]
        result.add_row(
            row["model"], row["agent"], str(row["kept_rewrites"]), f"{search['initial_cost_ms']:.2f}",
            f"{search['final_cost_ms']:.2f}", f"{row['ort_original_ms']:.2f}", f"{row['ort_optimized_ms']:.2f}",
            f"{row['ratio_optimized_over_original']:.3f}", f"{search['search_seconds']:.1f}", str(search["steps"]),
            str(search["graphs_evaluated"]), f"{row['agreement']['max_rel']:.1e}",
            ", ".join(f"{rule} x{count}" for rule, count in row["rules_applied"].items()),
        )  # fmt: skip
    return result


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = sorted({row["agent"] for row in rows})
    models = list(dict.fromkeys(row["model"] for row in rows))
    figure, (bars, scatter) = plt.subplots(1, 2, figsize=(14, 4.8))
    width = 0.8 / len(agents)
    for index, agent in enumerate(agents):
        ratios = [next(r["ratio_optimized_over_original"] for r in rows if r["model"] == m and r["agent"] == agent)
                  for m in models]  # fmt: skip
        bars.bar(np.arange(len(models)) + index * width, ratios, width, label=agent)
    bars.axhline(1.0, color="black", linewidth=0.8)
    bars.set_xticks(np.arange(len(models)) + width * (len(agents) - 1) / 2, models, rotation=30, ha="right")
    bars.set_ylabel("ORT latency, optimised / original (lower is better)")
    bars.legend()
    for row in rows:
        scatter.scatter(row["ort_original_ms"], row["original_cost_ms"], color="tab:blue", s=14)
        scatter.scatter(row["ort_optimized_ms"], row["search"]["final_cost_ms"], color="tab:orange", s=14)
    limits = [min(r["ort_original_ms"] for r in rows) / 2, max(r["ort_original_ms"] for r in rows) * 2]
    scatter.plot(limits, limits, color="black", linewidth=0.8)
    scatter.set_xscale("log")
    scatter.set_yscale("log")
    scatter.set_xlabel("measured ORT latency (ms)")
    scatter.set_ylabel("sum of per-operator times (ms)")
    scatter.set_title("cost model: original (blue) and optimised (orange) graphs")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = run_all(args)
    accuracy = cost_model_accuracy(rows)
    payload = {"arguments": {k: str(v) for k, v in vars(args).items()}, "environment": environment(),
               "runs": rows, "cost_model": accuracy}  # fmt: skip
    (args.out / "graph_baselines.json").write_text(json.dumps(payload, indent=1))
    plot(rows, args.out / "graph_baselines.png")
    console.print(table(rows))
    console.print(f"cost model over {accuracy['graphs']} graphs: {accuracy}")
    console.print(f"wrote {args.out / 'graph_baselines.json'} and {args.out / 'graph_baselines.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
