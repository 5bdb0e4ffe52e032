"""Numerical agreement of output lists."""

from __future__ import annotations

import numpy as np
import pytest

from rlcompile.verify import compare_outputs


def test_identical_outputs_agree_exactly() -> None:
    outputs = [np.arange(6, dtype=np.float32).reshape(2, 3)]
    agreement = compare_outputs(outputs, [o.copy() for o in outputs])
    assert agreement.max_abs == 0 and agreement.max_rel == 0 and agreement.within()


def test_relative_error_is_scaled_by_the_reference_magnitude() -> None:
    reference = [np.array([100.0, 0.0, -50.0])]
    candidate = [np.array([100.0, 0.5, -50.0])]
    agreement = compare_outputs(reference, candidate)
    assert agreement.max_abs == pytest.approx(0.5)
    assert agreement.max_rel == pytest.approx(0.005)
    assert not agreement.within(1e-3) and agreement.within(1e-2)


def test_worst_output_counts() -> None:
    agreement = compare_outputs([np.ones(3), np.ones(2)], [np.ones(3), np.array([1.0, 2.0])])
    assert agreement.max_rel == pytest.approx(1.0)


def test_tiny_absolute_errors_agree_even_on_tiny_outputs() -> None:
    agreement = compare_outputs([np.array([5e-5, 0.0])], [np.array([5e-5 + 1.5e-7, 0.0])])
    assert agreement.max_rel > 1e-3 and agreement.within()
    assert not agreement.within(atol=1e-8)


def test_nan_never_agrees() -> None:
    assert not compare_outputs([np.ones(2)], [np.array([1.0, np.nan])]).within()


def test_mismatched_structure_is_an_error() -> None:
    with pytest.raises(ValueError):
        compare_outputs([np.ones(2)], [])
    with pytest.raises(ValueError):
        compare_outputs([np.ones(2)], [np.ones(3)])


def test_the_same_infinities_agree_and_a_different_one_does_not() -> None:
    mask = np.array([0.0, -np.inf, 2.0])  # an attention mask's -inf, as exporters write it
    assert compare_outputs([mask], [mask.copy()]).within()
    assert not compare_outputs([mask], [np.array([0.0, np.inf, 2.0])]).within()
    assert compare_outputs([mask], [np.array([0.0, -np.inf, 2.0005])]).max_rel == pytest.approx(0.0005 / 2.0)
