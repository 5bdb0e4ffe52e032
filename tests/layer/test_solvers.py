"""The selection problem and every solver on synthetic tables where the optimum is known by brute force."""

from __future__ import annotations

import itertools
import random

import pytest

from rlcompile.layer import solvers
from rlcompile.layer.problem import SelectionProblem, exact, idle_libraries
from rlcompile.layer.solvers.qlearning import QLearning
from rlcompile.layer.table import SINK, SOURCE, Edge, LookupTable, switch_key

LAYOUTS = {"fast:nhwc": "nhwc", "fast:nchw": "nchw", "slow:nchw": "nchw", "ort:basic": "nchw"}
SHAPE = (1, 8, 4, 4)


def synthetic_table(layers: int = 6, seed: int = 0, branchy: bool = True) -> LookupTable:
    """A chain with skip connections (residual-like); random times; NHWC is faster per layer but converting costs."""
    rng = random.Random(seed)
    names = [f"l{i}" for i in range(layers)]
    options = {name: {p: rng.uniform(0.5, 2.0) * (0.7 if p == "fast:nhwc" else 1.0) for p in LAYOUTS} for name in names}
    edges = [Edge(SOURCE, names[0], "in", SHAPE)]
    edges += [Edge(names[i], names[i + 1], f"v{i}", SHAPE) for i in range(layers - 1)]
    if branchy:
        edges += [Edge(names[i], names[i + 2], f"v{i}", SHAPE) for i in range(0, layers - 2, 2)]
    edges.append(Edge(names[-1], SINK, "out", SHAPE))
    conversions = {"1x8x4x4": {"nchw->nhwc": rng.uniform(0.2, 0.6), "nhwc->nchw": rng.uniform(0.2, 0.6)}}
    return LookupTable("synthetic", names, options, dict(LAYOUTS), edges, conversions)


def brute_force(problem: SelectionProblem) -> float:
    return min(problem.total(list(plan)) for plan in itertools.product(*(range(len(o)) for o in problem.options)))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("branchy", [False, True])
def test_exact_is_the_brute_force_optimum(seed, branchy):
    problem = SelectionProblem(synthetic_table(6, seed, branchy))
    result = exact(problem)
    assert result.proven_optimal
    assert result.total_ms == pytest.approx(brute_force(problem))
    assert problem.total(result.plan) == pytest.approx(result.total_ms)


@pytest.mark.parametrize("seed", range(4))
def test_exact_is_the_brute_force_optimum_when_entering_a_domain_has_a_price(seed):
    """A price for each switch from one domain to another where the plan makes it (its segments), whatever crosses:
    the exact optimum keeps the layout of the layer just taken in its state, so it still finds the best plan, and a
    plan pays each switch once."""
    table = synthetic_table(6, seed, branchy=True)
    table.segment_entry_ms = {switch_key("nchw", "nhwc"): 0.8, switch_key("nhwc", "nchw"): 0.3}
    problem = SelectionProblem(table)
    result = exact(problem)
    assert result.proven_optimal and result.total_ms == pytest.approx(brute_force(problem))
    nhwc = next(i for i, o in enumerate(problem.options[0]) if o.primitive == "fast:nhwc")
    nchw = next(i for i, o in enumerate(problem.options[0]) if o.primitive == "fast:nchw")
    switching = [nchw, nhwc, nchw, nhwc, nchw, nchw]
    priced = problem.total(switching)
    table.segment_entry_ms = {}
    assert priced == pytest.approx(SelectionProblem(table).total(switching) + 2 * 0.8 + 2 * 0.3)


def test_conversions_are_paid_on_every_edge_and_at_the_ends():
    table = synthetic_table(3, branchy=False)
    problem = SelectionProblem(table)
    nhwc = next(i for i, o in enumerate(problem.options[0]) if o.primitive == "fast:nhwc")
    times = sum(table.options[name]["fast:nhwc"] for name in table.layers)
    conversion = table.conversions["1x8x4x4"]
    expected = times + conversion["nchw->nhwc"] + conversion["nhwc->nchw"]  # in once, out once
    assert problem.total([nhwc] * 3) == pytest.approx(expected)


@pytest.mark.parametrize("name", sorted(solvers.SOLVERS))
def test_solver_contract(name):
    problem = SelectionProblem(synthetic_table(8, seed=3))
    solver = solvers.create(name, **({"episodes": 300} if name in ("qlearning", "random") else {}))
    result = solver.solve(problem, seed=7)
    assert len(result.plan) == len(problem)
    assert result.total_ms == pytest.approx(problem.total(result.plan))
    assert result.total_ms >= exact(problem).total_ms - 1e-9
    again = solver.solve(problem, seed=7)
    assert again.plan == result.plan
    if result.history:
        assert result.history == sorted(result.history, reverse=True) and len(result.history) == result.episodes


