"""The rigger round: after the rigger arm trained, diagnose its episodes, propose, validate and admit.

Contains :func:`rigger_round`. Admissions train from the next round.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from envharness.spec import HarnessSpec
from envrigger.diagnose import diagnose
from envrigger.loop.config import COLLECT_SEED, VALIDATE_SEED, LoopConfig
from envrigger.loop.gates import RoundContext
from envrigger.loop.gates.base import GateResult
from envrigger.loop.levels import first_free
from envrigger.loop.library import Library
from envrigger.loop.mixture import TrainingEpisodes
from envrigger.loop.propose import EASING, Candidate, offerable, propose, step_in, transforms_label
from envrigger.loop.validate import Validator
from envrigger.rollout import backend_for, rollout

MASTERED_EPISODES = 20  # training episodes on a component before its success rate says it is mastered


@dataclass
class Admissions:
    """What validating a round's candidates gave: the admitted component ids and labels, every candidate tried, the levels played."""

    admitted: list[int]
    labels: list[str]  # what each admitted component adds to the base env, as `library list` names transforms
    tried: list[dict[str, Any]]  # every candidate: what it adds, why, and each gate's outcome (the run report shows them)
    levels: set[str]


@dataclass
class RiggerRound:
    """A rigger round's result: the fields it adds to the round's record, its stages' seconds, and its env steps and levels by use."""

    record: dict[str, Any]  # findings, candidates, admitted, admitted_labels, rejected_by, tried, mastered, evidence (RoundSummary's)
    seconds: dict[str, float]
    collect_steps: int
    collect_levels: set[str]
    validate_steps: int
    validate_levels: set[str]
    own_budget: dict[
        str, tuple[int, set[str]]
    ]  # a gate counting its own steps (transfer): its steps and levels  # training episodes on a component before its success rate says it is mastered


def _nearer(candidate: Candidate, gates: list[GateResult], config: LoopConfig, spaces: Any, seen: set[str]) -> Candidate | None:
    """With ``config.step_in``: the next rung nearer the goal of an easing the agent won too rarely to learn from (None otherwise).

    A candidate refused at learnability below the band (its measured rate under the band's
    floor) whose easings have a :func:`~envrigger.loop.propose.step_in` becomes that nearer
    candidate, validated next in the same round like any other (every gate, fail closed).
    The round asks for one only while the library holds no easing component: a step-in finds
    the ladder's first rung, and never adds rungs to a ladder already climbing.
    """
    if not config.step_in:
        return None
    # A gate refused it as won too rarely: a rate under its band's floor (the learnability gate's statistic).
    if not any(not g.passed and "band" in g.statistic and float(g.statistic.get("rate", 1.0)) < config.band[0] for g in gates):
        return None
    verdict = next(g for g in gates if not g.passed and "band" in g.statistic)
    stepped = [step_in(t) for t in candidate.added]
    if all(t is None for t in stepped):
        return None
    changed = [new if new is not None else old for old, new in zip(candidate.added, stepped, strict=True)]
    nearer = Candidate(
        spec=config.spec.extended(*changed),
        added=changed,
        finding=candidate.finding,
        finding_stats=candidate.finding_stats,
        rationale=f"{transforms_label(candidate.added)} was won on {verdict.statistic.get('successes')} of "
        f"{verdict.statistic.get('rollouts')} rollouts, below the band: its rung nearer the goal, {transforms_label(changed)}",
        origin="step-in",
    )
    if nearer.hash in seen or not offerable(nearer.spec) or not _same_spaces(nearer.spec, spaces):
        return None
    return nearer


def mastered(wins: int, episodes: int, band: tuple[float, float]) -> bool:
    """Won on more than the band's top share of at least :data:`MASTERED_EPISODES` training episodes (step-out and retiring read it)."""
    return episodes >= MASTERED_EPISODES and wins > band[1] * episodes


