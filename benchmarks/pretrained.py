"""Does a pretrained cost model make tuning cheaper on models it never saw? Leave-one-model-out.

    python benchmarks/pretrained.py gather [--out results/pretrained] [--target TVM_TARGET]
    python benchmarks/pretrained.py lomo [--models resnet18,...] [--strategy sa] [--seeds 0,1,2] [--trials 48]
                                         [--target TVM_TARGET] [--arms cold,warm,pretrained]
    python benchmarks/pretrained.py ship [--out results/pretrained]
    python benchmarks/pretrained.py report          # the table (and pooled ratios) of the saved runs
    python benchmarks/pretrained.py e2e [--models resnet18,mobilenet_v2] [--minutes 10,20] [--strategy chameleon]
                                        [--arms cold,pretrained] [--layout nchw|nchwc] [--tag TAG]
    python benchmarks/pretrained.py wins [--models resnet18]   # after e2e: where TVM's kernels beat every library

``gather`` tunes the dataset (resumable, one work directory per model under ``OUT/data``): the two heaviest
distinct tasks of each evaluation model for 256 measurements with ``sa`` (cold, seed 0; these runs are
also the reference the evaluation must reach), further tasks of the zoo, the seed layers and a packaged
OCR model with ``sa`` and ``evolutionary``. ``ship`` trains on all of it and writes the packaged model
of the records' vector-ISA class (``rlcompile/kernel/pretrained/<isa>.json``) and the dataset
(``OUT/dataset.npz``). ``--target`` makes the records for another class than this CPU's own: on an AVX-512
machine, ``--target '{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}' --out results/pretrained-avx2``
gathers AVX2 kernels (run by this CPU's AVX2 units) and ``ship`` with the same flags writes ``avx2.json``.

``lomo``, per evaluation model M: a model is trained on every task of the other models' directories
(M's own directories and any task with the same workload left out), and each of M's evaluation tasks
is tuned from scratch with ``--trials`` measurements per seed, three ways: cold (no prior), warm-started
(``--warm-start`` from the other models' directories: same-structure tasks only) and pretrained,
alternating the order per seed. Reported per task: the measurements and wall seconds each needs to come
within 5% of the cold 256-measurement best, and the best after the first batch and at the end.
Output: ``OUT/pretrained.json`` (rewritten after every run; finished runs are kept, not repeated).

``e2e``, per model: TVM alone, the whole model tuned (all tasks, the gradient scheduler, ``--strategy``)
for each of ``--minutes`` of wall time, cold and with a prior trained without any of the model's tasks
(as ``lomo`` trains it); a checkpoint's model is built (``rlcompile build``) when the tuning reaches it,
and the next checkpoint resumes the same journal. Then every build, ONNX Runtime and OpenVINO native, and
a second ORT session (the twin: the noise) are timed in turns in one process. Output:
``OUT/e2e.json`` (a finished checkpoint is kept, not tuned again).

``wins``, per model tuned by ``e2e``: the layer level's table with TVM among the libraries (``rlcompile
select`` with the pretrained arm's work directory), and the fusion groups on which TVM's tuned kernels
measured faster in context than every other library; added to ``OUT/e2e.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlcompile import atomic
from rlcompile.kernel.experiments import WITHIN, first_within, run_strategy, setup, show
from rlcompile.kernel.pretrained import Dataset, packaged_path, train
from rlcompile.kernel.transfer import WarmStart
from rlcompile.kernel.workdir import read_journal
from rlcompile.machine import environment
from rlcompile.names import LAYOUTS

console = Console(width=160)
#: (model, tasks, measurements per task, strategy): the evaluation models first (their sa runs are the goal)
EVALUATION = {"resnet18": "0,5", "mobilenet_v2": "0,17", "googlenet": "0,3", "bert_tiny": "0,3", "ocr-cls": "0,2"}
GATHER = [
    *((model, tasks, 256, "sa") for model, tasks in EVALUATION.items()),
    ("L1", "0", 128, "sa"), ("L2", "0", 128, "sa"), ("L3", "0", 128, "sa"), ("L5", "0", 128, "sa"),
    ("squeezenet1_1", "0,1", 128, "sa"), ("mobilenet_v1", "0,11", 128, "sa"), ("resnet50", "0,1", 128, "sa"),
    ("bert", "0,1", 128, "sa"),
    ("resnet18", "2,4,9,12", 64, "evolutionary"), ("mobilenet_v2", "1,5,19", 64, "evolutionary"),
    ("googlenet", "1,5", 64, "evolutionary"), ("bert_tiny", "1,2", 64, "evolutionary"),
    ("ocr-cls", "1,3", 64, "evolutionary"), ("vgg16", "0,6", 64, "evolutionary"),
    ("inception_v3", "0,1", 64, "evolutionary"), ("bert", "2,3", 64, "evolutionary"),
]  # fmt: skip
ARMS = ("cold", "warm", "pretrained")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("gather", "lomo", "ship", "report", "e2e", "wins"))
    parser.add_argument("--models", default=",".join(EVALUATION))
    parser.add_argument("--strategy", default="sa")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("results/pretrained"))
    parser.add_argument("--target", default="llvm", help="gather, ship, lomo: the TVM target the records are for, e.g. "
                        '\'{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}\' for AVX2 kernels on an AVX-512 '
                        "CPU (the shipped model is of the target's vector-ISA class)")  # fmt: skip
    parser.add_argument("--minutes", default="10,20", help="e2e: tuning checkpoints, in minutes of wall time")
    parser.add_argument("--layout", default="nchw", choices=LAYOUTS,
                        help="e2e: the convolutions' layout when tuned and built (arms other than nchw are named "
                        "ARM-LAYOUT)")  # fmt: skip
    parser.add_argument("--tag", default="", help="e2e: appended to the arms' names (ARM-LAYOUT-TAG): a fresh tuning "
                        "run beside earlier ones, e.g. after a change to how tasks are formed")  # fmt: skip
    return parser.parse_args(argv)


def data_dir(out: Path, model: str, strategy: str) -> Path:
    return out / "data" / (model if strategy == "sa" else f"{model}-{strategy}")


def gather(args: argparse.Namespace) -> None:
    """Tune every entry of :data:`GATHER` (a finished one resumes to nothing)."""
    for model, tasks, per_task, strategy in GATHER:
        count = len(tasks.split(","))
        command = ["rlcompile", "tune", model, "--tasks", tasks, "--trials", str(count * per_task), "--agent",
                   strategy, "--seed", "0" if strategy == "sa" else "1", "--scheduler", "round-robin",
                   "--cost-model", "none", "--target", args.target,
                   "--work-dir", str(data_dir(args.out, model, strategy))]  # fmt: skip
        console.log(" ".join(command))
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def data_dirs(out: Path) -> list[Path]:
    return sorted(p for p in (out / "data").iterdir() if (p / "measurements.jsonl").exists())


def model_of(directory: Path) -> str:
    return directory.name.removesuffix("-evolutionary")


def dataset(out: Path, target) -> Dataset:
    """Every data directory's rows (cached in ``OUT/dataset.npz`` until a directory changes)."""
    path = out / "dataset.npz"
    directories = data_dirs(out)
    newest = max((d / "measurements.jsonl").stat().st_mtime for d in directories)
    if path.exists() and path.stat().st_mtime > newest:
        return Dataset.load(path)
    rows = Dataset.from_work_dirs(directories, target)
    rows.save(path)
    return rows


