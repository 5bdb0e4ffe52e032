"""Contract tests over every runtime: compile a segment, agree with ONNX Runtime, save and load it, say what it
refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlcompile import runtimes
from rlcompile.errors import RlcompileError
from rlcompile.runtimes import RuntimeOptions
from rlcompile.runtimes.ort import run_proto
from rlcompile.verify import compare_outputs
from tests.graph.conftest import GraphBuilder

NAMES = ["ort", "openvino", "torch", "tvm"]


def cnn_block():
    """Conv+bias+Relu, a strided depthwise conv with Clip, pooling, residual-free head: a typical segment."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    conv = b.op("Relu", [b.conv(x, 8, 16)])
    depthwise = b.op("Conv", [conv, b.weight(16, 1, 3, 3)], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=16,
                     strides=[2, 2])  # fmt: skip
    clipped = b.op("Clip", [depthwise, b.const(np.array(0, np.float32)), b.const(np.array(6, np.float32))])
    pooled = b.op("MaxPool", [clipped], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    flat = b.op("Flatten", [b.op("GlobalAveragePool", [pooled])])
    out = b.op("Gemm", [flat, b.weight(10, 16), b.weight(10)], transB=1)
    return b.model([out])


@pytest.mark.parametrize("name", NAMES)
def test_library_compiles_a_segment_that_agrees_with_onnx_runtime(name: str):
    proto = cnn_block()
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype(np.float32)}
    library = runtimes.create(name)
    assert library.unavailable() is None
    assert library.supports(list(proto.graph.node))
    runner = library.compile(proto, RuntimeOptions(1))
    assert compare_outputs(run_proto(proto, feeds), runner([feeds["x"]])).within()


@pytest.mark.parametrize("name", ["ort", "openvino"])
def test_library_compiles_independent_copies_that_agree(name: str):
    """A native run and its identical twin: two runners of their own (two sessions), the same outputs. (PyTorch and
    TVM keep the base class's loop over ``compile``: 5 s of the suite for a loop.)"""
    proto = cnn_block()
    x = np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype(np.float32)
    first, second = runtimes.create(name).compile_copies(proto, 2, RuntimeOptions(1))
    assert first is not second
    assert first.prepare_seconds > 0 and second.prepare_seconds > 0
    assert compare_outputs(run_proto(proto, {"x": x}), first([x])).within()
    assert np.array_equal(first([x])[0], second([x])[0])


@pytest.mark.parametrize("name", NAMES)
def test_library_saves_and_loads_what_it_compiled(name: str, tmp_path: Path):
    proto = cnn_block()
    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
    library = runtimes.create(name)
    runner = library.compile(proto, RuntimeOptions(1))
    files = library.save(runner, tmp_path / "segment")
    assert all((tmp_path / file).is_file() for file in files)
    again = library.load(proto, tmp_path / "segment", files, RuntimeOptions(1))
    assert np.allclose(runner([x])[0], again([x])[0], rtol=1e-5, atol=1e-6)


def test_torch_claims_only_operators_it_translates():
    b = GraphBuilder()
    x = b.input("x", [1, 4])
    proto = b.model([b.op("Relu", [b.op("Einsum", [x, x], equation="ij,ij->ij")])])
    torch_library = runtimes.create("torch")
    assert not torch_library.supports(list(proto.graph.node))
    assert runtimes.create("ort").supports(list(proto.graph.node))


def test_library_names_are_checked_and_ort_always_comes_first():
    assert runtimes.parse(None) == ["ort", "openvino", "torch"]
    assert runtimes.parse(None, with_tvm=True) == ["ort", "openvino", "torch", "tvm"]
    assert runtimes.parse("torch,openvino") == ["ort", "torch", "openvino"]
    with pytest.raises(RlcompileError, match="unknown library 'mkl'"):
        runtimes.parse("ort,mkl")
    with pytest.raises(RlcompileError, match="unknown runtime"):
        runtimes.create("cudnn")


def test_tvm_compiles_a_segment_only_when_every_kernel_is_tuned(tmp_path: Path, target, measurer):
    from rlcompile.kernel.artifact import TuningRecords
    from rlcompile.kernel.strategies import create
    from rlcompile.kernel.tasks import extract_tasks
    from rlcompile.kernel.tuner import Tuner
    from rlcompile.kernel.workdir import WorkDir
    from rlcompile.models.onnx_model import LoadedModel, graph_inputs
    from rlcompile.runtimes.tvm import UntunedError

    work_dir = WorkDir(tmp_path / "work", "llvm")
    proto = cnn_block()
    x = np.random.default_rng(3).standard_normal((1, 8, 16, 16)).astype(np.float32)
    library = runtimes.create("tvm", tuning=TuningRecords(tmp_path / "work"))
    with pytest.raises(UntunedError, match="have no tuning record"):  # nothing untuned reaches a plan
        library.compile(proto, RuntimeOptions(1))
    tasks = extract_tasks(LoadedModel("block", proto, graph_inputs(proto), "test"), target)
    Tuner(tasks, lambda: create("random", seed=0), work_dir, measurer,
          trials=2 * len(tasks), batch_size=2).run()  # fmt: skip
    runner = library.compile(proto, RuntimeOptions(1))
    assert compare_outputs(run_proto(proto, {"x": x}), runner([x])).within()


@pytest.mark.parametrize("auto_pad,stride,kernel", [("SAME_UPPER", 1, 3), ("SAME_UPPER", 2, 5), ("SAME_LOWER", 2, 4),
                                                    ("VALID", 2, 3)])  # fmt: skip
def test_torch_resolves_auto_pad_as_onnx_runtime_does(auto_pad: str, stride: int, kernel: int):
    """HF EfficientNet's depthwise convolutions say ``auto_pad=SAME_UPPER``: the output keeps ceil(size / stride)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 1, kernel, kernel)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=auto_pad, strides=[stride, stride], group=8),
             helper.make_node("MaxPool", ["y"], ["z"], auto_pad=auto_pad, kernel_shape=[3, 3], strides=[2, 2])]
    graph = helper.make_graph(nodes, "auto_pad",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 15, 15])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [weight])  # fmt: skip
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    x = rng.standard_normal((1, 8, 15, 15)).astype(np.float32)
    torch_output = runtimes.create("torch").compile(proto, RuntimeOptions(1))([x])
    assert compare_outputs(run_proto(proto, {"x": x}), torch_output).within()
