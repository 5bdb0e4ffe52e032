"""The start-graph clean-up folds BatchNorm whichever exporter wrote it, and the folded graph agrees."""

from __future__ import annotations

import pytest

from rlcompile.graph import onnx_graph
from rlcompile.graph.cleanup import clean_graph
from tests.graph.conftest import GraphBuilder, agreement, op_types


def paddle_decoder():
    """Paddle2ONNX: a bias-less ConvTranspose, its bias as an Add, then BatchNormalization and Relu."""
    b = GraphBuilder()
    c = b.conv_transpose(b.input("x", [1, 4, 8, 8]), 4, 6, bias=False)
    return b.model([b.op("Relu", [b.batchnorm(b.op("Add", [c, b.weight(1, 6, 1, 1)]), 6)])])


def tf2onnx_conv():
    """tf2onnx: BatchNorm decomposed into a per-channel Mul and Add after a bias-less Conv."""
    b = GraphBuilder()
    c = b.conv(b.input("x", [1, 4, 8, 8]), 4, 8, bias=False)
    return b.model([b.op("Relu", [b.op("Add", [b.op("Mul", [c, b.weight(8, 1, 1)]), b.weight(8, 1, 1)])])])


@pytest.mark.parametrize(("build", "left"), [(paddle_decoder, ["ConvTranspose", "Relu"]),
                                             (tf2onnx_conv, ["Conv", "Relu"])])  # fmt: skip
def test_batchnorm_in_any_exporters_form_is_folded(build, left):
    proto = build()
    cleaned, applied = clean_graph(onnx_graph.from_proto(proto))
    assert op_types(cleaned) == left and len(applied) == 2
    assert agreement(proto, cleaned).within()