def test_qlearning_finds_the_optimum_and_beats_random():
    problem = SelectionProblem(synthetic_table(10, seed=5))
    optimum = exact(problem).total_ms
    learned = QLearning(episodes=2000).solve(problem, seed=0)
    searched = solvers.create("random", episodes=2000).solve(problem, seed=0)
    assert learned.total_ms == pytest.approx(optimum)
    assert learned.total_ms <= searched.total_ms


def test_epsilon_schedule_follows_the_seed():
    agent = QLearning(episodes=100)
    assert [agent.epsilon(e, 100) for e in (0, 49, 50, 54, 55, 99)] == pytest.approx([1, 1, 0.9, 0.9, 0.8, 0.0])


def test_greedy_ignores_conversions_and_single_stays_in_one_library():
    problem = SelectionProblem(synthetic_table(6, seed=1))
    greedy = solvers.create("greedy").solve(problem)
    assert all(choice == problem.fastest(i) for i, choice in enumerate(greedy.plan))
    single = solvers.create("single").solve(problem)
    libraries = {problem.options[i][c].primitive.split(":")[0] for i, c in enumerate(single.plan)} - {"ort"}
    assert len(libraries) <= 1 and single.extra["library"] in problem.table.libraries()


def test_a_library_is_left_out_while_the_optimum_does_as_well_without_it():
    table = synthetic_table(6, seed=1)
    table.options = {name: by | {"idle:nchw": by["ort:basic"] * 1.5} for name, by in table.options.items()}
    table.layouts = dict(table.layouts) | {"idle:nchw": "nchw"}
    problem = SelectionProblem(table)
    best = exact(problem).total_ms
    left = idle_libraries(problem, band=0.02)
    assert "idle" in left and left["idle"] == 0.0 and "ort" not in left  # never chosen; the default always stays
    assert "fast" not in left and exact(problem.without(["fast"])).total_ms > best * 1.02
    restricted = problem.without(left)
    assert restricted.libraries() == sorted(set(problem.libraries()) - set(left))
    assert exact(restricted).total_ms < best * 1.02
    # solvers and corrected tables keep the restriction
    plan = solvers.create("qlearning").solve(restricted, seed=0).plan
    assert "idle" not in {restricted.options[i][c].primitive.split(":")[0] for i, c in enumerate(plan)}
    assert restricted.on(table).libraries() == restricted.libraries()
    assert solvers.create("single").solve(restricted).extra["library"] != "idle"
    # a band no gain is under leaves every library in
    assert idle_libraries(problem, band=0.0) == {}


def test_unknown_agent_is_a_clear_error():
    from rlcompile.errors import RlcompileError

    with pytest.raises(RlcompileError, match="unknown layer agent"):
        solvers.create("dqn")


@pytest.mark.parametrize("name", sorted(solvers.SOLVERS))
def test_every_solver_keeps_a_time_limit(name):
    """A search fits its episodes into ``seconds`` (at least MIN_EPISODES); a one-pass solver answers as before."""
    import time

    from rlcompile.layer.solvers.base import MIN_EPISODES

    problem = SelectionProblem(synthetic_table(40, seed=1))
    solver = solvers.create(name, **({"episodes": 20000} if name in ("qlearning", "random") else {}))
    started = time.monotonic()
    result = solver.solve(problem, seed=0, seconds=0.2)
    assert time.monotonic() - started < 2.0  # 20,000 episodes take far longer than that
    assert len(result.plan) == len(problem) and result.total_ms == pytest.approx(problem.total(result.plan))
    if name in ("qlearning", "random"):
        assert MIN_EPISODES <= result.episodes < 20000 and len(result.history) == result.episodes
        assert result.extra["episodes_planned"] == 20000


def test_fitted_episodes_follow_the_pace_and_stay_within_the_plan():
    from rlcompile.layer.solvers.base import MIN_EPISODES, fit_episodes

    assert fit_episodes(1000, elapsed_s=0.1, done=25, seconds=None) == 1000
    assert fit_episodes(1000, elapsed_s=0.1, done=25, seconds=1.0) == 250
    assert fit_episodes(1000, elapsed_s=0.1, done=25, seconds=100.0) == 1000
    assert fit_episodes(1000, elapsed_s=1.0, done=25, seconds=0.0) == MIN_EPISODES
    assert fit_episodes(30, elapsed_s=1.0, done=25, seconds=0.0) == 30  # a plan below the floor is kept


def test_an_episode_budget_is_refitted_once_at_its_fitting_point():
    from rlcompile.layer.solvers.base import MIN_EPISODES, EpisodeBudget

    unlimited = EpisodeBudget(1000, seconds=None)
    assert unlimited.allows(MIN_EPISODES) and unlimited.allows(999) and not unlimited.allows(1000)
    spent = EpisodeBudget(1000, seconds=0.0, fit_after=25)
    assert spent.allows(24) and spent.total == 1000  # not fitted before its point
    assert spent.allows(25) and spent.total == MIN_EPISODES  # no time left: the floor
    assert spent.allows(MIN_EPISODES - 1) and not spent.allows(MIN_EPISODES)
    assert spent.planned == 1000
