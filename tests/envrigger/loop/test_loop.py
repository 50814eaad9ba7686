"""The loop: proposals, every gate's pass and fail cases, fail-closed validation, resume after kill, export."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from envharness import HarnessSpec, SpecError
from envharness.transforms import RuleTransform, register_transform
from envharness.transforms.base import TRANSFORMS
from envrigger.data import TrajectoryError, TrajectoryStore
from envrigger.diagnose import diagnose
from envrigger.loop import ARMS, LevelSplit, LoopConfig, run_loop
from envrigger.loop.arms import random_specs
from envrigger.loop.config import TRAIN_SEED
from envrigger.loop.library import Library
from envrigger.loop.propose import Candidate, propose
from envrigger.loop.samplers import PLR
from envrigger.loop.validate import ValidationConfig, Validator
from envrigger.policies import RandomPolicy
from envrigger.rollout import rollout

LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})
SEEDS = list(range(3_000_000, 3_000_200))


def candidate(*transforms: dict, finding: str = "terminal_cause:hole", stats: dict | None = None, base: HarnessSpec = LAKE) -> Candidate:
    spec = base.extended(*transforms)
    return Candidate(spec=spec, added=list(transforms), finding=finding, finding_stats=stats or {}, rationale="test", origin="catalog")


@pytest.fixture()
def validator(tmp_path):
    env = LAKE.build()
    return Validator(
        RandomPolicy(env.action_space, seed=0),
        LAKE,
        tmp_path / "validate",
        ValidationConfig(backend="serial", min_rollouts=30, max_rollouts=90),
    )


def gate(validation, name):
    return next((g for g in validation.gates if g.gate == name), None)


NEAR = {"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}}


def test_a_good_candidate_passes_every_gate_with_its_statistics(validator):
    result = validator.validate(candidate(NEAR), SEEDS)
    assert result.passed and result.error is None
    assert [g.gate for g in result.gates] == ["verifier_integrity", "solvability", "no_shortcut", "learnability", "targeting", "novelty"]
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
    strict = Validator(
        RandomPolicy(env.action_space, seed=0),
        LAKE,
        tmp_path / "v",
        ValidationConfig(backend="serial", band=(0.28, 0.32), min_rollouts=30, max_rollouts=30),
    )
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
    outside = validator.validate(
        candidate(NEAR, finding="feature_region:goal_distance", stats={**region, "op": ">", "threshold": 6.0}), SEEDS
    )
    assert not gate(outside, "targeting").passed


def test_behavioural_twin_of_the_base_env_fails_novelty(validator):
    base_like = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "4x4", "is_slippery": False})
    env = base_like.build()
    twin_check = Validator(
        RandomPolicy(env.action_space, seed=0),
        base_like,
        validator.workdir,
        ValidationConfig(backend="serial", band=(0.0, 1.0), min_rollouts=30, max_rollouts=90),
    )
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
        hasty = Validator(
            RandomPolicy(env.action_space, seed=0),
            LAKE,
            tmp_path / "v",
            ValidationConfig(backend="serial", timeout_s=1e-6, min_rollouts=30, max_rollouts=90),
        )
        result = hasty.validate(candidate(NEAR), SEEDS)
    assert not result.passed and result.error is not None
    if problem == "timeout":
        assert result.error.startswith("timeout")


def test_propose_targets_findings_and_mutates_admitted_components_without_duplicates(tmp_path):
    spec = HarnessSpec(env_id="MiniGrid-Empty-8x8-v0", transforms=[{"name": "MoveGoal", "params": {"min_dist": 1, "max_dist": 10}}])
    where = Path(__file__).parents[1] / "diagnose" / "test_diagnose.py"  # its policy, wherever this file runs from
    found = importlib.util.spec_from_file_location("diagnose_policies", where)
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    GivesUpWhenFar = module.GivesUpWhenFar  # noqa: N806 - a class

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


def test_propose_never_offers_a_step_budget_the_env_already_enforces(tmp_path):
    from envharness.transforms import StepBudget

    env = LAKE.build()
    assert env.adapter.time_limit() == 100  # FrozenLake-v1's registered limit
    assert StepBudget(max_steps=99).proposable(env.adapter) and not StepBudget(max_steps=100).proposable(env.adapter)
    report = diagnose(rollout(LAKE, "random", seeds=range(60), out=tmp_path / "lake"))
    assert any(f.name in StepBudget.targets for f in report.findings)

    def budgets(limit: int) -> list[int]:
        spec = LAKE.model_copy(update={"env_kwargs": {**LAKE.env_kwargs, "max_episode_steps": limit}})
        return [t.params["max_steps"] for c in propose(report, spec, np.random.default_rng(0)) for t in c.added if t.name == "StepBudget"]

    assert budgets(100)  # budgets below the registered limit are offered...
    assert budgets(60) == []  # ...and not where the env already ends episodes sooner
    longer = LAKE.model_copy(update={"env_kwargs": {**LAKE.env_kwargs, "max_episode_steps": 150}})
    with pytest.raises(SpecError, match="max_episode_steps: 150 is above"):  # a longer limit is not the env's success
        longer.build()


class ShakyBalancer:
    """Pushes toward the pole's lean, but a random push 30% of the time: short poles fall, long ones mostly do not."""

    policy_id = "shaky-balancer"

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs, info):
        return int(obs[2] + 0.1 * obs[3] > 0) if self.rng.random() > 0.3 else int(self.rng.integers(2))


