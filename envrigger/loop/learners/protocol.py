"""The one interface the loop talks to learners through: :class:`LoopLearner`; the bounds of learners' parameters.

A loop learner trains for a number of env steps on env factories (each makes a
:class:`~envrigger.loop.mixture.MixtureEnv`), hands out a frozen :meth:`~LoopLearner.policy`
for rollouts (collection, validation, evaluation), and saves and loads itself.
:data:`PARAM_BOUNDS` and :func:`check_params` hold each learner's numeric parameters (its
sizes and counts above all) inside bounds, wherever they come from (``loop.json``'s
``learner_params``, code): a learner never allocates ``2**bits`` weights for a bits of 60.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from envharness.values import shown

LEARNERS = (
    "qlearning",
    "ppo",
    "textq",
    "none",
    "skills",
)  # none: an agent the loop does not train; skills: its skill memory (--agent chat)


PARAM_BOUNDS: dict[str, dict[str, tuple[float, float]]] = {
    "ppo": {
        "n_envs": (1, 1024),
        "n_steps": (1, 1_000_000),
        "batch_size": (1, 1_000_000),
        "n_epochs": (1, 1000),
        "learning_rate": (0.0, 1.0),
        "gamma": (0.0, 1.0),
        "gae_lambda": (0.0, 1.0),
        "clip_range": (0.0, 10.0),
        "ent_coef": (0.0, 10.0),
        "net_arch": (1, 65_536),  # each layer's width
    },
    "textq": {
        "bits": (1, 26),  # 2**bits float64 weights: 512 MiB at most
        "learning_rate": (0.0, 10.0),
        "gamma": (0.0, 1.0),
        "lam": (0.0, 1.0),
        "epsilon_start": (0.0, 1.0),
        "epsilon_end": (0.0, 1.0),
        "explore_steps": (0, 10**12),
        "eval_epsilon": (0.0, 1.0),
        "novelty": (0.0, 1000.0),
        "replay": (0, 1000),
        "buffer": (0, 1_000_000),
    },
    "qlearning": {
        "alpha": (0.0, 1.0),
        "gamma": (0.0, 1.0),
        "epsilon": (0.0, 1.0),
        "epsilon_min": (0.0, 1.0),
        "epsilon_decay": (0.0, 1.0),
        "bins": (1, 1000),
        "clip": (0.0, 1e6),
    },
}
"""Each learner's numeric parameters and their closed bounds (a list, PPO's ``net_arch``: each element, at most 64 of them)."""


def check_params(kind: str, params: dict[str, Any]) -> None:
    """Raise a one-line ``ValueError`` for a learner parameter outside :data:`PARAM_BOUNDS` (names are the learner's to check).

    Example:
        >>> check_params("textq", {"bits": 60})
        Traceback (most recent call last):
        ...
        ValueError: textq: bits: got 60; give a number from 1 to 26
    """
    for name, value in params.items():
        bounds = PARAM_BOUNDS.get(kind, {}).get(name)
        if bounds is None:
            continue
        low, high = bounds
        values = value if isinstance(value, list) and len(value) <= 64 else [value]
        if not all(not isinstance(v, bool) and isinstance(v, (int, float)) and low <= v <= high for v in values):
            raise ValueError(f"{kind}: {name}: got {shown(value)}; give a number from {low:g} to {high:g}")


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
