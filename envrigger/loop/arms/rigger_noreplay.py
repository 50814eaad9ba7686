"""The ``rigger-noreplay`` ablation: the rigger arm's curriculum of admitted components without PLR replay of original levels."""

from __future__ import annotations

import numpy as np

from envrigger.loop.arms import register_arm
from envrigger.loop.arms.base import ArmPlan, LoopArm, RoundState
from envrigger.loop.arms.rigger import trainable
from envrigger.loop.samplers import Curriculum


@register_arm
class RiggerNoReplay(LoopArm):
    """The curriculum alone over the original env and what the rigger arm admitted: what replay adds, told apart."""

    name = "rigger-noreplay"
    order = 60
    help = "rigger's curriculum without replay"
    needs = ("rigger",)

    def plan(self, rnd: RoundState) -> ArmPlan:
        _, current = trainable(self.run, rnd)
        chooser = Curriculum(1 + len(current), np.random.default_rng([self.run.config.seed, rnd.number, 6]))
        return ArmPlan([self.run.base, *(c.spec for c in current)], chooser)
