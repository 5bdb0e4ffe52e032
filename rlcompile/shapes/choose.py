"""Which variants serve which shapes, from what every bucket measured.

The rule, stated once. At each bucket the candidates that kept the accuracy contract there are ranked by their
median. One dynamic variant serves every shape when it kept the contract at every bucket and is, at every
bucket, within the noise (at least :data:`TIE_BAND`) of the fastest dynamic variant there: of those the one
with the least weighted latency, the simplest (a native) on ties. Otherwise each bucket's region is served by
the fastest dynamic variant at that bucket. A static variant serves its bucket's exact shape where it beat that
region's dynamic variant by more than the noise and at least :data:`STATIC_GAIN`; a dynamic variant left with
no shape that a static one does not serve (a profile of sets) is dropped. So the plan is never slower
beyond the noise than the faster native at any bucket: both natives are among the dynamic candidates (unless
``--runtimes`` leaves one's runtime out).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlcompile.models.profile import Bucket
from rlcompile.shapes.judge import BucketResult
from rlcompile.shapes.variants import Variant

#: Dynamic variants within 2% of the fastest at a bucket tie there (as plans tie in the layer stage's contest).
TIE_BAND = 0.02
#: A static variant must save at least 3% at its shape: it is one more compiled copy of the model held in memory and
#: compiled at load, for that one shape.
STATIC_GAIN = 0.03


@dataclass
class Served:
    """A variant and the regions it serves: per region, per axis, the sizes ``(low, high)``."""

    variant: Variant
    regions: list[dict[str, tuple[int, int]]]

    def to_json(self) -> dict:
        return {"variant": self.variant.to_json(), "label": self.variant.label,
                "regions": [{axis: list(r) for axis, r in region.items()} for region in self.regions]}  # fmt: skip


@dataclass
class Choice:
    """The variants kept (static ones first, as dispatch tries them) and, per bucket, the one that serves it."""

    served: list[Served]
    by_bucket: dict[str, Variant]

    def ms(self, result: BucketResult) -> float:
        return result.ms[self.by_bucket[result.bucket.label].label]


def accurate(result: BucketResult, variant: Variant) -> bool:
    return variant.label in result.ms and (not variant.lowered or result.accurate.get(variant.label, False))


def choose(results: Sequence[BucketResult], candidates: Sequence[Variant]) -> Choice:
    """The variants that serve the profile (see the module's docstring)."""
    pool = list(candidates)
    fastest = {r.bucket.label: min((v for v in pool if accurate(r, v)), key=lambda v: r.ms[v.label]) for r in results}
    everywhere = [variant for variant in pool
                  if all(accurate(r, variant) and r.ms[variant.label] <= r.ms[fastest[r.bucket.label].label]
                         * (1 + max(TIE_BAND, r.noise)) for r in results)]  # fmt: skip
    if everywhere:
        single = min(everywhere, key=lambda v: (not v.native, weighted(results, v)))
        dynamic = {r.bucket.label: single for r in results}
    else:
        dynamic = fastest
    served: dict[Variant, Served] = {}
    statics: list[Served] = []
    by_bucket = {}
    for result in results:
        variant = dynamic[result.bucket.label]
        served.setdefault(variant, Served(variant, [])).regions.append(result.bucket.region)
        by_bucket[result.bucket.label] = variant
        statics_here = [static for static in result.statics if accurate(result, static)]
        static = min(statics_here, key=lambda v: result.ms[v.label]) if statics_here else None
        if static is not None:
            gain = 1 - result.ms[static.label] / result.ms[variant.label]
            if gain > max(result.noise, STATIC_GAIN):
                statics.append(Served(static, [exact(result.bucket)]))
                by_bucket[result.bucket.label] = static
    exact_shapes = [served.regions[0] for served in statics]
    dynamic_served = [item for item in served.values() if any(region not in exact_shapes for region in item.regions)]
    return Choice([*statics, *dynamic_served], by_bucket)


def exact(bucket: Bucket) -> dict[str, tuple[int, int]]:
    return {axis: (value, value) for axis, value in bucket.values.items()}


def weighted(results: Sequence[BucketResult], variant: Variant) -> float:
    """The variant's latency weighted over the buckets (ms per request under the profile's weights)."""
    return sum(r.bucket.weight * r.ms[variant.label] for r in results)
