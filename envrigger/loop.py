"""The EnvRigger loop: collect, diagnose, propose, validate, admit, train, evaluate held-out.

Contains :class:`LoopConfig`, :class:`Curriculum` (learnability-weighted sampling with
PLR-style staleness), :func:`train_on`, :func:`evaluate`, :func:`run_loop`, and for claims
across training seeds :func:`run_seeds` and :func:`across_seeds`.

Every round ends with an atomic checkpoint of both learners and a committed round record
in the library database, so a run killed at any point (even ``kill -9``) resumes at the
first unfinished round without losing admitted components or completed rounds.

Seeds never overlap: held-out evaluation uses ``1_000_000 + i`` (every round, both
learners); round *r* collects on ``2_000_000 + 10_000 r + i``, validates on
``3_000_000 + 10_000 r + i`` and trains on ``4_000_000 + 1_000_000 r + i``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from envharness.spec import HarnessSpec
from envrigger.diagnose import diagnose
from envrigger.diagnose.model import wilson
from envrigger.library import Library
from envrigger.policies.learner import learn_episode
from envrigger.policies.qlearning import QLearner
from envrigger.propose import propose
from envrigger.rollout import rollout
from envrigger.trajectory import TrajectoryError
from envrigger.validate import ValidationConfig, Validator

EVAL_SEED, COLLECT_SEED, VALIDATE_SEED, TRAIN_SEED = 1_000_000, 2_000_000, 3_000_000, 4_000_000
LEARNERS = ("qlearning",)


class LoopConfig(BaseModel):
    """Everything a loop run needs; saved as ``loop.json`` so ``--resume`` continues the same run."""

    spec: HarnessSpec
    learner: str = Field("qlearning", description="learner kind")
    learner_params: dict[str, Any] = Field(default_factory=dict)
    rounds: int = Field(3, ge=1, le=1000)
    budget_steps: int = Field(20_000, ge=100, description="training steps per round, for each learner")
    collect_episodes: int = Field(60, ge=5, le=9_999)
    eval_episodes: int = Field(200, ge=10, le=100_000)
    candidates_per_round: int = Field(6, ge=1, le=100)
    seed: int = Field(0, ge=0)
    workers: int | None = Field(None, ge=1)
    backend: str = "process"
    band: tuple[float, float] = (0.2, 0.8)
    confidence: float = Field(0.9, gt=0.5, lt=1.0)
    min_rollouts: int = Field(30, ge=5, le=9_999)
    max_rollouts: int = Field(90, ge=5, le=9_999)
    candidate_timeout_s: float = Field(300.0, gt=0)

    def validation(self) -> ValidationConfig:
        return ValidationConfig(band=self.band, confidence=self.confidence, min_rollouts=self.min_rollouts,
                                max_rollouts=max(self.max_rollouts, self.min_rollouts), timeout_s=self.candidate_timeout_s,
                                backend=self.backend, workers=self.workers)


class Curriculum:
    """Samples training environments by learnability p(1-p), mixed with staleness (as in PLR).

    Example:
        >>> import numpy as np
        >>> c = Curriculum(3, np.random.default_rng(0))
        >>> for _ in range(50):
        ...     c.update(0, True)      # env 0 is solved: nothing left to learn there
        >>> picks = [c.sample() for _ in range(200)]
        >>> picks.count(0) < picks.count(1)
        True
    """

    def __init__(self, n: int, rng: np.random.Generator, staleness: float = 0.3) -> None:
        self.rng, self.staleness = rng, staleness
        self.wins, self.tries = np.zeros(n), np.zeros(n)
        self.last = np.zeros(n)
        self.clock = 0

    def scores(self) -> np.ndarray:
        p = (self.wins + 1) / (self.tries + 2)
        return p * (1 - p)

    def sample(self) -> int:
        self.clock += 1
        score = self.scores()
        stale = self.clock - self.last
        weights = (1 - self.staleness) * score / score.sum() + self.staleness * stale / stale.sum()
        choice = int(self.rng.choice(len(weights), p=weights / weights.sum()))
        self.last[choice] = self.clock
        return choice

    def update(self, index: int, success: bool, decay: float = 0.95) -> None:
        self.wins[index] = decay * self.wins[index] + success
        self.tries[index] = decay * self.tries[index] + 1


def make_learner(config: LoopConfig, env: Any, seed: int) -> QLearner:
    if config.learner not in LEARNERS:
        raise TrajectoryError(f"--learner: got {config.learner!r}; use one of {', '.join(LEARNERS)}")
    return QLearner(env.action_space, env.observation_space, seed=seed, **config.learner_params)


def train_on(learner: QLearner, specs: list[HarnessSpec], budget_steps: int, seeds: Callable[[int], int], rng: np.random.Generator,
             levels: set[str] | None = None) -> dict[str, Any]:
    """Train ``learner`` for ``budget_steps`` steps on a curriculum over ``specs`` (the first is the original).

    ``levels``, if given, collects the id of every level trained on.
    """
    envs = [spec.build() for spec in specs]
    curriculum = Curriculum(len(specs), rng)
    learner.training = True
    steps = episodes = 0
    picks = np.zeros(len(specs), dtype=int)
    try:
        while steps < budget_steps:
            index = curriculum.sample() if len(specs) > 1 else 0
            success, _, length = learn_episode(learner, envs[index], seeds(episodes), levels)
            steps += length
            curriculum.update(index, success)
            picks[index] += 1
            episodes += 1
    finally:
        learner.training = False
        for env in envs:
            env.close()
    return {"steps": steps, "episodes": episodes, "picks": picks.tolist()}


def evaluate(learner: QLearner, spec: HarnessSpec, seeds: list[int], out: Path, config: LoopConfig,
             trained_on: set[str] | None = None) -> dict[str, Any]:
    """Held-out success of ``learner`` on the original env with its original verifier.

    With ``trained_on`` (the level ids the learner trained on) it also reports the share
    of held-out episodes played on a level the learner had already seen.
    """
    store = rollout(spec, learner, seeds=seeds, backend=config.backend, workers=config.workers, out=out)
    table = store.episodes_table(["success", "length", "level_id"])
    wins = int(np.sum(table.column("success").to_numpy(zero_copy_only=False)))
    lo, hi = wilson(wins, len(seeds))
    out_dict = {"success": wins / len(seeds), "ci": [lo, hi], "mean_length": float(np.mean(table.column("length").to_numpy()))}
    if trained_on is not None:
        levels = table.column("level_id").to_pylist()
        out_dict["levels"] = len(set(levels))
        out_dict["seen_in_training"] = sum(level in trained_on for level in levels) / len(levels)
    return out_dict


def _load_seen(out: Path) -> dict[str, set[str]]:
    """The level ids each arm trained on in the rounds before (empty at the start)."""
    rounds = sorted(out.glob("levels-round-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    saved = json.loads(rounds[-1].read_text()) if rounds else {}
    return {arm: set(saved.get(arm, [])) for arm in ("curriculum", "baseline")}


def _save_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def run_loop(out: str | Path, config: LoopConfig | None = None, on_round: Callable[[dict], None] | None = None,
             log: Callable[[str], None] = lambda message: None) -> list[dict[str, Any]]:
    """Run (or, without ``config``, resume) a loop in ``out``; returns every round's summary."""
    out = Path(out)
    config_path = out / "loop.json"
    if config is None:
        if not config_path.is_file():
            raise TrajectoryError(f"--resume: {out} holds no loop run (no loop.json); start one with `envrigger run ENV -o {out}`")
        config = LoopConfig.model_validate_json(config_path.read_text())
    elif config_path.is_file():
        raise TrajectoryError(f"{out} already holds a loop run; resume it with `envrigger run --resume {out}` or pick a new directory")
    else:
        out.mkdir(parents=True, exist_ok=True)
        _save_json(config_path, json.loads(config.model_dump_json()))
    library = Library(out / "library.db")
    done = library.rounds()
    base = config.spec
    probe = base.build()
    if done:
        last = done[-1]["round"]
        learner = QLearner.load(str(out / f"learner-round-{last}.json"), probe)
        baseline = QLearner.load(str(out / f"baseline-round-{last}.json"), probe)
    else:
        learner = make_learner(config, probe, config.seed)
        baseline = make_learner(config, probe, config.seed)
    probe.close()
    eval_seeds = [EVAL_SEED + i for i in range(config.eval_episodes)]
    summaries = list(done)
    for number in range(len(done) + 1, config.rounds + 1):
        started = time.perf_counter()
        workdir = out / f"round-{number}"
        shutil.rmtree(workdir, ignore_errors=True)  # an unfinished round starts over
        rng = np.random.default_rng([config.seed, number])
        log(f"round {number}: collecting {config.collect_episodes} episodes")
        collected = rollout(base, learner, seeds=[COLLECT_SEED + 10_000 * number + i for i in range(config.collect_episodes)],
                            backend=config.backend, workers=config.workers, out=workdir / "collect")
        collect_steps = int(np.sum(collected.episodes_table(["length"]).column("length").to_numpy()))
        diagnosis = diagnose(collected)
        (workdir / "diagnosis.json").write_text(diagnosis.model_dump_json(indent=2))
        admitted_before = [(c.hash, c.spec, c.finding) for c in library.components()]
        candidates = propose(diagnosis, base, rng, admitted=admitted_before)[: config.candidates_per_round]
        log(f"round {number}: {len(diagnosis.findings)} findings, {len(candidates)} candidates to validate")
        validator = Validator(learner, base, workdir / "validate", config.validation())
        validation_seeds = [VALIDATE_SEED + 10_000 * number + i for i in range(config.max_rollouts + config.min_rollouts)]
        admitted, rejected = [], {}
        for candidate in candidates:
            current = [(c.hash, c.spec) for c in library.components()]
            result = validator.validate(candidate, validation_seeds, current)
            if result.passed:
                component = library.admit(candidate.spec, finding=candidate.finding, rationale=candidate.rationale,
                                          gates=[g.model_dump() for g in result.gates], seeds=result.seeds, agent_id=learner.policy_id,
                                          finding_stats=candidate.finding_stats, origin=candidate.origin, parent=candidate.parent,
                                          round=number)
                admitted.append(component)
            else:
                failed = result.error or next((g.gate for g in result.gates if not g.passed), "unknown")
                rejected[failed.split(":")[0]] = rejected.get(failed.split(":")[0], 0) + 1
        components = library.components()
        log(f"round {number}: admitted {len(admitted)}, library has {len(components)}; training")
        specs = [base, *(c.spec for c in components)]
        seen = _load_seen(out)  # every level id each arm trained on, over all rounds so far
        trained = train_on(learner, specs, config.budget_steps, lambda i: TRAIN_SEED + 1_000_000 * number + i,
                           np.random.default_rng([config.seed, number, 1]), seen["curriculum"])
        baseline_trained = train_on(baseline, [base], config.budget_steps, lambda i: TRAIN_SEED + 1_000_000 * number + i,
                                    np.random.default_rng([config.seed, number, 2]), seen["baseline"])
        heldout = evaluate(learner, base, eval_seeds, workdir / "eval-curriculum", config, seen["curriculum"])
        reference = evaluate(baseline, base, eval_seeds, workdir / "eval-baseline", config, seen["baseline"])
        _save_json(out / f"levels-round-{number}.json", {arm: sorted(ids) for arm, ids in seen.items()})
        summary = {
            "round": number,
            "collected_success": diagnosis.success_rate,
            "findings": [f.name for f in diagnosis.findings[:5]],
            "candidates": len(candidates),
            "admitted": admitted,
            "rejected_by": rejected,
            "library_size": len(components),
            "library_version": library.version,
            "train": trained,
            # Every env step each arm took this round (held-out evaluation aside): the baseline only trains.
            "interaction": {
                "curriculum": {"train": trained["steps"], "collect": collect_steps, "validate": validator.env_steps,
                               "total": trained["steps"] + collect_steps + validator.env_steps},
                "baseline": {"train": baseline_trained["steps"], "total": baseline_trained["steps"]},
            },
            "heldout_curriculum": heldout,
            "heldout_baseline": reference,
            "wall_time": time.perf_counter() - started,
        }
        learner.save(str(out / f"learner-round-{number}.json"))
        baseline.save(str(out / f"baseline-round-{number}.json"))
        library.complete_round(number, summary)  # the commit point of the round
        summaries.append(summary)
        if on_round is not None:
            on_round(summary)
    library.close()
    return summaries


