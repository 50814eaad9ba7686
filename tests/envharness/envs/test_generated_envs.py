"""The generated-level envs: every seed is a level, the map or the physics is drawn from it, the verifier is the family's."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envharness
import envharness.envs
from envharness.transforms import FrozenLakeMap, MoveAgent, PhysicsParams
from envrigger.policies import reference_policy

LAKE = "envharness/GeneratedFrozenLake-v0"
POLE = "envharness/PhysicsCartPole-v0"


def _play(env, policy, seed):
    obs, info = env.reset(seed=seed)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
        done = terminated or truncated
    return info["verdict"]


@pytest.mark.parametrize("env_id", [LAKE, POLE])
def test_the_unwrapped_env_passes_gymnasiums_checker(env_id):
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


def test_every_seed_draws_its_own_map_and_the_same_seed_the_same_one():
    env = envharness.wrap(LAKE)
    levels = [env.reset(seed=s)[1]["level_id"] for s in range(200)]
    assert len(set(levels)) >= 195
    sizes = set()
    for seed in (5, 17):
        first, info = env.reset(seed=seed)
        desc = env.unwrapped.desc.copy()
        again, info2 = env.reset(seed=seed)
        assert (first == again).all() and (env.unwrapped.desc == desc).all() and info["level_id"] == info2["level_id"]
    for s in range(40):
        env.reset(seed=s)
        sizes.add(env.unwrapped.nrow)
        assert env.unwrapped.desc[0, 0] == b"S" and env.unwrapped.desc[-1, -1] == b"G"
    assert sizes == {5, 6, 7, 8}


def test_the_observation_is_the_map_centred_on_the_agent():
    env = envharness.wrap(LAKE)
    obs, _ = env.reset(seed=1)
    raw = env.unwrapped
    n, centre = raw.nrow, 7
    # From the start tile (0, 0): the map fills the lower-right quadrant, the goal is at (n-1, n-1) from the centre.
    assert obs[centre + n - 1, centre + n - 1, 2] == 1 and obs[..., 2].sum() == 1
    assert obs[centre - 1, centre, 0] == 1 and obs[centre, centre, 0] == 0  # above the start is off the map
    holes = np.argwhere(raw.desc == b"H")
    assert sorted(map(tuple, np.argwhere(obs[..., 1] == 1) - centre)) == sorted(map(tuple, holes))
    obs, *_ = env.step(2)  # right: the map shifts one column left
    assert raw.s == 1  # not slippery: the move always lands
    assert obs[centre + n - 1, centre + n - 2, 2] == 1


def test_the_reference_solver_wins_every_map_and_a_random_walk_rarely_does():
    env = envharness.wrap(LAKE)
    solver = reference_policy(env)
    assert all(_play(env, solver, s).success for s in range(30))
    rng = np.random.default_rng(0)

    class Walk:
        def act(self, obs, info):
            return int(rng.integers(4))

    assert sum(_play(env, Walk(), s).success for s in range(100)) < 15


def test_map_edits_last_one_episode_and_the_verifier_judges_the_edited_map():
    env = envharness.wrap(LAKE, FrozenLakeMap(add_holes=3), MoveAgent(min_dist=1, max_dist=1))
    plain = envharness.wrap(LAKE)
    obs, info = env.reset(seed=2)
    base, _ = plain.reset(seed=2)
    assert info["level"]["n_holes"] == (plain.unwrapped.desc == b"H").sum() + 3
    assert (obs != base).any()  # the observation shows the edited map and the moved agent
    assert info["level_id"] != plain.reset(seed=2)[1]["level_id"]
    # One step from the goal: the reference solver takes it and the verifier calls it a success.
    assert _play(env, reference_policy(env), 2).success


def test_an_edit_does_not_leak_into_the_next_level():
    env = envharness.wrap(LAKE, FrozenLakeMap(add_holes=4))
    plain = envharness.wrap(LAKE)
    for seed in (7, 8):
        env.reset(seed=seed)
        plain.reset(seed=seed)
        edited, original = env.unwrapped.desc, plain.unwrapped.desc
        assert edited.shape == original.shape
        assert ((edited == b"H") & (original != b"H")).sum() == 4 and ((original == b"H") & (edited != b"H")).sum() == 0


def test_physics_is_drawn_per_seed_inside_the_ranges():
    ranges = {"pole_length": (0.2, 0.3), "force": (4.0, 6.0)}
    env = envharness.wrap(POLE, ranges=ranges)
    seen = set()
    for seed in range(50):
        info = env.reset(seed=seed)[1]
        raw = env.unwrapped
        assert 0.2 <= raw.length <= 0.3 and 4.0 <= raw.force_mag <= 6.0
        assert raw.polemass_length == pytest.approx(raw.masspole * raw.length) and raw.total_mass == pytest.approx(
            raw.masspole + raw.masscart
        )
        assert info["level"]["pole_length"] == raw.length
        seen.add(info["level_id"])
    assert len(seen) == 50
    assert env.reset(seed=3)[1]["level_id"] == env.reset(seed=3)[1]["level_id"]


def test_physics_params_override_the_drawn_level_and_the_solver_balances_every_range():
    env = envharness.wrap(POLE, PhysicsParams(pole_length=1.5))
    env.reset(seed=0)
    assert env.unwrapped.length == 1.5
    hard = envharness.wrap(POLE, ranges={"pole_length": (0.15, 0.3), "pole_mass": (0.2, 0.4), "cart_mass": (1.5, 2.5), "force": (4.0, 7.0)})
    solver = reference_policy(hard)
    verdicts = [_play(hard, solver, s) for s in range(5)]
    assert all(v.success and v.reason == "balanced to the time limit" for v in verdicts)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ranges": {"gravty": (1, 2)}}, "no CartPole constant named 'gravty'"),
        ({"ranges": {"force": (5, 1)}}, r"ranges\['force'\]: got \(5, 1\)"),
    ],
)
def test_bad_physics_ranges_are_refused_in_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make(POLE, **kwargs)


@pytest.mark.parametrize("kwargs, match", [({"sizes": [1]}, "sizes: got"), ({"frozen": (0.9, 0.5)}, "frozen: got")])
def test_bad_map_parameters_are_refused_in_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make(LAKE, **kwargs)
