"""Hostile custom transforms and the state edits they try, shared by the attack suite.

A custom transform is trusted code in the threat model, but it only gets narrow
surfaces; these reach the live env the way a careless or hostile author would, through a
global reference (:data:`VICTIM`), and try the edits in :data:`EDITS`, each of which
would make the named env succeed (or stop failing) if it went unnoticed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np

from envharness.transforms import (
    ObservationTransform,
    RuleTransform,
    StateTransform,
    Step,
)

# The env under attack, reached from inside transforms as a global.
VICTIM: dict[str, Any] = {}


def raw() -> Any:
    return VICTIM["env"].unwrapped


def layers() -> list[Any]:
    """Every env from the harness's base down to the unwrapped one."""
    env, out = VICTIM["env"].env, []
    while True:
        out.append(env)
        if not isinstance(env, gym.Wrapper):
            return out
        env = env.env


def _cells(kind: str) -> list[tuple[int, int]]:
    grid = raw().grid
    return [(x, y) for x in range(grid.width) for y in range(grid.height) if (c := grid.get(x, y)) is not None and c.type == kind]


def _minigrid_agent_to_goal() -> None:
    raw().agent_pos = _cells("goal")[0]


def _minigrid_goal_underfoot() -> None:
    from minigrid.core.world_object import Goal

    raw().grid.set(*raw().front_pos, Goal())


def _minigrid_open_door() -> None:
    door = raw().grid.get(*_cells("door")[0])
    door.is_locked, door.is_open = False, True


def _minigrid_clear_lava() -> None:
    for cell in _cells("lava"):
        raw().grid.set(*cell, None)


def _minigrid_rewind_clock() -> None:
    raw().step_count = 0


def _frozenlake_teleport() -> None:
    raw().s = 14


def _frozenlake_dynamics() -> None:
    # Every action from every other state leads to the state left of the goal; the agent then steps right.
    for state, by_action in raw().P.items():
        for action in by_action:
            if state != 14:
                by_action[action] = [(1.0, 14, 0.0, False)]


def _frozenlake_reseed() -> None:
    raw().np_random = np.random.default_rng(12345)


def _frozenlake_replace_step() -> None:
    env = raw()
    env.step = lambda action: (15, 1.0, True, False, {"prob": 1.0})
    env.s = 15


def _taxi_rewrite_state() -> None:
    env = raw()
    row, col, _, destination = env.decode(env.s)
    d_row, d_col = env.locs[destination]
    env.s = env.encode(d_row, d_col, 4, destination)  # the taxi at the destination, passenger aboard


def _cliff_teleport() -> None:
    raw().s = 35  # just above the goal


def _cartpole_upright() -> None:
    raw().state = np.zeros(4)


def _cartpole_threshold() -> None:
    raw().theta_threshold_radians = 100.0
    raw().x_threshold = 1000.0


def _cartpole_time_limit() -> None:
    for layer in layers():
        if isinstance(layer, gym.wrappers.TimeLimit):
            layer._elapsed_steps = layer._max_episode_steps - 1


def _mountaincar_position() -> None:
    raw().state = np.array([0.49, 0.05])


def _mountaincar_goal() -> None:
    raw().goal_position = -2.0


def _acrobot_swing() -> None:
    raw().state = np.array([np.pi, 0.0, 0.0, 0.0])


def _acrobot_class_constant() -> None:
    raw().LINK_LENGTH_1 = 3.0  # shadows the class constant


def _coderepair_fix_file() -> None:
    env = raw()
    fixed = env.task.source.splitlines()
    for start, end, text in sorted(env.task.fix, reverse=True):
        fixed[start - 1 : end] = text.splitlines()
    env.files[env.task.path] = "\n".join(fixed) + "\n"


def _coderepair_class_swap() -> None:
    env = raw()

    class Pushover(type(env)):
        def step(self, action):
            return "ok", 1.0, True, False, {"hidden_passed": 1, "hidden_total": 1}

    env.__class__ = Pushover
    env.submitted = True


def _button_arm() -> None:
    raw().armed = True


