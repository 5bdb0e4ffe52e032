"""``rlcompile optimize``: the graph, kernel and layer levels composed into one verified plan directory.

``optimize(OptimizeRequest(model="resnet18", output=Path("r18")))`` -> :class:`OptimizeResult`; the
output runs with ``rlcompile run DIR`` or ``rlcompile.load(DIR)``.
"""

from rlcompile.optimize.budget import Budget, parse_duration, parse_levels
from rlcompile.optimize.pipeline import OptimizeRequest, OptimizeResult, optimize
from rlcompile.optimize.stages import StageSettings

__all__ = ["Budget", "OptimizeRequest", "OptimizeResult", "StageSettings", "optimize", "parse_duration",
           "parse_levels"]
