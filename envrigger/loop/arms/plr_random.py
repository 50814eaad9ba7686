"""The ``plr-random`` ablation: PLR plus as many random catalog components as the rigger arm trains on, no diagnosis."""

from __future__ import annotations

import numpy as np

from envrigger.loop.arms import register_arm
from envrigger.loop.arms.base import ArmPlan, LoopArm, RoundState
from envrigger.loop.arms.draws import random_specs
from envrigger.loop.arms.rigger import trainable
from envrigger.loop.samplers import Curriculum


@register_arm
class PLRRandom(LoopArm):
    """The rigger arm's curriculum and replay with its components swapped for random ones: what the diagnosis and gates add."""

    name = "plr-random"
    order = 50
    help = "plr plus as many random components as rigger admitted"
    needs = ("rigger",)
    replay_stream = 5

    def plan(self, rnd: RoundState) -> ArmPlan:
        seed = self.run.config.seed
        _, current = trainable(self.run, rnd)
        drawn = np.random.default_rng([seed, rnd.number, 5])
        components = random_specs(self.run.base, drawn, len(current)) if current else []
        assert self.replay is not None
        self.replay.chooser = Curriculum(1 + len(components), np.random.default_rng([seed, rnd.number, 5]))
        return ArmPlan([self.run.base, *components], self.replay)
