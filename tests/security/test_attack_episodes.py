"""Attacks, categories 6-7: levels solved at reset, and stepping past the end of an episode."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from harness_helpers import unaudited
from hostile import START_ON_GOAL, VICTIM, PlaceOnGoal, make

import envharness
from envharness import EpisodeEndedError, TransformError, VerifierTamperError
from envharness.transforms import (
    Chain,
    MoveAgent,
    ReplayPrefix,
    StateTransform,
    StepBudget,
    TerminateOn,
)

SOLVED_AT_RESET = ["minigrid_agent_to_goal", "acrobot_swing", *START_ON_GOAL]


@pytest.mark.parametrize("edit", SOLVED_AT_RESET)
def test_a_state_transform_that_starts_on_the_goal_is_rejected(edit, monkeypatch):
    env_id, kwargs, _ = make(edit)
    # It edits the env around its StateHandle, which the audit reports ...
    env = envharness.wrap(env_id, PlaceOnGoal(edit=edit), **kwargs)
    VICTIM["env"] = env
    with pytest.raises(VerifierTamperError, match="PlaceOnGoal.apply changed the base env outside its StateHandle"):
        env.reset(seed=0)
    # ... and trusted like the catalog, the level it makes is still refused as solved.
    env = unaudited(envharness.harness.make_base(env_id, **kwargs), [PlaceOnGoal(edit=edit)], monkeypatch)
    VICTIM["env"] = env
    with pytest.raises(TransformError, match="PlaceOnGoal: the level is solved before the agent acts"):
        env.reset(seed=0)
    with pytest.raises(EpisodeEndedError):
        env.step(env.action_space.sample())


def test_a_replayed_prefix_that_reaches_the_goal_is_rejected_too():
    env = envharness.wrap("FrozenLake-v1", ReplayPrefix(actions=[1, 1, 2, 2, 1, 2]), is_slippery=False)
    with pytest.raises(TransformError, match="ReplayPrefix"):
        env.reset(seed=0)
    with pytest.raises(EpisodeEndedError):
        env.step(0)


@pytest.mark.parametrize("env_id", ["MiniGrid-Empty-5x5-v0", "FrozenLake-v1", "CliffWalking-v1", "Taxi-v4"])
def test_the_catalog_never_starts_an_episode_solved(env_id):
    env = envharness.wrap(env_id, MoveAgent(min_dist=1, max_dist=1))
    for seed in range(30):
        assert env.reset(seed=seed)[1]["verdict"].success is False


# -- 7. the end is the end ------------------------------------------------------------------
def _finish(env, actions: list[Any], seed: int = 0):
    env.reset(seed=seed)
    for action in actions:
        out = env.step(action)
        if out[2] or out[3]:
            return out
    raise AssertionError("the episode did not end")


ENDINGS = {
    "lava": (lambda: envharness.wrap("MiniGrid-LavaGapS5-v0"), [2], "lava", 0),
    "hole": (lambda: envharness.wrap("FrozenLake-v1", is_slippery=False), [1, 2, 2, 2, 2], "hole", 0),
    "success": (lambda: envharness.wrap("FrozenLake-v1", is_slippery=False), [1, 1, 2, 2, 1, 2], "reached goal", 0),
    "budget": (lambda: envharness.wrap("CartPole-v1", StepBudget(max_steps=3)), [0, 1, 0, 1], "timeout", 0),
    "rule": (
        lambda: envharness.wrap("FrozenLake-v1", TerminateOn(event="no_progress", patience=1), is_slippery=False),
        [0, 0],
        "ended: no_progress",
        0,
    ),
    "pole": (lambda: envharness.wrap("CartPole-v1"), [1] * 100, "pole fell", 0),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_no_step_after_the_episode_ended(ending):
    build, actions, reason, seed = ENDINGS[ending]
    env = build()
    *_, info = _finish(env, actions, seed)
    assert info["verdict"].reason == reason
    for action in (0, 1, 2):  # the goal is never reachable afterwards
        with pytest.raises(EpisodeEndedError, match="call reset"):
            env.step(action)
    assert env.reset(seed=seed)[1]["verdict"].success is False  # and a reset starts afresh


def test_after_lava_the_goal_cannot_be_reached_by_carrying_on():
    env = envharness.wrap("MiniGrid-LavaGapS5-v0")
    _finish(env, [2])  # straight into the lava
    for action in (1, 2, 2, 1, 2, 2):  # the way round it, to the goal
        with pytest.raises(EpisodeEndedError):
            env.step(action)


class FailsOnSecondReset(StateTransform):
    """A state transform that raises from its second episode on."""

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        VICTIM["resets"] = VICTIM.get("resets", 0) + 1
        if VICTIM["resets"] > 1:
            raise RuntimeError("transform bug")
        return obs


def test_a_failed_reset_does_not_republish_the_last_success():
    VICTIM["resets"] = 0
    env = envharness.wrap("FrozenLake-v1", FailsOnSecondReset(), is_slippery=False)
    *_, info = _finish(env, [1, 1, 2, 2, 1, 2])
    assert info["verdict"].success
    with pytest.raises(RuntimeError, match="transform bug"):
        env.reset(seed=1)
    with pytest.raises(EpisodeEndedError):
        env.step(2)


def test_no_step_before_the_first_reset():
    with pytest.raises(EpisodeEndedError):
        envharness.wrap("CartPole-v1").step(0)


def test_a_failed_chained_segment_is_final():
    env = envharness.wrap("FrozenLake-v1", Chain(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}), is_slippery=False)
    env.reset(seed=0)
    for action in [1, 1, 2, 2, 1, 2, 1]:
        env.step(action)
    *_, terminated, truncated, info = env.step(2)  # into a hole of the second lake
    assert terminated and info["verdict"].reason == "segment 2: hole"
    with pytest.raises(EpisodeEndedError):
        env.step(1)


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_autoreset_never_steps_an_ended_episode(vector_cls):
    envs = vector_cls([lambda: envharness.wrap("FrozenLake-v1", StepBudget(max_steps=4), is_slippery=False)] * 2)
    envs.reset(seed=0)
    for _ in range(40):
        envs.step(np.array([0, 1]))
    envs.close()
