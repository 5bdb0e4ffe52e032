"""Task extraction, readable labels, the seeds' layers and task selection."""

from __future__ import annotations

import pytest

from rlcompile.errors import RlcompileError
from rlcompile.kernel.api import load_tasks, select_tasks
from rlcompile.kernel.tasks import SEED_LAYERS, ConvShape, conv_shapes, seed_layer, zoo_conv_shapes
from rlcompile.models import load_model

#: The seeds' Table 2 layers, as the k-th distinct convolution of each network.
EXPECTED_SEED_LAYERS = {
    "L1": "conv2d 3x224x224->64 k11 s4",
    "L2": "conv2d 384x13x13->256 k3 s1",
    "L3": "conv2d 3x224x224->64 k3 s1",
    "L4": "conv2d 64x224x224->64 k3 s1",
    "L5": "conv2d 128x112x112->128 k3 s1",
    "L6": "conv2d 128x28x28->256 k3 s2",
    "L7": "conv2d 256x14x14->512 k3 s2",
    "L8": "conv2d 256x14x14->512 k1 s2",
}


@pytest.mark.parametrize("name", sorted(SEED_LAYERS))
def test_seed_layers_have_the_expected_shapes(name: str, target) -> None:
    task = seed_layer(name, target)
    assert task.label == EXPECTED_SEED_LAYERS[name]
    assert task.flops > 0 and task.weight == 1


def test_seed_layer_flops_match_the_convolution(target) -> None:
    task = seed_layer("L7", target)  # 256x14x14 -> 512x7x7, k3: 2 * 512 * 7 * 7 * 256 * 9 FLOPs
    assert task.flops == pytest.approx(2 * 512 * 7 * 7 * 256 * 9, rel=1e-3)


def test_resnet18_has_eleven_distinct_convolutions() -> None:
    shapes = conv_shapes(load_model("resnet18").proto)
    assert len(shapes) == 11
    assert shapes[0] == ConvShape(1, 3, 224, 224, 64, (7, 7), (2, 2), (3, 3, 3, 3))
    # the seed layers' shapes are read from the module as it runs, not from its export: the same workloads
    assert zoo_conv_shapes("resnet18") == tuple(shapes)


def test_model_tasks_are_sorted_by_work_and_labelled(target) -> None:
    _, tasks = load_tasks("lenet5", target)
    work = [task.weight * task.flops for task in tasks]
    assert work == sorted(work, reverse=True)
    labels = [task.label for task in tasks]
    assert any(label.startswith("conv2d 1x32x32->6 k5 s1") for label in labels)
    assert any(label.startswith("matmul 1x400x120") for label in labels)
    assert len({task.workload_key for task in tasks}) == len(tasks)


def test_unknown_seed_layer_is_refused(target) -> None:
    with pytest.raises(RlcompileError, match="unknown layer 'L9'"):
        seed_layer("L9", target)


def test_select_tasks_by_index_and_substring(target) -> None:
    _, tasks = load_tasks("lenet5", target)
    assert select_tasks(tasks, None) == tasks
    assert select_tasks(tasks, "1,0") == [tasks[1], tasks[0]]
    chosen = select_tasks(tasks, "conv2d")
    assert chosen and all("conv2d" in t.name or "conv2d" in t.label for t in chosen)
    with pytest.raises(RlcompileError, match="only"):
        select_tasks(tasks, "99")
    with pytest.raises(RlcompileError, match="matches no task"):
        select_tasks(tasks, "winograd")


def test_extracted_tasks_are_saved_and_read_back_for_the_same_model_and_target(target, tmp_path) -> None:
    from rlcompile.kernel.tasks import extract_tasks_cached

    cache = tmp_path / "tasks.json"
    model = load_model("lenet5")
    first = extract_tasks_cached(model, target, cache)
    assert cache.exists()
    again = extract_tasks_cached(model, target, cache)  # read back: no import, no extraction
    assert [(t.name, t.label, t.weight, t.workload_key) for t in again] == [
        (t.name, t.label, t.weight, t.workload_key) for t in first
    ]
    other = load_model("squeezenet1_1")
    assert [t.source for t in extract_tasks_cached(other, target, cache)] == ["squeezenet1_1"] * len(
        extract_tasks_cached(other, target, cache)
    )
