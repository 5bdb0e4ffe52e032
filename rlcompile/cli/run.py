"""The commands that look and time: ``models``, ``run`` (a model on one runtime, or saved results side by side)
and ``compare`` (runtimes side by side).
"""

from __future__ import annotations

import argparse

from rlcompile.cli.common import (
    add_measure_arguments,
    add_model_arguments,
    add_objective_arguments,
    add_old_name,
    add_runtime_options,
    check_objective,
    load,
    make_runtime,
    measure_config,
    note,
    stderr,
    stdout,
    write_json,
)
from rlcompile.errors import RlcompileError
from rlcompile.measure.load import load_words
from rlcompile.names import (
    MODEL_RUNTIMES,
)


def add_parsers(commands) -> None:
    """``models``, ``run`` and ``compare``."""
    models = commands.add_parser("models", help="list the built-in model zoo")
    models.add_argument("--json", dest="json_stdout", action="store_true", help="print JSON instead of a table")
    models.set_defaults(handler=command_models)

    run = commands.add_parser("run", help="time a model on one runtime, or saved results side by side")
    add_model_arguments(run, saved_too=True)
    run.add_argument("--runtime", default="ort", choices=list(MODEL_RUNTIMES), help="the runtime (default ort)")
    add_old_name(run, "--backend", "--runtime", "runtime", choices=list(MODEL_RUNTIMES))
    add_runtime_options(run)
    add_measure_arguments(run)
    add_objective_arguments(run)
    run.set_defaults(handler=command_run)

    compare = commands.add_parser("compare", help="run several runtimes side by side: latency ratios and agreement")
    add_model_arguments(compare)
    compare.add_argument("--runtimes", default="ort,tvm", help="comma-separated, the first is the reference "
                         "(default ort,tvm)")  # fmt: skip
    add_old_name(compare, "--backends", "--runtimes", "runtimes")
    add_runtime_options(compare)
    add_measure_arguments(compare)
    compare.set_defaults(handler=command_compare)


def command_models(args: argparse.Namespace) -> int:
    """List the zoo with parameter count, FLOPs and input shapes."""
    from rlcompile.models import zoo
    from rlcompile.report.tables import zoo_table

    with stderr.status("summarising the zoo (first time only)"):
        summaries = [zoo.summary(name) for name in zoo.ZOO]
    if args.json_stdout:
        stdout.print_json(data=summaries)
    else:
        stdout.print(zoo_table(summaries))
    return 0


def command_run(args: argparse.Namespace) -> int:
    """Time one runtime on one model, or saved results (plans, artefacts) side by side."""
    from rlcompile.compare import compare_backends
    from rlcompile.saved import is_saved

    check_objective(args)
    if any(is_saved(path) for path in args.model):
        return run_saved(args)
    if args.objective != "latency":
        raise RlcompileError("run --objective throughput takes a plan directory (from optimize); time a model's "
                             "runtimes serving requests with optimize --objective throughput")  # fmt: skip
    if len(args.model) > 1:
        raise RlcompileError("run takes one model, or several saved results (plan directories, kernel .tar "
                             "artefacts); to compare backends on a model use `rlcompile compare`")  # fmt: skip
    args.model = args.model[0]
    model = load(args)
    backend = make_runtime(args.runtime, args)
    comparison = compare_backends(model, [backend], measure_config(args), args.seed, note)
    latency = comparison.results[0].latency
    stdout.print(
        f"{model.name} on {backend.describe()}: median {latency.median_ms:.3f} ms "
        f"(p90 {latency.p90_ms:.3f} ms, {latency.repeats} runs)"
    )
    write_json(args.json, comparison.to_dict())
    return 0


def run_serving(args: argparse.Namespace, concurrency: int | None) -> int:
    """A plan serving concurrent requests as measured, beside the natives' default and best configurations."""
    from rlcompile.report.optimize import markdown_table
    from rlcompile.saved import PLAN_SERVER, serve_saved

    if len(args.model) != 1:
        raise RlcompileError("run --objective throughput takes one plan directory")
    block_s = 0.3 if args.quick else (args.min_time or 1.0)
    standings = serve_saved(args.model[0], concurrency, block_s, 3 if args.quick else 5, note)
    stats = [stats for label, stats in standings.stats.items() if label not in standings.twins]
    best_native = max((s for s in stats if s.label != PLAN_SERVER), key=lambda s: s.per_s, default=None)
    rows = [[s.label, f"{s.per_s:.1f}", f"{s.per_s / best_native.per_s:.3f}" if best_native else "-",
             f"{s.p50_ms:.3f}", f"{s.p99_ms:.3f}"] for s in stats]  # fmt: skip
    header = ["server", "inferences/s", "over the best native configuration", "median ms", "p99 ms"]
    stdout.print("\n".join(markdown_table(header, rows)), highlight=False)
    noise = standings.noise
    said = (f"two identical servers differ by {100 * noise:.1f}%: the noise of every rate above" if noise is not None
            else "the original model is not at hand: the natives were not served")
    stdout.print(said, highlight=False)
    write_json(args.json, standings.to_dict())
    return 0


