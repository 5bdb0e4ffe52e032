"""The three stages of ``optimize``, each a short call into its level, each decision measured.

A :class:`Stage` has a name, a resume key (the inputs it ran on: a finished stage whose key did not
change is reused from ``work/state.json``), ``run`` (returns its typed record) and ``reuse`` (puts a
reused record's result back into the :class:`StageContext`). The context is what flows from one stage to
the next: the graph that goes on, the tuning database, the time the graph stage left unused.

* :class:`GraphStage`: the graph agent rewrites; the rewrite is kept only if it wins the graph level's
  contest against the original (:func:`rlcompile.graph.api.judge`).
* :class:`KernelStage`: the kernel level tunes the TVM tasks of the cleaned graph that goes on, most
  important first, until its deadline; the tuning journal makes it resumable.
* :class:`LayerStage`: a runtime per fusion group among ONNX Runtime, OpenVINO, PyTorch (oneDNN) and TVM
  with the records just tuned; every candidate plan, the single runtimes and the original model run
  natively meet in one contest and the fastest is kept.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rlcompile import atomic, runtimes
from rlcompile.errors import ModelError, RlcompileError, first_line
from rlcompile.events import Decision, Event, Listener, Phase, Reuse, Step
from rlcompile.layer.selection.record import Selection
from rlcompile.manifest import STAGE_RECORDS, GraphRecord, KernelRecord, LayerRecord, Record
from rlcompile.measure import DEFAULT, MeasureConfig
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.names import DEFAULT_LAYOUT
from rlcompile.optimize.budget import GRAPH_SEARCH_SHARE, JUDGE_SHARE, KERNEL_FLOOR_S, Budget
from rlcompile.plan import fingerprint
from rlcompile.precision.choose import choose_plan
from rlcompile.precision.contract import DEFAULT_TOLERANCE, AccuracyContract

if TYPE_CHECKING:
    from rlcompile.kernel.headroom import Headroom
    from rlcompile.kernel.tasks import Task

GRAPH_FILE = "graph.onnx"
TUNING = "tuning"


@dataclass
class StageSettings:
    """What the stages need besides the model: agents, seed, threads and timing."""

    graph_agent: str = "ppo"
    strategy: str = "chameleon"
    #: the kernel cost model's pretrained prior (``--cost-model``: default, none or a file)
    cost_model: str = "default"
    #: the convolutions' layout in the kernel stage's tuning and TVM's segments (``--layout``; ``auto``:
    #: :func:`rlcompile.kernel.tasks.automatic_layout`)
    layout: str = DEFAULT_LAYOUT
    layer_agent: str = "qlearning"
    trials: int | None = None
    seed: int = 0
    threads: int = 1
    libraries: str | None = None
    timing: MeasureConfig = DEFAULT
    #: the accuracy contract (``--precision`` etc.; fp32: exact, as without it)
    precision: str = "fp32"
    data: str | None = None
    metric: str = "rel-l2"
    tolerance: float = DEFAULT_TOLERANCE
    #: what the plan is judged on (``--objective``): single-request latency, or inferences per second with
    #: ``concurrency`` requests in flight (:mod:`rlcompile.optimize.serving`)
    objective: str = "latency"
    concurrency: int | None = None

    @property
    def exact(self) -> bool:
        """Whether the accuracy contract keeps fp32 (allows no lowered precision)."""
        return self.precision == "fp32"

    def describe(self) -> dict:
        """The settings as the manifest and the run key record them (timing is not part of a run's identity;
        the accuracy contract only when it allows a lowered precision)."""
        return {key: value for key, value in asdict(self).items()
                if key != "timing" and not (self.exact and key in CONTRACT_FIELDS)
                and not (self.objective == "latency" and key in SERVING_FIELDS)}  # fmt: skip

    @property
    def contract(self) -> AccuracyContract:
        return AccuracyContract(self.precision, Path(self.data) if self.data else None, self.metric, self.tolerance)


CONTRACT_FIELDS = ("precision", "data", "metric", "tolerance")
#: Settings that only a throughput objective reads (a latency run's key and manifest stay as they were).
SERVING_FIELDS = ("objective", "concurrency")


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
        """The stage's record (as stored) if it finished on these same inputs."""
        saved = self.data["stages"].get(stage)
        return saved["record"] if saved and saved.get("key") == key else None

    def finish(self, stage: str, key: dict, record: Record) -> None:
        self.data["stages"][stage] = {"key": key, "record": record.to_json()}
        self.save()

    def spent(self, stage: str) -> float:
        return float(self.data["spent_s"].get(stage, 0.0))

    def set_spent(self, stage: str, seconds: float) -> None:
        self.data["spent_s"][stage] = seconds
        self.save()

    def save(self) -> None:
        atomic.write_json(self.path, self.data, indent=1)


