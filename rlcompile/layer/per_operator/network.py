"""The layer level's view of a model: its operators as layers in topological order, with shapes and weights.

Each :class:`Layer` keeps its ``onnx_ir`` node (so any operator can fall back to ONNX Runtime), its
activation inputs (names of values produced by other layers or fed by the user) and its constant
operands as numpy arrays. :class:`Edge` is one activation passed from a producer to a consumer; the
conversions between primitives are paid on edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from rlcompile.errors import RlcompileError
from rlcompile.graph import onnx_graph
from rlcompile.layer.table import SINK, SOURCE, Edge
from rlcompile.models.onnx_model import LoadedModel


@dataclass
class Layer:
    name: str
    op_type: str
    node: ir.Node = field(repr=False)
    inputs: list[str]
    outputs: list[str]
    constants: dict[int, np.ndarray] = field(repr=False)
    input_shapes: list[tuple[int, ...]]
    output_shapes: list[tuple[int, ...]]
    opsets: dict[str, int] = field(default_factory=dict, repr=False)

    def attribute(self, name: str, default: object = None) -> object:
        return onnx_graph.attribute(self.node, name, default)

    @property
    def activation_positions(self) -> list[int]:
        """Positions of the node's inputs that are activations (not constants)."""
        return [i for i, value in enumerate(self.node.inputs) if value is not None and i not in self.constants]

    def describe(self) -> str:
        shape = "x".join(str(d) for d in self.output_shapes[0]) if self.output_shapes else "?"
        return f"{self.op_type} -> {shape}"


@dataclass
class Network:
    name: str
    layers: list[Layer]
    edges: list[Edge]
    inputs: list[str]
    outputs: list[str]
    opsets: dict[str, int]

    def layer(self, name: str) -> Layer:
        return self._by_name[name]

    def __post_init__(self) -> None:
        self._by_name = {layer.name: layer for layer in self.layers}

    def incoming(self, name: str) -> list[Edge]:
        return [edge for edge in self.edges if edge.consumer == name]


def network_from_model(model: LoadedModel) -> Network:
    """Every non-constant operator of ``model`` as a layer; activations between them as edges."""
    ir_model = onnx_graph.from_proto(model.proto)
    graph = ir_model.graph
    producers: dict[str, str] = {value.name: SOURCE for value in graph.inputs}
    layers, edges = [], []
    for node in graph:
        if onnx_graph.folds_away_node(node):
            continue
        constants = {}
        activations = []
        for position, value in enumerate(node.inputs):
            if value is None:
                continue
            array = onnx_graph.constant_array(value)
            if array is not None:
                constants[position] = array
            else:
                activations.append(value)
        shapes_in = [onnx_graph.static_shape(value) for value in activations]
        shapes_out = [onnx_graph.static_shape(value) for value in node.outputs]
        if any(shape is None for shape in [*shapes_in, *shapes_out]):
            raise RlcompileError(f"{model.name}: layer {node.name} ({node.op_type}) has a dynamic shape")
        layer = Layer(node.name, node.op_type, node, [v.name for v in activations], [v.name for v in node.outputs],
                      constants, shapes_in, shapes_out, dict(graph.opset_imports))  # fmt: skip
        for value, shape in zip(activations, shapes_in, strict=True):
            if value.name not in producers:
                raise RlcompileError(f"{model.name}: {value.name} is computed from constants; fold the model first")
            edges.append(Edge(producers[value.name], layer.name, value.name, shape))
        for value in node.outputs:
            producers[value.name] = layer.name
        layers.append(layer)
    for value in graph.outputs:
        edges.append(Edge(producers[value.name], SINK, value.name, onnx_graph.static_shape(value)))
    return Network(model.name, layers, edges, [v.name for v in graph.inputs], [v.name for v in graph.outputs],
                   dict(graph.opset_imports))  # fmt: skip
