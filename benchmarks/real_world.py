"""Every command on every corpus model, as a new user would try them: no crash, no traceback, honest noise.

    python benchmarks/real_world.py [--models hf:bert-minilm,cf:gated,ocr-det,...|all] [--families text,vision]
                                    [--commands run,compare,tasks,graph,select,optimize]
                                    [--out results/real_world] [--full-timing] [--select-budget 180s|none]
                                    [--select-libraries ort,openvino]

Models: the corpus (``rlcompile.models.corpus``: Hugging Face architectures exported by ``torch.onnx`` from
their configs with random weights, control-flow models, the zoo, PaddleOCR's packaged models), built
offline into the cache first (``transformers`` needed for the ``hf:`` ones), and dynamically quantised
versions of two PaddleOCR models (``ocr-cls-q``, ``ocr-rec-q``; ONNX Runtime's ``quantize_dynamic``).
Each command runs in its own process; recorded per (model, command): exit status, wall seconds, the
line that says why (the error line, else the last line), whether a traceback was printed and, for
``optimize``, the output's latency against the faster native library with the twins' noise; for ``optimize`` and
``select``, the output timed from outside in a fresh process beside both natives (``benchmarks/outside.py``). Expected
outcomes: exit 0, or exit 2 with one line naming what is unsupported; a traceback or exit 1 is a bug.
Results go to ``real_world.json`` as each command finishes (written in one step); a re-run skips what
is there (``--redo`` runs the selected ones again). ``--full-timing`` runs every command without
``--quick`` (each measurement at the default timing), ``--select-budget`` gives ``select`` another budget and
``--select-libraries`` other libraries; ``--outside-only`` times the outputs on disk from outside again.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from outside import slower as slower_than_native
from rich.console import Console
from rich.table import Table

from rlcompile import atomic
from rlcompile.measure.load import cpu_ticks, machine_load
from rlcompile.models import corpus
from rlcompile.models.packaged import PACKAGED, packaged_path

console = Console(width=220)
#: quantised copies of packaged models: name -> packaged model
QUANTISED = {"ocr-cls-q": "ocr-cls", "ocr-rec-q": "ocr-rec"}
#: command -> arguments after MODEL; {out} is this (model, command)'s output folder.
COMMANDS = {
    "run": ["--quick"],
    "compare": ["--runtimes", "ort,tvm", "--quick"],
    "tasks": [],
    "graph": ["--agent", "taso", "--budget", "30", "--quick", "-o", "{out}/graph.onnx"],
    "select": ["--agent", "qlearning", "--quick", "--budget", "60s", "-o", "{out}/plan", "--table-dir",
               "{out}/tables"],
    "optimize": ["--quick", "-o", "{out}/opt", "--json", "{out}/optimize.json"],
}
TIMEOUT_S = 1200
#: Issue 32's criterion: the lookup table predicts every measured plan within this fraction.
PREDICTION_BAND = 0.15
#: A miss is the measurement's own when the table priced the plan within this of its probe's measurement.
FIT_BAND = 0.05


def quantised_copy(source: Path, folder: Path) -> Path:
    """``quantize_dynamic`` of ``source``, after turning Constant nodes into initializers."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = folder / f"{source.stem}_quantised.onnx"
    if target.exists():
        return target
    model = onnx.load(str(source))
    kept = []
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    plain = folder / f"{source.stem}_initializers.onnx"
    onnx.save(model, str(plain))
    quantize_dynamic(str(plain), str(target), weight_type=QuantType.QUInt8)
    return target


def model_specs(names: list[str], out: Path) -> dict[str, list[str]]:
    """{name: the CLI's MODEL argument and shape flags}, building the corpus entries that are not built yet."""
    entries = {entry.name: entry for entry in corpus.corpus()}
    failures = corpus.build([entries[name] for name in names if name in entries], progress=console.log)
    for name, why in failures.items():
        console.log(f"[red]{name} cannot be built here: {why}[/red]")
    specs = {}
    for name in names:
        if name in failures:
            continue
        if name in QUANTISED:
            entry = PACKAGED[QUANTISED[name]]
            (out / "models").mkdir(parents=True, exist_ok=True)
            model = quantised_copy(packaged_path(QUANTISED[name]), out / "models")
            specs[name] = [str(model), *(part for shape in entry.input_shapes for part in ("--input-shape", shape))]
        else:
            specs[name] = corpus.arguments(entries[name])
    return specs


