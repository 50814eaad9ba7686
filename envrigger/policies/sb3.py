"""Stable-Baselines3 models as envrigger policies (optional extra: ``pip install "envharness[sb3]"``).

Contains :class:`SB3Policy`. Train with SB3 directly on a harness (it is a Gymnasium env),
then roll the model out, diagnose it, or load a saved ``.zip`` by path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

ALGORITHMS = ("PPO", "A2C", "DQN", "SAC", "TD3", "DDPG")


def _sb3() -> Any:
    try:
        import stable_baselines3
    except ImportError:
        raise ImportError('Stable-Baselines3 is not installed; pip install "envharness[sb3]"') from None
    return stable_baselines3


class SB3Policy:
    """Acts with a Stable-Baselines3 model's ``predict``; deterministic by default.

    Example:
        >>> import envharness
        >>> from stable_baselines3 import PPO
        >>> env = envharness.wrap("CartPole-v1")
        >>> policy = SB3Policy(PPO("MlpPolicy", env, seed=0, device="cpu"))
        >>> obs, info = env.reset(seed=0)
        >>> policy.act(obs, info) in (0, 1)
        True
    """

    name = "sb3"

    def __init__(self, model: Any, deterministic: bool = True) -> None:
        self.model, self.deterministic = model, deterministic
        self.discrete = hasattr(model.action_space, "n")

    @property
    def policy_id(self) -> str:
        return f"sb3:{type(self.model).__name__}"

    def reset(self, seed: int | None) -> None:
        if not self.deterministic and seed is not None:
            self.model.set_random_seed(int(seed))

    def act(self, obs: Any, info: dict[str, Any]) -> Any:
        action, _ = self.model.predict(obs, deterministic=self.deterministic)
        return int(action) if self.discrete else np.asarray(action)

    @staticmethod
    def act_batch(policies: list[SB3Policy], observations: list[Any], infos: list[dict[str, Any]]) -> list[Any]:
        """One ``predict`` call for several episodes (``policies``: copies of one policy, one per episode).

        Only a deterministic model predicts in one call: a sampling one is reseeded per episode
        (:meth:`reset`), which a shared call cannot honour, so it acts episode by episode.
        """
        first = policies[0]
        if not first.deterministic:
            return [policy.act(obs, info) for policy, obs, info in zip(policies, observations, infos, strict=True)]
        if isinstance(observations[0], dict):
            stacked: Any = {key: np.stack([obs[key] for obs in observations]) for key in observations[0]}
        else:
            stacked = np.stack(observations)
        actions, _ = first.model.predict(stacked, deterministic=True)
        return [int(a) for a in actions] if first.discrete else [np.asarray(a) for a in actions]

    @classmethod
    def load(cls, path: str, env: Any = None) -> SB3Policy:
        """Load ``model.zip`` or ``ALGO:model.zip`` (the algorithm is tried in turn if not named)."""
        sb3 = _sb3()
        algo, _, file = path.rpartition(":") if ":" in path and path.split(":", 1)[0] in ALGORITHMS else ("", "", path)
        if not Path(file).is_file():
            raise FileNotFoundError(f"{file}: no saved SB3 model there; save one with model.save(path)")
        errors = []
        for name in [algo] if algo else ALGORITHMS:
            try:
                return cls(getattr(sb3, name).load(file, device="cpu"))
            except Exception as error:  # wrong algorithm for this file: try the next
                errors.append(f"{name}: {type(error).__name__}")
        raise ValueError(f"{file}: not loadable as {', '.join(errors)}; name the algorithm as ALGO:{file}")
