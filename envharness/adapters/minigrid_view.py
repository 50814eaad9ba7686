"""MiniGrid's partial view, computed without building grids: :class:`AgentView` and :func:`speed_up`.

MiniGrid makes every observation by slicing the grid into a new ``Grid``, rotating it into
the agent's frame one quarter turn at a time (a new ``Grid`` each), masking what walls hide
and encoding what is left: most of a step's time in the loop's training and rollouts.
:class:`AgentView` gives the identical observation from index tables (which world cell each
view cell shows, per facing), calling each object's own ``see_behind`` and ``encode``, so
any object class is seen as MiniGrid would see it. It is installed only on envs whose
class keeps MiniGrid's own view methods; on any other grid class it falls back to
MiniGrid's code, call by call.
"""

from __future__ import annotations

import enum
from functools import lru_cache
from typing import Any

import numpy as np
from minigrid.core.constants import OBJECT_TO_IDX
from minigrid.core.grid import Grid
from minigrid.core.world_object import Wall
from minigrid.minigrid_env import MiniGridEnv

_STOCK = ("gen_obs", "gen_obs_grid", "get_view_exts")
_OUTSIDE = Wall()  # what MiniGrid's slice puts beyond the grid's edge (a fresh grey wall each time; never changed)
_EMPTY, _UNSEEN = (OBJECT_TO_IDX["empty"], 0, 0), (0, 0, 0)


@lru_cache(maxsize=1 << 16)  # one entry per grid size, facing and view corner
def _sources(width: int, height: int, size: int, direction: int, top_x: int, top_y: int) -> tuple[int, ...]:
    """For each view cell in MiniGrid's order (``[i][j]``, column by column), the grid cell it shows, or -1 beyond the edge."""
    # The slice is indexed (i, j) = (x - top_x, y - top_y); MiniGrid then turns it left
    # direction + 1 times, each turn moving cell (i, j) to (j, size - 1 - i).
    where = {(i, j): (i, j) for i in range(size) for j in range(size)}
    for _ in range(direction + 1):
        where = {(j, size - 1 - i): source for (i, j), source in where.items()}
    flat = []
    for i in range(size):
        for j in range(size):
            x, y = top_x + where[(i, j)][0], top_y + where[(i, j)][1]
            flat.append(y * width + x if 0 <= x < width and 0 <= y < height else -1)
    return tuple(flat)


class AgentView:
    """The observation MiniGrid's ``gen_obs`` makes, made faster; installed by :func:`speed_up`.

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("MiniGrid-DoorKey-6x6-v0").unwrapped
        >>> _ = env.reset(seed=3)
        >>> stock = env.gen_obs()
        >>> speed_up(env)
        True
        >>> fast = env.gen_obs()
        >>> bool((fast["image"] == stock["image"]).all()), int(fast["direction"]) == int(stock["direction"])
        (True, True)
    """

    def __init__(self, env: Any) -> None:
        self.env = env

    def __call__(self) -> dict[str, Any]:
        env = self.env
        grid = env.grid
        if type(grid) is not Grid or not isinstance(env, MiniGridEnv):
            return MiniGridEnv.gen_obs(env)  # a grid class of its own: MiniGrid's code, as always
        return {"image": self.image(env, grid), "direction": env.agent_dir, "mission": env.mission}

    @staticmethod
    def image(env: Any, grid: Any) -> np.ndarray:
        size = env.agent_view_size
        top_x, top_y, _, _ = env.get_view_exts(size)
        cells = grid.grid
        view = [cells[k] if k >= 0 else _OUTSIDE for k in _sources(grid.width, grid.height, size, int(env.agent_dir), top_x, top_y)]
        agent = (size // 2) * size + size - 1
        if env.see_through_walls:
            mask: Any = [True] * (size * size)
        else:  # what is seen depends only on which cells block the view: the same pattern, the same mask
            mask = _visible(tuple(v is not None and not v.see_behind() for v in view), size)
        view[agent] = env.carrying or None
        codes = [(_UNSEEN if not seen else _EMPTY if v is None else v.encode()) for v, seen in zip(view, mask, strict=True)]
        return np.array(codes, dtype="uint8").reshape(size, size, 3)


@lru_cache(maxsize=1 << 16)  # one entry per pattern of blocking cells met
def _visible(blocks: tuple[bool, ...], size: int) -> tuple[bool, ...]:
    """MiniGrid's ``process_vis`` from the agent's cell (bottom middle), on a flat list (cell (i, j) at ``i * size + j``).

    ``blocks[k]`` says whether view cell ``k`` holds an object that cannot be seen behind.
    """
    mask = [False] * (size * size)
    mask[(size // 2) * size + size - 1] = True
    for j in reversed(range(size)):
        for i in range(size - 1):
            k = i * size + j
            if not mask[k]:
                continue
            if blocks[k]:
                continue
            mask[k + size] = True
            if j > 0:
                mask[k + size - 1] = True
                mask[k - 1] = True
        for i in reversed(range(1, size)):
            k = i * size + j
            if not mask[k]:
                continue
            if blocks[k]:
                continue
            mask[k - size] = True
            if j > 0:
                mask[k - size - 1] = True
                mask[k - 1] = True
    return tuple(mask)


def _direct(actions: Any) -> None:
    """Put an action enum's members in its class dict, so ``Actions.left`` is a plain lookup.

    On Python 3.11 every ``self.actions.left`` in MiniGrid's ``step`` goes through the enum
    class's ``__getattr__``: about a tenth of a step. The members are the same objects, and
    iteration, ``len`` and ``Actions["left"]`` are unchanged; names the class already
    defines are left alone.
    """
    if not (isinstance(actions, type) and issubclass(actions, enum.Enum)):
        return
    for name, member in actions.__members__.items():
        if name not in actions.__dict__:
            type.__setattr__(actions, name, member)  # the enum's own __setattr__ refuses to touch members


def speed_up(env: Any) -> bool:
    """Give a MiniGrid env :class:`AgentView` as its ``gen_obs``; False (and nothing changed) where its class has a view of its own."""
    if not isinstance(env, MiniGridEnv):
        return False
    _direct(env.actions)
    if any(getattr(type(env), name) is not getattr(MiniGridEnv, name) for name in _STOCK):
        return False
    if not isinstance(env.__dict__.get("gen_obs"), AgentView):
        vars(env)["gen_obs"] = AgentView(env)  # on the instance: its class, and every other env, keep MiniGrid's
    return True
