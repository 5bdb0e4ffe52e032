"""How much each library slows when another program takes a share of one of the CPUs it runs on.

    python benchmarks/shared_cpu.py [--model hf:convnext] [--libraries ort,openvino,torch] [--shares 0.25,0.5]
                                    [--blocks 5] [--calls 6] [--threads 2] [--out results/shared_cpu]

A shared machine's neighbours rarely take a whole CPU: they take part of one, for a while. Here a second process,
pinned to the last CPU this one may use, keeps it busy for ``share`` of every 10 ms (a neighbour, or a hypervisor
running another guest on the vCPU's core). Each library runs the model natively at ``--threads`` threads; every
block times each library quiet and under each share, the libraries in turn (the median of ``--calls`` calls after
one warm call each time), so a change of the machine's own state falls on all of them. Reported: each library's
median over the blocks, and its slowdown under each share beside what a library that hands its work to whichever
thread is free would lose, ``threads / (threads - share)``.

Measured on the 2-core Emerald Rapids VM (``results/shared_cpu``): with a quarter of one CPU taken, ONNX
Runtime and OpenVINO ran hf:convnext 1.19-1.20x slower and PyTorch 1.72x (hf:deit 1.25-1.30x, 1.42x); with half,
1.38-1.54x and 1.86x (hf:deit 1.51-1.64x, 2.10x). PyTorch's OpenMP threads split each operator
into equal static parts, so the thread that shares its CPU finishes last and the others wait for it, where ONNX
Runtime's and OpenVINO's pools hand the remaining work to the free thread. This is why PyTorch's times on the
2-core VMs switch between speeds block by block while the other libraries' move less, and why plans
with PyTorch segments are the ones whose measurement strays from their prediction most.

Writes ``shared_cpu.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from rlcompile import atomic, runtimes
from rlcompile.errors import RlcompileError
from rlcompile.machine import environment
from rlcompile.measure import MeasureConfig, measure_latency
from rlcompile.models import corpus, load_model
from rlcompile.runtimes import RuntimeOptions

console = Console(width=160)
#: the busy/idle cycle of the process that takes a share of a CPU
PERIOD_S = 0.01
#: how long the taking process is given before the libraries are timed beside it
SETTLE_S = 0.2


def take_share(cpu: int, share: float, seconds: float) -> None:
    """Keep ``cpu`` busy ``share`` of every :data:`PERIOD_S` for ``seconds`` (run in its own process)."""
    os.sched_setaffinity(0, {cpu})
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        while time.perf_counter() - started < share * PERIOD_S:
            pass
        time.sleep((1 - share) * PERIOD_S)


def median_ms(call: Callable[[], object], calls: int) -> float:
    """The median of ``calls`` timed calls after one warm call."""
    config = MeasureConfig(warmup=1, min_repeats=calls, min_time_s=0.0, max_repeats=calls)
    return measure_latency(call, config).median_ms


def native_timers(model_name: str, libraries: list[str], threads: int) -> dict[str, Callable[[], object]]:
    model = load_model(corpus.spec_of(model_name))
    feeds = model.random_inputs(0)
    return {name: model.compile(runtimes.create(name), RuntimeOptions(threads, exclusive=True)).timer(feeds)
            for name in libraries}  # fmt: skip


def time_block(timers: dict[str, Callable[[], object]], share: float, cpu: int, calls: int) -> dict[str, float]:
    """Each library's median with ``share`` of ``cpu`` taken by another process (none at 0)."""
    taker = None
    if share > 0:
        taker = subprocess.Popen([sys.executable, __file__, "--take", str(cpu), str(share), "600"])
        time.sleep(SETTLE_S)
    try:
        return {name: median_ms(call, calls) for name, call in timers.items()}
    finally:
        if taker is not None:
            taker.kill()
            taker.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="hf:convnext")
    parser.add_argument("--libraries", default="ort,openvino,torch")
    parser.add_argument("--shares", default="0.25,0.5", help="shares of one CPU the other process takes")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("results/shared_cpu"))
    parser.add_argument("--take", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.take:
        take_share(int(args.take[0]), float(args.take[1]), float(args.take[2]))
        return 0
    try:
        shares = [float(text) for text in args.shares.split(",")]
    except ValueError:
        shares = []
    if not shares or any(not 0 < share < 1 for share in shares) or args.blocks < 1 or args.calls < 1:
        print("error: --shares must be fractions between 0 and 1, --blocks and --calls at least 1", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("error: this process may use one CPU only: nothing to share", file=sys.stderr)
        return 2
    try:
        timers = native_timers(args.model, args.libraries.split(","), args.threads)
    except RlcompileError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    levels = [0.0, *shares]
    times: dict[float, dict[str, list[float]]] = {level: {name: [] for name in timers} for level in levels}
    rng = np.random.default_rng(0)
    for index in range(args.blocks):
        for level in rng.permutation(levels) if index else levels:
            for name, ms in time_block(timers, float(level), cpus[-1], args.calls).items():
                times[float(level)][name].append(ms)
        console.log(f"block {index + 1} of {args.blocks}")
    summary = summarize(times, args.threads)
    show(summary, args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "shared_cpu.json"
    atomic.write_json(path, {"environment": environment(args.threads), "model": args.model, "taken_cpu": cpus[-1],
                             "period_s": PERIOD_S, "calls": args.calls, "summary": summary,
                             "blocks": {str(level): by_library for level, by_library in times.items()}})  # fmt: skip
    console.print(f"wrote {path}")
    return 0


def summarize(times: dict[float, dict[str, list[float]]], threads: int) -> dict:
    """Per library: its median quiet, and under each share its median and slowdown, beside a balanced pool's."""
    quiet = {name: float(np.median(blocks)) for name, blocks in times[0.0].items()}
    result = {}
    for name, quiet_ms in quiet.items():
        shares = {}
        for level, by_library in times.items():
            if level > 0:
                ms = float(np.median(by_library[name]))
                shares[str(level)] = {"ms": ms, "slowdown": ms / quiet_ms, "balanced": threads / (threads - level)}
        result[name] = {"quiet_ms": quiet_ms, "shares": shares}
    return result


def show(summary: dict, model: str) -> None:
    table = Table(title=f"{model}: each library natively, with part of one CPU taken by another process")
    table.add_column("library")
    table.add_column("quiet ms")
    levels = list(next(iter(summary.values()))["shares"])
    for level in levels:
        table.add_column(f"{float(level):.0%} of a CPU taken: ms (x slower; balanced pool x)")
    for name, row in summary.items():
        cells = [f"{row['shares'][level]['ms']:.1f} (x{row['shares'][level]['slowdown']:.2f}; "
                 f"x{row['shares'][level]['balanced']:.2f})" for level in levels]  # fmt: skip
        table.add_row(name, f"{row['quiet_ms']:.1f}", *cells)
    console.print(table)


if __name__ == "__main__":
    sys.exit(main())
