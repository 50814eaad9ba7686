"""Procedurally generated levels for two Gymnasium families: FrozenLake maps and CartPole physics.

Contains :class:`GeneratedFrozenLake` (``envharness/GeneratedFrozenLake-v0``) and
:class:`PhysicsCartPole` (``envharness/PhysicsCartPole-v0``). In both, ``reset(seed=s)``
draws the level from ``s``: a fresh map, or fresh physical constants. So every seed is a
level, held-out levels are seeds a learner never trained on, and the env's own verifier
(the FrozenLake or CartPole adapter's) judges every level alike.

Both are subclasses of Gymnasium's own envs and keep their dynamics, rewards and
termination; only the level changes per reset (and, for FrozenLake, the observation,
which has to show the map so that a learner can carry what it learned to a new map).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv, generate_random_map
from gymnasium.envs.toy_text.utils import categorical_sample

from envharness.transforms.base import field_bounds
from envharness.transforms.state import PhysicsParams

_OUTSIDE, _HOLE, _GOAL = 0, 1, 2
_IMAGES = ("ice_img", "ice_crack_imgs", "hole_img", "agent_img", "goal_flag_img", "letter_s_img", "letter_g_img")


@lru_cache(maxsize=256)
def _tables(rows: tuple[str, ...], slippery: bool) -> tuple[np.ndarray, dict, np.ndarray]:
    """FrozenLake's map letters, transition table and start distribution for ``rows``, built once per map.

    Building the table is most of a reset's time, and a level is often reset more than once
    in a row (its level id is read before an arm plays it). The table is shared, and never
    changed in place: an edit of the map (FrozenLakeMap) replaces it whole.
    """
    made = FrozenLakeEnv(desc=list(rows), is_slippery=slippery)
    return np.asarray(made.desc), made.P, made.initial_state_distrib


class GeneratedFrozenLake(FrozenLakeEnv):
    """FrozenLake where the map is the level: every ``reset(seed=s)`` draws a new valid map from ``s``.

    The map's side is drawn from ``sizes`` and its share of frozen tiles from ``frozen``
    (:func:`gymnasium.envs.toy_text.frozen_lake.generate_random_map`, which guarantees a
    path from start to goal). The observation is the map as the agent sees it from where it
    stands: a ``(2n-1, 2n-1, 3)`` uint8 grid (``n`` the largest size) centred on the agent,
    with one channel each for "off the map", "hole" and "goal". Centring it makes the same
    situation look the same on every map, so a learner can generalize to maps it never saw.
    Dynamics, rewards and termination are FrozenLake's (not slippery by default).

    Example:
        >>> import gymnasium as gym
        >>> import envharness.envs
        >>> env = gym.make("envharness/GeneratedFrozenLake-v0")
        >>> obs, info = env.reset(seed=1)
        >>> obs.shape, obs[7, 7].tolist()   # the agent is at the centre, on the start tile
        ((15, 15, 3), [0, 0, 0])
        >>> env.unwrapped.nrow, int((env.unwrapped.desc == b"H").sum())   # a 6x6 map with 4 holes
        (6, 4)
        >>> bool((env.reset(seed=1)[0] == obs).all()), env.reset(seed=2)[0].shape
        (True, (15, 15, 3))
        >>> env.unwrapped.nrow
        8
    """

    def __init__(
        self,
        sizes: Sequence[int] = (5, 6, 7, 8),
        frozen: Sequence[float] = (0.75, 0.9),
        is_slippery: bool = False,
        render_mode: str | None = None,
    ) -> None:
        sizes = tuple(int(s) for s in sizes)
        if not sizes or min(sizes) < 2 or max(sizes) > 32:
            raise ValueError(f"sizes: got {sizes}; give map sides between 2 and 32")
        if len(frozen) != 2 or not 0.0 < frozen[0] <= frozen[1] <= 1.0:
            raise ValueError(f"frozen: got {tuple(frozen)}; give (low, high) shares of frozen tiles with 0 < low <= high <= 1")
        self.sizes, self.frozen = sizes, (float(frozen[0]), float(frozen[1]))
        self._largest = max(sizes)
        if _path_odds(self._largest, self.frozen[0]) < 0.01:
            # generate_random_map draws maps until one has a path: where almost none has, it never returns.
            raise ValueError(
                f"frozen: {self.frozen[0]:g} frozen tiles on a {self._largest}x{self._largest} map almost never leave a path "
                "from start to goal; raise the low share (0.6 or more is safe at every size)"
            )
        super().__init__(render_mode=render_mode, desc=generate_random_map(self._largest, self.frozen[1], seed=0), is_slippery=is_slippery)
        self._slippery = is_slippery
        side = 2 * self._largest - 1
        self.observation_space = spaces.Box(0, 1, (side, side, 3), np.uint8)
        self.window_size = (64 * self._largest, 64 * self._largest)

    def _load(self, rows: list[str]) -> None:
        """Make ``rows`` the current map: the letters, the transition table and the start."""
        desc, self.P, initial = _tables(tuple(rows), self._slippery)
        self.desc, self.initial_state_distrib = desc.copy(), initial.copy()  # type: ignore[assignment]  # FrozenLake's desc is an array
        self.nrow, self.ncol = desc.shape
        self.cell_size = (self.window_size[0] // self.ncol, self.window_size[1] // self.nrow)
        for name in _IMAGES:  # sprites are scaled to the cell size: rescale on the next render
            setattr(self, name, None)

    def view(self) -> np.ndarray:
        """The map centred on the agent (see the class docstring)."""
        n = self._largest
        grid = np.zeros((2 * n - 1, 2 * n - 1, 3), np.uint8)
        grid[..., _OUTSIDE] = 1
        row, col = divmod(int(self.s), self.ncol)
        top, left = n - 1 - row, n - 1 - col
        window = grid[top : top + self.nrow, left : left + self.ncol]
        window[..., _OUTSIDE] = 0
        window[..., _HOLE] = self.desc == b"H"
        window[..., _GOAL] = self.desc == b"G"
        return grid

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        gym.Env.reset(self, seed=seed)
        rng = self.np_random
        size = self.sizes[int(rng.integers(len(self.sizes)))]
        share = float(rng.uniform(*self.frozen))
        self._load(generate_random_map(size, share, seed=int(rng.integers(2**31 - 1))))
        self.s = categorical_sample(self.initial_state_distrib, rng)
        self.lastaction = None
        if self.render_mode == "human":
            self.render()
        return self.view(), {"prob": 1}

    def step(self, a: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        _, reward, terminated, truncated, info = super().step(a)
        return self.view(), reward, terminated, truncated, info


# CartPole's constants by their envharness names (PhysicsParams): the env attribute each sets.
_CARTPOLE = {"gravity": "gravity", "pole_length": "length", "pole_mass": "masspole", "cart_mass": "masscart", "force": "force_mag"}
# A range may draw only what PhysicsParams may set: finite, and on the scale of the env.
_PHYSICS_BOUNDS = {name: field_bounds(PhysicsParams.model_fields[name]) for name in _CARTPOLE}
PHYSICS_TRAIN = {"pole_length": (0.3, 0.7), "pole_mass": (0.05, 0.2), "cart_mass": (0.5, 1.5), "force": (7.0, 13.0)}


class PhysicsCartPole(CartPoleEnv):
    """CartPole where the physics is the level: every ``reset(seed=s)`` draws its constants from ``s``.

    ``ranges`` maps constants by their :class:`~envharness.transforms.state.PhysicsParams`
    names (``gravity``, ``pole_length`` — the half-length —, ``pole_mass``, ``cart_mass``,
    ``force``) to ``(low, high)``; each is drawn uniformly per reset, after the start
    state. Constants not named keep CartPole's values. The observation is CartPole's: the
    physics is not shown, so a policy must balance every pole the range can draw. A
    benchmark trains on one range and holds out levels from another (for example longer
    or shorter poles than any seen in training).

    Example:
        >>> import gymnasium as gym
        >>> import envharness.envs
        >>> env = gym.make("envharness/PhysicsCartPole-v0", ranges={"pole_length": (0.8, 1.0)})
        >>> _ = env.reset(seed=0)
        >>> round(env.unwrapped.length, 3), env.unwrapped.polemass_length == 0.1 * env.unwrapped.length
        (0.963, True)
        >>> env.spec.max_episode_steps
        200
    """

    def __init__(self, ranges: Mapping[str, Sequence[float]] | None = None, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        ranges = dict(PHYSICS_TRAIN if ranges is None else ranges)
        for name, bounds in ranges.items():
            if name not in _CARTPOLE:
                raise ValueError(f"ranges: no CartPole constant named {name!r}; use {', '.join(_CARTPOLE)}")
            lo, hi = _PHYSICS_BOUNDS[name]
            if len(bounds) != 2 or not lo <= float(bounds[0]) <= float(bounds[1]) <= hi:
                raise ValueError(
                    f"ranges[{name!r}]: got {tuple(bounds)}; give (low, high) with {lo:g} <= low <= high <= {hi:g} (PhysicsParams' bounds)"
                )
        self.ranges = {name: (float(lo), float(hi)) for name, (lo, hi) in sorted(ranges.items())}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        obs, info = super().reset(seed=seed, options=options)
        for name, (lo, hi) in self.ranges.items():
            setattr(self, _CARTPOLE[name], float(self.np_random.uniform(lo, hi)))
        self.total_mass = self.masspole + self.masscart
        self.polemass_length = self.masspole * self.length
        return obs, info


def register() -> None:
    """Register both envs with Gymnasium (done when :mod:`envharness.envs` is imported)."""
    if "envharness/GeneratedFrozenLake-v0" not in gym.registry:
        gym.register(
            id="envharness/GeneratedFrozenLake-v0", entry_point="envharness.envs.generated:GeneratedFrozenLake", max_episode_steps=100
        )
    if "envharness/PhysicsCartPole-v0" not in gym.registry:
        gym.register(
            id="envharness/PhysicsCartPole-v0",
            entry_point="envharness.envs.generated:PhysicsCartPole",
            max_episode_steps=200,
            reward_threshold=195.0,
        )


def _path_odds(size: int, share: float, draws: int = 200) -> float:
    """The share of random ``size`` maps with ``share`` frozen tiles that have a path from start to goal (a fixed sample)."""
    from collections import deque

    rng = np.random.default_rng(0)
    found = 0
    for _ in range(draws):
        frozen = rng.random((size, size)) < share
        frozen[0, 0] = frozen[-1, -1] = True
        seen, queue = {(0, 0)}, deque([(0, 0)])
        while queue:
            x, y = queue.popleft()
            for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                if 0 <= nx < size and 0 <= ny < size and frozen[nx, ny] and (nx, ny) not in seen:
                    seen.add((nx, ny))
                    queue.append((nx, ny))
        found += (size - 1, size - 1) in seen
    return found / draws
