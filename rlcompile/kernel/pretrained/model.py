"""A cost model pretrained on many tasks' measurements: XGBoost on portable features.

Why XGBoost and not a network: the training set is thousands of rows of ~36 dense features (TenSet's
and MetaSchedule's XGB models work at this scale too); boosted trees train in seconds on two cores,
need no feature scaling, and a search asks for thousands of predictions a step, which trees answer in
microseconds each. The model predicts a configuration's throughput relative to its task's best
(the label of :mod:`.dataset`), so it ranks configurations of any task; a run fine-tunes it on its own
measurements by boosting more trees on top (:class:`rlcompile.kernel.cost_model.KnobXGB`).

One file per vector-ISA class, JSON: the booster, the feature version, and where its data came from.
A model is refused on a CPU of another class, in one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlcompile import atomic
from rlcompile.errors import RlcompileError
from rlcompile.kernel.pretrained.dataset import Dataset
from rlcompile.kernel.pretrained.features import FEATURE_NAMES, FEATURE_VERSION, PortableFeatures
from rlcompile.kernel.space import Config, KnobSpace
from rlcompile.machine import isa_class

FORMAT = "rlcompile-cost-model"
PARAMS = {
    "max_depth": 6,
    "eta": 0.1,
    "subsample": 0.8,
    "colsample_bytree": 0.8,
    "min_child_weight": 2,
    "objective": "reg:squarederror",
}
ROUNDS = 300
#: The models shipped in the package, one per vector-ISA class (rlcompile/kernel/pretrained/<isa>.json).
PACKAGED = Path(__file__).parent


@dataclass
class PretrainedModel:
    """A trained booster with what it was trained on; ``bind`` makes the prior of one task."""

    booster: object  # xgboost.Booster
    isa: str
    samples: int
    tasks: int
    sources: list[str] = field(default_factory=list)
    cpu_signatures: list[str] = field(default_factory=list)
    path: str = ""

    @property
    def name(self) -> str:
        return f"pretrained {self.isa} ({self.samples} measurements of {self.tasks} tasks)"

    def predict_features(self, features: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(features, feature_names=list(FEATURE_NAMES))).astype(np.float64)

    def bind(self, space: KnobSpace, flops: float) -> TaskPrior:
        return TaskPrior(self, PortableFeatures(space, flops))

    def save(self, path: Path) -> Path:
        document = {"format": FORMAT, "feature_version": FEATURE_VERSION, "features": list(FEATURE_NAMES),
                    "isa": self.isa, "samples": self.samples, "tasks": self.tasks, "sources": self.sources,
                    "cpu_signatures": self.cpu_signatures,
                    "booster": json.loads(bytes(self.booster.save_raw("json")))}  # fmt: skip
        atomic.write_text(Path(path), json.dumps(document, separators=(",", ":")))
        return Path(path)

    @classmethod
    def load(cls, path: Path) -> PretrainedModel:
        """Read a model file (one line on anything that is not one of ours, or of other features)."""
        import xgboost as xgb

        try:
            document = json.loads(Path(path).read_bytes())
        except OSError as error:
            raise RlcompileError(f"--cost-model {path}: cannot read it ({error.strerror or error})") from None
        except ValueError:
            document = None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise RlcompileError(f"--cost-model {path}: not an rlcompile cost model (`rlcompile pretrain` makes one)")
        if document.get("feature_version") != FEATURE_VERSION:
            raise RlcompileError(f"--cost-model {path}: made with features v{document.get('feature_version')}, "
                                 f"this rlcompile reads v{FEATURE_VERSION}; train it again (`rlcompile pretrain`)")
        booster = xgb.Booster()
        booster.load_model(bytearray(json.dumps(document["booster"]).encode()))
        return cls(booster, document["isa"], document["samples"], document["tasks"], document.get("sources", []),
                   document.get("cpu_signatures", []), str(path))  # fmt: skip

    def check_isa(self, wanted: str | None = None) -> None:
        """Refuse a model of another vector-ISA class than ``wanted`` (the target's; this CPU's when None)."""
        wanted = wanted or isa_class()
        if self.isa != wanted:
            raise RlcompileError(f"--cost-model {self.path or self.name} was trained on {self.isa} kernels, this "
                                 f"run makes {wanted} ones: use a model of its class or --cost-model none")  # fmt: skip


@dataclass
class TaskPrior:
    """The pretrained model's predictions for one task's configurations."""

    model: PretrainedModel
    features: PortableFeatures

    def __call__(self, configs: Sequence[Config]) -> np.ndarray:
        return self.model.predict_features(self.features(configs))


def train(dataset: Dataset, seed: int = 0, rounds: int = ROUNDS) -> PretrainedModel:
    """Fit XGBoost on a dataset (all rows; hold data out with :meth:`Dataset.without` first)."""
    import xgboost as xgb

    if len(dataset) == 0:
        raise RlcompileError("nothing to train on: the dataset is empty")
    matrix = xgb.DMatrix(dataset.features, label=dataset.labels, feature_names=list(FEATURE_NAMES))
    params = PARAMS | {"seed": seed, "nthread": max(1, len(os.sched_getaffinity(0)))}
    booster = xgb.train(params, matrix, num_boost_round=rounds)
    return PretrainedModel(booster, dataset.isa, len(dataset), len(set(dataset.tasks)),
                           sorted(set(dataset.sources)), dataset.cpu_signatures)  # fmt: skip


def packaged_path(isa: str | None = None) -> Path:
    return PACKAGED / f"{isa or isa_class()}.json"


def resolve(spec: str | None, remote: bool = False, isa: str | None = None) -> PretrainedModel | None:
    """``--cost-model``: ``default`` (the packaged model of the target's class, ``isa``, this CPU's when None;
    none when there is none, or when measuring on a remote device whose class is not known here), ``none``
    (cold), or a model file's path, refused when it was trained on another class."""
    if spec in (None, "", "none"):
        return None
    if spec == "default":
        path = packaged_path(isa)
        if remote or not path.exists():
            return None
        spec = str(path)
    model = PretrainedModel.load(Path(spec))
    if not remote:
        model.check_isa(isa)
    return model
