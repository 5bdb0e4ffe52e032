"""Contract tests over every graph search: never worse than the start, deterministic, within budget,
the input graph intact; plus what tells greedy and TASO apart."""

from __future__ import annotations

import pytest

from rlcompile.errors import RlcompileError
from rlcompile.graph import onnx_graph, rules, search
from rlcompile.graph.cost import OperatorCostModel
from rlcompile.graph.search import SearchBudget
from rlcompile.graph.search.base import apply_exhaustively
from tests.graph.conftest import GraphBuilder, agreement


def inception_block():
    """Four branches on one input, concatenated: merges, grouped convs and Relu pulls all apply."""
    b = GraphBuilder()
    x = b.input("x", [1, 16, 14, 14])
    branches = [b.op("Relu", [b.conv(x, 16, 8, k=1)]) for _ in range(3)]
    branches.append(b.op("Relu", [b.conv(b.op("Relu", [b.conv(x, 16, 8, k=1)]), 8, 8, k=3)]))
    return b.model([b.op("Concat", branches, axis=1)])


@pytest.fixture(scope="module")
def cost_model(tmp_path_factory):
    return OperatorCostModel(cache_file=tmp_path_factory.mktemp("costs") / "costs.json")


def small_budget(name: str) -> dict:
    """Episode counts small enough that no time limit cuts a learning agent short (which would break
    "same seed, same result")."""
    from rlcompile.graph.agents.ppo import PPOConfig
    from rlcompile.graph.agents.world_model import WorldModelConfig

    if name == "ppo":
        return {"config": PPOConfig(train_episodes=10, steps_per_update=16)}
    if name == "world-model":
        return {"config": WorldModelConfig(random_episodes=8, model_epochs=5, dream_episodes=20)}
    return {}


@pytest.mark.parametrize("name", [*sorted(search.SEARCHES), *search.LEARNING_AGENTS])
def test_search_contract(name, cost_model):
    proto = inception_block()
    model = onnx_graph.from_proto(proto)
    before = onnx_graph.graph_hash(model.graph)
    searcher = search.create(name, budget=SearchBudget(max_steps=6, time_limit_s=120), **small_budget(name))
    result = searcher.search(model, rules.all_rules(), cost_model)
    assert result.final_cost_ms <= result.initial_cost_ms
    assert result.final_cost_ms == pytest.approx(cost_model.graph_cost(result.model))
    assert result.steps <= 6 and result.graphs_evaluated > 0
    assert onnx_graph.graph_hash(model.graph) == before
    assert agreement(proto, result.model).within()
    again = searcher.search(onnx_graph.from_proto(proto), rules.all_rules(), cost_model)
    assert [r.describe() for r in again.rewrites] == [r.describe() for r in result.rewrites]
    if result.rewrites:
        assert result.rewrites[-1].cost_after_ms == pytest.approx(result.final_cost_ms)


def test_taso_is_never_worse_than_greedy(cost_model):
    model = onnx_graph.from_proto(inception_block())
    budget = SearchBudget(max_steps=8, time_limit_s=120)
    greedy = search.create("greedy", budget=budget).search(model, rules.all_rules(), cost_model)
    taso = search.create("taso", budget=budget, alpha=1.05).search(model, rules.all_rules(), cost_model)
    assert greedy.rewrites, "the block offers improving rewrites"
    assert taso.final_cost_ms <= greedy.final_cost_ms + 1e-9


def test_time_limit_stops_the_search(cost_model):
    model = onnx_graph.from_proto(inception_block())
    result = search.create("taso", budget=SearchBudget(max_steps=1000, time_limit_s=1e-9)).search(
        model, rules.all_rules(), cost_model
    )
    assert result.stopped_by == "time" and result.steps == 0 and result.final_cost_ms == result.initial_cost_ms


def test_cleanup_applies_every_fusion():
    b = GraphBuilder()
    c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, bias=False)
    c2 = b.conv(b.op("Relu", [b.batchnorm(c, 4)]), 4, 4)
    proto = b.model([b.op("Add", [b.op("Mul", [c2, b.weight(4, 1, 1)]), b.weight(4, 1, 1)])])
    cleaned, applied = apply_exhaustively(onnx_graph.from_proto(proto), rules.all_rules(list(rules.RULE_IDS[:3])))
    assert [node.op_type for node in cleaned.graph] == ["Conv", "Relu", "Conv"]
    assert sorted(r.rule for r in applied) == ["fuse_conv_add", "fuse_conv_batchnorm", "fuse_conv_mul"]
    assert agreement(proto, cleaned).within()


def test_unknown_agent_is_a_clear_error():
    with pytest.raises(RlcompileError, match="unknown graph agent"):
        search.create("alphazero")
