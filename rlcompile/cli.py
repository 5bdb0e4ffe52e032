"""The ``rlcompile`` command: parses flags, calls the library, prints results.

Every :class:`~rlcompile.errors.RlcompileError` becomes one line on stderr and exit status 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from rlcompile import __version__
from rlcompile.errors import RlcompileError, RlcompileWarning, check_choice
from rlcompile.measure import QUICK, MachineLoad, MeasureConfig
from rlcompile.measure.load import load_words
from rlcompile.names import (
    DEFAULT_LAYOUT,
    DEFAULT_RUNTIMES,
    EXPORT_TARGETS,
    GRAPH_AGENTS,
    GRAPH_COSTS,
    GRAPH_LEARNING_AGENTS,
    KERNEL_SCHEDULERS,
    KERNEL_STRATEGIES,
    LAYER_SOLVERS,
    LAYOUTS,
    LEVELS,
    MODEL_RUNTIMES,
    OPTIMIZE_LAYOUTS,
    ORT_OPT_LEVELS,
    RUNTIMES,
    SAMPLINGS,
    TUNE_MODULES,
    choices,
)
from rlcompile.report.events import EventLog

#: Tables are wide; when output is piped rich would squeeze them to 80 columns.
stdout = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=True)
stderr = Console(stderr=True, width=None if sys.stderr.isatty() else 160, soft_wrap=True)


#: rlcompile.graph.cost.COST_MODELS (not imported: the CLI loads no ONNX Runtime to parse arguments)


def add_model_arguments(parser: argparse.ArgumentParser, saved_too: bool = False, layers_too: bool = False) -> None:
    """The model argument and ``--input-shape``. ``saved_too``: saved results as well; ``layers_too``: the seeds'
    layers (L1-L8) as well, which the kernel level resolves. Otherwise the model is checked at once
    (:func:`~rlcompile.models.check_model_spec`), before the command's slow imports."""
    if saved_too:
        parser.add_argument("model", nargs="+", help="zoo model name or .onnx file; or one or more saved results "
                            "(plan directories from select/optimize, .tar from build), timed in turns")  # fmt: skip
    else:
        parser.add_argument("model", help="zoo model name (see `rlcompile models`) or path to an .onnx file")
        parser.set_defaults(check_model_early=not layers_too)
    parser.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=D1,D2,...",
        help="fix the shape of a dynamic input (repeatable)",
    )


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--quick", action="store_true", help="shorter timing: 1 warm-up, >= 3 runs, >= 0.1 s")
    parser.add_argument("--min-time", type=float, default=None, help="seconds to keep repeating (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON to this file")


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="llvm", help="TVM target: llvm (this CPU), cuda, or a TVM target string")
    parser.add_argument(
        "--ort-opt",
        default="all",
        choices=list(ORT_OPT_LEVELS),
        help="ONNX Runtime graph optimisation level (default all)",
    )


def measure_config(args: argparse.Namespace) -> MeasureConfig:
    return with_min_time(QUICK if args.quick else MeasureConfig(), args.min_time)


def with_min_time(config: MeasureConfig, min_time: float | None) -> MeasureConfig:
    """``config`` with each timing block lasting ``min_time`` seconds (``--min-time``), or as it is; a contest fitted
    into a deadline then shortens its blocks no further than that when it is below the usual floor."""
    if min_time is None:
        return config
    if min_time <= 0:
        raise RlcompileError("--min-time must be positive")
    return replace(config, min_time_s=min_time, max_time_s=max(config.max_time_s, 3 * min_time),
                   floor_time_s=min(config.floor_time_s, min_time))  # fmt: skip


def make_backend(name: str, args: argparse.Namespace):
    """The runtime ``run``/``compare`` time a whole model with (``--backend(s)``: ort or tvm)."""
    from rlcompile import runtimes

    check_choice("backend", name, MODEL_RUNTIMES)
    options = {"ort": {"opt_level": args.ort_opt}, "tvm": {"target": args.target}}.get(name, {})
    return runtimes.create(name, **options)


def load(args: argparse.Namespace):
    from rlcompile.models import load_model, parse_input_shapes

    with stderr.status(f"loading {args.model}"):
        model = load_model(args.model, parse_input_shapes(args.input_shape))
    for note in model.notes[1:] if model.source.startswith("zoo:") else model.notes:
        stderr.print(f"[dim]{model.name}: {note}[/dim]")
    return model


#: The levels' progress events on stderr: lines, and progress bars on a terminal (see :class:`EventLog`).
log = EventLog(stderr)
#: Progress of short commands: shown on a terminal only, so logs keep just results and errors.
note = EventLog(stderr, terminal_only=True)


