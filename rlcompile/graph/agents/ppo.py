"""The model-free agent (seed 004, chapter 4): PPO on a GNN embedding with a hierarchical masked action.

Readable top to bottom, CleanRL style. The policy embeds the graph (:mod:`.gnn`), picks a rule from
the applicable ones plus NO-OP, then a location for that rule from its mask; one value head. Rollouts
of ``steps_per_update`` real environment steps are scored with GAE and optimised with the clipped PPO
objective for a few epochs of minibatches. Training stops after ``train_episodes`` episodes or the time
limit. The trained policy is then applied greedily (argmax) from the original graph until it chooses
NO-OP or hits the step cap: that rollout's best graph is the agent's answer, and its wall time is the
inference-time optimisation cost, reported apart from training.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx_ir as ir
import torch
from torch import nn
from torch_geometric.data import Batch

from rlcompile.atomic import replacing
from rlcompile.errors import RlcompileError
from rlcompile.graph.agents.gnn import GraphEncoder, to_data
from rlcompile.graph.cost import CostModel
from rlcompile.graph.env import GraphEnv
from rlcompile.graph.locations import MAX_LOCATIONS
from rlcompile.graph.rules import Rule
from rlcompile.graph.search.base import GraphSearch, ProgressCallback, Rewrite, SearchBudget, SearchResult

MASKED = -1e9


@dataclass
class PPOConfig:
    train_episodes: int = 500  # 200 was too few on squeezenet1_1 (seed 0 collapsed onto NO-OP); --time-limit caps it
    episode_steps: int = 50  # capped by the budget's max_steps
    steps_per_update: int = 32
    epochs: int = 4
    minibatch: int = 16
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    entropy: float = 0.05  # 0.01 collapsed onto NO-OP within ~100 episodes on squeezenet1_1
    value_coefficient: float = 0.5
    hidden: int = 64
    reward_scale: float = 100.0  # X-RLflow's x100: rewards are fractions of the initial cost


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, outputs))


class HierarchicalPolicy(nn.Module):
    """Rule first (masked), then a location for that rule (masked); a shared GNN trunk and a value head.

    A location's logit has two parts: a head over the slot number (all a latent-only encoder allows)
    and, when the encoder gives node embeddings, a pointer head that scores the location by the mean
    embedding of the nodes it rewrites, so the same merge scores alike wherever it sits in the list.
    """

    def __init__(self, encoder: nn.Module, rules: int, hidden: int = 64, locations: int = MAX_LOCATIONS) -> None:
        """``encoder(batch)`` returns (node embeddings or None, graph embeddings [batch, encoder.output_size])."""
        super().__init__()
        self.rules, self.locations = rules, locations
        self.encoder = encoder
        size = self.encoder.output_size
        self.rule_head = mlp(size, hidden, rules + 1)
        self.location_head = mlp(size + rules + 1, hidden, locations)
        node_size = getattr(encoder, "node_size", None)
        self.pointer_head = mlp(node_size + size + rules + 1, hidden, 1) if node_size else None
        self.value_head = mlp(size, hidden, 1)

    def distributions(self, batch: Batch, rules: torch.Tensor | None = None):
        """(rule distribution, location distribution given ``rules``, value, the rules used)."""
        nodes, embedding = self.encoder(batch)
        rule_logits = self.rule_head(embedding).masked_fill(~batch.rule_mask, MASKED)
        rule_distribution = torch.distributions.Categorical(logits=rule_logits)
        if rules is None:
            rules = rule_distribution.sample()
        context = torch.cat([embedding, nn.functional.one_hot(rules, self.rules + 1).float()], dim=1)
        location_logits = self.location_head(context)
        if self.pointer_head is not None and nodes is not None:
            location_logits = location_logits + self.pointer_logits(nodes, context, batch, rules)
        location_mask = self.location_mask(batch.location_mask, rules)
        location_distribution = torch.distributions.Categorical(
            logits=location_logits.masked_fill(~location_mask, MASKED)
        )
        return rule_distribution, location_distribution, self.value_head(embedding).squeeze(1), rules

    def pointer_logits(self, nodes: torch.Tensor, context: torch.Tensor, batch: Batch,
                       rules: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """[batch, locations]: the pointer head on each location's mean node embedding for its rule."""
        rows = batch.location_nodes[torch.arange(len(rules)), rules.clamp(max=self.rules - 1)]
        present = (rows >= 0).unsqueeze(-1).float()
        offsets = batch.ptr[:-1].reshape(-1, 1, 1)
        gathered = nodes[(rows.clamp(min=0) + offsets).reshape(-1)].reshape(*rows.shape, -1)
        location_embedding = (gathered * present).sum(2) / present.sum(2).clamp(min=1)
        expanded = context.unsqueeze(1).expand(-1, rows.shape[1], -1)
        return self.pointer_head(torch.cat([location_embedding, expanded], dim=2)).squeeze(-1)

    @classmethod
    def for_graphs(cls, node_features: int, rules: int, hidden: int = 64, locations: int = MAX_LOCATIONS):
        return cls(GraphEncoder(node_features, hidden=hidden), rules, hidden, locations)

    def location_mask(self, masks: torch.Tensor, rules: torch.Tensor) -> torch.Tensor:
        """Each row's mask for its rule; NO-OP rows allow location 0 only (it is ignored)."""
        no_op = rules == self.rules
        rows = masks[torch.arange(len(rules)), rules.clamp(max=self.rules - 1)]
        only_first = torch.zeros_like(rows)
        only_first[:, 0] = True
        return torch.where(no_op.unsqueeze(1), only_first, rows)

    @torch.no_grad()
    def act(self, batch: Batch, greedy: bool = False) -> tuple[int, int, float, float]:
        rule_dist, _, value, _ = self.distributions(batch)
        rule = rule_dist.probs.argmax(1) if greedy else rule_dist.sample()
        _, location_dist, _, _ = self.distributions(batch, rule)
        location = location_dist.probs.argmax(1) if greedy else location_dist.sample()
        log_prob = rule_dist.log_prob(rule) + location_dist.log_prob(location) * (rule != self.rules)
        return int(rule), int(location), float(log_prob), float(value)

    def evaluate(self, batch: Batch, rules: torch.Tensor, locations: torch.Tensor):
        rule_dist, location_dist, value, _ = self.distributions(batch, rules)
        real = (rules != self.rules).float()
        log_prob = rule_dist.log_prob(rules) + location_dist.log_prob(locations) * real
        entropy = rule_dist.entropy() + location_dist.entropy() * real
        return log_prob, entropy, value


