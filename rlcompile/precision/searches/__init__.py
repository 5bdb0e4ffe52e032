"""Precision searches by name: ``searches.create("greedy")(evaluator, modes, seed)``; one module each, one
:class:`~rlcompile.precision.searches.base.Search` signature."""

from __future__ import annotations

from rlcompile.errors import check_choice
from rlcompile.precision.searches.base import Search, SearchResult
from rlcompile.precision.searches.greedy import greedy
from rlcompile.precision.searches.proxy import proxy
from rlcompile.precision.searches.qlearning import qlearning
from rlcompile.precision.searches.random import random_search
from rlcompile.precision.searches.recipes import recipes
from rlcompile.precision.searches.uniform import uniform

SEARCHES: dict[str, Search] = {
    "uniform": uniform, "recipes": recipes, "greedy": greedy, "proxy": proxy, "qlearning": qlearning,
    "random": random_search,
}  # fmt: skip


def create(name: str) -> Search:
    check_choice("precision search", name, SEARCHES)
    return SEARCHES[name]


__all__ = ["SEARCHES", "Search", "SearchResult", "create"]
