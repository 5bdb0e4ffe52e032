"""Every candidate judged at every bucket of a shape profile: its error there, then its time beside the natives.

At each bucket one alternating contest times the dynamic candidates that kept the accuracy contract there, ONNX
Runtime and OpenVINO run natively on the user's model (the references, and candidates too unless ``--runtimes``
leaves their runtime out) and an identical twin of each native, whose spread is the bucket's noise. A second,
short contest at each bucket then times the two fastest dynamic candidates there reshaped to the bucket's shape
(static variants) beside the fastest and the faster native: a static variant is kept for that shape only where it
wins beyond the noise (:mod:`.choose`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from rlcompile.errors import RlcompileError, first_line
from rlcompile.events import Event, Listener, Step
from rlcompile.measure import DECISION_ROUNDS, Contender, MeasureConfig, run_contest
from rlcompile.measure.contest import fit_within
from rlcompile.models.profile import Bucket
from rlcompile.precision.contract import Metric, sample_error, within_tolerance
from rlcompile.runtimes import Runner
from rlcompile.shapes.samples import ProfileSamples
from rlcompile.shapes.variants import Variant, compile_variant, reshaped

NATIVES = (Variant("ort"), Variant("openvino"))
TWIN = " (identical session)"
#: How many of a bucket's fastest dynamic candidates are tried reshaped to it: the fastest alone missed OpenVINO
#: reshaped to 1 x 16 tokens on all-MiniLM-L6-v2 (14% faster than its dynamic run, which came second to ONNX Runtime).
STATIC_TRIES = 2
#: The shortest timing block a bucket's contest is fitted down to: a profile holds about ten buckets, each a
#: contest, and 50 ms blocks still hold hundreds of calls of a model that takes a tenth of a millisecond.
FLOOR_TIME_S = 0.05


@dataclass
class BucketResult:
    """What one bucket measured: each variant's median ms (by label), the twins' spread, each lowered variant's
    error and whether it kept the contract there."""

    bucket: Bucket
    ms: dict[str, float] = field(default_factory=dict)
    noise: float = 0.0
    errors: dict[str, float] = field(default_factory=dict)
    fp32_error: float = 0.0
    accurate: dict[str, bool] = field(default_factory=dict)
    rounds: int = 0
    #: the static variants timed at this bucket (their ms among :attr:`ms`)
    statics: list[Variant] = field(default_factory=list)

    @property
    def natives(self) -> dict[str, float]:
        return {v.library: self.ms[v.label] for v in NATIVES if v.label in self.ms}

    @property
    def faster_native_ms(self) -> float:
        return min(self.natives.values())

    def to_json(self) -> dict:
        return {"bucket": self.bucket.to_json(), "ms": self.ms, "noise": self.noise, "errors": self.errors,
                "fp32_error": self.fp32_error, "accurate": self.accurate, "rounds": self.rounds,
                "statics": [static.to_json() for static in self.statics]}  # fmt: skip


@dataclass
class Judge:
    """What judging needs: the candidates' models, the samples, the metric and tolerance, timing and threads."""

    model_of: Callable[[Variant], onnx.ModelProto | None]
    samples: ProfileSamples
    metric: Metric
    tolerance: float
    timing: MeasureConfig
    threads: int
    progress: Listener
    reference: Callable[[Mapping[str, np.ndarray]], list[np.ndarray]]
    runners: dict[Variant, Runner] = field(default_factory=dict)
    twins: dict[Variant, Runner] = field(default_factory=dict)

    def fitted(self, contenders: int, seconds: float) -> MeasureConfig:
        """The timing of a contest of ``contenders`` fitted into ``seconds`` (blocks down to :data:`FLOOR_TIME_S`)."""
        floor = replace(self.timing, floor_time_s=min(self.timing.floor_time_s, FLOOR_TIME_S))
        return fit_within(floor, contenders, seconds)

    def runner(self, variant: Variant, bucket: Bucket | None = None, copies: int = 1) -> list[Runner] | None:
        """``copies`` compiles of ``variant`` (reshaped to ``bucket`` when static); ``None`` where it cannot run."""
        if copies == 1 and variant in self.runners:
            return [self.runners[variant]]
        proto = self.model_of(variant.dynamic())
        if proto is None:
            return None
        if variant.static is not None and bucket is not None:
            proto = reshaped(proto, bucket.shapes)
        try:
            found = compile_variant(variant, proto, self.threads, copies)
        except RlcompileError as error:
            self.progress(Event("shapes", f"{variant.label} left out: {first_line(error)}"))
            return None
        if copies == 1:  # a static one only while its bucket is judged (:meth:`judge_static` lets it go)
            self.runners[variant] = found[0]
        return found

    def errors(self, variant: Variant, bucket: Bucket, checks: Sequence[dict[str, np.ndarray]],
               references: Sequence[list[np.ndarray]]) -> float | None:  # fmt: skip
        """The variant's mean error at ``bucket`` on ``checks`` (``None`` where it fails to run them)."""
        found = self.runner(variant, bucket)
        if found is None:
            return None
        try:
            outputs = [found[0].run(self.samples.inputs(feeds)) for feeds in checks]
        except Exception as error:  # a runtime that refuses a shape at run time: the candidate is left out
            self.progress(Event("shapes", f"{variant.label} left out at {bucket.label}: {first_line(error)}"))
            return None
        return float(np.mean([sample_error(self.metric, feeds, expected, actual)
                              for feeds, expected, actual in zip(checks, references, outputs, strict=True)]))

    def judge(self, bucket: Bucket, candidates: Sequence[Variant], seconds: float) -> BucketResult:
        """Errors, then one contest of the accurate candidates (natives and their twins among them) at ``bucket``."""
        result = BucketResult(bucket)
        checks = self.samples.checks(bucket)
        references = [self.reference(self.samples.inputs(feeds)) for feeds in checks]
        result.fp32_error = float(np.mean([sample_error(self.metric, feeds, expected, expected)
                                           for feeds, expected in zip(checks, references, strict=True)]))
        timed = []
        for variant in candidates:
            if variant.lowered:
                error = self.errors(variant, bucket, checks, references)
                if error is None:
                    continue
                result.errors[variant.label] = error
                result.accurate[variant.label] = within_tolerance(error - result.fp32_error, self.tolerance)
                if not result.accurate[variant.label]:
                    continue
            if variant.native or self.runner(variant) is not None:
                timed.append(variant)
        timed += [native for native in NATIVES if native not in timed]  # the references, candidates or not
        feeds = self.samples.inputs(checks[0])
        contenders = self.contenders(timed, bucket, feeds)
        standings = run_contest(contenders, self.fitted(len(contenders), seconds), DECISION_ROUNDS)
        result.ms = {c.label: standings.median(c.label) for c in contenders if not c.label.endswith(TWIN)}
        result.noise, result.rounds = standings.noise or 0.0, standings.rounds
        return result

    def contenders(self, variants: Sequence[Variant], bucket: Bucket, feeds: Mapping[str, np.ndarray],
                   statics: Sequence[Variant] = ()) -> list[Contender]:  # fmt: skip
        """The variants (dynamic ones compiled once, ``statics`` for this bucket) as contenders, each native with
        a twin compiled apart."""
        contenders = []
        for variant in [*variants, *statics]:
            found = self.runner(variant, bucket)
            if found is None:
                continue
            contenders.append(Contender.from_timer(variant.label, found[0].timed(feeds)))
            if variant.native and variant not in self.twins:
                twin = self.runner(variant, bucket, copies=2)
                if twin is not None:
                    self.twins[variant] = twin[1]
            if variant.native and variant in self.twins:
                contenders.append(Contender.from_timer(variant.label + TWIN, self.twins[variant].timed(feeds),
                                                       twin_of=variant.label))  # fmt: skip
        return contenders

    def judge_static(self, result: BucketResult, tops: Sequence[Variant], seconds: float) -> None:
        """Time ``tops`` (the fastest dynamic variants at the bucket, fastest first) reshaped to the bucket beside the
        fastest and the faster native; adds each static variant that kept the contract to the result. Each is
        compiled once, for its error and its contest, and let go after."""
        tried = [top.at(result.bucket.label) for top in tops]
        try:
            self.time_statics(result, tops[0], tried, seconds)
        finally:
            for static in tried:
                self.runners.pop(static, None)

    def time_statics(self, result: BucketResult, fastest: Variant, statics: list[Variant], seconds: float) -> None:
        """:meth:`judge_static`'s measurements: the lowered statics' errors, then one contest of those that kept the
        contract beside ``fastest`` and the faster native."""
        feeds = self.samples.feeds(result.bucket)
        checks = self.samples.checks(result.bucket) if any(static.lowered for static in statics) else []
        references = [self.reference(self.samples.inputs(f)) for f in checks]
        for static in [static for static in statics if static.lowered]:
            error = self.errors(static, result.bucket, checks, references)
            result.accurate[static.label] = error is not None and within_tolerance(error - result.fp32_error,
                                                                                   self.tolerance)  # fmt: skip
            if error is not None:
                result.errors[static.label] = error
        statics = [static for static in statics if not static.lowered or result.accurate[static.label]]
        faster = min((v for v in NATIVES if v.label in result.ms), key=lambda v: result.ms[v.label])
        contenders = self.contenders(list(dict.fromkeys([fastest, faster])), result.bucket, feeds, statics)
        timed = [static for static in statics if any(c.label == static.label for c in contenders)]
        if not timed:
            return
        standings = run_contest(contenders, self.fitted(len(contenders), seconds), DECISION_ROUNDS)
        scale = result.ms[fastest.label] / standings.median(fastest.label)  # the first contest's scale for this bucket
        for static in timed:
            result.ms[static.label] = standings.median(static.label) * scale
        result.statics = timed
        result.noise = max(result.noise, standings.noise or 0.0)


