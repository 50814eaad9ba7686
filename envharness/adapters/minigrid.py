"""Adapter for every MiniGrid environment (``minigrid.minigrid_env.MiniGridEnv`` subclasses).

Contains :class:`MiniGridAdapter`. The verifier is "the agent stands on a goal tile that
was there when the episode started" for envs with goal tiles; for the others (Fetch,
Unlock, PutNear, BabyAI...) it is MiniGrid's own success signal, a termination with
positive reward, read from the raw base transition.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
from minigrid.core.actions import Actions

from envharness.adapters.base import Adapter, digest, env_name_of, grid_distances, looser_limit_error, pick_by_distance
from envharness.adapters.registry import register_adapter
from envharness.errors import EnvNotFoundError, SpecError, TransformError
from envharness.verifier import RUNNING, TIMEOUT, Verdict

BLOCKING = frozenset({"wall", "lava"})


def _unit(score: float) -> float:
    return min(max(score, 0.0), 1.0)


# What rendering makes (a pygame window, clock, screen): never copied, since it cannot be.
_RENDERING = frozenset({"window", "clock", "screen", "surf", "viewer", "isopen"})
# What a step never changes: kept as the very objects, so nothing holding them sees a copy.
_STATIC = frozenset({"observation_space", "action_space", "spec", "metadata", "actions"})


def _private_copy(raw: Any) -> Any:
    """A deep copy of ``raw`` that shares nothing with it and renders nothing (its window and clock are left out)."""
    memo = {id(value): None for name, value in vars(raw).items() if name in _RENDERING and value is not None}
    probe = copy.deepcopy(raw, memo)
    probe.render_mode = None
    return probe


def _is_minigrid(env_type: type) -> bool:
    try:
        from minigrid.minigrid_env import MiniGridEnv
    except ImportError:  # minigrid is a dependency, but keep the generic path alive without it
        return False
    return issubclass(env_type, MiniGridEnv)


@register_adapter
class MiniGridAdapter(Adapter):
    """Reads and edits a MiniGrid grid; judges by the goal tile snapshotted at reset.

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("MiniGrid-Empty-5x5-v0")
        >>> adapter = MiniGridAdapter(env)
        >>> sorted(adapter.capabilities)
        ['agent', 'goal', 'lava', 'walkthrough', 'walls']
        >>> _ = env.reset(seed=0); adapter.begin_episode()
        >>> adapter.level_features()["goal_distance"]
        4.0
    """

    irreversible_endings = frozenset({"lava", "mission failed"})

    action_names = tuple(a.name for a in Actions)
    state_names = {"position[0]": "agent_x", "position[1]": "agent_y", "position[2]": "agent_dir"}

    family = "minigrid"
    capabilities = frozenset({"agent", "walls", "lava", "goal", "walkthrough"})  # the most any level offers; each instance narrows it
    state_attrs = ("grid", "agent_pos", "agent_dir", "carrying", "step_count", "mission")
    verifier_kwargs = ("max_steps",)

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._goals: frozenset[tuple[int, int]] = frozenset()
        self.setup_facts: set[Any] = set()  # every predicate setup passed through (a subgoal done as setup is behind the start)
        probe = self._probe(self.raw)
        # The step limit success and score count against is the registration's: what the constructor
        # sets with the registered max_steps, or, in BabyAI, what its reset sets for each level. A
        # caller's max_steps may tighten it (the horizon, in the level id), never loosen it.
        pristine = self.pristine()
        self._per_level = hasattr(pristine, "num_navs_needed") and not getattr(pristine, "fixed_max_steps", True)
        self._asked: int | None = None  # a max_steps the caller fixed, if it is not the registration's
        if self._per_level:
            self._asked = int(self.raw.max_steps) if self.raw.fixed_max_steps else None
            self._max_steps = int(probe.max_steps)  # until the first level says its own
        else:
            self._max_steps = int((probe if pristine is self.raw else self._probe(pristine)).max_steps)
            if pristine is not self.raw:
                self._asked = int(self.raw.max_steps)
                if self._asked > self._max_steps:
                    raise looser_limit_error("max_steps", self._asked, self._max_steps, env_name_of(env))
        has_goal = bool(self._cells_of("goal", probe))
        self.capabilities = frozenset({"agent", "walls", "lava", "walkthrough"} | ({"goal"} if has_goal else set()))
        from envharness.adapters.minigrid_view import speed_up

        speed_up(self.raw)  # the identical observation, four times faster (most of a step's time)

    @classmethod
    def matches(cls, env_type: type) -> bool:
        return _is_minigrid(env_type)

    def _probe(self, raw: Any) -> Any:
        """A private copy of ``raw`` after a reset: what its levels look like."""
        probe = _private_copy(raw)
        try:
            probe.reset(seed=0)
        except (gym.error.DependencyNotInstalled, FileNotFoundError) as error:
            name = self.env.spec.id if self.env.spec is not None else type(self.raw).__name__
            raise EnvNotFoundError(
                f"{name} cannot generate levels here ({str(error).splitlines()[0]}); install what it needs or use another env"
            ) from None
        except (TypeError, ValueError, AssertionError) as error:
            name = self.env.spec.id if self.env.spec is not None else type(self.raw).__name__
            raise SpecError(
                f"env_kwargs: {name} could not generate a level with them ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                "check their values (positions are tuples, sizes integers)"
            ) from None
        return probe

    @staticmethod
    def _cells_of(kind: str, raw: Any) -> list[tuple[int, int]]:
        grid = raw.grid
        return [(x, y) for x in range(grid.width) for y in range(grid.height) if (cell := grid.get(x, y)) is not None and cell.type == kind]

    # -- episode life cycle ------------------------------------------------------------
    def begin_episode(self) -> None:
        raw = self.raw
        if self._per_level:
            # BabyAI's own rule for this level (RoomGridLevel.reset), whatever max_steps the caller fixed.
            self._max_steps = int(raw.num_navs_needed(raw.instrs)) * int(raw.room_size) ** 2 * int(raw.num_rows) * int(raw.num_cols)
            if self._asked is not None and self._asked > self._max_steps:
                raise SpecError(
                    f"env_kwargs.max_steps: {self._asked} is above the {self._max_steps} steps {env_name_of(self.env)} gives this level, "
                    f"within which success is judged; give at most {self._max_steps}, or leave max_steps out (each level then has its own)"
                )
        self._goals = frozenset(self._cells_of("goal", raw))
        grid = raw.grid
        kinds = [cell.type if cell is not None else None for cell in grid.grid]
        interior_walls = sum(
            1
            for x in range(1, grid.width - 1)
            for y in range(1, grid.height - 1)
            if (cell := grid.get(x, y)) is not None and cell.type == "wall"
        )
        self._features = {
            "width": float(grid.width),
            "height": float(grid.height),
            "goal_distance": float(self._goal_distance()),
            "n_lava": float(kinds.count("lava")),
            "n_walls": float(interior_walls),
            "n_doors": float(kinds.count("door")),
            "n_keys": float(kinds.count("key")),
        }

    def level_id(self) -> str | None:
        return digest(self.raw.grid.encode(), self.raw.agent_pos, self.raw.agent_dir, self.raw.mission)

    def position(self) -> Any:
        return [int(self.raw.agent_pos[0]), int(self.raw.agent_pos[1]), int(self.raw.agent_dir)]

    def time_limit(self) -> int | None:
        limit = super().time_limit()
        own = self._max_steps if self._asked is None else min(self._asked, self._max_steps)
        return own if limit is None else min(limit, own)

    def enforced_limit(self) -> int | None:
        limit = super().enforced_limit()
        own = int(self.raw.max_steps) or self._max_steps  # BabyAI sets max_steps only at reset
        return own if limit is None else min(limit, own)

    def play_walkthrough(self, share: float) -> int:
        """Play the first ``share`` of this level's own shortest solution, rounded down and never its last action; returns how many.

        The solution is found by a breadth-first search with the env's own step
        (:mod:`~envharness.adapters.minigrid_search`), so it passes every subgoal the level
        has (the key, the locked door): a start along it skips none of the task, it only
        begins later in it. A level the search cannot win (or decide) is refused. The
        search's env steps are counted by :func:`~envharness.adapters.minigrid_search.steps_taken`;
        the actions played here are the level's setup, like :class:`~envharness.transforms.ReplayPrefix`'s.
        """
        from envharness.adapters.minigrid_search import facts, solve

        raw = self.raw
        rendering, raw.render_mode = raw.render_mode, None
        try:
            found, path = solve(raw, self.time_limit() or int(raw.max_steps))
            if found is not True:
                raise TransformError(
                    "WalkthroughStart: no solution of this MiniGrid level was found within its step limit"
                    + (" (the search gave up)" if found is None else "")
                    + "; the level is skipped"
                )
            count = min(int(share * len(path)), len(path) - 1)
            for action in path[:count]:
                raw.step(action)
                self.setup_facts |= facts(raw)
            return count
        finally:
            raw.render_mode = rendering

    def begin_setup(self) -> None:
        super().begin_setup()
        self.setup_facts = set()

    def setup_step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        from envharness.adapters.minigrid_search import facts

        out = super().setup_step(action)
        self.setup_facts |= facts(self.raw)
        return out

    def restart_clock(self) -> None:
        super().restart_clock()
        self.raw.step_count = 0

    def solved(self) -> str | None:
        if self._agent() in self._goals:
            return "the agent starts on a goal tile"
        if not self._goals and self._done_succeeds():
            # Goal-less families (GoToDoor, GoToObject, BabyAI...): their own step decides success.
            if hasattr(self.raw, "instrs"):
                return "the mission is complete before the agent acts"  # BabyAI: its instructions say so
            return "`done`, which does nothing, already completes the mission"
        return None

    def _done_succeeds(self) -> bool:
        """Whether ``done`` as the first action would end the episode in success, asked of the env itself and undone.

        The env's own ``step`` decides (nothing here re-implements a family's success), on its
        live state, with rendering off; then everything ``step`` can change (the grid, the
        agent, BabyAI's instructions, the random generator, the clock) is put back from a
        snapshot of the env's attributes. The snapshot is one deep copy of the env's own
        attributes with the env itself, and what rendering made, kept by reference: no copy of
        a window or clock the env does not own (which cannot be copied).
        """
        raw = self.raw
        kept = {name: value for name, value in vars(raw).items() if name in _RENDERING or name in _STATIC}
        before = vars(raw).copy()
        memo = {id(raw): raw, **{id(value): value for value in kept.values()}}
        saved = copy.deepcopy({name: value for name, value in before.items() if name not in kept}, memo)
        try:
            raw.render_mode = None
            _, reward, terminated, _, _ = raw.step(raw.actions.done)
            return bool(terminated) and float(reward) > 0
        except Exception:  # noqa: BLE001 - a level whose first no-op crashes the env is the env's to report, at the agent's step
            return False
        finally:
            for name in [n for n in vars(raw) if n not in before]:
                delattr(raw, name)
            vars(raw).update(saved)
            vars(raw).update(kept)

    def observe(self) -> Any:
        return self.raw.gen_obs()

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        raw = self.raw
        if self._goals:
            pos = raw.agent_pos
            if (int(pos[0]), int(pos[1])) in self._goals:
                return Verdict(True, _unit(1.0 - 0.9 * (raw.step_count / self._max_steps)), "reached goal")
        elif terminated and reward > 0:
            # MiniGrid's own reward formula, against the step limit success is judged by.
            return Verdict(True, _unit(1.0 - 0.9 * (raw.step_count / self._max_steps)), "mission complete")
        if terminated:
            cell = raw.grid.get(*raw.agent_pos)
            return Verdict(False, 0.0, "lava" if cell is not None and cell.type == "lava" else "mission failed")
        if truncated:
            return Verdict(False, 0.0, TIMEOUT)
        return RUNNING

    # -- edits -------------------------------------------------------------------------
    def _passable(self, x: int, y: int) -> bool:
        cell = self.raw.grid.get(x, y)
        return cell is None or cell.type not in BLOCKING

    def _distances_from(self, start: tuple[int, int]) -> np.ndarray:
        grid = self.raw.grid
        return grid_distances(grid.width, grid.height, start, self._passable)

    def _reaches_edge(self) -> bool:
        """Whether the agent can walk to a cell on the grid's edge (a map whose rooms float in an unwalled grid,
        MultiRoom's, once a wall is opened): one step further is off the grid, where MiniGrid's own code fails."""
        grid = self.raw.grid
        dist = self._distances_from(self._agent())
        w, h = grid.width, grid.height
        return bool((dist[0, :] >= 0).any() or (dist[w - 1, :] >= 0).any() or (dist[:, 0] >= 0).any() or (dist[:, h - 1] >= 0).any())

    def _agent(self) -> tuple[int, int]:
        pos = self.raw.agent_pos
        return (int(pos[0]), int(pos[1]))

    def _goal_distance(self) -> int:
        goals = self._cells_of("goal", self.raw)
        if not goals:
            return -1
        dist = self._distances_from(self._agent())
        reachable = [int(dist[g]) for g in goals if dist[g] >= 0]
        return min(reachable) if reachable else -1

    def _empty_cells(self) -> list[tuple[int, int]]:
        grid, agent = self.raw.grid, self._agent()
        return [(x, y) for x in range(1, grid.width - 1) for y in range(1, grid.height - 1) if grid.get(x, y) is None and (x, y) != agent]

    def move_goal(self, rng: np.random.Generator, min_dist: int, max_dist: int) -> bool:
        """Move the first goal tile to an empty cell at path distance in ``[min_dist, max_dist]``."""
        from minigrid.core.world_object import Goal

        goals = self._cells_of("goal", self.raw)
        if not goals:
            raise TransformError("MoveGoal: this MiniGrid level has no goal tile; use it on a goal-reaching env")
        target = pick_by_distance(self._empty_cells(), self._distances_from(self._agent()), min_dist, max_dist, rng)
        if target is None:
            return False
        self.raw.grid.set(*goals[0], None)
        self.raw.grid.set(*target, Goal())
        return True

    def move_agent(self, rng: np.random.Generator, min_dist: int, max_dist: int) -> bool:
        """Place the agent on an empty cell whose path distance to the goal lies in the range."""
        goals = self._cells_of("goal", self.raw)
        origin = goals[0] if goals else self._agent()
        target = pick_by_distance(self._empty_cells(), self._distances_from(origin), min_dist, max_dist, rng)
        if target is None:
            return False
        self.raw.agent_pos = target
        self.raw.agent_dir = int(rng.integers(4))
        return True

    def _targets_reachable(self, targets: list[tuple[int, int]]) -> bool:
        dist = self._distances_from(self._agent())
        return all(dist[t] >= 0 for t in targets)

    def edit_cells(self, kind: str, add: int, remove: int, rng: np.random.Generator, keep_solvable: bool) -> int:
        """Add ``add`` cells of ``kind`` (wall or lava) on empty interior cells, remove ``remove``.

        A removal that would let the agent walk to the grid's edge is not made (MultiRoom's
        rooms float in an unwalled grid; past the edge MiniGrid itself crashes). With ``keep_solvable`` a placement that cuts the agent off from the goal (or, in
        goal-less envs, from any object it could reach before) is undone. Returns the
        number of cells changed.
        """
        from minigrid.core.world_object import Lava, Wall

        grid = self.raw.grid
        changed = 0
        if remove:
            interior = [
                (x, y)
                for x in range(1, grid.width - 1)
                for y in range(1, grid.height - 1)
                if (cell := grid.get(x, y)) is not None and cell.type == kind
            ]
            for i in rng.permutation(len(interior)):
                if changed == remove:
                    break
                grid.set(*interior[i], None)
                if self._reaches_edge():  # the opening leads to the grid's edge: MiniGrid itself crashes past it
                    grid.set(*interior[i], Wall() if kind == "wall" else Lava())
                    continue
                changed += 1
        if add:
            goals = self._cells_of("goal", self.raw)
            if goals:
                targets = goals
            else:
                dist = self._distances_from(self._agent())
                targets = [
                    (x, y)
                    for x in range(grid.width)
                    for y in range(grid.height)
                    if grid.get(x, y) is not None and grid.get(x, y).type not in BLOCKING and dist[x, y] >= 0
                ]
            make = Wall if kind == "wall" else Lava
            placed = 0
            cells = self._empty_cells()
            for i in rng.permutation(len(cells)):
                if placed == add:
                    break
                cell = cells[i]
                grid.set(*cell, make())
                if keep_solvable and not self._targets_reachable(targets):
                    grid.set(*cell, None)
                    continue
                placed += 1
            changed += placed
        return changed
