"""One interface for every way of choosing primitives on a lookup table."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from rlcompile.layer.problem import SelectionProblem


@dataclass
class SolverResult:
    plan: list[int]
    total_ms: float
    episodes: int = 0
    #: best total so far after each episode (searches only), for the seed's Figure 5
    history: list[float] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def episodes_to_reach(self, target_ms: float, tolerance: float = 1e-9) -> int | None:
        """First episode (1-based) whose best total is within ``tolerance`` (relative) of ``target_ms``."""
        for episode, best in enumerate(self.history, 1):
            if best <= target_ms * (1 + tolerance):
                return episode
        return None


class Solver(ABC):
    name: ClassVar[str]

    @abstractmethod
    def solve(self, problem: SelectionProblem, seed: int = 0) -> SolverResult: ...


def default_episodes(problem: SelectionProblem) -> int:
    """Episodes for the searches: grows with the number of layers (the seed runs ~1000 on its CNNs)."""
    return max(500, 20 * len(problem))