@dataclass
class Step:
    data: object
    rule: int
    location: int
    log_prob: float
    value: float
    reward: float
    done: bool


def advantages(steps: list[Step], last_value: float, config: PPOConfig) -> tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) advantages and the returns the value head regresses to."""
    gains = np.zeros(len(steps))
    running = 0.0
    for index in reversed(range(len(steps))):
        step = steps[index]
        following = last_value if index == len(steps) - 1 else steps[index + 1].value
        following = 0.0 if step.done else following
        delta = step.reward + config.gamma * following - step.value
        running = delta + config.gamma * config.gae_lambda * (0.0 if step.done else running)
        gains[index] = running
    return gains, gains + np.array([step.value for step in steps])


def update(policy: nn.Module, optimizer, steps: list[Step], last_value: float, config: PPOConfig,
           generator: torch.Generator, collate=Batch.from_data_list) -> float:  # fmt: skip
    """Clipped-PPO epochs over ``steps``; ``collate`` batches their observations for ``policy.evaluate``."""
    gains, returns = advantages(steps, last_value, config)
    gains_t = torch.as_tensor((gains - gains.mean()) / (gains.std() + 1e-8), dtype=torch.float32)
    returns_t = torch.as_tensor(returns, dtype=torch.float32)
    old_log_probs = torch.as_tensor([s.log_prob for s in steps], dtype=torch.float32)
    rules = torch.as_tensor([s.rule for s in steps])
    locations = torch.as_tensor([s.location for s in steps])
    loss_value = 0.0
    for _ in range(config.epochs):
        order = torch.randperm(len(steps), generator=generator)
        for start in range(0, len(steps), config.minibatch):
            index = order[start : start + config.minibatch]
            batch = collate([steps[i].data for i in index.tolist()])
            log_prob, entropy, value = policy.evaluate(batch, rules[index], locations[index])
            ratio = torch.exp(log_prob - old_log_probs[index])
            clipped = torch.clamp(ratio, 1 - config.clip, 1 + config.clip)
            policy_loss = -torch.min(ratio * gains_t[index], clipped * gains_t[index]).mean()
            value_loss = (value - returns_t[index]).pow(2).mean()
            loss = policy_loss + config.value_coefficient * value_loss - config.entropy * entropy.mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
            loss_value = loss.item()
    return loss_value


def train(env: GraphEnv, config: PPOConfig, seed: int = 0, time_limit_s: float = float("inf"),
          progress: ProgressCallback | None = None, resume: Path | None = None,
          scope: str = "") -> tuple[HierarchicalPolicy, dict]:  # fmt: skip
    """PPO on the real environment; returns the policy and training statistics.

    ``resume``: after every update the whole training state (policy, optimiser, counters, random
    generators) is written there atomically, and a run that finds it carries on from it, so training
    killed at any moment (kill -9 included) loses at most one update's rollout. The time limit counts
    the seconds spent before the interruption too. ``scope`` (e.g. the graphs trained on) is part of
    what a saved state must match to be resumed.
    """
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    observation, _ = env.reset(seed=seed)
    node_features = observation["graph"].nodes.shape[1]
    policy = HierarchicalPolicy.for_graphs(node_features, len(env.rules), config.hidden, env.max_locations)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    counters = {"episodes": 0, "env_steps": 0, "best_cost": env.initial_cost, "returns": [], "seconds": 0.0}
    identity = {"rules": [rule.id for rule in env.rules], "node_features": node_features, "hidden": config.hidden}
    identity |= {"scope": scope} if scope else {}
    resumed = load_training_state(resume, identity, policy, optimizer, generator, counters) if resume else 0
    started = time.perf_counter() - counters["seconds"]
    episodes, env_steps, best_cost, returns = (counters[k] for k in ("episodes", "env_steps", "best_cost", "returns"))
    episode_return = 0.0
    cycle_s = 0.0  # the last rollout and update: one more starts only when it would end within the limit
    while episodes < config.train_episodes and time.perf_counter() - started + cycle_s < time_limit_s:
        cycle_started = time.perf_counter()
        steps = []
        for _ in range(config.steps_per_update):
            data = to_data(observation)
            with torch.no_grad():
                rule, location, log_prob, value = policy.act(Batch.from_data_list([data]))
            observation, reward, terminated, truncated, info = env.step((rule, location))
            env_steps += 1
            best_cost = min(best_cost, info["cost_ms"])
            episode_return += reward
            done = terminated or truncated
            steps.append(Step(data, rule, location, log_prob, value, reward * config.reward_scale, done))
            if done:
                episodes += 1
                returns.append(episode_return)
                episode_return = 0.0
                observation, _ = env.reset()
        with torch.no_grad():
            _, _, last_value, _ = policy.distributions(Batch.from_data_list([to_data(observation)]))
        update(policy, optimizer, steps, float(last_value), config, generator)
        cycle_s = time.perf_counter() - cycle_started
        if resume:
            counters = {"episodes": episodes, "env_steps": env_steps, "best_cost": best_cost, "returns": returns,
                        "seconds": time.perf_counter() - started}  # fmt: skip
            save_training_state(resume, identity, policy, optimizer, generator, counters)
        if progress:
            progress(episodes, best_cost, env_steps)
    stats = {"train_episodes": episodes, "train_env_steps": env_steps, "train_seconds": time.perf_counter() - started,
             "best_cost_seen_in_training_ms": best_cost, "episode_returns": returns,
             "resumed_episodes": resumed}  # fmt: skip
    return policy, stats


def save_training_state(path: Path, identity: dict, policy: nn.Module, optimizer, generator: torch.Generator,
                        counters: dict) -> None:  # fmt: skip
    """Everything :func:`train` needs to carry on, written to a scratch file and renamed into place."""
    with replacing(path) as scratch:
        torch.save({"identity": identity, "policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
                    "torch_rng": torch.get_rng_state(), "generator": generator.get_state(), "counters": counters},
                   scratch)  # fmt: skip


def load_training_state(path: Path, identity: dict, policy: nn.Module, optimizer, generator: torch.Generator,
                        counters: dict) -> int:  # fmt: skip
    """Restore a state :func:`save_training_state` wrote for this graph's rules; returns the episodes it had done.

    A state for other rules or another network shape is refused in one line rather than half-loaded.
    """
    if not path.exists():
        return 0
    try:
        saved = torch.load(path, weights_only=False)
    except Exception as error:  # a torn or foreign file: say so, do not guess
        raise RlcompileError(f"cannot resume PPO training from {path}: {error}; delete it to start over") from None
    if saved.get("identity") != identity:
        raise RlcompileError(f"{path} holds PPO training for other rules or features; delete it or use another "
                             "--checkpoint")  # fmt: skip
    policy.load_state_dict(saved["policy"])
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["torch_rng"])
    generator.set_state(saved["generator"])
    counters.update(saved["counters"])
    return int(counters["episodes"])


def training_state_path(checkpoint: Path) -> Path:
    """Where training in progress towards ``checkpoint`` is kept (``agent.pt`` -> ``agent.pt.training``)."""
    return checkpoint.with_name(checkpoint.name + ".training")


def apply_policy(policy: HierarchicalPolicy, env: GraphEnv) -> tuple[ir.Model, float, list[Rewrite], float]:
    """Greedy rollout from the original graph: (best graph, its cost, rewrites to it, seconds)."""
    started = time.perf_counter()
    observation, info = env.reset()
    best = (env.model, info["cost_ms"], [])
    path: list[Rewrite] = []
    for _ in range(env.max_steps):
        with torch.no_grad():
            rule, location, _, _ = policy.act(Batch.from_data_list([to_data(observation)]), greedy=True)
        if rule == env.no_op:
            break
        chosen = env.locations[rule][location]
        observation, _, _, truncated, info = env.step((rule, location))
        path.append(Rewrite(env.rules[rule].id, chosen.nodes, info["cost_ms"]))
        if info["cost_ms"] < best[1]:
            best = (env.model, info["cost_ms"], list(path))
        if truncated:
            break
    return best[0], best[1], best[2], time.perf_counter() - started


def save_checkpoint(path: Path, policy: HierarchicalPolicy, config: PPOConfig, rule_ids: Sequence[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    node_features = policy.encoder.embed.in_features
    torch.save({"kind": "ppo", "config": asdict(config), "rules": list(rule_ids), "node_features": node_features,
                "state": policy.state_dict()}, path)  # fmt: skip


def load_checkpoint(path: Path) -> tuple[HierarchicalPolicy, PPOConfig, list[str]]:
    """A saved policy with its config and rules; a file of another agent is refused in one line."""
    saved = torch.load(path, weights_only=False)
    if not isinstance(saved, dict) or saved.get("kind", "ppo") != "ppo":
        raise RlcompileError(f"{path} is not a PPO checkpoint (trained with --agent {saved.get('kind')}?)")
    config = PPOConfig(**saved["config"])
    policy = HierarchicalPolicy.for_graphs(saved["node_features"], len(saved["rules"]), config.hidden)
    policy.load_state_dict(saved["state"])
    return policy, config, saved["rules"]


class PPOSearch(GraphSearch):
    """``rlcompile graph --agent ppo``: train on this graph (or load a checkpoint), then apply greedily."""

    name = "ppo"

    def __init__(self, budget: SearchBudget | None = None, config: PPOConfig | None = None, seed: int = 0,
                 checkpoint: Path | None = None, load: Path | None = None) -> None:  # fmt: skip
        super().__init__(budget)
        self.config = config or PPOConfig()
        self.seed = seed
        self.checkpoint = checkpoint
        self.load = load

    def search(self, model: ir.Model, rules: Sequence[Rule], cost_model: CostModel,
               progress: ProgressCallback | None = None) -> SearchResult:  # fmt: skip
        env = GraphEnv(model, rules, cost_model, max_steps=min(self.config.episode_steps, self.budget.max_steps))
        if self.load is not None:
            policy, _, rule_ids = load_checkpoint(self.load)
            if rule_ids != [rule.id for rule in rules]:
                raise RlcompileError(f"{self.load} was trained with other rules: {', '.join(rule_ids)}")
            stats = {"train_episodes": 0, "train_seconds": 0.0, "loaded": str(self.load)}
        else:
            resume = training_state_path(self.checkpoint) if self.checkpoint is not None else None
            policy, stats = train(env, self.config, self.seed, self.budget.time_limit_s, progress, resume)
            if self.checkpoint is not None:
                save_checkpoint(self.checkpoint, policy, self.config, [rule.id for rule in rules])
        best, cost, path, seconds = apply_policy(policy, env)
        stats |= {"inference_seconds": seconds}
        total = stats.get("train_seconds", 0.0) + seconds
        return SearchResult(best, env.initial_cost, cost, path, len(path), stats.get("train_env_steps", 0) + len(path),
                            total, "converged", {k: v for k, v in stats.items() if k != "episode_returns"})  # fmt: skip
