"""Serving load: plans made for throughput against the runtimes' own serving configurations, as a server runs them.

    python benchmarks/throughput.py [--models resnet18,minilm,ocr-det] [--concurrency 2] [--budget 240]
                                    [--block 1.0] [--rounds 5] [--out results/throughput/zen4]
                                    [--contest-again] [--export-again]

Per model:

1. ``rlcompile optimize MODEL --objective throughput --concurrency N`` (fp32), then the same with ``--precision
   auto`` and the model's data where it has some, each in its own process: exit status, wall time against the
   budget, the plan and serving configuration kept;
2. ``rlcompile export`` of each plan for the runtime it runs on (the check serves the export's requests in flight in
   a fresh process beside the plan's);
3. in this process, one throughput contest (:mod:`rlcompile.measure.throughput`: every server gets a block of
   ``--block`` seconds in turns over ``--rounds`` rounds, its rate judged round by round against the first's): both
   plans through ``rlcompile.load(...).serve()``; the user's model on ONNX Runtime with one session of every thread
   (twice) and with several sessions of fewer threads or without spinning, and on OpenVINO with its LATENCY and
   THROUGHPUT hints (twice), the configurations users set by hand (the noise: the larger twin spread; more rounds
   while it is above 3%, up to three times ``--rounds``); ONNX Runtime's
   default with one caller (what a latency objective measures). Inferences per second and each request's median and
   p99 latency.

Writes ``OUT/throughput.json`` (merged by model) and ``OUT/throughput.png`` (inferences per second per server). A
model's optimize runs already in the JSON (their plans in ``OUT/work``) are kept, so an interrupted run goes on where it
stopped; ``--contest-again`` serves the kept plans again, ``--export-again`` exports them again.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import time
from pathlib import Path

from rlcompile import atomic
from rlcompile.machine import cpu_model, host_cores

#: Per model: the CLI's model argument and flags, and for ``--precision auto`` the task that makes its data and the
#: metric (``None``: random inputs, output agreement only).
MODELS = {
    "resnet18": ("resnet18", [], None, None),
    "minilm": ("{work}/minilm.onnx", [f"--input-shape={name}=1,128" for name in
                                      ("input_ids", "attention_mask", "token_type_ids")],
               "minilm", "rlcompile.models.sentences:embedding_error"),
    "ocr-det": ("ocr-det", [], "ocr-det", "rlcompile.models.tasks:detection_error"),
}  # fmt: skip


#: OpenVINO's THROUGHPUT hint on the user's model is served twice: two compiled models of one file differ more than
#: ONNX Runtime's two sessions, and the noise is the larger of the two twins' spreads.
OPENVINO_TWIN = "openvino native: throughput"
#: Rounds go on (up to three times ``--rounds``) while the twins differ by more than this.
NOISE_TARGET = 0.03


def cli(*arguments: str) -> tuple[int, float, str]:
    """``python -m rlcompile ARGUMENTS`` in a fresh process: exit status, wall seconds, the last lines it said."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "rlcompile", *arguments], capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, time.monotonic() - started, "\n".join(lines[-4:])


def prepare(name: str, work: Path) -> tuple[str, Path | None]:
    """The model argument and the data file of ``name``'s task (``None`` without one), made in ``work``."""
    spec, _, task, _ = MODELS[name]
    if task is not None and not (work / f"{task}.npz").is_file():
        subprocess.run([sys.executable, "-m", "rlcompile.models.tasks", task, str(work), "--count", "128"],
                       check=True, capture_output=True)  # fmt: skip
    return spec.format(work=work), (work / f"{task}.npz") if task else None


def optimize(name: str, model: str, data: Path | None, output: Path, args, precision: str) -> dict:
    """One ``optimize --objective throughput`` and its ``export``, as a user runs them."""
    _, flags, _, metric = MODELS[name]
    flags = [*flags, "--objective", "throughput", "--concurrency", str(args.concurrency)]
    if precision != "fp32":
        flags += ["--precision", precision] + (["--data", str(data), "--metric", metric] if data else [])
    status, wall, said = cli("optimize", model, *flags, "--budget", f"{args.budget:g}s", "-o", str(output))
    result = {"status": status, "wall_s": wall, "budget_s": args.budget, "said": said}
    if status != 0:
        return result
    result["serving"] = json.loads((output / "manifest.json").read_text())["serving"]
    return result


def export(output: Path) -> dict:
    """``rlcompile export`` of a throughput plan for the runtime it runs on: its check serves the export's requests in
    flight in a fresh process beside the plan and the plan's twin, in turns (``check``: the export's ``--json``)."""
    manifest = json.loads((output / "manifest.json").read_text())
    runtime = manifest["serving"]["serving"]["runtime"] if manifest.get("serving") else None
    target = {"ort": "onnxruntime", "openvino": "openvino"}.get(runtime, "plan")
    exported, report = output.with_name(f"{output.name}_{target}"), output.with_name(f"{output.name}_export.json")
    status, wall, said = cli("export", str(output), "--to", target, "-o", str(exported), "--json", str(report))
    check = json.loads(report.read_text())["check"] if status == 0 else None
    return {"target": target, "status": status, "wall_s": wall, "said": said, "check": check}


