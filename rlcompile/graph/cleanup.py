"""The start-graph clean-up every level runs first: BatchNorm (and per-channel Mul/Add) folded into the
preceding convolutions and transposed convolutions, whichever exporter wrote them, as every inference
library does before it runs a model; attention's NaN guard rewritten to the same numbers in a form runtimes
fuse, and the keys' transpose split into one that moves whole heads and a swap the MatMul takes in
(:mod:`rlcompile.graph.rules.attention`); an ``Expand`` whose readers broadcast by themselves (mean pooling's
mask) removed (:mod:`rlcompile.graph.rules.broadcast`).

The graph level's search starts from the cleaned graph, the layer level forms its fusion groups on it,
and ``optimize``'s kernel stage tunes the tasks of it, so the three see the same convolutions.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from rlcompile.graph import onnx_graph, rules
from rlcompile.graph.search import Rewrite, apply_exhaustively
from rlcompile.models.onnx_model import LoadedModel

#: The fusions run before the search ("clean"); the search uses every other rule.
CLEANUP_RULES = ("fuse_conv_batchnorm", "fuse_conv_mul", "fuse_conv_add", "fuse_convtranspose_batchnorm",
                 "fuse_convtranspose_mul", "fuse_convtranspose_add", "unguard_attention",
                 "split_key_transpose", "drop_broadcast_expand")  # fmt: skip


def clean_graph(model: ir.Model) -> tuple[ir.Model, list[Rewrite]]:
    """``model`` with the fusions of :data:`CLEANUP_RULES` applied everywhere, and those fusions."""
    return apply_exhaustively(model, rules.all_rules(list(CLEANUP_RULES)))


def clean_proto(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` cleaned (the same object when there was nothing to rewrite)."""
    cleaned, applied = clean_graph(onnx_graph.from_proto(proto))
    return onnx_graph.to_proto(cleaned) if applied else proto


def clean_model(model: LoadedModel) -> LoadedModel:
    """``model`` cleaned (the same object when there was nothing to rewrite)."""
    proto = clean_proto(model.proto)
    return model if proto is model.proto else LoadedModel(model.name, proto, model.inputs, model.source, model.notes)
