"""Headroom: each task's operator timed alone in the libraries, judged against the FMA peak, and the tasks
ordered (or left out) by what a tuned kernel could win."""

from __future__ import annotations

import json

import pytest

from rlcompile.kernel import headroom
from rlcompile.kernel.tasks import extract_tasks
from rlcompile.models import load_model
from rlcompile.peak import Peak


@pytest.fixture(scope="module")
def lenet_tasks():
    from rlcompile.tvm_bridge import resolve_target

    model = load_model("lenet5")
    return model, extract_tasks(model, resolve_target("llvm"))


@pytest.fixture(scope="module")
def lenet_times(lenet_tasks):
    model, tasks = lenet_tasks
    return headroom.library_times(model.static_proto(), tasks, ["ort", "openvino"], 1)


def test_every_convolution_and_matmul_task_finds_its_operator_and_a_library_time(lenet_tasks, lenet_times):
    _, tasks = lenet_tasks
    heavy = [t for t in tasks if "conv2d" in t.name or "matmul" in t.name or "dense" in t.name]
    assert heavy and {t.name for t in heavy} == set(lenet_times)
    for library, ms in lenet_times.values():
        assert library in ("ort", "openvino") and 0.0 < ms < 100.0


def test_a_library_near_the_peak_is_not_tuned_and_the_most_to_win_comes_first(lenet_tasks, lenet_times):
    _, tasks = lenet_tasks
    first = next(t for t in tasks if t.name in lenet_times)
    ms = lenet_times[first.name][1]
    # a peak this task's library reaches 99% of, and for the others a peak far above them
    near = first.flops / (ms / 1e3) / 1e9 / 0.99
    times = {name: (lib, value) for name, (lib, value) in lenet_times.items()}
    rows = headroom.assess(tasks, times, Peak(gflops=near, threads=1, isa="avx2"))
    by_name = {row.task: row for row in rows}
    assert by_name[first.name].fraction_of_peak == pytest.approx(0.99) and not by_name[first.name].tune
    order, skipped = headroom.tuning_order(tasks, rows)
    assert first.name in skipped and first not in order
    assert sorted(t.name for t in order) == sorted(t.name for t in tasks if t.name != first.name
                                                    and (by_name[t.name].tune))  # fmt: skip
    measured = [by_name[t.name] for t in order if by_name[t.name].fraction_of_roofline is not None]
    savings = [row.saving_ms for row in measured]
    assert savings == sorted(savings, reverse=True)
    unmeasured = [t.name for t in order if by_name[t.name].fraction_of_roofline is None]
    assert [t.name for t in order][len(measured):] == unmeasured  # after the measured ones, in their order


def test_a_memory_bound_operator_is_judged_by_the_bandwidth_roofline(lenet_tasks, lenet_times):
    _, tasks = lenet_tasks
    matmul = next(t for t in tasks if "matmul" in t.name and t.name in lenet_times)
    library_ms = lenet_times[matmul.name][1]
    bytes_moved = headroom.task_bytes(matmul)
    assert bytes_moved >= 4 * matmul.flops / 2 / 1000  # a matrix-vector product reads every weight once
    # a bandwidth at which the library's time is exactly what the roofline allows
    bandwidth = bytes_moved / (library_ms / 1e3) / 1e9
    peak = Peak(gflops=1e6, threads=1, isa="avx2", bandwidth_gbs=bandwidth)
    row = next(r for r in headroom.assess(tasks, lenet_times, peak) if r.task == matmul.name)
    assert row.bound == "memory" and row.fraction_of_roofline == pytest.approx(1.0)
    assert row.fraction_of_peak < 1e-3 and not row.tune and row.saving_ms == 0.0


def test_without_a_peak_every_task_is_tuned_in_its_order(lenet_tasks, lenet_times):
    _, tasks = lenet_tasks
    rows = headroom.assess(tasks, lenet_times, None)
    assert all(row.tune for row in rows)
    assert headroom.tuning_order(tasks, rows) == (list(tasks), {})


def test_the_library_times_are_kept_for_a_resumed_run(lenet_tasks, tmp_path, monkeypatch):
    model, tasks = lenet_tasks
    saved = tmp_path / headroom.HEADROOM_FILE
    first = headroom.measure_headroom(model.static_proto(), tasks, ["ort"], 1, saved, tmp_path)
    monkeypatch.setattr(headroom, "times_until", lambda *a, **k: pytest.fail("timed again"))
    again = headroom.measure_headroom(model.static_proto(), tasks, ["ort"], 1, saved, tmp_path)
    assert [row.to_dict() for row in again.rows] == [row.to_dict() for row in first.rows]
    assert first.peak_gflops and first.bandwidth_gbs and any(row.fraction_of_roofline for row in first.rows)


def test_timing_stops_at_the_deadline_and_a_resumed_run_times_only_what_it_left(lenet_tasks, tmp_path, monkeypatch):
    """The kernel stage's share is the deadline: a 5 s share on a 65-group model spent 8 s ordering 36 tasks."""
    model, tasks = lenet_tasks
    saved = tmp_path / headroom.HEADROOM_FILE
    late = headroom.measure_headroom(model.static_proto(), tasks, ["ort"], 1, saved, tmp_path, deadline=0.0)
    assert not any(row.library_ms for row in late.rows)
    untimed = json.loads(saved.read_text())["untimed"]
    assert untimed and all("deadline" in row.reason for row in late.rows if row.task in untimed)
    asked: list[list[str]] = []
    times_until = headroom.times_until

    def recorded(proto, todo, *rest):
        asked.append([task.name for task in todo])
        return times_until(proto, todo, *rest)

    monkeypatch.setattr(headroom, "times_until", recorded)
    resumed = headroom.measure_headroom(model.static_proto(), tasks, ["ort"], 1, saved, tmp_path)
    assert asked == [untimed] and json.loads(saved.read_text())["untimed"] == []
    assert {row.task for row in resumed.rows if row.library_ms} == set(untimed)


def test_a_convolution_fused_with_a_clip_finds_its_operator():
    """ReLU6 (a Clip with constant bounds) fuses into the convolution's task with scalar parameters."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from rlcompile.models.onnx_model import LoadedModel, graph_inputs
    from rlcompile.tvm_bridge import resolve_target

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    low, high = numpy_helper.from_array(np.float32(0), "low"), numpy_helper.from_array(np.float32(6), "high")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Clip", ["c", "low", "high"], ["y"])],
        "relu6", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [weight, low, high],
    )  # fmt: skip
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model = LoadedModel("relu6", proto, graph_inputs(proto), "test")
    tasks = extract_tasks(model, resolve_target("llvm"))
    conv = next(task for task in tasks if "conv2d" in task.name)
    assert headroom.task_operator_key(conv) in headroom.graph_operators(proto)
