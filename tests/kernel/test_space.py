"""Knob spaces of conv2d, depthwise conv2d and matmul: enumeration, replay, read-back, invalid input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlcompile.kernel.space import KnobSpace, factorizations, with_knob
from rlcompile.kernel.tasks import Task
from tests.kernel.conftest import DEPTHWISE_CONV, SMALL_CONV, make_task, matmul_module, tune_context


def space_for(kind: str, target) -> KnobSpace:
    if kind == "matmul":
        task = Task("matmul", "matmul 32x64x48", matmul_module(), target)
    else:
        task = make_task(SMALL_CONV if kind == "conv2d" else DEPTHWISE_CONV, target, kind)
    return KnobSpace.for_task(tune_context(task))


@pytest.fixture(scope="module", params=["conv2d", "depthwise", "matmul"])
def space(request, target) -> KnobSpace:
    return space_for(request.param, target)


def test_factorizations_are_complete_and_bounded() -> None:
    found = factorizations(12, 3, 4)
    assert all(math.prod(f) == 12 and f[-1] <= 4 for f in found)
    assert len(found) == len(set(found)) == 15  # 18 ordered triples of product 12, minus 3 with last factor 6 or 12
    assert found == sorted(found)
    assert factorizations(7, 2, 64) == [(1, 7), (7, 1)]


def test_space_has_tiles_categoricals_and_locations(space: KnobSpace) -> None:
    kinds = [knob.kind for knob in space.knobs]
    assert "tile" in kinds and "categorical" in kinds
    for knob in space.knobs:
        assert knob.size >= 1 and len(set(knob.values)) == knob.size
    assert space.log10_size > 3


def test_tile_domains_multiply_to_the_loop_extent(space: KnobSpace) -> None:
    for knob in space.knobs:
        if knob.kind == "tile":
            extent = int(knob.name.split("extent ")[1].split()[0])
            assert all(math.prod(values) == extent for values in knob.values)


def test_random_configurations_replay_and_read_back(space: KnobSpace) -> None:
    rng = np.random.default_rng(0)
    repaired = 0
    for _ in range(12):
        config = space.random_config(rng)
        schedule = space.to_schedule(config)
        assert schedule is not None
        effective = space.from_schedule(schedule)
        assert effective is not None and len(effective) == len(config)
        # only compute locations (whose legal set depends on the tiles) may be repaired by TVM
        for knob, requested, actual in zip(space.knobs, config, effective, strict=True):
            if requested != actual:
                assert knob.kind == "compute_location"
                repaired += 1
        assert space.to_schedule(effective) is not None
    assert repaired < 12


def test_design_spaces_map_to_distinct_space_indices(target) -> None:
    context = tune_context(make_task(SMALL_CONV, target))
    space = KnobSpace.for_task(context)
    designs = context.space_generator.generate_design_space(context.mod)
    assert space.has_space_knob and space.knobs[0].size == len(designs) == 3
    assert [space.from_schedule(design)[0] for design in designs] == [0, 1, 2]


def test_invalid_configurations_are_detected_not_raised(space: KnobSpace) -> None:
    with pytest.raises(ValueError, match="knobs"):
        space.to_schedule((0,))
    out_of_range = tuple(int(size) + 5 for size in space.sizes)
    with pytest.raises(IndexError):
        space.decisions(out_of_range)


def test_neighbours_move_one_knob_by_the_radius(space: KnobSpace) -> None:
    config = tuple(int(size) // 2 for size in space.sizes)
    for radius in (1, 2):
        for neighbour in space.neighbours(config, radius):
            changed = [i for i, (a, b) in enumerate(zip(config, neighbour, strict=True)) if a != b]
            assert len(changed) == 1 and abs(config[changed[0]] - neighbour[changed[0]]) == radius
    assert with_knob((1, 2, 3), 1, 9) == (1, 9, 3)


def test_normalised_configurations_lie_in_the_unit_cube(space: KnobSpace) -> None:
    rng = np.random.default_rng(1)
    array = space.normalized([space.random_config(rng) for _ in range(20)])
    assert array.shape == (20, len(space.knobs)) and array.min() >= 0 and array.max() <= 1
