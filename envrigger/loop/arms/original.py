"""The ``original`` arm: the learner on the original env alone, fresh levels every episode; the baseline every other arm must beat."""

from __future__ import annotations

from collections.abc import Callable

from envrigger.loop.arms import register_arm
from envrigger.loop.arms.base import ArmPlan, LoopArm, RoundState
from envrigger.loop.credit import chunked_training
from envrigger.loop.results import Trained
from envrigger.loop.samplers import Fixed


@register_arm
class Original(LoopArm):
    """Plain training on the original env.

    Where the rigger arm keeps a shadow (``--credit-baseline shadow``), this arm trains in
    the same credit chunks as the shadow does, call for call, so that a rigger arm that falls
    back to its shadow holds exactly this arm's weights.
    """

    name = "original"
    order = 0
    help = "the original env only, fresh levels"

    def plan(self, rnd: RoundState) -> ArmPlan:
        return ArmPlan([self.run.base], Fixed())

    def train(self, rnd: RoundState, plan: ArmPlan, spent: dict[str, int], advance: Callable[[int], None]) -> Trained:
        rigger = self.run.arms.get("rigger")
        if getattr(rigger, "shadow", None) is not None:  # the same training as the rigger arm's shadow, chunk for chunk
            return chunked_training(self, self.run.config, rnd.number, self.run.reserved, advance, budget=self.steps)
        return super().train(rnd, plan, spent, advance)
