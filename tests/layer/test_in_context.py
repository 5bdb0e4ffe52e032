"""Group prices corrected by segments timed inside their plans' runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rlcompile.layer.fit import BOUNDARY_SCALE_RANGE
from rlcompile.layer.group_table import group_model
from rlcompile.layer.in_context import (
    Drift,
    SegmentFit,
    TimedSegment,
    apply_group_prices,
    fit_group_prices,
    measure_drift,
    segment_predictions,
    whole_model_prices,
)
from rlcompile.layer.problem import SelectionProblem, exact
from rlcompile.layer.table import SINK, SOURCE, Edge, LookupTable, switch_key
from rlcompile.models import load_model
from rlcompile.runtimes import create


def chain_table() -> LookupTable:
    """Three groups in a chain; "b" looks 0.5 ms faster on the last two; a switch costs 0.1 ms either way, entering
    from and leaving to the caller 0.05 ms."""
    edges = [Edge(SOURCE, "g1", "x", (1, 8)), Edge("g1", "g2", "y", (1, 8)), Edge("g2", "g3", "y2", (1, 8)),
             Edge("g3", SINK, "z", (1, 8))]  # fmt: skip
    conversions = {"1x8": {"a->b": 0.1, "b->a": 0.1, "host->a": 0.05, "host->b": 0.05, "a->host": 0.05,
                           "b->host": 0.05}}  # fmt: skip
    options = {"g1": {"a": 1.0, "b": 2.0}, "g2": {"a": 1.0, "b": 0.5}, "g3": {"a": 1.0, "b": 0.5}}
    return LookupTable("toy", ["g1", "g2", "g3"], options, {"a": "a", "b": "b"}, edges, conversions, host="host",
                       default="a")  # fmt: skip


def test_each_segment_is_charged_its_groups_and_the_crossings_it_receives():
    problem = SelectionProblem(chain_table())
    plan = ["a", "b", "b"]
    segments = [TimedSegment("a", (0,), 1.0), TimedSegment("b", (1, 2), 1.0)]
    predicted = segment_predictions(problem, problem.choices(plan), segments)
    assert predicted == [pytest.approx((1.0, 0.05)), pytest.approx((1.0, 0.1 + 0.05))]
    assert sum(own + crossings for own, crossings in predicted) == pytest.approx(problem.total(problem.choices(plan)))


def test_a_segment_slower_in_context_makes_exactly_its_groups_dearer_and_the_solver_moves():
    problem = SelectionProblem(chain_table())
    plan = ["a", "b", "b"]
    assert problem.names(exact(problem).plan) == {"g1": "a", "g2": "b", "g3": "b"}  # the table's pick
    # measured in the plan's runs: the "a" segment as the table says, the "b" one at 2.15 ms for 1.15 predicted
    timed = [TimedSegment("a", (0,), 1.05), TimedSegment("b", (1, 2), 2.0 + 0.15)]
    fit = fit_group_prices(problem, [(plan, timed)])
    assert set(fit.group_factors) == {"g2", "g3"} and set(fit.boundary_scales) == {"a|b"}
    assert all(by_library["b"] > 1.5 for by_library in fit.group_factors.values())
    corrected = apply_group_prices(problem, fit)
    assert corrected.total(corrected.choices(plan)) == pytest.approx(sum(segment.ms for segment in timed), rel=1e-4)
    assert corrected.table.options["g1"] == {"a": 1.0, "b": 2.0}  # a group no segment held keeps its price
    assert corrected.table.notes["segment_factors"] == fit.group_factors
    assert corrected.table.boundary_scales == fit.boundary_scales
    assert corrected.names(exact(corrected).plan) == {"g1": "a", "g2": "a", "g3": "a"}
    # a plan of "b" throughout runs the model whole, as the calibration measured it: its prices are not corrected
    assert whole_model_prices(corrected.table).options == chain_table().options


@pytest.mark.parametrize(("calibrated", "recovers"), [(0.1, True), (1.0, False)])
def test_a_correction_can_undo_a_calibration_that_sent_a_library_to_its_floor(calibrated, recovers):
    """The calibration put "b" at a tenth of its in-context estimates (one whole plan, its time split wrongly between
    "b" and a crossing); the clocks time "b"'s groups 8x their price: the fit may reach back to its estimate (a
    library the calibration left alone stays within 4x of its price)."""
    table = chain_table()
    table.notes["context_factor"] = {"b": calibrated}
    problem = SelectionProblem(table)
    plan = ["a", "b", "b"]
    timed = [TimedSegment("a", (0,), 1.05), TimedSegment("b", (1, 2), 8.0 + 0.15)]
    fit = fit_group_prices(problem, [(plan, timed)])
    corrected = apply_group_prices(problem, fit)
    assert corrected.total(corrected.choices(plan)) == pytest.approx(sum(segment.ms for segment in timed), rel=0.02)
    prices = [corrected.table.options[group]["b"] for group in ("g2", "g3")]
    if recovers:  # the groups carry their time, not the crossing before them
        assert min(prices) > 0.5 * 4 and fit.boundary_scales["a|b"] < BOUNDARY_SCALE_RANGE[1]
    else:  # capped at 4x: the rest goes to the crossing, at its ceiling
        assert max(prices) == pytest.approx(0.5 * 4) and fit.boundary_scales["a|b"] == BOUNDARY_SCALE_RANGE[1]


def test_the_segments_that_receive_a_crossing_price_it_apart_from_their_groups():
    """A segment of one cheap group behind a crossing, beside a segment of two such groups behind the same crossing,
    tells the crossing's cost from the groups' (the whole-plan fit had put what the groups' prices got wrong into
    the crossings' factor): crossings between "a" and "b" take 5x their standalone estimate, the layer 2x its price
    in "b", and each plan is predicted."""
    table = chain_table()
    table.notes["group_kinds"] = {"g1": "first", "g2": "layer", "g3": "layer"}
    problem = SelectionProblem(table)
    both = (["a", "b", "b"], [TimedSegment("a", (0,), 1.05), TimedSegment("b", (1, 2), 2 * 0.5 * 2 + 5 * 0.1 + 0.05)])
    one = (["a", "b", "a"], [TimedSegment("a", (0,), 1.05), TimedSegment("b", (1,), 0.5 * 2 + 5 * 0.1),
                             TimedSegment("a", (2,), 1.0 + 5 * 0.1 + 0.05)])  # fmt: skip
    fit = fit_group_prices(problem, [both, one])
    in_b = {group: by_library["b"] for group, by_library in fit.group_factors.items() if "b" in by_library}
    assert in_b == {"g2": pytest.approx(2.0, rel=1e-3), "g3": pytest.approx(2.0, rel=1e-3)}
    # each "b" segment here enters "b" across one crossing: its entry and the crossing are told apart by the priors
    # alone, the crossing taking the most (entries are held firmly)
    assert fit.boundary_scales["a|b"] > 4.0
    switch = fit.entry_ms.get(switch_key("a", "b"), 0.0)
    assert 0.1 * fit.boundary_scales["a|b"] + switch == pytest.approx(0.5, rel=1e-3)
    corrected = apply_group_prices(problem, fit)
    for assignment, timed in (both, one):
        assert corrected.total(corrected.choices(assignment)) == pytest.approx(sum(s.ms for s in timed), rel=1e-3)


def test_what_short_segments_cost_more_is_priced_at_the_switch_not_on_the_groups():
    """The same groups cost more per group in a short segment than in a long one: entering "b" after "a" costs
    0.4 ms more than the table says (a thread pool waking up), which no factor on the groups can give both a plan of
    one "b" segment and one of two. The fit prices the switch (the entry with the crossing it comes with), leaves the
    groups' prices, and the table then predicts both plans."""
    table = chain_table()
    table.notes["group_kinds"] = {"g1": "first", "g2": "layer", "g3": "layer"}
    problem = SelectionProblem(table)
    long = (["a", "b", "b"], [TimedSegment("a", (0,), 1.05), TimedSegment("b", (1, 2), 0.5 + 0.5 + 0.1 + 0.4 + 0.05)])
    short = (["a", "b", "a"], [TimedSegment("a", (0,), 1.05), TimedSegment("b", (1,), 0.5 + 0.1 + 0.4),
                               TimedSegment("a", (2,), 1.0 + 0.1 + 0.05)])  # fmt: skip
    fit = fit_group_prices(problem, [long, short])
    assert "b" not in fit.group_factors.get("g2", {}) and "b" not in fit.group_factors.get("g3", {})
    switch = fit.entry_ms.get(switch_key("a", "b"), 0.0)
    assert 0.1 * fit.boundary_scales["a|b"] + switch == pytest.approx(0.5, rel=0.02)
    corrected = apply_group_prices(problem, fit)
    assert corrected.table.segment_entry_ms == fit.entry_ms
    for assignment, timed in (long, short):
        assert corrected.total(corrected.choices(assignment)) == pytest.approx(sum(s.ms for s in timed), rel=0.02)


def test_a_single_library_plan_that_falls_back_is_priced_as_calibrated_and_a_mixed_plan_in_context():
    """A library that cannot run every group runs the rest in the default library: that plan is what the
    calibration measured, so the segment clocks' corrections (fitted on mixed plans) do not move its price."""
    from rlcompile.layer.selection.candidates import Candidate
    from rlcompile.layer.selection.pricing import plan_drift, price_candidates

    problem = SelectionProblem(chain_table())
    corrected = apply_group_prices(problem, SegmentFit({"g1": {"a": 3.0}, "g2": {"b": 2.0}}))
    single_b = Candidate(["single:b"], ["a", "b", "b"], 0.0, single=["b"])  # "b" cannot run g1: "a" runs it
    mixed = Candidate(["exact"], ["a", "b", "b"], 0.0)
    price_candidates(corrected, [single_b, mixed])
    calibrated = SelectionProblem(chain_table())
    assert single_b.predicted_ms == pytest.approx(calibrated.total(calibrated.choices(single_b.assignment)))
    assert mixed.predicted_ms == pytest.approx(corrected.total(corrected.choices(mixed.assignment)))
    assert mixed.predicted_ms > single_b.predicted_ms
    # the calibration's own measurement, when the table keeps it, whatever was fitted since (boundary factors too)
    corrected.table.notes["single_library_ms"] = {"b": 7.5}
    corrected.table.boundary_scales = {"a|b": 20.0}
    price_candidates(corrected, [single_b, mixed])
    assert single_b.predicted_ms == 7.5 and mixed.predicted_ms != 7.5
    # "b" runs 1.5x slower than at the calibration, "a" 3x: a plan drifts by its libraries' shares, "b"'s plan too
    # where it falls back to "a"; a plan of "b" alone as "b"
    drift = Drift({"a": 3.0, "b": 1.5})
    assert plan_drift(drift, calibrated, single_b) == pytest.approx(plan_drift(drift, calibrated, mixed))
    assert 1.5 < plan_drift(drift, calibrated, mixed) < 3.0
    only_b = Candidate(["b"], ["b", "b", "b"], 0.0)
    assert plan_drift(drift, calibrated, only_b) == pytest.approx(1.5)
    # a precision plan: one runtime runs the whole model, one the table has no price for (optimize ocr-rec
    # --precision auto ended in a traceback when its profile, cut short, had priced most groups in ONNX Runtime only)
    whole = Candidate(["precision:uniform (c bf16)"], ["c", "c", "c"], 2.0)
    assert plan_drift(Drift({"c": 1.2}), calibrated, whole) == pytest.approx(1.2)


def test_a_correction_reaches_every_group_of_the_kind_it_measured_timed_or_not():
    """g2 and g3 are one layer twice: the "b" segment that held g2 alone measured it at 2x, so g3 in "b" is 2x too;
    otherwise the solver would move g3 to "b" on a price no measurement showed."""
    table = chain_table()
    table.notes["group_kinds"] = {"g1": "first", "g2": "layer", "g3": "layer"}
    problem = SelectionProblem(table)
    plan = ["a", "b", "a"]
    timed = [TimedSegment("a", (0,), 1.05), TimedSegment("b", (1,), 2 * 0.5 + 0.1), TimedSegment("a", (2,), 1.15)]
    factors = fit_group_prices(problem, [(plan, timed)]).group_factors
    assert factors["g3"]["b"] == pytest.approx(factors["g2"]["b"]) and factors["g2"]["b"] > 1.5
    alone = fit_group_prices(SelectionProblem(chain_table()), [(plan, timed)]).group_factors
    assert alone["g2"]["b"] > 1.5 and "b" not in alone.get("g3", {})


def test_the_machines_drift_is_not_taken_for_a_price_and_two_plans_are_solved_together():
    problem = SelectionProblem(chain_table())
    plan = ["a", "b", "b"]
    slower = [TimedSegment("a", (0,), 2 * 1.05), TimedSegment("b", (1, 2), 2 * 1.15)]  # the whole machine at half speed
    assert not fit_group_prices(problem, [(plan, slower)], drift=Drift(default=2.0))
    # g2 costs 3x its price in "b" and g3 what the table says: the first plan's "b" segment (both) took 2x, the
    # second's (g3 alone) 1x. Solved together, each group gets its own; averaging each segment's factor gave g2 2x
    # and g3 1.41x, and predicted neither plan
    first = [TimedSegment("a", (0,), 1.05), TimedSegment("b", (1, 2), 0.5 * 3 + 0.5 * 1 + 0.15)]
    other = ["a", "a", "b"]
    second = [TimedSegment("a", (0, 1), 2.05), TimedSegment("b", (2,), 0.5 + 0.15)]
    fit = fit_group_prices(problem, [(plan, first), (other, second)])
    assert fit.group_factors == {"g2": {"b": pytest.approx(3.0, rel=1e-4)}} and not fit.boundary_scales
    corrected = apply_group_prices(problem, fit)
    for assignment, timed in ((plan, first), (other, second)):
        assert corrected.total(corrected.choices(assignment)) == pytest.approx(sum(s.ms for s in timed), rel=1e-4)


def test_each_library_keeps_its_own_drift_and_a_plan_drifts_by_its_share_of_each():
    problem = SelectionProblem(chain_table())
    plan = ["a", "b", "b"]
    # the machine slowed "a" 2x and left "b" as it was: a plan's segments are priced at their own library's speed
    drift = measure_drift({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 2.0, "b": 2.0}, default=1.5)
    assert drift.to_dict() == {"default": 1.5, "a": 2.0, "b": 1.0}
    assert drift.of("c") == 1.5  # measured then but not now: the default
    timed = [TimedSegment("a", (0,), 2 * 1.05), TimedSegment("b", (1, 2), 1.15)]
    assert not fit_group_prices(problem, [(plan, timed)], drift)
    steps = problem.step_costs(problem.choices(plan))  # a: 1.05 ms, b: 1.15 ms
    assert drift.of_plan(problem, problem.choices(plan)) == pytest.approx((2 * steps[0] + sum(steps[1:])) / sum(steps))
    assert drift.of_plan(problem, problem.choices(["b", "b", "b"])) == pytest.approx(1.0)


def test_the_engine_clocks_each_segment_inside_the_plans_run():
    grouped = group_model(load_model("lenet5"))
    assignment = ["ort"] * len(grouped.groups)
    assignment[len(assignment) // 2:] = ["openvino"] * (len(assignment) - len(assignment) // 2)
    engine = grouped.engine(assignment, 1, {"ort": create("ort"), "openvino": create("openvino")})
    assert engine.libraries == ["ort", "openvino"]
    clock: list[list[float]] = [[] for _ in engine.compiled]
    expected = engine.run(grouped.feeds)
    for _ in range(3):
        outputs = engine.run(grouped.feeds, clock)
    assert all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(expected, outputs, strict=True))
    assert [len(seconds) for seconds in clock] == [3, 3] and all(s > 0 for seconds in clock for s in seconds)


def test_every_plan_a_probe_timed_is_refitted_each_at_its_own_probes_speed():
    """A second probe refits the prices to the plans the first one timed as well as to its own (the newest plans
    alone had re-priced a kind the first probe's plans had timed), each plan's segments at the table's speed by the
    drift of the probe that timed them."""
    from types import SimpleNamespace

    from rlcompile.events import ignore
    from rlcompile.layer.selection.candidates import Candidate
    from rlcompile.layer.selection.pricing import price_in_context

    def timed(assignment: list[str], segments: list[TimedSegment], drift: float) -> Candidate:
        compiled = [SimpleNamespace(segment=SimpleNamespace(library=s.library, groups=list(s.groups)))
                    for s in segments]  # fmt: skip
        return Candidate(["plan"], assignment, 0.0, engine=SimpleNamespace(compiled=compiled),
                         segment_ms=[drift * s.ms for s in segments],
                         segment_drift=[drift] * len(segments))  # fmt: skip

    problem = SelectionProblem(chain_table())
    first = [TimedSegment("a", (0,), 1.05), TimedSegment("b", (1, 2), 0.5 * 3 + 0.5 * 1 + 0.15)]
    second = [TimedSegment("a", (0, 1), 2.05), TimedSegment("b", (2,), 0.5 + 0.15)]
    earlier = timed(["a", "b", "b"], first, drift=2.0)  # the first probe, the machine at half speed
    newer = timed(["a", "a", "b"], second, drift=1.0)
    factors = price_in_context(problem, [earlier, newer], ignore)
    assert factors == fit_group_prices(problem, [(earlier.assignment, first), (newer.assignment, second)])
    assert factors.group_factors == {"g2": {"b": pytest.approx(3.0, rel=1e-4)}}


def five_layers() -> LookupTable:
    """Five groups of one kind in a chain, 1 ms each in "a" and "b"; crossings as in :func:`chain_table`."""
    names = [f"g{index}" for index in range(1, 6)]
    edges = [Edge(SOURCE, "g1", "x", (1, 8)), *(Edge(a, b, f"y{a}", (1, 8)) for a, b in itertools.pairwise(names)),
             Edge("g5", SINK, "z", (1, 8))]  # fmt: skip
    table = LookupTable("five", names, {name: {"a": 1.0, "b": 1.0} for name in names}, {"a": "a", "b": "b"}, edges,
                        chain_table().conversions, host="host", default="a")  # fmt: skip
    table.notes["group_kinds"] = dict.fromkeys(names, "layer")
    return table


def test_each_plans_whole_time_is_fitted_not_only_its_segments():
    """Two plans disagree about the layer in "b" (four layers at their price in one, one layer at twice it in the
    other): fitted segment by segment, the long "b" segment and the short one pull alike and both plans come out
    13-15% off; with each plan's segments summed as one more equation, the layer moves less and each plan's whole
    time is within 11% of its segments' sum."""
    problem = SelectionProblem(five_layers())
    long = (["b"] * 4 + ["a"], [TimedSegment("b", (0, 1, 2, 3), 4.05), TimedSegment("a", (4,), 1.15)])
    short = (["b"] + ["a"] * 4, [TimedSegment("b", (0,), 2.05), TimedSegment("a", (1, 2, 3, 4), 4.15)])
    corrected = apply_group_prices(problem, fit_group_prices(problem, [long, short]))
    for assignment, timed in (long, short):
        measured = sum(segment.ms for segment in timed)
        assert abs(corrected.total(corrected.choices(assignment)) / measured - 1) < 0.11
