"""The layer level end to end: fuse, profile (or reuse the table), solve, run the plan, time it.

``select`` is what ``rlcompile select`` runs. Batch normalisation is folded into the convolutions
first (the graph level's fusion rules), as every inference library does, so the table's layers are
the ones a library would run. The chosen plan is executed by :class:`~rlcompile.layer.per_operator.engine.Engine`,
checked against ONNX Runtime on random inputs, and timed in turns with ONNX Runtime running the
whole original graph natively (ORT_ENABLE_ALL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rlcompile.events import Event, Listener, Phase, Reuse, ignore
from rlcompile.graph.cleanup import clean_model
from rlcompile.layer import solvers
from rlcompile.layer.per_operator import primitives
from rlcompile.layer.per_operator.engine import Engine
from rlcompile.layer.per_operator.network import Network, network_from_model
from rlcompile.layer.per_operator.table import load_or_profile, table_path
from rlcompile.layer.problem import SelectionProblem
from rlcompile.layer.solvers import SolverResult
from rlcompile.layer.table import LookupTable
from rlcompile.measure import DEFAULT, REPORT_ROUNDS, Contender, LatencyStats, MeasureConfig, run_contest
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.runtimes import RuntimeOptions
from rlcompile.runtimes.ort import OrtRuntime, run_proto
from rlcompile.verify import Agreement, compare_outputs


@dataclass
class SelectRun:
    model_name: str
    agent: str
    table: LookupTable = field(repr=False)
    problem: SelectionProblem = field(repr=False)
    result: SolverResult
    table_file: Path
    table_reused: bool
    agreement: Agreement | None = None
    fallbacks: dict[str, str] = field(default_factory=dict)
    plan_ms: LatencyStats | None = None
    ort_ms: LatencyStats | None = None

    @property
    def plan(self) -> dict[str, str]:
        return self.problem.names(self.result.plan)

    def rows(self) -> list[dict]:
        """Per layer: the choice, its time and the conversions it pays on its inputs."""
        layout_of: dict[int, str] = {}
        rows = []
        for index, choice in enumerate(self.result.plan):
            option = self.problem.options[index][choice]
            step = self.problem.step_cost(index, choice, layout_of)
            layout_of[index] = option.layout
            rows.append({"layer": self.table.layers[index], "primitive": option.primitive, "layout": option.layout,
                         "layer_ms": option.ms, "conversion_ms": step - option.ms})  # fmt: skip
        return rows

    def to_dict(self) -> dict:
        return {
            "model": self.model_name,
            "agent": self.agent,
            "plan": self.plan,
            "predicted_ms": self.result.total_ms,
            "episodes": self.result.episodes,
            "solver": self.result.extra,
            "measured_plan_ms": self.plan_ms.median_ms if self.plan_ms else None,
            "ort_native_ms": self.ort_ms.median_ms if self.ort_ms else None,
            "agreement": self.agreement.to_dict() if self.agreement else None,
            "table": str(self.table_file),
            "fallbacks": self.fallbacks,
            "layers": self.rows(),
        }


def prepare(
    model: LoadedModel, table_dir: Path | None = None, progress: Listener = ignore, threads: int = 1
) -> tuple[Network, LookupTable, Path, bool]:
    """The fused network and its lookup table (profiled now, or read from where it was saved)."""
    network = network_from_model(clean_model(model))
    path = table_path(model, threads, table_dir)
    table, reused = load_or_profile(model, network, path, progress)
    progress(Reuse("layer", f"reused the lookup table {path}", "table") if reused
             else Event("layer", f"wrote the lookup table {path}"))  # fmt: skip
    return network, table, path, reused


def select(
    model: LoadedModel,
    agent: str,
    seed: int = 0,
    table_dir: Path | None = None,
    timing: MeasureConfig | None = DEFAULT,
    progress: Listener = ignore,
    threads: int = 1,
    **solver_options: object,
) -> SelectRun:
    """Choose a primitive per layer with ``agent``; run, verify and (unless ``timing`` is None) time the plan.

    Every library (the plan's and ONNX Runtime's native run alike) uses ``threads`` threads.
    """
    solver = solvers.create(agent, **solver_options)
    with primitives.thread_limit(threads):
        network, table, path, reused = prepare(model, table_dir, progress, threads)
        problem = SelectionProblem(table)
        progress(Phase("layer", f"solving with {agent} over {len(problem)} layers", "solve"))
        result = solver.solve(problem, seed)
        run = SelectRun(model.name, agent, table, problem, result, path, reused)
        progress(Phase("layer", "running the plan end to end", "run"))
        engine = Engine(network, run.plan)
        run.fallbacks = engine.fallbacks
        for layer, why in engine.fallbacks.items():
            progress(Event("layer", f"{layer}: chosen primitive failed here ({why}); ran {primitives.DEFAULT} "
                           "instead"))  # fmt: skip
        feeds = model.random_inputs(seed)
        run.agreement = compare_outputs(run_proto(model.proto, feeds), engine.run(feeds))
        if timing is not None:
            progress(Phase("layer", "timing the plan and ONNX Runtime (whole graph, ORT_ENABLE_ALL) side by side",
                           "measure"))  # fmt: skip
            native = model.compile(OrtRuntime("all"), RuntimeOptions(threads, exclusive=True))
            contenders = [Contender("plan", lambda: engine.run(feeds)),
                          Contender.from_timer("ort native", native.timed(feeds))]
            standings = run_contest(contenders, timing, REPORT_ROUNDS)
            run.plan_ms, run.ort_ms = standings["plan"], standings["ort native"]
    return run


def write_plan(run: SelectRun, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run.to_dict(), indent=1))
