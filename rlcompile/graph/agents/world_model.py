"""The model-based agent (seed 004, chapter 4.3): an MDN-RNN world model and a PPO controller trained in it.

1. **Latent.** Each real observation is embedded by a GNN (:class:`~.gnn.GraphEncoder`) kept fixed at
   its seeded initialisation (a random-feature embedding: the thesis trains no VAE either, and a fixed
   encoder keeps the latent space still while the world model learns it).
2. **Data.** A random agent (uniform over the valid actions) steps the real environment.
3. **MDN-RNN.** An LSTM (256 hidden) reads (z_t, rule one-hot, location one-hot) and predicts a mixture
   of 8 diagonal Gaussians over z_{t+1}, the reward, the episode end, and which rules apply next.
4. **Controller.** PPO (the same hierarchical masked policy as the model-free agent, over [z, h])
   trained entirely inside the world model; sampling uses temperature tau (mixture logits / tau,
   sigmas * sqrt(tau)). In the dream a rule's locations are those it had in the real start graph.
5. **Evaluation.** The controller acts greedily in the real environment (z from the encoder, h from
   the MDN-RNN fed the actions taken); the rollout's best graph is the answer.

Trained on several graphs (``rlcompile graph-train --agent world-model``, a :class:`~..env.GraphSetEnv`)
the random rollouts visit all of them and each dream starts from one of their start latents, so the
saved agent (encoder, MDN-RNN, controller) applies to a graph it never saw with no training.

Reported: training time of each part, the world model's step time against the real environment's,
and its prediction error on held-out random rollouts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx_ir as ir
import torch
from torch import nn
from torch_geometric.data import Batch

from rlcompile.atomic import replacing
from rlcompile.errors import RlcompileError
from rlcompile.graph.agents.gnn import GraphEncoder, to_data
from rlcompile.graph.agents.ppo import HierarchicalPolicy, PPOConfig, Step, update
from rlcompile.graph.cost import CostModel
from rlcompile.graph.env import GraphEnv
from rlcompile.graph.onnx_graph import graph_hash
from rlcompile.graph.rules import Rule
from rlcompile.graph.search.base import GraphSearch, ProgressCallback, Rewrite, SearchBudget, SearchResult


@dataclass
class WorldModelConfig:
    random_episodes: int = 100
    episode_steps: int = 20  # capped by the budget's max_steps
    mixtures: int = 8
    hidden: int = 256
    latent_hidden: int = 32  # GNN width; the latent is 2x this (mean and max pooling)
    model_epochs: int = 30
    model_learning_rate: float = 1e-3
    temperature: float = 1.0
    dream_episodes: int = 2000
    collect_share: float = 0.4  # of the time limit, for the random rollouts
    controller: PPOConfig = field(default_factory=lambda: PPOConfig(steps_per_update=64))


class MDNRNN(nn.Module):
    """P(z_{t+1} | z_t, a_t, h_t) as a Gaussian mixture, plus reward, end-of-episode and next rule mask."""

    def __init__(self, latent: int, action: int, rules: int, hidden: int = 256, mixtures: int = 8) -> None:
        super().__init__()
        self.latent, self.mixtures = latent, mixtures
        self.lstm = nn.LSTM(latent + action, hidden, batch_first=True)
        self.mixture = nn.Linear(hidden, mixtures * (2 * latent + 1))
        self.reward = nn.Linear(hidden, 1)
        self.done = nn.Linear(hidden, 1)
        self.rule_mask = nn.Linear(hidden, rules)

    def forward(self, inputs: torch.Tensor, state=None):
        out, state = self.lstm(inputs, state)
        parameters = self.mixture(out)
        k, d = self.mixtures, self.latent
        logits = parameters[..., :k]
        means = parameters[..., k : k + k * d].reshape(*out.shape[:-1], k, d)
        log_sigmas = parameters[..., k + k * d :].reshape(*out.shape[:-1], k, d).clamp(-6, 3)
        heads = (self.reward(out).squeeze(-1), self.done(out).squeeze(-1), self.rule_mask(out))
        return (logits, means, log_sigmas), heads, out, state

    def mixture_nll(self, mixture, target: torch.Tensor) -> torch.Tensor:
        logits, means, log_sigmas = mixture
        target = target.unsqueeze(-2)
        log_normal = -0.5 * (((target - means) / log_sigmas.exp()) ** 2) - log_sigmas - 0.5 * math.log(2 * math.pi)
        nll = -torch.logsumexp(torch.log_softmax(logits, -1) + log_normal.sum(-1), dim=-1).mean()
        return nll / self.latent  # per latent dimension, so it does not drown the reward and done heads

    @staticmethod
    def sample(mixture, temperature: float, generator: torch.Generator) -> torch.Tensor:
        logits, means, log_sigmas = mixture
        weights = torch.softmax(logits / max(temperature, 1e-6), dim=-1)
        component = torch.multinomial(weights, 1, generator=generator).squeeze(-1)
        chosen_means = means[torch.arange(len(component)), component]
        sigma = log_sigmas[torch.arange(len(component)), component].exp() * math.sqrt(temperature)
        return chosen_means + sigma * torch.randn(chosen_means.shape, generator=generator)


def action_vector(rule: int, location: int, rules: int, locations: int) -> torch.Tensor:
    vector = torch.zeros(rules + 1 + locations)
    vector[rule] = 1.0
    if rule < rules:
        vector[rules + 1 + location] = 1.0
    return vector


@dataclass
class Rollout:
    latents: list[torch.Tensor]  # z_0 .. z_T
    actions: list[torch.Tensor]
    rewards: list[float]
    dones: list[float]
    rule_masks: list[torch.Tensor]  # mask after each action
    step_seconds: list[float]


def random_rollouts(env: GraphEnv, encoder: GraphEncoder, episodes: int, rng: np.random.Generator,
                    deadline: float = float("inf")) -> list[Rollout]:  # fmt: skip
    """A uniform random agent over the valid actions, on the real environment, until ``deadline``."""
    rollouts = []
    while len(rollouts) < episodes and (len(rollouts) < 2 or time.perf_counter() < deadline):
        observation, _ = env.reset()
        rollout = Rollout([embed(encoder, observation)], [], [], [], [], [])
        for _ in range(env.max_steps):
            actions = env.valid_actions()
            rule, location = actions[rng.integers(len(actions))]
            started = time.perf_counter()
            observation, reward, terminated, truncated, _ = env.step((rule, location))
            rollout.step_seconds.append(time.perf_counter() - started)
            rollout.actions.append(action_vector(rule, location, len(env.rules), env.max_locations))
            rollout.rewards.append(reward)
            rollout.dones.append(float(terminated or truncated))
            rollout.latents.append(embed(encoder, observation))
            rollout.rule_masks.append(torch.as_tensor(observation["rule_mask"], dtype=torch.float32))
            if terminated or truncated:
                break
        rollouts.append(rollout)
    return rollouts


@torch.no_grad()
def embed(encoder: GraphEncoder, observation: dict) -> torch.Tensor:
    return encoder(Batch.from_data_list([to_data(observation)]))[1][0]


def sequence_tensors(rollout: Rollout):
    inputs = torch.cat([torch.stack(rollout.latents[:-1]), torch.stack(rollout.actions)], dim=1).unsqueeze(0)
    return (inputs, torch.stack(rollout.latents[1:]).unsqueeze(0), torch.tensor([rollout.rewards]),
            torch.tensor([rollout.dones]), torch.stack(rollout.rule_masks).unsqueeze(0))  # fmt: skip


def model_losses(model: MDNRNN, rollout: Rollout, reward_scale: float) -> dict[str, torch.Tensor]:
    inputs, targets, rewards, dones, masks = sequence_tensors(rollout)
    mixture, (reward, done, mask_logits), _, _ = model(inputs)
    bce = nn.functional.binary_cross_entropy_with_logits
    return {
        "latent_nll": model.mixture_nll(mixture, targets),
        "reward_mse": (reward - rewards * reward_scale).pow(2).mean(),
        "done_bce": bce(done, dones),
        "mask_bce": bce(mask_logits, masks),
    }


def train_world_model(model: MDNRNN, rollouts: list[Rollout], config: WorldModelConfig, generator) -> list[float]:
    optimizer = torch.optim.Adam(model.parameters(), lr=config.model_learning_rate)
    history = []
    for _ in range(config.model_epochs):
        total = 0.0
        for index in torch.randperm(len(rollouts), generator=generator).tolist():
            loss = sum(model_losses(model, rollouts[index], config.controller.reward_scale).values())
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += float(loss.detach())
        history.append(total / max(len(rollouts), 1))
    return history


@torch.no_grad()
def prediction_error(model: MDNRNN, rollouts: list[Rollout], reward_scale: float) -> dict[str, float]:
    """On held-out rollouts: reward MAE (in reward units), latent error of the mixture mean, NLL."""
    reward_errors, latent_errors, nlls = [], [], []
    for rollout in rollouts:
        inputs, targets, rewards, _, _ = sequence_tensors(rollout)
        mixture, (reward, _, _), _, _ = model(inputs)
        logits, means, _ = mixture
        expected = (torch.softmax(logits, -1).unsqueeze(-1) * means).sum(-2)
        reward_errors.append(float((reward / reward_scale - rewards).abs().mean()))
        latent_errors.append(float((expected - targets).pow(2).mean().sqrt()))
        nlls.append(float(model.mixture_nll(mixture, targets)))
    return {"reward_mae": float(np.mean(reward_errors)), "latent_rmse": float(np.mean(latent_errors)),
            "latent_nll": float(np.mean(nlls))}  # fmt: skip


class DreamEnv:
    """The world model as an environment: state (z, h); rule mask predicted; locations as at the start.

    ``starts``: (latent, location mask) of each real start graph; each dream begins at one of them,
    drawn at random when there are several (training on a set of graphs).
    """

    def __init__(self, model: MDNRNN, starts: Sequence[tuple[torch.Tensor, torch.Tensor]], rules: int,
                 locations: int, config: WorldModelConfig, generator: torch.Generator) -> None:  # fmt: skip
        self.model, self.starts = model, list(starts)
        self.rules, self.locations, self.config, self.generator = rules, locations, config, generator
        self.step_seconds = 0.0
        self.steps_total = 0

    @property
    def latent_size(self) -> int:
        return self.starts[0][0].numel()

    def reset(self):
        pick = int(torch.randint(len(self.starts), (1,), generator=self.generator)) if len(self.starts) > 1 else 0
        start, self.location_mask = self.starts[pick]
        self.z, self.state, self.steps = start, None, 0
        self.rule_mask = [*self.location_mask.any(dim=1).tolist(), True]
        self.h = torch.zeros(self.model.lstm.hidden_size)
        return self.observe()

    def observe(self) -> SimpleNamespace:
        return SimpleNamespace(x=torch.cat([self.z, self.h]), rule_mask=torch.tensor(self.rule_mask),
                               location_mask=self.location_mask)  # fmt: skip

    @torch.no_grad()
    def step(self, rule: int, location: int):
        if rule == self.rules:
            return self.observe(), 0.0, True
        started = time.perf_counter()
        vector = action_vector(rule, location, self.rules, self.locations)
        inputs = torch.cat([self.z, vector]).reshape(1, 1, -1)
        mixture, (reward, done, mask_logits), out, self.state = self.model(inputs, self.state)
        flat = tuple(part[0, 0].unsqueeze(0) for part in mixture)
        self.z = MDNRNN.sample(flat, self.config.temperature, self.generator)[0]
        self.h = out[0, 0]
        self.steps += 1
        self.steps_total += 1
        predicted_mask = (torch.sigmoid(mask_logits[0, 0]) > 0.5) & torch.tensor([*self.rule_mask[:-1], True])
        self.rule_mask = [*predicted_mask[:-1].tolist(), True]
        finished = bool(torch.sigmoid(done[0, 0]) > 0.5) or self.steps >= self.config.episode_steps
        self.step_seconds += time.perf_counter() - started
        return self.observe(), float(reward[0, 0]), finished


class LatentInput(nn.Module):
    """The controller's 'encoder': the observation already is the vector [z, h]."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.output_size = size

    def forward(self, batch):
        return None, batch.x


