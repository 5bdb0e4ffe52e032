"""Fusions that clean a graph straight from an exporter: BatchNorm, per-channel Mul and Add into Conv.

Conv+BatchNorm is ``onnxscript``'s own rule; Conv+Mul and Conv+Add are ``onnxscript`` pattern rules
written here (onnxscript's affine fusion takes scalars only; exporters emit per-channel constants).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter.pattern import RewriteRuleClassBase
from onnxscript.rewriter.rules.common import fuse_batchnorm_into_conv_rule

from rlcompile.graph import onnx_graph
from rlcompile.graph.rules.base import PatternRule
from rlcompile.graph.rules.operands import channel_vector, conv_bias


class _ConvThenChannelConstant(RewriteRuleClassBase):
    """Conv followed by ``op_type`` with a per-channel constant, folded into the Conv's weights."""

    op_type: ClassVar[str]

    def pattern(self, op, x, w, c):
        conv = op.Conv(x, w, _allow_other_inputs=True, _allow_other_attributes=True, _outputs=["conv_out"])
        return getattr(op, self.op_type)(conv, c)

    def check(self, context, x, w, c, conv_out, **_) -> MatchResult:
        result = MatchResult()
        weights = onnx_graph.constant_array(w)
        if weights is None:
            return result.fail("Conv weights are not constant")
        if len(conv_out.uses()) != 1 or conv_out.is_graph_output():
            return result.fail("Conv output has other uses")
        if conv_bias(conv_out.producer(), weights.shape[0], weights.dtype) is None:
            return result.fail("Conv bias is not constant")
        if channel_vector(onnx_graph.constant_array(c), weights.shape[0], weights.ndim) is None:
            return result.fail("operand is not a per-channel constant")
        return result

    def rewrite(self, op, x, w, c, conv_out, **_):
        conv = conv_out.producer()
        weights = onnx_graph.constant_array(w)
        bias = conv_bias(conv, weights.shape[0], weights.dtype)
        vector = channel_vector(onnx_graph.constant_array(c), weights.shape[0], weights.ndim)
        weights, bias = self.fold(weights, bias, vector)
        return op.Conv(
            x,
            op.initializer(ir.tensor(weights.astype(vector.dtype)), f"{w.name}_fused"),
            op.initializer(ir.tensor(bias.astype(vector.dtype)), f"{w.name}_fused_bias"),
            **conv.attributes,
        )

    def fold(self, weights: np.ndarray, bias: np.ndarray, vector: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


class ConvMulFusion(_ConvThenChannelConstant):
    op_type = "Mul"

    def fold(self, weights, bias, vector):
        return weights * vector.reshape((-1,) + (1,) * (weights.ndim - 1)), bias * vector


class ConvAddFusion(_ConvThenChannelConstant):
    op_type = "Add"

    def fold(self, weights, bias, vector):
        return weights, bias + vector


class FuseConvBatchNorm(PatternRule):
    id = "fuse_conv_batchnorm"
    description = "Conv -> BatchNormalization becomes one Conv with scaled weights and bias"

    def __init__(self) -> None:
        super().__init__(fuse_batchnorm_into_conv_rule)


class FuseConvMul(PatternRule):
    id = "fuse_conv_mul"
    description = "Conv -> Mul by a per-channel constant becomes one Conv with scaled weights"

    def __init__(self) -> None:
        super().__init__(ConvMulFusion.rule())


class FuseConvAdd(PatternRule):
    id = "fuse_conv_add"
    description = "Conv -> Add of a per-channel constant becomes one Conv with a new bias"

    def __init__(self) -> None:
        super().__init__(ConvAddFusion.rule())
