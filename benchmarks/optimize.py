"""``rlcompile optimize`` over the zoo and models this project did not produce, at one budget.

    python benchmarks/optimize.py [--budget 4m] [--models lenet5,...,ocr-det] [--threads N]
                                  [--out results/optimize]

Per model: ``rlcompile optimize MODEL --budget B -o OUT/runs/MODEL`` (the command a user runs, in its
own process), then ``rlcompile compare MODEL --runtimes ort,tvm`` for untuned TVM. Reported: ORT native
and OpenVINO native on the original model, the output after each stage (graph only, + kernel,
+ layer: all from the layer stage's one alternating measurement), untuned TVM / ORT, each stage's
wall time, agreement with ONNX Runtime, the noise of identical sessions in the same run, and the
verdict: the output is never slower than the faster native beyond that noise. Results go to
``optimize.json`` as each model finishes; a re-run skips the models already there (and ``optimize``
itself resumes a model it had started), so a long run can be split with ``--models`` and merged.
Writes ``optimize.png``: speed-up of the output over the faster native per model, with the noise.
"vs ORT" is ONNX Runtime native / the output: what a user who runs ORT today gains.

Foreign models: PaddleOCR's detector, recogniser and direction classifier shipped in the
``rapidocr-onnxruntime`` wheel, loaded by name (``rlcompile.models.packaged``: dynamic inputs fixed to
the shapes given there).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlcompile.models.packaged import PACKAGED

console = Console(width=180)
ZOO_MODELS = ("lenet5,squeezenet1_1,mobilenet_v1,mobilenet_v2,resnet18,bert_tiny,googlenet,alexnet,resnet50,"
              "inception_v3,vgg16,vgg19,bert")  # fmt: skip
#: models this project did not produce, loaded by name from their wheel (rlcompile.models.packaged)
FOREIGN = tuple(PACKAGED)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join([ZOO_MODELS, *FOREIGN]))
    parser.add_argument("--budget", default="4m", help="optimize's --budget per model (default 4m, as --quick)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("results/optimize"))
    parser.add_argument("--redo", default="", help="models to run again from scratch (their output is deleted)")
    return parser.parse_args(argv)


def run(command: list[str], log: Path) -> int:
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        return subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False).returncode


def evaluate(name: str, args: argparse.Namespace) -> dict:
    runs = args.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    output, log = runs / name, runs / f"{name}.log"
    threads = ["--threads", str(args.threads)] if args.threads else []
    started = time.monotonic()
    status = run(["rlcompile", "optimize", name, "-o", str(output), "--budget", args.budget,
                  *threads], log)  # fmt: skip
    wall = time.monotonic() - started
    if status != 0:
        return {"model": name, "error": f"optimize exited {status}; see {log}", "wall_s": wall}
    manifest = json.loads((output / "manifest.json").read_text())
    untuned = runs / f"{name}.tvm.json"
    if not untuned.exists():
        run(["rlcompile", "compare", name, "--runtimes", "ort,tvm", "--quick",
             "--json", str(untuned)], log)  # fmt: skip
    return summarize(name, manifest, untuned, wall)


def summarize(name: str, manifest: dict, untuned: Path, wall: float) -> dict:
    run = manifest["optimize"]
    latency, stages = run["latency"], run["stages"]
    noise = latency["noise"] or 0.0
    tvm_ratio = None
    if untuned.exists():
        results = json.loads(untuned.read_text())["results"]
        tvm_ratio = results[1].get("ratio_to_reference") if len(results) > 1 else None
    return {
        "model": name,
        "ort_native_ms": latency["native_ms"].get("ort native"),
        "openvino_native_ms": latency["native_ms"].get("openvino native"),
        "original_ms": latency["original_ms"],
        "after_graph_ms": latency["after_graph_ms"],
        "after_kernel_ms": latency["after_kernel_ms"],
        "final_ms": latency["final_ms"],
        "speedup": latency["speedup"],
        "noise": noise,
        "never_slower": latency["final_ms"] <= latency["original_ms"] * (1 + noise),
        "untuned_tvm_over_ort": tvm_ratio,
        "chosen": stages["layer"]["chosen"],
        "segments": stages["layer"]["segments"],
        "library_mix": stages["layer"]["library_mix"],
        "graph_kept": stages.get("graph", {}).get("kept"),
        "graph_reason": stages.get("graph", {}).get("reason"),
        "kernel_tuned": stages.get("kernel", {}).get("tuned_tasks"),
        "kernel_tasks": stages.get("kernel", {}).get("tasks"),
        "kernel_trials": stages.get("kernel", {}).get("trials"),
        "stage_wall_s": {stage: record.get("wall_s") for stage, record in stages.items()},
        "optimize_wall_s": run["wall_s"],
        "wall_s": wall,
        "max_rel_err": (latency.get("agreement") or {}).get("max_rel"),
    }


def table(rows: list[dict]) -> Table:
    result = Table(title="optimize: the output vs the faster of ORT and OpenVINO native (ms, medians)")
    columns = ("model", "ORT", "OpenVINO", "+graph", "+kernel", "output", "vs ORT", "speed-up", "noise", "never slower",
               "untuned TVM/ORT", "chosen", "wall s (graph/kernel/layer)")  # fmt: skip
    for column in columns:
        result.add_column(column, justify="left" if column in ("model", "chosen") else "right")
    for row in rows:
        if "error" in row:
            result.add_row(row["model"], *[""] * (len(columns) - 2), row["error"])
            continue
        walls = "/".join(f"{row['stage_wall_s'].get(s) or 0:.0f}" for s in ("graph", "kernel", "layer"))
        tvm = f"{row['untuned_tvm_over_ort']:.1f}x" if row["untuned_tvm_over_ort"] else "-"
        result.add_row(row["model"], f"{row['ort_native_ms']:.3f}", f"{row['openvino_native_ms']:.3f}",
                       f"{row['after_graph_ms']:.3f}", f"{row['after_kernel_ms']:.3f}", f"{row['final_ms']:.3f}",
                       f"{row['ort_native_ms'] / row['final_ms']:.2f}x", f"{row['speedup']:.3f}x",
                       f"{100 * row['noise']:.1f}%", "yes" if row["never_slower"] else "NO", tvm,
                       ", ".join(row["chosen"]), walls)  # fmt: skip
    return result


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in rows if "error" not in row]
    figure, axis = plt.subplots(figsize=(max(6, 0.7 * len(rows)), 4))
    names = [row["model"] for row in rows]
    axis.bar(names, [row["speedup"] for row in rows], color="tab:blue", label="output / faster native")
    axis.errorbar(names, [1.0] * len(rows), yerr=[row["noise"] for row in rows], fmt="none", ecolor="gray",
                  capsize=4, label="noise of identical sessions")  # fmt: skip
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_ylabel("speed-up over the faster of ORT / OpenVINO native")
    axis.tick_params(axis="x", rotation=45)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "optimize.json"
    saved = json.loads(path.read_text()) if path.exists() else {"budget": args.budget, "models": {}}
    from rlcompile.machine import environment

    saved["environment"] = environment(args.threads)
    for name in [m.strip() for m in args.redo.split(",") if m.strip()]:
        saved["models"].pop(name, None)
        shutil.rmtree(args.out / "runs" / name, ignore_errors=True)
        for stale in (args.out / "runs").glob(f"{name}.*"):
            stale.unlink()
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name in saved["models"] and "error" not in saved["models"][name]:
            console.log(f"{name}: already in {path}")
            continue
        console.log(f"{name}: optimize --budget {args.budget}")
        saved["models"][name] = evaluate(name, args)
        path.write_text(json.dumps(saved, indent=1))
        console.print(table([saved["models"][name]]))
    rows = list(saved["models"].values())
    console.print(table(rows))
    plot(rows, args.out / "optimize.png")
    console.log(f"wrote {path} and {args.out / 'optimize.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
