"""The interface every graph-level search implements, and what it reports.

A search takes a graph, the rules and a cost model and returns the cheapest graph it found with the
rewrites that lead there. Budgets are counted in graphs expanded (``max_steps``) and in wall time.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import onnx_ir as ir

from rlcompile.graph import onnx_graph
from rlcompile.graph.cost import CostModel
from rlcompile.graph.locations import Candidate, candidates
from rlcompile.graph.rules import Rule


@dataclass(frozen=True)
class Rewrite:
    """One applied rewrite and the estimated cost of the graph after it."""

    rule: str
    location: tuple[str, ...]
    cost_after_ms: float

    def to_dict(self) -> dict:
        return asdict(self) | {"location": list(self.location)}

    def describe(self) -> str:
        return f"{self.rule} @ {' + '.join(self.location)}"


@dataclass(frozen=True)
class SearchBudget:
    max_steps: int = 100
    time_limit_s: float = 300.0


@dataclass
class SearchResult:
    model: ir.Model
    initial_cost_ms: float
    final_cost_ms: float
    rewrites: list[Rewrite]
    steps: int = 0
    graphs_evaluated: int = 0
    search_seconds: float = 0.0
    stopped_by: str = "converged"
    extra: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {
            "initial_cost_ms": self.initial_cost_ms,
            "final_cost_ms": self.final_cost_ms,
            "rewrites": [rewrite.to_dict() for rewrite in self.rewrites],
            "steps": self.steps,
            "graphs_evaluated": self.graphs_evaluated,
            "search_seconds": self.search_seconds,
            "stopped_by": self.stopped_by,
        } | self.extra


#: Called after each step with (step, best cost so far, graphs evaluated).
ProgressCallback = Callable[[int, float, int], None]


class GraphSearch(ABC):
    """A search over rewrite sequences."""

    name: str

    def __init__(self, budget: SearchBudget | None = None) -> None:
        self.budget = budget or SearchBudget()

    @abstractmethod
    def search(
        self, model: ir.Model, rules: Sequence[Rule], cost_model: CostModel, progress: ProgressCallback | None = None
    ) -> SearchResult:
        """The cheapest graph found; ``model`` is left intact."""


@dataclass
class Evaluated:
    """A candidate graph with its cost and how it was reached."""

    model: ir.Model
    cost_ms: float
    history: tuple[Rewrite, ...]


def expand(state: Evaluated, rules: Sequence[Rule], cost_model: CostModel) -> list[tuple[Candidate, Evaluated]]:
    """Every one-rewrite successor of ``state``, costed."""
    successors = []
    for candidate in candidates(state.model, rules):
        model = candidate.apply(state.model)
        cost = cost_model.graph_cost(model)
        rewrite = Rewrite(candidate.rule.id, candidate.location.nodes, cost)
        successors.append((candidate, Evaluated(model, cost, (*state.history, rewrite))))
    return successors


def apply_exhaustively(model: ir.Model, rules: Sequence[Rule]) -> tuple[ir.Model, list[Rewrite]]:
    """Apply ``rules`` (fusions) wherever they match until none does; costs are not consulted."""
    applied = []
    while True:
        found = candidates(model, rules, cap=1)
        if not found:
            return model, applied
        model = found[0].apply(model)
        applied.append(Rewrite(found[0].rule.id, found[0].location.nodes, float("nan")))


class Clock:
    """Wall time since the search started, against its budget."""

    def __init__(self, budget: SearchBudget) -> None:
        self.started = time.perf_counter()
        self.budget = budget

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def out_of_time(self) -> bool:
        return self.elapsed >= self.budget.time_limit_s


def graph_key(model: ir.Model) -> str:
    return onnx_graph.graph_hash(model.graph)
