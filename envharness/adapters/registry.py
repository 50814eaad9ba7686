"""The adapter registry: which adapter serves an env, found by the env's class.

Contains :data:`ADAPTERS` (tried in order; a subclass before its parent, the generic
:class:`~envharness.adapters.base.Adapter` the fallback), :func:`register_adapter` (the
class decorator a family module puts on each of its adapters), :func:`adapter_for`,
:func:`adapter_class_for`, :func:`family_of_id` (an env id's family, from its registered
entry point) and :func:`adapter_families`.

A family is keyed by :attr:`Adapter.family <envharness.adapters.base.Adapter.family>`;
envrigger registers the family's other parts (reference solver, text view, agent
harness, search) under the same key (see :mod:`envrigger.families`).
"""

from __future__ import annotations

from typing import TypeVar

import gymnasium as gym

from envharness.adapters.base import Adapter
from envharness.make import check_env_id, make_base, registration

ADAPTERS: list[type[Adapter]] = []

AdapterT = TypeVar("AdapterT", bound=type[Adapter])


def register_adapter(cls: AdapterT) -> AdapterT:
    """Register an adapter class: it will serve the envs its :meth:`~Adapter.matches` accepts.

    A subclass is tried before the adapters it derives from (the more specific adapter
    wins: generated FrozenLake maps before FrozenLake), others in registration order.

    Example:
        >>> from envharness.adapters import FrozenLakeAdapter, GeneratedFrozenLakeAdapter
        >>> ADAPTERS.index(GeneratedFrozenLakeAdapter) < ADAPTERS.index(FrozenLakeAdapter)
        True
    """
    if cls in ADAPTERS:
        return cls
    parents = [i for i, registered in enumerate(ADAPTERS) if issubclass(cls, registered)]
    ADAPTERS.insert(min(parents) if parents else len(ADAPTERS), cls)
    return cls


def adapter_class_for(env_type: type) -> type[Adapter]:
    """The adapter class serving envs of class ``env_type``: the first in :data:`ADAPTERS` that matches, else the generic one."""
    for cls in ADAPTERS:
        if cls.matches(env_type):
            return cls
    return Adapter


def adapter_for(env: gym.Env) -> Adapter:
    """The adapter serving ``env`` (chosen by its unwrapped class)."""
    return adapter_class_for(type(env.unwrapped))(env)


def family_of_id(env_id: str) -> str:
    """The family of the env registered as ``env_id``, from its entry point; the env is made only when that is no class.

    Example:
        >>> family_of_id("MiniGrid-DoorKey-8x8-v0"), family_of_id("envharness/TextWorld-v0"), family_of_id("Pendulum-v1")
        ('minigrid', 'textworld', 'generic')
    """
    check_env_id(env_id)
    registered = registration(env_id)
    entry = registered.entry_point if registered is not None else None
    creator = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    if isinstance(creator, type):
        return adapter_class_for(creator).family
    env = make_base(env_id)  # a function entry point, or no registration (make_base says so)
    try:
        return adapter_class_for(type(env.unwrapped)).family
    finally:
        env.close()


def adapter_families() -> list[str]:
    """The family keys of the registered adapters, in registration order (``generic`` last)."""
    return [*dict.fromkeys(cls.family for cls in ADAPTERS), Adapter.family]


__all__ = ["ADAPTERS", "adapter_class_for", "adapter_families", "adapter_for", "family_of_id", "register_adapter"]
