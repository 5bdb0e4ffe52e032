"""The graph embedding the RL agents see: a message-passing network over the environment's observation.

Node features are the op-type one-hot and the op's estimated runtime (as a share of the graph's total,
so graphs of any size and speed look alike); edge features are the tensor's dims on a log scale.
Three GINE message-passing layers (each message = MLP(neighbour + edge)) give node embeddings; their
mean and max over the graph give the graph embedding.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GINEConv, global_max_pool, global_mean_pool


def to_data(observation: dict) -> Data:
    """The env's observation as a torch_geometric ``Data`` (masks ride along as graph attributes)."""
    graph: spaces.GraphInstance = observation["graph"]
    nodes = torch.as_tensor(graph.nodes, dtype=torch.float32).clone()
    total = float(nodes[:, -1].sum()) or 1.0
    nodes[:, -1] = nodes[:, -1] / total
    edges = torch.log2(1 + torch.as_tensor(graph.edges, dtype=torch.float32)) / 16
    return Data(
        x=nodes,
        edge_index=torch.as_tensor(np.asarray(graph.edge_links).T, dtype=torch.long).reshape(2, -1),
        edge_attr=edges.reshape(-1, graph.edges.shape[1] if graph.edges.ndim == 2 else 4),
        rule_mask=torch.as_tensor(observation["rule_mask"], dtype=torch.bool).unsqueeze(0),
        location_mask=torch.as_tensor(observation["location_mask"], dtype=torch.bool).unsqueeze(0),
        location_nodes=torch.as_tensor(observation["location_nodes"], dtype=torch.long).unsqueeze(0),
    )


class GraphEncoder(nn.Module):
    def __init__(self, node_features: int, edge_features: int = 4, hidden: int = 64, layers: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(node_features, hidden)
        self.convolutions = nn.ModuleList(
            GINEConv(
                nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)), edge_dim=edge_features
            )
            for _ in range(layers)
        )
        self.node_size = hidden
        self.output_size = 2 * hidden

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(node embeddings [nodes, hidden], graph embeddings [graphs, 2 * hidden])."""
        h = torch.relu(self.embed(batch.x))
        for convolution in self.convolutions:
            h = h + torch.relu(convolution(h, batch.edge_index, batch.edge_attr))
        index = batch.batch if batch.batch is not None else torch.zeros(len(h), dtype=torch.long)
        return h, torch.cat([global_mean_pool(h, index), global_max_pool(h, index)], dim=1)
