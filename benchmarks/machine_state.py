"""Whether a library's speed moves with the machine's state, and with which part of the machine.

    python benchmarks/machine_state.py [--model ocr-det] [--seconds 120] [--threads 2]
                                       [--out results/machine_state]

For ``--seconds``, in blocks of about a second: ONNX Runtime and OpenVINO run the model natively (each the
median of ``--calls`` timed calls after one warm call, the two alternating), then the machine itself is probed
the way numpy sees it: a one-thread float32 matmul pinned to each CPU in turn (its GFLOPS: the cores' compute),
a matmul on all the process's CPUs, small (mostly the threads synchronising) and large (compute),
one read of an array that fits the last-level cache and of one that does not (GB/s: cache and memory
bandwidth), and a fill of freshly allocated memory (GB/s: page faults). A block is *slow* when ORT took more than
:data:`SLOW` times its median over the blocks in the fast cluster (the blocks within :data:`SLOW` of its
fastest block).

Measured on the 2-core Zen 4 VM (``results/machine_state``, 150 s): ORT ran ocr-det at 12 or 24 ms
in spells of 10-70 s (124 of 350 blocks slow), OpenVINO at 8.3 or 12.1 ms in the same blocks; in those blocks
a BLAS matmul on both CPUs ran 0.53x as fast (128x128, mostly synchronisation) and 0.70x (384x384), while
each CPU alone, the cache and memory bandwidth and page faults did not move (1.00, 1.00, 0.99, 1.00). So what
slows is the two CPUs working together (handing work to each other), not either CPU: the host's placement of
the VM's two CPUs, outside the process. Every ORT session of a process switches together, spinning or not,
arena or not, and its memory-bound operators (short, synchronisation-heavy) slow 2.5-4.5x, its convolutions
1.3x (ORT's profiler). A prediction judged across such a spell is off by up to 2x whatever the model.

Writes ``machine_state.json`` (every block, the environment and the summary) and ``machine_state.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console

from rlcompile import atomic, runtimes
from rlcompile.machine import environment
from rlcompile.models import corpus, load_model
from rlcompile.runtimes import RuntimeOptions
from rlcompile.threads import quiet_idle_threads

console = Console(width=160)
#: A block slower than this times the fast blocks' median is slow.
SLOW = 1.5
#: numpy's arrays: one that stays in a Zen 4 CCD's 32 MB L3 beside the model, and one that does not.
CACHE_MB, MEMORY_MB = 12, 96
MATMUL_N = 384
#: a matmul this small is mostly the BLAS threads synchronising
SMALL_N = 128


def median_ms(call: Callable[[], object], calls: int) -> float:
    call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append(1e3 * (time.perf_counter() - started))
    return float(np.median(samples))


def core_gflops(cpu: int, matrix: np.ndarray) -> float:
    """One thread's matmul GFLOPS pinned to ``cpu`` (BLAS held to one thread; the CPU set is restored after)."""
    from threadpoolctl import threadpool_limits

    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        with threadpool_limits(1, user_api="blas"):
            seconds = []
            for _ in range(30):
                started = time.perf_counter()
                matrix @ matrix
                seconds.append(time.perf_counter() - started)
    finally:
        os.sched_setaffinity(0, allowed)
    return 2 * matrix.shape[0] ** 3 / float(np.median(seconds)) / 1e9


def threads_gflops(matrix: np.ndarray, calls: int) -> float:
    """BLAS matmul GFLOPS on every CPU of the process: a small matrix is dominated by the threads' handing work
    to each other (cross-core synchronisation), a large one by compute."""
    seconds = []
    for _ in range(calls):
        started = time.perf_counter()
        matrix @ matrix
        seconds.append(time.perf_counter() - started)
    return 2 * matrix.shape[0] ** 3 / float(np.median(seconds)) / 1e9


def read_gbps(array: np.ndarray, reads: int) -> float:
    seconds = []
    for _ in range(reads):
        started = time.perf_counter()
        array.sum()
        seconds.append(time.perf_counter() - started)
    return array.nbytes / float(np.median(seconds)) / 1e9


