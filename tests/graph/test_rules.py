"""Every rule: applied at every location of a small graph built for it, checked against the original in
ONNX Runtime on random inputs; the graph it was applied to stays intact."""

from __future__ import annotations

import numpy as np
import pytest

from rlcompile.errors import RlcompileError
from rlcompile.graph import onnx_graph, rules
from rlcompile.graph.rules import Location, RuleError
from tests.graph.conftest import GraphBuilder, agreement, op_types


def conv_bn():
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    c = b.conv(x, 4, 8, bias=False)
    return b.model([b.batchnorm(c, 8)]), {"BatchNormalization": -1}


def conv_transpose_then(op_type: str, shape: tuple[int, ...] = (1, 6, 1, 1)):
    """Paddle2ONNX's decoder: a bias-less ConvTranspose, then its bias Add, or BatchNorm, or a per-channel Mul."""

    def build():
        b = GraphBuilder()
        c = b.conv_transpose(b.input("x", [1, 4, 8, 8]), 4, 6, bias=False)
        if op_type == "BatchNormalization":
            return b.model([b.batchnorm(c, 6)]), {op_type: -1}
        return b.model([b.op(op_type, [c, b.weight(*shape)])]), {op_type: -1}

    return build


def conv_then(op_type: str, shape: tuple[int, ...]):
    def build():
        b = GraphBuilder()
        c = b.conv(b.input("x", [1, 4, 8, 8]), 4, 8)
        return b.model([b.op(op_type, [c, b.weight(*shape)])]), {op_type: -1}

    return build


def parallel_convs(k1: int, k2: int):
    def build():
        b = GraphBuilder()
        x = b.input("x", [1, 4, 8, 8])
        return b.model([b.conv(x, 4, 6, k=k1), b.op("Relu", [b.conv(x, 4, 5, k=k2)])]), {"Conv": -1, "Split": 1}

    return build


def grouped_convs():
    b = GraphBuilder()
    y1 = b.conv(b.input("x1", [1, 4, 8, 8]), 4, 6)
    y2 = b.conv(b.input("x2", [1, 4, 8, 8]), 4, 6)
    return b.model([b.op("Add", [y1, y2])]), {"Conv": -1, "Concat": 1, "Split": 1}


def parallel_matmuls():
    b = GraphBuilder()
    x = b.input("x", [1, 5, 16])
    q, k, v = (b.op("MatMul", [x, b.weight(16, 8)]) for _ in range(3))
    return b.model([b.op("Add", [b.op("Add", [q, k]), v])]), {"MatMul": -1, "Split": 1}


def parallel_gemms():
    b = GraphBuilder()
    x = b.input("x", [2, 16])
    y1 = b.op("Gemm", [x, b.weight(8, 16), b.weight(8)], transB=1)
    y2 = b.op("Gemm", [x, b.weight(4, 16), b.weight(4)], transB=1)
    return b.model([y1, y2]), {"Gemm": -1, "Split": 1}


def concat_of(op_type: str):
    def build():
        b = GraphBuilder()
        branches = []
        for name, channels in (("a", 3), ("b", 5)):
            x = b.input(name, [1, channels, 4, 4])
            extra = [] if op_type == "Relu" else [b.weight(channels, 1, 1)]
            branches.append(b.op(op_type, [x, *extra]))
        return b.model([b.op("Concat", branches, axis=1)]), {op_type: -1}

    return build


def op_on_concat(op_type: str):
    def build():
        b = GraphBuilder()
        joined = b.op("Concat", [b.input("a", [1, 3, 4, 4]), b.input("b", [1, 5, 4, 4])], axis=1)
        extra = [] if op_type == "Relu" else [b.weight(1, 8, 1, 1)]
        return b.model([b.op(op_type, [joined, *extra])]), {op_type: 1}

    return build