def collate_latents(observations: list[SimpleNamespace]) -> SimpleNamespace:
    return SimpleNamespace(
        x=torch.stack([o.x for o in observations]),
        rule_mask=torch.stack([o.rule_mask for o in observations]),
        location_mask=torch.stack([o.location_mask for o in observations]),
    )


def controller_policy(latent: int, world: MDNRNN, rules: int, hidden: int, locations: int) -> HierarchicalPolicy:
    """The controller's network: the model-free agent's hierarchical policy over [z, h]."""
    return HierarchicalPolicy(LatentInput(latent + world.lstm.hidden_size), rules, hidden, locations)


def train_controller(dream: DreamEnv, config: WorldModelConfig, seed: int,
                     deadline: float = float("inf")) -> tuple[HierarchicalPolicy, dict]:  # fmt: skip
    torch.manual_seed(seed)
    ppo = config.controller
    policy = controller_policy(dream.latent_size, dream.model, dream.rules, ppo.hidden, dream.locations)
    optimizer = torch.optim.Adam(policy.parameters(), lr=ppo.learning_rate)
    generator = torch.Generator().manual_seed(seed)
    observation = dream.reset()
    episodes = steps_taken = 0
    started = time.perf_counter()
    while episodes < config.dream_episodes and time.perf_counter() < deadline:
        steps = []
        for _ in range(ppo.steps_per_update):
            batch = collate_latents([observation])
            rule, location, log_prob, value = policy.act(batch)
            following, reward, done = dream.step(rule, location)
            steps.append(Step(observation, rule, location, log_prob, value, reward, done))
            steps_taken += 1
            observation = following
            if done:
                episodes += 1
                observation = dream.reset()
        with torch.no_grad():
            _, _, last_value, _ = policy.distributions(collate_latents([observation]))
        update(policy, optimizer, steps, float(last_value), ppo, generator, collate_latents)
    seconds = time.perf_counter() - started
    return policy, {"dream_episodes": episodes, "dream_steps": steps_taken, "controller_seconds": seconds,
                    "dream_step_ms": 1e3 * dream.step_seconds / max(dream.steps_total, 1)}  # fmt: skip