def write_json(path: Path | None, payload: dict) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=1))
        stderr.print(f"[dim]wrote {path}[/dim]")


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
    """Measure one backend on one model, or saved results (plans, artefacts) side by side."""
    from rlcompile.compare import compare_backends
    from rlcompile.saved import is_saved

    if any(is_saved(path) for path in args.model):
        return run_saved(args)
    if len(args.model) > 1:
        raise RlcompileError("run takes one model, or several saved results (plan directories, kernel .tar "
                             "artefacts); to compare backends on a model use `rlcompile compare`")  # fmt: skip
    args.model = args.model[0]
    model = load(args)
    backend = make_backend(args.backend, args)
    comparison = compare_backends(model, [backend], measure_config(args), args.seed, note)
    latency = comparison.results[0].latency
    stdout.print(
        f"{model.name} on {backend.describe()}: median {latency.median_ms:.3f} ms "
        f"(p90 {latency.p90_ms:.3f} ms, {latency.repeats} runs)"
    )
    write_json(args.json, comparison.to_dict())
    return 0


def run_saved(args: argparse.Namespace) -> int:
    """Check saved results on their reference inputs and time them in turns, with ORT native beside them."""
    from rlcompile.saved import time_saved

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
        stdout.print(f"ONNX Runtime native: median {native.median_ms:.3f} ms (p90 {native.p90_ms:.3f} ms), "
                     f"timed in the same rounds; two identical sessions of it differ by {measured.noise:.1%}: the "
                     f"noise every ratio above carries{load_words(measured.load)}", highlight=False)  # fmt: skip
    write_json(args.json, {"results": [timing.to_dict() for timing in timings],
                           "ort_native": native.to_dict() if native else None, "noise": measured.noise,
                           "machine_load": measured.load.to_dict() if measured.load else None})  # fmt: skip
    return 0 if all(timing.ok for timing in timings) else 1


def command_tasks(args: argparse.Namespace) -> int:
    """List the tunable tasks of a model (or a seed layer) with calls, FLOPs and share of the work."""
    from rlcompile.kernel.api import load_tasks
    from rlcompile.models import parse_input_shapes
    from rlcompile.report.tables import tasks_table
    from rlcompile.tvm_bridge import resolve_target

    target = resolve_target(args.target)
    with stderr.status(f"extracting the tasks of {args.model}"):
        _, tasks = load_tasks(args.model, target, parse_input_shapes(args.input_shape), layout=args.layout)
    stdout.print(tasks_table(tasks, f"{args.model}: {len(tasks)} tasks for {args.target}"))
    return 0


def command_tune(args: argparse.Namespace) -> int:
    """Tune a model's tasks (or a seed layer) with a search strategy; resumable from --work-dir."""
    from rlcompile.kernel.api import TuneRequest, tune
    from rlcompile.models import parse_input_shapes
    from rlcompile.report.progress import TuneProgress
    from rlcompile.report.tables import tuning_table

    if args.work_dir is None:
        raise RlcompileError("tune needs --work-dir (in the flags or the --config file)")
    request = TuneRequest(
        model=args.model, work_dir=args.work_dir, strategy=args.strategy, trials=args.trials,
        batch_size=args.batch_size, scheduler=args.scheduler, seed=args.seed, target=args.target, tasks=args.tasks,
        input_shapes=parse_input_shapes(args.input_shape), rpc_tracker=args.rpc_tracker, rpc_key=args.rpc_key,
        strategy_options={"sampling": args.sampling} if args.sampling else {},
        warm_start=[str(d) for d in args.warm_start], cost_model=args.cost_model, layout=args.layout,
    )  # fmt: skip
    title = f"{args.model}: {args.strategy}, seed {args.seed}, work dir {args.work_dir}"
    with TuneProgress(stderr, title) as progress:
        states = tune(request, [progress], on_start=lambda tasks: stderr.print(
            f"tuning {len(tasks)} task(s) of {args.model} with {args.strategy}"))  # fmt: skip
    stdout.print(tuning_table([state for state in states if state.budget or state.skipped], title))
    for state in states:
        if state.skipped:
            stderr.print(f"{state.task.label}: skipped, its design space cannot be built ({state.skipped}); it keeps "
                         "TVM's default schedule and the other tasks were tuned", markup=False,
                         highlight=False)  # fmt: skip
    unfunded = [state for state in states if not state.budget and not state.skipped]
    if unfunded:
        stderr.print(f"{len(unfunded)} of {len(states)} tasks got no trials from --trials {args.trials} "
                     f"(they keep TVM's default schedules; the default budget is 32 per task)")  # fmt: skip
    summary = [state.summary() for state in states]
    write_json(Path(args.work_dir) / "tune_summary.json", {"request": {k: str(v) for k, v in vars(args).items()},
                                                           "tasks": summary})  # fmt: skip
    resumed = sum(state.resumed for state in states)
    if resumed:
        stderr.print(f"resumed: {resumed} measurements were already in {args.work_dir} and were not repeated")
    failed = [state for state in states if state.trials and not state.valid]
    for state in failed:
        stderr.print(f"[bold red]WARNING: {state.task.label}: no valid candidate in {state.trials} trials; "
                     f"errors: {dict(state.errors.most_common(2))}[/bold red]")  # fmt: skip
    return 0


def command_build(args: argparse.Namespace) -> int:
    """Compile a whole model with the tuned records of --work-dir into a deployable .tar."""
    from rlcompile.kernel.api import build
    from rlcompile.models import parse_input_shapes

    with stderr.status(f"building {args.model} with the records of {args.work_dir}"):
        path, (tuned, total) = build(args.model, args.work_dir, args.output, args.target,
                                     parse_input_shapes(args.input_shape))  # fmt: skip
    stdout.print(f"wrote {path}: {args.model} for {args.target}, {tuned} of {total} tasks tuned "
                 f"(the others use TVM's default schedules)")  # fmt: skip
    return 0