def split_then_relu():
    b = GraphBuilder()
    parts = b.op("Split", [b.input("x", [1, 8, 4, 4]), b.const(np.array([3, 5], np.int64))], outputs=2, axis=1)
    return b.model([b.op("Relu", [p]) for p in parts]), {"Relu": -1}


def relu_then_split():
    b = GraphBuilder()
    relu = b.op("Relu", [b.input("x", [1, 8, 4, 4])])
    parts = b.op("Split", [relu, b.const(np.array([3, 5], np.int64))], outputs=2, axis=1)
    return b.model(parts), {"Relu": 1}


def split_concat():
    b = GraphBuilder()
    x = b.op("Relu", [b.input("x", [1, 8, 4, 4])])
    parts = b.op("Split", [x, b.const(np.array([3, 5], np.int64))], outputs=2, axis=1)
    return b.model([b.op("Sigmoid", [b.op("Concat", parts, axis=1)])]), {"Split": -1, "Concat": -1}


def conv_sum():
    b = GraphBuilder()
    y1 = b.conv(b.input("x", [1, 4, 8, 8]), 4, 6)
    y2 = b.conv(b.input("y", [1, 3, 8, 8]), 3, 6)
    return b.model([b.op("Relu", [b.op("Add", [y1, y2])])]), {"Conv": -1, "Concat": 1, "Add": -1}


def chain(op_type: str, rightward: bool, constants: bool):
    def build():
        b = GraphBuilder()
        a = b.input("a", [1, 3, 4, 4] if op_type != "MatMul" else [2, 3, 4])
        shape = (4, 4) if op_type == "MatMul" else (1, 3, 1, 1)
        second = b.weight(*shape) if constants else b.input("b", [2, 4, 4] if op_type == "MatMul" else [1, 3, 4, 4])
        third = b.weight(*shape)
        if rightward:
            y = b.op(op_type, [b.op(op_type, [a, second]), third])
        else:
            y = b.op(op_type, [a, b.op(op_type, [second, third])])
        change = -1 if constants and rightward else 0
        return b.model([y]), {op_type: change}

    return build


def hard_swish(swapped: bool):
    """Paddle2ONNX's hard-swish after a Conv: x * Clip(x + 3, 0, 6) / 6 (the Mul's operands either way)."""

    def build():
        b = GraphBuilder()
        x = b.conv(b.input("x", [1, 4, 8, 8]), 4, 8)
        three, low, high, six = (b.const(np.array(v, np.float32)) for v in (3.0, 0.0, 6.0, 6.0))
        clipped = b.op("Clip", [b.op("Add", [x, three]), low, high])
        product = b.op("Mul", [clipped, x] if swapped else [x, clipped])
        return b.model([b.op("Div", [product, six])]), {"Clip": -1, "Div": -1, "Add": -1, "HardSigmoid": 1}

    return build


def guarded_attention(mask_rows: int = 1):
    """``torch.onnx``'s attention with a boolean mask: Softmax(q k + Where(mask, 0, -inf)), NaN guarded."""

    def build():
        b = GraphBuilder()
        q, k, v = b.input("q", [1, 2, 4, 8]), b.input("k", [1, 2, 8, 4]), b.input("v", [1, 2, 4, 8])
        keep = b.op("Greater", [b.input("mask", [1, 1, mask_rows, 4]), b.const(np.array(0.0, np.float32))])
        fill = b.op("Where", [keep, b.const(np.array(0.0, np.float32)), b.const(np.array(-np.inf, np.float32))])
        weights = b.op("Softmax", [b.op("Add", [b.op("MatMul", [q, k]), fill])], axis=-1)
        guarded = b.op("Where", [b.op("IsNaN", [weights]), b.const(np.array(0.0, np.float32)), weights])
        out = b.op("Transpose", [b.op("MatMul", [guarded, v])], perm=[0, 2, 1, 3])
        return b.model([out]), {"IsNaN": -1, "ReduceMax": 1}

    return build


