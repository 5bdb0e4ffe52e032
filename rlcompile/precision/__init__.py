"""Precision as a decision: the searches choose which fusion groups run in int8 and how floats are computed,
under the accuracy contract the user states (:mod:`rlcompile.precision.api`; the contract and the
saved-plan re-check, which the light loader uses, are in :mod:`rlcompile.precision.contract`)."""

from __future__ import annotations


def choose_precision(*args, **kwargs):
    """:func:`rlcompile.precision.api.choose_precision`, imported when first called."""
    from rlcompile.precision.api import choose_precision as choose

    return choose(*args, **kwargs)


__all__ = ["choose_precision"]