def command_arguments(command: str, full_timing: bool = False, select_budget: str | None = None,
                      select_libraries: str | None = None) -> list[str]:  # fmt: skip
    """``command``'s arguments (:data:`COMMANDS`); ``full_timing``: without ``--quick`` (every measurement at the
    default timing: longer blocks, more rounds); ``select_budget``: ``select``'s ``--budget`` instead of 60 s
    (``"none"``: no budget, as ``select`` runs by default); ``select_libraries``: ``select``'s ``--libraries``
    instead of its default."""
    arguments = list(COMMANDS[command])
    if full_timing and "--quick" in arguments:
        arguments.remove("--quick")
    if select_budget is not None and command == "select":
        at = arguments.index("--budget")
        if select_budget.lower() == "none":
            del arguments[at:at + 2]
        else:
            arguments[at + 1] = select_budget
    if select_libraries is not None and command == "select":
        arguments += ["--runtimes", select_libraries]
    return arguments


def try_command(model: list[str], command: str, out: Path, arguments: list[str]) -> dict:
    """Run one command in a fresh output folder (a finished output is never reused) and describe how it went;
    ``arguments``: the command's (:func:`command_arguments`), ``{out}`` standing for that folder."""
    arguments = [part.format(out=out) for part in arguments]
    argv = ["rlcompile", command, model[0], *arguments, *model[1:]]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    started, ticks = time.monotonic(), cpu_ticks(children_cpu_s())
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        status, output = done.returncode, (done.stdout + done.stderr)
    except subprocess.TimeoutExpired:
        status, output = None, f"timed out after {TIMEOUT_S} s"
    load = machine_load(ticks, cpu_ticks(children_cpu_s()))
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("rlcompile: error:")]
    row = {"argv": argv, "status": status, "seconds": time.monotonic() - started, "traceback": "Traceback" in output,
           "last_line": (errors or lines or [""])[-1][:300], "machine": load.to_dict() if load else None}  # fmt: skip
    if command == "optimize" and (out / "optimize.json").exists():
        optimize = json.loads((out / "optimize.json").read_text())["optimize"]
        latency = optimize["latency"]
        stages = {name: stage.get("wall_s") for name, stage in optimize["stages"].items()}
        row |= {"speedup": latency["speedup"], "noise": latency["noise"], "final_ms": latency["final_ms"],
                "paired_noise": latency.get("paired_noise"),
                "rounds": latency.get("rounds"), "budget_s": 240.0, "stages_s": stages}  # fmt: skip
    if command == "select":
        row |= select_predictions(out / "plan" / "manifest.json")
    plan = out / PLAN_FOLDERS.get(command, "")
    if command in PLAN_FOLDERS and status == 0 and (plan / "manifest.json").exists():
        row["outside"] = outside_timing(model, plan)
    return row


#: the commands whose output is timed from outside (:func:`outside_timing`), and the folder it is in
PLAN_FOLDERS = {"optimize": "opt", "select": "plan"}


