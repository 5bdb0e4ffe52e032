"""Graph-level searches by name: ``search.create("taso", budget=...)``."""

from __future__ import annotations

from rlcompile.errors import RlcompileError
from rlcompile.graph.search.base import GraphSearch, Rewrite, SearchBudget, SearchResult, apply_exhaustively
from rlcompile.graph.search.greedy import GreedySearch
from rlcompile.graph.search.taso import TasoSearch

SEARCHES: dict[str, type[GraphSearch]] = {"greedy": GreedySearch, "taso": TasoSearch}
#: Agents that need torch and torch_geometric, imported only when asked for.
LEARNING_AGENTS = ("ppo", "world-model")


def search_class(name: str) -> type[GraphSearch]:
    if name == "ppo":
        from rlcompile.graph.agents.ppo import PPOSearch

        return PPOSearch
    if name == "world-model":
        from rlcompile.graph.agents.world_model import WorldModelSearch

        return WorldModelSearch
    try:
        return SEARCHES[name]
    except KeyError:
        choices = ", ".join([*SEARCHES, *LEARNING_AGENTS])
        raise RlcompileError(f"unknown graph agent {name!r}; choose from {choices}") from None


def create(name: str, **options: object) -> GraphSearch:
    return search_class(name)(**options)


__all__ = [
    "LEARNING_AGENTS",
    "SEARCHES",
    "GraphSearch",
    "Rewrite",
    "SearchBudget",
    "SearchResult",
    "apply_exhaustively",
    "create",
    "search_class",
]
