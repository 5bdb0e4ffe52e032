"""The precision searches: greedy, the proxy, Q-learning and the knapsack, on a counting stand-in."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rlcompile.precision.evaluate import Evaluation, Evaluator
from rlcompile.precision.searches.proxy import knapsack
from rlcompile.precision.space import Mode, PrecisionPlan, Unit
from tests.precision.counting import CountingEvaluator, counting


def test_the_knapsack_is_exact_on_small_instances():
    rng = np.random.default_rng(3)
    for _ in range(30):
        values, costs = rng.random(7), rng.integers(0, 1000, 7) / 2000  # on the solver's grid of costs
        chosen = knapsack(values, costs, 1.0)
        best = max((subset for r in range(8) for subset in itertools.combinations(range(7), r)
                    if costs[list(subset)].sum() <= 1.0 + 1e-12), key=lambda s: values[list(s)].sum())  # fmt: skip
        assert costs[chosen].sum() <= 1.0 + 1e-9
        assert values[chosen].sum() == pytest.approx(values[list(best)].sum())


def test_each_search_gets_a_share_of_the_time_and_passes_on_what_it_leaves():
    import time

    evaluator = Evaluator([], None, {}, None, None, [], 0.0, 0.01, 1, deadline=time.monotonic() + 40.0)
    evaluator.share_time(4)  # the first of four searches: a quarter of the 40 s
    assert 9.0 < evaluator.search_deadline - time.monotonic() <= 10.0 and not evaluator.spent
    evaluator.search_deadline = time.monotonic() - 1.0  # its share is spent: it stops, the run's deadline is not
    assert evaluator.spent
    evaluator.share_time(1)  # the last search gets everything left
    assert 39.0 < evaluator.search_deadline - time.monotonic() <= 40.0 and not evaluator.spent


@pytest.mark.parametrize("search", ["greedy", "proxy"])
def test_groups_whose_int8_kernels_are_not_faster_stay_in_float(search: str):
    """Where the runtime's counters say a group's int8 kernels save nothing (OpenVINO's int8 fully connected
    layers and first convolution on Zen 3), greedy starts from the groups that pay, not from all, and the proxy's
    knapsack never takes the others: after the all-int8 plan, no plan lowers them."""
    from rlcompile.precision.searches import create

    deviations = [0.05 - 0.001 * i for i in range(40)]
    evaluator = counting(deviations, max_evaluations=24, probed=True, saved=[-0.2] * 10 + [1.0] * 30)
    found = create(search)(evaluator, [Mode("openvino")], seed=0)
    everything = frozenset(range(40))
    lowered = [plan.int8 for plan in evaluator.visited if plan.int8 != everything]
    assert lowered and not any(plan & set(range(10)) for plan in lowered)
    assert found.best.within and not found.best.plan.int8 & set(range(10))
    if search == "greedy":  # the 7 least sensitive of those that pay are all that fit: 23 raised back
        assert found.notes["paying"] == 30 and found.notes["raised"] == 23
        assert found.best.plan.int8 == frozenset(range(33, 40))
    else:
        assert found.notes["saving_by"] == "kernel counters"


def test_greedy_raises_back_the_most_sensitive_groups_by_bisection():
    from rlcompile.precision.searches.greedy import greedy

    # 40 groups, 0.05 down to 0.011: within once the summed deviation left in int8 is below 0.1 (no sample wrong),
    # that is with the 7 least sensitive alone (0.098): 33 raised back
    deviations = [0.05 - 0.001 * i for i in range(40)]
    evaluator = counting(deviations, max_evaluations=20, probed=True)  # no room to revert each of the 40 alone
    found = greedy(evaluator, [Mode("openvino")], seed=0)
    assert found.notes["ranked_by"] == "local deviation" and found.notes["ranking"][:2] == ["g0", "g1"]
    assert found.notes["raised"] == 33 and found.best.within and found.best.plan.int8 == frozenset(range(33, 40))
    # all int8 and float (the paying mode), 1 raised back, then 20, 30, 35, 32 and 33: not one plan per group
    assert found.evaluations == 2 + 1 + 5


def test_whether_int8_pays_is_judged_in_turns_not_by_one_brief_time():
    from rlcompile.measure.timing import summarize
    from rlcompile.precision.searches.base import INT8_DOES_NOT_PAY
    from rlcompile.precision.searches.greedy import greedy

    class SlowSpell(CountingEvaluator):
        """The all-int8 plan's one brief block fell in a slow spell; timed in turns it runs as fast as it is."""

        def __call__(self, plan: PrecisionPlan) -> Evaluation:
            fresh = plan not in self.cache
            evaluation = super().__call__(plan)
            if fresh and len(plan.int8) == len(self.units):
                evaluation.latency = summarize([100.0])
            return evaluation

        def screen(self, evaluations: list[Evaluation], deadline: float | None) -> dict:
            for evaluation in evaluations:
                evaluation.screened_ms = 10.0 - len(evaluation.plan.int8)
            self.screened = [e.plan for e in evaluations]
            return {}

    units = [Unit(i, f"g{i}", (f"n{i}",), 1.0) for i in range(6)]
    evaluator = SlowSpell(units, None, {}, None, None, [], 0.0, 0.01, 1, deviations=(0.01,) * 6, probed=True)
    found = greedy(evaluator, [Mode("openvino")], seed=0)
    assert found.notes.get("skipped") != INT8_DOES_NOT_PAY and found.best.plan.int8 == frozenset(range(6))
    openvino = Mode("openvino")
    assert set(evaluator.screened) == {PrecisionPlan(openvino), PrecisionPlan(openvino, frozenset(range(6)))}


