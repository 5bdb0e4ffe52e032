"""Small ONNX models the precision tests quantize: a residual block, Conv-Relu-Conv, an attention-like MatMul."""

from __future__ import annotations

import numpy as np
import onnx


def attention_like() -> onnx.ModelProto:
    """x @ W (weighted), then (x @ W) @ (x @ W)^T (two activations), then Relu: one group each."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="project"),
             helper.make_node("Transpose", ["h"], ["ht"], name="turn", perm=[1, 0]),
             helper.make_node("MatMul", ["h", "ht"], ["scores"], name="scores"),
             helper.make_node("Relu", ["scores"], ["y"], name="relu")]  # fmt: skip
    graph = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], [weight])  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def attention_block(width: int = 8, tokens: int = 6) -> tuple[onnx.ModelProto, list]:
    """One head of attention: queries, keys and values projected from ``x`` (groups query, key, value), the scores
    ``q @ k^T`` and their Softmax (scores), the weighted values ``p @ v`` (weighted), projected out (out)."""
    from types import SimpleNamespace

    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array((rng.standard_normal((width, width)) / 3).astype(np.float32), name)
               for name in ("Wq", "Wk", "Wv", "Wo")]  # fmt: skip
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q"], name="query"),
             helper.make_node("MatMul", ["x", "Wk"], ["k"], name="key"),
             helper.make_node("Transpose", ["k"], ["kt"], name="keys_turned", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wv"], ["v"], name="value"),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
             helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"], name="weighted"),
             helper.make_node("MatMul", ["o", "Wo"], ["y"], name="out")]  # fmt: skip
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [tokens, width])  # noqa: E731
    graph = helper.make_graph(nodes, "attention", [value("x")], [value("y")], weights)
    groups = [SimpleNamespace(name=name, nodes=members, outputs=[])
              for name, members in (("query", ["query"]), ("key", ["key", "keys_turned"]), ("value", ["value"]),
                                    ("scores", ["scores", "softmax"]), ("weighted", ["weighted"]), ("out", ["out"]))]
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), groups


def residual_block() -> tuple[onnx.ModelProto, list]:
    """Conv -> Relu (group a), MaxPool (b), Conv -> Add of the pooled input -> Add of a bias (c)."""
    from types import SimpleNamespace

    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("W1", (4, 4, 3, 3)), ("W2", (4, 4, 3, 3)), ("B", (1, 4, 1, 1)))]  # fmt: skip
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "W2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p"], ["s"], name="residual"),
             helper.make_node("Add", ["s", "B"], ["y"], name="bias")]  # fmt: skip
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4, 8, 8])  # noqa: E731
    graph = helper.make_graph(nodes, "residual", [value("x")], [value("y")], weights)
    groups = [SimpleNamespace(name="a", nodes=["conv1", "relu1"], outputs=["r1"]),
              SimpleNamespace(name="b", nodes=["pool"], outputs=["p"]),
              SimpleNamespace(name="c", nodes=["conv2", "residual", "bias"], outputs=["y"])]  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), groups


def conv_relu_conv() -> tuple[onnx.ModelProto, list]:
    """Conv -> Relu (group a), Conv with a bias (b): ONNX Runtime's quantizer folds the Relu into the first
    convolution, and writes the quantized bias as a DequantizeLinear of the bias's name."""
    from types import SimpleNamespace

    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("W1", (4, 4, 3, 3)), ("W2", (4, 4, 3, 3)), ("B2", (4,)))]  # fmt: skip
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]  # fmt: skip
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4, 8, 8])  # noqa: E731
    graph = helper.make_graph(nodes, "chain", [value("x")], [value("y")], weights)
    groups = [SimpleNamespace(name="a", nodes=["conv1", "relu1"], outputs=["r1"]),
              SimpleNamespace(name="b", nodes=["conv2"], outputs=["y"])]  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), groups


def outlier_block(channels: int = 16) -> tuple[onnx.ModelProto, list]:
    """A transformer's shape of trouble: ``x`` with two channels 50x the others feeds two MatMuls (a query and a key,
    group a) and, with the first's output, a residual Add (group b's MatMul reads the sum)."""
    from types import SimpleNamespace

    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    weights = [numpy_helper.from_array((rng.standard_normal((channels, channels)) / 4).astype(np.float32), name)
               for name in ("Wq", "Wk", "Wo")]  # fmt: skip
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q"], name="query"),
             helper.make_node("MatMul", ["x", "Wk"], ["k"], name="key"),
             helper.make_node("Add", ["q", "k"], ["qk"], name="join"),
             helper.make_node("Add", ["qk", "x"], ["s"], name="residual"),
             helper.make_node("MatMul", ["s", "Wo"], ["y"], name="out")]  # fmt: skip
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 8, channels])  # noqa: E731
    graph = helper.make_graph(nodes, "outliers", [value("x")], [value("y")], weights)
    groups = [SimpleNamespace(name="a", nodes=["query", "key", "join"], outputs=["qk"]),
              SimpleNamespace(name="b", nodes=["residual", "out"], outputs=["y"])]  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), groups


def outlier_samples(count: int, channels: int = 16, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Inputs of :func:`outlier_block`: normal values, channels 3 and 11 (of 16) 50 times larger."""
    rng = np.random.default_rng(seed)
    scale = np.ones(channels, np.float32)
    scale[[3, channels - 5]] = 50.0
    return [{"x": (rng.standard_normal((1, 8, channels)) * scale).astype(np.float32)} for _ in range(count)]
