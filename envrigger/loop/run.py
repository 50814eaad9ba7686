"""The EnvRigger loop: collect, diagnose, propose, validate, admit, train every arm, pick, evaluate held-out.

Contains :class:`LoopConfig`, :class:`LevelSplit` (level-disjoint validation and held-out
sets), :func:`evaluate`, :func:`run_loop`, and for claims across training seeds
:func:`run_seeds` (several at once: :func:`run_many`) and :func:`across_seeds`.

Arms (``LoopConfig.arms``), each a learner trained from the same initial weights for the
same number of steps per round:

- ``original``: the original env only, fresh levels;
- ``dr``: domain randomization, uniformly over the original and random catalog reshapings
  with random parameters (no diagnosis);
- ``plr``: prioritized level replay over the original env's levels (learnability-ranked);
- ``rigger``: the EnvRigger curriculum over the original and the admitted components.

Levels are disjoint by ``level_id``: held-out levels (seeds ``1_000_000 + i``) and
validation levels (``1_500_000 + i``, skipping held-out levels) are reserved, and every seed
used to train, collect or validate candidates whose base level is reserved is skipped. An
env with too few distinct levels for that is refused. Every round each arm is scored on
the validation levels; at the end each arm's best round (by validation success) is
evaluated once on the held-out levels, and the levels used are checked for overlap.

Every round ends with an atomic checkpoint of every learner and a committed round record
in the library database, so a run killed at any point (even ``kill -9``) resumes at the
first unfinished round without losing admitted components or completed rounds.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
from pydantic import BaseModel, Field, field_validator, model_validator

from envharness.spec import HarnessSpec
from envrigger.diagnose import diagnose
from envrigger.diagnose.model import wilson
from envrigger.learners import LEARNERS, load_learner, make_learner
from envrigger.library import Library
from envrigger.mixture import (
    PLR,
    Curriculum,
    Evidence,
    Fixed,
    MixtureEnv,
    Seeds,
    Uniform,
    first_free,
    random_specs,
)
from envrigger.propose import propose
from envrigger.rollout import rollout
from envrigger.trajectory import DirectoryLock, TrajectoryError
from envrigger.validate import GateResult, ValidationConfig, Validator

EVAL_SEED, SELECT_SEED, COLLECT_SEED, VALIDATE_SEED, TRAIN_SEED = 1_000_000, 1_500_000, 2_000_000, 3_000_000, 4_000_000
TRANSFER_SEED = 5_000_000_000  # the transfer gate's levels: 10M per round, 100k per candidate, far above the others
ARMS = ("original", "dr", "plr", "rigger")
__all__ = [
    "ARMS",
    "LEARNERS",
    "Curriculum",
    "LevelSplit",
    "LoopConfig",
    "SeedsRun",
    "across_seeds",
    "evaluate",
    "run_loop",
    "run_many",
    "run_seeds",
]


class LoopConfig(BaseModel):
    """Everything a loop run needs; saved as ``loop.json`` so ``--resume`` continues the same run."""

    spec: HarnessSpec
    heldout_spec: HarnessSpec | None = Field(
        None,
        description="held-out levels come from this env instead: the same env id with other level parameters "
        "(e.g. physics outside the training range), no transforms; validation stays on `spec`",
    )
    learner: str = Field("ppo", description="learner kind: ppo or qlearning")
    learner_params: dict[str, Any] = Field(default_factory=dict)
    arms: list[str] = Field(default_factory=lambda: ["original", "rigger"], description="arms trained side by side")
    rounds: int = Field(3, ge=1, le=1000)
    budget_steps: int = Field(50_000, ge=100, description="training steps per round, for each arm")
    collect_episodes: int = Field(60, ge=5, le=9_999)
    eval_episodes: int = Field(200, ge=10, le=100_000, description="held-out episodes (one per held-out seed), once at the end")
    val_episodes: int = Field(100, ge=10, le=100_000, description="validation-level episodes per arm and round, to pick the round")
    candidates_per_round: int = Field(4, ge=1, le=100)
    dr_pool: int = Field(16, ge=1, le=1000, description="random reshapings per round for the dr arm")
    allow_seen_levels: bool = Field(False, description="evaluate on held-out seeds even where their levels were trained on")
    seed: int = Field(0, ge=0)
    workers: int | None = Field(None, ge=1)
    backend: str = "process"
    band: tuple[float, float] = (0.2, 0.8)
    confidence: float = Field(0.9, gt=0.5, lt=1.0)
    min_rollouts: int = Field(10, ge=5, le=9_999, description="first learnability batch; grown by half while the interval is undecided")
    max_rollouts: int = Field(80, ge=5, le=9_999)
    candidate_timeout_s: float = Field(300.0, gt=0)
    transfer_steps: int = Field(
        0,
        ge=0,
        description="with N > 0, the transfer gate: a candidate that passed every other gate is admitted only if a copy of "
        "the learner fine-tuned N steps on the original env and the candidate (half each) then solves more fresh levels "
        "of the original env than a copy fine-tuned N steps on the original env alone; the copies are thrown away, and "
        "their steps count as the rigger arm's `transfer` interaction",
    )
    transfer_episodes: int = Field(40, ge=10, le=10_000, description="original-env levels the transfer gate scores both copies on")

    @field_validator("learner")
    @classmethod
    def _known_learner(cls, value: str) -> str:
        if value not in LEARNERS:
            raise ValueError(f"--learner: got {value!r}; use one of {', '.join(LEARNERS)}")
        return value

    @field_validator("arms")
    @classmethod
    def _known_arms(cls, value: list[str]) -> list[str]:
        unknown = [a for a in value if a not in ARMS]
        if unknown or not value or len(set(value)) != len(value):
            raise ValueError(f"--arms: got {','.join(value)!r}; give distinct arms from {','.join(ARMS)}")
        return [a for a in ARMS if a in value]  # a fixed order, so every run trains arms alike

    @model_validator(mode="after")
    def _heldout_is_the_same_env(self) -> LoopConfig:
        held = self.heldout_spec
        if held is not None and (held.env_id != self.spec.env_id or held.transforms):
            raise ValueError(
                f"heldout_spec: got {held.env_id} with {len(held.transforms)} transform(s); give {self.spec.env_id} "
                "with other env kwargs and no transforms, so held-out levels are judged by the same verifier"
            )
        return self

    @property
    def heldout_base(self) -> HarnessSpec:
        """The env the held-out levels are drawn from: :attr:`heldout_spec`, else :attr:`spec`."""
        return self.heldout_spec or self.spec

    def validation(self) -> ValidationConfig:
        return ValidationConfig(
            band=self.band,
            confidence=self.confidence,
            min_rollouts=self.min_rollouts,
            max_rollouts=max(self.max_rollouts, self.min_rollouts),
            timeout_s=self.candidate_timeout_s,
            backend=self.backend,
            workers=self.workers,
        )


class LevelSplit(BaseModel):
    """The reserved levels of a run: held-out (looked at once, at the end) and validation (picks rounds).

    Built once by :meth:`make` and saved as ``levels.json``. ``reserved`` is what training,
    collection and candidate validation must never play.
    """

    heldout_seeds: list[int]
    heldout_levels: list[str]
    validation_seeds: list[int]
    validation_levels: list[str]
    disjoint: bool = Field(description="False when the run allows seen levels and reserves nothing")

    @property
    def reserved(self) -> set[str]:
        return set(self.heldout_levels) | set(self.validation_levels) if self.disjoint else set()

    @classmethod
    def make(cls, base: HarnessSpec, config: LoopConfig, probe: int = 200) -> LevelSplit:
        """Draw the held-out and validation levels, or refuse an env with too few distinct levels."""
        heldout = [EVAL_SEED + i for i in range(config.eval_episodes)]
        scan = Seeds(base, 0)
        try:
            if config.heldout_spec is None:
                held = {scan.level(s) for s in heldout}
            else:
                other = Seeds(config.heldout_spec, 0)
                try:
                    held = {other.level(s) for s in heldout}
                finally:
                    other.close()
            if config.allow_seen_levels:
                val = [SELECT_SEED + i for i in range(config.val_episodes)]
                return cls(
                    heldout_seeds=heldout,
                    heldout_levels=sorted(held),
                    validation_seeds=val,
                    validation_levels=sorted({scan.level(s) for s in val}),
                    disjoint=False,
                )
            val_levels: set[str] = set()
            val = first_free(base, range(SELECT_SEED, SELECT_SEED + 20 * config.val_episodes), held, config.val_episodes, val_levels)
            reserved = held | val_levels
            taken = sum(scan.level(TRAIN_SEED + i) in reserved for i in range(probe))
        finally:
            scan.close()
        if len(val) < config.val_episodes or taken > probe // 2:
            raise TrajectoryError(
                f"{base.env_id} has too few distinct levels for level-disjoint held-out evaluation: {len(held)} distinct levels "
                f"among {len(heldout)} held-out seeds, and {taken} of {probe} training seeds land on a held-out or validation level; "
                "use a procedurally generated env (e.g. MiniGrid-DoorKey-6x6-v0), or --allow-seen-levels to evaluate on "
                "seeds of levels the learners also train on"
            )
        return cls(
            heldout_seeds=heldout, heldout_levels=sorted(held), validation_seeds=val, validation_levels=sorted(val_levels), disjoint=True
        )

    def check(self, used: dict[str, set[str]]) -> dict[str, int]:
        """Overlap of each use (``"arm:train"``, ``"collect"``...) with the reserved levels; raises if a disjoint split overlaps.

        Example:
            >>> split = LevelSplit(heldout_seeds=[1], heldout_levels=["a"], validation_seeds=[2], validation_levels=["b"], disjoint=True)
            >>> split.check({"original:train": {"c", "d"}})
            {'original:train': 0}
            >>> split.check({"original:train": {"a", "c"}})
            Traceback (most recent call last):
            ...
            envrigger.trajectory.TrajectoryError: level overlap: original:train played 1 held-out or validation level(s) (a); the held-out result would not be on unseen levels
        """
        reserved = set(self.heldout_levels) | set(self.validation_levels)
        overlap = {use: sorted(levels & reserved) for use, levels in used.items()}
        if self.disjoint:
            for use, shared in overlap.items():
                if shared:
                    raise TrajectoryError(
                        f"level overlap: {use} played {len(shared)} held-out or validation level(s) "
                        f"({', '.join(shared[:3])}); the held-out result would not be on unseen levels"
                    )
        return {use: len(shared) for use, shared in overlap.items()}


def evaluate(
    policy: Any, spec: HarnessSpec, seeds: list[int], out: Path, config: LoopConfig, trained_on: set[str] | None = None
) -> dict[str, Any]:
    """Success of ``policy`` on the original env with its original verifier, one episode per seed.

    Reports the success rate with its Wilson interval (over these episodes of one learner),
    the mean episode length, the mean length of successful episodes (steps to success), the
    env steps taken, the number of distinct levels and, with ``trained_on``, the share of
    episodes on a level the learner trained on.
    """
    store = rollout(spec, policy, seeds=seeds, backend=config.backend, workers=config.workers, out=out)
    table = store.episodes_table(["success", "length", "level_id"])
    success = table.column("success").to_numpy(zero_copy_only=False).astype(bool)
    lengths = table.column("length").to_numpy()
    wins = int(success.sum())
    lo, hi = wilson(wins, len(seeds))
    levels = table.column("level_id").to_pylist()
    result = {
        "success": wins / len(seeds),
        "ci": [lo, hi],
        "episodes": len(seeds),
        "mean_length": float(np.mean(lengths)),
        "steps_to_success": float(np.mean(lengths[success])) if wins else None,
        "env_steps": int(lengths.sum()),
        "levels": len(set(levels)),
    }
    if trained_on is not None:
        result["seen_in_training"] = sum(level in trained_on for level in levels) / len(levels)
    return result


def _save_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def _same_spaces(spec: HarnessSpec, spaces: tuple[Any, Any]) -> bool:
    env = spec.build()
    try:
        return (env.observation_space, env.action_space) == spaces
    finally:
        env.close()


class _Arm:
    """One arm's learner and level stream during a run."""

    def __init__(self, name: str, learner: Any, replay: PLR | None = None) -> None:
        self.name, self.learner, self.replay = name, learner, replay

    def path(self, out: Path, number: int) -> Path:
        return out / f"{self.name}-round-{number}"


