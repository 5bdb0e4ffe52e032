"""select_segments end to end on a real model: table once, candidates measured, the fastest kept, plan saved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import rlcompile
from rlcompile.cli import main
from rlcompile.events import Event, Reuse, Step, ignore
from rlcompile.layer.in_context import Drift
from rlcompile.layer.problem import SelectionProblem, exact, idle_libraries
from rlcompile.layer.selection.api import select_segments
from rlcompile.layer.selection.candidates import TIE_BAND, Candidate, pick
from rlcompile.layer.selection.timing import ROUNDS, UNHURRIED_BATCHES
from rlcompile.layer.table import read_table
from rlcompile.measure import QUICK, summarize
from rlcompile.measure.contest import Settle
from rlcompile.models import load_model
from rlcompile.plan import load_plan, save_plan
from rlcompile.saved import SLOWER_FLOOR
from rlcompile.verify import compare_outputs
from tests.timing import BLOCKS


@pytest.fixture(scope="module")
def selection(tmp_path_factory):
    table_dir = tmp_path_factory.mktemp("tables")
    return select_segments(load_model("lenet5"), "qlearning", threads=2, table_dir=table_dir, timing=BLOCKS,
                           leave_out_idle=False, episodes=100)  # fmt: skip


def test_selection_measures_every_candidate_and_keeps_the_fastest(selection):
    labels = {label for candidate in selection.candidates for label in candidate.labels}
    assert {"qlearning", "exact", "single:ort", "single:openvino", "single:torch"} <= labels
    measured = [c for c in selection.candidates if c.measured is not None]
    assert selection.chosen in measured and selection.chosen.agreement.within()
    fastest = min(c.measured.median_ms for c in measured)
    band = max(TIE_BAND, selection.noise)  # a plan of more segments must beat a simpler one by more than the noise
    # the untouched native stays unless beaten beyond the band: it may be up to 1 / (1 - band) of the fastest
    assert selection.chosen.measured.median_ms <= fastest / (1 - band) + 1e-9
    simpler_ties = [c for c in measured if c.segments < selection.chosen.segments
                    and c.measured.median_ms <= fastest * (1 + band)]  # fmt: skip
    assert not simpler_ties
    assert {"ort native", "openvino native"} <= set(selection.natives) and selection.noise is not None
    # the twins judged round by round: each round's block of the second session over the first's, their median
    rounds = selection.native_round_ms
    paired = [abs(float(np.median([rounds[twin][r] / rounds[native][r] for r in rounds[twin]])) - 1)
              for twin, native in (("ort native (identical session)", "ort native"),
                                   ("openvino native (identical session)", "openvino native"))]  # fmt: skip
    assert selection.paired_noise == pytest.approx(max(paired))
    assert selection.noise >= selection.paired_noise - 1e-12  # the natives' pairs and the plans that twin them
    # every median judged round by round against the faster native, which keeps its own
    faster = min(("ort native", "openvino native"), key=lambda label: selection.natives[label].median_ms)
    assert selection.natives[faster].pooled_median_ms is None
    assert selection.to_dict()["paired_noise"] == selection.paired_noise
    # PyTorch has no native run: its single-library plan, compiled a second time, gauged its speed in the contest
    assert set(selection.plan_twins) == {"single:torch (identical plan)"}
    assert selection.plan_twin_round_ms["single:torch (identical plan)"]
    assert not selection.table_reused and set(selection.table.notes["context_factor"]) >= {"ort"}
    # the native runs gauge each library's speed at the calibration; ORT's plan of one segment is their twin there
    notes = selection.table.notes
    assert set(notes["native_ms"]) == {"ort", "openvino"}
    assert notes["single_library_ms"]["ort"] == notes["native_ms"]["ort"]  # one measurement twice: their mean
    assert selection.calibration_noise == max(notes["twin_noise"].values()) and "ort" in notes["twin_noise"]


def test_the_table_is_reused_and_the_solvers_keep_their_interface(selection):
    again = select_segments(load_model("lenet5"), "exact", threads=2, table_dir=selection.table_file.parent,
                            timing=BLOCKS)  # fmt: skip
    assert again.table_reused and again.result.extra["proven_optimal"]
    qlearning = next(c for c in selection.candidates if "qlearning" in c.labels)
    problem = SelectionProblem(again.table)  # what the exact solver optimised: no plan costs less on it
    assert problem.total(problem.choices(qlearning.assignment)) >= again.result.total_ms - 1e-9


def test_the_libraries_the_tables_optimum_does_without_are_left_out_of_the_plans(selection):
    table = read_table(selection.table_file)  # what the run reusing it decides on, before its probes refit it
    again = select_segments(load_model("lenet5"), "qlearning", threads=2, table_dir=selection.table_file.parent,
                            timing=BLOCKS, episodes=100)  # fmt: skip
    assert again.table_reused
    full = SelectionProblem(table)
    best = exact(full).total_ms
    band = max(TIE_BAND, *table.notes["twin_noise"].values())  # a gain the calibration's twins cannot tell is none
    assert again.left_out == idle_libraries(full, band)
    assert exact(full.without(again.left_out)).total_ms < best * (1 + band)
    for library in set(full.libraries()) - set(again.left_out) - {"ort"}:  # each kept one is worth its band
        assert exact(full.without([*again.left_out, library])).total_ms >= best * (1 + band)
    plans = [candidate for candidate in again.candidates if not candidate.labels[0].startswith("native:")]
    used = {library for candidate in plans for library in candidate.assignment}  # the native runs stay candidates
    assert not used & set(again.left_out) and not any(twin in label for label in again.plan_twins
                                                      for twin in again.left_out)  # fmt: skip
    assert again.to_dict()["left_out"] == again.left_out


def test_ties_go_to_the_plan_with_fewer_segments():
    def candidate(label: str, ms: float, segments: int) -> Candidate:
        c = Candidate([label], ["ort"], ms, measured=summarize([ms]))
        c.engine = type("E", (), {"compiled": [None] * segments})()
        return c

    mixed, single, slow = candidate("mixed", 10.0, 3), candidate("single", 10.1, 1), candidate("slow", 12.0, 1)
    assert pick([mixed, single, slow]).labels == ["single"]
    assert pick([mixed, candidate("single", 11.0, 1)]).labels == ["mixed"]
    # when identical sessions differed by 15%, a 9% gain is not measured: the simpler plan is kept
    assert pick([mixed, candidate("single", 11.0, 1)], noise=0.15).labels == ["single"]
    assert pick([mixed, candidate("single", 12.0, 1)], noise=0.15).labels == ["mixed"]
    # among the ties of as many segments, the faster
    assert pick([mixed, slow, candidate("single", 11.0, 1)], noise=0.3).labels == ["single"]


def test_ties_of_as_many_segments_go_to_the_least_error():
    """Lowered plans equally fast within the band: the one whose error exceeds fp32's least (a plan in fp32 counts as
    none); beyond the band, the faster whatever its error."""
    from rlcompile.manifest import AccuracyRecord

    def candidate(label: str, ms: float, excess: float | None) -> Candidate:
        c = Candidate([label], ["openvino"], ms, measured=summarize([ms]))
        c.engine = type("E", (), {"compiled": [None]})()
        if excess is not None:
            c.accuracy = AccuracyRecord("auto", "cosine", 0.01, "data.npz", 4, 4, 0.0, excess, excess, label, {}, [],
                                        10, {})  # fmt: skip
        return c

    rough, exact = candidate("int8 rough", 2.366, 0.0064), candidate("int8 smooth", 2.368, 0.0021)
    assert pick([rough, exact]).labels == ["int8 smooth"]
    assert pick([rough, exact, candidate("fp32", 2.40, None)]).labels == ["fp32"]  # within 2%: no gain measured
    assert pick([candidate("int8 rough", 2.20, 0.0064), exact]).labels == ["int8 rough"]  # 7% faster: beyond it


def test_the_untouched_original_is_kept_unless_a_plan_beats_it_beyond_the_band_and_the_noise():
    def candidate(label: str, ms: float, segments: int = 1, untouched: bool = False) -> Candidate:
        c = Candidate([label], ["ort"], ms, measured=summarize([ms]), untouched=untouched)
        c.engine = type("E", (), {"compiled": [None] * segments})()
        return c

    ort, openvino = candidate("native:ort", 2.00, untouched=True), candidate("native:openvino", 1.95, untouched=True)
    cleaned = candidate("single:ort", 1.97)  # the cleaned graph in one segment: a tie with the faster native
    assert pick([cleaned, ort, openvino]).labels == ["native:openvino"]  # the faster native, by its median
    mixed = candidate("exact", 1.80, segments=3)  # 7.7% faster than the faster native
    assert pick([cleaned, mixed, ort, openvino]).labels == ["exact"]
    assert pick([cleaned, mixed, ort, openvino], noise=0.10).labels == ["native:openvino"]  # not beyond the noise
    # among the plans that beat the native, ties go to the fewer segments
    assert pick([candidate("single:openvino", 1.81), mixed, ort, openvino]).labels == ["single:openvino"]
    assert pick([cleaned, mixed]).labels == ["exact"]  # no untouched run measured: the fastest, ties to the simplest


def test_plan_directory_round_trip_and_python_api(selection, tmp_path: Path):
    out = save_plan(selection, tmp_path / "plan")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["segments"] and all((out / s["onnx"]).is_file() for s in manifest["segments"])
    plan = rlcompile.load(out)
    assert plan.libraries == selection.chosen.engine.libraries
    feeds = {spec.name: np.random.default_rng(2).standard_normal(spec.shape).astype(np.float32) for spec in plan.inputs}
    assert compare_outputs(selection.chosen.engine.run(feeds), plan.run(feeds)).within()
    assert compare_outputs(plan.reference_outputs, plan.run(plan.reference_inputs)).within()


def test_a_plan_from_another_cpu_or_a_broken_directory_is_refused_in_one_line(selection, tmp_path: Path, capsys):
    out = save_plan(selection, tmp_path / "plan")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["environment"]["cpu"] = "Some Other CPU"
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(["run", str(out)]) == 2
    (out / "manifest.json").write_text("{not json")
    assert main(["run", str(out)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "Some Other CPU" in errors[0] and "not an rlcompile plan directory" in errors[1]
    with pytest.raises(rlcompile.errors.RlcompileError):
        load_plan(tmp_path / "missing")


def test_select_cli_writes_a_plan_directory_that_run_runs(tmp_path: Path, capsys):
    out = tmp_path / "lenet.plan"
    code = main(["select", "lenet5", "--agent", "greedy", "--quick", "-o", str(out), "--table-dir", str(tmp_path),
                 "--runtimes", "ort,torch", "--threads", "1"])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "plans run end to end" in printed and "timing noise of this run" in printed and "wrote" in printed
    assert json.loads((out / "manifest.json").read_text())["selection"]["left_out"] == {}  # named: the user's choice
    assert main(["run", str(out), "--quick", "--json", str(tmp_path / "run.json")]) == 0
    printed = capsys.readouterr().out
    assert "x ONNX Runtime native" in printed and "agrees with ONNX Runtime" in printed
    timed = json.loads((tmp_path / "run.json").read_text())  # beside both natives, flagged against the faster
    faster = min(timed["ort_native"]["median_ms"], timed["openvino_native"]["median_ms"])
    result = timed["results"][0]
    assert result["ratio_to_faster_native"] == pytest.approx(result["latency"]["median_ms"] / faster)
    assert result["slower"] == (result["ratio_to_faster_native"] > 1 + max(timed["noise"], SLOWER_FLOOR))


def test_select_within_a_budget_profiles_the_default_library_only_when_time_is_short(tmp_path: Path):
    report = tmp_path / "select.json"
    code = main(["select", "lenet5", "--agent", "greedy", "--quick", "--budget", "1s", "-o", str(tmp_path / "plan"),
                 "--table-dir", str(tmp_path / "tables"), "--runtimes", "ort,torch", "--threads", "1", "--json",
                 str(report)])  # fmt: skip
    assert code == 0
    groups = json.loads(report.read_text())["groups"]
    assert groups and set(groups[-1]["ms"]) == {"ort"}  # the profile's time was spent before the last group
    assert not list((tmp_path / "tables").glob("*.json"))  # a cut profile is not saved: the next run completes it


def test_select_for_throughput_keeps_the_pair_that_served_the_most_and_records_it(tmp_path: Path):
    report, out = tmp_path / "select.json", tmp_path / "plan"
    code = main(["select", "lenet5", "--agent", "greedy", "--quick", "--objective", "throughput", "--concurrency", "2",
                 "--budget", "20s", "-o", str(out), "--table-dir", str(tmp_path / "tables"), "--threads", "2",
                 "--json", str(report)])  # fmt: skip
    assert code == 0
    serving = json.loads(report.read_text())["serving"]
    rates = {label: stats["per_s"] for label, stats in serving["servers"].items() if "(identical)" not in label}
    assert serving["kept"] == max(rates, key=rates.get) and serving["concurrency"] == 2
    assert rlcompile.load(out).manifest.serving == serving  # what run DIR --objective throughput and the export read


def test_run_refuses_saved_results_of_different_models_and_several_models(selection, tmp_path: Path, capsys):
    out = save_plan(selection, tmp_path / "a")
    other = tmp_path / "b"
    shutil.copytree(out, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["inputs"][0]["shape"][0] = 7
    (other / "manifest.json").write_text(json.dumps(manifest))
    assert main(["run", str(out), str(other)]) == 2
    assert main(["run", "lenet5", "resnet18"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "take different inputs" in errors[0] and "run takes one model" in errors[1]


def test_select_bad_options_exit_2(capsys, tmp_path: Path):
    assert main(["select", "lenet5", "--runtimes", "ort,cudnn"]) == 2
    assert main(["select", "lenet5", "--threads", "0"]) == 2
    assert main(["select", "lenet5", "--tuning-db", str(tmp_path / "nowhere")]) == 2
    assert main(["select", "lenet5", "--per-operator", "--objective", "throughput"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 4 and all(line.startswith("rlcompile: error:") for line in errors)


def test_an_interrupted_profile_resumes_at_the_group_where_it_stopped(tmp_path: Path):
    from rlcompile import runtimes
    from rlcompile.layer.group_table import group_model, load_or_profile_groups

    grouped = group_model(load_model("lenet5"))
    created = {"ort": runtimes.create("ort")}
    path = tmp_path / "table.json"

    def interrupt_at_group_3(event: Event) -> None:
        if isinstance(event, Step) and event.done == 2:  # about to profile the third group
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        load_or_profile_groups(grouped, created, 1, path, interrupt_at_group_3)
    assert not path.exists() and path.with_name(path.name + ".partial").exists()
    events: list[Event] = []
    table, reused = load_or_profile_groups(grouped, created, 1, path, events.append)
    assert not reused and set(table.options) == {group.name for group in grouped.groups}
    assert isinstance(events[0], Reuse) and events[0].done == 2
    assert not any(isinstance(event, Step) and event.done < 2 for event in events)
    assert not path.with_name(path.name + ".partial").exists()


def test_a_profile_measures_a_few_groups_of_each_kind_and_prices_every_member_at_their_median(tmp_path: Path):
    from rlcompile import runtimes
    from rlcompile.layer.group_table import MEASURED_PER_KIND, group_model, load_or_profile_groups
    from tests.graph.conftest import loaded
    from tests.layer.test_groups import repeated_layers

    b, outputs = repeated_layers()
    grouped = group_model(loaded(b.model(outputs)))
    events: list[Event] = []
    table, _ = load_or_profile_groups(grouped, {"ort": runtimes.create("ort")}, 1, tmp_path / "t.json", events.append)
    profiled = [event.item for event in events if isinstance(event, Step) and event.item]
    layers = [group.name for group in grouped.groups[:5]]  # five Conv+Relu of one kind
    assert len(set(profiled) & set(layers)) == MEASURED_PER_KIND
    assert set(profiled) >= {group.name for group in grouped.groups[5:]}
    assert len({table.options[name]["ort"] for name in layers}) == 1
    assert table.notes["group_kinds"] == grouped.kinds


def test_a_profile_past_its_deadline_measures_only_the_default_library_and_is_not_saved(tmp_path: Path):
    import time

    from rlcompile import runtimes
    from rlcompile.layer.group_table import group_model, load_or_profile_groups
    from rlcompile.layer.table import save_table

    grouped = group_model(load_model("lenet5"))
    created = {"ort": runtimes.create("ort"), "openvino": runtimes.create("openvino")}
    path = tmp_path / "table.json"
    events: list[Event] = []
    now = time.monotonic()
    table, reused = load_or_profile_groups(grouped, created, 1, path, events.append, deadline=now, calibrate_by=now)
    assert not reused and table.notes["cut_short"] == len(grouped.groups)
    assert set(table.notes["single_library_ms"]) == {"ort"}  # the calibration, past its own deadline, at its floor
    assert all(set(options) == {"ort"} for options in table.options.values())
    priced = [entry for entry in table.conversions.values() if "error" not in entry]
    assert priced and all(set(entry) == {"split:ort", "host->ort", "ort->host"} for entry in priced)  # no hand-offs
    assert not path.exists()  # the next run, with time, profiles every library
    assert not save_table(table, path) and not path.exists()  # nor does the layer level's refined table save it
    table, _ = load_or_profile_groups(grouped, created, 1, path)
    assert path.exists() and all(set(options) == {"ort", "openvino"} for options in table.options.values())
    assert all({"ort->openvino", "openvino->ort"} <= set(entry) for entry in table.conversions.values())


def test_the_original_model_run_whole_by_each_runtime_is_always_a_candidate(selection):
    """A runtime whose single-runtime plan falls back to ONNX Runtime on some groups still competes with the whole
    model run natively, so the output is never slower than the faster native library (found on a YOLOS export)."""
    original = selection.model.proto
    whole = {c.engine.libraries[0] for c in selection.candidates
             if c.engine and len(c.engine.compiled) == 1 and c.engine.compiled[0].segment.proto is original}
    assert {"ort", "openvino"} <= whole
    # such a run has no table prediction, whatever its library (on yolos OpenVINO's whole run could not be priced)
    unpriced = Candidate(["native:elsewhere"], ["elsewhere"] * len(selection.grouped.groups), float("nan"))
    assert np.isnan(selection.expected_ms(unpriced))


def test_the_native_runs_and_the_untouched_plans_run_the_model_as_given_not_as_folded(tmp_path: Path):
    """A model folded at load time (its shapes computed at run time) is run natively as the user gave it: the native
    runs, the untouched candidates and a plan that keeps one of them run the file's own graph, never the fold."""
    from tests.conftest import write_dynamic_conv_model

    model = load_model(str(write_dynamic_conv_model(tmp_path / "dynamic_conv.onnx")), {"x": (1, 3, 8, 8)})
    assert model.given is not None and model.native_proto is model.given
    chosen = select_segments(model, "exact", threads=1, library_names=["ort", "openvino"], table_dir=tmp_path,
                             timing=BLOCKS)  # fmt: skip
    untouched = [c for c in chosen.candidates if c.untouched]
    assert {c.engine.libraries[0] for c in untouched} == {"ort", "openvino"}
    assert all(c.engine.compiled[0].segment.proto is model.given for c in untouched)
    assert all(c.engine.compiled[0].segment.proto is not model.given for c in chosen.candidates if not c.untouched)
    if chosen.chosen.untouched:  # the plan saved is then the file's graph
        save_plan(chosen, tmp_path / "plan")
        saved = onnx_ops(tmp_path / "plan" / "segments")
        assert "Shape" in saved
    assert chosen.chosen.agreement.within()


