"""Plans for shape profiles against the natives at every shape a user names, as a user makes and times them.

    python benchmarks/shapes.py [--models minilm,ocr-det,hf:vit] [--budget 240] [--rounds 6] [--block 0.3]
                                [--out results/shapes/zen4] [--work DIR]

Per model (a transformers-exported sentence encoder with trained weights and an attention mask, PaddleOCR's text
detector at two resolutions, a corpus vision transformer at several batch sizes):

1. ``rlcompile optimize MODEL --input-shape ... --quick`` (fp32), then the same with ``--precision auto`` and the
   model's real samples (``--data``, ``--metric``), each in its own process: exit status, wall time against the
   budget, the weighted ratio and the variants kept;
2. ``rlcompile export`` of each plan for the runtime it runs on (the export is checked at every bucket in a fresh
   process);
3. at every shape of the model's grid, in this process, in alternating rounds of ``--block`` seconds (the loop of
   ``outside.py``, each contender's median taken round by round against ONNX Runtime's): ONNX Runtime native on the
   dynamic model (two sessions), OpenVINO native on it (fp32, two compiled models), OpenVINO reshaped statically to
   that shape (fp32), and both plans through ``rlcompile.load(...).run``: ms, each plan over the faster native,
   the twins' spread (the larger of the two runtimes') and whether the plan is slower beyond it.

4. each export run by its runtime alone in a fresh process (its README's lines) at every shape of the grid, its
   outputs compared with ONNX Runtime's on the original model.

Writes ``OUT/shapes.json`` (merged by model, so ``--models`` runs can be split) and ``OUT/shapes.png`` (latency
against shape, one line per contender). Each step of a model already in the JSON with the same settings is kept, so
an interrupted run goes on where it stopped; the plans are kept in ``--work`` (default ``OUT/work``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from outside import MARGIN, alternate, twins

from rlcompile import atomic
from rlcompile.machine import cpu_model, host_cores

TEXT = ("input_ids", "attention_mask", "token_type_ids")


@dataclasses.dataclass(frozen=True)
class Case:
    """A model, the shape profile it is optimised for, the shapes it is timed at, and its data and metric."""

    name: str
    profile: tuple[str, ...]
    grid: tuple[tuple[int, ...], ...]
    metric: str = "rel-l2"

    def feeds(self, values: tuple[int, ...]) -> dict[str, np.ndarray]:
        """The inputs at one shape of the grid (timing does not depend on their values)."""
        rng = np.random.default_rng(0)
        if self.name == "minilm":
            batch, sequence = values
            ids = rng.integers(1000, 20000, (batch, sequence)).astype(np.int64)
            return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        if self.name == "ocr-det":
            return {"x": rng.standard_normal((1, 3, *values)).astype(np.float32)}
        return {"pixel_values": rng.standard_normal((values[0], 3, 224, 224)).astype(np.float32)}


CASES = {
    "minilm": Case("minilm", tuple(f"{name}=1-8,16-256" for name in TEXT),
                   tuple((b, s) for b in (1, 4, 8) for s in (16, 64, 128, 256)),
                   "rlcompile.models.sentences:embedding_error"),
    "ocr-det": Case("ocr-det", ("x=1,3,320|640,320|640",), ((320, 320), (640, 640), (320, 640)),
                    "rlcompile.models.tasks:detection_error"),
    "hf:vit": Case("hf:vit", ("pixel_values=1-8,3,224,224",), ((1,), (2,), (4,), (8,))),
}  # fmt: skip


def prepare(case: Case, work: Path) -> tuple[str, Path | None]:
    """The model argument and the ``--data`` folder (``None``: random inputs) of ``case``, made in ``work``."""
    if case.name == "minilm":
        if not (work / "minilm-lengths").is_dir():
            from rlcompile.models.sentences import minilm_lengths

            minilm_lengths(work, 256)
        return str(work / "minilm.onnx"), work / "minilm-lengths"
    if case.name == "ocr-det":
        if not (work / "ocr-det-sizes").is_dir():
            from rlcompile.models.tasks import ocr_det_sizes

            ocr_det_sizes(work, 64)
        return "ocr-det", work / "ocr-det-sizes"
    path = work / "vit.onnx"
    if not path.is_file():
        from rlcompile.models.corpus import corpus, export

        found = next(entry for entry in corpus() if entry.name == case.name)
        entry = dataclasses.replace(found, dynamic_axes={"pixel_values": {0: "batch"}})
        export(entry, path)
    return str(path), None


def cli(*arguments: str) -> tuple[int, float, str]:
    """``python -m rlcompile ARGUMENTS`` in a fresh process: exit status, wall seconds, the last lines it said."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "rlcompile", *arguments], capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, time.monotonic() - started, "\n".join(lines[-3:])


