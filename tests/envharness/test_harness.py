"""The pipeline: state at reset, rules around the base step, observations last."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envharness
from envharness.transforms import (
    ActionCost,
    BlockAction,
    DropField,
    FrozenLakeMap,
    MoveGoal,
    ObservationNoise,
    StepBudget,
    TextHint,
)
from envharness.verifier import Verdict


class CountingEnv(gym.Wrapper):
    """Counts base steps, to prove what did or did not reach the base env."""

    def __init__(self, env):
        super().__init__(env)
        self.base_steps = 0

    def step(self, action):
        self.base_steps += 1
        return super().step(action)


def test_wrap_accepts_an_id_or_an_instance():
    by_id = envharness.wrap("CartPole-v1")
    by_instance = envharness.wrap(gym.make("CartPole-v1"))
    assert isinstance(by_id, envharness.Harness) and isinstance(by_id, gym.Wrapper)
    assert by_id.reset(seed=3)[0].tolist() == by_instance.reset(seed=3)[0].tolist()


def test_blocked_action_does_not_step_base_env():
    base = CountingEnv(gym.make("FrozenLake-v1", is_slippery=False))
    env = envharness.wrap(base, BlockAction(actions=[1], reason="down is closed"))
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(1)
    assert base.base_steps == 0
    assert (obs, reward, terminated, truncated) == (0, 0.0, False, False)
    assert info["blocked"] == "down is closed"
    env.step(2)
    assert base.base_steps == 1


def test_blocked_steps_still_end_at_the_time_limit():
    env = envharness.wrap("FrozenLake-v1", BlockAction(actions=[0, 1, 2, 3]), max_episode_steps=5)
    env.reset(seed=0)
    ends = [env.step(0)[3] for _ in range(5)]
    assert ends == [False] * 4 + [True]


def test_every_step_publishes_a_frozen_verdict():
    env = envharness.wrap("FrozenLake-v1", is_slippery=False)
    _, info = env.reset(seed=0)
    assert info["verdict"] == Verdict(False, 0.0, "in progress")
    for action in (1, 1, 2, 2, 1, 2):
        *_, terminated, truncated, info = env.step(action)
    assert terminated and info["verdict"] == Verdict(True, 1.0, "reached goal")
    with pytest.raises(AttributeError):
        info["verdict"].success = False


def test_falling_in_a_hole_is_a_failure_with_its_cause():
    env = envharness.wrap("FrozenLake-v1", is_slippery=False)
    env.reset(seed=0)
    env.step(2)
    *_, terminated, _, info = env.step(1)
    assert terminated and info["verdict"] == Verdict(False, 0.0, "hole")


def test_observation_space_follows_the_observation_transforms():
    env = envharness.wrap("MiniGrid-Empty-5x5-v0", DropField(field="direction"), TextHint(text="go right"))
    assert set(env.observation_space.spaces) == {"image", "mission"}
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert obs["mission"].endswith("Hint: go right")


def test_state_transforms_apply_from_the_original_level_each_reset():
    env = envharness.wrap("FrozenLake-v1", FrozenLakeMap(add_holes=2))
    holes = [env.reset(seed=s)[1]["level"]["n_holes"] for s in range(5)]
    assert holes == [6.0] * 5


def test_level_features_are_published_at_reset():
    _, info = envharness.wrap("MiniGrid-DoorKey-8x8-v0", MoveGoal(min_dist=4, max_dist=4)).reset(seed=1)
    assert info["level"]["width"] == 8.0
    assert info["level"]["goal_distance"] == 4.0


def test_shaped_reward_reaches_the_agent_but_not_the_verdict():
    plain = envharness.wrap("FrozenLake-v1", is_slippery=False)
    shaped = envharness.wrap("FrozenLake-v1", ActionCost(cost=0.5), is_slippery=False)
    for env in (plain, shaped):
        env.reset(seed=0)
    path = (1, 1, 2, 2, 1, 2)
    plain_steps = [plain.step(a) for a in path]
    shaped_steps = [shaped.step(a) for a in path]
    assert [s[1] - 0.5 for s in plain_steps] == [s[1] for s in shaped_steps]
    assert [s[4]["verdict"] for s in plain_steps] == [s[4]["verdict"] for s in shaped_steps]


def test_rule_ending_is_a_failure_naming_the_rule():
    env = envharness.wrap("CartPole-v1", StepBudget(max_steps=4))
    env.reset(seed=0)
    *_, truncated, info = env.step(0)
    for _ in range(3):
        *_, truncated, info = env.step(1)
    assert truncated and info["verdict"] == Verdict(False, 0.0, "timeout")


def _balance(env, steps):
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        action = int(obs[2] + 0.5 * obs[3] + 0.01 * obs[0] + 0.1 * obs[1] > 0)
        obs, _, terminated, truncated, info = env.step(action)
    return terminated, truncated, info["verdict"]


def test_cartpole_success_means_surviving_the_registered_time_limit():
    terminated, truncated, verdict = _balance(envharness.wrap("CartPole-v1"), 500)
    assert truncated and not terminated
    assert verdict.success and verdict.reason == "balanced to the time limit"
    # A shorter limit from env_kwargs ends the episode sooner but is not the task: 30 steps are not 500.
    terminated, truncated, verdict = _balance(envharness.wrap("CartPole-v1", max_episode_steps=30), 30)
    assert truncated and not terminated and verdict.reason == "timeout" and not verdict.success


def test_observation_noise_is_seeded_by_reset():
    env = envharness.wrap("CartPole-v1", ObservationNoise(std=0.1))
    first = env.reset(seed=5)[0]
    again = env.reset(seed=5)[0]
    other = env.reset(seed=6)[0]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_an_agent_that_only_tries_blocked_actions_still_times_out_in_minigrid():
    env = envharness.wrap("MiniGrid-Empty-5x5-v0", BlockAction(actions=[0, 1, 2, 3, 4, 5, 6]))
    env.reset(seed=0)
    limit = env.unwrapped.max_steps
    for t in range(1, limit + 1):
        *_, truncated, info = env.step(t % 7)
        if truncated:
            break
    assert t == limit and info["verdict"].reason == "timeout"


def test_the_plain_path_steps_beneath_gym_makes_checks_and_keeps_its_time_limit_exactly():
    """Without transforms the harness steps the env under TimeLimit/OrderEnforcing/PassiveEnvChecker itself."""
    import gymnasium as gym
    import numpy as np

    base, harness = gym.make("CartPole-v1", max_episode_steps=30), envharness.wrap("CartPole-v1", max_episode_steps=30)
    for seed in range(3):
        a, b = base.reset(seed=seed)[0], harness.reset(seed=seed)[0]
        assert np.array_equal(a, b)
        for t in range(40):
            got, want = harness.step(t % 2 if seed else 1 - t % 3 // 2), base.step(t % 2 if seed else 1 - t % 3 // 2)
            assert np.array_equal(got[0], want[0]) and got[1:4] == want[1:4]
            assert harness.env._elapsed_steps == base._elapsed_steps  # the time limit's own count is kept
            if got[2] or got[3]:
                assert got[4]["verdict"].reason in ("pole fell", "cart out of bounds", "timeout")
                break
    assert harness._direct is not None and harness._direct[0] is harness.unwrapped  # it did take the direct route

    class Counting(gym.Wrapper):
        steps = 0

        def step(self, action):
            Counting.steps += 1
            return super().step(action)

    mine = envharness.Harness(Counting(gym.make("CartPole-v1")))
    mine.reset(seed=0)
    for _ in range(5):
        mine.step(0)
    assert Counting.steps == 5  # a wrapper of the user's is never stepped around
