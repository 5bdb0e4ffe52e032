"""Side-by-side runs of graph-level agents for the benchmarks: rows, tables, plots, cost-model accuracy."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx_ir as ir
from rich.console import Console
from rich.table import Table

from rlcompile.graph import cost, onnx_graph, search
from rlcompile.graph.api import (
    GraphRequest,
    keeps,
    optimize_graph,
    replayed,
    search_rules,
    time_side_by_side,
    train_policy,
)
from rlcompile.graph.cleanup import clean_graph
from rlcompile.graph.search import SearchBudget
from rlcompile.measure import DEFAULT
from rlcompile.models import load_model


def ranks(values: list[float]) -> np.ndarray:
    return np.argsort(np.argsort(values)).astype(float)


def cost_model_accuracy(rows: list[dict]) -> dict:
    """How the per-operator sum relates to the measured latency, over every graph timed."""
    estimated = [row["original_cost_ms"] for row in rows] + [row["search"]["final_cost_ms"] for row in rows]
    measured = [row["ort_original_ms"] for row in rows] + [row["ort_optimized_ms"] for row in rows]
    ratio = [e / m for e, m in zip(estimated, measured, strict=True)]
    same_direction = [
        (row["search"]["final_cost_ms"] < row["search"]["initial_cost_ms"])
        == (row["ratio_optimized_over_original"] < 1)
        for row in rows
        if row["search"]["rewrites"]
    ]
    return {
        "graphs": len(estimated),
        "spearman": float(np.corrcoef(ranks(estimated), ranks(measured))[0, 1]) if len(estimated) > 2 else None,
        "pearson_log": float(np.corrcoef(np.log(estimated), np.log(measured))[0, 1]) if len(estimated) > 2 else None,
        "estimate_over_measured_median": statistics.median(ratio),
        "estimate_over_measured_range": [min(ratio), max(ratio)],
        "direction_agrees": f"{sum(same_direction)}/{len(same_direction)}",
    }


def run_grid(models: Sequence[str], agents: Sequence[str], console: Console, rounds: int = 5,
             **request_options) -> list[dict]:  # fmt: skip
    """Every model with every agent (same request options), each verified; then, per model, the original
    and every agent's graph timed round-robin ``rounds`` times, so all ratios share one measurement of
    the original and the machine's slow spells fall on every graph alike."""
    timing = request_options.pop("timing", DEFAULT)
    rows = []
    for model_name in models:
        model = load_model(model_name)
        runs = []
        for agent in agents:
            request = GraphRequest(agent=agent, timing=None, **request_options)
            prefix = f"{model_name} {agent}"
            runs.append(optimize_graph(
                model, request, progress=lambda message, prefix=prefix: console.log(f"{prefix}: {message}")
            ))  # fmt: skip
        console.log(f"{model_name}: timing the original, {len(runs)} graphs and a twin of the original round-robin, "
                    f"{rounds} rounds")  # fmt: skip
        feeds = model.random_inputs(request_options.get("seed", 0))
        protos = [model.proto, *(run.proto for run in runs), model.proto]
        original, *optimized, twin = time_side_by_side(protos, feeds, timing, rounds)
        for run, latency in zip(runs, optimized, strict=True):
            run.original_ms, run.optimized_ms = original, latency
            row = run.to_dict()
            kept = keeps(original.median_ms, latency.median_ms, twin.median_ms)  # what `rlcompile graph` returns
            rows.append(row | {"rules_applied": dict(Counter(r["rule"] for r in row["search"]["rewrites"])),
                               "noise": abs(twin.median_ms / original.median_ms - 1), "returned_kept": kept,
                               "returned_ratio": row["ratio_optimized_over_original"] if kept else 1.0})  # fmt: skip
            search = row["search"]
            console.log(
                f"{model_name} {run.agent}: est {search['initial_cost_ms']:.2f} -> {search['final_cost_ms']:.2f} ms, "
                f"ORT {row['ort_original_ms']:.2f} -> {row['ort_optimized_ms']:.2f} ms "
                f"({row['ratio_optimized_over_original']:.3f}x), search {search['search_seconds']:.1f} s"
            )  # fmt: skip
    return rows


