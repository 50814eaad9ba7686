"""The ``plr`` arm: prioritized level replay over the original env's levels (Jiang et al., 2021)."""

from __future__ import annotations

from envrigger.loop.arms import register_arm
from envrigger.loop.arms.base import ArmPlan, LoopArm, RoundState


@register_arm
class PrioritizedLevelReplay(LoopArm):
    """The original env, replaying its own levels by score (:class:`~envrigger.loop.samplers.PLR`, ``--plr-score``), kept across rounds."""

    name = "plr"
    order = 40
    help = "prioritized level replay"
    replay_stream = 3

    def plan(self, rnd: RoundState) -> ArmPlan:
        assert self.replay is not None
        return ArmPlan([self.run.base], self.replay)
