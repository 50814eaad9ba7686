"""The ``accel`` arm: PLR plus random edits of the levels it scores highest, evolved round by round (ACCEL-style).

ACCEL (Parker-Holder et al., 2022, *Evolving Curricula with Regret-Based Environment
Design*) keeps a PLR buffer and makes new levels by small random edits of the levels with
the highest score. Here an edit is one catalog state transform (where the agent starts,
what the world holds), drawn as ``dr`` draws them, with no diagnosis and no gate; the
buffer replays edited levels as well as original ones, all scored alike (``--plr-score``).
After each round the edits are ranked by the mean score of their levels in the buffer:
the better half is kept, each kept edit is also mutated (its parameters nudged,
``Transform.mutate``), and fresh random edits fill the rest. The edits live in
``accel-edits.json``, so a resumed run goes on with them.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from envharness.errors import EnvHarnessError, SpecError
from envharness.files import write_text_atomically
from envharness.reading import read_json
from envharness.spec import HarnessSpec
from envharness.transforms.base import transform_from_spec
from envrigger.errors import TrajectoryError
from envrigger.loop.arms import register_arm
from envrigger.loop.arms.base import ArmPlan, LoopArm, RoundState, RunState
from envrigger.loop.arms.draws import random_specs
from envrigger.loop.levels import FIX_SAVED
from envrigger.loop.samplers import Uniform

EDITS = 4  # edited envs trained on each round, beside the original


@register_arm
class ACCEL(LoopArm):
    """PLR over the original env and a population of random state edits, the best-scored edits kept and mutated each round."""

    name = "accel"
    order = 45
    help = "plr plus random edits of its highest-scored levels, evolved each round (ACCEL-style)"
    replay_stream = 6

    def __init__(self, run: RunState) -> None:
        super().__init__(run)
        assert self.replay is not None
        self.replay.replay_reshaped = True
        saved = run.out / "accel-edits.json"
        self.edits: list[HarnessSpec] = []
        if run.done and saved.exists():
            try:
                self.edits = [HarnessSpec.coerce(edit) for edit in read_json(saved, list, fix=FIX_SAVED, error=TrajectoryError)]
            except SpecError as error:
                raise TrajectoryError(f"{saved}: {error}; {FIX_SAVED}") from None

    def plan(self, rnd: RoundState) -> ArmPlan:
        rng = np.random.default_rng([self.run.config.seed, rnd.number, 6])
        self.edits = self._evolved(rng)
        assert self.replay is not None
        self.replay.forget_reshaped()  # the indices name this round's edits now
        self.replay.chooser = Uniform(1 + len(self.edits), rng)
        return ArmPlan([self.run.base, *self.edits], self.replay)

    def _evolved(self, rng: np.random.Generator) -> list[HarnessSpec]:
        """This round's edits: the better-scored half of last round's, a mutation of each, fresh draws for the rest."""
        assert self.replay is not None
        scores = self.replay.level_scores()
        ranked = sorted(range(len(self.edits)), key=lambda i: -scores.get(i + 1, 0.0))
        kept = [self.edits[i] for i in ranked[: EDITS // 2]]
        children = [c for c in (_mutated(spec, self.run.base, rng) for spec in kept) if c is not None]
        population = _unique([*kept, *children])[:EDITS]
        fresh = random_specs(self.run.base, rng, EDITS, kinds=("state",))
        return _unique([*population, *fresh])[:EDITS]

    def save(self, number: int) -> None:
        super().save(number)
        write_text_atomically(self.run.out / "accel-edits.json", json.dumps([s.model_dump(mode="json") for s in self.edits], indent=2))


def _mutated(spec: HarnessSpec, base: HarnessSpec, rng: np.random.Generator) -> HarnessSpec | None:
    """``spec``'s edit with its parameters nudged (None when the nudge breaks it or changes nothing)."""
    try:
        child: Any = base.extended(*(transform_from_spec(t).mutate(rng) for t in spec.transforms))
        env = child.build()
        env.close()
    except (EnvHarnessError, ValueError, TypeError):
        return None
    return None if child.hash() == spec.hash() else child


def _unique(specs: list[HarnessSpec]) -> list[HarnessSpec]:
    seen: set[str] = set()
    return [s for s in specs if not (s.hash() in seen or seen.add(s.hash()))]  # type: ignore[func-returns-value]
