"""Cost models: predict how fast a configuration will run, so a search can rank configurations without
measuring them (the surrogate reward of the RL agent, the energy of simulated annealing).

``knob-xgb`` is AutoTVM's XGBoost model on knob features: each knob's normalised index, plus log2 of
every tile factor, trained with the "reg" loss on throughput relative to the best measured
(``min_cost / cost``; failures count as 0). A prediction costs microseconds, which is what a search that
asks for thousands of rewards per batch needs: MetaSchedule's own XGB model extracts per-store features
from a post-processed schedule (~3.4 ms per candidate here, plus ~12 ms to replay the schedule), so
``evolutionary`` keeps it, natively, and the other strategies use this one. Both are trained on the same
measurements.

With a pretrained prior (:mod:`rlcompile.kernel.pretrained`, ``--cost-model``) the model ranks from the first
batch: before the run has measured enough, predictions are the pretrained model's; afterwards XGBoost
boosts trees on the run's own measurements on top of the pretrained predictions (its base margin), so
the run's data corrects the prior where this task differs instead of starting over.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from rlcompile.kernel.space import Config, KnobSpace
from rlcompile.kernel.transfer import Prior, decision_features

#: AutoTVM's XGBoost parameters (tuner/xgboost_cost_model.py, loss "reg").
XGB_PARAMS = {
    "max_depth": 3,
    "gamma": 0.0001,
    "min_child_weight": 1,
    "subsample": 1.0,
    "eta": 0.3,
    "lambda": 1.0,
    "alpha": 0.0,
    "objective": "reg:squarederror",
    "nthread": 1,
}
BOOST_ROUNDS = 100
#: Below this many valid measurements the model is not trained and predicts uniform noise.
MIN_TRAINING_SAMPLES = 8


def knob_features(space: KnobSpace, configs: Sequence[Config]) -> np.ndarray:
    """Normalised knob indices followed by log2 of every tile factor."""
    normalised = space.normalized(configs)
    columns = [normalised]
    for position, knob in enumerate(space.knobs):
        if knob.kind == "tile":
            factors = np.array([[math.log2(f) for f in knob.values[c[position]]] for c in configs])
            columns.append(factors.reshape(len(configs), -1))
    return np.concatenate(columns, axis=1).astype(np.float32)


class KnobXGB:
    """XGBoost on knob features; higher predictions mean faster code."""

    name = "knob-xgb"

    def __init__(self, space: KnobSpace, seed: int = 0, prior: Prior | None = None,
                 pretrained: Callable[[Sequence[Config]], np.ndarray] | None = None) -> None:  # fmt: skip
        self.space = space
        #: the pretrained model's prediction for this task's configurations (a TaskPrior), or None (cold)
        self.pretrained = pretrained
        self.seed = seed
        #: measurements of other tasks with this space's structure (``--warm-start``): trained on from the start
        self.prior = prior
        self.configs: list[Config] = []
        self.costs: list[float] = []
        self.booster = None
        self.rng = np.random.default_rng(seed)
        if prior is not None:
            self.fit()

    @property
    def trained(self) -> bool:
        """Whether predictions mean anything yet: trained on measurements, or starting from a pretrained prior."""
        return self.booster is not None or self.pretrained is not None

    def update(self, configs: Sequence[Config | None], seconds: Sequence[float | None]) -> None:
        """Add measurements (``None`` seconds = failed) and retrain."""
        for config, cost in zip(configs, seconds, strict=True):
            if config is not None:
                self.configs.append(tuple(config))
                self.costs.append(math.inf if cost is None else float(cost))
        self.fit()

    def features(self, configs: Sequence[Config]) -> np.ndarray:
        """Knob features, or with a prior the decision features that carry across shapes."""
        return knob_features(self.space, configs) if self.prior is None else decision_features(self.space, configs)

    def fit(self) -> None:
        import xgboost as xgb

        valid = [c for c in self.costs if math.isfinite(c)]
        prior_size = len(self.prior) if self.prior is not None else 0
        if len(valid) + prior_size < MIN_TRAINING_SAMPLES:
            return
        parts = [(self.prior.features, self.prior.labels, self.prior_margin())] if self.prior is not None else []
        if self.configs:
            best = min(valid, default=math.inf)
            labels = np.array([best / c if math.isfinite(c) else 0.0 for c in self.costs], dtype=np.float32)
            parts.append((self.features(self.configs), labels, self.margin(self.configs)))
        matrix = xgb.DMatrix(np.concatenate([f for f, _, _ in parts]), label=np.concatenate([y for _, y, _ in parts]))
        if self.pretrained is not None:
            matrix.set_base_margin(np.concatenate([m for _, _, m in parts]))
        self.booster = xgb.train(XGB_PARAMS | {"seed": self.seed}, matrix, num_boost_round=BOOST_ROUNDS)

    def margin(self, configs: Sequence[Config]) -> np.ndarray | None:
        """The pretrained predictions the run's own trees are boosted on (None when cold)."""
        return self.pretrained(configs) if self.pretrained is not None else None

    def prior_margin(self) -> np.ndarray | None:
        """Warm-start rows come from other tasks, whose configurations the prior cannot score here: their mean
        label stands in for their margin, so their trees learn their labels from that level."""
        if self.pretrained is None:
            return None
        return np.full(len(self.prior), float(np.mean(self.prior.labels)))

    def predict(self, configs: Sequence[Config]) -> np.ndarray:
        """Predicted relative throughput; uniform random before there is enough data to train."""
        if not configs:
            return np.zeros(0)
        if self.booster is None:
            return self.margin(configs) if self.pretrained is not None else self.rng.uniform(0, 1, len(configs))
        import xgboost as xgb

        matrix = xgb.DMatrix(self.features(configs))
        if self.pretrained is not None:
            matrix.set_base_margin(self.margin(configs))
        return self.booster.predict(matrix).astype(np.float64)
