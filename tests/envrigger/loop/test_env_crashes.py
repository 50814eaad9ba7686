"""The loop survives its own arms: an env that crashes in training is a failed episode, never a dead run (issue 33).

Found on MiniGrid-MultiRoom-N2-S4-v0, which no benchmark uses: a random catalog reshaping
(walls removed from rooms that float in an unwalled grid) let the agent walk to the grid's
edge, where MiniGrid's own code fails, and the exception in training killed every arm.
"""

from __future__ import annotations

import faulty_envs  # noqa: F401 - registers faulty_envs:Crashy-v0
import numpy as np

import envharness
from envharness import HarnessSpec
from envharness.transforms import RemoveWalls
from envrigger.loop.levels import Seeds
from envrigger.loop.mixture import MixtureEnv
from envrigger.loop.samplers import PLR, Fixed

CRASHY = "Crashy-v0"  # registered by importing faulty_envs above
MULTIROOM = "MiniGrid-MultiRoom-N2-S4-v0"


def play(env: MixtureEnv, episodes: int, rng: np.random.Generator) -> list[dict]:
    ends = []
    for _ in range(episodes):
        env.reset()
        while True:
            *_, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
            if terminated or truncated:
                ends.append(info)
                break
    return ends


def test_removing_walls_never_opens_a_room_onto_the_grid_edge():
    for seed in range(40):
        env = envharness.wrap(MULTIROOM, RemoveWalls(count=8))
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(200):  # a random walk that would reach the edge, and step off it, if a wall opened onto it
            *_, terminated, truncated, _ = env.step(int(rng.integers(3)))
            if terminated or truncated:
                break


def test_a_random_reshaping_of_multiroom_trains_without_a_crash():
    base = HarnessSpec(env_id=MULTIROOM)
    reshaped = HarnessSpec(env_id=MULTIROOM, transforms=[{"name": "RemoveWalls", "params": {"count": 6}}])
    env = MixtureEnv([base, reshaped], Fixed(), Seeds(base, start=4_000_000))
    env.sampler.pick = lambda: 1  # every episode on the reshaped env
    play(env, 30, np.random.default_rng(0))
    assert env.errors == [] and env.episodes == 30


def test_an_env_that_crashes_mid_episode_is_a_failed_episode_and_its_level_is_dropped():
    spec = HarnessSpec(env_id=CRASHY, env_kwargs={"crash_seeds": [101]})
    plr = PLR(np.random.default_rng(0), min_buffer=10**6)  # no replays: the level stream is 100, 101, 102...
    plr.update(0, 101, False)  # the level is in the buffer before it crashes
    heard = []
    env = MixtureEnv([spec], plr, Seeds(spec, start=100), on_episode=lambda *a: heard.append(a))
    ends = play(env, 4, np.random.default_rng(0))
    assert [e["verdict"].reason for e in ends].count("error") == 1 and "simulator exploded on seed 101" in env.errors[0]
    assert (0, 101) not in plr.tries and env.episodes == 4 and len(heard) == 4
    assert heard[1][:3] == (0, 101, False)  # the learner's bookkeeping saw a failed episode


def test_an_env_that_crashes_at_reset_is_skipped_for_the_next_level():
    spec = HarnessSpec(env_id=CRASHY, env_kwargs={"crash_seeds": [101]})
    env = MixtureEnv([spec], Fixed(), Seeds(spec, start=100))
    original = env._env(0).unwrapped.reset

    def exploding(*, seed=None, options=None):
        if seed == 102:
            raise RuntimeError("no level at seed 102")
        return original(seed=seed, options=options)

    env._env(0).unwrapped.reset = exploding
    env.reset()  # 100
    env.reset()  # 101 (it crashes only in a step)
    _, info = env.reset()  # 102 crashes at reset: 103 is played instead
    assert info["mixture"]["seed"] == 103 and "no level at seed 102" in env.errors[0]
