"""Knob spaces: a task's MetaSchedule design spaces as an ordered list of knobs with enumerable domains.

Every sampling decision of a design space's trace becomes a knob: ``SamplePerfectTile`` (all ordered
factorisations of the loop extent whose innermost factor respects the bound), ``SampleCategorical``
(candidate indices) and ``SampleComputeLocation`` (the locations legal under the default tiling; TVM
moves an illegal one to a legal one). When a task has several design spaces with the same sampling
sequence (for conv2d/matmul on LLVM they differ only in where the cache-write goes), the space index is
one more categorical knob. A configuration is a tuple of indices, one per knob, so a search can move
each knob up or down.

``to_schedule`` replays the chosen space's trace with the configuration's decisions and runs the
post-processors; an invalid configuration gives ``None``. Decisions TVM silently repairs are read back
with ``from_schedule``: de-duplicate on the effective configuration, not the requested one.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from rlcompile.errors import RlcompileError
from rlcompile.tvm_bridge import tvm

SAMPLING_KINDS = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation")
#: Compute locations probed when enumerating a SampleComputeLocation domain (-2 inline, -1 root).
MAX_PROBED_LOCATION = 64

Config = tuple[int, ...]
#: Random state of the design-space generation behind every knob space (see :meth:`KnobSpace.for_workload`).
SPACE_SEED = 0


@dataclass(frozen=True)
class Knob:
    """One decision: its kind, a readable name and its ordered domain of decision values."""

    kind: str  # "space" | "tile" | "categorical" | "compute_location"
    name: str
    values: tuple

    @property
    def size(self) -> int:
        return len(self.values)

    def index_of(self, value) -> int:
        """Index of a decision value; an unknown integer maps to the nearest known one."""
        try:
            return self.values.index(value)
        except ValueError:
            if isinstance(value, int) and all(isinstance(v, int) for v in self.values):
                return int(np.argmin([abs(v - value) for v in self.values]))
            raise


def factorizations(extent: int, parts: int, max_innermost: int) -> list[tuple[int, ...]]:
    """All ordered ``parts``-tuples of positive integers with product ``extent`` (lexicographic order)."""
    if parts == 1:
        return [(extent,)] if extent <= max_innermost or max_innermost <= 0 else []
    found = []
    for first in divisors(extent):
        for rest in factorizations(extent // first, parts - 1, max_innermost):
            found.append((first, *rest))
    return found


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def sampling_instructions(trace) -> list:
    return [inst for inst in trace.insts if inst.kind.name in SAMPLING_KINDS]


def signature(trace) -> tuple:
    """What a space's sampling sequence looks like: spaces with equal signatures share knobs."""
    return tuple((inst.kind.name, str(list(inst.attrs))) for inst in sampling_instructions(trace))


DECISION_PATTERN = re.compile(r"decision=(\[[^\]]*\]|-?\d+)")


def structure(trace) -> tuple[str, ...]:
    """A trace's program text without its decisions: tells which design space a schedule came from
    (spaces can differ only in which loop an instruction takes, so instruction kinds are not enough)."""
    return tuple(DECISION_PATTERN.sub("decision=?", str(line)) for line in trace.as_python())


def decision_value(decision):
    """A TVM decision as a plain Python value (tuple of ints for tiles, int otherwise)."""
    if isinstance(decision, Iterable):
        return tuple(int(d) for d in decision)
    return int(decision)