def optimize(case: Case, model: str, data: Path | None, output: Path, budget: float, precision: str) -> dict:
    """One ``optimize`` and ``export`` of ``case`` as a user runs them; what they said and measured."""
    flags = [part for text in case.profile for part in ("--input-shape", text)]
    if precision != "fp32":
        flags += ["--precision", precision, "--metric", case.metric if data else "rel-l2"]
        flags += ["--data", str(data)] if data else []
    status, wall, said = cli("optimize", model, *flags, "--budget", f"{budget:g}s", "-o", str(output))
    result = {"status": status, "wall_s": wall, "budget_s": budget, "said": said}
    if status != 0:
        return result
    manifest = json.loads((output / "manifest.json").read_text())
    shapes = manifest["shapes"]
    result |= {"weighted_ms": shapes["weighted_ms"], "ratio": shapes["ratio"], "per_bucket": shapes["per_bucket"],
               "variants": [entry["label"] for entry in shapes["variants"]], "accuracy": manifest.get("accuracy")}
    target = "openvino" if {e["variant"]["library"] for e in shapes["variants"]} == {"openvino"} else (
        "onnxruntime" if {e["variant"]["library"] for e in shapes["variants"]} == {"ort"} else "plan")
    exported = output.with_name(f"{output.name}_{target}")
    status, wall, said = cli("export", str(output), "--to", target, "-o", str(exported))
    result["export"] = {"target": target, "status": status, "wall_s": wall, "said": said}
    return result


def export_agrees(case: Case, model: str, export: dict, plan: Path) -> dict:
    """The export run by its README's lines alone, in a fresh process, at every shape of the grid: the largest relative
    error against ONNX Runtime on the original model, per shape."""
    import re

    from rlcompile.export import run_fresh
    from rlcompile.measure import QUICK
    from rlcompile.runtimes.ort import run_proto
    from rlcompile.shapes.api import load_dynamic
    from rlcompile.verify import compare_outputs

    folder = plan.with_name(f"{plan.name}_{export['target']}")
    code = re.search(r"```python\n(.*?)outputs = run\(feeds\)", (folder / "README.md").read_text(), re.S).group(1)
    cases = [case.feeds(values) for values in case.grid]
    _, outputs = run_fresh(folder, export["target"], cases, QUICK, code)
    proto = load_dynamic(model)[0]
    found = {}
    for values, feeds, actual in zip(case.grid, cases, outputs, strict=True):
        agreement = compare_outputs(run_proto(proto, feeds), actual)
        found["x".join(map(str, values))] = {"max_rel": agreement.max_rel, "within": agreement.within()}
    return found


def natives(model: bytes, feeds: dict[str, np.ndarray]) -> dict:
    """ONNX Runtime and OpenVINO (fp32) on the dynamic model, twice each, and OpenVINO reshaped to ``feeds``."""
    import onnxruntime as ort
    import openvino as ov

    calls = {}
    for label in ("ort native", "ort native (identical session)"):
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        calls[label] = lambda session=session: session.run(None, feeds)
    core, fp32 = ov.Core(), {"INFERENCE_PRECISION_HINT": "f32"}
    for label in ("openvino native", "openvino native (identical session)"):
        request = core.compile_model(core.read_model(model=model), "CPU", fp32).create_infer_request()
        calls[label] = lambda request=request: request.infer(dict(feeds), share_inputs=True)
    static = core.read_model(model=model)
    static.reshape({port.any_name: list(feeds[port.any_name].shape) for port in static.inputs})
    request = core.compile_model(static, "CPU", fp32).create_infer_request()
    calls["openvino static"] = lambda: request.infer(dict(feeds), share_inputs=True)
    return calls


