"""A saved shape-profile plan timed again at every bucket, beside ONNX Runtime and OpenVINO run natively on the
user's model (each with an identical twin, whose spread is the bucket's noise), as ``rlcompile run DIR`` does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlcompile.errors import RlcompileError
from rlcompile.events import Listener, Step, ignore
from rlcompile.measure import REPORT_ROUNDS, Contender, MeasureConfig, run_contest
from rlcompile.precision.contract import VALIDATION, Recheck, recheck
from rlcompile.shapes.api import load_dynamic
from rlcompile.shapes.judge import NATIVES, TWIN
from rlcompile.shapes.saved import ShapedPlan
from rlcompile.shapes.variants import compile_variant
from rlcompile.verify import Agreement, compare_outputs

PLAN = "plan"


@dataclass
class BucketTiming:
    """One bucket: the plan's median and each native's, the twins' spread, and whether the plan ran as saved."""

    label: str
    weight: float
    variant: str
    plan_ms: float
    natives: dict[str, float]
    noise: float
    agreement: Agreement

    @property
    def ratio(self) -> float | None:
        return self.plan_ms / min(self.natives.values()) if self.natives else None

    @property
    def slower(self) -> bool:
        """Slower than the faster native beyond the twins' spread and 1% (as ``run`` flags a plan)."""
        return self.ratio is not None and self.ratio > 1 + max(self.noise, 0.01)

    def to_dict(self) -> dict:
        return {"bucket": self.label, "weight": self.weight, "variant": self.variant, "plan_ms": self.plan_ms,
                "natives": self.natives, "noise": self.noise, "ratio": self.ratio, "slower": self.slower,
                "agreement": self.agreement.to_dict()}  # fmt: skip


@dataclass
class ShapedTimings:
    buckets: list[BucketTiming]
    accuracy: Recheck | None

    @property
    def weighted(self) -> dict[str, float]:
        """Weighted ms per request of the plan and of the faster native per bucket."""
        plan = sum(b.weight * b.plan_ms for b in self.buckets)
        faster = sum(b.weight * min(b.natives.values()) for b in self.buckets if b.natives)
        return {"plan": plan, "faster_native": faster} if faster else {"plan": plan}

    @property
    def ok(self) -> bool:
        return all(b.agreement.within() for b in self.buckets) and (self.accuracy is None or self.accuracy.within)

    def to_dict(self) -> dict:
        return {"buckets": [b.to_dict() for b in self.buckets], "weighted_ms": self.weighted,
                "accuracy": self.accuracy.to_dict() if self.accuracy else None}  # fmt: skip


def time_shaped(plan: ShapedPlan, config: MeasureConfig, progress: Listener = ignore,
                rounds: int = REPORT_ROUNDS) -> ShapedTimings:  # fmt: skip
    """Check the plan at every saved bucket, then time it there beside the natives (when the model is at hand)."""
    source = Path(plan.manifest.source)
    natives = []
    if source.is_file():
        proto = load_dynamic(str(source))[0]
        for variant in NATIVES:
            try:
                natives.append((variant, compile_variant(variant, proto, plan.manifest.threads, 2)))
            except RlcompileError:
                continue
    weights = {row["bucket"]: row["weight"] for row in plan.manifest.shapes["per_bucket"]}
    cases = plan.bucket_cases()
    timings = []
    for index, ((feeds, expected), label) in enumerate(zip(cases, weights, strict=True)):
        progress(Step("run", f"bucket {label}", index, len(cases), "buckets"))
        agreement = compare_outputs(expected, plan.run(feeds))
        contenders = [Contender.from_timer(PLAN, plan.timed(feeds))]
        for variant, (runner, twin) in natives:
            contenders += [Contender.from_timer(variant.label, runner.timed(feeds)),
                           Contender.from_timer(variant.label + TWIN, twin.timed(feeds), twin_of=variant.label)]
        standings = run_contest(contenders, config, rounds)
        timings.append(BucketTiming(label, weights[label], plan.pick(feeds).variant.label, standings.median(PLAN),
                                    {v.library: standings.median(v.label) for v, _ in natives},
                                    standings.noise or 0.0, agreement))  # fmt: skip
    accuracy = None
    if plan.manifest.accuracy is not None:
        record = plan.manifest.accuracy
        accuracy = recheck(plan.path / VALIDATION, plan.run, record.metric, record.fp32_error, record.tolerance)
    return ShapedTimings(timings, accuracy)


def is_shaped(path: str) -> bool:
    """Whether ``path`` is a plan directory for a shape profile."""
    from rlcompile.manifest import Manifest

    try:
        return Path(path).is_dir() and Manifest.load(path).shapes is not None
    except (OSError, ValueError, KeyError, TypeError):
        return False


def shaped_paths(paths: Sequence[str]) -> bool:
    """Whether ``paths`` is one plan directory for a shape profile; several saved results among which one is such a
    plan are refused in one line (they are timed at every bucket, one plan at a time)."""
    shaped = [path for path in paths if is_shaped(path)]
    if shaped and len(paths) > 1:
        raise RlcompileError(f"{shaped[0]} is a plan for a shape profile: run it alone (rlcompile run {shaped[0]}), "
                             "it is timed at every bucket beside both natives")  # fmt: skip
    return bool(shaped)
