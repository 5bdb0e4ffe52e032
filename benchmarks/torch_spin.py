"""How fast and how steady PyTorch's segments run at each spin count of its OpenMP workers (``GOMP_SPINCOUNT``).

    python benchmarks/torch_spin.py --model PATH.onnx [--manifest DIR/manifest.json --label exact]
                                    [--spins 1000,10000,30000] [--repeats 2] [--blocks 8] [--threads 2]
                                    [--out results/torch_spin/NAME]

libgomp reads its spin count once, when it loads, so each spin count runs in a fresh process:
``benchmarks/plan_stability.py`` (its blocks of ORT native then the plan, the plan's time per library in each
block), the spin counts taking turns, ``--repeats`` times, so a slow spell of the machine does not fall on one
spin count alone. The plan is PyTorch wherever it runs and ONNX Runtime elsewhere, or with ``--manifest`` a
candidate of a ``select`` plan directory. Per run: the plan's block medians, ORT native's in the same blocks, their
ratio block by block (ORT native is the yardstick: the same in every run), and the plan's milliseconds per library.

Measured on a 2-core Intel Xeon VM (Emerald Rapids 6/207/2, AVX512-BF16 and VNNI, no AMX exposed):
``results/torch_spin/``. Writes ``torch_spin.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from rlcompile import atomic
from rlcompile.machine import environment

console = Console(width=160)
STABILITY = Path(__file__).with_name("plan_stability.py")


def run_once(args: argparse.Namespace, spin: int) -> dict:
    """One plan_stability run in a fresh process at ``spin``; its blocks summarised."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, str(STABILITY), "--model", args.model, "--threads", str(args.threads),
                   "--blocks", str(args.blocks), "--out", scratch]  # fmt: skip
        if args.manifest is not None:
            command += ["--manifest", str(args.manifest), "--label", args.label]
        done = subprocess.run(command, env=os.environ | {"GOMP_SPINCOUNT": str(spin)}, capture_output=True,
                              text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            return {"spin": spin, "error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
        report = json.loads((Path(scratch) / "plan_stability.json").read_text())
    blocks = report["blocks"]
    plan = np.array([block["plan_median_ms"] for block in blocks])
    native = np.array([block["native_median_ms"] for block in blocks])
    libraries = sorted(blocks[0]["plan_library_ms"])
    return {"spin": spin, "segments": report["segments"], "plan_block_ms": plan.tolist(),
            "native_block_ms": native.tolist(), "plan_median_ms": float(np.median(plan)),
            "native_median_ms": float(np.median(native)), "plan_over_native": float(np.median(plan / native)),
            "plan_spread": float(plan.max() / plan.min()),
            "library_ms": {library: float(np.median([block["plan_library_ms"][library] for block in blocks]))
                           for library in libraries}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--manifest", type=Path, default=None)
    parser.add_argument("--label", default="exact")
    parser.add_argument("--spins", default="1000,10000,30000")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("results/torch_spin"))
    args = parser.parse_args(argv)
    try:
        spins = [int(value) for value in args.spins.split(",")]
    except ValueError:
        print(f"error: --spins takes comma-separated integers, not {args.spins!r}", file=sys.stderr)
        return 2
    if args.repeats < 1 or args.blocks < 1 or not spins:
        print("error: --repeats, --blocks and --spins need at least one", file=sys.stderr)
        return 2
    runs = []
    for repeat in range(args.repeats):
        for spin in spins:
            runs.append(run_once(args, spin) | {"repeat": repeat})
            console.log(f"repeat {repeat + 1}, GOMP_SPINCOUNT={spin}: {runs[-1].get('plan_median_ms', 'failed')}")
    table = Table("GOMP_SPINCOUNT", "repeat", "plan ms (blocks)", "ORT native ms", "plan / native", "per library ms")
    for run in runs:
        if "error" in run:
            table.add_row(str(run["spin"]), str(run["repeat"] + 1), f"failed: {run['error']}", "", "", "")
            continue
        blocks = run["plan_block_ms"]
        table.add_row(str(run["spin"]), str(run["repeat"] + 1),
                      f"{run['plan_median_ms']:.2f} ({min(blocks):.1f}-{max(blocks):.1f})",
                      f"{run['native_median_ms']:.2f}", f"{run['plan_over_native']:.3f}",
                      ", ".join(f"{name} {ms:.2f}" for name, ms in run["library_ms"].items()))  # fmt: skip
    console.print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic.write_json(args.out / "torch_spin.json", {
        "environment": environment(args.threads), "model": args.model,
        "manifest": str(args.manifest) if args.manifest else None, "label": args.label if args.manifest else None,
        "blocks": args.blocks, "runs": runs})  # fmt: skip
    console.print(f"wrote {args.out / 'torch_spin.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
