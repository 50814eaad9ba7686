"""Envs and policies that fail on purpose, importable by spawned rollout workers.

Importing this module registers ``faulty_envs:Crashy-v0``: a FrozenLake whose step raises
on the seeds listed in ``crash_seeds``, hangs on ``hang_seeds`` and segfaults on
``segv_seeds``. With ``done_dir``, every episode that ends writes ``done-<seed>`` there:
the event a test waits for instead of sleeping.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

import gymnasium as gym
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

LIMIT = 20  # the registered max_episode_steps


class CrashyLake(FrozenLakeEnv):
    def __init__(self, crash_seeds=(), hang_seeds=(), segv_seeds=(), done_dir=None, **kwargs):
        super().__init__(is_slippery=False, **kwargs)
        self.crash_seeds, self.hang_seeds, self.segv_seeds = set(crash_seeds), set(hang_seeds), set(segv_seeds)
        self.done_dir = done_dir
        self._seed, self._t = None, 0

    def reset(self, *, seed=None, options=None):
        self._seed, self._t = seed, 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self._seed in self.crash_seeds:
            raise RuntimeError(f"simulator exploded on seed {self._seed}")
        if self._seed in self.hang_seeds:
            while True:  # a simulator stuck for good
                time.sleep(1)
        if self._seed in self.segv_seeds:
            import pygame  # noqa: F401 - as MiniGrid does: importing it installs a handler that turns SIGSEGV into SIGABRT

            ctypes.string_at(0)  # a crash in native code: SIGSEGV
        obs, reward, terminated, truncated, info = super().step(action)
        self._t += 1
        if self.done_dir is not None and (terminated or truncated or self._t >= LIMIT):
            Path(self.done_dir, f"done-{self._seed}").touch()
        return obs, reward, terminated, truncated, info


if "Crashy-v0" not in gym.registry:
    gym.register(id="Crashy-v0", entry_point=CrashyLake, max_episode_steps=LIMIT)


class KillerPolicy:
    """Kills its own worker process on the seeds in ``kill_seeds`` (once each if ``marker_dir``)."""

    name = "killer"

    def __init__(self, kill_seeds, marker_dir=None):
        self.kill_seeds, self.marker_dir, self.seed = set(kill_seeds), marker_dir, None

    def reset(self, seed):
        self.seed = seed
        if seed in self.kill_seeds:
            if self.marker_dir is not None:
                marker = Path(self.marker_dir) / f"killed-{seed}"
                if marker.exists():
                    return
                marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)

    def act(self, obs, info):
        return 2


class ExplodingPolicy:
    name = "exploding"

    def reset(self, seed):
        self.seed = seed

    def act(self, obs, info):
        if self.seed == 1:
            raise ValueError("policy bug")
        return 1


def make_killer(kill_seeds, marker_dir=None):
    return lambda env: KillerPolicy(kill_seeds, marker_dir)
