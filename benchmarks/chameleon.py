"""The seeds' ablation on this machine: AutoTVM's SA, the RL agent, SA + adaptive sampling, Chameleon
(RL + adaptive sampling) and MetaSchedule's evolutionary search, same budgets and seeds, one process.

    python benchmarks/chameleon.py [--quick] [--layers L1,...] [--models alexnet,vgg16,resnet18]
                                   [--trials 128] [--model-trials-per-task 32] [--seeds 0] [--out results/chameleon]
                                   [--redo] [--report] [--prior held-out]

Layers (seed Table 2): best latency, measurements, wall time and search time per strategy; how many
measurements and how much wall time ``chameleon`` needs to reach the final latency of ``sa`` and of
``evolutionary`` (and they need to reach their own); search steps per iteration of ``rl`` vs ``sa``
(seed Figure 5) and measurements per iteration with and without adaptive sampling (Figure 6).
Models: every task tuned, the model built with the records and timed, next to untuned TVM and ONNX
Runtime: the seeds' Table 5 (output latency) and Table 6 (optimisation time), laid out the same way.
Once a model's runs are in, every strategy's builds are timed again alternately with two identical ONNX
Runtime sessions: the ratio to ORT native, and the two sessions' difference as the noise of that ratio.
Writes ``chameleon.json``, ``claims.md`` (the tables and the seeds' claims, per layer and pooled; ``--report``
rewrites it from the JSON alone) and ``chameleon.png``. ``--quick``: L8 with 32 measurements per strategy and
AlexNet with 8 per task. A run already saved with the same budget is kept, not repeated (``--redo`` runs it
again and replaces it, for a run that something else on the machine disturbed).
``--prior held-out``: the models' runs start from a pretrained cost model trained on ``--dataset`` (the
pretrained benchmark's) without any task of that model and without its seed layers, and are saved as
``STRATEGY (pretrained)`` beside the cold rows: the 4.45x claim tested again with both sides pretrained.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlcompile import atomic, runtimes
from rlcompile.kernel.artifact import build_executable
from rlcompile.kernel.experiments import (
    WITHIN,
    first_within,
    history_panels,
    per_iteration,
    pooled_claims,
    run_strategy,
    seed_claims,
    setup,
    show,
    show_spread,
    spread,
    strategy_row,
    work_dir_kernel_history,
)
from rlcompile.kernel.tasks import SEED_LAYERS, extract_tasks, seed_layer
from rlcompile.kernel.workdir import WorkDir
from rlcompile.machine import environment
from rlcompile.measure import DEFAULT, QUICK, Contender, measure_latency, run_contest
from rlcompile.models import load_model
from rlcompile.report.plots import tuning_curves

console = Console(width=170)
STRATEGIES = "sa,rl,sa+adaptive,chameleon,evolutionary"


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
    parser.add_argument(
        "--redo", action="store_true", help="run the selected runs again, replacing saved ones (e.g. a disturbed run)"
    )
    parser.add_argument(
        "--report", action="store_true", help="only rewrite OUT/claims.md from OUT/chameleon.json (nothing is tuned)"
    )
    parser.add_argument("--prior", choices=("none", "held-out"), default="none",
                        help="models: start every strategy from a cost model trained without the model")
    parser.add_argument("--dataset", type=Path, default=Path("results/pretrained/dataset.npz"))
    args = parser.parse_args(argv)
    if args.quick:
        args.layers, args.trials, args.models, args.model_trials_per_task = "L8", 32, "alexnet", 8
    return args


def folder_name(spec: str) -> str:
    """A strategy spec as one folder name: ``sa+adaptive/candidates=top`` -> ``sa_adaptive_candidates=top``."""
    return spec.replace("+", "_").replace("/", "_")


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
                run = None if args.redo else saved_run(saved, layer, spec, seed, args.trials)
                if run is None:
                    work_dir = args.out / "work" / task.name / folder_name(spec) / f"seed{seed}"
                    run = run_strategy([task], spec, seed, args.trials, args.batch_size, work_dir, measurer,
                                       lambda m, layer=layer: console.log(f"{layer} {m}"))  # fmt: skip
                    run["trials"] = args.trials
                else:
                    console.log(f"{layer} {spec} seed {seed}: kept from {args.out / 'chameleon.json'}")
                kept = sorted([*kept, run], key=lambda r: r["seed"])
                runs[spec] = kept
                save()
    return results


def time_model(executable, model, config) -> float:
    return measure_latency(tvm_timer(executable, model, model.random_inputs()), config).median_ms


def tvm_timer(executable, model, inputs):
    return runtimes.create("tvm").runner(executable, [spec.name for spec in model.inputs]).timer(inputs)


def time_beside_ort(model_name: str, model, row: dict, target, config) -> None:
    """Every tuned build timed alternately with two ONNX Runtime sessions of the original, per strategy.

    The ratio to ORT native is what a user gets; the two ORT sessions are identical, so their ratio is
    the noise of the comparison (``ort_noise``). Untuned TVM is a group of its own. Builds come from
    the runs' records (the work directories are kept), so timing again needs no tuning again.
    """
    inputs, ort = model.random_inputs(), runtimes.create("ort")

    def timers(name: str) -> list:  # one group's builds at a time: a VGG-16 build holds 0.5 GB of weights
        if name == "tvm untuned":
            return [model.compile(runtimes.create("tvm")).timer(inputs)]
        return [tvm_timer(build_executable(model, WorkDir(Path(run["work_dir"]), "llvm"), target), model, inputs)
                for run in row["strategies"][name]]  # fmt: skip

    row["beside_ort"] = {}
    for name in ["tvm untuned", *row["strategies"]]:
        group = timers(name)
        console.log(f"{model_name}: timing {name} ({len(group)} builds) alternately with ORT native twice")
        contenders = [Contender.from_timer("ort", model.compile(ort).timed(inputs)),
                      Contender.from_timer("ort twin", model.compile(ort).timed(inputs), twin_of="ort"),
                      *[Contender(f"build {index}", call) for index, call in enumerate(group)]]  # fmt: skip
        standings = run_contest(contenders, config, rounds=2)
        stats = [standings[contender.label] for contender in contenders]
        native = stats[0].median_ms
        row["beside_ort"][name] = {"ort_ms": native, "ort_noise": stats[1].median_ms / native,
                                   "ms": [item.median_ms for item in stats[2:]],
                                   "vs_ort": [item.median_ms / native for item in stats[2:]]}  # fmt: skip


def held_out_prior(dataset: Path, model_name: str, tasks):
    """A cost model trained on ``dataset`` without the model's tasks, its own tuning directories and its seed
    layers (the same convolutions as standalone tasks)."""
    from rlcompile.kernel.pretrained import Dataset, train

    rows = Dataset.load(dataset)
    own = {model_name, *(layer for layer, (model, _) in SEED_LAYERS.items() if model == model_name)}
    sources = {source for source in set(rows.sources) if Path(source).name.removesuffix("-evolutionary") in own}
    training = rows.without_sources(sources).without({task.workload_key for task in tasks})
    console.log(f"{model_name}: prior trained without it on {len(training)} measurements")
    return train(training)


def run_models(args, names, seeds, measurer, target, payload: dict, save) -> dict:
    """Tables 5/6: every model x strategy x seed (a run already saved with the same budget is kept)."""
    config = QUICK if args.quick else DEFAULT
    results = payload.setdefault("models", {})
    for model_name in [item for item in args.models.split(",") if item]:
        model = load_model(model_name)
        tasks = extract_tasks(model, target)
        trials = args.model_trials_per_task * len(tasks)
        row, ran = results.get(model_name), False
        if row is None or row.get("trials") != trials:
            row = results[model_name] = {"tasks": len(tasks), "trials": trials, "strategies": {}}
        inputs = model.random_inputs()
        for label, backend in (("onnxruntime", runtimes.create("ort")), ("tvm untuned", runtimes.create("tvm"))):
            session = model.compile(backend)
            row[label] = measure_latency(session.timer(inputs), config).median_ms
        weights = {task.workload_key: task.weight for task in tasks}
        prior = held_out_prior(args.dataset, model_name, tasks) if args.prior == "held-out" else None
        for spec in names:
            name = f"{spec} (pretrained)" if prior else spec
            for seed in seeds:
                if not args.redo and any(run["seed"] == seed for run in row["strategies"].get(name, [])):
                    console.log(f"{model_name} {name} seed {seed}: kept from the saved JSON")
                    continue
                work_dir = args.out / "work" / model_name / folder_name(name.replace(" (pretrained)", "+prior")) \
                    / f"seed{seed}"  # fmt: skip
                summary = run_strategy(tasks, spec, seed, trials, args.batch_size, work_dir, measurer,
                                       lambda m, model_name=model_name: console.log(f"{model_name} {m}"),
                                       pretrained=prior)  # fmt: skip
                executable = build_executable(model, WorkDir(work_dir, "llvm"), target)
                summary["latency_ms"] = time_model(executable, model, config)
                summary["batches_per_task"] = [task["batches"] for task in summary["tasks"]]
                summary["exhausted_per_task"] = [task["exhausted"] for task in summary["tasks"]]
                summary["untuned_tasks"] = sum(1 for task in summary["tasks"] if task["best_ms"] is None)
                summary["kernel_history"] = work_dir_kernel_history(work_dir, weights)
                del summary["tasks"]
                others = [run for run in row["strategies"].get(name, []) if run["seed"] != seed]
                row["strategies"][name] = sorted([*others, summary], key=lambda run: run["seed"])
                ran = True
                save()
        for run in (run for runs in row["strategies"].values() for run in runs if "kernel_history" not in run):
            if (history := work_dir_kernel_history(Path(run["work_dir"]), weights)) is not None:
                run["kernel_history"] = history  # a run saved before histories were kept
                save()
        if ran or any(name not in row.get("beside_ort", {}) for name in row["strategies"]):
            time_beside_ort(model_name, model, row, target, config)
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
    claims = Table(title="The seeds' claims per layer (baseline cost / subject cost; median (range) over seeds)")
    for column in ("layer", "claim", "pairs reached", "x fewer measurements (steps)", "x less wall time"):
        claims.add_column(column, justify="left" if column in ("layer", "claim") else "right")
    for layer, result in [*layers.items(), ("all", {"claims": pooled_claims(layers)})]:
        for label, row in result["claims"].items():
            claims.add_row(layer, label, row["reached"], show_spread(row["measurement_ratio"]),
                           show_spread(row["time_ratio"]))  # fmt: skip
    console.print(claims)
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


LAYER_COLUMNS = (
    ("best ms", "best_ms", ".4f"), ("meas. to reach evolutionary's final (+5%)", "measurements_to_goal", ".0f"),
    ("wall s to reach it", "seconds_to_goal", ".0f"), ("reached", "reached", None),
    ("search steps / iteration", "steps_per_iteration", ".0f"),
    ("measurements / iteration", "measurements_per_iteration", ".1f"), ("wall s", "wall_seconds", ".0f"),
)  # fmt: skip


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def table_order(spec: str) -> tuple[int, str]:
    """The seeds' strategies in their order, each variant (``chameleon/candidates=...``) after its base."""
    base = spec.split("/")[0]
    order = STRATEGIES.split(",")
    return (order.index(base) if base in order else len(order), spec)


