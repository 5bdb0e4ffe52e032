"""Whole models on ONNX Runtime and TVM through the runtime interface: outputs agree, timers run, bad input
is refused."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from rlcompile import runtimes
from rlcompile.errors import RlcompileError, TargetError, UnsupportedOperatorError
from rlcompile.models import load_model
from rlcompile.runtimes import RuntimeOptions
from rlcompile.verify import compare_outputs
from tests.sleeps import sleeps_per_call


@pytest.fixture(scope="module")
def lenet5():
    return load_model("lenet5")


@pytest.mark.parametrize("name", ["lenet5", "squeezenet1_1", "mobilenet_v2", "bert_tiny"])
def test_ort_and_tvm_agree_on_zoo_models(name: str) -> None:
    model = load_model(name)
    inputs = model.random_inputs(seed=7)
    reference = model.compile(runtimes.create("ort")).run(inputs)
    candidate = model.compile(runtimes.create("tvm")).run(inputs)
    agreement = compare_outputs(reference, candidate)
    assert agreement.within(1e-4), agreement


def test_user_model_with_dynamic_shapes_runs_on_both(dynamic_conv_model: Path) -> None:
    model = load_model(str(dynamic_conv_model), {"x": (1, 3, 16, 16)})
    inputs = model.random_inputs()
    outputs = [model.compile(runtimes.create(name)).run(inputs) for name in ("ort", "tvm")]
    assert outputs[0][0].shape == (1, 8 * 16 * 16)
    assert compare_outputs(*outputs).within(1e-5)


@pytest.mark.parametrize("opt_level", ["disable", "basic", "extended", "all"])
def test_every_ort_level_gives_the_same_result(lenet5, opt_level: str) -> None:
    inputs = lenet5.random_inputs()
    reference = lenet5.compile(runtimes.create("ort", opt_level="disable")).run(inputs)
    outputs = lenet5.compile(runtimes.create("ort", opt_level=opt_level)).run(inputs)
    assert compare_outputs(reference, outputs).within(1e-5)


@pytest.mark.parametrize("name", ["ort", "tvm"])
def test_session_reports_prepare_time_threads_and_runs_its_timer(lenet5, name: str) -> None:
    backend = runtimes.create(name)
    session = lenet5.compile(backend)
    assert session.prepare_seconds > 0
    assert backend.threads() >= 1 and f"{backend.threads()} threads" in backend.describe()
    timer = session.timer(lenet5.random_inputs())
    timer()
    timer()


def threads_pinned_to(cpu: int, expected: int, wait_s: float = 5.0) -> int:
    """How many of this process's threads may run on ``cpu`` alone, once ``expected`` (or after ``wait_s``): a
    worker pins itself when it starts, a moment after its session is created."""
    deadline = time.monotonic() + wait_s
    while True:
        count = 0
        for status in Path("/proc/self/task").glob("*/status"):
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            count += fields.get("Cpus_allowed_list", "").strip() == str(cpu)
        if count == expected or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="a worker is pinned to the second CPU this process may use")  # fmt: skip
def test_a_plan_segments_ort_worker_is_pinned_and_a_native_sessions_is_not(lenet5) -> None:
    second = sorted(os.sched_getaffinity(0))[1]
    inputs, before = lenet5.random_inputs(), threads_pinned_to(second, -1, wait_s=0.0)
    lenet5.compile(runtimes.create("ort"), RuntimeOptions(2, exclusive=True)).run(inputs)
    assert threads_pinned_to(second, -1, wait_s=0.3) == before  # as a user runs ONNX Runtime
    segment = lenet5.compile(runtimes.create("ort"), RuntimeOptions(2))
    segment.run(inputs)
    assert threads_pinned_to(second, before + 1) == before + 1  # its one worker; the calling thread stays free
    lenet5.compile(runtimes.create("ort"), RuntimeOptions(1)).run(inputs)
    assert threads_pinned_to(second, -1, wait_s=0.3) == before + 1  # one thread: no worker to pin


@pytest.mark.parametrize(("cpus", "threads", "expected"), [
    ({0, 1}, 2, "2"),  # the worker on the second CPU, ORT's 1-based numbering
    ({4, 5, 6, 7}, 4, "6;7;8"),  # the CPUs this process may use, after the first
    ({0, 1}, 4, "2;2;2"),  # more workers than CPUs: the ones after the first, in turn
    ({0, 1}, 1, None),  # no worker
    ({3}, 2, None),  # no second CPU
])  # fmt: skip
def test_ort_worker_affinities_pin_each_worker_to_a_cpu_after_the_first(monkeypatch, cpus, threads, expected) -> None:
    """Machines with other CPU sets than this one's (a fault of sorts the tests cannot cause here): the affinity
    string ORT is given."""
    from rlcompile.threads import ort_worker_affinities

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cpus)
    assert ort_worker_affinities(threads) == expected


@pytest.mark.parametrize(("name", "options", "waits"), [
    ("ort", RuntimeOptions(2, exclusive=True), "ort"),  # its workers spin on after a run, as a user's do
    ("ort", RuntimeOptions(2), None),  # a plan segment's stop when the run ends
    ("ort", RuntimeOptions(1, exclusive=True), None),  # one thread: no worker to spin
    ("openvino", RuntimeOptions(2, exclusive=True), None),  # its workers sleep soon after a call
    ("torch", RuntimeOptions(2), "torch"),  # libgomp's workers spin GOMP_SPINCOUNT iterations after a call
    ("torch", RuntimeOptions(1), None),
])  # fmt: skip
def test_a_contest_waits_after_a_runner_only_while_its_workers_spin(lenet5, name, options, waits) -> None:
    from rlcompile.threads import SPIN_WIND_DOWN_S, TORCH_WIND_DOWN_S

    runner = lenet5.compile(runtimes.create(name), options)
    timer = runner.timed(lenet5.random_inputs())
    expected = {"ort": SPIN_WIND_DOWN_S, "torch": TORCH_WIND_DOWN_S, None: 0.0}[waits]
    assert timer.wind_down_s == runner.wind_down_s == expected
    timer()


def test_pytorchs_workers_stay_awake_between_the_operators_of_one_call() -> None:
    """At rlcompile's spin count libgomp's workers spin through the gaps between a call's operators instead of
    sleeping at each (~170 sleeps a call on hf:mpnet at 1000 iterations, and PyTorch's segments 1.35-2.1x slower)."""
    setup = """
from rlcompile import runtimes
from rlcompile.models import load_model
from rlcompile.runtimes import RuntimeOptions
model = load_model("lenet5")
runner, inputs = model.compile(runtimes.create("torch"), RuntimeOptions(2)), model.random_inputs()
call = lambda: runner.run(inputs)
"""
    assert sleeps_per_call(setup, below=2) < 2


def test_tvm_uses_this_cpu_and_all_cores() -> None:
    from rlcompile.machine import host_cores

    backend = runtimes.create("tvm")
    assert int(backend.target.attrs["num-cores"]) == host_cores()
    assert str(backend.target.attrs["mcpu"])  # LLVM must know the CPU to emit its vector instructions


@pytest.mark.parametrize(
    ("target", "message"),
    [("nonsense", "unknown target 'nonsense'"), ("opencl", "not supported"), ("cuda", "needs an NVIDIA GPU")],
)
def test_bad_targets_are_refused(target: str, message: str) -> None:
    import tvm

    if target == "cuda" and tvm.cuda(0).exist:
        pytest.skip("a GPU is present")
    with pytest.raises(TargetError, match=message):
        runtimes.create("tvm", target=target)


def test_unknown_runtime_is_refused() -> None:
    with pytest.raises(RlcompileError, match="unknown runtime 'tensorrt'"):
        runtimes.create("tensorrt")


def test_operator_tvm_cannot_import_is_named(tvm_unsupported_model: Path) -> None:
    model = load_model(str(tvm_unsupported_model))
    assert model.compile(runtimes.create("ort")).run(model.random_inputs())[0].size > 0
    with pytest.raises(UnsupportedOperatorError, match=r"TVM cannot import stft: .*STFT"):
        model.compile(runtimes.create("tvm"))


def test_operator_ort_cannot_run_is_named(unknown_op_model: Path) -> None:
    model = load_model(str(unknown_op_model))
    with pytest.raises(UnsupportedOperatorError, match=r"ONNX Runtime cannot run custom: .*FancyOp") as raised:
        model.compile(runtimes.create("ort"))
    assert "\n" not in str(raised.value)


def test_tvm_runs_every_output_of_a_multi_output_model(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    from tests.conftest import save

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])],
        "two_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("a", "b")],
    )
    model = load_model(str(save(graph, tmp_path / "two.onnx")))
    inputs = {"x": np.array([-1.0, 0.5, 2.0], dtype=np.float32)}
    outputs = model.compile(runtimes.create("tvm")).run(inputs)
    assert len(outputs) == 2
    np.testing.assert_array_equal(outputs[0], [0.0, 0.5, 2.0])
    np.testing.assert_array_equal(outputs[1], [1.0, -0.5, -2.0])


@pytest.mark.parametrize("name", ["ort", "openvino", "tvm"])
def test_a_runners_caller_by_name_gives_its_outputs_and_ignores_other_keys(lenet5, name: str) -> None:
    """The callable a saved plan's run is: the runtime's own call where it takes the mapping, by name otherwise."""
    runner = lenet5.compile(runtimes.create(name))
    feeds = lenet5.random_inputs()
    expected = runner.run(feeds)
    call = runner.caller(runner.input_names)
    for given in (feeds, {**feeds, "unused": np.zeros(1)}):
        assert compare_outputs(expected, [np.asarray(out) for out in call(given)]).within()
