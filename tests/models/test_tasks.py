"""Real tasks the project makes its own data for: the trained LeNet-5 on scikit-learn's digits, PaddleOCR's
detector on rendered pages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from rlcompile.errors import RlcompileError
from rlcompile.models.tasks import detection_error, lenet_digits, main, ocr_det_samples
from rlcompile.precision.contract import top1
from tests.shipped import shipped_model


def test_lenet_trained_on_digits_reads_the_held_out_ones_it_writes(tmp_path: Path) -> None:
    assert main(["lenet-digits", str(tmp_path), "--count", "200"]) == 0
    with np.load(tmp_path / "lenet-digits.npz") as data:
        assert set(data.files) == {"input", "label"}
        images, labels = data["input"], data["label"]
    assert images.shape == (200, 1, 32, 32) and labels.shape == (200,)
    session = ort.InferenceSession(str(tmp_path / "lenet-digits.onnx"), providers=["CPUExecutionProvider"])
    errors = [top1({"label": labels[i]}, [], session.run(None, {"input": images[i:i + 1]})) for i in range(200)]
    assert np.mean(errors) < 0.1  # a trained classifier, scored against the truth on digits it never saw


def test_a_count_the_digits_cannot_hold_out_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RlcompileError, match="--count"):
        lenet_digits(tmp_path, count=5000)


def test_the_detector_finds_the_lines_drawn_on_a_page_and_a_blank_map_finds_none() -> None:
    path = shipped_model("ocr-det")
    pages = ocr_det_samples(6, seed=1)
    assert pages["x"].shape == (6, 1, 3, 320, 320) and pages["boxes"].shape == (6, 4, 4)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for page, boxes in zip(pages["x"], pages["boxes"], strict=True):
        maps = session.run(None, {"x": page})
        assert detection_error({"boxes": boxes}, maps, maps) == 0.0  # every line found once, nothing else
        assert detection_error({"boxes": boxes}, maps, [np.zeros_like(maps[0])]) == 1.0
        one_line = np.zeros_like(maps[0])
        x0, y0, x1, y1 = boxes[0]
        one_line[..., y0 + 4:y1 - 4, x0 + 4:x1 - 4] = 1.0  # the first line alone: F1 = 2 / (2 + missed)
        lines = int((boxes[:, 0] >= 0).sum())
        assert detection_error({"boxes": boxes}, maps, [one_line]) == pytest.approx(1 - 2 / (2 + lines - 1))
