"""Adapters: one per benchmark family, chosen by the unwrapped env's class.

Contains the adapter registry (:data:`ADAPTERS`, tried in order, a subclass before its
parent, the generic :class:`Adapter` the fallback; :func:`register_adapter`,
:func:`adapter_for`, :func:`family_of_id`) and the adapters of the built-in families.
Every module of this package is imported with it, so a family module registers its
adapters (``@register_adapter``) by being here: adding a family edits no list.

Example:
    >>> import gymnasium as gym
    >>> type(adapter_for(gym.make("FrozenLake-v1"))).__name__
    'FrozenLakeAdapter'
    >>> adapter_for(gym.make("Pendulum-v1")).family
    'generic'
"""

from __future__ import annotations

import importlib
import pkgutil

from envharness.adapters.base import Adapter, grid_distances
from envharness.adapters.classic_control import AcrobotAdapter, CartPoleAdapter, MountainCarAdapter, PhysicsCartPoleAdapter
from envharness.adapters.code_repair import CodeRepairAdapter, HumanEvalFixAdapter
from envharness.adapters.minigrid import MiniGridAdapter
from envharness.adapters.registry import ADAPTERS, adapter_class_for, adapter_families, adapter_for, family_of_id, register_adapter
from envharness.adapters.textworld import TextWorldAdapter
from envharness.adapters.toy_text import CliffWalkingAdapter, FrozenLakeAdapter, GeneratedFrozenLakeAdapter, TaxiAdapter

# The family modules register their adapters on import; a new module here is found without an edit.
for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_module.name}")

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
    "adapter_class_for",
    "adapter_families",
    "adapter_for",
    "family_of_id",
    "grid_distances",
    "register_adapter",
]