def outside_timing(model: list[str], plan: Path) -> dict:
    """``benchmarks/outside.py`` on ``plan`` in a fresh process: the plan through ``rlcompile.load(...).run`` beside
    ONNX Runtime (twice) and OpenVINO on the original model, in alternating blocks; ``{"error": line}`` if it fails."""
    argv = [sys.executable, str(Path(__file__).with_name("outside.py")), model[0], str(plan), *model[1:]]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}
    if done.returncode != 0:
        return {"error": ([line for line in done.stderr.splitlines() if line.strip()] or [""])[-1][:300]}
    return json.loads(done.stdout)


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children: the command a row measures the machine's
    load around (:func:`~rlcompile.measure.load.machine_load`: what else used the machine while it ran)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def select_predictions(manifest: Path) -> dict:
    """``plans`` (:func:`plan_predictions`), and the timing noise the predictions carry: ``noise``, how far the final
    contest's identical sessions differed, and ``calibration_noise``, how far the calibration's did (``None`` when
    the manifest is missing or has no twins); ``left_out``, the libraries left out of the plans, by the gain the table
    gave them; ``retimed``, how many of the final contest's blocks were timed again after the hypervisor took their
    time."""
    selection = json.loads(manifest.read_text())["selection"] if manifest.exists() else {}
    return {"plans": plan_predictions(manifest), "noise": selection.get("noise"),
            "paired_noise": selection.get("paired_noise"),
            "calibration_noise": selection.get("calibration_noise"), "left_out": selection.get("left_out"),
            "retimed": selection.get("retimed_blocks")}


def plan_predictions(manifest: Path) -> list[dict] | None:
    """Every plan ``select`` measured: its labels, segments, library mix, the lookup table's prediction as made
    (``predicted_ms``) and at each library's speed in the final contest (``expected_ms``: what ``select`` prints,
    the prediction times each library's drift since the calibration), the measurement, the two's ratio
    (``measured_over_expected``) and its median over the final contest's rounds, each round's prediction at that
    round's library speeds (``round_ratio``: ``Selection.round_ratios``); ``single``: the libraries
    whose single-library plan this is (judged by its library's native run, never by itself). ``None`` when the
    manifest is missing."""
    if not manifest.exists():
        return None
    selection = json.loads(manifest.read_text())["selection"]
    expected = selection.get("expected_ms", {})  # Selection.to_dict: by the candidate's labels
    ratios = selection.get("measured_over_expected", {})
    by_round = {label: float(np.median(values)) for label, values in selection.get("round_ratios", {}).items()
                if values}  # fmt: skip
    return [{"labels": c["labels"], "segments": c.get("segments"), "library_mix": c.get("library_mix"),
             "predicted_ms": c.get("predicted_ms"), "expected_ms": expected.get(", ".join(c["labels"])),
             "measured_ms": c.get("measured_ms"), "measured_over_expected": ratios.get(", ".join(c["labels"])),
             "round_ratio": by_round.get(", ".join(c["labels"])),
             "probed": c.get("probed"), "single": c.get("single"), "probe_ms": c.get("probe_ms") or [],
             "fitted_ms": c.get("fitted_ms") or [], "probe_rounds": c.get("probe_rounds") or [],
             "rounds": len(c.get("round_ms") or {}),
             "contest_rounds": selection.get("rounds")}
            for c in selection["candidates"]]  # fmt: skip


def probe_ratios(plan: dict) -> tuple[float, float, float | None] | None:
    """For a plan a refining probe measured whole (``probe_ms``, at the table's speed): the final contest's
    measurement at the table's speed over the last probe's, the table's prediction over that probe's (how far
    the fit left the plan it was fitted on), and the table's price right after that probe's refit over it (``None``
    where the run did not record it: ``fitted_ms``; the refit itself, before later refits moved the plan). ``None``
    for a plan no probe measured or the final one did not. Two measurements of one plan further apart than the band
    are more than any table can predict both of."""
    probe_ms, expected = plan.get("probe_ms"), plan.get("expected_ms")
    if not probe_ms or not plan.get("measured_ms") or not expected or not math.isfinite(expected):
        return None
    final_at_table_speed = plan["measured_ms"] * plan["predicted_ms"] / expected
    fitted = plan.get("fitted_ms") or []
    refit = fitted[len(probe_ms) - 1] / probe_ms[-1] if len(fitted) >= len(probe_ms) else None
    return final_at_table_speed / probe_ms[-1], plan["predicted_ms"] / probe_ms[-1], refit


