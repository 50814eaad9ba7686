"""Observation transforms: reshape what the agent sees, and declare the space it sees.

Contains :class:`ObservationNoise`, :class:`MaskObservation`, :class:`PartialView`,
:class:`TextHint`, :class:`DelayObservation`, :class:`DropField`, :class:`TruncateText`,
:class:`ImageOnly` and :class:`Flatten`. Each checks the
incoming observation space at wrap time and returns the space it emits.
"""

from __future__ import annotations

import copy
import string
from collections import deque
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pydantic import Field

from envharness.errors import IncompatibleTransformError
from envharness.transforms.base import FlatIndex, ObservationTransform, register_transform


def _float_box(name: str, space: Any) -> spaces.Box:
    if not isinstance(space, spaces.Box) or not np.issubdtype(space.dtype, np.floating):
        raise IncompatibleTransformError(
            f"{name}: needs a floating-point Box observation space, got {space}; use it on e.g. CartPole or MountainCar"
        )
    return space


def _dict_with(name: str, space: Any, key: str) -> spaces.Dict:
    if not isinstance(space, spaces.Dict) or key not in space.spaces:
        raise IncompatibleTransformError(
            f"{name}: needs a Dict observation space with a {key!r} field, got {space}; use it on e.g. MiniGrid"
        )
    return space


@register_transform
class ObservationNoise(ObservationTransform):
    """Add Gaussian noise of standard deviation ``std`` to a float Box observation (clipped to bounds).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("CartPole-v1", ObservationNoise(std=0.5))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.dtype, env.observation_space.contains(obs)
        (dtype('float32'), True)
    """

    families: ClassVar[tuple[str, ...]] = ("classic_control",)
    works_on: ClassVar[str] = "float Box observations (classic control)"
    targets: ClassVar[tuple[str, ...]] = ("high_variance", "reward_without_success")

    std: float = Field(0.05, ge=0.0, le=10.0, description="standard deviation of the noise")

    def observation_space(self, space: Any) -> Any:
        return _float_box("ObservationNoise", space)

    def bind(self, memo: dict, space: Any) -> None:
        memo["space"] = space

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        space = memo["space"]
        noisy = rng.normal(0.0, self.std, size=space.shape)
        noisy += obs  # in place: the same sums as obs + noise, one array fewer per step
        return np.clip(noisy, space.low, space.high, out=noisy).astype(space.dtype)


@register_transform
class MaskObservation(ObservationTransform):
    """Replace the listed entries of a flat Box observation with ``fill`` (e.g. hide velocities).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("CartPole-v1", MaskObservation(indices=[1, 3]))
        >>> env.reset(seed=0)[0][[1, 3]].tolist()
        [0.0, 0.0]
    """

    families: ClassVar[tuple[str, ...]] = ("classic_control",)
    works_on: ClassVar[str] = "flat Box observations (classic control)"
    targets: ClassVar[tuple[str, ...]] = ("feature_region", "high_variance")

    indices: list[FlatIndex] = Field(min_length=1, max_length=1024, description="flat indices to hide")
    fill: float = Field(0.0, ge=-1e9, le=1e9, description="value shown instead")

    def observation_space(self, space: Any) -> Any:
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise IncompatibleTransformError(f"MaskObservation: needs a 1-D Box observation space, got {space}; use it on e.g. CartPole")
        bad = [i for i in self.indices if not 0 <= i < space.shape[0]]
        if bad:
            raise IncompatibleTransformError(
                f"MaskObservation.indices: {bad[0]} is out of range for {space.shape[0]} entries; use 0..{space.shape[0] - 1}"
            )
        low, high = space.low[self.indices], space.high[self.indices]
        if np.any(low > self.fill) or np.any(high < self.fill):
            raise IncompatibleTransformError(
                f"MaskObservation.fill: {self.fill} is outside the masked entries' bounds; pick a value inside them"
            )
        return space

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        obs = np.array(obs, copy=True)
        obs[self.indices] = self.fill
        return obs


