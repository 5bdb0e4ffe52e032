"""The seeds' ablation on this machine: AutoTVM's SA, the RL agent, SA + adaptive sampling, Chameleon
(RL + adaptive sampling) and MetaSchedule's evolutionary search, same budgets and seeds, one process.

    python benchmarks/chameleon.py [--quick] [--layers L1,...] [--models alexnet,vgg16,resnet18]
                                   [--trials 128] [--model-trials-per-task 32] [--seeds 0] [--out results/chameleon]

Layers (seed Table 2): best latency, measurements, wall time and search time per strategy; how many
measurements and how much wall time ``chameleon`` needs to reach the final latency of ``sa`` and of
``evolutionary`` (and they need to reach their own); search steps per iteration of ``rl`` vs ``sa``
(seed Figure 5) and measurements per iteration with and without adaptive sampling (Figure 6).
Models: every task tuned, the model built with the records and timed, next to untuned TVM and ONNX
Runtime: the seeds' Table 5 (output latency) and Table 6 (optimisation time), laid out the same way.
Writes ``chameleon.json`` and ``chameleon.png``. ``--quick``: L8 with 32 measurements per strategy and
AlexNet with 8 per task.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlcompile import backends
from rlcompile.backends.tvm import TvmSession
from rlcompile.kernel.artifact import build_executable
from rlcompile.kernel.experiments import (
    WITHIN,
    first_within,
    history_panels,
    run_layer,
    run_strategy,
    setup,
    show,
)
from rlcompile.kernel.tasks import SEED_LAYERS, extract_tasks, seed_layer
from rlcompile.kernel.workdir import WorkDir
from rlcompile.measure import DEFAULT, QUICK, environment, measure_latency
from rlcompile.models import load_model
from rlcompile.report.plots import tuning_curves
from rlcompile.tvm_bridge import tvm

console = Console(width=170)
STRATEGIES = "sa,rl,sa+adaptive,chameleon,evolutionary"
SUBJECT, BASELINES = "chameleon", ("sa", "evolutionary")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default=",".join(SEED_LAYERS))
    parser.add_argument("--models", default="alexnet,vgg16,resnet18")
    parser.add_argument("--strategies", default=STRATEGIES)
    parser.add_argument("--trials", type=int, default=128, help="measurements per layer and strategy")
    parser.add_argument("--model-trials-per-task", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("results/chameleon"))
    args = parser.parse_args(argv)
    if args.quick:
        args.layers, args.trials, args.models, args.model_trials_per_task = "L8", 32, "alexnet", 8
    return args


def cost_to_reach(run: dict, latency_ms: float) -> tuple[int | None, float | None]:
    return first_within(run["tasks"][0]["history"], latency_ms)


def layer_comparison(runs: dict[str, list[dict]]) -> dict:
    """How fast ``chameleon`` reaches each baseline's final latency, against the baseline itself."""
    rows = {}
    for baseline in BASELINES:
        if baseline not in runs or SUBJECT not in runs:
            continue
        pairs = []
        for subject_run, baseline_run in zip(runs[SUBJECT], runs[baseline], strict=True):
            goal = baseline_run["tasks"][0]["best_ms"]
            if goal is None:
                continue
            own = cost_to_reach(baseline_run, goal)
            ours = cost_to_reach(subject_run, goal * WITHIN)
            pairs.append({"goal_ms": goal, "baseline": own, "chameleon": ours})
        reached = [p for p in pairs if p["chameleon"][0] is not None]
        measurement_ratios = [p["baseline"][0] / p["chameleon"][0] for p in reached]
        time_ratios = [p["baseline"][1] / p["chameleon"][1] for p in reached]
        rows[baseline] = {
            "pairs": pairs,
            "reached": f"{len(reached)}/{len(pairs)}",
            "measurement_ratio": statistics.mean(measurement_ratios) if reached else None,
            "time_ratio": statistics.mean(time_ratios) if reached else None,
        }
    return rows


def run_layers(args, names, seeds, measurer, target) -> dict:
    results = {}
    for layer in [item for item in args.layers.split(",") if item]:
        task = seed_layer(layer, target)
        runs = run_layer(task, names, seeds, args.trials, args.batch_size, args.out, measurer,
                         lambda m, layer=layer: console.log(f"{layer} {m}"))  # fmt: skip
        results[layer] = {"label": task.label, "runs": runs, "chameleon_vs": layer_comparison(runs)}
    return results


