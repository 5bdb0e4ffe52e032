"""Tuning throughput: time to the first measurement and measurements per minute, per build pool.

    python benchmarks/tune_throughput.py [--model resnet18] [--strategy sa] [--trials 64] [--repeats 2]
                                         [--pools per-batch,persistent] [--out results/tune_throughput]

Each run is a fresh process with a fresh work directory, exactly as a user's first ``rlcompile tune``:
interpreter start, model import, task extraction, measurer start-up, search, builds and runs all count.
The pools alternate (per-batch, persistent, per-batch, ...) with the same seed, so both see the same
machine state. ``per-batch`` is TVM's ``LocalBuilder`` (a fresh worker pool for every batch);
``persistent`` keeps the build workers for the whole run. Times come from the journal's ``at`` stamps.
Output: ``tune_throughput.json`` with every run and the medians per pool.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console(width=140)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--strategy", default="sa")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2, help="runs per pool, alternating")
    parser.add_argument("--pools", default="per-batch,persistent")
    parser.add_argument("--out", type=Path, default=Path("results/tune_throughput"))
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one run in this process: the build pool's name
    parser.add_argument("--work-dir", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def child(args: argparse.Namespace) -> None:
    """One tuning run (in a fresh process, started by :func:`one_run`)."""
    from rlcompile.kernel.api import TuneRequest, tune
    from rlcompile.kernel.measurer import MeasureSettings

    request = TuneRequest(model=args.model, work_dir=args.work_dir, strategy=args.strategy, trials=args.trials,
                          batch_size=args.batch_size, seed=args.seed)  # fmt: skip
    tune(request, settings=MeasureSettings(build_pool=args.child))


def one_run(args: argparse.Namespace, pool: str) -> dict:
    """Launch a child run and read its journal: when each measurement was recorded, from the launch."""
    with tempfile.TemporaryDirectory(prefix="rlcompile-throughput-") as scratch:
        work_dir = Path(scratch) / "work"
        command = [sys.executable, __file__, "--child", pool, "--work-dir", str(work_dir), "--model", args.model,
                   "--agent", args.strategy, "--trials", str(args.trials), "--batch-size", str(args.batch_size),
                   "--seed", str(args.seed)]  # fmt: skip
        launched = time.time()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        ended = time.time()
        lines = (work_dir / "measurements.jsonl").read_text().splitlines()
        stamps = sorted(json.loads(line)["at"] - launched for line in lines)
    first = stamps[0]
    batches = sorted(set(stamps))
    steady = (len(stamps) - stamps.count(first)) / (stamps[-1] - first) * 60 if len(batches) > 1 else None
    return {"pool": pool, "measurements": len(stamps), "first_measurement_s": first, "total_s": ended - launched,
            "per_minute_overall": len(stamps) / (stamps[-1]) * 60, "per_minute_after_first": steady,
            "batch_done_s": batches}  # fmt: skip


SUMMARY_KEYS = ("first_measurement_s", "per_minute_overall", "per_minute_after_first", "total_s")


def summarise(runs: list[dict], pools: list[str]) -> dict:
    """Per pool and key, the median and range over the runs (None where no run got that far)."""
    from rlcompile.kernel.experiments import spread

    return {pool: {key: spread([r[key] for r in runs if r["pool"] == pool]) for key in SUMMARY_KEYS}
            for pool in pools}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args)
        return 0
    from rlcompile import atomic
    from rlcompile.kernel.experiments import show_spread
    from rlcompile.machine import environment

    pools = args.pools.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for repeat in range(args.repeats):
        for pool in pools:
            console.log(f"run {repeat + 1}/{args.repeats}: {pool} pool, {args.model}, {args.trials} trials")
            runs.append(one_run(args, pool))
            summary = summarise(runs, pools[: len({r['pool'] for r in runs})])
            payload = {"benchmark": "tune_throughput", "args": {k: str(v) for k, v in vars(args).items()},
                       "environment": environment(), "runs": runs, "summary": summary}  # fmt: skip
            atomic.write_json(args.out / "tune_throughput.json", payload, indent=1)
    table = Table(title=f"rlcompile tune {args.model} --strategy {args.strategy} --trials {args.trials}, "
                  f"median (range) of {args.repeats} fresh runs")  # fmt: skip
    for column in ("build pool", "first measurement s", "measurements/min overall", "after first batch", "total s"):
        table.add_column(column, justify="right")
    for pool, row in summary.items():
        table.add_row(pool, *(show_spread(row[key], ".1f") for key in SUMMARY_KEYS))
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
