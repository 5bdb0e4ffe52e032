"""How fast and how steady a TVM build runs at each spin count of TVM's runtime pool (``TVM_THREAD_POOL_SPIN_COUNT``).

    python benchmarks/tvm_spin.py ARTEFACT.tar [--spins 0,1000,10000] [--repeats 2] [--blocks 20]
                                  [--out results/tvm_spin/NAME]

TVM reads its spin count when its pool starts, so each spin count runs in a fresh process (this script again,
with ``--child``), the spin counts taking turns, ``--repeats`` times. Per run: ``--blocks`` block medians of the
artefact (``rlcompile build``'s output; rlcompile's quick timing per block), the voluntary context switches a call
(each is a worker that went to sleep and had to be woken), and the CPU time the process burns in the 50 ms after a
call (what the spinning workers cost whoever runs next). Writes ``tvm_spin.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from rlcompile import atomic
from rlcompile.machine import environment

console = Console(width=160)


def child(artefact: str, blocks: int) -> dict:
    """This process's measurements of ``artefact`` (the spin count is its environment's)."""
    from rlcompile.measure import QUICK, measure_latency
    from rlcompile.saved import load_saved

    saved = load_saved(artefact)
    call = saved.timed(saved.reference_inputs).call
    medians = [measure_latency(call, QUICK).median_ms for _ in range(blocks)]
    switches_before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    for _ in range(200):
        call()
    switches = (resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches_before) / 200
    after = []
    for _ in range(20):
        call()
        started = time.process_time()
        time.sleep(0.05)
        after.append((time.process_time() - started) * 1e3)
    return {"block_ms": medians, "median_ms": float(np.median(medians)),
            "spread": float(max(medians) / min(medians)), "sleeps_per_call": switches,
            "cpu_ms_after_call": float(np.median(after))}  # fmt: skip


def run_once(artefact: str, spin: int, blocks: int) -> dict:
    """One child run at ``spin``."""
    command = [sys.executable, __file__, artefact, "--child", "--blocks", str(blocks)]
    done = subprocess.run(command, env=os.environ | {"TVM_THREAD_POOL_SPIN_COUNT": str(spin)}, capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        return {"spin": spin, "error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    return {"spin": spin} | json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artefact")
    parser.add_argument("--spins", default="0,1000,10000")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("results/tvm_spin"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.artefact, args.blocks)))
        return
    spins = [int(item) for item in args.spins.split(",")]
    runs = [run_once(args.artefact, spin, args.blocks) for _ in range(args.repeats) for spin in spins]
    table = Table("spin", "median ms", "block spread", "sleeps a call", "CPU ms after a call")
    for run in runs:
        if "error" in run:
            table.add_row(str(run["spin"]), "failed: " + " ".join(run["error"]), "", "", "")
            continue
        table.add_row(str(run["spin"]), f"{run['median_ms']:.3f}", f"{run['spread']:.2f}",
                      f"{run['sleeps_per_call']:.2f}", f"{run['cpu_ms_after_call']:.2f}")  # fmt: skip
    console.print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"artefact": args.artefact, "blocks": args.blocks, "runs": runs, "environment": environment()}
    atomic.write_text(args.out / "tvm_spin.json", json.dumps(report, indent=1))
    console.print(f"wrote {args.out / 'tvm_spin.json'}")


if __name__ == "__main__":
    main()
