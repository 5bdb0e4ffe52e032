"""Each group's sensitivity to int8 from one run: its operators quantized beside the float model, on fp32's inputs.

NNCF ranks groups by the metric with each one reverted to float, one end-to-end evaluation per group: on PaddleOCR's
recogniser (47 groups) on a 2-core Zen 3, about 2.5 s each, so that at ``optimize --quick`` the ranking alone
outlasted the precision stage's time and greedy and the proxy found nothing. Here one model does it: the
float model, and beside each unit's anchors (its Conv/MatMul/Gemm) a copy that reads the same fp32 tensors through
the quantization the plan's placement writes (the all-int8 model's QDQ nodes: activation scales from the
calibration, per-channel int8 weights, int32 bias). One ONNX Runtime session, a few calibration samples: each
unit's *local deviation* is the relative L2 of its anchors' int8 outputs from their fp32 outputs, the error that
lowering that group alone introduces where it is introduced. Where a search's time does not afford NNCF's ranking,
it is what greedy raises back by and what the proxy's knapsack adds up; the plans they lead to are then measured
end to end as every plan is. It is blind to what an error does downstream, so it ranks worse than NNCF's where both
fit (:func:`rlcompile.precision.searches.greedy.sensitivity_ranking`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from rlcompile.precision.quantize import Placement, Quantizer, float_values
from rlcompile.precision.space import DEFAULT_RECIPE, Recipe, Unit
from rlcompile.runtimes.ort import run_proto_on_each

#: Calibration samples the probe runs (the ranking, not the error: that is measured on the validation samples).
PROBE_SAMPLES = 8
#: What the copies' values are named with.
PREFIX = "rlcompile.sensitivity/"


def local_deviations(quantizer: Quantizer, units: Sequence[Unit], placement: Placement,
                     feeds: Sequence[Mapping[str, np.ndarray]],
                     recipe: Recipe = DEFAULT_RECIPE) -> np.ndarray:  # fmt: skip
    """Each unit's relative L2 deviation (mean over ``feeds``, at most :data:`PROBE_SAMPLES`) when its anchors
    alone compute in int8 on fp32's inputs. Raises what the quantizer or ONNX Runtime raise."""
    anchors = [name for unit in units for name in unit.nodes]
    lowered = quantizer.quantized([name for unit in units for name in unit.quantized(recipe)], placement)
    probe, pairs = probe_model(quantizer.proto, lowered, anchors)
    runs = run_proto_on_each(probe, list(feeds)[:PROBE_SAMPLES])
    names = [value.name for value in probe.graph.output]
    deviations = np.zeros(len(units))
    for outputs in runs:
        values = dict(zip(names, outputs, strict=True))
        for index, unit in enumerate(units):
            exact = [values[pairs[name][0]].astype(np.float64) for name in unit.nodes]
            lowered_out = [values[pairs[name][1]].astype(np.float64) for name in unit.nodes]
            difference = sum(float(np.sum((q - f) ** 2)) for q, f in zip(lowered_out, exact, strict=True))
            norm = sum(float(np.sum(f**2)) for f in exact)
            deviations[index] += np.sqrt(difference / norm) if norm > 0 else np.sqrt(difference)
    return deviations / max(len(runs), 1)


def probe_model(float_proto: onnx.ModelProto, lowered: onnx.ModelProto,
                anchors: Sequence[str]) -> tuple[onnx.ModelProto, dict[str, tuple[str, str]]]:  # fmt: skip
    """The float model with, beside each of ``anchors``, its copy from ``lowered`` (its QDQ input nodes with it),
    reading the float model's tensors; every anchor's output and its copy's are outputs. Returns the model and, per
    anchor, (float output, int8 output)."""
    copier = ConeCopier(float_proto, lowered)
    by_name = {node.name: node for node in lowered.graph.node}
    float_output = {node.name: node.output[0] for node in float_proto.graph.node}
    pairs = {}
    for name in anchors:  # ONNX Runtime's quantizer may have renamed an anchor's output (a Relu folded into it)
        node = by_name[name]
        copy = helper.make_node(node.op_type, [copier.value(i) for i in node.input], [f"{PREFIX}{node.name}:int8"],
                                name=f"{PREFIX}{node.name}:int8", domain=node.domain)  # fmt: skip
        copy.attribute.extend(node.attribute)
        copier.nodes.append(copy)
        pairs[name] = (float_output[name], copy.output[0])
    graph = onnx.GraphProto()
    graph.CopyFrom(float_proto.graph)
    graph.node.extend(copier.nodes)
    graph.initializer.extend(copier.initializers)
    present = {value.name for value in graph.output}
    for exact, lowered_name in pairs.values():
        for output in (exact, lowered_name):
            if output not in present:
                graph.output.append(helper.make_empty_tensor_value_info(output))
                present.add(output)
    model = helper.make_model(graph, opset_imports=list(lowered.opset_import), ir_version=lowered.ir_version)
    return model, pairs


class ConeCopier:
    """Copies the nodes and initializers of ``lowered`` that an anchor's inputs are computed from, down to the
    tensors of the float model (its inputs, initializers and the outputs of its nodes, where ``lowered`` does not
    compute them with a node of its own: a quantized bias is the DequantizeLinear of the float bias's name), under
    :data:`PREFIX`'d names. So each copy reads fp32's own tensors through the quantization ``lowered`` writes, and
    no other anchor's int8 error (a Relu that ONNX Runtime folds into the convolution before it gives that
    convolution the Relu's output name: the float Relu's output is read)."""

    def __init__(self, float_proto: onnx.ModelProto, lowered: onnx.ModelProto) -> None:
        self.float_nodes = {node.name for node in float_proto.graph.node}
        self.float_values = float_values(float_proto.graph)
        self.producer = {out: node for node in lowered.graph.node for out in node.output}
        self.constants = {tensor.name: tensor for tensor in lowered.graph.initializer}
        self.renamed: dict[str, str] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def shared(self, name: str) -> bool:
        """Whether the probe reads the float model's ``name`` for ``lowered``'s."""
        node = self.producer.get(name)
        return name in self.float_values and (node is None or node.name in self.float_nodes)

    def value(self, name: str) -> str:
        """The probe's name for ``lowered``'s value ``name`` (copied with what it needs, once)."""
        if not name or self.shared(name):
            return name
        if name not in self.renamed:
            self.renamed[name] = PREFIX + name
            if name in self.constants:
                tensor = onnx.TensorProto()
                tensor.CopyFrom(self.constants[name])
                tensor.name = PREFIX + name
                self.initializers.append(tensor)
            else:
                node = self.producer[name]
                inputs = [self.value(i) for i in node.input]
                copy = helper.make_node(node.op_type, inputs, [PREFIX + out for out in node.output],
                                        name=PREFIX + node.name, domain=node.domain)  # fmt: skip
                copy.attribute.extend(node.attribute)
                self.nodes.append(copy)
                for out in node.output:
                    self.renamed[out] = PREFIX + out
        return self.renamed[name]