def judge_profile(judge: Judge, buckets: Sequence[Bucket], candidates: Sequence[Variant],
                  seconds: float) -> list[BucketResult]:  # fmt: skip
    """Every bucket judged within about ``seconds``: two thirds for the dynamic contests, a third for the static
    ones, each contest given its share of what is left, shrunk by how far the contests so far overran theirs (a
    contest's turns also wait out the runtimes' idle threads, which its fitted blocks do not count)."""
    pace = Pace(time.monotonic() + seconds, len(buckets) * 3)
    results = []
    for index, bucket in enumerate(buckets):
        judge.progress(Step("shapes", f"bucket {bucket.label}: {len(candidates)} candidates", index, len(buckets),
                            "buckets"))  # fmt: skip
        results.append(pace.run(lambda share, bucket=bucket: judge.judge(bucket, candidates, share), 2))
    for index, result in enumerate(results):
        tops = fastest_dynamic(result, candidates)[:STATIC_TRIES]
        judge.progress(Step("shapes", f"bucket {result.bucket.label}: {' and '.join(t.label for t in tops)} reshaped "
                                      "to it", index, len(results), "static"))  # fmt: skip
        pace.run(lambda share, result=result, tops=tops: judge.judge_static(result, tops, share), 1)
    return results


@dataclass
class Pace:
    """Shares of the time to a deadline, in units (a dynamic contest two, a static one one), corrected by the
    contests' overrun so far."""

    deadline: float
    units: int
    overrun: float = 1.0

    def run(self, contest: Callable[[float], object], units: int):
        share = max(self.deadline - time.monotonic(), 0.0) * units / max(self.units, 1)
        started = time.monotonic()
        result = contest(share / self.overrun)
        if share > 0:
            self.overrun = max(1.0, (time.monotonic() - started) / (share / self.overrun)) * 0.5 + self.overrun * 0.5
        self.units -= units
        return result


def fastest_dynamic(result: BucketResult, candidates: Sequence[Variant]) -> list[Variant]:
    """The dynamic candidates timed at the bucket, fastest first."""
    timed = [variant for variant in candidates if variant.label in result.ms]
    return sorted(timed, key=lambda variant: result.ms[variant.label])
