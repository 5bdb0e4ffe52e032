"""ONNX Runtime vs untuned TVM over the model zoo, side by side per model, in one process.

    python benchmarks/zoo_backends.py [--quick] [--models a,b] [--backends ort,tvm] [--out results/zoo_backends]

Writes ``zoo_backends.json`` (every measurement with environment metadata) and ``zoo_backends.png``
(median latency per model and backend, log scale) to the output folder, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlcompile import runtimes
from rlcompile.compare import compare_backends
from rlcompile.errors import RlcompileError
from rlcompile.machine import environment
from rlcompile.measure import DEFAULT, QUICK
from rlcompile.models import ZOO, load_model

console = Console(width=160)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(name for name in ZOO if name != "bert_tiny"))
    parser.add_argument("--backends", default="ort,tvm", help="the first is the reference")
    parser.add_argument("--quick", action="store_true", help="short timing (for a smoke run)")
    parser.add_argument("--out", type=Path, default=Path("results/zoo_backends"))
    return parser.parse_args(argv)


def plot(rows: list[dict], names: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = [row["model"] for row in rows]
    positions = np.arange(len(models))
    width = 0.8 / len(names)
    figure, axes = plt.subplots(figsize=(max(6, 1.1 * len(models)), 4.5))
    for index in range(len(names)):
        medians = [row["results"][index]["latency"]["median_ms"] for row in rows]
        axes.bar(positions + index * width, medians, width, label=rows[0]["results"][index]["backend"])
    axes.set_yscale("log")
    axes.set_ylabel("median latency (ms, log scale)")
    axes.set_xticks(positions + width * (len(names) - 1) / 2, models, rotation=30, ha="right")
    axes.set_title(f"Batch-1 inference on {rows[0]['environment']['cpu']}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n for n in args.backends.split(",") if n]
    config = QUICK if args.quick else DEFAULT
    args.out.mkdir(parents=True, exist_ok=True)
    rows, failures = [], {}
    table = Table(title="ONNX Runtime vs TVM (untuned), batch 1")
    for column in ("model", *[f"{n} median ms" for n in names], "ratio", "max rel err", "TVM build s"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for model_name in args.models.split(","):
        started = time.perf_counter()
        try:
            model = load_model(model_name)
            comparison = compare_backends(model, [runtimes.create(n) for n in names], config,
                                          progress=lambda m, name=model_name: console.log(f"{name}: {m}"))  # fmt: skip
        except RlcompileError as error:
            failures[model_name] = str(error)
            console.log(f"[red]{model_name}: {error}")
            continue
        row = comparison.to_dict() | {"wall_seconds": time.perf_counter() - started}
        rows.append(row)
        last = comparison.results[-1]
        table.add_row(
            model_name,
            *[f"{r.latency.median_ms:.2f}" for r in comparison.results],
            f"{comparison.ratio(last):.2f}x",
            f"{last.agreement.max_rel:.1e}" if last.agreement else "",
            f"{last.prepare_seconds:.1f}",
        )
    console.print(table)
    payload = {"benchmark": "zoo_backends", "config": vars(args) | {"out": str(args.out)}, "measure": config.__dict__,
               "environment": environment(), "models": rows, "failures": failures}  # fmt: skip
    (args.out / "zoo_backends.json").write_text(json.dumps(payload, indent=1))
    if rows:
        plot(rows, names, args.out / "zoo_backends.png")
    console.print(f"wrote {args.out / 'zoo_backends.json'} and {args.out / 'zoo_backends.png'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
