"""The substitution rules of the graph level, by stable id.

rules.create("merge_parallel_conv")   # one rule
rules.all_rules()                     # every rule, in a fixed order (the action space's order)
"""

from __future__ import annotations

from rlcompile.errors import check_choice
from rlcompile.graph.rules.activation import HardSwishAsHardSigmoid
from rlcompile.graph.rules.algebra import (
    ConvLinearity,
    ReassociateAddLeft,
    ReassociateAddRight,
    ReassociateMatMulLeft,
    ReassociateMatMulRight,
    ReassociateMulLeft,
    ReassociateMulRight,
)
from rlcompile.graph.rules.attention import SplitKeyTranspose, UnguardAttention
from rlcompile.graph.rules.base import Location, PatternRule, Rule, RuleError, StructuralRule
from rlcompile.graph.rules.broadcast import DropBroadcastExpand
from rlcompile.graph.rules.concat import (
    EliminateSplitConcat,
    PullElementwiseThroughConcat,
    PullElementwiseThroughSplit,
    PushElementwiseIntoConcat,
    PushElementwiseIntoSplit,
)
from rlcompile.graph.rules.fusion import (
    FuseConvAdd,
    FuseConvBatchNorm,
    FuseConvMul,
    FuseConvTransposeAdd,
    FuseConvTransposeBatchNorm,
    FuseConvTransposeMul,
)
from rlcompile.graph.rules.merge import (
    MergeConvGrouped,
    MergeParallelConv,
    MergeParallelConvEnlarge,
    MergeParallelMatMul,
)

RULE_CLASSES: tuple[type[Rule], ...] = (
    FuseConvBatchNorm,
    FuseConvMul,
    FuseConvAdd,
    FuseConvTransposeBatchNorm,
    FuseConvTransposeMul,
    FuseConvTransposeAdd,
    MergeParallelConv,
    MergeParallelConvEnlarge,
    MergeConvGrouped,
    MergeParallelMatMul,
    PullElementwiseThroughConcat,
    PushElementwiseIntoConcat,
    PullElementwiseThroughSplit,
    PushElementwiseIntoSplit,
    EliminateSplitConcat,
    ConvLinearity,
    ReassociateMatMulRight,
    ReassociateMatMulLeft,
    ReassociateAddRight,
    ReassociateAddLeft,
    ReassociateMulRight,
    ReassociateMulLeft,
    HardSwishAsHardSigmoid,
    UnguardAttention,
    SplitKeyTranspose,
    DropBroadcastExpand,
)
RULE_IDS = tuple(cls.id for cls in RULE_CLASSES)


def create(rule_id: str) -> Rule:
    check_choice("rule", rule_id, RULE_IDS)
    return next(cls for cls in RULE_CLASSES if cls.id == rule_id)()


def all_rules(ids: list[str] | None = None) -> list[Rule]:
    """The rules named by ``ids`` (all of them by default), in the registry's order."""
    wanted = RULE_IDS if ids is None else ids
    for rule_id in wanted:
        if rule_id not in RULE_IDS:
            create(rule_id)
    return [cls() for cls in RULE_CLASSES if cls.id in wanted]


__all__ = [
    "RULE_CLASSES",
    "RULE_IDS",
    "Location",
    "PatternRule",
    "Rule",
    "RuleError",
    "StructuralRule",
    "all_rules",
    "create",
]
