"""The accuracy contract: metrics, samples, tolerances, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlcompile.cli import main
from rlcompile.errors import RlcompileError
from rlcompile.precision.contract import (
    load_metric,
    read_samples,
    relative_l2,
    split_samples,
    top1,
    within_tolerance,
)
from tests.precision.counting import LENET_INPUT


def test_metrics_compare_with_fp32_or_with_labels():
    reference = [np.array([[0.1, 0.9, 0.0]])]
    assert relative_l2({}, reference, reference) == 0.0
    assert top1({}, reference, [np.array([[0.9, 0.1, 0.0]])]) == 1.0
    assert top1({"label": np.array(1)}, reference, reference) == 0.0
    assert top1({"label": np.array(2)}, reference, reference) == 1.0


def test_one_more_wrong_sample_in_a_hundred_is_within_a_tolerance_of_one_percent():
    # share-of-samples errors: 4 wrong of 100 against fp32's 3 is an excess of 0.010000000000000002 in floats
    assert within_tolerance(0.04 - 0.03, 0.01)
    assert not within_tolerance(0.05 - 0.03, 0.01)
    assert not within_tolerance(float("nan"), 0.01)


def test_samples_in_every_form_are_read_and_split_without_overlap(tmp_path: Path):
    rng = np.random.default_rng(0)
    stacked = rng.standard_normal((6, 1, 1, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "all.npz", input=stacked, label=np.arange(6))
    folder = tmp_path / "dir"
    folder.mkdir()
    for index in range(4):
        np.save(folder / f"{index}.npy", stacked[index, 0])  # the batch axis may be left out
    assert len(read_samples(tmp_path / "all.npz", LENET_INPUT)) == 6
    samples = read_samples(folder, LENET_INPUT)
    assert len(samples) == 4 and samples[0]["input"].shape == (1, 1, 32, 32)
    calibration, validation = split_samples(read_samples(tmp_path / "all.npz", LENET_INPUT), seed=0)
    labels = [int(s["label"]) for s in calibration] + [int(s["label"]) for s in validation]
    assert sorted(labels) == list(range(6)) and len(calibration) == 3


@pytest.mark.parametrize("make", [
    lambda p: np.savez(p / "x.npz", input=np.zeros((3, 1, 1, 16, 16), np.float32)),  # wrong shape
    lambda p: np.savez(p / "x.npz", image=np.zeros((3, 1, 1, 32, 32), np.float32)),  # no input of that name
    lambda p: np.savez(p / "x.npz", input=np.zeros((1, 1, 1, 32, 32), np.float32)),  # one sample: cannot split
    lambda p: (p / "x.npz").write_text("not numpy"),
])  # fmt: skip
def test_bad_data_is_refused_in_one_line(tmp_path: Path, make):
    make(tmp_path)
    with pytest.raises(RlcompileError):
        split_samples(read_samples(tmp_path / "x.npz", LENET_INPUT), seed=0)


@pytest.mark.parametrize("arguments", [
    ["--precision", "int4"], ["--precision", "int8", "--tolerance", "-1"], ["--precision", "int8", "--tolerance", "x"],
    ["--precision", "int8", "--metric", "nowhere_module:f"], ["--precision", "int8", "--metric", "top5"],
    ["--precision", "int8", "--data", "/nonexistent/samples"], ["--tolerance", "0.1"],
])  # fmt: skip
def test_bad_contracts_get_one_line_and_exit_2(capsys, arguments):
    assert main(["select", "lenet5", *arguments]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("rlcompile: error:")


def test_a_metric_that_raises_is_one_line_and_not_a_plan_failure():
    from rlcompile.precision.contract import MetricError, sample_error

    def broken(sample, fp32, outputs):
        raise KeyError("text\nsecond line")

    with pytest.raises(MetricError) as raised:
        sample_error(broken, {}, [], [])
    assert "\n" not in str(raised.value) and "KeyError" in str(raised.value)


def test_a_metric_from_a_file_is_loaded(tmp_path: Path):
    (tmp_path / "mine.py").write_text("def error(sample, fp32, outputs):\n    return 0.5\n")
    assert load_metric(f"{tmp_path / 'mine.py'}:error")({}, [], []) == 0.5
    with pytest.raises(RlcompileError):
        load_metric(f"{tmp_path / 'mine.py'}:missing")