def contest(plans: dict[str, Path], concurrency: int, block_s: float, rounds: int) -> dict:
    """The plans served beside the natives' configurations (see the module's docstring)."""
    from rlcompile.measure.throughput import Server, throughput_contest
    from rlcompile.plan import load_plan
    from rlcompile.runtimes.serving import Serving, servers, serving_candidates
    from rlcompile.saved import native_servers, original_model

    loaded = {label: load_plan(path) for label, path in plans.items()}
    first = next(iter(loaded.values()))
    feeds, threads = first.reference_inputs, first.record.threads
    original = original_model(first.record)
    contenders = native_servers(original.proto, feeds, concurrency, threads)
    default = serving_candidates("ort", concurrency, threads)[0]
    contenders.append(Server(f"{contenders[0].label} (identical)",
                             tuple(servers(default, original.proto, feeds, concurrency)),
                             twin_of=contenders[0].label))  # fmt: skip
    hinted = next(server for server in contenders if server.label == OPENVINO_TWIN)
    contenders.append(Server(f"{OPENVINO_TWIN} (identical)", tuple(servers(
        Serving("openvino", hint="THROUGHPUT"), original.proto, feeds, concurrency)),
        twin_of=hinted.label))  # fmt: skip
    contenders.append(Server(f"{contenders[0].label}, one caller", tuple(servers(default, original.proto, feeds, 1))))
    for label, plan in loaded.items():
        call = functools.partial(plan.serve(concurrency).run, feeds)
        contenders.append(Server(label, (call,) * concurrency))
    standings = throughput_contest(contenders, block_s, rounds, noise_target=NOISE_TARGET, max_rounds=3 * rounds)
    natives = [s for s in contenders if s.twin_of is None and "native" in s.label and "one caller" not in s.label]
    best = max(natives, key=lambda s: standings[s.label].per_s).label
    result = standings.to_dict() | {"best_native": best}
    for label in loaded:
        result[f"{label} / best native"] = standings[label].per_s / standings[best].per_s
    return result


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for axis, (name, result) in zip(axes[0], results.items(), strict=True):
        servers = {label: stats for label, stats in result["contest"]["servers"].items() if "identical" not in label}
        axis.barh(list(servers), [stats["per_s"] for stats in servers.values()])
        axis.set_title(f"{name}, {result['concurrency']} requests in flight")
        axis.set_xlabel("inferences/s")
        axis.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--budget", type=float, default=240.0)
    parser.add_argument("--block", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("results/throughput"))
    parser.add_argument("--contest-again", action="store_true", help="serve the kept plans again")
    parser.add_argument("--export-again", action="store_true", help="export the kept plans again")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.models.split(",") if name.strip()]
    if unknown := [name for name in names if name not in MODELS]:
        print(f"throughput.py: unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "throughput.json"
    results = json.loads(target.read_text())["models"] if target.is_file() else {}
    for name in names:
        work = args.out / "work" / name
        work.mkdir(parents=True, exist_ok=True)
        model, data = prepare(name, work)
        entry = results.get(name, {}) if results.get(name, {}).get("concurrency") == args.concurrency else {}
        entry["concurrency"], plans = args.concurrency, {}
        for precision in ("fp32", "auto"):
            output = work / f"plan-{precision}"
            if entry.get(precision, {}).get("status") != 0 or not (output / "manifest.json").is_file():
                entry[precision] = optimize(name, model, data, output, args, precision)
            print(f"{name} {precision}: exit {entry[precision]['status']} in {entry[precision]['wall_s']:.0f} s; "
                  f"{entry[precision].get('serving', {}).get('kept')}", flush=True)  # fmt: skip
            if entry[precision]["status"] == 0:
                plans[f"plan {precision}"] = output
                if "check" not in entry[precision].get("export", {}) or args.export_again:
                    entry[precision]["export"] = export(output)
                check = entry[precision]["export"]["check"] or {}
                print(f"  export: {check.get('serving_ratio') or float('nan'):.3f}x the plan's inferences/s, twins "
                      f"{100 * (check.get('serving_noise') or float('nan')):.1f}%", flush=True)  # fmt: skip
        if "contest" not in entry or args.contest_again:
            entry["contest"] = contest(plans, args.concurrency, args.block, args.rounds)
        for label, stats in entry["contest"]["servers"].items():
            print(f"  {name} {label}: {stats['per_s']:.1f}/s, p50 {stats['p50_ms']:.2f} ms, "
                  f"p99 {stats['p99_ms']:.2f} ms")
        results[name] = entry
        payload = {"machine": {"cpu": cpu_model(), "cores": host_cores()}, "models": results}
        atomic.write_json(target, payload, indent=1)
        plot(results, args.out / "throughput.png")
    print(f"wrote {target} and {args.out / 'throughput.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
