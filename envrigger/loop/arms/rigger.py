"""The ``rigger`` arm: the EnvRigger curriculum over the original env and the admitted components, credited on the original env.

Each round it trains (in credit chunks, against a shadow or a fork trained on the original
env alone), then diagnoses its own training episodes, proposes, validates and admits
(:func:`~envrigger.loop.round.rigger_round`); admissions train from the next round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from envrigger.loop.arms import register_arm
from envrigger.loop.arms.base import ArmPlan, LoopArm, RoundState, RunState
from envrigger.loop.credit import REPLAY, Credit, credited_training
from envrigger.loop.learners import load_learner, make_learner
from envrigger.loop.library import Component
from envrigger.loop.mixture import TrainingEpisodes
from envrigger.loop.results import RoundSummary, Trained
from envrigger.loop.round import mastered, rigger_round
from envrigger.loop.samplers import Curriculum, Fixed

TEACHING_Z = 1.0
"""With ``--reshape-when stalled``: the original env still teaches while its success rose from the first half of a round's
training episodes to the second by at least this many standard errors (one-sided, about 84 % sure it rose). Set low on
purpose: in doubt the arm keeps training as it is and spends nothing on reshaping."""


def mastered_components(done: list[RoundSummary], band: tuple[float, float]) -> set[str]:
    """The components the rigger arm mastered in an earlier round: won on more than the band's top share of enough episodes."""
    out: set[str] = set()
    for summary in done:
        arm = summary.arms.get("rigger")
        if arm is None:
            continue
        trained = arm.train
        for h, wins, picks in zip(trained.components or [], trained.wins[1:], trained.picks[1:], strict=False):
            if mastered(wins, picks, band):
                out.add(h)
    return out


def trainable(run: RunState, rnd: RoundState) -> tuple[list[Component], list[Component]]:
    """Every library component, and those admitted before round ``rnd`` that still train (not mastered and retired).

    As the round began: a round restarted after a crash does not see what its killed attempt admitted.
    """
    present = run.library.components()
    retired = set(rnd.get("retired", []))
    return present, [c for c in present if (c.round is None or c.round < rnd.number) and c.hash not in retired]


def _rose(before: list[int], after: list[int]) -> float:
    """The one-sided two-proportion z of the success rate rising from ``before`` to ``after`` ([wins, episodes] each)."""
    (w1, n1), (w2, n2) = before, after
    pooled = (w1 + w2) / (n1 + n2)
    if pooled in (0.0, 1.0):
        return 0.0
    return (w2 / n2 - w1 / n1) / float(np.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2)))


def still_teaches(halves: list[list[int]] | None, band: tuple[float, float], before: list[list[int]] | None = None) -> tuple[bool, str]:
    """Whether the original env still teaches the learner, from its training episodes' ``halves``, and why.

    It still teaches while its success rises and stays below the band's top (above it, the
    learner mastered the levels: a harder variant is what teaches). Rising: from the first
    half of the round's episodes to the second, or from the second half of the round
    ``before`` to this one's, by a one-sided two-proportion z of at least :data:`TEACHING_Z`.
    In its first round a learner that wins some episodes is given a round more to show it
    (a sparse-reward learner's rate is often flat before it takes off). Nothing won at all,
    a flat or falling rate after the first round, or too few episodes: stalled.

    Example:
        >>> still_teaches([[2, 60], [12, 60]], (0.2, 0.8))[0]  # 3 % -> 20 %: learning
        True
        >>> still_teaches([[0, 40], [0, 40]], (0.2, 0.8))  # nothing won: the env gives no signal
        (False, 'stalled: 0 of 40 then 0 of 40 episodes won')
        >>> still_teaches([[7, 60], [6, 60]], (0.2, 0.8), before=[[3, 60], [7, 60]])[0]  # flat since the last round
        False
    """
    if halves is None:
        return False, "stalled: no record of the round's episodes on the original env (trained with credit)"
    (w1, n1), (w2, n2) = halves
    seen = f"{w1} of {n1} then {w2} of {n2} episodes won"
    if min(n1, n2) < 5:
        return False, f"stalled: too few episodes on the original env to tell ({seen})"
    if w2 / n2 > band[1]:
        return False, f"stalled: mastered ({seen}, above the band's top {band[1]:g})"
    if w1 + w2 == 0:
        return False, f"stalled: {seen}"
    z = _rose(halves[0], halves[1])
    if z >= TEACHING_Z:
        return True, f"still teaching: {seen} (z {z:.2f} >= {TEACHING_Z:g})"
    if before is None:
        return True, f"too early to tell: {seen} in its first round (z {z:.2f}); the next round shows whether it still learns"
    since = _rose(before[1], halves[1])
    last = f"{before[1][0]} of {before[1][1]} at the end of the last round"
    if since >= TEACHING_Z:
        return True, f"still teaching: {seen}, up from {last} (z {since:.2f} >= {TEACHING_Z:g})"
    return False, f"stalled: {seen} (z {z:.2f} < {TEACHING_Z:g}), {last} (z {since:.2f})"


def copies_steps(arm: LoopArm) -> int | None:
    """Each of a credit chunk's two copies trains this much: the round's steps, or, when the budget counts every step, half
    of what the credit's scoring leaves of them (as much as it took last time). None: too little is left to score two
    copies, so the arm trains one, plainly, this round (at least a quarter of the round must be left for the copies)."""
    if arm.run.config.budget_counts == "train":
        return arm.steps
    left = arm.steps - arm.scoring_cost()
    return left // 2 if left >= arm.run.config.budget_steps // 4 else None


