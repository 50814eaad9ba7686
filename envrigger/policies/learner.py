"""Learners: policies that improve from transitions, and the loop that trains them.

Contains :class:`Transition`, the :class:`Learner` protocol and :func:`fit`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol, runtime_checkable


class Transition(NamedTuple):
    """What a learner learns from: one step, as the agent saw it."""

    obs: Any
    action: Any
    reward: float
    next_obs: Any
    terminated: bool
    truncated: bool
    info: dict


@runtime_checkable
class Learner(Protocol):
    """A policy that learns: ``update(transition)``, ``end_episode()``, ``save(path)``; ``training`` toggles exploration.

    Example:
        >>> import gymnasium as gym
        >>> from envrigger.policies.qlearning import QLearner
        >>> isinstance(QLearner(gym.spaces.Discrete(4), gym.spaces.Discrete(16)), Learner)
        True
    """

    name: str
    training: bool

    def act(self, obs: Any, info: dict[str, Any]) -> Any: ...

    def update(self, transition: Transition) -> None: ...

    def end_episode(self) -> None: ...

    def save(self, path: str) -> None: ...


def learn_episode(learner: Learner, env: Any, seed: int, levels: set[str] | None = None) -> tuple[bool, float, int]:
    """Play one training episode, updating ``learner`` on every transition; (success, return, steps).

    ``levels``, if given, collects the level id the episode was played on.
    """
    obs, info = env.reset(seed=int(seed))
    if levels is not None and info.get("level_id") is not None:
        levels.add(info["level_id"])
    done, total, steps = False, 0.0, 0
    while not done:
        action = learner.act(obs, info)
        next_obs, reward, terminated, truncated, info = env.step(action)
        learner.update(Transition(obs, action, float(reward), next_obs, terminated, truncated, info))
        obs, done = next_obs, terminated or truncated
        total += float(reward)
        steps += 1
    learner.end_episode()
    return bool(info["verdict"].success), total, steps


def fit(learner: Learner, env: Any, seeds: Iterable[int]) -> dict[str, float]:
    """Train ``learner`` on ``env`` for one episode per seed; return success rate and mean return.

    Example:
        >>> import envharness
        >>> from envrigger.policies.qlearning import QLearner
        >>> env = envharness.wrap("FrozenLake-v1", is_slippery=False)
        >>> learner = QLearner(env.action_space, env.observation_space, seed=0)
        >>> stats = fit(learner, env, range(300))
        >>> stats["episodes"], learner.training
        (300, False)
    """
    learner.training = True
    successes, returns, count = 0, 0.0, 0
    try:
        for seed in seeds:
            success, total, _ = learn_episode(learner, env, seed)
            successes += success
            returns += total
            count += 1
    finally:
        learner.training = False
    return {"episodes": count, "success_rate": successes / max(count, 1), "mean_return": returns / max(count, 1)}
