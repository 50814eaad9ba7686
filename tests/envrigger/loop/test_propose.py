"""Proposals: reshapings that target the diagnosis' findings, mutations of admitted ones, easing first, stepping out of a mastered rung."""

from __future__ import annotations

import numpy as np
import pytest
from loop_cases import LAKE
from planted_walkers import GivesUpWhenFar

from envharness import HarnessSpec, SpecError
from envrigger.diagnose import diagnose
from envrigger.loop.propose import propose
from envrigger.rollout import rollout


def test_propose_targets_findings_and_mutates_admitted_components_without_duplicates(tmp_path):
    spec = HarnessSpec(env_id="MiniGrid-Empty-8x8-v0", transforms=[{"name": "MoveGoal", "params": {"min_dist": 1, "max_dist": 10}}])
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


def test_step_in_moves_a_start_toward_the_goal_rung_by_rung_and_stops_at_the_nearest():
    from envharness.spec import TransformSpec
    from envrigger.loop.propose import step_in

    def ladder(name, **params):
        rungs, current = [], TransformSpec(name=name, params=params)
        while (current := step_in(current)) is not None:
            rungs.append(current.params)
        return rungs

    # The catalog's nearest walkthrough start first, then half the rest of the way each rung; the last command stays the agent's.
    assert ladder("WalkthroughStart", min_share=0.75, max_share=0.95) == [
        {"min_share": 0.85, "max_share": 0.95},
        {"min_share": 0.9, "max_share": 0.95},
    ]
    assert ladder("WalkthroughStart", min_share=0.0, max_share=0.9)[0] == {"min_share": 0.47, "max_share": 0.95}
    assert ladder("MoveAgent", min_dist=2, max_dist=8) == [
        {"min_dist": 1, "max_dist": 4},
        {"min_dist": 1, "max_dist": 2},
        {"min_dist": 1, "max_dist": 1},
    ]
    assert ladder("RemoveWalls", count=1) == []  # more removed walls is a shortcut, not a nearer start


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


def test_with_mutate_learnability_the_components_the_learner_is_learning_most_on_are_edited_first(tmp_path):
    # --mutate learnability (ACCEL): the mutated parents are those with the highest p(1 - p) of this round's training
    # wins, not random ones; a component it did not train on comes last.
    base = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")
    report = diagnose(rollout(base, "random", seeds=range(20), out=tmp_path / "random"))
    admitted = [
        (name, base.extended(transform), "timeout")
        for name, transform in (
            ("solved", {"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 3}}),
            ("learning", {"name": "StepBudget", "params": {"max_steps": 120}}),
            ("hopeless", {"name": "AddLava", "params": {"count": 2}}),
            ("unseen", {"name": "RemoveWalls", "params": {"count": 2}}),
        )
    ]
    learnability = {"solved": 0.05, "learning": 0.25, "hopeless": 0.0}  # p(1 - p) at 0.95, 0.5 and 0 wins
    for seed in range(5):
        out = propose(report, base, np.random.default_rng(seed), admitted=admitted, mutations=2, learnability=learnability)
        parents = [c.parent for c in out if c.origin == "mutation"]  # a mutation that repeats a candidate is dropped
        assert parents[0] == "learning" and set(parents) <= {"learning", "solved"}
    randomly = {
        tuple(
            c.parent for c in propose(report, base, np.random.default_rng(seed), admitted=admitted, mutations=2) if c.origin == "mutation"
        )
        for seed in range(5)
    }
    assert any(set(parents) - {"learning", "solved"} for parents in randomly)  # without it, random parents