def ship(args: argparse.Namespace, target) -> None:
    rows = dataset(args.out, target)
    model = train(rows)
    path = model.save(packaged_path(rows.isa))
    console.log(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB): {model.name}")


def goals(directory: Path) -> dict[str, dict]:
    """Per task of a cold reference directory: its best, and when the cold run came within 5% of it."""
    entries = list(read_journal(directory / "measurements.jsonl"))
    found = {}
    for key in dict.fromkeys(e["task"] for e in entries):
        mine = [e for e in entries if e["task"] == key]
        best = min(e["seconds"] for e in mine if e["status"] == "ok")
        reached = next(i for i, e in enumerate(mine, 1) if e["status"] == "ok" and e["seconds"] <= best * WITHIN)
        found[key] = {"best_ms": best * 1e3, "measurements": len(mine), "cold_to_goal": reached,
                      "cold_seconds_to_goal": mine[reached - 1]["elapsed"]}  # fmt: skip
    return found


def lomo(args: argparse.Namespace) -> None:
    from rlcompile.kernel.api import load_tasks

    _, seeds, measurer = setup(args.out, args.strategy, args.seeds, args.target)
    target = measurer.target
    rows = dataset(args.out, target)
    path = args.out / "pretrained.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    results: dict = saved.get("models", {})
    arms = args.arms.split(",")
    for model in args.models.split(","):
        reference = data_dir(args.out, model, "sa")
        targets = goals(reference)
        others = [d for d in data_dirs(args.out) if model_of(d) != model]
        held_out = set(targets) | {str(t) for d in data_dirs(args.out) if model_of(d) == model
                                   for t in {e["task"] for e in read_journal(d / "measurements.jsonl")}}  # fmt: skip
        training = held_out_rows(rows, model, held_out)
        pretrained = train(training)
        warm = WarmStart.load(others, target, args.target) if "warm" in arms else None
        console.log(f"{model}: trained without it on {len(training)} measurements of {len(set(training.tasks))} "
                    f"tasks; warm start {warm.samples if warm else 0} measurements")  # fmt: skip
        tasks = {t.workload_key: t for t in load_tasks(model, target, cache=reference / "tasks.json")[1]}
        result = results.setdefault(model, {"training_samples": len(training), "tasks": {}})
        for key, goal in targets.items():
            task = tasks[key]
            entry = result["tasks"].setdefault(task.label, {"key": key, **goal, "runs": []})
            for seed in seeds:
                order = arms if seed % 2 == 0 else list(reversed(arms))
                for arm in order:
                    if any(r["seed"] == seed and r["arm"] == arm for r in entry["runs"]):
                        continue
                    work = args.out / "work" / model / key / f"{arm}-seed{seed}"
                    run = run_strategy([task], args.strategy, seed, args.trials, args.batch_size, work, measurer,
                                       lambda m, tag=f"{model} {task.label[:40]} {arm}": console.log(f"{tag} {m}"),
                                       warm_start=warm if arm == "warm" else None,
                                       pretrained=pretrained if arm == "pretrained" else None,
                                       target=args.target)  # fmt: skip
                    entry["runs"].append(summarise(run, arm, goal["best_ms"] * WITHIN, args.batch_size))
                    payload = {"benchmark": "pretrained", "args": {k: str(v) for k, v in vars(args).items()},
                               "environment": environment(), "pooled": pooled(results, args.trials),
                               "models": results}  # fmt: skip
                    atomic.write_json(path, payload, indent=1)
    show_table(results, args)


