"""Adaptive sampling and sample synthesis (Chameleon, seed 002 Algorithm 1; RELEASE, seed 000 Algorithm 1).

Instead of measuring a fixed number of the cost model's favourites, cluster the search's candidates
with k-means for k = 8, 9, ... and stop at the knee of the loss curve (when ``threshold x loss >=
previous loss``, threshold 2.5); the centroids, snapped to the nearest candidate, are what gets
measured, so the number of measurements adapts to how spread the candidates are. A centroid that was
already measured is replaced by the per-knob mode of the candidates (sample synthesis: the most
frequent value of every knob).

The candidates (the paper's s_Theta) are, as in the authors' code, the ``plan_size`` (64) unmeasured
points the cost model scores highest (:func:`top_candidates`); ``candidates="trajectory"`` clusters
every point the search visited instead (this project's first reading of the paper, which puts the
centroids among mediocre points; the README compares the two).

Knobs are normalised to [0, 1] before clustering. The authors' code clusters only the two knobs with the
most values and draws the rest at random; ``two_largest_knobs=True`` reproduces that shortcut.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rlcompile.kernel.space import Config, KnobSpace

THRESHOLD = 2.5
K_RANGE = (8, 64)
PLAN_SIZE = 64
CANDIDATES = ("top", "trajectory")


@dataclass
class SamplingResult:
    """The configurations to measure and how they were chosen."""

    configs: list[Config]
    k: int
    losses: list[float]
    synthesized: int


def knob_modes(configs: Sequence[Config]) -> Config:
    """The most frequent value of every knob (ties: the smallest index)."""
    columns = zip(*configs, strict=True)
    return tuple(min(Counter(column).most_common(), key=lambda item: (-item[1], item[0]))[0] for column in columns)


def check_sampling(sampling: str, candidates: str, plan_size: int) -> tuple[str, str, int]:
    """A strategy's sampling options, validated (a bad one is a ``ValueError`` naming the choices)."""
    if sampling not in ("greedy", "adaptive"):
        raise ValueError(f"sampling must be greedy or adaptive, not {sampling!r}")
    if candidates not in CANDIDATES:
        raise ValueError(f"candidates must be {' or '.join(CANDIDATES)}, not {candidates!r}")
    if int(plan_size) < 1:
        raise ValueError(f"plan_size must be a positive number, not {plan_size!r}")
    return sampling, candidates, int(plan_size)


def top_candidates(configs: Sequence[Config], scores: Sequence[float], measured, size: int = PLAN_SIZE) -> list[Config]:
    """The ``size`` distinct unmeasured configurations with the highest predicted scores, best first."""
    best: dict[Config, float] = {}
    for config, score in zip(configs, scores, strict=True):
        if config not in measured and score > best.get(config, -np.inf):
            best[config] = float(score)
    return sorted(best, key=lambda config: -best[config])[:size]


def adaptive_sample(
    space: KnobSpace,
    trajectory: Sequence[Config],
    visited: Iterable[Config],
    rng: np.random.Generator,
    threshold: float = THRESHOLD,
    two_largest_knobs: bool = False,
    seed: int = 0,
) -> SamplingResult:
    """Pick the configurations to measure from the search's candidates (``trajectory``; see the module docstring)."""
    from sklearn.cluster import KMeans

    unique = list(dict.fromkeys(tuple(c) for c in trajectory))
    visited = set(visited)
    if len(unique) <= K_RANGE[0]:
        chosen = [c for c in unique if c not in visited]
        return SamplingResult(chosen, len(unique), [], 0)
    points = space.normalized(unique)
    columns = largest_knobs(space, 2) if two_largest_knobs else np.arange(points.shape[1])
    features = points[:, columns]
    losses: list[float] = []
    previous = np.inf
    model = None
    for k in range(K_RANGE[0], min(K_RANGE[1], len(unique))):
        model = KMeans(n_clusters=k, n_init=1, random_state=seed).fit(features)
        loss = float(model.inertia_)
        losses.append(loss)
        if threshold * loss >= previous:
            break
        previous = loss
    centroids = snap(model.cluster_centers_, features, unique)
    if two_largest_knobs:
        centroids = [randomise_other_knobs(c, columns, space, rng) for c in centroids]
    mode = knob_modes(unique)
    chosen: list[Config] = []
    synthesized = 0
    for centroid in centroids:
        if centroid in visited or centroid in chosen:
            centroid = mode
            synthesized += 1
        if centroid not in visited and centroid not in chosen:
            chosen.append(centroid)
    return SamplingResult(chosen, model.n_clusters, losses, synthesized)


def largest_knobs(space: KnobSpace, count: int) -> np.ndarray:
    return np.argsort(-space.sizes, kind="stable")[:count]


def snap(centroids: np.ndarray, features: np.ndarray, configs: Sequence[Config]) -> list[Config]:
    """Each centroid becomes the trajectory configuration nearest to it (a valid point of the space)."""
    distances = ((centroids[:, None, :] - features[None, :, :]) ** 2).sum(axis=2)
    return [configs[int(index)] for index in distances.argmin(axis=1)]


def randomise_other_knobs(config: Config, kept: np.ndarray, space: KnobSpace, rng: np.random.Generator) -> Config:
    kept_set = set(int(k) for k in kept)
    return tuple(value if position in kept_set else int(rng.integers(space.sizes[position]))
                 for position, value in enumerate(config))  # fmt: skip
