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


def spread(values: list[float]) -> dict | None:
    """Median and range over seeds (None when there is nothing to summarise)."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def show_spread(value: dict | None, spec: str = ".2f") -> str:
    if value is None:
        return "-"
    if value["n"] == 1:
        return format(value["median"], spec)
    return f"{value['median']:{spec}} ({value['min']:{spec}}-{value['max']:{spec}})"


def cost_to_reach(run: dict, latency_ms: float) -> tuple[int | None, float | None]:
    return first_within(run["tasks"][0]["history"], latency_ms)


def layer_comparison(runs: dict[str, list[dict]]) -> dict:
    """How fast ``chameleon`` reaches each baseline's final latency, against the baseline itself."""
    rows = {}
    for baseline in BASELINES:
        if baseline not in runs or SUBJECT not in runs:
            continue
        pairs = []
        baseline_by_seed = {run["seed"]: run for run in runs[baseline]}
        for subject_run in runs[SUBJECT]:
            baseline_run = baseline_by_seed.get(subject_run["seed"])
            if baseline_run is None:
                continue
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
            "measurement_ratio": spread(measurement_ratios),
            "time_ratio": spread(time_ratios),
        }
    return rows


def saved_run(saved: dict, layer: str, spec: str, seed: int, trials: int) -> dict | None:
    """A finished run of an earlier invocation (same layer, strategy, seed and budget), to keep as it is."""
    for run in saved.get("layers", {}).get(layer, {}).get("runs", {}).get(spec, []):
        if run["seed"] == seed and run.get("trials") == trials:
            return run
    return None


def run_layers(args, names, seeds, measurer, target, payload: dict, save) -> dict:
    """Every layer x strategy x seed; a run already in the JSON with the same budget is kept, not repeated,
    and the JSON is rewritten after every run, so a long evaluation can be split across invocations."""
    saved = json.loads(json.dumps(payload))
    results = payload.setdefault("layers", {})
    for layer in [item for item in args.layers.split(",") if item]:
        task = seed_layer(layer, target)
        runs = results.setdefault(layer, {"label": task.label, "runs": {}})["runs"]
        for spec in names:
            kept = [run for run in runs.get(spec, []) if run.get("trials") == args.trials and run["seed"] not in seeds]
            for seed in seeds:
                run = saved_run(saved, layer, spec, seed, args.trials)
                if run is None:
                    work_dir = args.out / "work" / task.name / spec.replace("+", "_") / f"seed{seed}"
                    run = run_strategy([task], spec, seed, args.trials, args.batch_size, work_dir, measurer,
                                       lambda m, layer=layer: console.log(f"{layer} {m}"))  # fmt: skip
                    run["trials"] = args.trials
                else:
                    console.log(f"{layer} {spec} seed {seed}: kept from {args.out / 'chameleon.json'}")
                kept = sorted([*kept, run], key=lambda r: r["seed"])
                runs[spec] = kept
                results[layer]["chameleon_vs"] = layer_comparison(runs)
                save()
    return results


def time_model(executable, model, device, config) -> float:
    session = TvmSession(executable, device, [spec.name for spec in model.inputs], 0.0)
    return measure_latency(session.timer(model.random_inputs()), config).median_ms


