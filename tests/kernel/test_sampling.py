"""Adaptive sampling (k-means at the knee) and sample synthesis (per-knob mode)."""

from __future__ import annotations

import numpy as np
import pytest

from rlcompile.kernel.sampling import adaptive_sample, knob_modes, top_candidates
from rlcompile.kernel.space import KnobSpace
from tests.kernel.conftest import SMALL_CONV, make_task, tune_context


@pytest.fixture(scope="module")
def space(target) -> KnobSpace:
    return KnobSpace.for_task(tune_context(make_task(SMALL_CONV, target)))


def clustered_trajectory(space: KnobSpace, centers: int, per_center: int, seed: int = 0) -> list[tuple]:
    rng = np.random.default_rng(seed)
    trajectory = []
    for _ in range(centers):
        center = np.array(space.random_config(rng))
        for _ in range(per_center):
            noisy = np.clip(center + rng.integers(-1, 2, len(center)), 0, space.sizes - 1)
            trajectory.append(tuple(int(v) for v in noisy))
    return trajectory


def test_knob_modes_take_the_most_frequent_value_per_knob() -> None:
    assert knob_modes([(1, 2, 3), (1, 5, 3), (4, 5, 0)]) == (1, 5, 3)
    assert knob_modes([(2,), (1,)]) == (1,)  # ties go to the smaller index


def test_samples_are_trajectory_points_and_never_visited(space) -> None:
    trajectory = clustered_trajectory(space, centers=12, per_center=30)
    visited = set(trajectory[:100])
    result = adaptive_sample(space, trajectory, visited, np.random.default_rng(0))
    assert 8 <= result.k < 64 and result.losses == sorted(result.losses, reverse=True)
    assert result.configs and len(set(result.configs)) == len(result.configs)
    assert not set(result.configs) & visited
    mode = knob_modes(list(dict.fromkeys(trajectory)))
    assert all(config in trajectory or config == mode for config in result.configs)


def test_the_knee_adapts_the_number_of_measurements(space) -> None:
    trajectory = clustered_trajectory(space, centers=40, per_center=10)
    rng = np.random.default_rng(0)
    seeds_default = adaptive_sample(space, trajectory, set(), rng).k
    patient = adaptive_sample(space, trajectory, set(), rng, threshold=1.0).k  # stops only when loss stops falling
    assert seeds_default < patient


def test_measured_centroids_are_replaced_by_the_mode(space) -> None:
    trajectory = clustered_trajectory(space, centers=10, per_center=20)
    unique = list(dict.fromkeys(trajectory))
    mode = knob_modes(unique)
    visited = set(unique) - {mode}  # everything measured except the synthesized point
    result = adaptive_sample(space, trajectory, visited, np.random.default_rng(0))
    assert result.synthesized >= 1 and result.configs == [mode]


def test_two_largest_knobs_shortcut_keeps_their_values(space) -> None:
    trajectory = clustered_trajectory(space, centers=12, per_center=20)
    result = adaptive_sample(space, trajectory, set(), np.random.default_rng(0), two_largest_knobs=True)
    largest = np.argsort(-space.sizes, kind="stable")[:2]
    pairs = {tuple(config[i] for i in largest) for config in trajectory}
    assert all(tuple(config[i] for i in largest) in pairs for config in result.configs)


def test_candidates_are_the_best_scored_unmeasured_points() -> None:
    configs = [(0, 1), (0, 2), (0, 1), (3, 3), (4, 4), (5, 5)]
    scores = [0.1, 0.9, 0.5, 0.8, 0.7, 0.95]
    assert top_candidates(configs, scores, measured={(5, 5)}, size=3) == [(0, 2), (3, 3), (4, 4)]
    assert top_candidates(configs, scores, measured=set(), size=10)[-1] == (0, 1)  # scored by its best visit
    assert len(top_candidates(configs, scores, measured=set(), size=10)) == 5
