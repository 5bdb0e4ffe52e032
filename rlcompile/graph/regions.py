"""Regions: the units ONNX Runtime optimises together, cut out of a graph so each can be timed alone.

The per-operator sum misses what ORT_ENABLE_ALL does across operators: it fuses an activation, a bias
or a residual Add into the Conv or MatMul that feeds it (FusedConv, Gemm, BiasGelu...), so a rewrite
that separates them costs more than the sum says. A region is an operator plus the elementwise
operators that read it (and read each other), transitively, up to :data:`MAX_REGION_NODES` nodes:
exactly the chains those fusions consume. Timed as an ORT subgraph with every optimisation on, a
region's cost includes the fusions ORT would make in the whole graph; a rewrite changes only the
regions it touches, and each region's timing is cached by its structural key, so a search times
only what it has never seen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import onnx
import onnx_ir as ir

from rlcompile.graph import onnx_graph

#: Operators ORT's fusions absorb into the operator (or elementwise chain) that feeds them.
ELEMENTWISE = frozenset({
    "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Add", "Mul", "Sub", "Div", "Erf",
    "Pow", "Sqrt", "Neg", "Exp", "Softplus", "Gelu", "Cast",
})  # fmt: skip
#: A region stops growing here (BERT's Gelu with its bias is 7 nodes).
MAX_REGION_NODES = 8
_OPERATOR_KEY = "rlcompile.operator_key"
#: Constant integer inputs up to this size are part of the key (shapes for Reshape, sizes for Split).
_KEYED_CONSTANT_SIZE = 64


def value_key(value: ir.Value | None) -> str:
    if value is None:
        return "-"
    shape = onnx_graph.static_shape(value)
    text = f"{value.dtype}{list(shape) if shape is not None else '?'}"
    if not onnx_graph.is_constant(value):
        return text
    array = onnx_graph.constant_array(value)
    if array is not None and array.dtype.kind in "iub" and array.size <= _KEYED_CONSTANT_SIZE:
        return f"{text}=c{array.reshape(-1).tolist()}"
    return f"{text}=c"


def operator_key(node: ir.Node) -> str:
    """What an operator's runtime depends on: op, attributes, input shapes/dtypes and constness (cached on
    the node: rewrites make new nodes rather than change an input's shape)."""
    key = node.meta.get(_OPERATOR_KEY)
    if key is None:
        inputs = ",".join(value_key(value) for value in node.inputs)
        key = f"{node.domain}:{node.op_type}({onnx_graph.attributes_key(node)})[{inputs}]"
        node.meta[_OPERATOR_KEY] = key
    return key


def joins_producer(node: ir.Node, region_of: dict[ir.Node, list[ir.Node]]) -> list[ir.Node] | None:
    """The region an elementwise node joins: that of its first computed input whose every reader is
    elementwise (so ORT may fuse them all), if that region has room."""
    if node.op_type not in ELEMENTWISE or node.domain != "":
        return None
    for value in node.inputs:
        producer = value.producer() if value is not None else None
        if producer is None or producer not in region_of or onnx_graph.is_constant(value):
            continue
        readers = [use.node for use in value.uses()]
        region = region_of[producer]
        if all(r.op_type in ELEMENTWISE for r in readers) and len(region) < MAX_REGION_NODES:
            return region
    return None


def partition(model: ir.Model) -> list[list[ir.Node]]:
    """The graph's computing nodes cut into regions, in graph order (nodes ORT folds away are left out)."""
    regions: list[list[ir.Node]] = []
    region_of: dict[ir.Node, list[ir.Node]] = {}
    for node in model.graph:
        if onnx_graph.folds_away_node(node):
            continue
        region = joins_producer(node, region_of)
        if region is None:
            region = []
            regions.append(region)
        region.append(node)
        region_of[node] = region
    return regions


def boundary_outputs(nodes: Sequence[ir.Node]) -> list[ir.Value]:
    """The values a region hands on: read outside it, or graph outputs."""
    members = set(nodes)
    return [
        value
        for node in nodes
        for value in node.outputs
        if value.is_graph_output() or any(use.node not in members for use in value.uses())
    ]


