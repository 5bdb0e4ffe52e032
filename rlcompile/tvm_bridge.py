"""The bridge to Apache TVM shared by the TVM runtime and the kernel level.

It resolves the user's ``--target`` into a TVM target tuned to this host (cores, CPU name so LLVM
emits the right vector instructions), imports ONNX models into Relax with one-line errors, and fixes
TVM's thread count to the host's cores before TVM's thread pool starts.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import platform
import sys
import warnings

import onnx

from rlcompile.errors import ModelError, TargetError, UnsupportedOperatorError, first_line
from rlcompile.machine import cpu_flags, host_cores, isa_class

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


def target_isa(target: tvm.target.Target, flags: frozenset[str] | None = None) -> str:
    """The vector-ISA class of the code ``target`` makes: ``avx512``, ``avx2`` or ``generic`` for CPU targets
    (from the features LLVM enables for its ``mcpu``/``mattr``, and only those this CPU has: a Zen 4 tuning for
    ``{"kind": "llvm", "mcpu": "znver3"}`` makes AVX2 kernels), the target's kind for the others. ``flags``:
    the CPU's that runs the kernels (this one's when None).

    What a kernel cost model learns transfers within one class, so the pretrained prior, the work directory's
    records and the blocked layouts follow the target, not the machine the tuning happens to run on.
    """
    if target.kind.name != "llvm":
        return target.kind.name
    from tvm.target import codegen

    return isa_class(frozenset(codegen.llvm_get_cpu_features(target)) & (cpu_flags() if flags is None else flags))


#: Frames of ``inspect.stack()`` that TVMScript's parser reads source lines of (``is_defined_in_class``).
SOURCE_FRAMES = 3


def shallow_stack(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack()`` with source lines for the innermost frames only.

    TVMScript's ``@T.prim_func`` calls ``inspect.stack()`` and reads the code of the third frame; the
    stdlib version looks up every frame's source, and for frames without a module file (importlib's
    frozen ones) it scans all of ``sys.modules`` each time: importing TVM's tensor intrinsics (~500
    prim_funcs) took 30 s. Outer frames get their file, line and function but no source lines.
    """
    frame, frames = sys._getframe(1), []
    while frame is not None:
        if len(frames) < SOURCE_FRAMES:
            info = inspect.getframeinfo(frame, context)
            frames.append(inspect.FrameInfo(frame, *info, positions=info.positions))
        else:
            code = frame.f_code
            frames.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None))
        frame = frame.f_back
    return frames


@contextlib.contextmanager
def fast_tvmscript_parsing():
    """Parse TVMScript with :func:`shallow_stack` in place of ``inspect.stack`` (restored afterwards)."""
    original = inspect.stack
    inspect.stack = shallow_stack
    try:
        yield
    finally:
        inspect.stack = original


#: TVM's tensor intrinsic modules, what ``tvm.s_tir.tensor_intrin`` imports (metal's only where dlight asks).
INTRINSIC_PACKAGE = "tvm.s_tir.tensor_intrin"
ALL_INTRINSICS = ("cuda", "arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu")
#: The intrinsics a target's MetaSchedule rules can name: by target kind, and for ``llvm`` by CPU family.
INTRINSICS_BY_KIND = {"cuda": ("cuda",), "rocm": ("rocm",), "hexagon": ("hexagon",)}
INTRINSICS_BY_CPU = {"x86": ("x86",), "i686": ("x86",), "amd64": ("x86",), "AMD64": ("x86",),
                     "aarch64": ("arm_cpu",), "arm": ("arm_cpu",), "riscv": ("riscv_cpu",)}  # fmt: skip


def intrinsics_for(target: tvm.target.Target | None) -> tuple[str, ...]:
    """The intrinsic modules ``target``'s design spaces need; all of them for a target not recognised."""
    if target is None:
        return ALL_INTRINSICS
    kind = target.kind.name
    if kind != "llvm":
        return INTRINSICS_BY_KIND.get(kind, ALL_INTRINSICS)
    triple = str(target.attrs.get("mtriple", "") or "") or platform.machine()
    return next((modules for prefix, modules in INTRINSICS_BY_CPU.items() if triple.startswith(prefix)), ALL_INTRINSICS)


def load_tensor_intrinsics(target: tvm.target.Target | None = None) -> None:
    """Register the tensor intrinsics ``target``'s MetaSchedule design spaces can name, parsed fast
    (:func:`fast_tvmscript_parsing`).

    TVM's package imports every family's (CUDA's alone took 12 of 16 s on a slow 2-core VM; x86's 0.3 s), so the
    package is entered without running its ``__init__`` and only the target's modules are imported; the import
    MetaSchedule's ``TuneContext`` makes then finds the package and adds nothing. Another target later imports its
    own modules the same way.
    """
    if INTRINSIC_PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(INTRINSIC_PACKAGE)
        package = importlib.util.module_from_spec(spec)  # its __init__ is not run
        sys.modules[INTRINSIC_PACKAGE] = package
    with fast_tvmscript_parsing():
        for name in intrinsics_for(target):
            importlib.import_module(f"{INTRINSIC_PACKAGE}.{name}")


def module_key(mod: tvm.IRModule) -> str:
    """A module's structural hash as 16 hex digits: the identity of a task or a schedule across runs."""
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(mod) & (2**64 - 1):016x}"


def target_device(target: tvm.target.Target) -> tvm.runtime.Device:
    return tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)


def import_onnx(proto: onnx.ModelProto, name: str) -> tvm.IRModule:
    """Import into Relax with the graph's static input shapes; unsupported operators become a one-line error.

    ``proto`` must have constant shapes (a model that computes shapes at run time is folded first:
    :meth:`rlcompile.models.LoadedModel.static_proto`).
    """
    from onnx import helper
    from tvm.relax.frontend.onnx import from_onnx

    initializers = {init.name for init in proto.graph.initializer}
    values = [value for value in proto.graph.input if value.name not in initializers]
    shapes = {value.name: [int(d.dim_value) for d in value.type.tensor_type.shape.dim] for value in values}
    dtypes = {value.name: str(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)) for value in values}
    try:
        with warnings.catch_warnings():
            # the frontend warns for every value name it sanitises ("Renaming name a.b to a_b")
            warnings.filterwarnings("ignore", message="Renaming name", category=UserWarning)
            return from_onnx(proto, shape_dict=shapes, dtype_dict=dtypes)
    except tvm.error.OpNotImplemented as error:
        raise UnsupportedOperatorError(f"TVM cannot import {name}: {first_line(error)}") from None
    except Exception as error:
        raise ModelError(f"TVM cannot import {name}: {first_line(error)}") from None