def _learnability(trained: dict[str, tuple[int, int]] | None) -> dict[str, float]:
    """Each component's p(1 - p) over this round's training episodes on it (none trained: not in the map)."""
    return {h: (w / n) * (1 - w / n) for h, (w, n) in (trained or {}).items() if n > 0}


def _same_spaces(spec: HarnessSpec, spaces: tuple[Any, Any]) -> bool:
    env = spec.build()
    try:
        return (env.observation_space, env.action_space) == spaces
    finally:
        env.close()


def rigger_round(
    workdir: Path,
    config: LoopConfig,
    library: Library,
    learner: Any,
    number: int,
    reserved: set[str],
    spaces: tuple[Any, Any],
    evidence: TrainingEpisodes,
    log: Callable[[str], None],
    trained: dict[str, tuple[int, int]] | None = None,
) -> RiggerRound:
    """Diagnose, propose, validate and admit, after the rigger arm trained this round; admissions train from the next round.

    The diagnosis reads the learner's own last training episodes on the original env; only
    if there are fewer than ``collect_episodes`` of them are the rest collected fresh.
    ``trained`` maps each component's hash to the (wins, episodes) of this round's training
    on it; with ``config.step_out`` the components won on more than the band's top share
    (over at least :data:`MASTERED_EPISODES` episodes) get their next rung proposed.
    """
    seconds: dict[str, float] = {}
    clock = time.perf_counter()
    policy = learner.policy()
    store, collect_steps, collect_levels = _evidence(workdir, config, policy, number, reserved, evidence, log)
    seconds["collect"], clock = time.perf_counter() - clock, time.perf_counter()
    diagnosis = diagnose(store)
    (workdir / "diagnosis.json").write_text(diagnosis.model_dump_json(indent=2))
    seconds["diagnose"], clock = time.perf_counter() - clock, time.perf_counter()
    # A round that restarts after a crash sees the library as it was when the round began: what
    # its killed attempt admitted is validated again (and admitted again under the same id), so
    # a resumed run reports exactly what an uninterrupted one does.
    before = [c for c in library.components() if c.round is None or c.round < number]
    admitted_before = [(c.hash, c.spec, c.finding) for c in before]
    rejected: dict[str, int] = {}
    solved = [
        (h, spec, finding)
        for h, spec, finding in admitted_before
        if config.step_out and (wins_tries := (trained or {}).get(h)) is not None and mastered(*wins_tries, config.band)
    ]
    candidates = _candidates(diagnosis, config, number, admitted_before, solved, trained, spaces, rejected, log)
    if config.demo_start:  # the agent's own successes, replayed as starts: first, in place of the last candidate
        from envrigger.loop.demos import demo_candidate

        starts = demo_candidate(store, config.spec, diagnosis, reserved)
        known = {c.hash for c in candidates} | {h for h, _, _ in admitted_before}
        if starts is not None and starts.hash not in known and _same_spaces(starts.spec, spaces):
            candidates = [starts, *candidates][: config.candidates_per_round]
            log(f"round {number}: a start along {len(starts.added[0].params['demos'])} of the agent's own successes is the first candidate")
    seconds["propose"], clock = time.perf_counter() - clock, time.perf_counter()
    log(f"round {number}: {len(diagnosis.findings)} findings, {len(candidates)} candidates to validate")
    validator = Validator(
        policy, config.spec, workdir / "validate", config.validation(), RoundContext(workdir, config, learner, number, reserved, log)
    )
    outcome = _validate_all(validator, candidates, config, library, number, reserved, spaces, admitted_before, rejected, policy.policy_id)
    seconds["validate"] = time.perf_counter() - clock
    # Gates that count their own steps (the transfer gate's copies): charged to the arm under the gate's name.
    own = {gate.name: (gate.steps, gate.levels) for gate in validator.gates if gate.own_budget and gate.used_in(config)}
    return RiggerRound(
        record={
            "evidence": {
                "training_episodes": len(evidence.episodes),
                "collected": max(config.collect_episodes - len(evidence.episodes), 0),
            },
            "collected_success": diagnosis.success_rate,
            "findings": [f.name for f in diagnosis.findings[:5]],
            "candidates": len(candidates),
            "admitted": outcome.admitted,
            "admitted_labels": outcome.labels,
            "rejected_by": rejected,
            "tried": outcome.tried,
            "mastered": [h for h, _, _ in solved],
        },
        seconds=seconds,
        collect_steps=collect_steps,
        collect_levels=collect_levels,
        validate_steps=validator.env_steps,
        validate_levels=outcome.levels,
        own_budget=own,
    )