def test_a_failing_physics_region_is_proposed_at_its_edge_and_further_in(tmp_path):
    import envharness.envs  # noqa: F401  (registers PhysicsCartPole)

    pole = HarnessSpec(env_id="envharness/PhysicsCartPole-v0", env_kwargs={"ranges": {"pole_length": [0.1, 0.7], "force": [8.0, 12.0]}})
    report = diagnose(rollout(pole, ShakyBalancer(), seeds=range(80), out=tmp_path / "pole", backend="serial"))
    region = report.finding("feature_region:pole_length")
    assert region is not None and region.stats["op"] == "<=", [f.name for f in report.findings]
    cut = region.stats["threshold"]
    physics = [c for c in propose(report, pole, np.random.default_rng(0), per_finding=4) if c.added[0].name == "PhysicsParams"]
    targeted = [c for c in physics if c.finding == region.name]
    lengths = [c.added[0].params["pole_length"] for c in targeted]
    assert lengths == [pytest.approx(cut * k, abs=1e-4) for k in (1.0, 0.85, 0.7)]
    # The proposal fixes the failing constant only: the env still draws the others per level.
    env = targeted[0].spec.build()
    levels = [env.reset(seed=seed)[1]["level"] for seed in range(5)]
    assert [level["pole_length"] for level in levels] == [pytest.approx(cut, abs=1e-4)] * 5
    assert len({level["force"] for level in levels}) == 5


def test_an_agent_that_rarely_succeeds_gets_easing_reshapings_first(tmp_path):
    from envrigger.loop.propose import EASING

    report = diagnose(rollout(LAKE, "random", seeds=range(60), out=tmp_path / "lake"))
    assert report.success_rate < 0.2
    plain = propose(report, LAKE, np.random.default_rng(0))
    eased = propose(report, LAKE, np.random.default_rng(0), easing_first=True)
    assert sorted(c.hash for c in plain) == sorted(c.hash for c in eased)
    easing = [any(t.name in EASING for t in c.added) for c in eased]
    assert any(easing) and not all(easing) and easing == sorted(easing, reverse=True)
    assert [any(t.name in EASING for t in c.added) for c in plain] != easing


def _diagnosis(*findings):
    from envrigger.diagnose import Diagnosis

    return Diagnosis(run="r", episodes=60, steps=600, failures=40, success_rate=0.3, success_ci=(0.2, 0.4), spec_hashes=[],
                     policies=[], findings=list(findings))  # fmt: skip


def test_with_target_all_a_failure_in_a_level_parameters_region_gets_that_regions_reshapings():
    import envharness.envs  # noqa: F401  (registers PhysicsCartPole)
    from envrigger.diagnose.model import Finding

    # As the diagnosis states it: carts leave the track on levels with light poles (a condition on a level parameter).
    condition = {"rule": "pole_mass <= 0.11", "clauses": [{"feature": "pole_mass", "raw": "pole_mass", "op": "<=", "threshold": 0.11}]}
    out = Finding(name="terminal_cause:cart_out_of_bounds", title="cart left the track", episodes=20, total=60, rate=0.33,
                  rate_ci=(0.2, 0.5), failures=20, severity=0.5,
                  stats={"condition": condition, "by_feature": {"feature": "pole_mass", "values": [], "rate": [], "episodes": []}})  # fmt: skip
    pole = HarnessSpec(env_id="envharness/PhysicsCartPole-v0")
    plain = propose(_diagnosis(out), pole, np.random.default_rng(0))
    assert not [c for c in plain if c.added[0].name == "PhysicsParams"]  # the catalog names no transform for leaving the track
    targeted = [c for c in propose(_diagnosis(out), pole, np.random.default_rng(0), target_all=True) if c.added[0].name == "PhysicsParams"]
    assert [c.added[0].params["pole_mass"] for c in targeted] == [pytest.approx(0.11 * k, abs=1e-4) for k in (1.0, 0.85, 0.7)]
    assert {c.finding for c in targeted} == {"feature_region:pole_mass"}


def test_with_target_all_a_finding_no_transform_names_gets_the_easing_reshapings():
    from envrigger.diagnose.model import Finding
    from envrigger.loop.propose import EASING

    hit = Finding(name="terminal_cause:mission_failed", title="ran into an obstacle", episodes=30, total=60, rate=0.5,
                  rate_ci=(0.4, 0.6), failures=30, severity=0.8)  # fmt: skip
    obstacles = HarnessSpec(env_id="MiniGrid-Dynamic-Obstacles-6x6-v0")
    assert propose(_diagnosis(hit), obstacles, np.random.default_rng(0)) == []
    eased = propose(_diagnosis(hit), obstacles, np.random.default_rng(0), target_all=True)
    assert eased and all(c.added[0].name in EASING and c.finding == hit.name for c in eased)


SMALL = dict(
    spec=LAKE,
    learner="qlearning",
    rounds=2,
    budget_steps=4000,
    collect_episodes=30,
    eval_episodes=30,
    val_episodes=20,
    candidates_per_round=3,
    backend="serial",
    min_rollouts=20,
    max_rollouts=40,
    allow_seen_levels=True,
    band=(0.05, 0.95),
)
DOORKEY = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")
# For tests of the loop's machinery (level disjointness, identical networks): the same levels with a
# 60-step horizon (MiniGrid's own max_steps), since an untrained agent plays every episode to its end.
SHORT_DOORKEY = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0", env_kwargs={"max_steps": 60})


