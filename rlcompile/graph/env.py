"""The graph level as a gymnasium environment (seed 004, section 3.3.3).

Observation (a dict):

- ``graph``: a :class:`gymnasium.spaces.GraphInstance`; one node per operator with features
  ``[one-hot op type over OP_TYPES + "other", estimated runtime ms]``, one edge per tensor passed
  between operators with its shape (last four dims, zero-padded) as features.
- ``rule_mask``: which rules apply now; the last entry is NO-OP, always allowed.
- ``location_mask``: for each rule, which of its ``max_locations`` slots hold a location.
- ``location_nodes``: for each rule and slot, the node rows (as in ``graph``) of the location's first
  :data:`LOCATION_NODES` nodes, -1 where there are fewer: what lets a policy score a location by the
  operators it rewrites instead of by its slot number.

Action: ``(rule index, location index)``; rule index ``len(rules)`` is NO-OP and ends the episode.
Reward: ``(previous cost - new cost) / initial cost`` (X-RLflow's form, without its x100). Episodes are
truncated after ``max_steps`` rewrites. Invalid actions raise ``ValueError``: agents must use the masks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import gymnasium as gym
import numpy as np
import onnx_ir as ir
from gymnasium import spaces

from rlcompile.graph import onnx_graph
from rlcompile.graph.cost import CostModel, OperatorCostModel
from rlcompile.graph.locations import MAX_LOCATIONS, locations_per_rule
from rlcompile.graph.rules import Location, Rule

#: Operator types with their own one-hot slot; everything else shares "other".
OP_TYPES = (
    "Conv", "Relu", "Add", "Mul", "MatMul", "Gemm", "Concat", "Split", "MaxPool", "AveragePool",
    "GlobalAveragePool", "BatchNormalization", "Flatten", "Reshape", "Transpose", "Softmax", "Div", "Sub",
    "Erf", "LayerNormalization", "Gather", "Sigmoid", "Tanh", "Identity",
)  # fmt: skip
EDGE_DIMS = 4
LOCATION_NODES = 4


def node_features(model: ir.Model, cost_model: CostModel) -> tuple[np.ndarray, list[ir.Node]]:
    """One row per non-constant operator: op type one-hot and its estimated runtime."""
    nodes = [node for node in model.graph if node.op_type != "Constant"]
    features = np.zeros((len(nodes), len(OP_TYPES) + 2), dtype=np.float32)
    opsets = dict(model.graph.opset_imports)
    for row, node in enumerate(nodes):
        column = OP_TYPES.index(node.op_type) if node.op_type in OP_TYPES else len(OP_TYPES)
        features[row, column] = 1.0
        if isinstance(cost_model, OperatorCostModel):
            features[row, -1] = cost_model.node_cost(node, opsets)
    return features, nodes


def edge_features(nodes: Sequence[ir.Node]) -> tuple[np.ndarray, np.ndarray]:
    """Producer -> consumer links and the shape of the tensor on each."""
    index = {node: position for position, node in enumerate(nodes)}
    links, shapes = [], []
    for consumer in nodes:
        for value in consumer.inputs:
            producer = value.producer() if value is not None else None
            if producer is None or producer not in index:
                continue
            links.append((index[producer], index[consumer]))
            shape = list(onnx_graph.static_shape(value) or ())[-EDGE_DIMS:]
            shapes.append([0] * (EDGE_DIMS - len(shape)) + shape)
    return (
        np.asarray(shapes, dtype=np.float32).reshape(-1, EDGE_DIMS),
        np.asarray(links, dtype=np.int64).reshape(-1, 2),
    )


class GraphEnv(gym.Env):
    """Apply substitutions to one graph; the reward is the relative drop of the estimated cost."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, model: ir.Model, rules: Sequence[Rule], cost_model: CostModel, max_steps: int = 50,
                 max_locations: int = MAX_LOCATIONS) -> None:  # fmt: skip
        self.initial_model = model
        self.rules = list(rules)
        self.cost_model = cost_model
        self.max_steps = max_steps
        self.max_locations = max_locations
        self.no_op = len(self.rules)
        self.action_space = spaces.MultiDiscrete([len(self.rules) + 1, max_locations])
        self.observation_space = spaces.Dict({
            "graph": spaces.Graph(
                node_space=spaces.Box(-np.inf, np.inf, (len(OP_TYPES) + 2,), np.float32),
                edge_space=spaces.Box(0, np.inf, (EDGE_DIMS,), np.float32),
            ),
            "rule_mask": spaces.MultiBinary(len(self.rules) + 1),
            "location_mask": spaces.MultiBinary((len(self.rules), max_locations)),
            "location_nodes": spaces.Box(-1, np.iinfo(np.int32).max, (len(self.rules), max_locations, LOCATION_NODES),
                                         np.int64),
        })  # fmt: skip
        self.initial_cost = cost_model.graph_cost(model)
        self.model = model
        self.cost = self.initial_cost
        self.steps = 0
        self.locations: list[list[Location]] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.model, self.cost, self.steps = self.initial_model, self.initial_cost, 0
        return self._observe(), self._info()

    def step(self, action):
        rule_index, location_index = (int(part) for part in action)
        if rule_index == self.no_op:
            return self._observe(), 0.0, True, False, self._info(rewrite="NO-OP")
        if not (0 <= rule_index < self.no_op and 0 <= location_index < len(self.locations[rule_index])):
            raise ValueError(f"invalid action {tuple(action)}: masked out (use rule_mask / location_mask)")
        rule, location = self.rules[rule_index], self.locations[rule_index][location_index]
        self.model = rule.apply(self.model, location)
        previous, self.cost = self.cost, self.cost_model.graph_cost(self.model)
        self.steps += 1
        reward = (previous - self.cost) / self.initial_cost
        observation = self._observe()
        return observation, reward, False, self.steps >= self.max_steps, self._info(rewrite=f"{rule.id} @ {location}")

    def valid_actions(self) -> list[tuple[int, int]]:
        """Every action the masks allow, NO-OP last."""
        pairs = [(r, i) for r, found in enumerate(self.locations) for i in range(len(found))]
        return [*pairs, (self.no_op, 0)]

    def _observe(self) -> dict:
        self.locations = locations_per_rule(self.model, self.rules, self.max_locations)
        features, nodes = node_features(self.model, self.cost_model)
        edges, links = edge_features(nodes)
        location_mask = np.zeros((len(self.rules), self.max_locations), dtype=np.int8)
        location_nodes = np.full((len(self.rules), self.max_locations, LOCATION_NODES), -1, dtype=np.int64)
        row_of = {node.name: row for row, node in enumerate(nodes)}
        for rule, found in enumerate(self.locations):
            location_mask[rule, : len(found)] = 1
            for slot, location in enumerate(found):
                rows = [row_of[name] for name in location.nodes if name in row_of][:LOCATION_NODES]
                location_nodes[rule, slot, : len(rows)] = rows
        rule_mask = np.append(location_mask.any(axis=1), True).astype(np.int8)
        return {
            "graph": spaces.GraphInstance(nodes=features, edges=edges, edge_links=links),
            "rule_mask": rule_mask,
            "location_mask": location_mask,
            "location_nodes": location_nodes,
        }

    def _info(self, rewrite: str | None = None) -> dict:
        return {"cost_ms": self.cost, "initial_cost_ms": self.initial_cost, "steps": self.steps, "rewrite": rewrite}


class GraphSetEnv(gym.Env):
    """Several graphs behind one environment: each episode rewrites one of them, drawn at random.

    What a policy meant for graphs it has never seen trains on (``rlcompile graph-train``). Every graph
    has its own :class:`GraphEnv` with the same rules; rewards are fractions of each graph's own initial
    cost, so graphs of any size weigh alike. Everything but ``reset`` goes to the current graph's env.
    """

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, envs: Sequence[GraphEnv], seed: int = 0) -> None:
        if not envs or len({tuple(rule.id for rule in env.rules) for env in envs}) != 1:
            raise ValueError("GraphSetEnv needs at least one graph, and every graph with the same rules")
        self.envs = list(envs)
        self.active = self.envs[0]
        self.rng = np.random.default_rng(seed)
        self.action_space, self.observation_space = self.active.action_space, self.active.observation_space

    def __getattr__(self, name: str):
        if name in ("envs", "active"):  # not set yet: no recursion while unpickling or initialising
            raise AttributeError(name)
        return getattr(self.active, name)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.active = self.envs[int(self.rng.integers(len(self.envs)))]
        return self.active.reset()

    def step(self, action):
        return self.active.step(action)
