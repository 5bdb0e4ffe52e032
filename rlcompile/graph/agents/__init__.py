"""The graph level's learning agents (torch, torch_geometric): the GNN embedding and PPO."""
