"""``rlcompile export`` of a plan for a shape profile: its variants for the runtime that runs them, picked by shape.

One dynamic variant serving every shape exports as one model (``model.onnx`` or ``model.xml``), loaded as any
export is. Several variants export as one file per variant and ``shapes.json``: each input's dims by axis, and per
variant its file, the regions of axis sizes it serves (static variants first) and, for OpenVINO, its compile
configuration; the README's lines read the table and pick the file by the feeds' shapes with the runtime alone.
The check runs every bucket's saved inputs in the fresh process and compares each with the plan's outputs.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import onnx

from rlcompile.errors import RlcompileError
from rlcompile.events import Listener, Phase
from rlcompile.export import (
    CHECK_ROUNDS,
    README,
    TARGET_RUNTIME,
    ExportCheck,
    ExportResult,
    copy_plan,
    ort_config,
    prepare_output,
    run_fresh,
    snippet,
    write_readme,
)
from rlcompile.manifest import Manifest
from rlcompile.measure import MeasureConfig, measure_latency
from rlcompile.runtimes.base import RuntimeOptions
from rlcompile.runtimes.openvino import openvino_config
from rlcompile.verify import compare_outputs

TABLE = "shapes.json"
PLAN_FILES = ("manifest.json", "variants", "reference.npz", "buckets.npz", "validation.npz", "report.md")


def export_shaped(plan_dir: Path, manifest: Manifest, target: str, output: Path, timing: MeasureConfig,
                  progress: Listener) -> ExportResult:  # fmt: skip
    """Write the shaped plan for ``target`` and check every bucket with the runtime alone."""
    from rlcompile.plan import load_plan

    used = manifest.runtimes
    if target != "plan" and used != [TARGET_RUNTIME[target]]:
        raise RlcompileError(f"this plan's variants run on {' + '.join(used)}; --to {target} takes a plan that "
                             f"{TARGET_RUNTIME[target]} runs alone: export it --to plan")  # fmt: skip
    if output.resolve() == plan_dir.resolve():
        raise RlcompileError(f"-o {output} is the plan directory itself; write the export somewhere else")
    plan = load_plan(plan_dir)
    progress(Phase("export", f"writing {output}/ for {target}", "write"))
    prepare_output(output)
    entries = manifest.shapes["variants"]
    if target == "plan":
        files, code = copy_plan(plan_dir, output, PLAN_FILES), snippet("plan")
    elif len(entries) == 1:
        files, code = write_single(plan_dir, manifest, target, output), snippet(target)
    else:
        files, code = write_table(plan_dir, manifest, target, output), table_snippet(target)
    write_readme(output, target, code, files)
    progress(Phase("export", f"checking {output}/ with {target} alone in a fresh process at every bucket", "check"))
    return ExportResult(target, output, [*files, README], check_shaped(target, output, plan, timing, code))


def write_model(target: str, proto: onnx.ModelProto, stem: Path) -> list[str]:
    """The variant's model as ``stem.onnx`` (ONNX Runtime) or ``stem.xml``/``.bin`` (OpenVINO, weights as measured)."""
    if target == "onnxruntime":
        onnx.save(proto, str(stem.with_suffix(".onnx")))
        return [stem.with_suffix(".onnx").name]
    import openvino as ov

    ov.save_model(ov.Core().read_model(proto.SerializeToString()), str(stem.with_suffix(".xml")),
                  compress_to_fp16=False)  # fmt: skip
    return [stem.with_suffix(".xml").name, stem.with_suffix(".bin").name]


def runtime_config(target: str, manifest: Manifest, precision: str = "fp32") -> dict:
    """The session options (ONNX Runtime) or compile configuration (OpenVINO) the plan was measured with."""
    if target == "openvino":
        return openvino_config(RuntimeOptions(manifest.threads, exclusive=True, precision=precision))
    return ort_config(manifest.threads)


def write_single(plan_dir: Path, manifest: Manifest, target: str, output: Path) -> list[str]:
    """One dynamic variant: one model and its configuration, loaded as any export of ``target``."""
    entry = manifest.shapes["variants"][0]
    files = write_model(target, onnx.load(str(plan_dir / entry["file"])), output / "model")
    config = f"{target}.json"
    (output / config).write_text(json.dumps(runtime_config(target, manifest, entry["variant"]["precision"]), indent=1))
    return [*files, config]


