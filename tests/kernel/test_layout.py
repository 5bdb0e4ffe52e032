"""``--layout nchwc``: convolutions tuned and built with their channels in blocks of the vector width."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlcompile.cli import main
from rlcompile.errors import RlcompileError
from rlcompile.kernel import headroom
from rlcompile.kernel.tasks import (
    automatic_layout,
    blocked_layout,
    channel_block,
    extract_tasks,
    param_shapes,
    prepare_relax,
    vector_block,
)
from rlcompile.kernel.workdir import WorkDir
from rlcompile.models import load_model
from rlcompile.tvm_bridge import tvm
from tests.conftest import save


@pytest.fixture(scope="module")
def residual_block(tmp_path_factory) -> Path:
    """Conv 16->32 3x3, Relu, Conv 32->32 1x1, Add of the Relu: channels every vector width divides, after a
    3-channel head convolution (a stem: its three input channels are one block)."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w0"], ["head"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["head", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "r1"], ["y"])]  # fmt: skip
    graph = helper.make_graph(nodes, "residual_block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 8, 8])],
                              [weight("w0", 16, 3, 3, 3), weight("w1", 32, 16, 3, 3), weight("b1", 32),
                               weight("w2", 32, 32, 1, 1)])  # fmt: skip
    return save(graph, tmp_path_factory.mktemp("layout") / "residual_block.onnx")


@pytest.fixture(scope="module")
def inverted_residual(tmp_path_factory) -> Path:
    """MobileNet's block: a stem 3->32, ReLU6 (Clip), a depthwise 3x3, ReLU6, a 1x1 projection to 24 channels
    (NCHW8c: 16 does not divide 24), a 1x1 24->24."""
    rng = np.random.default_rng(1)

    def weight(name: str, *shape: int):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Clip", ["a", "low", "high"], ["b"]),
             helper.make_node("Conv", ["b", "w1"], ["c"], pads=[1, 1, 1, 1], group=32),
             helper.make_node("Clip", ["c", "low", "high"], ["d"]),
             helper.make_node("Conv", ["d", "w2"], ["e"]),
             helper.make_node("Conv", ["e", "w3"], ["y"])]  # fmt: skip
    bounds = [numpy_helper.from_array(np.array(value, np.float32), name) for name, value in (("low", 0), ("high", 6))]
    graph = helper.make_graph(nodes, "inverted_residual",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 8, 8])],
                              [weight("w0", 32, 3, 3, 3), weight("w1", 32, 1, 3, 3), weight("w2", 24, 32, 1, 1),
                               weight("w3", 24, 24, 1, 1), *bounds])  # fmt: skip
    return save(graph, tmp_path_factory.mktemp("layout") / "inverted_residual.onnx")


def conv_layouts(module) -> list[str]:
    """The data layout of every Relax conv2d call in ``main``."""
    from rlcompile.tvm_bridge import tvm

    layouts = []

    def visit(expr) -> None:
        if isinstance(expr, tvm.relax.Call) and getattr(expr.op, "name", "") == "relax.nn.conv2d":
            layouts.append(str(expr.attrs.data_layout))

    tvm.relax.analysis.post_order_visit(module["main"], visit)
    return layouts