def layers_markdown(layers: dict) -> list[str]:
    """Per layer: the strategy table and the claims; then every claim pooled over all layers and seeds."""
    lines = []
    for layer, result in layers.items():
        runs = result["runs"]
        seeds = max(len(r) for r in runs.values())
        lines += ["", f"### {layer}: {result['label']} ({seeds} seeds, {runs[next(iter(runs))][0]['trials']} "
                  "measurements each)", ""]  # fmt: skip
        rows = []
        for strategy in sorted(runs, key=table_order):
            row = strategy_row(runs, strategy)
            rows.append([strategy, *(row[key] if spec is None else show_spread(row[key], spec)
                                     for _, key, spec in LAYER_COLUMNS)])  # fmt: skip
        lines += markdown_table(["strategy", *(title for title, _, _ in LAYER_COLUMNS)], rows)
        lines += ["", *claims_markdown(seed_claims(runs))]
    if len(layers) > 1:
        lines += ["", f"### Pooled over {len(layers)} layers ({', '.join(layers)}), every seed", ""]
        lines += claims_markdown(pooled_claims(layers))
    return lines


def claims_markdown(claims: dict) -> list[str]:
    rows = [[label, row["reached"], show_spread(row["measurement_ratio"]), show_spread(row["time_ratio"])]
            for label, row in claims.items()]  # fmt: skip
    return markdown_table(["claim (baseline / subject, median (range))", "seed pairs with a ratio",
                           "x fewer measurements (steps)", "x less wall time"], rows)  # fmt: skip


