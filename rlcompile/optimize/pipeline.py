"""``rlcompile optimize``: graph -> kernel -> layer, composed into one verified plan directory.

The output directory is a plan directory (see :mod:`rlcompile.plan`) whose manifest also records every
stage's decision and the measured latencies, plus ``report.md`` and ``report.png``. Its ``work/``
folder holds what the stages finished (``state.json``, the kept graph, the tuning journal and
database, the layer's lookup table), so the same command run again continues where it stopped: a
finished stage whose inputs did not change is reused, the kernel level resumes its journal with the
time it has left, the layer level resumes its profile at the group where it stopped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlcompile import atomic
from rlcompile.errors import ModelError, RlcompileError
from rlcompile.layer.selection import Selection
from rlcompile.locks import exclusive
from rlcompile.models import Shape, load_model
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.optimize.budget import DEFAULT_BUDGET_S, LEVELS, Budget
from rlcompile.optimize.stages import StageSettings, graph_stage, kernel_stage, layer_stage
from rlcompile.plan import MANIFEST, fingerprint, is_plan_dir, save_plan

WORK = "work"
STATE = "state.json"
Progress = Callable[[str], None]


@dataclass
class OptimizeRequest:
    """Everything ``rlcompile optimize`` takes."""

    model: str
    output: Path
    input_shapes: dict[str, Shape] = field(default_factory=dict)
    budget_s: float = DEFAULT_BUDGET_S
    levels: tuple[str, ...] = LEVELS
    settings: StageSettings = field(default_factory=StageSettings)

    @property
    def budget(self) -> Budget:
        return Budget(self.budget_s, tuple(self.levels))


@dataclass
class OptimizeResult:
    """The plan directory written, its manifest, and the selection (``None`` when reused as it was)."""

    output: Path
    manifest: dict
    selection: Selection | None = None

    @property
    def reused(self) -> bool:
        return self.selection is None


class RunState:
    """``work/state.json``: finished stages with the inputs they ran on, and time spent per stage."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}
        self.data.setdefault("stages", {})
        self.data.setdefault("spent_s", {})

    def reuse(self, stage: str, key: dict) -> dict | None:
        """The stage's record if it finished on these same inputs."""
        saved = self.data["stages"].get(stage)
        return saved["record"] if saved and saved.get("key") == key else None

    def finish(self, stage: str, key: dict, record: dict) -> None:
        self.data["stages"][stage] = {"key": key, "record": record}
        self.save()

    def spent(self, stage: str) -> float:
        return float(self.data["spent_s"].get(stage, 0.0))

    def set_spent(self, stage: str, seconds: float) -> None:
        self.data["spent_s"][stage] = seconds
        self.save()

    def save(self) -> None:
        atomic.write_json(self.path, self.data, indent=1)


def optimize(request: OptimizeRequest, progress: Progress = lambda message: None) -> OptimizeResult:
    """Run the chosen levels in order on the model and write the fastest verified plan to ``request.output``."""
    started = time.monotonic()
    model = load_model(request.model, request.input_shapes)
    output = Path(request.output)
    progress(f"optimizing {model.name}: levels {', '.join(request.levels)}, budget {request.budget.total_s:.0f} s, "
             f"{request.settings.threads} threads, output {output}/")  # fmt: skip
    if output.exists() and not output.is_dir():
        raise RlcompileError(f"-o {output} exists and is not a directory")
    key = run_key(request, model)
    done = finished_manifest(output, key)
    if done is not None:
        progress(f"{output} already holds this optimisation (same model, levels, agents and budget): reusing it")
        return OptimizeResult(output, done)
    with exclusive(output, "output directory"):
        return run_stages(request, model, key, started, progress)


def run_stages(request: OptimizeRequest, model: LoadedModel, key: dict, started: float,
               progress: Progress) -> OptimizeResult:  # fmt: skip
    """The stages of :func:`optimize`, with the output directory locked against a second process."""
    settings, budget = request.settings, request.budget
    output, work = Path(request.output), Path(request.output) / WORK
    work.mkdir(parents=True, exist_ok=True)
    state = RunState(work / STATE)
    stages: dict[str, dict] = {}
    current, graph_unused_s = model, 0.0
    if "graph" in request.levels:
        current, stages["graph"] = run_graph_stage(model, settings, budget, work, state, progress)
        graph_unused_s = max(0.0, budget.share_s("graph") - stages["graph"]["wall_s"])
    tuning_db = None
    if "kernel" in request.levels:
        stages["kernel"] = run_kernel_stage(current, settings, budget, work, state, graph_unused_s, progress)
        tuning_db = None if stages["kernel"].get("skipped") else work / "tuning"
    progress("layer: choosing the library of each fusion group" if "layer" in request.levels
             else "choosing the fastest single library (the layer level was not asked for)")  # fmt: skip
    table_dir = work / "tables" / f"kernel-{stages.get('kernel', {}).get('trials', 0)}"
    selection, stages["layer"] = layer_stage(current, model, settings, tuning_db, table_dir, progress,
                                             mixed="layer" in request.levels)  # fmt: skip
    extra = {"optimize": {"key": key, "request": describe(request), "budget": budget.to_dict(),
                          "stages": stages, "latency": stage_latencies(selection, stages),
                          "wall_s": time.monotonic() - started}}  # fmt: skip
    save_plan(selection, output, tuning_db, extra)
    manifest = json.loads((output / MANIFEST).read_text())
    from rlcompile.report.optimize import write_report

    write_report(output, manifest)
    return OptimizeResult(output, manifest, selection)


