"""Models as users bring them, built here: integer inputs, several inputs and outputs, quantised operators,
weights in external data, opsets 11 to 21, and a model whose shapes cannot be folded.

Every ONNX Runtime path accepts each of them; TVM paths either run them or refuse in one line that
names the operator or the step that failed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, version_converter

from rlcompile.cli import main
from rlcompile.models import load_model

RNG = np.random.default_rng(7)


def weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def save(graph: onnx.GraphProto, path: Path, opset: int = 17, **options) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path), **options)
    return path


def conv_graph(name: str) -> onnx.GraphProto:
    """Conv -> Relu -> Flatten -> Gemm: a small CNN head every library runs."""
    return helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Flatten", ["r"], ["f"]), helper.make_node("Gemm", ["f", "g", "gb"], ["y"])],
        name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        initializer=[weight("w", 4, 3, 3, 3), weight("g", 256, 10), weight("gb", 10)],
    )  # fmt: skip


def integer_inputs(folder: Path) -> Path:
    """Token ids (int64) into an embedding table, averaged: an input that is not a float."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"]), helper.make_node("ReduceMean", ["e"], ["y"], axes=[1])],
        "integer_inputs", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 8])], initializer=[weight("table", 2, 8)],
    )  # fmt: skip
    return save(graph, folder / "integer_inputs.onnx", opset=13)


def several_inputs_and_outputs(folder: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["sum"]),
         helper.make_node("Tanh", ["sum"], ["y1"]), helper.make_node("Mul", ["m", "b"], ["y2"])],
        "several_io", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 8]),
                       helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2, 4])], initializer=[weight("w", 8, 4)],
    )  # fmt: skip
    return save(graph, folder / "several_io.onnx")


def quantised(folder: Path) -> Path:
    """ONNX Runtime's dynamic quantisation of the CNN head: DynamicQuantizeLinear, ConvInteger, MatMulInteger."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    plain = save(conv_graph("quantised"), folder / "plain.onnx")
    quantize_dynamic(str(plain), str(folder / "quantised.onnx"), weight_type=QuantType.QUInt8)
    return folder / "quantised.onnx"


def external_data(folder: Path) -> Path:
    """Weights in a side file, as models over protobuf's 2 GB limit must be saved."""
    return save(conv_graph("external_data"), folder / "external_data.onnx", save_as_external_data=True,
                all_tensors_to_one_file=True, location="external_data.bin", size_threshold=0)  # fmt: skip


def at_opset(opset: int):
    def build(folder: Path) -> Path:
        model = helper.make_model(conv_graph(f"opset{opset}"), opset_imports=[helper.make_opsetid("", 11)],
                                  ir_version=8)  # fmt: skip
        converted = version_converter.convert_version(model, opset)
        converted.ir_version = 8 if opset < 21 else 10
        onnx.checker.check_model(converted)
        onnx.save(converted, str(folder / f"opset{opset}.onnx"))
        return folder / f"opset{opset}.onnx"

    return build


MODELS = {
    "integer inputs": integer_inputs,
    "several inputs and outputs": several_inputs_and_outputs,
    "quantised operators": quantised,
    "external-data weights": external_data,
    **{f"opset {opset}": at_opset(opset) for opset in (11, 13, 17, 21)},
}
#: Operators TVM's Relax frontend has no converter for, named in its one-line refusal.
TVM_UNSUPPORTED = {"quantised operators": "ConvInteger"}


def cli(*argv: str) -> int:
    return main([str(part) for part in argv])


@pytest.mark.parametrize("kind", list(MODELS))
def test_onnx_runtime_paths_accept_the_model(kind: str, tmp_path: Path, capsys) -> None:
    path = MODELS[kind](tmp_path)
    # short blocks: what is checked is that each path takes the model, not how it times (a tiny model's calls are
    # microseconds, and 20 ms blocks of them measure as steadily as the default 0.1 s ones)
    brief = ["--quick", "--min-time", "0.02"]
    assert cli("run", path, *brief) == 0
    assert cli("graph", path, "--agent", "greedy", "--steps", "5", *brief, "-o", tmp_path / "g.onnx") == 0
    assert cli("select", path, "--agent", "greedy", "--runtimes", "ort,openvino", "--threads", "1", *brief,
               "-o", tmp_path / "plan", "--table-dir", tmp_path / "tables") == 0  # fmt: skip
    assert cli("run", tmp_path / "plan", *brief) == 0
    assert "DISAGREES" not in capsys.readouterr().out


@pytest.mark.parametrize("kind", list(MODELS))
def test_tvm_paths_run_the_model_or_name_what_stops_them(kind: str, tmp_path: Path, capsys) -> None:
    path = MODELS[kind](tmp_path)
    status = cli("compare", path, "--runtimes", "ort,tvm", "--quick")
    captured = capsys.readouterr()
    if kind in TVM_UNSUPPORTED:
        assert status == 2 and TVM_UNSUPPORTED[kind] in captured.err and captured.err.count("\n") == 1
    else:
        assert status == 0 and "yes" in captured.out, captured


def test_a_model_whose_fold_fails_runs_in_ort_and_tvm_folds_it_with_ort(dynamic_conv_model: Path, monkeypatch,
                                                                        capsys) -> None:  # fmt: skip
    """onnxslim failing on a user's model is a fault the tests cannot cause on demand, so it is injected."""
    import onnxslim

    def broken_slim(*args, **kwargs):
        raise RuntimeError("simulated onnxslim failure")

    monkeypatch.setattr(onnxslim, "slim", broken_slim)
    model = load_model(str(dynamic_conv_model), {"x": (1, 3, 8, 8)})
    assert model.fold_failure and "simulated onnxslim failure" in model.fold_failure
    assert any(node.op_type == "Shape" for node in model.proto.graph.node)  # kept as it is
    assert cli("compare", dynamic_conv_model, "--input-shape", "x=1,3,8,8", "--runtimes", "ort,tvm", "--quick") == 0
    assert "yes" in capsys.readouterr().out


def test_optimize_goes_on_without_the_kernel_level_when_tvm_cannot_import_the_model(tmp_path: Path) -> None:
    import json

    path = quantised(tmp_path)
    output = tmp_path / "opt"
    # a budget whose kernel share passes KERNEL_FLOOR_S, so that the stage starts and meets TVM's refusal
    assert cli("optimize", path, "-o", output, "--levels", "kernel,layer", "--budget", "150s", "--runtimes",
               "ort,openvino", "--threads", "1") == 0  # fmt: skip
    manifest = json.loads((output / "manifest.json").read_text())
    assert "ConvInteger" in manifest["optimize"]["stages"]["kernel"]["skipped"]
    assert "tvm" not in manifest["optimize"]["stages"]["layer"]["libraries"]
    assert "skipped" in (output / "report.md").read_text()
