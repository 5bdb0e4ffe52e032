"""``optimize``'s report: ``report.md`` (before/after, each stage's decision, the candidates) and
``report.png`` (latency after each stage; where the time goes per library), both from the manifest
alone, so they can be written again from any plan directory that ``optimize`` produced."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rlcompile.export import export_command
from rlcompile.manifest import GraphRecord, KernelRecord, LatencyRecord, LayerRecord, Manifest, Record
from rlcompile.measure import DECISION_ROUNDS

REPORT = "report.md"
FIGURE = "report.png"


def library_times(manifest: Manifest) -> dict[str, float]:
    """Predicted in-context ms per library of the chosen plan (the table's per-group times, summed)."""
    totals: dict[str, float] = defaultdict(float)
    for row in manifest.selection["groups"]:
        totals[row["library"]] += row["ms"].get(row["library"], 0.0)
    return dict(totals)


def markdown_table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def stage_lines(stages: dict[str, Record]) -> list[str]:
    rows = []
    graph = stages.get("graph")
    if isinstance(graph, GraphRecord):
        rows.append(["graph", f"{graph.agent}: {graph.rewrites} rewrites after {graph.cleanup} fusions; "
                     f"{graph.reason}", f"{graph.wall_s:.0f}"])  # fmt: skip
    kernel = stages.get("kernel")
    if isinstance(kernel, KernelRecord) and kernel.skipped:
        rows.append(["kernel", f"skipped: {kernel.skipped}", f"{kernel.wall_s:.0f}"])
    elif isinstance(kernel, KernelRecord):
        rows.append(["kernel", f"{kernel.strategy} ({kernel.cost_model} cost model): {kernel.trials} trials "
                     f"({kernel.resumed_trials} resumed, "
                     f"{kernel.failed_trials} failed), {kernel.tuned_tasks}/{kernel.tasks} tasks tuned"
                     + (f"; skipped (no design space): {', '.join(kernel.skipped_tasks)}"
                        if kernel.skipped_tasks else ""),
                     f"{kernel.wall_s:.0f}"])  # fmt: skip
    layer = stages["layer"]
    assert isinstance(layer, LayerRecord)
    mix = ", ".join(f"{name} x{count}" for name, count in layer.library_mix.items())
    rows.append(["layer", f"{layer.agent} over {', '.join(layer.libraries)}: chose {', '.join(layer.chosen)} "
                 f"({layer.segments} segment(s); groups: {mix})", f"{layer.wall_s:.0f}"])  # fmt: skip
    return markdown_table(["stage", "decision", "wall s"], rows)


def deploy_lines(output: Path, manifest: Manifest) -> list[str]:
    """Which runtime the plan runs on and with what settings, how to export it, and what it gains."""
    used = manifest.runtimes
    latency = manifest.optimize.latency
    settings = f"{manifest.threads} threads"
    precision = manifest.segments[0].get("precision", "fp32") if manifest.segments else "fp32"
    if used == ["openvino"]:
        settings += f", latency hint, {precision} float precision"
    elif used == ["ort"]:
        settings += ", ORT_ENABLE_ALL"
    if manifest.accuracy is not None:
        accuracy = manifest.accuracy
        settings += (f"; {accuracy.plan}, {accuracy.metric} {accuracy.error:.4g} on {accuracy.validation_samples} "
                     f"held-out samples (fp32 {accuracy.fp32_error:.4g}, tolerance +{accuracy.tolerance:g})")
    noise = f" (identical sessions differed by {100 * latency.noise:.1f}%)" if latency.noise is not None else ""
    return [f"The plan runs on {' + '.join(used)} ({len(manifest.segments)} segment(s), {settings}): "
            f"{latency.speedup:.3f}x the faster of ONNX Runtime and OpenVINO native{noise}.", "",
            f"Export it for the runtime you deploy on (written, then checked there in a fresh process): "
            f"`{export_command(manifest, output)}`.", "",
            f"Or run it as it is: `rlcompile run {output}` or "
            f"`rlcompile.load({str(output)!r}).run(feeds)`."]  # fmt: skip


def after_each_stage(latency: LatencyRecord) -> list[tuple[str, float]]:
    return [("original", latency.original_ms), ("+ graph", latency.after_graph_ms),
            ("+ kernel", latency.after_kernel_ms), ("+ layer (output)", latency.final_ms)]  # fmt: skip


def write_report(output: Path, manifest: Manifest) -> None:
    """Write ``report.md`` and ``report.png`` into the plan directory ``output``."""
    run = manifest.optimize
    latency = run.latency
    noise = latency.noise
    lines = [f"# rlcompile optimize: {manifest.model}", "",
             f"{manifest.environment.get('cpu')}, {manifest.threads} threads; budget "
             f"{run.budget['total_s']:.0f} s, wall time {run.wall_s:.0f} s; "
             f"levels {', '.join(run.request['levels'])}.",
             "", "## Before and after", ""]  # fmt: skip
    rows = [[name, ms(value), f"{latency.original_ms / value:.3f}x"] for name, value in after_each_stage(latency)]
    rows += [[f"{name} (original model)", ms(value), f"{latency.original_ms / value:.3f}x"]
             for name, value in latency.native_ms.items()]  # fmt: skip
    lines += markdown_table(["", "median ms", "speed-up vs the faster native"], rows)
    agreement = latency.agreement or {}
    lines += ["", f"Measured in turns in one process ({DECISION_ROUNDS} rounds). Two identical sessions of one "
              f"library differed by {100 * noise:.1f}% in this run." if noise is not None else "",
              f"Outputs agree with ONNX Runtime on the original model (max relative error "
              f"{agreement.get('max_rel', float('nan')):.1e}).", "", "## Stages", ""]  # fmt: skip
    lines += stage_lines(run.stages)
    lines += ["", "## Plans measured by the layer stage", ""]
    lines += markdown_table(["plan", "segments", "predicted ms", "measured ms"],
                            [[", ".join(c["labels"]), c["segments"], ms(c["predicted_ms"]), ms(c["measured_ms"])]
                             for c in manifest.selection["candidates"]])  # fmt: skip
    lines += ["", "## Deploy", "", *deploy_lines(output, manifest), ""]
    (output / REPORT).write_text("\n".join(lines))
    plot(output / FIGURE, manifest)


def plot(path: Path, manifest: Manifest) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latency = manifest.optimize.latency
    stages = after_each_stage(latency)
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = [name for name, _ in stages] + list(latency.native_ms)
    values = [value for _, value in stages] + list(latency.native_ms.values())
    colours = ["tab:blue"] * len(stages) + ["tab:gray"] * len(latency.native_ms)
    left.barh(names[::-1], values[::-1], color=colours[::-1])
    left.set_xlabel("median latency (ms)")
    left.set_title(f"{manifest.model}: latency after each stage")
    times = library_times(manifest)
    right.bar(list(times), list(times.values()), color="tab:orange")
    right.set_ylabel("predicted in-context ms")
    right.set_title("where the time goes, per library (chosen plan)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