def _evidence(
    workdir: Path,
    config: LoopConfig,
    policy: Any,
    number: int,
    reserved: set[str],
    evidence: TrainingEpisodes,
    log: Callable[[str], None],
) -> tuple[Any, int, set[str]]:
    """The diagnosis's store (and the env steps and levels of the episodes collected fresh): the learner's own training episodes, topped up with fresh ones if fewer than asked for."""
    base = config.spec
    store = evidence.save(workdir / "evidence", base, policy.policy_id)
    recorded = len(evidence.episodes)
    missing = config.collect_episodes - recorded
    steps, levels = 0, set[str]()
    if missing > 0:  # too few training episodes on the original env: collect the rest, into the same run
        collect_seeds = first_free(
            base, range(config.level(COLLECT_SEED) + 10_000 * number, config.level(COLLECT_SEED) + 10_000 * (number + 1)), reserved, missing
        )
        log(f"round {number}: {recorded} training episodes on the original env as evidence; collecting {missing} more")
        store = rollout(
            base,
            policy,
            seeds=collect_seeds,
            out=workdir / "evidence",
            **backend_for(policy, config.backend, config.workers, config.rollout_batch),
        )
        table = store.episodes_table(["episode_id", "length", "level_id"])
        fresh = table.filter(pc.greater_equal(table.column("episode_id"), recorded))
        steps, levels = int(np.sum(fresh.column("length").to_numpy())), set(fresh.column("level_id").to_pylist())
    return store, steps, levels


