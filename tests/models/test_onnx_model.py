"""Loading users' ONNX files: shape overrides, dynamic inputs, folding and unreadable files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from rlcompile.errors import DynamicShapeError, ModelError
from rlcompile.models import load_model, parse_input_shapes
from rlcompile.models.onnx_model import parse_input_shape
from rlcompile.verify import compare_outputs


@pytest.mark.parametrize(
    ("text", "expected"),
    [("x=1,3,224,224", ("x", (1, 3, 224, 224))), ("input:1x3x8x8", ("input", (1, 3, 8, 8))),
     ("a.b/c=2", ("a.b/c", (2,)))],
)  # fmt: skip
def test_parse_input_shape(text: str, expected: tuple) -> None:
    assert parse_input_shape(text) == expected


@pytest.mark.parametrize("text", ["x", "x=", "=1,2", "x=1,a", "x=0,3", "x=-1", "x=1,x", "x=1,,2"])
def test_parse_input_shape_rejects_malformed(text: str) -> None:
    with pytest.raises(ModelError, match="bad --input-shape"):
        parse_input_shape(text)


def test_input_shape_given_twice_is_refused() -> None:
    with pytest.raises(ModelError, match="twice"):
        parse_input_shapes(["x=1", "x=2"])


def test_dynamic_model_is_refused_with_the_input_and_its_dims(dynamic_conv_model: Path) -> None:
    with pytest.raises(DynamicShapeError) as raised:
        load_model(str(dynamic_conv_model))
    message = str(raised.value)
    assert "x[batch,3,height,width]" in message and "--input-shape x=N,3,N,N" in message
    assert "\n" not in message


def test_dynamic_model_with_input_shape_is_static_folded_and_equivalent(dynamic_conv_model: Path) -> None:
    model = load_model(str(dynamic_conv_model), {"x": (2, 3, 8, 8)})
    assert model.inputs[0].shape == (2, 3, 8, 8) and model.inputs[0].is_static
    assert "Shape" not in model.op_counts()  # the shape computation was folded away
    assert any("folded" in note for note in model.notes)
    # the runtimes run the model as given natively, its input fixed to the shape asked for
    given = model.native_proto
    assert given is model.given and "Shape" in {node.op_type for node in given.graph.node}
    assert [d.dim_value for d in given.graph.input[0].type.tensor_type.shape.dim] == [2, 3, 8, 8]

    from rlcompile.runtimes.ort import run_proto

    feeds = model.random_inputs(seed=3)
    original = onnx.load(str(dynamic_conv_model))
    agreement = compare_outputs(run_proto(original, feeds), run_proto(model.proto, feeds))
    assert agreement.max_abs == 0.0
    assert run_proto(model.proto, feeds)[0].shape == (2, 8 * 8 * 8)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [({"y": (1, 3, 8, 8)}, "has inputs: x"), ({"x": (1, 3, 8)}, "has 3 dims"),
     ({"x": (1, 4, 8, 8)}, "sets dim 1 to 4, but the model fixes it to 3")],
)  # fmt: skip
def test_bad_overrides_are_refused(dynamic_conv_model: Path, shapes: dict, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        load_model(str(dynamic_conv_model), shapes)


def test_static_user_model_loads_unchanged(static_matmul_model: Path) -> None:
    model = load_model(str(static_matmul_model))
    assert model.name == "static_matmul" and model.notes == [] and model.native_proto is model.proto
    assert model.proto.graph == onnx.load(str(static_matmul_model)).graph


@pytest.mark.parametrize("kind", ["missing", "garbage", "directory", "not-a-zoo-name"])
def test_unreadable_models_give_one_line_errors(kind: str, tmp_path: Path, garbage_file: Path) -> None:
    spec = {"missing": str(tmp_path / "nope.onnx"), "garbage": str(garbage_file), "directory": str(tmp_path),
            "not-a-zoo-name": "resnet1000"}[kind]  # fmt: skip
    with pytest.raises(ModelError) as raised:
        load_model(spec)
    assert "\n" not in str(raised.value)


def test_random_inputs_are_reproducible_and_typed() -> None:
    model = load_model("bert_tiny")
    first, second, other = model.random_inputs(0), model.random_inputs(0), model.random_inputs(1)
    assert set(first) == {"input_ids", "attention_mask"}
    assert all(np.array_equal(first[k], second[k]) for k in first)
    assert not all(np.array_equal(first[k], other[k]) for k in first)
    assert first["input_ids"].dtype == np.int64 and set(np.unique(first["input_ids"])) <= {0, 1}


def test_static_shapes_hold_the_initializers_and_only_the_values_whose_every_dimension_is_known(
    dynamic_conv_model: Path,
) -> None:
    from rlcompile.kernel.tasks import conv_shapes
    from rlcompile.models.onnx_model import static_shapes

    proto = onnx.load(str(dynamic_conv_model))
    shapes = static_shapes(proto)
    assert shapes["weight"] == (8, 3, 3, 3) and shapes["zero"] == ()
    assert not {"x", "conv", "relu", "y"} & set(shapes)  # a batch or a size that is a name: not static
    assert conv_shapes(proto) == []  # no workload from a convolution of unknown size
    folded = load_model(str(dynamic_conv_model), parse_input_shapes(["x=1,3,16,16"])).proto
    assert static_shapes(folded)["conv"] == (1, 8, 16, 16)
    assert [(c.batch, c.in_channels, c.height) for c in conv_shapes(folded)] == [(1, 3, 16)]
