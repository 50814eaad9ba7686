"""The one interface the loop talks to learners through: :class:`LoopLearner`.

A loop learner trains for a number of env steps on env factories (each makes a
:class:`~envrigger.loop.mixture.MixtureEnv`), hands out a frozen :meth:`~LoopLearner.policy`
for rollouts (collection, validation, evaluation), and saves and loads itself.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

LEARNERS = (
    "qlearning",
    "ppo",
    "textq",
    "none",
    "skills",
)  # none: an agent the loop does not train; skills: its skill memory (--agent chat)


@runtime_checkable
class LoopLearner(Protocol):
    """What the loop needs from a learner.

    Example:
        >>> import envharness
        >>> from envrigger.loop.learners import make_learner
        >>> env = envharness.wrap("FrozenLake-v1", is_slippery=False)
        >>> isinstance(make_learner("qlearning", env, seed=0), LoopLearner)
        True
    """

    kind: str
    policy_id: str

    def train(self, make_env: Callable[[], gym.Env], steps: int, seed: int) -> int:
        """Train for at least ``steps`` env steps on envs from ``make_env``; return the steps taken."""
        ...

    def policy(self) -> Any:
        """A frozen, picklable copy of the current policy for rollouts."""
        ...

    def save(self, path: Path) -> Path:
        """Write the learner under ``path`` (a suffix is added); return the file written."""
        ...
