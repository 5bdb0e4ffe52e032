"""What every subcommand shares: the consoles and progress log, the parser that fails in one line, the model,
measurement, runtime and precision arguments, and the checks made before any work starts."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from rlcompile.errors import RlcompileError, RlcompileWarning, check_choice
from rlcompile.measure import QUICK, MeasureConfig
from rlcompile.names import (
    LAYOUTS,
    MODEL_RUNTIMES,
    ORT_OPT_LEVELS,
)
from rlcompile.report.events import EventLog

#: Tables are wide; when output is piped rich would squeeze them to 80 columns.
stdout = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=True)
stderr = Console(stderr=True, width=None if sys.stderr.isatty() else 160, soft_wrap=True)

#: The levels' progress events on stderr: lines, and progress bars on a terminal (see :class:`EventLog`).
log = EventLog(stderr)
#: Progress of short commands: shown on a terminal only, so logs keep just results and errors.
note = EventLog(stderr, terminal_only=True)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors as one line and exit status 2, like every other error."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"rlcompile: error: {message} (see `{self.prog} --help`)\n")


class DeprecatedFlag(argparse.Action):
    """A flag's old name: stores into the new flag's destination and says, in one warning line, which flag replaces
    it (the old spelling keeps working)."""

    def __init__(self, option_strings, dest, replacement: str, **kwargs) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.replacement = replacement

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        warnings.warn(f"{option_string} is deprecated: use {self.replacement}", RlcompileWarning, stacklevel=2)
        setattr(namespace, self.dest, values)


#: Options renamed so that one noun names one role (``--config`` files may still use the old keys): old -> new.
RENAMED_OPTIONS = {
    "backend": "runtime", "backends": "runtimes", "libraries": "runtimes", "strategy": "agent", "time_limit": "budget",
}  # fmt: skip


def add_old_name(parser: argparse.ArgumentParser, old: str, new: str, dest: str, **kwargs) -> None:
    """Accept ``old`` as a hidden, deprecated spelling of ``new`` (stored into ``dest``)."""
    parser.add_argument(old, dest=dest, action=DeprecatedFlag, replacement=new, help=argparse.SUPPRESS, **kwargs)


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


#: What ``--quick`` means in every command: the quick preset, shorter timing blocks.
QUICK_HELP = "quick preset: shorter timing blocks (1 warm-up, >= 3 runs, >= 0.1 s)"


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs and of the agents (default 0)")
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    parser.add_argument("--min-time", type=float, default=None, help="seconds to keep repeating (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON to this file")


def add_runtime_options(parser: argparse.ArgumentParser) -> None:
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


def make_runtime(name: str, args: argparse.Namespace):
    """A runtime ``run``/``compare`` time a whole model with (``--runtime``, ``--runtimes``)."""
    from rlcompile import runtimes

    check_choice("runtime", name, MODEL_RUNTIMES)
    options = {"ort": {"opt_level": args.ort_opt}, "tvm": {"target": args.target}}.get(name, {})
    return runtimes.create(name, **options)


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


def accuracy_contract(args: argparse.Namespace):
    """``--precision``, ``--data``, ``--metric``, ``--tolerance`` as one contract (bad values: one line, exit 2)."""
    from rlcompile.precision.contract import DEFAULT_TOLERANCE, AccuracyContract, parse_tolerance

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


def add_objective_arguments(parser: argparse.ArgumentParser) -> None:
    """``--objective`` and ``--concurrency``: what a plan is judged on."""
    parser.add_argument("--objective", default="latency", choices=["latency", "throughput"],
                        help="latency: one request at a time (default); throughput: inferences per second "
                        "with --concurrency requests in flight, serving knobs chosen with the plan")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=None,
                        help="requests in flight under --objective throughput (default: the threads)")


def check_objective(args: argparse.Namespace) -> int | None:
    """The requests in flight ``--concurrency`` asks for; one line for a bad value or one given without
    ``--objective throughput``."""
    if args.concurrency is None:
        return None
    if args.objective != "throughput":
        raise RlcompileError("--concurrency is read under --objective throughput only")
    if args.concurrency < 1:
        raise RlcompileError(f"--concurrency {args.concurrency}: give the number of requests in flight, at least 1")
    return args.concurrency


def serving_line(serving: dict) -> str:
    """How a plan serves concurrent requests, as ``optimize`` and ``run`` say it."""
    return (f"{serving['kept']}, {serving['per_s']:.1f} inferences/s with {serving['concurrency']} requests in flight "
            f"(median {serving['p50_ms']:.2f} ms, p99 {serving['p99_ms']:.2f} ms a request)")


def add_precision_arguments(parser: argparse.ArgumentParser) -> None:
    from rlcompile.precision.contract import ALLOWED, METRICS

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
                        "class (default), none (a cold start), or a file from `rlcompile pretrain`")  # fmt: skip


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
