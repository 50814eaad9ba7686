"""Any observation as a fixed-length float vector: :class:`Features`, what the PPO learner's MLP reads."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class Features:
    """Maps observations of ``space`` to a flat float32 vector of fixed length.

    Box values are flattened as they are (MiniGrid's small integer codes are not rescaled),
    Discrete values become one-hot, Dict and Tuple spaces concatenate their parts in key
    order and drop parts that are not numeric (MiniGrid's mission text).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-DoorKey-5x5-v0")
        >>> features = Features(env.observation_space)
        >>> obs, _ = env.reset(seed=0)
        >>> features.space.shape, features(obs).shape, features.parts
        ((151,), (151,), ['direction', 'image'])
    """

    def __init__(self, space: gym.Space[Any]) -> None:
        self.parts: list[str] = []
        self._readers: list[tuple[str | int | None, gym.Space[Any]]] = []
        if isinstance(space, gym.spaces.Dict):
            items: list[tuple[Any, gym.Space[Any]]] = list(space.spaces.items())
        elif isinstance(space, gym.spaces.Tuple):
            items = list(enumerate(space.spaces))
        else:
            items = [(None, space)]
        size = 0
        for key, sub in sorted(items, key=lambda kv: str(kv[0])):
            if isinstance(sub, gym.spaces.Box):
                size += int(np.prod(sub.shape))
            elif isinstance(sub, gym.spaces.Discrete):
                size += int(sub.n)
            elif isinstance(sub, gym.spaces.MultiBinary):
                size += int(np.prod(sub.shape))
            else:
                continue
            self._readers.append((key, sub))
            self.parts.append(str(key) if key is not None else type(sub).__name__)
        if not size:
            raise ValueError(f"no numeric part in {space}; a neural learner needs Box, Discrete or MultiBinary observations")
        self.space = gym.spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float32)

    def __call__(self, obs: Any) -> np.ndarray:
        chunks = []
        for key, sub in self._readers:
            value = obs if key is None else obs[key]
            if isinstance(sub, gym.spaces.Discrete):
                hot = np.zeros(int(sub.n), dtype=np.float32)
                hot[int(value) - int(sub.start)] = 1.0
                chunks.append(hot)
            else:
                chunks.append(np.asarray(value, dtype=np.float32).ravel())
        return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]


class Featurized(gym.ObservationWrapper):
    """An env whose observations are :class:`Features` vectors (what the PPO learner trains on)."""

    def __init__(self, env: gym.Env, features: Features) -> None:
        super().__init__(env)
        self.features = features
        self.observation_space = features.space

    def observation(self, observation: Any) -> np.ndarray:
        return self.features(observation)

    # SB3's vectorized env deep-copies every step's info, and PPO reads none of ours (the mixture
    # below already took the verdict): an empty info saves the copies. Only ``is_success``, which
    # SB3 logs as rollout/success_rate when TensorBoard is on, is passed on.
    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, _ = super().reset(**kwargs)
        return obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        # Only what SB3 reads: the success (its rollout/* scalars) and the level played (PLR's value-loss score).
        return obs, reward, terminated, truncated, {k: info[k] for k in ("is_success", "mixture") if k in info}
