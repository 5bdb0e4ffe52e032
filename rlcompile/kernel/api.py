"""The kernel level's entry points for the CLI and the benchmarks: list, tune and build.

A model spec is a zoo name, an ONNX path, or one of the seeds' layers (``L1`` ... ``L8``), which is
tuned on its own as a single task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rlcompile.errors import BudgetError, RlcompileError
from rlcompile.kernel import scheduler as schedulers
from rlcompile.kernel import strategies
from rlcompile.kernel.measurer import Measurer, MeasureSettings, RpcSpec
from rlcompile.kernel.pretrained import PretrainedModel
from rlcompile.kernel.pretrained import resolve as resolve_cost_model
from rlcompile.kernel.tasks import SEED_LAYERS, Task, extract_tasks, extract_tasks_cached, seed_layer
from rlcompile.kernel.transfer import WarmStart
from rlcompile.kernel.tuner import DEFAULT_BATCH_SIZE, Callback, TaskState, Tuner
from rlcompile.kernel.workdir import WorkDir
from rlcompile.locks import exclusive
from rlcompile.models import LoadedModel, Shape, load_model
from rlcompile.tvm_bridge import resolve_target, target_isa


def load_tasks(
    spec: str, target, input_shapes: Mapping[str, Shape] | None = None, cache: Path | None = None,
    layout: str = "nchw",
) -> tuple[LoadedModel | None, list[Task]]:
    """The tasks of a model (heaviest first) in ``layout``, or the single task of a seed layer.

    ``cache``: a file where a model's extracted tasks are kept for the next run (:func:`extract_tasks_cached`).
    """
    if spec in SEED_LAYERS:
        return None, [seed_layer(spec, target)]
    model = load_model(spec, input_shapes)
    return model, tasks_of(model, target, cache, layout)


def tasks_of(model: LoadedModel, target, cache: Path | None = None, layout: str = "nchw") -> list[Task]:
    if cache is None:
        return extract_tasks(model, target, layout)
    return extract_tasks_cached(model, target, cache, layout)


def select_tasks(tasks: Sequence[Task], selector: str | None) -> list[Task]:
    """``--tasks``: comma-separated indices (as listed by ``rlcompile tasks``) or name/label substrings."""
    if not selector:
        return list(tasks)
    chosen: list[Task] = []
    for item in (part.strip() for part in selector.split(",") if part.strip()):
        if item.isdigit():
            if int(item) >= len(tasks):
                raise RlcompileError(f"--tasks {item}: there are only {len(tasks)} tasks (0..{len(tasks) - 1})")
            matches = [tasks[int(item)]]
        else:
            matches = [t for t in tasks if item in t.name or item in t.label]
            if not matches:
                raise RlcompileError(f"--tasks {item!r} matches no task name or label")
        chosen += [t for t in matches if t not in chosen]
    return chosen


@dataclass
class TuneRequest:
    """Everything ``rlcompile tune`` takes (the JSON config file has the same keys)."""

    model: str
    work_dir: Path
    strategy: str = "evolutionary"
    trials: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    scheduler: str = "gradient"
    seed: int = 0
    target: str = "llvm"
    tasks: str | None = None
    input_shapes: dict = field(default_factory=dict)
    rpc_tracker: str | None = None
    rpc_key: str | None = None
    strategy_options: dict = field(default_factory=dict)
    #: earlier work directories on this machine whose measurements warm-start the knob cost model
    warm_start: list = field(default_factory=list)
    #: the pretrained prior of every task's cost model: "default" (the packaged model of this CPU's vector-ISA
    #: class), "none" (cold) or a model file (``rlcompile pretrain``)
    cost_model: str = "default"
    #: the convolutions' layout when tuned and built (:data:`rlcompile.kernel.tasks.LAYOUTS`); None: the work
    #: directory's own (nchw for a new one)
    layout: str | None = None


#: Reorders (and may drop) the selected tasks before tuning, e.g. by the libraries' headroom.
TaskOrder = Callable[[list[Task]], list[Task]]


def tune(request: TuneRequest, callbacks: Sequence[Callback] = (),
         on_start: Callable[[list[Task]], None] | None = None, model: LoadedModel | None = None,
         deadline: float | None = None, settings: MeasureSettings | None = None,
         order: TaskOrder | None = None) -> list[TaskState]:  # fmt: skip
    """Tune the selected tasks; resumes from the work directory's journal.

    ``model``: tune this loaded model (e.g. a rewritten graph) instead of loading ``request.model``.
    ``deadline``: a ``time.monotonic()`` after which no new batch starts.
    ``settings``: how candidates are built and timed (defaults: :class:`MeasureSettings`).
    ``order``: the tasks in the order to tune them, those not worth tuning left out
    (:mod:`rlcompile.kernel.headroom`); called once the measurer is up, before ``on_start``. When it leaves
    no task, nothing is tuned and the result is empty.
    """
    if request.trials is not None and request.trials <= 0:
        raise BudgetError(f"--trials must be positive, got {request.trials}")
    if request.batch_size <= 0:
        raise BudgetError(f"--batch-size must be positive, got {request.batch_size}")
    strategies.create(request.strategy, seed=request.seed, **request.strategy_options)  # validate early
    schedulers.create(request.scheduler)
    target = resolve_target(request.target)
    rpc = RpcSpec.parse(request.rpc_tracker, request.rpc_key) if request.rpc_tracker else None
    if model is None and request.model not in SEED_LAYERS:  # a bad model is refused before anything starts
        model = load_model(request.model, request.input_shapes)
    pretrained = resolve_cost_model(request.cost_model, remote=rpc is not None, isa=target_isa(target))
    with exclusive(request.work_dir, "tuning work directory"):
        return tune_locked(request, target, rpc, callbacks, on_start, model, deadline, settings or MeasureSettings(),
                           pretrained, order)  # fmt: skip


def tune_locked(request: TuneRequest, target, rpc: RpcSpec | None, callbacks: Sequence[Callback],
                on_start: Callable[[list[Task]], None] | None, model: LoadedModel | None,
                deadline: float | None, settings: MeasureSettings, pretrained: PretrainedModel | None = None,
                order: TaskOrder | None = None) -> list[TaskState]:  # fmt: skip
    """:func:`tune`'s work, with the work directory locked against a second process.

    The measurer (build workers, runner, RPC connection) starts in a background thread while the model is
    imported and its tasks extracted: its start-up is mostly waiting on worker processes.
    """
    work_dir = WorkDir(request.work_dir, request.target, request.layout)
    with ThreadPoolExecutor(max_workers=1) as background:
        starting = background.submit(Measurer, target, settings, rpc)
        try:
            if model is not None:
                tasks = tasks_of(model, target, work_dir.tasks_path, work_dir.layout)
            else:
                tasks = [seed_layer(request.model, target)]
            tasks = select_tasks(tasks, request.tasks)
            warm = WarmStart.load([Path(d) for d in request.warm_start], target, request.target) \
                if request.warm_start else None  # fmt: skip
        except BaseException:
            if starting.exception() is None:
                starting.result().close()
            raise
    with starting.result() as measurer:
        if order is not None and not (tasks := order(tasks)):
            return []
        if on_start:
            on_start(tasks)
        tuner = Tuner(
            tasks,
            lambda: strategies.create(request.strategy, seed=request.seed, **request.strategy_options),
            work_dir,
            measurer,
            trials=request.trials,
            batch_size=request.batch_size,
            seed=request.seed,
            callbacks=callbacks,
            deadline=deadline,
            scheduler=request.scheduler,
            warm_start=warm,
            pretrained=pretrained,
        )
        return tuner.run()


def build(model_spec: str, work_dir: Path, output: Path, target_text: str = "llvm",
          input_shapes: Mapping[str, Shape] | None = None) -> tuple[Path, tuple[int, int]]:  # fmt: skip
    """Compile the whole model with the work directory's records into ``output`` (a .tar)."""
    from rlcompile.kernel.artifact import build_executable, export_artifact, tuned_coverage

    if model_spec in SEED_LAYERS:
        raise RlcompileError(f"{model_spec} is a single layer; build a whole model (e.g. {SEED_LAYERS[model_spec][0]})")
    if not (Path(work_dir) / "environment.json").exists():
        raise RlcompileError(f"{work_dir} is not a tuning work directory (run `rlcompile tune` first)")
    target = resolve_target(target_text)
    directory = WorkDir(work_dir, target_text)
    model = load_model(model_spec, input_shapes)
    coverage = tuned_coverage(model, directory, target)
    executable = build_executable(model, directory, target)
    return export_artifact(model, executable, target_text, output, coverage), coverage