@register_arm
class Rigger(LoopArm):
    """The curriculum over the original env (with PLR replay of its levels) and the admitted components, weighted by credit."""

    name = "rigger"
    order = 70
    help = "the EnvRigger curriculum"
    replay_stream = 4
    round_fields = (
        "retired", "library_size", "library_version", "evidence", "collected_success", "findings", "candidates", "admitted",
        "admitted_labels", "rejected_by", "tried", "mastered", "credit_state", "original_env",
    )  # fmt: skip

    def __init__(self, run: RunState) -> None:
        super().__init__(run)
        config = run.config
        self.credited = config.credit_chunks > 0 and config.learner != "none"
        # The credit is part of the round's committed record, so a resumed run continues from the last finished round's.
        self.credit = Credit(config.credit_retire, run.done[-1].get("credit_state") if run.done else None)
        self.shadow: Any = None  # --credit-baseline shadow: this arm's learner trained on the original env alone, across rounds
        if self.credited and config.credit_baseline == "shadow":
            if run.done:
                self.shadow = load_learner(config.learner, run.out / f"rigger-shadow-round-{run.done[-1].round}", run.probe)
            else:
                self.shadow = make_learner(config.learner, run.probe, config.seed, **config.learner_params)

    def begin_round(self, rnd: RoundState) -> None:
        if self.run.config.retire_mastered:
            retired = mastered_components(self.run.done, self.run.config.band)
            if retired:
                rnd.note(self.name, "retired", sorted(retired))

    def plan(self, rnd: RoundState) -> ArmPlan:
        config, library = self.run.config, self.run.library
        present, current = trainable(self.run, rnd)
        if self.credited:  # a component the original env's validation levels blamed trains no more
            current = [c for c in current if c.hash not in self.credit.retired]
        evidence = TrainingEpisodes(config.collect_episodes, config.budget_steps // 2)
        if config.reshape_when == "stalled" and not current:  # nothing admitted yet: the original arm's training, step for step
            return ArmPlan([self.run.base], Fixed(), evidence, [])
        assert self.replay is not None
        self.replay.chooser = Curriculum(1 + len(current), np.random.default_rng([config.seed, rnd.number, 1]))
        rnd.note(self.name, "library_size", len(current))
        rnd.note(self.name, "library_version", library.version - sum(c.round == rnd.number for c in present))
        return ArmPlan([self.run.base, *(c.spec for c in current)], self.replay, evidence, current)

    def train(self, rnd: RoundState, plan: ArmPlan, spent: dict[str, int], advance: Callable[[int], None]) -> Trained:
        if self.run.config.reshape_when == "stalled" and not plan.components:
            return super().train(rnd, plan, spent, advance)  # nothing to credit yet: trained as the original arm is
        budget = copies_steps(self) if self.credited else None
        if budget is None:
            if self.credited:
                self.run.log(f"round {rnd.number}: too few steps left to score two copies; the {self.name} arm trains one")
            return super().train(rnd, plan, spent, advance)
        config, pieces = self.run.config, [c.hash for c in plan.components]
        trained, record = credited_training(
            rnd.workdir / "credit", self, plan.specs, pieces, plan.sampler, config, rnd.number, self.run.reserved, self.credit,
            plan.evidence, advance, shadow=self.shadow, budget=budget,
        )  # fmt: skip
        spent["credit"] = record.pop("steps")
        rnd.use(f"{self.name}:credit", record.pop("levels"))
        record["retired_now"] = [p for p in record["retired"] if p in pieces or p == REPLAY]
        trained.credit = record
        kept = ", ".join(f"{c['kept']} ({c['curriculum']:.2f} vs {c['original']:.2f} alone)" for c in record["chunks"])
        self.run.log(f"round {rnd.number}: credit chunks kept {kept}")
        return trained

    def after_training(self, rnd: RoundState, plan: ArmPlan, trained: Trained, spent: dict[str, int], seconds: dict[str, float]) -> None:
        current = plan.components
        trained.components = [c.hash for c in current]  # which component each pick after the first is (what retiring reads)
        config = self.run.config
        if plan.evidence is None or rnd.number >= config.rounds:  # what the last round would admit, no round trains on
            return
        if config.reshape_when == "stalled":
            last = self.run.done[-1].arms.get(self.name) if self.run.done else None
            teaching, why = still_teaches(trained.halves, config.band, last.train.halves if last is not None else None)
            rnd.note(self.name, "original_env", why)
            if teaching:  # the benchmark is not done teaching: nothing is spent on reshaping it this round
                self.run.log(f"round {rnd.number}: the {self.name} arm does not reshape this round; the original env: {why}")
                return
        per_component = {c.hash: (int(w), int(n)) for c, w, n in zip(current, trained.wins[1:], trained.picks[1:], strict=True)}
        rigged = rigger_round(
            rnd.workdir, config, self.run.library, self.learner, rnd.number, self.run.reserved, self.run.spaces, plan.evidence,
            self.run.log, per_component,
        )  # fmt: skip
        spent.update(collect=rigged.collect_steps, validate=rigged.validate_steps)
        for gate, (steps, levels) in rigged.own_budget.items():  # the transfer gate's copies
            spent[gate] = steps
            rnd.use(f"{self.name}:{gate}", levels)
        rnd.use(f"{self.name}:collect", rigged.collect_levels)
        rnd.use(f"{self.name}:validate", rigged.validate_levels)
        seconds.update(rigged.seconds)
        for key, value in rigged.record.items():
            rnd.note(self.name, key, value)

    def end_round(self, rnd: RoundState) -> None:
        if self.credited:
            rnd.note(self.name, "credit_state", self.credit.state())

    def save(self, number: int) -> None:
        super().save(number)
        if self.shadow is not None:
            self.shadow.save(self.run.out / f"rigger-shadow-round-{number}")
