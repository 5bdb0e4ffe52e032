"""The corpus of real architectures, and a slice of it small enough for CI through ``optimize``: a transformer
with an attention mask, a detector, a Paddle export, and models with control flow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcompile.cli import main
from rlcompile.export import suggested_target
from rlcompile.manifest import Manifest
from rlcompile.models import corpus
from rlcompile.models.corpus import CorpusEntry, hf_text, hf_vision
from rlcompile.optimize import OptimizeRequest, StageSettings
from rlcompile.optimize import optimize as run_optimize
from tests.timing import BLOCKS


def test_the_corpus_has_25_architectures_besides_the_zoo_and_names_each_once():
    entries = corpus.corpus()
    assert len({entry.name for entry in entries}) == len(entries)
    built = [entry for entry in entries if entry.build is not None]
    assert len(built) >= 25 and {"text", "vision", "audio", "detection", "control-flow"} <= {e.family for e in built}
    assert {"zoo", "packaged"} <= {entry.family for entry in entries}


@pytest.fixture(scope="module")
def slice_dir(tmp_path_factory) -> Path:
    """Small members of the corpus' families, built offline here (CI cannot afford the full-size ones)."""
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("corpus")
    tiny = [CorpusEntry("ci:bert", "text", "BERT, 2 layers, hidden 64, attention mask and token types",
                        hf_text("BertConfig", "BertModel", token_types=True, hidden_size=64, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=128, vocab_size=1000)),
            CorpusEntry("ci:yolos", "detection", "YOLOS, 2 layers, hidden 64, 64x64 images",
                        hf_vision("YolosConfig", "YolosModel", size=64, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=128, image_size=[64, 64],
                                  num_detection_tokens=10)),
            *corpus.CONTROL_FLOW_ENTRIES]  # fmt: skip
    assert corpus.build(tiny, folder) == {}
    return folder


def built(folder: Path, name: str) -> str:
    """The file :func:`corpus.build` wrote for the entry called ``name`` (``:`` written ``-``)."""
    return str(folder / CorpusEntry(name, "", "").file_name)


def test_a_name_is_taken_as_the_cli_takes_it_a_corpus_entry_by_its_built_file():
    built = next(entry for entry in corpus.corpus() if entry.build is not None)
    assert corpus.spec_of(built.name) == corpus.model_spec(built) and corpus.spec_of(built.name).endswith(".onnx")
    assert corpus.spec_of("resnet18") == "resnet18" and corpus.spec_of("my/model.onnx") == "my/model.onnx"


def test_batch_norm_statistics_are_settled_so_that_activations_keep_their_scale():
    """Freshly initialised BatchNorm layers pass on their input's scale, so a deep random network's activations
    vanish (hf:efficientnet's outputs were exactly 0, hf:mobilevit's denormal); settled, they keep unit scale."""
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(12):
        conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        torch.nn.init.normal_(conv.weight, std=0.02)  # transformers' initializer_range
        layers += [conv, torch.nn.BatchNorm2d(8), torch.nn.ReLU()]
    module = torch.nn.Sequential(*layers).eval()
    inputs = {"input": torch.randn(1, 8, 16, 16)}
    with torch.no_grad():
        before = module(inputs["input"]).abs().max().item()
        assert corpus.settle_batch_norm(module, inputs) == 12
        after = module(inputs["input"])
    assert before < 1e-6 and 0.1 < after.std().item() < 10 and not module.training
    assert corpus.settle_batch_norm(torch.nn.Linear(4, 4), {"input": torch.randn(1, 4)}) == 0


def optimize(model: str, output: Path, levels: tuple[str, ...], libraries: str,
             input_shapes: dict | None = None) -> dict:
    """``optimize`` at a CI-sized budget: the greedy graph agent, quick timing, and no PyTorch in the layer stage
    (its per-group TorchScript compiles are the slowest part of a profile)."""
    settings = StageSettings(graph_agent="greedy", threads=2, libraries=libraries, timing=BLOCKS)
    result = run_optimize(OptimizeRequest(model, output, budget_s=10.0, levels=levels, settings=settings,
                                          input_shapes=input_shapes or {}))
    return json.loads((output / "manifest.json").read_text()) | {"stages": result.manifest.optimize.stages}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ci-bert", "ci-yolos", "ocr-cls"])
def test_a_transformer_a_detector_and_a_paddle_export_go_through_optimize(slice_dir, tmp_path, name):
    model = name if name == "ocr-cls" else built(slice_dir, name)
    # the Paddle export has 65 fusion groups: profiling them in TVM too would double the test's time for
    # nothing (at this budget the kernel stage tunes nothing, so no TVM segment can be chosen)
    libraries = "ort,openvino" if name == "ocr-cls" else "ort,openvino,tvm"
    manifest = optimize(model, tmp_path / "opt", ("kernel", "layer"), libraries)
    latency = manifest["optimize"]["latency"]
    assert latency["agreement"]["max_rel"] < 1e-3 and latency["final_ms"] > 0
    assert set(manifest["optimize"]["stages"]) == {"kernel", "layer"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cf-gated", "cf-recurrent"])
def test_models_with_control_flow_survive_the_graph_level(slice_dir, tmp_path, name):
    model = built(slice_dir, name)
    assert main(["graph", model, "--agent", "greedy", "--steps", "3", "--quick", "-o", str(tmp_path / "g.onnx")]) == 0
    manifest = optimize(model, tmp_path / "opt", ("graph", "layer"), "ort,openvino")
    assert manifest["optimize"]["latency"]["agreement"]["max_rel"] < 1e-3


def test_folding_leaves_the_model_it_was_given_as_it_was(slice_dir):
    """onnxslim flattens an ``If`` whose condition folds and renames the outer weights its branch reads, in the
    proto it was given: the loaded model must stay the file's, whatever the fold did (the detector's ``If``
    on its audio length folds once the length is fixed)."""
    import onnx

    from rlcompile.models.onnx_model import checked_fold, fix_input_shapes, fold_model, graph_inputs

    proto = onnx.load(built(slice_dir, "cf-detector"))
    inputs, _ = fix_input_shapes(proto, graph_inputs(proto), {"audio": (1, 512)}, "cf-detector")
    before = proto.SerializeToString()
    folded = checked_fold(fold_model, proto, inputs, "onnxslim")
    assert proto.SerializeToString() == before
    branches = [sum(node.op_type == "If" for node in model.graph.node) for model in (folded, proto)]
    assert branches[0] < branches[1]


@pytest.mark.slow
def test_nested_control_flow_over_outer_weights_and_lstm_state_go_through_optimize(slice_dir, tmp_path):
    """The voice-activity detector's shape (If > Loop > If reading outer weights three levels down, LSTM state in
    and out, a scalar input, a dynamic length fixed by ``--input-shape``) goes through every level with exit 0."""
    model = built(slice_dir, "cf-detector")
    manifest = optimize(model, tmp_path / "opt", ("graph", "layer"), "ort,openvino", {"audio": (1, 512)})
    assert manifest["optimize"]["latency"]["agreement"]["max_rel"] < 1e-3
    target = suggested_target(Manifest.load(tmp_path / "opt"))  # the runtime the kept plan runs alone on
    assert main(["export", str(tmp_path / "opt"), "--to", target, "-o", str(tmp_path / "export")]) == 0