def test_loop_admits_trains_every_arm_and_evaluates_held_out_once(tmp_path):
    result = run_loop(tmp_path / "run", LoopConfig(**SMALL))
    summaries, final = result["rounds"], result["final"]
    assert [s["round"] for s in summaries] == [1, 2]
    library = Library(tmp_path / "run" / "library.db")
    components = library.components()
    assert components and summaries[-1]["library_size"] == len(components)
    first = components[0]
    assert {g["gate"] for g in first.gates} == {"verifier_integrity", "solvability", "no_shortcut", "learnability", "targeting", "novelty"}
    # The diagnosis read the rigger learner's own last training episodes on the original env: no extra interaction.
    evidence = list(TrajectoryStore(tmp_path / "run" / "round-1" / "evidence").iter_episodes())
    assert summaries[0]["evidence"] == {"training_episodes": 30, "collected": 0} and len(evidence) == 30
    assert all(TRAIN_SEED + 1_000_000 <= e.seed < TRAIN_SEED + 2_000_000 for e in evidence)
    assert not {e.seed for e in evidence} & set(first.seeds)
    spent = summaries[0]["arms"]
    validate_steps = sum(
        e.length for store in (tmp_path / "run" / "round-1" / "validate").iterdir() for e in TrajectoryStore(store).iter_episodes()
    )
    rigger = spent["rigger"]["interaction"]
    assert rigger["collect"] == 0
    assert rigger["validate"] > validate_steps  # the rollouts, plus the reference solver's play and replays
    assert rigger["credit"] > 0  # the credit chunks: the copies thrown away and their scoring
    assert rigger["total"] == rigger["train"] + rigger["collect"] + rigger["validate"] + rigger["credit"]
    # The last round's proposals would train nowhere: it neither diagnoses nor validates.
    assert "admitted" not in summaries[-1] and summaries[-1]["arms"]["rigger"]["interaction"]["validate"] == 0
    assert summaries[-1]["arms"]["rigger"]["train"]["picks"][1] > 0  # round 2 trains on round 1's admission
    original = spent["original"]["interaction"]
    assert original["collect"] == original["validate"] == 0 and original["total"] == original["train"]
    assert abs(rigger["train"] - original["train"]) < 200  # equal training budgets (whole episodes)
    # The held-out levels are looked at once, for the round each arm's validation score picked.
    for arm, r in final["arms"].items():
        scores = [s["arms"][arm]["validation"]["success"] for s in summaries]
        assert scores[r["round"] - 1] == max(scores) and r["validation"] == max(scores)
        assert r["heldout"]["episodes"] == 30
        assert r["interaction"]["total"] == sum(s["arms"][arm]["interaction"]["total"] for s in summaries)
    assert not (tmp_path / "run" / "round-1" / "heldout-rigger").exists() and (tmp_path / "run" / "heldout-rigger").is_dir()
    # The fixed lake has one level: every held-out episode is on a level the arms trained on, and the run says so.
    assert final["levels"] == {
        "disjoint": False,
        "heldout": 1,
        "validation": 1,
        "overlap": {"original:train": 1, "rigger:collect": 0, "rigger:credit": 1, "rigger:validate": 1, "rigger:train": 1},
    }
    assert all(r["heldout"]["seen_in_training"] == 1.0 for r in final["arms"].values())


