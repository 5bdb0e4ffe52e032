"""The graph level's commands: ``graph`` (rewrite one model) and ``graph-train`` (one policy over several).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlcompile.cli.common import (
    add_measure_arguments,
    add_model_arguments,
    add_old_name,
    load,
    log,
    measure_config,
    stderr,
    stdout,
    write_json,
)
from rlcompile.errors import RlcompileError
from rlcompile.names import (
    GRAPH_AGENTS,
    GRAPH_COSTS,
    GRAPH_LEARNING_AGENTS,
    choices,
)


def add_parsers(commands) -> None:
    """The graph level's commands: ``graph`` (rewrite one model) and ``graph-train`` (one policy over several)."""
    graph = commands.add_parser("graph", help="rewrite a model's graph with substitution rules (graph level)")
    add_model_arguments(graph)
    graph.add_argument("--agent", default="taso", help=f"the graph agent: {choices(GRAPH_AGENTS)} (default taso, the "
                       "seed's baseline a plain `graph` reproduces; `optimize` uses the seed's ppo)")  # fmt: skip
    graph.add_argument(
        "--train-episodes",
        type=int,
        default=None,
        help="ppo: training episodes (default 500); world-model: random-agent episodes (default 100); "
        "both stop at --budget too",
    )
    graph.add_argument("--temperature", type=float, default=1.0, help="world-model: sampling temperature tau")
    graph.add_argument("--checkpoint", type=Path, default=None, help="ppo: save the trained policy here")
    graph.add_argument("--load", type=Path, default=None, help="ppo: apply this trained policy, no training")
    graph.add_argument("-o", "--output", type=Path, default=None, help="write the optimised graph here (.onnx)")
    graph.add_argument(
        "--steps", type=int, default=100, help="graphs expanded; ppo, world-model: rewrites per episode (default 100)"
    )
    graph.add_argument("--budget", default="300s", help="wall time of the search, e.g. 90s or 5m (default 300s)")
    add_old_name(graph, "--time-limit", "--budget", "budget")
    graph.add_argument("--alpha", type=float, default=1.05, help="taso: queue graphs costing < alpha x best")
    graph.add_argument(
        "--cost",
        default="context",
        choices=list(GRAPH_COSTS),
        help="context (default): the parent graph's cost plus the rewritten region and its neighbourhood timed "
        "before and after in ORT; sum: cached per-operator ORT times; fused: the same with ORT's Conv+activation "
        "fusion counted as free; region: ORT's fusion units timed as subgraphs; measured: the whole graph timed",
    )
    graph.add_argument("--rules", default=None, help="only these rule ids, comma-separated")
    graph.add_argument("--no-clean", action="store_true", help="skip the Conv+BatchNorm/Mul/Add fusions")
    graph.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads when timing (default: all)")
    add_measure_arguments(graph)
    graph.set_defaults(handler=command_graph)

    graph_train = commands.add_parser(
        "graph-train", help="train one agent on several graphs, for `graph --agent AGENT --load` on new ones"
    )
    graph_train.add_argument("--agent", default="ppo", choices=list(GRAPH_LEARNING_AGENTS),
                             help="ppo (default): model-free; world-model: MDN-RNN + controller trained in it")
    graph_train.add_argument("--models", required=True, help="comma-separated zoo names, packaged names or .onnx files")
    graph_train.add_argument("--checkpoint", type=Path, required=True, help="write the trained policy here")
    graph_train.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...",
                             help="fix the shape of a dynamic input, in every model that has it (repeatable)")
    graph_train.add_argument("--train-episodes", type=int, default=None,
                             help="episodes at most (default: train until --budget)")
    graph_train.add_argument("--budget", default="600s", help="wall time of the training, e.g. 10m (default 600s)")
    add_old_name(graph_train, "--time-limit", "--budget", "budget")
    graph_train.add_argument("--steps", type=int, default=50, help="rewrites per episode (default 50)")
    graph_train.add_argument("--cost", default="context", choices=list(GRAPH_COSTS[:-1]),
                             help="cost model (default context)")
    graph_train.add_argument("--rules", default=None, help="only these rule ids, comma-separated")
    graph_train.add_argument("--no-clean", action="store_true", help="skip the Conv+BatchNorm/Mul/Add fusions")
    graph_train.add_argument("--seed", type=int, default=0, help="seed of the training (default 0)")
    graph_train.add_argument("--json", type=Path, default=None, help="write the training statistics here")
    graph_train.set_defaults(handler=command_graph_train)


