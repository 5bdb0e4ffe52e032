"""Graph-level searches by name: ``search.create("taso", budget=...)``."""

from __future__ import annotations

from rlcompile.errors import RlcompileError
from rlcompile.graph.search.base import GraphSearch, Rewrite, SearchBudget, SearchResult, apply_exhaustively
from rlcompile.graph.search.greedy import GreedySearch
from rlcompile.graph.search.taso import TasoSearch

SEARCHES: dict[str, type[GraphSearch]] = {"greedy": GreedySearch, "taso": TasoSearch}


def create(name: str, **options: object) -> GraphSearch:
    try:
        cls = SEARCHES[name]
    except KeyError:
        raise RlcompileError(f"unknown graph agent {name!r}; choose from {', '.join(SEARCHES)}") from None
    return cls(**options)


__all__ = ["SEARCHES", "GraphSearch", "Rewrite", "SearchBudget", "SearchResult", "apply_exhaustively", "create"]