def prediction_ratio(plan: dict, by_round: bool = False) -> float | None:
    """A measured plan's measurement over its prediction at the final contest's speed (``None`` without a
    prediction); ``by_round``: the median over the contest's rounds instead, where the run recorded it."""
    if by_round:
        return plan.get("round_ratio")
    if plan.get("measured_over_expected") is not None:
        return plan["measured_over_expected"] if math.isfinite(plan["measured_over_expected"]) else None
    prediction = plan.get("expected_ms") or plan.get("predicted_ms")
    return plan["measured_ms"] / prediction if plan.get("measured_ms") and prediction and math.isfinite(prediction) \
        else None


def predicted(plans: list[dict] | None, probed: bool | None = None, single: bool | None = None,
              by_round: bool = False, whole: bool | None = None) -> tuple[int, int, float | None]:  # fmt: skip
    """(plans within :data:`PREDICTION_BAND` of their measurement, plans with a prediction, the worst ratio of
    measured to predicted; :func:`prediction_ratio`). ``probed``: only the plans the refining probe measured (in
    sample: the table was corrected on them), or only the others; ``single``: only the single-library plans (priced
    at the calibration's measurement of them, judged by their library's native run), or only the others;
    ``whole``: only the plans of one segment, or only those of several (a single-library plan falls back to ONNX
    Runtime for the groups its library does not run)."""
    ratios = [ratio for plan in plans or [] if (ratio := prediction_ratio(plan, by_round)) is not None
              and (probed is None or bool(plan.get("probed")) == probed)
              and (single is None or bool(plan.get("single")) == single)
              and (whole is None or (plan.get("segments") == 1) == whole)]  # fmt: skip
    worst = max(ratios, key=lambda ratio: abs(math.log(ratio))) if ratios else None
    return sum(abs(ratio - 1) <= PREDICTION_BAND for ratio in ratios), len(ratios), worst


def run_folder(out: Path, name: str, command: str) -> Path:
    """Where one (model, command) run writes its output."""
    return out / "runs" / name.replace(":", "-") / command


def selected_models(text: str, families: str | None) -> list[str]:
    everything = [entry.name for entry in corpus.corpus()] + list(QUANTISED)
    if families:
        wanted = set(families.split(","))
        everything = [entry.name for entry in corpus.corpus() if entry.family in wanted]
    return everything if text == "all" else [name for name in text.split(",") if name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="all", help="comma-separated corpus names, or all")
    parser.add_argument("--families", default=None, help="only these corpus families (text, vision, audio, ...)")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--out", type=Path, default=Path("results/real_world"))
    parser.add_argument("--redo", action="store_true", help="run the selected (model, command) pairs again")
    parser.add_argument("--full-timing", action="store_true",
                        help="run the commands without --quick: every measurement at the default timing")
    parser.add_argument("--select-budget", default=None,
                        help="select's --budget (default 60s; none: no budget, as select runs by default)")
    parser.add_argument("--select-libraries", default=None, help="select's --libraries (default: its own)")
    parser.add_argument("--outside-only", action="store_true",
                        help="time the optimize and select outputs on disk from outside again, running no command")
    args = parser.parse_args(argv)
    path = args.out / "real_world.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    specs = model_specs(selected_models(args.models, args.families), args.out)
    for name, model in specs.items():
        for command in args.commands.split(","):
            key = f"{name}/{command}"
            plan = run_folder(args.out, name, command) / PLAN_FOLDERS.get(command, "")
            if args.outside_only:
                if key in saved and command in PLAN_FOLDERS and (plan / "manifest.json").exists():
                    console.log(f"{key}: timing the output from outside")
                    saved[key]["outside"] = outside_timing(model, plan)
                    atomic.write_json(path, saved, indent=1)
                continue
            if key in saved and not args.redo:
                continue
            console.log(key)
            arguments = command_arguments(command, args.full_timing, args.select_budget, args.select_libraries)
            saved[key] = try_command(model, command, run_folder(args.out, name, command), arguments)
            atomic.write_json(path, saved, indent=1)
    for row in saved.values():  # outside timings from before outside.py said whether the plan was slower
        if "plan_over_faster_native" in (row.get("outside") or {}) and "slower" not in row["outside"]:
            row["outside"]["slower"] = slower_than_native(row["outside"])
    for key, row in saved.items():  # rows from before the predictions were recorded, while their plans are on disk
        if key.endswith("/select") and ("plans" not in row or "noise" not in row):
            row |= select_predictions(run_folder(args.out, key.rsplit("/", 1)[0], "select") / "plan" / "manifest.json")
    atomic.write_json(path, saved, indent=1)
    console.print(outcome_table(saved))
    (args.out / "real_world.md").write_text(markdown_summary(saved))
    console.log(f"wrote {path} and real_world.md")
    return 0


