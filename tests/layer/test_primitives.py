"""Every primitive against ONNX Runtime's own kernel on layers it claims; what each one refuses."""

from __future__ import annotations

import numpy as np
import pytest

from rlcompile.layer.per_operator import primitives
from rlcompile.layer.per_operator.network import network_from_model
from rlcompile.verify import compare_outputs
from tests.graph.conftest import GraphBuilder, loaded


def layers_of(proto):
    return network_from_model(loaded(proto)).layers


def sample_layers():
    b = GraphBuilder()
    x = b.input("x", [1, 8, 12, 12])
    conv = b.conv(x, 8, 8)  # 3x3 pad 1
    strided = b.conv(conv, 8, 16, k=3, strides=[2, 2])
    pointwise = b.conv(strided, 16, 8, k=1)
    depthwise = b.op("Conv", [pointwise, b.weight(8, 1, 3, 3)], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8)
    relu = b.op("Relu", [depthwise])
    clip = b.op("Clip", [relu, b.const(np.array(0, np.float32)), b.const(np.array(6, np.float32))])
    added = b.op("Add", [clip, pointwise])
    pooled = b.op("MaxPool", [added], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    averaged = b.op("AveragePool", [pooled], kernel_shape=[2, 2], strides=[1, 1])
    joined = b.op("Concat", [averaged, averaged], axis=1)
    flat = b.op("Flatten", [b.op("GlobalAveragePool", [joined])])
    return b.model([b.op("Gemm", [flat, b.weight(10, 16), b.weight(10)], transB=1)])


CASES = [(layer, primitive) for layer in layers_of(sample_layers()) for primitive in primitives.candidates(layer)]


@pytest.mark.parametrize(
    ("layer", "primitive"), CASES, ids=[f"{layer.op_type}-{primitive.name}" for layer, primitive in CASES]
)
def test_primitive_matches_onnx_runtime(layer, primitive):
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(shape).astype(np.float32) for shape in layer.input_shapes]
    reference = primitives.create(primitives.DEFAULT).prepare(layer)(inputs)
    kernel = primitive.prepare(layer)
    outputs = kernel([primitives.convert(x, "nchw", primitive.layout) for x in inputs])
    outputs = [primitives.convert(np.asarray(y), primitive.layout, "nchw") for y in outputs]
    assert compare_outputs(reference, outputs).within(rtol=1e-4)


def test_every_library_is_exercised_and_refusals_are_honest():
    claimed = {primitive.name for _, primitive in CASES}
    expected = {"numpy:im2col", "numpy:im2row", "numpy:kn2row", "numpy:gemm", "torch:onednn", "torch:onednn_nhwc",
                "torch:im2col_blas", "torch:pool", "torch:pool_nhwc", "ort:basic", "ort:nchwc", "numpy:concat_nhwc",
                "numpy:elementwise", "numpy:elementwise_nhwc"}  # fmt: skip
    assert expected <= claimed
    depthwise = next(layer for layer in layers_of(sample_layers()) if layer.attribute("group", 1) == 8)
    names = {primitive.name for primitive in primitives.candidates(depthwise)}
    assert "torch:im2col_blas" not in names and "numpy:kn2row" not in names and "torch:onednn" in names


def test_layout_conversion_round_trips():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    nhwc = primitives.convert(x, "nchw", "nhwc")
    assert nhwc.shape == (2, 4, 5, 3) and nhwc.flags.c_contiguous
    assert np.array_equal(primitives.convert(nhwc, "nhwc", "nchw"), x)
    flat = np.ones((2, 3), np.float32)
    assert primitives.convert(flat, "nchw", "nhwc") is flat