def run_key(request: OptimizeRequest, model: LoadedModel) -> dict:
    """What makes two runs the same optimisation (the output directory is reused only for the same key)."""
    return {"fingerprint": fingerprint(model), "levels": list(request.levels), "budget_s": request.budget_s,
            **{k: v for k, v in asdict(request.settings).items() if k != "timing"}}  # fmt: skip


def describe(request: OptimizeRequest) -> dict:
    return {"model": request.model, "input_shapes": {k: list(v) for k, v in request.input_shapes.items()},
            "levels": list(request.levels), "budget_s": request.budget_s,
            **{k: v for k, v in asdict(request.settings).items() if k != "timing"}}  # fmt: skip


def finished_manifest(output: Path, key: dict) -> dict | None:
    """The manifest already in ``output`` when it came from this same optimisation."""
    if not is_plan_dir(output):
        return None
    try:
        manifest = json.loads((output / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if manifest.get("optimize", {}).get("key") == key else None


def run_graph_stage(model: LoadedModel, settings: StageSettings, budget: Budget, work: Path, state: RunState,
                    progress: Progress) -> tuple[LoadedModel, dict]:  # fmt: skip
    import onnx

    key = {"fingerprint": fingerprint(model), "agent": settings.graph_agent, "seed": settings.seed,
           "limit_s": budget.share_s("graph"), "threads": settings.threads}  # fmt: skip
    record = state.reuse("graph", key)
    if record is not None:
        progress(f"graph: reusing the finished stage ({'rewrite kept' if record['kept'] else 'original kept'})")
        if not record["kept"]:
            return model, record | {"reused": True}
        proto = onnx.load(str(work / "graph.onnx"))
        return LoadedModel(model.name, proto, list(model.inputs), model.source, list(model.notes)), record
    progress(f"graph: {settings.graph_agent} searches rewrites for up to {budget.share_s('graph'):.0f} s")
    current, record = graph_stage(model, settings, budget.share_s("graph"), work, progress)
    progress(f"graph: {record['reason']}")
    state.finish("graph", key, record)
    return current, record


def run_kernel_stage(model: LoadedModel, settings: StageSettings, budget: Budget, work: Path, state: RunState,
                     graph_unused_s: float, progress: Progress) -> dict:  # fmt: skip
    key = {"fingerprint": fingerprint(model), "strategy": settings.strategy, "trials": settings.trials,
           "seed": settings.seed, "limit_s": budget.share_s("kernel")}  # fmt: skip
    record = state.reuse("kernel", key)
    if record is not None:
        progress(f"kernel: reusing the finished stage ({record['tuned_tasks']}/{record['tasks']} tasks tuned)")
        return record
    spent = state.spent("kernel")
    allowed = budget.share_s("kernel") + graph_unused_s - spent
    progress(f"kernel: {settings.strategy} tunes for up to {max(allowed, 0):.0f} s"
             + (f" ({spent:.0f} s already spent)" if spent else ""))  # fmt: skip
    began = time.monotonic()
    try:
        record = kernel_stage(model, settings, began + max(allowed, 0.0), work / "tuning", progress,
                              on_batch=lambda: state.set_spent("kernel", spent + time.monotonic() - began))  # fmt: skip
    except ModelError as error:  # TVM cannot take this model (e.g. an operator it cannot import): go on without
        progress(f"kernel: skipped, {error}; the layer level chooses among the other libraries")
        record = {"strategy": settings.strategy, "skipped": str(error), "tasks": 0, "tuned_tasks": 0,
                  "trials": 0, "resumed_trials": 0, "failed_trials": 0, "best_ms": {},
                  "wall_s": time.monotonic() - began}  # fmt: skip
    state.set_spent("kernel", spent + time.monotonic() - began)
    state.finish("kernel", key, record)
    return record


def stage_latencies(selection: Selection, stages: dict[str, dict]) -> dict:
    """Latency after each stage, all from the layer stage's one alternating measurement.

    ``original``: the faster of ONNX Runtime and OpenVINO run natively on the user's model;
    ``graph``: the faster of the two on the graph that went on (the original when no rewrite was kept);
    ``kernel``: that or the whole graph in TVM with the tuned kernels, if it ran; ``layer``: the plan kept.
    """
    natives = {name: stats.median_ms for name, stats in selection.natives.items() if "identical" not in name}
    measured = {label: c.measured.median_ms for c in selection.candidates if c.measured for label in c.labels}
    original = min(natives.values())
    graph = original
    if stages.get("graph", {}).get("kept"):
        graph = min([measured[k] for k in ("single:ort", "single:openvino") if k in measured] or [original])
    kernel = min(graph, measured.get("single:tvm", float("inf")))
    final = selection.chosen.measured.median_ms
    return {"native_ms": natives, "original_ms": original, "after_graph_ms": graph, "after_kernel_ms": kernel,
            "final_ms": final, "speedup": original / final, "noise": selection.noise,
            "agreement": selection.chosen.agreement.to_dict() if selection.chosen.agreement else None}  # fmt: skip
