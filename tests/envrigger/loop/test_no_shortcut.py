"""The no-shortcut gate: a reshaped level must not be winnable around a subgoal every solution of the original level passes.

DoorKey's subgoals are the key and the locked door. Removing interior walls on a 6x6 level
usually opens the wall that holds the door, so the goal is reached without either: that
reshaping (`RemoveWalls(count=2)`, admitted on 9 of 10 seeds before this gate) is refused.
"""

from __future__ import annotations

import numpy as np
import pytest

from envharness import HarnessSpec
from envrigger.loop.propose import Candidate
from envrigger.loop.solvability import bypassed, subgoals
from envrigger.loop.validate import ValidationConfig, Validator
from envrigger.policies import RandomPolicy

DOORKEY = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")
SEEDS = list(range(3_000_000, 3_000_008))


def candidate(base: HarnessSpec, *transforms: dict, finding: str = "timeout") -> Candidate:
    return Candidate(
        spec=base.extended(*transforms), added=list(transforms), finding=finding, finding_stats={}, rationale="test", origin="catalog"
    )


@pytest.fixture()
def validator(tmp_path):
    env = DOORKEY.build()
    return Validator(
        RandomPolicy(env.action_space, seed=0),
        DOORKEY,
        tmp_path / "v",
        ValidationConfig(backend="serial", min_rollouts=30, max_rollouts=90),
    )


def test_every_doorkey_solution_passes_the_key_and_the_locked_door():
    for seed in SEEDS[:4]:
        goals = subgoals(DOORKEY, seed)
        assert goals is not None and [g[0] for g in goals] == ["carrying", "carrying_any", "door_open", "door_open_any"]
        assert goals[0][1:] == ("key", "yellow") and goals[1][1:] == ("key", None)  # that key, and any key; that door, and any


def test_a_level_with_no_object_on_the_way_has_no_subgoals():
    assert subgoals(HarnessSpec(env_id="MiniGrid-Empty-Random-6x6-v0"), 0) == []


def test_removing_the_wall_that_holds_the_locked_door_is_refused_as_a_shortcut(validator):
    opened = candidate(DOORKEY, {"name": "RemoveWalls", "params": {"count": 2}})
    gate = validator.check("no_shortcut", opened, SEEDS)
    assert not gate.passed and gate.statistic["shortcut_levels"] >= 1 and "shortcut" in gate.detail
    result = validator.validate(opened, SEEDS * 10)
    assert not result.passed
    assert [g.gate for g in result.gates] == ["verifier_integrity", "solvability", "no_shortcut"]


def test_a_reshaping_that_leaves_the_task_whole_passes(validator):
    lava = candidate(DOORKEY, {"name": "AddLava", "params": {"count": 1}})
    gate = validator.check("no_shortcut", lava, SEEDS)
    assert gate.passed and gate.statistic["levels_with_subgoals"] == len(SEEDS) and gate.statistic["shortcut_levels"] == 0


def test_a_start_along_the_levels_own_solution_keeps_every_subgoal_and_passes(validator):
    along = candidate(DOORKEY, {"name": "WalkthroughStart", "params": {"min_share": 0.5, "max_share": 0.9}})
    gate = validator.check("no_shortcut", along, SEEDS)
    assert gate.passed and gate.statistic["levels_with_subgoals"] == len(SEEDS) and gate.statistic["shortcut_levels"] == 0
    env = along.spec.build()
    base = DOORKEY.build()
    for seed in SEEDS[:4]:
        _, info = env.reset(seed=seed)
        _, original = base.reset(seed=seed)
        assert info["level_id"] != original["level_id"]  # a start along the solution is another level, never the original's
        assert 0 < info["level"]["goal_distance"] < 100 and env.unwrapped.step_count == 0  # the agent's clock starts here
    env.close()
    base.close()


def test_a_start_past_a_subgoal_keeps_it_and_a_start_beside_it_does_not():
    goals = subgoals(DOORKEY, SEEDS[0])
    assert goals is not None
    env = DOORKEY.build()
    env.reset(seed=SEEDS[0])
    raw = env.unwrapped
    key = next(c for c in raw.grid.grid if c is not None and c.type == "key")
    # As if the agent had picked the key up: the key's subgoal already holds, the door's still has to be opened.
    raw.grid.set(*key.cur_pos, None)
    raw.carrying = key
    from envrigger.loop import solvability

    door = next(g for g in goals if g[0] == "door_open")
    assert solvability._holds(raw, goals[0]) and not solvability._holds(raw, door)
    env.close()
    assert bypassed(DOORKEY, SEEDS[0], goals) == []


def test_where_no_search_answers_the_gate_says_so_and_lets_the_other_gates_decide(tmp_path):
    lake = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False})
    env = lake.build()
    frozen = Validator(
        RandomPolicy(env.action_space, seed=0),
        lake,
        tmp_path / "lake",
        ValidationConfig(backend="serial", min_rollouts=30, max_rollouts=90),
    )
    env.close()
    gate = frozen.check("no_shortcut", candidate(lake, {"name": "FrozenLakeMap", "params": {"add_holes": 1}}), SEEDS)
    assert gate.passed and gate.statistic["method"] == "none" and "not checked" in gate.detail


def test_rules_in_the_stack_do_not_switch_the_search_off(validator):
    slip = candidate(DOORKEY, {"name": "ActionSlip", "params": {"p": 0.1}})
    assert validator.check("no_shortcut", slip, SEEDS).statistic["method"] == "search"  # the state part (none) is searched
    both = candidate(DOORKEY, {"name": "RemoveWalls", "params": {"count": 2}}, {"name": "ActionSlip", "params": {"p": 0.1}})
    assert not validator.check("no_shortcut", both, SEEDS).passed


def test_the_search_behind_a_start_along_the_solution_is_charged_as_interaction():
    from envrigger.loop.levels import Seeds
    from envrigger.loop.mixture import MixtureEnv
    from envrigger.loop.samplers import Uniform

    along = DOORKEY.extended({"name": "WalkthroughStart", "params": {"min_share": 0.75, "max_share": 0.95}})
    env = MixtureEnv([DOORKEY, along], Uniform(2, np.random.default_rng(0)), Seeds(DOORKEY, start=4_000_000))
    reshaped = 0
    for _ in range(6):
        _, info = env.reset()
        reshaped += info["mixture"]["index"] == 1
    assert reshaped and env.search_steps > 100 * reshaped  # a breadth-first search costs far more than the prefix it finds
    env.close()


def test_the_searches_inside_validation_rollouts_are_charged_alike_on_every_backend(tmp_path):
    # Every rollout on a start along the level's solution searches at reset: validation is charged
    # those env steps beside the agent's, the same wherever the rollouts ran.
    along = candidate(DOORKEY, {"name": "WalkthroughStart", "params": {"min_share": 0.75, "max_share": 0.95}})
    env = DOORKEY.build()
    charged = {}
    for where in ("serial", "process"):
        validator = Validator(RandomPolicy(env.action_space, seed=0), DOORKEY, tmp_path / where, ValidationConfig(backend=where, workers=2))
        store = validator.run_agent(along.spec, SEEDS, "rollouts")
        episodes = store.episodes_table(["length", "search_steps"])
        played, searched = sum(episodes.column("length").to_pylist()), sum(episodes.column("search_steps").to_pylist())
        assert searched > 100 * len(SEEDS) and validator.env_steps == played + searched
        charged[where] = validator.env_steps
    env.close()
    assert charged["process"] == charged["serial"]
