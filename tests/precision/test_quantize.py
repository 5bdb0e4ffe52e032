"""int8 per group: what is quantized, each runtime's placement, plans derived from the all-int8 model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from rlcompile.models import load_model
from rlcompile.precision.quantize import CALIBRATION_METHODS, Quantizer, placement_for
from tests.precision.builders import attention_block, attention_like, conv_relu_conv, residual_block


def test_int8_goes_where_asked_and_calibrates_once(tmp_path: Path):
    from rlcompile.layer.group_table import group_model

    grouped = group_model(load_model("lenet5"))
    feeds = [{"input": np.random.default_rng(i).standard_normal((1, 1, 32, 32)).astype(np.float32)} for i in range(4)]
    quantizer = Quantizer(grouped.proto, feeds, tmp_path)
    first_conv = next(node.name for node in grouped.proto.graph.node if node.op_type == "Conv")
    one = quantizer.quantized([first_conv])
    assert quantizer.cache.is_file()
    quantizer.calibration = []  # a second plan must not calibrate again
    every = quantizer.quantized([node.name for node in grouped.proto.graph.node])
    count = lambda proto: sum(node.op_type == "DequantizeLinear" for node in proto.graph.node)  # noqa: E731
    assert 0 < count(one) < count(every)
    assert quantizer.quantized([]) is grouped.proto
    onnx.checker.check_model(every)
    assert len(list(tmp_path.glob("int8-*.onnx"))) == 2  # the plans' models wait on disk, not in memory
    quantizer.close()
    assert not list(tmp_path.glob("int8-*.onnx")) and quantizer.cache.is_file()


@pytest.mark.parametrize(("runtime", "quantized"), [("ort", {"x", "h"}), ("openvino", {"x"})])
def test_only_weighted_conv_and_matmul_are_quantized(tmp_path: Path, runtime: str, quantized: set[str]):
    from types import SimpleNamespace

    from rlcompile.precision.space import precision_units

    proto = attention_like()
    groups = [SimpleNamespace(name="a", nodes=["project", "turn"], outputs=["h", "ht"]),
              SimpleNamespace(name="b", nodes=["scores", "relu"], outputs=["y"])]  # fmt: skip
    units = precision_units(proto, groups)
    assert [(unit.group, unit.nodes, unit.macs, unit.companions) for unit in units] == [
        ("a", ("project",), 4 * 8 * 8, ())]  # fmt: skip
    feeds = [{"x": np.random.default_rng(i).standard_normal((4, 8)).astype(np.float32)} for i in range(4)]
    every = Quantizer(proto, feeds, tmp_path).quantized([node for unit in units for node in unit.nodes],
                                                        placement_for(runtime))  # fmt: skip
    # the weighted MatMul's input and weights (and its output where ONNX Runtime's kernels want it), nothing of the
    # attention MatMul's or the Relu's
    assert {node.input[0] for node in every.graph.node if node.op_type == "QuantizeLinear"} == quantized
    assert {node.name for node in every.graph.node if node.op_type == "DequantizeLinear"} == {
        f"{name}_DequantizeLinear" for name in quantized | {"W"}}


@pytest.mark.parametrize(("runtime", "quantized", "float_ops"),
                         [("ort", {"x", "r1", "p", "c2"}, ["Conv", "MaxPool", "Conv", "Add", "Add"]),
                          ("openvino", {"x", "r1", "p", "c2"}, ["Conv", "Relu", "MaxPool", "Conv", "Add", "Add"])])
def test_each_runtime_gets_its_placement(tmp_path: Path, runtime: str, quantized: set[str], float_ops: list[str]):
    """ONNX Runtime: every convolution's output quantized, the Relu folded into its range, the pooling left in
    float. OpenVINO: the convolutions' inputs alone, the max pooling in int8 (its input and output), the residual
    Add's inputs (the second convolution's output); never the bias Add's, nor an Add's output."""
    from rlcompile.precision.space import precision_units

    proto, groups = residual_block()
    units = precision_units(proto, groups)
    assert [(unit.group, unit.nodes, unit.companions) for unit in units] == [
        ("a", ("conv1",), ("relu1", "pool")), ("c", ("conv2",), ("residual",))]  # fmt: skip
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 4, 8, 8)).astype(np.float32)} for i in range(4)]
    quantizer = Quantizer(proto, feeds, tmp_path)
    model = quantizer.quantized([name for unit in units for name in (*unit.nodes, *unit.companions)],
                                placement_for(runtime))  # fmt: skip
    assert {node.input[0] for node in model.graph.node if node.op_type == "QuantizeLinear"} == quantized
    qdq = ("QuantizeLinear", "DequantizeLinear")
    assert [node.op_type for node in model.graph.node if node.op_type not in qdq] == float_ops
    other = "ort" if runtime == "openvino" else "openvino"
    quantizer.calibration = []  # one calibration serves both placements
    other_model = quantizer.quantized(["conv1"], placement_for(other))
    assert any(node.op_type == "QuantizeLinear" for node in other_model.graph.node)


def squeezed_at_opset_11(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with Unsqueeze/Squeeze pairs after its output, at opset 11 (their axes an attribute): onnx's converter
    to opset 13 writes each one's axes as a Constant node without a name, as on PaddleOCR's recogniser."""
    from onnx import helper

    output = proto.graph.output[0].name
    proto.graph.node.extend([helper.make_node("Unsqueeze", [output], ["u"], name="unsqueeze", axes=[0]),
                             helper.make_node("Squeeze", ["u"], ["s"], name="squeeze", axes=[0]),
                             helper.make_node("Unsqueeze", ["s"], ["u2"], name="unsqueeze2", axes=[4]),
                             helper.make_node("Squeeze", ["u2"], ["z"], name="squeeze2", axes=[4])])  # fmt: skip
    proto.graph.output[0].name = "z"
    del proto.opset_import[:]
    proto.opset_import.append(helper.make_opsetid("", 11))
    proto.ir_version = 7
    return proto


