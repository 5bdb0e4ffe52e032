"""SmoothQuant: the float model unchanged, the outlier channels evened out, less int8 error where they are."""

from __future__ import annotations

import numpy as np

from rlcompile.precision.quantize import OPENVINO_PLACEMENT, Quantizer
from rlcompile.precision.smoothing import smooth, smoothable
from rlcompile.runtimes.ort import run_proto_on_each
from tests.precision.builders import attention_like, outlier_block, outlier_samples, residual_block

MATMULS = ["query", "key", "out"]


def relative_error(reference: list, outputs: list) -> float:
    pairs = zip(reference, outputs, strict=True)
    return float(np.mean([np.linalg.norm(o[0] - r[0]) / np.linalg.norm(r[0]) for r, o in pairs]))


def test_smoothing_keeps_the_float_model_and_moves_the_outliers_into_the_weights():
    proto, _ = outlier_block()
    samples = outlier_samples(16)
    smoothed = smooth(proto, samples, 0.8, MATMULS)
    reference, outputs = run_proto_on_each(proto, samples), run_proto_on_each(smoothed, samples)
    assert relative_error(reference, outputs) < 1e-5
    readers = {node.name: list(node.input) for node in smoothed.graph.node}
    assert readers["query"][0] == readers["key"][0] == "x/smoothed"  # one scale for the MatMuls that share x
    assert readers["residual"][1] == "x"  # the residual still adds x itself
    assert {node.name for node in proto.graph.node} < set(readers)  # every node keeps its name
    probe = smooth(proto, samples, 0.8, MATMULS)
    probe.graph.output.append(probe.graph.value_info.add())
    probe.graph.output[-1].name = "x/smoothed"
    channel_max = np.max([np.abs(o[1]).reshape(-1, 16).max(0) for o in run_proto_on_each(probe, samples)], axis=0)
    raw_max = np.max([np.abs(s["x"]).reshape(-1, 16).max(0) for s in samples], axis=0)
    spread = lambda values: values.max() / values.min()  # noqa: E731
    assert spread(channel_max) < spread(raw_max) / 5


def test_smoothing_lowers_the_int8_error_of_outlier_channels():
    proto, _ = outlier_block()
    calibration, held_out = outlier_samples(16), outlier_samples(8, seed=1)
    reference = run_proto_on_each(proto, held_out)
    errors = {}
    for alpha in (0.0, 0.8):
        source = smooth(proto, calibration, alpha, MATMULS) if alpha else proto
        quantized = Quantizer(source, calibration).quantized(MATMULS, OPENVINO_PLACEMENT)
        errors[alpha] = relative_error(reference, run_proto_on_each(quantized, held_out))
    assert errors[0.8] < 0.7 * errors[0.0], errors  # 0.017 against 0.030: the residual adds the outliers back


def test_only_matmuls_with_constant_weights_are_smoothed():
    attention = attention_like()
    assert list(smoothable(attention, ["project", "scores"])) == ["x"]  # scores multiplies two activations
    convolutions, _ = residual_block()
    assert smooth(convolutions, [], 0.8, ["conv1", "conv2"]) is convolutions
