"""The graph level end to end: clean, search, verify, time, save.

``optimize_graph`` is what ``rlcompile graph`` runs: the exporter's graph is cleaned with the fusion
rules, searched with the chosen agent on the chosen cost model, and the result is checked against the
original in ONNX Runtime on random inputs. If the final graph disagrees, the rewrites are replayed
one by one and the sequence is cut before the first one that breaks agreement, so what is written out
always computes what the original computes. Finally both graphs are timed side by side in ONNX
Runtime (ORT_ENABLE_ALL), alternating, and the medians are reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from rlcompile.backends.ort import OrtBackend, run_proto
from rlcompile.errors import RlcompileError
from rlcompile.graph import cost, onnx_graph, rules, search
from rlcompile.graph.search import Rewrite, SearchBudget, SearchResult
from rlcompile.measure import DEFAULT, LatencyStats, MeasureConfig, measure_alternating
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.verify import Agreement, compare_outputs

#: The fusions run before the search ("clean"); the search uses every other rule.
CLEANUP_RULES = ("fuse_conv_batchnorm", "fuse_conv_mul", "fuse_conv_add")


@dataclass
class GraphRequest:
    agent: str = "taso"
    max_steps: int = 100
    time_limit_s: float = 300.0
    alpha: float = 1.05
    cost: str = "sum"
    clean: bool = True
    rule_ids: Sequence[str] | None = None
    seed: int = 0
    timing: MeasureConfig | None = DEFAULT  # None: leave the timing to the caller
    train_episodes: int | None = None  # None: the agent's own default
    temperature: float = 1.0
    checkpoint: Path | None = None
    load: Path | None = None

    def validate(self) -> None:
        if self.max_steps < 1 or self.time_limit_s <= 0 or (self.train_episodes or 1) < 1:
            raise RlcompileError("empty budget: --steps, --time-limit and --train-episodes must be positive")
        search.search_class(self.agent)
        if self.load is not None and not Path(self.load).is_file():
            raise RlcompileError(f"no such checkpoint: {self.load}")
        search_rules(self)
        if self.cost not in cost.COST_MODELS:
            raise RlcompileError(f"unknown cost model {self.cost!r}; choose from {', '.join(cost.COST_MODELS)}")


@dataclass
class GraphRun:
    """Everything ``rlcompile graph`` reports."""

    model_name: str
    agent: str
    cleanup: list[Rewrite]
    result: SearchResult
    kept_rewrites: int
    agreement: Agreement
    original_ms: LatencyStats | None
    optimized_ms: LatencyStats | None
    proto: onnx.ModelProto = field(repr=False)
    nodes_before: int = 0
    nodes_after: int = 0
    operators_timed: int = 0
    original_cost_ms: float = float("nan")

    @property
    def speedup(self) -> float:
        return self.original_ms.median_ms / self.optimized_ms.median_ms

    def to_dict(self) -> dict:
        original, optimized = (None if s is None else s.median_ms for s in (self.original_ms, self.optimized_ms))
        return {
            "model": self.model_name,
            "agent": self.agent,
            "cleanup": [rewrite.to_dict() for rewrite in self.cleanup],
            "search": self.result.summary(),
            "kept_rewrites": self.kept_rewrites,
            "agreement": self.agreement.to_dict(),
            "ort_original_ms": original,
            "ort_optimized_ms": optimized,
            "ratio_optimized_over_original": None if original is None else optimized / original,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "operators_timed": self.operators_timed,
            "original_cost_ms": self.original_cost_ms,
        }


Progress = Callable[[str], None]


def optimize_graph(
    model: LoadedModel,
    request: GraphRequest,
    progress: Progress = lambda message: None,
    on_step: search.base.ProgressCallback | None = None,
) -> GraphRun:
    request.validate()
    feeds = model.random_inputs(request.seed)
    original = onnx_graph.from_proto(model.proto)
    cost_model = cost.create(request.cost, feeds)
    working, cleanup = original, []
    if request.clean:
        working, cleanup = search.apply_exhaustively(original, rules.all_rules(list(CLEANUP_RULES)))
        progress(f"cleaned: {len(cleanup)} fusions, {len(original.graph)} -> {len(working.graph)} nodes")
    searcher = search.create(
        request.agent, budget=SearchBudget(request.max_steps, request.time_limit_s), **agent_options(request)
    )
    progress(f"searching with {request.agent} ({cost_model.name} cost model)")
    rule_set = search_rules(request)
    result = searcher.search(working, rule_set, cost_model, on_step)
    cost_model.save()
    progress("verifying against the original in ONNX Runtime")
    reference = run_proto(model.proto, feeds)
    final, kept, agreement = verified(working, result.model, result.rewrites, reference, feeds, rule_set)
    if kept < len(result.rewrites):
        progress(f"rewrite {kept + 1} broke agreement; keeping the first {kept}")
    proto = onnx_graph.to_proto(final)
    original_ms = optimized_ms = None
    if request.timing is not None:
        progress("timing original and optimised graphs side by side")
        original_ms, optimized_ms = time_side_by_side([model.proto, proto], feeds, request.timing)
    return GraphRun(
        model.name,
        request.agent,
        cleanup,
        result,
        kept,
        agreement,
        original_ms,
        optimized_ms,
        proto,
        len(original.graph),
        len(final.graph),
        getattr(cost_model, "measured", 0),
        cost_model.graph_cost(original),
    )


def agent_options(request: GraphRequest) -> dict:
    if request.agent == "taso":
        return {"alpha": request.alpha}
    if request.agent == "ppo":
        from rlcompile.graph.agents.ppo import PPOConfig

        config = PPOConfig(**episodes_option("train_episodes", request))
        return {"config": config, "seed": request.seed, "checkpoint": request.checkpoint, "load": request.load}
    if request.agent == "world-model":
        from rlcompile.graph.agents.world_model import WorldModelConfig

        config = WorldModelConfig(temperature=request.temperature, **episodes_option("random_episodes", request))
        return {"config": config, "seed": request.seed}
    return {}


def episodes_option(name: str, request: GraphRequest) -> dict:
    """``{name: --train-episodes}`` when the user gave it, else nothing (the agent's default)."""
    return {} if request.train_episodes is None else {name: request.train_episodes}


def search_rules(request: GraphRequest) -> list[rules.Rule]:
    ids = list(request.rule_ids) if request.rule_ids else [i for i in rules.RULE_IDS if i not in CLEANUP_RULES]
    return rules.all_rules(ids)


def agreement_of(model: ir.Model, reference: list[np.ndarray], feeds: dict[str, np.ndarray]) -> Agreement:
    return compare_outputs(reference, run_proto(onnx_graph.to_proto(model), feeds))


def verified(
    start: ir.Model,
    final: ir.Model,
    rewrites: Sequence[Rewrite],
    reference: list[np.ndarray],
    feeds: dict[str, np.ndarray],
    rule_set: Sequence[rules.Rule],
) -> tuple[ir.Model, int, Agreement]:
    """``final`` (reached from ``start`` by ``rewrites``) if it agrees with the original; else the graph of
    the longest prefix of ``rewrites`` whose every step agrees."""
    agreement = agreement_of(final, reference, feeds)
    if agreement.within():
        return final, len(rewrites), agreement
    by_id = {rule.id: rule for rule in rule_set}
    model = start
    for index, rewrite in enumerate(rewrites):
        candidate = by_id[rewrite.rule].apply(model, rules.Location(rewrite.location))
        if not agreement_of(candidate, reference, feeds).within():
            return model, index, agreement_of(model, reference, feeds)
        model = candidate
    return model, len(rewrites), agreement_of(model, reference, feeds)


def time_side_by_side(
    protos: Sequence[onnx.ModelProto], feeds: dict[str, np.ndarray], timing: MeasureConfig, rounds: int = 2
) -> list[LatencyStats]:
    """Time each graph in ORT_ENABLE_ALL, alternating ``rounds`` times; medians over all samples."""
    backend = OrtBackend("all")
    sessions = [backend.prepare(LoadedModel(f"graph{i}", proto, [], "memory")) for i, proto in enumerate(protos)]
    return measure_alternating([session.timer(feeds) for session in sessions], timing, rounds)