@dataclass
class StageContext:
    """What flows through ``optimize``: the user's model, the graph that goes on, and each stage's output."""

    original: LoadedModel
    settings: StageSettings
    budget: Budget
    work: Path
    state: RunState
    progress: Listener
    levels: tuple[str, ...]
    #: the graph that goes on (the graph stage's rewrite when it was kept)
    current: LoadedModel = field(init=False)
    #: seconds the graph stage left of its share (the kernel stage gets them; negative: it overran, the kernel
    #: stage gives them back)
    graph_unused_s: float = 0.0
    #: the kernel stage's work directory, when it tuned anything
    tuning_db: Path | None = None
    kernel_trials: int = 0
    selection: Selection | None = None
    #: when the stages must be done (``time.monotonic()``): the layer stage, last, ends by it
    deadline: float | None = None

    def __post_init__(self) -> None:
        self.current = self.original

    def say(self, stage: str, text: str) -> None:
        self.progress(Event(stage, text))


class Stage(Protocol):
    """One level's step inside ``optimize``."""

    name: str

    def key(self, context: StageContext) -> dict | None:
        """The inputs this stage runs on; a finished stage with the same key is reused (``None``: never)."""

    def run(self, context: StageContext) -> Record:
        """Run the stage, update ``context`` with its result, return its record."""

    def reuse(self, context: StageContext, record: Record) -> None:
        """Put a reused record's result back into ``context``."""


def run_stage(stage: Stage, context: StageContext) -> Record:
    """``stage`` reused when it finished on the same inputs, else run (and recorded as finished)."""
    key = stage.key(context)
    saved = context.state.reuse(stage.name, key) if key is not None else None
    if saved is not None:
        record = STAGE_RECORDS[stage.name].from_json(saved)
        stage.reuse(context, record)
        return record
    record = stage.run(context)
    if key is not None:
        context.state.finish(stage.name, key, record)
    return record