def command_graph(args: argparse.Namespace) -> int:
    """Rewrite a model's graph with a search agent, verify it, time it against the original, save it."""
    import onnx

    from rlcompile.graph.api import GraphRequest, optimize_graph
    from rlcompile.report.tables import graph_run_table, rewrites_table

    request = GraphRequest(
        threads=args.threads, agent=args.agent, max_steps=args.steps, time_limit_s=args.time_limit,
        alpha=args.alpha, cost=args.cost,
        clean=not args.no_clean, rule_ids=args.rules.split(",") if args.rules else None, seed=args.seed,
        train_episodes=args.train_episodes, checkpoint=args.checkpoint, load=args.load, temperature=args.temperature,
        timing=measure_config(args),
    )  # fmt: skip
    request.validate()
    model = load(args)

    def on_step(step: int, best_ms: float, evaluated: int) -> None:
        if step % 10 == 0:
            log(f"{args.agent}: step {step}/{args.steps}, best est. {best_ms:.3f} ms, {evaluated} graphs costed")

    run = optimize_graph(model, request, progress=log, on_step=on_step)
    rewrites = run.result.rewrites[: run.kept_rewrites]
    title = f"{len(rewrites)} rewrites applied" if run.kept else f"{len(rewrites)} rewrites found, not kept"
    stdout.print(rewrites_table(rewrites, run.result.initial_cost_ms, title))
    stdout.print(graph_run_table(run))
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(run.proto, str(args.output), save_as_external_data=run.proto.ByteSize() > 2_000_000_000)
        stdout.print(f"wrote {args.output}" + ("" if run.kept else " (the original graph: the rewrite was not faster)"))
    write_json(args.json, run.to_dict())
    return 0 if run.agreement.within() else 1


def command_graph_train(args: argparse.Namespace) -> int:
    """Train one PPO policy on several graphs, for ``graph MODEL --agent ppo --load`` on graphs it never saw."""
    from rlcompile.graph.api import GraphRequest, train_policy
    from rlcompile.models import load_model, parse_input_shapes

    names = [name for name in args.models.split(",") if name]
    if not names:
        raise RlcompileError("graph-train needs --models: zoo names, packaged names or .onnx files, comma-separated")
    request = GraphRequest(
        agent=args.agent, max_steps=args.steps, time_limit_s=args.time_limit, cost=args.cost, clean=not args.no_clean,
        rule_ids=args.rules.split(",") if args.rules else None, seed=args.seed, train_episodes=args.train_episodes,
        checkpoint=args.checkpoint, timing=None,
    )  # fmt: skip
    request.validate()
    models = []
    for name in names:
        with stderr.status(f"loading {name}"):
            models.append(load_model(name, parse_input_shapes(args.input_shape)))

    def on_update(episodes: int, best_ms: float, env_steps: int) -> None:
        log(f"{args.agent}: {episodes} episodes, {env_steps} rewrites tried")

    stats = train_policy(models, request, progress=log, on_update=on_update)
    stdout.print(f"wrote {args.checkpoint}: {args.agent} trained on {', '.join(stats['models'])} "
                 f"({stats['cost']} cost), {stats['train_episodes']} episodes, {stats['train_env_steps']} rewrites, "
                 f"{stats['train_seconds']:.0f} s")  # fmt: skip
    write_json(args.json, stats)
    return 0


def command_select(args: argparse.Namespace) -> int:
    """Choose a library per fusion group (or a primitive per operator with --per-operator), run and time it."""
    from rlcompile import runtimes
    from rlcompile.layer import solvers

    options = {"episodes": args.episodes} if args.episodes and args.agent in ("qlearning", "random") else {}
    if args.episodes is not None and args.episodes < 1:
        raise RlcompileError("empty budget: --episodes must be positive")
    if args.threads is not None and args.threads < 1:
        raise RlcompileError("--threads must be positive")
    solvers.create(args.agent, **options)
    if args.per_operator:
        return select_per_operator(args, options)
    if args.tuning_db is not None and not args.tuning_db.is_dir():
        raise RlcompileError(f"--tuning-db {args.tuning_db} is not a tuning work directory")
    names = runtimes.parse(args.libraries, args.tuning_db is not None)
    return select_segments_command(args, names, options)


