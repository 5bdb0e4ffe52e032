"""The graph level end to end: clean, search, verify, time, save.

``optimize_graph`` is what ``rlcompile graph`` runs: the exporter's graph is cleaned with the fusion
rules, searched with the chosen agent on the chosen cost model, and the result is checked against the
original in ONNX Runtime on random inputs. If the final graph disagrees, the rewrites are replayed
one by one and the sequence is cut before the first one that breaks agreement, so what is written out
always computes what the original computes. Finally the original, the rewrite and a second identical
session of the original are timed in ONNX Runtime (ORT_ENABLE_ALL), in turns (:func:`judge`): the
rewrite is returned only if it is faster than the original by more than the two identical sessions
differ (and by at least :data:`MIN_GAIN`); otherwise the original is returned and the run says why.
The same rule serves ``rlcompile graph`` and ``optimize``'s graph stage.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from rlcompile.errors import RlcompileError, check_choice
from rlcompile.events import Decision, Event, Listener, Phase, ignore
from rlcompile.graph import cost, onnx_graph, rules, search
from rlcompile.graph.cleanup import CLEANUP_RULES, clean_graph
from rlcompile.graph.search import Rewrite, SearchBudget, SearchResult
from rlcompile.measure import (
    DECISION_ROUNDS,
    DEFAULT,
    REPORT_ROUNDS,
    REWRITE_RULE,
    SETTLE,
    Contender,
    LatencyStats,
    MeasureConfig,
    contest,
    run_contest,
)
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.runtimes import RuntimeOptions
from rlcompile.runtimes.ort import OrtRuntime, run_proto
from rlcompile.verify import Agreement, compare_outputs

#: A rewrite must be at least this much faster (and more than the noise) to be kept.
MIN_GAIN = REWRITE_RULE.min_gain


@dataclass
class GraphRequest:
    agent: str = "taso"
    max_steps: int = 100
    time_limit_s: float = 300.0
    alpha: float = 1.05
    cost: str = cost.DEFAULT
    clean: bool = True
    rule_ids: Sequence[str] | None = None
    seed: int = 0
    timing: MeasureConfig | None = DEFAULT  # None: no timing, the verified rewrite is returned as it is
    threads: int | None = None  # ONNX Runtime's intra-op threads when timing (None: all cores)
    judge_s: float | None = None  # the most the judging contest may take (None: 4x an unsettled contest)
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
        check_choice("cost model", self.cost, cost.COST_MODELS)


@dataclass
class Verdict:
    """Whether the rewrite measured faster than the original beyond the noise of identical sessions."""

    kept: bool
    original: LatencyStats
    rewritten: LatencyStats
    twin: LatencyStats  # a second session of the original, timed in the same rounds

    @property
    def gain(self) -> float:
        return 1 - self.rewritten.median_ms / self.original.median_ms

    @property
    def noise(self) -> float:
        return abs(self.twin.median_ms / self.original.median_ms - 1)

    def reason(self) -> str:
        if self.kept:
            return (f"ORT runs the rewrite {100 * self.gain:.1f}% faster; identical sessions differ by "
                    f"{100 * self.noise:.1f}%")  # fmt: skip
        if self.gain <= 0:
            return (f"ORT runs the rewrite {100 * -self.gain:.1f}% slower (identical sessions differ by "
                    f"{100 * self.noise:.1f}%): the original graph goes on")  # fmt: skip
        return (f"ORT runs the rewrite {100 * self.gain:.1f}% faster, within the noise ({100 * self.noise:.1f}% "
                f"between identical sessions; {100 * MIN_GAIN:.0f}% at least): the original graph goes on")  # fmt: skip

    def to_dict(self) -> dict:
        return {"kept": self.kept, "reason": self.reason(), "ort_original_ms": self.original.median_ms,
                "ort_rewritten_ms": self.rewritten.median_ms, "ort_identical_session_ms": self.twin.median_ms,
                "noise": self.noise, "gain": self.gain}  # fmt: skip


def judge(original: onnx.ModelProto, rewritten: onnx.ModelProto, feeds: dict[str, np.ndarray],
          timing: MeasureConfig, threads: int | None = None, rounds: int = DECISION_ROUNDS,
          seconds: float | None = None) -> Verdict:  # fmt: skip
    """A contest in ORT_ENABLE_ALL between the original, the rewrite and a twin session of the original.

    The rewrite is kept when it beats the original under :data:`~rlcompile.measure.REWRITE_RULE`; the contest
    settles (:class:`~rlcompile.measure.Settle`): more rounds while the twin and the original disagree, within
    ``seconds`` (default: four times what an unsettled contest at ``timing`` takes); the first batch takes a third.
    """
    seconds = seconds if seconds is not None else 4 * contest.contest_seconds(timing, 3)
    timing = contest.fit_within(timing, 3, seconds / 3)
    settle = replace(SETTLE, deadline=time.monotonic() + seconds)
    runtime, options = OrtRuntime("all"), RuntimeOptions(threads, exclusive=True)
    timers = [runtime.compile(proto, options, f"graph{i}").timed(feeds)
              for i, proto in enumerate((original, rewritten, original))]  # fmt: skip
    standings = run_contest([Contender.from_timer("original", timers[0]), Contender.from_timer("rewritten", timers[1]),
                             Contender.from_timer("twin", timers[2], twin_of="original")], timing, rounds,
                            settle)  # fmt: skip
    kept = standings.beats("rewritten", "original", REWRITE_RULE)
    return Verdict(kept, standings["original"], standings["rewritten"], standings["twin"])


def keeps(original_ms: float, rewritten_ms: float, twin_ms: float) -> bool:
    """The rule every graph result passes: faster than the original by more than a second session of the
    original differs from it, and by at least :data:`MIN_GAIN`."""
    return contest.beats(original_ms, rewritten_ms, abs(twin_ms / original_ms - 1), REWRITE_RULE)


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
    #: the timing verdict; ``proto`` is the original graph when it says the rewrite is not faster
    verdict: Verdict | None = None
    #: the rewritten graph did not run or disagreed even after cutting the rewrites: ``proto`` is the original
    fell_back: bool = False

    @property
    def kept(self) -> bool:
        """Whether the returned graph is the rewrite (verified, and measured faster when timed)."""
        return self.verdict.kept if self.verdict is not None else not self.fell_back

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
            "kept": self.kept,
            "verdict": self.verdict.to_dict() if self.verdict is not None else None,
        }




def optimize_graph(
    model: LoadedModel,
    request: GraphRequest,
    progress: Listener = ignore,
    on_step: search.base.ProgressCallback | None = None,
) -> GraphRun:
    request.validate()
    feeds = model.random_inputs(request.seed)
    original = onnx_graph.from_proto(model.proto)
    cost_model = cost.create(request.cost, feeds)
    working, cleanup = start_graph(original, request, progress)
    searcher = search.create(
        request.agent, budget=SearchBudget(request.max_steps, request.time_limit_s), **agent_options(request)
    )
    progress(Phase("graph", f"searching with {request.agent} ({cost_model.name} cost model)", "search"))
    rule_set = search_rules(request)
    result = searcher.search(working, rule_set, cost_model, on_step)
    cost_model.save()
    progress(Phase("graph", "verifying against the original in ONNX Runtime", "verify"))
    reference = run_proto(model.proto, feeds)
    final, kept, agreement = verified(working, result.model, result.rewrites, reference, feeds, rule_set)
    if kept < len(result.rewrites):
        progress(Event("graph", f"rewrite {kept + 1} broke agreement; keeping the first {kept}"))
    proto = onnx_graph.to_proto(final)
    original_ms = optimized_ms = verdict = None
    if not agreement.within():  # even the clean-up broke it: the original graph goes on, untouched
        progress(Decision("graph", "the rewritten graph does not run or disagrees with the original: the original "
                                   "graph goes on", False))  # fmt: skip
        unchanged = Agreement(max_abs=0.0, max_rel=0.0)  # what is returned is the original itself
        return GraphRun(model.name, request.agent, cleanup, result, 0, unchanged, None, None, model.proto,
                        len(original.graph), len(original.graph), getattr(cost_model, "measured", 0),
                        cost_model.graph_cost(original), fell_back=True)  # fmt: skip
    if request.timing is not None:
        progress(Phase("graph", "timing the original, the rewrite and a twin of the original in ONNX Runtime",
                       "measure"))  # fmt: skip
        verdict = judge(model.proto, proto, feeds, request.timing, request.threads, seconds=request.judge_s)
        original_ms, optimized_ms = verdict.original, verdict.rewritten
        progress(Decision("graph", verdict.reason(), verdict.kept, verdict.gain, verdict.noise))
    nodes_after = len(final.graph)
    if verdict is not None and not verdict.kept:
        proto, nodes_after = model.proto, len(original.graph)
    return GraphRun(model.name, request.agent, cleanup, result, kept, agreement, original_ms, optimized_ms, proto,
                    len(original.graph), nodes_after, getattr(cost_model, "measured", 0),
                    cost_model.graph_cost(original), verdict)  # fmt: skip


def start_graph(original: ir.Model, request: GraphRequest,
                progress: Listener = ignore) -> tuple[ir.Model, list[Rewrite]]:  # fmt: skip
    """The graph the search starts from: ``original`` with the fusions of :data:`CLEANUP_RULES` applied
    everywhere (unless ``request.clean`` is off), and those fusions."""
    if not request.clean:
        return original, []
    working, cleanup = clean_graph(original)
    progress(Event("graph", f"cleaned: {len(cleanup)} fusions, {len(original.graph)} -> {len(working.graph)} nodes"))
    return working, cleanup


def train_policy(models: Sequence[LoadedModel], request: GraphRequest, progress: Listener = ignore,
                 on_update: search.base.ProgressCallback | None = None) -> dict:  # fmt: skip
    """``rlcompile graph-train``: one agent (``request.agent``: ppo or world-model) trained on several
    graphs (one per episode, drawn at random) and saved to ``request.checkpoint``, for ``graph MODEL
    --agent AGENT --load`` on graphs it never saw. Training in progress is kept in ``CHECKPOINT.training``
    (PPO: the whole state after every update; world model: its real-environment rollouts) and resumed."""
    from rlcompile.graph.env import GraphEnv, GraphSetEnv

    request.validate()
    if request.agent not in search.LEARNING_AGENTS:
        raise RlcompileError(f"graph-train trains {' or '.join(search.LEARNING_AGENTS)}, not {request.agent!r}")
    if request.checkpoint is None:
        raise RlcompileError("graph-train needs --checkpoint FILE: where the trained policy goes")
    if request.cost == "measured":
        raise RlcompileError("graph-train cannot use --cost measured (it times one model's graphs); "
                             f"choose from {', '.join(c for c in cost.COST_MODELS if c != 'measured')}")  # fmt: skip
    config = training_config(request)
    cost_model, rule_set, envs = cost.create(request.cost), search_rules(request), []
    for model in models:
        graph, _ = start_graph(onnx_graph.from_proto(model.proto), request)
        envs.append(GraphEnv(graph, rule_set, cost_model, max_steps=min(config.episode_steps, request.max_steps)))
        progress(Event("graph", f"{model.name}: {len(graph.graph)} nodes, est. {envs[-1].initial_cost:.3f} ms "
                       f"({cost_model.name})"))  # fmt: skip
    names = [model.name for model in models]
    progress(Phase("graph", f"training {request.agent} on {len(models)} graphs for {request.time_limit_s:.0f} s "
                   "at most", "train"))  # fmt: skip
    train = train_ppo if request.agent == "ppo" else train_world_model
    stats = train(GraphSetEnv(envs, request.seed), config, request, names, on_update)
    cost_model.save()
    return stats | {"agent": request.agent, "models": names, "cost": cost_model.name}


#: graph-train's episode cap when none is given: training then ends at its time limit.
UNBOUNDED_EPISODES = 10**9


def training_config(request: GraphRequest):
    """graph-train's agent settings: PPO until the time limit unless --train-episodes (a policy that
    ends episodes early, NO-OP, must not end training); the world model with its own defaults."""
    if request.agent == "ppo":
        from rlcompile.graph.agents.ppo import PPOConfig

        return PPOConfig(train_episodes=request.train_episodes or UNBOUNDED_EPISODES)
    from rlcompile.graph.agents.world_model import WorldModelConfig

    return WorldModelConfig(temperature=request.temperature, **episodes_option("random_episodes", request))


def train_ppo(env, config, request: GraphRequest, names: list[str], on_update) -> dict:
    from rlcompile.graph.agents import ppo

    policy, stats = ppo.train(env, config, request.seed, request.time_limit_s, on_update,
                              ppo.training_state_path(request.checkpoint), scope=",".join(names))  # fmt: skip
    ppo.save_checkpoint(request.checkpoint, policy, config, [rule.id for rule in env.rules])
    return {k: v for k, v in stats.items() if k != "episode_returns"}


def train_world_model(env, config, request: GraphRequest, names: list[str], on_update) -> dict:
    from rlcompile.graph.agents import ppo, world_model

    rollouts = ppo.training_state_path(request.checkpoint)
    agent, stats = world_model.fit(env, config, request.seed, request.time_limit_s, rollouts)
    world_model.save_checkpoint(request.checkpoint, agent)
    rollouts.unlink(missing_ok=True)
    stats["train_episodes"] = stats["random_episodes"]
    stats["train_env_steps"] = stats["real_env_steps"]
    return stats


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
        return {"config": config, "seed": request.seed, "checkpoint": request.checkpoint, "load": request.load}
    return {}


def episodes_option(name: str, request: GraphRequest) -> dict:
    """``{name: --train-episodes}`` when the user gave it, else nothing (the agent's default)."""
    return {} if request.train_episodes is None else {name: request.train_episodes}


def search_rules(request: GraphRequest) -> list[rules.Rule]:
    ids = list(request.rule_ids) if request.rule_ids else [i for i in rules.RULE_IDS if i not in CLEANUP_RULES]
    return rules.all_rules(ids)


#: What a graph that ONNX Runtime cannot load (or run) agrees with: nothing.
UNRUNNABLE = Agreement(max_abs=float("inf"), max_rel=float("inf"))


def agreement_of(model: ir.Model, reference: list[np.ndarray], feeds: dict[str, np.ndarray]) -> Agreement:
    """How ``model`` agrees with the reference outputs; :data:`UNRUNNABLE` when ONNX Runtime refuses it (a
    rewrite that broke the graph is cut like one that changed its outputs)."""
    try:
        return compare_outputs(reference, run_proto(onnx_graph.to_proto(model), feeds))
    except (RlcompileError, ValueError):
        return UNRUNNABLE


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
    model = start
    for index, candidate in enumerate(replayed(start, rewrites, rule_set)):
        if not agreement_of(candidate, reference, feeds).within():
            return model, index, agreement_of(model, reference, feeds)
        model = candidate
    return model, len(rewrites), agreement_of(model, reference, feeds)


def replayed(start: ir.Model, rewrites: Sequence[Rewrite], rule_set: Sequence[rules.Rule]) -> Iterator[ir.Model]:
    """The graph after each of ``rewrites``, applied in turn from ``start``."""
    by_id = {rule.id: rule for rule in rule_set}
    model = start
    for rewrite in rewrites:
        model = by_id[rewrite.rule].apply(model, rules.Location(rewrite.location))
        yield model


def time_side_by_side(
    protos: Sequence[onnx.ModelProto], feeds: dict[str, np.ndarray], timing: MeasureConfig, rounds: int = REPORT_ROUNDS
) -> list[LatencyStats]:
    """Time each graph in ORT_ENABLE_ALL, in turns for ``rounds`` rounds; medians over all samples."""
    runtime = OrtRuntime("all")
    contenders = [Contender.from_timer(f"graph{i}", runtime.compile(proto, name=f"graph{i}").timed(feeds))
                  for i, proto in enumerate(protos)]  # fmt: skip
    standings = run_contest(contenders, timing, rounds)
    return [standings[contender.label] for contender in contenders]
