"""The thesis's evaluation (seed 004, chapter 5) on this CPU: ONNX Runtime's own optimiser, greedy, TASO,
the model-free PPO agent and the world-model agent on the same graphs, in one process.

    python benchmarks/graph_rewriting.py [--quick] [--models inception_v3,...] [--agents greedy,taso,ppo,world-model]
                                         [--steps 50] [--time-limit 300] [--train-episodes N]
                                         [--temperatures 0.5,1.0,1.5,2.0] [--sweep-model squeezenet1_1]
                                         [--parts grid,costs] [--cost-models a,b] [--costs sum,fused,region,context]

Per model and agent: the ONNX Runtime latency (ORT_ENABLE_ALL) of the original graph (= ONNX Runtime's
own optimiser only) and of the rewritten one, timed alternately; the cost-model estimate; the search or
training wall time; the rewrites. The RL rows also give training vs inference time, and the world-model
rows its step time against the real environment's and its prediction error. Then the seed's
temperature sweep for the world-model agent on one model. Writes ``graph_rewriting.json`` and ``.png``.

The cost-model study (``--parts costs``, :func:`rlcompile.graph.experiments.cost_study`): per model,
greedy and TASO search with each cost model (``--costs``); the graphs along their paths, the start
graph and a twin session of it are timed alternately in ORT_ENABLE_ALL; each cost model is scored by
its direction agreement with the measured change (beyond the twin's noise), its rank correlation, its
time per evaluated graph, and what its searches' answers measured. Models run in their own entries of
``cost_study.json`` (saved after each; done models are skipped on a re-run).
The transfer study (``--parts transfer``): for each held-out model, one policy (``--transfer-agent``
ppo or world-model) trained on the other ``--transfer-models`` for ``--train-seconds`` (``rlcompile
graph-train``; kept under ``policies/`` and reused), applied to the held-out model in one greedy
rollout, against TASO searching that model itself; rows in ``transfer.json`` (world model:
``transfer-world-model.json``), saved after each.
``--quick``: squeezenet1_1 with small budgets.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlcompile.graph.experiments import cost_study, learning_table, plot, run_grid, table, transfer_study
from rlcompile.machine import environment
from rlcompile.measure import DEFAULT, QUICK

console = Console(width=170)
#: zoo CNNs and a transformer, and two models this project did not produce (rlcompile.models.packaged)
COST_STUDY_MODELS = "squeezenet1_1,resnet18,googlenet,inception_v3,bert_tiny,ocr-det,ocr-rec"
TRANSFER_MODELS = "squeezenet1_1,resnet18,googlenet,inception_v3,bert_tiny,ocr-det,ocr-rec"


def run_transfer_study(args: argparse.Namespace, timing) -> dict:
    """Leave-one-model-out rows, saved after each; held-out models already in the file are skipped."""
    path = args.out / transfer_file(args.transfer_agent)
    saved = json.loads(path.read_text()) if path.exists() else {"environment": environment(), "rows": {}}
    models = [m for m in args.transfer_models.split(",") if m]
    for name in [m for m in (args.held_out or args.transfer_models).split(",") if m]:
        if name in saved["rows"]:
            continue
        saved["rows"][name] = transfer_study(models, name, args.out, args.train_seconds, args.transfer_cost,
                                             args.steps, args.time_limit, timing, console=console,
                                             agent=args.transfer_agent)  # fmt: skip
        path.write_text(json.dumps(saved, indent=1))
    return saved


def transfer_file(agent: str) -> str:
    """PPO's rows in ``transfer.json``, another agent's in ``transfer-AGENT.json``."""
    return "transfer.json" if agent == "ppo" else f"transfer-{agent}.json"


def transfer_table(saved: dict, agent: str) -> Table:
    """One row per held-out model: the transferred policy's one rollout against TASO's search on that model."""
    result = Table(title=f"Held-out transfer: {agent} trained on the other models, one greedy rollout on this one, "
                         "vs TASO searching it; ratios = ORT_ENABLE_ALL latency / original, alternating")  # fmt: skip
    for column in ("held out", "noise", "rewrites", "est.", "measured", "returned", "inference s",
                   "TASO rewrites", "TASO est.", "TASO measured", "TASO returned", "TASO search s",
                   "trained s"):  # fmt: skip
        result.add_column(column, justify="left" if column == "held out" else "right")
    for name, row in saved["rows"].items():
        policy, taso = row["policy"], row["taso"]
        trained = row["training"].get("train_seconds")
        result.add_row(name, f"{100 * row['noise']:.1f}%", str(policy["rewrites"]), f"{policy['estimated_ratio']:.3f}",
                       f"{policy['measured_ratio']:.3f}", f"{policy['returned_ratio']:.3f}",
                       f"{policy['inference_seconds']:.2f}", str(taso["rewrites"]), f"{taso['estimated_ratio']:.3f}",
                       f"{taso['measured_ratio']:.3f}", f"{taso['returned_ratio']:.3f}", f"{taso['seconds']:.1f}",
                       "-" if trained is None else f"{trained:.0f}")  # fmt: skip
    return result


def run_cost_study(args: argparse.Namespace, timing) -> dict:
    """The cost-model study per model, saved after each; models already in the file are skipped."""
    path = args.out / "cost_study.json"
    saved = json.loads(path.read_text()) if path.exists() else {"environment": environment(), "models": {}}
    for name in [m for m in args.cost_models.split(",") if m]:
        if name in saved["models"]:
            continue
        saved["models"][name] = cost_study(name, args.costs.split(","), max_steps=min(args.steps, 20),
                                           time_limit_s=min(args.time_limit, 120.0), timing=timing,
                                           console=console)  # fmt: skip
        path.write_text(json.dumps(saved, indent=1))
    return saved


def cost_table(study: dict, costs: list[str]) -> Table:
    """Per model and cost model: direction agreement, rank correlation, speed, what its searches' answers measured."""
    result = Table(title="Cost models against ORT_ENABLE_ALL within each model (graphs the searches visit); "
                         "agree = same direction as the measured change, over changes beyond the noise")  # fmt: skip
    for column in ("model", "noise", "graphs", *(f"{c}: agree / rho / ms per eval / answers +,-,=" for c in costs)):
        result.add_column(column, justify="left" if column == "model" else "right")
    totals = {c: [0, 0] for c in costs}
    for name, entry in study["models"].items():
        cells = []
        for c in costs:
            v = entry["cost_models"].get(c)
            if v is None:
                cells.append("-")
                continue
            totals[c][0] += v["agree"]
            totals[c][1] += v["decided"]
            answers = v["answers"]
            neutral = answers["rewrote"] - answers["faster"] - answers["slower"]
            rho = "-" if v["spearman"] is None else f"{v['spearman']:+.2f}"
            cells.append(f"{v['agree']}/{v['decided']} / {rho} / {1000 * v['seconds_per_evaluation']:.1f} / "
                         f"{answers['faster']},{answers['slower']},{neutral}")  # fmt: skip
        result.add_row(name, f"{100 * entry['noise']:.1f}%", str(len(entry["graphs"])), *cells)
    result.add_row("all", "", "", *(f"{a}/{d}" for a, d in totals.values()))
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="inception_v3,resnet18,resnet50,squeezenet1_1,bert")
    parser.add_argument("--agents", default="greedy,taso,ppo,world-model")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--train-episodes", type=int, default=None, help="default: each agent's own")
    parser.add_argument("--temperatures", default="0.5,1.0,1.5,2.0")
    parser.add_argument("--cost", default="context", help="the grid's cost model (default context)")
    parser.add_argument("--sweep-model", default="squeezenet1_1")
    parser.add_argument("--parts", default="grid,costs,transfer",
                        help="grid (agents x models), costs (cost-model study), transfer (leave one model out)")
    parser.add_argument("--transfer-models", default=TRANSFER_MODELS, help="models of the leave-one-out study")
    parser.add_argument("--held-out", default=None, help="only these held-out models (default: each in turn)")
    parser.add_argument("--train-seconds", type=float, default=150.0, help="PPO training per held-out model")
    parser.add_argument("--transfer-cost", default="context", help="cost model of the transfer study")
    parser.add_argument("--transfer-agent", default="ppo", choices=["ppo", "world-model"],
                        help="the agent trained and transferred (rows in transfer.json / transfer-AGENT.json)")
    parser.add_argument("--cost-models", default=COST_STUDY_MODELS, help="models of the cost-model study")
    parser.add_argument("--costs", default="sum,fused,region,context")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("results/graph_rewriting"))
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.steps, args.time_limit, args.train_episodes = "squeezenet1_1", 5, 30.0, 4
        args.temperatures, args.cost_models = "0.5,1.5", "squeezenet1_1"
        args.transfer_models, args.held_out, args.train_seconds = "squeezenet1_1,resnet18", "squeezenet1_1", 20.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    timing = QUICK if args.quick else DEFAULT
    parts = set(args.parts.split(","))
    if "costs" in parts:
        study = run_cost_study(args, timing)
        console.print(cost_table(study, args.costs.split(",")))
    if "transfer" in parts:
        console.print(transfer_table(run_transfer_study(args, timing), args.transfer_agent))
    if "grid" not in parts:
        return 0
    options = {"max_steps": args.steps, "time_limit_s": args.time_limit, "train_episodes": args.train_episodes,
               "timing": timing, "cost": args.cost}  # fmt: skip
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
