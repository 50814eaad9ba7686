"""The family registry: an env family's parts, registered once under its adapter's family key.

Contains :class:`Family` (the record of one family's parts), :func:`register_family`,
:func:`family` (a family by key), :func:`family_of` (the family of an env, by its
adapter), :func:`families` (every registered family) and :class:`MissingPart` (the
named absence a lookup raises when a family lacks a part).

The key is :attr:`Adapter.family <envharness.adapters.base.Adapter.family>`: envharness
registers a family's adapters (``@register_adapter``), and the family's module in
:mod:`envrigger.families` registers the rest: its reference solver, text view, default agent harness and
level search. Catalog transforms name the families they are written for themselves
(``Transform.families``), so a family's remedies need no entry here. The registry
imports every module of :mod:`envrigger.families` the first time it is asked, so a new
family module is found without an edit to any list, and no consumer imports a family
module (which imports the consumers' classes) at import time. It sits below the packages
that consult it (agents, policies) and the family modules that fill it: it imports nothing
of envrigger.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from envharness.adapters import adapter_class_for

PARTS: Mapping[str, str] = {
    "reference_solver": "reference solver",
    "text_view": "text view",
    "agent_harness": "default agent harness",
    "search": "level search",
}


class MissingPart(ValueError):
    """A family has no such part (``family 'generic' has no reference solver``): a named absence, never a silent do-less."""


class LevelSearch(Protocol):
    """What the solvability and no-shortcut gates need of a family's level search (see :mod:`envharness.adapters.minigrid_search`)."""

    def solve(self, raw: Any, limit: int, max_states: int, avoid: Callable[[Any], bool] | None = None) -> tuple[bool | None, list[int]]: ...
    def save_state(self, raw: Any) -> tuple[Any, ...]: ...
    def restore_state(self, raw: Any, state: tuple[Any, ...]) -> None: ...
    def facts(self, raw: Any) -> frozenset[Any]: ...
    def offered(self, raw: Any) -> list[Any]: ...


@dataclass(frozen=True)
class Family:
    """One env family's parts, keyed by its adapter's ``family``; a part left None is a named absence.

    Args:
        key: the adapter family (``minigrid``, ``toy_text``...).
        reference_solver: ``env -> policy``, a planner or controller reading the base env's state.
        text_view: ``env -> TextView``, how the env reads as a chat (else the env's spaces decide).
        agent_harness: ``output -> AgentHarness``, a good starting harness for an LLM agent.
        search: a :class:`LevelSearch` that decides a level's solvability and its subgoals.

    Example:
        >>> family("minigrid").has("search"), family("generic").has("reference_solver")
        (True, False)
        >>> family("generic").part("reference_solver")
        Traceback (most recent call last):
        ...
        envrigger.family_registry.MissingPart: family 'generic' has no reference solver
    """

    key: str
    reference_solver: Callable[[gym.Env], Any] | None = None
    text_view: Callable[[gym.Env], Any] | None = None
    agent_harness: Callable[[str], Any] | None = None
    search: LevelSearch | None = field(default=None, compare=False)

    def has(self, name: str) -> bool:
        """Whether this family has the part ``name`` (one of :data:`PARTS`)."""
        return getattr(self, _checked(name)) is not None

    def part(self, name: str) -> Any:
        """The part ``name``, or :class:`MissingPart` naming the family and what it lacks."""
        found = getattr(self, _checked(name))
        if found is None:
            raise MissingPart(f"family {self.key!r} has no {PARTS[name]}")
        return found

    def parts(self) -> tuple[str, ...]:
        """The names of the parts this family has."""
        return tuple(name for name in PARTS if self.has(name))


def _checked(name: str) -> str:
    if name not in PARTS:
        raise KeyError(f"{name!r} is no family part; the parts are {', '.join(PARTS)}")
    return name


_FAMILIES: dict[str, Family] = {}
_discovered = False


def register_family(record: Family) -> Family:
    """Register ``record`` under its key (once per family module, at its import); a second family for one key is refused."""
    known = _FAMILIES.get(record.key)
    if known is not None and known != record:
        raise ValueError(f"family {record.key!r} is registered twice; give each family one module that registers it")
    _FAMILIES[record.key] = record
    return record


def _discover() -> None:
    """Import every module of :mod:`envrigger.families` once: each registers its family on import."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    package = importlib.import_module("envrigger.families")
    for module in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        importlib.import_module(f"{package.__name__}.{module.name}")


def family(key: str) -> Family:
    """The family registered under ``key``; an adapter family nothing registered has no parts.

    Example:
        >>> family("textworld").parts()
        ('reference_solver', 'text_view', 'agent_harness')
    """
    _discover()
    return _FAMILIES.get(key) or Family(key)


def family_of(env: gym.Env) -> Family:
    """The family of ``env``: its harness's adapter family, else the family of the adapter its unwrapped class would get.

    Example:
        >>> import envharness
        >>> family_of(envharness.wrap("CartPole-v1")).key
        'classic_control'
    """
    view = getattr(env, "adapter", None)
    key = view.family if view is not None else adapter_class_for(type(env.unwrapped)).family
    return family(key)


def families() -> dict[str, Family]:
    """Every registered family, by key."""
    _discover()
    return dict(sorted(_FAMILIES.items()))


__all__ = ["PARTS", "Family", "LevelSearch", "MissingPart", "families", "family", "family_of", "register_family"]
