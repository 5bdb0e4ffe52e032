"""The learning agents: the GNN embedding, PPO training, checkpoints and greedy application."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Batch

from rlcompile.errors import RlcompileError
from rlcompile.graph import onnx_graph, rules
from rlcompile.graph.agents.gnn import GraphEncoder, to_data
from rlcompile.graph.agents.ppo import HierarchicalPolicy, PPOConfig, PPOSearch, Step, advantages
from rlcompile.graph.cost import OperatorCostModel
from rlcompile.graph.env import GraphEnv
from tests.graph.test_search import inception_block


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cost_model = OperatorCostModel(cache_file=tmp_path_factory.mktemp("costs") / "costs.json")
    return GraphEnv(onnx_graph.from_proto(inception_block()), rules.all_rules(), cost_model, max_steps=5)


def test_encoder_embeds_graphs_of_any_size(env):
    observation, _ = env.reset()
    data = to_data(observation)
    encoder = GraphEncoder(data.x.shape[1])
    nodes, graphs = encoder(Batch.from_data_list([data, data]))
    assert nodes.shape == (2 * data.num_nodes, 64) and graphs.shape == (2, encoder.output_size)
    assert torch.allclose(graphs[0], graphs[1])


def test_policy_only_picks_allowed_actions(env):
    observation, _ = env.reset()
    batch = Batch.from_data_list([to_data(observation)])
    policy = HierarchicalPolicy(batch.x.shape[1], len(env.rules))
    allowed = set(env.valid_actions())
    for _ in range(30):
        rule, location, log_prob, _ = policy.act(batch)
        assert (rule, 0 if rule == env.no_op else location) in allowed and log_prob <= 0


def test_advantages_stop_at_episode_ends():
    steps = [Step(None, 0, 0, 0.0, 0.0, 1.0, False), Step(None, 0, 0, 0.0, 0.0, 1.0, True)]
    gains, returns = advantages(steps, last_value=100.0, config=PPOConfig(gamma=0.5, gae_lambda=1.0))
    assert gains.tolist() == [1.5, 1.0] and returns.tolist() == [1.5, 1.0]


def test_trained_policy_is_saved_and_applied_without_training(env, tmp_path):
    checkpoint = tmp_path / "ppo.pt"
    config = PPOConfig(train_episodes=6, episode_steps=5, steps_per_update=16)
    trained = PPOSearch(config=config, checkpoint=checkpoint).search(env.initial_model, env.rules, env.cost_model)
    assert checkpoint.exists() and trained.extra["train_episodes"] >= 6 and trained.extra["train_seconds"] > 0
    applied = PPOSearch(config=config, load=checkpoint).search(env.initial_model, env.rules, env.cost_model)
    assert applied.extra["train_episodes"] == 0
    assert [r.describe() for r in applied.rewrites] == [r.describe() for r in trained.rewrites]
    with pytest.raises(RlcompileError, match="trained with other rules"):
        PPOSearch(load=checkpoint).search(env.initial_model, env.rules[:3], env.cost_model)
