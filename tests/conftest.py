"""Shared fixtures: small hand-built ONNX models for the paths the zoo does not exercise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10
OPSET = 17


def save(graph: onnx.GraphProto, path: Path, opset: int = OPSET, domains: dict[str, int] | None = None) -> Path:
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
    model = helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def dynamic_conv_model(tmp_path: Path) -> Path:
    """Conv -> Relu -> Shape-driven Reshape, with a dynamic batch and spatial size (like real exports)."""
    return write_dynamic_conv_model(tmp_path / "dynamic_conv.onnx")


def write_dynamic_conv_model(path: Path) -> Path:
    """The model of :func:`dynamic_conv_model`, written to ``path``."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "weight")
    nodes = [
        helper.make_node("Conv", ["x", "weight"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("Shape", ["relu"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"]),
        helper.make_node("Concat", ["batch_1d", "minus_one"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["relu", "new_shape"], ["y"]),
    ]
    constants = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
    ]
    graph = helper.make_graph(
        nodes,
        "dynamic_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])],
        initializer=[weight, *constants],
    )
    return save(graph, path)


@pytest.fixture
def static_matmul_model(tmp_path: Path) -> Path:
    """MatMul + Add + Tanh with static shapes: a model the project did not export."""
    rng = np.random.default_rng(1)
    weight = numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "weight")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "weight"], ["product"]),
            helper.make_node("Add", ["product", "bias"], ["sum"]),
            helper.make_node("Tanh", ["sum"], ["y"]),
        ],
        "static_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[weight, bias],
    )
    return save(graph, tmp_path / "static_matmul.onnx")


@pytest.fixture
def tvm_unsupported_model(tmp_path: Path) -> Path:
    """A valid model ONNX Runtime runs but TVM's Relax frontend has no converter for (STFT)."""
    graph = helper.make_graph(
        [helper.make_node("STFT", ["signal", "step", "", "length"], ["y"], onesided=1)],
        "stft",
        [helper.make_tensor_value_info("signal", TensorProto.FLOAT, [1, 64, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7, 9, 2])],
        initializer=[
            numpy_helper.from_array(np.array(8, dtype=np.int64), "step"),
            numpy_helper.from_array(np.array(16, dtype=np.int64), "length"),
        ],
    )
    return save(graph, tmp_path / "stft.onnx")


@pytest.fixture
def unknown_op_model(tmp_path: Path) -> Path:
    """A node from a custom domain no runtime implements."""
    graph = helper.make_graph(
        [helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    return save(graph, tmp_path / "custom.onnx", domains={"com.example": 1})


@pytest.fixture
def garbage_file(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\x00\xffthis is not a protobuf at all\x13\x37" * 50)
    return path


@pytest.fixture
def unreplayable_task_model(tmp_path: Path) -> Path:
    """Attention scores plus a mask (MatMul, then Add of Where(mask)), as a Hugging Face encoder exports them, and
    a plain MatMul + Relu: TVM fuses the first into a task whose design space it cannot replay
    (``reverse-compute-at``: the mask's producer is not under the matmul's loop); the second tunes."""
    rng = np.random.default_rng(0)
    heads, length, width = 2, 16, 8
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["scores"]),
        helper.make_node("Cast", ["mask"], ["keep"], to=TensorProto.BOOL),
        helper.make_node("Where", ["keep", "zero", "minus"], ["bias"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("MatMul", ["masked", "w"], ["projected"]),
        helper.make_node("Relu", ["projected"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "masked_scores",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, heads, length, width]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, heads, width, length]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 1, 1, length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, heads, length, 32])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero"),
         numpy_helper.from_array(np.array(-1e4, np.float32), "minus"),
         numpy_helper.from_array(rng.standard_normal((length, 32)).astype(np.float32), "w")],
    )  # fmt: skip
    return save(graph, tmp_path / "masked_scores.onnx")


@pytest.fixture(scope="session")
def target():
    """This CPU as a TVM target."""
    from rlcompile.tvm_bridge import resolve_target

    return resolve_target("llvm")


@pytest.fixture(scope="session")
def measurer(target):
    """One kernel measurer (build and run worker processes) for every test that tunes on this CPU with the default
    settings: starting one costs about 14 s on a slow 2-core VM, mostly its workers importing TVM, and what a test
    checks of a tuning run does not depend on whose workers measured it."""
    from rlcompile.kernel.measurer import Measurer

    with Measurer(target) as shared:
        yield shared