def held_out_rows(rows: Dataset, model: str, held_out: set[str]) -> Dataset:
    """The rows of every other model's directories, without the ``held_out`` workloads (the model's own)."""
    own = {source for source in set(rows.sources) if model_of(Path(source)) == model}
    return rows.without_sources(own).without(held_out)


def e2e(args: argparse.Namespace) -> None:
    """Tune each model to each checkpoint, cold and pretrained (held out), build, then time all in turns."""
    from rlcompile.kernel.api import TuneRequest, build, load_tasks, tune
    from rlcompile.tvm_bridge import resolve_target

    target = resolve_target("llvm")
    path = args.out / "e2e.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    results: dict = saved.get("models", {})
    minutes = sorted(int(m) for m in args.minutes.split(","))
    for model in args.models.split(","):
        home = args.out / "e2e" / model
        prior = home / f"no-{model}.json"
        if not prior.exists():
            keys = {t.workload_key for t in load_tasks(model, target)[1]}
            training = held_out_rows(dataset(args.out, target), model, keys)
            train(training).save(prior)
            console.log(f"{model}: prior trained without its {len(keys)} tasks on {len(training)} measurements")
        entry = results.setdefault(model, {"builds": {}})
        for limit in minutes:
            for arm in [arm for arm in args.arms.split(",") if arm in ("cold", "pretrained")]:
                arm_name = arm if args.layout == "nchw" else f"{arm}-{args.layout}"
                arm_name += f"-{args.tag}" if args.tag else ""
                name = f"{arm_name}-{limit}min"
                if name in entry["builds"]:
                    continue
                work = home / arm_name
                spent_path = work / "spent.json"
                spent = json.loads(spent_path.read_text())["seconds"] if spent_path.exists() else 0.0
                request = TuneRequest(model=model, work_dir=work, strategy=args.strategy, trials=1_000_000,
                                      seed=0, cost_model=str(prior) if arm == "pretrained" else "none",
                                      layout=args.layout)  # fmt: skip
                began = time.monotonic()
                states = tune(request, deadline=began + max(limit * 60 - spent, 0.0))
                spent += time.monotonic() - began
                atomic.write_json(spent_path, {"seconds": spent})
                tar, coverage = build(model, work, home / f"{name}.tar")
                trials = sum(state.trials for state in states)
                entry["builds"][name] = {"tar": str(tar), "tuning_s": spent, "trials": trials,
                                         "tuned_tasks": coverage[0], "tasks": coverage[1],
                                         "layout": args.layout}  # fmt: skip
                console.log(f"{model} {name}: {trials} measurements in {spent:.0f} s, {coverage[0]}/{coverage[1]} "
                            "tasks tuned")  # fmt: skip
                write_e2e(path, args, results)
        entry["timing"] = time_builds(model, entry["builds"])
        write_e2e(path, args, results)
        show_e2e(model, entry)


