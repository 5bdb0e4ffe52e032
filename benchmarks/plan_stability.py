"""How steady a plan that switches libraries at every other group is, call after call, beside ONNX Runtime native.

    python benchmarks/plan_stability.py [--model lenet5|PATH.onnx] [--library torch] [--threads 2] [--blocks 12]
                                        [--manifest DIR/manifest.json --label "qlearning (refined)"]
                                        [--variant unpinned|one-thread|twin]
                                        [--out results/plan_stability]

The plan is ``--library`` wherever it runs and ONNX Runtime for the other groups (the single-library plan
``select`` calibrates and measures), or, with ``--manifest``, the candidate of a ``select`` plan directory whose
labels include ``--label`` (the agent's mixed plan, say). Timed: its first ten calls after compiling, then
``--blocks`` blocks of 20 calls of ORT native followed by 20 calls of the plan (a 50 ms pause after each, as a
contest's wind-down), then 100 calls of the plan alone. Each block also records the plan's time in each library
(its segments' clocks, summed per call, the median): which library's segments carry a slow block. If the table is
to predict such a plan within 15%, its own blocks must agree within that.

``--variant`` compiles the plan a second time with its ONNX Runtime segments run another way and times it in each
block too, the plan and it taking turns at following ORT native (one process, the same blocks, so a slow spell of
the machine falls on both): ``unpinned``, their intra-op workers left to the scheduler (plans pin them to the CPUs
after the first), ``one-thread``, one thread each (no worker to wake at each segment), or ``twin``, as
they are (what two identical plans differ by, block by block).
Measured on the 2-core Zen 4 VM (``results/plan_stability/ocr-det-mixed-variants``: ocr-det's
20-segment Q-learning plan from ``manifest.json``, 24 blocks each, one run after the other, the plan unpinned then):
the twin over the plan, block by block, median 0.948 and 1.010 (0.66-1.57 between blocks); pinned 0.994 and 0.924
(0.57-1.55); one-thread 1.072 (0.72-1.36): the VM's spells hid any difference. On the lent machine's Xeon
(2 of its cores; ``results/plan_stability/albert-xeon-variants``, hf:albert's 5-segment plan, 30 blocks each): the
unpinned plan's ORT segments took 0.3-0.4 or 1.3-4.4 ms a call, a block at a time (over 0.8 ms in 20 of 30 blocks);
pinned 0.21-0.38 ms in all 30 (the plan 0.881x its unpinned self, block by block), one thread each 0.22-0.41 ms
(0.900x): plans pin them.

Measured on the lent H100 machine's host (a quiet 16-core Xeon, 16 threads), hf:mobilenet-v2's PyTorch plan (34
segments): 20-25 ms a call after two warm-up calls, then block medians of 40-82 ms beside ORT native (minima
26-55), and 47-55 ms alone after them: a quiet machine, 2x between blocks of one plan. On the slowed 2-core VM (2
threads, ``results/plan_stability``): 41-71 ms a call after the warm-up, block medians 27.8-54.4 ms (x1.95) while
ORT native's stayed at 7.4-10.1 ms, 38.9-45.0 ms alone.

Writes ``plan_stability.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.console import Console

from rlcompile import atomic, runtimes
from rlcompile.errors import RlcompileError
from rlcompile.layer.group_table import group_model
from rlcompile.machine import environment
from rlcompile.models import load_model
from rlcompile.runtimes import RuntimeOptions
from rlcompile.runtimes.ort import OrtRuntime

console = Console()
PAUSE_S = 0.05
BLOCK_CALLS = 20


def milliseconds(call: Callable[[], object], count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def clocked_ms(engine, feeds: dict, count: int) -> tuple[list[float], dict[str, float]]:
    """``count`` calls of a plan: each call's milliseconds, and the median of each library's share of a call (its
    segments' clocks summed per call)."""
    clock: list[list[float]] = [[] for _ in engine.compiled]
    times = milliseconds(lambda: engine.run(feeds, clock), count)
    libraries = [item.segment.library for item in engine.compiled]
    per_call = {library: np.zeros(count) for library in libraries}
    for library, seconds in zip(libraries, clock, strict=True):
        per_call[library] += np.asarray(seconds) * 1e3
    return times, {library: float(np.median(ms)) for library, ms in per_call.items()}


def manifest_plan(path: Path, label: str, groups: int) -> list[str]:
    """The assignment of the candidate in a ``select`` manifest whose labels include ``label``."""
    try:
        candidates = json.loads(path.read_text())["selection"]["candidates"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RlcompileError(f"{path}: not a select plan's manifest ({error})") from None
    for candidate in candidates:
        if label in candidate.get("labels", []):
            if len(candidate["assignment"]) != groups:
                raise RlcompileError(f"{path}: plan {label!r} has {len(candidate['assignment'])} groups, the model "
                                     f"{groups}: not this model's manifest")  # fmt: skip
            return list(candidate["assignment"])
    raise RlcompileError(f"{path}: no candidate labelled {label!r}")


class UnpinnedOrt(OrtRuntime):
    """ONNX Runtime whose plan segments leave their intra-op workers unpinned (plans pin them)."""

    def session_config(self, options: RuntimeOptions) -> dict[str, str]:
        config = super().session_config(options)
        config.pop("session.intra_op_thread_affinities", None)
        return config


class OneThreadOrt(OrtRuntime):
    """ONNX Runtime whose plan segments run on the calling thread alone."""

    def session_options(self, options: RuntimeOptions):
        return super().session_options(options if options.exclusive else replace(options, threads=1))


class TwinOrt(OrtRuntime):
    """ONNX Runtime as the plan runs it, compiled again: what an identical plan differs by, block by block."""


VARIANTS = {"unpinned": UnpinnedOrt, "one-thread": OneThreadOrt, "twin": TwinOrt}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lenet5")
    parser.add_argument("--library", default="torch")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--manifest", type=Path, default=None, help="a select plan directory's manifest.json")
    parser.add_argument("--label", default="qlearning", help="with --manifest: a label of the candidate to time")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default=None,
                        help="also time the plan with its ONNX Runtime segments run this way, in every block")
    parser.add_argument("--out", type=Path, default=Path("results/plan_stability"))
    args = parser.parse_args(argv)
    if args.blocks < 1:
        print("error: --blocks must be at least 1", file=sys.stderr)
        return 2
    try:
        grouped = group_model(load_model(args.model))
        if args.manifest is not None:
            plan = manifest_plan(args.manifest, args.label, len(grouped.groups))
            created = {name: runtimes.create(name) for name in sorted({"ort", *plan})}
        else:
            created = {name: runtimes.create(name) for name in ("ort", args.library)}
            nodes = {node.name: node for node in grouped.proto.graph.node}
            plan = [args.library if created[args.library].supports([nodes[name] for name in group.nodes]) else "ort"
                    for group in grouped.groups]  # fmt: skip
    except (RlcompileError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    feeds = grouped.feeds
    native = grouped.original.compile(created["ort"], RuntimeOptions(args.threads, exclusive=True)).timer(feeds)
    engine = grouped.engine(plan, args.threads, created)
    variant = None if args.variant is None else grouped.engine(plan, args.threads,
                                                               created | {"ort": VARIANTS[args.variant]()})  # fmt: skip
    run = lambda: engine.run(feeds)  # noqa: E731
    first = milliseconds(run, 10)
    if variant is not None:
        milliseconds(lambda: variant.run(feeds), 10)
    contenders = [("plan", engine), *([("variant", variant)] if variant is not None else [])]
    blocks = []
    for index in range(args.blocks):
        native_ms = milliseconds(native, BLOCK_CALLS)
        time.sleep(PAUSE_S)
        block = {"native_median_ms": float(np.median(native_ms))}
        for name, timed in contenders[:: -1 if index % 2 else 1]:  # the two take turns at following ORT native
            times, library_ms = clocked_ms(timed, feeds, BLOCK_CALLS)
            time.sleep(PAUSE_S)
            block |= {f"{name}_median_ms": float(np.median(times)), f"{name}_min_ms": min(times),
                      f"{name}_library_ms": library_ms}  # fmt: skip
        blocks.append(block)
    alone = milliseconds(run, 5 * BLOCK_CALLS)
    alone_medians = [float(np.median(alone[i : i + BLOCK_CALLS])) for i in range(0, len(alone), BLOCK_CALLS)]
    medians = [block["plan_median_ms"] for block in blocks]
    what = f"plan {args.label!r} of {args.manifest}" if args.manifest else f"{args.library} wherever it runs"
    console.print(f"{args.model}, {what} ({len(engine.compiled)} segments), "
                  f"{args.threads} threads: first calls {', '.join(f'{ms:.1f}' for ms in first)} ms")  # fmt: skip
    console.print(f"block medians beside ORT native {min(medians):.1f}-{max(medians):.1f} ms "
                  f"(x{max(medians) / min(medians):.2f}); alone after them "
                  f"{min(alone_medians):.1f}-{max(alone_medians):.1f} ms")  # fmt: skip
    for library in sorted(blocks[0]["plan_library_ms"]):
        shares = [block["plan_library_ms"][library] for block in blocks]
        console.print(f"  its {library} segments: {min(shares):.1f}-{max(shares):.1f} ms a call (block medians)")
    summary = variant_summary(blocks) if variant is not None else None
    if summary is not None:
        low, high = summary["variant_min_ms"], summary["variant_max_ms"]
        console.print(f"{args.variant}: block medians {low:.1f}-{high:.1f} ms "
                      f"(x{summary['variant_spread']:.2f}) against the plan's x{summary['plan_spread']:.2f}; "
                      f"{args.variant} / plan, block by block: median {summary['ratio_median']:.3f} "
                      f"({summary['ratio_min']:.2f}-{summary['ratio_max']:.2f})")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    atomic.write_json(args.out / "plan_stability.json", {
        "environment": environment(args.threads), "model": args.model,
        "library": None if args.manifest else args.library, "label": args.label if args.manifest else None,
        "assignment": plan,
        "segments": len(engine.compiled), "first_calls_ms": first, "blocks": blocks,
        "alone_block_medians_ms": alone_medians, "variant": args.variant,
        "variant_summary": summary,
    })  # fmt: skip
    console.print(f"wrote {args.out / 'plan_stability.json'}")
    return 0


def variant_summary(blocks: list[dict]) -> dict[str, float]:
    """The variant's block medians beside the plan's: each one's spread (slowest over fastest block) and the
    variant's time over the plan's in the same block."""
    plan = np.array([block["plan_median_ms"] for block in blocks])
    other = np.array([block["variant_median_ms"] for block in blocks])
    ratio = other / plan
    return {"plan_spread": float(plan.max() / plan.min()), "variant_spread": float(other.max() / other.min()),
            "variant_min_ms": float(other.min()), "variant_max_ms": float(other.max()),
            "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max())}


if __name__ == "__main__":
    sys.exit(main())
