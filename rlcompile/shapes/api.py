"""``optimize`` for a shape profile: the user's dynamic model kept dynamic, judged at every bucket.

The candidates are ONNX Runtime and OpenVINO running the model as it comes (the natives), and, where the
accuracy contract allows, OpenVINO in bf16 and the int8 models of :mod:`.lowered`; every one is measured at
every bucket (:mod:`.judge`), the fastest at each is tried reshaped to that bucket's shape, and :mod:`.choose`
keeps the variants that serve the profile. The graph, kernel and layer levels work at one static shape and do
not run on a profile. A finished bucket is kept in ``work/shapes.json``, so an interrupted run resumes there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from rlcompile import atomic, runtimes
from rlcompile.errors import ModelError, RlcompileError
from rlcompile.events import Event, Listener, Phase
from rlcompile.machine import environment
from rlcompile.manifest import AccuracyRecord, Manifest
from rlcompile.measure import MeasureConfig
from rlcompile.models.onnx_model import MAX_IR_VERSION, graph_inputs, read_onnx
from rlcompile.models.profile import Bucket, ShapeProfile, build_profile
from rlcompile.precision.contract import AccuracyContract, load_metric
from rlcompile.shapes.choose import Choice, choose, weighted
from rlcompile.shapes.judge import NATIVES, BucketResult, Judge, judge_profile
from rlcompile.shapes.lowered import int8_models, lowered_candidates
from rlcompile.shapes.samples import ProfileSamples, profile_samples
from rlcompile.shapes.saved import variant_file, write_shaped_plan
from rlcompile.shapes.variants import Variant, reshaped
from rlcompile.verify import compare_outputs

#: The share of the budget the contests (and the accuracy checks inside them) end by; quantizing before them, and
#: compiling and saving the variants after, take the rest: on all-MiniLM-L6-v2 with int8 (2-core Zen 4) they took
#: 40-45% of a quick run.
CONTEST_SHARE = 0.5
STATE = "shapes.json"


@dataclass
class ShapesRequest:
    """What a profile's optimisation takes (``optimize`` fills it from its own request)."""

    model: str
    output: Path
    profile: Sequence[str]
    budget_s: float
    contract: AccuracyContract
    timing: MeasureConfig
    threads: int
    seed: int = 0
    libraries: Sequence[str] = ("ort", "openvino")


def load_dynamic(spec: str) -> tuple[onnx.ModelProto, str, Path]:
    """The user's ONNX file, or a packaged model's, as it is (a profile keeps its dynamic dims); zoo names are
    static and refused."""
    from rlcompile.models.packaged import PACKAGED, packaged_path

    path = packaged_path(spec) if spec in PACKAGED else Path(spec)
    if path.suffix != ".onnx" and not path.is_file():
        raise ModelError(f"a shape profile (--input-shape with ranges) needs an ONNX file with dynamic dims; "
                         f"{spec} is not one")  # fmt: skip
    proto = read_onnx(path)
    proto.ir_version = min(proto.ir_version, MAX_IR_VERSION)
    return proto, spec if spec in PACKAGED else path.stem, path.resolve()


def optimize_profile(request: ShapesRequest, key: dict, progress: Listener,
                     loaded: tuple[onnx.ModelProto, str, Path] | None = None) -> Manifest:  # fmt: skip
    """Judge every candidate at every bucket, keep the variants that serve the profile, write the plan (``loaded``:
    :func:`load_dynamic`'s result when the caller has already read the model)."""
    started = time.monotonic()
    proto, name, path = loaded or load_dynamic(request.model)
    specs = graph_inputs(proto)
    profile = build_profile(request.profile, specs)
    buckets = profile.buckets()
    samples = profile_samples(profile, specs, request.contract.data, request.seed, buckets)
    if samples.real:
        buckets = profile.buckets(samples.calibration + samples.validation)
    libraries = [lib for lib in request.libraries if runtimes.create(lib).unavailable() is None]
    candidates = [*[v for v in NATIVES if v.library in libraries], *lowered_candidates(request.contract.lowered,
                                                                                       libraries)]  # fmt: skip
    progress(Phase("shapes", f"{name}: {len(buckets)} buckets ({', '.join(b.label for b in buckets)}) of "
                             f"{profile.ranges_text()}; {len(candidates)} candidates", "judge"))  # fmt: skip
    work = request.output / "work"
    work.mkdir(parents=True, exist_ok=True)
    calibration = [samples.inputs(sample) for sample in samples.calibration]
    model_of = int8_models(proto, candidates, calibration, work, progress)
    judge = Judge(model_of, samples, load_metric(request.contract.metric), request.contract.tolerance,
                  request.timing, request.threads, progress, reference=lambda feeds: [])  # fmt: skip
    native = judge.runner(Variant("ort"))
    if native is None:
        raise RlcompileError(f"ONNX Runtime cannot run {name}")
    judge.reference = native[0].run
    candidates = agreeing(judge, candidates, buckets[0], progress)
    seconds = max(request.budget_s * CONTEST_SHARE - (time.monotonic() - started), 1.0 * len(buckets))
    results = judge_profile(judge, buckets, candidates, seconds)
    choice = choose(results, candidates)
    progress(Event("shapes", f"kept {'; '.join(s.variant.label for s in choice.served)}"))
    manifest = save(request, key, name, path, proto, profile, samples, judge, results, choice)
    atomic.write_json(work / STATE, {"key": key, "buckets": [r.to_json() for r in results]}, indent=1)
    return manifest


