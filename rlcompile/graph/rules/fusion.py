"""Fusions that clean a graph straight from an exporter: BatchNorm, per-channel Mul and Add into the Conv
or ConvTranspose before them.

Exporters differ: PyTorch writes Conv -> BatchNormalization, Paddle2ONNX a bias-less Conv or ConvTranspose,
an ``Add`` of the bias, then BatchNormalization, tf2onnx BatchNorm decomposed into a per-channel ``Mul`` and
``Add``. Applied exhaustively, these rules fold all of them. Conv+BatchNorm and ConvTranspose+BatchNorm are
``onnxscript``'s own rules; the Mul and Add fusions are ``onnxscript`` pattern rules written here
(onnxscript's affine fusion takes scalars only; exporters emit per-channel constants).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter.pattern import RewriteRuleClassBase
from onnxscript.rewriter.rules.common import fuse_batchnorm_into_conv_rule
from onnxscript.rewriter.rules.common._fuse_batchnorm import FuseBatchNormIntoConvTranspose

from rlcompile.graph import onnx_graph
from rlcompile.graph.rules.base import PatternRule
from rlcompile.graph.rules.operands import channel_vector, conv_bias


class _ConvThenChannelConstant(RewriteRuleClassBase):
    """``inbound`` (Conv or ConvTranspose) followed by ``op_type`` with a per-channel constant, folded into its
    weights and bias. A Conv's weights are (out, in / group, k...): output channels on axis 0; a
    ConvTranspose's are (in, out / group, k...): on axis 1, and only an ungrouped one is folded."""

    op_type: ClassVar[str]
    inbound: ClassVar[str] = "Conv"

    @property
    def axis(self) -> int:
        return 0 if self.inbound == "Conv" else 1

    def pattern(self, op, x, w, c):
        conv = getattr(op, self.inbound)(x, w, _allow_other_inputs=True, _allow_other_attributes=True,
                                         _outputs=["conv_out"])  # fmt: skip
        return getattr(op, self.op_type)(conv, c)

    def check(self, context, x, w, c, conv_out, **_) -> MatchResult:
        result = MatchResult()
        weights = onnx_graph.constant_array(w)
        if weights is None or weights.ndim < 3:
            return result.fail(f"{self.inbound} weights are not constant")
        conv = conv_out.producer()
        if self.axis == 1 and conv.attributes.get_int("group", 1) != 1:
            return result.fail("a grouped ConvTranspose is not folded")
        if len(conv_out.uses()) != 1 or conv_out.is_graph_output():
            return result.fail(f"{self.inbound} output has other uses")
        channels = weights.shape[self.axis]
        if conv_bias(conv, channels, weights.dtype) is None:
            return result.fail(f"{self.inbound} bias is not constant")
        if channel_vector(onnx_graph.constant_array(c), channels, weights.ndim) is None:
            return result.fail("operand is not a per-channel constant")
        return result

    def rewrite(self, op, x, w, c, conv_out, **_):
        conv = conv_out.producer()
        weights = onnx_graph.constant_array(w)
        channels = weights.shape[self.axis]
        bias = conv_bias(conv, channels, weights.dtype)
        vector = channel_vector(onnx_graph.constant_array(c), channels, weights.ndim)
        weights, bias = self.fold(weights, bias, vector)
        return getattr(op, self.inbound)(
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
        shape = [1] * weights.ndim
        shape[self.axis] = -1
        return weights * vector.reshape(shape), bias * vector


class ConvAddFusion(_ConvThenChannelConstant):
    op_type = "Add"

    def fold(self, weights, bias, vector):
        return weights, bias + vector


class ConvTransposeMulFusion(ConvMulFusion):
    inbound = "ConvTranspose"


class ConvTransposeAddFusion(ConvAddFusion):
    inbound = "ConvTranspose"


class UngroupedConvTransposeBatchNorm(FuseBatchNormIntoConvTranspose):
    """onnxscript's rule, for an ungrouped ConvTranspose only (it scales weight axis 1 by all output channels)."""

    def check(self, context, x, inbound_out, batchnorm_out) -> MatchResult:
        if inbound_out.producer().attributes.get_int("group", 1) != 1:
            return MatchResult().fail("a grouped ConvTranspose is not folded")
        return super().check(context, x, inbound_out, batchnorm_out)


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


class FuseConvTransposeBatchNorm(PatternRule):
    id = "fuse_convtranspose_batchnorm"
    description = "ConvTranspose -> BatchNormalization becomes one ConvTranspose with scaled weights and bias"

    def __init__(self) -> None:
        super().__init__(UngroupedConvTransposeBatchNorm.rule())


class FuseConvTransposeMul(PatternRule):
    id = "fuse_convtranspose_mul"
    description = "ConvTranspose -> Mul by a per-channel constant becomes one ConvTranspose with scaled weights"

    def __init__(self) -> None:
        super().__init__(ConvTransposeMulFusion.rule())


class FuseConvTransposeAdd(PatternRule):
    id = "fuse_convtranspose_add"
    description = "ConvTranspose -> Add of a per-channel constant becomes one ConvTranspose with a new bias"

    def __init__(self) -> None:
        super().__init__(ConvTransposeAddFusion.rule())
