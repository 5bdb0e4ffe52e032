"""Concat/Split algebra: moving element-wise operators across them, and cancelling Split with Concat.

An element-wise operator (Relu, or Add/Mul with a constant that is per-channel along the concatenated
axis) commutes with Concat and Split. Pulling it out of the branches runs one operator instead of
several; pushing it into them is the inverse, which a search needs to reach other merges.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from rlcompile.graph import onnx_graph
from rlcompile.graph.rules.base import StructuralRule
from rlcompile.graph.rules.operands import channel_vector

UNARY = ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Clip")
BINARY = ("Add", "Mul")


def axis_of(node: ir.Node, rank: int) -> int:
    return int(onnx_graph.attribute(node, "axis", 0)) % rank


def elementwise_operand(node: ir.Node, axis: int) -> np.ndarray | bool | None:
    """For a movable element-wise node: its constant as a vector along ``axis`` (binary ops), ``True``
    for a unary op, ``None`` when the node cannot move across a Concat/Split on ``axis``."""
    output = onnx_graph.static_shape(node.outputs[0])
    if node.domain != "" or output is None:
        return None
    if node.op_type in UNARY:
        constant_extras = all(onnx_graph.is_constant(value) for value in node.inputs[1:] if value is not None)
        return True if constant_extras else None
    if node.op_type not in BINARY or onnx_graph.static_shape(node.inputs[0]) != output:
        return None
    return channel_vector(onnx_graph.constant_array(node.inputs[1]), output[axis], len(output), axis)


def same_operator(nodes: list[ir.Node]) -> bool:
    first = nodes[0]
    key = (first.op_type, onnx_graph.attributes_key(first))
    return all((n.op_type, onnx_graph.attributes_key(n)) == key for n in nodes)


def extra_inputs(graph: ir.Graph, node: ir.Node, vector: np.ndarray | bool, rank: int, axis: int) -> list[ir.Value]:
    """The inputs after the first for a copy of ``node`` (a new constant for binary ops)."""
    if vector is True:
        return list(node.inputs[1:])
    shape = [1] * rank
    shape[axis] = -1
    return [onnx_graph.add_constant(graph, vector.reshape(shape), f"{node.name}_operand")]


def add_elementwise(graph: ir.Graph, like: ir.Node, x: ir.Value, extras: list[ir.Value]) -> ir.Value:
    """A copy of element-wise ``like`` applied to ``x`` (same attributes, output shaped like ``x``)."""
    attributes = {name: onnx_graph.attribute(like, name) for name in like.attributes}
    output = [(onnx_graph.static_shape(x), x.dtype)]
    return onnx_graph.add_node(graph, like.op_type, [x, *extras], attributes, output, hint=like.op_type).outputs[0]


def joined_elementwise(graph: ir.Graph, branches: list[ir.Node], x: ir.Value, rank: int, axis: int) -> ir.Value:
    """One copy of the branches' element-wise op on ``x`` (their constants joined along ``axis``)."""
    operands = [elementwise_operand(node, axis) for node in branches]
    vector = True if operands[0] is True else np.concatenate(operands)
    return add_elementwise(graph, branches[0], x, extra_inputs(graph, branches[0], vector, rank, axis))


def sliced_elementwise(graph: ir.Graph, node: ir.Node, pieces: list[ir.Value], rank: int, axis: int) -> list[ir.Value]:
    """A copy of ``node`` on every piece of its input, each with its slice of the constant along ``axis``."""
    operand = elementwise_operand(node, axis)
    offsets = np.cumsum([0, *(onnx_graph.static_shape(piece)[axis] for piece in pieces)])
    results = []
    for index, piece in enumerate(pieces):
        part = operand if operand is True else operand[offsets[index] : offsets[index + 1]]
        results.append(add_elementwise(graph, node, piece, extra_inputs(graph, node, part, rank, axis)))
    return results


class PullElementwiseThroughConcat(StructuralRule):
    id = "pull_elementwise_through_concat"
    description = "Concat(f(a), f(b)) becomes f(Concat(a, b)) for Relu-like f, or Add/Mul by per-channel constants"

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for concat in graph:
            if concat.op_type != "Concat" or onnx_graph.static_shape(concat.outputs[0]) is None:
                continue
            producers = [value.producer() for value in concat.inputs]
            if any(p is None or not onnx_graph.single_use(p.outputs[0]) for p in producers):
                continue
            if len(set(producers)) != len(producers) or not same_operator(producers):
                continue
            axis = axis_of(concat, len(concat.outputs[0].shape))
            if all(elementwise_operand(p, axis) is not None for p in producers):
                found.append((concat, *producers))
        return found

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        concat, *branches = nodes
        rank = len(concat.outputs[0].shape)
        axis = axis_of(concat, rank)
        joined = onnx_graph.add_concat(graph, [node.inputs[0] for node in branches], axis, "pulled_concat")
        onnx_graph.replace_value(concat.outputs[0], joined_elementwise(graph, branches, joined, rank, axis))
        return list(nodes)


