"""Fusion groups: anchors start groups, the rest joins its latest producer, the order stays topological."""

from __future__ import annotations

import pytest

from rlcompile.graph.cleanup import clean_model
from rlcompile.layer.groups import fusion_groups, name_nodes
from rlcompile.models import load_model
from tests.graph.conftest import GraphBuilder


def check_topological(proto, groups) -> None:
    """Every node in at most one group; every group input is a model input or an earlier group's output."""
    seen: set[str] = set()
    available = {value.name for value in proto.graph.input}
    for group in groups:
        assert not seen & set(group.nodes)
        seen |= set(group.nodes)
        assert set(group.inputs) <= available, group.name
        available |= set(group.outputs)
    assert {value.name for value in proto.graph.output} <= available


def test_resnet18_groups_keep_bias_activation_and_residual_with_their_convolution():
    proto = name_nodes(clean_model(load_model("resnet18")).proto)
    groups = fusion_groups(proto)
    check_topological(proto, groups)
    kinds = [group.describe() for group in groups]
    assert kinds.count("Conv+Add+Relu") == 8  # each residual block's second convolution
    assert kinds[0] == "Conv+Relu" and kinds[1] == "MaxPool" and kinds[-1] == "Gemm"
    assert all(group.op_types[0] in ("Conv", "MaxPool", "GlobalAveragePool", "Gemm") for group in groups)


def test_silu_and_hardswish_stay_with_their_convolution():
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    conv = b.conv(x, 4, 4)
    silu = b.op("Mul", [conv, b.op("Sigmoid", [conv])])
    swish = b.op("HardSwish", [b.conv(silu, 4, 4)])
    groups = fusion_groups(name_nodes(b.model([swish])))
    assert [group.describe() for group in groups] == ["Conv+Sigmoid+Mul", "Conv+HardSwish"]
    assert groups[0].outputs == groups[1].inputs


def test_an_operator_fed_only_by_model_inputs_starts_its_own_group():
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.input("y", [1, 4, 8, 8])
    added = b.op("Add", [x, y])
    out = b.op("Relu", [b.conv(added, 4, 4)])
    proto = name_nodes(b.model([out]))
    groups = fusion_groups(proto)
    check_topological(proto, groups)
    assert [group.describe() for group in groups] == ["Add", "Conv+Relu"]
    assert groups[0].inputs == ["x", "y"]


@pytest.mark.parametrize("name", ["googlenet", "bert_tiny", "mobilenet_v2"])
def test_zoo_groups_are_topological(name: str):
    proto = name_nodes(clean_model(load_model(name)).proto)
    groups = fusion_groups(proto)
    check_topological(proto, groups)
    assert len(groups) < len(proto.graph.node)


def test_name_nodes_makes_names_unique_and_keeps_named_models():
    b = GraphBuilder()
    x = b.input("x", [1, 2])
    proto = b.model([b.op("Relu", [b.op("Relu", [x])])])
    for node in proto.graph.node:
        node.name = "same"
    named = name_nodes(proto)
    assert len({node.name for node in named.graph.node}) == 2
    assert name_nodes(named) is named


def test_a_library_that_computes_another_shape_is_a_reason_not_a_crash():
    """A library computing a group's output with another shape (seen: a depthwise convolution after an explicit
    Pad, 110x110 instead of 112x112) is rejected for that group with the reason."""
    import numpy as np

    from rlcompile.layer.table import time_if_agrees
    from rlcompile.measure import QUICK

    reference = [np.zeros((1, 32, 112, 112), np.float32)]
    ms, why = time_if_agrees(lambda: (lambda: None, [np.zeros((1, 32, 110, 110), np.float32)]), reference, QUICK,
                             "ONNX Runtime")  # fmt: skip
    assert np.isnan(ms) and "output shape (1, 32, 110, 110), expected (1, 32, 112, 112)" in why


def repeated_layers() -> GraphBuilder:
    """Five Conv+Relu layers of 4 channels on 8x8 (each its own weights), a Conv to 8 channels, and two Reshapes that
    differ only in their target shape."""
    import numpy as np

    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    for _ in range(5):
        x = b.op("Relu", [b.conv(x, 4, 4)])
    x = b.op("Relu", [b.conv(x, 4, 8)])
    flat = b.op("Reshape", [b.op("LayerNormalization", [x, b.weight(8), b.weight(8)]),
                            b.const(np.array([1, 8, 64]))])  # fmt: skip
    wide = b.op("Reshape", [b.op("LayerNormalization", [x, b.weight(8), b.weight(8)]),
                            b.const(np.array([1, 64, 8]))])  # fmt: skip
    return b, [flat, wide]


def test_repeated_layers_are_one_kind_whatever_their_weights_and_another_shape_or_target_is_another():
    from rlcompile.layer.group_table import group_model
    from tests.graph.conftest import loaded

    b, outputs = repeated_layers()
    grouped = group_model(loaded(b.model(outputs)))
    kinds = [grouped.kinds[group.name] for group in grouped.groups]
    assert [group.describe() for group in grouped.groups] == ["Conv+Relu"] * 6 + ["LayerNormalization+Reshape"] * 2
    assert len(set(kinds[:5])) == 1  # the same layer with other weights
    assert kinds[5] != kinds[0]  # 8 output channels
    assert kinds[6] != kinds[7]  # a Reshape's target is part of what runs