def test_without_a_probe_greedy_ranks_by_reverting_each_group_and_the_proxy_measures_each_alone():
    from rlcompile.precision.searches import greedy, proxy

    deviations = [0.06, 0.01, 0.01, 0.01, 0.01, 0.01]
    evaluator = counting(deviations, max_evaluations=8)  # short of time for NNCF's ranking; its probe fails
    found = greedy(evaluator, [Mode("openvino")], seed=0)
    assert found.notes["ranked_by"] == "reverting each group" and found.notes["probe_failed"]
    assert found.best.plan.int8 == frozenset({1, 2, 3, 4, 5})
    evaluator = counting(deviations, max_evaluations=12)
    found = proxy(evaluator, [Mode("openvino")], seed=0)
    assert found.notes["additive_error"] == "each group alone, end to end" and found.notes["probe_failed"]
    assert {PrecisionPlan(Mode("openvino"), frozenset({i})) for i in range(6)} <= set(evaluator.visited)


def test_greedy_ranks_end_to_end_where_its_time_affords_it_even_with_a_probe():
    from rlcompile.precision.searches.greedy import greedy

    evaluator = counting([0.06, 0.01, 0.01, 0.01, 0.01, 0.01], probed=True)  # 200 evaluations: room for 6 reverted
    found = greedy(evaluator, [Mode("openvino")], seed=0)
    assert found.notes["ranked_by"] == "reverting each group" and "probe_failed" not in found.notes
    assert found.best.plan.int8 == frozenset({1, 2, 3, 4, 5})


def test_the_proxy_short_of_time_measures_no_group_alone():
    from rlcompile.precision.searches.proxy import BISECTION_STEPS, proxy

    evaluator = counting([0.01, 0.02, 0.03, 0.04, 0.05, 0.06], max_evaluations=8, probed=True)  # no room for 6 alone
    found = proxy(evaluator, [Mode("openvino")], seed=0)
    assert found.notes["additive_error"] == "local deviation"
    assert found.best is not None and found.best.within and len(found.best.plan.int8) >= 3
    assert found.evaluations <= 2 + BISECTION_STEPS
    assert not any(len(plan.int8) == 1 for plan in evaluator.visited)


def test_the_proxy_bisects_on_output_deviation_when_a_counting_metric_does_not_add_up():
    from rlcompile.precision.searches.proxy import BISECTION_STEPS, proxy

    evaluator = counting([0.01, 0.02, 0.03, 0.04, 0.05, 0.06])
    found = proxy(evaluator, [Mode("openvino")], seed=0)
    assert found.best is not None and found.best.within
    assert found.best.deviation < 0.1 and len(found.best.plan.int8) >= 3  # e.g. 0.01 + 0.02 + 0.03 + 0.04 > 0.1
    assert 0 < len(found.notes["bisected"]) <= BISECTION_STEPS
    assert evaluator.best([]) is None and evaluator.best() is not None  # a search is credited only its own plans


def test_greedy_keeps_what_its_ranking_found_when_the_budget_stops_it():
    from rlcompile.precision.searches.greedy import greedy

    # all int8: 0.11 (one sample wrong); without the first unit 0.05, within; the budget ends two plans later
    evaluator = counting([0.06, 0.01, 0.01, 0.01, 0.01, 0.01], max_evaluations=4)
    found = greedy(evaluator, [Mode("openvino")], seed=0)
    assert found.notes["stopped"] == "budget spent"
    assert found.best is not None and found.best.plan.int8 == frozenset({1, 2, 3, 4, 5})


def test_qlearning_starts_from_what_the_searches_before_it_measured_and_searches_on_alone():
    from rlcompile.precision.searches import proxy, qlearning

    deviations = [0.002, 0.004, 0.006, 0.008, 0.01, 0.012, 0.015, 0.02, 0.03, 0.05, 0.08, 0.12]
    shared = counting(deviations, max_evaluations=60)
    found = proxy(shared, [Mode("openvino")], seed=0)  # the additive optimum: 7 groups, deviations summing < 0.1
    learned = qlearning(shared, [Mode("openvino")], seed=0)
    assert learned.notes["started_from"] == found.best.plan.label(12)
    assert learned.best is not None and learned.best.ms <= found.best.ms and learned.best.within

    alone = counting(deviations, max_evaluations=25)  # no experience: episodes from epsilon 1, on a small budget
    learned = qlearning(alone, [Mode("openvino")], seed=0)
    assert learned.best is not None and learned.best.within and len(learned.best.plan.int8) >= 3
    assert learned.evaluations == len(alone.visited) <= 25
