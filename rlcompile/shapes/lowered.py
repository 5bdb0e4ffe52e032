"""The lowered candidates of a shape profile: OpenVINO's bf16 and int8 models of the user's dynamic graph.

The int8 models are ONNX Runtime's QDQ quantization of the whole dynamic model (every Conv, Gemm and MatMul
with a constant weight; attention's MatMuls of two activations stay float, measured slower in int8), by the
recipes of :mod:`rlcompile.precision.space`, each placed as the runtime that runs it fuses best. They stay
dynamic: one calibration on the samples as they come serves every shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

from rlcompile import runtimes
from rlcompile.errors import ModelError, RlcompileError
from rlcompile.events import Event, Listener
from rlcompile.precision.quantize import DYNAMIC, QUANTIZED_OPS, Quantizer, placement_for, quantized_at_run_time
from rlcompile.precision.smoothing import smooth
from rlcompile.precision.space import DEFAULT_RECIPE, RECIPES, Recipe, is_companion, model_constants
from rlcompile.shapes.variants import Variant

#: The int8 recipes tried, by name, and the runtimes each runs on: the default ranges (OpenVINO's placement,
#: residual Adds quantized), SmoothQuant 0.8 with residual Adds in float (what all-MiniLM-L6-v2's trained weights
#: kept within a cosine of 0.01 on 2-core Zen 4, 0.38x the fastest fp32), and ranges set at run time
#: (ONNX Runtime's dynamic quantization; OpenVINO's of a MatMul whose weights alone are int8).
RECIPE_RUNTIMES: dict[str, tuple[Recipe, tuple[str, ...]]] = {
    "minmax": (DEFAULT_RECIPE, ("openvino", "ort")),
    "smoothquant": (RECIPES[0], ("openvino", "ort")),
    "dynamic": (RECIPES[3], ("openvino", "ort")),
}


def anchors(proto: onnx.ModelProto) -> list[str]:
    """The nodes worth int8: Conv, ConvTranspose and Gemm, and MatMul with a constant second input."""
    constants = {tensor.name for tensor in proto.graph.initializer}
    constants |= {node.output[0] for node in proto.graph.node if node.op_type == "Constant"}
    return [node.name for node in proto.graph.node if node.op_type in QUANTIZED_OPS
            and (node.op_type != "MatMul" or node.input[1] in constants)]  # fmt: skip


def named(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with every node named (the quantizer picks nodes by name); a copy only when some had none."""
    if all(node.name for node in proto.graph.node):
        return proto
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    for index, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}_{index}"
    return model


def lowered_candidates(precisions: Sequence[str], libraries: Sequence[str]) -> list[Variant]:
    """The dynamic lowered variants ``--precision`` allows (``precisions``: of bf16, int8) on ``libraries``, where
    this machine runs them (bf16 only with native bf16 arithmetic)."""
    found = []
    bf16 = "bf16" in precisions and "openvino" in libraries and runtimes.create("openvino").precisions()["bf16"] is None
    if bf16:
        found.append(Variant("openvino", "bf16"))
    if "int8" in precisions:
        for name, (_, where) in RECIPE_RUNTIMES.items():
            for library in where:
                if library in libraries:
                    found.append(Variant(library, "bf16" if bf16 and library == "openvino" else "fp32", name))
    return found


def int8_models(proto: onnx.ModelProto, variants: Sequence[Variant], calibration: Sequence[dict[str, np.ndarray]],
                work: Path, progress: Listener) -> Callable[[Variant], onnx.ModelProto | None]:  # fmt: skip
    """The model each of ``variants`` runs: the user's for fp32; for a lowered variant the graph cleaned as every level
    starts from it (:mod:`rlcompile.graph.cleanup`: its attention rewrite lets OpenVINO fuse an exported transformer's
    attention), quantized once per (recipe, runtime) for an int8 one; ``None`` where the quantizer fails."""
    from rlcompile.graph.cleanup import clean_proto

    original = named(proto)
    proto = named(clean_proto(proto)) if any(variant.lowered for variant in variants) else original
    nodes = anchors(proto)
    # a bias Add is no companion (as in the precision space): with all-MiniLM-L6-v2's Q/K/V bias Adds quantized,
    # OpenVINO's compile at 1 x 128 died of a floating-point exception
    constants = model_constants(proto)
    companions = [node.name for node in proto.graph.node if is_companion(node, constants)]
    feeds = [dict(sample) for sample in calibration]
    made: dict[tuple[str, str], onnx.ModelProto | None] = {}
    quantizers: dict[str, Quantizer] = {}

    def model(variant: Variant) -> onnx.ModelProto | None:
        key = (variant.recipe or "", variant.library)
        if variant.recipe is None:
            return proto if variant.lowered else original
        if key not in made:
            recipe = RECIPE_RUNTIMES[variant.recipe][0]
            try:
                if variant.recipe not in quantizers:
                    source = smooth(proto, feeds, recipe.smoothing, nodes) if recipe.smoothing else proto
                    quantizers[variant.recipe] = Quantizer(source, feeds, work / f"int8-{variant.recipe}",
                                                           [*nodes, *companions], recipe.calibration)  # fmt: skip
                placement = placement_for(variant.library)
                if not recipe.residuals:
                    placement = replace(placement, op_types=placement.op_types - {"Add"},
                                        float_outputs=placement.float_outputs - {"Add"})  # fmt: skip
                chosen = nodes if recipe.calibration == DYNAMIC else [*nodes, *companions]
                if recipe.calibration == DYNAMIC and not quantized_at_run_time(proto, chosen, placement):
                    raise ModelError(f"{variant.library} sets ranges at run time for none of its operators")
                made[key] = quantizers[variant.recipe].quantized(chosen, placement)
                progress(Event("shapes", f"quantized the model for {variant.label}"))
            except RlcompileError as error:
                progress(Event("shapes", f"{variant.label} left out: {error}"))
                made[key] = None
        return made[key]

    return model
