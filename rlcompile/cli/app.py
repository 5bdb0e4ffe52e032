"""The ``rlcompile`` command: parses flags, calls the library, prints results.

Every :class:`~rlcompile.errors.RlcompileError` becomes one line on stderr and exit status 2; anything
else is a bug and keeps its traceback. Each subcommand's flags and handler live in a module of this package.
"""

from __future__ import annotations

import argparse
import errno
import json
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from rlcompile import __version__
from rlcompile.cli import graph, kernel, layer, optimize, run
from rlcompile.cli.common import RENAMED_OPTIONS, OneLineParser, check_output_paths, log, note, stderr
from rlcompile.errors import RlcompileError, RlcompileWarning
from rlcompile.names import (
    TUNE_MODULES,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rlcompile",
        description="Make trained networks run faster with reinforcement-learning compiler agents.",
    )
    parser.add_argument("--version", action="version", version=f"rlcompile {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)

    for module in (run, kernel, graph, layer, optimize):
        module.add_parsers(commands)
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
    options = {RENAMED_OPTIONS.get(key, key): value for key, value in options.items()}
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
