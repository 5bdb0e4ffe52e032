"""This CPU's FP32 peak, oneDNN on the seed layers, and how close the tuned kernels come to both.

    python benchmarks/cpu_peak.py [--threads 1,2] [--layers L1,...,L8] [--out results/cpu_peak]

A latency in ms says little across machines; a fraction of the machine's peak says whether a tuned
kernel is plausible (above 100% would mean a wrong FLOP count or a wrong timing). Three numbers:

* the FMA peak: independent fused multiply-add chains in the widest vectors the CPU has (AVX-512 or
  AVX2, read from /proc/cpuinfo), compiled with the system C compiler and OpenMP, best of 5, for each
  thread count;
* torch ``conv2d`` (oneDNN) on each seed layer, 2 threads (or ``--threads``' largest), median of 15;
* the best latency each strategy reached in ``results/chameleon/chameleon.json``, when it exists.

Output: ``cpu_peak.json``. Exit 2 with one line when no C compiler is found.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rlcompile import atomic
from rlcompile.errors import RlcompileError
from rlcompile.kernel.tasks import SEED_LAYERS, zoo_conv_shapes
from rlcompile.machine import environment
from rlcompile.peak import QUICK_ITERATIONS, measure_fma_peak, vector_isa


def fma_peak(threads: list[int]) -> dict:
    """GFLOP/s of the FMA loop per thread count (the package's loop, 5x its default length)."""
    return {"isa": vector_isa(), "gflops_by_threads": {str(count): value for count, value in
                                                       measure_fma_peak(threads, 5 * QUICK_ITERATIONS).items()}}


def onednn_layers(layers: list[str], threads: int) -> dict:
    """torch ``conv2d`` (oneDNN) on each seed layer: median ms of 15 after 3 warm-up calls, and GFLOP/s."""
    import torch

    torch.set_num_threads(threads)
    results = {}
    for layer in layers:
        model_name, ordinal = SEED_LAYERS[layer]
        conv = zoo_conv_shapes(model_name)[ordinal - 1]
        data = torch.randn(conv.batch, conv.in_channels, conv.height, conv.width)
        weight = torch.randn(conv.out_channels, conv.in_channels // conv.groups, *conv.kernel)
        top, left, bottom, right = conv.padding
        padded = torch.nn.functional.pad(data, (left, right, top, bottom))
        times = []
        with torch.no_grad():
            for index in range(18):
                start = time.perf_counter()
                output = torch.nn.functional.conv2d(padded, weight, stride=conv.stride, groups=conv.groups)
                if index >= 3:
                    times.append(time.perf_counter() - start)
        flops = 2 * output.numel() * (conv.in_channels // conv.groups) * conv.kernel[0] * conv.kernel[1]
        ms = 1e3 * statistics.median(times)
        results[layer] = {"label": conv.label(), "flops": flops, "onednn_ms": ms, "onednn_gflops": flops / ms / 1e6}
    return results


def tuned_layers(path: Path, layers: dict) -> None:
    """Add each strategy's best latency (best over seeds) from the chameleon benchmark, as GFLOP/s."""
    if not path.exists():
        return
    saved = json.loads(path.read_text()).get("layers", {})
    for layer, row in layers.items():
        for strategy, runs in saved.get(layer, {}).get("runs", {}).items():
            bests = [run["tasks"][0]["best_ms"] for run in runs if run["tasks"][0]["best_ms"]]
            if bests:
                row.setdefault("tvm_best_gflops", {})[strategy] = row["flops"] / min(bests) / 1e6


def report(peak: dict, layers: dict, top: float) -> None:
    """Each layer's GFLOP/s as a fraction of the FMA peak at the same thread count, printed and stored."""
    for layer, row in layers.items():
        tuned = max(row.get("tvm_best_gflops", {}).values(), default=None)
        row["onednn_fraction_of_peak"] = row["onednn_gflops"] / top
        row["tvm_best_fraction_of_peak"] = tuned / top if tuned else None
        onednn = row["onednn_gflops"]
        line = f"{layer} {row['label']:32s} oneDNN {onednn:4.0f} GFLOP/s ({onednn / top:.0%})"
        print(line + (f", tuned TVM best {tuned:4.0f} ({tuned / top:.0%})" if tuned else ""))
    by_threads = ", ".join(f"{count} threads {value:.0f}" for count, value in peak["gflops_by_threads"].items())
    print(f"FMA peak ({peak['isa']}), GFLOP/s: {by_threads}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--layers", default="L1,L2,L3,L4,L5,L6,L7,L8")
    parser.add_argument("--chameleon", type=Path, default=Path("results/chameleon/chameleon.json"))
    parser.add_argument("--out", type=Path, default=Path("results/cpu_peak"))
    args = parser.parse_args(argv)
    try:
        threads = [int(item) for item in args.threads.split(",")]
        layers = [item for item in args.layers.split(",") if item]
        if unknown := [layer for layer in layers if layer not in SEED_LAYERS]:
            raise RlcompileError(f"unknown layers {', '.join(unknown)}; the seed layers are {', '.join(SEED_LAYERS)}")
        peak = fma_peak(threads)
    except ValueError:
        print(f"cpu_peak: --threads wants numbers like 1,2, not {args.threads!r}", file=sys.stderr)
        return 2
    except RlcompileError as error:
        print(f"cpu_peak: {error}", file=sys.stderr)
        return 2
    layers = onednn_layers(layers, max(threads))
    tuned_layers(args.chameleon, layers)
    report(peak, layers, peak["gflops_by_threads"][str(max(threads))])
    payload = {"benchmark": "cpu_peak", "environment": environment(max(threads)), "fma_peak": peak, "layers": layers}
    atomic.write_json(args.out / "cpu_peak.json", payload, indent=1)
    print(f"wrote {args.out / 'cpu_peak.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
