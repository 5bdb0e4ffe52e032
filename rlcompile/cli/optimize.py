"""``optimize`` (graph -> kernel -> layer, one plan directory) and ``export`` (that plan for one runtime).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlcompile.cli.common import (
    accuracy_contract,
    add_cost_model_flag,
    add_layout_flag,
    add_measure_arguments,
    add_model_arguments,
    add_objective_arguments,
    add_old_name,
    add_precision_arguments,
    agreement_line,
    check_objective,
    log,
    measure_config,
    serving_line,
    stdout,
    with_min_time,
    write_json,
)
from rlcompile.errors import RlcompileError, check_choice
from rlcompile.measure import PLAN_RULE, MachineLoad, MeasureConfig
from rlcompile.measure.load import load_words
from rlcompile.names import (
    DEFAULT_LAYOUT,
    DEFAULT_RUNTIMES,
    EXPORT_TARGETS,
    GRAPH_AGENTS,
    KERNEL_STRATEGIES,
    LAYER_SOLVERS,
    LEVELS,
    OPTIMIZE_LAYOUTS,
    RUNTIMES,
    choices,
)


def add_parsers(commands) -> None:
    """``optimize`` (graph -> kernel -> layer, one plan directory) and ``export`` (that plan for one runtime)."""
    optimize = commands.add_parser("optimize", help="graph -> kernel -> layer: a faster, verified plan directory")
    add_model_arguments(optimize)
    optimize.add_argument("-o", "--output", type=Path, required=True, help="the plan directory to write (re-run "
                          "the same command to resume)")  # fmt: skip
    optimize.add_argument("--budget", default=None, help="wall time, e.g. 90s, 10m, 1h (default 20m; 4m with "
                          "--quick), split across the levels")  # fmt: skip
    optimize.add_argument("--quick", action="store_true", help="quick preset: a 4-minute budget (optimize fits its "
                          "timing blocks to the budget, so its preset shortens the budget)")
    optimize.add_argument("--min-time", type=float, default=None,
                          help="seconds each timing block of the contests repeats a run (default 1)")  # fmt: skip
    optimize.add_argument("--levels", default=None, help=f"comma-separated from {','.join(LEVELS)} (default all)")
    optimize.add_argument("--graph-agent", default="ppo", help=f"{choices(GRAPH_AGENTS)} (default ppo, the seed's "
                          "agent)")  # fmt: skip
    optimize.add_argument("--kernel-agent", default="chameleon", help=f"{choices(KERNEL_STRATEGIES)} (default "
                          "chameleon, the seeds' agent)")  # fmt: skip
    add_old_name(optimize, "--strategy", "--kernel-agent", "kernel_agent")
    add_cost_model_flag(optimize)
    add_layout_flag(optimize, DEFAULT_LAYOUT, "auto: nchwc unless the model has grouped convolutions",
                    OPTIMIZE_LAYOUTS)  # fmt: skip
    optimize.add_argument("--layer-agent", default="qlearning", help=f"{choices(LAYER_SOLVERS)} (default qlearning)")
    optimize.add_argument("--trials", type=int, default=None, help="kernel: at most this many measurements "
                          "(default 32 per task), within the time share")  # fmt: skip
    optimize.add_argument("--runtimes", default=None, help=f"layer: comma-separated from {', '.join(RUNTIMES)} "
                          f"(default {','.join(DEFAULT_RUNTIMES)} + tvm when the kernel level runs)")  # fmt: skip
    add_old_name(optimize, "--libraries", "--runtimes", "runtimes")
    optimize.add_argument("--threads", type=int, default=None, help="threads per runtime (default: all cores)")
    optimize.add_argument("--seed", type=int, default=0)
    optimize.add_argument("--json", type=Path, default=None, help="also write the manifest as JSON to this file")
    add_precision_arguments(optimize)
    add_objective_arguments(optimize)
    optimize.set_defaults(handler=command_optimize)

    export = commands.add_parser("export", help="write a plan for the runtime you deploy on, checked there")
    export.add_argument("plan", help="a plan directory (from optimize or select)")
    export.add_argument("--to", required=True, choices=list(EXPORT_TARGETS),
                        help="onnxruntime (model.onnx + session options), openvino (IR + compile config) or plan "
                        "(the plan directory, for plans that mix runtimes)")  # fmt: skip
    export.add_argument("-o", "--output", type=Path, required=True, help="the directory to write")
    add_measure_arguments(export)
    export.set_defaults(handler=command_export)


def command_optimize(args: argparse.Namespace) -> int:
    """graph -> kernel -> layer on one model, each stage measured; writes a plan directory with its report."""
    from rlcompile import runtimes
    from rlcompile.export import export_command
    from rlcompile.layer import solvers
    from rlcompile.machine import host_cores
    from rlcompile.models import parse_input_shapes
    from rlcompile.models.profile import is_profile_text
    from rlcompile.optimize import OptimizeRequest, StageSettings, optimize, parse_duration, parse_levels
    from rlcompile.optimize.budget import DEFAULT_BUDGET_S, QUICK_BUDGET_S
    from rlcompile.report.tables import optimize_table

    if args.threads is not None and args.threads < 1:
        raise RlcompileError("--threads must be positive")
    if args.trials is not None and args.trials < 1:
        raise RlcompileError("empty budget: --trials must be positive")
    levels = parse_levels(args.levels)
    timing = with_min_time(MeasureConfig(), args.min_time)
    if args.budget is not None:
        budget = parse_duration(args.budget)
    else:
        budget = QUICK_BUDGET_S if args.quick else DEFAULT_BUDGET_S
    from rlcompile.graph import search

    search.check_name(args.graph_agent)  # the graph stage imports the agent when it runs
    if "kernel" in levels:  # creating a strategy imports TVM (~9 s on 2 cores): only when the kernel level runs
        from rlcompile.kernel import strategies

        strategies.create(args.kernel_agent, seed=args.seed)
    else:  # the name only, as the strategies' factory checks it
        check_choice("kernel agent", args.kernel_agent, KERNEL_STRATEGIES)
    if "kernel" in levels or args.cost_model != "default":  # a file the user names is checked whatever runs
        from rlcompile.kernel.pretrained import resolve as resolve_cost_model

        resolve_cost_model(args.cost_model)
    solvers.create(args.layer_agent)
    if args.runtimes:
        runtimes.parse(args.runtimes)
    contract = accuracy_contract(args)
    concurrency = check_objective(args)
    settings = StageSettings(graph_agent=args.graph_agent, strategy=args.kernel_agent, cost_model=args.cost_model,
                             layout=args.layout, layer_agent=args.layer_agent,
                             trials=args.trials, seed=args.seed, threads=args.threads or host_cores(),
                             libraries=args.runtimes, precision=contract.precision,
                             data=str(Path(contract.data).resolve()) if contract.data else None,
                             metric=contract.metric, tolerance=contract.tolerance,
                             timing=timing, objective=args.objective, concurrency=concurrency)  # fmt: skip
    if is_profile_text(args.input_shape):
        if args.objective != "latency":
            raise RlcompileError("--objective throughput works at one shape: give --input-shape sizes, not ranges")
        request = OptimizeRequest(args.model, args.output, {}, budget, tuple(levels), settings, started=args.started,
                                  profile=tuple(args.input_shape))  # fmt: skip
        return print_profile_result(optimize(request, log).manifest, args)
    request = OptimizeRequest(args.model, args.output, parse_input_shapes(args.input_shape), budget, tuple(levels),
                              settings, started=args.started)  # fmt: skip
    result = optimize(request, log)
    stdout.print(optimize_table(result.manifest))
    latency = result.manifest.optimize.latency
    verdict = (f"{latency.speedup:.3f}x as fast as the faster of ONNX Runtime and OpenVINO native "
               f"({latency.original_ms:.3f} -> {latency.final_ms:.3f} ms)")  # fmt: skip
    if latency.noise is not None:
        verdict += f"; identical sessions differ by {100 * latency.noise:.1f}% in this run"
        verdict += load_words(MachineLoad.from_dict(latency.machine_load))
    if latency.untouched is not None:
        verdict += (f"; no plan beat your model run untouched by {latency.untouched} beyond that noise and the "
                    f"{100 * PLAN_RULE.tie_band:.0f}% tie band, so the plan is that")  # fmt: skip
    stdout.print(f"{result.manifest.model}: {verdict}", highlight=False)
    if result.manifest.accuracy is not None:
        stdout.print(f"precision: {agreement_line(result.manifest)}", highlight=False)
    if result.manifest.serving is not None:
        stdout.print(f"serving: {serving_line(result.manifest.serving)}", highlight=False)
    stdout.print(f"wrote {args.output}/ (report.md, report.png; run it with: rlcompile run {args.output})",
                 highlight=False)  # fmt: skip
    stdout.print(f"deploy it: {export_command(result.manifest, args.output)}", highlight=False)
    write_json(args.json, result.manifest.to_json())
    return 0


def print_profile_result(manifest, args: argparse.Namespace) -> int:
    """What ``optimize`` says of a shape profile's plan: per bucket against both natives, and the weighted figure."""
    from rlcompile.export import export_command
    from rlcompile.report.optimize import markdown_table
    from rlcompile.report.shapes import bucket_header, bucket_rows

    shapes = manifest.shapes
    stdout.print("\n".join(markdown_table(bucket_header(manifest), bucket_rows(manifest))), highlight=False)
    weighted = shapes["weighted_ms"]
    stdout.print(f"{manifest.model}: weighted over the buckets {weighted['plan']:.3f} ms against the faster native's "
                 f"{weighted['faster_native']:.3f} ms per bucket ({shapes['ratio']:.3f}x); "
                 f"{len(shapes['variants'])} variant(s)", highlight=False)  # fmt: skip
    if manifest.accuracy is not None:
        stdout.print(f"precision: {agreement_line(manifest)}", highlight=False)
    stdout.print(f"wrote {args.output}/ (report.md; run it with: rlcompile run {args.output})", highlight=False)
    stdout.print(f"deploy it: {export_command(manifest, args.output)}", highlight=False)
    write_json(args.json, manifest.to_json())
    return 0


