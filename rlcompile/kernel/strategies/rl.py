"""The Chameleon / RELEASE search agent: PPO over the knob space, rewarded by the cost model.

State: the current configuration, each knob normalised to [0, 1]. Action: for every knob at once,
decrement / stay / increment (one 3-way categorical per knob). Reward: the cost model's estimate of the
new configuration (the surrogate reward; no hardware in the loop). The actor and the critic share their
first layer (seed 000, section 3.1). Each search iteration runs ``episodes`` episodes in parallel from
random starting points; an episode ends when at least 75% of the knobs "stay" or push against a bound
(the authors' convergence test) or after ``max_steps``. The policy keeps learning across iterations of
the same task, which is where the seeds' "fewer search steps than simulated annealing" comes from.

Every configuration the episodes visit forms the trajectory; the batch to measure is either the best
unmeasured points by predicted score (``sampling="greedy"``) or the k-means centroids of the 64 best of
them (``sampling="adaptive"``, see ``rlcompile.kernel.sampling``): ``chameleon`` is ``rl`` with adaptive
sampling. Hyper-parameters are the seeds' (Chameleon Table 9): Adam 1e-3, gamma 0.9, GAE lambda 0.99,
3 epochs, clip 0.3, value coefficient 1.0, entropy coefficient 0.1, 128 episodes, 500 steps.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rlcompile.kernel.sampling import PLAN_SIZE, adaptive_sample, check_sampling, top_candidates
from rlcompile.kernel.space import Config
from rlcompile.kernel.strategies.base import Proposal, SearchContext, SearchStrategy

STAY, ACTIONS = 1, 3


class ActorCritic(nn.Module):
    """Shared first layer; a policy head with 3 logits per knob; a value head."""

    def __init__(self, knobs: int, hidden: int = 64) -> None:
        super().__init__()
        self.knobs = knobs
        self.shared = nn.Sequential(nn.Linear(knobs, hidden), nn.Tanh())
        self.policy = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, knobs * ACTIONS))
        self.value = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, states: torch.Tensor) -> tuple[torch.distributions.Categorical, torch.Tensor]:
        features = self.shared(states)
        logits = self.policy(features).view(-1, self.knobs, ACTIONS)
        return torch.distributions.Categorical(logits=logits), self.value(features).squeeze(-1)


class PPOSearch(SearchStrategy):
    name = "rl"

    def __init__(
        self,
        seed: int = 0,
        sampling: str = "greedy",
        episodes: int = 128,
        max_steps: int = 500,
        learning_rate: float = 1e-3,
        gamma: float = 0.9,
        gae_lambda: float = 0.99,
        epochs: int = 3,
        clip: float = 0.3,
        value_coef: float = 1.0,
        entropy_coef: float = 0.1,
        converged_fraction: float = 0.75,
        minibatches: int = 4,
        two_largest_knobs: bool = False,
        candidates: str = "top",
        plan_size: int = PLAN_SIZE,
    ) -> None:
        super().__init__(seed)
        self.sampling, self.candidates, self.plan_size = check_sampling(sampling, candidates, plan_size)
        self.episodes, self.max_steps = episodes, max_steps
        self.learning_rate, self.gamma, self.gae_lambda = learning_rate, gamma, gae_lambda
        self.epochs, self.clip, self.minibatches = epochs, clip, minibatches
        self.value_coef, self.entropy_coef = value_coef, entropy_coef
        self.converged_fraction = converged_fraction
        self.two_largest_knobs = two_largest_knobs
        self.network: ActorCritic | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        #: Environment steps each search iteration took until every episode converged (Figure 5).
        self.steps_per_batch: list[int] = []
        #: Measurements adaptive sampling asked for per iteration (Figure 6).
        self.samples_per_batch: list[int] = []

    def prepare(self, context: SearchContext) -> None:
        super().prepare(context)
        torch.manual_seed(int(self.rng.integers(2**31)))
        self.network = ActorCritic(len(context.space.knobs))
        self.optimizer = torch.optim.Adam(self.network.parameters(), lr=self.learning_rate)

    def agent_state(self) -> dict | None:
        return {"network": self.network.state_dict()} if self.network is not None else None

    def load_agent_state(self, state: dict) -> None:
        """The policy and value network of a task with as many knobs (the optimiser starts afresh)."""
        self.network.load_state_dict(state["network"])

    def _propose(self, count: int) -> list[Proposal]:
        if not self.model_guided():
            self.stats.steps += 1
            return self.random_proposals(count)
        trajectory, scores = self.search()
        if self.sampling == "adaptive":
            measured = self.context.measured_configs
            ranked = top_candidates(trajectory, scores, measured, self.plan_size)
            candidates = ranked if self.candidates == "top" else trajectory
            sample = adaptive_sample(self.context.space, candidates, measured, self.rng,
                                     two_largest_knobs=self.two_largest_knobs, seed=self.seed)  # fmt: skip
            self.samples_per_batch.append(len(sample.configs))
            return self.realise_sample(sample.configs, ranked, count)
        order = np.argsort(-scores, kind="stable")
        ranked = (trajectory[i] for i in order if trajectory[i] not in self.context.measured_configs)
        return self.realise(ranked, count)

    def search(self) -> tuple[list[Config], np.ndarray]:
        """One PPO iteration: roll out the episodes, learn from them, return the visited configurations."""
        batch = self.rollout()
        self.update(batch)
        configs = [tuple(int(v) for v in row) for row in batch["next_configs"][batch["active"]]]
        scores = batch["rewards"][batch["active"]]
        unique: dict[Config, float] = {}
        for config, score in zip(configs, scores, strict=True):
            unique[config] = float(score)
        return list(unique), np.array(list(unique.values()))

    def rollout(self) -> dict[str, np.ndarray]:
        space = self.context.space
        sizes = space.sizes
        states = np.array(self.random_configs(self.episodes), dtype=np.int64)
        active = np.ones(self.episodes, dtype=bool)
        steps: dict[str, list] = {k: [] for k in ("obs", "actions", "logprobs", "values", "rewards", "dones",
                                                   "active", "next_configs")}  # fmt: skip
        step = 0
        for step in range(self.max_steps):
            observations = torch.as_tensor(space.normalized(states), dtype=torch.float32)
            with torch.no_grad():
                distribution, values = self.network(observations)
                actions = distribution.sample()
            moves = actions.numpy() - STAY
            next_states = np.clip(states + moves, 0, sizes - 1)
            rewards = self.predict([tuple(row) for row in next_states])
            still = (moves == 0) | (next_states == states)
            done = (still.mean(axis=1) >= self.converged_fraction) | (step == self.max_steps - 1)
            for key, value in (("obs", observations.numpy()), ("actions", actions.numpy()),
                               ("logprobs", distribution.log_prob(actions).sum(-1).numpy()),
                               ("values", values.numpy()), ("rewards", rewards), ("dones", done & active),
                               ("active", active.copy()), ("next_configs", next_states)):  # fmt: skip
                steps[key].append(value)
            states = np.where(active[:, None], next_states, states)
            active = active & ~done
            if not active.any():
                break
        self.stats.steps += step + 1
        self.steps_per_batch.append(step + 1)
        return {key: np.stack(value) for key, value in steps.items()}

    def advantages(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Generalised advantage estimation per episode (time-major arrays, masked after the episode ends)."""
        rewards, values, dones = batch["rewards"], batch["values"], batch["dones"]
        advantages = np.zeros_like(rewards, dtype=np.float64)
        running = np.zeros(rewards.shape[1])
        for t in reversed(range(len(rewards))):
            next_value = values[t + 1] if t + 1 < len(rewards) else np.zeros_like(values[t])
            nonterminal = 1.0 - dones[t]
            delta = rewards[t] + self.gamma * next_value * nonterminal - values[t]
            running = delta + self.gamma * self.gae_lambda * nonterminal * running
            advantages[t] = running
        return advantages, advantages + values

    def update(self, batch: dict[str, np.ndarray]) -> None:
        """Clipped-surrogate PPO on the transitions of the rollout."""
        advantages, returns = self.advantages(batch)
        mask = batch["active"].reshape(-1)
        data = {
            "obs": torch.as_tensor(batch["obs"].reshape(-1, batch["obs"].shape[-1])[mask], dtype=torch.float32),
            "actions": torch.as_tensor(batch["actions"].reshape(-1, batch["actions"].shape[-1])[mask]),
            "logprobs": torch.as_tensor(batch["logprobs"].reshape(-1)[mask], dtype=torch.float32),
            "advantages": torch.as_tensor(advantages.reshape(-1)[mask], dtype=torch.float32),
            "returns": torch.as_tensor(returns.reshape(-1)[mask], dtype=torch.float32),
        }
        size = len(data["obs"])
        generator = torch.Generator().manual_seed(int(self.rng.integers(2**31)))
        for _ in range(self.epochs):
            for indices in torch.randperm(size, generator=generator).chunk(self.minibatches):
                distribution, values = self.network(data["obs"][indices])
                logprobs = distribution.log_prob(data["actions"][indices]).sum(-1)
                advantage = data["advantages"][indices]
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
                ratio = torch.exp(logprobs - data["logprobs"][indices])
                policy_loss = -torch.min(
                    ratio * advantage, ratio.clamp(1 - self.clip, 1 + self.clip) * advantage
                ).mean()
                value_loss = ((values - data["returns"][indices]) ** 2).mean()
                entropy = distribution.entropy().sum(-1).mean()
                loss = policy_loss + self.value_coef * value_loss - self.entropy_coef * entropy
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()


class Chameleon(PPOSearch):
    """``rl`` with adaptive sampling and sample synthesis: the seeds' full method."""

    name = "chameleon"

    def __init__(self, seed: int = 0, **options) -> None:
        options.setdefault("sampling", "adaptive")
        super().__init__(seed, **options)