def table(rows: list[dict], title: str) -> Table:
    """One row per (model, agent): rewrites, estimated and measured latency, ratio, search time."""
    result = Table(title=title)
    columns = ("model", "agent", "rewrites", "est. before ms", "est. after ms", "ORT original ms", "ORT optimised ms",
               "optimised/original", "noise", "returned/original", "search s", "steps", "graphs", "max rel err",
               "rules applied")  # fmt: skip
    for column in columns:
        result.add_column(column, justify="left" if column in ("model", "agent", "rules applied") else "right")
    for row in rows:
        search = row["search"]
        result.add_row(
            row["model"], row["agent"], str(row["kept_rewrites"]), f"{search['initial_cost_ms']:.2f}",
            f"{search['final_cost_ms']:.2f}", f"{row['ort_original_ms']:.2f}", f"{row['ort_optimized_ms']:.2f}",
            f"{row['ratio_optimized_over_original']:.3f}", f"{100 * row['noise']:.1f}%", f"{row['returned_ratio']:.3f}",
            f"{search['search_seconds']:.1f}", str(search["steps"]),
            str(search["graphs_evaluated"]), f"{row['agreement']['max_rel']:.1e}",
            ", ".join(f"{rule} x{count}" for rule, count in row["rules_applied"].items()),
        )  # fmt: skip
    return result


def learning_table(rows: list[dict], title: str) -> Table:
    """The RL rows' own numbers: training vs inference time, and the world model's speed and error."""
    result = Table(title=title)
    columns = ("model", "agent", "temperature", "training s", "inference s", "real env steps", "real step ms",
               "dream steps", "dream step ms", "reward MAE", "latent RMSE", "est. after ms")  # fmt: skip
    for column in columns:
        result.add_column(column, justify="left" if column in ("model", "agent") else "right")

    def cell(value, form: str = "{:.2f}") -> str:
        return "-" if value is None else form.format(value)

    for row in rows:
        search = row["search"]
        if row["agent"] not in ("ppo", "world-model"):
            continue
        error = search.get("prediction_error") or {}
        training = search["search_seconds"] - search.get("inference_seconds", 0.0)
        result.add_row(
            row["model"], row["agent"], cell(search.get("temperature")), cell(training, "{:.1f}"),
            cell(search.get("inference_seconds")), str(search.get("train_env_steps", search.get("real_env_steps", 0))),
            cell(search.get("real_step_ms")), cell(search.get("dream_steps"), "{}"), cell(search.get("dream_step_ms")),
            cell(error.get("reward_mae"), "{:.4f}"), cell(error.get("latent_rmse"), "{:.4f}"),
            f"{search['final_cost_ms']:.2f}",
        )  # fmt: skip
    return result


