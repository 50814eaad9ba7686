"""Attacks on "what success means comes from the registration" through time limits (issue 27, classes 1 and 8b).

Root cause: the step limit success is judged within could be moved by data. CliffWalking's
registration has no limit, and the 200-step limit envharness gives it disappeared once
``env_kwargs`` named any ``max_episode_steps`` (directly or in a ``Chain`` segment); BabyAI,
which sets its limit per level at reset, was judged against the seed-0 level's limit for
every level once ``max_steps`` was passed; a looser MiniGrid ``max_steps`` was quietly cut
to the default (the caller asked for 50 steps and got 30); and an ``EnvSpec`` edited under
an id that is not registered skipped the registration look-up, so its own 5-step limit was
taken as CartPole's survival target. The rule now, for every family: the limit success is
judged within is the registration's (per level where the family sets it per level, or the
limit envharness gives a family whose registration has none); a caller's limit at or below
it is honoured (and named in the level id); one above it is refused in one line; and a
family env whose spec is not its id's registration is refused.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.envs.registration import EnvSpec

import envharness
from envharness import HarnessSpec, SpecError
from envharness.transforms import Chain


def play(env, action, steps=10_000):
    """Play ``action`` until the episode ends: (steps taken, truncated, verdict)."""
    for t in range(1, steps + 1):
        *_, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return t, truncated, info["verdict"]
    raise AssertionError("the episode did not end")


# -- a limit the registration does not give -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env_id", "kwargs", "limit"),
    [
        ("CliffWalking-v1", {"max_episode_steps": 1000}, "200"),  # no registered limit: envharness gives 200
        ("FrozenLake-v1", {"max_episode_steps": 101}, "100"),
        ("Taxi-v4", {"max_episode_steps": 5000}, "200"),
        ("CartPole-v1", {"max_episode_steps": 501}, "500"),
        ("MiniGrid-Empty-5x5-v0", {"max_steps": 101}, "100"),  # MiniGrid's own horizon argument
        ("MiniGrid-GoToDoor-5x5-v0", {"max_steps": 10**6}, None),
    ],
)
def test_a_looser_limit_than_the_registration_is_refused_in_one_line(env_id, kwargs, limit):
    with pytest.raises(SpecError) as refused:
        envharness.wrap(env_id, **kwargs)
    message = str(refused.value)
    name = next(iter(kwargs))
    assert "\n" not in message and f"env_kwargs.{name}" in message and "at most" in message
    if limit is not None:
        assert f"at most {limit}" in message


def test_the_same_loosening_from_spec_json_and_a_chain_segment_is_refused():
    with pytest.raises(SpecError, match=r"env_kwargs.max_episode_steps.*at most 200"):
        HarnessSpec.from_json('{"env_id": "CliffWalking-v1", "env_kwargs": {"max_episode_steps": 1000}}').build()
    chain = Chain(env_id="CliffWalking-v1", env_kwargs={"max_episode_steps": 900})
    with pytest.raises(SpecError, match=r"max_episode_steps.*at most 200"):
        envharness.wrap("CliffWalking-v1", chain)


@pytest.mark.parametrize(
    ("env_id", "kwargs", "action", "horizon"),
    [
        ("CliffWalking-v1", {"max_episode_steps": 40}, 0, 40),
        ("FrozenLake-v1", {"max_episode_steps": 7, "is_slippery": False}, 0, 7),
        ("MiniGrid-Empty-5x5-v0", {"max_steps": 50}, 0, 50),  # MiniGrid's test_max_steps_argument, within the default
        ("MiniGrid-GoToDoor-5x5-v0", {"max_steps": 12}, 0, 12),
    ],
)
def test_a_tighter_limit_is_the_horizon_exactly_and_names_another_level(env_id, kwargs, action, horizon):
    env, plain = envharness.wrap(env_id, **kwargs), envharness.wrap(env_id, **{k: v for k, v in kwargs.items() if k == "is_slippery"})
    _, info = env.reset(seed=0)
    assert info["level_id"] != plain.reset(seed=0)[1]["level_id"]
    steps, truncated, verdict = play(env, action)
    assert (steps, truncated, verdict.success, verdict.reason) == (horizon, True, False, "timeout")


def test_cartpole_under_a_tighter_limit_never_counts_as_balanced():
    env = envharness.wrap("CartPole-v1", max_episode_steps=20)
    env.reset(seed=0)
    raw = env.unwrapped
    for t in range(1, 30):
        raw.state[2] = raw.state[3] = 0.0  # the oracle's pole never falls: only the limit ends the episode
        *_, terminated, truncated, info = env.step(t % 2)
        if terminated or truncated:
            break
    assert (t, truncated, info["verdict"].success) == (20, True, False)


# -- BabyAI: the limit is set per level ---------------------------------------------------------------------------
def _own_limits(env_id: str, seeds: range) -> dict[int, int]:
    """The oracle: the step limit a plain ``gym.make`` of the registered id gives each level."""
    env = gym.make(env_id)
    out = {}
    for seed in seeds:
        env.reset(seed=seed)
        out[seed] = int(env.unwrapped.max_steps)
    return out


def test_babyai_with_a_fixed_max_steps_is_judged_per_level():
    env_id, seeds = "BabyAI-Synth-v0", range(12)
    own = _own_limits(env_id, seeds)
    assert len(set(own.values())) > 1  # levels with different limits, or the test proves nothing
    fixed = sorted(set(own.values()))[0] + 1  # above the short levels' limit, within the long ones'
    env = envharness.wrap(env_id, max_steps=fixed)
    for seed in seeds:
        if own[seed] < fixed:
            with pytest.raises(SpecError, match=rf"env_kwargs.max_steps: {fixed} is above the {own[seed]} steps"):
                env.reset(seed=seed)
            continue
        env.reset(seed=seed)
        assert env.adapter.time_limit() == fixed
        steps, truncated, verdict = play(env, env.unwrapped.actions.left)
        assert (steps, truncated, verdict.reason) == (fixed, True, "timeout")


def test_babyai_without_max_steps_keeps_each_levels_own_limit():
    env_id, seeds = "BabyAI-Synth-v0", range(6)
    own = _own_limits(env_id, seeds)
    env = envharness.wrap(env_id)
    for seed in seeds:
        env.reset(seed=seed)
        assert env.adapter.time_limit() == own[seed]


# -- specs that are not their id's registration -------------------------------------------------------------------
def test_an_edited_envspec_under_an_unregistered_id_is_refused():
    edited = EnvSpec(id="CartPole-edited-v1", entry_point=gym.registry["CartPole-v1"].entry_point, max_episode_steps=5)
    with pytest.raises(SpecError, match=r"CartPole-edited-v1.*not registered") as refused:
        envharness.wrap(gym.make(edited))
    assert "\n" not in str(refused.value)


def test_an_edited_envspec_under_a_registered_id_with_another_entry_point_is_refused():
    from minigrid.envs import EmptyEnv

    edited = EnvSpec(id="MiniGrid-DoorKey-5x5-v0", entry_point=EmptyEnv, kwargs={"size": 5})
    with pytest.raises(SpecError, match=r"MiniGrid-DoorKey-5x5-v0.*not its registration"):
        envharness.wrap(gym.make(edited))


def test_an_env_the_user_registered_is_judged_at_its_own_registration():
    gym.register("envharness-test/ShortCartPole-v0", entry_point=gym.registry["CartPole-v1"].entry_point, max_episode_steps=20)
    try:
        env = envharness.wrap("envharness-test/ShortCartPole-v0")
        env.reset(seed=0)
        raw = env.unwrapped
        for t in range(1, 30):
            raw.state[2] = raw.state[3] = 0.0
            *_, terminated, truncated, info = env.step(t % 2)
            if terminated or truncated:
                break
        assert (t, info["verdict"].reason) == (20, "balanced to the time limit")
    finally:
        del gym.registry["envharness-test/ShortCartPole-v0"]


def test_a_generic_env_under_an_unregistered_spec_still_wraps():
    # The generic adapter judges by the env's own signal, which no registration defines.
    edited = EnvSpec(id="Pendulum-edited-v1", entry_point=gym.registry["Pendulum-v1"].entry_point, max_episode_steps=5)
    env = envharness.wrap(gym.make(edited))
    env.reset(seed=0)
    assert play(env, env.action_space.sample() * 0)[:2] == (5, True)
