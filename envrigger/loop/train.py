"""Training one arm for a round: its learner on a :class:`~envrigger.loop.mixture.MixtureEnv` over the arm's specs.

Contains :func:`train_arm` and :class:`Arm` (one arm's learner and level stream). The
loop talks to learners only through the :class:`~envrigger.loop.learners.LoopLearner`
protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from envharness.spec import HarnessSpec
from envrigger.loop.config import TRAIN_SEED, LoopConfig
from envrigger.loop.levels import Seeds
from envrigger.loop.mixture import MixtureEnv, TrainingEpisodes
from envrigger.loop.results import Trained
from envrigger.loop.samplers import PLR


def learner_path(out: Path, arm: str, number: int) -> Path:
    """Where ``arm``'s learner is saved after round ``number`` of the run in ``out`` (the learner may add its suffix)."""
    return out / f"{arm}-round-{number}"


class Trainee(Protocol):
    """What training reads of an arm: its name and its learner (which a credit chunk may swap for the kept copy)."""

    @property
    def name(self) -> str: ...

    learner: Any


class Arm:
    """One arm's learner and level stream, outside a run (a gate's copies, a credit chunk's, a benchmark's)."""

    def __init__(self, name: str, learner: Any, replay: PLR | None = None) -> None:
        self.name, self.learner, self.replay = name, learner, replay

    def path(self, out: Path, number: int) -> Path:
        return learner_path(out, self.name, number)


def train_arm(
    arm: Trainee,
    specs: list[HarnessSpec],
    sampler: Any,
    config: LoopConfig,
    number: int,
    reserved: set[str],
    evidence: TrainingEpisodes | None = None,
    start: int | None = None,
    steps: int | None = None,
    advance: Callable[[int], None] = lambda n: None,
) -> Trained:
    """Train ``arm`` for ``steps`` (default the round's budget) on fresh seeds from ``start`` (default the round's training seeds).

    ``advance(length)`` is called as each training episode ends (a progress bar's steps).
    """
    seeds = Seeds(config.spec, config.level(TRAIN_SEED) + 1_000_000 * number if start is None else start, reserved)
    replays_before = sampler.replays
    envs: list[MixtureEnv] = []
    picks = np.zeros(len(specs), dtype=int)
    wins = np.zeros(len(specs), dtype=int)
    original: list[bool] = []  # the verified outcome of each episode on the original env, in the order they ended

    def count(index: int, seed: int, success: bool, length: int) -> None:
        picks[index] += 1
        wins[index] += bool(success)
        if index == 0:
            original.append(bool(success))
        advance(length)

    def make() -> MixtureEnv:
        env = MixtureEnv(specs, sampler, seeds, on_episode=count, evidence=evidence)
        envs.append(env)
        return env

    try:
        taken = arm.learner.train(make, config.budget_steps if steps is None else steps, seed=config.seed * 100_003 + number)
    finally:
        seeds.close()
    return Trained(
        steps=taken,
        episodes=int(picks.sum()),
        picks=picks.tolist(),
        wins=wins.tolist(),
        levels=seeds.levels,
        skipped_reserved=seeds.skipped,
        refused=sum(e.refused for e in envs),
        env_errors=sum(len(e.errors) for e in envs),
        env_error_examples=sorted({m for e in envs for m in e.errors})[:3],
        replays=sampler.replays - replays_before,
        search_steps=sum(e.search_steps for e in envs),
        setup_steps=sum(e.setup_steps for e in envs),
        **({"halves": halves(original)} if config.reshape_when == "stalled" else {}),
    )


def halves(outcomes: list[bool]) -> list[list[int]]:
    """``[[wins, episodes], [wins, episodes]]`` of the first and the second half of ``outcomes`` (the middle one goes to the second).

    Example:
        >>> halves([False, False, True, False, True])
        [[0, 2], [2, 3]]
    """
    middle = len(outcomes) // 2
    return [[sum(outcomes[:middle]), middle], [sum(outcomes[middle:]), len(outcomes) - middle]]
