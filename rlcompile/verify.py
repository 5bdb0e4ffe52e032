"""Numerical agreement between a reference and a candidate's outputs.

Every level checks its result this way before trusting it: backends against each other, folded or
rewritten graphs against the original, per-layer primitives against the reference layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

#: Default tolerance on :attr:`Agreement.max_rel` (float32 arithmetic in a different order).
DEFAULT_RTOL = 1e-3
#: Absolute errors below this agree whatever the scale (outputs that are all close to zero).
DEFAULT_ATOL = 1e-6


@dataclass(frozen=True)
class Agreement:
    """Worst-case error over all outputs.

    ``max_rel`` is the largest absolute difference divided by the largest magnitude of the reference
    output it belongs to, which stays meaningful where individual reference values are near zero.
    """

    max_abs: float
    max_rel: float

    def within(self, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> bool:
        """Agree when the relative error is at most ``rtol`` or the absolute error at most ``atol``."""
        return bool(np.isfinite(self.max_abs)) and (self.max_rel <= rtol or self.max_abs <= atol)

    def to_dict(self) -> dict:
        return asdict(self)


def compare_outputs(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> Agreement:
    """Compare two lists of outputs elementwise; shapes and counts must match."""
    if len(reference) != len(candidate):
        raise ValueError(f"{len(candidate)} outputs, expected {len(reference)}")
    max_abs = max_rel = 0.0
    for expected, actual in zip(reference, candidate, strict=True):
        expected = np.asarray(expected)
        actual = np.asarray(actual)
        if expected.shape != actual.shape:
            raise ValueError(f"output shape {actual.shape}, expected {expected.shape}")
        if expected.size == 0:
            continue
        expected, actual = expected.astype(np.float64), actual.astype(np.float64)
        # the same value in both (the same infinity included: masks are often -inf or the float minimum, and
        # inf - inf is NaN) is no difference; NaN or inf left anywhere makes the outputs disagree
        same = (expected == actual) | (np.isnan(expected) & np.isnan(actual))
        with np.errstate(invalid="ignore", over="ignore"):
            difference = np.where(same, 0.0, np.abs(actual - expected))
        largest_difference = float(np.max(difference)) if np.all(np.isfinite(difference)) else np.inf
        finite = np.abs(expected[np.isfinite(expected)])
        scale = float(np.max(finite)) if finite.size else 0.0
        max_abs = max(max_abs, largest_difference)
        max_rel = max(max_rel, largest_difference / scale if scale > 0 else largest_difference)
    return Agreement(max_abs=max_abs, max_rel=max_rel)