@pytest.mark.parametrize("older_opset", [False, True])
def test_a_plan_of_some_groups_is_derived_from_the_model_of_all_as_the_quantizer_writes_it(tmp_path: Path,
                                                                                          older_opset: bool):
    """Also from a model raised from opset 11, whose converted Constants have no names: derived by name, one of them
    would stand for all, which OpenVINO cannot read."""
    from rlcompile.precision.quantize import derive
    from rlcompile.precision.space import precision_units
    from rlcompile.runtimes.ort import run_proto_on_each

    proto, groups = conv_relu_conv()
    proto = squeezed_at_opset_11(proto) if older_opset else proto
    units = precision_units(proto, groups)
    nodes = [frozenset((*unit.nodes, *unit.companions)) for unit in units]
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 4, 8, 8)).astype(np.float32)} for i in range(4)]
    quantizer = Quantizer(proto, feeds, tmp_path / "derived", quantizable=nodes[0] | nodes[1])
    direct = Quantizer(proto, feeds, tmp_path / "direct")
    openvino = placement_for("openvino")
    for chosen in nodes:
        derived = quantizer.quantized(chosen, openvino)
        assert derived == derive(quantizer.quantized(nodes[0] | nodes[1], openvino), quantizer.proto, chosen)
        onnx.checker.check_model(derived, full_check=True)
        for ours, theirs in zip(run_proto_on_each(derived, feeds), run_proto_on_each(direct.quantized(chosen, openvino),
                                                                                     feeds), strict=True):  # fmt: skip
            np.testing.assert_array_equal(ours[0], theirs[0])
    conv2 = next(node for node in quantizer.quantized(nodes[0], openvino).graph.node if node.name == "conv2")
    assert list(conv2.input) == ["r1", "W2", "B2"]  # the float group reads the float bias of the bias's name again
    everything = quantizer.quantized(nodes[0] | nodes[1], placement_for("ort"))  # the Relu is folded: no derivation
    assert derive(everything, quantizer.proto, nodes[1]) is None


