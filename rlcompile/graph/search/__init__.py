"""Graph-level searches by name: ``search.create("taso", budget=...)``."""

from __future__ import annotations

from rlcompile.errors import check_choice
from rlcompile.graph.search.base import GraphSearch, Rewrite, SearchBudget, SearchResult, apply_exhaustively
from rlcompile.graph.search.greedy import GreedySearch
from rlcompile.graph.search.taso import TasoSearch

SEARCHES: dict[str, type[GraphSearch]] = {"greedy": GreedySearch, "taso": TasoSearch}
#: Agents that need torch and torch_geometric, imported only when asked for.
LEARNING_AGENTS = ("ppo", "world-model")


def check_name(name: str) -> None:
    """Refuse an unknown agent name without importing a learning agent (torch_geometric: ~10 s on 2 cores)."""
    check_choice("graph agent", name, [*SEARCHES, *LEARNING_AGENTS])


def search_class(name: str) -> type[GraphSearch]:
    check_name(name)
    if name == "ppo":
        from rlcompile.graph.agents.ppo import PPOSearch

        return PPOSearch
    if name == "world-model":
        from rlcompile.graph.agents.world_model import WorldModelSearch

        return WorldModelSearch
    return SEARCHES[name]


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
    "check_name",
    "create",
    "search_class",
]