# edit name -> (env id, make kwargs, the edit, actions that win only if the edit went unnoticed)
EDITS: dict[str, tuple[str, dict[str, Any], Callable[[], None], list[Any]]] = {
    "minigrid_agent_to_goal": ("MiniGrid-Empty-8x8-v0", {}, _minigrid_agent_to_goal, [0, 1, 0, 1]),
    "minigrid_goal_underfoot": ("MiniGrid-Empty-8x8-v0", {}, _minigrid_goal_underfoot, [2, 2, 2]),
    "minigrid_open_door": ("MiniGrid-DoorKey-5x5-v0", {}, _minigrid_open_door, [0, 2, 1, 2, 2, 1, 2, 2, 2]),
    "minigrid_clear_lava": ("MiniGrid-LavaGapS5-v0", {}, _minigrid_clear_lava, [2, 2, 2, 1, 2, 2, 2]),
    "minigrid_rewind_clock": ("MiniGrid-Empty-5x5-v0", {}, _minigrid_rewind_clock, [0] * 101),
    "frozenlake_teleport": ("FrozenLake-v1", {"is_slippery": False}, _frozenlake_teleport, [2, 2]),
    "frozenlake_dynamics": ("FrozenLake-v1", {"is_slippery": False}, _frozenlake_dynamics, [0, 2]),
    "frozenlake_reseed": ("FrozenLake-v1", {"is_slippery": True}, _frozenlake_reseed, [1, 1, 2, 2, 1, 2]),
    "frozenlake_replace_step": ("FrozenLake-v1", {"is_slippery": False}, _frozenlake_replace_step, [2]),
    "taxi_rewrite_state": ("Taxi-v4", {}, _taxi_rewrite_state, [5]),
    "cliff_teleport": ("CliffWalking-v1", {}, _cliff_teleport, [2]),
    "cartpole_upright": ("CartPole-v1", {}, _cartpole_upright, [0, 1] * 260),
    "cartpole_threshold": ("CartPole-v1", {}, _cartpole_threshold, [0] * 520),
    "cartpole_time_limit": ("CartPole-v1", {}, _cartpole_time_limit, [0, 1, 0, 1]),
    "mountaincar_position": ("MountainCar-v0", {}, _mountaincar_position, [2, 2]),
    "mountaincar_goal": ("MountainCar-v0", {}, _mountaincar_goal, [2, 2]),
    "acrobot_swing": ("Acrobot-v1", {}, _acrobot_swing, [1, 1]),
    "acrobot_class_constant": ("Acrobot-v1", {}, _acrobot_class_constant, [2, 0] * 100),
    "coderepair_fix_file": ("envharness/CodeRepair-v0", {"task": "add"}, _coderepair_fix_file, ['{"tool": "submit"}']),
    "coderepair_class_swap": ("envharness/CodeRepair-v0", {"task": "add"}, _coderepair_class_swap, ['{"tool": "submit"}']),
    "button_arm": ("hostile/Button-v0", {}, _button_arm, [1]),
}


def _taxi_at_destination() -> None:
    env = raw()
    row, col, _, destination = env.decode(env.s)
    env.s = env.encode(row, col, destination, destination)


def _put(attribute: str, value: Any) -> Callable[[], None]:
    return lambda: setattr(raw(), attribute, value() if callable(value) else value)


# Edits that only a state transform would make: the episode starts on the goal.
START_ON_GOAL: dict[str, tuple[str, dict[str, Any], Callable[[], None], list[Any]]] = {
    "taxi_at_destination": ("Taxi-v4", {}, _taxi_at_destination, []),
    "cliff_on_goal": ("CliffWalking-v1", {}, _put("s", 47), []),
    "lake_on_goal": ("FrozenLake-v1", {"is_slippery": False}, _put("s", 15), []),
    "car_at_goal": ("MountainCar-v0", {}, _put("state", lambda: np.array([0.55, 0.01])), []),
}


class Tamper(RuleTransform):
    """Runs ``EDITS[edit]`` inside the rule hook ``hook``, on its ``at``-th call in an episode."""

    edit: str
    hook: Literal["on_reset", "on_action", "on_transition"] = "on_action"
    at: int = 1

    def on_reset(self, memo: dict, obs: Any, rng: np.random.Generator) -> None:
        memo["calls"] = 0
        if self.hook == "on_reset":
            self._fire(memo)

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        if self.hook == "on_action":
            self._fire(memo)
        return action

    def on_transition(self, step: Step, memo: dict) -> None:
        if self.hook == "on_transition":
            self._fire(memo)

    def _fire(self, memo: dict) -> None:
        memo["calls"] += 1
        if memo["calls"] == self.at:
            EDITS[self.edit][2]()


class TamperView(ObservationTransform):
    """Runs ``EDITS[edit]`` while computing the first observation after a step."""

    edit: str

    def on_reset(self, memo: dict, rng: np.random.Generator) -> None:
        memo["calls"] = 0

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        memo["calls"] += 1
        if memo["calls"] == 2:
            EDITS[self.edit][2]()
        return obs


class StashHandle(StateTransform):
    """Keeps its StateHandle to edit the env later, from a rule."""

    stash: ClassVar[list[Any]] = []

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        StashHandle.stash.append(adapter)
        return obs


class UseStashedHandle(RuleTransform):
    """Moves the agent through a handle stashed at reset."""

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        StashHandle.stash[-1].move_agent(rng, 1, 1)
        return action


class PlaceOnGoal(StateTransform):
    """A state transform that starts the episode on the goal, by ``EDITS[edit]``."""

    edit: str

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        {**EDITS, **START_ON_GOAL}[self.edit][2]()
        return adapter.observe()


class Button(gym.Env):
    """A generic env: pressing 1 while armed succeeds (``info["success"]``); it is never armed."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        self.armed = False
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict]:
        success = bool(action == 1 and self.armed)
        return int(self.armed), float(success), bool(action == 1), False, {"success": success}


if "hostile/Button-v0" not in gym.registry:
    gym.register("hostile/Button-v0", entry_point=Button, max_episode_steps=10)


def make(edit: str) -> tuple[str, dict[str, Any], list[Any]]:
    env_id, kwargs, _, actions = {**EDITS, **START_ON_GOAL}[edit]
    if env_id.startswith("envharness/"):
        import envharness.envs  # noqa: F401  (registers the code-repair env)
    return env_id, kwargs, actions


def play(env: Any, actions: list[Any], seed: int = 0) -> list[Any]:
    """Reset, then take ``actions`` until the episode ends; the verdicts published on the way."""
    _, info = env.reset(seed=seed)
    verdicts = [info["verdict"]]
    for action in actions:
        *_, terminated, truncated, info = env.step(action)
        verdicts.append(info["verdict"])
        if terminated or truncated:
            break
    return verdicts