def agreeing(judge: Judge, candidates: Sequence[Variant], bucket: Bucket, progress: Listener) -> list[Variant]:
    """The candidates whose fp32 outputs agree with ONNX Runtime's (lowered ones are held to the contract)."""
    feeds = judge.samples.feeds(bucket)
    expected = judge.reference(feeds)
    kept = []
    for variant in candidates:
        found = None if variant.lowered else judge.runner(variant)
        if found is not None and not compare_outputs(expected, found[0].run(feeds)).within():
            progress(Event("shapes", f"{variant.label} left out: its outputs differ from ONNX Runtime's"))
            continue
        kept.append(variant)
    return kept


def save(request: ShapesRequest, key: dict, name: str, path: Path, proto: onnx.ModelProto, profile: ShapeProfile,
         samples: ProfileSamples, judge: Judge, results: Sequence[BucketResult],
         choice: Choice) -> Manifest:  # fmt: skip
    """Write the plan directory: the variants' models, every bucket's inputs and outputs, the manifest."""
    models, entries = [], []
    by_label = {r.bucket.label: r.bucket for r in results}
    for index, served in enumerate(choice.served):
        model = judge.model_of(served.variant.dynamic())
        if served.variant.static is not None:
            model = reshaped(model, by_label[served.variant.static].shapes)
        models.append(model)
        entries.append({**served.to_json(), "file": variant_file(index, served.variant)})
    lowered = any(s.variant.lowered for s in choice.served)
    cases = []
    for result in results:
        feeds = judge.samples.feeds(result.bucket)
        variant = choice.by_bucket[result.bucket.label]
        runner = judge.runner(variant, result.bucket)
        cases.append((feeds, runner[0].run(feeds) if lowered and runner else judge.reference(feeds)))
    validation = validation_arrays(samples, judge) if lowered else None
    manifest = Manifest(name, str(path), key["fingerprint"], input_entries(profile, proto),
                        [o.name for o in proto.graph.output], request.threads, environment(request.threads), [],
                        {}, accuracy=accuracy_record(request.contract, samples, results, choice) if lowered else None,
                        shapes=shapes_record(profile, results, choice, entries, key))  # fmt: skip
    return write_shaped_plan(request.output, manifest, models, cases, validation)


def input_entries(profile: ShapeProfile, proto: onnx.ModelProto) -> list[dict]:
    """The inputs as the manifest lists them: a fixed dim as its size, a dynamic one as its axis's name."""
    entries = []
    for spec in graph_inputs(proto):
        shape = [dim.low if dim.fixed else profile.axis_of(spec.name, index)
                 for index, dim in enumerate(profile.dims[spec.name])]  # fmt: skip
        entries.append({"name": spec.name, "shape": shape, "dtype": str(spec.dtype)})
    return entries


def validation_arrays(samples: ProfileSamples, judge: Judge) -> dict[str, np.ndarray]:
    """The held-out samples (their own shapes) and ONNX Runtime's fp32 outputs, as ``validation.npz`` keeps them."""
    arrays = {}
    for index, sample in enumerate(samples.validation):
        arrays |= {f"{index}:sample:{name}": value for name, value in sample.items()}
        arrays |= {f"{index}:fp32:{k}": value for k, value in enumerate(judge.reference(samples.inputs(sample)))}
    return arrays


def accuracy_record(contract: AccuracyContract, samples: ProfileSamples, results: Sequence[BucketResult],
                    choice: Choice) -> AccuracyRecord:  # fmt: skip
    """The contract and the worst bucket's error of the variants kept (each bucket's own serving variant)."""
    worst = max(results, key=lambda r: r.errors.get(choice.by_bucket[r.bucket.label].label, r.fp32_error)
                - r.fp32_error)  # fmt: skip
    error = worst.errors.get(choice.by_bucket[worst.bucket.label].label, worst.fp32_error)
    labels = "; ".join(s.variant.label for s in choice.served)
    return AccuracyRecord(contract.precision, contract.metric, contract.tolerance, samples.source,
                          len(samples.calibration), len(samples.validation), worst.fp32_error, error,
                          error - worst.fp32_error, labels, {}, [], sum(len(r.errors) for r in results),
                          {"per_bucket": {r.bucket.label: r.errors for r in results}}, samples.real)  # fmt: skip


def shapes_record(profile: ShapeProfile, results: Sequence[BucketResult], choice: Choice, entries: list[dict],
                  key: dict) -> dict:  # fmt: skip
    """The manifest's ``shapes``: the profile, the variants, every bucket's measurements and the weighted figures."""
    plan = sum(r.bucket.weight * choice.ms(r) for r in results)
    natives = {v.library: weighted(results, v) for v in NATIVES if all(v.label in r.ms for r in results)}
    faster = sum(r.bucket.weight * r.faster_native_ms for r in results)
    per_bucket = [{"bucket": r.bucket.label, "weight": r.bucket.weight,
                   "variant": choice.by_bucket[r.bucket.label].label, "ms": choice.ms(r), "natives": r.natives,
                   "ratio": choice.ms(r) / r.faster_native_ms, "noise": r.noise} for r in results]  # fmt: skip
    return {"key": key, "profile": profile.to_json(), "variants": entries, "per_bucket": per_bucket,
            "weighted_ms": {"plan": plan, "faster_native": faster, **natives}, "ratio": plan / faster,
            "buckets": [r.to_json() for r in results]}  # fmt: skip


def finished(output: Path, key: Mapping) -> Manifest | None:
    """The plan already in ``output`` when it came from this same profile optimisation."""
    try:
        manifest = Manifest.load(output)
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError):
        return None
    return manifest if manifest.shapes is not None and manifest.shapes.get("key") == dict(key) else None