def wins(args: argparse.Namespace) -> None:
    """Per model: the layer table with TVM (the pretrained arm's records) and the groups TVM wins."""
    path = args.out / "e2e.json"
    payload = json.loads(path.read_text())
    for model in args.models.split(","):
        home = args.out / "e2e" / model
        plan, table = home / "select.plan", home / "select.json"
        command = ["rlcompile", "select", model, "--tuning-db", str(home / "pretrained"), "-o", str(plan),
                   "--table-dir", str(home / "tables"), "--json", str(table)]  # fmt: skip
        console.log(" ".join(command))
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        selection = json.loads(table.read_text())
        groups = []
        for row in selection["groups"]:
            others = {name: ms for name, ms in row["ms"].items() if name != "tvm"}
            if "tvm" in row["ms"] and others and row["ms"]["tvm"] < min(others.values()):
                groups.append({"group": row["group"], "ops": row["ops"], "tvm_ms": row["ms"]["tvm"],
                               "best_other": min(others, key=others.get), "best_other_ms": min(others.values()),
                               "chosen": row["library"]})  # fmt: skip
        timed = sum("tvm" in row["ms"] for row in selection["groups"])
        payload["models"][model]["tvm_wins"] = {"groups": len(selection["groups"]), "tvm_timed": timed,
                                                "won": groups, "chosen": selection.get("chosen")}  # fmt: skip
        atomic.write_json(path, payload, indent=1)
        console.log(f"{model}: TVM timed on {timed} of {len(selection['groups'])} groups, fastest on {len(groups)}: "
                    + ", ".join(f"{g['group']} ({g['ops']}) {g['tvm_ms']:.3f} vs {g['best_other']} "
                                f"{g['best_other_ms']:.3f} ms" for g in groups))  # fmt: skip


def time_builds(model: str, builds: dict) -> dict:
    """Every build, ORT and OpenVINO native and ORT's twin, in turns: median ms and the ratios to ORT."""
    from rlcompile import runtimes
    from rlcompile.measure.contest import DECISION_ROUNDS, SETTLE, Contender, run_contest
    from rlcompile.models import load_model
    from rlcompile.saved import load_saved

    original = load_model(model)
    feeds = original.random_inputs(0)
    options = runtimes.NATIVE
    # each waits out its library's spinning workers after its turn (Contender.from_timer)
    contenders = [Contender.from_timer(name, load_saved(build["tar"]).timed(feeds)) for name, build in builds.items()]
    for library in ("ort", "openvino"):
        runner = original.compile(runtimes.create(library), options)
        contenders.append(Contender.from_timer(library, runner.timed(feeds)))
    contenders.append(Contender.from_timer("ort twin", original.compile(runtimes.create("ort"), options).timed(feeds),
                                           "ort"))  # fmt: skip
    standings = run_contest(contenders, rounds=DECISION_ROUNDS, settle=SETTLE)
    ort = standings.median("ort")
    return {"rounds": standings.rounds, "noise": standings.noise,
            "median_ms": {c.label: standings.median(c.label) for c in contenders},
            "vs_ort": {c.label: standings.median(c.label) / ort for c in contenders}}  # fmt: skip


def write_e2e(path: Path, args: argparse.Namespace, results: dict) -> None:
    payload = {"benchmark": "pretrained-e2e", "args": {k: str(v) for k, v in vars(args).items()},
               "environment": environment(), "models": results}  # fmt: skip
    atomic.write_json(path, payload, indent=1)