def run_models(args, names, seeds, measurer, target, payload: dict, save) -> dict:
    """Tables 5/6: every model x strategy x seed (a run already saved with the same budget is kept)."""
    config = QUICK if args.quick else DEFAULT
    results = payload.setdefault("models", {})
    for model_name in [item for item in args.models.split(",") if item]:
        model = load_model(model_name)
        tasks = extract_tasks(model, target)
        trials = args.model_trials_per_task * len(tasks)
        row = results.get(model_name)
        if row is None or row.get("trials") != trials:
            row = results[model_name] = {"tasks": len(tasks), "trials": trials, "strategies": {}}
        inputs = model.random_inputs()
        for label, backend in (("onnxruntime", backends.create("ort")), ("tvm untuned", backends.create("tvm"))):
            session = backend.prepare(model)
            row[label] = measure_latency(session.timer(inputs), config).median_ms
        for name in names:
            for seed in seeds:
                if any(run["seed"] == seed for run in row["strategies"].get(name, [])):
                    console.log(f"{model_name} {name} seed {seed}: kept from the saved JSON")
                    continue
                work_dir = args.out / "work" / model_name / name.replace("+", "_") / f"seed{seed}"
                summary = run_strategy(tasks, name, seed, trials, args.batch_size, work_dir, measurer,
                                       lambda m, model_name=model_name: console.log(f"{model_name} {m}"))  # fmt: skip
                executable = build_executable(model, WorkDir(work_dir, "llvm"), target)
                summary["latency_ms"] = time_model(executable, model, tvm.cpu(0), config)
                summary["batches_per_task"] = [task["batches"] for task in summary["tasks"]]
                summary["untuned_tasks"] = sum(1 for task in summary["tasks"] if task["best_ms"] is None)
                del summary["tasks"]
                row["strategies"].setdefault(name, []).append(summary)
                save()
    return results


def print_tables(layers: dict, models: dict, names: list[str], args) -> None:
    table = Table(title="Layers: per strategy, median over seeds")
    for column in ("layer", "strategy", "best ms", "measurements", "search steps", "search s", "total s",
                   "samples / iteration"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("layer", "strategy") else "right")
    for layer, result in layers.items():
        for name, runs in result["runs"].items():
            bests = [r["tasks"][0]["best_ms"] for r in runs if r["tasks"][0]["best_ms"]]
            samples = [s for r in runs for s in r["samples_per_batch"]]
            table.add_row(f"{layer} ({len(runs)} seeds)", name, show_spread(spread(bests), ".4f"),
                          f"{statistics.median(r['measurements'] for r in runs):.0f}",
                          f"{statistics.median(r['search_steps'] for r in runs):.0f}",
                          f"{statistics.median(r['search_seconds'] for r in runs):.1f}",
                          f"{statistics.median(r['tasks'][0]['elapsed_seconds'] for r in runs):.0f}",
                          show(statistics.mean(samples) if samples else None, ".1f"))  # fmt: skip
    console.print(table)
    reach = Table(title=f"What {SUBJECT} needs to reach each baseline's final latency (baseline cost / {SUBJECT} "
                  "cost; median (range) over seeds)")  # fmt: skip
    for column in ("layer", "baseline", "reached", "fewer measurements", "less wall time"):
        reach.add_column(column, justify="left" if column in ("layer", "baseline") else "right")
    for layer, result in layers.items():
        for baseline, row in result["chameleon_vs"].items():
            reach.add_row(layer, baseline, row["reached"], show_spread(row["measurement_ratio"]),
                          show_spread(row["time_ratio"]))  # fmt: skip
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
            cells = [show_spread(spread([r[key] for r in row["strategies"].get(n, [])])) for n in names]
            table.add_row(model_name, *cells, *[f"{row[e]:.2f}" for e in extra])
        console.print(table)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names, seeds, measurer = setup(args.out, args.strategies, args.seeds)
    target = measurer.target
    path = args.out / "chameleon.json"
    payload = json.loads(path.read_text()) if path.exists() else {}
    payload |= {"benchmark": "chameleon", "environment": environment()}
    payload.setdefault("invocations", []).append({k: str(v) for k, v in vars(args).items()})

    def save() -> None:
        path.write_text(json.dumps(payload, indent=1))

    layers = run_layers(args, names, seeds, measurer, target, payload, save)
    models = run_models(args, names, seeds, measurer, target, payload, save)
    print_tables(layers, models, names, args)
    if layers:
        tuning_curves(history_panels(layers), args.out / "chameleon.png")
    console.print(f"wrote {path} and {args.out / 'chameleon.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
