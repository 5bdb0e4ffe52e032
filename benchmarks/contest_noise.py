"""How far apart identical twins land in a contest, and what closes the gap.

    python benchmarks/contest_noise.py [--models resnet18,hf:bert-minilm,...] [--repeats 3] [--pause 0]
                                       [--variants default,long-blocks,quiet,discard] [--out results/contest_noise]

Per model: ONNX Runtime native twice and OpenVINO native twice (the layer stage's natives), timed in one
contest as ``select`` times them (5 rounds of ``spread_over(DEFAULT, 5)`` blocks), ``--repeats`` times; the
twins' spread |twin / original - 1| is the noise the contest would report. Variants:

* ``default``: as the layer stage times them today;
* ``long-blocks``: 0.7 s blocks (each contender runs longer per turn);
* ``quiet``: every session's workers stop spinning after each run (``session.force_spinning_stop``), so a
  contender's pool does not spin into the next one's turn;
* ``quick``: ``--quick``'s blocks (``spread_over(QUICK, 5)``, 0.04 s), 5 rounds: what a contest gave before
  contests settled;
* ``settled``: ``quick`` blocks, settling (:data:`rlcompile.measure.SETTLE`: batches of 5 rounds while the twins
  differ by more than 2%, at most 4 batches), as decisions are timed now;
* ``fine``: 25 rounds of the shortest blocks (one warm-up call, two timed calls): the turns change faster than a
  shared machine's slow spells, so every contender meets them in the same share;
* ``uncapped``: ``default`` blocks of up to :data:`UNCAPPED_CALLS` calls (today's blocks stop at 1000): whether a
  model of microseconds per call needs a block of ten thousand of them.

Each result also records the rounds and seconds its contest took. ``--pause S`` waits S seconds between repeats:
the columns "ort across" and "ov/ort across" then say how far one library's speed, and the two libraries' ratio,
move between contests a while apart (max / min - 1 over the repeats): what a prediction calibrated on one contest
can be off in the next one even after scaling by ORT native, as ``select``'s probe and final contest are.

Writes ``contest_noise.json`` (every spread, with the environment) and prints the median and the worst
spread per model and variant.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from rlcompile import atomic, runtimes
from rlcompile.machine import environment
from rlcompile.measure import DEFAULT, QUICK, SETTLE, Contender, MeasureConfig, run_contest, spread_over
from rlcompile.models import corpus, load_model
from rlcompile.runtimes import RuntimeOptions

console = Console(width=160)
VARIANTS = ("default", "long-blocks", "quiet", "quick", "settled", "fine", "uncapped")
#: the ``uncapped`` variant's most calls in one block (the default before it was 1000)
UNCAPPED_CALLS = 10_000
#: the ``fine`` variant's blocks and rounds
FINE = MeasureConfig(warmup=1, min_repeats=2, min_time_s=0.0, max_time_s=5.0, floor_repeats=1)
FINE_ROUNDS = 25


def contenders(model, feeds: dict, threads: int, variant: str) -> list[Contender]:
    exclusive = variant != "quiet"
    ort, openvino = runtimes.create("ort"), runtimes.create("openvino")
    options = RuntimeOptions(threads, exclusive=exclusive)
    made = []
    for label, runtime in (("ort", ort), ("openvino", openvino)):
        # each waits out its spinning workers after its turn, as rlcompile's contests do (Contender.from_timer)
        original = model.compile(runtime, options).timed(feeds)
        twin = model.compile(runtime, options).timed(feeds)
        made += [Contender.from_timer(label, original), Contender.from_timer(f"{label} twin", twin, twin_of=label)]
    return made


def spreads(model_name: str, threads: int, variant: str, repeats: int, pause_s: float = 0.0) -> list[dict]:
    model = load_model(corpus.spec_of(model_name))
    feeds = model.random_inputs(0)
    timing = spread_over(QUICK if variant in ("quick", "settled") else DEFAULT, 5)
    if variant == "long-blocks":
        timing = replace(timing, min_time_s=0.7)
    if variant == "uncapped":
        timing = replace(timing, max_repeats=UNCAPPED_CALLS)
    rounds = FINE_ROUNDS if variant == "fine" else 5
    if variant == "fine":
        timing = FINE
    results = []
    for repeat in range(repeats):
        if repeat:
            time.sleep(pause_s)
        started = time.monotonic()
        standings = run_contest(contenders(model, feeds, threads, variant), timing, rounds=rounds,
                                settle=SETTLE if variant == "settled" else None)  # fmt: skip
        medians = {label: stats.median_ms for label, stats in standings.stats.items()}
        results.append({"ort": abs(medians["ort twin"] / medians["ort"] - 1),
                        "openvino": abs(medians["openvino twin"] / medians["openvino"] - 1),
                        "ort_ms": medians["ort"], "openvino_ms": medians["openvino"], "rounds": standings.rounds,
                        "seconds": time.monotonic() - started, "at": time.time()})  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,mobilenet_v2,hf:bert-minilm,hf:yolos,ocr-det")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between repeats")
    parser.add_argument("--out", type=Path, default=Path("results/contest_noise"))
    args = parser.parse_args(argv)
    path = args.out / "contest_noise.json"
    saved = json.loads(path.read_text()) if path.exists() else {"environment": environment(args.threads), "runs": {}}
    for model_name in args.models.split(","):
        for variant in args.variants.split(","):
            key = f"{model_name}/{variant}"
            if key in saved["runs"]:
                continue
            console.log(key)
            saved["runs"][key] = spreads(model_name, args.threads, variant, args.repeats, args.pause)
            atomic.write_json(path, saved, indent=1)
    table = Table(title="twins' spread in a contest (median / worst over repeats)")
    for column in ("model", "variant", "ort twins", "openvino twins", "ort ms", "openvino ms", "rounds", "s",
                   "ort across", "ov/ort across"):  # fmt: skip
        table.add_column(column)
    for key, runs in saved["runs"].items():
        model_name, variant = key.rsplit("/", 1)
        cells = [f"{100 * np.median([r[k] for r in runs]):.1f}% / {100 * max(r[k] for r in runs):.1f}%"
                 for k in ("ort", "openvino")]  # fmt: skip
        table.add_row(model_name, variant, *cells, f"{np.median([r['ort_ms'] for r in runs]):.2f}",
                      f"{np.median([r['openvino_ms'] for r in runs]):.2f}",
                      f"{np.median([r.get('rounds', 5) for r in runs]):.0f}",
                      f"{np.median([r['seconds'] for r in runs]):.1f}" if "seconds" in runs[0] else "",
                      *across(runs))  # fmt: skip
    console.print(table)
    console.log(f"wrote {path}")
    return 0


def across(runs: list[dict]) -> tuple[str, str]:
    """How far ORT's median, and OpenVINO's against ORT's, move between the repeats (max / min - 1)."""
    ort = [r["ort_ms"] for r in runs]
    ratio = [r["openvino_ms"] / r["ort_ms"] for r in runs]
    return f"{100 * (max(ort) / min(ort) - 1):.0f}%", f"{100 * (max(ratio) / min(ratio) - 1):.0f}%"


if __name__ == "__main__":
    sys.exit(main())
