"""Warm-starting the knob cost model from earlier work directories (``rlcompile tune --warm-start DIR``).

A configuration's knob *indices* mean nothing on another shape (the domain of a tile knob depends on the
loop extent), but its *decisions* carry: log2 of every tile factor, which unroll candidate, which loop a
block is computed at. Tasks whose design spaces have the same structure (same knob kinds, tile parts and
categorical candidates: e.g. every conv2d of a model) share that feature layout, so the measurements of
one can train the cost model of another, as AutoTVM's transfer learning does across workloads of one
template. Labels are each source task's relative throughput (its best / this cost; failures 0), which is
comparable across tasks of different sizes.

Search agents carry too: ``rl`` and ``chameleon`` keep their PPO network per task in ``WORK/agents/``
(also what a resumed run continues from), and a new task of the same structure starts from the source
agent that saw most measurements.

Only work directories made on this machine with this target are read (the same check a resumed run
makes): a record from another CPU is refused.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlcompile.atomic import replacing
from rlcompile.errors import RlcompileError
from rlcompile.kernel.space import Config, KnobSpace

Signature = tuple


def space_signature(space: KnobSpace) -> Signature:
    """What two spaces must share for their decision features to line up."""
    return tuple(
        (knob.kind, len(knob.values[0]) if knob.kind == "tile" else knob.name.split(" ", 1)[-1])
        for knob in space.knobs
    )


def decision_features(space: KnobSpace, configs: Sequence[Config]) -> np.ndarray:
    """Per knob: log2 of each tile factor, the categorical candidate's position, the compute location."""
    rows = []
    for config in configs:
        row: list[float] = []
        for knob, index in zip(space.knobs, config, strict=True):
            value = knob.values[index]
            if knob.kind == "tile":
                row += [math.log2(factor) for factor in value]
            else:
                row.append(float(value) if knob.kind == "compute_location" else float(index))
        rows.append(row)
    return np.array(rows, dtype=np.float32)


@dataclass
class Prior:
    """Measurements of other tasks, as decision features and relative throughputs, for one signature."""

    features: np.ndarray
    labels: np.ndarray
    tasks: int

    def __len__(self) -> int:
        return len(self.labels)


def relative_throughput(seconds: Sequence[float | None]) -> np.ndarray:
    valid = [s for s in seconds if s is not None]
    best = min(valid)
    return np.array([best / s if s is not None else 0.0 for s in seconds], dtype=np.float32)


def agent_path(work_dir: Path, task_key: str) -> Path:
    return Path(work_dir) / "agents" / f"{task_key}.pt"


def save_agent(work_dir: Path, task_key: str, space: KnobSpace, strategy: str, trials: int, state: dict) -> None:
    """Keep a search agent's learned state with the task it learned on (atomically: a kill leaves the old one)."""
    import torch

    path = agent_path(work_dir, task_key)
    with replacing(path) as scratch:
        torch.save({"signature": space_signature(space), "strategy": strategy, "trials": trials, "state": state},
                   scratch)  # fmt: skip


def load_agent(path: Path) -> dict | None:
    """A saved agent, or None when the file is unreadable (a damaged file is not worth a failed run)."""
    import torch

    try:
        return torch.load(path, weights_only=True)
    except Exception:
        return None


class WarmStart:
    """The measurements (and search agents) of earlier work directories, grouped by design-space signature."""

    def __init__(self, priors: dict[Signature, Prior], sources: list[str], agents: list[dict] | None = None) -> None:
        self.priors = priors
        self.sources = sources
        self.agents = agents or []

    def prior_for(self, space: KnobSpace) -> Prior | None:
        return self.priors.get(space_signature(space))

    def agent_for(self, space: KnobSpace, strategy: str) -> dict | None:
        """The learned state of the same strategy on the source task of this structure with most trials."""
        signature = space_signature(space)
        matching = [a for a in self.agents if a["strategy"] == strategy and tuple(a["signature"]) == signature]
        return max(matching, key=lambda a: a["trials"])["state"] if matching else None

    @property
    def samples(self) -> int:
        return sum(len(prior) for prior in self.priors.values())

    @classmethod
    def load(cls, directories: Sequence[Path], target, target_text: str) -> WarmStart:
        """Read every directory's journal, workloads and saved agents."""
        grouped: dict[Signature, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
        for directory in directories:
            for space, configs, seconds in source_tasks(Path(directory), target, target_text):
                grouped[space_signature(space)].append((decision_features(space, configs),
                                                        relative_throughput(seconds)))  # fmt: skip
        priors = {signature: Prior(np.concatenate([f for f, _ in parts]), np.concatenate([y for _, y in parts]),
                                   len(parts)) for signature, parts in grouped.items()}  # fmt: skip
        agents = [agent for d in directories for path in sorted((Path(d) / "agents").glob("*.pt"))
                  if (agent := load_agent(path)) is not None]  # fmt: skip
        return cls(priors, [str(d) for d in directories], agents)


def source_tasks(directory: Path, target, target_text: str):
    """Each task of a work directory with at least one valid measurement: (space, configs, seconds)."""
    from rlcompile.kernel.workdir import WorkDir

    if not (directory / "environment.json").exists() or not (directory / "measurements.jsonl").exists():
        raise RlcompileError(f"--warm-start {directory}: not a tuning work directory with measurements")
    try:
        work_dir = WorkDir(directory, target_text)  # refuses records of another machine or target
    except RlcompileError as error:
        raise RlcompileError(f"--warm-start: {error}".replace(" (use another --work-dir)", "")) from None
    for task in measured_tasks(directory, work_dir.database, target):
        yield task.space, task.configs, task.seconds


@dataclass
class MeasuredTask:
    """One task of a work directory: its workload, knob space and measured configurations (None: failed)."""

    key: str
    mod: object  # tvm.IRModule
    space: KnobSpace
    configs: list[Config]
    seconds: list[float | None]


def measured_tasks(directory: Path, database, target) -> Iterator[MeasuredTask]:
    """Each task of a work directory's journal with at least one valid measurement, its workload read from the
    directory's MetaSchedule ``database`` (what ``--warm-start`` and ``rlcompile pretrain`` both read)."""
    from rlcompile.kernel.workdir import read_journal
    from rlcompile.tvm_bridge import load_tensor_intrinsics, module_key

    workloads = {}
    for record in database.get_all_tuning_records():
        workloads.setdefault(module_key(record.workload.mod), record.workload.mod)
    entries: dict[str, list[dict]] = defaultdict(list)
    for entry in read_journal(directory / "measurements.jsonl"):
        if entry.get("config") is not None and entry["task"] in workloads:
            entries[entry["task"]].append(entry)
    load_tensor_intrinsics(target)
    for key, measured in entries.items():
        space = KnobSpace.for_workload(workloads[key], target, key)
        usable = [e for e in measured if space.contains(tuple(e["config"]))]
        if any(e["status"] == "ok" for e in usable):
            yield MeasuredTask(key, workloads[key], space, [tuple(e["config"]) for e in usable],
                               [e["seconds"] if e["status"] == "ok" else None for e in usable])  # fmt: skip
