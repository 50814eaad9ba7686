"""Adapters: one per benchmark family, chosen by the unwrapped env's class.

Contains :data:`ADAPTERS` (tried in order; the generic :class:`Adapter` is the fallback)
and :func:`adapter_for`.

Example:
    >>> import gymnasium as gym
    >>> type(adapter_for(gym.make("FrozenLake-v1"))).__name__
    'FrozenLakeAdapter'
    >>> adapter_for(gym.make("Pendulum-v1")).family
    'generic'
"""

from __future__ import annotations

import gymnasium as gym

from envharness.adapters.base import Adapter, grid_distances
from envharness.adapters.classic_control import AcrobotAdapter, CartPoleAdapter, MountainCarAdapter, PhysicsCartPoleAdapter
from envharness.adapters.code_repair import CodeRepairAdapter, HumanEvalFixAdapter
from envharness.adapters.minigrid import MiniGridAdapter
from envharness.adapters.textworld import TextWorldAdapter
from envharness.adapters.toy_text import CliffWalkingAdapter, FrozenLakeAdapter, GeneratedFrozenLakeAdapter, TaxiAdapter

ADAPTERS: list[type[Adapter]] = [
    MiniGridAdapter,
    GeneratedFrozenLakeAdapter,  # before FrozenLakeAdapter: a subclass of its env
    FrozenLakeAdapter,
    TaxiAdapter,
    CliffWalkingAdapter,
    CartPoleAdapter,
    PhysicsCartPoleAdapter,
    MountainCarAdapter,
    AcrobotAdapter,
    HumanEvalFixAdapter,  # before CodeRepairAdapter: a subclass of its env
    CodeRepairAdapter,
    TextWorldAdapter,
]


def adapter_for(env: gym.Env) -> Adapter:
    """The adapter serving ``env``: the first in :data:`ADAPTERS` that matches, else the generic one."""
    raw = env.unwrapped
    for cls in ADAPTERS:
        if cls.matches(raw):
            return cls(env)
    return Adapter(env)


__all__ = [
    "ADAPTERS",
    "AcrobotAdapter",
    "Adapter",
    "CartPoleAdapter",
    "CliffWalkingAdapter",
    "CodeRepairAdapter",
    "FrozenLakeAdapter",
    "GeneratedFrozenLakeAdapter",
    "HumanEvalFixAdapter",
    "MiniGridAdapter",
    "MountainCarAdapter",
    "PhysicsCartPoleAdapter",
    "TaxiAdapter",
    "TextWorldAdapter",
    "adapter_for",
    "grid_distances",
]
