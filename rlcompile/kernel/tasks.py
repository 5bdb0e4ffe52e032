"""Tuning tasks: the tensor programs of a model (or single layers) that the kernel level schedules.

A model is imported into Relax, legalised and fused by the "zero" pipeline, and MetaSchedule's task
extraction returns one task per distinct fused PrimFunc, with its weight (how often the model calls
it). The eight layers the seeds evaluate (RELEASE/Chameleon, Table 2: L1-L8) are standalone conv2d
PrimFuncs with the shapes of the k-th distinct convolution of AlexNet, VGG-16 and ResNet-18 in graph
order, so they can be tuned on their own whatever the fusion does. The seeds give task indices but no
shapes; their ResNet-18 (TVM's pre-activation ``relay.testing`` model) has a 1x1 shortcut in the first
stage and so 12 distinct convolutions where ours (torchvision's) has 11, so L6-L8 here are the 6th, 9th
and 11th of ours: the rule is reproducible, the shapes may differ from the authors'.
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import onnx

from rlcompile import atomic
from rlcompile.errors import RlcompileError, RlcompileWarning, check_choice, first_line
from rlcompile.models import LoadedModel, zoo
from rlcompile.models.onnx_model import static_shapes
from rlcompile.names import LAYOUTS
from rlcompile.tvm_bridge import import_onnx, load_tensor_intrinsics, module_key, tvm

#: The seeds' layers: name -> (zoo model, 1-based index among its distinct convolutions in graph order).
SEED_LAYERS: dict[str, tuple[str, int]] = {
    "L1": ("alexnet", 1), "L2": ("alexnet", 4),
    "L3": ("vgg16", 1), "L4": ("vgg16", 2), "L5": ("vgg16", 4),
    "L6": ("resnet18", 6), "L7": ("resnet18", 9), "L8": ("resnet18", 11),
}  # fmt: skip


@dataclass(frozen=True)
class ConvShape:
    """A 2-D convolution workload (NCHW input, OIHW weight)."""

    batch: int
    in_channels: int
    height: int
    width: int
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1

    def label(self) -> str:
        kind = "dwconv2d" if self.groups == self.in_channels > 1 else "conv2d"
        groups = f" g{self.groups}" if 1 < self.groups < self.in_channels else ""
        kernel = f"{self.kernel[0]}" if self.kernel[0] == self.kernel[1] else f"{self.kernel[0]}x{self.kernel[1]}"
        return (f"{kind} {self.in_channels}x{self.height}x{self.width}->{self.out_channels} "
                f"k{kernel} s{self.stride[0]}{groups}")  # fmt: skip

    def prim_func_module(self) -> tvm.IRModule:
        """A standalone conv2d PrimFunc with these shapes (TOPI's NCHW compute definition)."""
        from tvm import te, topi

        data = te.placeholder((self.batch, self.in_channels, self.height, self.width), name="data")
        weight = te.placeholder((self.out_channels, self.in_channels // self.groups, *self.kernel), name="weight")
        if self.groups == 1:
            output = topi.nn.conv2d_nchw(data, weight, self.stride, self.padding, self.dilation)
        else:
            output = topi.nn.group_conv2d_nchw(data, weight, self.stride, self.padding, self.dilation, self.groups)
        return tvm.IRModule({"main": te.create_prim_func([data, weight, output])})


@dataclass
class Task:
    """One tensor program to tune."""

    name: str
    label: str
    mod: tvm.IRModule
    target: tvm.target.Target
    weight: int = 1
    source: str = ""
    extra: dict = field(default_factory=dict)

    @cached_property
    def flops(self) -> float:
        from tvm.s_tir.analysis import estimate_tir_flops

        return float(estimate_tir_flops(self.mod))

    @cached_property
    def workload_key(self) -> str:
        """Structural hash of the program: identifies the task in the database across runs."""
        return module_key(self.mod)


def conv_shapes(proto: onnx.ModelProto) -> list[ConvShape]:
    """Distinct Conv workloads of an ONNX graph, in graph order (shapes from ONNX shape inference)."""
    shapes = static_shapes(proto)
    found: list[ConvShape] = []
    for node in proto.graph.node:
        if node.op_type != "Conv" or node.input[0] not in shapes or node.input[1] not in shapes:
            continue  # a convolution of an unknown shape is no workload
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        batch, channels, height, width = shapes[node.input[0]]
        weight = shapes[node.input[1]]
        pads = tuple(attributes.get("pads", [0, 0, 0, 0]))
        conv = ConvShape(
            batch, channels, height, width, weight[0], (weight[2], weight[3]),
            tuple(attributes.get("strides", [1, 1])), (pads[0], pads[1], pads[2], pads[3]),
            tuple(attributes.get("dilations", [1, 1])), int(attributes.get("group", 1)),
        )  # fmt: skip
        if conv not in found:
            found.append(conv)
    return found


@functools.cache
def zoo_conv_shapes(model_name: str) -> tuple[ConvShape, ...]:
    """Distinct convolutions of a zoo model, in the order they run (:func:`rlcompile.models.zoo.conv_layers`: those
    of its ONNX graph, read without exporting it)."""
    return tuple(ConvShape(**{key: tuple(value) if isinstance(value, list) else value for key, value in conv.items()})
                 for conv in zoo.conv_layers(model_name))  # fmt: skip


def seed_layer(name: str, target: tvm.target.Target) -> Task:
    """One of the seeds' layers L1-L8 as a standalone task."""
    if name not in SEED_LAYERS:
        raise RlcompileError(f"unknown layer {name!r}; the seed layers are {', '.join(SEED_LAYERS)}")
    model_name, ordinal = SEED_LAYERS[name]
    conv = zoo_conv_shapes(model_name)[ordinal - 1]
    return Task(name=name, label=conv.label(), mod=conv.prim_func_module(), target=target,
                source=f"{model_name} conv {ordinal}")  # fmt: skip


def automatic_layout(proto: onnx.ModelProto) -> str:
    """``--layout auto``: ``nchwc`` for a model with convolutions, none of them grouped; else ``nchw``.

    Measured when Relax blocked only dense convolutions: a MobileNet then paid two layout transforms (and an
    unfused ReLU6) per block and ran slower than NCHW throughout. Depthwise convolutions and ReLU6 are blocked
    now (:func:`conv_layouts`, :func:`clip_as_min_max`), not yet measured against NCHW: grouped models stay
    NCHW until they are.
    """
    convolutions = [node for node in proto.graph.node if node.op_type == "Conv"]
    grouped = any(attribute.name == "group" and attribute.i > 1 for node in convolutions
                  for attribute in node.attribute)  # fmt: skip
    return "nchwc" if convolutions and not grouped else "nchw"


def blocked_layout(target: tvm.target.Target) -> tuple[str, str]:
    """The (data, weight) layouts of ``nchwc`` on ``target``: one channel block fills a vector register of fp32
    (NCHW16c with AVX-512, NCHW8c with AVX2), the layout the libraries keep between their own convolutions.

    Relax's ``ConvertLayout`` converts each dense convolution (:func:`conv_layouts`: a 3-channel stem reads
    NCHW3c and writes the block, 24 channels take NCHW8c, a depthwise convolution stays in its input's block;
    other grouped ones keep NCHW) and carries the layout through the element-wise and pooling operators after
    it (a ReLU6's clip is rewritten as maximum and minimum for that), so a layout transform is paid where a
    blocked run starts and ends, not per operator.
    """
    block = vector_block(target)
    return f"NCHW{block}c", f"OIHW{block}i{block}o"


def vector_block(target: tvm.target.Target) -> int:
    """How many fp32 channels fill one vector register on ``target`` (16 with AVX-512, 8 with AVX2, else 4)."""
    if target.kind.name != "llvm":
        raise RlcompileError(f"--layout nchwc is for CPU targets; {target.kind.name} keeps nchw")
    from rlcompile.tvm_bridge import target_isa

    return {"avx512": 16, "avx2": 8}.get(target_isa(target), 4)


def prepare_relax(model: LoadedModel, layout: str = "nchw", target: tvm.target.Target | None = None) -> tvm.IRModule:
    """Import and fold batch norms into the preceding convolutions, in ``layout`` (what both tuning and building
    see). The weights' layout transforms are folded into the constants: a blocked weight costs nothing at run
    time. A model the blocking passes fail on stays NCHW, with a warning (the same at tuning and build time)."""
    check_choice("layout", layout, LAYOUTS)
    module = import_onnx(model.static_proto(), model.name)
    module = tvm.transform.Sequential([tvm.relax.transform.FoldBatchnormToConv2D(),
                                       tvm.relax.transform.FoldConstant()])(module)  # fmt: skip
    if layout == "nchw":
        return module
    try:
        return blocked(module, target or tvm.target.Target("llvm"))
    except Exception as error:  # a TVM pass failing on an operator it does not know: keep what works
        warnings.warn(f"{model.name}: the convolutions stay NCHW, TVM cannot block them: {first_line(error)}",
                      RlcompileWarning, stacklevel=2)  # fmt: skip
        return module


def channel_block(channels: int, block: int) -> int | None:
    """The channel block of a convolution tensor with ``channels`` channels: the vector width when it divides
    them; all of them when they are fewer (a 3-channel image is one block, so the stem reads NCHW3c and writes
    the vector width); else the largest power of two from 4 up that divides them (24 channels: 8); else none."""
    if channels % block == 0:
        return block
    if channels < block:
        return channels
    power = block // 2
    while power >= 4 and channels % power:
        power //= 2
    return power if power >= 4 else None


def conv_layouts(call, block: int) -> dict[str, list[str]]:
    """``ConvertLayout``'s callback: the blocked (data, weight, output) layouts of one convolution, its input
    and output channels blocked by :func:`channel_block`. A depthwise convolution keeps its channels' block
    through (weights ``OIHW1i{b}o``, TOPI's ``depthwise_conv2d_NCHWc``); other grouped convolutions and
    channel counts no block fits keep NCHW."""
    if getattr(call.op, "name", "") != "relax.nn.conv2d":
        return {}
    weight = call.args[1].ty.shape
    out_channels, in_channels, groups = int(weight[0]), int(weight[1]) * call.attrs.groups, call.attrs.groups
    data_block, out_block = channel_block(in_channels, block), channel_block(out_channels, block)
    if data_block is None or out_block is None:
        return {"relax.nn.conv2d": ["NCHW", "OIHW"]}
    if groups != 1:
        if groups != in_channels or out_channels != in_channels:
            return {"relax.nn.conv2d": ["NCHW", "OIHW"]}
        return {"relax.nn.conv2d": [f"NCHW{data_block}c", f"OIHW1i{data_block}o", f"NCHW{data_block}c"]}
    return {"relax.nn.conv2d": [f"NCHW{data_block}c", f"OIHW{data_block}i{out_block}o", f"NCHW{out_block}c"]}


def clip_as_min_max(module: tvm.IRModule) -> tvm.IRModule:
    """Every ``clip(x, lo, hi)`` as ``minimum(maximum(x, lo), hi)``: ``ConvertLayout`` carries a blocked layout
    through the element-wise maximum and minimum, where a clip (a ReLU6) would be wrapped in two transforms."""
    relax = tvm.relax

    @relax.expr_functor.mutator
    class ClipAsMinMax(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.clip":
                return call
            dtype = call.args[0].ty.dtype
            low, high = (relax.const(float(bound.value), dtype) for bound in call.args[1:3])
            return relax.op.minimum(relax.op.maximum(call.args[0], low), high)

    mutator = ClipAsMinMax(module)
    for name, function in module.functions.items():
        if isinstance(function, relax.Function):
            module[name] = mutator.visit_expr(function)
    return module


def blocked(module: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """``module`` with its convolutions in :func:`blocked_layout` (the stem's 3 input channels as one block,
    :func:`conv_layouts`) and every operator lowered to TIR."""
    data, weight = blocked_layout(target)
    block = vector_block(target)
    module = clip_as_min_max(module)
    passes = [tvm.relax.transform.ConvertLayout({"relax.nn.conv2d": [data, weight]},
                                                layout_cb=lambda call: conv_layouts(call, block)),
              # two branches that read one NCHW tensor (a residual block's) would each block it again
              tvm.relax.transform.EliminateCommonSubexpr(),
              tvm.relax.transform.FoldConstant(),
              tvm.relax.transform.LegalizeOps({"relax.nn.conv2d": legalize_conv2d})]  # fmt: skip
    with target:  # TOPI's NCHWc convolution reads the target
        return tvm.transform.Sequential(passes)(module)


def legalize_conv2d(builder, call):
    """Relax's own lowering of conv2d, and TOPI's ``conv2d_NCHWc`` for the blocked ones it leaves alone
    (Relax legalises only 4-letter layouts); the "zero" pipeline then finds every operator lowered."""
    from tvm import topi
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    attrs = call.attrs
    if len(attrs.data_layout) == 4 and len(attrs.kernel_layout) == 4:
        return _nn_conv2d(builder, call)
    if attrs.groups != 1:
        return builder.call_te(depthwise_conv2d_nchwc, call.args[0], call.args[1], attrs.strides, attrs.padding,
                               attrs.dilation, primfunc_name_hint="depthwise_conv2d_NCHWc")  # fmt: skip
    return builder.call_te(topi.nn.conv2d_NCHWc, call.args[0], call.args[1], attrs.strides, attrs.padding,
                           attrs.dilation, attrs.data_layout, attrs.out_layout, call.ty.dtype,
                           primfunc_name_hint="conv2d_NCHWc")  # fmt: skip


def depthwise_conv2d_nchwc(data, kernel, strides, padding, dilation):
    """A depthwise convolution in NCHW{c}c (weights ``(C/c, 1, kh, kw, 1, c)``, multiplier 1) as a TE compute:
    TVM 0.27's ``topi.nn.depthwise_conv2d_NCHWc`` is an unregistered stub. ``padding`` is (top, left, bottom,
    right), as Relax gives it."""
    from tvm import te, topi

    batch, chunks, height, width, block = data.shape
    _, _, kernel_h, kernel_w, _, _ = kernel.shape
    (stride_h, stride_w), (dilation_h, dilation_w) = strides, dilation
    top, left, bottom, right = padding
    padded = topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name="padded")
    out_h = (height + top + bottom - dilation_h * (kernel_h - 1) - 1) // stride_h + 1
    out_w = (width + left + right - dilation_w * (kernel_w - 1) - 1) // stride_w + 1
    rh, rw = te.reduce_axis((0, kernel_h), "rh"), te.reduce_axis((0, kernel_w), "rw")
    return te.compute(
        (batch, chunks, out_h, out_w, block),
        lambda n, c, h, w, b: te.sum(padded[n, c, h * stride_h + rh * dilation_h, w * stride_w + rw * dilation_w, b]
                                     * kernel[c, 0, rh, rw, 0, b], axis=[rh, rw]),
        name="depthwise_conv2d_NCHWc",
    )  # fmt: skip


def relax_for_tuning(module: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """The "zero" pipeline (legalise + fuse): the same fusion ``compile_relax`` applies when building,
    so the database keys of tuned tasks match at build time."""
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.relax.get_pipeline("zero")(module)


def extract_tasks(model: LoadedModel, target: tvm.target.Target, layout: str = "nchw") -> list[Task]:
    """The model's tunable tasks in ``layout``, heaviest first by total FLOPs (weight x FLOPs per call)."""
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks as ms_extract_tasks

    load_tensor_intrinsics(target)
    extracted = ms_extract_tasks(relax_for_tuning(prepare_relax(model, layout, target), target), target)
    tasks = [
        Task(
            name=item.task_name,
            label=describe_prim_func(item.task_name, item.dispatched[0]),
            mod=item.dispatched[0],
            target=target,
            weight=int(item.weight),
            source=model.name,
        )
        for item in extracted
    ]
    tasks.sort(key=lambda task: -task.weight * task.flops)
    return tasks


def extract_tasks_cached(model: LoadedModel, target: tvm.target.Target, cache: Path,
                         layout: str = "nchw") -> list[Task]:  # fmt: skip
    """:func:`extract_tasks`, saved to ``cache`` as soon as it exists and read back by the next run of the same
    model and target (import and extraction take seconds to minutes; reading them back, a tenth of a second).
    """
    import hashlib

    key = {"model": hashlib.sha256(model.serialized).hexdigest(), "target": str(target)}
    if layout != "nchw":
        key["layout"] = layout  # an nchw cache written before layouts existed stays valid
    try:
        saved = json.loads(cache.read_text()) if cache.exists() else {}
    except (OSError, ValueError):
        saved = {}
    if saved.get("key") == key:
        return [Task(name=item["name"], label=item["label"], mod=tvm.ir.load_json(item["mod"]), target=target,
                     weight=item["weight"], source=item["source"]) for item in saved["tasks"]]  # fmt: skip
    tasks = extract_tasks(model, target, layout)
    entries = [{"name": task.name, "label": task.label, "weight": task.weight, "source": task.source,
                "mod": tvm.ir.save_json(task.mod)} for task in tasks]  # fmt: skip
    atomic.write_json(cache, {"key": key, "tasks": entries})
    return tasks


def param_shapes(mod: tvm.IRModule) -> list[list[int]]:
    """The shapes of the PrimFunc's tensor parameters, in order (inputs, then the output)."""
    func = next(iter(mod.functions.values()))
    return [[int(d) for d in param.shape] for param in func.params if getattr(param, "shape", None) is not None]


def unblocked(shape: list[int]) -> list[int]:
    """A blocked convolution tensor's shape as the ONNX graph has it: NCHWc data ``(n, C/c, h, w, c)`` -> NCHW,
    OIHWio weights ``(O/o, I/i, kh, kw, i, o)`` -> OIHW (``--layout nchwc``); any other shape as it is."""
    if len(shape) == 5:
        return [shape[0], shape[1] * shape[4], shape[2], shape[3]]
    if len(shape) == 6:
        return [shape[0] * shape[5], shape[1] * shape[4], shape[2], shape[3]]
    return list(shape)


def describe_prim_func(task_name: str, mod: tvm.IRModule) -> str:
    """A readable label such as ``conv2d 64x56x56->64 k3 s1`` or ``matmul 1x512x1000``."""
    shapes = param_shapes(mod)
    kind = task_name.removeprefix("fused_")
    if "conv2d" in kind:
        shapes = [unblocked(shape) for shape in shapes]
    if "conv2d" in kind and len(shapes) >= 2 and len(shapes[0]) == 4 and len(shapes[1]) == 4:
        (_, channels, height, width), weight, output = shapes[0], shapes[1], shapes[-1]
        stride = max(1, round(height / output[2])) if len(output) == 4 and output[2] else 1
        groups = channels // weight[1] if weight[1] else 1
        prefix = "dwconv2d" if groups == channels > 1 else "conv2d"
        return f"{prefix} {channels}x{height}x{width}->{weight[0]} k{weight[2]} s{stride} ({kind})"
    if ("matmul" in kind or "dense" in kind) and len(shapes) >= 2:
        rows = math.prod(shapes[0][:-1])
        return f"matmul {rows}x{shapes[0][-1]}x{shapes[-1][-1]} ({kind})"
    output = "x".join(map(str, shapes[-1])) if shapes else "?"
    return f"{kind} -> {output}"
