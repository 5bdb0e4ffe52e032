"""A pretrained kernel cost model: portable features, a dataset from tuning records, XGBoost trained on it,
shipped per vector-ISA class and loaded as the prior of every search strategy (``--cost-model``)."""

from rlcompile.kernel.pretrained.dataset import Dataset
from rlcompile.kernel.pretrained.features import FEATURE_NAMES, FEATURE_VERSION, PortableFeatures
from rlcompile.kernel.pretrained.model import PretrainedModel, TaskPrior, packaged_path, resolve, train

__all__ = ["FEATURE_NAMES", "FEATURE_VERSION", "Dataset", "PortableFeatures", "PretrainedModel", "TaskPrior",
           "packaged_path", "resolve", "train"]
