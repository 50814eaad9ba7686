"""The domain-randomization arms: ``dr`` (random levels: state transforms) and ``dr-any`` (any random catalog reshaping)."""

from __future__ import annotations

import numpy as np

from envrigger.loop.arms import register_arm
from envrigger.loop.arms.base import ArmPlan, LoopArm, RoundState
from envrigger.loop.arms.draws import random_specs
from envrigger.loop.samplers import Uniform


@register_arm
class DomainRandomization(LoopArm):
    """Uniformly over the original env and ``dr_pool`` random reshapings drawn afresh each round (no diagnosis)."""

    name = "dr"
    order = 20
    help = "random levels: state transforms"
    kinds: tuple[str, ...] = ("state",)

    def plan(self, rnd: RoundState) -> ArmPlan:
        config = self.run.config
        pool = random_specs(self.run.base, np.random.default_rng([config.seed, rnd.number, 2]), config.dr_pool, kinds=self.kinds)
        return ArmPlan([self.run.base, *pool], Uniform(1 + len(pool), np.random.default_rng([config.seed, rnd.number, 2])))


@register_arm
class DomainRandomizationAny(DomainRandomization):
    """As ``dr``, over the whole catalog: state, rule and observation reshapings."""

    name = "dr-any"
    order = 30
    help = "any random catalog reshaping"
    kinds = ("state", "rule", "observation")
