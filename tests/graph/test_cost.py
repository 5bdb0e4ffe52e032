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


def test_fusion_aware_cost_frees_activations_ort_fuses_into_their_conv(tmp_path):
    from rlcompile.graph import rules
    from rlcompile.graph.cost import FusionAwareCostModel, fused_into_conv

    b = GraphBuilder()
    x = b.input("x", [1, 8, 12, 12])
    branches = [b.op("Relu", [b.conv(x, 8, 8)]) for _ in range(2)]
    model = onnx_graph.from_proto(b.model([b.op("Concat", branches, axis=1)]))
    relus = [node for node in model.graph if node.op_type == "Relu"]
    assert all(fused_into_conv(node) for node in relus)
    cache = tmp_path / "costs.json"
    plain, fused = OperatorCostModel(cache_file=cache), FusionAwareCostModel(cache_file=cache)
    opsets = dict(model.graph.opset_imports)
    relu_ms = sum(plain.node_cost(node, opsets) for node in relus)
    assert fused.graph_cost(model) == pytest.approx(plain.graph_cost(model) - relu_ms)
    merge = rules.create("merge_parallel_conv")
    merged = merge.apply(model, merge.locations(model)[0])  # Conv -> Split -> Relu: ORT cannot fuse any more
    assert not any(fused_into_conv(node) for node in merged.graph if node.op_type == "Relu")
    assert fused.graph_cost(merged) > fused.graph_cost(model) - 1e-9 or plain.graph_cost(merged) < plain.graph_cost(
        model
    )


def test_an_operator_input_of_unknown_shape_cannot_be_timed_alone_and_costs_nothing():
    import onnx_ir as ir

    from rlcompile.graph.cost import feed_for

    value = ir.Value(name="scale", type=ir.TensorType(ir.DataType.FLOAT))  # shape inference left it unknown
    with pytest.raises(ValueError, match="no static shape"):
        feed_for(value, np.random.default_rng(0))
