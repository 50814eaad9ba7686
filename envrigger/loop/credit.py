"""Credit from the original env: each piece of the rigger arm's curriculum keeps its share only while it helps there.

Contains :class:`Credit` (every piece's credit, its share of training and whether it is
retired) and :func:`credited_training` (one round of the rigger arm's training, in chunks,
each a paired comparison on the original env).

Admission says a reshaping is learnable, solvable, targeted and new; it does not say that
training on it helps on the original env. So the rigger arm's round is trained in
``credit_chunks`` chunks, and each chunk is a paired comparison: from the same weights
and on the same fresh training seeds, one copy trains on the curriculum (the original env,
PLR replay of its levels and the admitted components, each weighted by its share) and one
on the original env alone; both then play the same fresh original-env levels (never a
held-out or selection level). The copy that solves fewer of them is thrown away (a tie
keeps the curriculum: no harm was measured; with ``credit_margin`` Z, the curriculum is
thrown away only when it is behind by more than Z standard errors of the paired
difference), so a chunk that hurt is undone at once. The
difference is credited to the curriculum's pieces by their share of the chunk's episodes;
a piece's share of later training grows with its credit and a piece whose credit falls
to ``-credit_retire`` is retired: it trains no more in this run (it stays in the library).
The thrown-away copy's steps and the scoring episodes are the arm's ``credit`` interaction.
"""

from __future__ import annotations

import copy
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envharness.spec import HarnessSpec
from envrigger.loop.config import CREDIT_SEED, TRAIN_SEED, LoopConfig
from envrigger.loop.evaluate import evaluate
from envrigger.loop.learners import load_learner
from envrigger.loop.levels import first_free
from envrigger.loop.mixture import TrainingEpisodes
from envrigger.loop.results import Trained
from envrigger.loop.samplers import Fixed
from envrigger.loop.train import Arm, Trainee, train_arm
from envrigger.stats import paired_se

REPLAY = "replay"  # the piece that is PLR's replay of original levels
TEMPERATURE = 0.05  # a piece's weight is exp(credit / TEMPERATURE), within [1/4, 4]


class Credit:
    """Each curriculum piece's credit (summed paired differences on the original env) and its weight in training.

    Example:
        >>> credit = Credit(retire_at=0.1)
        >>> credit.add({"a": 0.5, "b": 0.5}, -0.12)     # the curriculum lost 12 points; a and b shared the blame
        >>> round(credit.weight("a"), 3), credit.retired
        (0.301, [])
        >>> credit.add({"a": 1.0}, -0.06)
        >>> credit.weight("a"), credit.retired
        (0.0, ['a'])
    """

    def __init__(self, retire_at: float, state: dict[str, Any] | None = None) -> None:
        self.retire_at = retire_at
        self.scores: dict[str, float] = dict((state or {}).get("scores", {}))
        self.retired: list[str] = list((state or {}).get("retired", []))

    def weight(self, piece: str) -> float:
        """How much more (or less) often than by learnability alone ``piece`` is trained on; 0 once retired."""
        if piece in self.retired:
            return 0.0
        return float(min(4.0, max(0.25, math.exp(self.scores.get(piece, 0.0) / TEMPERATURE))))

    def add(self, shares: dict[str, float], difference: float) -> None:
        """Credit ``difference`` (curriculum minus original-only success) to the pieces by their ``shares`` of it."""
        total = sum(shares.values())
        if total <= 0:
            return
        for piece, share in shares.items():
            self.scores[piece] = self.scores.get(piece, 0.0) + difference * share / total
            if self.scores[piece] <= -self.retire_at and piece not in self.retired:
                self.retired.append(piece)

    def state(self) -> dict[str, Any]:
        return {"scores": dict(self.scores), "retired": list(self.retired)}


