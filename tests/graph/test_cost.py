"""The per-operator cost model: keys, folding, the disk cache, and the whole-graph mode."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlcompile.errors import RlcompileError
from rlcompile.graph import onnx_graph
from rlcompile.graph.cost import MeasuredCostModel, OperatorCostModel, create, operator_key
from tests.graph.conftest import GraphBuilder, loaded


def two_convs():
    b = GraphBuilder()
    x = b.input("x", [1, 4, 16, 16])
    y = b.op("Relu", [b.conv(x, 4, 8)])
    folded = b.op("Mul", [b.weight(8, 1, 1), b.weight(8, 1, 1)])  # constant-only: ORT folds it
    return b.model([b.op("Add", [b.conv(y, 8, 8), folded])])


def test_sum_of_operator_times_is_cached_on_disk(tmp_path):
    proto = two_convs()
    model = onnx_graph.from_proto(proto)
    cache = tmp_path / "costs.json"
    first = OperatorCostModel(cache_file=cache)
    cost = first.graph_cost(model)
    assert cost > 0 and first.measured == 4  # conv, relu, conv, add; the constant Mul costs nothing
    assert not first.failures
    first.save()
    stored = json.loads(cache.read_text())
    assert len(stored) == 4 and all(ms > 0 for ms in stored.values())
    second = OperatorCostModel(cache_file=cache)
    assert second.graph_cost(onnx_graph.from_proto(proto)) == pytest.approx(cost)
    assert second.measured == 0


def test_keys_tell_shapes_attributes_and_constness_apart():
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    a = b.conv(x, 4, 4)
    c = b.conv(x, 4, 4, strides=[2, 2])
    d = b.conv(b.input("y", [1, 4, 16, 16]), 4, 4)
    e = b.op("Conv", [x, b.input("w", [4, 4, 3, 3])], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    same = b.conv(x, 4, 4)
    model = onnx_graph.from_proto(b.model([a, c, d, e, same]))
    keys = [operator_key(node) for node in model.graph]
    assert len(set(keys)) == 4 and keys[0] == keys[4]


def test_reshape_targets_are_part_of_the_key():
    b = GraphBuilder()
    x = b.input("x", [2, 6])
    r1 = b.op("Reshape", [x, b.const(np.array([3, 4], np.int64))])
    r2 = b.op("Reshape", [x, b.const(np.array([4, 3], np.int64))])
    model = onnx_graph.from_proto(b.model([r1, r2]))
    first, second = (operator_key(node) for node in model.graph)
    assert first != second and "[3, 4]" in first


def test_measured_cost_times_the_whole_graph():
    proto = two_convs()
    model = onnx_graph.from_proto(proto)
    assert MeasuredCostModel(loaded(proto).random_inputs()).graph_cost(model) > 0
    with pytest.raises(RlcompileError, match="unknown cost model"):
        create("flops")
