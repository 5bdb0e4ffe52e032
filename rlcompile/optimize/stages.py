"""The three stages of ``optimize``, each a short call into its level, each decision measured.

* :func:`graph_stage`: the graph agent rewrites; the rewrite is kept only if ONNX Runtime runs it
  faster than the original by more than the noise of two identical sessions timed in the same
  alternating rounds (the graph level's own rule, :func:`rlcompile.graph.api.judge`).
* :func:`kernel_stage`: the kernel level tunes the TVM tasks of the graph that goes on, most
  important first, until its deadline; the tuning journal makes it resumable.
* :func:`layer_stage`: the segment engine picks a library per fusion group among ONNX Runtime,
  OpenVINO, PyTorch (oneDNN) and TVM with the records just tuned; every candidate plan, the single
  libraries and the original model run natively are timed side by side and the fastest is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlcompile import runtimes
from rlcompile.layer.selection import Selection, select_segments
from rlcompile.measure import DEFAULT, MeasureConfig
from rlcompile.models.onnx_model import LoadedModel

Progress = Callable[[str], None]


@dataclass
class StageSettings:
    """What the stages need besides the model: agents, seed, threads and timing."""

    graph_agent: str = "ppo"
    strategy: str = "chameleon"
    layer_agent: str = "qlearning"
    trials: int | None = None
    seed: int = 0
    threads: int = 1
    libraries: str | None = None
    timing: MeasureConfig = DEFAULT


def graph_stage(model: LoadedModel, settings: StageSettings, limit_s: float, work: Path,
                progress: Progress) -> tuple[LoadedModel, dict]:  # fmt: skip
    """Rewrite with the graph agent; return the graph that goes on (rewritten or original) and the record."""
    import onnx

    from rlcompile.graph.api import GraphRequest, optimize_graph

    started = time.monotonic()
    checkpoint = work / f"graph-ppo-seed{settings.seed}.pt" if settings.graph_agent == "ppo" else None  # resumable
    request = GraphRequest(agent=settings.graph_agent, max_steps=50, time_limit_s=max(limit_s, 1.0),
                           seed=settings.seed, timing=settings.timing, threads=settings.threads,
                           checkpoint=checkpoint)  # fmt: skip
    run = optimize_graph(model, request, progress)
    record = {"agent": settings.graph_agent, "rewrites": run.kept_rewrites, "cleanup": len(run.cleanup),
              "nodes_before": run.nodes_before, "nodes_after": run.nodes_after,
              "agreement": run.agreement.to_dict(), "search": run.result.summary()}  # fmt: skip
    if not run.agreement.within():
        record |= {"kept": False, "reason": "the rewritten graph disagrees with the original"}
    else:
        record |= run.verdict.to_dict()
    if record["kept"]:
        onnx.save(run.proto, str(work / "graph.onnx"))
    record["wall_s"] = time.monotonic() - started
    if not record["kept"]:
        return model, record
    return LoadedModel(model.name, run.proto, list(model.inputs), model.source, list(model.notes)), record


def kernel_stage(model: LoadedModel, settings: StageSettings, deadline: float, work_dir: Path,
                 progress: Progress, on_batch: Callable[[], None] = lambda: None) -> dict:  # fmt: skip
    """Tune the model's TVM tasks, most important first, until ``deadline`` (``time.monotonic()``)."""
    from rlcompile.kernel.api import TuneRequest, tune

    started = time.monotonic()
    request = TuneRequest(model=model.name, work_dir=work_dir, strategy=settings.strategy, trials=settings.trials,
                          seed=settings.seed)  # fmt: skip

    def report(state) -> None:
        on_batch()
        best = f"{state.best_seconds * 1e3:.3f} ms" if state.valid else "no valid schedule yet"
        progress(f"kernel: {state.task.label}: {state.trials}/{state.budget} trials, best {best}")

    states = tune(request, [report], lambda tasks: progress(f"kernel: tuning {len(tasks)} tasks with "
                  f"{settings.strategy} until the deadline"), model=model, deadline=deadline)  # fmt: skip
    tuned = [state for state in states if state.valid]
    return {
        "strategy": settings.strategy,
        "tasks": len(states),
        "tuned_tasks": len(tuned),
        "trials": sum(state.trials for state in states),
        "resumed_trials": sum(state.resumed for state in states),
        "failed_trials": sum(state.failures for state in states),
        "best_ms": {state.task.label: state.best_seconds * 1e3 for state in tuned},
        "wall_s": time.monotonic() - started,
    }


def layer_stage(model: LoadedModel, original: LoadedModel, settings: StageSettings, tuning_db: Path | None,
                table_dir: Path, progress: Progress, mixed: bool = True) -> tuple[Selection, dict]:  # fmt: skip
    """Choose a library per fusion group (TVM with the tuned records among them); keep the fastest plan.

    ``mixed=False`` (the layer level not asked for): only whole-model single-library plans compete.
    """
    started = time.monotonic()
    names = runtimes.parse(settings.libraries, tuning_db is not None)
    selection = select_segments(model, settings.layer_agent, settings.seed, settings.threads, names, tuning_db,
                                table_dir, settings.timing, progress, mixed=mixed,
                                baseline=original if model is not original else None)  # fmt: skip
    record = {"agent": settings.layer_agent, "libraries": names, "unavailable": selection.unavailable,
              "chosen": selection.chosen.labels, "segments": selection.chosen.segments,
              "library_mix": selection.chosen.library_mix(), "wall_s": time.monotonic() - started}  # fmt: skip
    return selection, record
