"""The adapter of a harness wrapped around another harness: the inner harness's verdict is the verdict.

Contains :class:`NestedAdapter`. When a :class:`~envharness.harness.Harness` wraps an env
that already contains a harness (``wrap(gym.make("exported/Id-v0"), ActionSlip(p=0.1))``),
the outer one must not judge the inner one's transformed output as if it were a base
env. It takes the verdict the inner harness computed from the base env, and offers no
state edits: state transforms belong in the inner harness, which applies them before
it snapshots what its verifier judges against.
"""

from __future__ import annotations

from typing import Any

from envharness.adapters.base import Adapter, digest
from envharness.errors import StateAccessError
from envharness.verifier import Verdict


class NestedAdapter(Adapter):
    """Judges with the inner harness's verdict; reads level features and position through it.

    Args:
        env: the env the outer harness wraps (the inner harness, maybe under wrappers).
        inner: the inner harness.

    Example:
        >>> import envharness
        >>> from envharness.transforms import ActionSlip, MoveAgent
        >>> inner = envharness.wrap("FrozenLake-v1", MoveAgent(min_dist=1, max_dist=1), is_slippery=False)
        >>> outer = envharness.wrap(inner, ActionSlip(p=0.0))
        >>> outer.adapter.name, outer.reset(seed=0)[1]["level"]["goal_distance"]
        ('NestedAdapter', 1.0)
    """

    def __init__(self, env: Any, inner: Any) -> None:
        super().__init__(env)
        self._inner = inner
        base = inner._adapter
        self.family = base.family
        self.observes_goal = base.observes_goal
        self.kwargs_key = base.kwargs_key
        self.irreversible_endings, self.agent_endings = base.irreversible_endings, base.agent_endings

    def require(self, capability: str, transform: str) -> None:
        raise StateAccessError(
            f"{transform}: this env is already a harness, and state transforms must run before its verifier "
            "snapshots the level; put it in the inner harness's transforms instead"
        )

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        self.destroyed = self._inner._adapter.destroyed
        return self._inner._verdict

    def level_features(self) -> dict[str, float]:
        return self._inner._adapter.level_features()

    def level_id(self) -> str | None:
        return self._inner._adapter.level_id()

    def setup_key(self) -> str:
        inner, own = self._inner._adapter.setup_key(), super().setup_key()
        return digest(inner, own) if own else inner

    def position(self) -> Any:
        return self._inner._adapter.position()

    def time_limit(self) -> int | None:
        return self._inner._max_steps

    def enforced_limit(self) -> int | None:
        return self._inner._max_steps

    def restart_clock(self) -> None:
        """The inner harness starts its own clock."""

    def checkpoint(self) -> list[Any]:
        return [self._inner._verdict, *self._inner._adapter.checkpoint()]

    def get_state(self) -> dict[str, Any]:
        return self._inner._adapter.get_state()
