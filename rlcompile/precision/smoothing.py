"""SmoothQuant (Xiao et al. 2023): a transformer's activation outliers moved into the weights before int8.

After a LayerNorm, a few channels of a transformer's activations run 10-100x larger than the rest, so one int8
scale per tensor loses the small channels. For a MatMul ``X @ W`` with constant ``W`` (K x N), SmoothQuant divides
each input channel ``k`` of ``X`` by ``s_k`` and multiplies row ``k`` of ``W`` by it: the product is unchanged, and
``s_k = max|X_k|^alpha / max|W_k|^(1 - alpha)`` (``max|X_k|`` over the calibration samples) evens out the channels
of both. MatMuls that read the same tensor (a layer's query, key and value) share one ``s``. The division is a
``Mul`` by ``1 / s`` on the MatMuls' input (the tensor's other readers, a residual ``Add``, still read ``X``), which
OpenVINO folds into the quantization that follows it.

Measured on all-MiniLM-L6-v2's trained weights (2-core Zen 4, OpenVINO bf16, all 36 weighted MatMuls in int8,
MinMax ranges, 64 calibration and 64 held-out sentences): mean cosine of the sentence embeddings to fp32's 0.9902
without smoothing, 0.9900 at alpha 0.5, 0.9982 at 0.8, 0.9972 at 0.95, each within 2% of the others' time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from rlcompile.precision.quantize import read_names
from rlcompile.runtimes.ort import run_proto_on_each

#: The smallest channel maximum and scale used (a channel that is always zero would divide by zero).
FLOOR = 1e-5


def smoothable(proto: onnx.ModelProto, nodes: Iterable[str]) -> dict[str, list[onnx.NodeProto]]:
    """The MatMuls among ``nodes`` whose weight (second input) is a 2-D initializer, by the tensor they read."""
    names = set(nodes)
    weights = {tensor.name: tensor for tensor in proto.graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in proto.graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if node.name in names and weight is not None and len(weight.dims) == 2:
            readers.setdefault(node.input[0], []).append(node)
    return readers


def channel_maxima(proto: onnx.ModelProto, names: Sequence[str],
                   feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:  # fmt: skip
    """Each tensor's largest magnitude per channel (its last axis) over ``feeds``, by ONNX Runtime."""
    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    outputs = {value.name for value in probe.graph.output}
    probe.graph.output.extend(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                              for name in names if name not in outputs)  # fmt: skip
    order = [value.name for value in probe.graph.output]
    maxima: dict[str, np.ndarray] = {}
    for values in run_proto_on_each(probe, list(feeds)):
        for name, value in zip(order, values, strict=True):
            if name in names:
                found = np.abs(np.asarray(value, np.float32)).reshape(-1, value.shape[-1]).max(0)
                maxima[name] = np.maximum(maxima[name], found) if name in maxima else found
    return maxima


def smooth(proto: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]], alpha: float,
           nodes: Iterable[str]) -> onnx.ModelProto:  # fmt: skip
    """A copy of ``proto`` with SmoothQuant at ``alpha`` on the smoothable MatMuls among ``nodes`` (node names
    are kept, so the same names quantize it), calibrated on ``feeds``; ``proto`` itself when none is smoothable."""
    readers = smoothable(proto, nodes)
    if not readers:
        return proto
    maxima = channel_maxima(proto, list(readers), feeds)
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    read = {node.input[1] for matmuls in readers.values() for node in matmuls}
    weights = {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer if tensor.name in read}
    by_name = {node.name: node for node in graph.node}
    position = {node.name: index for index, node in enumerate(graph.node)}
    added, inserts = [], []
    for tensor, matmuls in readers.items():
        weight_max = np.max([np.abs(weights[node.input[1]]).max(1) for node in matmuls], axis=0)
        scale = np.maximum(maxima[tensor], FLOOR) ** alpha / np.maximum(weight_max, FLOOR) ** (1 - alpha)
        scale = np.maximum(scale, FLOOR).astype(np.float32)
        smoothed = f"{tensor}/smoothed"
        added.append(numpy_helper.from_array((1 / scale).astype(np.float32), f"{tensor}/smoothing"))
        mul = helper.make_node("Mul", [tensor, f"{tensor}/smoothing"], [smoothed], name=f"{tensor}/smooth")
        inserts.append((min(position[node.name] for node in matmuls), mul))
        for original in matmuls:
            node = by_name[original.name]
            scaled = f"{original.name}/smoothed_weight"  # a weight two MatMuls share gets a copy each
            added.append(numpy_helper.from_array((weights[original.input[1]] * scale[:, None]).astype(np.float32),
                                                 scaled))  # fmt: skip
            node.input[0], node.input[1] = smoothed, scaled
    for index, mul in sorted(inserts, key=lambda item: -item[0]):
        graph.node.insert(index, mul)
    graph.initializer.extend(added)
    read = read_names(graph)
    kept = [tensor for tensor in graph.initializer if tensor.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model
