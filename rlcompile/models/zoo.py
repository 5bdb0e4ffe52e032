"""The built-in model zoo: the seeds' evaluation networks, exported to ONNX once and cached.

Each entry builds a ``torch.nn`` module with seeded random weights (and random batch-norm statistics,
so that no two initializers are equal and the exporter keeps the graph as written), exports it with
static input shapes, and stores it under the cache directory (``$RLCOMPILE_CACHE`` or
``~/.cache/rlcompile``). The file name carries a fingerprint of everything that changes the export,
so a stale cache is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from rlcompile import atomic
from rlcompile.errors import ModelError
from rlcompile.models.onnx_model import MAX_IR_VERSION, TensorSpec

#: Bump when a definition or the export procedure changes: old cache entries are then ignored.
ZOO_VERSION = 2
OPSET = 17
SEED = 0


@dataclass(frozen=True)
class ZooEntry:
    """A zoo model: how to build it and the inputs it is exported with."""

    name: str
    description: str
    build: Callable[[], object]
    inputs: tuple[TensorSpec, ...]

    def fingerprint(self) -> str:
        import torch

        key = f"{ZOO_VERSION}|{self.name}|{torch.__version__}|{OPSET}|{SEED}|{self.inputs}"
        return hashlib.sha256(key.encode()).hexdigest()[:12]


def image_input(size: int, channels: int = 3) -> tuple[TensorSpec, ...]:
    return (TensorSpec("input", (1, channels, size, size), np.dtype(np.float32)),)


def token_inputs(sequence: int) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(n, (1, sequence), np.dtype(np.int64)) for n in ("input_ids", "attention_mask"))


def _cnn(class_name: str, *args: object) -> Callable[[], object]:
    def build() -> object:
        from rlcompile.models import cnn

        return getattr(cnn, class_name)(*args)

    return build


def _resnet(depths: list[int], block: str) -> Callable[[], object]:
    def build() -> object:
        from rlcompile.models import cnn

        return cnn.ResNet(getattr(cnn, block), depths)

    return build


def _vgg(name: str) -> Callable[[], object]:
    def build() -> object:
        from rlcompile.models import cnn

        return cnn.VGG(cnn.VGG_CONFIGS[name])

    return build


def _bert(config_name: str) -> Callable[[], object]:
    def build() -> object:
        from rlcompile.models import bert

        return bert.BertEncoder(getattr(bert, config_name))

    return build


ZOO: dict[str, ZooEntry] = {
    entry.name: entry
    for entry in (
        ZooEntry("lenet5", "LeNet-5 (QS-DNN)", _cnn("LeNet5"), image_input(32, channels=1)),
        ZooEntry("alexnet", "AlexNet (Chameleon, QS-DNN)", _cnn("AlexNet"), image_input(224)),
        ZooEntry("vgg16", "VGG-16 (Chameleon)", _vgg("vgg16"), image_input(224)),
        ZooEntry("vgg19", "VGG-19 (QS-DNN)", _vgg("vgg19"), image_input(224)),
        ZooEntry("resnet18", "ResNet-18 (Chameleon, thesis)", _resnet([2, 2, 2, 2], "BasicBlock"), image_input(224)),
        ZooEntry("resnet50", "ResNet-50 v1.5 (thesis)", _resnet([3, 4, 6, 3], "Bottleneck"), image_input(224)),
        ZooEntry("squeezenet1_1", "SqueezeNet 1.1 (QS-DNN, thesis)", _cnn("SqueezeNet11"), image_input(224)),
        ZooEntry("mobilenet_v1", "MobileNet v1 1.0 (QS-DNN)", _cnn("MobileNetV1"), image_input(224)),
        ZooEntry("mobilenet_v2", "MobileNet v2 1.0 (QS-DNN)", _cnn("MobileNetV2"), image_input(224)),
        ZooEntry("googlenet", "GoogLeNet / Inception v1 (QS-DNN)", _cnn("GoogLeNet"), image_input(224)),
        ZooEntry("inception_v3", "Inception v3 (thesis)", _cnn("InceptionV3"), image_input(299)),
        ZooEntry("bert", "BERT-base encoder, sequence 128 (thesis)", _bert("BERT_BASE"), token_inputs(128)),
        ZooEntry("bert_tiny", "BERT L2 H128 A2, sequence 128 (tests)", _bert("BERT_TINY"), token_inputs(128)),
    )
}  # fmt: skip


def cache_root() -> Path:
    """The tool's cache: ``$RLCOMPILE_CACHE``, else ``~/.cache/rlcompile``."""
    return Path(os.environ.get("RLCOMPILE_CACHE") or Path.home() / ".cache" / "rlcompile")


