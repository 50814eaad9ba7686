"""Invariant 3: wrapped envs are Gymnasium-compliant, picklable and vectorizable."""

from __future__ import annotations

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envharness
from envharness.transforms import (
    ActionCost,
    ActionSlip,
    AddLava,
    BlockAction,
    DelayObservation,
    DropField,
    Flatten,
    FrozenLakeMap,
    ImageOnly,
    InitialStateNoise,
    MaskObservation,
    MoveAgent,
    MoveGoal,
    ObservationNoise,
    PartialView,
    PhysicsParams,
    RemapActions,
    StepBudget,
    TerminateOn,
    TextHint,
)

# One stack per supported family: state, rule and observation transforms together.
STACKS = {
    "FrozenLake-v1": [FrozenLakeMap(add_holes=2), MoveGoal(max_dist=4), ActionSlip(p=0.1), DelayObservation(steps=1)],
    "Taxi-v4": [MoveAgent(min_dist=1, max_dist=3), MoveGoal(min_dist=1, max_dist=8), ActionCost(cost=0.1), StepBudget(max_steps=80)],
    "CliffWalking-v1": [MoveAgent(min_dist=2, max_dist=6), RemapActions(mapping={0: 1, 1: 0}), TerminateOn(event="revisit", patience=20)],
    "CartPole-v1": [
        PhysicsParams(pole_length=0.8, gravity=11.0),
        InitialStateNoise(scale=0.03),
        ObservationNoise(std=0.01),
        MaskObservation(indices=[1]),
    ],
    "MountainCar-v0": [PhysicsParams(force=0.0015), InitialStateNoise(scale=0.05), ObservationNoise(std=0.001)],
    "Acrobot-v1": [PhysicsParams(link_length=1.2), InitialStateNoise(scale=0.05), BlockAction(actions=[1])],
    "MiniGrid-DoorKey-8x8-v0": [
        MoveGoal(max_dist=6),
        AddLava(count=2),
        ActionSlip(p=0.05),
        PartialView(radius=2),
        TextHint(text="keys open doors"),
    ],
    "MiniGrid-LavaGapS5-v0": [MoveAgent(min_dist=1, max_dist=4), StepBudget(max_steps=60), PartialView(radius=1)],
    "MiniGrid-Fetch-5x5-N2-v0": [MoveAgent(), BlockAction(actions=[6], reason="done is disabled")],
    "MiniGrid-Empty-6x6-v0": [MoveGoal(max_dist=3), DropField(field="mission"), Flatten()],
    "MiniGrid-FourRooms-v0": [MoveAgent(min_dist=1, max_dist=5), ActionSlip(p=0.05), ImageOnly()],
    "Pendulum-v1": [ObservationNoise(std=0.01), StepBudget(max_steps=50)],
    "envharness/GeneratedFrozenLake-v0": [
        FrozenLakeMap(add_holes=2),
        MoveAgent(min_dist=1, max_dist=4),
        ActionCost(cost=0.01),
        DelayObservation(steps=1),
    ],
    "envharness/PhysicsCartPole-v0": [PhysicsParams(force=8.0), InitialStateNoise(scale=0.03), MaskObservation(indices=[3])],
}


@pytest.mark.parametrize("env_id", sorted(STACKS))
def test_check_env_passes_for_every_family_with_a_stack(env_id):
    check_env(envharness.wrap(env_id, *STACKS[env_id]), skip_render_check=True)


@pytest.mark.parametrize("env_id", sorted(STACKS))
def test_wrapped_env_round_trips_through_cloudpickle(env_id):
    env = envharness.wrap(env_id, *STACKS[env_id])
    env.reset(seed=2)
    clone = cloudpickle.loads(cloudpickle.dumps(env))
    for action in [env.action_space.sample() for _ in range(5)]:
        a, b = env.step(action), clone.step(action)
        assert a[1:4] == b[1:4]
        assert a[4]["verdict"] == b[4]["verdict"]
        if a[2] or a[3]:
            break


def _make(env_id):
    return lambda: envharness.wrap(env_id, *STACKS[env_id])


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_runs_in_vector_envs(vector_cls):
    envs = vector_cls([_make("FrozenLake-v1") for _ in range(2)])
    try:
        obs, info = envs.reset(seed=[0, 1])
        assert obs.shape == (2,)
        for _ in range(40):
            obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        assert envs.single_observation_space.contains(int(obs[0]))
    finally:
        envs.close()


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_autoreset_reapplies_state_transforms(vector_cls):
    # Every level starts with its goal exactly 2 cells away; after autoreset too.
    make = lambda: envharness.wrap("FrozenLake-v1", MoveGoal(min_dist=2, max_dist=2), is_slippery=False, max_episode_steps=3)
    envs = vector_cls([make])
    try:
        _, info = envs.reset(seed=0)
        distances = [info["level"]["goal_distance"][0]]
        for _ in range(12):
            _, _, terminated, truncated, info = envs.step(np.array([0]))
            if "level" in info and info["_level"][0]:
                distances.append(info["level"]["goal_distance"][0])
        assert len(distances) >= 3
        assert set(distances) == {2.0}
    finally:
        envs.close()