@torch.no_grad()
def apply_controller(policy, model: MDNRNN, encoder: GraphEncoder, env: GraphEnv):
    """Greedy in the real environment; h follows the MDN-RNN fed the real latents and actions."""
    started = time.perf_counter()
    observation, info = env.reset()
    state, h = None, torch.zeros(model.lstm.hidden_size)
    best, path = (env.model, info["cost_ms"], []), []
    for _ in range(env.max_steps):
        z = embed(encoder, observation)
        batch = SimpleNamespace(
            x=torch.cat([z, h]).unsqueeze(0),
            rule_mask=torch.as_tensor(observation["rule_mask"], dtype=torch.bool).unsqueeze(0),
            location_mask=torch.as_tensor(observation["location_mask"], dtype=torch.bool).unsqueeze(0),
        )
        rule, location, _, _ = policy.act(batch, greedy=True)
        if rule == env.no_op:
            break
        chosen = env.locations[rule][location]
        _, _, out, state = model(torch.cat([z, action_vector(rule, location, len(env.rules), env.max_locations)])
                                 .reshape(1, 1, -1), state)  # fmt: skip
        h = out[0, 0]
        observation, _, _, truncated, info = env.step((rule, location))
        path.append(Rewrite(env.rules[rule].id, chosen.nodes, info["cost_ms"]))
        if info["cost_ms"] < best[1]:
            best = (env.model, info["cost_ms"], list(path))
        if truncated:
            break
    return best, time.perf_counter() - started