def command_graph(args: argparse.Namespace) -> int:
    """Rewrite a model's graph with a search agent, verify it, time it against the original, save it."""
    import onnx

    from rlcompile.graph.api import GraphRequest, optimize_graph
    from rlcompile.optimize import parse_duration
    from rlcompile.report.tables import graph_run_table, rewrites_table

    request = GraphRequest(
        threads=args.threads, agent=args.agent, max_steps=args.steps, time_limit_s=parse_duration(args.budget),
        alpha=args.alpha, cost=args.cost,
        clean=not args.no_clean, rule_ids=args.rules.split(",") if args.rules else None, seed=args.seed,
        train_episodes=args.train_episodes, checkpoint=args.checkpoint, load=args.load, temperature=args.temperature,
        timing=measure_config(args),
    )  # fmt: skip
    request.validate()
    model = load(args)

    def on_step(step: int, best_ms: float, evaluated: int) -> None:
        if step % 10 == 0:
            log(f"{args.agent}: step {step}/{args.steps}, best est. {best_ms:.3f} ms, {evaluated} graphs costed")

    run = optimize_graph(model, request, progress=log, on_step=on_step)
    rewrites = run.result.rewrites[: run.kept_rewrites]
    title = f"{len(rewrites)} rewrites applied" if run.kept else f"{len(rewrites)} rewrites found, not kept"
    stdout.print(rewrites_table(rewrites, run.result.initial_cost_ms, title))
    stdout.print(graph_run_table(run))
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(run.proto, str(args.output), save_as_external_data=run.proto.ByteSize() > 2_000_000_000)
        stdout.print(f"wrote {args.output}" + ("" if run.kept else " (the original graph: the rewrite was not faster)"))
    write_json(args.json, run.to_dict())
    return 0 if run.agreement.within() else 1


def command_graph_train(args: argparse.Namespace) -> int:
    """Train one PPO policy on several graphs, for ``graph MODEL --agent ppo --load`` on graphs it never saw."""
    from rlcompile.graph.api import GraphRequest, train_policy
    from rlcompile.models import load_model, parse_input_shapes

    names = [name for name in args.models.split(",") if name]
    if not names:
        raise RlcompileError("graph-train needs --models: zoo names, packaged names or .onnx files, comma-separated")
    from rlcompile.optimize import parse_duration

    request = GraphRequest(
        agent=args.agent, max_steps=args.steps, time_limit_s=parse_duration(args.budget), cost=args.cost,
        clean=not args.no_clean, rule_ids=args.rules.split(",") if args.rules else None, seed=args.seed,
        train_episodes=args.train_episodes, checkpoint=args.checkpoint, timing=None,
    )  # fmt: skip
    request.validate()
    models = []
    for name in names:
        with stderr.status(f"loading {name}"):
            models.append(load_model(name, parse_input_shapes(args.input_shape)))

    def on_update(episodes: int, best_ms: float, env_steps: int) -> None:
        log(f"{args.agent}: {episodes} episodes, {env_steps} rewrites tried")

    stats = train_policy(models, request, progress=log, on_update=on_update)
    stdout.print(f"wrote {args.checkpoint}: {args.agent} trained on {', '.join(stats['models'])} "
                 f"({stats['cost']} cost), {stats['train_episodes']} episodes, {stats['train_env_steps']} rewrites, "
                 f"{stats['train_seconds']:.0f} s")  # fmt: skip
    write_json(args.json, stats)
    return 0
