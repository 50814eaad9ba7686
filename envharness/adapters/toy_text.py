"""Adapters for Gymnasium's toy-text family: FrozenLake, Taxi and CliffWalking.

Contains :class:`FrozenLakeAdapter`, :class:`TaxiAdapter` and :class:`CliffWalkingAdapter`.
Each verifier reads the discrete state of the base env after the raw step: on the goal
tile (FrozenLake, CliffWalking) or the passenger delivered to the destination snapshotted
at reset (Taxi).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envharness.adapters.base import Adapter, digest, grid_distances, pick_by_distance
from envharness.adapters.registry import register_adapter
from envharness.verifier import RUNNING, TIMEOUT, Verdict

_GOAL, _HOLE = ord("G"), ord("H")


class ToyTextAdapter(Adapter):
    """Shared by the toy-text envs: the whole state is the discrete ``s`` (plus the last action)."""

    state_names = {"obs": "state", "position": "state"}

    family = "toy_text"
    state_attrs: tuple[str, ...] = ("s", "lastaction")

    def observe(self) -> Any:
        return int(self.raw.s)

    def position(self) -> Any:
        return int(self.raw.s)

    def level_id(self) -> str | None:
        return digest(getattr(self.raw, "desc", None), int(self.raw.s))


@register_adapter
class FrozenLakeAdapter(ToyTextAdapter):
    """FrozenLake: edit the map (goal, start, holes); success is reaching a ``G`` tile.

    Map edits are undone at every base reset, so each episode starts from the original
    map before the state transforms run.

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("FrozenLake-v1", is_slippery=False)
        >>> adapter = FrozenLakeAdapter(env)
        >>> _ = env.reset(seed=0); adapter.begin_episode()
        >>> adapter.level_features()
        {'size': 4.0, 'n_holes': 4.0, 'goal_distance': 6.0, 'slippery': 0.0}
        >>> adapter.judge(15, 1.0, True, False, {})
        Verdict(success=False, score=0.0, reason='terminated without success')
    """

    irreversible_endings = frozenset({"hole"})

    action_names = ("left", "down", "right", "up")

    capabilities = frozenset({"goal", "agent", "map"})
    state_attrs = ("s", "lastaction", "desc", "P")
    observes_goal = False

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        raw = self.raw
        self._original = (raw.desc.copy(), raw.P, raw.initial_state_distrib.copy())
        self._edited = False
        self._dynamics = self._read_dynamics()
        # The map the verifier judges against, as immutable bytes: one letter per cell.
        self._desc_flat = raw.desc.tobytes()
        self._seen: dict[tuple[bytes, tuple[int, ...], int], dict[str, float]] = {}  # level features by (map, start)

    @classmethod
    def matches(cls, env_type: type) -> bool:
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

        return issubclass(env_type, FrozenLakeEnv)

    def _read_dynamics(self) -> dict[str, Any]:
        """Recover ``is_slippery``, ``success_rate`` and ``reward_schedule`` from the transition table."""
        raw = self.raw
        desc = raw.desc.ravel()
        slippery, success_rate, rewards = False, 1.0, {b"G": 1, b"H": 0, b"F": 0}
        for s, by_action in raw.P.items():
            if desc[s] in (b"G", b"H"):
                continue
            for outcomes in by_action.values():
                if len(outcomes) > 1:
                    # Gymnasium lists the slips around the intended move: (left of it, it, right of it).
                    slippery = True
                    success_rate = outcomes[len(outcomes) // 2][0]
                for _, s2, r, _ in outcomes:
                    rewards[bytes(desc[s2])] = r
        rewards.setdefault(b"F", 0)
        return {
            "is_slippery": slippery,
            "success_rate": success_rate,
            "reward_schedule": (rewards[b"G"], rewards[b"H"], rewards.get(b"F", 0)),
        }

    def _rebuild(self, desc: np.ndarray) -> None:
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

        fresh = FrozenLakeEnv(desc=[b"".join(row).decode() for row in desc], **self._dynamics)
        self.raw.desc, self.raw.P = fresh.desc, fresh.P
        self._edited = True

    def on_base_reset(self) -> None:
        if self._edited:
            desc, P, initial = self._original
            self.raw.desc, self.raw.P, self.raw.initial_state_distrib = desc.copy(), P, initial.copy()
            self._edited = False

    def begin_episode(self) -> None:
        raw = self.raw
        self._desc_flat = raw.desc.tobytes()
        # A level is its map and start: most resets replay one already seen, and its path search is the cost of a reset.
        key = (self._desc_flat, raw.desc.shape, int(raw.s))
        known = self._seen.get(key)
        if known is None:
            known = {
                "size": float(raw.nrow),
                "n_holes": float((raw.desc == b"H").sum()),
                "goal_distance": float(self._goal_distance()),
                "slippery": float(self._dynamics["is_slippery"]),
            }
            if len(self._seen) >= 4096:
                self._seen.clear()
            self._seen[key] = known
        self._features = dict(known)

    def solved(self) -> str | None:
        return "the agent starts on the goal" if self._desc_flat[int(self.raw.s)] == _GOAL else None

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        letter = self._desc_flat[int(self.raw.s)]
        if letter == _GOAL:
            return Verdict(True, 1.0, "reached goal")
        if letter == _HOLE:
            return Verdict(False, 0.0, "hole")
        if terminated or truncated:
            return Verdict(False, 0.0, TIMEOUT if truncated else "terminated without success")
        return RUNNING

    # -- edits -------------------------------------------------------------------------
    def _cell(self, s: int) -> tuple[int, int]:
        return divmod(int(s), self.raw.ncol)

    def _distances_from(self, cell: tuple[int, int], desc: np.ndarray | None = None) -> np.ndarray:
        desc = self.raw.desc if desc is None else desc
        return grid_distances(desc.shape[0], desc.shape[1], cell, lambda r, c: desc[r, c] != b"H")

    def _goal(self, desc: np.ndarray | None = None) -> tuple[int, int] | None:
        desc = self.raw.desc if desc is None else desc
        found = np.argwhere(desc == b"G")
        return (int(found[0][0]), int(found[0][1])) if len(found) else None

    def _goal_distance(self) -> int:
        goal = self._goal()
        return -1 if goal is None else int(self._distances_from(self._cell(self.raw.s))[goal])

    def _frozen_cells(self, desc: np.ndarray) -> list[tuple[int, int]]:
        agent = self._cell(self.raw.s)
        return [(int(r), int(c)) for r, c in np.argwhere(desc == b"F") if (r, c) != agent]

    def move_goal(self, rng: np.random.Generator, min_dist: int, max_dist: int) -> bool:
        desc = self.raw.desc.copy()
        goal = self._goal(desc)
        target = pick_by_distance(self._frozen_cells(desc), self._distances_from(self._cell(self.raw.s)), min_dist, max_dist, rng)
        if target is None or goal is None:
            return False
        desc[goal], desc[target] = b"F", b"G"
        self._rebuild(desc)
        return True

    def move_agent(self, rng: np.random.Generator, min_dist: int, max_dist: int) -> bool:
        goal = self._goal()
        if goal is None:
            return False
        cells = self._frozen_cells(self.raw.desc) + [self._cell(self.raw.s)]
        target = pick_by_distance(cells, self._distances_from(goal), min_dist, max_dist, rng)
        if target is None:
            return False
        self.raw.s = int(target[0] * self.raw.ncol + target[1])
        return True

    def edit_cells(self, kind: str, add: int, remove: int, rng: np.random.Generator, keep_solvable: bool) -> int:
        """Turn ``add`` frozen tiles into holes and ``remove`` holes into frozen tiles."""
        desc = self.raw.desc.copy()
        changed = 0
        holes = [tuple(c) for c in np.argwhere(desc == b"H")]
        for i in rng.permutation(len(holes))[:remove]:
            desc[holes[i]] = b"F"
            changed += 1
        cells = self._frozen_cells(desc)
        agent, goal = self._cell(self.raw.s), self._goal(desc)
        placed = 0
        for i in rng.permutation(len(cells)):
            if placed == add:
                break
            desc[cells[i]] = b"H"
            if keep_solvable and goal is not None and self._distances_from(agent, desc)[goal] < 0:
                desc[cells[i]] = b"F"
                continue
            placed += 1
        changed += placed
        if changed:
            self._rebuild(desc)
        return changed


@register_adapter
class TaxiAdapter(ToyTextAdapter):
    """Taxi: success is a drop-off of the passenger at the destination set at reset.

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("Taxi-v4")
        >>> adapter = TaxiAdapter(env)
        >>> _ = env.reset(seed=1); adapter.begin_episode()
        >>> sorted(adapter.level_features())
        ['passenger_distance', 'taxi_distance']
    """

    irreversible_endings = frozenset({"wrong drop-off"})

    action_names = ("south", "north", "east", "west", "pickup", "dropoff")

    capabilities = frozenset({"goal", "agent"})
    state_attrs = ("s", "lastaction", "taxi_orientation", "fickle_step")

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._destination = -1
        # A fickle passenger changes their destination once, on purpose: then the current one counts.
        self._fickle = bool(getattr(self.raw, "fickle_passenger", False))

    @classmethod
    def matches(cls, env_type: type) -> bool:
        from gymnasium.envs.toy_text.taxi import TaxiEnv

        return issubclass(env_type, TaxiEnv)

    def _decode(self) -> tuple[int, int, int, int]:
        row, col, passenger, destination = (int(v) for v in self.raw.decode(self.raw.s))
        return row, col, passenger, destination

    def _encode(self, row: int, col: int, passenger: int, destination: int) -> None:
        self.raw.s = int(self.raw.encode(row, col, passenger, destination))

    def begin_episode(self) -> None:
        row, col, passenger, destination = self._decode()
        self._destination = destination
        locs = self.raw.locs
        p_row, p_col = locs[passenger] if passenger < 4 else (row, col)
        d_row, d_col = locs[destination]
        self._features = {
            "taxi_distance": float(abs(row - p_row) + abs(col - p_col)),
            "passenger_distance": float(abs(p_row - d_row) + abs(p_col - d_col)),
        }

    def solved(self) -> str | None:
        return "the passenger starts at the destination" if self._decode()[2] == self._destination else None

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        if terminated:
            _, _, passenger, destination = self._decode()
            if passenger == (destination if self._fickle else self._destination):
                return Verdict(True, 1.0, "passenger delivered")
            return Verdict(False, 0.0, "wrong drop-off")
        if truncated:
            return Verdict(False, 0.0, TIMEOUT)
        return RUNNING

    def move_goal(self, rng: np.random.Generator, min_dist: int, max_dist: int) -> bool:
        """Pick a new destination whose distance from the passenger lies in the range."""
        row, col, passenger, destination = self._decode()
        locs = self.raw.locs
        origin = locs[passenger] if passenger < 4 else (row, col)
        options = [
            d
            for d in range(len(locs))
            if d != passenger and min_dist <= abs(locs[d][0] - origin[0]) + abs(locs[d][1] - origin[1]) <= max_dist
        ]
        if not options:
            return False
        self._encode(row, col, passenger, options[int(rng.integers(len(options)))])
        return True

    def move_agent(self, rng: np.random.Generator, min_dist: int, max_dist: int) -> bool:
        """Place the taxi at Manhattan distance in the range from the passenger."""
        row, col, passenger, destination = self._decode()
        if passenger >= 4:
            return False
        p_row, p_col = self.raw.locs[passenger]
        cells = [(r, c) for r in range(5) for c in range(5) if min_dist <= abs(r - p_row) + abs(c - p_col) <= max_dist]
        if not cells:
            return False
        r, c = cells[int(rng.integers(len(cells)))]
        self._encode(r, c, passenger, destination)
        return True


@register_adapter
class CliffWalkingAdapter(ToyTextAdapter):
    """CliffWalking: success is reaching the bottom-right goal within 200 steps; the start cell can move.

    Gymnasium registers CliffWalking without a time limit, so the harness ends episodes
    after 200 agent steps (a tighter ``max_episode_steps`` still applies).

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("CliffWalking-v1")
        >>> adapter = CliffWalkingAdapter(env)
        >>> _ = env.reset(seed=0); adapter.begin_episode()
        >>> adapter.level_features()
        {'goal_distance': 13.0, 'start_row': 3.0, 'start_col': 0.0}
    """

    action_names = ("up", "right", "down", "left")

    capabilities = frozenset({"agent"})
    # Gymnasium registers CliffWalking without a time limit: a random walk "succeeds" after thousands of
    # steps. The optimal path is 13 steps; 200 is Taxi's and FrozenLake 8x8's limit.
    fallback_limit = 200

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        raw = self.raw
        self._goal_state = int(np.ravel_multi_index((raw.shape[0] - 1, raw.shape[1] - 1), raw.shape))

    @classmethod
    def matches(cls, env_type: type) -> bool:
        from gymnasium.envs.toy_text.cliffwalking import CliffWalkingEnv

        return issubclass(env_type, CliffWalkingEnv)

    def _distances_to_goal(self) -> np.ndarray:
        rows, cols = self.raw.shape
        goal = (rows - 1, cols - 1)
        return grid_distances(rows, cols, goal, lambda r, c: not self.raw._cliff[r, c])

    def begin_episode(self) -> None:
        row, col = np.unravel_index(int(self.raw.s), self.raw.shape)
        self._features = {
            "goal_distance": float(self._distances_to_goal()[row, col]),
            "start_row": float(row),
            "start_col": float(col),
        }

    def solved(self) -> str | None:
        return "the agent starts on the goal" if int(self.raw.s) == self._goal_state else None

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        if int(self.raw.s) == self._goal_state:
            return Verdict(True, 1.0, "reached goal")
        if terminated or truncated:
            return Verdict(False, 0.0, TIMEOUT if truncated else "terminated without success")
        return RUNNING

    def move_agent(self, rng: np.random.Generator, min_dist: int, max_dist: int) -> bool:
        rows, cols = self.raw.shape
        cells = [
            (r, c)
            for r in range(rows)
            for c in range(cols)
            if not self.raw._cliff[r, c] and int(np.ravel_multi_index((r, c), self.raw.shape)) != self._goal_state
        ]
        target = pick_by_distance(cells, self._distances_to_goal(), min_dist, max_dist, rng)
        if target is None:
            return False
        self.raw.s = int(np.ravel_multi_index(target, self.raw.shape))
        return True


@register_adapter
class GeneratedFrozenLakeAdapter(FrozenLakeAdapter):
    """:class:`~envharness.envs.generated.GeneratedFrozenLake`: a new map at every reset, observed as a grid.

    The verifier is FrozenLake's (the agent on a ``G`` tile of the map the episode started
    with). The base reset draws the level's map, so there is no original map to restore;
    observations are the env's agent-centred view of the current (possibly edited) map.

    Example:
        >>> import gymnasium as gym
        >>> import envharness.envs
        >>> env = gym.make("envharness/GeneratedFrozenLake-v0")
        >>> adapter = GeneratedFrozenLakeAdapter(env)
        >>> _ = env.reset(seed=1); adapter.begin_episode()
        >>> adapter.level_features()
        {'size': 6.0, 'n_holes': 4.0, 'goal_distance': 10.0, 'slippery': 0.0}
        >>> adapter.observe().shape
        (15, 15, 3)
    """

    @classmethod
    def matches(cls, env_type: type) -> bool:
        from envharness.envs.generated import GeneratedFrozenLake

        return issubclass(env_type, GeneratedFrozenLake)

    def on_base_reset(self) -> None:
        self._edited = False

    def observe(self) -> Any:
        return self.raw.view()
