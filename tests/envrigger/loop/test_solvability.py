"""The solvability gate proves reshaped levels winnable without a solver that knows the family, and fails closed.

KeyCorridor (a ball behind a locked door, the key in another room) is a family no benchmark
uses and the reference planner does not solve: every one of its 16 candidates was once
rejected at solvability because the planner looked for a goal tile there is not.
"""

from __future__ import annotations

import pytest

from envharness import HarnessSpec
from envrigger.data import TrajectoryStore
from envrigger.loop.propose import Candidate
from envrigger.loop.solvability import _search, search_level, searchable
from envrigger.loop.validate import ValidationConfig, Validator
from envrigger.policies import RandomPolicy
from envrigger.rollout import rollout

CORRIDOR = HarnessSpec(env_id="MiniGrid-KeyCorridorS3R2-v0")
SEEDS = list(range(3_000_000, 3_000_008))


def candidate(base: HarnessSpec, *transforms: dict, finding: str = "timeout") -> Candidate:
    return Candidate(
        spec=base.extended(*transforms), added=list(transforms), finding=finding, finding_stats={}, rationale="test", origin="catalog"
    )


@pytest.fixture()
def corridor_validator(tmp_path):
    env = CORRIDOR.build()
    return Validator(
        RandomPolicy(env.action_space, seed=0),
        CORRIDOR,
        tmp_path / "v",
        ValidationConfig(backend="serial", min_rollouts=30, max_rollouts=90),
    )


def test_the_reference_planner_does_not_know_key_corridor(corridor_validator):
    assert corridor_validator.base_reference_rate(SEEDS) == 0.0


def test_a_search_with_the_envs_own_step_proves_key_corridor_levels_winnable(corridor_validator):
    moved = candidate(CORRIDOR, {"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 3}})
    gate = corridor_validator.check("solvability", moved, SEEDS[:4], reference_rate=0.0)
    assert gate is not None and gate.passed and gate.statistic["method"] == "search"
    assert gate.statistic["solvable"] >= 2 and gate.statistic["unsolvable"] == 0


def test_a_level_the_search_proves_lost_is_rejected():
    env = HarnessSpec(env_id="MiniGrid-Empty-5x5-v0").build()
    env.reset(seed=0)
    raw = env.unwrapped
    from minigrid.core.world_object import Wall

    assert _search(raw, 100, 10_000) is True
    raw.grid.set(2, 3, Wall())  # the goal at (3, 3) walled off from both sides
    raw.grid.set(3, 2, Wall())
    assert _search(raw, 100, 10_000) is False
    env.close()


def test_the_search_respects_the_step_limit_and_gives_up_undecided():
    assert search_level(HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0", env_kwargs={"max_steps": 3}), 0) is False
    assert search_level(HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0"), 0, max_states=5) is None


def test_rules_change_the_game_so_the_search_does_not_answer_for_them():
    assert searchable(CORRIDOR) and not searchable(CORRIDOR.extended({"name": "BlockAction", "params": {"actions": [3]}}))
    assert not searchable(HarnessSpec(env_id="FrozenLake-v1"))


def test_with_no_proof_the_agents_own_verified_success_decides_and_none_fails_closed(corridor_validator, tmp_path):
    blocked = candidate(CORRIDOR, {"name": "ActionSlip", "params": {"p": 0.1}})  # a rule: no search; the planner knows nothing
    assert corridor_validator.check("solvability", blocked, SEEDS, reference_rate=0.0) is None
    result = corridor_validator.validate(blocked, SEEDS)
    gate = next(g for g in result.gates if g.gate == "solvability")
    assert not result.passed and not gate.passed and gate.statistic["method"] == "agent"
    assert gate.statistic["agent_successes"] == 0 and "fail closed" in gate.detail
    assert [g.gate for g in result.gates][:3] == ["verifier_integrity", "solvability", "no_shortcut"]
    won = rollout("MiniGrid-DoorKey-5x5-v0", "reference", seeds=[0, 1], backend="serial", out=tmp_path / "won")
    assert corridor_validator.check("solvable_by_agent", blocked, [], store=TrajectoryStore(won.path), solvability_undecided={}).passed


@pytest.mark.parametrize(
    "env_id",
    ["MiniGrid-DoorKey-8x8-v0", "MiniGrid-MultiRoom-N4-S5-v0", "MiniGrid-ObstructedMaze-1Dl-v0", "MiniGrid-Unlock-v0", CORRIDOR.env_id],
)
def test_the_searchs_solution_wins_when_played_on_a_fresh_env_and_the_search_leaves_the_level_as_it_was(env_id):
    from envharness.adapters.minigrid_search import solve

    spec = HarnessSpec(env_id=env_id)
    env, fresh = spec.build(), spec.build()
    for seed in (0, 1):
        env.reset(seed=seed)
        raw = env.unwrapped
        before = (raw.grid.encode().tobytes(), tuple(raw.agent_pos), raw.agent_dir, raw.step_count, raw.carrying)
        found, path = solve(raw, env.adapter.time_limit())
        assert (raw.grid.encode().tobytes(), tuple(raw.agent_pos), raw.agent_dir, raw.step_count, raw.carrying) == before
        assert found is True and 0 < len(path) <= env.adapter.time_limit()
        fresh.reset(seed=seed)
        for action in path:
            *_, terminated, truncated, info = fresh.step(action)
        assert info["verdict"].success, (env_id, seed)
    env.close()
    fresh.close()
