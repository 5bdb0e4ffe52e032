"""The ``rlcompile`` command: parses flags, calls the library, prints results.

Every :class:`~rlcompile.errors.RlcompileError` becomes one line on stderr and exit status 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from rlcompile import __version__
from rlcompile.errors import RlcompileError
from rlcompile.measure import QUICK, MeasureConfig

#: Tables are wide; when output is piped rich would squeeze them to 80 columns.
stdout = Console(width=None if sys.stdout.isatty() else 160)
stderr = Console(stderr=True)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="zoo model name (see `rlcompile models`) or path to an .onnx file")
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
        choices=["disable", "basic", "extended", "all"],
        help="ONNX Runtime graph optimisation level (default all)",
    )


def measure_config(args: argparse.Namespace) -> MeasureConfig:
    config = QUICK if args.quick else MeasureConfig()
    if args.min_time is not None:
        if args.min_time <= 0:
            raise RlcompileError("--min-time must be positive")
        config = MeasureConfig(
            warmup=config.warmup,
            min_repeats=config.min_repeats,
            min_time_s=args.min_time,
            max_time_s=max(config.max_time_s, 3 * args.min_time),
        )
    return config


def make_backend(name: str, args: argparse.Namespace):
    from rlcompile import backends

    options = {"ort": {"opt_level": args.ort_opt}, "tvm": {"target": args.target}}.get(name, {})
    return backends.create(name, **options)


def load(args: argparse.Namespace):
    from rlcompile.models import load_model, parse_input_shapes

    with stderr.status(f"loading {args.model}"):
        model = load_model(args.model, parse_input_shapes(args.input_shape))
    for note in model.notes[1:] if model.source.startswith("zoo:") else model.notes:
        stderr.print(f"[dim]{model.name}: {note}[/dim]")
    return model


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
    """Measure one backend on one model and print its median latency."""
    from rlcompile.compare import compare_backends

    model = load(args)
    backend = make_backend(args.backend, args)
    with stderr.status("") as status:
        comparison = compare_backends(model, [backend], measure_config(args), args.seed, status.update)
    latency = comparison.results[0].latency
    stdout.print(
        f"{model.name} on {backend.describe()}: median {latency.median_ms:.3f} ms "
        f"(p90 {latency.p90_ms:.3f} ms, {latency.repeats} runs)"
    )
    write_json(args.json, comparison.to_dict())
    return 0


def command_compare(args: argparse.Namespace) -> int:
    """Run all backends side by side on the same inputs: latency ratios and numerical agreement."""
    from rlcompile.compare import compare_backends
    from rlcompile.report.tables import comparison_table

    names = [name.strip() for name in args.backends.split(",") if name.strip()]
    if not names:
        raise RlcompileError("--backends is empty")
    backends = [make_backend(name, args) for name in names]
    model = load(args)
    with stderr.status("") as status:
        comparison = compare_backends(model, backends, measure_config(args), args.seed, status.update)
    stdout.print(comparison_table(comparison))
    write_json(args.json, comparison.to_dict())
    return 0 if all(r.agreement is None or r.agreement.within() for r in comparison.results) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlcompile",
        description="Make trained networks run faster with reinforcement-learning compiler agents.",
    )
    parser.add_argument("--version", action="version", version=f"rlcompile {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    models = commands.add_parser("models", help="list the built-in model zoo")
    models.add_argument("--json", dest="json_stdout", action="store_true", help="print JSON instead of a table")
    models.set_defaults(handler=command_models)

    run = commands.add_parser("run", help="measure a model's latency on one backend")
    add_model_arguments(run)
    run.add_argument("--backend", default="ort", choices=["ort", "tvm"], help="execution backend (default ort)")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except RlcompileError as error:
        stderr.print(f"rlcompile: error: {error}", markup=False, highlight=False, soft_wrap=True)
        return error.exit_status
    except KeyboardInterrupt:
        stderr.print("rlcompile: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
