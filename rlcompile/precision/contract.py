"""The accuracy contract: which precisions the user allows, on which data, by which error, within how much.

``--precision fp32|bf16|int8|auto`` says what may be lowered (``fp32``: nothing, exact as today; ``bf16``:
float arithmetic in bfloat16; ``int8``: fusion groups quantized to int8; ``auto``: both). ``--data PATH``
gives real samples: a directory of ``.npz`` files (one sample each, arrays keyed by input name, other keys
such as labels passed to the metric) or ``.npy`` files (one sample each, for a model with one input), or one
``.npz`` whose arrays have a leading sample axis. The samples are split once, by the seed, into a
calibration part (int8 ranges are computed on it) and a held-out validation part (every error is measured
on it, never on the calibration part). ``--metric`` is the error, lower is better, averaged over the
validation samples; ``--tolerance`` is the most a plan's error may exceed the fp32 model's own on the
same samples. Without ``--data`` the inputs are random and only output agreement is measured.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlcompile.errors import RlcompileError, first_line

#: What ``--precision`` accepts, and which lowered precisions each allows.
ALLOWED = {"fp32": (), "bf16": ("bf16",), "int8": ("int8",), "auto": ("bf16", "int8")}
#: ``--tolerance`` when none is given: 1% (of a relative error, or of a share of samples).
DEFAULT_TOLERANCE = 0.01
#: Samples drawn when there is no ``--data`` (half calibrate, half validate).
RANDOM_SAMPLES = 16
#: ``Metric(sample, fp32_outputs, outputs) -> error``: ``sample`` is every array of one sample by name
#: (inputs, and labels when the data has them), the outputs are lists of arrays in the model's order.
Metric = Callable[[Mapping[str, np.ndarray], Sequence[np.ndarray], Sequence[np.ndarray]], float]


def relative_l2(sample: Mapping[str, np.ndarray], reference: Sequence[np.ndarray],
                outputs: Sequence[np.ndarray]) -> float:  # fmt: skip
    """||outputs - fp32|| / ||fp32|| over every output together."""
    expected = np.concatenate([np.asarray(a, np.float64).ravel() for a in reference])
    actual = np.concatenate([np.asarray(a, np.float64).ravel() for a in outputs])
    scale = float(np.linalg.norm(expected))
    return float(np.linalg.norm(actual - expected) / scale) if scale else float(np.linalg.norm(actual))


def cosine(sample: Mapping[str, np.ndarray], reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float:
    """1 - cosine similarity of the outputs (all together) with the fp32 outputs."""
    expected = np.concatenate([np.asarray(a, np.float64).ravel() for a in reference])
    actual = np.concatenate([np.asarray(a, np.float64).ravel() for a in outputs])
    norms = float(np.linalg.norm(expected) * np.linalg.norm(actual))
    return float(1.0 - np.dot(expected, actual) / norms) if norms else float(not np.array_equal(expected, actual))


def top1(sample: Mapping[str, np.ndarray], reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float:
    """Share of rows of the first output whose arg-max is wrong: against the sample's ``label`` when it has
    one, else against the fp32 model's arg-max."""
    scores = np.asarray(outputs[0]).reshape(-1, np.asarray(outputs[0]).shape[-1])
    if "label" in sample:
        truth = np.asarray(sample["label"]).reshape(-1)
    else:
        truth = np.asarray(reference[0]).reshape(scores.shape).argmax(-1)
    return float(np.mean(scores.argmax(-1) != truth))


METRICS: dict[str, Metric] = {"rel-l2": relative_l2, "cosine": cosine, "top1": top1}


