"""``greedy``: NNCF's accuracy control. Everything in int8, then groups raised back to float, the most sensitive first,
until within tolerance. Unlike NNCF, it starts from the groups whose int8 kernels run faster than their float ones,
where the runtime's counters tell (:func:`~rlcompile.precision.searches.base.paying_units`). NNCF ranks by reverting
each group alone, one end-to-end evaluation per group, and so does this where the time affords it; else each group's
*local deviation* ranks them, all from one probe run (:mod:`rlcompile.precision.sensitivity`). The count raised back
is bisected rather than raised one at a time.
"""

from __future__ import annotations

import numpy as np

from rlcompile.precision.evaluate import Evaluator
from rlcompile.precision.searches.base import (
    SearchResult,
    all_int8,
    local_when_short,
    lowering_search,
    paying_units,
)
from rlcompile.precision.space import Mode, PrecisionPlan


def greedy(evaluator: Evaluator, modes: list[Mode], seed: int) -> SearchResult:
    """All groups in int8, then raised back by sensitivity until within tolerance (NNCF's rule).

    The most sensitive groups are raised first, ranked by reverting each group alone as NNCF does (one evaluation
    per group) where the search's time affords it, else by each group's local deviation from one probe run
    (:meth:`Evaluator.sensitivity`; :func:`sensitivity_ranking`). How many are raised is bisected
    (:func:`raise_back`)."""

    def lower(mode: Mode, plans: list[PrecisionPlan], notes: dict) -> None:
        plans.append(PrecisionPlan(mode, all_int8(evaluator)))
        lowered = paying_units(evaluator, mode, notes)
        plans.append(PrecisionPlan(mode, lowered))
        if not evaluator(plans[-1]).within and lowered:
            ranking = sensitivity_ranking(evaluator, mode, lowered, plans, notes)
            notes["ranking"] = [evaluator.units[i].group for i in ranking]
            notes["raised"] = raise_back(evaluator, mode, lowered, ranking, plans)

    return lowering_search("greedy", evaluator, modes, lower)



def sensitivity_ranking(evaluator: Evaluator, mode: Mode, lowered: frozenset[int], plans: list[PrecisionPlan],
                        notes: dict) -> list[int]:  # fmt: skip
    """The units of ``lowered``, most sensitive first: by the error with each one reverted alone from ``lowered``, as
    NNCF ranks, where the search's time affords those plans and a couple more (each is measured and joins ``plans``: the
    search's as soon as it is measured); else by local deviation (one probe run), unless the probe cannot run.

    The end-to-end ranking sees what a group's error does downstream, the local one only where it arises: on
    PaddleOCR's recogniser with 10 minutes (Zen 3) greedy raised 27 of 47 groups back on the local ranking and 1
    on NNCF's; at ``--quick`` only the local one fits."""
    deviations = local_when_short(evaluator, mode, len(lowered) + 2, notes)
    if deviations is not None:
        notes["ranked_by"] = "local deviation"
        return sorted(lowered, key=lambda i: -deviations[i])
    notes["ranked_by"] = "reverting each group"
    reverted = {}
    for i in sorted(lowered):
        plans.append(PrecisionPlan(mode, lowered - {i}))
        reverted[i] = evaluator(plans[-1])
    return sorted(lowered, key=lambda i: reverted[i].error if reverted[i].failure is None else np.inf)



def raise_back(evaluator: Evaluator, mode: Mode, lowered: frozenset[int], ranking: list[int],
               plans: list[PrecisionPlan]) -> int:  # fmt: skip
    """The fewest of ``ranking``'s first units raised back to float from ``lowered`` that bring the plan within
    tolerance: the first alone (a single culprit is common), then the count bisected between the last miss and
    all (every plan joins ``plans``; all raised is the float plan, within by definition). About log2(units)
    measured plans where raising one at a time takes one per unit raised; and from the second on, where fewer
    than half must be raised, the search holds a plan within tolerance whenever its time runs out."""

    def within(count: int) -> bool:
        plans.append(PrecisionPlan(mode, lowered - frozenset(ranking[:count])))
        return evaluator(plans[-1]).within

    if within(1):
        return 1
    missed, count = 1, len(ranking)
    while count - missed > 1:
        middle = (missed + count) // 2
        missed, count = (missed, middle) if within(middle) else (middle, count)
    return count