def _chunks(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def chunk_plan(config: LoopConfig, learner: Any, number: int, budget: int | None = None) -> list[tuple[int, int]]:
    """Round ``number``'s credit chunks as (first training seed, steps): whole rollouts for a learner that trains in them.

    Every copy a chunk trains (curriculum, original-only, the shadow and, with
    ``--credit-baseline shadow``, the original arm) starts its levels at the same seed.
    ``budget`` is the steps the chunks add up to (default the round's ``budget_steps``).
    """
    unit = int(getattr(learner, "step_unit", 1))  # PPO trains in whole rollouts: chunks of whole rollouts add up to one call's
    plan = []
    for j, units in enumerate(_chunks(-(-(config.budget_steps if budget is None else budget) // unit), config.credit_chunks)):
        if units:
            plan.append((config.level(TRAIN_SEED) + 1_000_000 * number + 100_000 * j, units * unit))
    return plan


def chunked_training(
    arm: Trainee,
    config: LoopConfig,
    number: int,
    reserved: set[str],
    advance: Callable[[int], None] = lambda n: None,
    budget: int | None = None,
) -> Trained:
    """Train ``arm`` on the original env alone in round ``number``'s credit chunks; returns what :func:`train_arm` does, summed.

    With ``--credit-baseline shadow`` the original arm trains this way, so that it and the
    rigger arm's shadow are the same training, call for call: where the rigger arm falls
    back to its shadow, it holds exactly the original arm's weights.
    """
    records = [
        train_arm(arm, [config.spec], Fixed(), config, number, reserved, None, start=start, steps=steps, advance=advance)
        for start, steps in chunk_plan(config, arm.learner, number, budget)
    ]
    return _summed(records, set().union(*(r.levels for r in records)))


def _spent(learner: Any) -> dict[str, int] | None:
    """An LLM learner's endpoint spend so far (model calls, tokens); None for a learner that keeps none."""
    spent = getattr(learner, "spent", None)
    return dict(spent) if isinstance(spent, dict) else None


def _less(after: dict[str, int] | None, before: dict[str, int] | None) -> dict[str, int]:
    return {k: v - (before or {}).get(k, 0) for k, v in (after or {}).items()}


def _plus(first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
    return {k: first.get(k, 0) + second.get(k, 0) for k in [*first, *(k for k in second if k not in first)]}


def _summed(records: list[Trained], levels: set[str]) -> Trained:
    """Several :func:`train_arm` records as one round's: counts added, picks and wins added env by env."""
    counts = ("steps", "episodes", "skipped_reserved", "refused", "env_errors", "replays", "search_steps", "setup_steps")
    return Trained(
        **{key: sum(getattr(r, key) for r in records) for key in counts},
        **{key: np.sum([getattr(r, key) for r in records], axis=0).astype(int).tolist() for key in ("picks", "wins")},
        env_error_examples=sorted({m for r in records for m in r.env_error_examples})[:3],
        levels=levels,
    )


def credited_training(
    workdir: Path,
    arm: Trainee,
    specs: list[HarnessSpec],
    pieces: list[str],
    sampler: Any,
    config: LoopConfig,
    number: int,
    reserved: set[str],
    credit: Credit,
    evidence: TrainingEpisodes | None = None,
    advance: Callable[[int], None] = lambda n: None,
    alone_offset: int = 0,
    shadow: Any | None = None,
    budget: int | None = None,
) -> tuple[Trained, dict[str, Any]]:
    """Train the rigger arm for the round's budget in paired chunks; returns what :func:`train_arm` does, and the credit record.

    ``pieces`` names ``specs[1:]`` (component hashes). The returned training record sums
    the kept chunks (``steps`` is the round's budget, as every arm's); its ``levels`` are
    every training level either copy played. The credit record has each chunk's two
    success rates, which copy was kept, the credit and retirements after the round, the
    ``steps`` the thrown-away copies and the scoring took, and the scoring ``levels``; for an
    LLM learner (one that counts its ``spent``), ``spent``: the model calls and tokens of the
    thrown-away copies' training and of the scoring. The arm's learner keeps counting only
    its own training: after a fallback, its history before the chunk and the kept copy's chunk.

    ``alone_offset`` moves the original-only copy's training seeds: the ``original-select``
    ablation trains both copies on the original env, on different seeds, so what it measures
    is the selection of the better copy alone, without any reshaping.

    ``shadow`` (``--credit-baseline shadow``) is a learner trained on the original env alone
    since the run began, trained here in place: each chunk's original-only copy is the shadow
    itself rather than a fork of the arm's weights, and a chunk the curriculum loses leaves the
    arm holding a copy of the shadow. So the arm departs from plain training only where the
    departure scored at least as well on fresh original-env levels.

    ``budget``: the steps each copy trains over the chunks (default the round's ``budget_steps``).
    """
    base = config.spec
    replay_p = getattr(sampler, "replay_p", None)
    probe = base.build()
    tally = _Tally()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    try:
        for j, (start, steps) in enumerate(chunk_plan(config, arm.learner, number, budget)):
            _weigh(sampler, credit, pieces, replay_p)
            fork = workdir / f"fork-{j}"
            if shadow is None:
                arm.learner.save(fork)
            sampler_before, evidence_before = copy.deepcopy(sampler), copy.deepcopy(evidence)
            arm_before = _spent(arm.learner)
            with_trained = train_arm(arm, specs, sampler, config, number, reserved, evidence, start=start, steps=steps, advance=advance)
            alone = Arm(arm.name, shadow if shadow is not None else load_learner(config.learner, fork, probe))
            alone_before = _spent(alone.learner)
            alone_trained = train_arm(
                alone, [base], Fixed(), config, number, reserved, evidence_before, start=start + alone_offset, steps=steps
            )
            tally.levels |= with_trained.levels | alone_trained.levels
            scored, noise = _scored(arm.learner, alone.learner, config, number, j, reserved, workdir, tally.scored_levels)
            difference = scored["curriculum"]["success"] - scored["original"]["success"]
            shares = _shares(with_trained, pieces, credit, replay_p is not None)
            credit.add(shares, difference)
            # Within the margin the curriculum is kept (1e-9: a difference of exactly the margin is within it; the
            # differences are whole levels over the same count, so with no margin this is difference >= 0).
            keep = difference + config.credit_margin * noise >= -1e-9
            tally.extra += scored["curriculum"]["env_steps"] + scored["original"]["env_steps"]
            if arm_before is not None:  # an LLM learner: the scoring's model calls are credit spend too
                tally.thrown = _plus(tally.thrown, _plus(scored["curriculum"]["spent"], scored["original"]["spent"]))
            arm_cost, alone_cost = _less(_spent(arm.learner), arm_before), _less(_spent(alone.learner), alone_before)
            if keep:
                tally.extra += alone_trained.steps + alone_trained.search_steps + alone_trained.setup_steps
                tally.thrown = _plus(tally.thrown, alone_cost)
                tally.kept.append(with_trained)
            else:
                tally.extra += with_trained.steps + with_trained.search_steps + with_trained.setup_steps
                tally.thrown = _plus(tally.thrown, arm_cost)
                _fall_back(arm, alone.learner, shadow, fork, config, probe, arm_before, alone_cost)
                sampler.__dict__.update(sampler_before.__dict__)
                if evidence is not None and evidence_before is not None:
                    evidence.__dict__.update(evidence_before.__dict__)
                alone_trained.picks = alone_trained.picks + [0] * (len(specs) - 1)
                alone_trained.wins = alone_trained.wins + [0] * (len(specs) - 1)
                tally.kept.append(alone_trained)
            tally.chunks.append(
                {"steps": steps, "curriculum": scored["curriculum"]["success"], "original": scored["original"]["success"], "se": noise}
                | {"kept": "curriculum" if keep else "original", "shares": shares}
            )
            shutil.rmtree(workdir / f"score-{j}-curriculum", ignore_errors=True)
            shutil.rmtree(workdir / f"score-{j}-original", ignore_errors=True)
    finally:
        probe.close()
        if replay_p is not None:
            sampler.replay_p = replay_p
    trained = _summed(tally.kept, tally.levels)
    record = {"chunks": tally.chunks, **credit.state(), "steps": tally.extra, "levels": tally.scored_levels}
    if tally.thrown:
        record["spent"] = tally.thrown
    return trained, record


def _weigh(sampler: Any, credit: Credit, pieces: list[str], replay_p: float | None) -> None:
    """Set the sampler's weights from the credit: each piece's (the original's is 1), and replay's probability."""
    chooser = getattr(sampler, "chooser", None) or sampler
    if hasattr(chooser, "weights"):
        chooser.weights = np.array([1.0, *(credit.weight(p) for p in pieces)])
    if replay_p is not None:
        sampler.replay_p = replay_p * min(1.0, credit.weight(REPLAY))


def _scored(
    curriculum: Any, alone: Any, config: LoopConfig, number: int, j: int, reserved: set[str], workdir: Path, scored_levels: set[str]
) -> tuple[dict[str, Any], float]:
    """Both copies on chunk ``j``'s fresh original-env levels (the same for both), and the paired difference's standard error."""
    base = config.spec
    first = config.level(CREDIT_SEED) + 10_000_000 * number + 100_000 * j
    seeds = first_free(base, range(first, first + 50_000), reserved, config.credit_episodes, scored_levels)
    scored = {
        name: evaluate(learner.policy(), base, seeds, workdir / f"score-{j}-{name}", config, by_seed=True, spend=True)
        for name, learner in (("curriculum", curriculum), ("original", alone))
    }
    noise = paired_se(*([scored[c]["outcomes"].get(s, False) for s in seeds] for c in ("curriculum", "original")))  # a lost episode: lost
    return scored, noise


def _shares(trained: Trained, pieces: list[str], credit: Credit, replays: bool) -> dict[str, float]:
    """Each piece's share of the curriculum copy's chunk episodes (replay's too, where the sampler replays): what it is credited."""
    episodes = max(trained.episodes, 1)
    shares = {p: trained.picks[i + 1] / episodes for i, p in enumerate(pieces) if credit.weight(p) > 0}
    if replays and credit.weight(REPLAY) > 0:
        shares[REPLAY] = trained.replays / episodes
    return {p: s for p, s in shares.items() if s > 0}


@dataclass
class _Tally:
    """What a credited round adds up over its chunks: the kept copies' records, levels played, the extra steps and spend."""

    kept: list[Trained] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    levels: set[str] = field(default_factory=set)
    scored_levels: set[str] = field(default_factory=set)
    extra: int = 0  # env steps of the thrown-away copies and the scoring
    thrown: dict[str, int] = field(default_factory=dict)  # what the thrown-away copies and the scoring cost an LLM learner's endpoint


def _fall_back(
    arm: Trainee,
    alone: Any,
    shadow: Any | None,
    fork: Path,
    config: LoopConfig,
    probe: Any,
    arm_before: dict[str, int] | None,
    alone_cost: dict[str, int],
) -> None:
    """The curriculum lost the chunk: the arm goes on from the original-only copy (a copy of the shadow, never the shadow itself)."""
    board = getattr(arm.learner, "board", None)
    if shadow is None:
        arm.learner = alone
    else:  # a copy: the shadow goes on training on the original env alone
        shadow.save(fork)  # load from the path given, as the fork does (a learner's save may add its suffix)
        arm.learner = load_learner(config.learner, fork, probe)
    if arm_before is not None:  # the arm's own spend: its history before the chunk and the kept copy's chunk
        arm.learner.spent = _plus(arm_before, alone_cost)
    if board is not None:  # the kept copy goes on logging where the arm logs
        arm.learner.log_to(board)
