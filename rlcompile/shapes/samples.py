"""The inputs a shape profile is judged on: per bucket, real samples brought to its shape, or random ones.

With ``--data``, each sample keeps its own shape (sentences of their own lengths): it must lie in the profile
(the batch axis may be left out), it weights the buckets (:meth:`ShapeProfile.buckets`), the calibration part
calibrates int8 as it comes, and the held-out part is brought to each bucket's shape
(:func:`~rlcompile.models.profile.fit_sample`: cut or zero-padded, the batch filled with further samples) to
measure every lowered variant's error there (a sample's other arrays, such as labels, go with it where the bucket's
batch is the sample's own). Without it, random inputs of each bucket's shape stand in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlcompile.errors import RlcompileError
from rlcompile.models.onnx_model import TensorSpec, random_tensor
from rlcompile.models.profile import Bucket, ShapeProfile, fit_sample
from rlcompile.precision.contract import RANDOM_SAMPLES, read_samples, split_samples

#: Held-out samples a lowered variant's error is measured on per bucket, in batches of the bucket's shape (at least
#: two): all-MiniLM-L6-v2's int8 error moved by under 0.0002 between its buckets, and each batch at 8 x 256 tokens
#: costs a call of about 130 ms per variant (2-core Zen 4).
CHECK_SAMPLES = 16


@dataclass
class ProfileSamples:
    """Calibration inputs (as they come) and held-out samples (brought to each bucket's shape on demand)."""

    calibration: list[dict[str, np.ndarray]]
    validation: list[dict[str, np.ndarray]]
    source: str
    specs: list[TensorSpec]

    @property
    def real(self) -> bool:
        return self.source != "random"

    def inputs(self, sample: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's inputs of a sample (without its labels)."""
        return {spec.name: sample[spec.name] for spec in self.specs}

    def feeds(self, bucket: Bucket, seed: int = 0) -> dict[str, np.ndarray]:
        """The inputs a bucket is timed on: the first held-out sample(s) at its shape, or random ones."""
        return self.inputs(self.checks(bucket, 1, seed)[0])

    def checks(self, bucket: Bucket, count: int | None = None, seed: int = 0) -> list[dict[str, np.ndarray]]:
        """``count`` held-out inputs at ``bucket``'s shape (default: :data:`CHECK_SAMPLES` samples in all), each a
        batch of different samples where there are enough."""
        batch = max((shape[0] for shape in bucket.shapes.values() if shape), default=1)
        count = count or max(2, -(-CHECK_SAMPLES // batch))
        if not self.real:
            rng = np.random.default_rng(seed)
            return [{spec.name: random_tensor(TensorSpec(spec.name, bucket.shapes[spec.name], spec.dtype), rng)
                     for spec in self.specs} for _ in range(count)]  # fmt: skip
        pool = self.validation
        inputs = {spec.name for spec in self.specs}
        checks = []
        for index in range(count):
            first = (index * batch) % len(pool)
            others = [pool[(first + k) % len(pool)] for k in range(1, batch)]
            sample = {name: value for name, value in pool[first].items() if name in inputs}
            fitted = fit_sample(sample, bucket.shapes, others)
            if all(np.shape(value)[0] == batch for value in sample.values()):  # one sample: its labels still apply
                fitted |= {name: value for name, value in pool[first].items() if name not in inputs}
            checks.append(fitted)
        return checks


def profile_samples(profile: ShapeProfile, specs: Sequence[TensorSpec], data: Path | None, seed: int,
                    buckets: Sequence[Bucket]) -> ProfileSamples:  # fmt: skip
    """The samples of ``--data`` checked against ``profile`` and split, or random ones at the buckets' shapes."""
    if data is None:
        rng = np.random.default_rng(seed)
        random = [{spec.name: random_tensor(TensorSpec(spec.name, buckets[k % len(buckets)].shapes[spec.name],
                                                       spec.dtype), rng) for spec in specs}
                  for k in range(RANDOM_SAMPLES)]  # fmt: skip
        calibration, validation = split_samples(random, seed)
        return ProfileSamples(calibration, validation, "random", list(specs))
    samples = [checked(sample, profile, specs, str(data)) for sample in read_samples(Path(data), {})]
    calibration, validation = split_samples(samples, seed)
    return ProfileSamples(calibration, validation, str(data), list(specs))


def checked(sample: Mapping[str, np.ndarray], profile: ShapeProfile, specs: Sequence[TensorSpec],
            where: str) -> dict[str, np.ndarray]:  # fmt: skip
    """A sample whose inputs lie in the profile (a batch axis left out is added), cast to the inputs' dtypes."""
    result = dict(sample)
    for spec in specs:
        if spec.name not in sample:
            raise RlcompileError(f"--data {where}: a sample lacks input {spec.name!r} (it has {', '.join(sample)})")
        value = np.asarray(sample[spec.name])
        if value.ndim == len(profile.dims[spec.name]) - 1:
            value = value[None]
        if not np.can_cast(value.dtype, spec.dtype, casting="same_kind"):
            raise RlcompileError(f"--data {where}: input {spec.name!r} is {value.dtype}, the model takes {spec.dtype}")
        result[spec.name] = value.astype(spec.dtype, copy=False)
    shapes = {spec.name: result[spec.name].shape for spec in specs}
    if not profile.contains(shapes):
        described = ", ".join(f"{name} {list(shape)}" for name, shape in shapes.items())
        raise RlcompileError(f"--data {where}: a sample's shapes ({described}) lie outside the --input-shape "
                             f"profile ({profile.ranges_text()})")  # fmt: skip
    return result
