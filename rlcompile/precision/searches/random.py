"""``random``: random modes and random int8 subsets, measured in order (the searches' floor)."""

from __future__ import annotations

import numpy as np

from rlcompile.precision.evaluate import Evaluator
from rlcompile.precision.searches.base import SearchResult, run_plans
from rlcompile.precision.space import Mode, PrecisionPlan


def random_search(evaluator: Evaluator, modes: list[Mode], seed: int, count: int | None = None) -> SearchResult:
    """Random modes and random int8 subsets."""
    rng = np.random.default_rng(seed)
    units = len(evaluator.units)
    plans = []
    for _ in range(count or max(20, 2 * units)):
        share = rng.random()
        plans.append(PrecisionPlan(modes[int(rng.integers(len(modes)))],
                                   frozenset(i for i in range(units) if rng.random() < share)))  # fmt: skip
    return run_plans("random", evaluator, plans)
