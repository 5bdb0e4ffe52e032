"""The learning agents: the GNN embedding, PPO training, checkpoints and greedy application."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
from torch_geometric.data import Batch

from rlcompile.errors import RlcompileError
from rlcompile.graph import onnx_graph, rules
from rlcompile.graph.agents.gnn import GraphEncoder, to_data
from rlcompile.graph.agents.ppo import HierarchicalPolicy, PPOConfig, PPOSearch, Step, advantages
from rlcompile.graph.cost import CostModel, OperatorCostModel
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
    policy = HierarchicalPolicy.for_graphs(batch.x.shape[1], len(env.rules))
    allowed = set(env.valid_actions())
    for _ in range(30):
        rule, location, log_prob, _ = policy.act(batch)
        assert (rule, 0 if rule == env.no_op else location) in allowed and log_prob <= 0


def test_location_scores_do_not_depend_on_the_other_graphs_in_the_batch(env):
    first, _ = env.reset()
    rule, location = env.valid_actions()[0]
    second, _, _, _, _ = env.step((rule, location))
    policy = HierarchicalPolicy.for_graphs(first["graph"].nodes.shape[1], len(env.rules))
    rules_taken = torch.tensor([rule, rule])
    alone = [
        policy.distributions(Batch.from_data_list([to_data(o)]), rules_taken[:1])[1].logits[0] for o in (first, second)
    ]
    together = policy.distributions(Batch.from_data_list([to_data(first), to_data(second)]), rules_taken)[1].logits
    assert torch.allclose(together, torch.stack(alone), atol=1e-5)


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


def test_world_model_learns_and_its_controller_acts_in_the_real_environment(env):
    from rlcompile.graph.agents.world_model import WorldModelConfig, WorldModelSearch

    config = WorldModelConfig(random_episodes=6, episode_steps=4, model_epochs=4, dream_episodes=10,
                              controller=PPOConfig(steps_per_update=16))  # fmt: skip
    result = WorldModelSearch(config=config).search(env.initial_model, env.rules, env.cost_model)
    extra = result.extra
    assert extra["random_episodes"] == 6 and extra["real_env_steps"] > 0 and extra["dream_steps"] > 0
    assert extra["dream_step_ms"] > 0 and extra["real_step_ms"] > 0
    assert set(extra["prediction_error"]) == {"reward_mae", "latent_rmse", "latent_nll"}
    assert result.final_cost_ms <= result.initial_cost_ms
    assert result.final_cost_ms == pytest.approx(env.cost_model.graph_cost(result.model))


def small_world_config():
    from rlcompile.graph.agents.world_model import WorldModelConfig

    return WorldModelConfig(random_episodes=6, episode_steps=4, model_epochs=3, dream_episodes=8,
                            controller=PPOConfig(steps_per_update=16))  # fmt: skip


def test_world_model_agent_is_saved_and_applied_without_training(env, tmp_path):
    from rlcompile.graph.agents.world_model import WorldModelSearch

    checkpoint, config = tmp_path / "world.pt", small_world_config()
    trained = WorldModelSearch(config=config, checkpoint=checkpoint).search(env.initial_model, env.rules,
                                                                           env.cost_model)  # fmt: skip
    assert checkpoint.exists() and trained.extra["train_seconds"] > 0
    applied = WorldModelSearch(config=config, load=checkpoint).search(env.initial_model, env.rules, env.cost_model)
    assert applied.extra["train_seconds"] == 0 and applied.extra["real_env_steps"] == 0
    assert [r.describe() for r in applied.rewrites] == [r.describe() for r in trained.rewrites]
    with pytest.raises(RlcompileError, match="trained with other rules"):
        WorldModelSearch(load=checkpoint).search(env.initial_model, env.rules[:3], env.cost_model)
    with pytest.raises(RlcompileError, match="not a PPO checkpoint"):
        PPOSearch(load=checkpoint).search(env.initial_model, env.rules, env.cost_model)
    ppo_checkpoint = tmp_path / "ppo.pt"
    PPOSearch(config=PPOConfig(train_episodes=1, steps_per_update=8), checkpoint=ppo_checkpoint).search(
        env.initial_model, env.rules, env.cost_model)  # fmt: skip
    with pytest.raises(RlcompileError, match="not a world-model checkpoint"):
        WorldModelSearch(load=ppo_checkpoint).search(env.initial_model, env.rules, env.cost_model)


def test_world_model_trains_on_a_set_of_graphs_and_dreams_from_each(env, tmp_path):
    from rlcompile.graph.agents import world_model
    from rlcompile.graph.env import GraphSetEnv
    from tests.graph.test_cost import two_convs

    other = GraphEnv(onnx_graph.from_proto(two_convs()), env.rules, env.cost_model, max_steps=4)
    both = GraphSetEnv([env, other], seed=0)
    rollouts = tmp_path / "rollouts.pt"
    agent, stats = world_model.fit(both, small_world_config(), seed=0, time_limit_s=60, rollouts_file=rollouts)
    assert stats["graphs"] == 2 and rollouts.exists()
    starts = {round(float(z.sum()), 5) for z, _ in world_model.DreamEnv(
        agent.world, [(world_model.embed(agent.encoder, e.reset()[0]), None) for e in (env, other)], len(env.rules),
        env.max_locations, agent.config, torch.Generator().manual_seed(0)).starts}  # fmt: skip
    assert len(starts) == 2  # the two graphs start the dreams from different latents
    again, _ = world_model.fit(both, small_world_config(), seed=0, time_limit_s=60, rollouts_file=rollouts)
    assert again.world.state_dict()["reward.weight"].equal(agent.world.state_dict()["reward.weight"])
    alone = GraphSetEnv([env], seed=0)
    with pytest.raises(RlcompileError, match="rollouts of other graphs"):
        world_model.fit(alone, small_world_config(), seed=0, time_limit_s=60, rollouts_file=rollouts)


def test_dream_starts_from_every_graph_of_a_set():
    from rlcompile.graph.agents.world_model import MDNRNN, DreamEnv, WorldModelConfig

    world = MDNRNN(latent=4, action=5, rules=2, hidden=8, mixtures=2)
    starts = [(torch.full((4,), float(i)), torch.ones(1, 3, dtype=torch.bool)) for i in range(3)]
    dream = DreamEnv(world, starts, rules=1, locations=3, config=WorldModelConfig(),
                     generator=torch.Generator().manual_seed(0))  # fmt: skip
    seen = {float(dream.reset().x[0]) for _ in range(30)}
    assert seen == {0.0, 1.0, 2.0}


class WeightedOperatorCount(CostModel):
    """A deterministic cost (weights per op type), so the rewards are the same on every machine."""

    name = "weighted-count"
    WEIGHTS: ClassVar[dict[str, float]] = {"Conv": 1.0, "Relu": 0.2, "Split": 0.3, "Concat": 0.3}

    def graph_cost(self, model) -> float:
        return sum(self.WEIGHTS.get(node.op_type, 0.1) for node in model.graph if node.op_type != "Constant")


def test_world_model_reward_head_tells_good_rewrites_from_bad(env):
    """The reward prediction must depend on the action, not settle on the mean reward."""
    import numpy as np

    from rlcompile.graph.agents.world_model import MDNRNN, WorldModelConfig, random_rollouts, train_world_model

    env = GraphEnv(env.initial_model, env.rules, WeightedOperatorCount(), max_steps=5)
    observation, _ = env.reset()
    torch.manual_seed(0)
    encoder = GraphEncoder(observation["graph"].nodes.shape[1], hidden=16).eval()
    rollouts = random_rollouts(env, encoder, 30, np.random.default_rng(0))
    config = WorldModelConfig(model_epochs=25, hidden=64)
    world = MDNRNN(encoder.output_size, len(env.rules) + 1 + env.max_locations, len(env.rules) + 1, 64, 8)
    train_world_model(world, rollouts, config, torch.Generator().manual_seed(0))
    actual, predicted = [], []
    with torch.no_grad():
        for rollout in rollouts:
            inputs = torch.cat([torch.stack(rollout.latents[:-1]), torch.stack(rollout.actions)], dim=1)
            actual += rollout.rewards
            predicted += (world(inputs.unsqueeze(0))[1][0][0] / config.controller.reward_scale).tolist()
    assert np.std(actual) > 0 and np.corrcoef(actual, predicted)[0, 1] > 0.8


def test_mixture_sampling_sharpens_with_low_temperature():
    from rlcompile.graph.agents.world_model import MDNRNN

    logits = torch.tensor([[0.0, 2.0]])
    means = torch.tensor([[[0.0], [10.0]]])
    log_sigmas = torch.zeros(1, 2, 1)
    generator = torch.Generator().manual_seed(0)
    cold = [float(MDNRNN.sample((logits, means, log_sigmas), 0.01, generator)) for _ in range(50)]
    assert all(abs(value - 10.0) < 0.5 for value in cold)
    hot = [float(MDNRNN.sample((logits, means, log_sigmas), 1.0, generator)) for _ in range(200)]
    assert any(abs(value) < 4 for value in hot)


def test_interrupted_training_carries_on_from_its_saved_state(env, tmp_path):
    from rlcompile.graph.agents.ppo import train

    resume = tmp_path / "ppo.pt.training"
    first_config = PPOConfig(train_episodes=3, episode_steps=5, steps_per_update=16)
    _, first = train(env, first_config, seed=1, resume=resume)
    assert resume.exists() and first["resumed_episodes"] == 0 and first["train_episodes"] >= 3
    _, second = train(env, PPOConfig(train_episodes=8, episode_steps=5, steps_per_update=16), seed=1, resume=resume)
    assert second["resumed_episodes"] == first["train_episodes"] and second["train_episodes"] >= 8
    assert second["train_env_steps"] - first["train_env_steps"] < 8 * 5 + 16  # the first run's steps not redone
    small = GraphEnv(env.initial_model, env.rules[:3], env.cost_model, max_steps=5)
    with pytest.raises(RlcompileError, match="other rules"):
        train(small, first_config, resume=resume)