def test_an_env_with_too_few_levels_is_refused_before_anything_is_written(tmp_path):
    config = LoopConfig(**{**SMALL, "allow_seen_levels": False})
    with pytest.raises(TrajectoryError, match="too few distinct levels.*1 distinct levels among 30 held-out seeds"):
        run_loop(tmp_path / "run", config)
    assert not (tmp_path / "run").exists()
    out = subprocess.run(
        [sys.executable, "-m", "envrigger.cli", "run", "FrozenLake-v1", "--learner", "qlearning", "-o", str(tmp_path / "cli")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "too few distinct levels" in out.stderr and "--allow-seen-levels" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "cli").exists()


def test_training_collection_and_validation_never_play_a_held_out_or_validation_level(tmp_path):
    config = LoopConfig(
        spec=SHORT_DOORKEY,
        learner="qlearning",
        rounds=2,
        budget_steps=3000,
        collect_episodes=60,  # more than the rigger arm's own training episodes: the rest are collected fresh
        eval_episodes=150,
        val_episodes=60,
        candidates_per_round=1,
        backend="serial",
        min_rollouts=10,
        max_rollouts=10,
        arms=list(ARMS),
    )
    result = run_loop(tmp_path / "run", config)
    split = LevelSplit.model_validate_json((tmp_path / "run" / "levels.json").read_text())
    assert split.disjoint and len(split.heldout_levels) > 100
    assert not set(split.validation_levels) & set(split.heldout_levels)
    used = json.loads((tmp_path / "run" / "levels-round-2.json").read_text())
    assert set(used) == {f"{arm}:train" for arm in ARMS} | {"rigger:collect", "rigger:validate", "rigger:credit", "original-select:credit"}
    reserved = set(split.heldout_levels) | set(split.validation_levels)
    for use, levels in used.items():
        assert levels and not set(levels) & reserved, use
    assert set(result["final"]["levels"]["overlap"].values()) == {0}
    # Fresh seeds that land on a reserved level were skipped, not played.
    assert sum(a["train"]["skipped_reserved"] for a in result["rounds"][0]["arms"].values()) > 0
    assert all(r["heldout"]["seen_in_training"] == 0.0 for r in result["final"]["arms"].values())
    # The check itself fails loudly on any overlap.
    with pytest.raises(TrajectoryError, match="level overlap: plr:train"):
        split.check({**{u: set(v) for u, v in used.items()}, "plr:train": {split.heldout_levels[0]}})


def test_the_transfer_gate_passes_what_helps_on_the_original_env_and_fails_closed(tmp_path):
    from envrigger.loop.gates.transfer import transfer_gate
    from envrigger.loop.learners import make_learner

    config = LoopConfig(**{**SMALL, "transfer_steps": 8000, "transfer_episodes": 20})
    probe = LAKE.build()
    learner = make_learner("qlearning", probe, 0)  # untrained: 8000 steps on the 8x8 lake alone do not reach the goal
    nearer = LAKE.extended(TRANSFORMS["MoveAgent"](min_dist=1, max_dist=4))  # a reverse curriculum: starts near the goal

    def gate(index, candidate):
        return transfer_gate(tmp_path / f"c{index}", config, learner, candidate, 1, index, set())

    passed, steps, _ = gate(0, nearer)
    assert passed.passed and passed.statistic["with"] == 1.0 and passed.statistic["original"] == 0.0
    assert steps >= 2 * 8000 and passed.statistic["episodes"] == 20
    assert gate(0, nearer)[0] == passed  # the same seeds: the same verdict
    tie, _, _ = gate(1, LAKE)  # the original env itself teaches nothing more: a tie fails
    assert not tie.passed and tie.statistic["with"] == tie.statistic["original"]
    assert not gate(2, LAKE.extended(TRANSFORMS["ActionSlip"](p=0.3)))[0].passed
    broken, _, _ = gate(3, HarnessSpec(env_id="NoSuchEnv-v0"))
    assert not broken.passed and broken.detail.startswith("fine-tuning failed")
    assert learner.policy().table == {}  # the learner itself is untouched: only its copies trained
    probe.close()


def test_with_the_transfer_gate_every_admission_helped_a_copy_and_its_steps_are_counted(tmp_path):
    config = LoopConfig(**{**SMALL, "transfer_steps": 3000, "transfer_episodes": 20})
    result = run_loop(tmp_path / "run", config)
    library = Library(tmp_path / "run" / "library.db")
    components = library.components()
    gated = [g for c in components for g in c.gates if g["gate"] == "transfer"]
    assert len(gated) == len(components) and all(g["passed"] and g["statistic"]["with"] > g["statistic"]["original"] for g in gated)
    first = result["rounds"][0]
    reached = len(components) + first["rejected_by"].get("transfer", 0)
    assert reached >= 1  # at least one candidate passed the other gates and was put to this one
    spent = first["arms"]["rigger"]["interaction"]
    assert (
        spent["transfer"] >= 2 * 3000 * reached
        and spent["total"] == spent["train"] + spent["collect"] + spent["validate"] + spent["transfer"] + spent["credit"]
    )
    assert result["final"]["arms"]["rigger"]["interaction"]["transfer"] == spent["transfer"]  # the last round validates nothing
    assert result["final"]["arms"]["original"]["interaction"]["transfer"] == 0  # only the rigger arm pays for the gate
    used = json.loads((tmp_path / "run" / "levels-round-2.json").read_text())
    assert used["rigger:transfer"]
    library.close()


def test_a_reshaping_that_recreates_a_reserved_level_is_not_played():
    from envrigger.loop.mixture import MixtureEnv, Seeds

    moved = DOORKEY.extended({"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}})
    recreated = moved.build().reset(seed=100)[1]["level_id"]  # pretend seed 100 reshaped is a held-out level
    seeds = Seeds(DOORKEY, start=100, reserved={recreated})
    assert seeds.level(100) != recreated  # its base level is free: only the reshaped level is reserved

    class Reshaped:
        replays = 0

        def draw(self, fresh):
            return 1, fresh()

        def update(self, index, seed, success):
            pass

    env = MixtureEnv([DOORKEY, moved], Reshaped(), seeds)
    _, info = env.reset()
    assert info["mixture"] == {"index": 1, "seed": 101} and info["level_id"] != recreated
    assert seeds.skipped == 1 and info["level_id"] in seeds.levels and recreated not in seeds.levels


def test_every_arm_trains_on_what_it_claims_with_equal_steps(tmp_path):
    config = LoopConfig(**{**SMALL, "rounds": 1, "arms": list(ARMS), "dr_pool": 6})
    rnd = run_loop(tmp_path / "run", config)["rounds"][0]
    arms = rnd["arms"]
    assert arms["original"]["train"]["picks"] == [arms["original"]["train"]["episodes"]] and arms["original"]["train"]["replays"] == 0
    dr = arms["dr"]["train"]["picks"]
    assert len(dr) == 7 and min(dr) > 0  # the original and six random reshapings, each played
    assert arms["plr"]["train"]["replays"] > 0 and len(arms["plr"]["train"]["picks"]) == 1
    assert len(arms["rigger"]["train"]["picks"]) == 1 + rnd["library_size"]
    steps = [a["train"]["steps"] for a in arms.values()]
    assert min(steps) >= config.budget_steps and max(steps) - min(steps) < 200


def test_dr_draws_catalog_reshapings_within_bounds_that_keep_the_spaces():
    specs = random_specs(DOORKEY, np.random.default_rng(0), 12)
    assert len(specs) == 12 and len({s.hash() for s in specs}) == 12
    names = {s.transforms[0].name for s in specs}
    assert len(names) >= 4 and names <= {n for n, c in TRANSFORMS.items() if c.kind in ("state", "rule", "observation")}
    env = DOORKEY.build()
    for spec in specs:
        reshaped = spec.build()
        assert reshaped.observation_space == env.observation_space and reshaped.action_space == env.action_space
    assert random_specs(DOORKEY, np.random.default_rng(0), 12) == specs  # seeded


def test_plr_replays_its_own_levels_and_prefers_learnable_ones():
    plr = PLR(np.random.default_rng(0), min_buffer=3, replay_p=1.0)
    for seed in range(10):
        plr.update(0, seed, success=False)
    for _ in range(3):
        plr.update(0, 4, success=True)
        plr.update(0, 4, success=False)
    replays = [plr.replay() for _ in range(500)]
    assert set(replays) <= {(0, s) for s in range(10)} and max(set(replays), key=replays.count) == (0, 4)
    copy = PLR(np.random.default_rng(99), min_buffer=3, replay_p=1.0)
    copy.restore(plr.state())
    assert [copy.replay() for _ in range(20)] == [plr.replay() for _ in range(20)]


def test_the_rigger_arm_replays_original_levels_and_draws_fresh_ones_from_its_curriculum():
    from envrigger.loop.samplers import Curriculum

    rigger = PLR(np.random.default_rng(0), min_buffer=4, replay_p=0.5, chooser=Curriculum(3, np.random.default_rng(1)))
    fresh = iter(range(100, 10_000))
    drawn = [rigger.draw(lambda: next(fresh)) for _ in range(300)]
    for index, seed in drawn:
        for success in (index == 2, False):  # levels of env 2 are sometimes solved, the others never
            rigger.update(index, seed, success=success)
    drawn = [rigger.draw(lambda: next(fresh)) for _ in range(300)]
    replayed = [(i, s) for i, s in drawn if s < 100 + 300]
    assert rigger.replays > 0 and replayed and {i for i, _ in replayed} == {0}  # only original levels are replayed
    fresh_envs = [i for i, s in drawn if s >= 400]
    assert max({0, 1, 2}, key=fresh_envs.count) == 2  # the curriculum favours the learnable reshaped env


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
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]  # byte-compiling is most of an install's time
    # No project checkout: the exported package and the envharness wheel written beside it (its
    # dependencies come from the package index), installed from a directory outside the project.
    assert written["wheel"].parent == tmp_path / "dist" / "wheels" and written["wheel"].name.startswith("envharness-")
    subprocess.run([*pip, "--find-links", str(written["wheel"].parent), str(written["package"])], check=True, timeout=900, cwd=tmp_path)
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
    located = subprocess.run([str(venv / "bin" / "python"), "-c", "import envharness; print(envharness.__file__)"], capture_output=True,
                             text=True, check=True, cwd=tmp_path)  # fmt: skip
    assert str(venv) in located.stdout  # the installed wheel, not the checkout


def test_a_loop_round_trains_the_same_learner_bits_on_every_backend(tmp_path):
    config = {**SMALL, "rounds": 1, "candidates_per_round": 2, "collect_episodes": 20, "eval_episodes": 20, "arms": ["plr", "rigger"]}
    for backend in ("serial", "process"):
        run_loop(tmp_path / backend, LoopConfig(**{**config, "backend": backend, "workers": 2}))
    for name in ("rigger-round-1.json", "plr-round-1.json", "final.json"):
        assert (tmp_path / "serial" / name).read_text() == (tmp_path / "process" / name).read_text(), name


@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="needs the sb3 extra (Stable-Baselines3 and torch)")
def test_ppo_arms_train_the_same_network_on_every_backend_batched_or_not_and_after_resume(tmp_path):
    import torch

    from envrigger.loop.learners import PPOLearner

    config = dict(
        spec=SHORT_DOORKEY,
        learner="ppo",
        learner_params={"n_envs": 2, "n_steps": 64, "batch_size": 64},
        rounds=2,
        budget_steps=256,
        collect_episodes=8,
        eval_episodes=20,
        val_episodes=10,
        candidates_per_round=1,
        min_rollouts=8,
        max_rollouts=8,
        arms=["original", "rigger"],
        workers=2,
    )
    # serial: PPO's rollouts in lockstep batches (the default); process: one episode at a time in the pool's workers.
    for backend, batch in (("serial", 32), ("process", 1)):
        run_loop(tmp_path / backend, LoopConfig(**{**config, "backend": backend, "rollout_batch": batch}))
    config_one = LoopConfig(**{**config, "backend": "serial", "rounds": 1})
    run_loop(tmp_path / "resumed", config_one)
    saved = json.loads((tmp_path / "resumed" / "loop.json").read_text())
    (tmp_path / "resumed" / "loop.json").write_text(json.dumps({**saved, "rounds": 2}))
    (tmp_path / "resumed" / "final.json").unlink()
    run_loop(tmp_path / "resumed")  # round 2 starts from round 1's saved learners
    probe = SHORT_DOORKEY.build()
    for arm in ("original", "rigger"):
        nets = [
            PPOLearner.load(tmp_path / run / f"{arm}-round-2", probe).model.policy.state_dict() for run in ("serial", "process", "resumed")
        ]
        for other in nets[1:]:
            assert all(torch.equal(nets[0][k], other[k]) for k in nets[0]), arm
        steps = [PPOLearner.load(tmp_path / "serial" / f"{a}-round-2", probe).model.num_timesteps for a in ("original", "rigger")]
        assert steps == [512, 512]  # equal training steps, exactly
    assert json.loads((tmp_path / "serial" / "final.json").read_text()) == json.loads((tmp_path / "process" / "final.json").read_text())


def test_solvability_is_relative_to_the_original_so_slippery_maps_can_admit(tmp_path):
    slippery = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": True})
    env = slippery.build()
    validator = Validator(
        RandomPolicy(env.action_space, seed=0),
        slippery,
        tmp_path / "v",
        ValidationConfig(backend="serial", min_rollouts=30, max_rollouts=90),
    )
    seeds = list(range(3_000_000, 3_000_032))
    base = validator.base_reference_rate(seeds)
    assert 0 < base < 0.5  # an absolute 50% bar would refuse every reshaping of this env
    plain = candidate({"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}})
    assert validator.check("solvability", plain, seeds, reference_rate=base).passed
    assert validator.check("solvability", plain, seeds, reference_rate=0.6 * base).passed
    assert not validator.check("solvability", plain, seeds, reference_rate=0.4 * base).passed
    assert not validator.check("solvability", plain, seeds, reference_rate=0.0).passed


def test_seeds_train_independent_learners_and_the_interval_is_across_seeds(tmp_path):
    from envrigger.loop import run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    result = run_seeds(tmp_path / "multi", config, seeds=3)
    dirs = [tmp_path / "multi" / f"seed-{seed}" for seed in (0, 1, 2)]
    assert result["seeds"] == [0, 1, 2]
    assert [json.loads((d / "loop.json").read_text())["seed"] for d in dirs] == [0, 1, 2]
    assert len({(d / "rigger-round-1.json").read_text() for d in dirs}) == 3  # each seed trains from scratch
    finals = [run_loop(d)["final"]["arms"] for d in dirs]  # (resuming a finished run returns its result)
    rigger = [f["rigger"]["heldout"]["success"] for f in finals]
    original = [f["original"]["heldout"]["success"] for f in finals]
    assert result["arms"]["rigger"]["success"]["mean"] == pytest.approx(np.mean(rigger)) and result["arms"]["rigger"]["success"]["n"] == 3
    assert result["difference"]["original"]["mean"] == pytest.approx(np.mean(rigger) - np.mean(original))
    low, high = result["arms"]["rigger"]["success"]["ci"]
    assert low <= result["arms"]["rigger"]["success"]["mean"] <= high
    assert run_seeds(tmp_path / "multi", None) == result  # a finished multi-seed run resumes to the same result


def test_seeds_in_parallel_processes_give_the_same_result_as_one_by_one(tmp_path):
    from envrigger.loop import SeedsRun, run_many, run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    alone = run_seeds(tmp_path / "alone", config, seeds=3)
    lake8 = config.model_copy(update={"spec": HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})})
    runs = [SeedsRun(out=tmp_path / "together", config=config, seeds=3), SeedsRun(out=tmp_path / "other", config=lake8, seeds=1)]
    together, other = run_many(runs, jobs=2)
    assert together == alone  # same held-out success, rounds and spend per arm and seed
    for seed in range(3):
        assert (tmp_path / "together" / f"seed-{seed}" / "final.json").read_text() == (
            tmp_path / "alone" / f"seed-{seed}" / "final.json"
        ).read_text()
    assert (
        other["seeds"] == [0]
        and json.loads((tmp_path / "other" / "seed-0" / "loop.json").read_text())["spec"]["env_kwargs"]["map_name"] == "8x8"
    )


def test_resuming_with_more_seeds_adds_the_next_ones_and_keeps_the_finished(tmp_path):
    from envrigger.loop import run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    first = run_seeds(tmp_path / "multi", config, seeds=2)
    kept = {seed: (tmp_path / "multi" / f"seed-{seed}" / "final.json").stat().st_mtime_ns for seed in (0, 1)}
    more = run_seeds(tmp_path / "multi", None, seeds=3)
    assert first["seeds"] == [0, 1] and more["seeds"] == [0, 1, 2]
    assert {seed: (tmp_path / "multi" / f"seed-{seed}" / "final.json").stat().st_mtime_ns for seed in (0, 1)} == kept
    assert json.loads((tmp_path / "multi" / "seeds.json").read_text())["seeds"] == 3
    assert run_seeds(tmp_path / "multi", None, seeds=1) == more  # asking for fewer never drops finished seeds


def test_a_kept_record_of_finished_seeds_resumes_and_adds_seeds(tmp_path):
    """What benchmarks/results keeps of a seed (loop.json, library.db, final.json) is enough to extend the run later."""
    from envrigger.loop import run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    first = run_seeds(tmp_path / "multi", config, seeds=1)
    kept = {"loop.json", "library.db", "final.json"}
    for path in (tmp_path / "multi" / "seed-0").iterdir():  # the learners, rounds and stores are not kept
        if path.name not in kept:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    more = run_seeds(tmp_path / "multi", None, seeds=2)
    assert first["seeds"] == [0] and more["seeds"] == [0, 1]
    assert (tmp_path / "multi" / "seed-1" / "final.json").is_file() and not (tmp_path / "multi" / "seed-0" / "round-1").exists()


def test_the_cli_runs_seeds_at_once_and_labels_each_seeds_lines(tmp_path):
    args = ["--learner", "qlearning", "--allow-seen-levels", "--rounds", "1", "--budget-steps", "2000", "--collect-episodes", "10"]
    args += ["--eval-episodes", "10", "--val-episodes", "10", "--candidates", "1", "--backend", "serial", "--seeds", "2", "--jobs", "2"]
    out = subprocess.run(
        [sys.executable, "-m", "envrigger.cli", "run", "FrozenLake-v1", *args, "-o", str(tmp_path / "cli")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    for seed in (0, 1):
        assert f"master seed {seed}: round 1: training the rigger arm" in out.stdout
        assert (tmp_path / "cli" / f"seed-{seed}" / "final.json").is_file()
    assert json.loads((tmp_path / "cli" / "result.json").read_text())["seeds"] == [0, 1]
    refused = subprocess.run(
        [sys.executable, "-m", "envrigger.cli", "run", "FrozenLake-v1", "--jobs", "0", "-o", str(tmp_path / "zero")],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "--jobs" in refused.stderr and not (tmp_path / "zero").exists()


def test_a_failing_seed_in_parallel_is_named_and_the_others_finish_and_resume(tmp_path):
    from envrigger.loop import run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    multi = tmp_path / "multi"
    multi.mkdir()
    (multi / "seed-1").write_text("not a directory")  # this seed's run cannot start
    with pytest.raises(TrajectoryError, match=r"1 master seed\(s\) failed: .*seed-1 \(exit code 1\).*run the same command again"):
        run_seeds(multi, config, seeds=2, jobs=2)
    assert (multi / "seed-0" / "final.json").is_file()  # the other seed ran to the end
    (multi / "seed-1").unlink()
    result = run_seeds(multi, None, jobs=2)  # resumes: seed 0 is read back, seed 1 runs
    assert result["seeds"] == [0, 1] and (multi / "seed-1" / "final.json").is_file()
    with pytest.raises(TrajectoryError, match="--jobs: got 0"):
        run_seeds(multi, None, jobs=0)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--arms", "original,bogus"],
            "--arms: got 'original,bogus'; give distinct arms from original,original-select,dr,dr-any,plr,plr-random,rigger-noreplay,rigger",
        ),
        (["--learner", "dqn"], "--learner: got 'dqn'; use one of qlearning, ppo"),
    ],
)
def test_run_refuses_unknown_arms_and_learners_in_one_line(tmp_path, args, message):
    out = subprocess.run(
        [sys.executable, "-m", "envrigger.cli", "run", "MiniGrid-DoorKey-6x6-v0", *args, "-o", str(tmp_path / "r")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


POLE_TRAIN = {"pole_length": (0.4, 0.6), "force": (9.0, 11.0)}
POLE_HELD = {"pole_length": (0.15, 0.25), "force": (4.0, 6.0)}


def test_held_out_levels_can_come_from_other_level_parameters_and_nothing_is_tuned_on_them(tmp_path):
    pole = HarnessSpec(env_id="envharness/PhysicsCartPole-v0", env_kwargs={"ranges": POLE_TRAIN})
    held = HarnessSpec(env_id="envharness/PhysicsCartPole-v0", env_kwargs={"ranges": POLE_HELD})
    config = LoopConfig(
        spec=pole,
        heldout_spec=held,
        learner="qlearning",
        rounds=1,
        budget_steps=600,
        collect_episodes=5,
        eval_episodes=10,
        val_episodes=10,
        candidates_per_round=1,
        backend="serial",
        min_rollouts=5,
        max_rollouts=5,
        arms=["original"],
    )
    result = run_loop(tmp_path / "run", config)
    assert result["final"]["levels"]["overlap"] == {"original:train": 0}

    def physics(store: Path) -> list[dict[str, float]]:
        return [e.level_features for e in TrajectoryStore(store).iter_episodes()]

    heldout, selection = physics(tmp_path / "run" / "heldout-original"), physics(tmp_path / "run" / "round-1" / "select-original")
    assert len(heldout) == 10 and len(selection) == 10
    assert all(0.15 <= f["pole_length"] <= 0.25 and 4.0 <= f["force"] <= 6.0 for f in heldout)
    assert all(0.4 <= f["pole_length"] <= 0.6 and 9.0 <= f["force"] <= 11.0 for f in selection)  # validation: the training ranges
    split = LevelSplit.model_validate_json((tmp_path / "run" / "levels.json").read_text())
    assert len(split.heldout_levels) == 10 and not set(split.heldout_levels) & set(split.validation_levels)


@pytest.mark.parametrize(
    "held, match",
    [
        (HarnessSpec(env_id="CartPole-v1"), "heldout_spec: got CartPole-v1 with 0 transform"),
        (
            HarnessSpec(env_id="envharness/PhysicsCartPole-v0", transforms=[{"name": "StepBudget", "params": {"max_steps": 50}}]),
            "with 1 transform",
        ),
    ],
)
def test_a_held_out_spec_must_be_the_same_env_without_transforms(held, match):
    with pytest.raises(ValueError, match=match):
        LoopConfig(spec=HarnessSpec(env_id="envharness/PhysicsCartPole-v0"), heldout_spec=held)


def test_levels_that_start_solved_are_never_trained_held_out_or_validated_on():
    # GoToDoor-5x5 starts solved (a first `done` wins) at seeds 3, 4 and 6: the engine skips those levels.
    from envrigger.loop.config import EVAL_SEED
    from envrigger.loop.levels import Seeds

    spec = HarnessSpec(env_id="MiniGrid-GoToDoor-5x5-v0")

    def refused(seed: int) -> bool:
        env = spec.build()
        env.reset(seed=seed)
        return env.starts_solved() is not None

    seeds = Seeds(spec, start=0)
    issued = [seeds.next() for _ in range(10)]
    assert not {3, 4, 6} & set(issued) and seeds.unplayable >= 3 and issued == sorted(issued)
    split = LevelSplit.make(spec, LoopConfig(spec=spec, learner="qlearning", eval_episodes=20, val_episodes=10))
    assert len(split.heldout_seeds) == 20 and len(split.validation_seeds) == 10
    assert not any(refused(s) for s in split.heldout_seeds + split.validation_seeds)
    assert any(refused(s) for s in range(EVAL_SEED, split.heldout_seeds[-1]))  # some were passed over


def test_the_long_stages_report_their_progress(tmp_path):
    """A 50k-step training stage printed one line and then nothing; the CLI now shows a bar fed by these calls."""
    import contextlib

    from envrigger.loop.levels import LevelSplit

    done: dict[str, int] = {}
    totals: dict[str, int] = {}

    @contextlib.contextmanager
    def stage(label, total):
        totals[label], done[label] = total, 0

        def advance(n):
            done[label] += n

        yield advance

    config = LoopConfig(**{**SMALL, "rounds": 1})
    run_loop(tmp_path / "run", config, stage=stage)
    assert list(totals) == ["drawing levels", "training original", "training rigger"]
    assert done["drawing levels"] == totals["drawing levels"] == LevelSplit.draws(config)
    for arm in ("original", "rigger"):  # the steps of ended episodes: the budget, give or take the last episode
        assert totals[f"training {arm}"] == 4000 and abs(done[f"training {arm}"] - 4000) <= 100


def test_the_ablation_arms_separate_replay_reshaping_and_targeting(tmp_path):
    """dr draws levels, dr-any anything; plr-random gets as many random components as rigger admitted; rigger-noreplay never replays."""
    from envharness.transforms import TRANSFORMS

    arms = ["original", "dr", "dr-any", "plr", "plr-random", "rigger-noreplay", "rigger"]
    config = LoopConfig(**{**SMALL, "arms": arms})
    result = run_loop(tmp_path / "run", config)
    first, second = result["rounds"]
    assert list(second["arms"]) == arms
    steps = [a["train"]["steps"] for a in second["arms"].values()]
    assert all(4000 <= n <= 4100 for n in steps)  # the budget, every arm (Q-learning finishes its last episode)
    dr = second["arms"]["dr"]["train"]["envs"][1:]
    assert dr and all(TRANSFORMS[label.split("{")[0]].kind == "state" for label in dr)
    admitted = second["library_size"]
    assert admitted >= 1  # SMALL admits in round 1
    assert len(second["arms"]["plr-random"]["train"]["envs"]) == 1 + admitted == len(second["arms"]["rigger"]["train"]["envs"])
    assert second["arms"]["plr-random"]["train"]["envs"] != second["arms"]["rigger"]["train"]["envs"]
    assert second["arms"]["rigger-noreplay"]["train"]["envs"] == second["arms"]["rigger"]["train"]["envs"]
    assert second["arms"]["rigger-noreplay"]["train"]["replays"] == 0 < second["arms"]["rigger"]["train"]["replays"]
    assert set(result["final"]["arms"]) == set(arms)


def test_an_ablation_without_the_rigger_arm_is_refused_in_one_line():
    with pytest.raises(ValidationError, match="add rigger to --arms"):
        LoopConfig(**{**SMALL, "arms": ["original", "plr-random"]})


def test_step_out_moves_a_reverse_curriculum_outward_rung_by_rung_until_the_original():
    from envharness.spec import TransformSpec
    from envrigger.loop.propose import step_out

    def ladder(name, **params):
        rungs, current = [], TransformSpec(name=name, params=params)
        while (current := step_out(current)) is not None:
            rungs.append(current.params)
        return rungs

    assert ladder("MoveAgent", min_dist=1, max_dist=3) == [
        {"min_dist": 3, "max_dist": 6},
        {"min_dist": 6, "max_dist": 12},
        {"min_dist": 12, "max_dist": 24},
        {"min_dist": 24, "max_dist": 48},
        {"min_dist": 48, "max_dist": 96},
        {"min_dist": 96, "max_dist": 100},
    ]
    assert ladder("WalkthroughStart", min_share=0.5, max_share=0.9) == [
        {"min_share": 0.25, "max_share": 0.65},
        {"min_share": 0.0, "max_share": 0.4},
        {"min_share": 0.0, "max_share": 0.15},
    ]
    assert ladder("RemoveWalls", count=3) == [{"count": 2}, {"count": 1}]
    assert ladder("ActionSlip", p=0.1) == []  # not an easing: nothing to step out from


def test_a_mastered_component_gets_its_next_rung_proposed_before_any_mutation(tmp_path):
    base = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")
    report = diagnose(rollout(base, "random", seeds=range(20), out=tmp_path / "random"))
    near = base.extended({"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}})
    walls = base.extended({"name": "RemoveWalls", "params": {"count": 2}})
    admitted = [("near", near, "timeout"), ("walls", walls, "timeout")]
    out = propose(report, base, np.random.default_rng(0), admitted=admitted, mastered=[admitted[0]])
    stepped = [c for c in out if c.origin == "step-out"]
    assert [(c.parent, c.added[0].params) for c in stepped] == [("near", {"min_dist": 2, "max_dist": 4})]
    assert stepped[0].finding == "timeout" and "masters" in stepped[0].rationale
    later = [c.origin for c in out[out.index(stepped[0]) :]]
    assert "catalog" not in later  # after every catalog proposal, before the mutations


def test_a_run_with_heldout_off_picks_rounds_on_validation_and_plays_no_held_out_level(tmp_path):
    result = run_loop(tmp_path / "run", LoopConfig(**{**SMALL, "arms": ["original", "rigger"], "heldout": False}))
    final = result["final"]
    assert all(arm["heldout"] is None and arm["round"] in (1, 2) for arm in final["arms"].values())
    assert final["arms"]["rigger"]["validation"] == max(s["arms"]["rigger"]["validation"]["success"] for s in result["rounds"])
    assert not list((tmp_path / "run").glob("heldout-*"))  # nothing was rolled out on a held-out level


def test_step_out_runs_through_the_loop_and_names_what_the_learner_mastered(tmp_path):
    # A non-slippery lake with Q-learning: components that start next to the goal are soon won almost always.
    config = {**SMALL, "rounds": 3, "arms": ["rigger"], "step_out": True, "band": (0.05, 0.6), "heldout": False}
    result = run_loop(tmp_path / "run", LoopConfig(**config))
    mastered = [h for s in result["rounds"] for h in s.get("mastered", [])]
    library = Library(tmp_path / "run" / "library.db")
    components = {c.hash: c for c in library.components()}
    assert mastered and set(mastered) <= set(components)
    steps = [c for c in components.values() if c.origin == "step-out"]
    assert all(c.parent in mastered for c in steps)


def test_a_mastered_component_sits_out_later_rounds_but_stays_in_the_library(tmp_path):
    # The same easy lake: what the rigger arm wins almost always in one round is not trained on in the next.
    config = {**SMALL, "rounds": 3, "arms": ["rigger"], "retire_mastered": True, "band": (0.05, 0.6), "heldout": False}
    result = run_loop(tmp_path / "run", LoopConfig(**config))
    library = {c.hash for c in Library(tmp_path / "run" / "library.db").components()}
    retired = set()
    for summary in result["rounds"]:
        trained = summary["arms"]["rigger"]["train"]
        assert not retired & set(trained["components"])  # a retired component was never trained on again
        assert set(summary.get("retired", [])) == retired
        for h, wins, picks in zip(trained["components"], trained["wins"][1:], trained["picks"][1:], strict=True):
            if picks >= 20 and wins > 0.6 * picks:
                retired.add(h)
    assert retired and retired <= library  # something was mastered, and it is still in the library
    assert any(s.get("retired") for s in result["rounds"])  # and a later round trained without it


def test_a_seeds_level_is_read_once_per_process_and_every_arm_after_that_reuses_it():
    from envrigger.loop.levels import Seeds

    spec = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")
    first = Seeds(spec, 0)
    levels = [first.level(seed) for seed in range(9_100_000, 9_100_020)]
    first.close()
    second = Seeds(spec, 0)  # the next arm's stream: the same seeds, no env built to read them again
    assert [second.level(seed) for seed in range(9_100_000, 9_100_020)] == levels and second._probe is None
    other = Seeds(spec.extended({"name": "MoveGoal", "params": {"min_dist": 1, "max_dist": 2}}), 0)
    other.level(9_100_000)  # another spec is another key: its own levels, read from its own env
    assert other._probe is not None
    other.close()