def select_segments_command(args: argparse.Namespace, names: list[str], options: dict) -> int:
    from rlcompile.layer.choose import choose_plan
    from rlcompile.machine import host_cores
    from rlcompile.optimize import Budget, parse_duration
    from rlcompile.plan import save_plan
    from rlcompile.report.tables import candidates_table, groups_table

    deadline = None if args.budget is None else args.started + Budget(parse_duration(args.budget), ("layer",)).usable_s
    contract = accuracy_contract(args)
    model = load(args)
    threads = args.threads or host_cores()
    selection, _ = choose_plan(model, contract, args.agent, args.seed, threads, names, args.tuning_db,
                               args.table_dir, measure_config(args), log, deadline=deadline,
                               leave_out_idle=args.libraries is None, **options)  # fmt: skip
    stdout.print(groups_table(selection))
    stdout.print(candidates_table(selection))
    chosen = selection.chosen
    summary = (f"chosen: {', '.join(chosen.labels)}: {chosen.segments} segment(s), measured "
               f"{chosen.measured.median_ms:.3f} ms, table predicted {selection.expected_ms(chosen):.3f} ms; "
               f"{agreement_line(chosen)}")  # fmt: skip
    stdout.print(summary, highlight=False)
    then = selection.table.notes.get("ort_native_ms")
    if then:
        stdout.print(f"machine speed since the table was calibrated: ORT native {then:.3f} -> "
                     f"{selection.natives['ort native'].median_ms:.3f} ms (x{selection.drift:.2f}); "
                     "predictions are compared at today's speed")  # fmt: skip
    if selection.noise is not None:
        noise = 100 * selection.noise
        line = f"timing noise of this run: two identical sessions of one library differ by up to {noise:.1f}%"
        if selection.calibration_noise is not None:
            line += f" ({100 * selection.calibration_noise:.1f}% when the table was calibrated)"
        line += load_words(selection.load, "during the final contest")
        stdout.print(line)
    output = args.output or Path(f"{model.name}.plan")
    save_plan(selection, output, args.tuning_db)
    stdout.print(f"wrote {output}/ (run it with: rlcompile run {output})", highlight=False)
    write_json(args.json, selection.to_dict())
    return 0


def accuracy_contract(args: argparse.Namespace):
    """``--precision``, ``--data``, ``--metric``, ``--tolerance`` as one contract (bad values: one line, exit 2)."""
    from rlcompile.layer.precision.contract import DEFAULT_TOLERANCE, AccuracyContract, parse_tolerance

    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else parse_tolerance(args.tolerance)
    if args.precision == "fp32" and (args.data or args.metric or args.tolerance is not None):
        raise RlcompileError("--data, --metric and --tolerance judge lowered precisions: add --precision "
                             "bf16, int8 or auto")  # fmt: skip
    return AccuracyContract(args.precision, args.data, args.metric or "rel-l2", tolerance)


def agreement_line(chosen) -> str:
    """How the chosen plan's outputs compare: exact agreement, or the accuracy contract it met."""
    accuracy = chosen.accuracy
    if accuracy is None:
        return f"outputs agree with ONNX Runtime (max rel err {chosen.agreement.max_rel:.1e})"
    where = "held-out samples" if accuracy.real_data else "random inputs (no --data: output agreement only)"
    return (f"{accuracy.plan}: {accuracy.metric} {accuracy.error:.3g} on {accuracy.validation_samples} {where}, "
            f"fp32 {accuracy.fp32_error:.3g}, within +{accuracy.tolerance:g}")


def add_precision_arguments(parser: argparse.ArgumentParser) -> None:
    from rlcompile.layer.precision.contract import ALLOWED, METRICS

    parser.add_argument("--precision", default="fp32", choices=list(ALLOWED),
                        help="what may be computed below fp32: bf16, int8 or both (auto); default fp32, exact")
    parser.add_argument("--data", type=Path, default=None,
                        help="samples: a directory of .npz/.npy files or one .npz with a leading sample axis "
                             "(split into calibration and held-out validation); default random inputs")
    parser.add_argument("--metric", default=None, help=f"the error, lower is better: {', '.join(METRICS)} or "
                        "MODULE:FUNCTION(sample, fp32_outputs, outputs) (default rel-l2)")
    parser.add_argument("--tolerance", default=None, help="the most the error may exceed fp32's own (default 0.01)")


def add_layout_flag(parser: argparse.ArgumentParser, default: str | None, says: str,
                    layouts: Sequence[str] = LAYOUTS) -> None:  # fmt: skip
    parser.add_argument("--layout", default=default, choices=list(layouts),
                        help="the convolutions' layout when tuned and built: nchw as the model has it, or nchwc, "
                        f"channels in blocks of the CPU's vector width (default: {says})")  # fmt: skip


def add_cost_model_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cost-model", default="default", metavar="default|none|PATH",
                        help="the kernel cost model's pretrained prior: the packaged model of this CPU's vector-ISA "
                        "class (default), none (cold, as before), or a file from `rlcompile pretrain`")  # fmt: skip


def command_pretrain(args: argparse.Namespace) -> int:
    """Train a kernel cost model on tuning work directories (this project's or a user's own)."""
    from rlcompile.kernel.pretrained import Dataset, train
    from rlcompile.tvm_bridge import resolve_target

    with stderr.status(f"reading the measurements of {len(args.work_dirs)} work directories"):
        dataset = Dataset.from_work_dirs(args.work_dirs, resolve_target(args.target))
    with stderr.status(f"training on {len(dataset)} measurements of {len(set(dataset.tasks))} tasks"):
        model = train(dataset, seed=args.seed)
    path = model.save(args.output)
    stdout.print(f"wrote {path}: {model.name}, vector-ISA class {model.isa}")
    return 0


