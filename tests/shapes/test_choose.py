"""Which variants serve which shapes, from per-bucket measurements (the rule of :mod:`rlcompile.shapes.choose`)."""

from __future__ import annotations

from rlcompile.models.profile import Bucket
from rlcompile.shapes.choose import choose, weighted
from rlcompile.shapes.judge import NATIVES, BucketResult
from rlcompile.shapes.variants import Variant

ORT, OPENVINO = NATIVES
INT8 = Variant("openvino", "fp32", "smoothquant")


def result(label: str, ms: dict[Variant, float], noise: float = 0.01, static: Variant | None = None,
           inaccurate: tuple[Variant, ...] = ()) -> BucketResult:  # fmt: skip
    """A bucket's measurements, ``static`` the one static variant timed there."""
    value = int(label)
    bucket = Bucket({"x": (value,)}, {"n": value}, 0.5, {"n": (value // 2, value * 2)})
    found = BucketResult(bucket, {v.label: t for v, t in ms.items()}, noise, statics=[static] if static else [])
    found.accurate = {v.label: v not in inaccurate for v in ms if v.lowered}
    return found


def test_one_dynamic_variant_serves_everything_when_it_ties_the_fastest_at_every_bucket() -> None:
    results = [result("1", {ORT: 1.0, OPENVINO: 1.01}), result("8", {ORT: 8.0, OPENVINO: 7.9})]
    choice = choose(results, [ORT, OPENVINO])
    assert [served.variant for served in choice.served] == [OPENVINO]  # both tie everywhere; less weighted latency
    assert len(choice.served[0].regions) == 2


def test_each_region_goes_to_its_fastest_when_no_variant_ties_everywhere() -> None:
    results = [result("1", {ORT: 1.0, OPENVINO: 1.3}), result("8", {ORT: 10.0, OPENVINO: 7.0})]
    choice = choose(results, [ORT, OPENVINO])
    assert choice.by_bucket == {"1": ORT, "8": OPENVINO}
    assert choice.ms(results[1]) == 7.0


def test_a_lowered_variant_outside_the_tolerance_at_one_bucket_serves_none_of_it() -> None:
    results = [result("1", {ORT: 1.0, OPENVINO: 1.2, INT8: 0.5}),
               result("8", {ORT: 10.0, OPENVINO: 9.0, INT8: 4.0}, inaccurate=(INT8,))]  # fmt: skip
    choice = choose(results, [ORT, OPENVINO, INT8])
    assert choice.by_bucket == {"1": INT8, "8": OPENVINO}


def test_a_static_variant_is_kept_for_its_shape_only_beyond_the_noise_and_the_gain_floor() -> None:
    fast, slight = ORT.at("1"), ORT.at("8")
    results = [result("1", {ORT: 1.0, OPENVINO: 1.5, fast: 0.9}, static=fast),
               result("8", {ORT: 8.0, OPENVINO: 9.0, slight: 7.9}, static=slight)]  # fmt: skip
    choice = choose(results, [ORT, OPENVINO])
    assert [served.variant for served in choice.served] == [fast, ORT]
    assert choice.served[0].regions == [{"n": (1, 1)}]
    assert choice.by_bucket == {"1": fast, "8": ORT}


def test_the_weighted_latency_is_the_buckets_weights_times_their_medians() -> None:
    results = [result("1", {ORT: 1.0, OPENVINO: 2.0}), result("8", {ORT: 8.0, OPENVINO: 6.0})]
    assert weighted(results, ORT) == 4.5 and weighted(results, OPENVINO) == 4.0


def test_a_dynamic_variant_left_with_no_shape_of_its_own_is_dropped() -> None:
    first, second = OPENVINO.at("1"), OPENVINO.at("8")
    results = [result("1", {ORT: 1.0, OPENVINO: 1.0, first: 0.5}, static=first),
               result("8", {ORT: 8.0, OPENVINO: 8.0, second: 4.0}, static=second)]  # fmt: skip
    for found in results:  # a profile of sets: each bucket's region is its own shape
        object.__setattr__(found.bucket, "region", {"n": (found.bucket.values["n"],) * 2})
    assert [served.variant for served in choose(results, [ORT, OPENVINO]).served] == [first, second]
