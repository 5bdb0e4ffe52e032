"""The typed manifest: written and read one way, the JSON keys being the fields."""

from __future__ import annotations

import json

import pytest

from rlcompile.manifest import GraphRecord, KernelRecord, LatencyRecord, LayerRecord, Manifest, OptimizeRecord


def manifest() -> Manifest:
    stages = {"graph": GraphRecord("ppo", 0, 3, 20, 17, {"max_rel": 0.0}, {"steps": 1}, False, "slower", 1.5),
              "kernel": KernelRecord("sa", 2, 1, 32, 0, 1, {"conv": 0.5}, 9.0),
              "layer": LayerRecord("qlearning", ["ort"], {}, ["single:ort"], 1, {"ort": 4}, 3.0)}  # fmt: skip
    latency = LatencyRecord({"ort native": 2.0}, 2.0, 2.0, 2.0, 1.9, 2.0 / 1.9, 0.004, None)
    run = OptimizeRecord({"k": 1}, {"levels": ["graph"]}, {"total_s": 60}, stages, latency, 14.0)
    inputs = [{"name": "x", "shape": [1, 1, 28, 28], "dtype": "float32"}]
    return Manifest("lenet5", "zoo:lenet5", "0123456789abcdef", inputs, ["y"], 2, {"cpu": "here"}, [], {}, run)


def test_a_manifest_survives_saving_and_loading(tmp_path):
    written = manifest().save(tmp_path)
    loaded = Manifest.load(tmp_path)
    assert loaded == written
    kernel = loaded.optimize.stages["kernel"]
    assert isinstance(kernel, KernelRecord) and kernel.trials == 32
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert list(data)[:3] == ["format", "version", "model"]
    assert "skipped" not in data["optimize"]["stages"]["kernel"]  # unset optional fields are left out
    assert data["optimize"]["latency"]["agreement"] is None  # ... except in the latency record
    assert loaded["optimize"]["stages"]["layer"]["chosen"] == ["single:ort"]  # the JSON view


def test_a_file_that_is_not_a_plan_manifest_is_refused(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not a rlcompile-plan"):
        Manifest.load(tmp_path)
