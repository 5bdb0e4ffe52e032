"""Shape profiles: ranges and sets per dimension, axes shared by inputs, buckets, regions and their weights."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rlcompile.errors import ModelError
from rlcompile.models.onnx_model import TensorSpec
from rlcompile.models.profile import DimRange, build_profile, fit_sample, is_profile_text, parse_dim

TEXT = [TensorSpec(name, ("batch", "sequence"), np.dtype(np.int64)) for name in ("input_ids", "attention_mask")]
PROFILE = ["input_ids=1-8,16-256", "attention_mask=1-8,16-256"]


@pytest.mark.parametrize(("text", "expected"), [
    ("4", DimRange(4, 4)), ("1-8", DimRange(1, 8)), ("16..512", DimRange(16, 512)),
    ("8|1|4", DimRange(1, 8, (1, 4, 8))), ("3|3", DimRange(3, 3)),
])  # fmt: skip
def test_a_dim_is_a_size_a_range_or_a_set(text: str, expected: DimRange) -> None:
    assert parse_dim(text, text) == expected


@pytest.mark.parametrize("text", ["0", "8-1", "0-4", "a", "1-", "1|0", "-3", ""])
def test_a_bad_dim_is_refused(text: str) -> None:
    with pytest.raises(ModelError, match="each dim is N, LOW-HIGH"):
        parse_dim(text, f"x={text}")


@pytest.mark.parametrize(("dim", "points"), [
    (DimRange(1, 8), (1, 4, 8)), (DimRange(16, 256), (16, 64, 256)), (DimRange(320, 640), (320, 640)),
    (DimRange(5, 5), (5,)), (DimRange(1, 8, (1, 2, 8)), (1, 2, 8)), (DimRange(1, 2), (1, 2)),
])  # fmt: skip
def test_a_range_is_judged_at_its_ends_and_log_scale_points_between(dim: DimRange, points: tuple) -> None:
    assert dim.points() == points
    assert all(b / a <= 4.0 for a, b in itertools.pairwise(points))


def test_inputs_that_share_a_named_dim_share_an_axis_and_its_buckets() -> None:
    profile = build_profile(PROFILE, TEXT)
    assert [axis.name for axis in profile.axes] == ["batch", "sequence"]
    assert profile.axes[0].places == (("input_ids", 0), ("attention_mask", 0))
    buckets = profile.buckets()
    assert [bucket.label for bucket in buckets][:3] == ["1x16", "1x64", "1x256"] and len(buckets) == 9
    assert buckets[4].shapes == {"input_ids": (4, 64), "attention_mask": (4, 64)}
    assert sum(bucket.weight for bucket in buckets) == pytest.approx(1.0)


def test_regions_cover_every_size_of_the_range_once() -> None:
    for axis in build_profile(PROFILE, TEXT).axes:
        regions = axis.regions()
        assert regions[0][0] == axis.range.low and regions[-1][1] == axis.range.high
        assert all(high + 1 == low for (_, high), (low, _) in itertools.pairwise(regions))
        assert all(low <= point <= high for point, (low, high) in zip(axis.range.points(), regions, strict=True))


def test_samples_weight_the_buckets_of_an_axis_whose_size_differs_between_them() -> None:
    profile = build_profile(PROFILE, TEXT)
    samples = [{"input_ids": np.zeros((1, n)), "attention_mask": np.zeros((1, n))} for n in (16, 20, 30, 100)]
    weights = {bucket.label: bucket.weight for bucket in profile.buckets(samples)}
    assert weights["1x16"] == pytest.approx(0.75 / 3) and weights["8x64"] == pytest.approx(0.25 / 3)
    assert weights["4x256"] == 0.0


def test_feeds_are_matched_to_the_axes_and_checked_against_the_ranges() -> None:
    profile = build_profile(PROFILE, TEXT)
    assert profile.axis_values({"input_ids": (3, 100), "attention_mask": (3, 100)}) == {"batch": 3, "sequence": 100}
    assert profile.axis_values({"input_ids": (3, 100), "attention_mask": (3, 99)}) is None
    assert profile.contains({"input_ids": (8, 256), "attention_mask": (8, 256)})
    assert not profile.contains({"input_ids": (9, 16), "attention_mask": (9, 16)})


@pytest.mark.parametrize(("texts", "message"), [
    (["input_ids=1-8,16-256", "attention_mask=1-4,16-256"], "two ranges"),
    (["input_ids=1-8,16-256"], "attention_mask[batch,sequence] int64 has dynamic dims"),
    (["input_ids=1-8,16-256", "attention_mask=1-8,16-256", "pixels=1"], "has inputs"),
    (["input_ids=1-8", "attention_mask=1-8,16-256"], "has 1 dims"),
])  # fmt: skip
def test_a_profile_that_does_not_fit_the_model_is_refused(texts: list[str], message: str) -> None:
    with pytest.raises(ModelError, match=message.replace("[", r"\[")):
        build_profile(texts, TEXT)


def test_a_fixed_dim_of_the_model_takes_only_its_own_size() -> None:
    image = [TensorSpec("x", ("batch", 3, 224, 224), np.dtype(np.float32))]
    assert build_profile(["x=1-4,3,224,224"], image).axes[0].name == "batch"
    with pytest.raises(ModelError, match="fixes it to 3"):
        build_profile(["x=1-4,1-3,224,224"], image)


def test_only_ranges_and_sets_make_a_profile() -> None:
    assert not is_profile_text(["x=1,3,224,224"]) and not is_profile_text(None)
    assert is_profile_text(["x=1-4,3,224,224"]) and is_profile_text(["x=1|2,3"])


def test_a_sample_is_cut_padded_and_batched_to_a_shape() -> None:
    first = {"ids": np.arange(1, 6)[None]}
    second = {"ids": np.arange(10, 13)[None]}
    fitted = fit_sample(first, {"ids": (3, 4)}, [second])["ids"]
    assert fitted.tolist() == [[1, 2, 3, 4], [10, 11, 12, 0], [1, 2, 3, 4]]
