"""QS-DNN's agent (seed 003): tabular Q-learning over layers with experience replay.

State = (layer index, the previous layer's choice); action = this layer's primitive; reward = minus
(the layer's time + the conversions paid on its inputs given the choices already made). Epsilon is 1
for the first half of the episodes (pure exploration, which fills the Q-table), then drops by 0.1
every 5% of the episodes. After every episode the Q-table learns from that episode and from 8 episodes
replayed from a buffer of the last 128 (lr 0.05, gamma 0.9), each replayed backwards so the final
layer's cost reaches the first layers quickly. The replays matter: on SqueezeNet's table (65 layers,
1300 episodes) the best plan was 11-15% above the optimum with one replay per episode, 0.2-0.6% with 8.
The answer is the best complete plan seen, by its undiscounted total, not the greedy policy at the end.
"""

from __future__ import annotations

import random
from collections import deque

import numpy as np

from rlcompile.layer.problem import SelectionProblem
from rlcompile.layer.solvers.base import MIN_EPISODES, EpisodeBudget, Solver, SolverResult, default_episodes

Transition = tuple[tuple[int, int], int, float, tuple[int, int] | None]


class QLearning(Solver):
    name = "qlearning"

    def __init__(self, episodes: int | None = None, learning_rate: float = 0.05, discount: float = 0.9,
                 replay_size: int = 128, replays_per_episode: int = 8) -> None:  # fmt: skip
        self.episodes = episodes
        self.learning_rate = learning_rate
        self.discount = discount
        self.replay_size = replay_size
        self.replays_per_episode = replays_per_episode

    def epsilon(self, episode: int, total: int) -> float:
        fraction = episode / total
        if fraction < 0.5:
            return 1.0
        return max(0.0, 0.9 - 0.1 * int((fraction - 0.5) / 0.05))

    def solve(self, problem: SelectionProblem, seed: int = 0, seconds: float | None = None) -> SolverResult:
        """``seconds``: the episodes are fitted to it after the first half of :data:`MIN_EPISODES` (all exploring:
        epsilon is 1 for the first half of any run that long), so the schedule still ends greedy."""
        rng = random.Random(seed)
        # fitted within the first half of even the shortest fitted run
        budget = EpisodeBudget(self.episodes or default_episodes(problem), seconds, fit_after=MIN_EPISODES // 2)
        q: dict[tuple[int, int], np.ndarray] = {}
        replay: deque[list[Transition]] = deque(maxlen=self.replay_size)
        best_plan, best_total, history = None, float("inf"), []
        episode = 0
        while budget.allows(episode):
            plan, transitions = self.run_episode(problem, q, self.epsilon(episode, budget.total), rng)
            total = -sum(reward for _, _, reward, _ in transitions)
            if total < best_total:
                best_plan, best_total = plan, total
            history.append(best_total)
            replay.append(transitions)
            self.learn(q, problem, transitions)
            for _ in range(self.replays_per_episode):
                self.learn(q, problem, rng.choice(replay))
            episode += 1
        return SolverResult(best_plan, best_total, episode, history,
                            {"states": len(q), "episodes_planned": budget.planned})  # fmt: skip

    def values(self, q: dict, problem: SelectionProblem, state: tuple[int, int]) -> np.ndarray:
        if state not in q:
            q[state] = np.zeros(len(problem.options[state[0]]))
        return q[state]

    def run_episode(self, problem: SelectionProblem, q: dict, epsilon: float,
                    rng: random.Random) -> tuple[list[int], list[Transition]]:  # fmt: skip
        plan: list[int] = []
        layout_of: dict[int, str] = {}
        transitions: list[Transition] = []
        previous = 0
        for layer in range(len(problem)):
            state = (layer, previous)
            values = self.values(q, problem, state)
            if rng.random() < epsilon:
                choice = rng.randrange(len(values))
            else:
                choice = int(np.flatnonzero(values == values.max())[0])
            reward = -problem.step_cost(layer, choice, layout_of)
            layout_of[layer] = problem.options[layer][choice].layout
            following = (layer + 1, choice) if layer + 1 < len(problem) else None
            transitions.append((state, choice, reward, following))
            plan.append(choice)
            previous = choice
        return plan, transitions

    def learn(self, q: dict, problem: SelectionProblem, transitions: list[Transition]) -> None:
        for state, action, reward, following in reversed(transitions):
            future = 0.0 if following is None else float(self.values(q, problem, following).max())
            values = self.values(q, problem, state)
            values[action] += self.learning_rate * (reward + self.discount * future - values[action])
