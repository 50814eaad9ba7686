"""Invariant 1: the verifier is enforced, not trusted. Malicious transforms cannot fake success."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from harness_helpers import unaudited

import envharness
from envharness import EpisodeEndedError, VerifierTamperError
from envharness.transforms import ActionCost, RuleTransform, Step
from envharness.verifier import Verdict

# Malicious transforms reach the live env through this slot, set by each test.
VICTIM: dict[str, Any] = {}


class ForgeVerdict(RuleTransform):
    """Writes a successful verdict into info."""

    def on_transition(self, step: Step, memo: dict) -> None:
        step.info["verdict"] = Verdict(True, 1.0, "forged")


class FakeTermination(RuleTransform):
    """Ends every step with a huge reward, as if the goal were reached."""

    def on_transition(self, step: Step, memo: dict) -> None:
        step.terminated = True
        step.reward = 1000.0


class GoalUnderfoot(RuleTransform):
    """Moves the MiniGrid goal tile in front of the agent right before it steps forward."""

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        from minigrid.core.world_object import Goal

        raw = VICTIM["env"].unwrapped
        raw.grid.set(*raw.front_pos, Goal())
        return raw.actions.forward


class DeskGoal(RuleTransform):
    """Rewrites FrozenLake's map so the agent's next cell reads as the goal."""

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        raw = VICTIM["env"].unwrapped
        raw.desc[:] = b"G"
        return action


def test_transform_writing_info_verdict_cannot_change_it():
    env = envharness.wrap("FrozenLake-v1", ForgeVerdict(), is_slippery=False)
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(2)
    assert info["verdict"] == Verdict(False, 0.0, "in progress")
    assert not terminated


def test_forced_termination_with_big_reward_is_judged_a_failure():
    env = envharness.wrap("MiniGrid-Empty-5x5-v0", FakeTermination())
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(2)
    assert terminated and reward == 1000.0
    assert info["verdict"].success is False
    assert info["verdict"].reason == "ended by a rule"


def test_moving_the_goal_during_a_step_is_caught_and_does_not_make_success(monkeypatch):
    env = envharness.wrap("MiniGrid-Empty-8x8-v0", GoalUnderfoot())
    VICTIM["env"] = env
    env.reset(seed=0)
    with pytest.raises(VerifierTamperError, match="GoalUnderfoot.on_action"):
        env.step(0)
    with pytest.raises(EpisodeEndedError):
        env.step(2)
    # With the audit off, the verdict still judges against the goal as it stood at reset.
    quiet = unaudited(gym.make("MiniGrid-Empty-8x8-v0"), [GoalUnderfoot()], monkeypatch)
    VICTIM["env"] = quiet
    quiet.reset(seed=0)
    _, reward, base_said_done, _, info = quiet.step(0)
    assert base_said_done and reward > 0  # the base env itself was fooled
    assert info["verdict"].success is False
    assert info["verdict"].reason == "mission failed"


def test_rewriting_the_map_mid_episode_is_caught_and_does_not_make_success(monkeypatch):
    env = envharness.wrap("FrozenLake-v1", DeskGoal(), is_slippery=False)
    VICTIM["env"] = env
    env.reset(seed=0)
    with pytest.raises(VerifierTamperError, match="DeskGoal.on_action"):
        env.step(2)
    quiet = unaudited(gym.make("FrozenLake-v1", is_slippery=False), [DeskGoal()], monkeypatch)
    VICTIM["env"] = quiet
    quiet.reset(seed=0)
    assert quiet.step(2)[4]["verdict"].success is False


def test_honest_success_is_still_reported_under_the_same_harness():
    env = envharness.wrap("FrozenLake-v1", ActionCost(cost=3.0), is_slippery=False)
    env.reset(seed=0)
    for action in (1, 1, 2, 2, 1, 2):
        _, reward, terminated, _, info = env.step(action)
    assert terminated and reward == -2.0
    assert info["verdict"] == Verdict(True, 1.0, "reached goal")


def test_shaped_reward_never_changes_the_verdict_over_random_play():
    actions = np.random.default_rng(1).integers(4, size=3000).tolist()

    def verdicts(env):
        out, _ = [], env.reset(seed=7)
        for action in actions:
            *_, terminated, truncated, info = env.step(action)
            out.append(info["verdict"])
            if terminated or truncated:
                env.reset()
        return out

    plain = envharness.wrap("FrozenLake-v1", is_slippery=True)
    shaped = envharness.wrap("FrozenLake-v1", ActionCost(cost=0.3, actions=[0, 3]), is_slippery=True)
    judged = verdicts(plain)
    assert any(v.success for v in judged) and any(v.reason == "hole" for v in judged)
    assert judged == verdicts(shaped)
