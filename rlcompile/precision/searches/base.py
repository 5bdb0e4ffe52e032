"""What every precision search shares: its result, the plans it measures in order, and the checks that decide whether
lowering any group can pay (the int8 mode, the groups the runtime's counters say save time).

A search is a function ``search(evaluator, modes, seed) -> SearchResult`` (:class:`Search`) that spends evaluations from
the shared :class:`~rlcompile.precision.evaluate.Evaluator` until its share runs out (:class:`BudgetSpent` ends it with
what it found); ``rlcompile.precision.searches.create(name)`` returns one by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from rlcompile.precision.evaluate import BudgetSpent, Evaluation, Evaluator
from rlcompile.precision.space import Mode, PrecisionPlan


@dataclass
class SearchResult:
    """What a search found: its best plan within the contract (``None`` if none) and what it spent."""

    solver: str
    best: Evaluation | None
    evaluations: int
    notes: dict = field(default_factory=dict)


class Search(Protocol):
    """One way of choosing a precision plan: measures plans through ``evaluator`` and returns the best within the
    contract."""

    def __call__(self, evaluator: Evaluator, modes: list[Mode], seed: int) -> SearchResult: ...


def all_int8(evaluator: Evaluator) -> frozenset[int]:
    return frozenset(range(len(evaluator.units)))



def run_plans(name: str, evaluator: Evaluator, plans: list[PrecisionPlan]) -> SearchResult:
    """Measure ``plans`` in order until the budget is spent; the best within the contract."""
    before = len(evaluator.visited)
    try:
        for plan in plans:
            evaluator(plan)
    except BudgetSpent:
        pass
    return SearchResult(name, evaluator.best(plans), len(evaluator.visited) - before)


def fastest_int8_mode(evaluator: Evaluator, modes: list[Mode]) -> Mode:
    """The mode whose all-int8 plan ran fastest (measured by :func:`uniform`, else measured now)."""
    timed = [(evaluator(PrecisionPlan(mode, all_int8(evaluator))), mode) for mode in modes]
    return min(timed, key=lambda pair: pair[0].ms)[1]


#: Why greedy and proxy stop at once on some models.
INT8_DOES_NOT_PAY = "everything in int8 is not faster than the fastest float plan"


def paying_int8_mode(evaluator: Evaluator, modes: list[Mode]) -> Mode | None:
    """The mode whose all-int8 plan ran fastest, when it runs faster than the fastest float plan timed in turns with
    it (:meth:`Evaluator.screen`: a plan's brief time alone can be a slow spell's); else ``None`` (lowering only
    some groups is then not expected to pay either, and the searches built on it stop)."""
    if not evaluator.units:
        return None
    mode = fastest_int8_mode(evaluator, modes)
    lowered = evaluator(PrecisionPlan(mode, all_int8(evaluator)))
    fastest_float = min((evaluator(PrecisionPlan(m)) for m in modes), key=lambda e: e.ms)
    if lowered.failure is not None:
        return None
    if lowered.screened_ms is None or fastest_float.screened_ms is None:
        evaluator.screen([fastest_float, lowered], evaluator.search_deadline)
    return mode if lowered.ranking_ms < fastest_float.ranking_ms else None



def paying_units(evaluator: Evaluator, mode: Mode, notes: dict) -> frozenset[int]:
    """The units whose int8 kernels run faster than their float ones in ``mode`` (:meth:`Evaluator.savings`: the
    runtime's counters), the rest only adding error; every unit where the savings are not known or none pays."""
    savings = evaluator.savings(mode)
    if savings is None:
        notes["savings"] = evaluator.savings_found[mode]
        return all_int8(evaluator)
    paying = paying_in(savings)
    notes["paying"] = len(paying)
    return paying or all_int8(evaluator)


def paying_in(saving: np.ndarray) -> frozenset[int]:
    """The units whose lowering saves time (a positive saving)."""
    return frozenset(int(i) for i in np.flatnonzero(saving > 0))



def local_when_short(evaluator: Evaluator, mode: Mode, plans_needed: int, notes: dict) -> np.ndarray | None:
    """The units' local deviations when ``plans_needed`` end-to-end plans do not fit in the search's time
    (:meth:`Evaluator.affords`) and the probe runs; else ``None``, the search then measuring end to end (a failed
    probe's reason goes into ``notes``)."""
    if evaluator.affords(plans_needed):
        return None
    deviations = evaluator.sensitivity(mode)
    if deviations is None:
        notes["probe_failed"] = evaluator.sensitivities[mode.runtime, mode.recipe]
    return deviations


def lowering_search(name: str, evaluator: Evaluator, modes: list[Mode],
                    lower: Callable[[Mode, list[PrecisionPlan], dict], None]) -> SearchResult:  # fmt: skip
    """The frame of a search that lowers groups from the paying int8 mode (greedy, the proxy): none when int8 does not
    pay (:func:`paying_int8_mode`), else ``lower(mode, plans, notes)`` appends the plans it measured; a spent budget
    ends it with what it found."""
    before = len(evaluator.visited)
    plans: list[PrecisionPlan] = []
    notes: dict = {}
    try:
        mode = paying_int8_mode(evaluator, modes)
        if mode is None:
            return SearchResult(name, None, len(evaluator.visited) - before, {"skipped": INT8_DOES_NOT_PAY})
        notes["mode"] = mode.label
        lower(mode, plans, notes)
    except BudgetSpent:
        notes["stopped"] = "budget spent"
    return SearchResult(name, evaluator.best(plans), len(evaluator.visited) - before, notes)
