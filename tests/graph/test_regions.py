"""Regions ORT optimises together, and the cost models that time them: ``region`` and ``context``."""

from __future__ import annotations

import json

import onnx
import pytest

from rlcompile.graph import onnx_graph, regions, rules
from rlcompile.graph.cost import ContextCostModel, OperatorCostModel, RegionCostModel, subgraph_with_feeds
from rlcompile.runtimes.ort import run_proto
from tests.graph.conftest import GraphBuilder


def residual_block():
    """Conv -> Add(residual) -> Relu, and a Conv whose output two Convs read (nothing fuses into it)."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 16, 16])
    shared = b.conv(x, 8, 8)
    left, right = b.conv(shared, 8, 8), b.conv(shared, 8, 8)
    return b.model([b.op("Relu", [b.op("Add", [left, right])])])


def wasteful_merge_block():
    """A 1x1 conv with many channels next to a 5x5 with few: enlarging the 1x1 to 5x5 costs ~10x its FLOPs."""
    b = GraphBuilder()
    x = b.input("x", [1, 32, 28, 28])
    wide = b.op("Relu", [b.conv(x, 32, 96, k=1)])
    narrow = b.op("Relu", [b.conv(x, 32, 4, k=5)])
    return b.model([b.op("Concat", [wide, narrow], axis=1)])


def test_elementwise_readers_join_the_region_of_what_feeds_them():
    model = onnx_graph.from_proto(residual_block())
    shapes = ["+".join(node.op_type for node in region) for region in regions.partition(model)]
    assert shapes == ["Conv", "Conv+Add+Relu", "Conv"]  # the shared Conv feeds two Convs: nothing fuses into it


def test_a_region_runs_alone_with_its_boundary_values_as_outputs():
    model = onnx_graph.from_proto(residual_block())
    fused = regions.partition(model)[1]
    proto, feeds = subgraph_with_feeds(fused, dict(model.graph.opset_imports))
    onnx.checker.check_model(proto)
    assert [value.name for value in proto.graph.output] == ["v2_0"]  # the Relu's output only
    assert len(run_proto(proto, feeds)) == 1 and set(feeds) == {"input0", "input1_1"}


def test_region_cost_times_each_fusion_unit_once_and_shares_operator_keys_with_the_sum(tmp_path):
    cache = tmp_path / "costs.json"
    model = onnx_graph.from_proto(residual_block())
    region = RegionCostModel(cache_file=cache)
    assert region.graph_cost(model) > 0 and not region.failures
    assert region.measured == 2  # the three lone-Conv shapes are one key, and the fused region
    region.save()
    keys = json.loads(cache.read_text())
    assert sum(key.startswith("region:Conv+Add+Relu") for key in keys) == 1
    plain = OperatorCostModel(cache_file=cache)
    plain.graph_cost(onnx_graph.from_proto(residual_block()))
    assert plain.measured == 2  # the Convs' key was there; Add and Relu alone were not


def merged(model):
    rule = rules.create("merge_parallel_conv_enlarge")
    return rule.apply(model, rule.locations(model)[0])


def test_changed_region_is_the_rewrite_with_the_same_neighbours_on_both_sides():
    parent = onnx_graph.from_proto(wasteful_merge_block())
    child = merged(parent)
    assert onnx_graph.parent(child) is parent
    before, after = regions.changed_region(parent, child)
    unchanged = {node.name for node in before} & {node.name for node in after}
    assert {node.op_type for node in before if node.name not in unchanged} == {"Conv"}
    assert sorted(node.op_type for node in after if node.name not in unchanged) == ["Conv", "Split"]
    assert sorted(parent_node.op_type for parent_node in before if parent_node.name in unchanged) == ["Relu", "Relu"]


def test_context_cost_adds_the_timed_difference_to_the_parents_cost(tmp_path):
    costs = ContextCostModel(cache_file=tmp_path / "costs.json")
    parent = onnx_graph.from_proto(wasteful_merge_block())
    start = costs.graph_cost(parent)
    child = merged(parent)
    assert costs.graph_cost(child) > 1.5 * start  # the 1x1 branch now pays a 5x5 kernel
    assert costs.graph_cost(onnx_graph.clone(child)) == pytest.approx(costs.graph_cost(child))
    assert any(key.startswith("graph:") for key in costs.costs)  # the start graph was timed whole
