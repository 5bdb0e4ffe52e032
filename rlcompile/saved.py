"""Saved results, loaded one way: plan directories (``select``, ``optimize``) and kernel artefacts (``build``).

Both carry the model they were made from (name, source, inputs), the machine they were made on, and
reference inputs with ONNX Runtime's outputs for them, so either can be checked and timed anywhere
without the original file. :func:`load_saved` returns a :class:`~rlcompile.plan.LoadedPlan` or a
:class:`~rlcompile.kernel.artifact.Artifact`; both have ``run(feeds)``, ``timer(feeds)``, ``record``
(the manifest or metadata), ``reference_inputs``, ``reference_outputs`` and ``describe()``.
:func:`time_saved` times several of them side by side, in turns, next to ONNX Runtime native.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from rlcompile.errors import RlcompileError
from rlcompile.events import Listener, Phase, ignore
from rlcompile.machine import host_cores
from rlcompile.measure import (
    REPORT_ROUNDS,
    SETTLE,
    Contender,
    LatencyStats,
    MachineLoad,
    MeasureConfig,
    run_contest,
)
from rlcompile.measure.throughput import Server
from rlcompile.precision.contract import VALIDATION, Recheck, recheck
from rlcompile.runtimes import RuntimeOptions
from rlcompile.verify import Agreement, compare_outputs

NATIVE = "ort native"
OPENVINO_NATIVE = "openvino native"
#: A saved result is flagged slower than the faster native when its median is beyond that native's by more than the
#: twins' spread and at least this: two medians of one program in one process differ by up to ~1% however quiet
#: the twins were (the graph level's REWRITE_RULE asks a rewrite for the same 1%).
SLOWER_FLOOR = 0.01


def is_artifact(path: str | Path) -> bool:
    """Whether ``path`` is a kernel artefact (``model.tar`` from ``build``); told without importing TVM."""
    return str(path).endswith(".tar") and Path(path).is_file()


def is_saved(path: str | Path) -> bool:
    """Whether ``path`` is a plan directory or a kernel artefact (``.tar``)."""
    from rlcompile.plan import is_plan_dir

    return is_plan_dir(path) or is_artifact(path)


def load_saved(path: str | Path):
    """A plan directory or a kernel artefact, loaded and ready to run; anything else is refused in one line.

    Only what the result runs is imported: a plan on ONNX Runtime or OpenVINO loads without torch or TVM.
    """
    from rlcompile.plan import load_plan

    if is_artifact(path):
        from rlcompile.kernel.artifact import load_artifact

        return load_artifact(Path(path))
    if Path(path).is_dir():
        return load_plan(path)
    raise RlcompileError(f"{path} is neither a plan directory (select, optimize) nor a kernel artefact (build)")


def original_model(record: dict):
    """The model a saved result was made from, when it can still be loaded (a zoo name, or the file)."""
    from rlcompile.models import load_model

    source = record.get("source", "")
    if source.startswith("zoo:"):
        spec, shapes = record["model"], None
    elif Path(source).is_file():
        spec, shapes = source, {item["name"]: tuple(item["shape"]) for item in record["inputs"]}
    else:
        return None
    try:
        return load_model(spec, shapes)
    except RlcompileError:
        return None


def input_signature(record: dict) -> list[tuple[str, tuple[int, ...], str]]:
    return [(item["name"], tuple(item["shape"]), item["dtype"]) for item in record["inputs"]]


@dataclass
class SavedTiming:
    """One saved result timed beside the others: latency, ratio to the first, agreement with ORT."""

    path: str
    description: str
    latency: LatencyStats
    ratio_to_first: float
    ratio_to_native: float | None
    agreement: Agreement
    #: a plan below fp32: its error measured again on its saved held-out samples
    accuracy: Recheck | None = None
    #: its median over the faster of ORT and OpenVINO native on the original model (``None`` without the model)
    ratio_to_faster_native: float | None = None
    #: slower than the faster native by more than the twins' spread (and :data:`SLOWER_FLOOR`)
    slower: bool = False

    @property
    def ok(self) -> bool:
        return self.agreement.within() and (self.accuracy is None or self.accuracy.within)

    def to_dict(self) -> dict:
        return {"path": self.path, "description": self.description, "latency": self.latency.to_dict(),
                "ratio_to_first": self.ratio_to_first, "ratio_to_native": self.ratio_to_native,
                "agreement": self.agreement.to_dict(),
                "accuracy": self.accuracy.to_dict() if self.accuracy else None,
                "ratio_to_faster_native": self.ratio_to_faster_native, "slower": self.slower}  # fmt: skip


@dataclass
class Timings:
    """What :func:`time_saved` measured: each saved result, ORT native on the original model (``None`` when the
    model is not at hand), how far two identical ORT native sessions were apart in the same rounds (the noise
    every ratio here carries; ``None`` without the model) and what else used the machine meanwhile."""

    saved: list[SavedTiming]
    native: LatencyStats | None
    noise: float | None
    #: what else used the machine while they were timed
    load: MachineLoad | None = None
    #: OpenVINO native on the original model, timed in the same rounds (``None`` when it cannot run it whole)
    openvino: LatencyStats | None = None

    @property
    def faster_native(self) -> tuple[str, LatencyStats] | None:
        """The faster of ONNX Runtime and OpenVINO native, by name ("ONNX Runtime", "OpenVINO"), and its latency
        (``None`` without the original model)."""
        return faster_native(self.native, self.openvino)


def faster_native(native: LatencyStats | None,
                  openvino: LatencyStats | None) -> tuple[str, LatencyStats] | None:  # fmt: skip
    """The faster of ORT native (``native``) and OpenVINO native, named; ``None`` without ORT native."""
    if native is None:
        return None
    if openvino is not None and openvino.median_ms < native.median_ms:
        return "OpenVINO", openvino
    return "ONNX Runtime", native


def time_saved(paths: Sequence[str | Path], config: MeasureConfig,
               progress: Listener = ignore) -> Timings:  # fmt: skip
    """Load every saved result, check each runs as it was saved (its reference outputs; a plan below fp32
    also its error on its saved held-out samples), time them in turns on the first one's reference inputs.

    All must be made from a model with the same inputs (names, shapes, types). ONNX Runtime native on
    the original model joins the rounds when the model can still be loaded. Returns the timings in
    the order given, ORT native's latency and the spread of a twin ORT native session beside it (both ``None``
    when the model is not at hand).
    """
    progress(Phase("run", f"loading {', '.join(map(str, paths))}", "load"))
    saved = [load_saved(path) for path in paths]
    first = saved[0]
    for path, item in zip(paths[1:], saved[1:], strict=True):
        if input_signature(item.record) != input_signature(first.record):
            raise RlcompileError(f"{path} and {paths[0]} take different inputs ({item.record['model']} vs "
                                 f"{first.record['model']}); compare saved results of one model")  # fmt: skip
    feeds = first.reference_inputs
    agreements = [compare_outputs(item.reference_outputs, item.run(item.reference_inputs)) for item in saved]
    rechecks = [accuracy_recheck(item) for item in saved]
    timers, names = [item.timed(feeds) for item in saved], [str(path) for path in paths]
    original = original_model(first.record)
    contenders = [Contender.from_timer(f"{index}:{name}", timer)
                  for index, (name, timer) in enumerate(zip(names, timers, strict=True))]  # fmt: skip
    if original is not None:
        from rlcompile import runtimes

        threads = first.record.get("threads") or host_cores()
        native_timers = [original.compile(runtimes.create("ort"), RuntimeOptions(threads, exclusive=True)).timed(feeds)
                         for _ in range(2)]  # fmt: skip
        contenders += [Contender.from_timer(NATIVE, native_timers[0]),
                       Contender.from_timer(f"{NATIVE} (identical session)", native_timers[1], twin_of=NATIVE)]
        contenders += openvino_native(original, threads, feeds)
    natives = " and ONNX Runtime (two sessions) and OpenVINO native" if original is not None else ""
    progress(Phase("run", f"timing {', '.join(names)}{natives} in turns", "measure"))
    standings = run_contest(contenders, config, REPORT_ROUNDS, SETTLE if original is not None else None)
    stats = [standings[contender.label] for contender in contenders[: len(saved)]]
    native = standings[NATIVE] if original is not None else None
    openvino = standings[OPENVINO_NATIVE] if OPENVINO_NATIVE in standings.stats else None
    fastest = faster_native(native, openvino)
    faster = fastest[1].median_ms if fastest else None
    noise = standings.noise if original is not None else None
    timings = [SavedTiming(str(path), item.describe(), latency, latency.median_ms / stats[0].median_ms,
                           latency.median_ms / native.median_ms if native else None, agreement, recheck,
                           latency.median_ms / faster if faster else None,
                           bool(faster and latency.median_ms > faster * (1 + max(noise or 0.0, SLOWER_FLOOR))))
               for path, item, latency, agreement, recheck in zip(paths, saved, stats, agreements, rechecks,
                                                                   strict=True)]  # fmt: skip
    return Timings(timings, native, noise, standings.load, openvino)


def openvino_native(original, threads: int, feeds) -> list[Contender]:
    """OpenVINO on the original model whole, as a contender (none when OpenVINO is missing or refuses the model)."""
    from rlcompile import runtimes

    runtime = runtimes.create("openvino")
    if runtime.unavailable() is not None:
        return []
    try:
        timer = original.compile(runtime, RuntimeOptions(threads)).timed(feeds)
    except RlcompileError:
        return []
    return [Contender.from_timer(OPENVINO_NATIVE, timer)]


def accuracy_recheck(item) -> Recheck | None:
    """The error of a plan below fp32 on its saved held-out samples (``None`` for exact results)."""
    accuracy = getattr(item.record, "accuracy", None)
    if accuracy is None:
        return None
    return recheck(Path(item.path) / VALIDATION, item.run, accuracy.metric, accuracy.fp32_error, accuracy.tolerance)


#: What ``run DIR --objective throughput`` calls the plan's own serving.
PLAN_SERVER = "plan (rlcompile.load(...).serve())"


def native_servers(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], concurrency: int,
                   threads: int) -> list[Server]:  # fmt: skip
    """The user's model served by ONNX Runtime and OpenVINO in each of their serving configurations that differ
    (:func:`~rlcompile.runtimes.serving.distinct_servers`), labelled ``RUNTIME native: CONFIGURATION``."""
    from rlcompile.runtimes.serving import distinct_servers, serving_candidates

    found = []
    for runtime in ("ort", "openvino"):
        candidates = serving_candidates(runtime, concurrency, threads)
        for serving, callers in distinct_servers(candidates, model, feeds, concurrency):
            found.append(Server(f"{runtime} native: {serving.label.split(' ', 1)[1]}", tuple(callers)))
    return found


def serve_saved(path: str | Path, concurrency: int | None = None, block_s: float = 1.0, rounds: int = 5,
                progress: Listener = ignore):  # fmt: skip
    """A plan directory serving ``concurrency`` requests in flight as it was measured (``serve()``), beside the user's
    model served by ONNX Runtime (one session of every thread, twice: the noise; several sessions of fewer threads)
    and OpenVINO (latency and throughput hints): a :class:`~rlcompile.measure.throughput.ThroughputStandings`."""
    from rlcompile.measure.throughput import throughput_contest
    from rlcompile.plan import load_plan
    from rlcompile.runtimes.serving import servers, serving_candidates

    plan = load_plan(path)
    record = plan.record
    concurrency = concurrency or (record.serving or {}).get("concurrency") or record.threads
    pool = plan.serve(concurrency)
    feeds = plan.reference_inputs
    contenders = [Server(PLAN_SERVER, tuple(lambda: pool.run(feeds) for _ in range(concurrency)))]
    original = original_model(record)
    if original is not None:
        given = original.native_proto
        contenders += native_servers(given, feeds, concurrency, record.threads)
        default = serving_candidates("ort", concurrency, record.threads)[0]
        one = servers(default, given, feeds, 1)
        contenders.append(Server(f"{contenders[1].label}, one caller (what latency measures)", tuple(one)))
        twin = tuple(servers(default, given, feeds, concurrency))
        contenders.append(Server(f"{contenders[1].label} (identical)", twin, twin_of=contenders[1].label))
    progress(Phase("run", f"serving {concurrency} requests in flight: the plan beside the natives' configurations, "
                          f"{rounds} rounds of {block_s:g} s", "measure"))  # fmt: skip
    return throughput_contest(contenders, block_s, rounds)
