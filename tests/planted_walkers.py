"""Planted-weakness walkers shared by the diagnose and report tests: a known flaw on a known share of episodes."""

from __future__ import annotations

import numpy as np

from envrigger.policies.reference import MiniGridPlanner


def doomed(seed: int, p: float) -> bool:
    """Whether a planted policy misbehaves on the episode with this seed (same draw as the policies)."""
    return bool(np.random.default_rng([99, seed]).random() < p)


class SometimesLava:
    """Walks to the goal, except on a p-fraction of episodes, where it walks into lava."""

    name = "lava-prone"

    def __init__(self, env, p):
        self.safe, self.bad, self.p = MiniGridPlanner(env), MiniGridPlanner(env, targets=("lava",)), p

    def reset(self, seed):
        self.current = self.bad if doomed(seed, self.p) else self.safe

    def act(self, obs, info):
        return self.current.act(obs, info)


class GivesUpWhenFar:
    """Solves the level unless the goal is more than 6 steps away; then it idles until time runs out."""

    name = "gives-up-far"

    def __init__(self, env):
        self.planner = MiniGridPlanner(env)

    def reset(self, seed):
        self.idle = None

    def act(self, obs, info):
        if self.idle is None:
            self.idle = info["level"]["goal_distance"] > 6
        return 6 if self.idle else self.planner.act(obs, info)