def write_table(plan_dir: Path, manifest: Manifest, target: str, output: Path) -> list[str]:
    """Several variants: one model each, ``shapes.json`` (which serves which shapes) and the runtime's configuration."""
    files, variants = [], []
    for index, entry in enumerate(manifest.shapes["variants"]):
        written = write_model(target, onnx.load(str(plan_dir / entry["file"])), output / f"model_{index:02d}")
        files += written
        variants.append({"file": written[0], "label": entry["label"], "regions": entry["regions"],
                         "config": runtime_config(target, manifest, entry["variant"]["precision"])})  # fmt: skip
    axes = {axis["name"]: axis["places"] for axis in manifest.shapes["profile"]["axes"]}
    (output / TABLE).write_text(json.dumps({"axes": axes, "variants": variants}, indent=1))
    return [*files, TABLE]


def table_snippet(target: str) -> str:
    """The lines that load every variant with the runtime alone and run the one that serves the feeds' shapes."""
    pick = textwrap.dedent('''\
        def pick(feeds):  # the first variant with a region holding every axis's size
            sizes = {axis: feeds[name].shape[dim] for axis, ((name, dim), *_) in table["axes"].items()}
            for variant in table["variants"]:
                if any(all(low <= sizes[axis] <= high for axis, (low, high) in region.items())
                       for region in variant["regions"]):
                    return variant["file"]
            raise ValueError(f"no variant serves the sizes {sizes}")
        ''')  # fmt: skip
    if target == "onnxruntime":
        load = textwrap.dedent('''\
            import json, onnxruntime as ort
            table = json.load(open("shapes.json"))
            def session(variant):
                config, options = variant["config"], ort.SessionOptions()
                options.intra_op_num_threads = config["intra_op_num_threads"]
                options.inter_op_num_threads = config["inter_op_num_threads"]
                options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                                           config["graph_optimization_level"])
                return ort.InferenceSession(variant["file"], options, providers=config["providers"])
            sessions = {variant["file"]: session(variant) for variant in table["variants"]}
            ''')  # fmt: skip
        return load + pick + "run = lambda feeds: sessions[pick(feeds)].run(None, feeds)  # feeds: {name: array}\n"
    load = textwrap.dedent('''\
        import json, openvino as ov
        table, core = json.load(open("shapes.json")), ov.Core()
        compiled = {v["file"]: core.compile_model(v["file"], "CPU", v["config"]) for v in table["variants"]}
        requests = {file: model.create_infer_request() for file, model in compiled.items()}
        ''')  # fmt: skip
    run = textwrap.dedent('''\
        def run(feeds):  # feeds: {input name: numpy array}
            file = pick(feeds)
            results = requests[file].infer(feeds)
            return [results[output] for output in compiled[file].outputs]
        ''')  # fmt: skip
    return load + pick + run


def check_shaped(target: str, output: Path, plan, timing: MeasureConfig, code: str) -> ExportCheck:
    """Every bucket's saved inputs run by the export (a fresh process; the plan itself for ``plan``), compared with
    the plan's outputs there; the first bucket timed beside the plan, in turns."""
    cases = plan.bucket_cases()
    feeds = [case[0] for case in cases]
    export_ms, plan_ms, every, first = [], [], None, None
    for _ in range(CHECK_ROUNDS):
        plan_ms.append(measure_latency(plan.timer(feeds[0]), timing).median_ms)
        if target == "plan":
            from rlcompile.plan import load_plan

            copy = load_plan(output)
            result = {"median_ms": measure_latency(copy.timer(feeds[0]), timing).median_ms, "import_s": 0.0,
                      "first_run_s": 0.0}  # fmt: skip
            outputs = [copy.run(case) for case in feeds]
        else:
            result, outputs = run_fresh(output, target, feeds, timing, code)
        export_ms.append(result["median_ms"])
        every, first = every or outputs, first or result
    agreements = [compare_outputs(expected, actual) for (_, expected), actual in zip(cases, every, strict=True)]
    worst = max(agreements, key=lambda agreement: agreement.max_rel)
    if not all(agreement.within() for agreement in agreements):
        raise RlcompileError(f"the export in {output} disagrees with the plan at some bucket (max rel err "
                             f"{worst.max_rel:.1e})")  # fmt: skip
    return ExportCheck(worst, float(np.median(export_ms)), float(np.median(plan_ms)), first["import_s"],
                       first["first_run_s"])  # fmt: skip
