"""The ``rlcompile`` command line (:func:`main`); one module per group of subcommands."""

from __future__ import annotations

from rlcompile.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
