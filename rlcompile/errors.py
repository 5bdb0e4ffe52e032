"""User-facing errors.

Everything raised as an :class:`RlcompileError` is a problem with the user's input or environment, not
a bug: the CLI prints its message as one line and exits with status 2. Keep messages to one line that
says what is wrong and, where possible, what to do about it.
"""

from __future__ import annotations

from collections.abc import Collection


class RlcompileError(Exception):
    """A problem the user can fix; reported as one line, exit status 2."""

    exit_status = 2


def check_choice(kind: str, name: str, choices: Collection[str]) -> None:
    """Refuse ``name`` unless it is one of ``choices``: "unknown {kind} ...; choose from ..."."""
    if name not in choices:
        raise RlcompileError(f"unknown {kind} {name!r}; choose from {', '.join(choices)}")


class ModelError(RlcompileError):
    """The model cannot be found, read or understood."""


class DynamicShapeError(ModelError):
    """An input has dynamic dimensions and no ``--input-shape`` fixes them."""


class UnsupportedOperatorError(ModelError):
    """A backend cannot handle an operator of the model."""


class TargetError(RlcompileError):
    """The compilation target is unknown or not available on this machine."""


class BudgetError(RlcompileError):
    """A search budget (trials, episodes, time) is empty or invalid."""


class RlcompileWarning(UserWarning):
    """Something was repaired or skipped and the run goes on; the CLI prints it as one line."""


def first_line(error: BaseException) -> str:
    """The first non-empty line of an exception's message (TVM and ORT messages span pages)."""
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__
