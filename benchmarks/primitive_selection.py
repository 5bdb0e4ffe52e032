"""The layer level's evaluation: QS-DNN's Table II and Figure 5 (per operator, one thread, as the seed) and
the segment engine end to end (fusion groups, libraries compiled per segment, 2 and 1 threads).

    python benchmarks/primitive_selection.py [--quick] [--part seed|segments|all] [--models lenet5,...]
                                             [--segment-models resnet18,...] [--threads 2,1]
                                             [--seeds 5] [--episodes N] [--out results/primitive_selection]

Segments (``--part segments``): for every zoo model and thread count, ``select_segments`` with
Q-learning: ORT native, OpenVINO native, every single-library plan, Q-learning's plan, the exact
optimum and the returned plan, measured (alternating, one process) and predicted; Q-learning's gap to
the exact optimum and its episodes; the library mix of the returned plan; the timing noise of two
identical sessions of ORT and of OpenVINO in the same run (the larger). Results go to ``segments.json``
as each model finishes; a re-run skips the (model, threads) pairs already there, so a long run can be split or resumed.

Per model: the lookup table (profiled once, then reused), and on it every single library, random
search and Q-learning (same episodes, ``--seeds`` seeds each), greedy and the exact optimum. Reports
each plan's predicted speedup over the NumPy baseline (the plan that uses only the NumPy lowerings
wherever they apply), Q-learning's gap to the exact optimum and the episodes it needed to reach its
final plan, then runs the main plans end to end and times them next to ONNX Runtime on the whole
graph (measured vs predicted). Writes ``primitive_selection.json`` and ``primitive_selection.png``
(best plan vs episodes, Q-learning vs random, mean over seeds). ``--quick``: lenet5 and squeezenet1_1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from rlcompile.layer import solvers
from rlcompile.layer.per_operator import primitives
from rlcompile.layer.per_operator.api import prepare
from rlcompile.layer.per_operator.engine import Engine
from rlcompile.layer.problem import SelectionProblem, best_within_library, exact
from rlcompile.machine import environment
from rlcompile.measure import DEFAULT, QUICK, Contender, run_contest
from rlcompile.models import load_model
from rlcompile.runtimes import RuntimeOptions
from rlcompile.runtimes.ort import OrtRuntime

console = Console(width=170)
MODELS = "lenet5,alexnet,squeezenet1_1,mobilenet_v1,mobilenet_v2,googlenet,resnet18,vgg19"
SEGMENT_MODELS = ("lenet5,squeezenet1_1,mobilenet_v1,mobilenet_v2,resnet18,googlenet,bert_tiny,alexnet,resnet50,"
                  "inception_v3,vgg16,vgg19,bert")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=None, help="default: 20 per layer, at least 500")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--part", default="all", choices=["seed", "segments", "all"])
    parser.add_argument("--segment-models", default=SEGMENT_MODELS)
    parser.add_argument("--threads", default="2,1", help="thread counts of the segment part")
    parser.add_argument("--out", type=Path, default=Path("results/primitive_selection"))
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.seeds, args.segment_models, args.threads = "lenet5,squeezenet1_1", 2, "lenet5,resnet18", "2"
    return args


def searches(problem: SelectionProblem, args: argparse.Namespace) -> dict:
    options = {"episodes": args.episodes} if args.episodes else {}
    runs = {name: [solvers.create(name, **options).solve(problem, seed) for seed in range(args.seeds)]
            for name in ("qlearning", "random")}  # fmt: skip
    return runs


def episodes_to_final(result) -> int | None:
    return result.episodes_to_reach(result.total_ms)


def evaluate_model(name: str, args: argparse.Namespace, timing) -> dict:
    model = load_model(name)
    with primitives.thread_limit(1):
        network, table, path, reused = prepare(model, progress=lambda m: console.log(f"{name}: {m}"))
        problem = SelectionProblem(table)
        optimum = exact(problem)
        libraries = {library: best_within_library(problem, library) for library in table.libraries()}
        baseline_ms = libraries["numpy"][1]
        best_library = min(libraries, key=lambda library: libraries[library][1])
        found = searches(problem, args)
        greedy = solvers.create("greedy").solve(problem)
        plans = {
            "numpy baseline": libraries["numpy"][0],
            f"best single ({best_library})": libraries[best_library][0],
            "greedy": greedy.plan,
            "random (seed 0)": found["random"][0].plan,
            "qlearning (seed 0)": found["qlearning"][0].plan,
            "exact": optimum.plan,
        }  # fmt: skip
        measured = measure_plans(model, network, problem, plans, timing)
    q_totals = [r.total_ms for r in found["qlearning"]]
    r_totals = [r.total_ms for r in found["random"]]
    return {
        "model": name, "layers": len(problem), "table": str(path), "table_reused": reused,
        "predicted_ms": {
            **{f"single {lib}": total for lib, (_, total) in libraries.items()},
            "random (mean of seeds)": statistics.mean(r_totals), "qlearning (mean of seeds)": statistics.mean(q_totals),
            "greedy": greedy.total_ms, "exact": optimum.total_ms,
        },
        "numpy_baseline_ms": baseline_ms,
        "exact_proven_optimal": optimum.proven_optimal,
        "qlearning_gap_to_exact": statistics.mean(q_totals) / optimum.total_ms - 1,
        "qlearning_hit_exact": sum(abs(t - optimum.total_ms) <= 1e-9 * optimum.total_ms for t in q_totals),
        "qlearning_episodes_to_final": [episodes_to_final(r) for r in found["qlearning"]],
        "episodes": found["qlearning"][0].episodes,
        "curves": {kind: np.mean([r.history for r in runs], axis=0).tolist() for kind, runs in found.items()},
        "measured": measured,
    }  # fmt: skip


def measure_plans(model, network, problem, plans, timing) -> dict:
    """Each plan run end to end, timed alternately with ONNX Runtime on the whole graph (1 thread)."""
    feeds = model.random_inputs(0)
    engines = {label: Engine(network, problem.names(plan)) for label, plan in plans.items()}
    session = model.compile(OrtRuntime("all"), RuntimeOptions(1, exclusive=True))
    contenders = [Contender(label, lambda engine=engine: engine.run(feeds)) for label, engine in engines.items()]
    contenders.append(Contender.from_timer("onnxruntime native", session.timed(feeds)))
    standings = run_contest(contenders, timing, rounds=2)
    stats = [standings[contender.label] for contender in contenders]
    result = {label: {"predicted_ms": problem.total(plans[label]), "measured_ms": s.median_ms}
              for label, s in zip(plans, stats, strict=False)}  # fmt: skip
    result["onnxruntime native (whole graph)"] = {"predicted_ms": None, "measured_ms": stats[-1].median_ms}
    return result


def tables(rows: list[dict]) -> tuple[Table, Table]:
    speedups = Table(title="Predicted speedup over the NumPy baseline (seed Table II), single thread")
    columns = list(rows[0]["predicted_ms"])
    for column in ["model", "layers", *columns, "QL gap to exact", "QL = exact (seeds)", "QL episodes to final"]:
        speedups.add_column(column, justify="left" if column == "model" else "right")
    for row in rows:
        base = row["numpy_baseline_ms"]
        cells = [f"{base / row['predicted_ms'][c]:.2f}x" for c in columns]
        speedups.add_row(row["model"], str(row["layers"]), *cells, f"{100 * row['qlearning_gap_to_exact']:.2f}%",
                         f"{row['qlearning_hit_exact']}", str(row["qlearning_episodes_to_final"]))  # fmt: skip
    measured = Table(
        title="Measured end to end vs predicted (ms, median, single thread), ONNX Runtime native alongside"
    )
    for column in ("model", "plan", "predicted", "measured", "measured / ORT native"):
        measured.add_column(column, justify="left" if column in ("model", "plan") else "right")
    for row in rows:
        native = row["measured"]["onnxruntime native (whole graph)"]["measured_ms"]
        for label, values in row["measured"].items():
            predicted = "" if values["predicted_ms"] is None else f"{values['predicted_ms']:.2f}"
            measured.add_row(row["model"], label, predicted, f"{values['measured_ms']:.2f}",
                             f"{values['measured_ms'] / native:.2f}x")  # fmt: skip
    return speedups, measured


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(4, len(rows))
    lines = (len(rows) + columns - 1) // columns
    figure, axes = plt.subplots(lines, columns, figsize=(4 * columns, 3.2 * lines), squeeze=False)
    for axis, row in zip(axes.flat, rows, strict=False):
        for kind, curve in row["curves"].items():
            axis.plot(range(1, len(curve) + 1), curve, label=kind)
        axis.axhline(row["predicted_ms"]["exact"], color="black", linewidth=0.8, linestyle="--", label="exact")
        axis.set_title(row["model"], fontsize=9)
        axis.set_xlabel("episodes")
        axis.set_ylabel("best plan (predicted ms)")
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def evaluate_segments(name: str, threads: int, timing) -> dict:
    """``select_segments`` with Q-learning on one model: every plan measured and predicted, and the natives."""
    from rlcompile.layer.problem import SelectionProblem as Problem
    from rlcompile.layer.selection.api import select_segments

    model = load_model(name)
    selection = select_segments(model, "qlearning", threads=threads, timing=timing,
                                progress=lambda m: console.log(f"{name} ({threads} threads): {m}"))  # fmt: skip
    optimum = exact(Problem(selection.table))
    row = selection.to_dict() | {"model": name, "threads": threads}
    row["qlearning_gap_to_exact"] = selection.result.total_ms / optimum.total_ms - 1
    row["qlearning_episodes_to_final"] = selection.result.episodes_to_reach(selection.result.total_ms)
    row["exact_proven_optimal"] = optimum.proven_optimal
    row.pop("groups")
    row["groups"] = selection.group_rows()
    return row


def segment_rows(args: argparse.Namespace, timing) -> list[dict]:
    """Every (model, threads) of the segment part, resuming from ``segments.json``."""
    path = args.out / "segments.json"
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    done = {(row["model"], row["threads"]) for row in rows}
    for threads in [int(t) for t in args.threads.split(",") if t]:
        for name in [item for item in args.segment_models.split(",") if item]:
            if (name, threads) in done:
                continue
            rows.append(evaluate_segments(name, threads, timing))
            path.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))
    return rows


def segments_table(rows: list[dict]) -> Table:
    table = Table(title="Segment engine end to end: measured ms, median (table prediction x drift), ratios to the "
                  "faster native; noise = two identical sessions (ORT, OpenVINO); drift = ORT native now / at "
                  "calibration")
    columns = ("model", "thr", "ORT native", "OV native", "noise", "drift", "single:ort", "single:openvino",
               "single:torch", "qlearning", "exact", "returned", "returned / best native", "pred. err", "QL gap",
               "returned mix")
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "returned mix") else "right")
    for row in rows:
        natives = row["native_ms"]
        best_native = min(natives.get("ort native", np.inf), natives.get("openvino native", np.inf))
        by_label = {label: c for c in row["candidates"] for label in c["labels"]}

        def cell(label: str, by_label=by_label, row=row) -> str:
            c = by_label.get(label)
            if c is None or c["measured_ms"] is None:
                return "-"
            return f"{c['measured_ms']:.2f} ({c['predicted_ms'] * row['drift']:.2f})"

        chosen = row["chosen"]
        error = chosen["measured_ms"] / (chosen["predicted_ms"] * row["drift"]) - 1
        mix = ", ".join(f"{k} x{v}" for k, v in chosen["library_mix"].items())
        table.add_row(row["model"], str(row["threads"]), f"{natives['ort native']:.2f}",
                      f"{natives.get('openvino native', float('nan')):.2f}", f"{100 * (row['noise'] or 0):.1f}%",
                      f"{row['drift']:.2f}",
                      cell("single:ort"), cell("single:openvino"), cell("single:torch"), cell("qlearning"),
                      cell("exact"), f"{chosen['measured_ms']:.2f} ({', '.join(chosen['labels'])})",
                      f"{chosen['measured_ms'] / best_native:.3f}", f"{100 * error:+.1f}%",
                      f"{100 * row['qlearning_gap_to_exact']:.1f}%", mix)  # fmt: skip
    return table


def wins_table(rows: list[dict]) -> Table:
    """Per model: how many groups each library runs fastest (in-context table times) and what that saves."""
    table = Table(title="Which library wins which fusion groups (table, in context): groups won, ms saved vs ORT")
    for column in ("model", "thr", "ort", "openvino", "torch", "largest single win", "returned plan"):
        left = column in ("model", "largest single win", "returned plan")
        table.add_column(column, justify="left" if left else "right")
    for row in rows:
        won: dict[str, list[float]] = {}
        largest = (0.0, "", "")
        for group in row["groups"]:
            times = group["ms"]
            best = min(times, key=times.get)
            saved = times["ort"] - times[best]
            won.setdefault(best, []).append(saved)
            if saved > largest[0]:
                largest = (saved, best, f"{group['ops']} ({group['group'][-24:]})")
        cells = [f"{len(won.get(name, []))} / {sum(won.get(name, [])):.2f}" for name in ("ort", "openvino", "torch")]
        big = f"{largest[1]}: {largest[2]} -{largest[0]:.3f} ms" if largest[1] else "-"
        table.add_row(row["model"], str(row["threads"]), *cells, big, ", ".join(row["chosen"]["labels"]))
    return table


def plot_segments(rows: list[dict], path: Path) -> None:
    """Measured latency of every plan and native run, relative to the faster native, per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["ort native", "openvino native", "single:ort", "single:openvino", "single:torch", "qlearning", "exact",
              "returned"]  # fmt: skip
    figure, axis = plt.subplots(figsize=(max(8, 1.1 * len(rows)), 4.5))
    width = 0.8 / len(labels)
    for offset, label in enumerate(labels):
        values = []
        for row in rows:
            natives = row["native_ms"]
            best = min(natives["ort native"], natives.get("openvino native", np.inf))
            by_label = {name: c["measured_ms"] for c in row["candidates"] for name in c["labels"]}
            value = {"returned": row["chosen"]["measured_ms"], **natives, **by_label}.get(label)
            values.append(value / best if value else np.nan)
        axis.bar(np.arange(len(rows)) + offset * width, values, width, label=label)
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_xticks(np.arange(len(rows)) + 0.4, [f"{r['model']}\n{r['threads']} thr" for r in rows], fontsize=7)
    axis.set_ylabel("latency / faster native")
    axis.set_ylim(0.6, 2.0)
    axis.legend(fontsize=7, ncol=4)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    timing = QUICK if args.quick else DEFAULT
    if args.part in ("segments", "all"):
        rows = segment_rows(args, timing)
        console.print(segments_table(rows))
        console.print(wins_table(rows))
        plot_segments(rows, args.out / "segments.png")
        console.print(f"wrote {args.out / 'segments.json'} and {args.out / 'segments.png'}")
    if args.part == "segments":
        return 0
    rows = []
    for name in [item for item in args.models.split(",") if item]:
        rows.append(evaluate_model(name, args, timing))
        (args.out / "primitive_selection.json").write_text(
            json.dumps({"arguments": {k: str(v) for k, v in vars(args).items()}, "environment": environment(1),
                        "models": rows}, indent=1))  # fmt: skip
    plot(rows, args.out / "primitive_selection.png")
    for table in tables(rows):
        console.print(table)
    console.print(f"wrote {args.out / 'primitive_selection.json'} and {args.out / 'primitive_selection.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
