"""Layer-level solvers by name: ``solvers.create("qlearning")``."""

from __future__ import annotations

from rlcompile.errors import check_choice
from rlcompile.layer.solvers.base import Solver, SolverResult
from rlcompile.layer.solvers.qlearning import QLearning
from rlcompile.layer.solvers.simple import Exact, Greedy, RandomSearch, SingleLibrary

SOLVERS: dict[str, type[Solver]] = {
    "qlearning": QLearning, "random": RandomSearch, "greedy": Greedy, "single": SingleLibrary, "exact": Exact,
}  # fmt: skip


def create(name: str, **options: object) -> Solver:
    check_choice("layer agent", name, SOLVERS)
    return SOLVERS[name](**options)


__all__ = ["SOLVERS", "Solver", "SolverResult", "create"]