class GraphStage:
    """Rewrite with the graph agent; the rewrite goes on only if it won its contest."""

    name = "graph"

    def key(self, context: StageContext) -> dict:
        settings = context.settings
        return {"fingerprint": fingerprint(context.original), "agent": settings.graph_agent, "seed": settings.seed,
                "limit_s": context.budget.share_s("graph"), "threads": settings.threads}  # fmt: skip

    def run(self, context: StageContext) -> GraphRecord:
        from rlcompile.graph.api import GraphRequest, optimize_graph

        settings, limit_s, started = context.settings, context.budget.share_s("graph"), time.monotonic()
        context.progress(Phase("graph", f"graph: {settings.graph_agent} searches rewrites for up to {limit_s:.0f} s",
                               "search"))  # fmt: skip
        checkpoint = context.work / f"graph-ppo-seed{settings.seed}.pt" if settings.graph_agent == "ppo" else None
        request = GraphRequest(agent=settings.graph_agent, max_steps=50,
                               time_limit_s=max(limit_s * GRAPH_SEARCH_SHARE, 1.0),
                               seed=settings.seed, timing=settings.timing, threads=settings.threads,
                               judge_s=limit_s * JUDGE_SHARE, checkpoint=checkpoint)  # fmt: skip
        try:
            run = optimize_graph(context.original, request, context.progress)
        except RlcompileError:
            raise  # the user's input (an agent's checkpoint, a budget): said in one line
        except Exception as error:  # a rule that cannot handle this graph: the stage falls back to what it was given
            return self.fell_back(context, started, limit_s, first_line(error))
        verdict = {"kept": False, "reason": "the rewritten graph does not run or disagrees with the original"}
        if run.verdict is not None and not run.fell_back:
            verdict = run.verdict.to_dict()
        record = GraphRecord(agent=settings.graph_agent, rewrites=run.kept_rewrites, cleanup=len(run.cleanup),
                             nodes_before=run.nodes_before, nodes_after=run.nodes_after,
                             agreement=run.agreement.to_dict(), search=run.result.summary(), **verdict)  # fmt: skip
        if record.kept:
            import onnx

            onnx.save(run.proto, str(context.work / GRAPH_FILE))
            context.current = rewritten(context.original, run.proto)
        record.wall_s = time.monotonic() - started
        context.graph_unused_s = limit_s - record.wall_s
        return record

    def fell_back(self, context: StageContext, started: float, limit_s: float, why: str) -> GraphRecord:
        """The record of a search that failed on this graph: the original goes on, the failure is reported."""
        reason = f"the graph level failed on this model ({why}): the original graph goes on"
        context.progress(Decision("graph", f"graph: {reason}", False))
        nodes = len(context.original.proto.graph.node)
        wall_s = time.monotonic() - started
        context.graph_unused_s = limit_s - wall_s
        return GraphRecord(agent=context.settings.graph_agent, rewrites=0, cleanup=0, nodes_before=nodes,
                           nodes_after=nodes, agreement={"max_abs": 0.0, "max_rel": 0.0}, search={}, kept=False,
                           reason=reason, wall_s=wall_s)  # fmt: skip

    def reuse(self, context: StageContext, record: GraphRecord) -> None:
        import onnx

        kept = "rewrite kept" if record.kept else "original kept"
        context.progress(Reuse("graph", f"graph: reusing the finished stage ({kept})", "stage"))
        if record.kept:
            context.current = rewritten(context.original, onnx.load(str(context.work / GRAPH_FILE)))
        else:
            record.reused = True
        context.graph_unused_s = context.budget.share_s("graph") - record.wall_s


def rewritten(original: LoadedModel, proto) -> LoadedModel:
    return LoadedModel(original.name, proto, list(original.inputs), original.source, list(original.notes))