@register_transform
class PartialView(ObservationTransform):
    """Blank the cells of a MiniGrid egocentric image farther than ``radius`` from the agent.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-Empty-8x8-v0", PartialView(radius=1))
        >>> image = env.reset(seed=0)[0]["image"]
        >>> int((image[:, :, 0] != 0).sum())
        6
    """

    families: ClassVar[tuple[str, ...]] = ("minigrid",)
    works_on: ClassVar[str] = "MiniGrid"
    targets: ClassVar[tuple[str, ...]] = ("loop", "feature_region:goal_distance")

    radius: int = Field(2, ge=0, le=20, description="Chebyshev radius the agent still sees")

    def observation_space(self, space: Any) -> Any:
        image = _dict_with("PartialView", space, "image")["image"]
        if not isinstance(image, spaces.Box) or len(image.shape) != 3:
            raise IncompatibleTransformError(f"PartialView: the 'image' field must be an (H, W, C) Box, got {image}")
        return space

    def bind(self, memo: dict, space: Any) -> None:
        width, height = space["image"].shape[:2]
        xs, ys = np.meshgrid(np.arange(width), np.arange(height), indexing="ij")
        memo["hidden"] = np.maximum(abs(xs - width // 2), abs(ys - (height - 1))) > self.radius

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        image = obs["image"].copy()
        image[memo["hidden"]] = 0
        return {**obs, "image": image}


@register_transform
class TextHint(ObservationTransform):
    """Append ``text`` to a text observation, or to the ``mission`` field of a Dict observation.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-DoorKey-5x5-v0", TextHint(text="pick up the key first"))
        >>> env.reset(seed=0)[0]["mission"]
        'use the key to open the door and then get to the goal Hint: pick up the key first'
    """

    families: ClassVar[tuple[str, ...]] = ("textworld", "code_repair", "minigrid")
    works_on: ClassVar[str] = "text observations (TextWorld, CodeRepair, MiniGrid missions)"
    targets: ClassVar[tuple[str, ...]] = ("loop", "timeout", "tool_error")

    text: str = Field(min_length=1, max_length=1000, description="the hint")
    field: str = Field("mission", max_length=100, description="Dict field holding the text")
    prefix: str = Field(" Hint: ", max_length=50, description="separator put before the hint")

    def _text_space(self, space: Any) -> spaces.Text:
        addition = len(self.prefix) + len(self.text)
        if isinstance(space, spaces.Text):
            charset = "".join(sorted(set(space.character_set) | set(self.prefix + self.text)))
            return spaces.Text(max_length=space.max_length + addition, min_length=space.min_length, charset=charset)
        charset = "".join(sorted(set(string.printable) | set(self.prefix + self.text)))
        return spaces.Text(max_length=4096 + addition, min_length=0, charset=charset)

    def observation_space(self, space: Any) -> Any:
        if isinstance(space, spaces.Text):
            return self._text_space(space)
        inner = _dict_with("TextHint", space, self.field)[self.field]
        if not (isinstance(inner, spaces.Text) or type(inner).__name__ == "MissionSpace"):  # MiniGrid's missions are text
            raise IncompatibleTransformError(f"TextHint.field: {self.field!r} holds {inner}, not text; name a Text field such as 'mission'")
        return spaces.Dict({**space.spaces, self.field: self._text_space(inner)})

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        if isinstance(obs, str):
            return obs + self.prefix + self.text
        return {**obs, self.field: obs[self.field] + self.prefix + self.text}


@register_transform
class DelayObservation(ObservationTransform):
    """Show the observation from ``steps`` steps ago (the first one repeats at the start).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", DelayObservation(steps=1), is_slippery=False)
        >>> _ = env.reset(seed=0)
        >>> env.step(2)[0], env.step(2)[0]
        (0, 1)
    """

    targets: ClassVar[tuple[str, ...]] = ("high_variance",)

    steps: int = Field(1, ge=1, le=100, description="delay in steps")

    def on_reset(self, memo: dict, rng: np.random.Generator) -> None:
        memo["buffer"] = None

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        buffer = memo["buffer"]
        if buffer is None:
            buffer = memo["buffer"] = deque([obs] * self.steps, maxlen=self.steps)
        shown = buffer[0]
        buffer.append(obs)
        # A delayed array is shown more than once (at the start, at least): each step gets its own copy.
        return copy.deepcopy(shown) if isinstance(shown, (np.ndarray, dict)) else shown


@register_transform
class DropField(ObservationTransform):
    """Remove a field from a Dict observation (e.g. MiniGrid's ``direction``).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-Empty-5x5-v0", DropField(field="direction"))
        >>> sorted(env.reset(seed=0)[0])
        ['image', 'mission']
    """

    works_on: ClassVar[str] = "Dict observations"
    targets: ClassVar[tuple[str, ...]] = ("feature_region", "loop")

    field: str = Field(min_length=1, max_length=100, description="the Dict field to drop")

    def observation_space(self, space: Any) -> Any:
        _dict_with("DropField", space, self.field)
        if len(space.spaces) == 1:
            raise IncompatibleTransformError(f"DropField.field: {self.field!r} is the only field; nothing would remain")
        return spaces.Dict({k: v for k, v in space.spaces.items() if k != self.field})

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        return {k: v for k, v in obs.items() if k != self.field}


@register_transform
class TruncateText(ObservationTransform):
    """Show only the first ``max_chars`` characters of a text observation, or of its ``field`` in a Dict one.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", TruncateText(max_chars=20), task="add")
        >>> len(env.reset(seed=0)[0])
        20
    """

    families: ClassVar[tuple[str, ...]] = ("textworld", "code_repair")
    works_on: ClassVar[str] = "text observations (TextWorld, CodeRepair)"
    targets: ClassVar[tuple[str, ...]] = ("tool_error", "loop", "timeout")

    max_chars: int = Field(500, ge=1, le=100_000, description="characters kept")
    field: str = Field("text", min_length=1, max_length=100, description="the Dict field to cut (a Text observation is cut whole)")

    def observation_space(self, space: Any) -> Any:
        if isinstance(space, spaces.Dict) and isinstance(space.spaces.get(self.field), spaces.Text):
            return space
        if not isinstance(space, spaces.Text):
            raise IncompatibleTransformError(
                f"TruncateText: needs a Text observation space or a Dict with a Text field {self.field!r}, got {space}; use it on text envs"
            )
        return space

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        if isinstance(obs, dict):
            return {**obs, self.field: obs[self.field][: self.max_chars]}
        return obs[: self.max_chars]


@register_transform
class ImageOnly(ObservationTransform):
    """Show only one Box field of a Dict observation, as the observation itself (MiniGrid's ``image``).

    What Stable-Baselines3's ``CnnPolicy``/``MlpPolicy`` need from MiniGrid, inside the spec,
    so ``envrigger collect --policy PPO:model.zip`` rebuilds the same observations.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-Empty-5x5-v0", ImageOnly())
        >>> env.observation_space.shape, env.reset(seed=0)[0].shape
        ((7, 7, 3), (7, 7, 3))
    """

    families: ClassVar[tuple[str, ...]] = ("minigrid",)
    works_on: ClassVar[str] = "Dict observations with a Box field (MiniGrid)"
    targets: ClassVar[tuple[str, ...]] = ()

    field: str = Field("image", min_length=1, max_length=100, description="the Dict field to keep")

    def observation_space(self, space: Any) -> Any:
        _dict_with("ImageOnly", space, self.field)
        if not isinstance(space.spaces[self.field], spaces.Box):
            raise IncompatibleTransformError(f"ImageOnly.field: {self.field!r} is {space.spaces[self.field]}, not a Box; name a Box field")
        return space.spaces[self.field]

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        return obs[self.field]


@register_transform
class Flatten(ObservationTransform):
    """Flatten a Box, Discrete, MultiDiscrete, MultiBinary or Dict/Tuple of them into one float32 vector.

    Discrete parts become one-hot, as ``gymnasium.spaces.flatten`` does; what ``MlpPolicy`` takes.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-Empty-5x5-v0", DropField(field="mission"), Flatten())
        >>> env.observation_space.shape, env.reset(seed=0)[0].shape
        ((151,), (151,))
    """

    works_on: ClassVar[str] = "Box, Discrete and Dict observations"
    targets: ClassVar[tuple[str, ...]] = ()

    def bind(self, memo: dict, space: Any) -> None:
        memo["space"] = space

    def observation_space(self, space: Any) -> Any:
        unsupported = _unflattenable(space)
        if unsupported is not None:
            raise IncompatibleTransformError(
                f"Flatten: cannot flatten {unsupported}; drop that field first (DropField) or keep only the image (ImageOnly)"
            )
        flat: Any = spaces.flatten_space(space)  # a Box, for every space _unflattenable lets through
        return spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32)

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        return np.asarray(spaces.flatten(memo["space"], obs), dtype=np.float32)


def _unflattenable(space: Any, where: str = "the observation") -> str | None:
    """Which part of ``space`` has no fixed-length numeric form (Text, Graph, Sequence...), or None."""
    if isinstance(space, spaces.Dict):
        parts = [(_unflattenable(part, f"the {key!r} field")) for key, part in space.spaces.items()]
        return next((found for found in parts if found is not None), None)
    if isinstance(space, spaces.Tuple):
        return next((found for i, part in enumerate(space.spaces) if (found := _unflattenable(part, f"item {i}")) is not None), None)
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return None
    return f"{where} (a {type(space).__name__})"