def plot(rows: list[dict], path: Path) -> None:
    """Ratio optimised/original per model and agent (bars), and estimate vs measurement (scatter)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = sorted({row["agent"] for row in rows})
    models = list(dict.fromkeys(row["model"] for row in rows))
    figure, (bars, scatter) = plt.subplots(1, 2, figsize=(14, 4.8))
    width = 0.8 / len(agents)
    for index, agent in enumerate(agents):
        ratios = [next(r["ratio_optimized_over_original"] for r in rows if r["model"] == m and r["agent"] == agent)
                  for m in models]  # fmt: skip
        bars.bar(np.arange(len(models)) + index * width, ratios, width, label=agent)
    bars.axhline(1.0, color="black", linewidth=0.8)
    bars.set_xticks(np.arange(len(models)) + width * (len(agents) - 1) / 2, models, rotation=30, ha="right")
    bars.set_ylabel("ORT latency, optimised / original (lower is better)")
    bars.legend()
    for row in rows:
        scatter.scatter(row["ort_original_ms"], row["original_cost_ms"], color="tab:blue", s=14)
        scatter.scatter(row["ort_optimized_ms"], row["search"]["final_cost_ms"], color="tab:orange", s=14)
    limits = [min(r["ort_original_ms"] for r in rows) / 2, max(r["ort_original_ms"] for r in rows) * 2]
    scatter.plot(limits, limits, color="black", linewidth=0.8)
    scatter.set_xscale("log")
    scatter.set_yscale("log")
    scatter.set_xlabel("measured ORT latency (ms)")
    scatter.set_ylabel("sum of per-operator times (ms)")
    scatter.set_title("cost model: original (blue) and optimised (orange) graphs")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


#: graph hash -> (label, graph)
Visited = dict[str, tuple[str, ir.Model]]


def study_graphs(model, cost_names: Sequence[str], agents: Sequence[str], max_steps: int, time_limit_s: float,
                 per_path: int, console: Console) -> tuple[ir.Model, Visited, list[dict]]:  # fmt: skip
    """The cleaned start graph, the graphs the searches pass through (for every (cost model, agent), up to
    ``per_path`` graphs along the path to its answer, its answer included), ``per_path`` one-rewrite
    successors of the start spread over the candidate list (rewrites a search may reject), all
    deduplicated by hash, and each search's summary (its answer's hash, estimate, time, graphs evaluated)."""
    start, _ = clean_graph(onnx_graph.from_proto(model.proto))
    rule_set = search_rules(GraphRequest())
    graphs: Visited = {}
    searches = []
    for cost_name in cost_names:
        cost_model = cost.create(cost_name)
        for agent in agents:
            searcher = search.create(agent, budget=SearchBudget(max_steps, time_limit_s))
            result = searcher.search(start, rule_set, cost_model)
            cost_model.save()
            path = list(replayed(start, result.rewrites, rule_set))
            picks = sorted({round(i * (len(path) - 1) / max(1, per_path - 1)) for i in range(per_path)}) if path else []
            for index in picks:
                key = onnx_graph.graph_hash(path[index].graph)
                graphs.setdefault(key, (f"{cost_name}/{agent} step {index + 1}/{len(path)}", path[index]))
            final = onnx_graph.graph_hash(path[-1].graph) if path else None
            searches.append({"cost": cost_name, "agent": agent, "rewrites": len(path), "answer": final,
                             "estimated_ratio": result.final_cost_ms / result.initial_cost_ms,
                             "search_seconds": result.search_seconds, "graphs_evaluated": result.graphs_evaluated,
                             "rules": dict(Counter(r.rule for r in result.rewrites))})  # fmt: skip
            console.log(f"{model.name}: {agent} on {cost_name}: {len(path)} rewrites, est {result.initial_cost_ms:.3f}"
                        f" -> {result.final_cost_ms:.3f} ms, {result.search_seconds:.1f} s")  # fmt: skip
    successors = search.base.candidates(start, rule_set)
    for candidate in successors[:: max(1, -(-len(successors) // per_path))]:  # every rule's kind, not only the best
        child = candidate.apply(start)
        graphs.setdefault(onnx_graph.graph_hash(child.graph), (f"one rewrite: {candidate.rule.id}", child))
    graphs.pop(onnx_graph.graph_hash(start.graph), None)
    return start, graphs, searches


def cost_study(model_name: str, cost_names: Sequence[str] = ("sum", "fused", "region"),
               agents: Sequence[str] = ("greedy", "taso"), max_steps: int = 20, time_limit_s: float = 60.0,
               per_path: int = 4, rounds: int = 5, timing=DEFAULT, console: Console | None = None) -> dict:  # fmt: skip
    """How well each cost model predicts ORT_ENABLE_ALL *within* one model, on the graphs searches visit.

    The start graph, a twin session of it (the noise) and every visited graph are timed in turns;
    then each cost model (and ``measured``, a second whole-graph timing, as the ceiling) estimates every
    graph. Reported per cost model: direction agreement with the measured change against the start graph
    (over graphs whose measured change exceeds the noise), rank correlation over all graphs, and the
    time per evaluation with its cache warm.
    """
    console = console or Console()
    model = load_model(model_name)
    feeds = model.random_inputs(0)
    start, graphs, searches = study_graphs(model, cost_names, agents, max_steps, time_limit_s, per_path, console)
    labels = list(graphs)
    console.log(f"{model_name}: timing the start graph, its twin and {len(labels)} visited graphs, {rounds} rounds")
    protos = [onnx_graph.to_proto(start), onnx_graph.to_proto(start)]
    protos += [onnx_graph.to_proto(graphs[key][1]) for key in labels]
    measured = [stats.median_ms for stats in time_side_by_side(protos, feeds, timing, rounds)]
    base, noise = measured[0], abs(measured[1] / measured[0] - 1)
    rows = [{"graph": graphs[key][0], "measured_ms": ms, "ratio": ms / base} for key, ms in zip(labels, measured[2:],
                                                                                            strict=True)]  # fmt: skip
    for entry in searches:  # what each search's answer measured: the cost model's effect on the search
        answer = entry.pop("answer")
        entry["measured_ratio"] = rows[labels.index(answer)]["ratio"] if answer in labels else 1.0
    verdicts = {}
    for cost_name in [*cost_names, "measured"]:
        cost_model = cost.create(cost_name, feeds)
        start_cost = cost_model.graph_cost(start)
        estimates = [cost_model.graph_cost(graphs[key][1]) for key in labels]
        cost_model.save()
        for row, estimate in zip(rows, estimates, strict=True):
            row[f"est_{cost_name}"] = estimate / start_cost
        verdicts[cost_name] = agreement_summary(estimates, start_cost, [r["measured_ms"] for r in rows], base, noise)
        own = [e for e in searches if e["cost"] == cost_name]
        verdicts[cost_name] |= {
            "seconds_per_evaluation": sum(e["search_seconds"] for e in own) / max(1, sum(e["graphs_evaluated"]
                                                                                        for e in own)),
            "answers": answers_summary(own, noise),
        }  # fmt: skip
    return {"model": model_name, "start_ms": base, "noise": noise, "graphs": rows, "searches": searches,
            "cost_models": verdicts}  # fmt: skip


def answers_summary(searches: list[dict], noise: float) -> dict:
    """Over the searches that rewrote something: how many answers measured faster, slower or within the noise."""
    taken = [e for e in searches if e["rewrites"]]
    return {"rewrote": len(taken), "faster": sum(e["measured_ratio"] < 1 - noise for e in taken),
            "slower": sum(e["measured_ratio"] > 1 + noise for e in taken)}  # fmt: skip


def agreement_summary(estimates: list[float], start_estimate: float, measured: list[float], start_ms: float,
                      noise: float) -> dict:  # fmt: skip
    """Direction agreement (graphs measured beyond the noise) and rank correlation of estimate vs measurement."""
    decided = [(e < start_estimate) == (m < start_ms) for e, m in zip(estimates, measured, strict=True)
               if abs(m / start_ms - 1) > noise]  # fmt: skip
    estimates_all, measured_all = [start_estimate, *estimates], [start_ms, *measured]
    spearman = float(np.corrcoef(ranks(estimates_all), ranks(measured_all))[0, 1]) if len(estimates) > 1 else None
    return {"agree": sum(decided), "decided": len(decided), "graphs": len(estimates), "spearman": spearman}


def transfer_study(models: Sequence[str], held_out: str, out: Path, train_seconds: float, cost_name: str,
                   steps: int, taso_seconds: float, timing=DEFAULT, rounds: int = 5,
                   console: Console | None = None, agent: str = "ppo") -> dict:  # fmt: skip
    """Leave one model out: ``agent`` (ppo or world-model) trained on the others (``graph-train``),
    applied to ``held_out`` in one greedy rollout, against TASO searching ``held_out`` itself; the
    original, both answers and a twin of the original timed in turns in ORT_ENABLE_ALL. The policy
    is kept in ``out/policies`` and reused."""
    console = console or Console()
    checkpoint = out / "policies" / f"{'' if agent == 'ppo' else agent + '-'}without-{held_out}.pt"
    trained_on = [name for name in models if name != held_out]
    request = GraphRequest(agent=agent, cost=cost_name, max_steps=steps, time_limit_s=train_seconds,
                           checkpoint=checkpoint, timing=None)  # fmt: skip
    stats = {}
    if not checkpoint.exists():
        stats = train_policy([load_model(name) for name in trained_on], request,
                             progress=lambda message: console.log(f"without {held_out}: {message}"))  # fmt: skip
    model = load_model(held_out)
    log = lambda message: console.log(f"{held_out}: {message}")  # noqa: E731
    applied = optimize_graph(model, replace(request, load=checkpoint, checkpoint=None), progress=log)
    taso = optimize_graph(model, GraphRequest(agent="taso", cost=cost_name, max_steps=steps, time_limit_s=taso_seconds,
                                              timing=None), progress=log)  # fmt: skip
    log(f"timing the original, the policy's graph, TASO's and a twin of the original, {rounds} rounds")
    protos = [model.proto, applied.proto, taso.proto, model.proto]
    original, policy_ms, taso_ms, twin = time_side_by_side(protos, model.random_inputs(0), timing, rounds)

    def answer(run, measured) -> dict:
        """The search's graph, and what ``rlcompile graph`` returns: it if :func:`keeps` says so, else the original."""
        search, ratio = run.result, measured.median_ms / original.median_ms
        kept = keeps(original.median_ms, measured.median_ms, twin.median_ms)
        return {"rewrites": run.kept_rewrites, "estimated_ratio": search.final_cost_ms / search.initial_cost_ms,
                "measured_ratio": ratio, "kept": kept, "returned_ratio": ratio if kept else 1.0,
                "seconds": search.search_seconds,
                "rules": dict(Counter(r.rule for r in search.rewrites[: run.kept_rewrites]))}  # fmt: skip

    return {"model": held_out, "agent": agent, "trained_on": trained_on, "cost": cost_name, "training": stats,
            "original_ms": original.median_ms, "noise": abs(twin.median_ms / original.median_ms - 1),
            "policy": answer(applied, policy_ms) | {"inference_seconds": applied.result.extra["inference_seconds"]},
            "taso": answer(taso, taso_ms)}  # fmt: skip
