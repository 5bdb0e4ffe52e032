"""Merging parallel operators into one larger one (TASO's main source of speed on branching networks).

Two Convs (or MatMuls/Gemms) reading the same input become one with concatenated weights, followed by
a Split that hands each consumer its part. A 1x1 Conv beside a 3x3 one is first enlarged to 3x3 with
zero weights (same output, more FLOPs, one kernel launch less). Two Convs on *different* inputs of
the same shape become one grouped Conv over the concatenated inputs.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx_ir as ir

from rlcompile.graph import onnx_graph
from rlcompile.graph.rules.base import StructuralRule
from rlcompile.graph.rules.operands import ConvParts, add_conv, conv_attributes, conv_parts


def split_into(graph: ir.Graph, merged: ir.Value, originals: list[ir.Value], axis: int, hint: str) -> None:
    """Split ``merged`` along ``axis`` and hand each piece to the users of the matching original."""
    sizes = [onnx_graph.static_shape(value)[axis] for value in originals]
    for original, piece in zip(originals, onnx_graph.add_split(graph, merged, axis, sizes, hint), strict=True):
        onnx_graph.replace_value(original, piece)


def sibling_pairs(graph: ir.Graph, op_types: tuple[str, ...]) -> list[tuple[ir.Node, ir.Node]]:
    """Pairs of nodes of ``op_types`` reading the same first input, in graph order."""
    order = onnx_graph.graph_order(graph)
    pairs = []
    for value in [*graph.inputs, *(output for node in graph for output in node.outputs)]:
        readers = sorted(
            {node for node, index in value.uses()
             if index == 0 and node.op_type in op_types and node.domain == "" and node.graph is graph},  # not subgraphs
            key=order.__getitem__,
        )
        pairs.extend(itertools.combinations(readers, 2))
    return sorted(pairs, key=lambda pair: (order[pair[0]], order[pair[1]]))


def enlarged(parts: ConvParts, kernel: tuple[int, ...]) -> np.ndarray:
    """The weights zero-padded (centred) to ``kernel``."""
    grow = [(size - own) // 2 for size, own in zip(kernel, parts.kernel, strict=True)]
    return np.pad(parts.weights, [(0, 0), (0, 0), (grow[0], grow[0]), (grow[1], grow[1])])


def enlargeable(small: ConvParts, large: ConvParts) -> bool:
    """``small`` padded to ``large``'s kernel computes the same output with ``large``'s pads."""
    if small.layout != large.layout or small.layout[1] != (1, 1) or small.kernel == large.kernel:
        return False
    grow = [size - own for size, own in zip(large.kernel, small.kernel, strict=True)]
    if any(g < 0 or g % 2 for g in grow):
        return False
    half = [g // 2 for g in grow]
    return tuple(p + h for p, h in zip(small.pads, half + half, strict=True)) == large.pads


class MergeParallelConv(StructuralRule):
    id = "merge_parallel_conv"
    description = "two Convs with the same kernel reading one input become one Conv and a Split"
    enlarge = False

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for first, second in sibling_pairs(graph, ("Conv",)):
            a, b = conv_parts(first), conv_parts(second)
            if a is None or b is None or a.layout[2] != 1 or a.weights.dtype != b.weights.dtype:
                continue
            if self.compatible(a, b):
                found.append((first, second))
        return found

    def compatible(self, a: ConvParts, b: ConvParts) -> bool:
        if self.enlarge:
            return enlargeable(a, b) or enlargeable(b, a)
        return a.kernel == b.kernel and a.pads == b.pads and a.layout == b.layout

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        convs = [conv_parts(node) for node in nodes]
        large = max(convs, key=lambda parts: parts.kernel)
        weights = np.concatenate([enlarged(parts, large.kernel) for parts in convs], axis=0)
        bias = np.concatenate([parts.bias for parts in convs])
        shape = list(onnx_graph.static_shape(large.output))
        shape[1] = weights.shape[0]
        merged = add_conv(graph, large.input, weights, bias, conv_attributes(large), "merged_conv", shape)
        split_into(graph, merged, [parts.output for parts in convs], 1, "merged_conv_split")
        return list(nodes)


class MergeParallelConvEnlarge(MergeParallelConv):
    id = "merge_parallel_conv_enlarge"
    description = "a small-kernel Conv beside a larger one on the same input is zero-padded and merged with it"
    enlarge = True


class MergeConvGrouped(StructuralRule):
    id = "merge_conv_grouped"
    description = "two alike Convs on different inputs of one shape become a grouped Conv over their Concat"

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        order = onnx_graph.graph_order(graph)
        sets = onnx_graph.ancestors(graph)
        groups: dict[tuple, list[ir.Node]] = {}
        for node in graph:
            parts = conv_parts(node)
            if parts is not None and parts.layout[2] == 1:
                key = (
                    parts.weights.shape,
                    parts.weights.dtype,
                    parts.pads,
                    parts.layout,
                    onnx_graph.static_shape(parts.input),
                )
                groups.setdefault(key, []).append(node)
        found = [
            (first, second)
            for members in groups.values()
            for first, second in itertools.combinations(members, 2)
            if first.inputs[0] is not second.inputs[0] and onnx_graph.independent(first, second, sets, order)
        ]
        return sorted(found, key=lambda pair: (order[pair[0]], order[pair[1]]))

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        a, b = (conv_parts(node) for node in nodes)
        joined = onnx_graph.add_concat(graph, [a.input, b.input], 1, "grouped_conv_input")
        weights = np.concatenate([a.weights, b.weights], axis=0)
        shape = list(onnx_graph.static_shape(a.output))
        shape[1] = weights.shape[0]
        attributes = conv_attributes(a, group=2)
        merged = add_conv(graph, joined, weights, np.concatenate([a.bias, b.bias]), attributes, "grouped_conv", shape)
        split_into(graph, merged, [a.output, b.output], 1, "grouped_conv_split")
        return list(nodes)


def matmul_weights(node: ir.Node) -> tuple[np.ndarray, np.ndarray | None, int] | None:
    """(weights, bias or None, axis of output features) of a MatMul/Gemm with constant 2-D weights."""
    weights = onnx_graph.constant_array(node.inputs[1])
    if weights is None or weights.ndim != 2 or onnx_graph.static_shape(node.outputs[0]) is None:
        return None
    if node.op_type == "MatMul":
        return weights, None, 1
    if onnx_graph.attribute(node, "transA", 0):
        return None
    bias = None
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        bias = onnx_graph.constant_array(node.inputs[2])
        if bias is None or bias.ndim != 1 or bias.size != node.outputs[0].shape[1]:
            return None
    return weights, bias, 0 if onnx_graph.attribute(node, "transB", 0) else 1


class MergeParallelMatMul(StructuralRule):
    id = "merge_parallel_matmul"
    description = "two MatMuls (or alike Gemms) with constant weights reading one input become one and a Split"

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for first, second in sibling_pairs(graph, ("MatMul", "Gemm")):
            a, b = matmul_weights(first), matmul_weights(second)
            if a is None or b is None or first.op_type != second.op_type or a[0].dtype != b[0].dtype:
                continue
            if onnx_graph.attributes_key(first) == onnx_graph.attributes_key(second):
                found.append((first, second))
        return found

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        parts = [matmul_weights(node) for node in nodes]
        axis = parts[0][2]
        weights = onnx_graph.add_constant(graph, np.concatenate([p[0] for p in parts], axis=axis), "merged_weights")
        outputs = [node.outputs[0] for node in nodes]
        shape = list(onnx_graph.static_shape(outputs[0]))
        shape[-1] = sum(onnx_graph.static_shape(output)[-1] for output in outputs)
        inputs = [nodes[0].inputs[0], weights]
        if nodes[0].op_type == "Gemm" and any(p[1] is not None for p in parts):
            biases = [
                p[1] if p[1] is not None else np.zeros(out.shape[1], p[0].dtype)
                for p, out in zip(parts, outputs, strict=False)
            ]
            inputs.append(onnx_graph.add_constant(graph, np.concatenate(biases), "merged_bias"))
        attributes = {name: onnx_graph.attribute(nodes[0], name) for name in nodes[0].attributes}
        merged = onnx_graph.add_node(
            graph,
            nodes[0].op_type,
            inputs,
            attributes,
            [(shape, outputs[0].dtype)],
            hint=f"merged_{nodes[0].op_type.lower()}",
        )
        split_into(graph, merged.outputs[0], outputs, len(shape) - 1, "merged_split")
        return list(nodes)
