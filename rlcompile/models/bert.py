"""A BERT encoder (Devlin et al. 2019) defined with ``torch.nn``.

Queries, keys and values are separate ``Linear`` layers, as in the reference implementation, so the
graph level sees the parallel MatMuls that share an input. Inputs are ``input_ids`` and
``attention_mask`` (both int64, shape ``[batch, sequence]``); the output is the last hidden state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class BertConfig:
    """Shape of a BERT encoder."""

    vocab_size: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    max_positions: int = 512

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


BERT_BASE = BertConfig()
#: google/bert_uncased_L-2_H-128_A-2 shape: small enough for tests.
BERT_TINY = BertConfig(hidden=128, layers=2, heads=2, intermediate=512)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product attention with an additive padding mask."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.query = nn.Linear(config.hidden, config.hidden)
        self.key = nn.Linear(config.hidden, config.hidden)
        self.value = nn.Linear(config.hidden, config.hidden)
        self.output = nn.Linear(config.hidden, config.hidden)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, _ = x.shape
        return x.view(batch, sequence, self.config.heads, self.config.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        batch, sequence, hidden = x.shape
        q, k, v = (self.split_heads(layer(x)) for layer in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.config.head_dim) + additive_mask
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, sequence, hidden)
        return self.output(context)


class EncoderLayer(nn.Module):
    """Attention and feed-forward sub-layers, each with residual and post-layer-norm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden, eps=1e-12)
        self.feed_forward = nn.Sequential(
            nn.Linear(config.hidden, config.intermediate),
            nn.GELU(),
            nn.Linear(config.intermediate, config.hidden),
        )
        self.output_norm = nn.LayerNorm(config.hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x, additive_mask))
        return self.output_norm(x + self.feed_forward(x))


class BertEncoder(nn.Module):
    """Embeddings (word + position + token type 0) followed by the encoder stack."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.words = nn.Embedding(config.vocab_size, config.hidden)
        self.positions = nn.Embedding(config.max_positions, config.hidden)
        self.token_type = nn.Parameter(torch.zeros(config.hidden))
        self.embedding_norm = nn.LayerNorm(config.hidden, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        sequence = input_ids.shape[1]
        positions = torch.arange(sequence, device=input_ids.device)
        x = self.embedding_norm(self.words(input_ids) + self.positions(positions) + self.token_type)
        additive_mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, additive_mask)
        return x
