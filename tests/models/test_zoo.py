"""The model zoo: definitions match the published architectures; exports are cached and loadable."""

from __future__ import annotations

import onnx
import pytest

from rlcompile.errors import ModelError
from rlcompile.models import load_model, zoo

#: Parameter counts of the reference implementations (torchvision without auxiliary heads; BERT-base
#: without the pooler, with one token-type vector), so a wrong layer anywhere shows up here.
REFERENCE_PARAMETERS = {
    "lenet5": 61_706,
    "alexnet": 61_100_840,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "squeezenet1_1": 1_235_496,
    "mobilenet_v1": 4_231_976,
    "mobilenet_v2": 3_504_872,
    "googlenet": 6_624_904,
    "inception_v3": 23_834_568,
    "bert": 108_890_880,  # 109_482_240 - pooler 590_592 - one token-type vector 768
}

SEED_MODELS = {"lenet5", "alexnet", "vgg16", "vgg19", "resnet18", "resnet50", "squeezenet1_1", "mobilenet_v1",
               "mobilenet_v2", "googlenet", "inception_v3", "bert", "bert_tiny"}  # fmt: skip


def test_zoo_has_every_seed_model() -> None:
    assert set(zoo.ZOO) == SEED_MODELS


@pytest.mark.parametrize("name", sorted(REFERENCE_PARAMETERS))
def test_parameter_count_matches_reference(name: str) -> None:
    module = zoo.build_module(zoo.ZOO[name])
    assert sum(p.numel() for p in module.parameters()) == REFERENCE_PARAMETERS[name]


def test_lenet5_flops_are_counted_exactly() -> None:
    entry = zoo.ZOO["lenet5"]
    # conv1 6x28x28x(1x5x5) + conv2 16x10x10x(6x5x5) + fc 400x120 + 120x84 + 84x10, 2 FLOPs per MAC
    expected = 2 * (6 * 28 * 28 * 25 + 16 * 10 * 10 * 150 + 400 * 120 + 120 * 84 + 84 * 10)
    assert zoo.count_flops(zoo.build_module(entry), zoo.example_inputs(entry)) == expected


def test_export_is_cached_and_reused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RLCOMPILE_CACHE", str(tmp_path))
    path = zoo.export_path("lenet5")
    assert path.parent == tmp_path / "zoo" and path.exists()
    stamp = path.stat().st_mtime_ns
    assert zoo.export_path("lenet5") == path and path.stat().st_mtime_ns == stamp
    assert list(path.parent.glob("*.onnx")) == [path]  # no scratch files left behind


def test_weights_are_seeded() -> None:
    first = zoo.build_module(zoo.ZOO["lenet5"]).state_dict()
    second = zoo.build_module(zoo.ZOO["lenet5"]).state_dict()
    assert all((first[k] == second[k]).all() for k in first)


@pytest.mark.parametrize("name", ["lenet5", "resnet18", "mobilenet_v2", "squeezenet1_1", "bert_tiny"])
def test_exported_model_is_static_valid_and_keeps_batchnorm(name: str) -> None:
    model = load_model(name)
    assert model.proto.ir_version <= 13
    onnx.checker.check_model(model.proto)
    assert all(spec.is_static for spec in model.inputs)
    ops = model.op_counts()
    assert "Identity" not in ops
    if name in ("resnet18", "mobilenet_v2"):
        assert ops["BatchNormalization"] == ops["Conv"]
    if name == "bert_tiny":
        assert ops["MatMul"] >= 6 * 2  # separate Q, K, V, output and two feed-forward per layer


def test_summary_reports_parameters_flops_and_inputs() -> None:
    info = zoo.summary("resnet18")
    assert info["parameters"] == REFERENCE_PARAMETERS["resnet18"]
    assert 3.5e9 < info["flops"] < 3.7e9  # 1.82 GMACs
    assert info["inputs"] == {"input": [1, 3, 224, 224]}


def test_zoo_model_shapes_cannot_be_overridden() -> None:
    load_model("lenet5", {"input": (1, 1, 32, 32)})  # repeating the exported shape is fine
    with pytest.raises(ModelError, match="sets dim 0 to 4, but the model fixes it to 1"):
        load_model("lenet5", {"input": (4, 1, 32, 32)})
