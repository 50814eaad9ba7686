"""State transforms: reshape where an episode starts and what the world holds, at reset.

Contains :class:`MoveGoal`, :class:`MoveAgent`, :class:`AddWalls`, :class:`RemoveWalls`,
:class:`AddLava`, :class:`FrozenLakeMap`, :class:`PhysicsParams`,
:class:`InitialStateNoise`, :class:`WalkthroughStart` and :class:`ReplayPrefix`. All but
``ReplayPrefix`` edit the base env through its adapter; ``ReplayPrefix`` only steps it, so
it works on any env.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import ConfigDict, Field, field_validator, model_validator

from envharness.errors import IncompatibleTransformError
from envharness.transforms.base import StateTransform, register_transform
from envharness.validated import ValidatedModel


class _Distance(StateTransform):
    """Shared parameters: a path-distance band between agent and goal."""

    min_dist: int = Field(1, ge=1, le=100, description="smallest agent-goal path distance")
    max_dist: int = Field(3, ge=1, le=100, description="largest agent-goal path distance")

    @model_validator(mode="after")
    def _ordered(self) -> Any:
        if self.min_dist > self.max_dist:
            raise ValueError(f"min_dist ({self.min_dist}) exceeds max_dist ({self.max_dist}); swap them")
        return self

    def mutate(self, rng: np.random.Generator) -> Any:
        lo, hi = self.min_dist, self.max_dist
        step = int(rng.choice((-1, 1)))
        if rng.random() < 0.5:
            lo = int(np.clip(lo + step, 1, hi))
        else:
            hi = int(np.clip(hi + step, lo, 100))
        return type(self)(**{**self.model_dump(), "min_dist": lo, "max_dist": hi})


@register_transform
class MoveGoal(_Distance):
    """Move the goal to a random free cell at path distance ``[min_dist, max_dist]`` from the agent.

    Works on MiniGrid goal envs, FrozenLake and Taxi (the destination). If no cell fits
    the band the level is left as generated.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-Empty-8x8-v0", MoveGoal(min_dist=2, max_dist=2))
        >>> _, info = env.reset(seed=3)
        >>> info["level"]["goal_distance"]
        2.0
    """

    capability: ClassVar[str] = "goal"
    targets: ClassVar[tuple[str, ...]] = ("feature_region:goal_distance", "timeout", "loop")

    def proposable(self, adapter: Any) -> bool:
        # Moving a goal the agent cannot see turns the task partially observable, not harder.
        return adapter.observes_goal

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        adapter.move_goal(rng, self.min_dist, self.max_dist)
        return adapter.observe()


@register_transform
class MoveAgent(_Distance):
    """Start the agent on a random free cell at path distance ``[min_dist, max_dist]`` from the goal.

    Works on MiniGrid, FrozenLake, Taxi (taxi to passenger) and CliffWalking.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", MoveAgent(min_dist=1, max_dist=1), is_slippery=False)
        >>> _, info = env.reset(seed=0)
        >>> info["level"]["goal_distance"]
        1.0
    """

    capability: ClassVar[str] = "agent"
    # Starting nearer the goal is a reverse curriculum for anything that stops the agent on the way.
    targets: ClassVar[tuple[str, ...]] = (
        "feature_region:goal_distance",
        "timeout",
        "loop",
        "terminal_cause:hole",
        "terminal_cause:lava",
    )

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        adapter.move_agent(rng, self.min_dist, self.max_dist)
        return adapter.observe()


class _CellEdit(StateTransform):
    """Removes ``count`` cells of ``cell_kind``; :class:`_CellAdd` adds them instead."""

    count: int = Field(2, ge=1, le=50, description="how many cells to change")

    cell_kind: ClassVar[str] = ""

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        keep_solvable = getattr(self, "keep_solvable", None)
        add, remove = (self.count, 0) if keep_solvable is not None else (0, self.count)
        adapter.edit_cells(self.cell_kind, add, remove, rng, bool(keep_solvable))
        return adapter.observe()


class _CellAdd(_CellEdit):
    keep_solvable: bool = Field(True, description="undo a placement that cuts the agent off from the goal")


@register_transform
class AddWalls(_CellAdd):
    """Add ``count`` interior walls on free cells of a MiniGrid level, keeping it solvable.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-Empty-8x8-v0", AddWalls(count=5))
        >>> _, info = env.reset(seed=0)
        >>> info["level"]["n_walls"], info["level"]["goal_distance"] > 0
        (5.0, True)
    """

    capability: ClassVar[str] = "walls"
    cell_kind: ClassVar[str] = "wall"
    targets: ClassVar[tuple[str, ...]] = ("loop", "blocked_action")


@register_transform
class RemoveWalls(_CellEdit):
    """Remove up to ``count`` interior walls of a MiniGrid level (outer walls stay).

    A wall whose removal would let the agent walk to the grid's edge stays too (MultiRoom's
    rooms float in an unwalled grid, and one step past the edge MiniGrid itself fails).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-FourRooms-v0", RemoveWalls(count=10))
        >>> base = envharness.wrap("MiniGrid-FourRooms-v0")
        >>> walls = lambda e: e.reset(seed=0)[1]["level"]["n_walls"]
        >>> walls(base) - walls(env)
        10.0
    """

    capability: ClassVar[str] = "walls"
    cell_kind: ClassVar[str] = "wall"
    targets: ClassVar[tuple[str, ...]] = ("timeout", "feature_region:n_walls")


@register_transform
class AddLava(_CellAdd):
    """Add ``count`` lava tiles on free cells of a MiniGrid level, keeping a safe path to the goal.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-Empty-8x8-v0", AddLava(count=4))
        >>> env.reset(seed=0)[1]["level"]["n_lava"]
        4.0
    """

    capability: ClassVar[str] = "lava"
    cell_kind: ClassVar[str] = "lava"
    targets: ClassVar[tuple[str, ...]] = ("terminal_cause:lava", "feature_region:n_lava")


@register_transform
class FrozenLakeMap(StateTransform):
    """Edit FrozenLake's holes: add ``add_holes`` on frozen tiles, remove ``remove_holes``.

    With ``keep_solvable`` a hole that cuts the start off from the goal is not placed.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", FrozenLakeMap(add_holes=3, remove_holes=0))
        >>> env.reset(seed=0)[1]["level"]["n_holes"]
        7.0
    """

    capability: ClassVar[str] = "map"
    targets: ClassVar[tuple[str, ...]] = ("terminal_cause:hole", "feature_region:n_holes")

    add_holes: int = Field(1, ge=0, le=30, description="frozen tiles turned into holes")
    remove_holes: int = Field(0, ge=0, le=30, description="holes turned into frozen tiles")
    keep_solvable: bool = Field(True, description="never cut the start off from the goal")

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        adapter.edit_cells("hole", self.add_holes, self.remove_holes, rng, self.keep_solvable)
        return adapter.observe()


@register_transform
class PhysicsParams(StateTransform):
    """Set classic-control physical constants; unset fields keep the env's values.

    CartPole takes ``gravity``, ``pole_length`` (half length), ``pole_mass``,
    ``cart_mass`` and ``force``; MountainCar ``gravity`` and ``force``; Acrobot
    ``link_length`` and ``link_mass`` (both links).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("CartPole-v1", PhysicsParams(pole_length=1.0, gravity=12.0))
        >>> info = env.reset(seed=0)[1]
        >>> info["level"]["pole_length"], info["level"]["gravity"]
        (1.0, 12.0)
    """

    capability: ClassVar[str] = "physics"
    targets: ClassVar[tuple[str, ...]] = ("terminal_cause:pole_fell", "high_variance", "feature_region")

    gravity: float | None = Field(None, ge=0.1, le=50.0, description="gravitational acceleration")
    pole_length: float | None = Field(None, ge=0.05, le=5.0, description="CartPole pole half-length")
    pole_mass: float | None = Field(None, ge=0.01, le=10.0, description="CartPole pole mass")
    cart_mass: float | None = Field(None, ge=0.1, le=20.0, description="CartPole cart mass")
    force: float | None = Field(None, ge=1e-4, le=100.0, description="push force (CartPole, MountainCar)")
    link_length: float | None = Field(None, ge=0.2, le=3.0, description="Acrobot link lengths")
    link_mass: float | None = Field(None, ge=0.1, le=10.0, description="Acrobot link masses")

    def values(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def proposable(self, adapter: Any) -> bool:
        # With no constant set it changes nothing: validating it would only spend rollouts.
        return bool(self.values())

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        super().check(adapter, observation_space, action_space)
        unsupported = sorted(set(self.values()) - adapter.physics_names)
        if unsupported:
            raise IncompatibleTransformError(
                f"PhysicsParams.{unsupported[0]}: {adapter.env_name} has no such constant; "
                f"use one of {', '.join(sorted(adapter.physics_names))}"
            )

    def mutate(self, rng: np.random.Generator) -> Any:
        values = self.values()
        if not values:
            return self
        name = sorted(values)[int(rng.integers(len(values)))]
        field = type(self).model_fields[name]
        lo = next(m.ge for m in field.metadata if hasattr(m, "ge"))
        hi = next(m.le for m in field.metadata if hasattr(m, "le"))
        new = float(np.clip(values[name] * rng.uniform(0.8, 1.25), lo, hi))
        return type(self)(**{**values, name: new})

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        adapter.set_physics(self.values())
        return obs


@register_transform
class InitialStateNoise(StateTransform):
    """Add uniform noise in ``[-scale, scale]`` to a classic-control env's initial state.

    Example:
        >>> import envharness, gymnasium as gym
        >>> plain = gym.make("CartPole-v1").reset(seed=0)[0]
        >>> noisy = envharness.wrap("CartPole-v1", InitialStateNoise(scale=0.1)).reset(seed=0)[0]
        >>> bool(abs(noisy - plain).max() > 0.001)
        True
    """

    capability: ClassVar[str] = "initial_state"
    targets: ClassVar[tuple[str, ...]] = ("high_variance", "terminal_cause:pole_fell")

    scale: float = Field(0.05, ge=0.0, le=1.0, description="half-width of the uniform noise")

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        adapter.perturb_initial_state(rng, self.scale)
        return adapter.observe()


class _Shares(StateTransform):
    """Shared by the starts along a solution: a band ``[min_share, max_share]`` of it played at reset, moved by 0.1 when mutated."""

    min_share: float
    max_share: float

    @model_validator(mode="after")
    def _ordered(self) -> Any:
        if self.min_share > self.max_share:
            raise ValueError(f"min_share ({self.min_share}) exceeds max_share ({self.max_share}); swap them")
        return self

    def mutate(self, rng: np.random.Generator) -> Any:
        lo, hi = self.min_share, self.max_share
        step = float(rng.choice((-0.1, 0.1)))
        if rng.random() < 0.5:
            lo = float(np.clip(round(lo + step, 2), 0.0, hi))
        else:
            hi = float(np.clip(round(hi + step, 2), lo, 0.95))
        return type(self)(**{**self.model_dump(), "min_share": lo, "max_share": hi})


@register_transform
class WalkthroughStart(_Shares):
    """Start each episode part-way along the level's own solution: a reverse curriculum (Backplay, reverse curriculum generation).

    Text games play their walkthrough; MiniGrid levels play a shortest solution found by a
    search with the env's own step, so every subgoal the level has (the key, the locked
    door) stays on the agent's way or lies behind its start. At reset it plays a share of
    the winning commands, drawn uniformly
    in ``[min_share, max_share]`` per episode and rounded down, and always leaves at least
    the last command to the agent, so the game is never won for it. The commands played
    are setup: the agent's clock starts after them, the game's own ``won``/``lost`` still
    decides success, and the level id records the prefix, so such a start is never
    mistaken for an original level.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/TextWorld-v0", WalkthroughStart(min_share=0.5, max_share=0.5), levels=[5], games_per_level=2)
        >>> _, info = env.reset(seed=0)
        >>> info["level"]["quest_length"], info["level"]["commands_to_win"]
        (5.0, 3.0)
        >>> door = envharness.wrap("MiniGrid-DoorKey-6x6-v0", WalkthroughStart(min_share=0.6, max_share=0.6))
        >>> original = envharness.wrap("MiniGrid-DoorKey-6x6-v0")
        >>> goal = lambda env: env.reset(seed=0)[1]["level"]["goal_distance"]
        >>> goal(original), goal(door)
        (8.0, 5.0)
    """

    capability: ClassVar[str] = "walkthrough"
    # A start nearer the end of the quest is the text-game counterpart of moving the agent nearer the goal.
    targets: ClassVar[tuple[str, ...]] = ("timeout", "loop", "feature_region:commands_to_win", "feature_region:quest_length")

    min_share: float = Field(0.0, ge=0.0, le=0.95, description="smallest share of the walkthrough played at reset")
    max_share: float = Field(0.5, ge=0.0, le=0.95, description="largest share of the walkthrough played at reset")

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        adapter.play_walkthrough(float(rng.uniform(self.min_share, self.max_share)))
        return adapter.observe()


MAX_ACTION_SIZE = 10_000  # a code-repair tool call is at most 4,000 characters; a Box action a few numbers
MAX_ACTION_DEPTH = 8


def _action_size(action: Any, index: int) -> int:
    """Characters and items in ``action``; a ValueError naming ``index`` if there are too many, or it nests too deep."""
    total, stack = 0, [(action, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_ACTION_DEPTH:
            raise ValueError(f"action {index} nests more than {MAX_ACTION_DEPTH} deep; give plain actions")
        parts: Any = (
            value if isinstance(value, (list, tuple)) else [v for pair in value.items() for v in pair] if isinstance(value, dict) else ()
        )
        total += len(value) if isinstance(value, str) else len(parts) + 1
        if total > MAX_ACTION_SIZE:
            raise ValueError(f"action {index} holds more than {MAX_ACTION_SIZE} characters or items; give shorter actions")
        stack.extend((part, depth + 1) for part in parts)
    return total


def _plain_actions(actions: Any) -> Any:
    """Array actions (continuous envs) as plain lists, so the spec stays JSON."""
    return [a.tolist() if isinstance(a, (np.ndarray, np.generic)) else a for a in actions] if isinstance(actions, list) else actions


def _bounded_actions(actions: list[Any]) -> list[Any]:
    for index, action in enumerate(actions):
        _action_size(action, index)
    return actions


def _check_actions(actions: list[Any], action_space: Any, where: str, fix: str) -> None:
    """Refuse, naming ``where[i]``, the first action outside ``action_space``."""
    for i, action in enumerate(actions):
        try:
            inside = action_space.contains(np.asarray(action, dtype=action_space.dtype) if action_space.shape else action)
        except (TypeError, ValueError, OverflowError):
            inside = False
        if not inside:
            raise IncompatibleTransformError(f"{where}[{i}]: {action!r} is not in the action space {action_space}; {fix}")


@register_transform
class ReplayPrefix(StateTransform):
    """Start each episode after replaying ``actions`` on the base env (the task's setup).

    Needs no state access, so it works on any env. The prefix is setup, not play: the
    agent's clock (the time limit, MiniGrid's step count, CartPole's survival count)
    starts after it. A prefix that ends the episode or reaches the goal is an error:
    shorten it.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", ReplayPrefix(actions=[2, 2]), is_slippery=False)
        >>> env.reset(seed=0)[0]
        2
    """

    requires_state_access: ClassVar[bool] = False
    targets: ClassVar[tuple[str, ...]] = ("loop",)

    actions: list[Any] = Field(
        default_factory=list, max_length=1000, description=f"actions replayed at reset (each at most {MAX_ACTION_SIZE} characters or items)"
    )

    _plain = field_validator("actions", mode="before")(classmethod(lambda cls, actions: _plain_actions(actions)))
    _bounded = field_validator("actions")(classmethod(lambda cls, actions: _bounded_actions(actions)))

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        _check_actions(self.actions, action_space, "ReplayPrefix.actions", "fix that action")

    def mutate(self, rng: np.random.Generator) -> Any:
        if not self.actions:
            return self
        return type(self)(actions=self.actions[: int(rng.integers(len(self.actions) + 1))])

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        space = adapter.action_space
        for action in self.actions:
            obs = adapter.step(np.asarray(action, dtype=space.dtype) if space.shape else action)[0]
        return obs


class Demo(ValidatedModel):
    """One recorded play of a level: the seed its env was reset with and the actions played from there."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = Field(ge=0, le=2**63 - 1, description="the seed the recording's level was reset with")
    actions: list[Any] = Field(min_length=1, max_length=1000, description="the actions played, in order (a success's, best)")

    _plain = field_validator("actions", mode="before")(classmethod(lambda cls, actions: _plain_actions(actions)))
    _bounded = field_validator("actions")(classmethod(lambda cls, actions: _bounded_actions(actions)))


@register_transform
class DemoStart(_Shares):
    """Start part-way along a recorded play of a level: a reverse curriculum from what a user has, no search, no oracle.

    Each reset plays one of ``demos`` (the agent's own rare successes, or any recorded
    trajectories) up to a share of its actions, drawn uniformly in ``[min_share,
    max_share]`` and rounded down, always leaving at least the last action to the agent.
    The harness's seed picks the recording (``seed`` modulo their number) and the base env
    is reset with the recording's own seed (:meth:`level_seed`), so it works on every env
    that resets deterministically by seed; the actions played are setup, as for
    :class:`ReplayPrefix` (the agent's clock starts after them, ``info["setup_steps"]``
    counts them). The env's own verifier still decides success.

    Example:
        >>> import envharness
        >>> walk = DemoStart(demos=[{"seed": 0, "actions": [2, 2, 1, 1, 1, 2]}], min_share=0.5, max_share=0.5)
        >>> env = envharness.wrap("FrozenLake-v1", walk, is_slippery=False)
        >>> obs, info = env.reset(seed=7)  # any seed: the recording's level, three of its six actions played
        >>> obs, info["setup_steps"]
        (6, 3)
    """

    requires_state_access: ClassVar[bool] = False
    targets: ClassVar[tuple[str, ...]] = ("timeout", "loop")
    drawable: ClassVar[bool] = False  # its recordings come from play: domain randomization does not draw it

    demos: list[Demo] = Field(min_length=1, max_length=200, description="the recordings to start along (seed and actions each)")
    min_share: float = Field(0.0, ge=0.0, le=0.95, description="smallest share of a recording played at reset")
    max_share: float = Field(0.5, ge=0.0, le=0.95, description="largest share of a recording played at reset")

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        for d, demo in enumerate(self.demos):
            _check_actions(demo.actions, action_space, f"DemoStart.demos[{d}].actions", "fix that recording")

    def level_seed(self, seed: int | None) -> int | None:
        return self.demos[(seed or 0) % len(self.demos)].seed

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        demo = next((d for d in self.demos if d.seed == adapter.seed), self.demos[0])
        share = float(rng.uniform(self.min_share, self.max_share))
        played = min(int(share * len(demo.actions)), len(demo.actions) - 1)
        space = adapter.action_space
        for action in demo.actions[:played]:
            obs = adapter.step(np.asarray(action, dtype=space.dtype) if space.shape else action)[0]
        return obs


@register_transform
class OpenFile(StateTransform):
    """Start with a file already open in the observation (code-repair envs); empty means the module.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", OpenFile(), task="add")
        >>> "  2|     return a - b" in env.reset(seed=0)[0]
        True
    """

    capability: ClassVar[str] = "files"
    targets: ClassVar[tuple[str, ...]] = ("tool_error", "timeout")

    path: str = Field("", max_length=200, description="file to open; empty: the module to fix")

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        adapter.open_file(self.path)
        return adapter.observe()
