"""int8 per fusion group, as QDQ nodes inside the one model: ONNX Runtime's static quantizer, calibrated once.

The activations' ranges are computed once on the calibration samples (ONNX Runtime's MinMax calibrator,
kept in a cache file); every plan then quantizes only the nodes of its int8 groups from that cache, so a
search can try many plans without calibrating again. Only the operators in :data:`QUANTIZED_OPS` are
quantized, whatever else ``nodes`` names (see :mod:`rlcompile.layer.precision.space` for why). Weights
are per-channel int8 (symmetric), activations uint8; on an x86 CPU without VNNI the weights keep 7 bits
(``reduce_range``), as ONNX Runtime advises against saturation. Both ONNX Runtime and OpenVINO run the
QDQ model (each fuses DequantizeLinear -> Conv/MatMul -> QuantizeLinear into an int8 kernel), so a mixed
plan pays no library boundary.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import onnx

from rlcompile.errors import ModelError, first_line
from rlcompile.machine import cpu_flags

#: The operators whose int8 kernels make the speed (a group is a choice when it has one).
QUANTIZED_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
#: Per-channel QuantizeLinear/DequantizeLinear (their ``axis``) exist from this ONNX opset on.
PER_CHANNEL_OPSET = 13


def with_per_channel_opset(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model at opset 13 at least (older exports, e.g. Paddle's opset 11/12, cannot hold per-channel QDQ;
    ONNX Runtime's quantizer writes it anyway and the result does not load), converted by onnx's converter."""
    version = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), PER_CHANNEL_OPSET)
    if version >= PER_CHANNEL_OPSET:
        return proto
    from onnx import version_converter

    try:
        return version_converter.convert_version(proto, PER_CHANNEL_OPSET)
    except Exception as error:  # the converter cannot take every graph: said in one line by the caller
        raise ModelError(f"cannot raise the model from opset {version} to {PER_CHANNEL_OPSET} for int8: "
                         f"{first_line(error)}") from None


def has_vnni() -> bool:
    """Whether this CPU has an 8-bit dot-product instruction (AVX512-VNNI, AVX-VNNI or AMX-INT8)."""
    return bool(cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"})


class SampleReader:
    """ONNX Runtime's calibration reader over a list of feeds."""

    def __init__(self, feeds: Sequence[dict[str, np.ndarray]]) -> None:
        self.feeds = list(feeds)
        self.index = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.index >= len(self.feeds):
            return None
        self.index += 1
        return self.feeds[self.index - 1]

    def __len__(self) -> int:
        return len(self.feeds)


class Quantizer:
    """QDQ models of one float model, any set of its nodes in int8, from one calibration."""

    def __init__(self, proto: onnx.ModelProto, calibration: Sequence[dict[str, np.ndarray]],
                 work: Path | None = None) -> None:  # fmt: skip
        self.original = proto
        #: why this model cannot be quantized (every int8 plan then fails with it), or None
        self.refusal: str | None = None
        try:
            self.proto = with_per_channel_opset(proto)
        except ModelError as error:
            self.proto, self.refusal = proto, str(error)
        self.calibration = list(calibration)
        self.temporary = tempfile.TemporaryDirectory(prefix="rlcompile-int8-") if work is None else None
        self.work = Path(work or self.temporary.name)
        self.work.mkdir(parents=True, exist_ok=True)
        self.cache = self.work / "calibration.json"
        self.source = self.work / "float.onnx"
        onnx.save(self.proto, str(self.source))
        self.models: dict[frozenset[str], onnx.ModelProto] = {}

    def quantized(self, nodes: Iterable[str]) -> onnx.ModelProto:
        """The model with ``nodes`` (ONNX node names) in int8; the float model when there are none."""
        key = frozenset(nodes)
        if not key:
            return self.original
        if key not in self.models:
            self.models[key] = self.quantize(sorted(key))
        return self.models[key]

    def quantize(self, nodes: list[str]) -> onnx.ModelProto:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        if self.refusal is not None:
            raise ModelError(self.refusal)
        target = self.work / "int8.onnx"
        quiet = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)  # ORT's advice to pre-process goes to the root logger
        try:
            quantize_static(str(self.source), str(target),
                            None if self.cache.is_file() else SampleReader(self.calibration),
                            quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=not has_vnni(),
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, nodes_to_quantize=nodes,
                            op_types_to_quantize=sorted(QUANTIZED_OPS),
                            calibrate_method=CalibrationMethod.MinMax, calibration_cache_path=str(self.cache),
                            extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})  # fmt: skip
        except Exception as error:  # the quantizer on a graph it cannot take: said in one line by the caller
            raise ModelError(f"ONNX Runtime's quantizer cannot quantize this model: {first_line(error)}") from None
        finally:
            logging.getLogger().setLevel(quiet)
        return onnx.load(str(target))

    def close(self) -> None:
        if self.temporary is not None:
            self.temporary.cleanup()
