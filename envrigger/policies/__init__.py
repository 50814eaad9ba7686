"""Policies: what acts in an environment. ``act(obs, info) -> action``, seeded.

Contains the :class:`Policy` protocol, :class:`RandomPolicy`, and :func:`reference_policy`,
which picks the reference solver of an env's family (see :mod:`envrigger.policies.reference`).
"""

from __future__ import annotations

from typing import Any, Protocol, cast, runtime_checkable

import gymnasium as gym
import numpy as np


@runtime_checkable
class Policy(Protocol):
    """Anything with ``act(obs, info) -> action`` and a ``name``.

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomPolicy(gym.spaces.Discrete(2), seed=0), Policy)
        True
    """

    name: str

    def act(self, obs: Any, info: dict[str, Any]) -> Any: ...


class RandomPolicy:
    """Uniformly random actions from ``action_space``, reproducible from ``seed``.

    Example:
        >>> import gymnasium as gym
        >>> policy = RandomPolicy(gym.spaces.Discrete(4), seed=0)
        >>> [policy.act(None, {}) for _ in range(5)]
        [3, 2, 2, 1, 1]
    """

    name = "random"

    def __init__(self, action_space: gym.Space, seed: int | None = None) -> None:
        self.action_space = action_space
        self.seed = seed
        self._n = int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else None
        self.reset(None)

    def reset(self, seed: int | None) -> None:
        """Start an episode: the stream depends only on the policy seed and this episode's seed."""
        if self.seed is None:
            self.rng = np.random.default_rng()
        else:
            self.rng = np.random.default_rng(self.seed if seed is None else [self.seed, seed])
        if self._n is None:
            self.action_space.seed(int(self.rng.integers(2**31 - 1)))

    def act(self, obs: Any, info: dict[str, Any]) -> Any:
        if self._n is not None:
            return int(getattr(self.action_space, "start", 0)) + int(self.rng.integers(self._n))
        return self.action_space.sample()


def reference_policy(env: gym.Env) -> Policy:
    """The reference solver of ``env``'s family (reads the base env's state, like a planner); see :mod:`envrigger.families`.

    A family without one is a :class:`~envrigger.families.MissingPart` (a ``ValueError``) that names it.
    """
    from envrigger.family_registry import MissingPart, family_of

    try:
        solver = family_of(env).part("reference_solver")
    except MissingPart as missing:
        raise MissingPart(f"{missing} ({type(env.unwrapped).__name__}); use --policy random or pass your own policy") from None
    return cast(Policy, solver(env))


def load_policy(path: str, env: gym.Env, seed: int = 0) -> Policy:
    """A saved learner: a Q-learning JSON file, or ``ALGO:model.zip`` for Stable-Baselines3."""
    from pathlib import Path

    if str(path).endswith(".zip"):
        from envrigger.policies.sb3 import SB3Policy

        return SB3Policy.load(str(path), env)
    from envrigger.policies.qlearning import QLearner

    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no saved learner there; train one and save it first")
    return QLearner.load(str(path), env)


__all__ = ["Policy", "RandomPolicy", "load_policy", "reference_policy"]
