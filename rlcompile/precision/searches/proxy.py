"""``proxy``: the exact optimum of an additive proxy. Each group's error when it alone is lowered (measured end to end
where the time affords it, else its local deviation), its saving what the runtime's counters measured its int8 kernels
to save (:mod:`rlcompile.precision.savings`), else its share of the MACs times what lowering everything saves; the
subset that saves most with the summed errors within the tolerance (a 0/1 knapsack, solved exactly), then measured.
When that misses (a metric that counts samples moves in steps and rarely adds up) or on local deviations, the
knapsack's limit on the groups' deviations is bisected on measured plans.
"""

from __future__ import annotations

import numpy as np

from rlcompile.precision.evaluate import Evaluator
from rlcompile.precision.searches.base import (
    SearchResult,
    all_int8,
    local_when_short,
    lowering_search,
    paying_in,
)
from rlcompile.precision.space import Mode, PrecisionPlan, weight_share

#: Knapsack resolution: the tolerance is cut into this many steps.
KNAPSACK_STEPS = 2000

#: Measured plans the deviation proxy's bisection may spend.
BISECTION_STEPS = 6

def proxy(evaluator: Evaluator, modes: list[Mode], seed: int) -> SearchResult:
    """The exact optimum of the additive proxy, measured, its limit bisected on measured plans.

    Each group alone lowered is measured end to end where the search's time affords it, and the optimum with the
    summed excess within the tolerance is tried first (a counting metric moves in steps and rarely adds up: the
    groups' end-to-end deviations then serve); else each group's error is its local deviation
    (:meth:`Evaluator.sensitivity`: one probe run)."""

    def lower(mode: Mode, plans: list[PrecisionPlan], notes: dict) -> None:
        saving = unit_saving(evaluator, mode, notes)
        paying = paying_in(saving)
        deviations = local_when_short(evaluator, mode, len(paying) + BISECTION_STEPS + 1, notes)
        notes["additive_error"] = "local deviation" if deviations is not None else "each group alone, end to end"
        if deviations is None:
            deviations = alone_deviations(evaluator, mode, saving, paying, plans, notes)
        if deviations is not None:
            notes["bisected"] = bisect_deviation(evaluator, mode, saving, deviations, plans)

    return lowering_search("proxy", evaluator, modes, lower)


def unit_saving(evaluator: Evaluator, mode: Mode, notes: dict) -> np.ndarray:
    """What lowering each unit saves (ms): measured by the runtime's counters (:meth:`Evaluator.savings`) where it
    keeps them, else its share of the MACs times what lowering every unit saved (the brief times of the float and
    the all-int8 plan)."""
    measured = evaluator.savings(mode)
    notes["saving_by"] = "kernel counters" if measured is not None else "share of the MACs"
    if measured is not None:
        return measured
    float_ms = evaluator(PrecisionPlan(mode)).ms
    lowered_ms = evaluator(PrecisionPlan(mode, all_int8(evaluator))).ms
    return weight_share(evaluator.units) * max(float_ms - lowered_ms, 0.0)


def alone_deviations(evaluator: Evaluator, mode: Mode, saving: np.ndarray, candidates: frozenset[int],
                     plans: list[PrecisionPlan], notes: dict) -> np.ndarray | None:  # fmt: skip
    """Each of ``candidates`` alone lowered, measured; the optimum with the summed excess within the tolerance,
    measured. ``None`` when that plan is within; else each group's end-to-end deviation (infinite where it alone
    leaves the tolerance or fails, or is no candidate: it stays float)."""
    alone = {i: evaluator(PrecisionPlan(mode, frozenset({i}))) for i in sorted(candidates)}
    costs = np.array([max(alone[i].excess, 0.0) if i in alone and alone[i].failure is None else np.inf
                      for i in range(len(evaluator.units))])  # fmt: skip
    chosen = knapsack(saving, costs, evaluator.tolerance)
    plans.append(PrecisionPlan(mode, frozenset(chosen)))
    notes["proxy_saving_ms"] = float(saving[chosen].sum())
    if evaluator(plans[-1]).within:
        return None
    return np.array([alone[i].deviation if i in alone and alone[i].within and alone[i].failure is None
                     and np.isfinite(alone[i].deviation) else np.inf for i in range(len(evaluator.units))])  # fmt: skip



def bisect_deviation(evaluator: Evaluator, mode: Mode, saving: np.ndarray, deviation: np.ndarray,
                     plans: list[PrecisionPlan]) -> list[float]:  # fmt: skip
    """Knapsack optima on each group's deviation, the limit bisected (geometrically) between one group's least
    deviation and the sum of all: raised after a plan within the tolerance, lowered after a miss. Groups of
    infinite deviation stay float. The limits tried, in order."""
    finite = deviation[np.isfinite(deviation) & (deviation > 0)]
    if not finite.size:
        return []
    low, high, limits = float(finite.min()), float(finite.sum()), []
    for _ in range(BISECTION_STEPS):
        limit = float(np.sqrt(low * high))
        limits.append(limit)
        plans.append(PrecisionPlan(mode, frozenset(knapsack(saving, deviation, limit))))
        if evaluator(plans[-1]).within:
            low = limit
        else:
            high = limit
    return limits


def knapsack(values: np.ndarray, costs: np.ndarray, limit: float) -> list[int]:
    """The indices maximising the summed value with summed cost <= ``limit`` (exact on a grid of costs)."""
    if limit <= 0:
        return [i for i, (value, cost) in enumerate(zip(values, costs, strict=True)) if cost == 0 and value > 0]
    steps = KNAPSACK_STEPS
    weights = [int(np.ceil(cost / limit * steps - 1e-9)) if np.isfinite(cost) else steps + 1 for cost in costs]
    best = np.full(steps + 1, -np.inf)
    best[0] = 0.0
    keep = np.zeros((len(values), steps + 1), dtype=bool)
    for index, (value, weight) in enumerate(zip(values, weights, strict=True)):
        if weight > steps:
            continue
        shifted = np.full(steps + 1, -np.inf)
        shifted[weight:] = best[: steps + 1 - weight] + value
        better = shifted > best
        keep[index] = better
        best = np.where(better, shifted, best)
    chosen, capacity = [], int(np.argmax(best))
    for index in range(len(values) - 1, -1, -1):
        if keep[index, capacity]:
            chosen.append(index)
            capacity -= weights[index]
    return sorted(chosen)
