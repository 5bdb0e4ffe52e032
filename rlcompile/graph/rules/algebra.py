"""Algebraic rewrites: convolution linearity and re-association of MatMul and Add/Mul chains.

``Conv(x, W1) + Conv(y, W2)`` is one Conv over ``Concat(x, y)`` with the weights concatenated along
the input channels. Re-association moves the parentheses of ``(a . b) . c`` either way; when the two
operands that end up together are both constants, their product (or sum) is folded into a new weight.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import onnx_ir as ir

from rlcompile.graph import onnx_graph
from rlcompile.graph.rules.base import StructuralRule
from rlcompile.graph.rules.operands import add_conv, conv_attributes, conv_parts

NUMPY_OPS = {"MatMul": np.matmul, "Add": np.add, "Mul": np.multiply}


class ConvLinearity(StructuralRule):
    id = "conv_linearity"
    description = "Conv(x, W1) + Conv(y, W2) becomes one Conv over Concat(x, y) with weights joined on input channels"

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for add in graph:
            if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
                continue
            convs = [value.producer() for value in add.inputs]
            if (
                any(node is None or not onnx_graph.single_use(node.outputs[0]) for node in convs)
                or convs[0] is convs[1]
            ):
                continue
            a, b = (conv_parts(node) for node in convs)
            if (
                a is None
                or b is None
                or a.layout[2] != 1
                or (a.kernel, a.pads, a.layout) != (b.kernel, b.pads, b.layout)
            ):
                continue
            same_grid = onnx_graph.static_shape(a.input)[2:] == onnx_graph.static_shape(b.input)[2:]
            same_out = onnx_graph.static_shape(a.output) == onnx_graph.static_shape(b.output)
            if same_grid and same_out and onnx_graph.static_shape(add.outputs[0]) == onnx_graph.static_shape(a.output):
                found.append((add, *convs))
        return found

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        add, *convs = nodes
        a, b = (conv_parts(node) for node in convs)
        joined = onnx_graph.add_concat(graph, [a.input, b.input], 1, "linear_conv_input")
        weights = np.concatenate([a.weights, b.weights], axis=1)
        shape = list(onnx_graph.static_shape(a.output))
        merged = add_conv(graph, joined, weights, a.bias + b.bias, conv_attributes(a), "linear_conv", shape)
        onnx_graph.replace_value(add.outputs[0], merged)
        return list(nodes)


def result_shape(op_type: str, left: tuple[int, ...], right: tuple[int, ...]) -> tuple[int, ...]:
    if op_type == "MatMul":
        return (*np.broadcast_shapes(left[:-2], right[:-2]), left[-2], right[-1])
    return tuple(np.broadcast_shapes(left, right))


class Reassociate(StructuralRule):
    """``(a . b) . c`` to ``a . (b . c)`` (``rightward``) or back, for one associative ``op_type``."""

    op_type: ClassVar[str]
    rightward: ClassVar[bool]

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for node in graph:
            if node.op_type != self.op_type or node.domain != "" or len(node.inputs) != 2:
                continue
            inner = node.inputs[0 if self.rightward else 1].producer()
            if inner is None or inner.op_type != self.op_type or inner.domain != "" or inner is node:
                continue
            if not onnx_graph.single_use(inner.outputs[0]) or not self.shapes_known(node, inner):
                continue
            found.append((node, inner))
        return found

    def shapes_known(self, node: ir.Node, inner: ir.Node) -> bool:
        shapes = [onnx_graph.static_shape(value) for value in [*node.inputs, *inner.inputs]]
        minimum_rank = 2 if self.op_type == "MatMul" else 0
        return all(shape is not None and len(shape) >= minimum_rank for shape in shapes)

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        node, inner = nodes
        if self.rightward:
            (a, b), c = inner.inputs, node.inputs[1]
            together, outer_first = self.combine(graph, b, c), a
            operands = [outer_first, together]
        else:
            a, (b, c) = node.inputs[0], inner.inputs
            operands = [self.combine(graph, a, b), c]
        output = node.outputs[0]
        result = onnx_graph.add_node(
            graph, self.op_type, operands, {}, [(output.shape, output.dtype)], hint=self.op_type
        )
        onnx_graph.replace_value(output, result.outputs[0])
        return [node, inner]

    def combine(self, graph: ir.Graph, left: ir.Value, right: ir.Value) -> ir.Value:
        """``left . right`` as a new node, or as a folded constant when both are constants."""
        left_array, right_array = onnx_graph.constant_array(left), onnx_graph.constant_array(right)
        if left_array is not None and right_array is not None:
            folded = NUMPY_OPS[self.op_type](left_array, right_array).astype(left_array.dtype)
            return onnx_graph.add_constant(graph, folded, f"folded_{self.op_type.lower()}")
        shape = result_shape(self.op_type, onnx_graph.static_shape(left), onnx_graph.static_shape(right))
        return onnx_graph.add_node(
            graph, self.op_type, [left, right], {}, [(shape, left.dtype)], hint=self.op_type
        ).outputs[0]


class ReassociateMatMulRight(Reassociate):
    id = "reassociate_matmul_right"
    description = "(A @ B) @ C becomes A @ (B @ C), folded into one weight when B and C are constants"
    op_type, rightward = "MatMul", True


class ReassociateMatMulLeft(Reassociate):
    id = "reassociate_matmul_left"
    description = "A @ (B @ C) becomes (A @ B) @ C"
    op_type, rightward = "MatMul", False


class ReassociateAddRight(Reassociate):
    id = "reassociate_add_right"
    description = "(a + b) + c becomes a + (b + c), folded when b and c are constants"
    op_type, rightward = "Add", True


class ReassociateAddLeft(Reassociate):
    id = "reassociate_add_left"
    description = "a + (b + c) becomes (a + b) + c"
    op_type, rightward = "Add", False


class ReassociateMulRight(Reassociate):
    id = "reassociate_mul_right"
    description = "(a * b) * c becomes a * (b * c), folded when b and c are constants"
    op_type, rightward = "Mul", True


class ReassociateMulLeft(Reassociate):
    id = "reassociate_mul_left"
    description = "a * (b * c) becomes (a * b) * c"
    op_type, rightward = "Mul", False
