"""The bridge to Apache TVM shared by the TVM backend and the kernel level.

It resolves the user's ``--target`` into a TVM target tuned to this host (cores, CPU name so LLVM
emits the right vector instructions), imports ONNX models into Relax with one-line errors, and fixes
TVM's thread count to the host's cores before TVM's thread pool starts.
"""

from __future__ import annotations

import os

from rlcompile.errors import ModelError, TargetError, UnsupportedOperatorError
from rlcompile.measure import host_cores
from rlcompile.models import LoadedModel
from rlcompile.models.onnx_model import first_line

# TVM reads this once, when its thread pool first starts; threads = cores unless the user says otherwise.
os.environ.setdefault("TVM_NUM_THREADS", str(host_cores()))

import tvm

#: Target kinds rlcompile can run locally.
SUPPORTED_KINDS = ("llvm", "cuda")


def tvm_threads() -> int:
    return int(os.environ["TVM_NUM_THREADS"])


def resolve_target(text: str = "llvm") -> tvm.target.Target:
    """``llvm`` -> this CPU with its cores; ``cuda`` -> the local GPU; else any TVM target string/JSON.

    Raises :class:`TargetError` for unknown targets, kinds rlcompile cannot run, or a missing GPU.
    """
    if text == "llvm":
        from tvm.target import codegen

        return tvm.target.Target({"kind": "llvm", "num-cores": tvm_threads(), "mcpu": codegen.llvm_get_system_cpu()})
    if text == "cuda":
        if not tvm.cuda(0).exist:
            raise TargetError("target cuda needs an NVIDIA GPU and none is visible on this machine")
        return tvm.target.Target.from_device(tvm.cuda(0))
    try:
        target = tvm.target.Target(text)
    except Exception as error:
        raise TargetError(f"unknown target {text!r}: {first_line(error)}") from None
    if target.kind.name not in SUPPORTED_KINDS:
        raise TargetError(f"target kind {target.kind.name!r} is not supported; use one of {SUPPORTED_KINDS}")
    if target.kind.name == "cuda" and not tvm.cuda(0).exist:
        raise TargetError("target cuda needs an NVIDIA GPU and none is visible on this machine")
    return target


def target_device(target: tvm.target.Target) -> tvm.runtime.Device:
    return tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)


def import_onnx(model: LoadedModel) -> tvm.IRModule:
    """Import into Relax with static shapes; unsupported operators become a one-line error."""
    from tvm.relax.frontend.onnx import from_onnx

    shapes = {spec.name: [int(d) for d in spec.shape] for spec in model.inputs}
    dtypes = {spec.name: str(spec.dtype) for spec in model.inputs}
    try:
        return from_onnx(model.proto, shape_dict=shapes, dtype_dict=dtypes)
    except tvm.error.OpNotImplemented as error:
        raise UnsupportedOperatorError(f"TVM cannot import {model.name}: {first_line(error)}") from None
    except Exception as error:
        raise ModelError(f"TVM cannot import {model.name}: {first_line(error)}") from None