@pytest.mark.parametrize("method", sorted(CALIBRATION_METHODS))
def test_nodes_touching_an_unbounded_range_stay_in_float(tmp_path: Path, method: str):
    """Whatever the calibration method: the histogram methods find no finite bins for an attention mask's fill, and
    leave it out of their histograms (an infinite range in the cache) rather than fail the calibration."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    zero, fill = (numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((0.0, "zero"), (-np.inf, "fill")))
    nodes = [helper.make_node("Greater", ["m", "zero"], ["keep"], name="keep"),
             helper.make_node("Where", ["keep", "zero", "fill"], ["bias"], name="bias"),
             helper.make_node("Add", ["x", "bias"], ["masked"], name="masked"),  # an attention mask's -inf: no range
             helper.make_node("MatMul", ["x", "w"], ["y"], name="y"),
             helper.make_node("Add", ["y", "masked"], ["z"], name="z")]  # fmt: skip
    graph = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4])
                                              for n in ("x", "m")],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])], [weights, zero, fill])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = [{"x": rng.standard_normal((1, 4)).astype(np.float32), "m": rng.standard_normal((1, 4)).astype(np.float32)}
             for _ in range(4)]  # fmt: skip
    quantizer = Quantizer(proto, feeds, tmp_path, method=method)
    quantizer.calibrate()
    assert quantizer.bounded(["masked", "y", "z"]) == ["y"]
    alone = quantizer.quantized(["masked"])  # nothing left to quantize: the float model
    assert not any(node.op_type == "QuantizeLinear" for node in alone.graph.node)
    lowered = quantizer.quantized(["y"])
    assert any(node.op_type == "QuantizeLinear" for node in lowered.graph.node)
    from rlcompile.runtimes.ort import run_proto

    assert np.all(np.isfinite(run_proto(lowered, feeds[0])[0][np.isfinite(run_proto(proto, feeds[0])[0])]))


def test_attention_runs_in_int8_with_the_groups_computing_its_keys_and_values(tmp_path: Path):
    """The scores MatMul goes with the group of the keys, the weighted values with that of the values, only under a
    recipe that asks; their queries, keys and values in symmetric int8, the Softmax's weights unsigned."""
    from rlcompile.precision.space import DEFAULT_RECIPE, Recipe, precision_units
    from rlcompile.runtimes.ort import run_proto_on_each

    proto, groups = attention_block()
    units = {unit.group: unit for unit in precision_units(proto, groups)}
    assert {name: unit.attention for name, unit in units.items()} == {
        "query": (), "key": ("scores",), "value": ("weighted",), "out": ()}  # fmt: skip
    assert units["key"].quantized(DEFAULT_RECIPE) == ("key",)
    attention = Recipe(attention=True)
    nodes = [name for unit in units.values() for name in unit.quantized(attention)]
    assert set(nodes) == {"query", "key", "value", "out", "scores", "weighted"}
    feeds = [{"x": np.random.default_rng(i).standard_normal((6, 8)).astype(np.float32)} for i in range(8)]
    quantizer = Quantizer(proto, feeds, tmp_path, quantizable=nodes)
    model = quantizer.quantized(nodes, placement_for("openvino"))
    zero_points = {tensor.name: tensor.data_type for tensor in model.graph.initializer}
    kinds = {node.input[0]: zero_points[node.input[2]] for node in model.graph.node if node.op_type == "QuantizeLinear"}
    signed, unsigned = onnx.TensorProto.INT8, onnx.TensorProto.UINT8
    assert kinds == {"x": unsigned, "q": signed, "k": signed, "v": signed, "p": unsigned, "o": unsigned}
    without = quantizer.quantized([name for unit in units.values() for name in unit.quantized(DEFAULT_RECIPE)],
                                  placement_for("openvino"))  # derived from the model of all: attention in float
    assert {node.input[0] for node in without.graph.node if node.op_type == "QuantizeLinear"} == {"x", "o"}
    reference = run_proto_on_each(proto, feeds)
    for plan in (model, without):
        for ours, fp32 in zip(run_proto_on_each(plan, feeds), reference, strict=True):
            assert np.linalg.norm(ours[0] - fp32[0]) < 0.1 * np.linalg.norm(fp32[0])


