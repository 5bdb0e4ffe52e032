"""Models the project did not produce: PaddleOCR exports shipped in the rapidocr-onnxruntime wheel.

They have dynamic batch and spatial dimensions, shape computations and opset 11/12: what users bring.
``install.sh`` installs the wheel without its dependencies; only its .onnx files are read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcompile import runtimes
from rlcompile.errors import DynamicShapeError
from rlcompile.models import load_model, tables_home
from rlcompile.models.zoo import cache_dir
from rlcompile.verify import compare_outputs
from tests.shipped import shipped_model


def test_foreign_dynamic_model_needs_input_shape() -> None:
    with pytest.raises(DynamicShapeError, match=r"x\[\?,3,\?,\?\] float32 .* --input-shape x=N,3,N,N"):
        load_model(str(shipped_model("ocr-cls")))


def test_packaged_model_loads_by_name_with_its_shape_or_the_users() -> None:
    shipped_model("ocr-cls")
    assert load_model("ocr-cls").inputs[0].shape == (1, 3, 48, 192)
    model = load_model("ocr-cls", {"x": (1, 3, 48, 96)})
    assert (model.name, model.inputs[0].shape) == ("ocr-cls", (1, 3, 48, 96))


def test_a_packaged_models_tables_go_to_the_cache_and_a_users_file_keeps_them_beside_it(tmp_path: Path) -> None:
    """A wheel's folder in site-packages is not the user's to write in (select wrote its table there once)."""
    source = shipped_model("ocr-cls")
    assert tables_home(load_model("ocr-cls")) == cache_dir()
    copy = tmp_path / "ocr-cls.onnx"
    copy.write_bytes(source.read_bytes())
    assert tables_home(load_model(str(copy), {"x": (1, 3, 48, 192)})) == tmp_path


@pytest.mark.parametrize(("name", "shape"), [("ocr-cls", (1, 3, 48, 192)), ("ocr-det", (1, 3, 96, 96))])
def test_foreign_model_is_folded_and_runs_the_same_on_both_backends(name: str, shape: tuple) -> None:
    model = load_model(str(shipped_model(name)), {"x": shape})
    assert "Shape" not in model.op_counts()
    inputs = model.random_inputs()
    reference = model.compile(runtimes.create("ort")).run(inputs)
    assert compare_outputs(reference, model.compile(runtimes.create("tvm")).run(inputs)).within()
