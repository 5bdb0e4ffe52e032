"""Run several runtimes side by side on the same model and inputs, in one process.

The first runtime is the reference: the others' outputs are compared against it and their latencies
are given as ratios to it. Every runtime compiles the model before any is timed, so compilation does not
heat or load the machine during another backend's measurement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rlcompile.events import Listener, Phase, ignore
from rlcompile.machine import environment
from rlcompile.measure import DEFAULT, LatencyStats, MeasureConfig, measure_latency
from rlcompile.models import LoadedModel
from rlcompile.runtimes import NATIVE, Runtime
from rlcompile.verify import Agreement, compare_outputs


@dataclass
class BackendResult:
    """One backend's latency, preparation time and agreement with the reference."""

    label: str
    threads: int
    prepare_seconds: float
    latency: LatencyStats
    agreement: Agreement | None = None

    def to_dict(self) -> dict:
        return {
            "backend": self.label,
            "threads": self.threads,
            "prepare_seconds": self.prepare_seconds,
            "latency": self.latency.to_dict(),
            "agreement": self.agreement.to_dict() if self.agreement else None,
        }


@dataclass
class Comparison:
    """The outcome of :func:`compare_backends`; the first result is the reference."""

    model: str
    inputs: dict[str, list[int]]
    results: list[BackendResult]
    environment: dict = field(default_factory=environment)

    def ratio(self, result: BackendResult) -> float:
        """Latency relative to the reference (above 1: slower than the reference)."""
        return result.latency.median_ms / self.results[0].latency.median_ms

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "inputs": self.inputs,
            "results": [r.to_dict() | {"ratio_to_reference": self.ratio(r)} for r in self.results],
            "environment": self.environment,
        }


def compare_backends(
    model: LoadedModel,
    backends: Sequence[Runtime],
    config: MeasureConfig = DEFAULT,
    seed: int = 0,
    progress: Listener = ignore,
) -> Comparison:
    """Compile the model in every runtime, run each once on the same random inputs, then time each in turn."""
    if not backends:
        raise ValueError("compare_backends needs at least one runtime")
    inputs = model.random_inputs(seed)
    runners = []
    for runtime in backends:
        progress(Phase("compare", f"preparing {runtime.describe()}", "prepare"))
        runners.append(model.compile(runtime, NATIVE))
    outputs = [runner.run(inputs) for runner in runners]
    results = []
    for runtime, runner, output in zip(backends, runners, outputs, strict=True):
        progress(Phase("compare", f"measuring {runtime.describe()}", "measure"))
        latency = measure_latency(runner.timer(inputs), config)
        agreement = compare_outputs(outputs[0], output) if results else None
        results.append(BackendResult(runtime.describe(), runtime.threads(), runner.prepare_seconds, latency, agreement))
    shapes = {spec.name: [int(d) for d in spec.shape] for spec in model.inputs}
    return Comparison(model.name, shapes, results, environment(max(r.threads for r in results)))