def command_optimize(args: argparse.Namespace) -> int:
    """graph -> kernel -> layer on one model, each stage measured; writes a plan directory with its report."""
    from rlcompile import runtimes
    from rlcompile.export import export_command
    from rlcompile.layer import solvers
    from rlcompile.machine import host_cores
    from rlcompile.models import parse_input_shapes
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

        strategies.create(args.strategy, seed=args.seed)
    else:  # the name only, as the strategies' factory checks it
        check_choice("strategy", args.strategy, KERNEL_STRATEGIES)
    if "kernel" in levels or args.cost_model != "default":  # a file the user names is checked whatever runs
        from rlcompile.kernel.pretrained import resolve as resolve_cost_model

        resolve_cost_model(args.cost_model)
    solvers.create(args.layer_agent)
    if args.libraries:
        runtimes.parse(args.libraries)
    contract = accuracy_contract(args)
    settings = StageSettings(graph_agent=args.graph_agent, strategy=args.strategy, cost_model=args.cost_model,
                             layout=args.layout, layer_agent=args.layer_agent,
                             trials=args.trials, seed=args.seed, threads=args.threads or host_cores(),
                             libraries=args.libraries, precision=contract.precision,
                             data=str(Path(contract.data).resolve()) if contract.data else None,
                             metric=contract.metric, tolerance=contract.tolerance,
                             timing=timing)  # fmt: skip
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
    stdout.print(f"{result.manifest.model}: {verdict}", highlight=False)
    if result.manifest.accuracy is not None:
        stdout.print(f"precision: {agreement_line(result.manifest)}", highlight=False)
    stdout.print(f"wrote {args.output}/ (report.md, report.png; run it with: rlcompile run {args.output})",
                 highlight=False)  # fmt: skip
    stdout.print(f"deploy it: {export_command(result.manifest, args.output)}", highlight=False)
    write_json(args.json, result.manifest.to_json())
    return 0


def command_export(args: argparse.Namespace) -> int:
    """Write a plan for the runtime the user deploys on (or the plan itself), then check it there."""
    from rlcompile.export import export_plan

    result = export_plan(args.plan, args.to, args.output, measure_config(args), log)
    check = result.check
    stdout.print(f"wrote {result.output}/: {', '.join(result.files)}", highlight=False)
    stdout.print(f"checked with {args.to} alone in a fresh process: outputs agree with the plan's reference (max rel "
                 f"err {check.agreement.max_rel:.1e}); {check.export_ms:.3f} ms against the plan's "
                 f"{check.plan_ms:.3f} ms ({check.ratio:.3f}x); import {check.import_s:.2f} s, first run "
                 f"{check.first_run_s * 1e3:.1f} ms", highlight=False)  # fmt: skip
    stdout.print(f"load it as {result.output}/README.md shows", highlight=False)
    write_json(args.json, result.to_dict())
    return 0


def select_per_operator(args: argparse.Namespace, options: dict) -> int:
    """The seed's setting: a primitive per ONNX operator, run layer by layer from Python."""
    from rlcompile.layer.per_operator.api import select, write_plan
    from rlcompile.report.tables import plan_summary, plan_table

    model = load(args)
    output = args.output or Path("plan.json")
    run = select(model, args.agent, args.seed, args.table_dir, measure_config(args), log, args.threads or 1, **options)
    stdout.print(plan_table(run))
    stdout.print(plan_summary(run))
    write_plan(run, output)
    stdout.print(f"wrote {output}")
    write_json(args.json, run.to_dict())
    return 0 if run.agreement.within() else 1


def command_compare(args: argparse.Namespace) -> int:
    """Run all backends side by side on the same inputs: latency ratios and numerical agreement."""
    from rlcompile.compare import compare_backends
    from rlcompile.report.tables import comparison_table

    names = [name.strip() for name in args.backends.split(",") if name.strip()]
    if not names:
        raise RlcompileError("--backends is empty")
    backends = [make_backend(name, args) for name in names]
    model = load(args)
    comparison = compare_backends(model, backends, measure_config(args), args.seed, note)
    stdout.print(comparison_table(comparison))
    write_json(args.json, comparison.to_dict())
    return 0 if all(r.agreement is None or r.agreement.within() for r in comparison.results) else 1


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors as one line and exit status 2, like every other error."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"rlcompile: error: {message} (see `{self.prog} --help`)\n")


#: Options that name where a command writes: checked before any work starts.
OUTPUT_OPTIONS = ("json", "output", "work_dir", "table_dir", "checkpoint")


def check_output_paths(args: argparse.Namespace) -> None:
    """Fail in one line now, not after minutes of work, when an output cannot be written where asked."""
    for option in OUTPUT_OPTIONS:
        path = getattr(args, option, None)
        if isinstance(path, Path):
            try:
                probe_writable(path.parent)
            except OSError as error:
                flag = "--" + option.replace("_", "-")
                raise RlcompileError(f"{flag} {path} cannot be written: {error.strerror or error}"
                                     f"{f': {error.filename}' if error.filename else ''}") from None  # fmt: skip