def probe_lines(plans: list[list[dict] | None]) -> list[str]:
    """How the mixed plans a probe measured whole came out against that probe (:func:`probe_ratios`): the final
    contest's measurement (what no table can beat), the table's prediction and its price right after the refit,
    and how many the probe timed in a second batch (their blocks disagreed: ``probe_rounds``)."""
    probed = [(plan, ratios) for one in plans for plan in one or []
              if not plan.get("single") and (ratios := probe_ratios(plan)) is not None]  # fmt: skip
    if not probed:
        return []
    pairs = [ratios for _, ratios in probed]
    again, fitted = (sum(abs(pair[index] - 1) <= PREDICTION_BAND for pair in pairs) for index in (0, 1))
    line = (f"Of the {len(pairs)} mixed plans a probe measured whole and the final contest measured again, {again} "
            f"measured within {PREDICTION_BAND:.0%} of their probe's own measurement (both at the table's speed: what "
            f"no table can beat), and the table predicted {fitted} within {PREDICTION_BAND:.0%} of that probe's "
            "measurement (the fit on the plans it was fitted on).")
    if refits := [pair[2] for pair in pairs if pair[2] is not None]:
        close = sum(abs(ratio - 1) <= PREDICTION_BAND for ratio in refits)
        line += (f" Right after the refit that used the probe, the table priced {close} of {len(refits)} within "
                 f"{PREDICTION_BAND:.0%} of it.")
    if rounds := [plan["probe_rounds"][-1] for plan, _ in probed if plan.get("probe_rounds")]:
        line += (f" The probe timed {sum(count > min(rounds) for count in rounds)} of them in more rounds than the "
                 f"fewest ({min(rounds)}; up to {max(rounds)}): a second batch where their blocks disagreed.")
    return ["", line]


def miss_kind(plan: dict) -> str:
    """Why a plan outside :data:`PREDICTION_BAND` missed: ``"repeat"`` when the table priced it within
    :data:`FIT_BAND` of its probe's measurement and the final contest measured it outside the band from that probe
    (the same plan measured twice in one process: what no table can predict both of), ``"fit"`` when the table's
    price was off its probe, ``"unprobed"`` when no probe measured it whole."""
    ratios = probe_ratios(plan)
    if ratios is None:
        return "unprobed"
    again, fitted, _ = ratios
    return "repeat" if abs(fitted - 1) <= FIT_BAND and abs(again - 1) > PREDICTION_BAND else "fit"


def miss_lines(plans: list[list[dict] | None]) -> list[str]:
    """The plans outside :data:`PREDICTION_BAND` of their prediction, by :func:`miss_kind`."""
    misses = [plan for one in plans for plan in one or []
              if (ratio := prediction_ratio(plan)) is not None and abs(ratio - 1) > PREDICTION_BAND]  # fmt: skip
    if not misses:
        return []
    kinds = Counter(miss_kind(plan) for plan in misses)
    return ["", f"Of the {len(misses)} plans outside {PREDICTION_BAND:.0%} of their prediction, {kinds['repeat']} "
                f"were priced within {FIT_BAND:.0%} of their probe's measurement and measured again outside "
                f"{PREDICTION_BAND:.0%} of it by the final contest (the measurement did not repeat), {kinds['fit']} "
                f"were priced off their probe (the fit), {kinds['unprobed']} were never probed whole."]


