"""Random search: uniformly random configurations (the floor every other strategy must beat)."""

from __future__ import annotations

from rlcompile.kernel.strategies.base import Proposal, SearchStrategy


class RandomSearch(SearchStrategy):
    name = "random"

    def _propose(self, count: int) -> list[Proposal]:
        self.stats.steps += 1
        return self.random_proposals(count)
