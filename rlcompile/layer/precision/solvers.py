"""Searches over precision plans, one interface: ``solve(evaluator, modes, seed) -> SearchResult``.

- ``uniform``: every mode with nothing and with everything in int8 (all fp32, all bf16, all int8 ...);
- ``greedy``: NNCF's accuracy control: everything in int8, then groups raised back to float, the most
  sensitive first, until within tolerance; unlike NNCF, it starts from the groups whose int8 kernels run
  faster than their float ones, where the runtime's counters tell (:func:`paying_units`). NNCF ranks by
  reverting each group alone, one end-to-end evaluation per group, and so does this where the time affords
  it; else each group's *local deviation* ranks them, all from one probe run
  (:mod:`rlcompile.layer.precision.sensitivity`). The count raised back is bisected rather than raised one
  at a time;
- ``proxy``: the exact optimum of an additive proxy: each group's error when it alone is lowered (measured
  end to end where the time affords it, else its local deviation), its saving what the runtime's counters
  measured its int8 kernels to save (:mod:`rlcompile.layer.precision.savings`), else its share of the MACs
  times what lowering everything saves; the subset that saves most with the summed errors within the
  tolerance (a 0/1 knapsack, solved exactly), then measured; when that misses (a metric that counts samples
  moves in steps and rarely adds up) or on local deviations, the knapsack's limit on the groups' deviations
  is bisected on measured plans;
- ``qlearning``: QS-DNN's agent: one decision per group (float or int8) after the mode, tabular Q-learning
  with epsilon-greedy episodes and experience replay (every plan measured before it, then its own), reward
  -latency/fp32 latency, or a penalty below any valid plan when the measured error leaves the tolerance; every
  plan it visits is measured end to end (cached);
- ``random``: random plans.

Each search spends evaluations from the shared :class:`~rlcompile.layer.precision.evaluate.Evaluator`
until its share runs out (:class:`BudgetSpent` ends it with what it found).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rlcompile.errors import check_choice
from rlcompile.layer.precision.evaluate import BudgetSpent, Evaluation, Evaluator
from rlcompile.layer.precision.space import Mode, PrecisionPlan, weight_share

#: Knapsack resolution: the tolerance is cut into this many steps.
KNAPSACK_STEPS = 2000


@dataclass
class SearchResult:
    """What a search found: its best plan within the contract (``None`` if none) and what it spent."""

    solver: str
    best: Evaluation | None
    evaluations: int
    notes: dict = field(default_factory=dict)


def all_int8(evaluator: Evaluator) -> frozenset[int]:
    return frozenset(range(len(evaluator.units)))


def uniform(evaluator: Evaluator, modes: list[Mode], seed: int, int8: bool = True) -> SearchResult:
    """Each mode with no group and with every group in int8."""
    plans = [PrecisionPlan(mode) for mode in modes]
    if int8 and evaluator.units:
        plans += [PrecisionPlan(mode, all_int8(evaluator)) for mode in modes]
    return run_plans("uniform", evaluator, plans)


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


def greedy(evaluator: Evaluator, modes: list[Mode], seed: int) -> SearchResult:
    """All groups in int8, then raised back by sensitivity until within tolerance (NNCF's rule).

    The most sensitive groups are raised first, ranked by reverting each group alone as NNCF does (one evaluation
    per group) where the search's time affords it, else by each group's local deviation from one probe run
    (:meth:`Evaluator.sensitivity`; :func:`sensitivity_ranking`). How many are raised is bisected
    (:func:`raise_back`)."""
    before = len(evaluator.visited)
    plans: list[PrecisionPlan] = []
    notes: dict = {}
    try:
        mode = paying_int8_mode(evaluator, modes)
        if mode is None:
            return SearchResult("greedy", None, len(evaluator.visited) - before, {"skipped": INT8_DOES_NOT_PAY})
        notes["mode"] = mode.label
        plans.append(PrecisionPlan(mode, all_int8(evaluator)))
        lowered = paying_units(evaluator, mode, notes)
        plans.append(PrecisionPlan(mode, lowered))
        if not evaluator(plans[-1]).within and lowered:
            ranking = sensitivity_ranking(evaluator, mode, lowered, plans, notes)
            notes["ranking"] = [evaluator.units[i].group for i in ranking]
            notes["raised"] = raise_back(evaluator, mode, lowered, ranking, plans)
    except BudgetSpent:
        notes["stopped"] = "budget spent"
    return SearchResult("greedy", evaluator.best(plans), len(evaluator.visited) - before, notes)


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


def sensitivity_ranking(evaluator: Evaluator, mode: Mode, lowered: frozenset[int], plans: list[PrecisionPlan],
                        notes: dict) -> list[int]:  # fmt: skip
    """The units of ``lowered``, most sensitive first: by the error with each one reverted alone from ``lowered``, as
    NNCF ranks, where the search's time affords those plans and a couple more (each is measured and joins ``plans``: the
    search's as soon as it is measured); else by local deviation (one probe run), unless the probe cannot run.

    The end-to-end ranking sees what a group's error does downstream, the local one only where it arises: on
    PaddleOCR's recogniser with 10 minutes (Zen 3, stop 69) greedy raised 27 of 47 groups back on the local
    ranking where NNCF's had raised 1 (stop 68); at ``--quick`` only the local one fits."""
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


def local_when_short(evaluator: Evaluator, mode: Mode, plans_needed: int, notes: dict) -> np.ndarray | None:
    """The units' local deviations when ``plans_needed`` end-to-end plans do not fit in the search's time
    (:meth:`Evaluator.affords`) and the probe runs; else ``None``, the search then measuring end to end (a failed
    probe's reason goes into ``notes``)."""
    if evaluator.affords(plans_needed):
        return None
    deviations = evaluator.sensitivity(mode)
    if deviations is None:
        notes["probe_failed"] = evaluator.sensitivities[mode.runtime]
    return deviations


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


def proxy(evaluator: Evaluator, modes: list[Mode], seed: int) -> SearchResult:
    """The exact optimum of the additive proxy, measured, its limit bisected on measured plans.

    Each group alone lowered is measured end to end where the search's time affords it, and the optimum with the
    summed excess within the tolerance is tried first (a counting metric moves in steps and rarely adds up: the
    groups' end-to-end deviations then serve); else each group's error is its local deviation
    (:meth:`Evaluator.sensitivity`: one probe run)."""
    before = len(evaluator.visited)
    plans: list[PrecisionPlan] = []
    notes: dict = {}
    try:
        mode = paying_int8_mode(evaluator, modes)
        if mode is None:
            return SearchResult("proxy", None, len(evaluator.visited) - before, {"skipped": INT8_DOES_NOT_PAY})
        notes["mode"] = mode.label
        saving = unit_saving(evaluator, mode, notes)
        paying = paying_in(saving)
        deviations = local_when_short(evaluator, mode, len(paying) + BISECTION_STEPS + 1, notes)
        notes["additive_error"] = "local deviation" if deviations is not None else "each group alone, end to end"
        if deviations is None:
            deviations = alone_deviations(evaluator, mode, saving, paying, plans, notes)
        if deviations is not None:
            notes["bisected"] = bisect_deviation(evaluator, mode, saving, deviations, plans)
    except BudgetSpent:
        notes["stopped"] = "budget spent"
    return SearchResult("proxy", evaluator.best(plans), len(evaluator.visited) - before, notes)


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


#: Measured plans the deviation proxy's bisection may spend.
BISECTION_STEPS = 6


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


#: Decisions a Q-learning episode explores away from its policy, expected, at the start and at the end of its
#: episodes once it has experience to start from (the searches before it measured plans): each episode is one
#: measurement, so it searches near what it learned rather than at random (QS-DNN's half of the episodes at
#: epsilon 1 is for free lookups in a table, not for measured plans).
EXPLORED_FIRST, EXPLORED_LAST = 3.0, 1.0


def qlearning(evaluator: Evaluator, modes: list[Mode], seed: int, episodes: int | None = None,
              epsilon_floor: float = 0.05) -> SearchResult:  # fmt: skip
    """Tabular Q-learning over (mode, then float/int8 per group), rewarded by measured plans.

    QS-DNN's experience replay: every plan already measured (the searches before it share the evaluator's cache) is
    its first experience, and each episode's plan joins it. A decision is worth the best reward of a plan that made
    it (:class:`QValues`; the terminal reward, gamma 1), so the policy is the best plan measured and the episodes
    search around it, each better plan they find the new policy. Without experience the episodes start at random
    (epsilon 1) as QS-DNN's do; with it, they explore :data:`EXPLORED_FIRST` decisions away from the policy, down to
    :data:`EXPLORED_LAST`. On the tests' counting stand-in (12 random instances of 12-47 groups, each search alone
    on a budget of the groups + 13 plans) its plans lowered 55% as many groups as the optimum, 39% before replay and
    these values; after the other searches, it starts from the best of what they measured."""
    rng = np.random.default_rng(seed)
    units = len(evaluator.units)
    episodes = episodes or max(20, 2 * units)
    values = QValues(len(modes), units)
    before = len(evaluator.visited)
    plans: list[PrecisionPlan] = []
    notes: dict = {}
    try:
        reference_ms = evaluator(PrecisionPlan(modes[0])).ms
        for plan, evaluation in list(evaluator.cache.items()):
            if plan.mode in modes:
                values.learn(modes.index(plan.mode), plan.int8, reward_of(evaluation, reference_ms))
        experienced = any(plan.int8 for plan in evaluator.cache)
        known = evaluator.best(list(evaluator.cache))
        notes["started_from"] = known.plan.label(units) if known else None
        for episode in range(episodes):
            epsilon = exploration(episode, episodes, units, experienced, epsilon_floor)
            mode_index = act(rng, epsilon, len(modes), values.best_mode())
            int8 = frozenset(i for i in range(units) if act(rng, epsilon, 2, int(values.prefers_int8(i))))
            plan = PrecisionPlan(modes[mode_index], int8)
            plans.append(plan)
            values.learn(mode_index, int8, reward_of(evaluator(plan), reference_ms))
    except BudgetSpent:
        pass
    policy = PrecisionPlan(modes[values.best_mode()], frozenset(i for i in range(units) if values.prefers_int8(i)))
    try:
        evaluator(policy)
        plans.append(policy)
    except BudgetSpent:
        pass
    return SearchResult("qlearning", evaluator.best(plans), len(evaluator.visited) - before,
                        notes | {"episodes": len(plans), "policy": policy.label(units)})  # fmt: skip


def act(rng: np.random.Generator, epsilon: float, actions: int, greedy: int) -> int:
    """Epsilon-greedy: with probability ``epsilon`` one of ``actions`` at random, else the ``greedy`` one."""
    return int(rng.integers(actions)) if rng.random() < epsilon else greedy


def exploration(episode: int, episodes: int, units: int, experienced: bool, floor: float) -> float:
    """Epsilon for ``episode``: from 1 down to ``floor`` over 70% of the episodes without experience; with it, from
    :data:`EXPLORED_FIRST` decisions of ``units`` down to :data:`EXPLORED_LAST` (each explored decision is a coin
    flip, so epsilon is twice the share of decisions changed)."""
    progress = min(1.0, episode / max(episodes * 0.7, 1))
    if not experienced:
        return max(floor, 1.0 - progress)
    first, last = (min(1.0, 2 * count / max(units, 1)) for count in (EXPLORED_FIRST, EXPLORED_LAST))
    return first + (last - first) * progress


@dataclass
class QValues:
    """Each decision's value: the best reward of a measured plan that made it (-inf until one did).

    Q-learning's backup with step size 1 in a deterministic environment (a plan measures the same each time it is
    asked: the evaluator caches it), where a value never falls: a decision is worth what the best completion of it
    earned. The greedy policy is then the best plan measured, and the episodes explore around it."""

    modes: int
    units: int
    mode_value: np.ndarray = field(init=False)
    unit_value: np.ndarray = field(init=False)  # [unit, action]; action 0: float, 1: int8

    def __post_init__(self) -> None:
        self.mode_value = np.full(self.modes, -np.inf)
        self.unit_value = np.full((self.units, 2), -np.inf)

    def learn(self, mode: int, int8: frozenset[int], reward: float) -> None:
        self.mode_value[mode] = max(self.mode_value[mode], reward)
        actions = np.array([i in int8 for i in range(self.units)], dtype=int)
        rows = np.arange(self.units)
        self.unit_value[rows, actions] = np.maximum(self.unit_value[rows, actions], reward)

    def best_mode(self) -> int:
        return int(np.argmax(self.mode_value))

    def prefers_int8(self, unit: int) -> bool:
        return bool(self.unit_value[unit, 1] > self.unit_value[unit, 0])


def reward_of(evaluation: Evaluation, reference_ms: float) -> float:
    """-latency relative to the fp32 plan; outside the tolerance (or failed): -2, below any valid plan."""
    if evaluation.failure is not None or not evaluation.within or not np.isfinite(evaluation.ms):
        return -2.0
    return -evaluation.ms / reference_ms


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


SOLVERS: dict[str, Callable[..., SearchResult]] = {
    "uniform": uniform, "greedy": greedy, "proxy": proxy, "qlearning": qlearning, "random": random_search,
}  # fmt: skip


def create(name: str) -> Callable[..., SearchResult]:
    check_choice("precision search", name, SOLVERS)
    return SOLVERS[name]