def _rigger_round(
    workdir: Path,
    config: LoopConfig,
    library: Library,
    learner: Any,
    number: int,
    reserved: set[str],
    spaces: tuple[Any, Any],
    evidence: Evidence,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Diagnose, propose, validate and admit, after the rigger arm trained this round; admissions train from the next round.

    The diagnosis reads the learner's own last training episodes on the original env; only
    if there are fewer than ``collect_episodes`` of them are the rest collected fresh.
    """
    base = config.spec
    rng = np.random.default_rng([config.seed, number])
    seconds: dict[str, float] = {}
    clock = time.perf_counter()
    policy = learner.policy()
    store = evidence.save(workdir / "evidence", base, policy.policy_id)
    recorded = len(evidence.episodes)
    missing = config.collect_episodes - recorded
    collect_steps, collect_levels = 0, set()
    if missing > 0:  # too few training episodes on the original env: collect the rest, into the same run
        collect_seeds = first_free(base, range(COLLECT_SEED + 10_000 * number, COLLECT_SEED + 10_000 * (number + 1)), reserved, missing)
        log(f"round {number}: {recorded} training episodes on the original env as evidence; collecting {missing} more")
        store = rollout(base, policy, seeds=collect_seeds, backend=config.backend, workers=config.workers, out=workdir / "evidence")
        table = store.episodes_table(["episode_id", "length", "level_id"])
        fresh = table.filter(pc.greater_equal(table.column("episode_id"), recorded))
        collect_steps, collect_levels = int(np.sum(fresh.column("length").to_numpy())), set(fresh.column("level_id").to_pylist())
    seconds["collect"], clock = time.perf_counter() - clock, time.perf_counter()
    diagnosis = diagnose(store)
    (workdir / "diagnosis.json").write_text(diagnosis.model_dump_json(indent=2))
    seconds["diagnose"], clock = time.perf_counter() - clock, time.perf_counter()
    # A round that restarts after a crash sees the library as it was when the round began: what
    # its killed attempt admitted is validated again (and admitted again under the same id), so
    # a resumed run reports exactly what an uninterrupted one does.
    before = [c for c in library.components() if c.round is None or c.round < number]
    admitted_before = [(c.hash, c.spec, c.finding) for c in before]
    # An agent that rarely succeeds cannot learn a harder env inside the band: try the reshapings that ease levels first.
    proposals = propose(diagnosis, base, rng, admitted=admitted_before, easing_first=diagnosis.success_rate < config.band[0])
    # A learner trains on every env of its curriculum at once: they must share its observation and action spaces.
    usable = [c for c in proposals if _same_spaces(c.spec, spaces)]
    # Mutations of admitted components (ACCEL) get up to half of the slots; catalog proposals the rest.
    mutations = [c for c in usable if c.origin == "mutation"][: config.candidates_per_round // 2]
    catalog = [c for c in usable if c.origin != "mutation"][: config.candidates_per_round - len(mutations)]
    candidates = catalog + mutations
    seconds["propose"], clock = time.perf_counter() - clock, time.perf_counter()
    log(f"round {number}: {len(diagnosis.findings)} findings, {len(candidates)} candidates to validate")
    validator = Validator(policy, base, workdir / "validate", config.validation())
    validation_levels: set[str] = set()
    validation_seeds = first_free(
        base,
        range(VALIDATE_SEED + 10_000 * number, VALIDATE_SEED + 10_000 * (number + 1)),
        reserved,
        config.max_rollouts + config.min_rollouts,
        validation_levels,
    )
    admitted: list[Any] = []
    rejected: dict[str, int] = {}
    transfer_steps, transfer_levels = 0, set[str]()
    for index, candidate in enumerate(candidates):
        current = [(c.hash, c.spec) for c in library.components() if c.round is None or c.round < number or c.id in admitted]
        result = validator.validate(candidate, validation_seeds, current)
        if result.passed and config.transfer_steps:
            gate, steps, levels = _transfer_gate(workdir / f"transfer-{index}", config, learner, candidate.spec, number, index, reserved)
            transfer_steps, transfer_levels = transfer_steps + steps, transfer_levels | levels
            result.gates.append(gate)
            result.passed = gate.passed
            log(f"round {number}: transfer gate {'passed' if gate.passed else 'failed'}: {gate.detail}")
        if result.passed:
            component = library.admit(
                candidate.spec,
                finding=candidate.finding,
                rationale=candidate.rationale,
                gates=[g.model_dump() for g in result.gates],
                seeds=result.seeds,
                agent_id=policy.policy_id,
                finding_stats=candidate.finding_stats,
                origin=candidate.origin,
                parent=candidate.parent,
                round=number,
            )
            admitted.append(component)
        else:
            failed = result.error or next((g.gate for g in result.gates if not g.passed), "unknown")
            rejected[failed.split(":")[0]] = rejected.get(failed.split(":")[0], 0) + 1
    seconds["validate"] = time.perf_counter() - clock
    return {
        "seconds": seconds,
        "evidence": {"training_episodes": len(evidence.episodes), "collected": max(missing, 0)},
        "collected_success": diagnosis.success_rate,
        "findings": [f.name for f in diagnosis.findings[:5]],
        "candidates": len(candidates),
        "admitted": admitted,
        "rejected_by": rejected,
        "collect_steps": collect_steps,
        "validate_steps": validator.env_steps,
        "transfer_steps": transfer_steps,
        "collect_levels": collect_levels,
        "validate_levels": validation_levels,
        "transfer_levels": transfer_levels,
    }


def _transfer_gate(
    workdir: Path, config: LoopConfig, learner: Any, candidate: HarnessSpec, number: int, index: int, reserved: set[str]
) -> tuple[GateResult, int, set[str]]:
    """Does training on ``candidate`` help on the original env? Fine-tune two copies of ``learner`` and compare them there.

    Both copies start from the learner's weights, train ``transfer_steps`` from the same
    seed on the same stream of fresh original-env seeds (one on the original env only, the
    other on it and the candidate, half each), then play the same ``transfer_episodes``
    fresh original-env levels; the candidate passes only if its copy solves more of them
    (fail closed: a tie or an error fails). No level is reserved (held-out or validation).
    Returns the gate, the env steps both copies took, and the base levels they played.
    """
    base = config.spec
    shutil.rmtree(workdir, ignore_errors=True)  # scored afresh every time
    workdir.mkdir(parents=True)
    start = TRANSFER_SEED + 10_000_000 * number + 100_000 * index
    scored_levels: set[str] = set()
    scored_seeds = first_free(base, range(start, start + 20 * config.transfer_episodes), reserved, config.transfer_episodes, scored_levels)
    saved = workdir / "start"
    learner.save(saved)
    probe = base.build()
    success: dict[str, float] = {}
    steps, levels = 0, set(scored_levels)
    try:
        for name, specs, sampler in (
            ("original", [base], Fixed()),
            ("with", [base, candidate], Uniform(2, np.random.default_rng([config.seed, number, index, 5]))),
        ):
            copy = _Arm(name, load_learner(config.learner, saved, probe))
            trained = _train_arm(copy, specs, sampler, config, number, reserved, start=start + 50_000, steps=config.transfer_steps)
            steps, levels = steps + trained["steps"], levels | trained["levels"]
            scored = evaluate(copy.learner.policy(), base, scored_seeds, workdir / f"score-{name}", config)
            success[name], steps = scored["success"], steps + scored["env_steps"]
    except Exception as error:  # noqa: BLE001 - a candidate that cannot be trained on fails the gate
        return GateResult(gate="transfer", passed=False, detail=f"fine-tuning failed: {error}"), steps, levels
    finally:
        probe.close()
    passed = success["with"] > success["original"]
    detail = (
        f"after {config.transfer_steps} fine-tuning steps, original-env success {success['with']:.3f} with the candidate vs "
        f"{success['original']:.3f} without, on {len(scored_seeds)} fresh levels"
    )
    statistic = {**success, "episodes": len(scored_seeds), "steps": config.transfer_steps}
    return GateResult(gate="transfer", passed=passed, statistic=statistic, detail=detail), steps, levels


def _train_arm(
    arm: _Arm,
    specs: list[HarnessSpec],
    sampler: Any,
    config: LoopConfig,
    number: int,
    reserved: set[str],
    evidence: Evidence | None = None,
    start: int | None = None,
    steps: int | None = None,
) -> dict[str, Any]:
    """Train ``arm`` for ``steps`` (default the round's budget) on fresh seeds from ``start`` (default the round's training seeds)."""
    seeds = Seeds(config.spec, TRAIN_SEED + 1_000_000 * number if start is None else start, reserved)
    replays_before = sampler.replays
    envs: list[MixtureEnv] = []
    picks = np.zeros(len(specs), dtype=int)

    def count(index: int, seed: int, success: bool, length: int) -> None:
        picks[index] += 1

    def make() -> MixtureEnv:
        env = MixtureEnv(specs, sampler, seeds, on_episode=count, evidence=evidence)
        envs.append(env)
        return env

    try:
        taken = arm.learner.train(make, config.budget_steps if steps is None else steps, seed=config.seed * 100_003 + number)
    finally:
        seeds.close()
    return {
        "steps": taken,
        "episodes": int(picks.sum()),
        "picks": picks.tolist(),
        "levels": seeds.levels,
        "skipped_reserved": seeds.skipped,
        "refused": sum(e.refused for e in envs),
        "replays": sampler.replays - replays_before,
    }


def _load_levels(out: Path) -> dict[str, set[str]]:
    """Every level id each use played in the rounds before (empty at the start)."""
    rounds = sorted(out.glob("levels-round-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    saved = json.loads(rounds[-1].read_text()) if rounds else {}
    return {use: set(levels) for use, levels in saved.items()}


def run_loop(
    out: str | Path,
    config: LoopConfig | None = None,
    on_round: Callable[[dict], None] | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Run (or, without ``config``, resume) a loop in ``out``; returns ``{"rounds": [...], "final": {...}}``.

    ``final`` holds, per arm, the round picked on validation levels and its held-out
    result, the env steps spent, and the level-overlap check (see :class:`LevelSplit`).
    """
    out = Path(out)
    with _writer(out):  # one writer per loop directory: a second run or --resume is refused
        return _run_loop(out, config, on_round, log)


@contextlib.contextmanager
def _writer(out: Path) -> Iterator[None]:
    """Hold ``out``'s :class:`DirectoryLock`; a directory made here and left empty by a refusal is removed again."""
    if out.exists() and not out.is_dir():
        raise TrajectoryError(f"{out} is a file; choose a directory for the run")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with DirectoryLock(out):
            yield
    except BaseException:
        if created and all(path.name == DirectoryLock.NAME for path in out.iterdir()):
            shutil.rmtree(out, ignore_errors=True)
        raise


def _run_loop(out: Path, config: LoopConfig | None, on_round: Callable[[dict], None] | None, log: Callable[[str], None]) -> dict[str, Any]:
    config_path = out / "loop.json"
    if config is None:
        if not config_path.is_file():
            raise TrajectoryError(f"--resume: {out} holds no loop run (no loop.json); start one with `envrigger run ENV -o {out}`")
        config = LoopConfig.model_validate_json(config_path.read_text())
    elif config_path.is_file():
        raise TrajectoryError(f"{out} already holds a loop run; resume it with `envrigger run --resume {out}` or pick a new directory")
    base = config.spec
    probe = base.build()
    spaces = (probe.observation_space, probe.action_space)
    split_path = out / "levels.json"
    if split_path.is_file():
        split = LevelSplit.model_validate_json(split_path.read_text())
    else:
        log("drawing held-out and validation levels")
        split = LevelSplit.make(base, config)  # refuses before anything is written
    if not config_path.is_file():
        out.mkdir(parents=True, exist_ok=True)
        _save_json(config_path, json.loads(config.model_dump_json()))
    if not split_path.is_file():
        _save_json(split_path, json.loads(split.model_dump_json()))
    reserved = split.reserved
    library = Library(out / "library.db")
    done = library.rounds()
    arms = []
    for name in config.arms:
        if done:
            learner = load_learner(config.learner, _Arm(name, None).path(out, done[-1]["round"]), probe)
        else:
            learner = make_learner(config.learner, probe, config.seed, **config.learner_params)
        # The plr and rigger arms keep a replay buffer of levels across rounds (and resumes).
        replay = PLR(np.random.default_rng([config.seed, 3 if name == "plr" else 4])) if name in ("plr", "rigger") else None
        if replay is not None and done and (out / f"{name}-replay.json").is_file():
            replay.restore(json.loads((out / f"{name}-replay.json").read_text()))
        arms.append(_Arm(name, learner, replay))
    probe.close()
    summaries = list(done)
    for number in range(len(done) + 1, config.rounds + 1):
        started = time.perf_counter()
        workdir = out / f"round-{number}"
        shutil.rmtree(workdir, ignore_errors=True)  # an unfinished round starts over
        workdir.mkdir(parents=True)
        used = _load_levels(out)
        summary: dict[str, Any] = {"round": number, "arms": {}}
        for arm in arms:
            spent = {"train": 0, "collect": 0, "validate": 0}
            evidence = None
            sampler: Fixed
            if arm.name == "rigger":
                # As the round began: a round restarted after a crash does not see what its killed attempt admitted.
                present = library.components()
                components = [c.spec for c in present if c.round is None or c.round < number]
                assert arm.replay is not None
                arm.replay.chooser = Curriculum(1 + len(components), np.random.default_rng([config.seed, number, 1]))
                specs, sampler = [base, *components], arm.replay
                summary["library_size"] = len(components)
                summary["library_version"] = library.version - sum(c.round == number for c in present)
                evidence = Evidence(config.collect_episodes, config.budget_steps // 2)
            elif arm.name == "dr":
                pool = random_specs(base, np.random.default_rng([config.seed, number, 2]), config.dr_pool)
                specs, sampler = [base, *pool], Uniform(1 + len(pool), np.random.default_rng([config.seed, number, 2]))
            elif arm.name == "plr":
                assert arm.replay is not None
                specs, sampler = [base], arm.replay
            else:
                specs, sampler = [base], Fixed()
            log(f"round {number}: training the {arm.name} arm on {len(specs)} env(s) for {config.budget_steps:,} steps")
            clock = time.perf_counter()
            trained = _train_arm(arm, specs, sampler, config, number, reserved, evidence)
            seconds = {"train": time.perf_counter() - clock}
            used.setdefault(f"{arm.name}:train", set()).update(trained.pop("levels"))
            spent["train"] = trained["steps"]
            if evidence is not None and number < config.rounds:  # what the last round would admit, no round trains on
                rigged = _rigger_round(workdir, config, library, arm.learner, number, reserved, spaces, evidence, log)
                spent.update(collect=rigged.pop("collect_steps"), validate=rigged.pop("validate_steps"))
                transfer_steps, transfer_levels = rigged.pop("transfer_steps"), rigged.pop("transfer_levels")
                if config.transfer_steps:
                    spent["transfer"] = transfer_steps
                    used.setdefault("rigger:transfer", set()).update(transfer_levels)
                used.setdefault("rigger:collect", set()).update(rigged.pop("collect_levels"))
                used.setdefault("rigger:validate", set()).update(rigged.pop("validate_levels"))
                seconds.update(rigged.pop("seconds"))
                summary.update(rigged)
            spent["total"] = spent["train"] + spent["collect"] + spent["validate"] + spent.get("transfer", 0)
            clock = time.perf_counter()
            scored = evaluate(arm.learner.policy(), base, split.validation_seeds, workdir / f"select-{arm.name}", config)
            seconds["select"] = time.perf_counter() - clock
            summary["arms"][arm.name] = {"train": trained, "interaction": spent, "validation": scored}
            summary.setdefault("stage_seconds", {})[arm.name] = seconds  # wall time by stage, like wall_time not stable
        summary["wall_time"] = time.perf_counter() - started
        for arm in arms:
            arm.learner.save(arm.path(out, number))
        for arm in arms:
            if arm.replay is not None:
                _save_json(out / f"{arm.name}-replay.json", arm.replay.state())
        _save_json(out / f"levels-round-{number}.json", {use: sorted(levels) for use, levels in used.items()})
        library.complete_round(number, summary)  # the commit point of the round
        summaries.append(summary)
        if on_round is not None:
            on_round(summary)
    library.close()
    final_path = out / "final.json"
    if final_path.is_file():
        final = json.loads(final_path.read_text())
    else:
        final = _final(out, config, split, summaries, log)
        _save_json(final_path, final)
    return {"rounds": summaries, "final": final}


def _final(out: Path, config: LoopConfig, split: LevelSplit, summaries: list[dict[str, Any]], log: Callable[[str], None]) -> dict[str, Any]:
    """Pick each arm's round on validation levels, then evaluate it once on the held-out levels."""
    used = _load_levels(out)
    overlap = split.check(used)
    probe = config.spec.build()
    arms: dict[str, Any] = {}
    for name in config.arms:
        scores = [(s["arms"][name]["validation"]["success"], s["round"]) for s in summaries]
        best = max(scores)[1]  # ties go to the later round
        learner = load_learner(config.learner, _Arm(name, None).path(out, best), probe)
        log(f"held-out evaluation of the {name} arm (round {best}, picked on validation levels)")
        trained_on = used.get(f"{name}:train", set())
        shutil.rmtree(out / f"heldout-{name}", ignore_errors=True)  # an evaluation a crash cut short starts over
        heldout = evaluate(learner.policy(), config.heldout_base, split.heldout_seeds, out / f"heldout-{name}", config, trained_on)
        spent = {
            k: sum(s["arms"][name]["interaction"].get(k, 0) for s in summaries)
            for k in ("train", "collect", "validate", "transfer", "total")
        }
        spent["select"] = sum(s["arms"][name]["validation"]["env_steps"] for s in summaries)
        arms[name] = {
            "round": best,
            "validation": summaries[best - 1]["arms"][name]["validation"]["success"],
            "heldout": heldout,
            "interaction": spent,
        }
    probe.close()
    warnings = []
    if "rigger" in arms and "original" in arms and arms["rigger"]["heldout"]["success"] < arms["original"]["heldout"]["success"]:
        warnings.append(
            f"the rigger arm ended below the original-env baseline on held-out levels "
            f"({arms['rigger']['heldout']['success']:.3f} < {arms['original']['heldout']['success']:.3f}): its curriculum "
            "did not help here; `envrigger export` asks for --force"
        )
        log("warning: " + warnings[-1])
    return {
        "arms": arms,
        "warnings": warnings,
        "levels": {
            "disjoint": split.disjoint,
            "heldout": len(split.heldout_levels),
            "validation": len(split.validation_levels),
            "overlap": overlap,
        },
    }


# Two-sided 95% quantiles of Student's t by degrees of freedom (n - 1 seeds); 1.96 beyond 30.
_T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
}


def _interval(values: np.ndarray, bounds: tuple[float, float] = (-np.inf, np.inf)) -> dict[str, Any]:
    """Mean and 95% t interval across ``values`` (one per seed), the interval clipped to ``bounds``."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return {"mean": mean, "ci": [mean, mean], "n": len(values)}
    half = _T975.get(len(values) - 1, 1.96) * float(np.std(values, ddof=1)) / float(np.sqrt(len(values)))
    return {"mean": mean, "ci": [max(mean - half, bounds[0]), min(mean + half, bounds[1])], "n": len(values)}


def across_seeds(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Held-out success per arm across training seeds: mean, 95% t interval, paired differences.

    ``runs`` maps each master seed to its :func:`run_loop` result. The interval is across
    seeds (each seed trains every arm from scratch), never across episodes of one run; the
    difference of ``rigger`` (or the last arm) against each other arm is paired by seed.
    Steps to success are the mean length of the successful held-out episodes; env steps
    are each arm's totals over all rounds (training, plus collection and validation for
    the rigger arm), averaged over seeds.

    Example:
        >>> def run(rigger, original):
        ...     arm = lambda s: {"heldout": {"success": s, "steps_to_success": 10.0}, "interaction": {"train": 100, "total": 100}}
        ...     return {"final": {"arms": {"original": arm(original), "rigger": arm(rigger)}}}
        >>> result = across_seeds({0: run(0.9, 0.5), 1: run(0.7, 0.5), 2: run(0.8, 0.6)})
        >>> d = result["difference"]["original"]
        >>> round(d["mean"], 2), [round(x, 2) for x in d["ci"]]
        (0.27, [-0.02, 0.55])
    """
    seeds = sorted(runs)
    arms = list(runs[seeds[0]]["final"]["arms"])
    finals = {arm: [runs[seed]["final"]["arms"][arm] for seed in seeds] for arm in arms}
    success = {arm: np.array([f["heldout"]["success"] for f in finals[arm]]) for arm in arms}
    out: dict[str, Any] = {"seeds": seeds, "arms": {}, "difference": {}}
    for arm in arms:
        steps = [f["heldout"].get("steps_to_success") for f in finals[arm]]
        solved = [s for s in steps if s is not None]
        out["arms"][arm] = {
            "success": _interval(success[arm], (0.0, 1.0)),  # a rate: its interval stays inside [0, 1]
            "steps_to_success": float(np.mean(solved)) if solved else None,
            "env_steps": {k: float(np.mean([f["interaction"].get(k, 0) for f in finals[arm]])) for k in ("train", "total")},
            "rounds": [f.get("round") for f in finals[arm]],
        }
    focus = "rigger" if "rigger" in arms else arms[-1]
    out["focus"] = focus
    for arm in arms:
        if arm != focus:
            entry = _interval(success[focus] - success[arm], (-1.0, 1.0))
            mine, theirs = out["arms"][focus]["steps_to_success"], out["arms"][arm]["steps_to_success"]
            entry["steps_to_success_change"] = (mine - theirs) / theirs if mine is not None and theirs else None
            out["difference"][arm] = entry
    return out


class SeedsRun(BaseModel):
    """One multi-seed run for :func:`run_many`: its directory, its config (None resumes it), master seeds, a log label."""

    out: Path
    config: LoopConfig | None = None
    seeds: int = Field(1, ge=1)
    label: str = ""


def run_seeds(
    out: str | Path,
    config: LoopConfig | None,
    seeds: int = 1,
    on_round: Callable[[dict], None] | None = None,
    log: Callable[[str], None] = lambda message: None,
    jobs: int = 1,
) -> dict[str, Any]:
    """Run (or, without ``config``, resume) one loop per master seed in ``out/seed-S``; returns :func:`across_seeds`.

    Master seeds are ``config.seed .. config.seed + seeds - 1``; each trains every arm's
    learner from scratch, so their spread is what an interval across training seeds needs.
    Resuming (``config`` None) with a larger ``seeds`` adds the next master seeds to the run.
    With ``jobs`` > 1, that many seeds train at once, each in its own process (see
    :func:`run_many`); every seed's result is the same as when the seeds run one by one.
    """
    return run_many([SeedsRun(out=Path(out), config=config, seeds=seeds)], jobs, on_round, log)[0]


def run_many(
    runs: list[SeedsRun],
    jobs: int = 1,
    on_round: Callable[[dict], None] | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> list[dict[str, Any]]:
    """Run (or resume) several multi-seed runs, ``jobs`` master seeds at a time; returns each run's :func:`across_seeds`.

    With ``jobs`` = 1 the seeds run here, one after another. Otherwise each seed is a fresh
    process (``spawn``, like a separate ``envrigger run``), started in seed order across the
    runs (seed 0 of every run first), so a result is the same whatever ``jobs`` is; their
    log lines carry the run's label and the seed, and ``on_round`` must then be a module-level
    function (it is called in the seed's process). A seed that fails does not stop the
    others already running; once they end, the error names every failed seed, and calling
    again resumes where each stopped.
    """
    if jobs < 1:
        raise TrajectoryError(f"--jobs: got {jobs}; give 1 or more processes")
    with contextlib.ExitStack() as stack:
        plans = []
        for run in runs:
            stack.enter_context(_writer(run.out))
            plans.append((run, *_plan_seeds(run.out, run.config, run.seeds)))
        tasks = []  # (directory, config for a new loop or None to resume, label), seed-major
        for offset in range(max(seeds for _, _, seeds in plans)):
            for run, config, seeds in plans:
                if offset < seeds:
                    seed, where = config.seed + offset, run.out / f"seed-{config.seed + offset}"
                    fresh = None if (where / "loop.json").is_file() else config.model_copy(update={"seed": seed})
                    tasks.append((where, fresh, f"{run.label}master seed {seed}: "))
        if jobs == 1:
            for where, fresh, label in tasks:
                log(f"{label}{where}")
                run_loop(where, fresh, on_round=on_round, log=_prefixed(log, label))
        else:
            _parallel(tasks, jobs, on_round, log)
        results = []
        for run, config, seeds in plans:
            finals = {
                seed: {"final": json.loads((run.out / f"seed-{seed}" / "final.json").read_text())}
                for seed in range(config.seed, config.seed + seeds)
            }
            result = across_seeds(finals)
            _save_json(run.out / "result.json", result)
            results.append(result)
        return results


def _prefixed(log: Callable[[str], None], label: str) -> Callable[[str], None]:
    return lambda message: log(label + message)


def _plan_seeds(out: Path, config: LoopConfig | None, seeds: int) -> tuple[LoopConfig, int]:
    """The config and seed count of the multi-seed run in ``out``: saved in ``seeds.json`` when new, read back when resumed.

    Resuming with more ``seeds`` than the run was started with extends it by the next master seeds; fewer never shrinks it.
    """
    plan = out / "seeds.json"
    if config is None:
        if not plan.is_file():
            raise TrajectoryError(f"--resume: {out} holds no multi-seed run (no seeds.json)")
        saved = json.loads(plan.read_text())
        if seeds > int(saved["seeds"]):  # asked for more master seeds than the run has: add the next ones
            _save_json(plan, {**saved, "seeds": seeds})
        return LoopConfig.model_validate(saved["config"]), max(seeds, int(saved["seeds"]))
    if plan.is_file():
        raise TrajectoryError(f"{out} already holds a multi-seed run; resume it with `envrigger run --resume {out}`")
    LevelSplit.make(config.spec, config)  # an env without enough levels is refused before anything is written
    out.mkdir(parents=True, exist_ok=True)
    _save_json(plan, {"config": json.loads(config.model_dump_json()), "seeds": seeds})
    return config, seeds


def _seed_process(where: str, fresh: str | None, label: str, on_round: Callable[[dict], None] | None) -> None:
    """One master seed in its own process: the loop in ``where``, its log lines on stdout with ``label``."""
    config = None if fresh is None else LoopConfig.model_validate_json(fresh)
    run_loop(where, config, on_round=on_round, log=lambda m: print(label + m, flush=True))


def _parallel(tasks: list[tuple[Path, LoopConfig | None, str]], jobs: int, on_round: Any, log: Callable[[str], None]) -> None:
    """Run every task in a process of its own, at most ``jobs`` at once; raise naming the seeds that failed."""
    import multiprocessing
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")
    waiting, failed = list(tasks), list[str]()
    running: dict[Any, tuple[Any, Path]] = {}
    try:
        while waiting or running:
            while waiting and len(running) < jobs and not failed:
                where, fresh, label = waiting.pop(0)
                log(f"{label}{where} (in a process of its own)")
                process = context.Process(
                    target=_seed_process,
                    args=(str(where), None if fresh is None else fresh.model_dump_json(), label, on_round),
                    name=f"envrigger {where}",
                )
                process.start()
                running[process.sentinel] = (process, where)
            if not running:
                break
            for sentinel in wait(list(running)):
                process, where = running.pop(sentinel)
                process.join()
                if process.exitcode != 0:
                    failed.append(f"{where} (exit code {process.exitcode})")
    finally:
        for process, _ in running.values():  # interrupted: a seed is resumable, so stop the rest
            process.terminate()
            process.join()
    if failed:
        raise TrajectoryError(
            f"{len(failed)} master seed(s) failed: {'; '.join(failed)}; their errors are in the log above; "
            "run the same command again to resume every unfinished seed"
        )