def turned_keys(scale: str | None = None):
    """The keys turned for the scores in one transpose (``torch.onnx``'s ``k.transpose``), scaled by ``scale``."""

    def build():
        b = GraphBuilder()
        q, k = b.input("q", [1, 2, 4, 8]), b.input("k", [1, 4, 2, 8])
        keys = b.op("Transpose", [k], perm=[0, 2, 3, 1])
        if scale is not None:
            keys = b.op(scale, [keys, b.const(np.array(0.42, np.float32))])
        return b.model([b.op("MatMul", [q, keys])]), {"Transpose": 1}

    return build


def mean_pooling(keepdims: int = 0):
    """``sentence-transformers``' mean pooling: the mask expanded to the tokens' shape, multiplied, summed, counted."""

    def build():
        b = GraphBuilder()
        tokens, mask = b.input("tokens", [1, 4, 8]), b.input("mask", [1, 4])
        column = b.op("Unsqueeze", [mask, b.const(np.array([-1], np.int64))])
        weights = b.op("Cast", [b.op("Expand", [column, b.const(np.array([1, 4, 8], np.int64))])], to=1)
        tokens_axis = b.const(np.array([1], np.int64))
        total = b.op("ReduceSum", [b.op("Mul", [tokens, weights]), tokens_axis], keepdims=keepdims)
        count = b.op("ReduceSum", [weights, tokens_axis], keepdims=keepdims)
        floor = b.const(np.array(1e-9, np.float32))
        return b.model([b.op("Div", [total, b.op("Clip", [count, floor])])]), {"Expand": -1}

    return build


CASES = {
    "fuse_conv_batchnorm": [conv_bn],
    "fuse_conv_mul": [conv_then("Mul", (8, 1, 1))],
    "fuse_conv_add": [conv_then("Add", (1, 8, 1, 1))],
    "fuse_convtranspose_batchnorm": [conv_transpose_then("BatchNormalization")],
    "fuse_convtranspose_mul": [conv_transpose_then("Mul", (6, 1, 1))],
    "fuse_convtranspose_add": [conv_transpose_then("Add")],
    "merge_parallel_conv": [parallel_convs(3, 3)],
    "merge_parallel_conv_enlarge": [parallel_convs(1, 3), parallel_convs(5, 3)],
    "merge_conv_grouped": [grouped_convs],
    "merge_parallel_matmul": [parallel_matmuls, parallel_gemms],
    "pull_elementwise_through_concat": [concat_of("Relu"), concat_of("Add"), concat_of("Mul")],
    "push_elementwise_into_concat": [op_on_concat("Relu"), op_on_concat("Mul")],
    "pull_elementwise_through_split": [split_then_relu],
    "push_elementwise_into_split": [relu_then_split],
    "eliminate_split_concat": [split_concat],
    "conv_linearity": [conv_sum],
    "reassociate_matmul_right": [chain("MatMul", True, True), chain("MatMul", True, False)],
    "reassociate_matmul_left": [chain("MatMul", False, False)],
    "reassociate_add_right": [chain("Add", True, True), chain("Add", True, False)],
    "reassociate_add_left": [chain("Add", False, False)],
    "reassociate_mul_right": [chain("Mul", True, True)],
    "reassociate_mul_left": [chain("Mul", False, False)],
    "hardswish_as_hardsigmoid": [hard_swish(False), hard_swish(True)],
    "unguard_attention": [guarded_attention(1), guarded_attention(4)],
    "split_key_transpose": [turned_keys(), turned_keys("Mul"), turned_keys("Div")],
    "drop_broadcast_expand": [mean_pooling(0), mean_pooling(1)],
}


def test_every_rule_has_a_case():
    assert set(CASES) == set(rules.RULE_IDS)