class KernelStage:
    """Tune the TVM tasks of the graph that goes on, most important first, until the deadline."""

    name = "kernel"

    def key(self, context: StageContext) -> dict:
        settings = context.settings
        return {"fingerprint": fingerprint(context.current), "strategy": settings.strategy, "trials": settings.trials,
                "seed": settings.seed, "limit_s": context.budget.share_s("kernel")}  # fmt: skip

    def run(self, context: StageContext) -> KernelRecord:
        settings, state = context.settings, context.state
        spent = state.spent("kernel")
        allowed = context.budget.share_s("kernel") + context.graph_unused_s - spent
        if context.deadline is not None:  # what ran late before this stage (start-up included: 59 s on the
            # slowed VM) is taken from this stage, not from the layer stage's share
            allowed = min(allowed, context.deadline - context.budget.share_s("layer") - time.monotonic())
        if not spent and "layer" in context.levels and allowed < KERNEL_FLOOR_S:
            why = (f"its {max(allowed, 0):.0f} s are less than the {KERNEL_FLOOR_S:.0f} s that extracting the tasks, "
                   "timing them in the libraries and a first batch of trials take; the layer level gets them")
            context.progress(Decision("kernel", f"kernel: skipped, {why}", False))
            record = skipped_kernel(settings.strategy, why, 0.0)
            self.reuse(context, record, announce=False)
            return record
        text = f"kernel: {settings.strategy} tunes for up to {max(allowed, 0):.0f} s"
        if spent:  # an interrupted stage: its journal is resumed with the time it has left
            context.progress(Reuse("kernel", f"{text} ({spent:.0f} s already spent)", "tuning"))
        else:
            context.progress(Phase("kernel", text, "tune"))
        began = time.monotonic()
        try:
            record = tune_kernels(context, began + max(allowed, 0.0),
                                  lambda: state.set_spent("kernel", spent + time.monotonic() - began))
        except ModelError as error:  # TVM cannot take this model (e.g. an operator it cannot import): go on without
            context.say("kernel", f"kernel: skipped, {error}; the layer level chooses among the other libraries")
            record = skipped_kernel(settings.strategy, str(error), time.monotonic() - began)
        state.set_spent("kernel", spent + time.monotonic() - began)
        self.reuse(context, record, announce=False)
        return record

    def reuse(self, context: StageContext, record: KernelRecord, announce: bool = True) -> None:
        if announce:
            context.progress(Reuse("kernel", f"kernel: reusing the finished stage ({record.tuned_tasks}/"
                                             f"{record.tasks} tasks tuned)", "stage"))  # fmt: skip
        context.tuning_db = None if record.skipped else context.work / TUNING
        context.kernel_trials = record.trials


def skipped_kernel(strategy: str, why: str, wall_s: float) -> KernelRecord:
    """The record of a kernel stage that tuned nothing, and why (the layer level then leaves TVM out)."""
    return KernelRecord(strategy=strategy, tasks=0, tuned_tasks=0, trials=0, resumed_trials=0, failed_trials=0,
                        best_ms={}, wall_s=wall_s, skipped=why)  # fmt: skip


def tune_kernels(context: StageContext, deadline: float, on_batch: Callable[[], None]) -> KernelRecord:
    """Tune the cleaned graph's TVM tasks, most important first, until ``deadline`` (``time.monotonic()``)."""
    from rlcompile.graph.cleanup import clean_model
    from rlcompile.kernel.api import TuneRequest, tune
    from rlcompile.kernel.headroom import HEADROOM_FILE, measure_headroom, tuning_order
    from rlcompile.kernel.tasks import automatic_layout
    from rlcompile.models.zoo import cache_root

    settings, started = context.settings, time.monotonic()
    model = clean_model(context.current)  # the convolutions the layer stage's TVM segments will have
    layout = automatic_layout(model.proto) if settings.layout == "auto" else settings.layout
    request = TuneRequest(model=model.name, work_dir=context.work / TUNING, strategy=settings.strategy,
                          trials=settings.trials, seed=settings.seed, cost_model=settings.cost_model,
                          layout=layout)  # fmt: skip

    def report(state) -> None:
        on_batch()
        best = f"{state.best_seconds * 1e3:.3f} ms" if state.valid else "no valid schedule yet"
        text = f"kernel: {state.task.label}: {state.trials}/{state.budget} trials, best {best}"
        context.progress(Step("kernel", text, state.trials, state.budget, "trials", state.task.label))

    def starting(tasks) -> None:
        context.progress(Phase("kernel", f"kernel: tuning {len(tasks)} tasks with {settings.strategy} until the "
                                         "deadline", "tune"))  # fmt: skip

    found: list[Headroom] = []

    def by_headroom(tasks: list[Task]) -> list[Task]:
        """The tasks whose libraries leave the most to win first; those near the peak left out."""
        libraries = [name for name in runtimes.parse(settings.libraries) if name != "tvm"]
        saved = context.work / TUNING / HEADROOM_FILE
        found.append(measure_headroom(model.static_proto(), tasks, libraries, settings.threads, saved, cache_root(),
                                      context.progress, deadline))  # fmt: skip
        ordered, skipped = tuning_order(tasks, found[0].rows)
        for task in tasks:
            if task.name in skipped:
                context.progress(Decision("kernel", f"kernel: not tuning {task.label}: {skipped[task.name]}", False))
        return ordered

    states = tune(request, [report], starting, model=model, deadline=deadline, order=by_headroom)
    tuned = [state for state in states if state.valid]
    return KernelRecord(strategy=settings.strategy, tasks=len(states), tuned_tasks=len(tuned),
                        trials=sum(state.trials for state in states),
                        resumed_trials=sum(state.resumed for state in states),
                        failed_trials=sum(state.failures for state in states),
                        best_ms={state.task.label: state.best_seconds * 1e3 for state in tuned},
                        wall_s=time.monotonic() - started, cost_model=states[0].cost_model if states else "cold",
                        skipped_tasks={s.task.label: s.skipped for s in states if s.skipped} or None,
                        headroom=headroom_record(found[0], states) if found else None,
                        layout=layout)  # fmt: skip


