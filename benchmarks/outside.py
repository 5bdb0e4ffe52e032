"""A saved plan timed from outside, as a user would time it: beside ONNX Runtime and OpenVINO on the original model.

    python benchmarks/outside.py MODEL PLAN_DIR [--input-shape NAME=D1,D2 ...] [--rounds 8] [--block 0.7]
                                 [--json out.json]

Runs in a fresh process (``real_world.py`` starts one per output) and times, in alternating blocks of ``--block``
seconds over ``--rounds`` rounds (each round in a new random order; as many again while the noise of the ratio below
is more than 3%, up to three times as many): ``rlcompile.load(PLAN_DIR).run(feeds)``; ONNX Runtime on the original
model with its default session options, in three sessions; OpenVINO on the original model, its inputs reshaped to the
feeds' shapes (as OpenVINO's documentation recommends for shapes that do not change), with its defaults but fp32
precision, compiled three times, and with its defaults alone (bf16 where the CPU has it: reported, not the fp32
reference); and, for a plan of one segment, that segment's own session called directly (``session.run`` /
``infer``): what ``load(...).run`` adds over the runtime is the difference. A native's time is the median of its
instances': the plan is one more compile of a runtime, and compiles of one file land apart (:data:`NATIVE_INSTANCES`
says how far).
Each contender's median is ORT native's times the median, over the rounds, of its block over ORT native's block in
the same round (a slow spell of the VM lasting a round slows both alike). The timing loop and that estimate are this
file's own (not ``rlcompile.measure``): the check does not share the code it checks.
Prints and writes JSON: each contender's median ms, the plan over the faster native, the noise of that ratio
(``twins``: the largest spread of the identical runs that bear on it, the faster native's instances, slowest over
fastest, and, for a plan of one segment, ``load(...).run`` beside its segment's own call; every runtime's spread in
``twin_spreads``) and whether the plan is slower than that native beyond it (``slower``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROUNDS = 8
BLOCK_S = 0.7
#: The plan counts as slower than the faster native when beyond the twins' spread by more than this (half a per cent:
#: the resolution of one median of 0.7 s blocks).
MARGIN = 0.005
PLAN = "plan (rlcompile.load(...).run)"
OWN_SESSION = "its segment's own session"
#: Each runtime's second session on the original model, the twin of its first; and, for a plan of one segment, that
#: segment's own call beside ``load(...).run`` (the same compiled session, called by name without the plan around it:
#: measured apart at 0.1-0.8% on a 25 us model, so what separates the two here is this measurement's noise, timed in the
#: plan's own blocks: on hf:segformer they came 4.3% apart while OpenVINO's twins were 1.2%)
TWINS = {"ort native (identical session)": "ort native", "openvino native (identical session)": "openvino native",
         OWN_SESSION: PLAN}
#: Each native's runs on the original model: three sessions of ONNX Runtime, three compiles of OpenVINO. The native's
#: time is their median and their spread is its noise, since the plan is one more such instance: three compiles of one
#: file in one process, timed alternating, landed 2.4-7% apart (resnet18, bert_tiny, a Loop model; OpenVINO, 2-core
#: Zen 4), while any two of them could come within 0.7%, so a pair alone understates how far a compile can land.
NATIVE_INSTANCES = {"ort native": ("ort native", "ort native (identical session)", "ort native (third session)"),
                    "openvino native": ("openvino native", "openvino native (identical session)",
                                        "openvino native (third compile)")}  # fmt: skip
#: Another batch of rounds while the twins differ by more than this, up to this many batches: a slow spell of
#: the shared VM left them 42-62% apart over 8 rounds of 0.7 s blocks
NOISE_TARGET = 0.03
MAX_BATCHES = 3
#: OpenVINO with no configuration at all: on a CPU with AVX512-BF16 or AMX it computes in bf16 (less exact than the
#: fp32 every other contender computes), so it is reported beside the others, not counted as the faster native
OPENVINO_DEFAULTS = "openvino native (its defaults)"


def original_bytes(spec: str) -> bytes:
    """The user's model file as it is (a path), or the built file of a zoo or packaged name."""
    path = Path(spec)
    if path.is_file():
        return path.read_bytes()
    from rlcompile.models import load_model

    return load_model(spec).native_proto.SerializeToString()