def models_markdown(models: dict) -> list[str]:
    """Tables 5 and 6 laid out the seeds' way, with ONNX Runtime and untuned TVM beside them."""
    lines = []
    for model_name, row in models.items():
        lines += [
            "",
            f"### {model_name}: {row['tasks']} tasks, {row['trials']} measurements per strategy "
            f"(ONNX Runtime {row['onnxruntime']:.2f} ms, TVM untuned {row['tvm untuned']:.1f} ms)",
            "",
        ]
        beside = row.get("beside_ort", {})
        if untuned := beside.get("tvm untuned"):
            lines += [f"Timed alternately with ORT native: untuned TVM {untuned['vs_ort'][0]:.2f}x ORT; two "
                      f"identical ORT sessions differ by {noise(untuned)}.", ""]  # fmt: skip
        rows = []
        for name, runs in row["strategies"].items():
            latency, wall = spread([r["latency_ms"] for r in runs]), spread([r["wall_seconds"] for r in runs])
            group, hits = beside.get(name), goal_hits(row, name)
            rows.append([name, str(len(runs)), show_spread(latency), show_spread(wall, ".0f"),
                         show_spread(spread([h[-1]["best_ms"] for r in runs if (h := r.get("kernel_history"))])),
                         show_spread(spread([n for n, _ in hits]), ".0f"),
                         show_spread(spread([t for _, t in hits]), ".0f"),
                         f"{sum(n is not None for n, _ in hits)}/{len(hits)}",
                         show_spread(spread(group["vs_ort"])) if group else "-", noise(group) if group else "-",
                         show_spread(spread([r["search_steps"] for r in runs]), ".0f"),
                         "-" if name == "evolutionary" else iterations_cell(runs, "search_steps", ".0f"),
                         iterations_cell(runs, "measurements", ".1f"),
                         str(max(r["untuned_tasks"] for r in runs)),
                         str(min(fewest_batches(r) for r in runs))])  # fmt: skip
        lines += markdown_table(["strategy", "seeds", "Table 5: latency ms", "Table 6: optimisation s",
                                 "kernels ms (calls-weighted task bests)",
                                 "meas. to evolutionary's final (+5%)", "wall s to reach it", "reached",
                                 "latency / ORT native, side by side", "ORT vs ORT (noise)",
                                 "search steps", "search steps / iteration", "measurements / iteration",
                                 "tasks untuned (worst seed)",
                                 "fewest batches of a task with candidates left"], rows)  # fmt: skip
    return lines