# Two-sided 95% quantiles of Student's t by degrees of freedom (n - 1 seeds); 1.96 beyond 30.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
         21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}


def _interval(values: np.ndarray) -> dict[str, Any]:
    mean = float(np.mean(values))
    if len(values) < 2:
        return {"mean": mean, "ci": [mean, mean], "n": len(values)}
    half = _T975.get(len(values) - 1, 1.96) * float(np.std(values, ddof=1)) / float(np.sqrt(len(values)))
    return {"mean": mean, "ci": [mean - half, mean + half], "n": len(values)}


def across_seeds(runs: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """Final-round held-out success per arm across training seeds: mean, 95% t interval, the paired difference.

    ``runs`` maps each master seed to its round summaries. The interval is across seeds
    (each seed trains both learners from scratch), never across episodes of one run; the
    difference is paired by seed. Env steps are each arm's total over all rounds.

    Example:
        >>> def run(cur, base):
        ...     return [{"heldout_curriculum": {"success": cur}, "heldout_baseline": {"success": base},
        ...              "interaction": {"curriculum": {"total": 120}, "baseline": {"total": 100}}}]
        >>> result = across_seeds({0: run(0.9, 0.5), 1: run(0.7, 0.5), 2: run(0.8, 0.6)})
        >>> round(result["difference"]["mean"], 2), [round(x, 2) for x in result["difference"]["ci"]]
        (0.27, [-0.02, 0.55])
        >>> result["env_steps"]
        {'curriculum': 120.0, 'baseline': 100.0}
    """
    seeds = sorted(runs)
    finals = [runs[seed][-1] for seed in seeds]
    curriculum = np.array([f["heldout_curriculum"]["success"] for f in finals])
    baseline = np.array([f["heldout_baseline"]["success"] for f in finals])
    steps = {arm: float(np.mean([sum(r.get("interaction", {}).get(arm, {}).get("total", 0) for r in runs[seed]) for seed in seeds]))
             for arm in ("curriculum", "baseline")}
    return {"seeds": seeds, "curriculum": _interval(curriculum), "baseline": _interval(baseline),
            "difference": _interval(curriculum - baseline), "env_steps": steps}


def run_seeds(out: str | Path, config: LoopConfig | None, seeds: int = 1, on_round: Callable[[dict], None] | None = None,
              log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Run (or, without ``config``, resume) one loop per master seed in ``out/seed-S``; returns :func:`across_seeds`.

    Master seeds are ``config.seed .. config.seed + seeds - 1``; each trains its own pair of
    learners from scratch, so their spread is what an interval across training seeds needs.
    """
    out = Path(out)
    plan = out / "seeds.json"
    if config is None:
        if not plan.is_file():
            raise TrajectoryError(f"--resume: {out} holds no multi-seed run (no seeds.json)")
        saved = json.loads(plan.read_text())
        config, seeds = LoopConfig.model_validate(saved["config"]), int(saved["seeds"])
    elif plan.is_file():
        raise TrajectoryError(f"{out} already holds a multi-seed run; resume it with `envrigger run --resume {out}`")
    else:
        out.mkdir(parents=True, exist_ok=True)
        _save_json(plan, {"config": json.loads(config.model_dump_json()), "seeds": seeds})
    runs = {}
    for seed in range(config.seed, config.seed + seeds):
        where = out / f"seed-{seed}"
        log(f"master seed {seed}: {where}")
        started = (where / "loop.json").is_file()
        runs[seed] = run_loop(where, None if started else config.model_copy(update={"seed": seed}), on_round=on_round, log=log)
    result = across_seeds(runs)
    _save_json(out / "result.json", result)
    return result