@pytest.mark.parametrize(
    ("rule_id", "build"), [(rule_id, build) for rule_id, builds in CASES.items() for build in builds]
)
def test_rule_applies_and_preserves_semantics(rule_id, build):
    proto, op_change = build()
    model = onnx_graph.from_proto(proto)
    before_hash, before_ops = onnx_graph.graph_hash(model.graph), op_types(model)
    rule = rules.create(rule_id)
    locations = rule.locations(model)
    assert locations, f"{rule_id} found nothing to rewrite"
    for location in locations:
        rewritten = rule.apply(model, location)
        result = agreement(proto, rewritten)
        assert result.within(), f"{rule_id} at {location}: {result}"
        assert onnx_graph.graph_hash(rewritten.graph) != before_hash
        assert all(onnx_graph.static_shape(v) is not None for n in rewritten.graph for v in n.outputs)
    assert onnx_graph.graph_hash(model.graph) == before_hash and op_types(model) == before_ops
    first = op_types(rule.apply(model, locations[0]))
    for op_type, change in op_change.items():
        assert first.count(op_type) - before_ops.count(op_type) == change, (op_type, first)


def test_locations_are_deterministic_and_stale_locations_are_refused():
    proto, _ = parallel_matmuls()
    model = onnx_graph.from_proto(proto)
    rule = rules.create("merge_parallel_matmul")
    assert rule.locations(model) == rule.locations(onnx_graph.from_proto(proto))
    assert len(rule.locations(model)) == 3  # q+k, q+v, k+v
    merged = rule.apply(model, rule.locations(model)[0])
    with pytest.raises(RuleError):
        rule.apply(merged, rule.locations(model)[0])
    with pytest.raises(RuleError):
        rule.apply(model, Location(("no such node",)))


def test_conditions_refuse_what_would_change_the_result():
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    c = b.conv(x, 4, 8)
    scaled = b.op("Mul", [c, b.weight(1, 8, 8, 8)])  # varies spatially: not a per-channel scale
    shared = b.op("Add", [c, b.weight(8, 1, 1)])  # conv output also read by the Mul above
    model = onnx_graph.from_proto(b.model([scaled, shared]))
    assert rules.create("fuse_conv_mul").locations(model) == []
    assert rules.create("fuse_conv_add").locations(model) == []
    different_strides = GraphBuilder()
    x = different_strides.input("x", [1, 4, 8, 8])
    y1 = different_strides.conv(x, 4, 4, strides=[2, 2])
    y2 = different_strides.conv(x, 4, 4)
    model = onnx_graph.from_proto(different_strides.model([y1, y2]))
    assert rules.create("merge_parallel_conv").locations(model) == []


def test_a_grouped_conv_transpose_is_left_as_it_is():
    b = GraphBuilder()
    c = b.conv_transpose(b.input("x", [1, 4, 8, 8]), 4, 6, bias=False, group=2)
    model = onnx_graph.from_proto(b.model([b.batchnorm(b.op("Mul", [c, b.weight(6, 1, 1)]), 6)]))
    assert rules.create("fuse_convtranspose_mul").locations(model) == []
    b = GraphBuilder()
    c = b.conv_transpose(b.input("x", [1, 4, 8, 8]), 4, 6, bias=False, group=2)
    model = onnx_graph.from_proto(b.model([b.batchnorm(c, 6)]))
    assert rules.create("fuse_convtranspose_batchnorm").locations(model) == []


def test_hard_swish_needs_its_exact_constants():
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    three, low, high, five = (b.const(np.array(v, np.float32)) for v in (3.0, 0.0, 6.0, 5.0))
    product = b.op("Mul", [x, b.op("Clip", [b.op("Add", [x, three]), low, high])])
    model = onnx_graph.from_proto(b.model([b.op("Div", [product, five])]))
    assert rules.create("hardswish_as_hardsigmoid").locations(model) == []


