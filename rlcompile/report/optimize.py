"""``optimize``'s report: ``report.md`` (before/after, each stage's decision, the candidates) and
``report.png`` (latency after each stage; where the time goes per library), both from the manifest
alone, so they can be written again from any plan directory that ``optimize`` produced."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rlcompile.export import export_command
from rlcompile.manifest import GraphRecord, KernelRecord, LatencyRecord, LayerRecord, Manifest, Record
from rlcompile.measure import DECISION_ROUNDS, MachineLoad
from rlcompile.measure.load import load_words

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
        rows.append(["kernel", f"{kernel.strategy} ({kernel.cost_model} cost model, {kernel.layout}): "
                     f"{kernel.trials} trials "
                     f"({kernel.resumed_trials} resumed, "
                     f"{kernel.failed_trials} failed), {kernel.tuned_tasks}/{kernel.tasks} tasks tuned"
                     + (f"; skipped (no design space): {', '.join(kernel.skipped_tasks)}"
                        if kernel.skipped_tasks else ""),
                     f"{kernel.wall_s:.0f}"])  # fmt: skip
    layer = stages["layer"]
    assert isinstance(layer, LayerRecord)
    mix = ", ".join(f"{name} x{count}" for name, count in layer.library_mix.items())
    left_out = "".join(f"; {name} left out of the plans (the table's optimum {gain:.1%} faster with it)"
                       for name, gain in (layer.left_out or {}).items())  # fmt: skip
    rows.append(["layer", f"{layer.agent} over {', '.join(layer.libraries)}: chose {', '.join(layer.chosen)} "
                 f"({layer.segments} segment(s); groups: {mix}){left_out}", f"{layer.wall_s:.0f}"])  # fmt: skip
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
    noise = (f" (identical sessions differed by {100 * latency.noise:.1f}%"
             f"{load_words(MachineLoad.from_dict(latency.machine_load))})" if latency.noise is not None else "")
    return [f"The plan runs on {' + '.join(used)} ({len(manifest.segments)} segment(s), {settings}): "
            f"{latency.speedup:.3f}x as fast as the faster of ONNX Runtime and OpenVINO native{noise}.", "",
            f"Export it for the runtime you deploy on (written, then checked there in a fresh process): "
            f"`{export_command(manifest, output)}`.", "",
            f"Or run it as it is: `rlcompile run {output}` or "
            f"`rlcompile.load({str(output)!r}).run(feeds)`."]  # fmt: skip


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def headroom_lines(headroom: dict) -> list[str]:
    """Per task: its best library alone (ms, GFLOP/s, fraction of the FMA peak), TVM's best, whether tuned."""
    peak, bandwidth = headroom.get("peak_gflops"), headroom.get("bandwidth_gbs")
    intro = (f"This CPU's FP32 FMA peak at these threads: {peak:.0f} GFLOP/s, streaming bandwidth "
             f"{bandwidth or float('nan'):.1f} GB/s (measured, `rlcompile.peak`). " if peak
             else f"{headroom.get('note')}. ")  # fmt: skip
    intro += ("Each task's convolution or matrix multiplication was timed alone in every library and judged "
              "against the roofline (the peak, or bandwidth x FLOPs per byte for memory-bound operators); tasks "
              "are tuned most-to-win first, and not at all when the library is already near what tuned kernels "
              "reach.")
    rows = []
    for row in headroom["rows"]:
        tvm_ms = row.get("tvm_best_ms")
        of_peak = percent(row["flops"] / tvm_ms / 1e6 / peak) if peak and tvm_ms else "-"
        tvm = "-" if tvm_ms is None else f"{tvm_ms:.3f} ({of_peak})"
        gflops = row.get("library_gflops")
        rows.append([row["label"], row["calls"], row["library"] or "-", ms(row["library_ms"]),
                     "-" if gflops is None else f"{gflops:.0f}", percent(row["fraction_of_peak"]),
                     f"{percent(row.get('fraction_of_roofline'))} ({row.get('bound') or '-'})", tvm,
                     "yes" if row.get("tuned") else ("no: " + row["reason"] if not row["tune"] else "no (no time)")])
    return [intro, "", *markdown_table(["task", "calls", "best library", "library ms", "GFLOP/s", "of peak",
                                        "of roofline (bound)", "TVM best ms (of peak)", "tuned"], rows)]  # fmt: skip


def tvm_win_lines(groups: list[dict]) -> list[str]:
    """The fusion groups on which TVM's tuned kernels measured faster (in context) than every other library."""
    rows = []
    for row in groups:
        others = [value for name, value in row["ms"].items() if name != "tvm"]
        if "tvm" in row["ms"] and others and row["ms"]["tvm"] < min(others):
            rows.append([row["group"], row["ops"], ms(row["ms"]["tvm"]), ms(min(others)),
                         "yes" if row["library"] == "tvm" else "no"])  # fmt: skip
    if not rows:
        return ["On no fusion group did a tuned TVM kernel measure faster than every other library."]
    return markdown_table(["group", "operators", "TVM ms", "best other ms", "in the chosen plan"], rows)


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
    rounds = latency.rounds or DECISION_ROUNDS
    lines += ["", f"Measured in turns in one process ({rounds} rounds). Two identical sessions of one "
              f"library differed by {100 * noise:.1f}% in this run." if noise is not None else "",
              f"No plan beat the model run untouched by {latency.untouched} beyond that noise and the tie band: the "
              "plan is that run." if latency.untouched else "",
              f"Outputs agree with ONNX Runtime on the original model (max relative error "
              f"{agreement.get('max_rel', float('nan')):.1e}).", "", "## Stages", ""]  # fmt: skip
    lines += stage_lines(run.stages)
    lines += ["", "## Plans measured by the layer stage", ""]
    lines += markdown_table(["plan", "segments", "predicted ms", "measured ms"],
                            [[", ".join(c["labels"]), c["segments"], ms(c["predicted_ms"]), ms(c["measured_ms"])]
                             for c in manifest.selection["candidates"]])  # fmt: skip
    kernel = run.stages.get("kernel")
    if isinstance(kernel, KernelRecord) and kernel.headroom:
        lines += ["", "## Kernel headroom: what the libraries leave to tuning", "", *headroom_lines(kernel.headroom)]
    if "tvm" in manifest.runtimes or any("tvm" in row["ms"] for row in manifest.selection["groups"]):
        lines += ["", "## Where TVM's tuned kernels win", "", *tvm_win_lines(manifest.selection["groups"])]
    if manifest.serving is not None:
        lines += ["", "## Serving requests in flight", "", *serving_lines(manifest.serving)]
    lines += ["", "## Deploy", "", *deploy_lines(output, manifest), ""]
    (output / REPORT).write_text("\n".join(lines))
    plot(output / FIGURE, manifest)


def serving_lines(serving: dict) -> list[str]:
    """``--objective throughput``: every plan and configuration pair's rate and latency, the one kept first."""
    rows = sorted(serving["servers"].items(), key=lambda item: -item[1]["per_s"])
    noise = serving.get("noise")
    said = f"{serving['concurrency']} requests in flight; kept **{serving['kept']}**."
    if noise is not None:
        said += f" Two identical servers differed by {100 * noise:.1f}% in this run."
    return [said, "",
            *markdown_table(["plan: serving", "inferences/s", "median ms", "p99 ms"],
                            [[label, f"{stats['per_s']:.1f}", ms(stats["p50_ms"]), ms(stats["p99_ms"])]
                             for label, stats in rows])]  # fmt: skip


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
