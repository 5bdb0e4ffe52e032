"""Models the project did not produce: PaddleOCR exports shipped in the rapidocr-onnxruntime wheel.

They have dynamic batch and spatial dimensions, shape computations and opset 11/12: what users bring.
``install.sh`` installs the wheel without its dependencies; only its .onnx files are read.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from rlcompile import backends
from rlcompile.errors import DynamicShapeError
from rlcompile.models import load_model
from rlcompile.verify import compare_outputs


def shipped_model(stem: str) -> Path:
    try:
        files = importlib.metadata.files("rapidocr-onnxruntime") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("rapidocr-onnxruntime is not installed (install.sh installs it)")
    for file in files:
        if file.name == f"{stem}.onnx":
            return Path(str(file.locate()))
    pytest.skip(f"{stem}.onnx not in the installed wheel")


def test_foreign_dynamic_model_needs_input_shape() -> None:
    with pytest.raises(DynamicShapeError, match=r"x\[\?,3,\?,\?\] float32 .* --input-shape x=N,3,N,N"):
        load_model(str(shipped_model("ch_ppocr_mobile_v2.0_cls_infer")))


@pytest.mark.parametrize(
    ("stem", "shape"),
    [("ch_ppocr_mobile_v2.0_cls_infer", (1, 3, 48, 192)), ("ch_PP-OCRv4_det_infer", (1, 3, 96, 96))],
)
def test_foreign_model_is_folded_and_runs_the_same_on_both_backends(stem: str, shape: tuple) -> None:
    model = load_model(str(shipped_model(stem)), {"x": shape})
    assert "Shape" not in model.op_counts()
    inputs = model.random_inputs()
    reference = backends.create("ort").prepare(model).run(inputs)
    assert compare_outputs(reference, backends.create("tvm").prepare(model).run(inputs)).within()