def probe_writable(folder: Path) -> None:
    """Create ``folder`` if needed and write (then remove) a scratch file in it; OSError when it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):
        pass


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rlcompile",
        description="Make trained networks run faster with reinforcement-learning compiler agents.",
    )
    parser.add_argument("--version", action="version", version=f"rlcompile {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)

    models = commands.add_parser("models", help="list the built-in model zoo")
    models.add_argument("--json", dest="json_stdout", action="store_true", help="print JSON instead of a table")
    models.set_defaults(handler=command_models)

    run = commands.add_parser("run", help="measure a model on one backend, or saved results side by side")
    add_model_arguments(run, saved_too=True)
    run.add_argument("--backend", default="ort", choices=list(MODEL_RUNTIMES), help="execution backend (default ort)")
    add_backend_options(run)
    add_measure_arguments(run)
    run.set_defaults(handler=command_run)

    compare = commands.add_parser("compare", help="run every backend side by side: latency ratios and agreement")
    add_model_arguments(compare)
    compare.add_argument(
        "--backends", default="ort,tvm", help="comma-separated, the first is the reference (default ort,tvm)"
    )
    add_backend_options(compare)
    add_measure_arguments(compare)
    compare.set_defaults(handler=command_compare)

    tasks = commands.add_parser("tasks", help="list a model's tunable tasks (kernel level)")
    add_model_arguments(tasks, layers_too=True)
    tasks.add_argument("--target", default="llvm", help="TVM target (default llvm: this CPU)")
    add_layout_flag(tasks, "nchw", "nchw")
    tasks.set_defaults(handler=command_tasks)

    tune = commands.add_parser("tune", help="tune a model's kernels with a search strategy (kernel level)")
    add_model_arguments(tune, layers_too=True)
    tune.add_argument(
        "--strategy", default="evolutionary", help=f"{choices(KERNEL_STRATEGIES)} (rl + adaptive)"
    )
    tune.add_argument(
        "--sampling", default=None, choices=list(SAMPLINGS),
        help="how sa / rl / chameleon pick the batch: best predicted (greedy) or k-means of the trajectory",
    )  # fmt: skip
    tune.add_argument("--trials", type=int, default=None, help="measurement budget (default 32 per task)")
    tune.add_argument("--work-dir", type=Path, default=None, help="where results go; re-run to resume (required)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument(
        "--tasks", default=None, help="only these tasks: indices or name/label substrings, comma-separated"
    )
    tune.add_argument("--batch-size", type=int, default=16, help="candidates measured per batch (default 16)")
    tune.add_argument(
        "--scheduler", default="gradient", choices=list(KERNEL_SCHEDULERS),
        help="which task gets the next batch, after one batch each: the one expected to cut end-to-end latency "
        "most (gradient, default) or each in turn",
    )  # fmt: skip
    tune.add_argument(
        "--warm-start", nargs="+", default=[], metavar="DIR",
        help="earlier work directories (this machine, this target) whose measurements train the cost model "
        "before the first batch",
    )  # fmt: skip
    add_cost_model_flag(tune)
    add_layout_flag(tune, None, "the work directory's, nchw for a new one")
    tune.add_argument("--target", default="llvm", help="TVM target (default llvm: this CPU)")
    tune.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT", help="measure on remote devices")
    tune.add_argument("--rpc-key", default=None, help="device key registered with the RPC tracker")
    tune.add_argument("--config", type=Path, default=None, help="JSON file with any of these options as keys")
    tune.set_defaults(handler=command_tune)

    graph = commands.add_parser("graph", help="rewrite a model's graph with substitution rules (graph level)")
    add_model_arguments(graph)
    graph.add_argument("--agent", default="taso", help=f"{choices(GRAPH_AGENTS)} (default taso)")
    graph.add_argument(
        "--train-episodes",
        type=int,
        default=None,
        help="ppo: training episodes (default 500); world-model: random-agent episodes (default 100); "
        "both stop at --time-limit too",
    )
    graph.add_argument("--temperature", type=float, default=1.0, help="world-model: sampling temperature tau")
    graph.add_argument("--checkpoint", type=Path, default=None, help="ppo: save the trained policy here")
    graph.add_argument("--load", type=Path, default=None, help="ppo: apply this trained policy, no training")
    graph.add_argument("-o", "--output", type=Path, default=None, help="write the optimised graph here (.onnx)")
    graph.add_argument(
        "--steps", type=int, default=100, help="graphs expanded; ppo, world-model: rewrites per episode (default 100)"
    )
    graph.add_argument("--time-limit", type=float, default=300.0, help="search seconds at most (default 300)")
    graph.add_argument("--alpha", type=float, default=1.05, help="taso: queue graphs costing < alpha x best")
    graph.add_argument(
        "--cost",
        default="context",
        choices=list(GRAPH_COSTS),
        help="context (default): the parent graph's cost plus the rewritten region and its neighbourhood timed "
        "before and after in ORT; sum: cached per-operator ORT times; fused: the same with ORT's Conv+activation "
        "fusion counted as free; region: ORT's fusion units timed as subgraphs; measured: the whole graph timed",
    )
    graph.add_argument("--rules", default=None, help="only these rule ids, comma-separated")
    graph.add_argument("--no-clean", action="store_true", help="skip the Conv+BatchNorm/Mul/Add fusions")
    graph.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads when timing (default: all)")
    add_measure_arguments(graph)
    graph.set_defaults(handler=command_graph)

    graph_train = commands.add_parser(
        "graph-train", help="train one agent on several graphs, for `graph --agent AGENT --load` on new ones"
    )
    graph_train.add_argument("--agent", default="ppo", choices=list(GRAPH_LEARNING_AGENTS),
                             help="ppo (default): model-free; world-model: MDN-RNN + controller trained in it")
    graph_train.add_argument("--models", required=True, help="comma-separated zoo names, packaged names or .onnx files")
    graph_train.add_argument("--checkpoint", type=Path, required=True, help="write the trained policy here")
    graph_train.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...",
                             help="fix the shape of a dynamic input, in every model that has it (repeatable)")
    graph_train.add_argument("--train-episodes", type=int, default=None,
                             help="episodes at most (default: train until --time-limit)")
    graph_train.add_argument("--time-limit", type=float, default=600.0, help="training seconds at most (default 600)")
    graph_train.add_argument("--steps", type=int, default=50, help="rewrites per episode (default 50)")
    graph_train.add_argument("--cost", default="context", choices=list(GRAPH_COSTS[:-1]),
                             help="cost model (default context)")
    graph_train.add_argument("--rules", default=None, help="only these rule ids, comma-separated")
    graph_train.add_argument("--no-clean", action="store_true", help="skip the Conv+BatchNorm/Mul/Add fusions")
    graph_train.add_argument("--seed", type=int, default=0, help="seed of the training (default 0)")
    graph_train.add_argument("--json", type=Path, default=None, help="write the training statistics here")
    graph_train.set_defaults(handler=command_graph_train)

    select = commands.add_parser("select", help="choose the library that runs each layer (layer level, QS-DNN)")
    add_model_arguments(select)
    select.add_argument("--agent", default="qlearning", help=choices(LAYER_SOLVERS))
    select.add_argument("--episodes", type=int, default=None, help="qlearning / random: episodes (default 20/layer)")
    select.add_argument("--threads", type=int, default=None, help="threads per library (default: all cores; "
                        "1 with --per-operator, as the seed)")  # fmt: skip
    select.add_argument("--libraries", default=None, help=f"comma-separated, from {', '.join(RUNTIMES)} "
                        f"(default {','.join(DEFAULT_RUNTIMES)}; + tvm with --tuning-db)")  # fmt: skip
    select.add_argument("--tuning-db", type=Path, default=None, help="a `rlcompile tune` work directory: TVM "
                        "segments use its tuned records")  # fmt: skip
    select.add_argument("--per-operator", action="store_true", help="the seed's setting: a primitive per ONNX "
                        "operator, run layer by layer (writes plan.json)")  # fmt: skip
    select.add_argument("-o", "--output", type=Path, default=None, help="where the plan goes (default MODEL.plan/)")
    select.add_argument("--table-dir", type=Path, default=None, help="where lookup tables are kept (default: next "
                        "to the model file; the cache for zoo and packaged models)")  # fmt: skip
    select.add_argument("--budget", default=None, help="wall time, e.g. 90s or 5m: the profile stops adding "
                        "libraries in time for the final contest to end by it (default: profile every group fully)")
    add_precision_arguments(select)
    add_measure_arguments(select)
    select.set_defaults(handler=command_select)

    optimize = commands.add_parser("optimize", help="graph -> kernel -> layer: a faster, verified plan directory")
    add_model_arguments(optimize)
    optimize.add_argument("-o", "--output", type=Path, required=True, help="the plan directory to write (re-run "
                          "the same command to resume)")  # fmt: skip
    optimize.add_argument("--budget", default=None, help="wall time, e.g. 90s, 10m, 1h (default 20m; 4m with "
                          "--quick), split across the levels")  # fmt: skip
    optimize.add_argument("--quick", action="store_true", help="a 4-minute budget")
    optimize.add_argument("--min-time", type=float, default=None,
                          help="seconds each timing block of the contests repeats a run (default 1)")  # fmt: skip
    optimize.add_argument("--levels", default=None, help=f"comma-separated from {','.join(LEVELS)} (default all)")
    optimize.add_argument("--graph-agent", default="ppo", help=f"{choices(GRAPH_AGENTS)} (default ppo)")
    optimize.add_argument("--strategy", default="chameleon", help=f"kernel search: {choices(KERNEL_STRATEGIES)} "
                          "(default chameleon)")  # fmt: skip
    add_cost_model_flag(optimize)
    add_layout_flag(optimize, DEFAULT_LAYOUT, "auto: nchwc unless the model has grouped convolutions",
                    OPTIMIZE_LAYOUTS)  # fmt: skip
    optimize.add_argument("--layer-agent", default="qlearning", help=choices(LAYER_SOLVERS))
    optimize.add_argument("--trials", type=int, default=None, help="kernel: at most this many measurements "
                          "(default 32 per task), within the time share")  # fmt: skip
    optimize.add_argument("--libraries", default=None, help=f"layer: comma-separated from {', '.join(RUNTIMES)} "
                          f"(default {','.join(DEFAULT_RUNTIMES)} + tvm when the kernel level runs)")  # fmt: skip
    optimize.add_argument("--threads", type=int, default=None, help="threads per library (default: all cores)")
    optimize.add_argument("--seed", type=int, default=0)
    optimize.add_argument("--json", type=Path, default=None, help="also write the manifest as JSON to this file")
    add_precision_arguments(optimize)
    optimize.set_defaults(handler=command_optimize)

    export = commands.add_parser("export", help="write a plan for the runtime you deploy on, checked there")
    export.add_argument("plan", help="a plan directory (from optimize or select)")
    export.add_argument("--to", required=True, choices=list(EXPORT_TARGETS),
                        help="onnxruntime (model.onnx + session options), openvino (IR + compile config) or plan "
                        "(the plan directory, for plans that mix runtimes)")  # fmt: skip
    export.add_argument("-o", "--output", type=Path, required=True, help="the directory to write")
    add_measure_arguments(export)
    export.set_defaults(handler=command_export)

    pretrain = commands.add_parser("pretrain", help="train a kernel cost model on tuning work directories")
    pretrain.add_argument("work_dirs", nargs="+", type=Path, metavar="WORK_DIR",
                          help="tuning work directories (one vector-ISA class; any machine of it)")
    pretrain.add_argument("-o", "--output", type=Path, required=True, help="the model file to write (.json)")
    pretrain.add_argument("--target", default="llvm", help="TVM target the directories were tuned for")
    pretrain.add_argument("--seed", type=int, default=0)
    pretrain.set_defaults(handler=command_pretrain)

    build = commands.add_parser("build", help="compile a model with tuned records into a deployable .tar")
    add_model_arguments(build)
    build.add_argument("--work-dir", type=Path, required=True, help="the work dir of `rlcompile tune`")
    build.add_argument("-o", "--output", type=Path, required=True, help="artefact path (model.tar)")
    build.add_argument("--target", default="llvm", help="TVM target (default llvm: this CPU)")
    build.set_defaults(handler=command_build)
    return parser


def apply_config_file(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                      args: argparse.Namespace) -> argparse.Namespace:  # fmt: skip
    """``--config FILE``: its keys are option names (``trials``, ``work_dir`` / ``work-dir``); flags given on
    the command line win over the file."""
    try:
        config = json.loads(Path(args.config).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise RlcompileError(f"cannot read --config {args.config}: {error}") from None
    if not isinstance(config, dict):
        raise RlcompileError(f"--config {args.config} must hold a JSON object")
    known = vars(args)
    options = {key.replace("-", "_"): value for key, value in config.items()}
    unknown = sorted(set(options) - set(known) - {"model"})
    if unknown:
        raise RlcompileError(f"--config {args.config}: unknown option(s) {', '.join(unknown)}")
    subparser = parser._subparsers._group_actions[0].choices[args.command]  # type: ignore[union-attr]
    subparser.set_defaults(**{k: Path(v) if k == "work_dir" else v for k, v in options.items() if k != "model"})
    return parser.parse_args(argv)


#: Failures of the machine or the user's paths rather than of rlcompile: one line, exit 2.
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS,
                                errno.ENOTDIR, errno.EISDIR, errno.EEXIST})  # fmt: skip


def describe_os_error(error: OSError) -> str:
    """``No space left on device: PATH; ...`` without the errno number or a traceback."""
    where = f": {error.filename}" if error.filename else ""
    return (f"{error.strerror or error}{where}; what was saved before this point is kept, "
            "so run the same command again once that is fixed and it resumes")  # fmt: skip


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Our own warnings as one line on stderr; everything else as Python shows it."""
    if issubclass(category, RlcompileWarning):
        stderr.print(f"rlcompile: warning: {message}", markup=False, highlight=False, soft_wrap=True)
    else:
        default_show_warning(message, category, filename, lineno, file, line)