def show_e2e(model: str, entry: dict) -> None:
    timing = entry["timing"]
    table = Table(title=f"{model}: TVM alone vs the libraries (in turns; ORT twin noise {timing['noise']:.1%})")
    for column in ("contender", "measurements", "tuning s", "median ms", "x ORT"):
        table.add_column(column)
    for label, median_ms in timing["median_ms"].items():
        build = entry["builds"].get(label, {})
        table.add_row(label, str(build.get("trials", "")), f"{build['tuning_s']:.0f}" if build else "",
                      f"{median_ms:.3f}", f"{timing['vs_ort'][label]:.3f}")  # fmt: skip
    console.print(table)


def summarise(run: dict, arm: str, goal_ms: float, batch_size: int) -> dict:
    task = run["tasks"][0]
    history = task["history"]
    reached, seconds = first_within(history, goal_ms)
    return {"arm": arm, "seed": run["seed"], "to_goal": reached, "seconds_to_goal": seconds,
            "first_batch_ms": history[min(batch_size, len(history)) - 1]["best_ms"] if history else None,
            "best_ms": task["best_ms"], "measurements": task["trials"], "wall_seconds": run["wall_seconds"],
            "search_seconds": run["search_seconds"], "cost_model": task.get("cost_model")}  # fmt: skip


def pooled(results: dict, trials: int) -> dict:
    """Per arm, over every task and seed: how many times fewer measurements than the cold 256-measurement run it
    needs to come within 5% of that run's best. A run that never gets there counts as needing ``trials + 1``
    (an optimistic bound for it, so the median is not flattered by leaving it out)."""
    found = {}
    for arm in ARMS:
        ratios, reached, runs = [], 0, 0
        for result in results.values():
            for entry in result["tasks"].values():
                for run in (r for r in entry["runs"] if r["arm"] == arm):
                    runs += 1
                    reached += run["to_goal"] is not None
                    ratios.append(entry["cold_to_goal"] / (run["to_goal"] or trials + 1))
        if runs:
            found[arm] = {"median_ratio": statistics.median(ratios), "reached": f"{reached}/{runs}",
                          "ratios": ratios}  # fmt: skip
    return found


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def show_table(results: dict, args: argparse.Namespace) -> None:
    table = Table(title=f"leave-one-model-out, {args.strategy}, {args.trials} measurements per task; goal: within 5% "
                  "of the cold 256-measurement best; medians over seeds (reached/runs)")  # fmt: skip
    for column in ("model", "task", "goal ms", "cold 256: to goal", *(f"{arm}: to goal" for arm in ARMS),
                   *(f"{arm}: 1st batch / goal" for arm in ARMS)):  # fmt: skip
        table.add_column(column, justify="left" if column in ("model", "task") else "right")
    for model, result in results.items():
        for label, entry in result["tasks"].items():
            cells = []
            for arm in ARMS:
                runs = [r for r in entry["runs"] if r["arm"] == arm]
                reached = [r["to_goal"] for r in runs if r["to_goal"] is not None]
                cells.append(f"{show(median(reached), '.0f')} ({len(reached)}/{len(runs)})" if runs else "-")
            ratios = []
            for arm in ARMS:
                firsts = [r["first_batch_ms"] / entry["best_ms"] for r in entry["runs"] if r["arm"] == arm]
                ratios.append(show(median(firsts), ".2f"))
            table.add_row(model, label[:44], f"{entry['best_ms']:.4f}", str(entry["cold_to_goal"]), *cells, *ratios)
    console.print(table)
    for arm, row in pooled(results, args.trials).items():
        console.print(f"{arm}: median {row['median_ratio']:.1f}x fewer measurements than cold's 256-measurement run "
                      f"to come within 5% of its best (reached in {row['reached']} runs)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "gather":
        gather(args)
    elif args.command == "ship":
        from rlcompile.tvm_bridge import resolve_target

        ship(args, resolve_target(args.target))
    elif args.command == "e2e":
        e2e(args)
    elif args.command == "wins":
        wins(args)
    elif args.command == "report":
        path = args.out / "pretrained.json"
        payload = json.loads(path.read_text())
        atomic.write_json(path, payload | {"pooled": pooled(payload["models"], args.trials)}, indent=1)
        show_table(payload["models"], args)
    else:
        lomo(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
