"""optimize_graph end to end, and the verification that keeps only rewrites that agree."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from rlcompile.backends.ort import run_proto
from rlcompile.graph import onnx_graph, rules
from rlcompile.graph.api import GraphRequest, optimize_graph, verified
from rlcompile.graph.rules.base import StructuralRule
from rlcompile.graph.search import Rewrite
from rlcompile.measure import QUICK
from tests.graph.conftest import loaded
from tests.graph.test_search import inception_block


def test_optimize_graph_verifies_and_times_both_graphs():
    model = loaded(inception_block(), "block")
    run = optimize_graph(model, GraphRequest(agent="greedy", max_steps=4, timing=QUICK))
    assert run.agreement.within() and run.kept_rewrites == len(run.result.rewrites) > 0
    assert run.original_ms.median_ms > 0 and run.optimized_ms.median_ms > 0
    assert run.nodes_after < run.nodes_before
    outputs = run_proto(run.proto, model.random_inputs(3))
    reference = run_proto(model.proto, model.random_inputs(3))
    assert np.allclose(outputs[0], reference[0], rtol=1e-4, atol=1e-5)
    assert run.to_dict()["search"]["steps"] <= 4


class NegateFirstConv(StructuralRule):
    """A deliberately wrong rule: flips the sign of a Conv's weights."""

    id = "negate_conv"
    description = "wrong on purpose"

    def matches(self, graph: ir.Graph):
        return [(node,) for node in graph if node.op_type == "Conv"][:1]

    def replace(self, graph: ir.Graph, nodes):
        (conv,) = nodes
        weights = onnx_graph.constant_array(conv.inputs[1])
        conv.replace_input_with(1, onnx_graph.add_constant(graph, -weights, "negated"))
        return []


def test_verification_cuts_the_sequence_before_a_wrong_rewrite():
    proto = inception_block()
    feeds = loaded(proto).random_inputs()
    start = onnx_graph.from_proto(proto)
    good = rules.create("pull_elementwise_through_concat")
    bad = NegateFirstConv()
    step1 = good.apply(start, good.locations(start)[0])
    step2 = bad.apply(step1, bad.locations(step1)[0])
    rewrites = [
        Rewrite(good.id, good.locations(start)[0].nodes, 0.0),
        Rewrite(bad.id, bad.locations(step1)[0].nodes, 0.0),
    ]
    final, kept, agreement = verified(start, step2, rewrites, run_proto(proto, feeds), feeds, [good, bad])
    assert kept == 1 and agreement.within()
    assert onnx_graph.graph_hash(final.graph) == onnx_graph.graph_hash(step1.graph)
