"""The tabular learner (kind ``qlearning``): Q-learning over a discretized observation, for small envs.

Contains :class:`TabularLearner`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from envrigger.policies.learner import learn_episode
from envrigger.policies.qlearning import QLearner


class TabularLearner:
    """The loop's tabular Q-learner: one episode at a time, on a single env.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", is_slippery=False)
        >>> learner = TabularLearner(env, seed=0)
        >>> learner.train(lambda: envharness.wrap("FrozenLake-v1", is_slippery=False), 500, seed=0) >= 500
        True
    """

    kind = "qlearning"
    suffix = ".json"

    def __init__(self, env: gym.Env, seed: int = 0, **params: Any) -> None:
        self.q = QLearner(env.action_space, env.observation_space, seed=seed, **params)

    @property
    def policy_id(self) -> str:
        return self.q.policy_id

    def train(self, make_env: Callable[[], gym.Env], steps: int, seed: int) -> int:
        env = make_env()
        taken = 0
        self.q.training = True
        try:
            while taken < steps:
                _, _, length = learn_episode(self.q, env, 0)  # the env picks the level; its seed is ignored
                taken += length
        finally:
            self.q.training = False
            env.close()
        return taken

    def policy(self) -> QLearner:
        return copy.deepcopy(self.q)

    def save(self, path: Path) -> Path:
        target = Path(path).with_suffix(self.suffix)
        self.q.save(str(target))
        return target

    @classmethod
    def load(cls, path: Path, env: gym.Env) -> TabularLearner:
        learner = cls.__new__(cls)
        learner.q = QLearner.load(str(Path(path).with_suffix(cls.suffix)), env)
        return learner
