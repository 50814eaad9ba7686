"""Attacks on "no level starts solved", in MiniGrid's families without a goal tile (issue 27, classes 2 and 8a).

Root cause: the start check knew goal tiles and BabyAI missions, so GoToDoor, GoToObject
and the other goal-less families could start where ``done``, which does nothing, already
succeeds after a state transform. The rule now: in every MiniGrid family without a goal
tile, the env's own ``step`` is asked, on its live state with rendering off and then
undone, whether ``done`` would succeed; such a *reshaped* level is refused at reset. An
original level is what its env makes it (GoToDoor-5x5 draws one that ``done`` wins at seed
3), so a plain wrap plays it as the env does (issue 43: MiniGrid's own tests reset them).
The check must leave no trace (the episode plays as the plain env's does) and must work on
any env a user can make, rendering windows included.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

import envharness
from envharness import TransformError
from envharness.transforms import MoveAgent, ReplayPrefix

GOALLESS = [
    "MiniGrid-GoToDoor-5x5-v0",
    "MiniGrid-GoToObject-6x6-N2-v0",
    "MiniGrid-Fetch-5x5-N2-v0",
    "MiniGrid-PutNear-6x6-N2-v0",
    "MiniGrid-MemoryS7-v0",
    "BabyAI-GoToRedBallNoDists-v0",
    "BabyAI-GoToLocal-v0",
]
SEEDS = range(40)


def first_done(env_id: str, seed: int) -> bool:
    """The oracle: does ``done`` as the first action succeed in a plain ``gym.make`` of the registered id?"""
    env = gym.make(env_id)
    env.reset(seed=seed)
    _, reward, terminated, _, _ = env.step(env.unwrapped.actions.done)
    return bool(terminated) and reward > 0


@pytest.mark.parametrize("env_id", GOALLESS)
@pytest.mark.parametrize("stack", ["MoveAgent", "ReplayPrefix"])
def test_no_accepted_reshaped_level_is_won_by_a_first_done(env_id, stack):
    transform = MoveAgent(min_dist=1, max_dist=3) if stack == "MoveAgent" else ReplayPrefix(actions=[0])
    env = envharness.wrap(env_id, transform)
    done = env.unwrapped.actions.done
    for seed in SEEDS:
        try:
            env.reset(seed=seed)
        except TransformError as refused:
            assert "solved before the agent acts" in str(refused) or stack == "MoveAgent"
            continue
        assert not env.step(done)[4]["verdict"].success, (env_id, stack, seed)


@pytest.mark.parametrize("env_id", GOALLESS)
def test_an_original_level_plays_as_its_env_makes_it_even_when_done_wins(env_id):
    env = envharness.wrap(env_id)
    done = env.unwrapped.actions.done
    for seed in SEEDS[:20]:
        env.reset(seed=seed)
        assert env.step(done)[4]["verdict"].success == first_done(env_id, seed), (env_id, seed)


def test_the_families_really_start_solved_at_some_seeds():
    # Without these, the tests above would prove nothing about the check.
    assert [s for s in SEEDS if first_done("MiniGrid-GoToDoor-5x5-v0", s)][:3] == [3, 4, 6]
    assert any(first_done("MiniGrid-GoToObject-6x6-N2-v0", s) for s in SEEDS)
    for seed in (3, 4, 6):
        envharness.wrap("MiniGrid-GoToDoor-5x5-v0").reset(seed=seed)  # the original level, as it is
        with pytest.raises(TransformError, match="ReplayPrefix: .*`done`, which does nothing, already completes the mission"):
            envharness.wrap("MiniGrid-GoToDoor-5x5-v0", ReplayPrefix(actions=[0])).reset(seed=seed)


@pytest.mark.parametrize("env_id", GOALLESS)
def test_the_check_leaves_no_trace_the_episode_plays_as_the_plain_env(env_id):
    # A one-turn prefix makes the check run; the plain env turns once itself, then both play alike.
    rng = np.random.default_rng(7)
    for seed in SEEDS[:12]:
        plain, wrapped = gym.make(env_id), envharness.wrap(env_id, ReplayPrefix(actions=[0]))
        plain.reset(seed=seed)
        _, _, ended, _, _ = plain.step(0)
        try:
            wrapped.reset(seed=seed)
        except TransformError:
            continue
        assert not ended
        for action in rng.integers(plain.action_space.n, size=30):
            a = plain.step(int(action))
            b = wrapped.step(int(action))
            if a[3]:
                break  # the plain env's clock holds the turn, so it runs out one step sooner
            # the clock restarts after setup, so the prefix's step is not in the wrapped score
            assert np.array_equal(a[0]["image"], b[0]["image"]) and a[2:4] == b[2:4] and (a[1] > 0) == (b[1] > 0), (env_id, seed)
            assert b[4]["verdict"].success == (a[2] and a[1] > 0)
            if a[2] or a[3]:
                break


def test_a_babyai_env_with_a_render_window_resets_and_plays(monkeypatch):
    monkeypatch.setitem(os.environ, "SDL_VIDEODRIVER", "dummy")  # a window, on no screen
    env = envharness.wrap("BabyAI-GoToRedBallNoDists-v0", render_mode="human")
    for seed in range(3):
        env.reset(seed=seed)  # each reset renders, so the env holds a pygame window and clock
        env.step(0)
    assert env.unwrapped.clock is not None
    env.close()
