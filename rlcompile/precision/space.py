"""The joint space of precision plans: how a runtime computes floats, and which fusion groups run in int8.

A plan is one model run by one runtime, so it pays no library boundary:

- its **mode**: the runtime (ONNX Runtime or OpenVINO) and the precision of its float arithmetic (fp32,
  or bf16 where OpenVINO and the CPU offer it). OpenVINO applies the float precision to the whole model
  (it keeps no per-node float precision set from Python; see :mod:`rlcompile.runtimes.openvino`), so the
  float precision is chosen per plan, not per group;
- its **int8 groups**: the fusion groups whose Conv/MatMul/Gemm with constant weights run in int8, written
  into the model as QDQ nodes (:mod:`rlcompile.precision.quantize`), which both runtimes honour per node.

The units of choice are the fusion groups that hold such an operator (:class:`Unit`); each carries its
multiply-accumulate count, the additive proxy's estimate of what lowering it saves. Those operators are
quantized, and of the group's other nodes only the few a runtime folds into its int8 kernels (a unit's
*companions*: a Relu or Clip, a residual Add, a max pooling fed by the group;
:mod:`rlcompile.precision.quantize` says which runtime takes which); a MatMul of two activations
(attention's) only under a recipe that asks, with the unit that computes its keys or values. OpenVINO ran
ONNX Runtime's QDQ around every quantizable node of PaddleOCR's recogniser in 1.72x the fp32 time, and
around its weighted Conv/MatMul/Gemm alone in 0.71x, with a third less output error (2-core Emerald
Rapids).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import onnx

from rlcompile.models.onnx_model import inferred_values, static_shapes
from rlcompile.precision.quantize import DYNAMIC, QUANTIZED_OPS, is_activation_matmul, model_constants
from rlcompile.runtimes import Runtime


@dataclass(frozen=True)
class Recipe:
    """How a plan's int8 groups are quantized: SmoothQuant's alpha (0: none, :mod:`~rlcompile.precision.smoothing`),
    whether a group's residual Adds are quantized with it (OpenVINO's placement), how the activations' ranges are
    calibrated (:data:`~rlcompile.precision.quantize.CALIBRATION_METHODS`), and whether the attention MatMuls a
    group feeds (:attr:`Unit.attention`) run in int8 with it."""

    smoothing: float = 0.0
    residuals: bool = True
    calibration: str = "minmax"
    attention: bool = False

    @property
    def label(self) -> str:
        """What differs from the default recipe, in words ("" for the default)."""
        parts = [f"SmoothQuant {self.smoothing:g}"] if self.smoothing else []
        parts += [] if self.residuals else ["residual Adds in float"]
        parts += [] if self.calibration == "minmax" else ["ranges at run time" if self.calibration == DYNAMIC
                                                          else f"{self.calibration} ranges"]  # fmt: skip
        parts += ["attention in int8"] if self.attention else []
        return ", ".join(parts)

    @property
    def quantizer_key(self) -> tuple[float, str]:
        """What its quantizer is made of (the float model's smoothing, the calibration): recipes differing only in
        which nodes they quantize share one."""
        return self.smoothing, self.calibration

    def to_dict(self) -> dict:
        return {"smoothing": self.smoothing, "residuals": self.residuals, "calibration": self.calibration,
                "attention": self.attention}  # fmt: skip


#: The recipes the ``recipes`` search tries beyond the default, in order: on all-MiniLM-L6-v2's trained weights
#: (OpenVINO bf16, every MatMul in int8) quantizing the residual Adds left the sentence embeddings at a mean cosine of
#: 0.939 to fp32's, leaving them in float 0.990, and SmoothQuant at alpha 0.8 on top 0.998 (0.5: 0.990, 0.95: 0.997);
#: percentile ranges clip a CNN's rare activation outliers (on all-MiniLM-L6-v2 with SmoothQuant they cost accuracy,
#: 0.0030-0.0034 against MinMax's 0.0021-0.0023; on paraphrase-MiniLM-L3-v2 without it they gain, 0.0017 to 0.0030);
#: ranges set at run time (ONNX Runtime's dynamic quantization of the MatMuls) need no calibration at all.
#: attention's MatMuls of two activations in int8 on top of the best of those (OpenVINO fuses each attention into one
#: int8 kernel): on all-MiniLM-L6-v2 (2-core Zen 5) 0.94-0.99x the time of SmoothQuant's plan without it, at a cosine
#: error of 0.0021 against 0.0018; on Zen 4 1.04x, so it is measured, not assumed.
DEFAULT_RECIPE = Recipe()
RECIPES = (Recipe(smoothing=0.8, residuals=False), Recipe(residuals=False), Recipe(calibration="percentile"),
           Recipe(calibration=DYNAMIC), Recipe(smoothing=0.8, residuals=False, attention=True))


@dataclass(frozen=True)
class Mode:
    """A runtime, the precision of its float arithmetic, and how its int8 groups are quantized."""

    runtime: str
    floats: str = "fp32"
    recipe: Recipe = DEFAULT_RECIPE

    @property
    def label(self) -> str:
        recipe = self.recipe.label
        return f"{self.runtime} {self.floats}" + (f" ({recipe})" if recipe else "")


@dataclass(frozen=True)
class Unit:
    """A fusion group that can run in int8: its index among the groups, name, the ONNX nodes that are then
    quantized (its weighted Conv/ConvTranspose/MatMul/Gemm) and their MACs, and the nodes a runtime may
    quantize with them (:func:`companions`)."""

    index: int
    group: str
    nodes: tuple[str, ...]
    macs: float
    companions: tuple[str, ...] = ()
    #: those of the companions that are residual Adds (a recipe may leave them in float)
    residuals: tuple[str, ...] = ()
    #: the MatMuls of two activations (attention's) whose second input, the keys or the values, this unit's operator
    #: computes (:func:`attention_owners`): quantized with it under a recipe with ``attention``
    attention: tuple[str, ...] = ()

    def quantized(self, recipe: Recipe) -> tuple[str, ...]:
        """The nodes quantized when this unit runs in int8 under ``recipe``."""
        return (*self.nodes, *(name for name in self.companions if recipe.residuals or name not in self.residuals),
                *(self.attention if recipe.attention else ()))  # fmt: skip


@dataclass(frozen=True)
class PrecisionPlan:
    """A mode and the units (indices into the unit list) that run in int8."""

    mode: Mode
    int8: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if not self.int8 and self.mode.recipe != DEFAULT_RECIPE:  # nothing quantized: the recipe changes nothing
            object.__setattr__(self, "mode", replace(self.mode, recipe=DEFAULT_RECIPE))

    def label(self, units: int) -> str:
        lowered = f", int8 {len(self.int8)}/{units} groups" if self.int8 else ""
        return f"{self.mode.label}{lowered}"

    @property
    def exact(self) -> bool:
        return self.mode.floats == "fp32" and not self.int8


def modes(lowered: Iterable[str], created: Mapping[str, Runtime]) -> tuple[list[Mode], dict[str, str]]:
    """The modes the contract allows and this machine offers, and why each other one is left out."""
    chosen, left_out = [], {}
    for name in ("ort", "openvino"):
        if name not in created:
            continue
        available = created[name].precisions()
        for floats in ("fp32", *(["bf16"] if "bf16" in lowered else [])):
            why = available.get(floats, f"{name} offers no {floats}")
            if why is None:
                chosen.append(Mode(name, floats))
            elif floats != "fp32":
                left_out[f"{name} {floats}"] = why
    return chosen, left_out


def precision_units(proto: onnx.ModelProto, groups) -> list[Unit]:
    """The fusion groups with a Conv, ConvTranspose, MatMul or Gemm whose weights are constant, with those
    operators (the group's int8 anchors), their multiply-accumulates and the group's companions."""
    shapes = value_shapes(proto)
    constants = model_constants(proto)
    by_name = {node.name: node for node in proto.graph.node}
    pools: dict[str, list[str]] = {}  # a tensor's max pooling readers
    for node in proto.graph.node:
        if node.op_type == "MaxPool":
            pools.setdefault(node.input[0], []).append(node.name)
    owners = attention_owners(proto, constants)
    units = []
    for index, group in enumerate(groups):
        anchors = [by_name[name] for name in group.nodes if name in by_name and is_anchor(by_name[name], constants)]
        if anchors:
            macs = sum(node_macs(node, shapes) for node in anchors)
            around = companions(group, by_name, constants, pools)
            residuals = tuple(name for name in around if by_name[name].op_type == "Add")
            names = tuple(node.name for node in anchors)
            attention = tuple(name for name, owner in owners.items() if owner in names)
            units.append(Unit(index, group.name, names, macs, around, residuals, attention))
    return units


def attention_owners(proto: onnx.ModelProto, constants: set[str], steps: int = 8) -> dict[str, str]:
    """Each MatMul of two activations (attention's scores and weighted values), by the weighted operator that computes
    its second input (the keys or the values): found walking back through each node's first activation input (the
    heads' Reshape and Transpose, the bias Add, the scale Mul), at most ``steps`` nodes. One without is left out."""
    producers = {out: node for node in proto.graph.node for out in node.output}
    owners = {}
    for node in proto.graph.node:
        if not is_activation_matmul(node, constants):
            continue
        value = node.input[1]
        for _ in range(steps):
            producer = producers.get(value)
            if producer is None or (producer.op_type in QUANTIZED_OPS and not is_anchor(producer, constants)):
                break
            if is_anchor(producer, constants):
                owners[node.name] = producer.name
                break
            value = next((name for name in producer.input if name and name not in constants), None)
    return owners


def companions(group, by_name: Mapping[str, onnx.NodeProto], constants: set[str],
               pools: Mapping[str, list[str]]) -> tuple[str, ...]:  # fmt: skip
    """The group's Relu, Clip and max pooling nodes, its residual Adds (every input an activation: an Add of a
    constant is a bias, better left in float), and the max pooling nodes that read its outputs (``pools``)."""

    inside = [name for name in group.nodes if name in by_name and is_companion(by_name[name], constants)]
    readers = [name for output in group.outputs for name in pools.get(output, []) if name not in inside]
    return tuple(inside + readers)


def is_companion(node: onnx.NodeProto, constants: set[str]) -> bool:
    """A Relu, Clip or max pooling, or a residual Add (every input an activation)."""
    residual = node.op_type == "Add" and not set(node.input) & constants
    return node.op_type in ("Relu", "Clip", "MaxPool") or residual


def is_anchor(node: onnx.NodeProto, constants: set[str]) -> bool:
    """Whether ``node`` is an operator with an int8 kernel whose weights (second input) are constant."""
    return node.op_type in QUANTIZED_OPS and len(node.input) > 1 and node.input[1] in constants


def value_shapes(proto: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static shapes of the model's values (shape inference) and initializers."""
    try:
        values = inferred_values(proto)
    except Exception:  # a model shape inference cannot walk: the proxy then counts 1 MAC per anchor
        values = {value.name: value for value in [*proto.graph.input, *proto.graph.value_info, *proto.graph.output]}
    return static_shapes(proto, values)


def node_macs(node: onnx.NodeProto, shapes: Mapping[str, tuple[int, ...]]) -> float:
    """Multiply-accumulates of one Conv/ConvTranspose/MatMul/Gemm (1 when shapes are unknown)."""
    output = shapes.get(node.output[0])
    weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
    if output is None or weight is None:
        return 1.0
    if node.op_type == "Conv":
        return float(np.prod(output)) * float(np.prod(weight[1:]))
    if node.op_type == "ConvTranspose":
        source = shapes.get(node.input[0])
        return float(np.prod(source)) * float(np.prod(weight[1:])) if source else 1.0
    if node.op_type == "Gemm":
        inner = weight[1] if any(a.name == "transB" and a.i for a in node.attribute) else weight[0]
    else:  # MatMul: (..., K, N)
        inner = weight[-2] if len(weight) > 1 else weight[0]
    return float(np.prod(output)) * float(inner)


def weight_share(units: list[Unit]) -> np.ndarray:
    """Each unit's share of all the units' MACs."""
    macs = np.array([unit.macs for unit in units], dtype=float)
    return macs / macs.sum() if macs.sum() > 0 else np.full(len(units), 1 / max(len(units), 1))

