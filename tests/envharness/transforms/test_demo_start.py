"""DemoStart: a reverse curriculum from recorded play, on every family that resets deterministically by seed.

The harness's seed picks a recording and the base env is reset with the recording's own seed,
so the start is exactly the state the recording reached; the actions played are setup (the
agent's clock starts after them), the env's own verifier decides success, and the last
action is always left to the agent.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envharness
from envharness.adapters.minigrid_search import solve
from envharness.errors import TransformError
from envharness.transforms import DemoStart, ReplayPrefix
from envharness.transforms.base import StateTransform, register_transform

LAKE_WIN = [2, 2, 1, 1, 1, 2]  # FrozenLake 4x4, not slippery: right, right, down, down, down, right reaches the goal


def test_any_seed_starts_on_the_recordings_level_after_its_share_and_the_verifier_decides():
    env = envharness.wrap(
        "FrozenLake-v1", DemoStart(demos=[{"seed": 0, "actions": LAKE_WIN}], min_share=0.5, max_share=0.5), is_slippery=False
    )
    for seed in (0, 7, 12345):
        obs, info = env.reset(seed=seed)
        assert (obs, info["setup_steps"]) == (6, 3)
    for action in LAKE_WIN[3:]:
        obs, reward, terminated, truncated, info = env.step(action)
    assert terminated and info["verdict"].success and reward == 1.0


def test_the_last_action_is_always_the_agents():
    env = envharness.wrap(
        "FrozenLake-v1", DemoStart(demos=[{"seed": 0, "actions": LAKE_WIN}], min_share=0.95, max_share=0.95), is_slippery=False
    )
    _, info = env.reset(seed=0)
    assert info["setup_steps"] == len(LAKE_WIN) - 1
    _, _, terminated, _, info = env.step(LAKE_WIN[-1])
    assert terminated and info["verdict"].success


def test_the_seed_picks_the_recording_and_the_base_env_is_reset_with_its_seed():
    demos = [{"seed": 11, "actions": [1, 2]}, {"seed": 40, "actions": [2, 1]}]
    env = envharness.wrap("MiniGrid-DoorKey-6x6-v0", DemoStart(demos=demos, min_share=0.0, max_share=0.0))
    plain = envharness.wrap("MiniGrid-DoorKey-6x6-v0")
    levels = {s: plain.reset(seed=s)[1]["level_id"] for s in (11, 40)}
    assert [env.reset(seed=s)[1]["level_id"] for s in range(4)] == [levels[11], levels[40], levels[11], levels[40]]


def test_a_doorkey_success_replayed_near_its_end_is_won_by_the_rest_of_it():
    raw = gym.make("MiniGrid-DoorKey-6x6-v0")
    raw.reset(seed=3)
    found, actions = solve(raw.unwrapped, limit=200)
    assert found and len(actions) > 4
    env = envharness.wrap("MiniGrid-DoorKey-6x6-v0", DemoStart(demos=[{"seed": 3, "actions": actions}], min_share=0.8, max_share=0.8))
    _, info = env.reset(seed=99)
    played = info["setup_steps"]
    assert played == int(0.8 * len(actions))
    original = envharness.wrap("MiniGrid-DoorKey-6x6-v0").reset(seed=3)[1]["level_id"]
    assert info["level_id"] != original  # a start along a recording is never mistaken for the original level
    for action in actions[played:]:
        _, _, terminated, _, info = env.step(action)
    assert terminated and info["verdict"].success


def test_cartpole_starts_in_exactly_the_state_the_recording_reached():
    rng = np.random.default_rng(0)
    actions = [int(a) for a in rng.integers(0, 2, 12)]
    plain = gym.make("CartPole-v1")
    plain.reset(seed=5)
    for action in actions[:6]:
        expected = plain.step(action)[0]
    env = envharness.wrap("CartPole-v1", DemoStart(demos=[{"seed": 5, "actions": actions}], min_share=0.5, max_share=0.5))
    obs, info = env.reset(seed=0)
    assert np.array_equal(obs, expected) and info["setup_steps"] == 6


def test_a_recording_whose_played_share_ends_the_episode_is_refused_at_reset():
    # FrozenLake 4x4: down then right falls into the hole at 5; a share of 0.6 plays those two actions.
    env = envharness.wrap(
        "FrozenLake-v1", DemoStart(demos=[{"seed": 0, "actions": [1, 2, 0, 0]}], min_share=0.6, max_share=0.6), is_slippery=False
    )
    with pytest.raises(TransformError):
        env.reset(seed=0)


def test_actions_outside_the_action_space_are_refused_when_wrapped():
    with pytest.raises(Exception, match=r"DemoStart.demos\[0\].actions\[1\]"):
        envharness.wrap("FrozenLake-v1", DemoStart(demos=[{"seed": 0, "actions": [1, 9]}]), is_slippery=False)


def test_a_custom_transform_whose_level_seed_is_not_a_seed_is_refused():
    @register_transform
    class _BadSeed(StateTransform):
        requires_state_access = False

        def level_seed(self, seed):
            return "not a seed"

        def apply(self, adapter, obs, rng):
            return obs

    try:
        env = envharness.wrap("FrozenLake-v1", _BadSeed(), is_slippery=False)
        with pytest.raises(TransformError, match="level_seed returned 'not a seed'"):
            env.reset(seed=0)
    finally:
        from envharness.transforms.base import TRANSFORMS

        TRANSFORMS.pop("_BadSeed", None)


def test_replay_prefix_is_unchanged_by_the_hook():
    env = envharness.wrap("FrozenLake-v1", ReplayPrefix(actions=[2, 2]), is_slippery=False)
    obs, info = env.reset(seed=0)
    assert (obs, info["setup_steps"]) == (2, 2)
