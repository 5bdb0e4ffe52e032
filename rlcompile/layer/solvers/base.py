"""One interface for every way of choosing primitives on a lookup table."""

from __future__ import annotations

import time
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
    def solve(self, problem: SelectionProblem, seed: int = 0, seconds: float | None = None) -> SolverResult:
        """The plan this solver chooses on ``problem``. ``seconds``: the time it may take; a search fits its
        episodes into it (:func:`fit_episodes`), a solver that answers in one pass ignores it."""


#: A search under a time limit runs at least this many episodes, and times this many before fitting the rest.
MIN_EPISODES = 50


def fit_episodes(planned: int, elapsed_s: float, done: int, seconds: float | None) -> int:
    """How many episodes a search runs in all: ``planned``, or fewer when ``done`` episodes took ``elapsed_s`` and
    the rest at that pace would pass ``seconds`` (never below :data:`MIN_EPISODES`)."""
    if seconds is None or done == 0 or elapsed_s <= 0:
        return planned
    return max(min(planned, MIN_EPISODES), min(planned, int(seconds * done / elapsed_s)))


class EpisodeBudget:
    """The episodes a search runs: ``planned``, refitted once to ``seconds`` (:func:`fit_episodes`) when
    ``fit_after`` episodes are done, timed from this budget's creation."""

    def __init__(self, planned: int, seconds: float | None, fit_after: int = MIN_EPISODES) -> None:
        self.planned = self.total = planned
        self.seconds = seconds
        self.fit_after = fit_after
        self.started = time.monotonic()

    def allows(self, done: int) -> bool:
        """Whether the search runs another episode after ``done``."""
        if done == self.fit_after:
            self.total = fit_episodes(self.planned, time.monotonic() - self.started, done, self.seconds)
        return done < self.total


def default_episodes(problem: SelectionProblem) -> int:
    """Episodes for the searches: grows with the number of layers (the seed runs ~1000 on its CNNs)."""
    return max(500, 20 * len(problem))
