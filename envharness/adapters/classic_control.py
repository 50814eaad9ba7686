"""Adapters for Gymnasium's classic control family: CartPole, MountainCar and Acrobot.

Contains :class:`CartPoleAdapter`, :class:`MountainCarAdapter` and :class:`AcrobotAdapter`,
sharing :class:`ClassicControlAdapter` (physics constants, initial-state noise, state
get/set). Verifiers: CartPole survived the registered time limit (counted in agent steps
by the adapter itself, so no counter outside it can shorten the task) without failing;
MountainCar reached the registered goal position and velocity; Acrobot swung its tip
above the line.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from envharness.adapters.base import Adapter, digest
from envharness.adapters.registry import register_adapter
from envharness.errors import SpecError
from envharness.verifier import RUNNING, TIMEOUT, Verdict

_BALANCED = Verdict(True, 1.0, "balanced to the time limit")


@functools.lru_cache(maxsize=4096)
def _physics_digest(values: tuple[tuple[str, float], ...]) -> str:
    return digest(list(values))


class ClassicControlAdapter(Adapter):
    """Shared state access for envs whose whole state is the ``state`` array.

    Example:
        >>> import gymnasium as gym
        >>> adapter = CartPoleAdapter(gym.make("CartPole-v1"))
        >>> isinstance(adapter, ClassicControlAdapter), sorted(adapter.capabilities)
        (True, ['initial_state', 'physics'])
    """

    family = "classic_control"
    capabilities = frozenset({"physics", "initial_state"})
    env_class = ""
    # physics name -> the env attributes it sets
    # Read-only: what a physics name may write is the adapter's, not a transform's, to change.
    physics: Mapping[str, tuple[str, ...]] = MappingProxyType({})

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.physics_names = frozenset(self.physics)
        self._level: str | None = None
        self._values: tuple[float, ...] = ()
        self._raw_values: Any = None  # the physics attributes as last read, before float()
        self._read_physics: Any = None
        self._physics: dict[str, float] = {}
        self.state_attrs = ("state", *(attr for attrs in self.physics.values() for attr in attrs))

    @classmethod
    def matches(cls, env_type: type) -> bool:
        return env_type.__name__ == cls.env_class

    def observe(self) -> Any:
        return np.array(self.raw.state, dtype=np.float32)

    def set_physics(self, values: dict[str, float]) -> None:
        """Set physical constants by their envharness names (``gravity``, ``pole_length``...)."""
        for name, value in values.items():
            for attr in self.physics[name]:
                setattr(self.raw, attr, float(value))

    def perturb_initial_state(self, rng: np.random.Generator, scale: float) -> None:
        """Add uniform noise in ``[-scale, scale]`` to every state variable."""
        state = np.asarray(self.raw.state, dtype=np.float64)
        self.raw.state = self._clip_state(state + rng.uniform(-scale, scale, size=state.shape))
        # The level is the physics and the start distribution: a wider draw is another level.
        self.note_setup("initial_state_noise", float(scale))

    def _clip_state(self, state: np.ndarray) -> np.ndarray:
        return state

    def physics_values(self) -> dict[str, float]:
        return {name: float(getattr(self.raw, attrs[0])) for name, attrs in self.physics.items()}

    def begin_episode(self) -> None:
        # A classic-control level is its physics; seeds vary only the initial state.
        read = self._read_physics
        if read is None:
            names = [attrs[0] for attrs in self.physics.values()]
            read = self._read_physics = operator.attrgetter(*names) if names else (lambda raw: ())
        raw_values = read(self.raw)
        if raw_values != self._raw_values:  # physics rarely changes between episodes: digest it once
            self._raw_values = raw_values
            values = tuple(float(v) for v in (raw_values if isinstance(raw_values, tuple) else (raw_values,)))
            self._values = values
            self._physics = dict(zip(self.physics, values))
            self._level = _physics_digest(tuple(sorted(self._physics.items())))
        self._features = dict(self._physics)

    def level_id(self) -> str | None:
        return self._level

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._after_physics()

    def _after_physics(self) -> None:
        """Recompute constants derived from the physical ones."""


@register_adapter
class CartPoleAdapter(ClassicControlAdapter):
    """CartPole: success is surviving the registered time limit without the pole falling.

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("CartPole-v1")
        >>> adapter = CartPoleAdapter(env)
        >>> adapter.set_physics({"pole_length": 1.0}); adapter.raw.polemass_length
        0.1
        >>> adapter.begin_episode()
        >>> [adapter.judge(None, 1.0, False, False, {}).success for _ in range(499)][-1]
        False
        >>> adapter.judge(None, 1.0, False, False, {})
        Verdict(success=True, score=1.0, reason='balanced to the time limit')
    """

    irreversible_endings = frozenset({"pole fell", "cart out of bounds"})

    action_names = ("push_left", "push_right")
    state_names = {"obs[0]": "cart_position", "obs[1]": "cart_velocity", "obs[2]": "pole_angle", "obs[3]": "pole_angular_velocity"}

    env_class = "CartPoleEnv"
    physics = MappingProxyType(
        {
            "gravity": ("gravity",),
            "pole_length": ("length",),
            "pole_mass": ("masspole",),
            "cart_mass": ("masscart",),
            "force": ("force_mag",),
        }
    )

    def set_physics(self, values: dict[str, float]) -> None:
        super().set_physics(values)
        self._after_physics()

    def _after_physics(self) -> None:
        raw = self.raw
        raw.total_mass = raw.masspole + raw.masscart
        raw.polemass_length = raw.masspole * raw.length

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.state_attrs = (*self.state_attrs, "total_mass", "polemass_length", "steps_beyond_terminated")
        self._theta_max = float(self.raw.theta_threshold_radians)
        self._success_at = self._registered_limit if self._registered_limit is not None else math.inf
        self._steps = 0

    def begin_episode(self) -> None:
        super().begin_episode()
        self._steps = 0

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        if terminated:
            fell = abs(self.raw.state[2]) > self._theta_max
            return Verdict(False, 0.0, "pole fell" if fell else "cart out of bounds")
        self._steps = steps = self._steps + 1
        if steps >= self._success_at:
            return _BALANCED
        if truncated:
            # Without a known limit, the made env's own truncation is the time limit.
            return _BALANCED if self._registered_limit is None else Verdict(False, 0.0, TIMEOUT)
        return RUNNING


@register_adapter
class PhysicsCartPoleAdapter(CartPoleAdapter):
    """:class:`~envharness.envs.generated.PhysicsCartPole`: CartPole's verifier; the level is the physics drawn at reset.

    Example:
        >>> import gymnasium as gym
        >>> import envharness.envs
        >>> env = gym.make("envharness/PhysicsCartPole-v0")
        >>> adapter = PhysicsCartPoleAdapter(env)
        >>> _ = env.reset(seed=0); adapter.begin_episode()
        >>> round(adapter.level_features()["pole_length"], 3)
        0.543
    """

    env_class = "PhysicsCartPole"


@register_adapter
class MountainCarAdapter(ClassicControlAdapter):
    """MountainCar: success is reaching the registered goal position with the registered goal velocity.

    Example:
        >>> import gymnasium as gym
        >>> adapter = MountainCarAdapter(gym.make("MountainCar-v0"))
        >>> sorted(adapter.physics_names)
        ['force', 'gravity']
    """

    action_names = ("accelerate_left", "no_push", "accelerate_right")
    state_names = {"obs[0]": "position", "obs[1]": "velocity"}

    env_class = "MountainCarEnv"
    physics = MappingProxyType({"gravity": ("gravity",), "force": ("force",)})
    verifier_kwargs = ("goal_velocity",)

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        made = self.raw.goal_velocity
        if isinstance(made, bool) or not isinstance(made, (int, float)) or not math.isfinite(made):
            raise SpecError(f"env_kwargs.goal_velocity: got {made!r}; give a finite number (MountainCar's registered goal is 0)")
        pristine = self.pristine()
        self._goal = (float(pristine.goal_position), float(pristine.goal_velocity))

    def begin_episode(self) -> None:
        super().begin_episode()
        self._features["start_position"] = float(self.raw.state[0])

    def solved(self) -> str | None:
        position, velocity = self.raw.state[:2]
        return "the car starts at the goal" if position >= self._goal[0] and velocity >= self._goal[1] else None

    def _clip_state(self, state: np.ndarray) -> np.ndarray:
        raw = self.raw
        return np.array([np.clip(state[0], raw.min_position, raw.max_position), np.clip(state[1], -raw.max_speed, raw.max_speed)])

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        position, velocity = self.raw.state[:2]
        if position >= self._goal[0] and velocity >= self._goal[1]:
            return Verdict(True, 1.0, "reached goal")
        if terminated or truncated:
            return Verdict(False, 0.0, TIMEOUT if truncated else "terminated without success")
        return RUNNING


@register_adapter
class AcrobotAdapter(ClassicControlAdapter):
    """Acrobot: success is the tip swung above the bar's height.

    Example:
        >>> import gymnasium as gym
        >>> adapter = AcrobotAdapter(gym.make("Acrobot-v1"))
        >>> adapter.set_physics({"link_length": 1.5}); adapter.raw.LINK_LENGTH_2
        1.5
    """

    action_names = ("torque_-1", "torque_0", "torque_+1")
    state_names = {
        f"obs[{i}]": name
        for i, name in enumerate(("cos_theta1", "sin_theta1", "cos_theta2", "sin_theta2", "theta1_velocity", "theta2_velocity"))
    }

    env_class = "AcrobotEnv"
    physics = MappingProxyType(
        {
            "link_length": ("LINK_LENGTH_1", "LINK_LENGTH_2"),
            "link_mass": ("LINK_MASS_1", "LINK_MASS_2"),
        }
    )

    def observe(self) -> Any:
        return self.raw._get_ob()

    def _swung_up(self) -> bool:
        s = self.raw.state
        return bool(-math.cos(s[0]) - math.cos(s[1] + s[0]) > 1.0)

    def solved(self) -> str | None:
        return "the tip starts above the bar" if self._swung_up() else None

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        if self._swung_up():
            return Verdict(True, 1.0, "swung up")
        if terminated or truncated:
            return Verdict(False, 0.0, TIMEOUT if truncated else "terminated without success")
        return RUNNING

    def _clip_state(self, state: np.ndarray) -> np.ndarray:
        raw = self.raw
        state[2] = np.clip(state[2], -raw.MAX_VEL_1, raw.MAX_VEL_1)
        state[3] = np.clip(state[3], -raw.MAX_VEL_2, raw.MAX_VEL_2)
        return state