def goal_hits(row: dict, name: str) -> list[tuple[int | None, float | None]]:
    """Seed by seed (where evolutionary ran that seed too): the measurements and wall seconds after which
    ``name``'s calls-weighted sum of task bests came within 5% of evolutionary's final one."""
    goals = {run["seed"]: run["kernel_history"][-1]["best_ms"]
             for run in row["strategies"].get("evolutionary", []) if run.get("kernel_history")}  # fmt: skip
    return [first_within(run["kernel_history"], goals[run["seed"]] * WITHIN)
            for run in row["strategies"][name] if run.get("kernel_history") and run["seed"] in goals]  # fmt: skip


def iterations_cell(runs: list[dict], key: str, spec: str) -> str:
    """Figures 5 and 6 for a model: ``key`` per batch, median (range) over seeds."""
    return show_spread(spread([per_iteration(run, key) for run in runs]), spec)


def fewest_batches(run: dict) -> int:
    """The fewest batches any task got, among tasks whose design space still had unmeasured candidates
    (a max-pool's 4 schedules are all measured by its first batch; that is not a starved task)."""
    exhausted = run.get("exhausted_per_task", [False] * len(run["batches_per_task"]))
    left = [batches for batches, done in zip(run["batches_per_task"], exhausted, strict=True) if not done]
    return min(left, default=0)


