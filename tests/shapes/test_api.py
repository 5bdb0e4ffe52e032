"""``optimize`` for a shape profile on a small dynamic model, end to end with the real runtimes: the plan judged at
every bucket, its dispatch, its timing per bucket, its export checked at every bucket, its resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlcompile import load
from rlcompile.errors import RlcompileError
from rlcompile.export import export_plan
from rlcompile.measure import QUICK
from rlcompile.optimize import OptimizeRequest, StageSettings, optimize
from rlcompile.runtimes.ort import run_proto
from rlcompile.shapes.timing import time_shaped
from rlcompile.verify import compare_outputs
from tests.conftest import write_dynamic_conv_model

PROFILE = ("x=1,3,8-32,8-32",)


def request(model: Path, output: Path, **settings) -> OptimizeRequest:
    return OptimizeRequest(str(model), output, {}, 15.0, settings=StageSettings(timing=QUICK, **settings),
                           profile=PROFILE)  # fmt: skip


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_dynamic_conv_model(tmp_path_factory.mktemp("shapes") / "dynamic_conv.onnx")


@pytest.fixture(scope="module")
def planned(model: Path, tmp_path_factory):
    """A plan for the profile on ONNX Runtime alone (so that it exports to plain ONNX Runtime)."""
    output = tmp_path_factory.mktemp("shapes") / "plan"
    return optimize(request(model, output, libraries="ort")), output


def test_every_bucket_is_judged_against_both_natives(planned) -> None:
    result, _ = planned
    shapes = result.manifest.shapes
    assert [row["bucket"] for row in shapes["per_bucket"]] == ["8x8", "8x32", "32x8", "32x32"]
    for row in shapes["per_bucket"]:
        assert set(row["natives"]) == {"ort", "openvino"}
        assert row["ratio"] == pytest.approx(row["ms"] / min(row["natives"].values()))
        assert row["variant"].startswith("ort ")  # --runtimes ort: ONNX Runtime's variants only
    assert shapes["weighted_ms"]["plan"] == pytest.approx(sum(r["weight"] * r["ms"] for r in shapes["per_bucket"]))


def test_the_plan_dispatches_every_shape_of_the_profile_and_refuses_others(planned, model: Path) -> None:
    import onnx

    _, output = planned
    plan = load(output)
    original = onnx.load(str(model))
    rng = np.random.default_rng(0)
    for shape in [(1, 3, 8, 8), (1, 3, 20, 12), (1, 3, 32, 32)]:
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        assert compare_outputs(run_proto(original, feeds), plan.run(feeds)).within()
    with pytest.raises(RlcompileError, match="height 8-32"):
        plan.run({"x": np.zeros((1, 3, 40, 8), np.float32)})
    with pytest.raises(RlcompileError, match="no variant"):
        plan.run({"x": np.zeros((2, 3, 8, 8), np.float32)})


def test_run_times_the_plan_at_every_bucket_beside_both_natives(planned) -> None:
    _, output = planned
    timings = time_shaped(load(output), QUICK)
    assert [bucket.label for bucket in timings.buckets] == ["8x8", "8x32", "32x8", "32x32"]
    assert timings.ok and all(set(bucket.natives) == {"ort", "openvino"} for bucket in timings.buckets)


def test_the_export_runs_every_bucket_with_plain_onnxruntime(planned, tmp_path: Path) -> None:
    _, output = planned
    exported = export_plan(output, "onnxruntime", tmp_path / "exported", QUICK)
    assert exported.check.agreement.within()
    assert (tmp_path / "exported" / "README.md").is_file()


def test_the_same_request_again_reuses_the_plan(planned, model: Path) -> None:
    result, output = planned
    again = optimize(request(model, output, libraries="ort"))
    assert again.manifest == result.manifest


def test_int8_is_kept_only_within_the_tolerance_at_every_bucket(model: Path, tmp_path: Path) -> None:
    result = optimize(request(model, tmp_path / "int8", precision="int8", tolerance=0.05))
    shapes = result.manifest.shapes
    errors = [bucket["errors"] for bucket in shapes["buckets"]]
    assert all(any("int8" in label for label in found) for found in errors)
    served = [entry["variant"] for entry in shapes["variants"]]
    if any(variant["recipe"] for variant in served):
        accuracy = result.manifest.accuracy
        assert accuracy is not None and accuracy.excess <= 0.05
        assert (tmp_path / "int8" / "validation.npz").is_file()
        assert time_shaped(load(tmp_path / "int8"), QUICK).accuracy.within
