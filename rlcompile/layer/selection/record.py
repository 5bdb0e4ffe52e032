"""What ``select`` returns: the table, the agent's result, the candidates, the final contest's measurements and the
plan chosen."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlcompile.layer.group_table import (
    GroupedModel,
)
from rlcompile.layer.selection.candidates import Candidate, pick
from rlcompile.layer.selection.pricing import Judged
from rlcompile.layer.solvers import SolverResult
from rlcompile.layer.table import LookupTable
from rlcompile.measure import (
    LatencyStats,
    MachineLoad,
    Standings,
    Timer,
)
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.runtimes.ort import run_proto


@dataclass
class Selection(Judged):
    """Everything ``select`` found: the table, the agent's result, the candidates and the winner."""

    model: LoadedModel = field(repr=False)
    grouped: GroupedModel = field(repr=False)
    agent: str
    threads: int
    table: LookupTable = field(repr=False)
    table_file: Path
    table_reused: bool
    result: SolverResult
    candidates: list[Candidate]
    chosen: Candidate
    natives: dict[str, LatencyStats] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    rounds: int = 0  # how many rounds the final contest took
    #: the native runs' timers (sessions compiled once: the precision searches' final contest times them again)
    native_calls: dict[str, Timer] = field(default_factory=dict, repr=False)
    #: each native run's block median in each round of the final contest, by round number
    native_round_ms: dict[str, dict[int, float]] = field(default_factory=dict)
    #: ONNX Runtime's outputs of the model on the grouped model's feeds (what the plans were checked against)
    reference: list[np.ndarray] | None = field(default=None, repr=False)
    #: the second compiles of the single-library plans no native run gauges (:data:`PLAN_TWIN`), by label
    plan_twin_calls: dict[str, Timer] = field(default_factory=dict, repr=False)
    #: what the final contest measured of them, and their block median in each of its rounds
    plan_twins: dict[str, LatencyStats] = field(default_factory=dict)
    plan_twin_round_ms: dict[str, dict[int, float]] = field(default_factory=dict)
    #: what else used the machine while the final contest ran
    load: MachineLoad | None = None
    #: how many of the final contest's blocks were timed again because the hypervisor took their time
    retimed: int = 0
    #: the libraries left out of the plans, by what the table's optimum would have gained with each
    #: (:func:`~rlcompile.layer.problem.idle_libraries`)
    left_out: dict[str, float] = field(default_factory=dict)

    def reference_outputs(self) -> list[np.ndarray]:
        """:attr:`reference`, computed on first use when the selection was made without it."""
        if self.reference is None:
            self.reference = run_proto(self.model.proto, self.grouped.feeds)
        return self.reference

    def take_final(self, final: Standings) -> None:
        """Record the final contest's native runs (their latencies and blocks by round) and its rounds, and pick the
        plan from the candidates' measurements in it, ties within its noise (:func:`pick`)."""
        names = self.native_calls or self.natives
        self.natives = {name: final[name] for name in names}
        self.native_round_ms = {name: final.round_ms.get(name, {}) for name in names}
        twins = [name for name in self.plan_twin_calls if name in final.stats]
        self.plan_twins = {name: final[name] for name in twins}
        self.plan_twin_round_ms = {name: final.round_ms.get(name, {}) for name in twins}
        self.rounds = final.rounds
        self.load = final.load
        self.retimed = final.retimed
        self.chosen = pick(self.candidates, noise=self.noise)

    def final_timers(self) -> dict[str, Timer]:
        """What a final contest times beside the candidates: the native runs and the plan twins (:data:`PLAN_TWIN`)."""
        return {**self.native_calls, **self.plan_twin_calls}

    def to_dict(self) -> dict:
        return {
            "model": self.model.name,
            "agent": self.agent,
            "threads": self.threads,
            "libraries": list(self.table.layouts),
            "unavailable_libraries": self.unavailable,
            "left_out": self.left_out,
            "table": str(self.table_file),
            "table_reused": self.table_reused,
            "agent_predicted_ms": self.result.total_ms,
            "episodes": self.result.episodes,
            "solver": self.result.extra,
            "context_factor": self.table.notes.get("context_factor"),
            "candidates": [candidate.to_dict() for candidate in self.candidates],
            "chosen": self.chosen.to_dict(),
            "native_ms": {name: stats.median_ms for name, stats in self.natives.items()},
            "plan_twin_ms": {name: stats.median_ms for name, stats in self.plan_twins.items()},
            "noise": self.noise,
            "paired_noise": self.paired_noise,
            "calibration_noise": self.calibration_noise,
            "rounds": self.rounds,
            "machine_load": self.load.to_dict() if self.load else None,
            "retimed_blocks": self.retimed,
            "drift": self.drift,
            "drift_by_library": self.drifts.to_dict(),
            "expected_ms": {", ".join(c.labels): self.expected_ms(c) for c in self.candidates},
            "measured_over_expected": {", ".join(c.labels): self.measured_over_expected(c)
                                       for c in self.candidates if c.measured},
            "round_ratios": {", ".join(c.labels): self.round_ratios(c) for c in self.candidates if c.measured},
            "native_round_ms": self.native_round_ms,
            "plan_twin_round_ms": self.plan_twin_round_ms,
            "groups": self.group_rows(),
        }

    def group_rows(self) -> list[dict]:
        """Per fusion group: its operators, the library chosen and every library's in-context time."""
        rows = []
        for group, library in zip(self.grouped.groups, self.chosen.assignment, strict=True):
            times = {name: round(ms, 4) for name, ms in self.table.options[group.name].items()}
            rows.append({"group": group.name, "ops": group.describe(), "library": library, "ms": times})
        return rows