def time_grid(case: Case, model: str, plans: dict[str, Path], rounds: int, block_s: float) -> list[dict]:
    """Every shape of the grid: the natives and the plans in alternating rounds."""
    import rlcompile
    from rlcompile.shapes.api import load_dynamic

    proto, _, _ = load_dynamic(model)
    loaded = {label: rlcompile.load(path) for label, path in plans.items()}
    rows = []
    for values in case.grid:
        feeds = case.feeds(values)
        calls = natives(proto.SerializeToString(), feeds)
        calls |= {label: (lambda plan=plan, feeds=feeds: plan.run(feeds)) for label, plan in loaded.items()}
        medians, done = alternate(calls, rounds, block_s)
        faster = min(medians["ort native"], medians["openvino native"])
        noise = twins(medians)
        row = {"shape": "x".join(map(str, values)), "ms": medians, "rounds": done, "twins": noise,
               "served_by": {label: plan.pick(feeds).variant.label for label, plan in loaded.items()}}  # fmt: skip
        for label in loaded:
            row[f"{label} / faster native"] = medians[label] / faster
            row[f"{label} slower"] = medians[label] / faster > 1 + noise + MARGIN
        rows.append(row)
        print(f"  {case.name} {row['shape']}: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items())
              + f"; twins {100 * noise:.1f}%", flush=True)  # fmt: skip
    return rows


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for axis, (name, result) in zip(axes[0], results.items(), strict=True):
        grid = result.get("grid", [])
        labels = [row["shape"] for row in grid]
        for contender in (grid[0]["ms"] if grid else {}):
            if "identical" not in contender:
                axis.plot(labels, [row["ms"][contender] for row in grid], marker="o", label=contender)
        axis.set_yscale("log")
        axis.set_title(name)
        axis.set_xlabel("shape")
        axis.set_ylabel("ms (median)")
        axis.tick_params(axis="x", rotation=45)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--budget", type=float, default=240.0, help="seconds per optimize (default: --quick's)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block", type=float, default=0.3)
    parser.add_argument("--out", type=Path, default=Path("results/shapes"))
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in names if name not in CASES]
    if unknown:
        print(f"shapes.py: unknown model(s) {', '.join(unknown)}; choose from {', '.join(CASES)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "shapes.json"
    results = json.loads(target.read_text())["models"] if target.is_file() else {}
    settings = {"budget_s": args.budget, "rounds": args.rounds, "block_s": args.block}
    for name in names:
        case = CASES[name]
        work = (args.work or args.out / "work") / name.replace(":", "-")
        work.mkdir(parents=True, exist_ok=True)
        model, data = prepare(case, work)
        entry = results.get(name, {}) if results.get(name, {}).get("settings") == settings else {}
        entry |= {"settings": settings, "profile": list(case.profile), "metric": case.metric if data else "rel-l2"}

        def save(entry=entry, name=name) -> None:
            results[name] = entry
            payload = {"machine": {"cpu": cpu_model(), "cores": host_cores()}, "models": results}
            atomic.write_json(target, payload, indent=1)

        plans = {}
        for precision in ("fp32", "auto"):
            output = work / f"plan-{precision}"
            if precision not in entry:
                entry[precision] = optimize(case, model, data, output, args.budget, precision)
                save()
            print(f"{name} {precision}: exit {entry[precision]['status']} in {entry[precision]['wall_s']:.0f} s "
                  f"(budget {args.budget:.0f} s), weighted {entry[precision].get('ratio', float('nan')):.3f}x the "
                  f"faster native; {entry[precision].get('variants')}", flush=True)  # fmt: skip
            if entry[precision]["status"] == 0:
                plans[f"plan {precision}"] = output
        if "grid" not in entry:
            entry["grid"] = time_grid(case, model, plans, args.rounds, args.block)
            save()
        for precision in ("fp32", "auto"):
            export = entry[precision].get("export", {})
            if export.get("status") == 0 and "agrees" not in export:
                export["agrees"] = export_agrees(case, model, export, work / f"plan-{precision}")
                print(f"{name} {precision} export: agrees with ONNX Runtime at "
                      f"{sum(v['within'] for v in export['agrees'].values())} of {len(case.grid)} shapes", flush=True)
                save()
        plot(results, args.out / "shapes.png")
    print(f"wrote {target} and {args.out / 'shapes.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
