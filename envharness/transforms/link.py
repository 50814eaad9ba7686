"""Link transforms: chain environments into one episode.

Contains :class:`Chain`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import Field

from envharness.make import make_base
from envharness.transforms.base import LinkTransform, register_transform
from envharness.values import MAX_ID, MAX_KWARGS, MAX_TRANSFORMS


@register_transform
class Chain(LinkTransform):
    """After this env's episode succeeds, continue in ``env_id`` (reshaped by ``transforms``).

    One episode, two verifiers: success is verdict(A) AND verdict(B). If A fails the
    episode ends there. Both envs must have the same observation and action spaces.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", Chain(env_id="FrozenLake-v1",
        ...     env_kwargs={"is_slippery": False}), is_slippery=False)
        >>> _ = env.reset(seed=0)
        >>> for action in [1, 1, 2, 2, 1, 2]:
        ...     obs, reward, terminated, truncated, info = env.step(action)
        >>> obs, terminated, info["verdict"].reason, info["segment"]
        (0, False, 'in progress', 1)
    """

    targets: ClassVar[tuple[str, ...]] = ("timeout",)

    env_id: str = Field(min_length=1, max_length=MAX_ID, description="Gymnasium id of the env that follows")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, max_length=MAX_KWARGS, description="keyword arguments for gymnasium.make")
    transforms: list[Annotated[dict[str, Any], Field(max_length=2)]] = Field(
        default_factory=list, max_length=MAX_TRANSFORMS, description="transform specs ({name, params}) for the linked env"
    )

    def segment(self) -> tuple[Any, list[dict[str, Any]]]:
        # env_kwargs go to gymnasium.make only, never to envharness's own options.
        return make_base(self.env_id, **self.env_kwargs), self.transforms

    def mutate(self, rng: np.random.Generator) -> Any:
        return self