def onnx_ops(folder: Path) -> set[str]:
    """The operator types of every ONNX file in ``folder``."""
    import onnx

    return {node.op_type for path in folder.glob("*.onnx") for node in onnx.load(str(path)).graph.node}


def test_a_model_openvino_refuses_whole_is_selected_with_onnx_runtime_as_the_native_run(tmp_path: Path):
    """OpenVINO's converter rejects an AveragePool whose kernel is larger than its input (HF EfficientNet's
    pooler; ONNX Runtime takes it with ceil_mode): the native runs are ONNX Runtime's, said in an event."""
    from onnx import TensorProto, helper

    from tests.conftest import save

    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[16, 16], strides=[16, 16], ceil_mode=1)]
    graph = helper.make_graph(nodes, "oversized_pool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])])  # fmt: skip
    events: list = []
    chosen = select_segments(load_model(str(save(graph, tmp_path / "pool.onnx"))), "exact", threads=1,
                             library_names=["ort", "openvino"], table_dir=tmp_path, timing=BLOCKS,
                             progress=events.append)  # fmt: skip
    assert "ort native" in chosen.natives and "openvino native" not in chosen.natives
    assert any(isinstance(e, Event) and "OpenVINO does not run the whole model" in e.text for e in events)
    assert chosen.chosen.agreement.within()


def test_the_final_contest_floor_is_reserved_from_the_native_latency_and_the_predictions():
    import time

    from rlcompile.layer.selection.deadline import REFINED_PLANS, FinalReserve, call_seconds, native_runtimes
    from rlcompile.measure.contest import floor_seconds

    calls: list[float] = []
    call_s = call_seconds(lambda: calls.append(time.sleep(0.01)))
    assert len(calls) == 2 and 0.01 <= call_s < 0.05  # one warm call, one timed
    runnable = Candidate(["single:ort"], ["ort"], 30.0, engine=object())
    broken = Candidate(["single:torch"], ["torch"], 90.0, error="does not compile")
    unpredicted = Candidate(["native:openvino"], ["openvino"], float("nan"), engine=object())
    natives = ["ort native (identical session)", "ort native", "openvino native (identical session)",
               "openvino native"]  # fmt: skip
    reserve = FinalReserve(call_s, len(natives), native_runtimes(natives), whole_s=1.0)
    assert reserve.runtimes == 2  # ORT and OpenVINO, each run whole as a candidate once
    # the prediction, a native call for the unpredicted one, the plans probes add, 4 native runs, 2 whole models
    expected = floor_seconds([0.03, call_s] + [call_s] * (REFINED_PLANS + 4 + 2), ROUNDS)
    assert reserve.final_floor_s([runnable, broken, unpredicted]) == pytest.approx(expected)


def test_the_refining_probe_runs_only_when_it_fits_beside_the_final_contest():
    import time

    from rlcompile.layer.selection.deadline import PROBE_SHARE, probe_deadline

    assert probe_deadline(None, 5.0, 1.0) == (True, None)  # no deadline: no limit
    now = time.monotonic()
    assert probe_deadline(now + 3.0, 2.0, 1.0) == (False, None)  # 1 s beyond what follows it; the probe needs 2
    fits, until = probe_deadline(now + 100.0, 10.0, 1.0)
    assert fits and now + PROBE_SHARE * 89 < until < now + 90  # its share, and the final contest's floor kept


def test_boundaries_past_the_deadline_are_priced_by_a_line_through_the_measured_shapes():
    import time

    from rlcompile import runtimes
    from rlcompile.layer.boundaries import time_boundaries

    created = {"ort": runtimes.create("ort"), "openvino": runtimes.create("openvino")}
    shapes = [(1, channels, 8, 8) for channels in (4, 8, 16, 32)]
    meeting = {shape: {"ort", "openvino"} for shape in shapes}
    conversions, estimated = time_boundaries(meeting, created, 1, deadline=time.monotonic())
    assert estimated == 2  # the smallest and the largest shape measured: a line needs two points
    keys = {"split:ort", "split:openvino", "host->ort", "ort->host", "host->openvino", "openvino->host",
            "ort->openvino", "openvino->ort"}  # fmt: skip
    assert all(keys <= set(conversions[f"1x{c}x8x8"]) for c in (4, 8, 16, 32))  # none left free
    for key in keys:  # the shapes between are priced between the measured ends
        ends = sorted(conversions[f"1x{c}x8x8"][key] for c in (4, 32))
        assert all(ends[0] - 1e-9 <= conversions[f"1x{c}x8x8"][key] <= ends[1] + 1e-9 for c in (8, 16))


def test_a_fitted_boundary_follows_size_and_pools_the_pairs_never_measured():
    from rlcompile.layer.boundaries import fit_by_size, spread_order

    measured = {(10,): {"split:a": 1.0, "a->b": 2.0}, (30,): {"split:a": 3.0, "a->b": 4.0}}
    fitted = fit_by_size(measured, (20,), {"a", "b", "c"})
    assert fitted["split:a"] == pytest.approx(2.0) and fitted["a->b"] == pytest.approx(3.0)
    assert fitted["b->c"] == pytest.approx(3.0)  # never measured: every hand-off measured, pooled
    assert spread_order(list(range(6))) == [0, 5, 2, 1, 3, 4]  # any prefix spans the sizes


class CountingRuntime:
    """ONNX Runtime, each call of what it compiles counted."""

    def __init__(self):
        self.inner, self.calls = rlcompile.runtimes.create("ort"), 0

    def compile(self, proto, options):
        runner = self.inner.compile(proto, options)

        def run(inputs):
            self.calls += 1
            return runner(inputs)

        return run


def test_boundary_probes_past_the_profiles_deadline_take_far_fewer_calls():
    from rlcompile.layer.boundaries import time_boundary

    calls = []
    for late in (False, True):
        library = CountingRuntime()
        # a tensor large enough that a call takes long enough for the timing, not the most calls a block makes, to
        # decide how many calls are made
        entry = time_boundary((8, 1024), {"ort": library}, 1, np.random.default_rng(0), late)
        assert set(entry) == {"host->ort", "ort->host", "split:ort"}
        calls.append(library.calls)
    assert 3 * calls[1] < calls[0]


def test_a_late_calibration_takes_the_probes_measurement_of_the_single_library_plans_as_the_tables_speed():
    from rlcompile.layer.selection.probe import late_calibration, recalibrate
    from rlcompile.layer.table import LookupTable

    table = LookupTable("toy", [], {}, {}, [], {}, notes={"cut_short": 1, "ort_native_ms": 9.0})
    assert late_calibration(table) and not late_calibration(LookupTable("t", [], {}, {}, [], {}))
    on_a = Candidate(["single:a"], ["a", "a"], 2.0, single=["a"], measured=summarize([4.0]))
    on_b = Candidate(["single:b"], ["b", "b"], 2.0, single=["b"], measured=summarize([5.0]))
    mixed = Candidate(["exact"], ["a", "b"], 2.0, measured=summarize([9.0]))  # a plan, not a library's speed
    events: list[Event] = []
    assert recalibrate(table, [mixed, on_b, on_a], {"ort": 4.5, "openvino": 3.0}, progress=events.append)
    assert table.notes["single_library_ms"] == {"a": 4.0, "b": 5.0} and len(events) == 1
    assert table.notes["ort_native_ms"] == 4.5
    assert table.notes["native_ms"] == {"ort": 4.5, "openvino": 3.0}  # the gauges' speed, now the table's
    assert not recalibrate(table, [mixed], {"ort": 4.5}, events.append)  # no single-library plan: nothing to take


def test_a_plan_that_is_its_librarys_native_run_and_that_native_run_are_one_measurement_taken_twice():
    """Calibration twins set their library's speed together (their geometric mean): either alone carries the
    contest's noise into every prediction the other judges."""
    from types import SimpleNamespace

    from rlcompile.layer.group_table import merge_twins
    from rlcompile.layer.selection.probe import recalibrate
    from rlcompile.layer.table import LookupTable

    plans, natives = {"ort": 4.0, "openvino": 6.0}, {"ort": 9.0, "openvino": 3.0}
    merge_twins(plans, natives, ["ort"])
    assert plans == {"ort": 6.0, "openvino": 6.0} and natives == {"ort": 6.0, "openvino": 3.0}
    whole = object()
    table = LookupTable("toy", [], {}, {}, [], {}, notes={"cut_short": 1})
    on_ort = Candidate(["single:ort"], ["ort"], 2.0, single=["ort"], measured=summarize([4.0]),
                       engine=SimpleNamespace(runs_whole=lambda proto: proto is whole))  # fmt: skip
    assert recalibrate(table, [on_ort], {"ort": 9.0}, ignore, whole)
    assert table.notes["single_library_ms"] == {"ort": 6.0} and table.notes["ort_native_ms"] == 6.0
    assert table.notes["twin_noise"] == {"ort": pytest.approx(5.0 / 9.0)}


def test_a_probe_pools_its_measurement_of_a_fall_back_plan_with_the_calibrations_at_the_calibrations_speed():
    """A single-library plan that falls back to ONNX Runtime is a quantity of its own, not its native run's twin:
    each probe's measurement joins the calibration's (geometric mean), taken to the calibration's speed by its
    library's native run (ORT native's for a library without one); a plan that runs the model whole stays."""
    from types import SimpleNamespace

    from rlcompile.layer.selection.probe import pool_fall_backs
    from rlcompile.layer.table import LookupTable

    whole = object()
    notes = {"single_library_ms": {"torch": 10.0, "openvino": 8.0, "ort": 5.0}, "ort_native_ms": 5.0,
             "native_ms": {"ort": 5.0, "openvino": 4.0}}  # fmt: skip
    table = LookupTable("toy", [], {}, {}, [], {}, notes=notes)
    engine = SimpleNamespace(runs_whole=lambda proto: False)  # several segments
    falls_back = [Candidate(["single:torch"], ["torch", "ort"], 0.0, single=["torch"], measured=summarize([18.0]),
                            engine=engine),
                  Candidate(["single:openvino"], ["openvino", "ort"], 0.0, single=["openvino"],
                            measured=summarize([12.0]), engine=engine)]  # fmt: skip
    one_segment = Candidate(["single:ort"], ["ort", "ort"], 0.0, single=["ort"], measured=summarize([7.0]),
                            engine=SimpleNamespace(runs_whole=lambda proto: proto is whole))  # fmt: skip
    # ORT native ran 1.5x slower than at the calibration, OpenVINO native 2x: torch's plan goes by ORT's
    pool_fall_backs(table, [*falls_back, one_segment], {"ort": 7.5, "openvino": 8.0}, 1.5, whole)
    assert table.notes["single_library_ms"] == {"torch": pytest.approx(np.sqrt(10.0 * 12.0)),
                                                "openvino": pytest.approx(np.sqrt(8.0 * 6.0)), "ort": 5.0}  # fmt: skip
    pool_fall_backs(table, falls_back[:1], {"ort": 5.0, "openvino": 4.0}, 1.0, whole)  # a second probe: three samples
    assert table.notes["single_library_ms"]["torch"] == pytest.approx((10.0 * 12.0 * 18.0) ** (1 / 3))
    assert table.notes["single_library_samples"]["torch"] == pytest.approx([10.0, 12.0, 18.0])


def test_plans_are_solved_after_a_probe_only_when_another_probe_can_measure_them():
    """A probe that leaves no time for another one only refits: a plan solved after it would reach the final
    contest unmeasured by any probe."""
    import time

    from rlcompile.layer.selection.deadline import another_probe_fits, probe_deadline

    assert another_probe_fits(None, None, 3.0, 1.0)
    deadline = time.monotonic() + 10.0
    # 7 s spare beyond what must follow: a probe with a 1 s floor ends after 2.1 s, leaving 4.9 s for another (2 s)
    fits, until = probe_deadline(deadline, 3.0, 1.0)
    assert fits and until == pytest.approx(deadline - 7.9, abs=0.05) and another_probe_fits(deadline, until, 3.0, 1.0)
    # a 2.5 s floor: the probe runs (7 >= 5 s) and ends after 2.5 s, leaving 4.5 s: no second one, nothing solved
    fits, until = probe_deadline(deadline, 3.0, 2.5)
    assert fits and not another_probe_fits(deadline, until, 3.0, 2.5)
    # the plans it finds are compiled, and solved for, before the next probe: after 3 s of compiles and the solve,
    # 1.7 s are left beyond what follows the next probe, less than twice its 1 s floor
    fits, until = probe_deadline(deadline, 3.0, 1.0)
    assert fits and not another_probe_fits(deadline, until + 3.0, 3.0, 1.0)


def test_the_last_probe_reserves_nothing_for_plans_it_will_not_find():
    """What must follow a probe: the compiles of the plans it finds (at the slowest plan compile so far) and of the
    whole models (at a native session's), and the final contest with them; the last probe finds none."""
    import time

    from rlcompile.layer.selection.deadline import REFINED_PLANS, SETTLE_SHARE, FinalReserve, settle_seconds

    plans = [Candidate(["single:ort"], ["ort"], 30.0, engine=object())]
    reserve = FinalReserve(0.05, natives=4, runtimes=2, whole_s=0.5)
    earlier = reserve.after_probe_s(plans, compile_s=1.5, compiles=REFINED_PLANS)
    last = reserve.after_probe_s(plans, compile_s=1.5, compiles=0)
    assert earlier == pytest.approx(reserve.final_floor_s(plans, refined=REFINED_PLANS) + REFINED_PLANS * 1.5 + 2 * 0.5)
    assert last == pytest.approx(reserve.final_floor_s(plans, refined=0) + 2 * 0.5)
    assert earlier > last + REFINED_PLANS * 1.5
    # a plan twin (PyTorch's single-library plan compiled again) is compiled before the final contest too
    twinned = FinalReserve(0.05, natives=4, runtimes=2, whole_s=0.5, twins=1)
    assert twinned.final_floor_s(plans) > reserve.final_floor_s(plans)  # its turn in the final contest too
    assert twinned.after_probe_s(plans, compile_s=1.5, compiles=0) == pytest.approx(
        twinned.final_floor_s(plans, refined=0) + 3 * 0.5)
    # the next probe, the last, is followed by the final contest with the plans this one finds, compiled before it
    assert reserve.after_probe_s(plans, compile_s=1.5, compiles=0, refined=REFINED_PLANS) == pytest.approx(
        reserve.final_floor_s(plans, refined=REFINED_PLANS) + 2 * 0.5)
    # the time kept for the final contest's settling follows every probe, beyond the contest's floor
    assert settle_seconds(None) == 0.0 and settle_seconds(time.monotonic() - 1.0) == 0.0
    assert settle_seconds(time.monotonic() + 35.0) == pytest.approx(SETTLE_SHARE * 35.0, rel=0.01)
    settling = FinalReserve(0.05, natives=4, runtimes=2, whole_s=0.5, settle_s=7.0)
    assert settling.final_floor_s(plans) == pytest.approx(reserve.final_floor_s(plans))
    assert settling.after_probe_s(plans, compile_s=1.5, compiles=0) == pytest.approx(last + 7.0)


def test_a_second_probe_times_only_the_plans_not_probed_yet_and_the_single_library_plans(selection):
    """Each probe prices a plan's segments once: the second one re-times the single-library plans (each library's
    drift) and the plans the first one's corrections led to, never the plans it already priced; being the last, it
    adds no plan."""
    import copy

    from rlcompile import runtimes
    from rlcompile.events import ignore
    from rlcompile.layer import solvers
    from rlcompile.layer.problem import SelectionProblem
    from rlcompile.layer.selection.candidates import candidate_plans
    from rlcompile.layer.selection.probe import refine

    grouped = selection.grouped
    created = {name: runtimes.create(name) for name in ("ort", "openvino", "torch")}
    half = len(grouped.groups) // 2
    mixed = ["ort"] * half + ["openvino"] * (len(grouped.groups) - half)
    problem = SelectionProblem(copy.deepcopy(selection.table))  # the fixture's table stays as it was
    candidates = candidate_plans(problem, [("mixed", mixed), ("single:ort", ["ort"] * len(mixed)),
                                           ("single:openvino", ["openvino"] * len(mixed))])  # fmt: skip
    for candidate in candidates:
        candidate.engine = grouped.engine(candidate.assignment, 1, created)
    solver = solvers.create("exact")
    natives = {"ort native": selection.native_calls["ort native"]}
    problem, result = refine(problem, solver.solve(problem, 0), candidates, natives, grouped.feeds, solver, 0,
                             "exact", QUICK, ignore)  # fmt: skip
    first = {id(c): c.segment_ms for c in candidates if c.probed}
    assert len(first) == 3 and all(ms is not None for ms in first.values())
    # beside each probe's measurement, the table's price of the plan right after the refit that used it
    assert all(len(c.fitted_ms) == len(c.probe_ms) == 1 and c.fitted_ms[0] > 0 for c in candidates if c.probed)
    # without a deadline every plan is probed in at least UNHURRIED_BATCHES batches, more while the twins disagree
    batches = range(UNHURRIED_BATCHES * ROUNDS, Settle().max_batches * ROUNDS + 1, ROUNDS)
    assert all(c.probe_rounds[0] in batches for c in candidates if c.probed)
    assert all(c.measured is None for c in candidates)  # the final contest measures every plan afresh
    for candidate in candidates:
        if candidate.engine is None:
            candidate.engine = grouped.engine(candidate.assignment, 1, created)
    count = len(candidates)
    refine(problem, result, candidates, natives, grouped.feeds, solver, 0, "exact", QUICK, ignore, round_index=2,
           solve=False)  # fmt: skip
    assert len(candidates) == count  # the last probe solves no more: every plan in the final contest was probed
    assert all(c.probed for c in candidates)
    by_label = {", ".join(c.labels): c for c in candidates}
    assert by_label["mixed"].segment_ms is first[id(by_label["mixed"])]  # priced once, not timed again
    singles = [c for c in candidates if c.single]
    assert singles and all(c.segment_ms is not first[id(c)] for c in singles)  # re-timed: the drift now
    assert all(len(c.fitted_ms) == len(c.probe_ms) == 2 for c in singles)


def test_a_plan_is_judged_round_by_round_against_its_libraries_speed_in_that_round():
    """A machine that slows for a spell moves a plan and the libraries' speeds together: each round's prediction is
    at the speeds of that round, and a round missing a library the plan uses is not judged."""
    from rlcompile.layer.selection.record import Selection
    from rlcompile.layer.table import SINK, SOURCE, Edge, LookupTable

    edges = [Edge(SOURCE, "g1", "x", (1, 8)), Edge("g1", "g2", "y", (1, 8)), Edge("g2", SINK, "z", (1, 8))]
    notes = {"ort_native_ms": 2.0, "single_library_ms": {"a": 2.0, "b": 2.0}}
    table = LookupTable("toy", ["g1", "g2"], {"g1": {"a": 1.0, "b": 1.0}, "g2": {"a": 1.0, "b": 1.0}},
                        {"a": "a", "b": "b"}, edges, {}, host="host", default="a", notes=notes)  # fmt: skip
    on_a = Candidate(["single:a"], ["a", "a"], 2.0, single=["a"], measured=summarize([2.0, 4.0, 2.0]),
                     round_ms={0: 2.0, 1: 4.0, 2: 2.0})  # fmt: skip
    on_b = Candidate(["single:b"], ["b", "b"], 2.0, single=["b"], measured=summarize([2.0, 2.0]),
                     round_ms={0: 2.0, 1: 2.0})  # fmt: skip
    # slow in round 1 with a; round 2 has no block of b's plan: not judged
    mixed = Candidate(["mixed"], ["a", "b"], 2.0, measured=summarize([2.2, 3.3, 9.0]),
                      round_ms={0: 2.2, 1: 3.3, 2: 9.0})  # fmt: skip
    selection = Selection(None, None, "exact", 1, table, Path("toy"), False, None, [on_a, on_b, mixed], mixed,
                          native_round_ms={"ort native": {0: 2.0, 1: 4.0, 2: 2.0}})  # fmt: skip
    problem = selection.problem
    share_a = Drift({"a": 2.0, "b": 1.0}).of_plan(problem, problem.choices(mixed.assignment))  # round 1's drift
    assert selection.round_ratios(mixed) == pytest.approx([1.1, 3.3 / (2.0 * share_a)])
    pooled = selection.drifts.of_plan(problem, problem.choices(mixed.assignment))  # a: 2/2, b: 2/2
    assert selection.measured_over_expected(mixed) == pytest.approx(3.3 / (2.0 * pooled))
    # a one-library plan is never its own gauge: "a" has none other, so ORT native's speed in each round judges it
    assert selection.round_ratios(on_a) == pytest.approx([1.0, 1.0, 1.0])
    on_a.round_ms = {0: 2.0, 1: 2.0, 2: 2.0}  # not slowed in round 1 while ORT native was
    assert selection.round_ratios(on_a) == pytest.approx([1.0, 0.5, 1.0])


def test_a_single_library_plan_is_judged_by_its_librarys_native_run_never_by_itself():
    """The single-library plans gauge each library's speed for the mixed plans; judging one, its own measurement is
    left out: its library's native run (then at the calibration, now in the final contest) gauges it instead."""
    from rlcompile.layer.selection.record import Selection
    from rlcompile.layer.table import SINK, SOURCE, Edge, LookupTable

    edges = [Edge(SOURCE, "g1", "x", (1, 8)), Edge("g1", "g2", "y", (1, 8)), Edge("g2", SINK, "z", (1, 8))]
    notes = {"ort_native_ms": 2.0, "native_ms": {"ort": 2.0, "openvino": 1.0},
             "single_library_ms": {"ort": 2.0, "openvino": 1.5}}  # fmt: skip
    options = {"g1": {"ort": 1.0, "openvino": 0.75}, "g2": {"ort": 1.0, "openvino": 0.75}}
    table = LookupTable("toy", ["g1", "g2"], options, {"ort": "ort", "openvino": "openvino"}, edges, {},
                        host="host", default="ort", notes=notes)  # fmt: skip
    on_ort = Candidate(["single:ort"], ["ort", "ort"], 2.0, single=["ort"], measured=summarize([4.0]))
    on_openvino = Candidate(["single:openvino"], ["openvino", "openvino"], 1.5, single=["openvino"],
                            measured=summarize([3.0]))  # fmt: skip
    natives = {"ort native": summarize([4.0]), "openvino native": summarize([1.0])}  # ORT 2x slower, OpenVINO not
    selection = Selection(None, None, "exact", 1, table, Path("toy"), False, None, [on_ort, on_openvino], on_ort,
                          natives=natives)  # fmt: skip
    assert selection.measured_over_expected(on_ort) == pytest.approx(1.0)  # 2 ms then, at ORT's x2 now
    assert selection.measured_over_expected(on_openvino) == pytest.approx(2.0)  # its own x2 is not its gauge
    assert selection.drifts.by_library == {"ort": pytest.approx(2.0), "openvino": pytest.approx(2.0)}


def test_a_single_library_plan_no_native_run_gauges_is_judged_by_its_twin():
    """PyTorch has no native run: without a twin its plan was judged at ORT's drift; its twin (the plan compiled
    again and timed in the same contest) gauges PyTorch's own speed, pooled and round by round."""
    from rlcompile.layer.selection.record import Selection
    from rlcompile.layer.selection.timing import PLAN_TWIN
    from rlcompile.layer.table import SINK, SOURCE, Edge, LookupTable

    edges = [Edge(SOURCE, "g1", "x", (1, 8)), Edge("g1", "g2", "y", (1, 8)), Edge("g2", SINK, "z", (1, 8))]
    notes = {"ort_native_ms": 2.0, "native_ms": {"ort": 2.0}, "single_library_ms": {"ort": 2.0, "torch": 4.0}}
    options = {"g1": {"ort": 1.0, "torch": 2.0}, "g2": {"ort": 1.0, "torch": 2.0}}
    table = LookupTable("toy", ["g1", "g2"], options, {"ort": "ort", "torch": "torch"}, edges, {}, host="host",
                        default="ort", notes=notes)  # fmt: skip
    on_torch = Candidate(["single:torch"], ["torch", "torch"], 4.0, single=["torch"], measured=summarize([6.0]),
                         round_ms={0: 6.0, 1: 6.0})  # fmt: skip
    selection = Selection(None, None, "exact", 1, table, Path("toy"), False, None, [on_torch], on_torch,
                          natives={"ort native": summarize([2.0])},
                          native_round_ms={"ort native": {0: 2.0, 1: 2.0}})  # fmt: skip
    assert selection.measured_over_expected(on_torch) == pytest.approx(1.5)  # ORT ran as at the calibration
    twin = PLAN_TWIN.format("torch")
    selection.plan_twins = {twin: summarize([6.0])}
    selection.plan_twin_round_ms = {twin: {0: 6.0, 1: 5.0}}
    assert selection.measured_over_expected(on_torch) == pytest.approx(1.0)  # PyTorch itself 1.5x slower now
    assert selection.round_ratios(on_torch) == pytest.approx([1.0, 6.0 / 5.0])
    assert selection.drifts.by_library["torch"] == pytest.approx(1.5)


def test_a_plans_segments_share_out_its_own_median_each_by_its_mean():
    """A segment whose calls now and then wait (a slow call in ten) is dearer than its median says: the segments'
    medians add up to less than the plan's median, and the fit priced many-segment plans low. The shares add up to
    the plan's median and the slow calls count in the segment they happened in."""
    from rlcompile.layer.selection.timing import segment_shares

    spiky = [0.001] * 9 + [0.010]  # seconds per call: 1 ms, once 10 ms
    steady = [0.002] * 10
    whole = [a + b for a, b in zip(spiky, steady, strict=True)]
    plan_ms = 1e3 * float(np.median(whole))  # 3 ms, the calls' own median
    shares = segment_shares([spiky, steady], plan_ms + 1.0)  # the plan measured slower than its typical call
    assert sum(shares) == pytest.approx(plan_ms + 1.0)
    assert shares[0] / shares[1] == pytest.approx(np.mean(spiky) / np.mean(steady))  # 1.9 ms of mean against 2
    assert shares[0] > 1e3 * np.median(spiky) * (plan_ms + 1.0) / plan_ms  # more than its median's share
    assert segment_shares([[], steady], float("nan")) == [0.0, pytest.approx(2.0)]  # no plan time: the medians
