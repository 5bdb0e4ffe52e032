"""The baselines on the same table: random search, greedy per layer, best single library, exact DP."""

from __future__ import annotations

import random

from rlcompile.layer.problem import SelectionProblem, best_within_library, exact
from rlcompile.layer.solvers.base import EpisodeBudget, Solver, SolverResult, default_episodes


class RandomSearch(Solver):
    """Uniformly random complete plans, as many as Q-learning's episodes; the best one."""

    name = "random"

    def __init__(self, episodes: int | None = None) -> None:
        self.episodes = episodes

    def solve(self, problem: SelectionProblem, seed: int = 0, seconds: float | None = None) -> SolverResult:
        rng = random.Random(seed)
        best_plan, best_total, history = None, float("inf"), []
        budget = EpisodeBudget(self.episodes or default_episodes(problem), seconds)
        while budget.allows(len(history)):
            plan = [rng.randrange(len(options)) for options in problem.options]
            total = problem.total(plan)
            if total < best_total:
                best_plan, best_total = plan, total
            history.append(best_total)
        return SolverResult(best_plan, best_total, len(history), history, {"episodes_planned": budget.planned})


class Greedy(Solver):
    """The fastest primitive of every layer, ignoring what converting between them costs."""

    name = "greedy"

    def solve(self, problem: SelectionProblem, seed: int = 0, seconds: float | None = None) -> SolverResult:
        plan = [problem.fastest(layer) for layer in range(len(problem))]
        return SolverResult(plan, problem.total(plan))


class Exact(Solver):
    """The optimum of the table (dynamic programming over live layouts; see :func:`problem.exact`)."""

    name = "exact"

    def solve(self, problem: SelectionProblem, seed: int = 0, seconds: float | None = None) -> SolverResult:
        result = exact(problem)
        return SolverResult(result.plan, result.total_ms, extra={"proven_optimal": result.proven_optimal,
                                                                 "widest_state_set": result.max_states})  # fmt: skip


class SingleLibrary(Solver):
    """The best plan that uses one library everywhere it can (the default elsewhere), best library wins."""

    name = "single"

    def solve(self, problem: SelectionProblem, seed: int = 0, seconds: float | None = None) -> SolverResult:
        per_library = {library: best_within_library(problem, library) for library in problem.libraries()}
        library, (plan, total) = min(per_library.items(), key=lambda item: item[1][1])
        per_library_ms = {name: value[1] for name, value in per_library.items()}
        return SolverResult(plan, total, extra={"library": library, "per_library_ms": per_library_ms})