def test_nchwc_blocks_every_dense_convolution_the_stem_included(residual_block, target):
    model = load_model(str(residual_block))
    assert conv_layouts(prepare_relax(model)) == ["NCHW"] * 3
    blocked = prepare_relax(model, "nchwc", target)  # lowered already: TOPI's NCHWc convolution per blocked one
    functions = sorted(name.name_hint for name in blocked.functions if name.name_hint != "main")
    convolutions = [name for name in functions if name.startswith("conv2d")]
    assert convolutions == ["conv2d_NCHWc", "conv2d_NCHWc1", "conv2d_NCHWc2"]
    block = vector_block(target)
    assert blocked_layout(target) == (f"NCHW{block}c", f"OIHW{block}i{block}o")
    assert block in (4, 8, 16) and "te_layout_transform" in functions  # into the blocked run and out of it
    shapes = [param_shapes(tvm.IRModule({"main": blocked[name]}))[:2] for name in convolutions]
    stem = next(pair for pair in shapes if pair[0][-1] == 3)  # NCHW3c in, 3i{block}o weights
    assert stem[0] == [1, 1, 8, 8, 3] and stem[1] == [16 // block, 1, 3, 3, 3, block]


def test_depthwise_convolutions_stay_blocked_and_relu6_runs_in_the_blocked_layout(inverted_residual, target):
    blocked = prepare_relax(load_model(str(inverted_residual)), "nchwc", target)
    functions = sorted(name.name_hint for name in blocked.functions if name.name_hint != "main")
    assert "depthwise_conv2d_NCHWc" in functions and not any(name.startswith("clip") for name in functions)
    transforms = [name for name in functions if name.startswith("te_layout_transform")]
    assert len(transforms) <= 4  # into the stem, out at the end, and the 16c -> 8c change at the projection


def test_channel_blocks_fill_the_vector_or_take_the_largest_power_of_two_that_fits():
    assert [channel_block(channels, 16) for channels in (3, 32, 24, 40, 30)] == [3, 16, 8, 8, None]
    assert [channel_block(channels, 8) for channels in (3, 16, 12)] == [3, 8, 4]


def test_blocked_tasks_still_find_their_onnx_operator(residual_block, target):
    """The headroom ranking matches a task to the graph's convolution by its shapes, blocked or not."""
    model = load_model(str(residual_block))
    operators = headroom.graph_operators(model.static_proto())
    tasks = [task for task in extract_tasks(model, target, "nchwc") if "conv2d" in task.name]
    assert len(tasks) == 3 and all(headroom.task_operator_key(task) in operators for task in tasks)


@pytest.mark.parametrize("block", ["residual_block", "inverted_residual"])
def test_tuned_and_built_in_nchwc_agrees_with_onnx_runtime(block, request, tmp_path, capsys):
    model = request.getfixturevalue(block)
    work = tmp_path / "work"
    tune = ["tune", str(model), "--agent", "random", "--trials", "8", "--batch-size", "4",
            "--work-dir", str(work)]  # fmt: skip
    assert main([*tune, "--layout", "nchwc"]) == 0
    assert json.loads((work / "environment.json").read_text())["layout"] == "nchwc"
    artifact = tmp_path / "block.tar"
    assert main(["build", str(model), "--work-dir", str(work), "-o", str(artifact)]) == 0
    assert main(["run", str(artifact), "--quick", "--json", str(tmp_path / "run.json")]) == 0
    assert json.loads((tmp_path / "run.json").read_text())["results"][0]["agreement"]["max_rel"] < 1e-4
    capsys.readouterr()
    assert main([*tune, "--layout", "nchw"]) == 2  # the records are for blocked tasks
    assert "nchwc layout" in capsys.readouterr().err


def test_a_work_dir_made_before_layouts_were_recorded_is_nchw(tmp_path):
    WorkDir(tmp_path, "llvm")
    recorded = json.loads((tmp_path / "environment.json").read_text())
    del recorded["layout"]
    (tmp_path / "environment.json").write_text(json.dumps(recorded))
    assert WorkDir(tmp_path, "llvm").layout == "nchw"
    with pytest.raises(RlcompileError, match="nchw layout"):
        WorkDir(tmp_path, "llvm", "nchwc")


def test_a_model_tvm_cannot_block_stays_nchw_with_a_warning(residual_block, target, monkeypatch):
    """A blocking pass failing on some operator (simulated) keeps the model NCHW, at tuning and build time."""
    from rlcompile.errors import RlcompileWarning
    from rlcompile.kernel import tasks

    def fails(module, target):
        raise RuntimeError("InternalError: no layout rule for relax.some_op")

    monkeypatch.setattr(tasks, "blocked", fails)
    with pytest.warns(RlcompileWarning, match="stay NCHW"):
        module = prepare_relax(load_model(str(residual_block)), "nchwc", target)
    assert conv_layouts(module) == ["NCHW"] * 3


def test_auto_blocks_dense_convolutions_and_leaves_grouped_ones(residual_block):
    import onnx

    proto = onnx.load(str(residual_block))
    assert automatic_layout(proto) == "nchwc"
    proto.graph.node[1].attribute.append(helper.make_attribute("group", 16))  # now a grouped convolution
    assert automatic_layout(proto) == "nchw"
    del proto.graph.node[:]
    assert automatic_layout(proto) == "nchw"  # no convolution at all
