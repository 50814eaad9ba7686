"""The fast MiniGrid view: the very observation MiniGrid makes, for every family, and MiniGrid's own code where a class has its own view."""

from __future__ import annotations

import pickle

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from minigrid.core.grid import Grid
from minigrid.core.world_object import Ball
from minigrid.envs import EmptyEnv
from minigrid.minigrid_env import MiniGridEnv

import envharness
from envharness.adapters.minigrid_view import AgentView, speed_up

# One of each kind of thing a view can hold: doors, keys, boxes, lava, moving balls, rooms, BabyAI's missions, a 3-cell view.
FAMILIES = [
    "MiniGrid-DoorKey-8x8-v0",
    "MiniGrid-KeyCorridorS3R2-v0",
    "MiniGrid-LavaCrossingS9N2-v0",
    "MiniGrid-Dynamic-Obstacles-Random-6x6-v0",
    "MiniGrid-MultiRoom-N4-S5-v0",
    "MiniGrid-ObstructedMaze-2Dlhb-v1",
    "MiniGrid-Unlock-v0",
    "MiniGrid-Fetch-8x8-N3-v0",
    "MiniGrid-LockedRoom-v0",
    "MiniGrid-Empty-5x5-v0",
    "BabyAI-PutNextS6N3-v0",
    "BabyAI-UnlockPickup-v0",
]


def _same(a: dict, b: dict) -> bool:
    return (
        a["image"].dtype == b["image"].dtype
        and np.array_equal(a["image"], b["image"])
        and (a["direction"], a["mission"]) == (b["direction"], b["mission"])
    )


@pytest.mark.parametrize("env_id", FAMILIES)
def test_the_fast_view_is_the_observation_minigrid_makes_at_every_step(env_id):
    env = gym.make(env_id).unwrapped
    assert speed_up(env)
    rng = np.random.default_rng(1)
    compared = 0
    for seed in range(8):
        env.reset(seed=seed)
        for _ in range(80):
            assert _same(env.gen_obs(), MiniGridEnv.gen_obs(env)), (env_id, seed, compared)
            compared += 1
            # Every action, pickup, drop and toggle included, so carried objects and opened doors are seen.
            *_, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            if terminated or truncated:
                break
    assert compared > 40


def test_a_wrapped_minigrid_env_plays_the_same_trajectory_with_the_fast_view():
    fast = envharness.wrap("MiniGrid-DoorKey-6x6-v0")
    assert isinstance(fast.unwrapped.__dict__["gen_obs"], AgentView)
    stock = gym.make("MiniGrid-DoorKey-6x6-v0")
    actions = np.random.default_rng(0).integers(7, size=200)
    a, _ = fast.reset(seed=5)
    b, _ = stock.reset(seed=5)
    for action in actions:
        assert _same(a, b)
        a, ra, ta, ua, _ = fast.step(int(action))
        b, rb, tb, ub, _ = stock.step(int(action))
        assert (ra, ta, ua) == (rb, tb, ub)
        if ta or ua:
            break


def test_a_sped_up_env_pickles_and_its_copy_sees_its_own_grid():
    env = envharness.wrap("MiniGrid-DoorKey-6x6-v0")
    env.reset(seed=2)
    copy = pickle.loads(cloudpickle.dumps(env))
    view = copy.unwrapped.__dict__["gen_obs"]
    assert view.env is copy.unwrapped  # not the original's
    copy.unwrapped.step(0)  # a left turn
    assert _same(copy.unwrapped.gen_obs(), MiniGridEnv.gen_obs(copy.unwrapped))
    assert not _same(copy.unwrapped.gen_obs(), env.unwrapped.gen_obs())  # the copy moved, the original did not


class SeesEverything(EmptyEnv):
    """An env with a view of its own: the whole grid."""

    def gen_obs(self):
        return {"image": self.grid.encode(), "direction": self.agent_dir, "mission": self.mission}


class BallPit(Grid):
    """A grid class of its own, swapped in after the view was installed: every cell the agent looks at holds a ball."""

    def slice(self, topX, topY, width, height):
        grid = Grid(width, height)
        for i in range(width):
            for j in range(height):
                grid.set(i, j, Ball("red"))
        return grid


def test_an_env_with_a_view_of_its_own_keeps_it():
    env = SeesEverything(size=6)
    assert not speed_up(env)
    env.reset(seed=0)
    assert env.gen_obs()["image"].shape == (6, 6, 3)
    assert "gen_obs" not in env.__dict__


def test_a_grid_of_another_class_is_seen_by_minigrids_own_code():
    env = gym.make("MiniGrid-Empty-6x6-v0").unwrapped
    assert speed_up(env)
    env.reset(seed=0)
    grid = BallPit(env.grid.width, env.grid.height)
    grid.grid = list(env.grid.grid)
    env.grid = grid
    image = env.gen_obs()["image"]
    assert _same(env.gen_obs(), MiniGridEnv.gen_obs(env))
    assert int((image[..., 0] == 6).sum()) == 7 * 7 - 1  # balls everywhere but under the agent


def test_the_action_enum_reads_faster_and_is_the_same_enum():
    from minigrid.core.actions import Actions

    before = (list(Actions), len(Actions), Actions["toggle"], Actions(5), Actions.__members__.copy())
    env = gym.make("MiniGrid-Empty-5x5-v0").unwrapped
    assert speed_up(env) and "left" in vars(Actions)  # a plain class attribute: no enum __getattr__ per step
    assert (list(Actions), len(Actions), Actions["toggle"], Actions(5), Actions.__members__) == before
    assert Actions.left is Actions["left"] and env.actions.forward == 2