def rounds_line(plans: list[list[dict] | None]) -> list[str]:
    """How the plans timed in every round of their final contest were predicted, against those timed in fewer (left
    at the first batch's rounds, out of contention): what a plan's number of blocks does to its measurement."""
    every = [plan for one in plans for plan in one or [] if plan.get("rounds") and plan.get("contest_rounds")]
    if not every:
        return []
    full = [plan for plan in every if plan["rounds"] >= plan["contest_rounds"]]
    fewer = [plan for plan in every if plan["rounds"] < plan["contest_rounds"]]
    (full_within, full_priced, _), (fewer_within, fewer_priced, _) = predicted(full), predicted(fewer)
    return ["", f"Plans timed in every round of their final contest: {full_within} of {full_priced} within "
                f"{PREDICTION_BAND:.0%}; timed in fewer (out of contention after a batch): {fewer_within} of "
                f"{fewer_priced}."]


def markdown_summary(saved: dict) -> str:
    """One row per model: each command's exit status and seconds, ``optimize``'s ratio to the faster native with
    its twins' noise and contest rounds; then every outcome other than exit 0, with its line."""
    commands = [command for command in COMMANDS if any(key.endswith(f"/{command}") for key in saved)]
    models = list(dict.fromkeys(key.rsplit("/", 1)[0] for key in saved))
    lines = ["| model | " + " | ".join(commands) + " | optimize x faster native | noise | rounds | from outside: "
             "optimize, select x faster native (twins) | select: plans "
             f"predicted within {PREDICTION_BAND:.0%} | worst measured/predicted | machine during select: stolen, "
             "others |", "|---" * (len(commands) + 8) + "|"]
    for model in models:
        cells = []
        for command in commands:
            row = saved.get(f"{model}/{command}")
            cells.append("" if row is None else f"{outcome(row)} ({row['seconds']:.0f} s)")
        best = saved.get(f"{model}/optimize") or {}
        ratio = f"{best['speedup']:.3f}" if best.get("speedup") else ""
        select = saved.get(f"{model}/select") or {}
        noise = (f"{100 * best['noise']:.1f}%" if best.get("noise") is not None else
                 f"select {100 * select['noise']:.1f}%" if select.get("noise") is not None else "")  # fmt: skip
        if select.get("calibration_noise") is not None:
            noise += f" (calibration {100 * select['calibration_noise']:.1f}%)"
        within, priced, worst = predicted((saved.get(f"{model}/select") or {}).get("plans"))
        prediction = f"{within}/{priced} | {worst:.2f}" if worst is not None else " | "
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {ratio} | {noise} | {best.get('rounds', '')} | "
                     f"{outside_cell(best)}, {outside_cell(select)} | {prediction} | "
                     f"{load_cell(select.get('machine'))} |")  # fmt: skip
    plans = [row.get("plans") for key, row in saved.items() if key.endswith("/select")]
    tally = {kind: [predicted(one, probed, single, by_round, whole) for one in plans]
             for kind, probed, single, by_round, whole in
             (("all", None, None, False, None), ("single", None, True, False, None),
              ("single whole", None, True, False, True), ("single falling back", None, True, False, False),
              ("others", None, False, False, None), ("probed", True, False, False, None),
              ("unprobed", False, False, False, None), ("others by round", None, False, True, None))}  # fmt: skip
    within, priced = ({kind: sum(c[index] for c in counts) for kind, counts in tally.items()} for index in (0, 1))
    lines += ["", f"The lookup table's predictions: {within['all']} of {priced['all']} plans that `select` measured "
              f"are within {PREDICTION_BAND:.0%} of their measurement: {within['single']} of {priced['single']} "
              f"single-library plans ({within['single whole']} of {priced['single whole']} of one segment, "
              f"{within['single falling back']} of {priced['single falling back']} that fall back to ONNX Runtime "
              f"in several), {within['others']} of {priced['others']} others "
              f"({within['probed']} of {priced['probed']} that the refining probe measured first, "
              f"{within['unprobed']} of {priced['unprobed']} it did not). Judged round by round instead (each round's "
              f"prediction at that round's library speeds, the median): {within['others by round']} of "
              f"{priced['others by round']} others."]
    lines += probe_lines(plans)
    lines += miss_lines(plans)
    lines += rounds_line(plans)
    lines += left_out_line([row for key, row in saved.items() if key.endswith("/select")])
    lines += outside_lines(saved)
    others = [(key, row) for key, row in saved.items() if row["status"] != 0 or row["traceback"]]
    lines += ["", f"Outcomes other than exit 0: {len(others)}", ""]
    lines += [f"- {key}: exit {row['status']}: {row['last_line']}" for key, row in others]
    return "\n".join(lines) + "\n"