class KnobSpace:
    """The knobs of one task; converts between configurations and post-processed schedules."""

    def __init__(self, mod: tvm.IRModule, target: tvm.target.Target, design_spaces: Sequence, postprocs: Sequence):
        if not design_spaces:
            raise RlcompileError("the task has no design space")
        self.mod = mod
        self.target = target
        self.postprocs = list(postprocs)
        traces = [space.trace.simplified(remove_postproc=True) for space in design_spaces]
        first = signature(traces[0])
        self.traces = [trace for trace in traces if signature(trace) == first]
        self.dropped_spaces = len(traces) - len(self.traces)
        self.structures = [structure(trace) for trace in self.traces]
        self.knobs: list[Knob] = []
        if len(self.traces) > 1:
            self.knobs.append(Knob("space", "design space", tuple(range(len(self.traces)))))
        self.knobs += self._enumerate_knobs(self.traces[0])

    @classmethod
    def for_task(cls, context) -> KnobSpace:
        """The knob space of a MetaSchedule TuneContext's task (:meth:`for_workload`; its random state is not used)."""
        return cls.for_workload(context.mod, context.target, context.task_name, context.num_threads)

    @classmethod
    def for_workload(cls, mod: tvm.IRModule, target: tvm.target.Target, task_name: str = "task",
                     num_threads: int | str = "physical") -> KnobSpace:  # fmt: skip
        """Build from MetaSchedule's post-order-apply design spaces and post-processors for ``mod``.

        The design spaces are generated with a fixed random state: the legal compute locations are read
        off a space's own sampled tiling, so a space generated with another state can have another domain,
        and a configuration journaled under one seed (or read by ``--warm-start``) would not mean the same
        schedule under another.
        """
        from tvm.s_tir import meta_schedule as ms

        fixed = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name=task_name,
                               num_threads=num_threads, rand_state=SPACE_SEED)  # fmt: skip
        spaces = fixed.space_generator.generate_design_space(fixed.mod)
        return cls(fixed.mod, fixed.target, spaces, fixed.space_generator.postprocs)

    def contains(self, config: Config) -> bool:
        """Whether ``config`` is a configuration of this space (right length, every index in its domain)."""
        return len(config) == len(self.knobs) and all(0 <= i < n for i, n in zip(config, self.sizes, strict=True))

    @property
    def has_space_knob(self) -> bool:
        return bool(self.knobs) and self.knobs[0].kind == "space"

    @cached_property
    def sizes(self) -> np.ndarray:
        return np.array([knob.size for knob in self.knobs], dtype=np.int64)

    @property
    def log10_size(self) -> float:
        return float(np.sum(np.log10(self.sizes)))

    def _enumerate_knobs(self, trace) -> list[Knob]:
        """Replay the first space with its own decisions, recording every sampling decision's domain."""
        schedule = tvm.s_tir.Schedule(self.mod)
        knobs: list[Knob] = []

        def record(inst, inputs, attrs, decision):
            kind = inst.kind.name
            if kind not in SAMPLING_KINDS:  # TVM calls the provider for every instruction
                return decision
            position = len(knobs)
            if kind == "SamplePerfectTile":
                extent = int(schedule.get(inputs[0]).extent)
                parts, max_innermost = int(attrs[0]), int(attrs[1])
                values = tuple(factorizations(extent, parts, max_innermost))
                knobs.append(Knob("tile", f"tile{position} extent {extent} into {parts}", values))
            elif kind == "SampleCategorical":
                candidates = [int(c) for c in attrs[0]]
                knobs.append(Knob("categorical", f"categorical{position} {candidates}", tuple(range(len(candidates)))))
            else:
                legal = legal_compute_locations(schedule, inputs[0])
                knobs.append(Knob("compute_location", f"compute_location{position}", tuple(legal)))
            return decision

        trace.apply_to_schedule(schedule, remove_postproc=True, decision_provider=record)
        return knobs

    def random_config(self, rng: np.random.Generator) -> Config:
        return tuple(int(rng.integers(size)) for size in self.sizes)

    def decisions(self, config: Config) -> tuple[int, list]:
        """The design-space index and the decision values a configuration stands for."""
        if len(config) != len(self.knobs):
            raise ValueError(f"configuration has {len(config)} knobs, the space has {len(self.knobs)}")
        offset = 1 if self.has_space_knob else 0
        space = config[0] if self.has_space_knob else 0
        values = [knob.values[index] for knob, index in zip(self.knobs[offset:], config[offset:], strict=True)]
        return space, values

    def to_schedule(self, config: Config) -> tvm.s_tir.Schedule | None:
        """Replay + post-process; ``None`` when TVM rejects the configuration."""
        space, values = self.decisions(config)
        schedule = tvm.s_tir.Schedule(self.mod)
        chosen = iter(values)

        def provide(inst, inputs, attrs, decision):
            if inst.kind.name not in SAMPLING_KINDS:
                return decision
            value = next(chosen)
            return list(value) if isinstance(value, tuple) else value

        try:
            self.traces[space].apply_to_schedule(schedule, remove_postproc=True, decision_provider=provide)
            schedule.enter_postproc()
            if not all(postproc.apply(schedule) for postproc in self.postprocs):
                return None
        except (tvm.TVMError, ValueError, RuntimeError, IndexError, TypeError):
            return None
        return schedule

    def from_schedule(self, schedule: tvm.s_tir.Schedule) -> Config | None:
        """The effective configuration of a schedule produced from one of this task's spaces."""
        trace = schedule.trace
        kinds = structure(trace.simplified(remove_postproc=True))
        space = self.structures.index(kinds) if kinds in self.structures else None
        if space is None:
            return None
        offset = 1 if self.has_space_knob else 0
        config = [space] if self.has_space_knob else []
        for knob, inst in zip(self.knobs[offset:], sampling_instructions(trace), strict=False):
            try:
                config.append(knob.index_of(decision_value(trace.decisions[inst])))
            except (ValueError, KeyError):
                return None
        return tuple(config) if len(config) == len(self.knobs) else None

    def normalized(self, configs: Sequence[Config]) -> np.ndarray:
        """Configurations scaled to [0, 1] per knob (index / (size - 1)): the RL state and k-means input."""
        array = np.asarray(configs, dtype=np.float64).reshape(len(configs), len(self.knobs))
        return array / np.maximum(self.sizes - 1, 1)

    def neighbours(self, config: Config, radius: int = 1) -> list[Config]:
        """Configurations ``radius`` steps up or down on one knob (the droplet / RL move set)."""
        found = []
        for position, size in enumerate(self.sizes):
            for step in (-radius, radius):
                value = config[position] + step
                if 0 <= value < size:
                    found.append(with_knob(config, position, value))
        return found


def with_knob(config: Config, position: int, value: int) -> Config:
    """``config`` with one knob set to ``value``."""
    return (*config[:position], value, *config[position + 1 :])


def legal_compute_locations(schedule: tvm.s_tir.Schedule, block) -> list[int]:
    """Locations where ``sample_compute_location`` keeps the decision (TVM repairs the others)."""
    legal = []
    for location in itertools.chain((-2, -1), range(MAX_PROBED_LOCATION)):
        probe = schedule.copy()
        try:
            probe.sample_compute_location(block, decision=location)
        except (tvm.TVMError, ValueError, RuntimeError):
            continue
        if decision_value(probe.trace.decisions[probe.trace.insts[-1]]) == location:
            legal.append(location)
    return legal
