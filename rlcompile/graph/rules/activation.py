"""Activations written out as arithmetic by an exporter, rewritten to the operator ONNX Runtime fuses.

Found in ONNX Runtime's own optimised graph of PaddleOCR's detector and recogniser (``--parts costs``
models ``ocr-det``/``ocr-rec``): Paddle2ONNX writes hard-swish as ``x * Clip(x + 3, 0, 6) / 6``.
ORT_ENABLE_ALL fuses none of it, and each of the 24 chains makes its NCHWc Conv reorder its output
back to NCHW and the next Conv reorder it in again (52 ReorderOutput, 41 ReorderInput in ocr-det).
Written as ``x * HardSigmoid(x)`` (alpha 1/6, beta 1/2: the same function), ORT fuses it into the
Conv that produces ``x`` and the chain of Convs stays in NCHWc.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from rlcompile.graph import onnx_graph
from rlcompile.graph.rules.base import StructuralRule


def scalar(value: ir.Value | None, expected: float) -> bool:
    """Whether ``value`` is a constant holding the single number ``expected``."""
    array = onnx_graph.constant_array(value)
    return array is not None and array.size == 1 and bool(np.isclose(float(array.reshape(-1)[0]), expected))


def clip_bounds_are(clip: ir.Node, low: float, high: float) -> bool:
    """Clip's bounds: inputs from opset 11, attributes before."""
    if len(clip.inputs) >= 3:
        return scalar(clip.inputs[1], low) and scalar(clip.inputs[2], high)
    return onnx_graph.attribute(clip, "min") == low and onnx_graph.attribute(clip, "max") == high


def producer_if(value: ir.Value | None, op_type: str) -> ir.Node | None:
    """The node making ``value`` when it is an ``op_type`` whose output nothing else reads."""
    node = value.producer() if value is not None else None
    ok = node is not None and node.op_type == op_type and node.domain == "" and onnx_graph.single_use(value)
    return node if ok else None


class HardSwishAsHardSigmoid(StructuralRule):
    id = "hardswish_as_hardsigmoid"
    description = "x * Clip(x + 3, 0, 6) / 6 becomes x * HardSigmoid(x), which ONNX Runtime fuses into a Conv"

    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        found = []
        for div in graph:
            if div.op_type != "Div" or div.domain != "" or not scalar(div.inputs[1], 6.0):
                continue
            mul = producer_if(div.inputs[0], "Mul")
            if mul is None:
                continue
            for x, clipped in (mul.inputs, reversed(mul.inputs)):
                clip = producer_if(clipped, "Clip")
                add = producer_if(clip.inputs[0], "Add") if clip is not None and clip_bounds_are(clip, 0, 6) else None
                if add is not None and x in add.inputs and scalar(add.inputs[1 - list(add.inputs).index(x)], 3.0):
                    found.append((div, mul, clip, add))
                    break
        return found

    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        div, mul, clip, add = nodes
        x = next(value for value in add.inputs if value in mul.inputs)
        shape = onnx_graph.static_shape(x)
        gate = onnx_graph.add_node(graph, "HardSigmoid", [x], {"alpha": 1 / 6, "beta": 0.5}, [(shape, x.dtype)],
                                   hint="HardSigmoid")  # fmt: skip
        product = onnx_graph.add_node(graph, "Mul", [x, gate.outputs[0]], {}, [(onnx_graph.static_shape(div.outputs[0]),
                                      x.dtype)], hint="HardSwish")  # fmt: skip
        onnx_graph.replace_value(div.outputs[0], product.outputs[0])
        return [div, mul, clip, add]
