"""ONNX models this project did not produce, shipped inside a PyPI wheel that ``install.sh`` installs.

They are the "foreign" models of the benchmarks: PaddleOCR's text detector, recogniser and direction
classifier from the ``rapidocr-onnxruntime`` wheel, exported by Paddle2ONNX with dynamic inputs. A
name here loads like a zoo name (``rlcompile graph ocr-det``) with the input shape below, which a
user's ``--input-shape`` may replace. Nothing is downloaded: the files are read where pip put them.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from rlcompile.errors import ModelError

WHEEL = "rapidocr-onnxruntime"


@dataclass(frozen=True)
class PackagedModel:
    filename: str
    input_name: str
    shape: tuple[int, ...]
    description: str

    @property
    def input_shape(self) -> str:
        """The shape as ``--input-shape`` takes it."""
        return f"{self.input_name}={','.join(map(str, self.shape))}"


PACKAGED: dict[str, PackagedModel] = {
    "ocr-det": PackagedModel("ch_PP-OCRv4_det_infer.onnx", "x", (1, 3, 320, 320),
                             "PaddleOCR v4 text detector (DBNet), rapidocr-onnxruntime wheel"),
    "ocr-rec": PackagedModel("ch_PP-OCRv4_rec_infer.onnx", "x", (1, 3, 48, 320),
                             "PaddleOCR v4 text recogniser (SVTR/CRNN), rapidocr-onnxruntime wheel"),
    "ocr-cls": PackagedModel("ch_ppocr_mobile_v2.0_cls_infer.onnx", "x", (1, 3, 48, 192),
                             "PaddleOCR v2 text direction classifier, rapidocr-onnxruntime wheel"),
}  # fmt: skip


def packaged_path(name: str) -> Path:
    """Where the wheel put the model's file; a one-line error when the wheel is missing."""
    entry = PACKAGED[name]
    try:
        files = [f for f in importlib.metadata.files(WHEEL) or [] if f.name == entry.filename]
    except importlib.metadata.PackageNotFoundError:
        files = []
    if not files:
        raise ModelError(f"{name}: {entry.filename} is not installed (install.sh installs {WHEEL})")
    return Path(str(files[0].locate()))