def fill_gbps(megabytes: int) -> float:
    """Fresh memory filled once: what a run that allocates its activations anew pays in page faults."""
    seconds = []
    for _ in range(5):
        started = time.perf_counter()
        np.ones(megabytes * 2**20 // 8)
        seconds.append(time.perf_counter() - started)
    return megabytes * 2**20 / float(np.median(seconds)) / 1e9


def natives(model_name: str, threads: int) -> dict[str, Callable[[], object]]:
    model = load_model(corpus.spec_of(model_name))
    feeds = model.random_inputs(0)
    return {name: model.compile(runtimes.create(name), RuntimeOptions(threads, exclusive=True)).timer(feeds)
            for name in ("ort", "openvino")}  # fmt: skip


def block(calls: dict[str, Callable[[], object]], per_block: int, probes: dict) -> dict:
    row = {f"{name}_ms": median_ms(call, per_block) for name, call in calls.items()}
    for cpu in sorted(os.sched_getaffinity(0)):
        row[f"cpu{cpu}_gflops"] = core_gflops(cpu, probes["matrix"])
    row["threads_small_gflops"] = threads_gflops(probes["small"], 400)
    row["threads_large_gflops"] = threads_gflops(probes["matrix"], 40)
    row["cache_read_gbps"] = read_gbps(probes["cache"], 20)
    row["memory_read_gbps"] = read_gbps(probes["memory"], 5)
    row["fresh_fill_gbps"] = fill_gbps(32)
    return row


def summarize(rows: list[dict]) -> dict:
    """Slow blocks (ORT beyond :data:`SLOW` x the fast cluster's median) and every probe's median in each kind."""
    ort = np.array([row["ort_ms"] for row in rows])
    fast_cluster = ort[ort <= SLOW * ort.min()]
    slow = ort > SLOW * float(np.median(fast_cluster))
    keys = [key for key in rows[0] if key not in ("t",)]
    summary = {"blocks": len(rows), "slow_blocks": int(slow.sum()), "slow_share": float(slow.mean()), "metrics": {}}
    for key in keys:
        values = np.array([row[key] for row in rows])
        fast_median = float(np.median(values[~slow])) if (~slow).any() else None
        slow_median = float(np.median(values[slow])) if slow.any() else None
        ratio = slow_median / fast_median if fast_median and slow_median else None
        summary["metrics"][key] = {"fast": fast_median, "slow": slow_median, "slow_over_fast": ratio}
    return summary


def plot(rows: list[dict], path: Path, model_name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [row["t"] for row in rows]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for key, label in (("ort_ms", "ONNX Runtime"), ("openvino_ms", "OpenVINO")):
        top.plot(t, [row[key] for row in rows], label=label)
    top.set_ylabel(f"{model_name} ms (median per block)")
    top.legend()
    for key in [key for key in rows[0] if key.endswith(("gflops", "gbps"))]:
        first = np.median([row[key] for row in rows])
        bottom.plot(t, [row[key] / first for row in rows], label=key)
    bottom.set_ylabel("machine probe / its median")
    bottom.set_xlabel("seconds")
    bottom.legend(fontsize=7, ncol=3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="ocr-det")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=8, help="timed calls per library per block")
    parser.add_argument("--out", type=Path, default=Path("results/machine_state"))
    args = parser.parse_args(argv)
    quiet_idle_threads()
    calls = natives(args.model, args.threads)
    rng = np.random.default_rng(0)
    probes = {"matrix": rng.random((MATMUL_N, MATMUL_N), dtype=np.float32),
              "small": rng.random((SMALL_N, SMALL_N), dtype=np.float32),
              "cache": np.ones(CACHE_MB * 2**20 // 8), "memory": np.ones(MEMORY_MB * 2**20 // 8)}  # fmt: skip
    rows, started = [], time.monotonic()
    while time.monotonic() - started < args.seconds:
        rows.append(block(calls, args.calls, probes) | {"t": time.monotonic() - started})
        if len(rows) % 10 == 0:
            console.log(" ".join(f"{key} {value:.1f}" for key, value in rows[-1].items()))
    summary = summarize(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic.write_json(args.out / "machine_state.json", {"environment": environment(args.threads),
                                                        "model": args.model, "summary": summary, "blocks": rows},
                      indent=1)  # fmt: skip
    plot(rows, args.out / "machine_state.png", args.model)
    console.print(f"{summary['slow_blocks']} of {summary['blocks']} blocks slow (ORT > {SLOW}x its fast median)")
    nan = float("nan")
    for key, values in summary["metrics"].items():
        fast, slow, ratio = (values[name] or nan for name in ("fast", "slow", "slow_over_fast"))
        console.print(f"  {key:18s} fast {fast:8.2f}  slow {slow:8.2f}  slow/fast {ratio:.2f}")
    console.log(f"wrote {args.out / 'machine_state.json'} and {args.out / 'machine_state.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
