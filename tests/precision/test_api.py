"""Precision chosen end to end on a real model, saved, and checked again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from rlcompile.cli import main
from rlcompile.layer.selection.api import select_segments
from rlcompile.measure import PLAN_RULE, QUICK
from rlcompile.models import load_model
from rlcompile.plan import load_plan, save_plan
from rlcompile.precision.contract import (
    VALIDATION,
    AccuracyContract,
)
from rlcompile.precision.space import Mode, PrecisionPlan
from rlcompile.saved import time_saved
from tests.precision.counting import counting
from tests.timing import BLOCKS


@pytest.fixture(scope="module")
def chosen(tmp_path_factory):
    """lenet5 through select with int8 allowed on labelled data, and a precision plan saved."""
    from rlcompile.precision.api import choose_precision

    folder = tmp_path_factory.mktemp("precision")
    rng = np.random.default_rng(1)
    np.savez(folder / "data.npz", input=rng.standard_normal((8, 1, 1, 32, 32)).astype(np.float32),
             label=rng.integers(0, 10, 8))  # fmt: skip
    # ORT and OpenVINO: the runtimes a precision plan runs in (PyTorch's per-group compiles, half the profile's
    # time, are covered by the selection tests)
    selection = select_segments(load_model("lenet5"), "exact", threads=2, library_names=["ort", "openvino"],
                                table_dir=folder / "tables", timing=BLOCKS)  # fmt: skip
    contract = AccuracyContract("auto", folder / "data.npz", "rel-l2", 0.05)
    choice = choose_precision(selection, contract, "qlearning", 0, folder / "work", BLOCKS, max_evaluations=30)
    return folder, selection, choice


def test_every_finalist_is_within_tolerance_and_the_winner_is_the_fastest_measured(chosen):
    _, selection, choice = chosen
    assert len(choice.evaluations) <= 30 and any(e.within and not e.plan.exact for e in choice.evaluations)
    exact = [e for e in choice.evaluations if e.plan.exact]
    exact_ms = min(e.screened_ms or e.ms for e in exact)
    for candidate in choice.finalists:  # lenet5 is tiny: int8 may well be slower here, then there are none
        assert candidate.accuracy.excess <= 0.05 and candidate.accuracy.validation_samples == 4
        assert candidate.accuracy.data.endswith("data.npz") and candidate.accuracy.real_data
        assert candidate.predicted_ms < exact_ms  # timed in turns with the fp32 plans, faster than each
    screened = [e for e in choice.evaluations if e.screened_ms is not None]
    if any(e.within and not e.plan.exact for e in choice.evaluations):  # a lowered plan within tolerance: screened
        assert {e.plan for e in exact} <= {e.plan for e in screened} and len(screened) > len(exact)
    measured = [c.measured.median_ms for c in selection.candidates if c.measured]
    band = max(PLAN_RULE.tie_band, selection.noise or 0.0)  # pick's rule: a tie within the band keeps the simpler
    assert selection.chosen.measured.median_ms <= min(measured) / (1 - band) + 1e-9
    assert {s.solver for s in choice.searches} == {"uniform", "recipes", "greedy", "proxy", "qlearning"}
    assert all(e.plan.exact or e.failure or np.isfinite(e.error) for e in choice.evaluations)


def test_a_saved_precision_plan_is_checked_again_on_its_held_out_samples(chosen, tmp_path: Path):
    from rlcompile.precision.api import candidate_of

    _, selection, choice = chosen
    lowered = min((e for e in choice.evaluations if e.within and not e.plan.exact), key=lambda e: e.error)
    candidate = candidate_of(choice.evaluator, lowered, selection, choice.contract, choice.samples, choice.fp32_error,
                             "test")  # fmt: skip
    selection.chosen = candidate  # whichever won, write a plan below fp32
    output = save_plan(selection, tmp_path / "plan")
    assert (output / VALIDATION).is_file()
    plan = load_plan(output)
    assert plan.manifest.accuracy.excess <= 0.05
    timings = time_saved([output], QUICK).saved
    assert timings[0].ok and timings[0].accuracy.error == pytest.approx(plan.manifest.accuracy.error, rel=1e-3,
                                                                       abs=1e-6)  # fmt: skip
    assert main(["run", str(output), "--quick"]) == 0


def test_screening_times_the_plans_in_turns_whatever_their_brief_time_said(chosen):
    """The searches time each plan once: a plan whose one block fell in a slow spell of the machine is timed again,
    in turns with the others, before it is left out of the final contest."""
    from rlcompile.measure.timing import summarize

    _, _, choice = chosen
    evaluations = [e for e in choice.evaluations if e.failure is None][:3]
    spell = evaluations[-1]
    spell.latency = summarize([1e6])  # as if its one block had fallen in a slow spell
    choice.evaluator.screen(evaluations, None)
    assert all(0 < e.screened_ms < 1e3 for e in evaluations) and spell.screened_ms < spell.ms / 1e3


def test_each_lowered_float_mode_alone_is_screened_whatever_the_int8_plans_brief_times():
    """OpenVINO bf16 with no group in int8 runs other kernels than every int8 plan: it is timed in turns with the fp32
    plans even when more int8 plans than the screening takes measured faster in their one brief block (on PaddleOCR's
    classifier it was the fastest plan in turns, and six int8 plans' brief times had left it out)."""
    from rlcompile.precision.api import SCREENED, screening_pool
    from rlcompile.precision.searches import SearchResult

    bf16, fp32 = Mode("openvino", "bf16"), Mode("openvino")
    evaluator = counting([0.0] * 10)
    for count in range(SCREENED + 2):  # every int8 plan's brief time below bf16's (10 ms)
        evaluator(PrecisionPlan(fp32, frozenset(range(count + 1))))
    alone = evaluator(PrecisionPlan(bf16))
    evaluator(PrecisionPlan(fp32))  # exact: the plans screened are timed beside it, never in the pool
    best = evaluator(PrecisionPlan(fp32, frozenset({0})))  # a search's best: first, however slow its brief time
    pool = screening_pool(evaluator, [SearchResult("qlearning", best, 1)])
    assert len(pool) == SCREENED and pool[0] is best and alone in pool
    assert all(e.within and not e.plan.exact for e in pool)
    fastest = sorted((e for e in evaluator.cache.values() if e.plan.int8), key=lambda e: e.ms)
    assert [e for e in pool if e not in (best, alone)] == [e for e in fastest if e is not best][: SCREENED - 2]


def test_the_fastest_plan_is_measured_again_on_the_graph_as_the_user_gave_it(tmp_path: Path):
    """A graph rewrite is kept for ONNX Runtime's fp32 time; the fastest lowered plan is also built on the user's own
    graph (same mode and recipe, every group in int8), a candidate of its own when within the contract."""
    from rlcompile.graph import onnx_graph, rules
    from rlcompile.layer.group_table import group_model
    from rlcompile.layer.selection.candidates import ORIGINAL_GRAPH, create_libraries
    from rlcompile.models.onnx_model import LoadedModel, random_tensor
    from rlcompile.precision.api import as_given_candidates, evaluator_for
    from rlcompile.precision.contract import load_metric, load_samples, mean_error
    from rlcompile.runtimes.ort import run_proto_on_each
    from tests.precision.builders import attention_block

    proto, _ = attention_block(width=16, tokens=8)
    onnx.save(proto, str(tmp_path / "attention.onnx"))
    original = load_model(str(tmp_path / "attention.onnx"))
    merge = rules.create("merge_parallel_matmul")
    graph = onnx_graph.from_proto(original.proto)
    merged = onnx_graph.to_proto(merge.apply(graph, merge.locations(graph)[0]))
    rewritten = LoadedModel(original.name, merged, list(original.inputs), original.source, [])
    selection = select_segments(rewritten, "exact", threads=2, library_names=["ort", "openvino"], baseline=original,
                                table_dir=tmp_path / "tables", timing=BLOCKS)  # fmt: skip
    contract = AccuracyContract("auto", None, "rel-l2", 0.05)
    specs = {spec.name: (tuple(spec.shape), spec.dtype) for spec in original.inputs}
    samples = load_samples(contract, specs, 0, lambda rng: {s.name: random_tensor(s, rng) for s in original.inputs})
    metric, (created, _) = load_metric("rel-l2"), create_libraries(["ort", "openvino"], None)
    reference = run_proto_on_each(original.proto, [samples.feeds(sample) for sample in samples.validation])
    fp32_error = mean_error(metric, samples, reference, reference)
    made = [evaluator_for(grouped, contract, samples, metric, reference, fp32_error, created, 2, tmp_path / name, None)
            for name, grouped in (("rewritten", selection.grouped), ("given", group_model(original)))]  # fmt: skip
    evaluator, twin = made
    assert len(twin.units) > len(evaluator.units)  # two projections merged into one MatMul: one unit fewer
    fastest = evaluator(PrecisionPlan(Mode("openvino"), frozenset(range(len(evaluator.units)))))
    assert fastest.within
    found = as_given_candidates(evaluator, twin, fastest, "uniform", selection, contract, samples, fp32_error)
    assert len(found) == 1 and found[0].labels[0].endswith(ORIGINAL_GRAPH) and found[0].labels[0].startswith(
        "precision:uniform (openvino fp32")
    [given] = twin.cache.values()
    assert given.plan.int8 == frozenset(range(len(twin.units))) and given.within
    assert found[0].accuracy.int8_groups == [unit.group for unit in twin.units]
    assert found[0].agreement.within(0.05) and found[0].accuracy.evaluations == len(evaluator.visited) + 1
    [segment] = [compiled.segment for compiled in found[0].engine.compiled]
    operators = [node.op_type for node in segment.proto.graph.node]
    assert "Split" not in operators and "QuantizeLinear" in operators  # the user's graph in int8, not the merged one
    some = PrecisionPlan(Mode("openvino"), frozenset({0}))  # a plan of some groups names the rewritten graph's
    assert as_given_candidates(evaluator, twin, evaluator(some), "uniform", selection, contract, samples,
                               fp32_error) == []  # fmt: skip
    for each in made:
        each.close()


def test_plans_a_runtime_cannot_compile_are_told_with_how_many_failed():
    """Every OpenVINO int8 plan failing alike (a plan the runtime cannot read) leaves the searches without that
    runtime: the user is told once, with the reason and how many plans it took, besides the manifest's record."""
    from types import SimpleNamespace

    from rlcompile.events import Failed
    from rlcompile.precision.api import run_searches
    from rlcompile.precision.evaluate import failures

    events = []
    evaluator = counting([0.01, 0.02, 0.03, 0.04], fails_in="openvino")
    evaluator.quantizer = SimpleNamespace(original=onnx.ModelProto())  # a graph no recipe changes
    run_searches(evaluator, [Mode("ort"), Mode("openvino")], "qlearning", 0, events.append)
    failed = [e for e in evaluator.cache.values() if e.failure is not None]
    assert failed and all(e.plan.mode.runtime == "openvino" and e.plan.int8 for e in failed)
    told = [(event.count, event.total, event.reason) for event in events if isinstance(event, Failed)]
    assert told == [(len(failed), len(evaluator.cache), "openvino cannot compile the plan")]
    assert failures(evaluator.cache.values()) == {"openvino cannot compile the plan": len(failed)}


def test_the_finalists_built_again_on_the_users_graph_are_whole_plans_of_distinct_modes():
    """Every group in int8 or none (a plan of some groups names the rewritten graph's groups), one per mode (the
    recipe is part of it), the fastest first, at most AS_GIVEN_PLANS."""
    from rlcompile.precision.api import AS_GIVEN_PLANS, as_given_finalists
    from rlcompile.precision.evaluate import Evaluation
    from rlcompile.precision.space import Recipe

    smoothed = Mode("openvino", "bf16", Recipe(smoothing=0.8, residuals=False))
    plain = Mode("openvino", "bf16", Recipe(residuals=False))
    found = [(Evaluation(PrecisionPlan(plain, frozenset(range(4)))), "recipes", None),
             (Evaluation(PrecisionPlan(plain, frozenset(range(4)))), "greedy", None),
             (Evaluation(PrecisionPlan(smoothed, frozenset(range(3)))), "qlearning", None),
             (Evaluation(PrecisionPlan(smoothed, frozenset(range(4)))), "proxy", None),
             (Evaluation(PrecisionPlan(Mode("ort"), frozenset(range(4)))), "uniform", None)]  # fmt: skip
    chosen = as_given_finalists(found, units=4)
    assert [(e.plan.mode, by) for e, by in chosen] == [(plain, "recipes"), (smoothed, "proxy")]
    assert len(chosen) == AS_GIVEN_PLANS