@dataclass
class WorldAgent:
    """A trained world-model agent: the fixed encoder, the MDN-RNN and the controller trained in it."""

    encoder: GraphEncoder
    world: MDNRNN
    controller: HierarchicalPolicy
    config: WorldModelConfig
    rule_ids: list[str]


def graph_envs(env: GraphEnv) -> list[GraphEnv]:
    """The real environments behind ``env``: its graphs when it is a set, else itself."""
    return list(getattr(env, "envs", [env]))


def fit(env: GraphEnv, config: WorldModelConfig, seed: int, time_limit_s: float,
        rollouts_file: Path | None = None) -> tuple[WorldAgent, dict]:  # fmt: skip
    """Random rollouts on the real environment (one graph or a set), the MDN-RNN on them, the
    controller in the dream; returns the agent and each part's statistics.

    ``rollouts_file``: the random rollouts (all the real-environment work) are saved there once
    collected and reused by a later call for the same rules and graphs, so an interrupted training
    starts again at the world model, not at the first real step.
    """
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    observation, _ = env.reset(seed=seed)
    encoder = GraphEncoder(observation["graph"].nodes.shape[1], hidden=config.latent_hidden).eval()
    started = time.perf_counter()
    deadline = started + time_limit_s
    identity = {"rules": [rule.id for rule in env.rules], "seed": seed, "episode_steps": env.max_steps,
                "graphs": [graph_hash(e.initial_model.graph) for e in graph_envs(env)]}  # fmt: skip
    rollouts = load_rollouts(rollouts_file, identity)
    if rollouts is None:
        rollouts = random_rollouts(env, encoder, config.random_episodes, np.random.default_rng(seed),
                                   started + config.collect_share * time_limit_s)  # fmt: skip
        save_rollouts(rollouts_file, identity, rollouts)
    collect_seconds = time.perf_counter() - started
    held_out = max(1, len(rollouts) // 5)
    training, evaluation = rollouts[held_out:] or rollouts, rollouts[:held_out]
    rules = len(env.rules)
    world = MDNRNN(encoder.output_size, rules + 1 + env.max_locations, rules + 1, config.hidden, config.mixtures)
    started = time.perf_counter()
    losses = train_world_model(world, training, config, generator)
    model_seconds = time.perf_counter() - started
    errors = prediction_error(world, evaluation, config.controller.reward_scale)
    starts = []
    for real in graph_envs(env):
        start, _ = real.reset()
        starts.append((embed(encoder, start), torch.as_tensor(start["location_mask"], dtype=torch.bool)))
    dream = DreamEnv(world, starts, rules, env.max_locations, config, generator)
    controller, controller_stats = train_controller(dream, config, seed, deadline)
    real_steps = [s for rollout in rollouts for s in rollout.step_seconds]
    stats = {
        "random_episodes": len(rollouts), "real_env_steps": len(real_steps), "collect_seconds": collect_seconds,
        "world_model_seconds": model_seconds, "world_model_final_loss": losses[-1] if losses else None,
        "prediction_error": errors, "real_step_ms": 1e3 * float(np.mean(real_steps)) if real_steps else None,
        "temperature": config.temperature, "graphs": len(starts), **controller_stats,
    }  # fmt: skip
    stats["train_seconds"] = collect_seconds + model_seconds + controller_stats["controller_seconds"]
    return WorldAgent(encoder, world, controller, config, identity["rules"]), stats


def save_rollouts(path: Path | None, identity: dict, rollouts: list[Rollout]) -> None:
    if path is not None:
        with replacing(path) as scratch:
            torch.save({"identity": identity, "rollouts": rollouts}, scratch)


def load_rollouts(path: Path | None, identity: dict) -> list[Rollout] | None:
    """Rollouts an interrupted training saved for these rules and graphs; None when there are none."""
    if path is None or not path.exists():
        return None
    try:
        saved = torch.load(path, weights_only=False)
    except Exception as error:  # a torn or foreign file: say so, do not guess
        raise RlcompileError(f"cannot resume world-model training from {path}: {error}; delete it") from None
    if saved.get("identity") != identity:
        raise RlcompileError(f"{path} holds rollouts of other graphs or rules; delete it or use another --checkpoint")
    return saved["rollouts"]


def save_checkpoint(path: Path, agent: WorldAgent) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"kind": "world-model", "config": asdict(agent.config), "rules": agent.rule_ids,
                "node_features": agent.encoder.embed.in_features, "locations": agent.controller.locations,
                "encoder": agent.encoder.state_dict(), "world": agent.world.state_dict(),
                "controller": agent.controller.state_dict()}, path)  # fmt: skip