def time_model(executable, model, device, config) -> float:
    session = TvmSession(executable, device, [spec.name for spec in model.inputs], 0.0)
    return measure_latency(session.timer(model.random_inputs()), config).median_ms


def run_models(args, names, seeds, measurer, target) -> dict:
    config = QUICK if args.quick else DEFAULT
    results = {}
    for model_name in [item for item in args.models.split(",") if item]:
        model = load_model(model_name)
        tasks = extract_tasks(model, target)
        trials = args.model_trials_per_task * len(tasks)
        row: dict = {"tasks": len(tasks), "trials": trials, "strategies": {}}
        inputs = model.random_inputs()
        for label, backend in (("onnxruntime", backends.create("ort")), ("tvm untuned", backends.create("tvm"))):
            session = backend.prepare(model)
            row[label] = measure_latency(session.timer(inputs), config).median_ms
        for name in names:
            for seed in seeds:
                work_dir = args.out / "work" / model_name / name.replace("+", "_") / f"seed{seed}"
                summary = run_strategy(tasks, name, seed, trials, args.batch_size, work_dir, measurer,
                                       lambda m, model_name=model_name: console.log(f"{model_name} {m}"))  # fmt: skip
                executable = build_executable(model, WorkDir(work_dir, "llvm"), target)
                summary["latency_ms"] = time_model(executable, model, tvm.cpu(0), config)
                del summary["tasks"]
                row["strategies"].setdefault(name, []).append(summary)
        results[model_name] = row
    return results


def print_tables(layers: dict, models: dict, names: list[str], args) -> None:
    table = Table(title=f"Layers: {args.trials} measurements per strategy (mean over seeds)")
    for column in ("layer", "strategy", "best ms", "measurements", "search steps", "search s", "total s",
                   "samples / iteration"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("layer", "strategy") else "right")
    for layer, result in layers.items():
        for name in names:
            runs = result["runs"][name]
            bests = [r["tasks"][0]["best_ms"] for r in runs if r["tasks"][0]["best_ms"]]
            samples = [s for r in runs for s in r["samples_per_batch"]]
            table.add_row(layer, name, show(statistics.mean(bests) if bests else None, ".4f"),
                          f"{statistics.mean(r['measurements'] for r in runs):.0f}",
                          f"{statistics.mean(r['search_steps'] for r in runs):.0f}",
                          f"{statistics.mean(r['search_seconds'] for r in runs):.1f}",
                          f"{statistics.mean(r['tasks'][0]['elapsed_seconds'] for r in runs):.0f}",
                          show(statistics.mean(samples) if samples else None, ".1f"))  # fmt: skip
    console.print(table)
    reach = Table(title=f"What {SUBJECT} needs to reach each baseline's final latency (baseline cost / {SUBJECT} cost)")
    for column in ("layer", "baseline", "reached", "fewer measurements", "less wall time"):
        reach.add_column(column, justify="left" if column in ("layer", "baseline") else "right")
    for layer, result in layers.items():
        for baseline, row in result["chameleon_vs"].items():
            reach.add_row(layer, baseline, row["reached"], show(row["measurement_ratio"], ".2f"),
                          show(row["time_ratio"], ".2f"))  # fmt: skip
    console.print(reach)
    for title, key in (
        ("Table 5: output latency (ms)", "latency_ms"),
        ("Table 6: optimisation time (s)", "wall_seconds"),
    ):
        table = Table(title=title)
        extra = ["onnxruntime", "tvm untuned"] if key == "latency_ms" else []
        for column in ("model", *names, *extra):
            table.add_column(column, justify="left" if column == "model" else "right")
        for model_name, row in models.items():
            cells = [f"{statistics.mean(r[key] for r in row['strategies'][n]):.2f}" for n in names]
            table.add_row(model_name, *cells, *[f"{row[e]:.2f}" for e in extra])
        console.print(table)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names, seeds, measurer = setup(args.out, args.strategies, args.seeds)
    target = measurer.target
    layers = run_layers(args, names, seeds, measurer, target)
    models = run_models(args, names, seeds, measurer, target)
    payload = {"benchmark": "chameleon", "args": {k: str(v) for k, v in vars(args).items()},
               "environment": environment(), "layers": layers, "models": models}  # fmt: skip
    (args.out / "chameleon.json").write_text(json.dumps(payload, indent=1))
    print_tables(layers, models, names, args)
    if layers:
        tuning_curves(history_panels(layers), args.out / "chameleon.png")
    console.print(f"wrote {args.out / 'chameleon.json'} and {args.out / 'chameleon.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
