"""The classic-control family: a controller for CartPole (and its physics levels) and for MountainCar.

Contains :data:`FAMILY` and :func:`controller`, its reference solver. Acrobot has none yet:
asking for one is a :class:`~envrigger.family_registry.MissingPart` that names it.

Example:
    >>> import envharness
    >>> type(controller(envharness.wrap("MountainCar-v0"))).__name__
    'MountainCarController'
    >>> controller(envharness.wrap("Acrobot-v1"))
    Traceback (most recent call last):
    ...
    envrigger.family_registry.MissingPart: family 'classic_control' has no reference solver for AcrobotEnv; use --policy random or pass your own policy
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.mountain_car import MountainCarEnv

from envrigger.family_registry import Family, MissingPart, register_family
from envrigger.policies.reference import CartPoleController, MountainCarController

_CONTROLLERS: tuple[tuple[type, Any], ...] = ((CartPoleEnv, CartPoleController), (MountainCarEnv, MountainCarController))


def controller(env: gym.Env) -> Any:
    """The controller for ``env``'s base env, by its class."""
    raw = env.unwrapped
    for env_class, make in _CONTROLLERS:
        if isinstance(raw, env_class):
            return make(env)
    raise MissingPart(
        f"family 'classic_control' has no reference solver for {type(raw).__name__}; use --policy random or pass your own policy"
    )


FAMILY = register_family(Family("classic_control", reference_solver=controller))

__all__ = ["FAMILY", "controller"]
