"""Attacks on "a level id names how the episode starts" (issue 27, class 3).

Root cause: a family whose level id is not the whole start kept the plain env's id for
starts the plain env never gives. Classic control's id is its physics (seeds vary only
the initial state, within the base env's own small draw), so ``InitialStateNoise`` at the
top of its bounds, or a ``ReplayPrefix`` that swings the system somewhere else first,
published the plain env's id (some MountainCar starts drawn that way win in one step);
a prefix that finished part of a BabyAI mission left an id that does not say so. Held-out
sets are checked by level id, so reshaping could reach a "held-out" level. The rule now,
for every family: a start reached by setup steps is named by them, and a state edit that
draws the start from another distribution than the base env's is named by that
distribution; a level id changes whenever the start the agent faces can differ.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envharness
from envharness.transforms import InitialStateNoise, PhysicsParams, ReplayPrefix

CLASSIC = ["CartPole-v1", "MountainCar-v0", "Acrobot-v1"]  # the classic-control adapter (Pendulum is generic: no level id)


def level(env, seed):
    return env.reset(seed=seed)[1]["level_id"]


@pytest.mark.parametrize("env_id", CLASSIC)
def test_a_wider_initial_state_is_another_level_and_the_same_one_across_seeds(env_id):
    plain = envharness.wrap(env_id)
    wide = envharness.wrap(env_id, InitialStateNoise(scale=1.0))
    assert {level(plain, s) for s in range(4)} == {level(plain, 0)}  # seeds vary only the draw
    assert {level(wide, s) for s in range(4)} == {level(wide, 0)}  # the same distribution: one level
    assert level(wide, 0) != level(plain, 0)
    assert level(envharness.wrap(env_id, InitialStateNoise(scale=0.5)), 0) not in (level(wide, 0), level(plain, 0))


def test_mountaincar_starts_that_win_at_once_are_never_the_plain_level():
    wide = envharness.wrap("MountainCar-v0", InitialStateNoise(scale=1.0))
    plain_id = level(envharness.wrap("MountainCar-v0"), 0)
    quick = 0
    for seed in range(60):
        try:
            _, info = wide.reset(seed=seed)
        except envharness.TransformError:
            continue  # refused: the start is already solved
        assert info["level_id"] != plain_id
        quick += wide.step(2)[4]["verdict"].success
    assert quick > 0  # the attack is real: such starts exist and are played
    # The oracle: a plain gym.make never starts within one step of the goal.
    oracle = gym.make("MountainCar-v0")
    for seed in range(60):
        oracle.reset(seed=seed)
        assert not oracle.step(2)[2]


@pytest.mark.parametrize(
    ("env_id", "prefix", "kwargs"),
    [
        ("CartPole-v1", [1, 1, 1, 0], {}),
        ("Acrobot-v1", [2, 2, 2, 2, 2], {}),
        ("FrozenLake-v1", [2, 2], {"is_slippery": False}),
        ("Taxi-v4", [0, 1], {}),
        ("MiniGrid-DoorKey-5x5-v0", [0, 1], {}),  # turn left, turn right: the same cell and heading
        ("BabyAI-GoToSeq-v0", [2, 2], {}),
    ],
)
def test_a_replayed_prefix_always_names_another_level(env_id, prefix, kwargs):
    plain = envharness.wrap(env_id, **kwargs)
    replayed = envharness.wrap(env_id, ReplayPrefix(actions=prefix), **kwargs)
    shorter = envharness.wrap(env_id, ReplayPrefix(actions=prefix[:-1]), **kwargs)
    for seed in range(3):
        ids = {level(plain, seed), level(replayed, seed), level(shorter, seed)}
        assert len(ids) == 3, (env_id, seed)
        assert level(replayed, seed) == level(envharness.wrap(env_id, ReplayPrefix(actions=prefix), **kwargs), seed)


def test_a_babyai_mission_part_done_by_a_prefix_is_not_the_fresh_level():
    # "go to X, then go to Y": a prefix that walks to X does part one. Find such a level by search.
    env_id = "BabyAI-GoToSeqS5R2-v0"
    plain = envharness.wrap(env_id)
    for seed in range(30):
        raw = gym.make(env_id).unwrapped
        raw.reset(seed=seed)
        first = getattr(raw.instrs, "instr_a", None)
        if first is None:
            continue
        for prefix in _short_prefixes(3):
            probe = gym.make(env_id).unwrapped
            probe.reset(seed=seed)
            for action in prefix:
                probe.step(action)
            instrs = probe.instrs
            if getattr(instrs, "a_done", None) == "success" or getattr(instrs, "b_done", None) == "success":
                try:
                    _, info = envharness.wrap(env_id, ReplayPrefix(actions=list(prefix))).reset(seed=seed)
                except envharness.TransformError:
                    continue
                assert info["level_id"] != level(plain, seed)
                return
    pytest.fail("no level within 30 seeds has a part of its mission done in three steps")


def _short_prefixes(length: int):
    from itertools import product

    for n in range(1, length + 1):
        yield from product([0, 1, 2], repeat=n)


def test_physics_and_start_together_name_the_level():
    a = envharness.wrap("CartPole-v1", PhysicsParams(pole_length=1.0), InitialStateNoise(scale=0.2))
    b = envharness.wrap("CartPole-v1", PhysicsParams(pole_length=1.0))
    c = envharness.wrap("CartPole-v1", InitialStateNoise(scale=0.2))
    assert len({level(a, 0), level(b, 0), level(c, 0), level(envharness.wrap("CartPole-v1"), 0)}) == 4


def test_a_reshaped_start_never_matches_a_held_out_original_level():
    # What held-out checks rely on: no catalog start edit on CartPole reproduces the original id.
    original = level(envharness.wrap("CartPole-v1"), 0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        scale = float(rng.uniform(0.0, 1.0))
        prefix = [int(a) for a in rng.integers(0, 2, size=int(rng.integers(1, 6)))]
        for transforms in ([InitialStateNoise(scale=scale)], [ReplayPrefix(actions=prefix)]):
            try:
                assert level(envharness.wrap("CartPole-v1", *transforms), 0) != original
            except envharness.TransformError:
                pass  # a prefix that drops the pole is refused