def load_metric(text: str) -> Metric:
    """A built-in metric by name, or ``MODULE:FUNCTION`` (an importable module or a ``.py`` file)."""
    if text in METRICS:
        return METRICS[text]
    module_name, _, function = text.rpartition(":")
    if not module_name or not function:
        raise RlcompileError(f"--metric {text!r}: choose {', '.join(METRICS)} or give MODULE:FUNCTION")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None or not path.is_file():
                raise ImportError(f"no file {path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except Exception as error:  # the user's code: whatever it raises is said in one line
        raise RlcompileError(f"--metric {text!r}: cannot import {module_name}: {first_line(error)}") from None
    metric = getattr(module, function, None)
    if not callable(metric):
        raise RlcompileError(f"--metric {text!r}: {module_name} has no function {function}")
    return metric


@dataclass
class Samples:
    """The samples of an accuracy check: arrays by name (model inputs, and extras such as labels)."""

    calibration: list[dict[str, np.ndarray]]
    validation: list[dict[str, np.ndarray]]
    #: where they came from: the ``--data`` path, or ``random`` (then only output agreement is measured)
    source: str
    inputs: list[str] = field(default_factory=list)

    @property
    def real(self) -> bool:
        return self.source != "random"

    def feeds(self, sample: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's inputs of one sample."""
        return {name: sample[name] for name in self.inputs}


@dataclass(frozen=True)
class AccuracyContract:
    """What ``--precision``, ``--data``, ``--metric`` and ``--tolerance`` asked for."""

    precision: str = "fp32"
    data: Path | None = None
    metric: str = "rel-l2"
    tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        if self.precision not in ALLOWED:
            raise RlcompileError(f"--precision {self.precision!r}: choose from {', '.join(ALLOWED)}")
        if not np.isfinite(self.tolerance) or self.tolerance < 0:
            raise RlcompileError(f"--tolerance {self.tolerance!r}: give a non-negative number such as 0.01")
        if self.data is not None and not Path(self.data).exists():
            raise RlcompileError(f"--data {self.data}: no such file or directory")
        load_metric(self.metric)

    @property
    def lowered(self) -> tuple[str, ...]:
        """The precisions below fp32 that plans may use."""
        return ALLOWED[self.precision]

    @property
    def exact(self) -> bool:
        return not self.lowered

    def describe(self) -> dict:
        return {"precision": self.precision, "data": str(self.data) if self.data else None, "metric": self.metric,
                "tolerance": self.tolerance}  # fmt: skip


def parse_tolerance(text: str) -> float:
    """``--tolerance``: a non-negative number (one line and exit 2 otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise RlcompileError(f"--tolerance {text!r}: give a non-negative number such as 0.01") from None
    if not np.isfinite(value) or value < 0:
        raise RlcompileError(f"--tolerance {text!r}: give a non-negative number such as 0.01")
    return value


def read_samples(path: Path, inputs: Mapping[str, tuple[tuple[int, ...], np.dtype]]) -> list[dict[str, np.ndarray]]:
    """Every sample in ``path`` (see the module docstring), checked against the model's inputs
    (``{name: (shape, dtype)}``): each input present, of its shape, castable to its dtype."""
    path = Path(path)
    try:
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy"))
            if not files:
                raise RlcompileError(f"--data {path}: the directory has no .npz or .npy files")
            samples = [read_file(p, inputs) for p in files]
        elif path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as arrays:
                stacked = {key: arrays[key] for key in arrays.files}
            counts = {len(value) for value in stacked.values() if value.ndim > 0}
            if len(counts) != 1:
                raise RlcompileError(f"--data {path}: the arrays' leading (sample) axes differ: {sorted(counts)}")
            samples = [{key: value[index] for key, value in stacked.items()} for index in range(counts.pop())]
        else:
            raise RlcompileError(f"--data {path}: give a directory of .npz/.npy samples or one .npz file")
    except RlcompileError:
        raise
    except (OSError, ValueError) as error:
        raise RlcompileError(f"--data {path}: cannot read it: {first_line(error)}") from None
    return [check_sample(sample, inputs, str(path)) for sample in samples]


def read_file(path: Path, inputs: Mapping[str, tuple[tuple[int, ...], np.dtype]]) -> dict[str, np.ndarray]:
    if path.suffix == ".npy":
        if len(inputs) != 1:
            raise RlcompileError(f"--data {path}: a .npy sample fits a model with one input; this one has "
                                 f"{len(inputs)} ({', '.join(inputs)}): use .npz files keyed by input name")
        return {next(iter(inputs)): np.load(path, allow_pickle=False)}
    with np.load(path, allow_pickle=False) as arrays:
        return {key: arrays[key] for key in arrays.files}


def check_sample(sample: dict[str, np.ndarray], inputs: Mapping[str, tuple[tuple[int, ...], np.dtype]],
                 where: str) -> dict[str, np.ndarray]:  # fmt: skip
    """The sample with its inputs cast to the model's dtypes (a missing input or a wrong shape: one line)."""
    checked = dict(sample)
    for name, (shape, dtype) in inputs.items():
        if name not in sample:
            raise RlcompileError(f"--data {where}: a sample lacks input {name!r} (it has {', '.join(sample)})")
        value = np.asarray(sample[name])
        if value.shape != tuple(shape) and (1, *value.shape) != tuple(shape):  # the batch axis may be left out
            raise RlcompileError(f"--data {where}: input {name!r} has shape {list(value.shape)}, the model takes "
                                 f"{list(shape)}")  # fmt: skip
        if not np.can_cast(value.dtype, dtype, casting="same_kind"):
            raise RlcompileError(f"--data {where}: input {name!r} is {value.dtype}, the model takes {dtype}")
        checked[name] = value.reshape(shape).astype(dtype, copy=False)
    return checked


def split_samples(samples: list[dict[str, np.ndarray]], seed: int) -> tuple[list[dict], list[dict]]:
    """(calibration, validation): a seeded shuffle cut in half; at least one sample in each."""
    if len(samples) < 2:
        raise RlcompileError(f"--data: {len(samples)} sample(s); give at least 2 (half calibrate, half validate)")
    order = np.random.default_rng(seed).permutation(len(samples))
    half = len(samples) // 2
    return [samples[i] for i in order[:half]], [samples[i] for i in order[half:]]


def load_samples(contract: AccuracyContract, inputs: Mapping[str, tuple[tuple[int, ...], np.dtype]], seed: int,
                 make_random: Callable[[np.random.Generator], dict[str, np.ndarray]]) -> Samples:  # fmt: skip
    """The contract's samples, split; random ones from ``make_random`` when there is no ``--data``."""
    if contract.data is None:
        rng = np.random.default_rng(seed)
        samples = [make_random(rng) for _ in range(RANDOM_SAMPLES)]
        source = "random"
    else:
        samples = read_samples(Path(contract.data), inputs)
        source = str(contract.data)
    calibration, validation = split_samples(samples, seed)
    return Samples(calibration, validation, source, list(inputs))


class MetricError(RlcompileError):
    """The user's metric raised: said in one line, and no search can go on without it."""


def sample_error(metric: Metric, sample: Mapping[str, np.ndarray], reference: Sequence[np.ndarray],
                 outputs: Sequence[np.ndarray]) -> float:  # fmt: skip
    """The metric on one sample; whatever the user's metric raises becomes a one-line :class:`MetricError`."""
    try:
        return float(metric(sample, reference, outputs))
    except Exception as error:
        raise MetricError(f"--metric raised {type(error).__name__}: {first_line(error)}") from None


def mean_error(metric: Metric, samples: Samples, reference: list[list[np.ndarray]],
               outputs: list[list[np.ndarray]]) -> float:  # fmt: skip
    """The metric averaged over the validation samples (``reference``/``outputs`` per sample)."""
    return float(np.mean([sample_error(metric, sample, expected, actual)
                          for sample, expected, actual in zip(samples.validation, reference, outputs, strict=True)]))



#: A plan below fp32 keeps its held-out samples here (``{i}:sample:{name}``) with the fp32 outputs
#: (``{i}:fp32:{k}``), so ``rlcompile run`` can measure its error again anywhere.
VALIDATION = "validation.npz"


def within_tolerance(excess: float, tolerance: float) -> bool:
    """Whether an error ``excess`` over fp32's own keeps the contract; a rounding's worth of slack, since a
    counting metric's steps land on the tolerance (0.04 - 0.03 is 0.010000000000000002 in floats)."""
    return bool(np.isfinite(excess)) and excess <= tolerance + 1e-12


@dataclass(frozen=True)
class Recheck:
    """The error of a saved plan measured again on its saved validation samples."""

    metric: str
    error: float
    excess: float
    tolerance: float
    samples: int

    @property
    def within(self) -> bool:
        return within_tolerance(self.excess, self.tolerance)

    def to_dict(self) -> dict:
        return {"metric": self.metric, "error": self.error, "excess": self.excess, "tolerance": self.tolerance,
                "samples": self.samples, "within": self.within}  # fmt: skip


def read_validation(path: Path) -> list[tuple[dict[str, np.ndarray], list[np.ndarray]]]:
    """(sample, fp32 outputs) pairs from a plan's ``validation.npz``."""
    with np.load(path, allow_pickle=False) as arrays:
        entries = {key: arrays[key] for key in arrays.files}
    count = 1 + max((int(key.split(":", 1)[0]) for key in entries), default=-1)
    pairs = []
    for index in range(count):
        parts = [key.split(":", 2) for key in entries if key.startswith(f"{index}:")]
        sample = {name: entries[f"{index}:sample:{name}"] for _, kind, name in parts if kind == "sample"}
        outputs = {int(name): entries[f"{index}:fp32:{name}"] for _, kind, name in parts if kind == "fp32"}
        pairs.append((sample, [outputs[k] for k in sorted(outputs)]))
    return pairs


def recheck(path: Path, run: Callable[[Mapping[str, np.ndarray]], list[np.ndarray]], metric_name: str,
            fp32_error: float, tolerance: float) -> Recheck:  # fmt: skip
    """The plan's error again, on the validation samples saved at ``path`` (``run``: the plan on a sample)."""
    metric = load_metric(metric_name)
    pairs = read_validation(path)
    errors = [sample_error(metric, sample, reference, run(sample)) for sample, reference in pairs]
    error = float(np.mean(errors)) if errors else float("nan")
    return Recheck(metric_name, error, error - fp32_error, tolerance, len(pairs))