def _candidates(
    diagnosis: Any,
    config: LoopConfig,
    number: int,
    admitted_before: list[tuple[str, HarnessSpec, str]],
    solved: list[tuple[str, HarnessSpec, str]],
    trained: dict[str, tuple[int, int]] | None,
    spaces: tuple[Any, Any],
    rejected: dict[str, int],
    log: Callable[[str], None],
) -> list[Candidate]:
    """The round's candidates: the LLM proposer's and the catalog's, mutations and next rungs up to half the slots."""
    base = config.spec
    rng = np.random.default_rng([config.seed, number])
    proposals: list[Any] = []
    if config.proposer in ("llm", "both"):
        from envrigger.agents import Endpoint
        from envrigger.loop.llm_propose import llm_propose

        endpoint = Endpoint(
            str(config.proposer_base_url),
            str(config.proposer_model),
            api_key_env=config.proposer_api_key_env,
            timeout_s=config.proposer_timeout,
        )
        proposals, refused = llm_propose(
            diagnosis,
            base,
            endpoint,
            n=config.candidates_per_round,
            max_tokens=config.proposer_max_tokens,
            answer_format=config.proposer_format,
        )
        rejected |= {f"llm_{why}": count for why, count in refused.items()}  # counted beside the gates' rejections
        log(f"round {number}: the LLM proposer gave {len(proposals)} valid proposals ({refused or 'none rejected'})")
    learnability = _learnability(trained) if config.mutate == "learnability" else None
    if config.proposer in ("catalog", "both"):
        # An agent that rarely succeeds cannot learn a harder env inside the band: try the reshapings that ease levels first.
        proposals += propose(
            diagnosis,
            base,
            rng,
            admitted=admitted_before,
            easing_first=diagnosis.success_rate < config.band[0],
            mastered=solved,
            target_all=config.target_all,
            learnability=learnability,
        )
    else:
        proposals += [
            c
            for c in propose(diagnosis, base, rng, admitted=admitted_before, mastered=solved, learnability=learnability)
            if c.origin != "catalog"
        ]
    # A learner trains on every env of its curriculum at once: they must share its observation and action spaces.
    usable = [c for c in proposals if _same_spaces(c.spec, spaces)]
    # Next rungs of mastered components, then mutations of admitted ones (ACCEL), get up to half of the slots; catalog proposals the rest.
    mutations = [c for c in usable if c.origin in ("step-out", "mutation")][: max(config.candidates_per_round // 2, 1 if solved else 0)]
    catalog = [c for c in usable if c.origin not in ("step-out", "mutation")][: config.candidates_per_round - len(mutations)]
    return catalog + mutations


def _validate_all(
    validator: Validator,
    candidates: list[Candidate],
    config: LoopConfig,
    library: Library,
    number: int,
    reserved: set[str],
    spaces: tuple[Any, Any],
    admitted_before: list[tuple[str, HarnessSpec, str]],
    rejected: dict[str, int],
    agent_id: str,
) -> Admissions:
    """Validate every candidate in turn (a step-in's nearer rung right after the easing it follows); admit those that pass."""
    base = config.spec
    validation_levels: set[str] = set()
    validation_seeds = first_free(
        base,
        range(config.level(VALIDATE_SEED) + 10_000 * number, config.level(VALIDATE_SEED) + 10_000 * (number + 1)),
        reserved,
        config.max_rollouts + config.min_rollouts,
        validation_levels,
    )
    admitted: list[Any] = []
    labels: list[str] = []  # what each admitted component adds to the base env, as `library list` names transforms
    tried: list[dict[str, Any]] = []  # every candidate: what it adds, why, and each gate's outcome (the run report shows them)
    index, stepped_in = 0, 0
    while index < len(candidates):
        candidate = candidates[index]
        current = [(c.hash, c.spec) for c in library.components() if c.round is None or c.round < number or c.id in admitted]
        result = validator.validate(candidate, validation_seeds, current, index=index)
        tried.append(
            {
                "label": transforms_label(candidate.added) or candidate.spec.env_id,
                "finding": candidate.finding,
                "origin": candidate.origin,
                "passed": result.passed,
                "error": result.error,
                "env_steps": result.env_steps,
                "gates": [{"gate": g.gate, "passed": g.passed, "detail": g.detail[:300]} for g in result.gates],
            }
        )
        if result.passed:
            component = library.admit(
                candidate.spec,
                finding=candidate.finding,
                rationale=candidate.rationale,
                gates=[g.model_dump() for g in result.gates],
                seeds=result.seeds,
                agent_id=agent_id,
                finding_stats=candidate.finding_stats,
                origin=candidate.origin,
                parent=candidate.parent,
                round=number,
            )
            admitted.append(component)
            labels.append(transforms_label(candidate.added) or candidate.spec.env_id)
        else:
            failed = result.error or next((g.gate for g in result.gates if not g.passed), "unknown")
            rejected[failed.split(":")[0]] = rejected.get(failed.split(":")[0], 0) + 1
            # Only until the ladder has a first rung: once an easing is admitted, the rungs come from step-out and mutation.
            started = any(t.name in EASING for c in library.components() for t in c.spec.transforms[len(base.transforms) :])
            nearer = (
                None
                if started
                else _nearer(candidate, result.gates, config, spaces, {c.hash for c in candidates} | {h for h, _, _ in admitted_before})
            )
            if nearer is not None and stepped_in < config.candidates_per_round:
                candidates.insert(index + 1, nearer)  # validated next, in this round: the agent need not wait a round at 0%
                stepped_in += 1
        index += 1
    return Admissions(admitted, labels, tried, validation_levels)
