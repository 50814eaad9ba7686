"""The env's own names for a run's actions and state features, for findings and reports.

Contains :class:`Vocabulary` and :func:`vocabulary`, which reads them from the adapter of
the run's base env (``Adapter.action_names``, ``Adapter.state_names``). Only a registered
Gymnasium id without a ``module:`` prefix is made, so a run's data never imports code;
any other run keeps the raw names (``obs[2]``, action ``4``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Vocabulary:
    """Names for Discrete actions and for stored state features; empty where the env has none.

    Example:
        >>> words = Vocabulary(actions=("left", "right"), states={"obs[2]": "pole_angle"})
        >>> words.action(1), words.action(7), words.state("obs[2]"), words.state("obs[0]")
        ('right', '7', 'pole_angle', 'obs[0]')
    """

    actions: tuple[str, ...] = ()
    states: dict[str, str] = field(default_factory=dict)
    env_id: str | None = None

    def action(self, action: Any) -> str:
        """The name of a stored action: the env's word for a Discrete index, a tool call's tool, else the action itself."""
        if isinstance(action, int) and not isinstance(action, bool) and 0 <= action < len(self.actions):
            return self.actions[action]
        if isinstance(action, dict) and isinstance(action.get("tool"), str):
            return action["tool"]
        return json.dumps(action) if not isinstance(action, str) else action

    def state(self, name: str) -> str:
        """A state feature's name in the env's terms (``obs[2]`` -> ``pole_angle``), else the raw name."""
        return self.states.get(name, name)


def vocabulary(spec_json: str | None) -> Vocabulary:
    """The vocabulary of the base env a spec (as stored with each episode) is built on."""
    if not spec_json:
        return Vocabulary()
    try:
        env_id = str(json.loads(spec_json).get("env_id") or "")
    except (ValueError, AttributeError):
        return Vocabulary()
    if not env_id or ":" in env_id:
        return Vocabulary(env_id=env_id or None)
    try:
        import gymnasium as gym
        import minigrid  # noqa: F401 - registers MiniGrid ids

        import envharness.envs  # noqa: F401 - registers envharness/... ids
        from envharness.adapters import adapter_for

        if env_id not in gym.registry:
            return Vocabulary(env_id=env_id)
        env = gym.make(env_id)
        try:
            adapter = adapter_for(env)
            return Vocabulary(actions=tuple(adapter.action_names), states=dict(adapter.state_names), env_id=env_id)
        finally:
            env.close()
    except Exception:  # an env that cannot be made here (a missing extra): raw names are still right
        return Vocabulary(env_id=env_id)


__all__ = ["Vocabulary", "vocabulary"]