def noise(group: dict) -> str:
    """How far apart two identical ORT sessions timed in the same rounds were, in percent."""
    return f"{abs(group['ort_noise'] - 1) * 100:.1f}%"


def markdown_report(payload: dict) -> str:
    """``claims.md``: everything the closing notes quote, regenerated from the JSON alone."""
    env = payload.get("environment", {})
    lines = ["# The seeds' evaluation on this machine (benchmarks/chameleon.py)", "",
             f"{env.get('cpu', '?')} ({env.get('cpu_signature', 'no signature recorded')}), {env.get('cores', '?')} "
             f"cores, {env.get('threads', '?')} threads; "
             f"recorded {env.get('recorded_at', '?')}. 'reach' = the first measurement after which the best "
             "is within 5% of the goal; ratios pair runs of the same seed."]  # fmt: skip
    if payload.get("layers"):
        lines += ["", "## Layers (seed Table 2)", *layers_markdown(payload["layers"])]
    if payload.get("models"):
        lines += ["", "## Models (seed Tables 5 and 6)", *models_markdown(payload["models"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    path = args.out / "chameleon.json"
    if args.report:
        if not path.exists():
            print(f"chameleon: no results to report: {path} does not exist", file=sys.stderr)
            return 2
        (args.out / "claims.md").write_text(markdown_report(json.loads(path.read_text())))
        print(f"wrote {args.out / 'claims.md'}")
        return 0
    names, seeds, measurer = setup(args.out, args.strategies, args.seeds)
    target = measurer.target
    payload = json.loads(path.read_text()) if path.exists() else {}
    payload |= {"benchmark": "chameleon", "environment": environment()}
    payload.setdefault("invocations", []).append({k: str(v) for k, v in vars(args).items()})

    def save() -> None:
        for result in payload.get("layers", {}).values():  # derived from the runs, for every layer alike
            result["claims"] = seed_claims(result["runs"])
        atomic.write_json(path, payload, indent=1)  # a kill mid-write keeps the old JSON

    layers = run_layers(args, names, seeds, measurer, target, payload, save)
    models = run_models(args, names, seeds, measurer, target, payload, save)
    shown = [*names, *(f"{name} (pretrained)" for name in names)] if args.prior == "held-out" else names
    print_tables(layers, models, shown, args)
    if layers:
        tuning_curves(history_panels(layers), args.out / "chameleon.png")
    (args.out / "claims.md").write_text(markdown_report(payload))
    console.print(f"wrote {path}, {args.out / 'claims.md'} and {args.out / 'chameleon.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