def command_export(args: argparse.Namespace) -> int:
    """Write a plan for the runtime the user deploys on (or the plan itself), then check it there."""
    from rlcompile.export import export_plan

    result = export_plan(args.plan, args.to, args.output, measure_config(args), log)
    check = result.check
    stdout.print(f"wrote {result.output}/: {', '.join(result.files)}", highlight=False)
    alone = " (one request at a time on the serving configuration)" if check.export_per_s is not None else ""
    stdout.print(f"checked with {args.to} alone in a fresh process: outputs agree with the plan's reference (max rel "
                 f"err {check.agreement.max_rel:.1e}); {check.export_ms:.3f} ms{alone} against the plan's "
                 f"{check.plan_ms:.3f} ms ({check.ratio:.3f}x); import {check.import_s:.2f} s, first run "
                 f"{check.first_run_s * 1e3:.1f} ms", highlight=False)  # fmt: skip
    if check.export_per_s is not None:
        verdict = "fewer than the plan, beyond" if check.serves_slower else "within or above"
        stdout.print(f"serving its requests in flight: {check.export_per_s:.1f} inferences/s against the plan's "
                     f"{check.plan_per_s:.1f}/s ({check.serving_ratio:.3f}x round by round; {verdict} the twins' "
                     f"{100 * check.serving_noise:.1f}% spread)", highlight=False)  # fmt: skip
    stdout.print(f"load it as {result.output}/README.md shows", highlight=False)
    write_json(args.json, result.to_dict())
    return 0