@pytest.mark.parametrize("mask_rows", [1, 4])
def test_unguarded_attention_gives_the_same_numbers_when_every_key_of_a_row_is_masked(mask_rows: int):
    import onnxruntime as ort

    proto, _ = guarded_attention(mask_rows)()
    rule = rules.create("unguard_attention")
    model = onnx_graph.from_proto(proto)
    rewritten = onnx_graph.to_proto(rule.apply(model, rule.locations(model)[0]))
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
             (("q", (1, 2, 4, 8)), ("k", (1, 2, 8, 4)), ("v", (1, 2, 4, 8)))}  # fmt: skip
    mask = np.ones((1, 1, mask_rows, 4), np.float32)
    mask[..., 0, :] = -1.0  # the first row (every row when the mask is one row) has no key
    mask[..., -1, 1:] = -1.0 if mask_rows > 1 else mask[..., -1, 1:]
    feeds["mask"] = mask
    before, after = (ort.InferenceSession(p.SerializeToString()).run(None, feeds)[0] for p in (proto, rewritten))
    assert np.array_equal(before, after) and not np.isnan(after).any()


def test_attention_without_the_exact_guard_is_left_as_it_is():
    b = GraphBuilder()
    q, k, v = b.input("q", [1, 2, 4, 8]), b.input("k", [1, 2, 8, 4]), b.input("v", [1, 2, 4, 8])
    keep = b.op("Greater", [b.input("mask", [1, 1, 1, 4]), b.const(np.array(0.0, np.float32))])
    fill = b.op("Where", [keep, b.const(np.array(0.0, np.float32)), b.const(np.array(-1e4, np.float32))])  # finite
    weights = b.op("Softmax", [b.op("Add", [b.op("MatMul", [q, k]), fill])], axis=-1)
    guarded = b.op("Where", [b.op("IsNaN", [weights]), b.const(np.array(0.0, np.float32)), weights])
    model = onnx_graph.from_proto(b.model([b.op("Relu", [b.op("MatMul", [guarded, v])])]))
    assert rules.create("unguard_attention").locations(model) == []


def test_unknown_rule_id_is_a_clear_error():
    with pytest.raises(RlcompileError, match="unknown rule 'nope'"):
        rules.create("nope")


def test_keys_turned_are_split_only_on_the_way_to_a_matmuls_second_input():
    """A turn read twice, read as a MatMul's first input, or scaled by a tensor that is not a scalar stays whole."""
    refused = []
    for case in ("shared", "first input", "tensor scale"):
        b = GraphBuilder()
        q, k = b.input("q", [1, 2, 4, 8]), b.input("k", [1, 4, 2, 8])
        keys = b.op("Transpose", [k], perm=[0, 2, 3, 1])
        if case == "shared":
            outputs = [b.op("MatMul", [q, keys]), b.op("Relu", [keys])]
        elif case == "first input":
            outputs = [b.op("MatMul", [keys, b.input("w", [1, 2, 4, 8])])]
        else:
            outputs = [b.op("MatMul", [q, b.op("Mul", [keys, b.weight(1, 2, 8, 4)])])]
        refused.append(rules.create("split_key_transpose").locations(onnx_graph.from_proto(b.model(outputs))))
    assert refused == [[], [], []]


def test_an_expand_is_kept_where_a_reader_needs_the_broadcast_made():
    """Read by a graph output, summed over the axis it broadcast, or passed on to an output through an element-wise
    operator: the Expand stays."""
    refused = []
    for case in ("output", "sum over it", "passed on"):
        b = GraphBuilder()
        tokens, mask = b.input("tokens", [1, 4, 8]), b.input("mask", [1, 4, 1])
        expanded = b.op("Expand", [mask, b.const(np.array([1, 4, 8], np.int64))])
        if case == "output":
            outputs = [b.op("Mul", [tokens, expanded]), expanded]
        elif case == "sum over it":
            outputs = [b.op("ReduceSum", [expanded, b.const(np.array([2], np.int64))], keepdims=0)]
        else:
            outputs = [b.op("Mul", [b.op("Relu", [expanded]), b.input("rows", [1, 4, 1])])]
        refused.append(rules.create("drop_broadcast_expand").locations(onnx_graph.from_proto(b.model(outputs))))
    assert refused == [[], [], []]