def run_shaped(args: argparse.Namespace) -> int:
    """A plan for a shape profile: checked and timed at every bucket beside both natives, and the weighted figure."""
    from rlcompile.plan import load_plan
    from rlcompile.report.optimize import markdown_table
    from rlcompile.shapes.timing import time_shaped

    plan = load_plan(args.model[0])
    measured = time_shaped(plan, measure_config(args), note)
    rows = [[b.label, f"{b.weight:.3f}", b.variant, f"{b.plan_ms:.3f}", f"{b.natives.get('ort', float('nan')):.3f}",
             f"{b.natives.get('openvino', float('nan')):.3f}", f"{b.ratio:.3f}x" if b.ratio else "-",
             f"{100 * b.noise:.1f}%", "agrees" if b.agreement.within() else "DISAGREES"]
            for b in measured.buckets]  # fmt: skip
    header = ["bucket", "weight", "served by", "ms", "ORT native", "OpenVINO native", "ratio", "twins", "outputs"]
    stdout.print("\n".join(markdown_table(header, rows)), highlight=False)
    weighted = measured.weighted
    line = f"{args.model[0]} ({plan.describe()}): weighted {weighted['plan']:.3f} ms"
    if "faster_native" in weighted:
        line += (f" against the faster native's {weighted['faster_native']:.3f} ms per bucket "
                 f"({weighted['plan'] / weighted['faster_native']:.3f}x)")  # fmt: skip
    slower = [b.label for b in measured.buckets if b.slower]
    if slower:
        line += f"; SLOWER than the faster native beyond the twins' spread and 1% at {', '.join(slower)}"
    stdout.print(line, highlight=False)
    if measured.accuracy is not None:
        check = measured.accuracy
        stdout.print(f"{check.metric} on its {check.samples} held-out samples {check.error:.4g} ({check.excess:+.2g} "
                     f"over fp32, tolerance {check.tolerance:g}: {'within' if check.within else 'OVER'})",
                     highlight=False)  # fmt: skip
    write_json(args.json, measured.to_dict())
    return 0 if measured.ok else 1


def run_saved(args: argparse.Namespace) -> int:
    """Check saved results on their reference inputs and time them in turns, with ORT native beside them."""
    from rlcompile.saved import time_saved
    from rlcompile.shapes.timing import shaped_paths

    concurrency = check_objective(args)
    if args.objective == "throughput":
        return run_serving(args, concurrency)
    if shaped_paths(args.model):
        return run_shaped(args)

    measured = time_saved(args.model, measure_config(args), note)
    timings, native = measured.saved, measured.native
    for timing in timings:
        verdict = "agrees with" if timing.agreement.within() else "DISAGREES with"
        if timing.accuracy is not None:
            verdict = "runs as saved" if timing.agreement.within() else "does NOT run as saved"
        line = (f"{timing.path} ({timing.description}): median {timing.latency.median_ms:.3f} ms "
                f"(p90 {timing.latency.p90_ms:.3f} ms)")  # fmt: skip
        if timing is not timings[0]:
            line += f", {timing.ratio_to_first:.3f}x {timings[0].path}"
        if timing.ratio_to_native is not None:
            line += f", {timing.ratio_to_native:.3f}x ONNX Runtime native"
        if timing.ratio_to_faster_native is not None and measured.faster_native:
            line += f", {timing.ratio_to_faster_native:.3f}x the faster native ({measured.faster_native[0]})"
        if timing.slower:
            line += ": SLOWER than the faster native beyond the twins' spread and 1%"
        if timing.accuracy is None:
            stdout.print(f"{line}; {verdict} ONNX Runtime (max rel err {timing.agreement.max_rel:.1e})",
                         highlight=False)  # fmt: skip
        else:
            check = timing.accuracy
            stdout.print(f"{line}; {verdict}; {check.metric} on its {check.samples} held-out samples {check.error:.4g}"
                         f" ({check.excess:+.2g} over fp32, tolerance {check.tolerance:g}: "
                         f"{'within' if check.within else 'OVER'})", highlight=False)  # fmt: skip
    if native is None:
        stdout.print("the original model is not at hand, so ONNX Runtime native was not timed", highlight=False)
    else:
        openvino = measured.openvino
        also = f"; OpenVINO native: median {openvino.median_ms:.3f} ms" if openvino is not None else ""
        stdout.print(f"ONNX Runtime native: median {native.median_ms:.3f} ms (p90 {native.p90_ms:.3f} ms){also}, "
                     f"timed in the same rounds; two identical sessions of it differ by {measured.noise:.1%}: the "
                     f"noise every ratio above carries{load_words(measured.load)}", highlight=False)  # fmt: skip
    write_json(args.json, {"results": [timing.to_dict() for timing in timings],
                           "ort_native": native.to_dict() if native else None, "noise": measured.noise,
                           "openvino_native": measured.openvino.to_dict() if measured.openvino else None,
                           "machine_load": measured.load.to_dict() if measured.load else None})  # fmt: skip
    return 0 if all(timing.ok for timing in timings) else 1


def command_compare(args: argparse.Namespace) -> int:
    """Run several runtimes side by side on the same inputs: latency ratios and numerical agreement."""
    from rlcompile.compare import compare_backends
    from rlcompile.report.tables import comparison_table

    names = [name.strip() for name in args.runtimes.split(",") if name.strip()]
    if not names:
        raise RlcompileError("--runtimes is empty")
    backends = [make_runtime(name, args) for name in names]
    model = load(args)
    comparison = compare_backends(model, backends, measure_config(args), args.seed, note)
    stdout.print(comparison_table(comparison))
    write_json(args.json, comparison.to_dict())
    return 0 if all(r.agreement is None or r.agreement.within() for r in comparison.results) else 1
