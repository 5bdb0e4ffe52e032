"""Fusion groups: the layers an inference library runs as one kernel.

A library does not run ONNX operators one at a time: ONNX Runtime, OpenVINO and oneDNN fuse a
convolution (or MatMul/Gemm) with its bias, activation and residual Add into one kernel. Choosing a
library per *operator* therefore breaks the fusions each library performs and cannot be faster than
that library run whole. The unit of choice here is the fusion group (Collage's lesson, DESIGN.md §9):

- an *anchor* (Conv, ConvTranspose, MatMul, Gemm, a pooling or a normalisation) starts a group;
- every other operator joins the group of its latest producer, so Conv -> Add(bias) -> Add(residual)
  -> Relu, or Conv -> Sigmoid -> Mul (SiLU), is one group;
- an operator fed only by the model's inputs starts a group of its own.

Joining the *latest* producer keeps the groups in a topological order (every input of a group comes
from an earlier group or the model's inputs), so any run of consecutive groups is a valid segment.
Nodes that compute only from constants belong to no group: a segment extractor pulls them in where
they are needed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

ANCHOR_OPS = frozenset({
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MatMul", "MatMulInteger", "QLinearMatMul", "Gemm",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
    "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LRN",
})  # fmt: skip


@dataclass
class FusionGroup:
    """One layer of the layer level: nodes (ONNX node names, in graph order) that run as one kernel."""

    name: str
    op_types: list[str]
    nodes: list[str]
    #: activations the group reads from outside itself (model inputs or earlier groups' outputs)
    inputs: list[str] = field(default_factory=list)
    #: activations the group produces that a later group or the model's outputs read
    outputs: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return "+".join(self.op_types)


def outer_scope_reads(node: onnx.NodeProto) -> list[str]:
    """The values a node's subgraphs (``If`` branches, ``Loop``/``Scan`` bodies) read from the graph around
    them: ONNX lets a subgraph use an outer value by name, without listing it as an input of the node."""
    names: list[str] = []
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
        for graph in graphs:
            local = {value.name for value in graph.input} | {init.name for init in graph.initializer}
            for inner in graph.node:
                for name in [*inner.input, *outer_scope_reads(inner)]:
                    if name and name not in local and name not in names:
                        names.append(name)
                local.update(inner.output)
    return names


def reads(node: onnx.NodeProto) -> list[str]:
    """Everything ``node`` reads: its inputs, then what its subgraphs read from outside them."""
    return [*node.input, *(name for name in outer_scope_reads(node) if name not in node.input)]


def node_names(graph: onnx.GraphProto) -> list[str]:
    """Each node's name, made unique and non-empty (exporters leave names empty or repeat them)."""
    seen: set[str] = set()
    names = []
    for index, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{index}"
        if name in seen:
            name = f"{name}__{index}"
        seen.add(name)
        names.append(name)
    return names


def name_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every node named uniquely (a copy when a name had to change)."""
    names = node_names(model.graph)
    if all(node.name == name for node, name in zip(model.graph.node, names, strict=True)):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node, name in zip(copy.graph.node, names, strict=True):
        node.name = name
    return copy


def fusion_groups(model: onnx.ModelProto) -> list[FusionGroup]:
    """The model's fusion groups in topological order (the model's nodes must be uniquely named)."""
    graph = model.graph
    constants = {init.name for init in graph.initializer}
    activations = {value.name for value in graph.input} - constants
    group_of_value: dict[str, int] = {}
    groups: list[FusionGroup] = []
    for node in graph.node:
        inputs = [name for name in reads(node) if name and name in activations]
        if not inputs:  # computed from constants only: folded, or pulled into the segment that needs it
            constants.update(node.output)
            continue
        producers = [group_of_value[name] for name in inputs if name in group_of_value]
        if node.op_type in ANCHOR_OPS or not producers:
            groups.append(FusionGroup(node.name, [], []))
            index = len(groups) - 1
        else:
            index = max(producers)
        groups[index].nodes.append(node.name)
        groups[index].op_types.append(node.op_type)
        for name in node.output:
            if name:
                group_of_value[name] = index
                activations.add(name)
    link_groups(model, groups, group_of_value)
    return groups


def link_groups(model: onnx.ModelProto, groups: list[FusionGroup], group_of_value: dict[str, int]) -> None:
    """Fill each group's ``inputs`` and ``outputs`` (activations that cross a group boundary)."""
    members = {name: index for index, group in enumerate(groups) for name in group.nodes}
    model_inputs = {value.name for value in model.graph.input}
    crossing = {value.name for value in model.graph.output}
    for node in model.graph.node:
        index = members.get(node.name)
        if index is None:
            continue
        for name in reads(node):
            is_activation = name in group_of_value or name in model_inputs
            if is_activation and group_of_value.get(name) != index:
                if name not in groups[index].inputs:
                    groups[index].inputs.append(name)
                crossing.add(name)
    for name, owner in group_of_value.items():  # in production order
        if name in crossing:
            groups[owner].outputs.append(name)


#: An integer constant of at most this many elements is part of a group's kind by value (a Reshape's target shape, a
#: Slice's bounds, a Gather's indices): it changes what runs. Other weights count by shape and type only: their values
#: do not change the time.
SMALL_CONSTANT = 64


def group_kind(proto: onnx.ModelProto, inputs: Sequence[np.ndarray]) -> str:
    """A hash of what a group's extracted model computes and on which shapes, independent of names and of its large
    weights' values: groups of one kind (a transformer's repeated layers) take the same time in every library.

    ``inputs``: arrays of the model's graph inputs, in order (their shapes and types are part of the kind).
    """
    graph = proto.graph
    tokens = {value.name: f"in:{np.asarray(array).dtype}{np.asarray(array).shape}"
              for value, array in zip(graph.input, inputs, strict=True)}  # fmt: skip
    for init in graph.initializer:
        small = int(np.prod(init.dims)) <= SMALL_CONSTANT
        integer = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).kind in "iub"
        value = onnx.numpy_helper.to_array(init).tobytes().hex() if small and integer else ""
        tokens[init.name] = f"c:{init.data_type}{tuple(init.dims)}{value}"
    for node in graph.node:
        digest = hashlib.blake2b(digest_size=12)
        digest.update(f"{node.domain}:{node.op_type}".encode())
        for attribute in sorted(node.attribute, key=lambda item: item.name):
            digest.update(attribute.SerializeToString())
        digest.update("|".join(tokens.get(name, "-") for name in node.input).encode())
        for index, name in enumerate(node.output):
            tokens[name] = f"{digest.hexdigest()}.{index}"
    outputs = "|".join(tokens.get(value.name, "-") for value in graph.output)
    return hashlib.blake2b(outputs.encode(), digest_size=12).hexdigest()
