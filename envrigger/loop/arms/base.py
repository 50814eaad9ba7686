"""What every arm is and shares: :class:`LoopArm`, the run (:class:`RunState`), a round (:class:`RoundState`), a plan (:class:`ArmPlan`).

An arm declares, as class attributes, its ``name``, its place in a round (``order``), the
arms it ``needs``, its PLR replay stream across rounds (``replay_stream``, or None) and its
``help``; it implements :meth:`LoopArm.plan` (the envs and sampler it trains on this round)
and, where it trains otherwise than :func:`~envrigger.loop.train.train_arm` does,
:meth:`LoopArm.train`. :meth:`LoopArm.play` is one arm's round, the same for every arm:
plan, train, count the env steps by use, score on validation levels. It returns the typed
:class:`~envrigger.loop.results.ArmRound` the round record holds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from envharness.files import write_text_atomically
from envharness.reading import read_json
from envharness.spec import HarnessSpec
from envrigger.diagnose.diversity import collapse
from envrigger.errors import ArmError, EnvriggerError, TrajectoryError
from envrigger.loop.arms import ARM_MAPS, LOOP_FIELDS
from envrigger.loop.config import LoopConfig
from envrigger.loop.evaluate import evaluate
from envrigger.loop.learners import load_learner, make_learner
from envrigger.loop.levels import FIX_SAVED, LevelSplit
from envrigger.loop.library import Component, Library
from envrigger.loop.mixture import TrainingEpisodes
from envrigger.loop.propose import transforms_label
from envrigger.loop.results import ArmRound, Evaluation, RoundSummary, Steps, Trained
from envrigger.loop.samplers import PLR
from envrigger.loop.train import learner_path, train_arm


def cpu_seconds() -> float:
    """CPU time of this process, its threads and its finished child processes (a validation worker pool's), in seconds."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


Stage = Callable[[str, int], AbstractContextManager[Callable[[int], None]]]
"""``stage(label, total)`` opens a long stage; the context gives ``advance(n)``, called as its work is done."""


@dataclass
class RunState:
    """What every arm of one run sees: the output directory, config, level split, library and the rounds finished so far."""

    out: Path
    config: LoopConfig
    split: LevelSplit
    library: Library
    probe: Any  # an env of the base spec, open while the arms are built (their learners' spaces)
    log: Callable[[str], None]
    done: list[RoundSummary]  # every finished round's record, in order (a round appends its own when committed)
    arms: dict[str, LoopArm] = field(default_factory=dict)
    spaces: tuple[Any, Any] = field(init=False)  # the observation and action spaces every env of a curriculum shares

    def __post_init__(self) -> None:
        self.spaces = (self.probe.observation_space, self.probe.action_space)

    @property
    def base(self) -> HarnessSpec:
        return self.config.spec

    @property
    def reserved(self) -> set[str]:
        return self.split.reserved


class RoundState:
    """One round as it runs: its number, work directory, the levels each use played, and the record being built.

    An arm adds to the round's record only through :meth:`note` (a field it declares in
    ``round_fields``, which no other arm may write) and :meth:`note_arm` (its own entry of a
    per-arm map); the loop alone writes each arm's :class:`ArmRound`, the round number and
    the wall time.

    Example:
        >>> rnd = RoundState(1, Path("round-1"), {}, owners={"library_size": "rigger"})
        >>> rnd.note("rigger", "library_size", 2); rnd.note_arm("plr", "stage_seconds", {"train": 1.0})
        >>> rnd.note("plr", "library_size", 9)
        Traceback (most recent call last):
        ...
        envrigger.errors.ArmError: the plr arm may not write the round's 'library_size': the rigger arm's round_fields hold it
    """

    LOOP_FIELDS, ARM_MAPS = LOOP_FIELDS, ARM_MAPS

    def __init__(self, number: int, workdir: Path, used: dict[str, set[str]], owners: dict[str, str] | None = None) -> None:
        self.number, self.workdir, self.used = number, workdir, used
        self._record: dict[str, Any] = {"round": number, "arms": {}}
        self._owners = dict(owners or {})  # each round field an arm declared, and the arm

    def use(self, kind: str, levels: set[str] | list[str]) -> None:
        """Record that ``kind`` (``ARM:USE``, e.g. ``rigger:collect``) played ``levels``."""
        self.used.setdefault(kind, set()).update(levels)

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the round's record as it stands."""
        return self._record.get(key, default)

    def note(self, arm: str, key: str, value: Any) -> None:
        """Set the round's field ``key``, one of ``arm``'s declared ``round_fields``; any other field is refused."""
        owner = self._owners.get(key)
        if owner != arm:
            whose = (
                "the loop's" if key in self.LOOP_FIELDS else f"the {owner} arm's round_fields hold it" if owner else "no arm declares it"
            )
            raise ArmError(f"the {arm} arm may not write the round's {key!r}: {whose}")
        self._record[key] = value

    def note_arm(self, arm: str, key: str, value: Any) -> None:
        """Set ``arm``'s own entry of a per-arm map (``stage_seconds``, ``arm_findings``)."""
        if key not in self.ARM_MAPS:
            raise ArmError(f"the {arm} arm may not write the round's {key!r}: the per-arm maps are {', '.join(self.ARM_MAPS)}")
        self._record.setdefault(key, {})[arm] = value

    def played(self, arm: str, result: ArmRound) -> None:
        """The loop records ``arm``'s round (once)."""
        if arm in self._record["arms"]:
            raise ArmError(f"the {arm} arm's round is recorded already")
        self._record["arms"][arm] = result

    def summary(self, wall_time: float) -> RoundSummary:
        """The round's record, finished: what the library commits."""
        return RoundSummary.model_validate({**self._record, "wall_time": wall_time})


@dataclass
class ArmPlan:
    """What an arm trains on in a round: the envs (the original first), how it picks among them, evidence it keeps."""

    specs: list[HarnessSpec]
    sampler: Any
    evidence: TrainingEpisodes | None = None
    components: list[Component] = field(default_factory=list)  # the library components behind specs[1:], if any


class LoopArm:
    """One arm: its learner, its level stream, and how it spends a round's budget.

    Subclasses declare ``name``, ``order``, ``help`` and, as they need them, ``needs`` and
    ``replay_stream``, implement :meth:`plan`, and register with
    :func:`~envrigger.loop.arms.register_arm`.

    Example:
        >>> from envrigger.loop.arms import registered
        >>> plr = registered()["plr"]
        >>> plr.name, plr.replay_stream, plr.needs
        ('plr', 3, ())
    """

    name: ClassVar[str]
    order: ClassVar[int]
    help: ClassVar[str]
    needs: ClassVar[tuple[str, ...]] = ()
    replay_stream: ClassVar[int | None] = None  # the PLR buffer's random stream ([seed, stream]); None: no replay
    round_fields: ClassVar[tuple[str, ...]] = ()  # fields of the round's record this arm writes (RoundState.note)

    def __init__(self, run: RunState) -> None:
        config = run.config
        if run.done:
            learner = load_learner(config.learner, self.path(run.out, run.done[-1].round), run.probe)
        else:
            learner = make_learner(config.learner, run.probe, config.seed, **config.learner_params)
        replay = None
        if self.replay_stream is not None:  # a replay buffer of levels kept across rounds (and resumes)
            replay = PLR(np.random.default_rng([config.seed, self.replay_stream]), score=config.plr_score)
            saved = run.out / f"{self.name}-replay.json"
            if run.done and saved.exists():
                state = read_json(saved, dict, fix=FIX_SAVED, error=TrajectoryError)
                try:
                    replay.restore(state)
                except (KeyError, TypeError, ValueError, AttributeError) as error:
                    raise TrajectoryError(
                        f"{saved}: not a replay buffer this version wrote ({type(error).__name__}); {FIX_SAVED}"
                    ) from None
        self.run, self.learner, self.replay = run, learner, replay
        self.steps = run.config.budget_steps  # this round's training steps (round_steps), set as each round begins

    def path(self, out: Path, number: int) -> Path:
        """Where the learner is saved after round ``number``."""
        return learner_path(out, self.name, number)

    @classmethod
    def check(cls, config: LoopConfig) -> None:
        """Raise a one-line ``ValueError`` when ``config`` cannot run this arm (the config calls it)."""

    def begin_round(self, rnd: RoundState) -> None:
        """Called for every arm before any arm trains in round ``rnd``."""

    def plan(self, rnd: RoundState) -> ArmPlan:
        """The envs (the original first) and the sampler this arm trains on in round ``rnd``."""
        raise NotImplementedError

    def train(self, rnd: RoundState, plan: ArmPlan, spent: dict[str, int], advance: Callable[[int], None]) -> Trained:
        """Train for :meth:`round_steps`; returns :func:`~envrigger.loop.train.train_arm`'s record (adds steps beside training to ``spent``)."""
        return train_arm(
            self, plan.specs, plan.sampler, self.run.config, rnd.number, self.run.reserved, plan.evidence, steps=self.steps, advance=advance
        )

    def round_steps(self, rnd: RoundState) -> int:
        """The training steps this arm takes in round ``rnd``: the budget, or, when the budget counts every step, what is left of it.

        With ``budget_counts="all"`` an arm may have spent, by the end of round ``n``, ``n``
        budgets of env steps of every kind. It trains for what its earlier rounds left,
        less what it spends beside training while it trains (searches and setup: as much as
        in the last round it trained in; an arm that trains with credit also sets aside its
        scoring, :meth:`scoring_cost`). What it spends after training (the rigger
        arm's diagnosis and validation) is paid from its next round's training.

        Example:
            >>> from envrigger.loop.results import ArmRound
            >>> arm = LoopArm.__new__(LoopArm)
            >>> scored = Evaluation(success=0.5, ci=[0.3, 0.7], episodes=20)
            >>> spent = ArmRound(interaction=Steps.counted({"train": 800, "validate": 300, "setup": 40}), validation=scored)
            >>> arm.name, arm.run = "x", RunState.__new__(RunState)
            >>> arm.run.config = LoopConfig(spec=HarnessSpec(env_id="FrozenLake-v1"), budget_steps=1000, budget_counts="all")
            >>> arm.run.done = [RoundSummary(round=1, arms={"x": spent}, wall_time=0)]
            >>> arm.round_steps(RoundState(2, Path("r"), {}))  # 2,000 allowed, 1,140 spent, 40 of setup expected again
            820
            >>> arm.run.config = LoopConfig(spec=HarnessSpec(env_id="FrozenLake-v1"), budget_steps=1000)
            >>> arm.round_steps(RoundState(2, Path("r"), {}))  # counting training only: the budget, whatever was spent
            1000
        """
        config = self.run.config
        if config.budget_counts == "train":
            return config.budget_steps
        before = [r.arms[self.name].interaction for r in self.run.done if self.name in r.arms]
        left = rnd.number * config.budget_steps - sum(s.total for s in before)
        last = next((s for s in reversed(before) if s.train > 0), None)  # the last round it trained in
        return max(left - (last.search + last.setup if last is not None else 0), 0)

    def scoring_cost(self) -> int:
        """The env steps the credit's scoring took in the last round this arm trained in with credit (0 if none)."""
        for summary in reversed(self.run.done):
            spent = summary.arms[self.name].interaction if self.name in summary.arms else None
            if spent is not None and spent.credit > 0:
                return max(spent.credit - spent.train, 0)  # the thrown-away copy trained as much as the kept one
        return 0

    def after_training(self, rnd: RoundState, plan: ArmPlan, trained: Trained, spent: dict[str, int], seconds: dict[str, float]) -> None:
        """What the arm does after training and before it is scored (the rigger arm's diagnosis and admission)."""

    def end_round(self, rnd: RoundState) -> None:
        """Called for every arm after every arm trained and was scored, before the round is committed."""

    def save(self, number: int) -> None:
        """Write what the arm needs to resume after round ``number``: its learner, its replay buffer."""
        self.learner.save(self.path(self.run.out, number))
        if self.replay is not None:
            write_text_atomically(self.run.out / f"{self.name}-replay.json", json.dumps(self.replay.state(), indent=2))

    def play(self, rnd: RoundState, stage: Stage, board: Any = None) -> ArmRound:
        """One round of this arm: plan, train, the arm's own work after training, then its score on the validation levels."""
        config, log = self.run.config, self.run.log
        spent = {"train": 0, "collect": 0, "validate": 0}
        cpu = cpu_seconds()
        plan = self._planned(rnd)
        self.steps = self.round_steps(rnd)
        log(f"round {rnd.number}: training the {self.name} arm on {len(plan.specs)} env(s) for {self.steps:,} steps")
        if board is not None and hasattr(self.learner, "log_to"):
            self.learner.log_to(board.arm_directory(self.name))
        clock = time.perf_counter()
        with stage(f"training {self.name}", self.steps) as advance:
            trained = self.train(rnd, plan, spent, advance) if self.steps > 0 else self._untrained(plan)
        seconds = {"train": time.perf_counter() - clock}
        rnd.use(f"{self.name}:train", trained.levels)
        # What the arm trained on, by name: the original and each reshaping (its picks are in this order).
        trained.envs = ["original", *(transforms_label(s.transforms) for s in plan.specs[1:])]
        spent["train"] = trained.steps
        if trained.search_steps:  # a start along a level's own solution: the search's env steps are this arm's interaction
            spent["search"] = trained.search_steps
        if trained.setup_steps:  # a replayed prefix, a walked start: played on the env, so this arm's interaction too
            spent["setup"] = trained.setup_steps
        if self.steps > 0:  # an arm whose overhead ate its round spends nothing more in it
            self.after_training(rnd, plan, trained, spent, seconds)
        clock = time.perf_counter()
        scored = evaluate(
            self.learner.policy(), self.run.base, self.run.split.validation_seeds, rnd.workdir / f"select-{self.name}", config
        )
        seconds["select"] = time.perf_counter() - clock
        self._collapse(rnd, scored)
        seconds["cpu"] = cpu_seconds() - cpu  # the whole round's CPU time (wall time is by stage)
        rnd.note_arm(self.name, "stage_seconds", seconds)  # like wall_time, not stable: never in final.json
        return ArmRound(train=trained, interaction=Steps.counted(spent), validation=scored)

    def _untrained(self, plan: ArmPlan) -> Trained:
        """The record of a round whose budget the arm's overhead had spent: no step, no episode."""
        self.run.log(f"the {self.name} arm has no steps left this round: its overhead took them (--budget-counts all)")
        none = [0] * len(plan.specs)
        return Trained(steps=0, episodes=0, picks=none, wins=none, levels=set(), replays=0, search_steps=0, setup_steps=0)

    def _planned(self, rnd: RoundState) -> ArmPlan:
        """This round's plan, checked: every env shares the original's spaces (one learner trains on all of them)."""
        try:
            plan = self.plan(rnd)
        except EnvriggerError:
            raise
        except Exception as error:  # an arm's own bug: named, in one line, with the cause chained for a debugger
            detail = str(error).splitlines()[0] if str(error) else ""
            raise ArmError(f"the {self.name} arm could not plan round {rnd.number}: {type(error).__name__}: {detail}") from error
        for spec in plan.specs:
            env = spec.build()
            try:
                spaces = (env.observation_space, env.action_space)
            finally:
                env.close()
            if spaces != self.run.spaces:
                raise ArmError(
                    f"the {self.name} arm's plan trains on {transforms_label(spec.transforms) or spec.env_id} with spaces "
                    f"{spaces[0]}, {spaces[1]}, not the original's {self.run.spaces[0]}, {self.run.spaces[1]}: one learner trains "
                    "on every env of a plan, so each must keep the original's spaces"
                )
        return plan

    def _collapse(self, rnd: RoundState, scored: Evaluation) -> None:
        """Note when the arm became more uniform on the validation levels and no better: it stopped exploring."""
        last = self.run.done[-1].arms.get(self.name) if self.run.done else None
        before = last.validation if last is not None else None
        if before is None or "diversity" not in before or None in scored.diversity.values():
            return
        pair = [{"accepted": before.success, **before.diversity}, {"accepted": scored.success, **scored.diversity}]
        found = collapse(pair[0], pair[1]) if None not in pair[0].values() else None
        if found is not None:
            rnd.note_arm(self.name, "arm_findings", [found])
