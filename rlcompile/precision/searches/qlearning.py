"""``qlearning``: QS-DNN's agent over precision plans. One decision per group (float or int8) after the mode,
epsilon-greedy episodes and experience replay (every plan measured before it, then its own), reward -latency/fp32
latency, or a penalty below any valid plan when the measured error leaves the tolerance; every plan it visits is
measured end to end (cached).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlcompile.precision.evaluate import BudgetSpent, Evaluation, Evaluator
from rlcompile.precision.searches.base import SearchResult
from rlcompile.precision.space import Mode, PrecisionPlan

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
            index = next((i for i, mode in enumerate(modes) if PrecisionPlan(mode, plan.int8) == plan), None)
            if index is not None:  # a float plan is any recipe's: the recipe changes only what is in int8
                values.learn(index, plan.int8, reward_of(evaluation, reference_ms))
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
