"""Reading the operands rules reason about: constant weights, per-channel vectors, Conv attributes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from rlcompile.graph import onnx_graph

#: Conv attributes two convolutions must share to be merged (kernel_shape comes from the weights).
CONV_LAYOUT_ATTRIBUTES = ("strides", "dilations", "group", "auto_pad")


def channel_vector(array: np.ndarray | None, channels: int, rank: int, axis: int = 1) -> np.ndarray | None:
    """``array`` as one value per channel when it broadcasts along ``axis`` of a rank-``rank`` tensor only."""
    if array is None or array.ndim > rank:
        return None
    shape = (1,) * (rank - array.ndim) + array.shape
    if any(size != 1 for index, size in enumerate(shape) if index != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(array.reshape(-1), (channels,)).astype(array.dtype)


def conv_bias(conv: ir.Node, channels: int, dtype: np.dtype) -> np.ndarray | None:
    """The Conv's bias (zeros when absent), or ``None`` when it is not a constant."""
    if len(conv.inputs) < 3 or conv.inputs[2] is None:
        return np.zeros(channels, dtype=dtype)
    return onnx_graph.constant_array(conv.inputs[2])


@dataclass(frozen=True)
class ConvParts:
    """A 2-D Conv with constant weights and bias, unpacked."""

    node: ir.Node
    weights: np.ndarray
    bias: np.ndarray
    pads: tuple[int, ...]
    layout: tuple

    @property
    def kernel(self) -> tuple[int, ...]:
        return self.weights.shape[2:]

    @property
    def out_channels(self) -> int:
        return self.weights.shape[0]

    @property
    def output(self) -> ir.Value:
        return self.node.outputs[0]

    @property
    def input(self) -> ir.Value:
        return self.node.inputs[0]


def conv_parts(node: ir.Node) -> ConvParts | None:
    """The node as :class:`ConvParts`, or ``None`` when it is not a 2-D Conv with constant operands."""
    if node.op_type != "Conv" or node.domain != "" or onnx_graph.static_shape(node.inputs[0]) is None:
        return None
    weights = onnx_graph.constant_array(node.inputs[1])
    if weights is None or weights.ndim != 4:
        return None
    bias = conv_bias(node, weights.shape[0], weights.dtype)
    if bias is None or str(onnx_graph.attribute(node, "auto_pad", "NOTSET")) != "NOTSET":
        return None
    pads = tuple(onnx_graph.attribute(node, "pads", (0, 0, 0, 0)))
    layout = tuple(
        onnx_graph.attribute(node, name, default)
        for name, default in zip(CONV_LAYOUT_ATTRIBUTES, ((1, 1), (1, 1), 1, "NOTSET"), strict=True)
    )
    return ConvParts(node, weights, bias, pads, layout)


def conv_attributes(parts: ConvParts, **overrides: object) -> dict[str, object]:
    """Attributes for a Conv like ``parts`` (explicit kernel and pads), with ``overrides``."""
    strides, dilations, group, _ = parts.layout
    attributes = {
        "kernel_shape": list(parts.kernel),
        "pads": list(parts.pads),
        "strides": list(strides),
        "dilations": list(dilations),
        "group": int(group),
    }
    return attributes | overrides


def add_conv(
    graph: ir.Graph,
    x: ir.Value,
    weights: np.ndarray,
    bias: np.ndarray,
    attributes: dict,
    hint: str,
    out_shape: list[int],
) -> ir.Value:
    """A Conv node with new constant weights and bias; returns its output."""
    inputs = [
        x,
        onnx_graph.add_constant(graph, weights, f"{hint}_w"),
        onnx_graph.add_constant(graph, bias, f"{hint}_b"),
    ]
    return onnx_graph.add_node(graph, "Conv", inputs, attributes, [(out_shape, x.dtype)], hint=hint).outputs[0]