def test_openvino_quantizes_the_keys_before_their_swap_to_the_same_numbers(tmp_path: Path):
    """OpenVINO's placement quantizes the keys before the swap of their last two axes, per axis with one scale and
    zero point in every element (OpenVINO then keeps the quantization there); the outputs are those of the keys
    quantized after the swap, bit for bit; ONNX Runtime's placement leaves them after it."""
    from dataclasses import replace

    from rlcompile.precision.space import Recipe, precision_units
    from rlcompile.runtimes.ort import run_proto_on_each

    proto, groups = attention_block()
    nodes = [name for unit in precision_units(proto, groups) for name in unit.quantized(Recipe(attention=True))]
    feeds = [{"x": np.random.default_rng(i).standard_normal((6, 8)).astype(np.float32)} for i in range(8)]
    quantizer = Quantizer(proto, feeds, tmp_path, quantizable=nodes)
    openvino = placement_for("openvino")
    before = quantizer.quantized(nodes, openvino)
    after = quantizer.quantized(nodes, replace(openvino, keys_before_swap=False))

    def keys_path(model: onnx.ModelProto) -> list[str]:
        scores = next(node for node in model.graph.node if node.name == "scores")
        path, value = [], scores.input[1]
        while value != "k":
            node = next(n for n in model.graph.node if value in n.output)
            path.append(node.op_type)
            value = node.input[0]
        return path

    assert keys_path(before) == ["Transpose", "DequantizeLinear", "QuantizeLinear"]
    derived = quantizer.quantized([name for name in nodes if name != "out"], openvino)  # from the model of all
    assert keys_path(derived) == keys_path(before)
    assert keys_path(after) == ["DequantizeLinear", "QuantizeLinear", "Transpose"]
    scales = {tensor.name: onnx.numpy_helper.to_array(tensor) for tensor in before.graph.initializer}
    quantize = next(node for node in before.graph.node if node.op_type == "QuantizeLinear" and node.input[0] == "k")
    assert scales[quantize.input[1]].shape == (8,) and len(set(scales[quantize.input[1]].tolist())) == 1
    for ours, theirs in zip(run_proto_on_each(before, feeds), run_proto_on_each(after, feeds), strict=True):
        assert np.array_equal(ours[0], theirs[0])
    assert keys_path(quantizer.quantized(nodes, placement_for("ort")))[:3] == keys_path(after)


def test_ranges_set_at_run_time_write_ort_its_dynamic_quantization_and_openvino_only_int8_weights(tmp_path: Path):
    """ONNX Runtime gets DynamicQuantizeLinear before the chosen MatMul; OpenVINO, which quantizes a MatMul's
    activations itself where its weights are int8, the chosen MatMul's weights alone in int8 (MatMulNBits), the
    others left in float; it runs that model close to the float one, in fp32 and bf16 arithmetic."""
    from rlcompile import runtimes
    from rlcompile.precision.quantize import DYNAMIC
    from rlcompile.runtimes import RuntimeOptions
    from tests.precision.builders import outlier_block, outlier_samples

    proto, _ = outlier_block(channels=64)
    quantizer = Quantizer(proto, [], tmp_path, method=DYNAMIC)
    ort_model = quantizer.quantized(["query", "out"], placement_for("ort"))
    assert sum(node.op_type == "DynamicQuantizeLinear" for node in ort_model.graph.node) == 2
    model = quantizer.quantized(["query", "out"], placement_for("openvino"))
    assert not quantizer.cache.exists()  # nothing calibrated
    ops = {node.name: node.op_type for node in model.graph.node}
    assert sorted(name for name, op in ops.items() if op == "MatMulNBits") == ["out", "query"]  # the plan's names
    assert ops["key"] == "MatMul" and "QuantizeLinear" not in ops.values()
    stored = {tensor.name: tensor.data_type for tensor in model.graph.initializer}
    assert stored["Wq_Q8"] == stored["Wo_Q8"] == onnx.TensorProto.UINT8 and stored["Wk"] == onnx.TensorProto.FLOAT
    feeds = outlier_samples(4, channels=64)
    openvino = runtimes.create("openvino")
    reference = [openvino.compile(proto)([feed["x"]])[0] for feed in feeds]
    for precision in ("fp32", "bf16") if openvino.precisions()["bf16"] is None else ("fp32",):
        run = openvino.compile(model, RuntimeOptions(precision=precision))
        for feed, expected in zip(feeds, reference, strict=True):
            error = np.linalg.norm(run([feed["x"]])[0] - expected) / np.linalg.norm(expected)
            assert error < 0.05, precision
    quantizer.close()
    # a plan of fewer MatMuls is derived from the model of all, as the quantizer writes it
    from rlcompile.runtimes.ort import run_proto_on_each

    every = Quantizer(proto, [], tmp_path / "every", quantizable=["query", "key", "out"], method=DYNAMIC)
    derived = every.quantized(["query"], placement_for("openvino"))
    direct = Quantizer(proto, [], tmp_path / "direct", method=DYNAMIC).quantized(["query"], placement_for("openvino"))
    assert len(list((tmp_path / "every").glob("int8-*.onnx"))) == 2  # the model of all, then the derived one
    assert [(n.name, n.op_type) for n in derived.graph.node] == [(n.name, n.op_type) for n in direct.graph.node]
    for ours, theirs in zip(run_proto_on_each(derived, feeds), run_proto_on_each(direct, feeds), strict=True):
        np.testing.assert_array_equal(ours[0], theirs[0])