def left_out_line(selects: list[dict]) -> list[str]:
    """In how many ``select`` runs each library was left out of the plans (none when no run recorded it)."""
    counts = Counter(library for row in selects for library in row.get("left_out") or {})
    if not any("left_out" in row for row in selects):
        return []
    said = ", ".join(f"{library} in {count}" for library, count in sorted(counts.items())) or "none"
    lines = ["", f"Libraries left out of the plans (the table's optimum gained too little with them), of "
                 f"{len(selects)} runs: {said}."]
    retimed = [row["retimed"] for row in selects if row.get("retimed") is not None]
    if retimed:
        lines[-1] += (f" Final-contest blocks timed again because the hypervisor took their time: {sum(retimed)}, "
                      f"in {sum(count > 0 for count in retimed)} of {len(retimed)} runs.")
    return lines


def outside_cell(row: dict) -> str:
    """The outside timing's plan over the faster native, with its twins' spread ("-" where there is none)."""
    outside = row.get("outside") or {}
    if "plan_over_faster_native" not in outside:
        return "-"
    return f"{outside['plan_over_faster_native']:.3f} ({100 * outside['twins']:.1f}%)"


def outside_lines(saved: dict) -> list[str]:
    """How many outputs the outside timing puts above the faster native beyond its twins, and ``load(...).run``'s
    cost over the runtime's own session on one-segment plans."""
    rows = [(key, row["outside"]) for key, row in saved.items() if "plan_over_faster_native" in (row.get("outside")
                                                                                                   or {})]  # fmt: skip
    if not rows:
        return []
    slower = [f"{key} {o['plan_over_faster_native']:.3f}x (twins {100 * o['twins']:.1f}%)" for key, o in rows
              if o["slower"]]  # fmt: skip
    own = [o["load_run_over_own_session"] for _, o in rows if "load_run_over_own_session" in o]
    line = (f"Timed from outside (a fresh process, {rows[0][1]['rounds']} rounds of {rows[0][1]['block_s']} s "
            f"blocks): {len(rows) - len(slower)} of {len(rows)} outputs at or below the faster native beyond the "
            f"twins' spread" + (f"; slower: {'; '.join(slower)}" if slower else "") + ".")
    if own:
        line += (f" `rlcompile.load(...).run` over its one segment's own session: median {np.median(own):.3f}x, "
                 f"worst {max(own):.3f}x ({len(own)} plans).")
    return ["", line]


def load_cell(load: dict | None) -> str:
    """:func:`machine_load` as two percentages (empty where it was not recorded)."""
    return f"{100 * load['steal']:.1f}%, {100 * load['others']:.1f}%" if load else ""


def outcome(row: dict) -> str:
    """How a command ended: its exit status ("timeout" when it was killed), and whether it printed a traceback."""
    status = "timeout" if row["status"] is None else str(row["status"])
    return status + (" TRACEBACK" if row["traceback"] else "")


def outcome_table(saved: dict) -> Table:
    table = Table(title="every command on the corpus: exit status, wall time, the line that says why")
    for column in ("model", "command", "exit", "s", "optimize vs faster native (noise)", "line"):
        table.add_column(column)
    for key, row in saved.items():
        name, command = key.rsplit("/", 1)
        speed = (f"{row['speedup']:.3f}x ({100 * row['noise']:.1f}%)" if row.get("speedup") and row.get("noise")
                 is not None else "")  # fmt: skip
        table.add_row(name, command, outcome(row), f"{row['seconds']:.0f}",
                      speed, row["last_line"])  # fmt: skip
    return table


if __name__ == "__main__":
    sys.exit(main())