def natives(model: bytes, feeds: dict[str, np.ndarray]) -> dict:
    """ONNX Runtime (two sessions) and OpenVINO on ``model`` at their defaults, as calls on ``feeds``; OpenVINO's
    left out where it cannot convert the model (the faster native is then ONNX Runtime)."""
    import onnxruntime as ort
    import openvino as ov

    calls = {}
    for label in NATIVE_INSTANCES["ort native"]:
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        calls[label] = lambda session=session: session.run(None, feeds)
    core = ov.Core()
    fp32 = {"INFERENCE_PRECISION_HINT": "f32"}
    try:
        network = core.read_model(model=model)
        network.reshape({port.any_name: list(feeds[port.any_name].shape) for port in network.inputs})
        configs = [(label, fp32) for label in NATIVE_INSTANCES["openvino native"]] + [(OPENVINO_DEFAULTS, {})]
        for label, config in configs:
            request = core.compile_model(network, "CPU", config).create_infer_request()
            calls[label] = lambda request=request: request.infer(dict(feeds), share_inputs=True)
    except Exception as error:  # OpenVINO's converter refuses the model: ONNX Runtime is the only native
        print(f"OpenVINO does not run the model: {str(error).strip().splitlines()[0]}", file=sys.stderr)
        return {label: call for label, call in calls.items() if label.startswith("ort")}
    return calls


def plan_calls(plan_dir: Path, feeds: dict[str, np.ndarray]) -> dict:
    """``rlcompile.load(plan_dir).run(feeds)``, and for a one-segment plan its runtime's own call."""
    import rlcompile

    plan = rlcompile.load(plan_dir)
    calls = {PLAN: lambda: plan.run(feeds)}
    engine = getattr(plan, "engine", None)
    if engine is not None and len(engine.compiled) == 1:
        runner = engine.compiled[0].runner
        if hasattr(runner, "session"):
            session = runner.session
            calls[OWN_SESSION] = lambda: session.run(None, feeds)
        elif hasattr(runner, "request"):
            request = runner.request
            calls[OWN_SESSION] = lambda: request.infer(dict(feeds), share_inputs=True)
    return calls


def alternate(calls: dict, rounds: int, block_s: float, seed: int = 0) -> tuple[dict[str, float], int]:
    """Each call's median ms over ``rounds`` rounds of ``block_s`` blocks, in a new random order every round (one
    warm-up call before each block), judged round by round (:func:`paired`), then ``rounds`` more at a time while the
    twins differ by more than :data:`NOISE_TARGET` (at most :data:`MAX_BATCHES` batches); the medians and the rounds
    taken."""
    rng = np.random.default_rng(seed)
    blocks: dict[str, list[float]] = {label: [] for label in calls}
    done = 0
    while True:
        one_batch(calls, blocks, rounds, block_s, rng)
        done += rounds
        medians = paired(blocks, "ort native")
        if ratio_noise(medians) <= NOISE_TARGET or done >= MAX_BATCHES * rounds:
            return medians, done


def paired(blocks: dict[str, list[float]], reference: str) -> dict[str, float]:
    """Each call's median: ``reference``'s median block times the median of its block over ``reference``'s in the
    same round."""
    base = np.asarray(blocks[reference])
    return {label: float(np.median(base) * np.median(np.asarray(values) / base)) for label, values in blocks.items()}


def slower(result: dict) -> bool:
    """Whether ``result`` (:func:`outside`'s) puts the plan above the faster native beyond the noise of that ratio
    (:func:`ratio_noise`) and :data:`MARGIN`."""
    return result["plan_over_faster_native"] > 1 + result["twins"] + MARGIN


def twins(medians: dict[str, float]) -> float:
    """How far the identical runs (:func:`twin_spreads`) are apart: the largest."""
    return max(twin_spreads(medians).values())


