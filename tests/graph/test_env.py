"""The gymnasium environment: observation layout, masks, rewards, NO-OP and truncation."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from rlcompile.graph import onnx_graph, rules
from rlcompile.graph.cost import OperatorCostModel
from rlcompile.graph.env import OP_TYPES, GraphEnv
from tests.graph.test_search import inception_block


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    model = onnx_graph.from_proto(inception_block())
    cost_model = OperatorCostModel(cache_file=tmp_path_factory.mktemp("costs") / "costs.json")
    return GraphEnv(model, rules.all_rules(), cost_model, max_steps=3)


def test_observation_matches_the_graph_and_the_space(env):
    observation, info = env.reset(seed=0)
    graph = observation["graph"]
    assert graph.nodes.shape == (len(env.initial_model.graph), len(OP_TYPES) + 2)
    assert graph.nodes[:, -1].sum() == pytest.approx(info["cost_ms"], rel=1e-6)
    assert graph.edge_links.shape[1] == 2 and len(graph.edges) == len(graph.edge_links)
    assert (graph.edges[:, 1] == 16).any() or (graph.edges[:, 1] == 8).any()  # channel dims on the edges
    assert observation["rule_mask"][-1] == 1 and observation["rule_mask"][:-1].any()
    assert observation["location_mask"].shape == (len(env.rules), 200)
    assert env.observation_space["rule_mask"].contains(observation["rule_mask"])
    assert isinstance(env.action_space, spaces.MultiDiscrete)


def test_location_nodes_point_at_the_nodes_each_location_rewrites(env):
    observation, _ = env.reset(seed=0)
    nodes = [node for node in env.model.graph if node.op_type != "Constant"]
    for rule, found in enumerate(env.locations):
        for slot, location in enumerate(found):
            rows = [row for row in observation["location_nodes"][rule, slot] if row >= 0]
            assert [nodes[row].name for row in rows] == list(location.nodes[: len(rows)]) and rows
        assert (observation["location_nodes"][rule, len(found) :] == -1).all()


def test_rewards_sum_to_the_relative_cost_drop(env):
    env.reset(seed=0)
    total = 0.0
    for _ in range(2):
        rule_index, location_index = env.valid_actions()[0]
        _, reward, terminated, _, info = env.step(np.array([rule_index, location_index]))
        total += reward
        assert not terminated
    assert total == pytest.approx((info["initial_cost_ms"] - info["cost_ms"]) / info["initial_cost_ms"])


def test_no_op_ends_and_the_cap_truncates(env):
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(np.array([env.no_op, 0]))
    assert terminated and reward == 0.0 and info["rewrite"] == "NO-OP"
    env.reset(seed=0)
    truncated = False
    for _ in range(3):
        _, _, _, truncated, _ = env.step(np.array(env.valid_actions()[0]))
    assert truncated


def test_masked_actions_are_refused(env):
    observation, _ = env.reset(seed=0)
    empty_rule = int(np.flatnonzero(observation["rule_mask"][:-1] == 0)[0])
    with pytest.raises(ValueError, match="masked out"):
        env.step(np.array([empty_rule, 0]))


def test_a_set_of_graphs_gives_each_episode_one_of_them(env):
    from rlcompile.graph.env import GraphSetEnv
    from tests.graph.test_cost import two_convs

    other = GraphEnv(onnx_graph.from_proto(two_convs()), env.rules, env.cost_model, max_steps=3)
    both = GraphSetEnv([env, other], seed=0)
    seen = set()
    for _ in range(12):
        observation, info = both.reset()
        seen.add(info["initial_cost_ms"])
        assert len(observation["graph"].nodes) == len(both.model.graph) - sum(
            node.op_type == "Constant" for node in both.model.graph
        )
        assert both.initial_cost == info["initial_cost_ms"] and both.no_op == len(env.rules)
    assert seen == {env.initial_cost, other.initial_cost}
    with pytest.raises(ValueError, match="same rules"):
        GraphSetEnv([env, GraphEnv(other.initial_model, env.rules[:2], env.cost_model)])
