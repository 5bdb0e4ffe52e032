"""Rich tables for the terminal; each takes plain results and returns a ``rich.table.Table``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.table import Table

from rlcompile.compare import Comparison
from rlcompile.manifest import KernelRecord, Manifest
from rlcompile.verify import DEFAULT_RTOL


def format_count(value: float) -> str:
    """1234567 -> '1.23 M'; keeps tables narrow."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f}"


def zoo_table(summaries: Iterable[dict]) -> Table:
    table = Table(title="rlcompile model zoo")
    for column, justify in (("model", "left"), ("parameters", "right"), ("FLOPs", "right"),
                            ("inputs", "left"), ("description", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for info in summaries:
        shapes = ", ".join(f"{name}[{'x'.join(map(str, shape))}]" for name, shape in info["inputs"].items())
        table.add_row(info["name"], format_count(info["parameters"]), format_count(info["flops"]), shapes,
                      info["description"])  # fmt: skip
    return table


def comparison_table(comparison: Comparison) -> Table:
    inputs = ", ".join(f"{name}[{'x'.join(map(str, shape))}]" for name, shape in comparison.inputs.items())
    table = Table(title=f"{comparison.model} ({inputs}) on {comparison.environment['cpu']}")
    columns = ("backend", "median ms", "p90 ms", "runs", "ratio", "prepare s", "max abs err", "max rel err", "agrees")
    for column in columns:
        table.add_column(column, justify="left" if column == "backend" else "right")
    for result in comparison.results:
        agreement = result.agreement
        table.add_row(
            result.label,
            f"{result.latency.median_ms:.3f}",
            f"{result.latency.p90_ms:.3f}",
            str(result.latency.repeats),
            f"{comparison.ratio(result):.2f}x",
            f"{result.prepare_seconds:.2f}",
            f"{agreement.max_abs:.2e}" if agreement else "reference",
            f"{agreement.max_rel:.2e}" if agreement else "",
            ("yes" if agreement.within() else f"NO (> {DEFAULT_RTOL:g})") if agreement else "",
        )
    return table


def tasks_table(tasks: Sequence, title: str) -> Table:
    table = Table(title=title)
    for column in ("#", "task", "label", "calls", "MFLOPs", "share"):
        table.add_column(column, justify="left" if column in ("task", "label") else "right")
    total = sum(t.weight * t.flops for t in tasks) or 1.0
    for index, task in enumerate(tasks):
        share = task.weight * task.flops / total
        table.add_row(str(index), task.name, task.label, str(task.weight), f"{task.flops / 1e6:.1f}", f"{share:.1%}")
    return table


def tuning_table(states: Sequence, title: str) -> Table:
    """Per task: trials, best latency, GFLOPS, failures by kind, search and measurement time."""
    table = Table(title=title)
    columns = ("task", "trials", "best ms", "GFLOPS", "build err", "run err", "timeout", "search s", "measure s")
    for column in columns:
        table.add_column(column, justify="left" if column == "task" else "right")
    for state in states:
        best = f"{state.best_seconds * 1e3:.4f}" if state.valid else "-"
        table.add_row(
            state.task.label,
            "skipped" if state.skipped else f"{state.trials}/{state.budget}"
            + (" (exhausted)" if state.exhausted else ""),
            best,
            f"{state.gflops:.1f}" if state.gflops else "-",
            str(state.statuses["build_error"]),
            str(state.statuses["run_error"]),
            str(state.statuses["timeout"]),
            f"{state.strategy.stats.search_seconds:.1f}",
            f"{state.measure_seconds:.1f}",
        )
    return table


def rewrites_table(rewrites: Sequence, initial_cost_ms: float, title: str) -> Table:
    """The rewrites a graph search applied, each with the estimated cost after it."""
    table = Table(title=title)
    for column in ("#", "rule", "location", "est. cost ms", "change"):
        table.add_column(column, justify="right" if column in ("#", "est. cost ms", "change") else "left")
    previous = initial_cost_ms
    for index, rewrite in enumerate(rewrites, 1):
        change = f"{rewrite.cost_after_ms - previous:+.3f}"
        table.add_row(str(index), rewrite.rule, " + ".join(rewrite.location), f"{rewrite.cost_after_ms:.3f}", change)
        previous = rewrite.cost_after_ms
    return table


def graph_run_table(run) -> Table:
    """Before/after of ``rlcompile graph``: estimated cost, ORT latency, nodes, agreement."""
    table = Table(title=f"{run.model_name}: {run.agent}")
    for column in ("", "nodes", "est. cost ms", "ORT median ms", "ORT p90 ms"):
        table.add_column(column, justify="left" if not column else "right")
    result = run.result
    table.add_row(
        "original", str(run.nodes_before), "", f"{run.original_ms.median_ms:.3f}", f"{run.original_ms.p90_ms:.3f}"
    )
    table.add_row("cleaned (search start)", "", f"{result.initial_cost_ms:.3f}", "", "")
    table.add_row(
        "optimised", str(run.nodes_after), f"{result.final_cost_ms:.3f}", f"{run.optimized_ms.median_ms:.3f}",
        f"{run.optimized_ms.p90_ms:.3f}",
    )  # fmt: skip
    agreement = "agrees" if run.agreement.within(DEFAULT_RTOL) else "DISAGREES"
    table.caption = (
        f"optimised/original ORT latency {1 / run.speedup:.3f}x; {agreement} with the original "
        f"(max rel err {run.agreement.max_rel:.1e}); search {result.search_seconds:.1f} s, {result.steps} steps, "
        f"{result.graphs_evaluated} graphs costed, stopped by {result.stopped_by}"
    )
    if run.verdict is not None:
        table.caption += f"\n{run.verdict.reason()}" + ("" if run.kept else " (the original is what is returned)")
    return table


def plan_table(run) -> Table:
    """``rlcompile select``: per layer, the chosen primitive, its time and the conversions it pays."""
    table = Table(title=f"{run.model_name}: {run.agent} plan ({len(run.result.plan)} layers)")
    for column in ("layer", "primitive", "layout", "layer ms", "conversion ms"):
        table.add_column(column, justify="right" if column.endswith("ms") else "left")
    for row in run.rows():
        conversion = f"{row['conversion_ms']:.4f}" if row["conversion_ms"] else ""
        table.add_row(row["layer"], row["primitive"], row["layout"], f"{row['layer_ms']:.4f}", conversion)
    return table


def plan_summary(run) -> str:
    counts: dict[str, int] = {}
    for primitive in run.plan.values():
        counts[primitive] = counts.get(primitive, 0) + 1
    used = ", ".join(f"{name} x{count}" for name, count in sorted(counts.items(), key=lambda item: -item[1]))
    lines = [f"primitives used: {used}", f"predicted (table) latency: {run.result.total_ms:.3f} ms"]
    if run.plan_ms is not None:
        lines.append(
            f"measured plan latency: {run.plan_ms.median_ms:.3f} ms (p90 {run.plan_ms.p90_ms:.3f}); ONNX Runtime "
            f"native (whole graph, ORT_ENABLE_ALL): {run.ort_ms.median_ms:.3f} ms; plan/ORT "
            f"{run.plan_ms.median_ms / run.ort_ms.median_ms:.2f}x"
        )
    if run.agreement is not None:
        verdict = "agree" if run.agreement.within() else "DISAGREE"
        lines.append(f"outputs {verdict} with ONNX Runtime (max rel err {run.agreement.max_rel:.1e})")
    return "\n".join(lines)


def candidates_table(selection) -> Table:
    """``rlcompile select``: every plan that was run, predicted vs measured, against the native runs."""
    ort_native = selection.natives.get("ort native")
    table = Table(title=f"{selection.model.name}: plans run end to end ({selection.threads} threads)")
    drifts = ", ".join(f"{name} x{factor:.2f}" for name, factor in selection.drifts.by_library.items())
    for column in ("plan", "segments", "library mix", "predicted ms", "measured ms",
                   f"measured/(pred. at today's speed: {drifts or f'x{selection.drift:.2f}'})",
                   "vs ORT native", "agrees"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("plan", "library mix") else "right")
    for candidate in selection.candidates:
        mix = ", ".join(f"{name} x{count}" for name, count in candidate.library_mix().items())
        label = ", ".join(candidate.labels) + (" [bold](chosen)[/bold]" if candidate is selection.chosen else "")
        if candidate.measured is None:
            table.add_row(label, "", mix, f"{candidate.predicted_ms:.3f}", "", "", "", candidate.error or "")
            continue
        measured = candidate.measured.median_ms
        versus = f"{measured / ort_native.median_ms:.3f}x" if ort_native else ""
        accuracy = candidate.accuracy
        agrees = f"{accuracy.metric} +{accuracy.excess:.1e} (<= {accuracy.tolerance:g})" if accuracy else "yes"
        table.add_row(label, str(candidate.segments), mix, f"{candidate.predicted_ms:.3f}", f"{measured:.3f}",
                      f"{selection.measured_over_expected(candidate):.2f}", versus, agrees)  # fmt: skip
    for name, stats in selection.natives.items():
        versus = f"{stats.median_ms / ort_native.median_ms:.3f}x" if ort_native else ""
        table.add_row(f"[dim]{name} (original model)[/dim]", "", "", "", f"{stats.median_ms:.3f}", "", versus, "")
    return table


def groups_table(selection) -> Table:
    """``rlcompile select``: per fusion group, the in-context time of each library and the one chosen."""
    names = list(selection.table.layouts)
    table = Table(title=f"{selection.model.name}: fusion groups (table ms, in context)")
    for column in ("group", "operators", "chosen", *names):
        table.add_column(column, justify="right" if column in names else "left")
    for group, library in zip(selection.grouped.groups, selection.chosen.assignment, strict=True):
        options = selection.table.options[group.name]
        cells = [f"{options[name]:.3f}" if name in options else "-" for name in names]
        table.add_row(group.name, group.describe(), library, *cells)
    return table


def kernel_decision(kernel: KernelRecord | None) -> str:
    if kernel is None:
        return "not run"
    if kernel.skipped:
        return f"skipped: {kernel.skipped}"
    return f"{kernel.tuned_tasks}/{kernel.tasks} tasks tuned in {kernel.trials} trials"


def optimize_table(manifest: Manifest) -> Table:
    """``rlcompile optimize``: latency after each stage and what each stage decided."""
    run = manifest.optimize
    latency, stages = run.latency, run.stages
    layer = stages["layer"]
    decisions = {
        "graph": stages["graph"].reason if "graph" in stages else "not run",
        "kernel": kernel_decision(stages.get("kernel")),
        "layer": f"{', '.join(layer.chosen)}, {layer.segments} segment(s)",
    }  # fmt: skip
    table = Table(title=f"{manifest.model}: optimize ({manifest.threads} threads)")
    for column in ("stage", "median ms", "vs original", "wall s", "decision"):
        table.add_column(column, justify="left" if column in ("stage", "decision") else "right")
    original = latency.original_ms
    table.add_row("original (faster native)", f"{original:.3f}", "1.000x", "", "")
    after = {"graph": latency.after_graph_ms, "kernel": latency.after_kernel_ms, "layer": latency.final_ms}
    for stage, ms in after.items():
        wall = stages[stage].wall_s if stage in stages else None
        table.add_row(f"+ {stage}", f"{ms:.3f}", f"{original / ms:.3f}x", "" if wall is None else f"{wall:.0f}",
                      decisions[stage])  # fmt: skip
    return table
