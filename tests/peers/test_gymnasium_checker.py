"""Gymnasium's own env checker on every registered Gymnasium env that needs no extra, wrapped by :func:`envharness.wrap`.

``check_env`` resets with seeds and compares (determinism) and checks the spaces against
what reset and step return; a wrap with no transforms must pass it, and pickle after a
step, for every env the user can make with plain Gymnasium.
"""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envharness

PLAIN_FAMILIES = ("gymnasium.envs.classic_control", "gymnasium.envs.toy_text")
IDS = sorted(
    spec.id
    for spec in gym.registry.values()
    if isinstance(spec.entry_point, str) and spec.entry_point.startswith(PLAIN_FAMILIES) and "jax" not in spec.entry_point.lower()
)


def test_every_plain_gymnasium_family_is_covered() -> None:
    assert {"CartPole-v1", "MountainCar-v0", "Acrobot-v1", "Pendulum-v1", "FrozenLake-v1", "Taxi-v4", "CliffWalking-v1"} <= set(IDS)


@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_check_env_passes_on_the_wrapped_env(env_id: str) -> None:
    env = envharness.wrap(gym.make(env_id))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # check_env warns that the env is wrapped; that is the point here
        check_env(env, skip_render_check=True)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    again = pickle.loads(pickle.dumps(env))  # a stepped wrapped env pickles, as Gymnasium's own envs do
    assert again.observation_space == env.observation_space
    env.close()
