"""Real tasks the project makes its own data for: the trained LeNet-5 on scikit-learn's digits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from rlcompile.errors import RlcompileError
from rlcompile.layer.precision.contract import top1
from rlcompile.models.tasks import lenet_digits, main


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
