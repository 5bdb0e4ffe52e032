"""Small graphs for the graph level: a builder, and a check that runs a rewrite against the original."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from rlcompile.graph import onnx_graph
from rlcompile.models.onnx_model import LoadedModel, graph_inputs
from rlcompile.runtimes.ort import run_proto
from rlcompile.verify import Agreement, compare_outputs

OPSET = 17


class GraphBuilder:
    """Build a float32 ONNX graph node by node; weights are seeded random constants."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def input(self, name: str, shape: Sequence[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def const(self, array: np.ndarray, name: str | None = None) -> str:
        name = name or f"const{len(self.initializers)}"
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, *shape: int, positive: bool = False) -> str:
        values = self.rng.random(shape) + 0.5 if positive else self.rng.standard_normal(shape)
        return self.const(values.astype(np.float32))

    def op(self, op_type: str, inputs: Sequence[str], outputs: int = 1, **attributes) -> str | list[str]:
        self.count += 1
        names = [f"{op_type.lower()}{self.count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=f"{op_type}{self.count}", **attributes))
        return names[0] if outputs == 1 else names

    def conv(self, x: str, cin: int, cout: int, k: int = 3, pad: int | None = None, bias: bool = True, **kw) -> str:
        pad = k // 2 if pad is None else pad
        inputs = [x, self.weight(cout, cin, k, k)] + ([self.weight(cout)] if bias else [])
        return self.op("Conv", inputs, kernel_shape=[k, k], pads=[pad] * 4, **kw)

    def conv_transpose(self, x: str, cin: int, cout: int, k: int = 2, bias: bool = True, **kw) -> str:
        """A ConvTranspose (weights in, out / group, k, k), stride 2 by default as decoders upsample."""
        group = kw.get("group", 1)
        inputs = [x, self.weight(cin, cout // group, k, k)] + ([self.weight(cout)] if bias else [])
        return self.op("ConvTranspose", inputs, kernel_shape=[k, k], strides=kw.pop("strides", [2, 2]), **kw)

    def batchnorm(self, x: str, channels: int) -> str:
        stats = [self.weight(channels, positive=True), self.weight(channels), self.weight(channels)]
        return self.op("BatchNormalization", [x, *stats, self.weight(channels, positive=True)])

    def model(self, outputs: Sequence[str]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "test", self.inputs,
            [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs], self.initializers,
        )  # fmt: skip
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)
        return proto


def loaded(proto: onnx.ModelProto, name: str = "test") -> LoadedModel:
    return LoadedModel(name, proto, graph_inputs(proto), "test")


def agreement(reference: onnx.ModelProto, candidate: ir.Model, seed: int = 0) -> Agreement:
    feeds = loaded(reference).random_inputs(seed)
    return compare_outputs(run_proto(reference, feeds), run_proto(onnx_graph.to_proto(candidate), feeds))


def op_types(model: ir.Model) -> list[str]:
    return [node.op_type for node in model.graph]
