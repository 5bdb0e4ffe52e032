"""Attention whose Softmax is guarded against rows with every key masked, rewritten so runtimes fuse it.

``torch.onnx`` writes ``scaled_dot_product_attention`` with a boolean mask as ``Softmax(scores + Where(mask, 0,
-inf))`` followed by ``Where(IsNaN(p), 0, p)``: a query row whose keys are all masked sums ``exp(-inf)`` to zero,
its Softmax is NaN, and the guard makes its weights 0. The guard sits between the Softmax and the second MatMul,
so OpenVINO does not fuse the attention (all-MiniLM-L6-v2: 12 MatMul and 6 Softmax nodes left as they are).

The rewrite computes the same numbers without it: the mask fills the lowest finite float instead of ``-inf``
(``exp`` of it less the row's finite maximum is exactly 0, as ``exp(-inf)`` is, so a row with a key left is
unchanged bit for bit), and the attention's output is multiplied by whether the row has any key left (1 or 0,
from the mask: a row with none, which the lowest finite fill turns into uniform weights, becomes 0 as the guard
made it). OpenVINO then fuses each attention into one subgraph; for finite inputs the outputs agree to float
rounding (bit for bit in ONNX Runtime at a fixed shape), an all-masked row included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from rlcompile.graph import onnx_graph
from rlcompile.graph.rules.base import StructuralRule


def filled(value: ir.Value | None, check) -> bool:
    """Whether ``value`` is a floating-point constant whose every element passes ``check``."""
    array = onnx_graph.constant_array(value)
    return array is not None and array.dtype.kind == "f" and bool(np.all(check(array)))


def only_use(value: ir.Value) -> tuple[ir.Node, int] | None:
    """The one (node, input index) that reads ``value``, else ``None`` (several readers, or a graph output)."""
    uses = list(value.uses())
    return uses[0] if len(uses) == 1 and not value.is_graph_output() else None


def masked_fill(add: ir.Node) -> tuple[ir.Node, int] | None:
    """The ``Where(mask, 0, -inf)`` that ``add`` adds to the scores, and its input index in ``add``."""
    for index, value in enumerate(add.inputs):
        where = value.producer() if value is not None else None
        if (where is not None and where.op_type == "Where" and where.domain == ""
                and filled(where.inputs[1], lambda a: a == 0) and filled(where.inputs[2], np.isneginf)):  # fmt: skip
            return where, index
    return None


class UnguardAttention(StructuralRule):
    id = "unguard_attention"
    description = ("Softmax(scores + Where(mask, 0, -inf)) guarded by Where(IsNaN(p), 0, p) becomes the lowest "
                   "finite fill and the output times whether the row has a key: the same numbers, fusable")  # fmt: skip

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for softmax in graph:
            if softmax.op_type != "Softmax" or softmax.domain != "":
                continue
            match = self.match(softmax)
            if match is not None:
                found.append(match)
        return found

    def match(self, softmax: ir.Node) -> tuple[ir.Node, ...] | None:
        """(Softmax, IsNaN, guard Where, scores Add, masked-fill Where, MatMul by the values), or ``None``."""
        probabilities = softmax.outputs[0]
        rank = len(probabilities.shape) if probabilities.shape is not None else None
        if rank is None or onnx_graph.attribute(softmax, "axis", -1) not in (-1, rank - 1):
            return None
        readers = {node.op_type: node for node, _ in probabilities.uses()}
        isnan, guard = readers.get("IsNaN"), readers.get("Where")
        if len(list(probabilities.uses())) != 2 or isnan is None or guard is None or probabilities.is_graph_output():
            return None
        if list(guard.inputs) != [isnan.outputs[0], guard.inputs[1], probabilities]:
            return None
        if only_use(isnan.outputs[0]) != (guard, 0) or not filled(guard.inputs[1], lambda a: a == 0):
            return None
        weighted = only_use(guard.outputs[0])
        add = softmax.inputs[0].producer()
        if (weighted is None or weighted[0].op_type != "MatMul" or weighted[1] != 0 or add is None
                or weighted[0].outputs[0].is_graph_output()):  # fmt: skip
            return None
        fill = masked_fill(add) if add.op_type == "Add" and only_use(add.outputs[0]) == (softmax, 0) else None
        if fill is None or fill[0].inputs[0].dtype != ir.DataType.BOOL:
            return None
        return softmax, isnan, guard, add, fill[0], weighted[0]

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        softmax, isnan, guard, add, where, matmul = nodes
        mask, zero, lowest = where.inputs[0], where.inputs[1], onnx_graph.constant_array(where.inputs[2])
        finite = onnx_graph.add_constant(graph, np.full(lowest.shape, np.finfo(lowest.dtype).min, lowest.dtype),
                                         "masked_fill_finite")  # fmt: skip
        bias = node_like(graph, "Where", [mask, zero, finite], where.outputs[0], hint="MaskedFillFinite")
        add.replace_input_with(list(add.inputs).index(where.outputs[0]), bias)
        onnx_graph.replace_value(guard.outputs[0], softmax.outputs[0])
        any_key = self.any_key(graph, mask, matmul.outputs[0].dtype)
        output = matmul.outputs[0]
        readers = list(output.uses())
        gated = node_like(graph, "Mul", [output, any_key], output, hint="AttentionRowsWithKeys")
        for node, index in readers:
            node.replace_input_with(index, gated)
        removed = [guard, isnan]
        return removed + ([where] if not list(where.outputs[0].uses()) else [])

    @staticmethod
    def any_key(graph: ir.Graph, mask: ir.Value, dtype: ir.DataType) -> ir.Value:
        """1 where a row of ``mask`` keeps any key, else 0 (its last axis reduced, kept as 1)."""
        cast = onnx_graph.add_node(graph, "Cast", [mask], {"to": dtype}, [(shape_of(mask), dtype)], hint="MaskAsFloat")
        shape = None if mask.shape is None else [*list(mask.shape)[:-1], 1]
        if onnx_graph.opset(graph) >= 18:
            axes = onnx_graph.add_constant(graph, np.array([-1], np.int64), "last_axis")
            reduced = onnx_graph.add_node(graph, "ReduceMax", [cast.outputs[0], axes], {"keepdims": 1},
                                          [(shape, dtype)], hint="RowHasKey")  # fmt: skip
        else:
            reduced = onnx_graph.add_node(graph, "ReduceMax", [cast.outputs[0]], {"axes": [-1], "keepdims": 1},
                                          [(shape, dtype)], hint="RowHasKey")  # fmt: skip
        return reduced.outputs[0]


def shape_of(value: ir.Value) -> list | None:
    return None if value.shape is None else list(value.shape)


def node_like(graph: ir.Graph, op_type: str, inputs: list[ir.Value], like: ir.Value, hint: str) -> ir.Value:
    """A new ``op_type`` node's output, of ``like``'s shape and type."""
    return onnx_graph.add_node(graph, op_type, inputs, {}, [(shape_of(like), like.dtype)], hint=hint).outputs[0]


#: A transpose that turns a ``(batch, tokens, heads, depth)`` tensor into the keys of ``q @ k`` (heads, depth, tokens)
KEYS_TURNED = (0, 2, 3, 1)
#: ... split into the heads' transpose (whole rows of ``depth`` move) and the last two axes' swap
HEADS_FIRST, LAST_TWO_SWAPPED = (0, 2, 1, 3), (0, 1, 3, 2)
#: The element-wise operators by a scalar constant that a transpose commutes with (the exporter's key scaling)
SCALINGS = ("Mul", "Div")


class SplitKeyTranspose(StructuralRule):
    """The keys turned for the attention scores in one transpose, split into the heads' transpose and a swap of the
    last two axes next to the MatMul (past any scaling by a constant scalar). The same numbers: a transpose commutes
    with a scalar Mul or Div. OpenVINO takes the swap into its MatMul (``transpose_b``) and the heads' transpose moves
    whole rows; in one turn it moves single elements (all-MiniLM-L6-v2, OpenVINO bf16, int8 MatMuls: 0.017 against
    0.007 ms a layer, the plan 0.965-0.986x its time)."""

    id = "split_key_transpose"
    description = ("Transpose(0,2,3,1) read by a MatMul's second input (through scalar Mul/Div) becomes "
                   "Transpose(0,2,1,3) and Transpose(0,1,3,2) next to the MatMul: the same numbers")  # fmt: skip

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for node in graph:
            turns_keys = tuple(onnx_graph.attribute(node, "perm", ())) == KEYS_TURNED
            if node.op_type == "Transpose" and node.domain == "" and turns_keys:
                path = self.path_to_matmul(node)
                if path is not None:
                    found.append((node, *path))
        return found

    @staticmethod
    def path_to_matmul(transpose: ir.Node) -> list[ir.Node] | None:
        """The scalings from ``transpose`` to the MatMul that reads the result as its second input, and that MatMul
        (each value read once), else ``None``."""
        path, value = [], transpose.outputs[0]
        while True:
            use = only_use(value)
            if use is None:
                return None
            node, index = use
            if node.op_type == "MatMul" and node.domain == "" and index == 1:
                return [*path, node]
            scalar = index == 0 and filled(node.inputs[1], lambda array: array.size == 1)
            if node.op_type not in SCALINGS or node.domain != "" or not scalar:
                return None
            path.append(node)
            value = node.outputs[0]

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        transpose, *scalings, matmul = nodes
        source = transpose.inputs[0]
        heads = onnx_graph.add_node(graph, "Transpose", [source], {"perm": list(HEADS_FIRST)},
                                    [(permuted(source.shape, HEADS_FIRST), source.dtype)], hint="KeyHeads")  # fmt: skip
        value = heads.outputs[0]
        for scaling in scalings:
            scaled = onnx_graph.add_node(graph, scaling.op_type, [value, scaling.inputs[1]], {},
                                         [(shape_of(value), value.dtype)], hint=scaling.name)  # fmt: skip
            value = scaled.outputs[0]
        keys = matmul.inputs[1]
        swap = onnx_graph.add_node(graph, "Transpose", [value], {"perm": list(LAST_TWO_SWAPPED)},
                                   [(shape_of(keys), keys.dtype)], hint="KeysTurned")  # fmt: skip
        matmul.replace_input_with(1, swap.outputs[0])
        return [transpose, *scalings]


def permuted(shape: ir.Shape | None, perm: tuple[int, ...]) -> list | None:
    """``shape``'s dimensions in ``perm``'s order (``None`` when unknown)."""
    return None if shape is None else [list(shape)[axis] for axis in perm]
