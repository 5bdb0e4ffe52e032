"""Attention's keys quantized where OpenVINO keeps the quantization: before the swap of their last two axes.

OpenVINO's CPU plugin moves a per-tensor quantization above the data movement before it (its
``MoveEltwiseUpThroughDataMov``), so the keys' transposes run on int8 data, element by element; a quantization with a
per-axis scale stays where it is. Written as ONNX QDQ nodes, for :mod:`rlcompile.precision.quantize`'s OpenVINO
placement only: ONNX Runtime at its full graph optimisation cannot run the result (its ``MatMulIntegerToFloat``
fusion refuses keys quantized along the axis the swap moves), and a plan of OpenVINO's is never handed to it.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx


def keys_quantized_before_swap(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each MatMul's second input that is quantized right after a swap of its last two axes (the keys
    turned for attention's scores) quantized before the swap instead, per axis along the last axis with the same
    scale and zero point in every element: the same numbers (a per-tensor quantization commutes with a transpose).

    OpenVINO moves a per-tensor quantization above the transposes before it and runs them on int8 data, element by
    element (all-MiniLM-L6-v2's keys: 0.014-0.017 ms a layer, against 0.002-0.005 for the float transpose of whole
    heads); a per-axis one stays where it is, the heads move in float and the MatMul takes the swap in (the plans ran
    0.97-0.98x the time). ``model`` is changed in place and returned."""
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    readers = Counter(name for node in graph.node for name in node.input)
    constants = {tensor.name: tensor for tensor in graph.initializer}
    found = [(node, *match) for node in graph.node if node.op_type == "MatMul" and len(node.input) == 2
             for match in [swapped_key_quantization(node, producers, readers)] if match is not None]  # fmt: skip
    if not found:
        return model
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except (onnx.shape_inference.InferenceError, ValueError):  # over protobuf's 2 GB, or a graph onnx cannot type
        return model
    shapes = {value.name: value for value in [*inferred.value_info, *inferred.input]}
    for matmul, swap, quantize, dequantize in found:
        depth = last_dimension(shapes.get(swap.input[0]))
        scale, zero_point = (constants.get(name) for name in quantize.input[1:3])
        if depth is None or scale is None or zero_point is None or scale.dims:
            continue
        per_axis = []
        for tensor in (scale, zero_point):
            array = np.full(depth, onnx.numpy_helper.to_array(tensor))
            per_axis.append(onnx.numpy_helper.from_array(array, f"{tensor.name}/per_axis_{depth}"))
        graph.initializer.extend(tensor for tensor in per_axis if tensor.name not in constants)
        constants.update({tensor.name: tensor for tensor in per_axis})
        for node in (quantize, dequantize):
            node.input[1], node.input[2] = per_axis[0].name, per_axis[1].name
            node.attribute.append(onnx.helper.make_attribute("axis", -1))
        matmul.input[1] = swap.output[0]
        quantize.input[0], swap.input[0] = swap.input[0], dequantize.output[0]
        # the graph stays in topological order with the three nodes' contents moved along their own places: the
        # quantization where the swap was, the dequantization where the quantization was, the swap last
        moved = [onnx.NodeProto.FromString(node.SerializeToString()) for node in (quantize, dequantize, swap)]
        for place, node in zip((swap, quantize, dequantize), moved, strict=True):
            place.CopyFrom(node)
    return model


def swapped_key_quantization(matmul: onnx.NodeProto, producers: dict[str, onnx.NodeProto],
                             readers: Counter[str]) -> tuple[onnx.NodeProto, ...] | None:  # fmt: skip
    """The (swap, QuantizeLinear, DequantizeLinear) that ``matmul``'s second input comes from, each read once, the
    pair with one scale and zero point, else ``None``."""
    dequantize = producers.get(matmul.input[1])
    if dequantize is None or dequantize.op_type != "DequantizeLinear":
        return None
    quantize = producers.get(dequantize.input[0])
    if quantize is None or quantize.op_type != "QuantizeLinear" or quantize.input[1:] != dequantize.input[1:]:
        return None
    swap = producers.get(quantize.input[0])
    axes = [attribute for node in (quantize, dequantize) for attribute in node.attribute if attribute.name == "axis"]
    per_tensor = len(quantize.input) == 3 and not axes
    if swap is None or not swaps_last_two(swap) or not per_tensor:
        return None
    read_once = all(readers.get(name) == 1 for name in (swap.output[0], quantize.output[0], dequantize.output[0]))
    return (swap, quantize, dequantize) if read_once else None


def swaps_last_two(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is a Transpose that swaps the last two axes of its input and keeps the others."""
    perm = next((list(attribute.ints) for attribute in node.attribute if attribute.name == "perm"), None)
    return (node.op_type == "Transpose" and perm is not None and len(perm) >= 2
            and perm == [*range(len(perm) - 2), len(perm) - 1, len(perm) - 2])  # fmt: skip


def last_dimension(value: onnx.ValueInfoProto | None) -> int | None:
    """The size of ``value``'s last axis, when known."""
    dims = value.type.tensor_type.shape.dim if value is not None else []
    return dims[-1].dim_value if dims and dims[-1].HasField("dim_value") else None
