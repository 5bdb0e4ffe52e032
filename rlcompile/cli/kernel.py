"""The kernel level's commands: ``tasks``, ``tune``, ``build``, ``pretrain``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlcompile.cli.common import (
    add_cost_model_flag,
    add_layout_flag,
    add_model_arguments,
    add_old_name,
    stderr,
    stdout,
    write_json,
)
from rlcompile.errors import RlcompileError
from rlcompile.names import (
    KERNEL_SCHEDULERS,
    KERNEL_STRATEGIES,
    SAMPLINGS,
    choices,
)


def add_parsers(commands) -> None:
    """The kernel level's commands: ``tasks``, ``tune``, ``build``, ``pretrain``."""
    tasks = commands.add_parser("tasks", help="list a model's tunable tasks (kernel level)")
    add_model_arguments(tasks, layers_too=True)
    tasks.add_argument("--target", default="llvm", help="TVM target (default llvm: this CPU)")
    add_layout_flag(tasks, "nchw", "nchw")
    tasks.set_defaults(handler=command_tasks)

    tune = commands.add_parser("tune", help="tune a model's kernels with a search agent (kernel level)")
    add_model_arguments(tune, layers_too=True)
    tune.add_argument(
        "--agent", default="evolutionary", help=f"the kernel agent: {choices(KERNEL_STRATEGIES)} (default "
        "evolutionary, MetaSchedule's search: the baseline a plain `tune` reproduces; `optimize` uses the seeds' "
        "chameleon)",
    )  # fmt: skip
    add_old_name(tune, "--strategy", "--agent", "agent")
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
    """Tune a model's tasks (or a seed layer) with a search agent; resumable from --work-dir."""
    from rlcompile.kernel.api import TuneRequest, tune
    from rlcompile.models import parse_input_shapes
    from rlcompile.report.progress import TuneProgress
    from rlcompile.report.tables import tuning_table

    if args.work_dir is None:
        raise RlcompileError("tune needs --work-dir (in the flags or the --config file)")
    request = TuneRequest(
        model=args.model, work_dir=args.work_dir, strategy=args.agent, trials=args.trials,
        batch_size=args.batch_size, scheduler=args.scheduler, seed=args.seed, target=args.target, tasks=args.tasks,
        input_shapes=parse_input_shapes(args.input_shape), rpc_tracker=args.rpc_tracker, rpc_key=args.rpc_key,
        strategy_options={"sampling": args.sampling} if args.sampling else {},
        warm_start=[str(d) for d in args.warm_start], cost_model=args.cost_model, layout=args.layout,
    )  # fmt: skip
    title = f"{args.model}: {args.agent}, seed {args.seed}, work dir {args.work_dir}"
    with TuneProgress(stderr, title) as progress:
        states = tune(request, [progress], on_start=lambda tasks: stderr.print(
            f"tuning {len(tasks)} task(s) of {args.model} with {args.agent}"))  # fmt: skip
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