def region_key(nodes: Sequence[ir.Node]) -> str:
    """Names-free identity of a region: its operators' keys, how they are wired, what leaves it."""
    if len(nodes) == 1:
        return operator_key(nodes[0])
    position = {id(value): f"{i}.{j}" for i, node in enumerate(nodes) for j, value in enumerate(node.outputs)}
    parts = []
    for node in nodes:
        wiring = ",".join(position.get(id(value), "x") if value is not None else "-" for value in node.inputs)
        parts.append(f"{operator_key(node)}<{wiring}>")
    leaving = ",".join(position[id(value)] for value in boundary_outputs(nodes))
    digest = hashlib.sha1("|".join(parts).encode()).hexdigest()[:20]
    return f"region:{'+'.join(node.op_type for node in nodes)}:{leaving}:{digest}"


def region_model(nodes: Sequence[ir.Node], opsets: dict[str, int]) -> tuple[onnx.ModelProto, dict[str, ir.Value]]:
    """The region alone in a model: constants as initializers (real values), other inputs as graph inputs,
    its boundary values as outputs. Returns the model and its graph inputs by name (to make feeds)."""
    from rlcompile.models.onnx_model import MAX_IR_VERSION

    names = {id(value): f"v{i}_{j}" for i, node in enumerate(nodes) for j, value in enumerate(node.outputs)}
    inputs, initializers, outputs, external, protos = [], [], [], {}, []
    for index, node in enumerate(nodes):
        proto = ir.serde.serialize_node(node)
        for slot, value in enumerate(node.inputs):
            if value is None:
                continue
            if id(value) in names:
                proto.input[slot] = names[id(value)]
                continue
            # every outside reference its own input, named by slot (input0, input1... for one node)
            name = proto.input[slot] = f"input{slot}" if index == 0 else f"input{index}_{slot}"
            array = onnx_graph.constant_array(value)
            if array is not None:
                initializers.append(onnx.numpy_helper.from_array(array, name))
            else:
                external[name] = value
                shape = onnx_graph.static_shape(value)
                inputs.append(onnx.helper.make_tensor_value_info(name, value.dtype.value, shape))
        for slot, value in enumerate(node.outputs):
            proto.output[slot] = names[id(value)]
        protos.append(proto)
    leaving = boundary_outputs(nodes) if len(nodes) > 1 else list(nodes[0].outputs)  # one node: all it makes
    for value in leaving:
        shape = onnx_graph.static_shape(value)
        outputs.append(onnx.helper.make_tensor_value_info(names[id(value)], value.dtype.value, shape))
    graph = onnx.helper.make_graph(protos, "region", inputs, outputs, initializers)
    imports = [onnx.helper.make_opsetid(domain, version) for domain, version in opsets.items()]
    return onnx.helper.make_model(graph, opset_imports=imports, ir_version=MAX_IR_VERSION), external


def changed_region(parent: ir.Model, child: ir.Model) -> tuple[list[ir.Node], list[ir.Node]]:
    """The nodes a rewrite replaced and what replaced them, each with the same unchanged neighbourhood.

    Changed nodes are found by name (rules give new nodes fresh names). The neighbourhood is every
    unchanged node next to a changed one, plus the elementwise chains those feed (what ORT fuses into
    them): so both subgraphs have the same inputs and outputs, and what ORT adds at a subgraph's
    boundary (layout reorders, copies) cancels in the difference of their timings.
    """
    before, after = onnx_graph.nodes_by_name(parent.graph), onnx_graph.nodes_by_name(child.graph)
    removed = [node for name, node in before.items() if name not in after]
    added = [node for name, node in after.items() if name not in before]
    around: set[str] = set()
    for node in [*removed, *added]:
        around.update(neighbour.name for neighbour in adjacent(node))
    around = {name for name in around if name in before and name in after}
    frontier = list(around)
    while frontier and len(around) < 4 * MAX_REGION_NODES:
        readers = [use.node for value in after[frontier.pop()].outputs for use in value.uses()]
        for reader in readers:
            if reader.op_type in ELEMENTWISE and reader.name in before and reader.name not in around:
                around.add(reader.name)
                frontier.append(reader.name)

    def in_order(graph: ir.Graph, names: set[str]) -> list[ir.Node]:
        return [node for node in graph if node.name in names and not onnx_graph.folds_away_node(node)]

    removed_names, added_names = {n.name for n in removed}, {n.name for n in added}
    return in_order(parent.graph, removed_names | around), in_order(child.graph, added_names | around)


def adjacent(node: ir.Node) -> list[ir.Node]:
    """The nodes that feed ``node`` or read it (constants' producers left out)."""
    producers = [v.producer() for v in node.inputs if v is not None and not onnx_graph.is_constant(v)]
    readers = [use.node for value in node.outputs for use in value.uses()]
    return [n for n in [*producers, *readers] if n is not None]
