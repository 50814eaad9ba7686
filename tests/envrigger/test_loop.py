"""The loop: proposals, every gate's pass and fail cases, fail-closed validation, resume after kill, export."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from envharness import HarnessSpec
from envharness.transforms import RuleTransform, register_transform
from envharness.transforms.base import TRANSFORMS
from envrigger.diagnose import diagnose
from envrigger.library import Library
from envrigger.loop import COLLECT_SEED, LoopConfig, run_loop
from envrigger.policies import RandomPolicy
from envrigger.propose import Candidate, propose
from envrigger.rollout import rollout
from envrigger.trajectory import TrajectoryStore
from envrigger.validate import ValidationConfig, Validator

LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})
SEEDS = list(range(3_000_000, 3_000_200))


def candidate(*transforms: dict, finding: str = "terminal_cause:hole", stats: dict | None = None, base: HarnessSpec = LAKE) -> Candidate:
    spec = base.extended(*transforms)
    return Candidate(spec=spec, added=list(transforms), finding=finding, finding_stats=stats or {}, rationale="test", origin="catalog")


@pytest.fixture()
def validator(tmp_path):
    env = LAKE.build()
    return Validator(RandomPolicy(env.action_space, seed=0), LAKE, tmp_path / "validate", ValidationConfig(backend="serial"))


def gate(validation, name):
    return next((g for g in validation.gates if g.gate == name), None)


NEAR = {"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}}


def test_a_good_candidate_passes_every_gate_with_its_statistics(validator):
    result = validator.validate(candidate(NEAR), SEEDS)
    assert result.passed and result.error is None
    assert [g.gate for g in result.gates] == ["verifier_integrity", "solvability", "learnability", "targeting", "novelty"]
    learn = gate(result, "learnability").statistic
    assert 0.2 <= learn["ci"][0] and learn["ci"][1] <= 0.8 and learn["rollouts"] >= 30
    assert gate(result, "verifier_integrity").statistic["replay_mismatches"] == 0
    assert gate(result, "targeting").statistic["episodes"] > 0


def test_foreign_transform_code_fails_verifier_integrity(validator):
    @register_transform
    class Sneaky(RuleTransform):
        """Not from the catalog."""

    try:
        result = validator.validate(candidate({"name": "Sneaky", "params": {}}), SEEDS)
    finally:
        TRANSFORMS.pop("Sneaky")
    assert not result.passed and gate(result, "verifier_integrity").statistic["foreign_transforms"] == ["Sneaky"]
    assert len(result.gates) == 1  # later gates are not run


def test_dynamics_preserving_reshaping_is_checked_against_the_base_verdicts(validator):
    result = validator.validate(candidate({"name": "StepBudget", "params": {"max_steps": 30}}, finding="timeout"), SEEDS)
    integrity = gate(result, "verifier_integrity").statistic
    assert integrity["base_compared"] > 0 and integrity["base_mismatches"] == 0


def test_unsolvable_level_fails_solvability(validator):
    walled = candidate({"name": "FrozenLakeMap", "params": {"add_holes": 30, "keep_solvable": False}})
    result = validator.validate(walled, SEEDS)
    assert not result.passed and gate(result, "solvability").passed is False
    assert gate(result, "solvability").statistic["reference_success"] < 0.5


def test_too_hard_fails_learnability(validator):
    far = candidate({"name": "MoveAgent", "params": {"min_dist": 12, "max_dist": 14}})
    result = validator.validate(far, SEEDS)
    learn = gate(result, "learnability")
    assert not result.passed and not learn.passed and learn.statistic["ci"][1] < 0.2


def test_inconclusive_learnability_is_rejected(tmp_path):
    env = LAKE.build()
    strict = Validator(RandomPolicy(env.action_space, seed=0), LAKE, tmp_path / "v",
                       ValidationConfig(backend="serial", band=(0.28, 0.32), min_rollouts=30, max_rollouts=30))
    result = strict.validate(candidate(NEAR), SEEDS)
    learn = gate(result, "learnability")
    assert not result.passed and learn.statistic["inconclusive"] is True


def test_weakness_that_never_occurs_fails_targeting(validator):
    result = validator.validate(candidate(NEAR, finding="terminal_cause:lava"), SEEDS)
    assert not result.passed and gate(result, "targeting").passed is False


def test_feature_region_targeting_needs_levels_in_the_region(validator):
    region = {"feature": "goal_distance", "op": "<=", "threshold": 2.0}
    inside = validator.validate(candidate(NEAR, finding="feature_region:goal_distance", stats=region), SEEDS)
    assert gate(inside, "targeting").passed and gate(inside, "targeting").statistic["share_in_region"] == 1.0
    outside = validator.validate(candidate(NEAR, finding="feature_region:goal_distance",
                                           stats={**region, "op": ">", "threshold": 6.0}), SEEDS)
    assert not gate(outside, "targeting").passed


def test_behavioural_twin_of_the_base_env_fails_novelty(validator):
    base_like = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "4x4", "is_slippery": False})
    env = base_like.build()
    twin_check = Validator(RandomPolicy(env.action_space, seed=0), base_like, validator.workdir,
                           ValidationConfig(backend="serial", band=(0.0, 1.0)))
    result = twin_check.validate(candidate({"name": "ActionCost", "params": {"cost": 0.0}}, base=base_like), SEEDS)
    novelty = gate(result, "novelty")
    assert novelty is not None and not novelty.passed and novelty.statistic["closest"] == "base"


def test_already_admitted_hash_fails_novelty(validator):
    proposal = candidate(NEAR)
    result = validator.validate(proposal, SEEDS, admitted=[(proposal.hash, proposal.spec)])
    assert not result.passed and gate(result, "novelty").statistic == {"duplicate_of": proposal.hash}


@pytest.mark.parametrize("problem", ["exception", "timeout"])
def test_validation_fails_closed(problem, validator, tmp_path):
    if problem == "exception":
        broken = candidate(NEAR, base=HarnessSpec(env_id="Crashy-v0", env_kwargs={"crash_seeds": list(range(10**7))}))
        result = validator.validate(broken, SEEDS)
    else:
        env = LAKE.build()
        hasty = Validator(RandomPolicy(env.action_space, seed=0), LAKE, tmp_path / "v", ValidationConfig(backend="serial", timeout_s=1e-6))
        result = hasty.validate(candidate(NEAR), SEEDS)
    assert not result.passed and result.error is not None
    if problem == "timeout":
        assert result.error.startswith("timeout")


def test_propose_targets_findings_and_mutates_admitted_components_without_duplicates(tmp_path):
    spec = HarnessSpec(env_id="MiniGrid-Empty-8x8-v0", transforms=[{"name": "MoveGoal", "params": {"min_dist": 1, "max_dist": 10}}])
    from test_diagnose import GivesUpWhenFar

    report = diagnose(rollout(spec, GivesUpWhenFar, seeds=range(120), out=tmp_path / "far"))
    base = HarnessSpec(env_id="MiniGrid-Empty-8x8-v0")
    admitted = [("abc", base.extended({"name": "AddLava", "params": {"count": 2}}), "loop")]
    out = propose(report, base, np.random.default_rng(0), admitted=admitted)
    region = [c for c in out if c.finding == "feature_region:goal_distance" and c.added[0].name == "MoveGoal"]
    assert region and all(c.added[0].params["min_dist"] <= 7 and c.added[0].params["max_dist"] >= 6 for c in region)
    assert any(c.origin == "mutation" and c.parent == "abc" for c in out)
    assert len({c.hash for c in out}) == len(out)
    assert all(c.rationale for c in out)


def test_propose_skips_moving_a_goal_the_agent_cannot_see(tmp_path):
    report = diagnose(rollout(LAKE, "random", seeds=range(60), out=tmp_path / "lake"))
    names = {c.added[0].name for c in propose(report, LAKE, np.random.default_rng(0)) if c.origin == "catalog"}
    assert "MoveGoal" not in names and "MoveAgent" in names


SMALL = dict(spec=LAKE, rounds=2, budget_steps=4000, collect_episodes=30, eval_episodes=30, candidates_per_round=3,
             backend="serial", min_rollouts=20, max_rollouts=40)


def test_loop_admits_trains_and_evaluates_held_out(tmp_path):
    summaries = run_loop(tmp_path / "run", LoopConfig(**SMALL))
    assert [s["round"] for s in summaries] == [1, 2]
    library = Library(tmp_path / "run" / "library.db")
    components = library.components()
    assert components and summaries[-1]["library_size"] == len(components)
    first = components[0]
    assert {g["gate"] for g in first.gates} == {"verifier_integrity", "solvability", "learnability", "targeting", "novelty"}
    collected = {e.seed for e in TrajectoryStore(tmp_path / "run" / "round-1" / "collect").iter_episodes()}
    assert not collected & set(first.seeds) and min(collected) >= COLLECT_SEED
    assert summaries[-1]["heldout_curriculum"]["success"] >= summaries[-1]["heldout_baseline"]["success"]
    assert all(0 <= s["heldout_curriculum"]["ci"][0] <= s["heldout_curriculum"]["success"] for s in summaries)
    # Every env step is charged: the curriculum arm pays for collection and validation, the baseline only trains.
    spent = summaries[0]["interaction"]
    collect_steps = sum(e.length for e in TrajectoryStore(tmp_path / "run" / "round-1" / "collect").iter_episodes())
    validate_steps = sum(e.length for store in (tmp_path / "run" / "round-1" / "validate").iterdir()
                         for e in TrajectoryStore(store).iter_episodes())
    curriculum = spent["curriculum"]
    assert curriculum["collect"] == collect_steps
    assert curriculum["validate"] > validate_steps  # the rollouts, plus the reference solver's play and replays
    assert curriculum["total"] == curriculum["train"] + curriculum["collect"] + curriculum["validate"]
    assert set(spent["baseline"]) == {"train", "total"} and spent["baseline"]["total"] == spent["baseline"]["train"]
    assert abs(curriculum["train"] - spent["baseline"]["train"]) < 200  # equal training budgets (whole episodes)
    # The fixed lake has one level: every held-out episode is on a level both learners trained on, and the run says so.
    for arm in ("heldout_curriculum", "heldout_baseline"):
        assert summaries[-1][arm]["levels"] == 1 and summaries[-1][arm]["seen_in_training"] == 1.0
    seen = json.loads((tmp_path / "run" / "levels-round-2.json").read_text())
    assert set(seen["baseline"]) <= set(seen["curriculum"]) and len(seen["baseline"]) == 1


def test_a_run_killed_mid_round_resumes_without_losing_admitted_work(tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "envrigger.cli", "run", "FrozenLake-v1", "-o", str(out), "--rounds", "3",
            "--budget-steps", "4000", "--collect-episodes", "30", "--eval-episodes", "30", "--candidates", "3", "--backend", "serial"]
    # map_name/slippery come from a spec file so the run is small and learnable
    spec = tmp_path / "lake.json"
    spec.write_text(LAKE.to_json())
    args[4] = str(spec)
    runner = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = out / "library.db"
    deadline = time.monotonic() + 300
    rounds = []
    while time.monotonic() < deadline and runner.poll() is None:
        if db.exists():
            try:
                rounds = sqlite3.connect(db).execute("SELECT round FROM rounds").fetchall()
            except sqlite3.Error:
                rounds = []
            if rounds:
                break
        time.sleep(0.05)
    assert rounds, "the first round never finished"
    time.sleep(0.5)  # now inside round 2
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    before = {c.hash: c.id for c in Library(db).components()}
    round_one = Library(db).rounds()[0]
    done = subprocess.run([sys.executable, "-m", "envrigger.cli", "run", "--resume", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    library = Library(db)
    after = {c.hash: c.id for c in library.components()}
    assert before.items() <= after.items()
    assert [r["round"] for r in library.rounds()] == [1, 2, 3] and library.rounds()[0] == round_one
    assert "held-out result after 3 rounds" in done.stdout


def test_exported_package_installs_in_a_fresh_venv_and_makes_envs(tmp_path):
    library = Library(tmp_path / "library.db")
    moved = LAKE.extended(NEAR)
    library.admit(moved, finding="terminal_cause:hole", rationale="reverse curriculum", gates=[], seeds=[1], agent_id="test")
    from envrigger.export import export_library

    written = export_library(library, tmp_path / "dist", package="lake_envs")
    registry = json.loads(written["registry"].read_text())
    env_id = registry["environments"][0]["id"]
    assert env_id == "lake_envs/FrozenLake-c1-v0"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    root = Path(__file__).parents[2]
    subprocess.run([*pip, str(root), str(written["package"])], check=True, timeout=900)
    script = (
        "import gymnasium as gym, lake_envs\n"
        f"env = gym.make({env_id!r})\n"
        "obs, info = env.reset(seed=0)\n"
        "print(info['level']['goal_distance'], type(env.unwrapped).__name__)\n"
        f"print(gym.make('lake_envs:{env_id}').reset(seed=1)[1]['level']['goal_distance'] <= 2)\n"
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path)
    first, second = out.stdout.split("\n")[:2]
    assert float(first.split()[0]) <= 2 and first.split()[1] == "FrozenLakeEnv" and second == "True"


def test_a_loop_round_trains_the_same_learner_bits_on_every_backend(tmp_path):
    config = {**SMALL, "rounds": 1, "candidates_per_round": 2, "collect_episodes": 20, "eval_episodes": 20}
    for backend in ("serial", "process"):
        run_loop(tmp_path / backend, LoopConfig(**{**config, "backend": backend, "workers": 2}))
    for name in ("learner-round-1.json", "baseline-round-1.json"):
        assert (tmp_path / "serial" / name).read_text() == (tmp_path / "process" / name).read_text(), name


def test_solvability_is_relative_to_the_original_so_slippery_maps_can_admit(tmp_path):
    slippery = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": True})
    env = slippery.build()
    validator = Validator(RandomPolicy(env.action_space, seed=0), slippery, tmp_path / "v", ValidationConfig(backend="serial"))
    seeds = list(range(3_000_000, 3_000_032))
    base = validator.base_reference_rate(seeds)
    assert 0 < base < 0.5  # an absolute 50% bar would refuse every reshaping of this env
    assert validator.solvability(base, seeds).passed
    assert validator.solvability(0.6 * base, seeds).passed
    assert not validator.solvability(0.4 * base, seeds).passed
    assert not validator.solvability(0.0, seeds).passed


def test_seeds_train_independent_learners_and_the_interval_is_across_seeds(tmp_path):
    from envrigger.loop import run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    result = run_seeds(tmp_path / "multi", config, seeds=3)
    dirs = [tmp_path / "multi" / f"seed-{seed}" for seed in (0, 1, 2)]
    assert result["seeds"] == [0, 1, 2]
    assert [json.loads((d / "loop.json").read_text())["seed"] for d in dirs] == [0, 1, 2]
    assert len({(d / "learner-round-1.json").read_text() for d in dirs}) == 3  # each seed trains from scratch
    finals = [run_loop(d)[-1] for d in dirs]  # (resuming a finished run returns its rounds)
    curriculum = [f["heldout_curriculum"]["success"] for f in finals]
    baseline = [f["heldout_baseline"]["success"] for f in finals]
    assert result["curriculum"]["mean"] == pytest.approx(np.mean(curriculum)) and result["curriculum"]["n"] == 3
    assert result["difference"]["mean"] == pytest.approx(np.mean(curriculum) - np.mean(baseline))
    low, high = result["curriculum"]["ci"]
    assert low <= result["curriculum"]["mean"] <= high
    assert run_seeds(tmp_path / "multi", None) == result  # a finished multi-seed run resumes to the same result