def ratio_noise(medians: dict[str, float]) -> float:
    """The noise the plan's ratio to the faster native carries: the largest spread (:func:`twin_spreads`) of the
    faster native's instances and of the plan beside its segment's own call. Not the slower native's: ocr-cls-q's
    OpenVINO compiles, at 2.5x ONNX Runtime's time, spread 14% while ONNX Runtime's sessions spread 3%."""
    faster = faster_native(medians)
    spreads = twin_spreads(medians)
    return max((spread for label, spread in spreads.items() if TWINS.get(label, label) in (faster, PLAN)), default=0.0)


def faster_native(medians: dict[str, float]) -> str:
    """The native (:data:`NATIVE_INSTANCES`) with the least time (:func:`native_ms`) among those timed."""
    timed = [native for native, labels in NATIVE_INSTANCES.items() if labels[0] in medians]
    return min(timed, key=lambda native: native_ms(medians, native))


def twin_spreads(medians: dict[str, float]) -> dict[str, float]:
    """How far the identical runs that were timed are apart: each native's instances (:data:`NATIVE_INSTANCES`),
    slowest over fastest less 1, by the native's label (by its second run's where only two ran), and the plan beside
    its segment's own call (:data:`TWINS`)."""
    spreads = {}
    for native, labels in NATIVE_INSTANCES.items():
        timed = [medians[label] for label in labels if label in medians]
        if len(timed) > 2:
            spreads[native] = max(timed) / min(timed) - 1
    pairs = {twin: original for twin, original in TWINS.items() if original not in spreads}
    return spreads | {twin: abs(medians[twin] / medians[original] - 1) for twin, original in pairs.items()
                      if twin in medians and original in medians}  # fmt: skip


def native_ms(medians: dict[str, float], native: str) -> float:
    """``native``'s time: the median of its instances that were timed (:data:`NATIVE_INSTANCES`)."""
    return float(np.median([medians[label] for label in NATIVE_INSTANCES[native] if label in medians]))


def one_batch(calls: dict, blocks: dict[str, list[float]], rounds: int, block_s: float,
              rng: np.random.Generator) -> None:  # fmt: skip
    """``rounds`` rounds of every call, each a block of ``block_s`` after one warm-up call, in shuffled order; each
    block's median is appended to the call's list in ``blocks``."""
    labels = list(calls)
    for _ in range(rounds):
        for index in rng.permutation(len(labels)):
            label, call = labels[index], calls[labels[index]]
            call()
            block, end = [], time.perf_counter() + block_s
            while True:
                started = time.perf_counter()
                call()
                finished = time.perf_counter()
                block.append(1e3 * (finished - started))
                if finished >= end:
                    break
            blocks[label].append(float(np.median(block)))


def outside(spec: str, plan_dir: Path, shapes: list[str], rounds: int = ROUNDS, block_s: float = BLOCK_S) -> dict:
    """The measurement this file describes, as a dict."""
    from rlcompile.models import load_model, parse_input_shapes

    feeds = load_model(spec, parse_input_shapes(shapes)).random_inputs(0)
    calls = natives(original_bytes(spec), feeds) | plan_calls(plan_dir, feeds)
    medians, done = alternate(calls, rounds, block_s)
    faster = native_ms(medians, faster_native(medians))
    result = {"ms": medians, "rounds": done, "block_s": block_s, "plan_over_faster_native": medians[PLAN] / faster,
              "twins": ratio_noise(medians), "twin_spreads": twin_spreads(medians)}  # fmt: skip
    result["slower"] = slower(result)
    if OPENVINO_DEFAULTS in medians:
        result["plan_over_openvino_defaults"] = medians[PLAN] / medians[OPENVINO_DEFAULTS]
    if OWN_SESSION in medians:
        result["load_run_over_own_session"] = medians[PLAN] / medians[OWN_SESSION]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("plan", type=Path)
    parser.add_argument("--input-shape", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--block", type=float, default=BLOCK_S)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = outside(args.model, args.plan, args.input_shape, args.rounds, args.block)
    text = json.dumps(result, indent=1)
    if args.json is not None:
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