default_show_warning = warnings.showwarning


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Run as a program (``argv`` from ``sys.argv``), a command's ``--budget`` counts from the
    process's start; called with ``argv`` (tests, scripts), from this call."""
    from rlcompile.machine import process_age_s

    started = time.monotonic() - (process_age_s() if argv is None else 0.0)
    warnings.showwarning = show_warning
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # usage errors (one line, status 2) and --help / --version (status 0)
        return int(exit_.code or 0)
    try:
        if getattr(args, "config", None):
            args = apply_config_file(parser, argv, args)
        args.started = started
        if getattr(args, "check_model_early", False):
            from rlcompile.models import check_model_spec

            check_model_spec(args.model)
        check_output_paths(args)
        handler: Callable[[argparse.Namespace], int] = args.handler
        with log, note:
            return handler(args)
    except RlcompileError as error:
        stderr.print(f"rlcompile: error: {error}", markup=False, highlight=False, soft_wrap=True)
        return error.exit_status
    except OSError as error:
        if error.errno not in ENVIRONMENT_ERRNOS:
            raise
        stderr.print(f"rlcompile: error: {describe_os_error(error)}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in TUNE_MODULES:
            raise
        stderr.print(f"rlcompile: error: `rlcompile {args.command}` needs the tuning dependencies (no module named "
                     f"{error.name!r}): pip install 'rlcompile[tune]'", markup=False, highlight=False,
                     soft_wrap=True)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        stderr.print("rlcompile: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
