"""What a library switch costs, with every library's own idle-thread policy and with rlcompile's.

    python benchmarks/library_switch.py [--model resnet18] [--threads 2] [--libraries ort,openvino,torch]
                                        [--out results/library_switch]

The model's fusion groups are cut in two halves. For every ordered pair of libraries (A, B), the first
half runs as one A segment and the second as one B segment; the switch costs
``time(A then B) - time(A alone) - time(B alone)``, each timed in its own loop (median), the three
alternated over two rounds. Each setting runs in a fresh process, because the OpenMP and TVM spin
controls are read when those libraries load:

- ``spinning`` (``RLCOMPILE_SPIN=1``): every library's default (ORT workers spin after a run, libgomp
  spins 300000 iterations);
- ``quiet`` (rlcompile's default): ORT ``session.force_spinning_stop``, ``GOMP_SPINCOUNT=10000``,
  ``TVM_THREAD_POOL_SPIN_COUNT=1000``.

Writes ``library_switch.json`` and prints the table (ms per switch, and the two halves' times).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console(width=160)
SETTINGS = {"spinning": {"RLCOMPILE_SPIN": "1"}, "quiet": {}}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--libraries", default="ort,openvino,torch")
    parser.add_argument("--out", type=Path, default=Path("results/library_switch"))
    parser.add_argument("--measure-here", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def measure_here(args: argparse.Namespace) -> dict:
    """In this process: the switch cost of every ordered pair of libraries."""
    from rlcompile import runtimes
    from rlcompile.layer.group_table import group_model
    from rlcompile.layer.segments import SegmentEngine, cut_segments
    from rlcompile.measure import MeasureConfig
    from rlcompile.models import load_model

    timing = MeasureConfig(warmup=3, min_repeats=20, min_time_s=0.5, max_time_s=10.0)
    grouped = group_model(load_model(args.model))
    half = len(grouped.groups) // 2
    names = [name for name in args.libraries.split(",") if name]
    created = {name: runtimes.create(name) for name in names}
    results = {}
    for first in names:
        for second in names:
            segments = cut_segments(grouped.groups, ["A"] * half + ["B"] * (len(grouped.groups) - half),
                                    grouped.outputs)  # fmt: skip
            grouped.extractor.attach(segments)
            segments[0].library, segments[1].library = first, second
            engine = SegmentEngine.compile(segments, grouped.inputs, grouped.outputs, args.threads, created)
            results[f"{first}->{second}"] = switch_cost(engine, grouped.examples, timing)
    return {"environment_variables": {k: os.environ.get(k) for k in ("RLCOMPILE_SPIN", "GOMP_SPINCOUNT",
            "TVM_THREAD_POOL_SPIN_COUNT")}, "pairs": results}  # fmt: skip


def switch_cost(engine, examples: dict, timing) -> dict:
    """Two segments run in turn, against each one alone (alternating, two rounds)."""
    from rlcompile.measure import Contender, run_contest

    head, tail = engine.compiled
    head_inputs = [examples[name] for name in head.segment.inputs]
    tail_inputs = [examples[name] for name in tail.segment.inputs]
    feeds = {name: examples[name] for name in engine.inputs}
    contenders = [Contender("both", lambda: engine.run(feeds), wind_down_s=engine.wind_down_s),
                  Contender("head", lambda: head.runner(head_inputs), wind_down_s=head.runner.wind_down_s),
                  Contender("tail", lambda: tail.runner(tail_inputs), wind_down_s=tail.runner.wind_down_s)]
    standings = run_contest(contenders, timing, rounds=2)
    both, alone_head, alone_tail = standings["both"], standings["head"], standings["tail"]
    return {
        "switch_ms": both.median_ms - alone_head.median_ms - alone_tail.median_ms,
        "pair_ms": both.median_ms,
        "first_half_ms": alone_head.median_ms,
        "second_half_ms": alone_tail.median_ms,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.measure_here:
        print(json.dumps(measure_here(args)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {}
    for setting, variables in SETTINGS.items():
        console.log(f"measuring with {setting} idle threads in a fresh process")
        environment = {k: v for k, v in os.environ.items() if k not in ("RLCOMPILE_SPIN", "GOMP_SPINCOUNT")} | variables
        command = [sys.executable, __file__, "--measure-here", "--model", args.model, "--threads", str(args.threads),
                   "--runtimes", args.libraries]  # fmt: skip
        output = subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout
        settings[setting] = json.loads(output.strip().splitlines()[-1])
    from rlcompile.machine import environment as machine

    (args.out / "library_switch.json").write_text(json.dumps({"model": args.model, "threads": args.threads,
                                                              "environment": machine(args.threads),
                                                              "settings": settings}, indent=1))  # fmt: skip
    table = Table(title=f"Cost of one library switch, {args.model} halves, {args.threads} threads (ms, median)")
    for column in ("A -> B", *[f"{s} switch" for s in settings], *[f"{s} A+B alone" for s in settings]):
        table.add_column(column, justify="left" if column == "A -> B" else "right")
    for pair in settings["quiet"]["pairs"]:
        cells = [f"{settings[s]['pairs'][pair]['switch_ms']:+.3f}" for s in settings]
        cells += [f"{settings[s]['pairs'][pair]['first_half_ms'] + settings[s]['pairs'][pair]['second_half_ms']:.2f}"
                  for s in settings]  # fmt: skip
        table.add_row(pair, *cells)
    console.print(table)
    console.print(f"wrote {args.out / 'library_switch.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
