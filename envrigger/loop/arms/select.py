"""The ``original-select`` arm: the credit's selection without reshaping, two copies on the original env each chunk, the better kept."""

from __future__ import annotations

from collections.abc import Callable

from envrigger.loop.arms import register_arm
from envrigger.loop.arms.base import ArmPlan, LoopArm, RoundState
from envrigger.loop.arms.rigger import copies_steps
from envrigger.loop.config import LoopConfig
from envrigger.loop.credit import Credit, credited_training
from envrigger.loop.results import Trained
from envrigger.loop.samplers import Fixed

SELECT_OFFSET = 50_000  # the second copy trains on other seeds of each chunk's range than the first


@register_arm
class OriginalSelect(LoopArm):
    """The original env in credit chunks: each chunk trains two copies on different fresh seeds and keeps the better.

    It is the rigger arm's best-of-two given to plain training, so what the credit's
    selection alone is worth can be told apart from what the reshaping is worth.
    """

    name = "original-select"
    order = 10
    help = "the original env, keeping the better of two copies each credit chunk"

    @classmethod
    def check(cls, config: LoopConfig) -> None:
        if config.credit_chunks < 1:
            raise ValueError("--arms: original-select keeps the better of two copies per credit chunk; give --credit-chunks 1 or more")

    def plan(self, rnd: RoundState) -> ArmPlan:
        return ArmPlan([self.run.base], Fixed())

    def train(self, rnd: RoundState, plan: ArmPlan, spent: dict[str, int], advance: Callable[[int], None]) -> Trained:
        config, budget = self.run.config, copies_steps(self)
        if budget is None:
            self.run.log(f"round {rnd.number}: too few steps left to score two copies; the {self.name} arm trains one")
            return super().train(rnd, plan, spent, advance)
        trained, record = credited_training(
            rnd.workdir / "select", self, plan.specs, [], plan.sampler, config, rnd.number, self.run.reserved,
            Credit(config.credit_retire), None, advance, alone_offset=SELECT_OFFSET, budget=budget,
        )  # fmt: skip
        spent["credit"] = record.pop("steps")
        rnd.use(f"{self.name}:credit", record.pop("levels"))
        trained.credit = record
        kept = ", ".join(
            f"the {'first' if c['kept'] == 'curriculum' else 'second'} copy ({c['curriculum']:.2f} vs {c['original']:.2f})"
            for c in record["chunks"]
        )
        self.run.log(f"round {rnd.number}: selection chunks kept {kept}")
        return trained
