"""Real tasks the project makes its own data for: the trained LeNet-5 on scikit-learn's digits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from rlcompile.errors import RlcompileError
from rlcompile.layer.precision.contract import top1
from rlcompile.models.tasks import lenet_digits, main


def test_lenet_trained_on_digits_reads_the_held_out_ones(tmp_path: Path) -> None:
    samples = lenet_digits(tmp_path, count=200, seed=0)
    assert samples["input"].shape == (200, 1, 32, 32) and samples["label"].shape == (200,)
    session = ort.InferenceSession(str(tmp_path / "lenet-digits.onnx"), providers=["CPUExecutionProvider"])
    errors = [top1({"label": samples["label"][i]}, [], session.run(None, {"input": samples["input"][i:i + 1]}))
              for i in range(200)]  # fmt: skip
    assert np.mean(errors) < 0.1  # a trained classifier, scored against the truth on digits it never saw


def test_the_command_writes_model_and_samples_and_refuses_a_bad_count(tmp_path: Path) -> None:
    assert main(["lenet-digits", str(tmp_path), "--count", "50"]) == 0
    assert (tmp_path / "lenet-digits.onnx").exists()
    with np.load(tmp_path / "lenet-digits.npz") as data:
        assert set(data.files) == {"input", "label"} and len(data["label"]) == 50
    with pytest.raises(RlcompileError, match="--count"):
        lenet_digits(tmp_path, count=5000)
