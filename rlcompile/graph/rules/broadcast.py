"""An ``Expand`` whose broadcast its readers would make anyway, removed.

``sentence-transformers``' mean pooling, as ``torch.onnx`` writes it, expands the attention mask to the token
embeddings' shape (``mask.unsqueeze(-1).expand(tokens.size())``) before multiplying and summing: an
element-wise ``Mul`` by the embeddings broadcasts the ``(batch, tokens, 1)`` mask by itself, and the mask's
count (``ReduceSum`` over the tokens) is the same in every column, so the ``Div`` that reads it broadcasts that
too. OpenVINO runs the ``Expand`` of an integer mask in its reference kernel (paraphrase-MiniLM-L3-v2: 0.036 ms
of a 1.3 ms int8 plan, and its ``Cast`` on the expanded mask 0.018 ms); without it the plan ran 0.94-0.96x the
time, every output bit for bit the same.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx_ir as ir

from rlcompile.graph import onnx_graph
from rlcompile.graph.rules.base import StructuralRule

#: Element-wise operators of one tensor: each output element reads the same element of the input.
UNARY = frozenset({"Cast", "Relu", "Neg", "Abs", "Sqrt", "Exp", "Log", "Reciprocal", "Not", "Sigmoid", "Identity",
                   "Floor", "Ceil", "Sign", "Clip"})  # fmt: skip
#: Element-wise operators of two tensors, which broadcast their inputs to one shape.
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "And", "Or", "Equal", "Greater", "Less", "GreaterOrEqual",
                    "LessOrEqual"})  # fmt: skip
#: Reductions whose result over axes the ``Expand`` did not broadcast is the same, broadcast or not.
REDUCTIONS = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"})

#: A value reached from the expanded tensor: the value, its full shape, and the axes the ``Expand`` broadcast.
Spread = tuple[ir.Value, tuple[int, ...], frozenset[int]]


class DropBroadcastExpand(StructuralRule):
    """An ``Expand`` of a tensor with the same rank, whose every path of element-wise operators and reductions
    (over other axes) ends in a two-input element-wise operator whose other input already has the broadcast axes'
    full size. Without it the values on the way keep size 1 on those axes, and each path's end broadcasts them: the
    same numbers (each element of the expanded tensor is a copy of one of its input's)."""

    id = "drop_broadcast_expand"
    description = ("Expand read only through element-wise operators and reductions over other axes, up to "
                   "element-wise operators that broadcast those axes anyway, is removed: the same numbers")  # fmt: skip

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        return [(node,) for node in graph
                if node.op_type == "Expand" and node.domain == "" and self.narrowed(node) is not None]  # fmt: skip

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        (expand,) = nodes
        for value, shape in self.narrowed(expand) or []:
            value.shape = ir.Shape(list(shape))
        source = expand.inputs[0]
        expand.outputs[0].replace_all_uses_with(source)
        return [expand]

    @staticmethod
    def narrowed(expand: ir.Node) -> list[tuple[ir.Value, tuple[int, ...]]] | None:
        """Each value on the paths from ``expand`` past its own output, with its shape without the broadcast, or
        ``None`` where some reader needs the broadcast made."""
        source, expanded = expand.inputs[0], expand.outputs[0]
        before, after = onnx_graph.static_shape(source), onnx_graph.static_shape(expanded)
        if before is None or after is None or len(before) != len(after):
            return None
        broadcast = frozenset(axis for axis, (old, new) in enumerate(zip(before, after, strict=True)) if old != new)
        if not broadcast or any(before[axis] != 1 for axis in broadcast):
            return None
        pending: list[Spread] = [(expanded, after, broadcast)]
        narrowed, reached, ends = [], {expanded}, []
        while pending:
            value, shape, axes = pending.pop()
            if value.is_graph_output():
                return None
            if value is not expanded:
                narrowed.append((value, tuple(1 if axis in axes else size for axis, size in enumerate(shape))))
            for node, index in value.uses():
                step = follow(node, index, shape, axes)
                if step is None:
                    return None
                if step == "end":
                    ends.append(node.inputs[1 - index])
                    continue
                out = node.outputs[0]
                if out not in reached:
                    reached.add(out)
                    pending.append((out, *step))
        if any(other in reached for other in ends):  # both inputs of one operator from the Expand
            return None
        return narrowed


def follow(node: ir.Node, index: int, shape: tuple[int, ...],
           axes: frozenset[int]) -> str | tuple[tuple[int, ...], frozenset[int]] | None:  # fmt: skip
    """What ``node`` (reading the broadcast value at input ``index``) makes of it: ``"end"`` where it broadcasts
    the axes itself, its output's full shape and broadcast axes where it passes them on, else ``None``."""
    out = onnx_graph.static_shape(node.outputs[0]) if len(node.outputs) == 1 else None
    if node.domain != "" or out is None:
        return None
    if node.op_type in UNARY and index == 0:
        bounds_scalar = all(value is None or onnx_graph.static_shape(value) in ((), (1,)) for value in node.inputs[1:])
        return (out, axes) if out == shape and bounds_scalar else None
    if node.op_type in BINARY and len(node.inputs) == 2 and index in (0, 1):
        other = node.inputs[1 - index]
        other_shape = None if other is None else onnx_graph.static_shape(other)
        if other_shape is None or len(other_shape) > len(out) or out != shape:
            return None
        aligned = (1,) * (len(out) - len(other_shape)) + other_shape
        sizes = {aligned[axis] for axis in axes}
        if sizes == {1}:
            return out, axes
        return "end" if all(aligned[axis] == shape[axis] for axis in axes) else None
    if node.op_type in REDUCTIONS and index == 0:
        reduced = reduced_axes(node, len(shape))
        if reduced is None or reduced & axes:
            return None
        if onnx_graph.attribute(node, "keepdims", 1):
            return out, axes
        return out, frozenset(axis - sum(1 for r in reduced if r < axis) for axis in axes)
    return None


def reduced_axes(node: ir.Node, rank: int) -> frozenset[int] | None:
    """The axes a reduction reduces (attribute or constant input), ``None`` when unknown."""
    listed: Iterable[int] | None = onnx_graph.attribute(node, "axes")  # type: ignore[assignment]
    if listed is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        array = onnx_graph.constant_array(node.inputs[1])
        listed = None if array is None else [int(axis) for axis in np.ravel(array)]
    if listed is None:  # no axes: every axis (or none, which the rule does not need to handle)
        return frozenset(range(rank)) if not onnx_graph.attribute(node, "noop_with_empty_axes", 0) else None
    return frozenset(axis % rank for axis in listed)
