"""The Validator: every gate's pass and fail cases on the fixed lake, and validation that fails closed."""

from __future__ import annotations

import pytest
from loop_cases import DEFAULT_GATES, LAKE, NEAR, SEEDS, candidate, gate

from envharness import HarnessSpec
from envharness.transforms import RuleTransform, register_transform
from envharness.transforms.base import TRANSFORMS
from envrigger.loop.validate import ValidationConfig, Validator
from envrigger.policies import RandomPolicy


def test_a_good_candidate_passes_every_gate_with_its_statistics(validator):
    result = validator.validate(candidate(NEAR), SEEDS)
    assert result.passed and result.error is None
    assert [g.gate for g in result.gates] == DEFAULT_GATES
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
        broken = candidate(NEAR, base=HarnessSpec(env_id="Crashy-v0", env_kwargs={"crash_seeds": SEEDS}))  # every seed it plays
        result = validator.validate(broken, SEEDS)
    else:
        env = LAKE.build()
        hasty = Validator(
            RandomPolicy(env.action_space, seed=0),
            LAKE,
            tmp_path / "v",
            ValidationConfig(backend="serial", candidate_timeout_s=1e-6, min_rollouts=30, max_rollouts=90),
        )
        result = hasty.validate(candidate(NEAR), SEEDS)
    assert not result.passed and result.error is not None
    if problem == "timeout":
        assert result.error.startswith("timeout")


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
