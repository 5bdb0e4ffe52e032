"""``uniform``: every mode with nothing and with everything in int8 (all fp32, all bf16, all int8 ...)."""

from __future__ import annotations

from rlcompile.precision.evaluate import Evaluator
from rlcompile.precision.searches.base import SearchResult, all_int8, run_plans
from rlcompile.precision.space import Mode, PrecisionPlan


def uniform(evaluator: Evaluator, modes: list[Mode], seed: int, int8: bool = True) -> SearchResult:
    """Each mode with no group and with every group in int8."""
    plans = [PrecisionPlan(mode) for mode in modes]
    if int8 and evaluator.units:
        plans += [PrecisionPlan(mode, all_int8(evaluator)) for mode in modes]
    return run_plans("uniform", evaluator, plans)