class PushElementwiseIntoConcat(StructuralRule):
    id = "push_elementwise_into_concat"
    description = "f(Concat(a, b)) becomes Concat(f(a), f(b)): the inverse of pulling f out"

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for node in graph:
            concat = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
            if concat is None or concat.op_type != "Concat" or not onnx_graph.single_use(concat.outputs[0]):
                continue
            if onnx_graph.static_shape(concat.outputs[0]) is None:
                continue
            if elementwise_operand(node, axis_of(concat, len(concat.outputs[0].shape))) is not None:
                found.append((node, concat))
        return found

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        node, concat = nodes
        rank = len(concat.outputs[0].shape)
        axis = axis_of(concat, rank)
        pieces = sliced_elementwise(graph, node, list(concat.inputs), rank, axis)
        onnx_graph.replace_value(node.outputs[0], onnx_graph.add_concat(graph, pieces, axis, "pushed_concat"))
        return [node, concat]


def split_sizes(split: ir.Node) -> list[int] | None:
    shapes = [onnx_graph.static_shape(value) for value in split.outputs]
    if any(shape is None for shape in shapes) or onnx_graph.static_shape(split.inputs[0]) is None:
        return None
    axis = axis_of(split, len(shapes[0]))
    return [shape[axis] for shape in shapes]


class PullElementwiseThroughSplit(StructuralRule):
    id = "pull_elementwise_through_split"
    description = "the same f on every output of a Split becomes one f before the Split"

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for split in graph:
            if split.op_type != "Split" or split_sizes(split) is None:
                continue
            if not all(onnx_graph.single_use(value) for value in split.outputs):
                continue
            users = [next(iter(value.uses())).node for value in split.outputs]
            if len(set(users)) != len(users) or not same_operator(users):
                continue
            axis = axis_of(split, len(split.outputs[0].shape))
            if all(user.inputs[0] is value for user, value in zip(users, split.outputs, strict=True)) and all(
                elementwise_operand(user, axis) is not None for user in users
            ):
                found.append((split, *users))
        return found

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        split, *users = nodes
        rank = len(split.outputs[0].shape)
        axis = axis_of(split, rank)
        applied = joined_elementwise(graph, users, split.inputs[0], rank, axis)
        pieces = onnx_graph.add_split(graph, applied, axis, split_sizes(split), "pulled_split")
        for user, piece in zip(users, pieces, strict=True):
            onnx_graph.replace_value(user.outputs[0], piece)
        return list(nodes)


class PushElementwiseIntoSplit(StructuralRule):
    id = "push_elementwise_into_split"
    description = "Split(f(x)) becomes f applied to every output of Split(x)"

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for split in graph:
            producer = split.inputs[0].producer() if split.op_type == "Split" else None
            if producer is None or split_sizes(split) is None or not onnx_graph.single_use(producer.outputs[0]):
                continue
            if elementwise_operand(producer, axis_of(split, len(split.outputs[0].shape))) is not None:
                found.append((split, producer))
        return found

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        split, node = nodes
        rank = len(split.outputs[0].shape)
        axis = axis_of(split, rank)
        pieces = onnx_graph.add_split(graph, node.inputs[0], axis, split_sizes(split), "pushed_split")
        for original, result in zip(split.outputs, sliced_elementwise(graph, node, pieces, rank, axis), strict=True):
            onnx_graph.replace_value(original, result)
        return [split, node]


class EliminateSplitConcat(StructuralRule):
    id = "eliminate_split_concat"
    description = "Concat of all outputs of one Split, in order and on the same axis, is the Split's input"

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for concat in graph:
            if concat.op_type != "Concat" or not concat.inputs or concat.inputs[0] is None:
                continue
            split = concat.inputs[0].producer()
            if split is None or split.op_type != "Split" or split_sizes(split) is None:
                continue
            rank = len(split.outputs[0].shape)
            if list(concat.inputs) == list(split.outputs) and axis_of(split, rank) == axis_of(concat, rank):
                found.append((concat, split))
        return found

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        concat, split = nodes
        source = split.inputs[0]
        if concat.outputs[0].is_graph_output() and (source.is_graph_input() or source.is_graph_output()):
            identity = onnx_graph.add_node(graph, "Identity", [source], {}, [(source.shape, source.dtype)])
            source = identity.outputs[0]
        onnx_graph.replace_value(concat.outputs[0], source)
        only_concat = all(
            not value.is_graph_output() and all(use.node is concat for use in value.uses()) for value in split.outputs
        )
        return [concat, split] if only_concat else [concat]
