"""Tuning records as a training set: portable features and relative throughputs, one row per measurement.

Any tuning work directory is a source (``rlcompile tune``, ``optimize``'s kernel stage, the benchmarks):
its journal has every measured configuration, its database the workloads they belong to, and its
``environment.json`` the CPU signature it was measured on. Unlike ``--warm-start``, directories from other
machines are read, but only of one vector-ISA class (AVX-512 and AVX2 kernels are different programs to
rank), and every row keeps its task and source so that an evaluation can hold a whole model out.

A row's label is the measurement's throughput relative to its task's best in that directory
(``best / seconds``; a failed build or run is 0): comparable across tasks of any size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlcompile.errors import RlcompileError
from rlcompile.kernel.pretrained.features import FEATURE_NAMES, PortableFeatures
from rlcompile.kernel.transfer import measured_tasks, relative_throughput
from rlcompile.machine import isa_class_of_signature


@dataclass
class SourceTask:
    """One task's measurements in one work directory."""

    source: str
    key: str
    features: np.ndarray
    labels: np.ndarray


@dataclass
class Dataset:
    """Rows of portable features with labels, and which task and source each row came from."""

    features: np.ndarray
    labels: np.ndarray
    tasks: np.ndarray  # workload key per row
    sources: np.ndarray  # work directory name per row
    isa: str
    cpu_signatures: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    def select(self, keep: np.ndarray) -> Dataset:
        """The rows where the boolean mask ``keep`` is true."""
        return Dataset(self.features[keep], self.labels[keep], self.tasks[keep], self.sources[keep], self.isa,
                       self.cpu_signatures)  # fmt: skip

    def without(self, task_keys: set[str]) -> Dataset:
        """The rows of every task but ``task_keys`` (leave-one-model-out)."""
        return self.select(~np.isin(self.tasks, sorted(task_keys)))

    def without_sources(self, sources: set[str]) -> Dataset:
        """The rows of every work directory but those named ``sources`` (a held-out model's own runs)."""
        return self.select(~np.isin(self.sources, sorted(sources)))

    def save(self, path: Path) -> None:
        np.savez_compressed(path, features=self.features, labels=self.labels, tasks=self.tasks, sources=self.sources,
                            isa=self.isa, cpu_signatures=np.array(self.cpu_signatures),
                            feature_names=np.array(FEATURE_NAMES))  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> Dataset:
        with np.load(path) as data:
            if tuple(data["feature_names"]) != FEATURE_NAMES:
                raise RlcompileError(f"{path}: a dataset of other features; rebuild it from its work directories")
            return cls(data["features"], data["labels"], data["tasks"].astype(str), data["sources"].astype(str),
                       str(data["isa"]), [str(s) for s in data["cpu_signatures"]])  # fmt: skip

    @classmethod
    def from_work_dirs(cls, directories: Sequence[Path], target) -> Dataset:
        """Every measured task of every directory; all must share one vector-ISA class."""
        signatures = {str(d): work_dir_signature(Path(d)) for d in directories}
        classes = {work_dir_isa(Path(d), signature) for d, signature in signatures.items()}
        if len(classes) > 1:
            raise RlcompileError(f"the work directories mix vector-ISA classes ({', '.join(sorted(classes))}); "
                                 "train one model per class")  # fmt: skip
        parts = [task for d in directories for task in source_tasks(Path(d), target)]
        if not parts:
            raise RlcompileError("the work directories hold no valid measurement to train on")
        return cls(np.concatenate([p.features for p in parts]), np.concatenate([p.labels for p in parts]),
                   np.concatenate([[p.key] * len(p.labels) for p in parts]),
                   np.concatenate([[p.source] * len(p.labels) for p in parts]),
                   classes.pop(), sorted(set(signatures.values())))  # fmt: skip


def work_dir_signature(directory: Path) -> str:
    """The CPU signature a work directory was measured on (one line when it is not a work directory)."""
    path = directory / "environment.json"
    if not path.exists() or not (directory / "measurements.jsonl").exists():
        raise RlcompileError(f"{directory}: not a tuning work directory with measurements")
    recorded = json.loads(path.read_text())
    return recorded.get("cpu_signature") or recorded.get("recorded", {}).get("cpu_signature", "")


def work_dir_isa(directory: Path, signature: str) -> str:
    """The vector-ISA class of the kernels a work directory measured: its target's (a Zen 4 tuning for
    ``{"kind": "llvm", "mcpu": "znver3"}`` measured AVX2 kernels), bounded by the CPU it ran on
    (``signature``, :func:`work_dir_signature`)."""
    target = json.loads((directory / "environment.json").read_text()).get("target", "llvm")
    if target == "llvm":
        return isa_class_of_signature(signature)
    from rlcompile.tvm_bridge import target_isa, tvm

    return target_isa(tvm.target.Target(target), frozenset(signature.split()))  # parsed, not checked against a device


def source_tasks(directory: Path, target) -> Iterator[SourceTask]:
    """Each task of a work directory with at least one valid measurement."""
    from tvm.s_tir.analysis import estimate_tir_flops
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    database = JSONDatabase(str(directory / "database_workload.json"), str(directory / "database_tuning_record.json"),
                            allow_missing=True)  # fmt: skip
    for task in measured_tasks(directory, database, target):
        portable = PortableFeatures(task.space, float(estimate_tir_flops(task.mod)))
        yield SourceTask(directory.name, task.key, portable(task.configs), relative_throughput(task.seconds))
