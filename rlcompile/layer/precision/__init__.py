"""Precision as a decision: the searches choose which fusion groups run in int8 and how floats are computed,
under the accuracy contract the user states (see :mod:`rlcompile.layer.precision.api`)."""

from rlcompile.layer.precision.api import PRECISION, PrecisionChoice, choose_precision
from rlcompile.layer.precision.contract import AccuracyContract

__all__ = ["PRECISION", "AccuracyContract", "PrecisionChoice", "choose_precision"]
