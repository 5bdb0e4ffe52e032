"""The table fitted to measured plans: library factors and crossing factors together (rlcompile.layer.fit)."""

from __future__ import annotations

import numpy as np
import pytest

from rlcompile.layer.fit import BOUNDARY_SCALE_RANGE, FACTOR_RANGE, apply_fit, bounded_least_squares, fit_plans
from rlcompile.layer.in_context import Drift
from rlcompile.layer.problem import SelectionProblem
from rlcompile.layer.selection.candidates import Candidate
from rlcompile.layer.selection.pricing import measured_plans
from rlcompile.layer.table import SINK, SOURCE, Edge, LookupTable
from rlcompile.measure import summarize


def chain(crossing_ms: float = 0.1, notes: dict | None = None) -> LookupTable:
    """Three groups in a chain: "a" runs every group in 1 ms, "b" the second in 0.5 ms and the third in 2 ms, "c" the
    third in 0.5 ms; the standalone probes price a crossing between any two libraries at ``crossing_ms``."""
    edges = [Edge(SOURCE, "g1", "x", (1, 8)), Edge("g1", "g2", "y", (1, 8)), Edge("g2", "g3", "y2", (1, 8)),
             Edge("g3", SINK, "z", (1, 8))]  # fmt: skip
    conversions = {"1x8": {f"{s}->{t}": crossing_ms for s in "abc" for t in "abc" if s != t}}
    options = {"g1": {"a": 1.0}, "g2": {"a": 1.0, "b": 0.5}, "g3": {"a": 1.0, "b": 2.0, "c": 0.5}}
    return LookupTable("toy", ["g1", "g2", "g3"], options, {"a": "a", "b": "b", "c": "c"}, edges, conversions,
                       host="host", default="a", notes=notes or {})  # fmt: skip


def plans(problem: SelectionProblem, *measured: tuple[list[str], float]) -> list:
    return [(problem, assignment, ms) for assignment, ms in measured]


def predicted(table: LookupTable, assignment: list[str]) -> float:
    problem = SelectionProblem(table)
    return problem.total(problem.choices(assignment))


def test_the_measured_plans_set_each_pairs_crossing_factor_and_a_pair_no_plan_crosses_keeps_its_own():
    table = chain()
    problem = SelectionProblem(table)
    # truly a switch between a and b costs 0.8 ms (x8 the probes), between a and c what the probes say
    measured = plans(problem, (["a", "b", "a"], 2.5 + 2 * 0.8), (["a", "a", "c"], 2.5 + 0.1))
    fit = fit_plans(table, measured, libraries=False)
    assert fit.boundary_scales == {"a|b": pytest.approx(8.0, rel=0.01), "a|c": pytest.approx(1.0, abs=0.01)}
    assert fit.library_factors == {}  # libraries=False: the prices stay
    apply_fit(table, fit)
    assert predicted(table, ["a", "b", "a"]) == pytest.approx(4.1, rel=0.01)
    assert table.boundary_scale("b|c") == 1.0
    assert fit_plans(table, plans(problem, (["a", "a", "a"], 3.0)), libraries=False).boundary_scales == {}


def test_a_library_and_the_crossings_of_its_fallbacks_are_fitted_together():
    """b's single-library plan falls back to a on g1 and crosses once; its standalone crossing is priced at 1 ms
    where it costs 0.6 ms in context. Apart, b's factor had to absorb the crossing; together, with a mixed plan that
    crosses twice, both come out right and every plan is predicted."""
    table = chain(crossing_ms=1.0)
    problem = SelectionProblem(table)
    truth = {(("a", "a", "a")): 3.0, ("a", "b", "b"): 1 + 1.2 * 2.5 + 0.6, ("a", "b", "a"): 2 + 1.2 * 0.5 + 1.2}
    fit = fit_plans(table, plans(problem, *[(list(plan), ms) for plan, ms in truth.items()]))
    assert fit.library_factors == {"a": pytest.approx(1.0, abs=0.01), "b": pytest.approx(1.2, abs=0.01)}
    assert fit.boundary_scales == {"a|b": pytest.approx(0.6, abs=0.01)}
    apply_fit(table, fit)
    assert table.notes["context_factor"] == {"a": pytest.approx(1.0, abs=0.01), "b": pytest.approx(1.2, abs=0.01)}
    for plan, ms in truth.items():
        assert predicted(table, list(plan)) == pytest.approx(ms, rel=0.05)


