"""Invariants 2 and 4: same spec + seed + actions gives the same trajectory, everywhere."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest
from harness_helpers import fixed_actions, trajectory_digest

import envharness
from envharness import HarnessSpec
from envharness.transforms import ActionSlip, AddWalls, DelayObservation, InitialStateNoise, MoveGoal, ObservationNoise, PhysicsParams

CASES = {
    "minigrid": HarnessSpec(
        env_id="MiniGrid-DoorKey-6x6-v0",
        transforms=[MoveGoal(max_dist=5).to_spec(), AddWalls(count=2).to_spec(), ActionSlip(p=0.2).to_spec()],
    ),
    "frozenlake": HarnessSpec(
        env_id="FrozenLake-v1",
        env_kwargs={"map_name": "8x8"},
        transforms=[MoveGoal(min_dist=3, max_dist=9).to_spec(), DelayObservation(steps=2).to_spec()],
    ),
    "cartpole": HarnessSpec(
        env_id="CartPole-v1",
        transforms=[
            PhysicsParams(pole_length=0.7).to_spec(),
            InitialStateNoise(scale=0.04).to_spec(),
            ObservationNoise(std=0.02).to_spec(),
        ],
    ),
}


def _actions(spec):
    return fixed_actions(int(spec.build().action_space.n), 300, seed=11)


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_seed_and_actions_give_identical_trajectories(case):
    spec = CASES[case]
    actions = _actions(spec)
    assert trajectory_digest(spec.build(), 4, actions) == trajectory_digest(spec.build(), 4, actions)
    assert trajectory_digest(spec.build(), 4, actions) != trajectory_digest(spec.build(), 5, actions)


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_round_trip_and_gym_make_spec_rebuild_the_same_env(case):
    spec = CASES[case]
    actions = _actions(spec)
    original = spec.build()
    expected = trajectory_digest(original, 9, actions)
    assert trajectory_digest(HarnessSpec.from_json(spec.to_json()).build(), 9, actions) == expected
    assert trajectory_digest(gym.make(original.spec), 9, actions) == expected
    assert trajectory_digest(gym.make(gym.make(original.spec).spec), 9, actions) == expected


def test_registered_spec_builds_the_same_env_through_gym_make():
    spec = CASES["frozenlake"]
    envharness.register(spec, id="envharness-test/FrozenLakeMoved-v0")
    actions = _actions(spec)
    assert trajectory_digest(gym.make("envharness-test/FrozenLakeMoved-v0"), 3, actions) == trajectory_digest(spec.build(), 3, actions)


def test_trajectory_is_identical_in_a_fresh_process():
    spec = CASES["minigrid"]
    actions = _actions(spec)
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parents[1])!r})
        from harness_helpers import trajectory_digest
        from envharness import HarnessSpec
        spec = HarnessSpec.from_json({spec.to_json()!r})
        print(trajectory_digest(spec.build(), 21, {actions!r}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == trajectory_digest(spec.build(), 21, actions)


def test_spec_hash_is_stable_and_ignores_formatting():
    spec = CASES["frozenlake"]
    assert HarnessSpec.from_json(spec.to_json(indent=None)).hash() == spec.hash()
    explicit = spec.model_copy(update={"transforms": [*spec.transforms]})
    assert explicit.hash() == spec.hash()
    assert HarnessSpec(env_id="FrozenLake-v1").hash() != spec.hash()


def test_defaults_written_out_hash_like_defaults_left_out():
    short = HarnessSpec(env_id="CartPole-v1", transforms=[{"name": "StepBudget"}])
    full = HarnessSpec(env_id="CartPole-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 100}}])
    assert short.hash() == full.hash()
