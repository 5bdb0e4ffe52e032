"""Layer-level solvers by name: ``solvers.create("qlearning")``."""

from __future__ import annotations

from rlcompile.errors import RlcompileError
from rlcompile.layer.solvers.base import Solver, SolverResult
from rlcompile.layer.solvers.qlearning import QLearning
from rlcompile.layer.solvers.simple import Exact, Greedy, RandomSearch, SingleLibrary

SOLVERS: dict[str, type[Solver]] = {
    "qlearning": QLearning, "random": RandomSearch, "greedy": Greedy, "single": SingleLibrary, "exact": Exact,
}  # fmt: skip


def create(name: str, **options: object) -> Solver:
    try:
        return SOLVERS[name](**options)
    except KeyError:
        raise RlcompileError(f"unknown layer agent {name!r}; choose from {', '.join(SOLVERS)}") from None


__all__ = ["SOLVERS", "Solver", "SolverResult", "create"]