def test_an_undetermined_split_moves_both_and_predicts_the_plan():
    table = chain(crossing_ms=1.0)
    problem = SelectionProblem(table)
    fit = fit_plans(table, plans(problem, (["a", "a", "a"], 3.0), (["a", "b", "b"], 2.0)))
    assert fit.library_factors["b"] < 1 and fit.boundary_scales["a|b"] < 1  # 3.5 ms priced, 2 measured
    apply_fit(table, fit)
    assert predicted(table, ["a", "b", "b"]) == pytest.approx(2.0, rel=0.01)


def test_an_undetermined_split_moves_a_small_library_and_large_crossings_by_the_same_factor():
    """b's 2.5 ms of groups beside 5 ms of crossings, one plan measured at 6 ms against 8.5 priced: nothing tells
    the two apart, so both take the same factor (by the same milliseconds, b's groups took 0.5 and the crossings
    0.75)."""
    table = chain(crossing_ms=5.0)
    problem = SelectionProblem(table)
    fit = fit_plans(table, plans(problem, (["a", "a", "a"], 3.0), (["a", "b", "b"], 6.0)))
    assert fit.library_factors["b"] == pytest.approx(fit.boundary_scales["a|b"], rel=0.05)
    apply_fit(table, fit)
    assert predicted(table, ["a", "b", "b"]) == pytest.approx(6.0, rel=0.01)


def test_factors_stay_within_their_ranges_counting_what_earlier_fits_applied():
    table = chain(crossing_ms=1.0, notes={"context_factor": {"b": 0.5 * FACTOR_RANGE[1]}})
    problem = SelectionProblem(table)
    fit = fit_plans(table, plans(problem, (["a", "a", "a"], 3.0), (["a", "b", "b"], 1 + 100 * 2.5)))
    assert fit.library_factors["b"] == pytest.approx(2.0)  # the product with the earlier x5 reaches the bound
    fit = fit_plans(table, plans(problem, (["a", "a", "a"], 3.0), (["a", "b", "a"], 2.5)))
    assert fit.boundary_scales["a|b"] >= BOUNDARY_SCALE_RANGE[0]


def test_bounded_least_squares_is_the_exact_optimum_within_the_bounds():
    matrix = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    solution = bounded_least_squares(matrix, np.array([-1.0, 2.0, 1.0]), np.array([0.0, 0.0]), np.array([5.0, 5.0]))
    assert solution == pytest.approx([0.0, 1.5])  # x0 at its bound, x1 fits 2 and 1 in least squares
    free = bounded_least_squares(matrix, np.array([1.0, 2.0, 3.0]), np.zeros(2), np.full(2, 5.0))
    assert free == pytest.approx([1.0, 2.0])
    # unbounded, x0 = -2 and x1 = 2: fixing each at the bound it crossed for good gives (0, 1) and a squared
    # error of 19; the optimum in [0, 1]^2 is (0, 0), 9
    matrix = np.array([[1.0, 1.0], [2.0, 1.0], [2.0, 2.0]])
    rhs = np.array([-2.0, -2.0, 1.0])
    assert np.linalg.lstsq(matrix, rhs, rcond=None)[0] == pytest.approx([-2.0, 2.0])
    solution = bounded_least_squares(matrix, rhs, np.zeros(2), np.ones(2))
    assert solution == pytest.approx([0.0, 0.0], abs=1e-9)
    assert float(np.sum((matrix @ solution - rhs) ** 2)) == pytest.approx(9.0)


def test_the_probes_measurements_are_taken_at_the_tables_speed_and_singles_can_be_left_out():
    table = chain()
    problem = SelectionProblem(table)
    mixed = Candidate(["exact"], ["a", "b", "a"], 2.7, measured=summarize([2 * 4.1]))
    single = Candidate(["single:b"], ["a", "b", "b"], 3.6, single=["b"], measured=summarize([3.0]))
    taken = measured_plans(problem, [mixed, single], Drift({"a": 2.0, "b": 2.0, "c": 1.0}))
    assert [(assignment, ms) for _, assignment, ms in taken] == [(["a", "b", "a"], 4.1), (["a", "b", "b"], 1.5)]
    assert len(measured_plans(problem, [mixed, single], Drift(), singles=False)) == 1
