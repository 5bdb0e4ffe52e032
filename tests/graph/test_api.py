"""optimize_graph end to end, and the verification that keeps only rewrites that agree."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from rlcompile.events import Decision, Event, Phase
from rlcompile.graph import onnx_graph, rules
from rlcompile.graph.api import GraphRequest, optimize_graph, verified
from rlcompile.graph.rules.base import StructuralRule
from rlcompile.graph.search import Rewrite
from rlcompile.measure import QUICK
from rlcompile.runtimes.ort import run_proto
from tests.graph.conftest import loaded
from tests.graph.test_search import inception_block


def test_optimize_graph_verifies_and_times_both_graphs():
    model = loaded(inception_block(), "block")
    events: list[Event] = []
    run = optimize_graph(model, GraphRequest(agent="greedy", max_steps=4, cost="sum", timing=QUICK), events.append)
    assert run.agreement.within() and run.kept_rewrites == len(run.result.rewrites) > 0
    decisions = [event for event in events if isinstance(event, Decision)]
    assert len(decisions) == 1 and decisions[0].kept == run.kept  # the verdict is reported once
    assert decisions[0].noise == run.verdict.noise and [e.phase for e in events if isinstance(e, Phase)] == [
        "search", "verify", "measure"]
    assert run.original_ms.median_ms > 0 and run.optimized_ms.median_ms > 0
    assert run.verdict is not None and run.kept == run.verdict.kept
    if run.kept:  # the rewrite measured faster beyond the noise: it is returned
        assert run.nodes_after < run.nodes_before
    else:  # otherwise the original is, unchanged
        assert run.proto is model.proto and run.nodes_after == run.nodes_before
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


def slow_and_fast_models():
    """The same function twice: ``Relu(x)``, and ``Relu(x) + 0 * sum(x @ W @ W @ W)`` (much more work)."""
    from onnx import TensorProto, helper, numpy_helper

    from rlcompile.models.onnx_model import LoadedModel, graph_inputs

    def build(slow: bool):
        nodes = [helper.make_node("Relu", ["x"], ["fast"])]
        initializers = []
        if slow:
            values = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
            weight = numpy_helper.from_array(values, "w")
            zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
            initializers = [weight, zero]
            nodes += [helper.make_node("MatMul", ["x", "w"], ["m1"]), helper.make_node("MatMul", ["m1", "w"], ["m2"]),
                      helper.make_node("MatMul", ["m2", "w"], ["m3"]), helper.make_node("ReduceSum", ["m3"], ["s"]),
                      helper.make_node("Mul", ["s", "zero"], ["nothing"]),
                      helper.make_node("Add", ["fast", "nothing"], ["y"])]  # fmt: skip
        else:
            nodes[0].output[0] = "y"
        value = helper.make_tensor_value_info
        graph = helper.make_graph(nodes, "slow" if slow else "fast", [value("x", TensorProto.FLOAT, [64, 512])],
                                  [value("y", TensorProto.FLOAT, [64, 512])], initializers)  # fmt: skip
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        return LoadedModel(graph.name, proto, graph_inputs(proto), "memory")

    return build(slow=True), build(slow=False)


def test_a_rewrite_is_kept_only_when_it_measures_faster_beyond_the_noise():
    from rlcompile.graph.api import judge

    slow, fast = slow_and_fast_models()
    feeds = fast.random_inputs(1)
    assert np.allclose(run_proto(slow.proto, feeds)[0], run_proto(fast.proto, feeds)[0])
    worse = judge(fast.proto, slow.proto, feeds, QUICK, threads=1)
    assert not worse.kept and worse.gain < 0 and "slower" in worse.reason() and "goes on" in worse.reason()
    better = judge(slow.proto, fast.proto, feeds, QUICK, threads=1)
    assert better.kept and better.gain > better.noise and better.to_dict()["kept"]