def cache_dir() -> Path:
    """Where exported models and their summaries are kept."""
    return cache_root() / "zoo"


def get_entry(name: str) -> ZooEntry:
    try:
        return ZOO[name]
    except KeyError:
        raise ModelError(f"unknown zoo model {name!r}; choose from: {', '.join(ZOO)}") from None


def build_module(entry: ZooEntry):  # -> torch.nn.Module
    """Instantiate the module with seeded weights and random batch-norm statistics, in eval mode."""
    import torch

    torch.manual_seed(SEED)
    module = entry.build()
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, torch.nn.BatchNorm2d):
                layer.weight.uniform_(0.5, 1.5)
                layer.bias.normal_(0.0, 0.1)
                layer.running_mean.normal_(0.0, 0.1)
                layer.running_var.uniform_(0.5, 1.5)
        for parameter in module.parameters():
            if parameter.dim() == 1 and bool((parameter == parameter[0]).all()):
                # constant vectors (zero biases, unit norms) would be de-duplicated by the exporter
                parameter.add_(torch.randn_like(parameter) * 0.02)
    return module.eval()


def example_inputs(entry: ZooEntry) -> tuple:
    import torch

    generator = torch.Generator().manual_seed(SEED)
    tensors = []
    for spec in entry.inputs:
        if np.issubdtype(spec.dtype, np.floating):
            tensors.append(torch.randn(spec.shape, generator=generator))
        else:
            tensors.append(torch.ones(spec.shape, dtype=torch.int64))
    return tuple(tensors)


def export_path(name: str) -> Path:
    """The cached ONNX file of a zoo model, exporting it first if needed."""
    entry = get_entry(name)
    path = cache_dir() / f"{name}-{entry.fingerprint()}.onnx"
    if not path.exists():
        export(entry, path)
    return path


def export(entry: ZooEntry, path: Path) -> None:
    """Export with the TorchScript exporter (fast, static shapes, BatchNorm kept), atomically."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    module = build_module(entry)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        scratch_path = Path(scratch) / path.name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                example_inputs(entry),
                str(scratch_path),
                dynamo=False,
                input_names=[spec.name for spec in entry.inputs],
                output_names=["output"],
                opset_version=OPSET,
                training=torch.onnx.TrainingMode.PRESERVE,
                do_constant_folding=True,
            )
        proto = onnx.load(str(scratch_path))
        proto.ir_version = min(proto.ir_version, MAX_IR_VERSION)
        proto.producer_name = "rlcompile-zoo"
        proto.doc_string = f"{entry.description}; random weights, seed {SEED}"
        onnx.save(proto, str(scratch_path))
        os.replace(scratch_path, path)


def summary(name: str) -> dict:
    """Parameter count, FLOPs of one inference and input shapes; cached next to the exports."""
    entry = get_entry(name)
    path = cache_dir() / f"{name}-{entry.fingerprint()}.summary.json"
    if path.exists():
        return json.loads(path.read_text())
    module = build_module(entry)
    info = {
        "name": name,
        "description": entry.description,
        "parameters": sum(p.numel() for p in module.parameters()),
        "flops": count_flops(module, example_inputs(entry)),
        "inputs": {spec.name: list(spec.shape) for spec in entry.inputs},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info, indent=1))
    return info


def conv_layers(name: str) -> list[dict]:
    """The distinct 2-D convolutions of a zoo model in the order they run (input shape, kernel, stride,
    padding as top/left/bottom/right, dilation, groups), cached next to the exports: read from the module as it
    runs, so a seed layer's shape (the kernel level's L1-L8) needs no ONNX export of VGG-16 (14 s) or load (4 s)."""
    entry = get_entry(name)
    path = cache_dir() / f"{name}-{entry.fingerprint()}.convs.json"
    if path.exists():
        return json.loads(path.read_text())
    import torch

    module, found = build_module(entry), []

    def record(layer, inputs, output) -> None:
        batch, channels, height, width = inputs[0].shape
        top, left = layer.padding
        conv = {"batch": batch, "in_channels": channels, "height": height, "width": width,
                "out_channels": layer.out_channels, "kernel": list(layer.kernel_size),
                "stride": list(layer.stride), "padding": [top, left, top, left],
                "dilation": list(layer.dilation), "groups": layer.groups}  # fmt: skip
        if conv not in found:
            found.append(conv)

    for layer in module.modules():
        if isinstance(layer, torch.nn.Conv2d):
            layer.register_forward_hook(record)
    with torch.no_grad():
        module(*example_inputs(entry))
    atomic.write_json(path, found)
    return found


def count_flops(module, inputs: tuple) -> int:
    """Floating-point operations of one forward pass (2 per multiply-add), by torch's FLOP counter."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(*inputs)
    return int(counter.get_total_flops())