def headroom_record(headroom: Headroom, states) -> dict:
    """The headroom as the manifest keeps it, each row with TVM's best ms where the task was tuned."""
    best = {state.task.name: state.best_seconds * 1e3 for state in states if state.valid}
    record = headroom.to_dict()
    for row in record["rows"]:
        row["tuned"] = row["task"] in best
        row["tvm_best_ms"] = best.get(row["task"])
    return record


class LayerStage:
    """A runtime per fusion group (TVM with the tuned records among them); the fastest plan is kept.

    When the layer level was not asked for, only whole-model single-runtime plans compete. Its result (the
    compiled plan) is needed to write the output, so the stage always runs; its profile resumes by itself.
    """

    name = "layer"

    def key(self, context: StageContext) -> None:
        return None

    def run(self, context: StageContext) -> LayerRecord:
        settings, started = context.settings, time.monotonic()
        mixed = "layer" in context.levels
        context.progress(Phase("layer", "layer: choosing the library of each fusion group" if mixed
                               else "choosing the fastest single library (the layer level was not asked for)",
                               "select"))  # fmt: skip
        names = runtimes.parse(settings.libraries, context.tuning_db is not None)
        table_dir = context.work / "tables" / f"kernel-{context.kernel_trials}"
        baseline = context.original if context.current is not context.original else None
        selection, precision = choose_plan(context.current, settings.contract, settings.layer_agent, settings.seed,
                                           settings.threads, names, context.tuning_db, table_dir, settings.timing,
                                           context.progress, baseline=baseline, mixed=mixed,
                                           deadline=self.deadline(context, started),
                                           work=context.work / "precision",
                                           leave_out_idle=settings.libraries is None)  # fmt: skip
        context.selection = selection
        return LayerRecord(agent=settings.layer_agent, libraries=names, unavailable=selection.unavailable,
                           chosen=selection.chosen.labels, segments=selection.chosen.segments,
                           library_mix=selection.chosen.library_mix(), wall_s=time.monotonic() - started,
                           precision=precision, left_out=selection.left_out or None)  # fmt: skip

    @staticmethod
    def deadline(context: StageContext, started: float) -> float:
        """The run's deadline (so an overrun of an earlier stage is taken from this one), else its share."""
        return context.deadline if context.deadline is not None else started + context.budget.share_s("layer")

    def reuse(self, context: StageContext, record: Record) -> None:  # never reused: key() is None
        raise NotImplementedError


STAGES: dict[str, Stage] = {"graph": GraphStage(), "kernel": KernelStage(), "layer": LayerStage()}


def stages_for(levels: tuple[str, ...]) -> list[Stage]:
    """The stages ``optimize`` runs for ``levels``: those asked for, in order, and always the layer stage
    (it measures the plan that is written, single-runtime plans only when the layer level was not asked for)."""
    return [STAGES[name] for name in ("graph", "kernel") if name in levels] + [STAGES["layer"]]