def load_checkpoint(path: Path) -> WorldAgent:
    """A saved :class:`WorldAgent`; a file of another agent (PPO) is refused in one line."""
    saved = torch.load(path, weights_only=False)
    if not isinstance(saved, dict) or saved.get("kind") != "world-model":
        raise RlcompileError(f"{path} is not a world-model checkpoint (trained with --agent ppo?)")
    settings = dict(saved["config"])
    config = WorldModelConfig(**{**settings, "controller": PPOConfig(**settings["controller"])})
    rules = len(saved["rules"])
    encoder = GraphEncoder(saved["node_features"], hidden=config.latent_hidden).eval()
    world = MDNRNN(encoder.output_size, rules + 1 + saved["locations"], rules + 1, config.hidden, config.mixtures)
    controller = controller_policy(encoder.output_size, world, rules, config.controller.hidden, saved["locations"])
    for network, state in ((encoder, "encoder"), (world, "world"), (controller, "controller")):
        network.load_state_dict(saved[state])
    return WorldAgent(encoder, world, controller, config, list(saved["rules"]))


class WorldModelSearch(GraphSearch):
    """``rlcompile graph --agent world-model``: train on this graph (or load an agent), then apply greedily."""

    name = "world-model"

    def __init__(self, budget: SearchBudget | None = None, config: WorldModelConfig | None = None,
                 seed: int = 0, checkpoint: Path | None = None, load: Path | None = None) -> None:  # fmt: skip
        super().__init__(budget)
        self.config = config or WorldModelConfig()
        self.seed = seed
        self.checkpoint = checkpoint
        self.load = load

    def search(self, model: ir.Model, rules: Sequence[Rule], cost_model: CostModel,
               progress: ProgressCallback | None = None) -> SearchResult:  # fmt: skip
        env = GraphEnv(model, rules, cost_model, max_steps=min(self.config.episode_steps, self.budget.max_steps))
        if self.load is not None:
            agent = load_checkpoint(self.load)
            if agent.rule_ids != [rule.id for rule in rules]:
                raise RlcompileError(f"{self.load} was trained with other rules: {', '.join(agent.rule_ids)}")
            stats = {"train_seconds": 0.0, "random_episodes": 0, "real_env_steps": 0, "loaded": str(self.load)}
        else:
            agent, stats = fit(env, self.config, self.seed, self.budget.time_limit_s)
            if self.checkpoint is not None:
                save_checkpoint(self.checkpoint, agent)
        (best, cost, path), inference_seconds = apply_controller(agent.controller, agent.world, agent.encoder, env)
        stats["inference_seconds"] = inference_seconds
        total = stats["train_seconds"] + inference_seconds
        return SearchResult(best, env.initial_cost, cost, path, len(path), stats["real_env_steps"] + len(path),
                            total, "converged", stats)  # fmt: skip
